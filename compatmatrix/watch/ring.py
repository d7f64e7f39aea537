"""The agents' ring files, read: ``<run>/rank-<RANK>.ring``, SLOTS slots of SLOT bytes, each a JSON heartbeat padded
with spaces (written by site/sitecustomize.py, which must stay standard library only and so keeps its own copy of
these constants; tests/watch/test_watch.py holds them equal). A slot that does not parse (one being written, never
written) is skipped; what a slot holds is untrusted: every field is checked and bounded.

Side effects: reads files (``read_ring``, ``lock_held``); ``beats_of`` is pure.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from .judge import Beat, Collective

SLOTS = 64
SLOT = 4096
FORMAT = 1
RING_NAME = re.compile(r"rank-(\d{1,6})\.ring")
_MAX_TEXT = 200


MAX_RINGS = 4096  # ranks of one host the watcher reads at most
MAX_ENTRIES = 65536  # entries of the run folder it looks at, whatever else the job put there


def ring_files(folder: Path) -> dict[int, Path]:
    """The ranks' ring files of the run folder, rank -> path: at most MAX_RINGS, from at most MAX_ENTRIES entries (the
    job's own processes can write into the folder: what it holds is bounded here, not trusted)."""
    found: dict[int, Path] = {}
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES or len(found) >= MAX_RINGS:
                    break
                match = RING_NAME.fullmatch(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    found[int(match.group(1))] = Path(entry.path)
    except OSError:
        return found
    return found


def read_ring(path: Path, size: int = SLOTS * SLOT) -> bytes:
    """At most a ring's bytes (``size``: fewer, from its start); nothing from a symlink (not followed) or a FIFO (not
    waited on) or anything not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.pread(fd, min(size, SLOTS * SLOT), 0)
    except OSError:
        return b""
    finally:
        os.close(fd)


def lock_held(path: Path) -> bool:
    """Whether the rank's agent still holds its ring's lock (it does for as long as its process lives)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: Any) -> Optional[float]:
    """A finite number, else None (JSON from a ring may say NaN or Infinity, or an integer too large for a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str:
    return value[:_MAX_TEXT] if isinstance(value, str) else ""


def beat_of(body: Any, rank: int) -> Optional[Beat]:
    if not isinstance(body, dict) or body.get("v") != FORMAT or body.get("rank") != rank:
        return None
    t = _float(body.get("t"))
    if t is None:
        return None
    progress = {}
    for pg, pair in (body.get("pg") or {}).items() if isinstance(body.get("pg"), dict) else ():
        if isinstance(pair, list) and len(pair) == 2:
            progress[_text(pg)] = (_int(pair[0], -1), _int(pair[1], -1))
    entries = []
    for item in body.get("entries") or () if isinstance(body.get("entries"), list) else ():
        if isinstance(item, list) and len(item) >= 5:
            created = _int(item[4])
            entries.append(Collective(_text(item[0]), _int(item[1]), _text(item[2]), _int(item[3]), created / 1e9, _text(item[5]) if len(item) > 5 else ""))
    return Beat(_int(body.get("n")), rank, _int(body.get("pid")), t, _text(body.get("state")), _text(body.get("source")) or "none",
                progress, tuple(entries), body["exception"][:1000] if isinstance(body.get("exception"), str) else "",
                _text(body.get("host")), _text(body.get("ns")), _float(body.get("cpu")), _world(body.get("world")))


def _world(value: Any) -> int:
    """WORLD_SIZE as the agent wrote it (a string of digits, or ""): 0 when it is not a count."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 7 else 0


def slot_beat(chunk: bytes, rank: int) -> Optional[Beat]:
    """The heartbeat one slot holds, or None (being written, never written, not one)."""
    chunk = chunk.strip()
    if not chunk:
        return None
    try:
        return beat_of(json.loads(chunk), rank)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def beats_of(data: bytes, rank: int) -> list[Beat]:
    """The heartbeats a ring holds, oldest first."""
    beats = []
    for start in range(0, min(len(data), SLOTS * SLOT), SLOT):
        beat = slot_beat(data[start:start + SLOT], rank)
        if beat is not None:
            beats.append(beat)
    beats.sort(key=lambda beat: beat.n)
    return beats


_HEAD = re.compile(rb'\{\s*"v"\s*:\s*(\d{1,9})\s*,\s*"n"\s*:\s*(\d{1,18})\s*,\s*"rank"\s*:\s*(\d{1,9})\s*,\s*"pid"\s*:\s*(\d{1,12})\s*,')


