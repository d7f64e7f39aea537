"""compat launch: plan N ranks on this machine (placement/service.py) and run the launcher with each rank bound to its
cores, or print the plan. Side effects: runs the launcher (its exit code is compat's).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Optional

from ..console import visible
from ..errors import EXIT_OK, UsageError
from ._options import command_words, matrix_option, per_node_int, port_int, positive_int, target, target_options, zero_or_more_int
from ._say import say_error

if TYPE_CHECKING:
    from ..options import LaunchArgs

DESCRIPTION = ("Plan N ranks on this machine (physical cores, not hyperthreads; spread over NUMA nodes; oneCCL "
               "worker cores set aside; the CPUs this process may use and its cgroup quota), then run the launcher "
               "with each rank bound to its cores (its exit code is compat's), or print the command and environment"
               " with --print. Exit 2 when the ranks do not fit.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..launchers import LAUNCHERS, names
    from ..launchers.interface import BOUND
    from ..watch.command import LAUNCHERS as WATCH_LAUNCHERS
    from ..watch.command import watch_arguments

    parser.add_argument("--launcher", choices=(*names(BOUND), *WATCH_LAUNCHERS), required=True,
                        help="torchrun (of --python's environment) or mpirun (Intel MPI, Open MPI, MPICH); spawn: compat starts the ranks (with --watch)")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=per_node_int, required=True, metavar="N", help="ranks on this node")
    parser.add_argument("--ccl-workers", type=zero_or_more_int, default=None, metavar="K",
                        help="oneCCL worker cores set aside per rank (default: 1 where the cores allow it, else 0; 0: none, the worker shares the rank's cores)")
    parser.add_argument("--print", dest="print_", action="store_true", help="print the plan, the exports and the command instead of running it")
    parser.add_argument("--json", action="store_true", help="with --print: the plan as JSON (compatmatrix/schemas/launch-v1.json); with --watch: the findings (watch-v1.json)")
    matrix_option(parser)
    watch_arguments(parser)  # --watch, --watch-only, --stall-after
    target_options(parser, python="the training environment's interpreter: runs torchrun and scripts (default: $COMPAT_PYTHON, else the running one)")
    parser.add_argument("--sysfs-root", metavar="DIR", help="with --print: plan for a recorded topology, a folder shaped like /sys")
    parser.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
    parser.add_argument("--mpi-flavor", choices=LAUNCHERS["mpirun"].flavors, help="mpirun: which MPI it is (default: asked with mpirun --version)")
    parser.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="torchrun: nodes in the run (run compat launch on each, with its --node-rank)")
    parser.add_argument("--node-rank", type=zero_or_more_int, default=0, metavar="R", help="torchrun: this node's index, 0..N-1")
    parser.add_argument("--master-addr", metavar="HOST", help="torchrun --nnodes > 1: the rendezvous host (node 0); mpirun --hostfile: rank 0's host (default: the hostfile's first)")
    parser.add_argument("--master-port", type=port_int, metavar="PORT", help="the rendezvous port (torchrun --nnodes > 1: required; mpirun: MASTER_PORT)")
    parser.add_argument("--hostfile", metavar="FILE", help="mpirun: the hosts, --nproc-per-node ranks on each (a hostfile or a Slurm node list, node[01-16])")
    parser.add_argument("--rsh", metavar="PROG", help="mpirun --hostfile: the remote shell that reaches the hosts, called like ssh (default: the MPI's own, ssh)")
    parser.command_remainder = True
    parser.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="what each rank runs, after -- (a .py script gets the interpreter in front)")


def build(ns: argparse.Namespace) -> LaunchArgs:
    from ..options import LaunchArgs
    from ..watch.command import watch_args_of

    if ns.json and not ns.print_ and not (ns.watch or ns.watch_only):
        raise UsageError("--json goes with --print (a running job writes its own output).", "Add --print to get the plan as JSON.")
    watch, watch_only, stall_after, watch_dir, json_file = watch_args_of(ns)
    report = watch_report_of(ns, watch)
    return LaunchArgs(ns.json, ns.launcher, ns.nproc_per_node, ns.ccl_workers, ns.print_, target(ns).python, ns.sysfs_root, ns.mpirun,
                      ns.mpi_flavor, command_words(ns.training_command), ns.matrix, watch, watch_only, stall_after, watch_dir, json_file, across_of(ns, watch),
                      report)


def watch_report_of(ns: argparse.Namespace, watch: bool) -> Optional[str]:
    """--report FILE.html, checked before the job starts: it goes with --watch (doctor's checks of the file and matplotlib)."""
    if ns.report is None:
        return None
    if not watch:
        raise UsageError("--report draws what compat launch --watch saw: it goes with --watch.", "Add --watch, or drop --report.")
    from .doctor import report_file

    return report_file(ns.report, "watch.html")


def _report_writer(path: Optional[str]):  # noqa: ANN202 - a callable for watch.command.launch_watched, or None
    """--report's writer: the page of the JSON document and the timeline (render/watch_html.py), written whole."""
    if path is None:
        return None

    def write(document, timeline) -> None:  # noqa: ANN001
        from ..render.watch_html import render_watch_report
        from ._checks import write_page

        write_page(path, render_watch_report(document, timeline))

    return write


def across_of(ns: argparse.Namespace, watch: bool):  # noqa: ANN201 - launchers.interface.Across or None
    """The hosts of a launch across several (torchrun --nnodes/--node-rank/--master-addr/--master-port, mpirun
    --hostfile/--rsh), checked; None on one host."""
    from ..launchers.interface import Across

    if ns.hostfile is None and ns.rsh:
        raise UsageError("--rsh reaches the hosts of --hostfile.", "Add --hostfile FILE, or drop --rsh.")
    if ns.hostfile is not None:
        if ns.launcher != "mpirun":
            raise UsageError("--hostfile goes with --launcher mpirun (one compat starts every host's ranks).",
                             "Use --launcher mpirun, or --nnodes/--node-rank/--master-addr/--master-port with torchrun.")
        if ns.nnodes != 1 or ns.node_rank != 0:
            raise UsageError("With --hostfile, mpirun starts every host's ranks: --nnodes/--node-rank are torchrun's.", "Drop --nnodes and --node-rank.")
        from ..launchers.mpirun import read_hostfile

        try:
            hosts = tuple(read_hostfile(ns.hostfile))
        except OSError as exc:
            raise UsageError(f"Cannot read --hostfile {ns.hostfile}: {exc.strerror or exc}.", "Pass a file with one host a line (host, host:N or host slots=N).") from None
        if not hosts:
            raise UsageError(f"--hostfile {ns.hostfile} names no host.", "Write one host a line (host, host:N or host slots=N).")
        return Across(1, 0, ns.master_addr, ns.master_port, ns.hostfile, hosts, ns.rsh)
    if ns.node_rank >= ns.nnodes:
        raise UsageError(f"--node-rank {ns.node_rank} is not below --nnodes {ns.nnodes}.", "Pass a --node-rank from 0 to --nnodes - 1.")
    if ns.nnodes == 1:
        if ns.master_addr or ns.master_port:
            raise UsageError("--master-addr/--master-port name the rendezvous of several nodes (torchrun --nnodes) or rank 0's host (mpirun --hostfile).",
                             "Add --nnodes N --node-rank R (torchrun) or --hostfile FILE (mpirun), or drop them.")
        return None
    if ns.launcher != "torchrun":
        raise UsageError(f"--nnodes goes with --launcher torchrun (one compat launch per node), not {ns.launcher}.",
                         "Use --launcher torchrun, or --launcher mpirun --hostfile FILE.")
    if not ns.master_addr or not ns.master_port:
        raise UsageError("torchrun across nodes needs the rendezvous: --master-addr (node 0's host) and --master-port.",
                         "Add --master-addr HOST --master-port PORT, the same on every node.")
    return Across(ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port)


def run(args: LaunchArgs) -> int:
    from ..placement.service import LaunchOptions, prepare
    from ..planning import load

    if args.watch and args.launcher == "spawn":  # compat starts the ranks itself: no launcher to plan for
        from ..watch.command import launch_watched

        return launch_watched(None, os.environ, args, say_error, _report_writer(args.report))

    passed: tuple[str, ...] = ()
    if args.watch:
        from ..watch.service import AGENT_VARIABLES

        passed = AGENT_VARIABLES
    options = LaunchOptions(launcher=args.launcher, nproc_per_node=args.nproc_per_node, command=args.command,
                            ccl_workers=args.ccl_workers, python=args.python, sysfs_root=args.sysfs_root, mpirun=args.mpirun,
                            mpi_flavor=args.mpi_flavor, print_only=args.print_, matrix=load(args.matrix), across=args.across, passed=passed)
    prepared = prepare(options, os.environ)
    if args.print_:
        if args.json:
            from ..console import dump_json
            from ..render.json import launch_json

            print(dump_json(launch_json(prepared)))
        else:
            from ..placement.render import launch_text

            sys.stdout.write(visible(launch_text(prepared.plan, prepared.invocation, prepared.notes)))
        return EXIT_OK
    from ..launchers.run import run_invocation
    from ..placement.render import summary_lines

    for line in summary_lines(prepared.plan, prepared.invocation, ()):
        say_error(f"compat launch: {line}")
    say_error(f"compat launch: {prepared.invocation.shell_line()}")
    sys.stdout.flush()
    if args.watch:
        from ..watch.command import launch_watched

        return launch_watched(lambda env: run_invocation(prepared.invocation, env, say=say_error), os.environ, args, say_error, _report_writer(args.report))
    return run_invocation(prepared.invocation, os.environ, say=say_error)
