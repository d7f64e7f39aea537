"""``compat``: the command line, as wiring. Each command is a module of this package (cli/<command>.py, cli/export/):
``DESCRIPTION``, ``add_arguments(parser)`` (made on the command's first use: the other commands' options cost nothing),
``build(namespace)`` (argparse's Namespace -> the command's record in options.py: every check of the command line alone
happens there) and ``run(args) -> int`` (calls the core and one render/ module; exit 0 ok, 1 problems, 2 usage or tool
error). The options several commands take are typed once (``_options``); whatever a command raises becomes one sentence
in one place (``_guard``). A command module imports its services inside ``run``: `compat --help`, `--version` and a
usage error parse the command line only (tests/test_startup.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional

from .. import __version__
from ._guard import Invocation, end_now, guard
from ._parser import _Parser

#: compat's commands in the order `compat --help` lists them: name -> (its module in this package, the one line
#: `compat --help` shows for it). A new command is its module and one line here.
TABLE: dict[str, tuple[str, str]] = {
    "resolve": ("resolve", "find the newest consistent set of torch / IPEX / oneccl_bind_pt / transformers / accelerate"),
    "matrix": ("matrix", "show the curated matrix (releases, pairings, Python coverage, sources) and the overlay; 'compat matrix update' refreshes it"),
    "doctor": ("doctor", "inspect an environment: installed set vs the matrix, oneCCL setup, runtime settings, isolated import probes"),
    "check": ("check", "the fast static subset of doctor (no imports), for pre-commit and CI"),
    "install": ("install", "install the resolved set into an environment, all of it or nothing"),
    "download": ("download", "build a wheelhouse (planned wheels + dependencies) for another machine"),
    "translate": ("translate", "rewrite a training command from the guides for the installed transformers / accelerate"),
    "migrate": ("migrate", "move an environment off IPEX and oneCCL to stock PyTorch: plan, rewrite the command, install, validate"),
    "env": ("env", "print the exports of the bindings' setvars.sh plus LD_PRELOAD and thread settings: eval \"$(compat env)\""),
    "launch": ("launch", "start torchrun or mpirun with each rank bound to its own physical cores, threads and oneCCL workers planned"),
    "watch": ("watch", "attach to a job that 'compat launch --watch --watch-dir DIR' started elsewhere: name a stalled, dead or straggling rank"),
    "tune": ("tune", "measure launch configurations (ranks, threads, oneCCL workers, backend, bf16, torch.compile) and keep the fastest that trains the same model"),
    "export": ("export", "write the resolved set as a Kubernetes PyTorchJob, a Dockerfile, a requirements/constraints file, a pip command or a "
               "pylock.toml; or check a hand-written manifest or Dockerfile (--validate FILE)"),
}


def _module(name: str) -> Any:
    return importlib.import_module(f"{__name__}.{TABLE[name][0]}")


class _Run:
    """A command's ``run``, its module imported when it is called."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, args: Any) -> int:
        return _module(self.name).run(args)


#: name -> the function that runs the command on its typed arguments (main dispatches through this table)
COMMANDS: dict[str, Callable[..., int]] = {name: _Run(name) for name in TABLE}


def _populate(name: str) -> Callable[[argparse.ArgumentParser], None]:
    def populate(parser: argparse.ArgumentParser) -> None:
        module = _module(name)
        parser.description = module.DESCRIPTION
        module.add_arguments(parser)
        parser.set_defaults(build=module.build)

    return populate


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="compat",
        description="Resolve, install and validate CPU PyTorch DDP stacks from a sourced compatibility matrix.",
    )
    parser.add_argument("--version", action="version", version=f"compat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name, (_, help_text) in TABLE.items():
        commands.add_parser(name, help=help_text).populate = _populate(name)
    return parser


def parse(argv: Optional[Sequence[str]] = None):
    """The command line as the command's typed arguments (options.py); usage errors raise SystemExit (argparse) or
    UsageError (the builders)."""
    namespace = build_parser().parse_args(argv)
    return namespace.build(namespace)


#: Commands that read, compute and print, start nothing that outlives them and clean nothing up at exit. Run as the
#: program (``main()`` without arguments: the entry point, ``python -m compatmatrix``) they work with the cyclic
#: garbage collector off (their objects live until the end: collecting would only scan them) and end with os._exit
#: once their output is flushed: the interpreter's teardown would free the matrix object by object (~15 ms).
SHORT_LIVED = frozenset({"resolve", "matrix", "check", "export"})


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command. Whatever happens, the user gets one sentence and an exit code in {0, 1, 2} (130/143 for
    Ctrl-C/SIGTERM, 141 for a closed pipe), never a traceback: an unexpected error is a bug, written to a report file
    (cli/_guard.py)."""
    return guard(lambda invocation: _run(argv, invocation))


def _run(argv: Optional[Sequence[str]], invocation: Invocation) -> int:
    args = invocation.args = build_parser().parse_args(argv)
    short = argv is None and args.command in SHORT_LIVED
    if short:
        import gc

        gc.disable()
    code = COMMANDS[args.command](args.build(args))  # the typed arguments (options.py); usage errors raise here
    sys.stdout.flush()  # a full disk or a closed pipe shows here, not in the interpreter's shutdown
    if short:
        end_now(code)
    return code


#: names that lived in the one-module cli.py, where they are now (read on first use, so that importing compatmatrix.cli
#: imports none of the command modules)
_MOVED = {"fabric_deadline_for": "doctor", "MAX_COUNT": "_options", "MAX_PER_NODE": "_options", "MAX_SECONDS": "_options",
          "positive_float": "_options", "positive_int": "_options", "per_node_int": "_options", "zero_or_more_int": "_options", "port_int": "_options"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module(f"{__name__}.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
