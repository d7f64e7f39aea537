"""compat launch --watch: run the launch with the rank agent on its PYTHONPATH and a watcher thread beside it.

``watch_launch(run, base_env, options, say)``: makes the run folder (scratch.py: ``compat-watch-*`` in the temp folder,
owned by this compat, swept if a killed compat left one), adds the agent's variables to the job's environment, calls
``run(env)`` (the command's launch: it blocks until the job has ended and returns its exit status; it owns the
launcher, its signals and its guardian) and meanwhile, in a thread, reads the ring files and the ranks' /proc entries
every POLL_S seconds and judges them (judge.py). On a death or a stall it says the finding at once (on a stall it takes the Python stacks of the stopped rank and of
those waiting, stacks.py) and, unless
``watch_only``, ends the job (after a death, once the launcher has had DEATH_GRACE_S to do it itself): every process carrying this watch's id in its environment (the ranks and whatever they
started) is stopped, TERM then KILL (a rank stopped by SIGSTOP takes only KILL). The launch then returns and the
findings are the outcome. With ``watch_only`` a stall the ranks get over (progress again) is said to be resolved and is no
finding. A straggler is said once when first seen ("so far"); the verdict is the judgement over the whole job at its end.

The exit status: the job's own when there is no stall or death finding; 1 when there is one; 128+N once compat has
received signal N (Ctrl-C, SIGTERM, SIGHUP: read from the interpreter's wakeup file descriptor, whoever handles the
signal): from then on nothing is judged (the ranks end because compat was asked to stop).

Side effects: a folder in the temp folder (removed at the end), a thread, reads /proc, signals the job's processes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from ..errors import CompatError
from ..processes import new_run_id, sweep
from ..scratch import scratch_folder
from .judge import Collective, Death, Finding, ProcessFact, RankView, Stall, Straggler, judge
from .lines import AGENT, PIPE, agent_lines, bounded
from .ring import SLOTS, RingCursor, lock_held, ring_files
from .stacks import Stack, find_py_spy, take
from .timeline import timeline_of

WATCH_DIR_VAR = "COMPAT_WATCH_DIR"
WATCH_RUN_VAR = "COMPAT_WATCH_RUN"
INTERVAL_VAR = "COMPAT_WATCH_INTERVAL"
FR_BUFFER_VAR = "TORCH_FR_BUFFER_SIZE"
FR_BUFFER = "256"  # enough for the last steps; torch's default 2000 costs ~5 ms per read instead of ~1 ms (measured)
POLL_S = 0.2  # the ring files are read and judged this often
DEATH_GRACE_S = 5.0  # after a death, the launcher's own time to stop the other ranks before the watcher does
PROC_POLL_S = 0.05  # the ranks' processes are looked at this often: a death is timed (who died first) and a zombie's status caught
STRAGGLER_EVERY_S = 5.0  # the straggler judgement (every collective of every rank: ~10 ms for 3,000 each) this often while the job runs; at its end once more
SILENT_S = 3.0  # a rank on another host whose last heartbeat is older (at least 6 heartbeat intervals) is silent: stopped or frozen
STALE_SLACK_S = 5.0  # a shared run folder: a ring whose newest heartbeat is older than the watch's start by more is an earlier job's
KEEP_COLLECTIVES = 2048  # per rank, what the watcher keeps beyond the ring (the stall bound and the straggler read them)
SITE = Path(__file__).resolve().parent / "site"
#: what the agent needs in every rank's environment: passed by name by a launcher that starts ranks on other hosts (mpirun -genvlist / -x)
AGENT_VARIABLES = (WATCH_DIR_VAR, WATCH_RUN_VAR, INTERVAL_VAR, FR_BUFFER_VAR, "PYTHONPATH")
PREFIX = "compat-watch-"


@dataclass(frozen=True)
class WatchOptions:
    watch_only: bool = False
    stall_after: Optional[float] = None
    interval: float = 0.5
    world: Optional[int] = None
    pythons: tuple[str, ...] = ()  # the training environment's interpreter: py-spy may be installed beside it
    folder: Optional[str] = None  # --watch-dir: the run folder (kept; across hosts one every host sees); None: a private temporary one
    timeline: bool = False  # --report: the outcome carries the ranks' timeline (watch/timeline.py)


@dataclass
class WatchOutcome:
    job_status: Optional[int]  # the launch's own exit status; None when attached
    findings: tuple[Finding, ...] = ()
    ended_by_watch: bool = False
    finding_at: Optional[float] = None  # when the first stall or death was found (time.time())
    sources: tuple[str, ...] = ()
    left: tuple[int, ...] = ()
    stacks: tuple[Stack, ...] = ()
    interrupted: Optional[int] = None  # the signal compat received (Ctrl-C, SIGTERM, SIGHUP): the watch stopped judging
    resolved: tuple[Stall, ...] = ()  # --watch-only: stalls said that resolved (the ranks made progress again): no finding
    timeline: Optional[dict] = None  # with WatchOptions.timeline: the ranks' collectives over time (watch/timeline.py)
    attached: bool = False  # compat watch: attached to a job it did not start (job_status None: not its to know)

    @property
    def exit_status(self) -> int:
        if self.interrupted is not None:
            return 128 + self.interrupted
        if self.attached or self.job_status is None:
            return 1 if self.findings else 0
        return 1 if any(isinstance(f, (Stall, Death)) for f in self.findings) else self.job_status


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalSeen:
    """Whether compat has received Ctrl-C, SIGTERM or SIGHUP since ``start``, whoever handles it (the launch installs
    its own handlers): the signal numbers the interpreter writes to its wakeup file descriptor. Main thread only; where
    it cannot be set (another thread, one already set) it sees nothing."""

    def __init__(self) -> None:
        self.read_fd: Optional[int] = None
        self.write_fd: Optional[int] = None
        self.seen: Optional[int] = None

    def start(self) -> None:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            before = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if before != -1:  # someone else's: leave it to them
                signal.set_wakeup_fd(before)
                raise ValueError("wakeup fd in use")
        except ValueError:
            os.close(read_fd), os.close(write_fd)
            return
        self.read_fd, self.write_fd = read_fd, write_fd

    def check(self) -> Optional[int]:
        if self.seen is None and self.read_fd is not None:
            try:
                data = os.read(self.read_fd, 256)
            except (BlockingIOError, OSError):
                data = b""
            self.seen = next((number for number in data if number in STOP_SIGNALS), None)
        return self.seen

    def stop(self) -> None:
        if self.read_fd is None:
            return
        self.check()
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
        os.close(self.read_fd), os.close(self.write_fd)
        self.read_fd = self.write_fd = None


def agent_env(base_env: Mapping[str, str], folder: Path, run_id: str, interval: float) -> dict[str, str]:
    env = dict(base_env)
    env[WATCH_DIR_VAR] = str(folder)
    env[WATCH_RUN_VAR] = run_id
    env[INTERVAL_VAR] = str(interval)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault(FR_BUFFER_VAR, FR_BUFFER)
    return env


def proc_fact(pid: int) -> tuple[bool, str, Optional[int]]:
    """(alive, state letter, wait status if a zombie) of a process, read from /proc/PID/stat (field 52: exit_code)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return False, "", None
    state = fields[0].decode("ascii", "replace")
    if state in ("Z", "X"):
        status = int(fields[49]) if len(fields) > 49 and fields[49].isdigit() else None
        return False, state, status
    return True, state, None


