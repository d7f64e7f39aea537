"""Run a helper child (an import probe, bash sourcing setvars.sh, an interpreter probe) so that it cannot outlive compat.

Side effects: starts one process in its own session (so its own process group) with PR_SET_PDEATHSIG and a marker in
its environment (COMPAT_CHILD_RUN=<id>, inherited by everything it starts); kills that whole group, and every process
still carrying the marker (found in /proc: what left the group with setsid), when the timeout passes, when the child
has ended, on Ctrl-C, and on SIGTERM/SIGHUP, which become :class:`Terminated` (a KeyboardInterrupt: exit 143 in the
CLI) while a child runs.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from ..processes import die_with_parent
from ..record import Record

COLLECT_S = 5.0  # after a kill: how long to wait for the last output and the exit status
MAX_TIMEOUT_S = 86400.0  # no helper child may be given more than a day (larger values overflow the OS's timers)
MARK_VAR = "COMPAT_CHILD_RUN"  # the marker every process a helper child starts inherits: the /proc sweep finds them by it
POLL_S = 0.2  # while a child runs: how often to look whether it has ended although its pipes are still held open
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """compat got SIGTERM or SIGHUP while a child ran; the child's process group has been killed."""


class ChildResult(Record):
    returncode: Optional[int]  # None: killed after the timeout
    stdout: bytes
    stderr: bytes
    timed_out: bool


def valid_timeout(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def env_timeout(name: str, default: float) -> float:
    """A timeout a test (or a slow machine) may change through the environment; junk (not a number, nan, inf, <= 0)
    keeps the default, and a value above MAX_TIMEOUT_S (a day) is taken as a day."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return min(value, MAX_TIMEOUT_S) if valid_timeout(value) else default


def run_child(argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
              pass_fds: Sequence[int] = (), overdue: Optional[Callable[[], bool]] = None) -> ChildResult:
    """Run ``argv`` to the end or to ``timeout`` seconds, stdin closed, stdout/stderr captured.

    ``overdue``, when given, is asked about every POLL_S seconds while the child runs (a child that reports its
    progress: the import probe's per-part limits); True ends the child as the timeout does (``timed_out``).

    Raises OSError when it cannot be started, ValueError for a timeout that cannot be kept (nan, inf, <= 0),
    KeyboardInterrupt (or :class:`Terminated`) after killing the child's group when compat is interrupted.
    A timeout above MAX_TIMEOUT_S is kept as MAX_TIMEOUT_S. Whatever the child started is killed when it ends,
    also what left its process group (setsid) as long as it kept the marker in its environment."""
    if not valid_timeout(timeout):
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {timeout!r}")
    timeout = min(float(timeout), MAX_TIMEOUT_S)
    import ctypes  # noqa: F401  (imported here, before the fork: the child only calls it, in die_with_parent)

    run_id = uuid.uuid4().hex
    environment = dict(os.environ if env is None else env)
    environment[MARK_VAR] = run_id
    process: Optional[subprocess.Popen] = None
    previous = _raise_on_termination()
    try:
        mask = _hold_signals()
        try:
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=environment, cwd=cwd, pass_fds=tuple(pass_fds),
                start_new_session=True, preexec_fn=_child_setup(os.getpid(), mask),
            )
        finally:
            _release_signals(mask)  # a signal that came meanwhile is raised here, with `process` known
        return _wait(process, timeout, run_id, overdue)
    except BaseException:
        if process is not None:
            _kill_group(process, run_id)
            _reap(process)
        raise
    finally:
        _restore_handlers(previous)


def _wait(process: subprocess.Popen, timeout: float, run_id: str, overdue: Optional[Callable[[], bool]] = None) -> ChildResult:
    """Until the child has ended and its output is read, or ``timeout`` (or ``overdue()``). A child that has ended while
    something it started (in its group or, after setsid, outside it) still holds its pipes open has ended: that
    leftover is killed and the output read, instead of waiting for the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (overdue is not None and process.poll() is None and overdue()):
            _kill_group(process, run_id)
            out, err = _reap(process)
            return ChildResult(None, out, err, True)
        try:
            out, err = process.communicate(timeout=min(remaining, POLL_S))
            break
        except subprocess.TimeoutExpired:
            if process.poll() is not None:  # ended; a leftover holds the pipes
                _kill_group(process, run_id)
                out, err = _reap(process)
                return ChildResult(process.returncode, out, err, False)
    _kill_group(process, run_id)  # whatever it started in the background ends with it
    return ChildResult(process.returncode, out or b"", err or b"", False)


def _kill_group(process: subprocess.Popen, run_id: str) -> None:
    """SIGKILL the child's process group, then sweep every process still carrying the run's marker (/proc)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    from ..live.supervise import sweep  # the same /proc sweep doctor --live ends with

    mask = _hold_signals()  # a second Ctrl-C cannot cut the sweep short; it is raised when the sweep is done
    try:
        sweep(run_id, (), wait=2.0, variable=MARK_VAR)
    finally:
        _release_signals(mask)


def _reap(process: subprocess.Popen) -> tuple[bytes, bytes]:
    """The output so far and the exit status of a killed child, without waiting for anything it leaked."""
    try:
        out, err = process.communicate(timeout=COLLECT_S)
        return out or b"", err or b""
    except subprocess.TimeoutExpired as exc:  # someone outside the group holds the pipes open
        out, err = exc.output or b"", exc.stderr or b""
    except BaseException:  # a second Ctrl-C during cleanup: still reap, then let it through
        _close(process)
        process.kill()
        raise
    _close(process)
    process.kill()
    try:
        process.wait(timeout=COLLECT_S)
    except subprocess.TimeoutExpired:
        pass
    return out, err


def _close(process: subprocess.Popen) -> None:
    for stream in (process.stdout, process.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _child_setup(parent: int, mask: Optional[set[int]]) -> Callable[[], None]:
    """preexec_fn: die with compat, and give the child the signal mask compat had before holding signals."""

    def setup() -> None:
        die_with_parent()
        if os.getppid() != parent:  # compat died before PR_SET_PDEATHSIG was in place
            os._exit(1)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return setup


def _hold_signals() -> Optional[set[int]]:
    """Hold Ctrl-C/SIGTERM/SIGHUP while the child is being started, so none can land between fork and bookkeeping."""
    try:
        return set(signal.pthread_sigmask(signal.SIG_BLOCK, _HELD))
    except (ValueError, OSError):
        return None


def _release_signals(mask: Optional[set[int]]) -> None:
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _raise_on_termination() -> dict[int, Any]:
    """SIGTERM/SIGHUP raise :class:`Terminated` while the child runs (unless someone else already handles them)."""

    def handler(signum: int, _frame: Any) -> None:
        raise Terminated(f"signal {signal.Signals(signum).name}")

    previous: dict[int, Any] = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(number) in (signal.SIG_DFL, None):
                previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread: PDEATHSIG still covers the child
            pass
    return previous


def _restore_handlers(previous: dict[int, Any]) -> None:
    for number, handler in previous.items():
        signal.signal(number, handler)
