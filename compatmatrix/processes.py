"""Process supervision shared by the installer runner, helper children (environment/child.py), the live supervisor
and compat launch: children that die with compat (PR_SET_PDEATHSIG), bounded runs in a process group of their own,
the /proc sweep of every process tagged with a run's id (``sweep``), the one :class:`Terminated` (SIGTERM / SIGHUP,
a KeyboardInterrupt) and the two ways signals become exceptions: ``raise_on_termination`` while a child runs, and
``Interruptions`` with sections that hold them back until a critical step is done.

Side effects: starts processes, sends signals and kills process groups; reads /proc (kill_children, sweep);
installs signal handlers while a ``raise_on_termination`` or ``Interruptions`` block is active (restored afterwards).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional


def die_with_parent() -> None:
    """In a child process (preexec_fn): get SIGKILL when compat dies, so no child outlives it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group a child leads (start_new_session=True), then reap the child (bounded)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def run_bounded(argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run ``argv`` to the end with its output captured (text), in a session of its own with PR_SET_PDEATHSIG.
    Past ``timeout`` seconds (subprocess.TimeoutExpired), or on any exception here (Ctrl-C), the whole
    process group is killed before the exception goes on."""
    process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                               env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True, preexec_fn=die_with_parent)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException:
        kill_group(process)
        try:
            process.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            pass
        raise
    return subprocess.CompletedProcess(list(argv), process.returncode, out, err)


def kill_children() -> list[int]:
    """SIGKILL every child of this process (and the process group each one leads): what an interrupted step
    started through code that does not clean up after a KeyboardInterrupt. Returns their pids; reaping
    them is left to their Popen objects (a zombie holds nothing)."""
    me = os.getpid()
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[1]) == me and fields[0] != b"Z":
            pid, group = int(entry), int(fields[2])
            try:
                if group == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed.append(pid)
    return killed


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (docker stop, a cancelled CI job, a closed terminal): handled like Ctrl-C. The only class of
    it: cli.main tells it from Ctrl-C by type (exit 143, not 130)."""


@contextmanager
def raise_on_termination(replace: bool = True) -> Iterator[None]:
    """Inside the block SIGTERM / SIGHUP raise :class:`Terminated` (Ctrl-C is a KeyboardInterrupt already); the
    handlers before are restored at its end. ``replace=False`` leaves a signal alone that someone else already
    handles (an ``Interruptions`` block around a helper child). Outside the main thread nothing changes
    (PR_SET_PDEATHSIG still takes the direct children)."""

    def handler(signum: int, _frame: Any) -> None:
        raise Terminated(f"signal {signal.Signals(signum).name}")

    previous: dict[int, Any] = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        try:
            if replace or signal.getsignal(number) in (signal.SIG_DFL, None):
                previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)


# --- the /proc sweep: every process of a run carries RUN_VARIABLE=<id> in its environment, and its children inherit it

def new_run_id() -> str:
    import uuid  # here: processes is imported on the static paths too

    return uuid.uuid4().hex[:16]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def tagged_processes(run_id: str, variable: str) -> list[int]:
    """Pids of live processes whose environment carries this run's id (readable ones: our own); ``variable`` names
    the marker (doctor --live, compat launch and helper children each tag theirs with their own)."""
    marker = f"{variable}={run_id}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return [pid for pid in found if pid != os.getpid()]


def signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def sweep(run_id: str, groups: Sequence[int], wait: float, variable: str) -> tuple[int, ...]:
    """Kill everything left of the run: TERM the groups and tagged processes, then KILL what is still there."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    signal_all(tagged_processes(run_id, variable), signal.SIGTERM)
    deadline = time.monotonic() + min(1.0, wait)
    while time.monotonic() < deadline and tagged_processes(run_id, variable):
        time.sleep(0.05)
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait
    left = tagged_processes(run_id, variable)
    while left and time.monotonic() < deadline:
        signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
        left = tagged_processes(run_id, variable)
    return tuple(left)


class Interruptions:
    """Inside the block, SIGINT raises KeyboardInterrupt and SIGTERM / SIGHUP raise Terminated, except within
    ``held()``, where the signal is remembered and raised when the held section ends (or dropped)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.depth = 0
        self.pending: Optional[int] = None
        self.saved: dict[int, object] = {}

    def __enter__(self) -> "Interruptions":
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self.saved[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self.saved.items():
            signal.signal(number, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.depth:
            self.pending = signum
            return
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated

    @contextmanager
    def held(self, drop: bool = False) -> Iterator[None]:
        """Signals wait until the section ends; then they are raised, or (``drop``) forgotten."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if self.depth == 0 and self.pending is not None:
            signum, self.pending = self.pending, None
            if not drop:
                raise KeyboardInterrupt if signum == signal.SIGINT else Terminated


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` (loopback, or every address for another host name) at this moment; binds a socket
    for that moment."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host in ("127.0.0.1", "localhost") else "", 0))
        return int(sock.getsockname()[1])


def rank_command(command: Sequence[str], python: str) -> list[str]:
    """What each rank runs: COMMAND as given, with the interpreter put in front of a script, ``-m MODULE`` or ``-c CODE``
    (compat launch's rule, for every launcher and for the watch's spawn)."""
    if command and (command[0].endswith(".py") or command[0] in ("-m", "-c")):
        return [python, *command]
    return list(command)
