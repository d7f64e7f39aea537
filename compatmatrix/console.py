"""The console people read (rich: colour only on a terminal, NO_COLOR honoured) and JSON for machines."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console

JSON_SCHEMA_VERSION = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports it: not "problems found" (1)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # The reader went away (`compat matrix | head`). rich would exit 1, our "problems found".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(EXIT_BROKEN_PIPE)


def make_console(no_color: bool = False, stderr: bool = False) -> Console:
    # rich already honours NO_COLOR and only colours a terminal; --no-color forces it off.
    stream = sys.stderr if stderr else sys.stdout
    # Logs (CI, pre-commit) are read later and searched: do not wrap them at rich's 80-column default.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    # emoji=False: stage names such as "trainer:train:" must not turn into pictures
    return _Console(no_color=no_color or None, stderr=stderr, highlight=False, soft_wrap=False, width=width, emoji=False)


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


