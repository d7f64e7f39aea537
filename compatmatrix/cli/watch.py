"""compat watch RUN_DIR: attach to a job that compat launch --watch --watch-dir RUN_DIR started elsewhere and judge it
as the launch's watcher does (watch/attach.py). Side effects: reads the run folder and /proc; writes the findings.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..console import visible
from ._say import say_error

if TYPE_CHECKING:
    from ..options import WatchArgs

DESCRIPTION = ("Attach to a job that 'compat launch --watch --watch-dir RUN_DIR' started elsewhere (another terminal, another "
               "host sharing the folder) and watch it as that launch does, from the rings its ranks' agents write: a stalled rank "
               "(and the collective the others wait in), a dead rank, a straggler. It did not start the job and does not end it "
               "(each finding's fix says how to); it ends when every rank has ended, or on Ctrl-C. Exit 0 without a finding, "
               "1 with one, 2 when RUN_DIR holds nothing to watch.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..watch.command import STALL_AFTER_HELP, stall_after_argument

    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run folder of the job: the --watch-dir its compat launch --watch was given")
    stall_after_argument(parser, STALL_AFTER_HELP)
    parser.add_argument("--json", action="store_true",
                        help="write the findings as one JSON document on stdout when the watch ends (compatmatrix/schemas/watch-v1.json, with \"attached\": true)")


def build(ns: argparse.Namespace) -> WatchArgs:
    from ..options import WatchArgs
    from ..watch.command import check_stall_after

    check_stall_after(ns.stall_after)
    return WatchArgs(ns.json, ns.run_dir, ns.stall_after)


def run(args: WatchArgs) -> int:
    from ..watch.attach import PREFIX, check_run_folder, watch_attached
    from ..watch.render import finding_said, text_lines, watch_json
    from ..watch.service import WatchOptions

    check_run_folder(args.run_dir)
    pythons = tuple(p for p in (os.environ.get("COMPAT_PYTHON"),) if p)
    say_error(f"{PREFIX}: watching the rings of {args.run_dir} (Ctrl-C to stop watching; the job goes on)")
    outcome = watch_attached(args.run_dir, WatchOptions(watch_only=True, stall_after=args.stall_after, pythons=pythons), os.environ,
                             say_error, lambda finding: finding_said(finding, PREFIX))
    if args.json:
        from ..console import dump_json

        print(dump_json(watch_json(outcome)))
        return outcome.exit_status
    lines = text_lines(outcome, PREFIX)
    if outcome.interrupted is not None:
        import signal

        lines.append(f"{PREFIX}: compat received {signal.Signals(outcome.interrupted).name}: the watch stopped (the job was not touched)")
    elif outcome.resolved and not outcome.findings:
        lines.append(f"{PREFIX}: {len(outcome.resolved)} stall{'' if len(outcome.resolved) == 1 else 's'} resolved while the job ran; no finding")
    elif not outcome.findings:
        lines.append(f"{PREFIX}: no finding (progress from: {', '.join(outcome.sources) or 'no rank reported'}); every rank has ended")
    sys.stdout.write(visible("\n".join(lines) + "\n"))
    return outcome.exit_status