def activity(pid: int) -> Optional[tuple[int, int]]:
    """(CPU ticks: utime + stime, bytes read and written: read_bytes + write_bytes where readable) of a live process, or
    None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[-1].split()
        ticks = int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None
    moved = 0
    try:
        with open(f"/proc/{pid}/io", "rb") as handle:
            for line in handle.read().splitlines():
                key, _, value = line.partition(b":")
                if key in (b"read_bytes", b"write_bytes"):
                    moved += int(value)
    except (OSError, ValueError):
        pass
    return ticks, moved


@dataclass
class _RankState:
    beats: deque = field(default_factory=lambda: deque(maxlen=SLOTS))  # the newest heartbeats, oldest first
    collectives: dict[tuple[str, int], Collective] = field(default_factory=dict)
    pid: int = 0
    gone_at: Optional[float] = None
    wait_status: Optional[int] = None
    state: str = ""
    activity: Optional[tuple[int, int]] = None
    active_at: Optional[float] = None
    cursor: Optional[RingCursor] = None
    local: bool = True  # its process is in this host's /proc (same host name and PID namespace); else judged by heartbeats and lock
    path: Optional[Path] = None
    lines: tuple[tuple[str, ...], str] = ((), "")  # once gone: its last output lines and where they came from


def where() -> tuple[str, str]:
    """(host name, PID namespace) of this process: a rank's agent writes its own, and the two are compared."""
    import socket

    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return socket.gethostname()[:200], namespace[:64]


