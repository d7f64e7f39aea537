"""Run a helper child (an import probe, bash sourcing setvars.sh, an interpreter probe) so that it cannot outlive compat.

Side effects: starts one process in its own session (so its own process group) with PR_SET_PDEATHSIG and a marker in
its environment (COMPAT_CHILD_RUN=<id>, inherited by everything it starts); kills that whole group, and every process
still carrying the marker (found in /proc: what left the group with setsid), when the timeout passes, when the child
has ended, on Ctrl-C, and on SIGTERM/SIGHUP, which become processes.Terminated (a KeyboardInterrupt: exit 143 in the
CLI) while a child runs. Its output is read as it comes and only the last OUTPUT_LIMIT bytes of each stream are kept,
so a child that writes without end cannot fill compat's memory.
"""

from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from ..processes import die_with_parent, raise_on_termination, sweep
from ..record import Record

COLLECT_S = 5.0  # after a kill: how long to wait for the last output and the exit status
MAX_TIMEOUT_S = 86400.0  # no helper child may be given more than a day (larger values overflow the OS's timers)
MARK_VAR = "COMPAT_CHILD_RUN"  # the marker every process a helper child starts inherits: the /proc sweep finds them by it
POLL_S = 0.2  # while a child runs: how often to look whether it has ended although its pipes are still held open
OUTPUT_LIMIT = 256 << 10  # bytes of stdout and of stderr kept (the last ones); what came before is dropped, and a note says so
READ_CHUNK = 64 << 10
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


_SIGNALS = {s.value: s.name for s in signal.Signals}


def describe_exit(returncode: Optional[int]) -> str:
    if returncode is None:
        return "no exit status (killed after the timeout)"
    if returncode < 0:
        return f"killed by signal {_SIGNALS.get(-returncode, -returncode)}"
    return f"exit status {returncode}"


class ChildResult(Record):
    """How a child ended. ``stdout``/``stderr``: the last OUTPUT_LIMIT bytes of each, after a dropped_note() line
    when earlier output was dropped (``stdout_dropped``/``stderr_dropped`` bytes)."""

    returncode: Optional[int]  # None: killed after the timeout
    stdout: bytes
    stderr: bytes
    timed_out: bool
    stdout_dropped: int = 0
    stderr_dropped: int = 0


def dropped_note(count: int) -> bytes:
    """The line put before a stream's kept output when its first ``count`` bytes were dropped."""
    return f"[compat: the first {count} bytes of this output were dropped; the last {OUTPUT_LIMIT} follow]\n".encode()


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
    """Run ``argv`` to the end or to ``timeout`` seconds, stdin closed, stdout/stderr captured (the last OUTPUT_LIMIT
    bytes of each: see :class:`ChildResult`).

    ``overdue``, when given, is asked about every POLL_S seconds while the child runs (a child that reports its
    progress: the import probe's per-part limits); True ends the child as the timeout does (``timed_out``).

    Raises OSError when it cannot be started, ValueError for a timeout that cannot be kept (nan, inf, <= 0),
    KeyboardInterrupt (or processes.Terminated) after killing the child's group when compat is interrupted.
    A timeout above MAX_TIMEOUT_S is kept as MAX_TIMEOUT_S. Whatever the child started is killed when it ends,
    also what left its process group (setsid) as long as it kept the marker in its environment."""
    if not valid_timeout(timeout):
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {timeout!r}")
    timeout = min(float(timeout), MAX_TIMEOUT_S)
    import ctypes  # noqa: F401  (imported here, before the fork: the child only calls it, in die_with_parent)

    run_id = os.urandom(16).hex()  # what uuid4().hex draws, without importing uuid (and platform with it)
    environment = dict(os.environ if env is None else env)
    environment[MARK_VAR] = run_id
    process: Optional[subprocess.Popen] = None
    output: Optional[_Output] = None
    with raise_on_termination(replace=False):  # SIGTERM/SIGHUP raise, unless someone else already handles them
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
            output = _Output(process)
            return _wait(process, output, timeout, run_id, overdue)
        except BaseException:
            if process is not None:
                _kill_group(process, run_id)
                _reap(process, output if output is not None else _Output(process))
            raise
        finally:
            if output is not None:
                output.close()


