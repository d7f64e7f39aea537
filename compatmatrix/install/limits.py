"""How long each network phase of an install may take and how big what it reads may be, and the overall
deadline that holds even against a server that sends one byte a second.

A per-read timeout (requests' ``timeout``) never fires against such a server, so each network operation
runs under ``deadline(seconds)``: a SIGALRM timer that raises ``DeadlineExceeded`` in the main thread,
interrupting a blocked read. Subprocesses (pip) get their own deadline in processes.run_bounded.

The TEST-ONLY variable ``COMPAT_TEST_LIMITS`` (e.g. ``page_s=3,wheel_bytes=1048576``) overrides the values
so tests need not wait minutes or send GiBs; it is inert unless set. Side effects: SIGALRM handler and
timer while a deadline is active (restored afterwards); off the main thread, a timer thread that calls the caller's stop.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

TEST_LIMITS_VARIABLE = "COMPAT_TEST_LIMITS"
MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    preflight_s: float = 30.0  # one host's first answer (headers)
    page_s: float = 120.0  # one index page, whole
    download_s: float = 3600.0  # one planned wheel, whole
    read_s: float = 60.0  # silence on a connection before it is given up
    pip_s: float = 1800.0  # pip's dry-run (plan) and pip download (dependencies)
    install_s: float = 3600.0  # the installer
    page_bytes: int = 64 * MIB  # an index page
    wheel_bytes: int = 8 * 1024 * MIB  # one planned wheel


def limits() -> Limits:
    """The limits in force: the defaults, or the TEST-ONLY overrides of COMPAT_TEST_LIMITS."""
    text = os.environ.get(TEST_LIMITS_VARIABLE, "")
    if not text:
        return Limits()
    fields = {f.name: f.type for f in dataclasses.fields(Limits)}
    values: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        name = name.strip()
        if name in fields:
            try:
                values[name] = int(value) if name.endswith("_bytes") else float(value)
            except ValueError:
                continue
    return dataclasses.replace(Limits(), **values)  # type: ignore[arg-type]


class DeadlineExceeded(Exception):
    """An operation ran past its overall deadline (raised by the SIGALRM timer)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete answer within {seconds:.0f} s")
        self.seconds = seconds


@contextmanager
def deadline(seconds: float, stop: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Raise DeadlineExceeded in the block after ``seconds``, even in a blocked read. Only the main thread can
    take signals: elsewhere, ``stop`` (which must make the block's blocked read fail: severable.Severable.sever) is
    called by a timer after ``seconds`` and the block's failure becomes DeadlineExceeded; without ``stop`` the block
    runs with the per-read timeouts alone."""
    if threading.current_thread() is not threading.main_thread():
        if stop is None:
            yield
            return
        fired = threading.Event()

        def cut() -> None:
            fired.set()
            stop()

        timer = threading.Timer(max(seconds, 0.001), cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception:
            if fired.is_set():
                raise DeadlineExceeded(seconds) from None
            raise
        finally:
            timer.cancel()
        return

    def expire(signum, frame):  # noqa: ARG001
        raise DeadlineExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def mib(size: int) -> str:
    return f"{size / MIB:.0f} MiB" if size >= MIB else f"{size} bytes"