class Watcher:
    """Reads the run folder and the ranks' processes; keeps what the ring would forget; judges.

    Each tick reads only what is new in each ring (ring.RingCursor). A rank whose heartbeats say another host name or
    PID namespace than the watcher's is remote: its process cannot be looked at, so it is alive while its agent holds
    its ring's lock (flock, which the kernel drops when the process ends: on one machine, and on a shared file system
    whose locks reach every client), "silent" when its last heartbeat is older than SILENT_S (a stopped or frozen
    process: its agent's thread writes no more), and busy while the CPU seconds its heartbeats carry grow. ``since``
    (a shared run folder): rings with no heartbeat written after it are an earlier job's and are left out."""

    def __init__(self, folder: Path, options: WatchOptions, exits: Optional[Mapping[int, tuple[int, float]]] = None, since: Optional[float] = None,
                 tails: Optional[Mapping[int, Any]] = None, attached: bool = False) -> None:
        self.folder, self.options = folder, options
        self.attached = attached  # compat watch: the ranks are no children of ours, their pids may be reused once they end
        self.exits = exits if exits is not None else {}  # pid -> (waitpid status, when), where the ranks are compat's own children (spawn)
        self.tails = tails if tails is not None else {}  # pid -> its pipes' last lines (.last()), where compat started the ranks (spawn)
        self.ranks: dict[int, _RankState] = {}
        self.since = since
        self.here = where()
        self.silent_after = max(SILENT_S, 6 * options.interval)

    def read(self, now: float) -> None:
        for rank, path in ring_files(self.folder).items():
            state = self.ranks.get(rank)
            if state is None or state.path != path:
                state = _RankState(cursor=RingCursor(path, rank), path=path)
            beats = state.cursor.new_beats()
            if not beats:
                continue
            if rank not in self.ranks:
                if self.since is not None and beats[-1].t < self.since - STALE_SLACK_S:
                    continue  # an earlier job's ring in a shared run folder
                self.ranks[rank] = state
            previous = state.beats[-1] if state.beats else None
            if beats[-1].pid != state.pid:
                state.beats.clear()
                state.pid, state.gone_at, state.wait_status = beats[-1].pid, None, None
                state.activity, state.active_at = None, None
                previous = None
            state.beats.extend(beat for beat in beats if beat.pid == state.pid)
            newest = state.beats[-1]
            state.local = not newest.host or (newest.host, newest.namespace) == self.here
            if not state.local:  # busy: its CPU seconds grew between two heartbeats
                for beat in state.beats if previous is None else beats:
                    if previous is not None and beat.cpu is not None and previous.cpu is not None and beat.cpu > previous.cpu:
                        state.active_at = beat.t
                    previous = beat
            for beat in beats:
                for collective in beat.entries:
                    state.collectives.setdefault((collective.pg, collective.seq), collective)
            if len(state.collectives) > KEEP_COLLECTIVES + KEEP_COLLECTIVES // 4:  # trimmed now and then, not at every look (a sort)
                for key in sorted(state.collectives, key=lambda k: state.collectives[k].entered)[:-KEEP_COLLECTIVES]:
                    del state.collectives[key]
        self.check_processes(now)
        for state in self.ranks.values():
            if not state.local:
                self._remote(state, now)
            elif state.pid and state.gone_at is None:
                seen = activity(state.pid)
                if seen is not None and state.activity is not None and seen != state.activity:
                    state.active_at = now
                state.activity = seen if seen is not None else state.activity

    def _remote(self, state: _RankState, now: float) -> None:
        """A rank on another host: gone once its ring's lock is free (no exit status is known here), silent once its
        heartbeats stop."""
        if state.gone_at is not None or not state.beats:
            return
        last = state.beats[-1]
        if state.path is not None and not lock_held(state.path):
            state.gone_at, state.state = now, ""
            return
        state.state = "silent" if now - last.t > self.silent_after else ""

    def check_processes(self, now: float) -> bool:
        """Look at each known rank's process (cheap: one /proc read each); whether one was newly seen gone."""
        newly = False
        for state in self.ranks.values():
            if not state.pid or not state.local:
                continue
            if state.pid in self.exits:
                status, when = self.exits[state.pid]
                newly = newly or state.gone_at is None
                state.gone_at, state.wait_status = when, status
            elif state.gone_at is None:
                living, letter, status = proc_fact(state.pid)
                if living and self.attached and state.path is not None and not lock_held(state.path):
                    living, letter = False, ""  # its ring's lock is free: the rank ended, and the pid is another process's now
                state.state = letter
                if not living:
                    state.gone_at, state.wait_status, newly = now, status, True
            elif state.wait_status is None:
                _living, _letter, state.wait_status = proc_fact(state.pid)  # still a zombie: its status
        return newly

    def views(self) -> list[RankView]:
        """The ranks as judge.py takes them; their host is named (on the last heartbeat) only when they span several."""
        views = []
        several = len({state.beats[-1].host for state in self.ranks.values() if state.beats}) > 1
        for rank, state in sorted(self.ranks.items()):
            if not state.beats:
                continue
            beats = tuple(state.beats)
            if not several and beats[-1].host:
                beats = beats[:-1] + (replace(beats[-1], host=""),)
            fact = ProcessFact(state.gone_at is None, state.state, state.wait_status, state.gone_at, state.active_at)
            collectives = tuple(sorted(state.collectives.values(), key=lambda c: (c.entered, c.pg, c.seq)))
            lines, lines_from = self.last_lines(state) if state.gone_at is not None else ((), "")
            views.append(RankView(rank, beats, fact, collectives, lines, lines_from))
        return views

    def last_lines(self, state: _RankState) -> tuple[tuple[str, ...], str]:
        """A gone rank's last lines: from compat's pipes where it started the rank (everything its process wrote), else
        from its agent's line ring (what it wrote through sys.stdout / sys.stderr); read once they are seen."""
        if state.lines[0]:
            return state.lines
        tail = self.tails.get(state.pid)
        found = (bounded(tail.last()), PIPE) if tail is not None else ((), "")
        if not found[0] and state.path is not None:
            found = (agent_lines(state.path, state.pid), AGENT)
        if found[0]:
            state.lines = found
        return found

    def judge(self, now: float, straggler: bool = True) -> tuple[Finding, ...]:
        return judge(self.views(), now, self.options.stall_after, self.world(), straggler)

    def world(self) -> Optional[int]:
        """The ranks of the job: the launch's count, else (attached) the largest WORLD_SIZE the ranks' heartbeats say."""
        if self.options.world is not None:
            return self.options.world
        return max((state.beats[-1].world for state in self.ranks.values() if state.beats), default=0) or None

    def over(self) -> bool:
        """Every rank seen has ended (its process gone, or its ring's lock free): its ring will not be written again."""
        return bool(self.ranks) and all(state.gone_at is not None for state in self.ranks.values())

    def sources(self) -> tuple[str, ...]:
        return tuple(sorted({state.beats[-1].source for state in self.ranks.values() if state.beats}))