class RingCursor:
    """Reads one rank's ring incrementally: each ``new_beats`` parses only the heartbeats written since the last call.

    The agent writes heartbeat n into slot n % SLOTS, so the next one expected is in the slot after the last read: that
    slot is read (SLOT bytes) and only its head is looked at (count and pid, a regular expression on the first bytes)
    unless it is the one expected. A ring the agent wrote more than SLOTS times since (the watcher fell behind), or
    that a new process of the rank started again from 0 (the slot of the last heartbeat read no longer holds it), is read
    whole once. Cost per call without news: two preads of SLOT bytes and two matches; with news, one JSON parse per new
    heartbeat."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank
        self.next_n: Optional[int] = None  # None: read the whole ring next time
        self.pid = 0
        self.whole_reads = 0  # how often the whole ring was read (tests; the first read is one)

    def _whole(self) -> list[Beat]:
        self.whole_reads += 1
        beats = beats_of(read_ring(self.path), self.rank)
        if beats:
            newest_pid = beats[-1].pid
            beats = [beat for beat in beats if beat.pid == newest_pid]
            self.next_n, self.pid = beats[-1].n + 1, newest_pid
        else:
            self.next_n = None
        return beats

    def _last_still_there(self, fd: int) -> bool:
        """Whether the slot of the last heartbeat read still holds it (else the ring was started again)."""
        assert self.next_n is not None
        n = self.next_n - 1
        head = _HEAD.match(os.pread(fd, SLOT, (n % SLOTS) * SLOT))
        if head is not None:
            return int(head.group(2)) == n and int(head.group(4)) == self.pid
        beat = slot_beat(os.pread(fd, SLOT, (n % SLOTS) * SLOT), self.rank)
        return beat is not None and beat.n == n and beat.pid == self.pid

    def new_beats(self) -> list[Beat]:
        if self.next_n is None:
            return self._whole()
        found: list[Beat] = []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return found
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return found
            for _ in range(SLOTS):
                chunk = os.pread(fd, SLOT, (self.next_n % SLOTS) * SLOT)
                head = _HEAD.match(chunk)
                beat = None
                if head is None:  # written otherwise than the agent writes (key order, spaces): parsed whole
                    beat = slot_beat(chunk, self.rank)
                    if beat is None:
                        if not found and not self._last_still_there(fd):
                            os.close(fd)
                            fd = -1
                            return self._whole()  # the ring was started again (a new process of the rank)
                        break  # being written, or never written: next time
                n, pid = (int(head.group(2)), int(head.group(4))) if head is not None else (beat.n, beat.pid)
                if n == self.next_n and pid == self.pid:
                    beat = beat or slot_beat(chunk, self.rank)
                    if beat is None:
                        break
                    found.append(beat)
                    self.next_n += 1
                    continue
                if pid != self.pid or n > self.next_n:  # a new process of this rank, or the agent lapped the watcher
                    os.close(fd)
                    fd = -1
                    return [beat for beat in self._whole() if not found or beat.n > found[-1].n or beat.pid != found[-1].pid]
                if not found and not self._last_still_there(fd):
                    os.close(fd)
                    fd = -1
                    return self._whole()
                break  # an older heartbeat: nothing new
        except OSError:
            pass
        finally:
            if fd >= 0:
                os.close(fd)
        return found


def formats_of(data: bytes) -> set[int]:
    """The format versions ("v") of the heartbeats a ring holds that are JSON objects, whatever their version: a ring
    an agent of another compat wrote says another number than FORMAT."""
    found = set()
    for start in range(0, min(len(data), SLOTS * SLOT), SLOT):
        chunk = data[start:start + SLOT].strip()
        if not chunk:
            continue
        try:
            body = json.loads(chunk)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(body, dict) and isinstance(body.get("v"), int) and not isinstance(body.get("v"), bool):
            found.add(body["v"])
    return found


def slot_of(body: Mapping[str, Any]) -> bytes:
    """The slot the agent writes for the heartbeat ``body`` (compact JSON padded with spaces, a newline last). The
    reader's inverse, for FIXTURE rings (tests/watch: the agent, standard library only, keeps its own copy, and a test
    holds the two equal)."""
    text = json.dumps(dict(body), separators=(",", ":"))
    if len(text) >= SLOT:
        raise ValueError(f"a heartbeat of {len(text)} bytes does not fit a slot of {SLOT}")
    return (text + " " * (SLOT - 1 - len(text)) + "\n").encode()


def write_beat(path: Path, body: Mapping[str, Any]) -> None:
    """Write the heartbeat ``body`` into its slot (``body["n"] % SLOTS``) of the ring at ``path``, as the agent does
    (FIXTURE rings: compat itself never writes a ring)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if os.fstat(fd).st_size < SLOTS * SLOT:
            os.ftruncate(fd, SLOTS * SLOT)
        os.pwrite(fd, slot_of(body), (int(body["n"]) % SLOTS) * SLOT)
    finally:
        os.close(fd)
