"""compat env: print what sourcing the oneCCL bindings' setvars.sh would export, plus LD_PRELOAD and the thread
settings (shell_env.py plans them). Side effects: probes the target interpreter.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, UsageError
from ._options import launcher_option, output, output_options, per_node_int, positive_int, target, target_options

if TYPE_CHECKING:
    from ..options import EnvArgs

DESCRIPTION = ("Print what sourcing the oneCCL bindings' setvars.sh would export, plus recommended LD_PRELOAD (only"
               " paths that exist), OMP_NUM_THREADS and CCL_WORKER_COUNT for the ranks per node.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shell", choices=["bash", "zsh", "fish"], default="bash")
    parser.add_argument("--ranks-per-node", type=per_node_int, default=2, metavar="N")
    launcher_option(parser, "env", help="also export what this launcher needs for ccl (torchrun/spawn: CCL_ATL_TRANSPORT=ofi, FI_PROVIDER_PATH, ...)")
    parser.add_argument("--master-addr", metavar="HOST", help="the job's master (node 0; default $MASTER_ADDR): export the interface that reaches "
                        "it for gloo (GLOO_SOCKET_IFNAME), oneCCL (CCL_KVS_IFACE, FI_TCP_IFACE) and --launcher's MPI, and MASTER_ADDR")
    parser.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="hosts in the job (default 1): with N > 1 a master that is "
                        "loopback here is named as the fault it is")
    parser.add_argument("--mpirun", metavar="PATH", help="with --launcher mpirun: the mpirun the job runs, whose MPI decides oneCCL's transport "
                        "(Intel MPI: its MPI transport; Open MPI, MPICH: ofi); default: next to the interpreter, then PATH")
    parser.add_argument("--defaults", action="store_true",
                        help="write the settings (OMP_NUM_THREADS, CCL_WORKER_COUNT, LD_PRELOAD, ...) as defaults that a value already set "
                        "when the file is sourced overrides: for a file written during docker build, so a pod's or docker run -e value wins")
    target_options(parser, python="the interpreter whose bindings to use (default: $COMPAT_PYTHON, else the running one)")
    output_options(parser)


def build(ns: argparse.Namespace) -> EnvArgs:
    from ..options import EnvArgs

    if ns.master_addr is not None:
        from ..hostlist import parse_host

        entry, _problem = parse_host(ns.master_addr)
        if entry is None or "@" in ns.master_addr or entry[1] is not None:
            raise UsageError(f"--master-addr {visible(ns.master_addr[:80])} is not a host name or an address.",
                             "Pass the first host's name or address, e.g. --master-addr node01.")
    if ns.mpirun is not None and ns.launcher != "mpirun":
        raise UsageError("--mpirun goes with --launcher mpirun.", "Add --launcher mpirun, or drop --mpirun.")
    return EnvArgs(output(ns), target(ns).python, ns.shell, ns.ranks_per_node, ns.launcher, ns.defaults, ns.master_addr, ns.nnodes, ns.mpirun)


def run(args: EnvArgs) -> int:
    from ..checks.registry import Context, Options
    from ..environment.snapshot import take_snapshot
    from ..planning import load
    from ..shell import format_env
    from ..shell_env import plan_env

    snapshot = take_snapshot(args.python)
    context = Context(load(args.output.matrix), snapshot, Options(ranks_per_node=args.ranks_per_node))
    plan = plan_env(context, args.ranks_per_node, args.launcher, args.master_addr, args.nnodes, mpirun=args.mpirun)
    if args.output.json:
        from ..console import dump_json
        from ..render.json import env_json

        print(dump_json(env_json(plan, snapshot.executable)))
    else:
        sys.stdout.write(format_env(plan, args.shell, defaults=args.defaults))
    return EXIT_OK