def progress_of(watcher: Watcher) -> dict[int, int]:
    """Each rank's progress (collectives entered and completed, summed over its process groups) by its last heartbeat."""
    return {view.rank: view.progress_key(view.last) for view in watcher.views()}


@contextmanager
def _run_folder(given: Optional[str]) -> Iterator[tuple[Path, Optional[float]]]:
    """(the run folder, the time from which its rings count): --watch-dir's (created if missing, kept: rings an earlier
    job left there count only if written after now), else a private temporary one (removed at the end)."""
    if given is None:
        with scratch_folder(PREFIX) as folder:
            yield folder, None
        return
    folder = Path(given).absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CompatError(f"Cannot make --watch-dir {given}: {exc.strerror or exc}.", "Pass a folder you may write to, one every host sees at the same path.") from None
    yield folder, time.time()


class Judging:
    """The watcher's loop, one for both ways of watching: beside the launch (``watch_launch``: a thread, which ends the
    job on a finding through ``end_job``) and attached to a job started elsewhere (attach.py: ``end_job`` None, the job
    is not ours to end, so every finding is kept as --watch-only keeps it). Each tick (PROC_POLL_S) it looks at the
    ranks' processes, every POLL_S reads the rings and judges; the first stall or death is said at once (``prefix``:
    the words each line starts with), with the stacks of the ranks a stall involves; a stall the ranks get over is
    said to be resolved; the first straggler is said once, "so far". What it found stays on the object for ``outcome``."""

    def __init__(self, watcher: Watcher, base_env: Mapping[str, str], say: Callable[[str], None], render: Optional[Callable[[Finding], str]],
                 prefix: str, end_job: Optional[Callable[[], None]] = None) -> None:
        self.watcher, self.base_env, self.say, self.render, self.prefix, self.end_job = watcher, base_env, say, render, prefix, end_job
        self.found: list[Finding] = []
        self.marks: dict[str, float] = {}
        self.stacks: list[Stack] = []
        self.resolved: list[Stall] = []
        self.ended = threading.Event()
        self.active: Optional[Stall] = None  # a stall said and not yet resolved (the job kept running)
        self.at_stall: dict[int, int] = {}  # each rank's progress when it was said
        self.said_straggler = False

    def _words(self, finding: Finding) -> str:
        return self.render(finding) if self.render else str(finding)

    def run(self, stop: threading.Event, signals: Optional[SignalSeen], finished: Optional[Callable[[float], bool]] = None) -> None:
        """Until ``stop`` is set, compat receives a stop signal, the job is ended on a finding, or ``finished(now)``
        says the job is over (checked after each reading)."""
        watcher = self.watcher
        next_read = next_straggler = 0.0
        while not stop.wait(PROC_POLL_S):
            if signals is not None and signals.check() is not None:
                return  # compat was asked to stop: the ranks end because of it, which is no finding
            now = time.time()
            try:
                if not watcher.check_processes(now) and time.monotonic() < next_read:
                    continue
                next_read = time.monotonic() + POLL_S
                watcher.read(now)
                straggler = time.monotonic() >= next_straggler
                if straggler:
                    next_straggler = time.monotonic() + STRAGGLER_EVERY_S
                findings = watcher.judge(now, straggler)
            except Exception as exc:  # the watch must never take the job down
                self.say(f"{self.prefix}: the watcher stopped: {exc}")
                return
            if self._judged(findings, now, stop, signals) or (finished is not None and finished(now)):
                return

    def _judged(self, findings: tuple[Finding, ...], now: float, stop: threading.Event, signals: Optional[SignalSeen]) -> bool:
        """Say what is new in ``findings``; whether the loop is over (compat stopping, the job ended)."""
        serious = [f for f in findings if isinstance(f, (Stall, Death))]
        if serious and signals is not None and signals.check() is not None:
            return True
        deaths = [f for f in serious if isinstance(f, Death)]
        if self.active is not None and deaths and self.end_job is None:
            # attached: the ranks ended after the stall was said (the job was ended, as its fix says, or a rank gave up
            # waiting): the stall stays the finding, and how they ended is said once
            self.say(f"{self.prefix}: after the stall: " + " ".join(self._words(death) for death in deaths))
            self.active = None
            return False
        if self.active is not None and (progress_of(self.watcher) != self.at_stall or deaths):
            # the job kept running: the ranks made progress again (or one died: said below)
            if not deaths:
                self.say(f"{self.prefix}: the stall resolved: the ranks made progress again after "
                         f"{now - (self.marks['finding'] - self.active.stalled_for):.1f} s without; the job goes on")
                self.resolved.append(self.active)
            self.active = None
            self.found[:] = []
            del self.marks["finding"]
            serious = [f for f in serious if not isinstance(f, Stall)]
        if serious and "finding" not in self.marks:
            if self._new_finding(findings, serious, now, stop):
                return True
        straggler = next((f for f in findings if isinstance(f, Straggler)), None)
        if straggler is not None and not self.said_straggler:
            self.said_straggler = True
            self.say(f"{self.prefix}: so far, {self._words(straggler)} (the verdict comes at the end)")
        return False

    def _new_finding(self, findings: tuple[Finding, ...], serious: list[Finding], now: float, stop: threading.Event) -> bool:
        """The first stall or death: said, the stacks of a stall's ranks taken, the job ended unless it is kept;
        whether the loop is over."""
        watcher, first = self.watcher, serious[0]
        self.marks["finding"] = now
        self.found[:] = [f for f in findings if not isinstance(f, Straggler)]
        self.say(f"{self.prefix}: {self._words(first)}")
        if isinstance(first, Stall):  # before the job is ended: the stacks of the stopped rank and those waiting for it
            involved = [first.rank] + [w.rank for w in first.waiting]
            known = {rank: watcher.ranks[rank] for rank in involved if rank in watcher.ranks and watcher.ranks[rank].pid}
            self.stacks[:] = take(find_py_spy(self.base_env, watcher.options.pythons), {rank: state.pid for rank, state in known.items() if state.local})
            self.stacks.extend(Stack(rank, state.pid, "", f"rank {rank} runs on another host ({state.beats[-1].host or 'unnamed'}): "
                                     f"there, py-spy dump --pid {state.pid} --nonblocking") for rank, state in known.items() if not state.local)
        if self.end_job is not None:
            if isinstance(first, Death) and stop.wait(DEATH_GRACE_S):
                return True  # the launcher stopped the other ranks itself (torchrun, spawn): its exit status stands
            if not watcher.options.watch_only or isinstance(first, Death):
                self.say(f"{self.prefix}: ending the job")
                self.ended.set()
                self.end_job()
                return True
        self.active = first if isinstance(first, Stall) else None
        self.at_stall = progress_of(watcher)
        return False

    def outcome(self, status: Optional[int], left: tuple[int, ...] = (), attached: bool = False) -> WatchOutcome:
        """The outcome once the job has ended: one last look (a rank that died as the job ended: with the job's
        ``status`` known, only when it is not 0), and the straggler judged over the whole job."""
        watcher, found = self.watcher, self.found
        now = time.time()
        watcher.read(now)
        last = watcher.judge(now)
        if "finding" not in self.marks and any(isinstance(f, Death) for f in last) and status != 0:
            found[:] = [f for f in last if not isinstance(f, Straggler)]
            self.marks["finding"] = now
        # the straggler: the judgement over the whole job, at its end (not the first time it held)
        found[:] = [f for f in found if not isinstance(f, Straggler)] + [f for f in last if isinstance(f, Straggler)][:1]
        return WatchOutcome(status, tuple(found), self.ended.is_set(), self.marks.get("finding"), watcher.sources(), left, tuple(self.stacks), None,
                            tuple(self.resolved), attached=attached)


