"""A rank's last output lines, for the finding of a dead rank: read from the line ring its agent writes after the
heartbeats in its ring file (site/sitecustomize.py's _Lines: what the rank wrote through Python's sys.stdout and
sys.stderr, each complete line written at once), or kept by compat itself from the pipes of the ranks it starts
(--launcher spawn: watch/spawn.py's ``OutputTail``, everything the rank's process and its children wrote).

Bounded: at most MAX_LINES lines of at most MAX_CHARS characters each; a URL's credentials masked (redact.py) as
everything compat shows is. The lines keep their control characters here: the text output escapes them
(console.visible_line), JSON and HTML escape them their own way.

Side effects: ``agent_lines`` reads a file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..redact import redact_text
from .ring import SLOT, SLOTS

LINES = 32  # the agent's constants (tests/watch/test_watch_lines.py holds them equal)
LINE = 512
MAX_LINES = 20  # the lines a finding carries
MAX_CHARS = 240  # characters of one line shown (the agent keeps as many)
AGENT = "agent"  # where the lines came from (watch-v1.json "lines_from")
PIPE = "pipe"
FROM_WORDS = {AGENT: "its agent's copy of what it wrote through Python's sys.stdout and sys.stderr",
              PIPE: "compat's pipes of its stdout and stderr"}


def bounded(lines: Iterable[str], limit: int = MAX_LINES) -> tuple[str, ...]:
    """The last ``limit`` lines, each with a URL's credentials masked, then cut to MAX_CHARS characters ("..." said:
    masked first, so that a cut cannot leave half a credential that no longer reads as one)."""
    kept = [redact_text(line) for line in (list(lines)[-limit:] if limit > 0 else [])]
    return tuple(line if len(line) <= MAX_CHARS else line[:MAX_CHARS] + "..." for line in kept)


def slot_line(chunk: bytes, pid: int) -> tuple[int, str] | None:
    """(count, text) of one slot written by process ``pid``; None for anything else (never written, being written,
    another process's, not one)."""
    chunk = chunk.strip()
    if not chunk:
        return None
    try:
        body = json.loads(chunk)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("pid") != pid:
        return None
    count, text = body.get("n"), body.get("l")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or not isinstance(text, str):
        return None
    return count, text


def agent_lines(path: Path, pid: int, limit: int = MAX_LINES) -> tuple[str, ...]:
    """The last lines process ``pid`` wrote, from its ring file's line ring (nothing from a link, a FIFO or a file
    that is not regular; at most LINES slots read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ()
        data = os.pread(fd, LINES * LINE, SLOTS * SLOT)
    except OSError:
        return ()
    finally:
        os.close(fd)
    found = sorted(filter(None, (slot_line(data[start:start + LINE], pid) for start in range(0, len(data), LINE))))
    newest = found[-1][0] if found else 0
    return bounded((text for count, text in found if count > newest - LINES), limit)
