"""The watcher's judgement: what the ranks' heartbeats and their processes say, as findings (stall, death, straggler).

Pure: records in, findings out; the time is an argument. The records are what ring.py reads from the agents' ring
files plus what the watcher saw of each rank's process in /proc (service.py).

* Death: a rank whose process is gone (or a zombie) on a signal or a non-zero exit status (from waitpid or the zombie:
  the agent records none), or gone with no status known and no clean exit recorded. Exit 0 is never a death. Named at once, the earliest first, except that a rank that ended on an exception saying a peer went
  away (PEER_GONE) comes after the others: it followed a death (under torchrun the others are then stopped by torchrun
  itself).
* Stall: judged only when at least one rank is inside a collective (entered more than it completed on a process group)
  and some other rank has not entered that collective (a checkpoint, an evaluation or a long first step outside any
  collective is no stall), and no rank has made progress (a collective entered or completed) for longer than the
  bound. The bound depends on what the process of the rank named (the one behind) does: still gaining CPU time or
  doing I/O in the last ACTIVE_S, or waiting on a device or file (state D): it computes or saves, at least
  BUSY_BOUND_S; stopped by a signal (state T): ``--stall-after``, or STALL_FACTOR times the longest gap between two
  collectives the job has shown so far, at least STOPPED_FLOOR_S; otherwise (asleep, gaining nothing): as stopped, but at least
  STALL_FLOOR_S. The rank named is the one that never entered the collective the others wait in (the lowest sequence
  number entered on that process group; a tie goes to the rank whose progress stopped first); each other rank is named
  with the collective it waits in. Judged only once every rank has entered a collective (start-up may take as long as
  it takes).
* Straggler: over the collectives every rank entered, each rank's wait is the time from its own entering to the last
  rank's (the collective cannot finish before then); its share of the time those collectives span is its share of
  waiting, the rest computing. A rank that comes last in at least STRAGGLER_LAST of them, waits at most
  STRAGGLER_OWN_WAIT of the time while every other rank waits at least STRAGGLER_OTHERS_WAIT, is the straggler.
  Needs STRAGGLER_MIN collectives after the first STRAGGLER_WARMUP (left out: warm-up), and the ranks' clocks to be one
  clock (one host). The watcher's verdict is this judgement at the job's end, not the first time it held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

SIGTERM = 15  # signal.SIGTERM on Linux (this module imports nothing of the system)

#: an exception that says a peer went away: a rank that ended on it followed another's death (gloo: "Connection closed by
#: peer ... typically caused by a remote worker crashing"), so it is named after the deaths that are not
PEER_GONE = ("connection closed by peer", "connection reset by peer", "remote worker crashing", "broken pipe")
STALL_FLOOR_S = 60.0  # a rank asleep and gaining no CPU time
STOPPED_FLOOR_S = 10.0  # a rank stopped by a signal (state T) and gaining no CPU time
BUSY_BOUND_S = 300.0  # a rank still gaining CPU time or doing I/O: it computes or saves, it is not stopped
ACTIVE_S = 2.0  # a rank that gained CPU time or did I/O this recently (or waits on a device, state D) is busy
STALL_FACTOR = 5.0
#: a process stopped by a signal (T in /proc), or a rank on another host whose heartbeats stopped ("silent": its agent's
#: thread no longer runs, so its whole process is stopped or frozen)
STOPPED_STATES = ("T", "silent")
STRAGGLER_MIN = 10
STRAGGLER_WARMUP = 5  # the first collectives every rank entered are left out (warm-up)
STRAGGLER_LAST = 0.75
STRAGGLER_OWN_WAIT = 0.10
STRAGGLER_OTHERS_WAIT = 0.25


@dataclass(frozen=True)
class Collective:
    """One collective a rank entered (from the Flight Recorder): process group, its sequence number there, the op
    (``gloo:all_reduce``), the elements of its inputs, when the rank entered it (seconds since the epoch)."""

    pg: str
    seq: int
    op: str
    numel: int
    entered: float
    pg_name: str = ""


@dataclass(frozen=True)
class Beat:
    """One heartbeat of a rank's agent: its count, the time it was written, the rank's state (starting, running,
    exception, left), where progress came from, per process group (last entered, last completed), the collectives it
    reported, the exception that ended the rank."""

    n: int
    rank: int
    pid: int
    t: float
    state: str
    source: str = "none"
    progress: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    entries: tuple[Collective, ...] = ()
    exception: str = ""
    host: str = ""  # the rank's host name and PID namespace, as its agent saw them ("": an older agent)
    namespace: str = ""
    cpu: Optional[float] = None  # the rank's process's CPU seconds when it was written
    world: int = 0  # WORLD_SIZE in the rank's environment when it was written (0: not set, or an older agent)


@dataclass(frozen=True)
class ProcessFact:
    """What the watcher saw of a rank's process: alive (not a zombie), its /proc state letter (T: stopped by a
    signal), its wait status (waitpid's form) if it was seen as a zombie, when it was first seen gone."""

    alive: bool
    state: str = ""
    wait_status: Optional[int] = None
    gone_at: Optional[float] = None
    active_at: Optional[float] = None  # when its CPU time or I/O bytes were last seen to grow (None: never seen to)


@dataclass(frozen=True)
class RankView:
    rank: int
    beats: tuple[Beat, ...]  # oldest first
    process: ProcessFact
    collectives: tuple[Collective, ...] = ()  # every collective known of this rank (the watcher keeps more than the ring)
    lines: tuple[str, ...] = ()  # a gone rank's last output lines (watch/lines.py), and where they came from ("agent", "pipe")
    lines_from: str = ""

    @property
    def last(self) -> Beat:
        return self.beats[-1]

    def progress_key(self, beat: Beat) -> int:
        return sum(entered + done for entered, done in beat.progress.values())

    def last_change(self) -> float:
        """When this rank last made progress: the first beat that shows its latest progress."""
        final = self.progress_key(self.beats[-1])
        when = self.beats[-1].t
        for beat in reversed(self.beats):
            if self.progress_key(beat) != final:
                break
            when = beat.t
        return when

    def entered(self, pg: str, seq: int) -> Optional[Collective]:
        for collective in reversed(self.collectives):
            if collective.pg == pg and collective.seq == seq:
                return collective
        return None


@dataclass(frozen=True)
class Waiting:
    rank: int
    pg: str
    seq: int
    collective: Optional[Collective]
    since: Optional[float]
    host: str = ""


@dataclass(frozen=True)
class Stall:
    rank: int
    pg: str
    seq: int  # the collective it never entered (its own last entered is seq - 1 or lower)
    collective: Optional[Collective]  # as the waiting ranks entered it (op, size)
    last_entered: int
    last_completed: int
    stopped_at: float  # when its progress stopped
    heartbeat_age: float  # seconds since its last heartbeat
    process_state: str
    waiting: tuple[Waiting, ...]
    bound: float
    bound_source: str  # "--stall-after", "derived" or "busy" (its process still gains CPU time or does I/O)
    stalled_for: float
    busy: bool = False  # its process still gains CPU time or does I/O: it has not entered, but it is not stopped
    host: str = ""  # its host, as its agent named it


@dataclass(frozen=True)
class Death:
    rank: int
    pid: int
    at: float
    signal: Optional[int]
    exit_code: Optional[int]
    exception: str
    last_state: str
    host: str = ""
    lines: tuple[str, ...] = ()  # its last output lines, bounded and redacted (watch/lines.py); () when none were seen
    lines_from: str = ""  # "pipe" (compat's pipes of a rank it started) or "agent" (its agent's copy of sys.stdout / sys.stderr)

    @property
    def follows_another(self) -> bool:
        """It ended on an exception that says a peer went away."""
        text = self.exception.lower()
        return any(words in text for words in PEER_GONE)


@dataclass(frozen=True)
class Straggler:
    rank: int
    wait_share: Mapping[int, float]  # per rank: the share of the time spent waiting in collectives
    last_share: float  # how often the straggler came in last
    collectives: int


Finding = Union[Stall, Death, Straggler]


def judge(views: Sequence[RankView], now: float, stall_after: Optional[float] = None, world: Optional[int] = None,
          straggler: bool = True) -> tuple[Finding, ...]:
    """The findings for the ranks seen so far: deaths first (earliest first), then a stall, then a straggler (only
    with ``straggler``: it reads every collective of every rank, so the watcher asks for it now and then, not at every look)."""
    views = [view for view in views if view.beats]
    # seen gone at the same moment (one look saw both: a watcher attached from outside, whose ranks their launcher reaps and
    # stops at once), a rank ended by SIGTERM, the signal launchers stop the other ranks with, comes after the others
    deaths = sorted((d for d in (death_of(view) for view in views) if d is not None), key=lambda d: (d.follows_another, d.at, d.signal == SIGTERM, d.rank))
    if deaths:
        return tuple(deaths)
    found: list[Finding] = []
    stall = stall_of(views, now, stall_after, world)
    if stall is not None:
        found.append(stall)
    slow = straggler_of(views) if straggler else None
    if slow is not None:
        found.append(slow)
    return tuple(found)


def decode_status(status: int) -> tuple[Optional[int], Optional[int]]:
    """(signal, exit code) of a waitpid status."""
    if status & 0x7F:
        return status & 0x7F, None
    return None, (status >> 8) & 0xFF


def death_of(view: RankView) -> Optional[Death]:
    """A rank whose process is gone with a signal or a non-zero status, or gone with no status known and no clean
    "left" heartbeat. The exit status comes from waitpid or the zombie only (the agent records none); exit 0 with no
    signal is never a death, whatever the last heartbeat said (an exception caught and a clean exit after it)."""
    last = view.last
    fact = view.process
    if fact.alive:
        return None
    signal_number, code = decode_status(fact.wait_status) if fact.wait_status is not None else (None, None)
    if fact.wait_status is not None and not signal_number and code == 0:
        return None
    if fact.wait_status is None and last.state == "left":
        return None  # it ran its exit handlers: the launcher reaped it before the watcher saw its status
    exception = last.exception if last.state == "exception" else ""
    return Death(view.rank, last.pid, fact.gone_at if fact.gone_at is not None else last.t, signal_number, code, exception, last.state, last.host,
                 view.lines, view.lines_from if view.lines else "")


def busy(fact: ProcessFact, now: float) -> bool:
    """Whether the process gained CPU time or did I/O in the last ACTIVE_S, or waits on a device or file (state D)."""
    return fact.alive and (fact.state == "D" or (fact.active_at is not None and now - fact.active_at < ACTIVE_S))


def stall_bound(views: Sequence[RankView], stall_after: Optional[float], culprit: Optional[ProcessFact] = None,
                now: Optional[float] = None) -> tuple[float, str]:
    """The bound for the rank named (its process ``culprit``): see the module's text."""
    if culprit is not None and now is not None and busy(culprit, now):
        bound, source = stall_bound(views, stall_after)
        return max(bound, BUSY_BOUND_S), "busy"
    floor = STOPPED_FLOOR_S if culprit is None or culprit.state in STOPPED_STATES else STALL_FLOOR_S
    if stall_after is not None:
        return stall_after, "--stall-after"
    longest = 0.0
    for view in views:
        by_group: dict[str, list[float]] = {}
        for collective in view.collectives:
            by_group.setdefault(collective.pg, []).append(collective.entered)
        for times in by_group.values():
            times.sort()
            longest = max([longest] + [b - a for a, b in zip(times, times[1:])])
    return max(floor, STALL_FACTOR * longest), "derived"


def stall_of(views: Sequence[RankView], now: float, stall_after: Optional[float], world: Optional[int] = None) -> Optional[Stall]:
    if not views or (world is not None and len(views) < world):
        return None
    if any(not view.last.progress for view in views):
        return None  # a rank has not entered any collective yet: start-up
    last_progress = max(view.last_change() for view in views)
    stalled_for = now - last_progress
    if stalled_for <= STOPPED_FLOOR_S and (stall_after is None or stalled_for <= stall_after):
        return None  # no bound is lower
    # the collective the job is stuck in: per process group, the highest entered by any rank
    waiting: list[Waiting] = []
    target: Optional[tuple[str, int]] = None
    for view in views:
        for pg, (entered, done) in sorted(view.last.progress.items()):
            if entered > done:
                collective = view.entered(pg, entered)
                waiting.append(Waiting(view.rank, pg, entered, collective, collective.entered if collective else None, view.last.host))
                if target is None or entered > target[1]:
                    target = (pg, entered)
    if target is None:
        return None  # nobody waits in a collective: a checkpoint, an evaluation, a long step
    pg, seq = target

    def entered_on(view: RankView) -> int:
        return view.last.progress.get(pg, (-1, -1))[0]

    behind = [view for view in views if entered_on(view) < seq]
    if not behind:
        return None  # every rank entered it: the collective itself is slow, no rank is behind
    culprit = min(behind, key=lambda view: (entered_on(view), view.last_change(), view.last.t, view.rank))
    bound, source = stall_bound(views, stall_after, culprit.process, now)
    if stalled_for <= bound:
        return None
    collective = next((w.collective for w in waiting if w.pg == pg and w.seq == seq and w.collective is not None), None)
    entered, done = culprit.last.progress.get(pg, (-1, -1))
    others = tuple(w for w in waiting if w.rank != culprit.rank)
    # its last heartbeat may be older than its last collective: what the others completed on this group, it took part in
    # (a collective completes on no rank before every rank has entered it)
    others_done = [view.last.progress[pg][1] for view in views if view.rank != culprit.rank and pg in view.last.progress]
    if others_done:
        entered, done = max(entered, min(others_done)), max(done, min(others_done))
    return Stall(culprit.rank, pg, seq, collective, entered, done, culprit.last_change(), now - culprit.last.t, culprit.process.state,
                 others, bound, source, stalled_for, busy(culprit.process, now), culprit.last.host)


def straggler_of(views: Sequence[RankView]) -> Optional[Straggler]:
    if len(views) < 2:
        return None
    tables = [{(c.pg, c.seq): c.entered for c in view.collectives} for view in views]
    common = sorted(set.intersection(*(set(table) for table in tables)), key=lambda key: min(table[key] for table in tables))
    common = common[STRAGGLER_WARMUP:]  # the first collectives (DDP's broadcast of the weights, a first step that builds its caches) say nothing of the pace
    if len(common) < STRAGGLER_MIN:
        return None
    waits = [0.0] * len(views)
    last_counts = [0] * len(views)
    for key in common:
        times = [table[key] for table in tables]
        latest = max(times)
        for index, when in enumerate(times):
            waits[index] += latest - when
        last_counts[times.index(latest)] += 1
    span = max(max(table[key] for table in tables) for key in common[-1:]) - min(min(table[key] for table in tables) for key in common[:1])
    if span <= 0:
        return None
    shares = [min(1.0, w / span) for w in waits]
    slow = max(range(len(views)), key=lambda index: last_counts[index])
    last_share = last_counts[slow] / len(common)
    others = [share for index, share in enumerate(shares) if index != slow]
    if last_share >= STRAGGLER_LAST and shares[slow] <= STRAGGLER_OWN_WAIT and min(others) >= STRAGGLER_OTHERS_WAIT:
        return Straggler(views[slow].rank, {view.rank: round(share, 3) for view, share in zip(views, shares)}, round(last_share, 3), len(common))
    return None