def watch_launch(run: Callable[[Mapping[str, str]], int], base_env: Mapping[str, str], options: WatchOptions,
                 say: Callable[[str], None] = lambda line: None, render: Optional[Callable[[Finding], str]] = None,
                 exits: Optional[Mapping[int, tuple[int, float]]] = None, tails: Optional[Mapping[int, Any]] = None) -> WatchOutcome:
    """Run the launch watched; the outcome when it has ended (and every process of it is gone). ``exits``: the ranks'
    exit statuses by pid, where the launch knows them (spawn); ``tails``: their pipes' last lines (spawn)."""
    run_id = new_run_id()
    with _run_folder(options.folder) as (folder, since):
        watcher = Watcher(folder, options, exits, since, tails)
        stop = threading.Event()
        judging = Judging(watcher, base_env, say, render, "compat launch --watch", lambda: sweep(run_id, [], wait=3.0, variable=WATCH_RUN_VAR))
        env = agent_env(base_env, folder, run_id, options.interval)
        signals = SignalSeen()
        signals.start()
        thread = threading.Thread(target=judging.run, args=(stop, signals), name="compat-watch", daemon=True)
        thread.start()
        try:
            status = run(env)
        finally:
            stop.set()
            thread.join(timeout=10)
            left = sweep(run_id, [], wait=3.0, variable=WATCH_RUN_VAR)
            signals.stop()
        if signals.seen is not None:
            return completed(WatchOutcome(status, (), False, None, watcher.sources(), tuple(left), (), signals.seen), watcher)
        return completed(judging.outcome(status, tuple(left)), watcher)


def completed(outcome: WatchOutcome, watcher: Watcher) -> WatchOutcome:
    """The outcome once the job has ended: each dead rank's last lines as they are now (a death is said at once, and
    its pipes may still have been handing on its last bytes then), and with WatchOptions.timeline the timeline of every
    rank (watch/timeline.py)."""
    views = watcher.views()
    seen = {view.rank: view for view in views if view.lines}
    findings = tuple(replace(f, lines=seen[f.rank].lines, lines_from=seen[f.rank].lines_from)
                     if isinstance(f, Death) and f.rank in seen and len(seen[f.rank].lines) > len(f.lines) else f for f in outcome.findings)
    timeline = timeline_of(views, time.time(), findings, outcome.finding_at) if watcher.options.timeline else None
    return replace(outcome, findings=findings, timeline=timeline)
