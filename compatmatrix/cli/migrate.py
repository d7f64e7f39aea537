"""compat migrate: move an environment off IPEX and oneCCL to stock PyTorch (plan, rewrite the command, install,
validate): migrate/service.py does it; this module parses and prints. Side effects: the service's.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ._options import command_words, output, output_options, per_node_int, positive_float, requirement_files, target, target_options

if TYPE_CHECKING:
    from ..options import MigrateArgs

DESCRIPTION = ("Plan the move from the installed set (or -r FILE) to the newest stock set for its Python (IPEX, the"
               " oneCCL bindings and their runtime removed; torch, transformers, accelerate installed, each version"
               " with the resolver's reason), rewrite the training command (ccl to gloo, --use_ipex dropped, mpirun"
               " to torchrun where it relied on oneCCL's MPI), list the IPEX calls in --source scripts and the "
               "variables to unset. Without --dry-run (and with --yes) the set is installed in one transaction and "
               "validated with compat doctor --live before it is committed; a failure restores the old set. Exit 0 "
               "planned / migrated / nothing to change, 1 no stock set, a command that cannot work, or a failed "
               "install or validation (restored), 2 usage error.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target_options(parser, python="the environment to migrate (default: $COMPAT_PYTHON, else the running one)",
                   python_version="with -r: the Python the pins are for (default: the running one)", platform="with -r: a PEP 425 platform tag")
    requirement_files(parser)
    parser.add_argument("--dry-run", action="store_true", help="plan only: change nothing")
    parser.add_argument("--yes", action="store_true", help="apply without asking")
    parser.add_argument("--to-torch", metavar="SPEC", help="limit torch: 2.13.0, 2.13 or a range such as '>=2.10,<2.14'")
    parser.add_argument("--source", dest="sources", action="append", default=[], metavar="PATH",
                        help="a training script (or a folder of them) to scan for IPEX / oneCCL calls (read, never imported or rewritten); repeatable")
    parser.add_argument("--compare", action="store_true", help="run the live doctor before and after and print bandwidth, step time and losses side by side")
    parser.add_argument("--ranks-per-node", type=per_node_int, default=2, metavar="N", help="ranks of the live validation and of the thread settings (default 2)")
    parser.add_argument("--index", dest="indexes", action="append", default=[], metavar="HOST=URL", help="take HOST's packages from URL (as for compat install)")
    parser.add_argument("--installer", choices=["pip", "uv", "auto"], default="auto", help="pip, uv, or uv when it is there (default)")
    parser.add_argument("--live-timeout", type=positive_float, default=300.0, metavar="S", help="deadline of each live validation run (default 300 s)")
    parser.command_remainder = True
    parser.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the training command to rewrite, after --")
    output_options(parser)


def build(ns: argparse.Namespace) -> MigrateArgs:
    from ..options import MigrateArgs

    return MigrateArgs(output(ns), target(ns), tuple(ns.requirement_files), ns.dry_run, ns.yes, ns.to_torch, command_words(ns.training_command),
                       tuple(ns.sources), ns.compare, ns.ranks_per_node, tuple(ns.indexes), ns.installer, ns.live_timeout)


def run(args: MigrateArgs) -> int:
    from ..migrate.service import MigrateOptions, run_migrate

    target = args.target
    options = MigrateOptions(python=None if args.requirement_files else target.interpreter, requirement_files=args.requirement_files,
                             python_version=target.python_version, platform=target.platform, dry_run=args.dry_run, yes=args.yes,
                             to_torch=args.to_torch, command=args.command, sources=args.sources, compare=args.compare,
                             ranks_per_node=args.ranks_per_node, indexes=args.indexes, installer=args.installer,
                             live_timeout=args.live_timeout, matrix=args.output.matrix)
    code, document = run_migrate(options)
    if args.output.json:
        from ..console import dump_json

        print(dump_json(document))
    else:
        from ..migrate.text import format_text

        sys.stdout.write(visible(format_text(document)))
    return code
