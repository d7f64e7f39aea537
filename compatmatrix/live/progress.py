"""compat doctor --live's progress on a terminal: what the first rank on this host is doing now (its stage; with
--fabric, the round of host pairs and the sweep's collective, type and size), one line rewritten in place on stderr.

``progress_line`` is pure (a rank's status record -> the line); ``TerminalProgress`` is the edge: it reads the status
files of this host's ranks (the worker's ``proc-<pid>.json``) at most every ``every`` seconds and writes only when the
line changes, only to a terminal, and clears its line at the end. Nothing is written when stderr is not a terminal
(a pipe, a CI log, --json consumers reading stderr), so machine output and logs never carry it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, TextIO

from .protocol import RankStatus, check_version, read_parts, read_record_text


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def progress_line(status: RankStatus, ranks: int) -> Optional[str]:
    """The line for the lowest rank's status record (None before it has a stage)."""
    stage = status.stage
    if stage is None:
        return None
    head = f"live: rank {'?' if status.rank is None else status.rank} at stage {stage}" + (f" ({ranks} ranks reporting)" if ranks > 1 else "")
    if stage == "pairs" and status.pairs_round is not None:
        rounds = status.pairs_rounds
        return head + f", round {status.pairs_round + 1}" + (f" of {rounds}" if rounds is not None else "") + " of host pairs"
    case = status.fabric_case
    if stage == "fabric" and case is not None:
        return head + f": {case.collective} {case.dtype} at {size_text(case.bytes)} (case {case.begun})"
    return head


def read_progress(text: str) -> Optional[RankStatus]:
    """A status file's text as far as the progress line needs it: the parts of the protocol's shape (a part that is not
    is left out of the line), None for what is no rank record of this protocol (being written, a shared --run-dir)."""
    try:
        value = json.loads(text)
        check_version(value)
        return read_parts(RankStatus, value, "record")[0]
    except (ValueError, RecursionError):  # ProtocolError is a ValueError
        return None


class TerminalProgress:
    """Rewrites one line on ``stream`` (a terminal) as the lowest rank of this host moves on."""

    def __init__(self, stream: TextIO, run_dir: Path, every: float = 0.5) -> None:
        self.stream, self.run_dir, self.every = stream, run_dir, every
        self.shown = ""
        self.last_look = 0.0

    def look(self) -> None:
        now = time.monotonic()
        if now - self.last_look < self.every:
            return
        self.last_look = now
        records = []
        for path in self.run_dir.glob("proc-*.json"):
            try:
                record = read_progress(read_record_text(path))
            except (OSError, ValueError):  # being written, not UTF-8, not a record (ProtocolError is a ValueError)
                continue
            if record is not None and record.rank is not None:
                records.append((record.rank, record))
        if not records:
            return
        line = progress_line(min(records, key=lambda r: r[0])[1], len(records))
        if line and line != self.shown:
            from ..console import visible_line

            self._write("\r\x1b[K" + visible_line(line)[:200])  # what a status file says reaches the terminal without its controls
            self.shown = line

    def close(self) -> None:
        if self.shown:
            self._write("\r\x1b[K")
            self.shown = ""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken terminal never fails the run
            pass


def terminal_progress(stream: TextIO, run_dir: Path) -> Optional[TerminalProgress]:
    """A TerminalProgress when ``stream`` is a terminal, else None."""
    try:
        return TerminalProgress(stream, run_dir) if stream.isatty() else None
    except (AttributeError, ValueError):
        return None
