"""compat launch: plan N ranks on this machine (placement/service.py) and run the launcher with each rank bound to its
cores, or print the plan. Side effects: runs the launcher (its exit code is compat's).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, UsageError
from ._options import command_words, matrix_option, per_node_int, target, target_options, zero_or_more_int
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
    parser.command_remainder = True
    parser.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="what each rank runs, after -- (a .py script gets the interpreter in front)")


def build(ns: argparse.Namespace) -> LaunchArgs:
    from ..options import LaunchArgs
    from ..watch.command import watch_args_of

    if ns.json and not ns.print_ and not (ns.watch or ns.watch_only):
        raise UsageError("--json goes with --print (a running job writes its own output).", "Add --print to get the plan as JSON.")
    return LaunchArgs(ns.json, ns.launcher, ns.nproc_per_node, ns.ccl_workers, ns.print_, target(ns).python, ns.sysfs_root, ns.mpirun,
                      ns.mpi_flavor, command_words(ns.training_command), ns.matrix, *watch_args_of(ns))


def run(args: LaunchArgs) -> int:
    from ..placement.service import LaunchOptions, prepare
    from ..planning import load

    if args.watch and args.launcher == "spawn":  # compat starts the ranks itself: no launcher to plan for
        from ..watch.command import launch_watched

        return launch_watched(None, os.environ, args, say_error)

    options = LaunchOptions(launcher=args.launcher, nproc_per_node=args.nproc_per_node, command=args.command,
                            ccl_workers=args.ccl_workers, python=args.python, sysfs_root=args.sysfs_root, mpirun=args.mpirun,
                            mpi_flavor=args.mpi_flavor, print_only=args.print_, matrix=load(args.matrix))
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

        return launch_watched(lambda env: run_invocation(prepared.invocation, env, say=say_error), os.environ, args, say_error)
    return run_invocation(prepared.invocation, os.environ, say=say_error)
