"""compat watch RUN_DIR: attach to a job that ``compat launch --watch --watch-dir RUN_DIR`` started elsewhere (another
terminal, another host that shares the folder) and judge it as that launch's watcher does.

``check_run_folder`` refuses what cannot be watched (exit 2): a RUN_DIR that is missing or no folder, that holds no
ring, a ring planted there (a link, a device, a hard link: ``command.planted_rings``, as compat launch refuses them) or
one written by an agent of another ring format. ``watch_attached`` then runs the watcher's loop (service.Judging, the
same as the launch's) in this process's main thread, with no job to end: a finding is said and kept, its fix says how
to end the job, and the watch goes on (a stall the ranks get over is said to be resolved, as with --watch-only). It ends
when every rank seen has ended (its process gone, or its ring's lock free: its ring will not be written again), when no
ring has been written for QUIET_S (the job is stopped, or its hosts are gone), or on Ctrl-C, SIGTERM or SIGHUP (the
outcome then says which: exit 128+N). A rank of this host (its heartbeats say this host's name and PID namespace) is
judged from /proc as the launch judges it, but counts as ended once its ring's lock is free (its pid may be another
process's by then); a rank of another host by its heartbeats and its ring's lock.

Side effects: reads the run folder and /proc, runs py-spy on a stall (stacks.py); signals nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..processes import raise_on_termination
from .command import planted_rings
from .judge import Finding
from .ring import FORMAT, MAX_RINGS, SLOT, formats_of, read_ring
from .service import Judging, SignalSeen, Watcher, WatchOptions, WatchOutcome, completed

PREFIX = "compat watch"
FIRST_BEAT_S = 30.0  # the rings must hold a heartbeat within this long after attaching
QUIET_S = 600.0  # no ring written for this long (every rank stopped, or its host gone): the watch ends
_FOLDER_FIX = "Pass the folder the job's compat launch --watch --watch-dir named (the ranks' agents write their rings there)."


def check_run_folder(folder: str) -> None:
    """UsageError unless ``folder`` is a run folder compat can watch (see the module's text). Bounded: the folder's first
    65,536 entries, MAX_RINGS rings, one slot of each."""
    if not os.path.exists(folder):
        raise UsageError(f"RUN_DIR {folder} does not exist.", _FOLDER_FIX)
    if not os.path.isdir(folder):
        raise UsageError(f"RUN_DIR {folder} is not a folder.", _FOLDER_FIX)
    rings = planted_rings(folder, "RUN_DIR", "compat watch reads no ring through it, and a rank's agent writes none there",
                          "Remove it (an agent writes only a regular file of its own), or pass the run folder the job's compat launch --watch-dir named.")
    if not rings:
        raise UsageError(f"RUN_DIR {folder} holds no ring file (rank-N.ring).", _FOLDER_FIX)
    for entry in rings[:MAX_RINGS]:
        others = formats_of(read_ring(Path(entry.path), SLOT)) - {FORMAT}
        if others:
            raise UsageError(f"RUN_DIR {folder} holds {entry.name}, written in ring format {max(others)}; this compat reads format {FORMAT}.",
                             "Attach with the compat that started the job (compat --version where it was launched).")


def watch_attached(folder: str, options: WatchOptions, base_env: Mapping[str, str], say: Callable[[str], None],
                   render: Optional[Callable[[Finding], str]] = None, quiet_s: float = QUIET_S, first_beat_s: float = FIRST_BEAT_S) -> WatchOutcome:
    """Watch the job whose rings ``folder`` holds until it has ended (see the module's text); the outcome, attached."""
    watcher = Watcher(Path(folder).absolute(), options, attached=True)
    judging = Judging(watcher, base_env, say, render, PREFIX)
    started = time.monotonic()

    def finished(now: float) -> bool:
        if watcher.over():
            return True
        beats = [state.beats[-1].t for state in watcher.ranks.values() if state.beats]
        if not beats:
            if time.monotonic() - started > first_beat_s:
                raise UsageError(f"No ring in RUN_DIR {folder} held a heartbeat within {first_beat_s:g} s of attaching.", _FOLDER_FIX)
            return False
        if now - max(beats) > quiet_s:
            say(f"{PREFIX}: no rank has written a heartbeat for {quiet_s:g} s (the job is stopped, or its hosts are gone): the watch ends; "
                "attach again to go on watching")
            return True
        return False

    signals = SignalSeen()
    signals.start()
    interrupted: Optional[int] = None
    try:
        with raise_on_termination():
            judging.run(threading.Event(), signals, finished)
    except KeyboardInterrupt as exc:
        import signal

        from ..processes import Terminated

        interrupted = signals.check() or (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    finally:
        interrupted = interrupted or signals.check()
        signals.stop()
    outcome = completed(judging.outcome(None, attached=True), watcher)  # a dead rank's last lines, from its agent's line ring
    if interrupted is not None:
        outcome.interrupted = int(interrupted)
    return outcome
