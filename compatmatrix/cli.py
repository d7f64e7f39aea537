"""``compat``: wiring only. Parse the command line, call the core, render, return the exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from . import __version__
from .console import EXIT_BROKEN_PIPE, dump_json, make_console
from .errors import EXIT_OK, EXIT_PROBLEMS, EXIT_TOOL_ERROR, CompatError, UsageError
from .matrix.load import load_matrix
from .matrix.model import Component, Matrix
from .target import Platform, PythonTarget


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors end with exit 2 and one line that says how to get help."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        self.print_usage(sys.stderr)
        self.exit(EXIT_TOOL_ERROR, f"compat: error: {message}. Run '{self.prog} --help' for the options.\n")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (versioned schema) instead of tables")
    parser.add_argument("--no-color", action="store_true", help="no colour (also: the NO_COLOR environment variable)")
    parser.add_argument(
        "--matrix",
        metavar="PATH",
        default=os.environ.get("COMPAT_MATRIX"),
        help="read this matrix file instead of the bundled one (also: COMPAT_MATRIX)",
    )


def _target(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--python", metavar="PATH", help="resolve for this interpreter (its version and platform are probed)")
    group.add_argument("--python-version", metavar="X.Y", help="resolve for this CPython version (default: the running one)")
    parser.add_argument("--platform", metavar="TAG", help="PEP 425 platform tag (default: the target interpreter's)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="compat",
        description="Resolve, install and validate CPU PyTorch DDP stacks from a sourced compatibility matrix.",
    )
    parser.add_argument("--version", action="version", version=f"compat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    resolve_cmd = commands.add_parser(
        "resolve",
        help="find the newest consistent set of torch / IPEX / oneccl_bind_pt / transformers / accelerate",
        description=(
            "Find the newest consistent set for a Python and platform, and the index each package comes from. "
            "Exit 0 when a set exists, 1 when none does (with the reasons and the nearest sets that work), 2 on usage errors."
        ),
    )
    resolve_cmd.add_argument(
        "requirements",
        nargs="*",
        metavar="REQUIREMENT",
        help="constraints such as 'torch==1.12.1' or 'transformers<4.40'; naming a package also asks for it "
        "(names: torch, intel-extension-for-pytorch|ipex, oneccl-bind-pt|ccl, transformers, accelerate)",
    )
    resolve_cmd.add_argument("--profile", metavar="NAME", help="named set of packages: ddp-ccl (default), ipex, ccl, stock")
    resolve_cmd.add_argument("--with", dest="with_", metavar="LIST", default="", help="comma-separated packages to include, e.g. ipex,ccl,transformers")
    _target(resolve_cmd)
    _common(resolve_cmd)

    matrix_cmd = commands.add_parser(
        "matrix",
        help="show the curated matrix (releases, pairings, Python coverage, sources)",
        description="Show the curated matrix, optionally filtered.",
    )
    matrix_cmd.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, ccl, transformers, accelerate")
    matrix_cmd.add_argument("--python-version", metavar="X.Y", help="only releases with wheels (or Requires-Python) for this Python")
    matrix_cmd.add_argument("--torch", metavar="SPEC", help="only releases that pair with a torch matching SPEC, e.g. '==2.7.0' or '>=2.5'")
    matrix_cmd.add_argument("--sources", action="store_true", help="show each entry's sources")
    _common(matrix_cmd)

    _checks_parser(
        commands,
        "doctor",
        "inspect an environment: installed set vs the matrix, oneCCL setup, runtime settings, isolated import probes",
        "Inspect an environment and name the cause and the fix of every problem. Imports of the stack run in child "
        "processes with a timeout. Exit 0 no failure, 1 failures, 2 tool error.",
    )
    _checks_parser(
        commands,
        "check",
        "the fast static subset of doctor (no imports), for pre-commit and CI",
        "The static checks of compat doctor (nothing of the stack is imported). Exit 0 clean, 1 problems, 2 tool error.",
    )
    env_cmd = commands.add_parser(
        "env",
        help="print the exports of the bindings' setvars.sh plus LD_PRELOAD and thread settings: eval \"$(compat env)\"",
        description="Print what sourcing the oneCCL bindings' setvars.sh would export, plus recommended LD_PRELOAD (only paths "
        "that exist), OMP_NUM_THREADS and CCL_WORKER_COUNT for the ranks per node.",
    )
    env_cmd.add_argument("--shell", choices=["bash", "zsh", "fish"], default="bash")
    env_cmd.add_argument("--ranks-per-node", type=int, default=2, metavar="N")
    env_cmd.add_argument("--python", metavar="PATH", default=os.environ.get("COMPAT_PYTHON") or None,
                         help="the interpreter whose bindings to use (default: $COMPAT_PYTHON, else the running one)")
    _common(env_cmd)
    return parser


def _target_from(args: argparse.Namespace) -> tuple[PythonTarget, Platform]:
    platform = Platform.from_tag(args.platform) if args.platform else None
    if args.python:
        from .environment.interpreter import query_interpreter

        info = query_interpreter(args.python)
        return info.python_target(f"--python {info.executable}"), platform or info.platform
    if args.python_version:
        return PythonTarget.parse(args.python_version), platform or Platform.current()
    return PythonTarget.running(), platform or Platform.current()


def _load(args: argparse.Namespace) -> Matrix:
    return load_matrix(args.matrix)


def cmd_resolve(args: argparse.Namespace) -> int:
    from .render import outcome_json, render_outcome
    from .resolve import build_request, resolve

    matrix = _load(args)
    python, platform = _target_from(args)
    with_components = [name.strip() for name in args.with_.split(",") if name.strip()]
    request = build_request(matrix, python, platform, args.profile, with_components, args.requirements)
    outcome = resolve(matrix, request)
    if args.json:
        print(dump_json(outcome_json(outcome)))
    else:
        render_outcome(make_console(args.no_color), outcome)
    return EXIT_OK if outcome.ok else EXIT_PROBLEMS


def cmd_matrix(args: argparse.Namespace) -> int:
    from .render import matrix_json, matrix_rows, render_matrix

    matrix = _load(args)
    try:
        packages = [Component.from_name(name) for name in args.package] if args.package else list(Component)
    except KeyError as exc:
        raise UsageError(f"{exc.args[0]!r} is not a package in the matrix.", "Use torch, ipex, ccl, transformers or accelerate.") from None
    python = PythonTarget.parse(args.python_version).version if args.python_version else None
    try:
        torch = SpecifierSet(args.torch) if args.torch else None
    except InvalidSpecifier:
        raise UsageError(f"'{args.torch}' is not a version specifier.", "Write it like '==2.7.0' or '>=2.5,<2.8'.") from None
    rows = matrix_rows(matrix, packages, python, torch)
    if args.json:
        print(dump_json(matrix_json(matrix, rows)))
    else:
        render_matrix(make_console(args.no_color), matrix, rows, args.sources)
    return EXIT_OK


def _checks_parser(commands, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=description)
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=os.environ.get("COMPAT_PYTHON") or None,
        help="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
    )
    parser.add_argument("--ranks-per-node", type=int, default=2, metavar="N", help="ranks you launch per node (default 2), for the thread checks")
    parser.add_argument("--bf16", action="store_true", help="you intend to train in bf16 (checks the CPU supports it natively)")
    parser.add_argument("--only", action="append", default=[], metavar="ID", help="run only these checks or areas (repeatable)")
    parser.add_argument("--skip", action="append", default=[], metavar="ID", help="skip these checks or areas (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--verbose", action="store_true", help="show the evidence of passing checks too")
    if name == "doctor":
        parser.add_argument("--import-timeout", type=float, default=120.0, metavar="S", help="seconds each import probe may take (default 120)")
    _common(parser)
    return parser


def _run_checks(args: argparse.Namespace, command: str, static_only: bool) -> int:
    from .checks.finding import Context, Options, all_checks, run_checks, select, unknown_names
    from .environment.snapshot import take_snapshot
    from .render_findings import findings_json, render_check_list, render_findings

    checks = all_checks()
    if args.list:
        render_check_list(make_console(args.no_color), select(checks, static_only=static_only))
        return EXIT_OK
    unknown = unknown_names(args.only + args.skip)
    if unknown:
        raise UsageError(f"'{unknown[0]}' is not a check id or area.", f"Run 'compat {command} --list' for the ids.")
    if args.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be at least 1.", "Pass the number of ranks you start on each node.")
    matrix = _load(args)
    snapshot = take_snapshot(args.python)
    options = Options(ranks_per_node=args.ranks_per_node, bf16=args.bf16, import_timeout=getattr(args, "import_timeout", 120.0))
    context = Context(matrix, snapshot, options)
    findings = run_checks(select(checks, args.only, args.skip, static_only=static_only), context)
    if args.json:
        print(dump_json(findings_json(command, snapshot, findings)))
    else:
        render_findings(make_console(args.no_color), command, snapshot, findings, args.verbose)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    return _run_checks(args, "doctor", static_only=False)


def cmd_check(args: argparse.Namespace) -> int:
    return _run_checks(args, "check", static_only=True)


def cmd_env(args: argparse.Namespace) -> int:
    from .checks.finding import Context, Options
    from .environment.snapshot import take_snapshot
    from .shell_env import format_env, plan_env

    if args.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be at least 1.", "Pass the number of ranks you start on each node.")
    snapshot = take_snapshot(args.python)
    context = Context(_load(args), snapshot, Options(ranks_per_node=args.ranks_per_node))
    plan = plan_env(context, args.ranks_per_node)
    if args.json:
        print(dump_json({"schema_version": 1, "command": "env", "python": snapshot.executable, "exports": dict(plan.exports), "comments": list(plan.comments)}))
    else:
        sys.stdout.write(format_env(plan, args.shell))
    return EXIT_OK


COMMANDS = {"resolve": cmd_resolve, "matrix": cmd_matrix, "doctor": cmd_doctor, "check": cmd_check, "env": cmd_env}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CompatError as exc:
        sys.stderr.write(f"compat: error: {exc.message}" + (f" {exc.fix}" if exc.fix else "") + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("compat: interrupted.\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`compat resolve --json | head`): not "problems found".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
