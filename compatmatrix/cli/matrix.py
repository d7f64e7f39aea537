"""compat matrix: show the curated matrix and the overlay; ``compat matrix update`` reads the registries into the
overlay (or --health: what they make impossible), ``compat matrix verify`` tries a pairing on this machine."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, UsageError, shown
from ._options import output, output_options
from ._parser import _Parser
from ._say import say_error

if TYPE_CHECKING:
    from ..options import MatrixArgs, MatrixUpdateArgs, MatrixVerifyArgs

DESCRIPTION = "Show the curated matrix, with what the overlay of 'compat matrix update' adds (marked (h)), optionally filtered."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, ccl, torchvision, torchaudio, transformers, accelerate")
    parser.add_argument("--python-version", metavar="X.Y", help="only releases with wheels (or Requires-Python) for this Python")
    parser.add_argument("--torch", metavar="SPEC", help="only releases that pair with a torch matching SPEC, e.g. '==2.7.0' or '>=2.5'")
    parser.add_argument("--sources", action="store_true", help="show each entry's sources")
    output_options(parser)
    actions = parser.add_subparsers(dest="matrix_action", metavar="[ACTION]", parser_class=_Parser, title="actions")
    _update_arguments(actions)
    _verify_arguments(actions)


def _update_arguments(actions) -> None:
    update_cmd = actions.add_parser(
        "update",
        help="read the registries (PyPI, the PyTorch CPU index) and keep the releases the matrix lacks in the overlay",
        description="Read the registries for torch, torchvision, torchaudio, IPEX, transformers and accelerate, and keep what the "
        "bundled matrix lacks (releases, yanks, Python coverage, glibc floors, the torch each extension declares: pin, floor or range) in the overlay "
        "($XDG_DATA_HOME/compatmatrix/overlay.json) that every command reads; or --write it into a matrix file.",
    )
    update_cmd.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                            help="where a host's index is (a mirror, a PEP 691/503 index); HOST is a matrix host id such as pypi, pytorch-cpu "
                            "(also COMPAT_INDEX_<HOST> and the [indexes] table of ~/.config/compatmatrix/config.toml)")
    update_cmd.add_argument("--write", metavar="FILE", help="write the harvested entries into this matrix file (e.g. data/matrix.toml) "
                            "in its own format instead of the overlay: new entries are added, the rest of the file is kept as it is")
    update_cmd.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, torchvision, "
                            "torchaudio, transformers, accelerate")
    update_cmd.add_argument("--health", action="store_true", help="write nothing; list what the registries make impossible or surprising for "
                            "the matrix's packages and the runtime wheels (unsatisfiable dependencies, Requires-Python holes, yanks, builds "
                            "that differ by host, what pip falls back to), each with its source (--json: matrix-health-v1.json)")
    output_options(update_cmd, json_help="print the harvest as JSON (compatmatrix/schemas/matrix-update-v1.json)")
    update_cmd.set_defaults(build=_update_build)


def _verify_arguments(actions) -> None:
    verify_cmd = actions.add_parser(
        "verify",
        help="try a pairing on this machine (a throw-away venv, a smoke operation) and record it in the overlay as tested-here evidence",
        description="Install PKG==V next to torch in a throw-away venv (compat's own install path, hash-checked; removed afterwards), "
        "import both in a child with a deadline, run a smoke operation through the extension, and record the result in the overlay "
        "as tested-here evidence (a failure as a break, with its error class). Exit 0 it works, 1 it breaks, 2 usage or tool error.",
    )
    verify_cmd.add_argument("pin", metavar="PKG==V", help="the release to try: torchvision, torchaudio, intel-extension-for-pytorch, "
                            "oneccl_bind_pt, transformers or accelerate, e.g. torchvision==0.29.1")
    verify_cmd.add_argument("--with", dest="with_torch", metavar="torch==X", help="the torch to try it with (default: the torch the release pins, or the newest its floor or range admits)")
    verify_cmd.add_argument("--python", metavar="PATH", help="the interpreter the throw-away venv is made with (default: the running one)")
    verify_cmd.add_argument("--host", metavar="HOST", help="the host PKG's wheel comes from (default: the first of its [policy.host_preference] "
                            "with a wheel for that Python), e.g. pypi to try PyPI's build next to the PyTorch CPU index's torch")
    verify_cmd.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                            help="where a host's index is (a mirror, a PEP 691/503 index), as for compat install")
    verify_cmd.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="the deadline of the import and smoke child (default 600)")
    output_options(verify_cmd, json_help="print the result as JSON (compatmatrix/schemas/matrix-verify-v1.json)")
    verify_cmd.set_defaults(build=_verify_build)


def build(ns: argparse.Namespace) -> MatrixArgs:
    from ..options import MatrixArgs

    return MatrixArgs(output(ns), tuple(ns.package or ()), ns.python_version, ns.torch, ns.sources)


def _update_build(ns: argparse.Namespace) -> MatrixUpdateArgs:
    from ..options import MatrixUpdateArgs

    return MatrixUpdateArgs(output(ns), tuple(ns.index), ns.write, tuple(ns.package or ()), bool(ns.health))


def _verify_build(ns: argparse.Namespace) -> MatrixVerifyArgs:
    from ..options import MatrixVerifyArgs

    return MatrixVerifyArgs(output(ns), ns.pin, ns.with_torch, ns.python, ns.host, tuple(ns.index), ns.timeout)


def run(args: MatrixArgs) -> int:
    from ..options import MatrixUpdateArgs, MatrixVerifyArgs

    if isinstance(args, MatrixUpdateArgs):
        return _update(args)
    if isinstance(args, MatrixVerifyArgs):
        return _verify(args)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from ..matrix.model import Component
    from ..planning import load_with_overlay
    from ..render import emit
    from ..render.json import matrix_json, matrix_rows
    from ..target import PythonTarget

    matrix, overlay = load_with_overlay(args.output.matrix)
    try:
        packages = [Component.from_name(name) for name in args.packages] if args.packages else list(Component)
    except KeyError as exc:
        raise UsageError(f"{exc.args[0]!r} is not a package in the matrix.", "Use torch, ipex, ccl, torchvision, torchaudio, transformers or accelerate.") from None
    python = PythonTarget.parse(args.python_version).version if args.python_version else None
    try:
        torch = SpecifierSet(args.torch) if args.torch else None
    except InvalidSpecifier:
        raise UsageError(f"'{shown(args.torch or '')}' is not a version specifier.", "Write it like '==2.7.0' or '>=2.5,<2.8'.") from None
    if torch is not None:
        from ..resolve import check_specifier_versions

        check_specifier_versions(args.torch, torch)
    rows = matrix_rows(matrix, packages, python, torch, overlay)

    def text(console) -> None:
        from ..render.text import render_matrix

        render_matrix(console, matrix, rows, args.sources, overlay)

    emit(args.output.json, args.output.no_color, lambda: matrix_json(matrix, rows, overlay), text)
    return EXIT_OK


def _update(args: MatrixUpdateArgs) -> int:
    from ..maintain.registry import terminal_progress
    from ..maintain.update import update, update_json, update_lines
    from ..matrix.harvest import PACKAGES
    from ..matrix.model import Component

    try:
        packages = [Component.from_name(name) for name in args.packages] if args.packages else list(PACKAGES)
    except KeyError as exc:
        raise UsageError(f"{shown(str(exc.args[0]))!r} is not a package compat matrix update reads.", "Use torch, ipex, torchvision, torchaudio, transformers or accelerate.") from None
    if any(p not in PACKAGES for p in packages):
        raise UsageError("oneccl_bind_pt is not on a registry compat can read (Intel's hosts are not harvested).", "Use torch, ipex, torchvision, torchaudio, transformers or accelerate.")
    if args.write is not None and ("\x00" in args.write or not args.write.strip()):
        raise UsageError(f"--write '{shown(args.write)}' is not a file name.", "Pass the matrix file to update, e.g. --write data/matrix.toml.")
    from ..matrix.load import load_matrix

    progress = terminal_progress()
    if args.health:
        if args.write is not None:
            raise UsageError("--health writes nothing: it goes without --write.", "Drop --write, or run compat matrix update --write FILE on its own.")
        return _matrix_health(load_matrix(args.output.matrix), args, packages, progress)
    return _read_registries(args, progress, lambda: update(load_matrix(args.output.matrix), args.indexes, args.write, packages, progress),
                            update_json, update_lines)


def _matrix_health(matrix, args, packages, progress) -> int:
    """compat matrix update --health: the registries read, nothing written; exit 0 (the findings are facts of the
    registries, not problems of this machine)."""
    from ..maintain.health_read import read_health
    from ..matrix.health import health_json, health_lines

    return _read_registries(args, progress, lambda: read_health(matrix, args.indexes, packages, progress), health_json, health_lines)


def _read_registries(args, progress, read, to_json, to_lines) -> int:
    """compat matrix update and --health: ``read()`` under the progress line (cleared when it ends, however), then its
    result as ``--json`` or as text, one fact a line: a registry's line break (a yank reason's) is shown as \\n, never
    starts a line of its own. Exit 0."""
    try:
        result = read()
    finally:
        if progress is not None:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
    if args.output.json:
        from ..console import dump_json

        print(dump_json(to_json(result)))
    else:
        from ..console import visible_line
        from ..redact import redact_text

        sys.stdout.write("".join(visible_line(redact_text(line)) + "\n" for line in to_lines(result)))
    return EXIT_OK


def _verify(args: MatrixVerifyArgs) -> int:
    from ..environment.child import valid_timeout
    from ..maintain.verify import SMOKE_TIMEOUT_S, parse_pin, verify, verify_json, verify_lines
    from ..matrix.model import Component
    from ..planning import load

    component, version = parse_pin(args.pin)
    torch = None
    if args.with_torch is not None:
        partner, torch = parse_pin(args.with_torch, "torch==X")
        if partner is not Component.TORCH:
            raise UsageError(f"--with '{shown(args.with_torch)}' is not a torch pin.", "Write it as --with torch==X, e.g. --with torch==2.13.0.")
    timeout = SMOKE_TIMEOUT_S if args.timeout is None else args.timeout
    if not valid_timeout(timeout) or timeout > 86400:
        raise UsageError(f"--timeout {args.timeout} is not a number of seconds between 0 and a day.", "Pass --timeout SECONDS, e.g. --timeout 600.")
    python = args.python or sys.executable
    if "\x00" in python or not python.strip():
        raise UsageError(f"--python '{shown(python)}' is not a path.", "Pass --python PATH of a Python interpreter.")
    say = (lambda line: None) if args.output.json else (lambda line: say_error(line))
    result = verify(load(args.output.matrix), component, version, torch, python, args.indexes, args.host, say,
                    display="none" if args.output.json else "auto", timeout=timeout)
    if args.output.json:
        from ..console import dump_json

        print(dump_json(verify_json(result)))
    else:
        sys.stdout.write(visible("\n".join(verify_lines(result)) + "\n"))
    return EXIT_OK if result.record.works else EXIT_PROBLEMS
