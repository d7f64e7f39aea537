"""compat launch --watch --launcher spawn: compat starts the ranks of this host itself, one process each, with RANK /
WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR (loopback) / MASTER_PORT (a free one) in its environment,
as doctor --live's spawn does. The ranks are compat's own children, so a rank's exit status or signal is known
exactly (``exits``: pid -> (waitpid status, when), read by the watcher). When one rank fails, the others are stopped (TERM,
then KILL after STOP_GRACE_S), as torchrun does. Ctrl-C, SIGTERM or SIGHUP to compat: every rank's group gets TERM,
then KILL after COMPAT_LAUNCH_GRACE seconds (30, compat launch's own grace) or at a second signal. No CPU binding: spawn takes the ranks as they are.

Each rank's stdout and stderr are compat's pipes: a thread per pipe hands every byte on at once to compat's own stdout
or stderr, unchanged, and keeps the rank's last lines (``OutputTail``: a dead rank's finding shows them, with what
its C code and its children wrote too). The ranks get PYTHONUNBUFFERED=1 unless the caller's environment sets it, so
that a print reaches the terminal when it is made, as it would without the pipe.

Each rank leads a process group of its own and dies with compat (PR_SET_PDEATHSIG); the guardian
(launchers/guard.py, started as a program) sweeps what the ranks started should compat be killed outright. Ctrl-C or
SIGTERM to compat stop every rank; the KeyboardInterrupt goes on to the command.

Side effects: starts and signals processes; binds a socket for a moment (the free port).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from ..errors import CompatError
from ..processes import die_with_parent, free_port, raise_on_termination, rank_command

STOP_GRACE_S = 5.0
GRACE_VAR, GRACE_S = "COMPAT_LAUNCH_GRACE", 30.0  # compat launch's own grace after Ctrl-C / SIGTERM (launchers/run.py)
LOOPBACK = "127.0.0.1"  # always: the ranks are on this host, whatever MASTER_ADDR compat's own environment carries
RANK_MARK_VAR = "COMPAT_WATCH_RANK"  # per rank, equal to RANK: the agent acts in the process that carries it (site/sitecustomize.py)


def launch_grace() -> float:
    """COMPAT_LAUNCH_GRACE seconds (junk, nan, inf, <= 0: the default), at most a day."""
    try:
        value = float(os.environ.get(GRACE_VAR, ""))
    except ValueError:
        return GRACE_S
    return min(value, 86400.0) if math.isfinite(value) and value > 0 else GRACE_S


TAIL_LINES = 64  # the last lines kept per rank (a finding shows at most lines.MAX_LINES)
TAIL_CHARS = 4096  # of a line not yet ended, at most this is kept
READ_BYTES = 65536
DRAIN_S = 5.0  # after the job: the pipes' threads get this long to hand on what is left (a rank's child may hold a pipe open)


class OutputTail:
    """One rank's last lines from its stdout and stderr pipes, in the order they arrived (each stream's own line
    breaks; a carriage return starts the line again)."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.partial: dict[int, str] = {}
        self.lock = threading.Lock()

    def feed(self, stream: int, data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        with self.lock:
            pieces = text.split("\n")
            for index, piece in enumerate(pieces):
                if index < len(pieces) - 1 and piece.endswith("\r"):
                    piece = piece[:-1]
                kept = self.partial.get(stream, "")
                if "\r" in piece:
                    piece, kept = piece[piece.rindex("\r") + 1:], ""
                kept = (kept + piece)[:TAIL_CHARS] if len(kept) < TAIL_CHARS else kept
                if index < len(pieces) - 1:
                    self.lines.append(kept)
                    kept = ""
                self.partial[stream] = kept

    def last(self) -> tuple[str, ...]:
        """The complete lines, then each stream's line not yet ended (a rank killed in the middle of one)."""
        with self.lock:
            return (*self.lines, *(text for text in self.partial.values() if text))


def _forward(source: int, target: int, stream: int, tail: OutputTail) -> None:
    """Everything read from ``source`` written to ``target`` at once and fed to ``tail``, until the end of the pipe;
    once ``target`` refuses (compat's own stdout closed), the pipe is still read, so the rank never blocks on it."""
    handing_on = True
    try:
        while True:
            try:
                data = os.read(source, READ_BYTES)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            view = memoryview(data)
            while handing_on and view:
                try:
                    view = view[os.write(target, view):]
                except InterruptedError:
                    continue
                except OSError:
                    handing_on = False
            try:
                tail.feed(stream, data)
            except Exception:  # the tail must never stop the hand-on
                pass
    finally:
        os.close(source)


class SpawnRun:
    """The ranks of one spawn; ``exits`` fills as they end, ``tails`` (pid -> OutputTail) as they write."""

    def __init__(self, command: Sequence[str], python: str, nproc: int, say=lambda line: None) -> None:
        self.command, self.python, self.nproc, self.say = tuple(command), python, nproc, say
        self.exits: dict[int, tuple[int, float]] = {}  # pid -> (waitpid status, when it was reaped)
        self.tails: dict[int, OutputTail] = {}
        self.processes: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []

    def _start(self, argv: Sequence[str], rank_env: Mapping[str, str]) -> subprocess.Popen:
        """One rank, its stdout and stderr compat's pipes, each handed on by a thread."""
        process = subprocess.Popen(argv, env=rank_env, start_new_session=True, preexec_fn=die_with_parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tail = self.tails[process.pid] = OutputTail()
        for pipe, target in ((process.stdout, 1), (process.stderr, 2)):
            source = os.dup(pipe.fileno())
            pipe.close()
            reader = threading.Thread(target=_forward, args=(source, target, target, tail), name=f"compat-spawn-out-{process.pid}", daemon=True)
            reader.start()
            self.readers.append(reader)
        process.stdout = process.stderr = None
        return process

    def drain(self) -> None:
        """Wait (DRAIN_S at most) for the pipes' threads to hand on what the ranks wrote last."""
        deadline = time.monotonic() + DRAIN_S
        for reader in self.readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))

    def __call__(self, env: Mapping[str, str]) -> int:
        port = str(free_port(LOOPBACK))
        argv = rank_command(self.command, self.python)
        guardian: Optional[subprocess.Popen] = None
        try:
            with raise_on_termination():
                for local in range(self.nproc):
                    rank_env = {"PYTHONUNBUFFERED": "1", **env, "RANK": str(local), "WORLD_SIZE": str(self.nproc), "LOCAL_RANK": str(local),
                                "LOCAL_WORLD_SIZE": str(self.nproc), "GROUP_RANK": "0", "MASTER_ADDR": LOOPBACK, "MASTER_PORT": port, RANK_MARK_VAR: str(local)}
                    try:
                        self.processes.append(self._start(argv, rank_env))
                    except OSError as exc:
                        raise CompatError(f"Cannot start {argv[0]}: {exc.strerror or exc}.", "Check the training command after --.") from None
                guardian = _guardian([p.pid for p in self.processes], env)
                return self._wait()
        except BaseException:  # Ctrl-C, SIGTERM, SIGHUP (raise_on_termination): TERM first, as compat launch does
            self._terminate(launch_grace())
            raise
        finally:
            self._stop_all()
            self.drain()
            if guardian is not None:
                guardian.kill()
                guardian.wait()

    def _wait(self) -> int:
        failed: Optional[int] = None
        failed_at = 0.0
        while len(self.exits) < len(self.processes):
            for process in self.processes:
                if process.pid in self.exits:
                    continue
                try:
                    pid, status = os.waitpid(process.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status = process.pid, 0
                if pid:
                    process.returncode = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
                    self.exits[process.pid] = (status, time.time())
                    if status and failed is None:
                        failed, failed_at = status, time.monotonic()
                        for other in self.processes:
                            if other.pid not in self.exits:
                                _signal_group(other.pid, signal.SIGTERM)
            if failed is not None and time.monotonic() - failed_at > STOP_GRACE_S:
                for other in self.processes:
                    if other.pid not in self.exits:
                        _signal_group(other.pid, signal.SIGKILL)
            time.sleep(0.05)
        if failed is None:
            return 0
        return 128 + (failed & 0x7F) if failed & 0x7F else (failed >> 8) & 0xFF

    def _terminate(self, grace: float) -> None:
        """TERM every rank's group still running, then wait up to ``grace`` seconds for them to end (a second signal
        cuts it short; _stop_all then KILLs)."""
        running = [p for p in self.processes if p.pid not in self.exits]
        for process in running:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        try:
            while running and time.monotonic() < deadline:
                running = [p for p in running if p.poll() is None]
                time.sleep(0.05)
        except BaseException:
            pass

    def _stop_all(self) -> None:
        for process in self.processes:
            _signal_group(process.pid, signal.SIGKILL)
            if process.pid not in self.exits:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _guardian(pgids: list[int], env: Mapping[str, str]) -> Optional[subprocess.Popen]:
    """launchers/guard.py, run as a program: sweeps the watch's processes should compat be killed outright."""
    from .service import WATCH_RUN_VAR

    package_parent = str(Path(__file__).resolve().parents[2])
    guard_env = {k: v for k, v in env.items() if k != WATCH_RUN_VAR and not k.startswith("COMPAT_WATCH_") and k != "PYTHONPATH"}
    guard_env["PYTHONPATH"] = package_parent
    try:
        return subprocess.Popen([sys.executable, "-m", "compatmatrix.launchers.guard", ",".join(map(str, pgids)), env[WATCH_RUN_VAR], str(os.getpid()), WATCH_RUN_VAR],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=guard_env, start_new_session=True)
    except OSError:
        return None
