"""compat download: resolve for a target Python and platform and download every wheel the set needs into a folder (a
wheelhouse for compat install --offline). Side effects: network, writes the folder.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ..errors import EXIT_OK
from ._options import output, output_options, resolve_arguments, sources, target, target_options, wanted
from ._say import say_conflict, say_error

if TYPE_CHECKING:
    from ..options import DownloadArgs

DESCRIPTION = ("Resolve for a target Python and platform and download every wheel it needs into DIR; then `compat "
               "install --offline --wheelhouse DIR` installs with no network.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    resolve_arguments(parser)
    parser.add_argument("-d", "--dest", required=True, metavar="DIR")
    target_options(parser, python_version="the target machine's Python (default: the running one)",
                   platform="the target machine's platform tag (default: this one)")
    parser.add_argument("--torch-from-pypi", action="store_true", help="take torch from PyPI instead of the PyTorch CPU index")
    output_options(parser)


def build(ns: argparse.Namespace) -> DownloadArgs:
    from ..options import DownloadArgs

    return DownloadArgs(output(ns), target(ns), wanted(ns), sources(ns), ns.dest)


def run(args: DownloadArgs) -> int:
    from pathlib import Path

    from ..install.plan import WheelTarget
    from ..install.runner import InstallError
    from ..install.service import InstallOptions, download
    from ..planning import NoSet, load, plan_for, target_of

    python, platform = target_of(args.target)
    try:
        planned = plan_for(load(args.output.matrix), args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return say_conflict(args.output.no_color, no_set)
    try:
        options = InstallOptions(require_hashes=args.sources.require_hashes, allow_unverified=args.sources.allow_unverified,
                                 say=(lambda line: None) if args.output.json else say_error)
        files = download(planned.plan, WheelTarget(python.version, platform), Path(args.dest), sys.executable, options)
    except InstallError as exc:
        say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    if args.output.json:
        from ..console import dump_json
        from ..render.json import download_json

        print(dump_json(download_json(str(Path(args.dest).resolve()), files, planned.plan)))
    else:
        from ..render.text import download_text

        wanted = args.wanted
        again = [*wanted.requirements] + (["--profile", wanted.profile] if wanted.profile else []) + (["--with", ",".join(wanted.with_)] if wanted.with_ else [])
        again += ["--torch-from-pypi"] if args.sources.torch_from_pypi else []
        sys.stdout.write(visible(download_text(len(files), args.dest, python.label, platform.tag, again)))
    return EXIT_OK
