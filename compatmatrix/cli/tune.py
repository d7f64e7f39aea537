"""compat tune: measure launch configurations and keep the fastest that trains the same model (tune/service.py runs
them). Side effects: the service's (it starts ranks).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, UsageError
from ._options import command_words, launcher_option, matrix_option, positive_float, target, target_options
from ._say import say_error

if TYPE_CHECKING:
    from ..options import TuneArgs

DESCRIPTION = ("Derive the launch configurations worth trying from this machine's topology and the environment "
               "(what compat launch plans, pruned so that no configuration oversubscribes the physical cores, and "
               "by the budget), run compat's own tiny training workload (or the training command after --) under "
               "each, measure steps/s after a warm-up, and accept a configuration only if its losses and final "
               "parameters match a single-process reference run of the same global batch within a bound derived "
               "from the dtype (said in the output). Prints the table and the winner as compat launch arguments and"
               " environment lines. Ctrl-C keeps what was measured. Exit 1 when no configuration was accepted.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    launcher_option(parser, "tune", default="torchrun", help="how the ranks are started (default torchrun, as compat launch)")
    parser.add_argument("--budget", type=positive_float, default=120.0, metavar="SECONDS", help="seconds to spend measuring (default 120)")
    parser.add_argument("--no-bf16", action="store_true", help="leave bf16 autocast out (the training cannot use it)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out (the training cannot use it)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON (compatmatrix/schemas/tune-v1.json)")
    matrix_option(parser)
    parser.add_argument("--reads", action="append", default=[], metavar="NAME",
                        help="an argument of the training command that its runs only read: an option's name (--reads data_path), a short "
                        "option's letter, or a positional as written; passed as given; repeatable (outputs are pointed into each run's own "
                        "folder, anything else compat cannot place is refused; see docs/commands/tune.md, 'What tune writes, and where')")
    target_options(parser, python="the training environment's interpreter (default: $COMPAT_PYTHON, else the running one)")
    parser.command_remainder = True
    parser.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the training command to measure instead of compat's workload, after -- (an HF Trainer script: compat sets "
                        "--max_steps, --logging_steps 1 and the batch; see docs/commands/tune.md, 'Your training command')")


def build(ns: argparse.Namespace) -> TuneArgs:
    from ..options import TuneArgs

    command = command_words(ns.training_command)
    if ns.reads and not command:
        raise UsageError("--reads names an argument of a training command, and none was given after --.",
                         "Pass the command after -- (compat tune --reads data_path -- train.py --data_path d), or drop --reads.")
    for word in ns.reads:
        if not word.strip("-") or "\0" in word:
            raise UsageError(f"--reads takes the name of one of the command's options or a positional argument as written, not {word[:60]!r}.",
                             "Pass e.g. --reads data_path (without its value).")
    return TuneArgs(ns.json, ns.launcher, ns.budget, target(ns).python, not ns.no_bf16, not ns.no_compile, command, tuple(ns.reads), ns.matrix)


def run(args: TuneArgs) -> int:
    from ..planning import load
    from ..tune.service import TuneOptions, tune

    outcome = tune(TuneOptions(args.python, args.launcher, args.budget, load(args.matrix), args.bf16, args.compile, args.command, args.reads), os.environ, say=say_error if not args.json else (lambda line: None))
    if args.json:
        from ..console import dump_json
        from ..tune.render import tune_json

        print(dump_json(tune_json(outcome)))
    else:
        from ..tune.render import tune_text

        sys.stdout.write(visible(tune_text(outcome)))
    if outcome.interrupted:
        return outcome.interrupted
    return EXIT_OK if outcome.winner is not None else EXIT_PROBLEMS
