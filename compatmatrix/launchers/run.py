"""Run a launch: the launcher in a process group of its own, signals passed on, its exit code passed back, and
nothing of the job left behind.

* The launcher (torchrun, mpirun) leads a new process group and gets SIGTERM should compat die (PR_SET_PDEATHSIG:
  a launcher can still stop its ranks on SIGTERM; a SIGKILL could not be passed on).
* Ctrl-C, SIGTERM and SIGHUP to compat go to that group (the launcher then stops its ranks, as when it is run by
  hand). A second signal, or the job still running ``COMPAT_LAUNCH_GRACE`` seconds (30) after the first, kills it.
* Every process of the job carries COMPAT_LAUNCH_RUN=<id> in its environment (torchrun starts its workers in
  sessions of their own, so the group does not reach them): when the launcher ends, whatever still carries the id
  is stopped (TERM, then KILL), as compat doctor --live does.
* Should compat itself be SIGKILLed, a guardian process (launchers/guard.py) does that sweep: Intel MPI's mpirun is
  a shell script, and the parent-death signal that ends it does not reach hydra and the ranks.
* Exit code: the launcher's own; 128+N when it died of signal N (the shell's convention).
* Standard input is passed on, except a terminal: the job is not the terminal's foreground group, and a read would stop it.

Side effects: starts processes, sends signals, installs signal handlers while the job runs (restored afterwards).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from ..environment.child import env_timeout
from ..errors import CompatError
from ..processes import new_run_id, sweep
from .interface import Invocation

RUN_ID_VAR = "COMPAT_LAUNCH_RUN"
GRACE_S = 30.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _launcher_setup(parent: int, mask: Optional[set[int]]):
    def setup() -> None:
        os.setpgid(0, 0)
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # compat died before the parent-death signal was in place
            os._exit(1)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return setup


def run_invocation(invocation: Invocation, base_env: Mapping[str, str], say=lambda line: None) -> int:
    """Run the launch to its end; the exit code to leave with."""
    import ctypes  # noqa: F401  (loaded before the fork: the child only calls it)

    run_id = new_run_id()
    env = {**invocation.environment(base_env), RUN_ID_VAR: run_id}
    stdin = subprocess.DEVNULL if _is_terminal(sys.stdin) else None
    grace = env_timeout("COMPAT_LAUNCH_GRACE", GRACE_S)
    forward = _Forwarder()
    code, killed = 0, False
    guardian: Optional[subprocess.Popen] = None
    previous = _handle_signals(forward)
    try:
        process = _start_launcher(invocation, env, stdin, forward)
        guardian = _start_guardian(process.pid, run_id, base_env)
        code, killed = _wait(process, forward.received, grace)
    finally:
        left = sweep(run_id, [forward.process.pid] if forward.process is not None else [], wait=3.0, variable=RUN_ID_VAR)
        if guardian is not None:
            guardian.kill()
            guardian.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if left:
        say(f"compat launch: {len(left)} process(es) of the job could not be stopped: {', '.join(map(str, left))}")
    received = forward.received
    if killed or (received and len(received) > 1):  # compat had to kill the job: the signal that asked for it
        return 128 + received[0]
    return 128 - code if code < 0 else code


class _Forwarder:
    """compat launch's handler of the FORWARDED signals: each goes to the launcher's process group once it runs (a
    second one: SIGKILL); ``received`` keeps them in order."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.process: Optional[subprocess.Popen] = None

    def __call__(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL if len(self.received) > 1 else signum)
            except (ProcessLookupError, PermissionError):
                pass


def _handle_signals(forward: _Forwarder) -> dict:
    """Install ``forward`` for the FORWARDED signals; the handlers it replaced (none off the main thread: signals keep theirs)."""
    try:
        return {sig: signal.signal(sig, forward) for sig in FORWARDED}
    except ValueError:  # not the main thread: signals keep their handlers
        return {}


def _start_launcher(invocation: Invocation, env: Mapping[str, str], stdin: Optional[int], forward: _Forwarder) -> subprocess.Popen:
    """Start the launcher in a process group of its own, the FORWARDED signals blocked until ``forward`` knows it
    (one that came meanwhile is forwarded then); CompatError when it cannot start."""
    try:
        mask: Optional[set[int]] = set(signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED))
    except (ValueError, OSError):
        mask = None
    try:
        forward.process = process = subprocess.Popen(list(invocation.argv), env=env, stdin=stdin, preexec_fn=_launcher_setup(os.getpid(), mask))
    except OSError as exc:
        raise CompatError(f"Cannot start {invocation.argv[0]}: {exc.strerror or exc}.",
                          "Check that the launcher exists and is executable (--python PATH for torchrun, --mpirun PATH for mpirun).") from None
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal that came meanwhile is forwarded now
    return process


def _is_watch_site(entry: str) -> bool:
    """A PYTHONPATH entry that is compat launch --watch's agent folder (compatmatrix/watch/site)."""
    return Path(entry).resolve() == Path(__file__).resolve().parents[1] / "watch" / "site"


def _start_guardian(pgid: int, run_id: str, base_env: Mapping[str, str]) -> Optional[subprocess.Popen]:
    """The process that stops the job should compat be killed outright (launchers/guard.py); None if it cannot start."""
    package_parent = str(Path(__file__).resolve().parents[2])
    # not the watch's (compat launch --watch): its agent is no part of the guardian
    env = {k: v for k, v in base_env.items() if k != RUN_ID_VAR and not k.startswith("COMPAT_WATCH_")}
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not _is_watch_site(p)])
    try:
        return subprocess.Popen([sys.executable, "-m", "compatmatrix.launchers.guard", str(pgid), run_id, str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError:
        return None


def _wait(process: subprocess.Popen, received: list[int], grace: float) -> tuple[int, bool]:
    """The launcher's return code, and whether compat had to kill it (a second signal, or the grace ran out)."""
    first: Optional[float] = None
    while True:
        try:
            return process.wait(timeout=0.2), False
        except subprocess.TimeoutExpired:
            pass
        if received and first is None:
            first = time.monotonic()
        if len(received) > 1 or (first is not None and time.monotonic() - first > grace):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return process.wait(), True


def _is_terminal(stream) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
