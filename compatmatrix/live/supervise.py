"""Start the launch's processes, hold them to a hard deadline, and leave nothing running.

Every process compat starts runs in a session of its own and carries COMPAT_LIVE_RUN=<id> in its environment,
which its children (torchrun's workers, mpirun's hydra proxies and ranks) inherit. At the end -- success,
failure or timeout -- every process still carrying the id is found in /proc and killed, so a rank that
escaped its process group (a daemonised proxy, a setsid) is not left behind either.

Should compat be killed outright (SIGKILL, the OOM killer), the launchers' guardian (launchers/guard.py, as compat
launch starts it) does that sweep: PR_SET_PDEATHSIG reaches the launcher only, and torchrun's workers are not its to
pass a SIGKILL on to. Every process gets TMPDIR=<run folder>/tmp, so what it leaves in the temp folder (torchrun's
torchelastic_* folder, a script's temporary files) goes with the run folder.

Output: what each process prints (stdout and stderr) is read through a pipe as it comes; compat keeps its last
TAIL_BYTES (``ProcessEnd.log``) and hands every chunk to ``on_output`` (a parser that keeps what it needs), so
neither memory nor disk grows with a chatty process's output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..processes import alive, die_with_parent, raise_on_termination, signal_all, sweep, tagged_processes

RUN_ID_VAR = "COMPAT_LIVE_RUN"
TAIL_BYTES = 64 * 1024  # of each process's output, kept for the report (ProcessEnd.log: its last 20,000 characters)
CHUNK = 64 * 1024


@dataclass(frozen=True)
class ProcessEnd:
    command: tuple[str, ...]
    pid: int
    returncode: Optional[int]  # None: still running at the deadline, then killed
    log: str  # the end of what it printed (the launcher's own output; ranks write their own logs): TAIL_BYTES at most


@dataclass(frozen=True)
class Supervised:
    run_id: str
    ends: tuple[ProcessEnd, ...]
    timed_out: bool
    stopped_early: bool  # a process failed and compat stopped the others (spawn), as torchrun does
    seconds: float
    dumped_stacks: bool  # SIGUSR1 sent to the ranks before killing them
    leftovers: tuple[int, ...]  # pids still alive after the sweep (should be empty)
    died: tuple[int, ...] = ()  # ranks seen gone before finishing, without an error of their own, in the order seen
    stopped: tuple[int, ...] = ()  # ranks compat itself stopped (still running when the run was cut short)


class OutputTail:
    """The last ``limit`` bytes of a stream (a ring: older bytes are dropped as new ones come) and its total length."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self.limit, self.total, self.buffer = limit, 0, bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buffer += chunk
        if len(self.buffer) > 2 * self.limit:
            del self.buffer[:-self.limit]

    def text(self) -> str:
        return bytes(self.buffer[-self.limit:]).decode("utf-8", errors="replace")


