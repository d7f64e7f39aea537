"""compat translate: rewrite a training command from the guides for the installed transformers and accelerate,
explaining each change; for a ccl command, what compat env exports for its launcher. Side effects: probes the target
interpreter.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, UsageError, shown
from ._options import command_words, output, output_options, target, target_options

if TYPE_CHECKING:
    from ..options import TranslateArgs

DESCRIPTION = ("Rewrite a training command line (--xpu_backend/--ddp_backend, --no_cuda/--use_cpu, --use_ipex, "
               "--bf16) for the installed transformers and accelerate, explaining each change. Exit 1 when the "
               "command cannot work with them at all (for example ccl with transformers >= 5.1).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target_options(parser, python="read the installed versions from this interpreter (default: $COMPAT_PYTHON, else the running one)")
    parser.add_argument("--transformers", metavar="VERSION", help="translate for this transformers version instead of the installed one")
    parser.add_argument("--accelerate", metavar="VERSION", help="translate for this accelerate version instead of the installed one")
    parser.command_remainder = True
    parser.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command line, after --")
    output_options(parser)


def build(ns: argparse.Namespace) -> TranslateArgs:
    from ..options import TranslateArgs

    return TranslateArgs(output(ns), target(ns).python, ns.transformers, ns.accelerate, command_words(ns.training_command))


def run(args: TranslateArgs) -> int:
    from packaging.version import InvalidVersion, Version

    from ..planning import load
    from ..translate import translate

    if not args.command:
        raise UsageError("No command line to translate.", "Write it after --, e.g. compat translate -- python run_qa.py --no_cuda --ddp_backend ccl")
    versions = {}
    for name, given in (("transformers", args.transformers), ("accelerate", args.accelerate)):
        if given:
            try:
                versions[name] = Version(given)
            except (InvalidVersion, ValueError):  # ValueError: more digits than int() takes
                raise UsageError(f"'{shown(given)}' is not a version.", f"Pass --{name} X.Y.Z.") from None
    snapshot = None
    if "transformers" not in versions or "accelerate" not in versions or args.python:
        from ..environment.snapshot import take_snapshot

        snapshot = take_snapshot(args.python)
        for name in ("transformers", "accelerate", "torch"):
            dist = snapshot.get(name)
            if name not in versions and dist is not None and dist.public_version is not None:
                versions[name] = dist.public_version
    if "transformers" not in versions:
        raise UsageError("transformers is not installed in the target environment.", "Pass --python PATH of your training environment, or --transformers X.Y.Z.")
    matrix = load(args.output.matrix)
    result = translate(matrix, args.command, versions["transformers"], versions.get("accelerate"), versions.get("torch"))
    environment = _translated_environment(matrix, snapshot, args.command, args.python) if result.ccl else None
    if args.output.json:
        from ..console import dump_json
        from ..render.json import translate_json

        print(dump_json(translate_json(result, environment)))
    else:
        from ..render.text import translate_text

        sys.stdout.write(visible(translate_text(result, environment)))
    return EXIT_PROBLEMS if result.blocking else EXIT_OK


def _translated_environment(matrix, snapshot, command, python):  # noqa: ANN001, ANN202
    """(launcher, the eval line, shell_env.ccl_launch_env's plan or None) for a command that runs ccl: the launcher its
    command line starts with (torchrun, mpirun; none: a single process), and what compat env --launcher exports for the
    target environment (None when it was not probed or has no bindings)."""
    import shlex

    from ..launchers import recognise

    words = list(command)
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
    launcher = recognise(os.path.basename(words[0]) if words else "", module)
    target = f" --python {shlex.quote(python)}" if python else ""
    line = f'eval "$(compat env{target}' + (f" --launcher {launcher}" if launcher else "") + ')"'
    plan = None
    if snapshot is not None:
        from ..checks.registry import Context, Options
        from ..shell_env import ccl_launch_env

        plan = ccl_launch_env(Context(matrix, snapshot, Options(launcher=launcher)), launcher)
    return launcher, line, plan
