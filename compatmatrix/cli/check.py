"""compat check: the static checks of compat doctor (nothing of the stack is imported), of an environment or of -r
files' pins; for pre-commit and CI. The run is cli/_checks.py's."""

from __future__ import annotations

import argparse

from ._checks import build, common_arguments, run
from ._options import output_options, target_options

__all__ = ["DESCRIPTION", "add_arguments", "build", "run"]

DESCRIPTION = "The static checks of compat doctor (nothing of the stack is imported). Exit 0 clean, 1 problems, 2 tool error."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target_options(parser, python="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
                   python_version="with -r: the Python the files are for (default: the running one)",
                   platform="with -r: the platform tag (default: this machine's)")
    parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                        help="check the pins of FILE instead of an environment (a requirements file, pip freeze list or pylock.toml): "
                        "the CI gate before anything is installed; only the package checks apply")
    # checked against the launchers registry only when given (cli/_checks.py): compat check's start stays light
    parser.add_argument("--launcher", dest="check_launcher", metavar="LAUNCHER",
                        help="the launcher you start ranks with (any that compat env --launcher takes): oneccl.launcher checks what ccl needs "
                        "under it (its transport, I_MPI_ROOT, MASTER_ADDR/MASTER_PORT; the rendezvous under mpirun whatever the backend)")
    common_arguments(parser)
    output_options(parser)