def _drain(fd: int, tail: OutputTail, index: int, on_output: Optional[Callable[[int, bytes], None]]) -> None:
    """Read a process's output pipe to its end into ``tail`` and ``on_output`` (dropped if it raises: the pipe is
    read on, so the process never blocks on a full pipe)."""
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return
            tail.feed(chunk)
            if on_output is not None:
                try:
                    on_output(index, chunk)
                except Exception:  # noqa: BLE001 - a parser's fault must not stop the draining
                    on_output = None
    except OSError:
        return
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def start_guardian(pgids: Sequence[int], run_id: str, variable: str) -> Optional[subprocess.Popen]:
    """The launchers' guardian (launchers/guard.py) for these process groups and this run id: it sweeps them should
    compat die without doing so itself. None if it cannot start."""
    from pathlib import Path as _Path

    package_parent = str(_Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != variable}
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        return subprocess.Popen([sys.executable, "-m", "compatmatrix.launchers.guard", ",".join(map(str, pgids)), run_id, str(os.getpid()), variable],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError:
        return None


def status_files(run_dir: Path) -> list[tuple[str, int, Path]]:
    """(host, pid, path) of the status files the ranks write first thing: proc-<host>-<pid>.json."""
    found = []
    for path in run_dir.glob("proc-*.json"):
        host, _, number = path.stem[len("proc-"):].rpartition("-")
        if number.isdigit():
            found.append((host, int(number), path))
    return sorted(found)


def rank_pids(run_dir: Path) -> list[int]:
    """The pids of the ranks on this host (a shared --run-dir also holds other nodes' files)."""
    here = os.uname()[1]
    return [pid for host, pid, _ in status_files(run_dir) if host == here]


CLEANUP_BUDGET_S = 4.0


def _sweep_unbothered(run_id: str, groups: Sequence[int]) -> tuple[int, ...]:
    """sweep() with TERM/HUP/INT held back, so a second signal cannot cut the cleanup short."""
    held = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (ValueError, OSError):
        held = set()
    try:
        return sweep(run_id, groups, wait=3.0, variable=RUN_ID_VAR)
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _stop_guardian(guardian: Optional[subprocess.Popen]) -> None:
    if guardian is not None:
        guardian.kill()
        try:
            guardian.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def rank_outcomes(run_dir: Path) -> tuple[list[int], list[int]]:
    """(dead, failed) ranks on this host. Dead: the process is gone although its record says neither done nor
    failed (a signal, os._exit, a launcher's kill; under torchrun and mpirun the ranks are not compat's children,
    so this is how compat notices). Failed: the rank recorded an error (it may still be alive, stuck in teardown)."""
    from .protocol import read_record_text, read_status

    here = os.uname()[1]
    dead, failed = [], []
    for host, pid, path in status_files(run_dir):
        if host != here:
            continue
        try:
            status = read_status(read_record_text(path))[0]
        except (OSError, ValueError):  # being written, or not a rank record of this protocol (ProtocolError)
            continue
        if status.error is not None:
            failed.append(pid)
        elif status.stage != "done" and not alive(pid):
            dead.append(pid)
    return dead, failed


def _wait(processes: Sequence[subprocess.Popen], deadline: float, grace_after_failure: float, run_dir: Path,
          on_look: Optional[Callable[[], None]] = None) -> tuple[bool, bool, tuple[int, ...]]:
    """Until all end (False, False), the deadline passes (True, _), or a process or rank failed and the grace ran
    out (_, True); with the ranks seen dying on the way."""
    failed_at: Optional[float] = None
    dead: dict[int, None] = {}  # insertion order = the order they were seen dead
    errored = False
    last_look = 0.0
    while True:
        codes = [p.poll() for p in processes]
        if all(code is not None for code in codes):
            dead.update(dict.fromkeys(rank_outcomes(run_dir)[0]))
            return False, False, tuple(dead)
        now = time.monotonic()
        if now - last_look > 0.1:
            newly_dead, failed = rank_outcomes(run_dir)
            dead.update(dict.fromkeys(newly_dead))
            errored = errored or bool(failed)
            last_look = now
            if on_look is not None:
                on_look()
        if failed_at is None and (dead or errored or any(code not in (None, 0) for code in codes)):
            failed_at = now  # one rank failed: the others may wait for it forever
        if failed_at is not None and now - failed_at > grace_after_failure:
            return False, True, tuple(dead)
        if now >= deadline:
            return True, False, tuple(dead)
        time.sleep(0.05)


def supervise(
    commands: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    run_dir: Path,
    timeout: float,
    run_id: str,
    grace_after_failure: float = 3.0,
    stack_dump_wait: float = 0.7,
    cwd: Optional[Path] = None,
    on_look: Optional[Callable[[], None]] = None,
    on_output: Optional[Callable[[int, bytes], None]] = None,
) -> Supervised:
    """Run ``commands`` together until all end or ``timeout`` seconds pass; then make sure none is left. They run in
    ``cwd`` (default: ``run_dir``); ``on_output(index, chunk)`` gets command ``index``'s output as it comes."""
    started = time.monotonic()
    processes: list[subprocess.Popen] = []
    tails: list[OutputTail] = []
    readers: list[threading.Thread] = []
    guardian: Optional[subprocess.Popen] = None
    temp = run_dir / "tmp"
    temp.mkdir(exist_ok=True)
    wait_until = started + max(timeout * 0.8, timeout - CLEANUP_BUDGET_S)  # the stack dump and the sweep fit in the limit
    with raise_on_termination():  # SIGTERM/SIGHUP become processes.Terminated; a SIGTERM that came during the sweep is raised after it
        try:
            for index, (command, env) in enumerate(zip(commands, envs)):
                read_end, write_end = os.pipe()
                try:
                    processes.append(subprocess.Popen(
                        list(command), env={**env, RUN_ID_VAR: run_id, "TMPDIR": str(temp)}, stdin=subprocess.DEVNULL, stdout=write_end,
                        stderr=subprocess.STDOUT, start_new_session=True, cwd=str(cwd or run_dir), preexec_fn=die_with_parent,
                    ))
                except BaseException:
                    os.close(read_end)
                    raise
                finally:
                    os.close(write_end)
                tails.append(OutputTail())
                readers.append(threading.Thread(target=_drain, args=(read_end, tails[-1], index, on_output), name=f"compat-output-{index}", daemon=True))
                readers[-1].start()
            guardian = start_guardian([p.pid for p in processes], run_id, RUN_ID_VAR)
            timed_out, stopped_early, died = _wait(processes, wait_until, grace_after_failure, run_dir, on_look)
            dumped = False
            codes_at_stop = [p.poll() for p in processes]
            stopped: list[int] = []
            if timed_out or stopped_early:
                ranks = [pid for pid in rank_pids(run_dir) if pid in set(tagged_processes(run_id, RUN_ID_VAR))]
                stopped = ranks
                if ranks:
                    signal_all(ranks, signal.SIGUSR1)  # the worker's faulthandler writes every thread's stack to its log
                    dumped = True
                    time.sleep(stack_dump_wait)
        except BaseException:  # Ctrl-C, SIGTERM/SIGHUP (turned into an exception), a failed Popen: leave nothing behind
            _sweep_unbothered(run_id, [p.pid for p in processes])
            _stop_guardian(guardian)
            raise
        leftovers = _sweep_unbothered(run_id, [p.pid for p in processes])
        _stop_guardian(guardian)
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for reader in readers:  # the pipes close when the last process holding them is gone (the sweep saw to that)
        reader.join(timeout=5)
    ends = []
    for process, command, tail, code in zip(processes, commands, tails, codes_at_stop):
        ends.append(ProcessEnd(tuple(command), process.pid, code, tail.text()[-20000:]))
    return Supervised(run_id, tuple(ends), timed_out, stopped_early, time.monotonic() - started, dumped, leftovers, died, tuple(stopped))