class _Output:
    """A child's stdout and stderr, read as they come; only the last OUTPUT_LIMIT bytes of each are kept."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.selector = selectors.DefaultSelector()
        self.kept = {"stdout": bytearray(), "stderr": bytearray()}
        self.dropped = {"stdout": 0, "stderr": 0}
        for name in ("stdout", "stderr"):
            stream = getattr(process, name)
            if stream is not None:
                self.selector.register(stream, selectors.EVENT_READ, name)

    @property
    def done(self) -> bool:
        """Both pipes are at their end (or closed)."""
        return not self.selector.get_map()

    def read(self, seconds: float) -> bool:
        """Read what comes within ``seconds`` (less once both pipes are at their end); True: both are."""
        deadline = time.monotonic() + seconds
        while not self.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for key, _ in self.selector.select(remaining):
                try:
                    data = os.read(key.fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._drop_stream(key.fileobj)
                    continue
                kept = self.kept[key.data]
                kept += data
                if len(kept) > 2 * OUTPUT_LIMIT:  # trimmed now and then, not on every read: at most 2 limits in memory
                    self.dropped[key.data] += len(kept) - OUTPUT_LIMIT
                    del kept[:-OUTPUT_LIMIT]
        return True

    def _drop_stream(self, stream: Any) -> None:
        self.selector.unregister(stream)
        try:
            stream.close()
        except OSError:
            pass

    def close(self) -> None:
        """Close both pipes (again: nothing happens)."""
        for key in list((self.selector.get_map() or {}).values()):
            self._drop_stream(key.fileobj)
        self.selector.close()

    def result(self, returncode: Optional[int], timed_out: bool) -> ChildResult:
        streams = {}
        for name, kept in self.kept.items():
            if len(kept) > OUTPUT_LIMIT:
                self.dropped[name] += len(kept) - OUTPUT_LIMIT
                del kept[:-OUTPUT_LIMIT]
            streams[name] = (dropped_note(self.dropped[name]) if self.dropped[name] else b"") + bytes(kept)
        return ChildResult(returncode, streams["stdout"], streams["stderr"], timed_out, self.dropped["stdout"], self.dropped["stderr"])


def _wait(process: subprocess.Popen, output: _Output, timeout: float, run_id: str, overdue: Optional[Callable[[], bool]] = None) -> ChildResult:
    """Until the child has ended and its output is read, or ``timeout`` (or ``overdue()``). A child that has ended while
    something it started (in its group or, after setsid, outside it) still holds its pipes open has ended: that
    leftover is killed and the output read, instead of waiting for the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (overdue is not None and process.poll() is None and overdue()):
            _kill_group(process, run_id)
            _reap(process, output)
            return output.result(None, True)
        step = min(remaining, POLL_S)
        if not output.done:
            if output.read(step):
                continue  # at the end of both pipes: wait for the exit status (the loop keeps the limits)
            if process.poll() is not None:  # ended; a leftover holds the pipes
                _kill_group(process, run_id)
                _reap(process, output)
                return output.result(process.returncode, False)
            continue
        try:
            process.wait(timeout=step)
            break
        except subprocess.TimeoutExpired:
            pass  # it closed its pipes but runs on
    _kill_group(process, run_id)  # whatever it started in the background ends with it
    return output.result(process.returncode, False)


def _kill_group(process: subprocess.Popen, run_id: str) -> None:
    """SIGKILL the child's process group, then sweep every process still carrying the run's marker (/proc)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    mask = _hold_signals()  # a second Ctrl-C cannot cut the sweep short; it is raised when the sweep is done
    try:
        sweep(run_id, (), wait=2.0, variable=MARK_VAR)
    finally:
        _release_signals(mask)


def _reap(process: subprocess.Popen, output: _Output) -> None:
    """Read the rest of a killed child's output (up to COLLECT_S: someone outside the group may hold the pipes open)
    and its exit status, without waiting for anything it leaked."""
    try:
        output.read(COLLECT_S)
    except BaseException:  # a second Ctrl-C during cleanup: still reap, then let it through
        output.close()
        process.kill()
        raise
    output.close()
    process.kill()  # nothing when it has ended
    try:
        process.wait(timeout=COLLECT_S)
    except subprocess.TimeoutExpired:
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
