"""Test helpers: find processes by a marker in their environment (read from /proc) and wait, bounded.

A test sets ``COMPAT_TEST_MARK=<random>`` in compat's environment; every child compat starts inherits it,
so the children can be found from outside without knowing their pids, command lines or user.
Side effects: reads /proc; ``kill_marked`` sends SIGKILL to the marked processes (test cleanup only).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable

MARK_VARIABLE = "COMPAT_TEST_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


def _alive(pid: int) -> bool:
    """Running or sleeping (a zombie has ended; only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def marked(mark: str, exclude: Iterable[int] = ()) -> list[int]:
    """Pids of the live processes whose environment holds COMPAT_TEST_MARK=mark."""
    wanted = f"{MARK_VARIABLE}={mark}".encode()
    skip = set(exclude) | {os.getpid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if wanted in environ and _alive(int(entry)):
            found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is true; False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def kill_marked(mark: str) -> None:
    """Cleanup after a failed test: nothing a test started may stay behind on the shared machine."""
    for _ in range(3):
        pids = marked(mark)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
