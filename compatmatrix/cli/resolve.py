"""compat resolve: the newest consistent set for a Python and platform, and the index each package comes from."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..errors import EXIT_OK, EXIT_PROBLEMS
from ._options import output, output_options, target, target_options, wanted, wanted_options

if TYPE_CHECKING:
    from ..options import ResolveArgs

DESCRIPTION = ("Find the newest consistent set for a Python and platform, and the index each package comes from. "
               "Exit 0 when a set exists, 1 when none does (with the reasons and the nearest sets that work), 2 on usage errors.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    wanted_options(parser, requirements="constraints such as 'torch==1.12.1' or 'transformers<4.40'; naming a package also asks for it "
                   "(names: torch, intel-extension-for-pytorch|ipex, oneccl-bind-pt|ccl, transformers, accelerate)",
                   profile="named set of packages: ddp-ccl (default), ipex, ccl, stock",
                   with_="comma-separated packages to include, e.g. ipex,ccl,transformers or torchvision,torchaudio", files_last=True)
    target_options(parser, exclusive=True,
                   python="resolve for this interpreter (its version and platform are probed; default: $COMPAT_PYTHON, else the running one)",
                   python_version="resolve for this CPython version (default: the running one)",
                   platform="PEP 425 platform tag (default: the target interpreter's)")
    output_options(parser)


def build(ns: argparse.Namespace) -> ResolveArgs:
    from ..options import ResolveArgs

    return ResolveArgs(output(ns), target(ns), wanted(ns))


def run(args: ResolveArgs) -> int:
    from ..planning import ask, load, target_of
    from ..render import emit
    from ..resolve import resolve

    matrix = load(args.output.matrix)
    python, platform = target_of(args.target)
    asked = ask(matrix, args.wanted, python, platform)
    outcome = resolve(matrix, asked.request)
    files = asked.files

    def document() -> dict:
        from ..render.json import resolve_document

        return resolve_document(outcome, args.wanted.files if files is not None else None, files.shown_passthrough if files is not None else ())

    def text(console) -> None:
        from ..render.text import render_outcome

        render_outcome(console, outcome)

    emit(args.output.json, args.output.no_color, document, text)
    return EXIT_OK if outcome.ok else EXIT_PROBLEMS
