"""compat install: resolve, then install the set into the target environment in one transaction (a snapshot first,
restored if anything fails or is interrupted), then verify it; --dry-run and --print only plan; --restore and
--discard-snapshot finish what an interrupted install left. Side effects: the install service's (install/service.py).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, UsageError
from ._options import output, output_options, resolve_arguments, sources, target, target_options, wanted
from ._say import say_conflict, say_error

if TYPE_CHECKING:
    from ..options import InstallArgs

DESCRIPTION = ("Resolve, then install the set into the target environment: each package from its own host (sha256 "
               "checked), dependencies from PyPI or its mirror, a snapshot taken first and restored if anything "
               "fails or is interrupted, then the result verified. Exit 0 installed and verified, 1 "
               "refused/failed/verification failed, 2 usage error.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .export.plan_text import PLAN_TEXTS

    resolve_arguments(parser)
    target_options(parser, python="install into this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
                   python_version="with --dry-run / --print: plan for this Python instead of an interpreter",
                   platform="with --dry-run / --print: plan for this platform tag")
    parser.add_argument("--yes", action="store_true", help="allow replacing installed versions (torch included)")
    parser.add_argument("--dry-run", action="store_true", help="show the plan; change nothing, fetch nothing")
    parser.add_argument("--installer", choices=["pip", "uv", "auto"], default="pip", help="pip (default), uv, or auto (uv when on PATH)")
    parser.add_argument("--planner", choices=["auto", "uv", "pip"], default="auto",
                        help="what plans the dependencies: auto (default: uv when installing with uv and it can plan for the target), uv, or pip")
    parser.add_argument("--print", dest="print_", choices=[kind.name for kind in PLAN_TEXTS],
                        help="print the plan in this form and exit (the same as compat export requirements|constraints|pip-command)")
    parser.add_argument("--offline", action="store_true", help="no network: take everything from --wheelhouse")
    parser.add_argument("--wheelhouse", metavar="DIR", help="a folder made by compat download")
    parser.add_argument("--torch-from-pypi", action="store_true", help="take torch (and torchvision, torchaudio) from PyPI (the CUDA build, several GB more) instead of the PyTorch CPU index")
    recovery = parser.add_mutually_exclusive_group()
    recovery.add_argument("--restore", action="store_true", help="put back the environment an interrupted compat install left half-done")
    recovery.add_argument("--discard-snapshot", action="store_true", help="keep the environment an interrupted install left, drop its snapshot")
    output_options(parser)


def build(ns: argparse.Namespace) -> InstallArgs:
    from ..options import InstallArgs

    if ns.offline and not ns.wheelhouse:
        raise UsageError("--offline needs --wheelhouse DIR.", "Make one with compat download -d DIR, then pass --wheelhouse DIR.")
    return InstallArgs(output(ns), target(ns), wanted(ns), sources(ns, ns.wheelhouse), ns.yes, ns.dry_run, ns.installer, ns.print_,
                       ns.offline, ns.restore, ns.discard_snapshot, ns.planner)


def run(args: InstallArgs) -> int:
    from ..planning import NoSet, load, plan_for

    if args.restore or args.discard_snapshot:
        return _recover(args)
    if (args.target.python_version or args.target.platform) and not (args.dry_run or args.print_):
        raise UsageError("--python-version and --platform only go with --dry-run or --print.", "To install, pass --python PATH of the target interpreter.")
    snapshot, python, platform = _target_of(args)
    try:
        planned = plan_for(load(args.output.matrix), args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return say_conflict(args.output.no_color, no_set)
    if args.print_:
        from .export.plan_text import print_plan

        return print_plan(planned, args.print_, args.sources.require_hashes)
    from ..render.text import install_plan_lines

    say = _progress(args.output.json)
    for line in install_plan_lines(python.label, python.origin, platform.tag, planned.plan):
        say(line)
    if args.dry_run:
        return _dry_run(args, planned.plan, snapshot, python, say)
    assert snapshot is not None
    return _install(args, planned, snapshot, say)


def _progress(as_json: bool):
    def say(line: str) -> None:  # progress: a full or closed stderr must never fail the install
        if not as_json:
            say_error(line)

    return say


def _target_of(args: InstallArgs):
    """(the environment's snapshot or None, the target Python, the target platform)."""
    from ..environment.snapshot import take_snapshot
    from ..planning import target_of
    from ..record import replace

    if args.target.python_version:  # planning for a named Python: --python (or $COMPAT_PYTHON) is not the target then
        python, platform = target_of(replace(args.target, python=None, python_given=False))
        return None, python, platform
    snapshot = take_snapshot(args.target.python)
    python, platform = target_of(args.target, snapshot)
    return snapshot, python, platform


def _recover(args: InstallArgs) -> int:
    """--restore / --discard-snapshot: what an interrupted compat install left, put back or kept."""
    from ..console import dump_json
    from ..environment.snapshot import take_snapshot
    from ..install.runner import InstallError
    from ..install.service import recover, recover_without_interpreter
    from ..render import json as documents

    python_path = args.target.python
    try:
        if python_path and not os.path.exists(python_path):  # a restore killed between two renames can leave bin/ missing
            said = recover_without_interpreter(python_path, restore_it=args.restore)
        else:
            said = recover(take_snapshot(python_path), restore_it=args.restore)
    except InstallError as exc:
        return _install_error(exc, args.output.json)
    print(dump_json(documents.recover_json(said, args.restore)) if args.output.json else visible(said))
    return EXIT_OK


def _install_error(exc, as_json: bool) -> int:
    """The install service's refusal or failure: its document (--json) or its sentence and fix; its exit code."""
    if as_json:
        from ..console import dump_json
        from ..render import json as documents

        print(dump_json(documents.install_error_json(exc)))
    else:
        say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
    return exc.exit_code


def _dry_run(args: InstallArgs, plan, snapshot, python, say) -> int:
    from ..render.text import dry_run_lines

    if snapshot is not None:
        for line in dry_run_lines(plan, snapshot.versions()):
            say(line)
    if args.output.json:
        from ..console import dump_json
        from ..render import json as documents

        print(dump_json(documents.install_plan_json(python.label, plan)))
    return EXIT_OK


def _install(args: InstallArgs, planned, snapshot, say) -> int:
    from pathlib import Path

    from ..console import dump_json
    from ..install.runner import InstallError
    from ..install.service import InstallOptions, install
    from ..render import json as documents
    from ..render.text import verification_lines

    as_json = args.output.json
    options = InstallOptions(yes=args.yes, installer=args.installer, require_hashes=args.sources.require_hashes,
                             allow_unverified=args.sources.allow_unverified,
                             offline_dir=Path(args.sources.wheelhouse) if args.offline and args.sources.wheelhouse else None, say=say,
                             planner=args.planner, display="none" if as_json else "auto")  # --json: no bars, no lines, the document only
    try:
        result = install(planned.matrix, planned.plan, snapshot, options)
    except InstallError as exc:
        return _install_error(exc, as_json)
    if as_json:
        print(dump_json(documents.install_result_json(result)))
    else:
        for line in verification_lines(result.findings, result.ok):
            say(line)
    return EXIT_OK if result.ok else EXIT_PROBLEMS
