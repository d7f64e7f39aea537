"""compat watch RUN_DIR without ranks: FIXTURE rings written with the ring module's own writer (ring.write_beat, the
reader's inverse, held equal to the agent's slots below), their ranks' liveness stood for by this test process holding
each ring's lock (as a rank's agent holds it for as long as the rank lives) and, for a rank of this host, by a child
process (stopped with SIGSTOP where the rank is to be stopped). The attached watch's judgement, its end, its refusals
(exit 2), its exit statuses and its JSON document.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from compatmatrix.watch import ring
from compatmatrix.watch.attach import check_run_folder, watch_attached
from compatmatrix.watch.render import NOT_ENDED, finding_text, text_lines, watch_json
from compatmatrix.watch.service import SITE, WatchOptions, agent_env, where

from ..clean_env import base_env
from ..conftest import ROOT

SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "watch-v1.json").read_text())


def _beat(path: Path, n: int, rank: int, pid: int, progress, t: float, state: str = "running", local: bool = False, world: int = 2, **extra) -> None:
    """FIXTURE heartbeat of ``rank`` in its ring, as its agent writes one; ``local``: this host's name and PID namespace
    (the watcher then reads the rank's /proc), else another host's."""
    host, namespace = where() if local else ("elsewhere", "pid:[1]")
    ring.write_beat(path, {"v": ring.FORMAT, "n": n, "rank": rank, "pid": pid, "t": t, "state": state, "source": "flight-recorder",
                           "world": str(world), "host": host, "ns": namespace, "cpu": 1.0, "pg": {"0": list(progress)}, "entries": [], **extra})


class Held:
    """FIXTURE liveness: this process holds each ring's lock, as each rank's agent does while its rank lives."""

    def __init__(self, *paths: Path) -> None:
        self.fds = {}
        for path in paths:
            if not path.exists():
                ring.write_beat(path, {"v": ring.FORMAT, "n": 0, "rank": int(path.stem.split("-")[1]), "pid": 1, "t": 0.0, "state": "starting"})
            fd = os.open(path, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.fds[path] = fd

    def release(self, path: Path | None = None) -> None:
        for held in [path] if path else list(self.fds):
            os.close(self.fds.pop(held))


def test_the_ring_modules_writer_writes_the_slot_the_agent_writes(tmp_path):
    """The FIXTURE rings of this file are the agent's: a heartbeat the agent wrote, parsed and written again by
    ring.slot_of, gives the same bytes."""
    env = agent_env(base_env({"RANK": "0", "COMPAT_WATCH_RANK": "0"}, drop=("PYTHONPATH",)), tmp_path, "t", 0.05)
    done = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3)"], env=env, timeout=60)
    assert done.returncode == 0 and SITE.is_dir()
    data = (tmp_path / "rank-0.ring").read_bytes()
    slots = [data[i:i + ring.SLOT] for i in range(0, len(data), ring.SLOT) if data[i:i + ring.SLOT].strip(b" \n\0")]
    assert len(slots) >= 2
    for raw in slots:
        assert ring.slot_of(json.loads(raw)) == raw


def _attached(folder: Path, stall_after: float | None = 3.0, said: list[str] | None = None, **kwargs):
    said = [] if said is None else said
    outcome = watch_attached(str(folder), WatchOptions(watch_only=True, stall_after=stall_after), base_env(), said.append, finding_text, **kwargs)
    return outcome, said


def test_a_finished_jobs_rings_end_the_watch_at_once_without_a_finding(tmp_path):
    now = time.time()
    for rank in range(2):
        path = tmp_path / f"rank-{rank}.ring"
        for n in range(5):
            _beat(path, n, rank, 4000 + rank, (n, n), now - 10 + n)
        _beat(path, 5, rank, 4000 + rank, (4, 4), now - 4, state="left")
    started = time.monotonic()
    outcome, said = _attached(tmp_path)
    assert time.monotonic() - started < 5 and said == []
    assert outcome.findings == () and outcome.exit_status == 0 and outcome.attached and outcome.job_status is None
    document = watch_json(outcome)
    jsonschema.validate(document, SCHEMA)
    assert document["attached"] is True and document["job_status"] is None and document["exit_status"] == 0


def test_a_rank_whose_ring_ended_without_a_word_is_named_dead(tmp_path):
    """Rank 1's last heartbeat says running and its lock is free: it ended without its exit handlers (SIGKILL, os._exit)."""
    now = time.time()
    for rank, state in ((0, "left"), (1, "running")):
        _beat(tmp_path / f"rank-{rank}.ring", 0, rank, 4000 + rank, (3, 3), now - 2, state=state)
    outcome, said = _attached(tmp_path)
    (death,) = outcome.findings
    assert death.rank == 1 and outcome.exit_status == 1 and said[0].startswith("compat watch: rank 1 (pid 4001) ended without a word")
    assert "ended without a word" in finding_text(death) and NOT_ENDED in watch_json(outcome)["findings"][0]["fix"]


def _stalled_job(tmp_path: Path, stop: threading.Event, rank1_pid: int, local: bool) -> threading.Thread:
    """FIXTURE job: both ranks completed collective #20, then rank 0 entered #21 and waits in it, writing a heartbeat
    every 0.2 s; rank 1 wrote its last heartbeat and nothing since (a stopped process)."""
    paths = [tmp_path / f"rank-{rank}.ring" for rank in range(2)]
    now = time.time()
    for n in range(3):
        _beat(paths[1], n, 1, rank1_pid, (20, 20), now - 0.6 + 0.2 * n, local=local)
    _beat(paths[0], 0, 0, os.getpid(), (20, 20), now, local=local)

    def write():
        n = 1
        while not stop.is_set():
            _beat(paths[0], n, 0, os.getpid(), (21, 20) if n >= 3 else (20, 20), time.time(), local=local)
            n += 1
            stop.wait(0.2)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("local", [True, False], ids=["this host, stopped by SIGSTOP", "another host, silent"])
def test_a_stall_is_named_kept_and_the_watch_ends_when_the_ranks_have(tmp_path, local):
    """compat watch cannot end the job: it names the stall (rank 1, the collective rank 0 waits in), keeps it (the fix
    says how to end the job), and ends once every rank has (their rings' locks freed); exit 1."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    os.kill(sleeper.pid, signal.SIGSTOP)
    stop = threading.Event()
    writer = _stalled_job(tmp_path, stop, sleeper.pid, local)
    held = Held(tmp_path / "rank-0.ring", tmp_path / "rank-1.ring")
    result, said = {}, []
    watching = threading.Thread(target=lambda: result.update(outcome=_attached(tmp_path, said=said)[0]), daemon=True)
    try:
        watching.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and watching.is_alive() and not any("stall:" in line for line in said):
            time.sleep(0.2)
        time.sleep(1.0)
        assert watching.is_alive(), "the watch ended while the job ran"
    finally:
        stop.set()
        writer.join(timeout=10)
        held.release()
        sleeper.kill()
        sleeper.wait(timeout=10)
    watching.join(timeout=20)
    assert not watching.is_alive()
    outcome = result["outcome"]
    (stall,) = [f for f in outcome.findings if f.rank == 1]
    assert stall.seq == 21 and [w.rank for w in stall.waiting] == [0] and stall.process_state == ("T" if local else "silent")
    assert said[0].startswith("compat watch: stall: rank 1") and not any("ending the job" in line for line in said)
    assert said[-1].startswith("compat watch: after the stall: rank 0"), said  # the ranks ended (here: their locks freed) after it
    assert outcome.exit_status == 1 and not outcome.ended_by_watch
    lines = text_lines(outcome, "compat watch")
    assert lines[1].startswith("compat watch: fix: ") and NOT_ENDED in lines[1]
    jsonschema.validate(watch_json(outcome), SCHEMA)


def test_a_stall_the_ranks_get_over_is_said_resolved_and_is_no_finding(tmp_path):
    now = time.time()
    paths = [tmp_path / f"rank-{rank}.ring" for rank in range(2)]
    held = Held(*paths)
    stop = threading.Event()

    def write():  # rank 1 stays out of #21 for ~5 s, then both go on and end
        for n in range(40):
            stuck = 3 <= n < 28
            for rank in range(2):
                progress = (21, 20) if stuck and rank == 0 else (22, 22) if n >= 28 else (20, 20)
                _beat(paths[rank], n, rank, 4000 + rank, progress, time.time())
            time.sleep(0.2)
        for rank in range(2):
            _beat(paths[rank], 40, rank, 4000 + rank, (22, 22), time.time(), state="left")
        held.release()

    del now
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    outcome, said = _attached(tmp_path)
    stop.set()
    thread.join(timeout=20)
    assert any("stall: rank 1" in line for line in said) and any("the stall resolved" in line for line in said), said
    assert outcome.findings == () and [s.rank for s in outcome.resolved] == [1] and outcome.exit_status == 0


def _quiet_job(tmp_path: Path) -> Held:
    """FIXTURE job of two ranks alive (their locks held) that wrote one heartbeat each and nothing since."""
    paths = [tmp_path / f"rank-{rank}.ring" for rank in range(2)]
    for rank in range(2):
        _beat(paths[rank], 0, rank, 4000 + rank, (3, 3), time.time())
    return Held(*paths)


def test_rings_no_rank_writes_any_more_end_the_watch_after_the_quiet_bound(tmp_path):
    """Every rank alive (locks held) and none writing (the whole job stopped, or its hosts gone from the network):
    the watch ends after ``quiet_s`` and says so."""
    held = _quiet_job(tmp_path)
    try:
        started = time.monotonic()
        outcome, said = _attached(tmp_path, quiet_s=1.5)
        assert 1.0 < time.monotonic() - started < 10
    finally:
        held.release()
    assert any("no rank has written a heartbeat for 1.5 s" in line for line in said), said
    assert outcome.findings == () and outcome.exit_status == 0


def test_the_world_the_heartbeats_say_waits_for_a_rank_not_seen_yet(tmp_path):
    """Rank 0 waits in #21 and says WORLD_SIZE 3; rank 1 never entered it; rank 2 has no ring yet: nothing is judged
    (as the launch judges nothing before every rank of its world is seen)."""
    from compatmatrix.watch.service import Watcher

    now = time.time()
    _beat(tmp_path / "rank-0.ring", 0, 0, 4000, (21, 20), now - 30, world=3)
    _beat(tmp_path / "rank-1.ring", 0, 1, 4001, (20, 20), now - 30, world=3)
    held = Held(tmp_path / "rank-0.ring", tmp_path / "rank-1.ring")
    try:
        watcher = Watcher(tmp_path, WatchOptions(stall_after=3.0), attached=True)
        watcher.read(now)
        assert watcher.world() == 3 and watcher.judge(now) == ()
        _beat(tmp_path / "rank-2.ring", 0, 2, 4002, (21, 20), now - 30, world=3)
        held2 = Held(tmp_path / "rank-2.ring")
        watcher.read(now)
        held2.release()
        assert [f.rank for f in watcher.judge(now)] == [1]
    finally:
        held.release()


def test_a_local_ranks_pid_reused_after_it_ended_is_not_taken_for_the_rank(tmp_path):
    """This host's rank 0 ended (its ring's lock is free); its pid is now another process's (this test's): ended."""
    from compatmatrix.watch.service import Watcher

    now = time.time()
    _beat(tmp_path / "rank-0.ring", 0, 0, os.getpid(), (3, 3), now, local=True)
    watcher = Watcher(tmp_path, WatchOptions(), attached=True)
    watcher.read(now)
    assert watcher.over()
    launch = Watcher(tmp_path, WatchOptions())  # beside the launch, the pid is its rank's while it lives
    launch.read(now)
    assert not launch.over()


# --- the command: its refusals (exit 2), Ctrl-C, the JSON document


def _compat_watch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compatmatrix", "watch", *args], capture_output=True, text=True, timeout=timeout,
                          env=base_env(), cwd=str(ROOT))


def _planted(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "symlink":
        target = tmp_path / "elsewhere.ring"
        _beat(target, 0, 0, 1, (1, 1), time.time())
        (folder / "rank-0.ring").symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(folder / "rank-0.ring")
    elif kind == "hardlink":
        _beat(folder / "rank-0.ring", 0, 0, 1, (1, 1), time.time())
        os.link(folder / "rank-0.ring", tmp_path / "second-name")
    elif kind == "format":
        ring.write_beat(folder / "rank-0.ring", {"v": ring.FORMAT + 1, "n": 0, "rank": 0, "pid": 1, "t": time.time(), "state": "running"})
    elif kind == "file":
        folder.rmdir()
        folder.write_text("not a folder")
    return folder


@pytest.mark.parametrize("kind, words", [
    ("missing", "does not exist"),
    ("file", "is not a folder"),
    ("empty", "holds no ring file"),
    ("symlink", "rank-0.ring, which is not a file of its own"),
    ("fifo", "rank-0.ring, which is not a file of its own"),
    ("hardlink", "rank-0.ring, which is not a file of its own"),
    ("format", f"written in ring format {ring.FORMAT + 1}; this compat reads format {ring.FORMAT}"),
])
def test_a_run_dir_with_nothing_to_watch_is_refused(tmp_path, kind, words):
    folder = tmp_path / "missing" if kind == "missing" else tmp_path / "empty" if kind == "empty" else _planted(tmp_path, kind)
    if kind == "empty":
        folder.mkdir()
    done = _compat_watch(str(folder))
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(Exception) as refused:
        check_run_folder(str(folder))
    assert words in str(refused.value.args[0])


def test_stall_after_is_checked_as_launchs():
    done = _compat_watch("--stall-after", "2", "/nonexistent")
    assert done.returncode == 2 and "Give --stall-after 3 or more" in done.stderr


def test_ctrl_c_stops_the_watch_with_130_and_the_document_says_so(tmp_path):
    held = _quiet_job(tmp_path)
    try:
        process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "watch", "--json", str(tmp_path)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=base_env(), cwd=str(ROOT))
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "watching the rings" not in line:
            line = process.stderr.readline()
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        held.release()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    document = json.loads(out)
    jsonschema.validate(document, SCHEMA)
    assert document["interrupted"] == "SIGINT" and document["attached"] is True and document["exit_status"] == 130


def test_ranks_seen_gone_in_one_look_name_the_one_not_stopped_by_sigterm_first():
    """Attached, the ranks' parent reaps them: rank 1 killed (no status seen) and rank 0 then stopped by its launcher
    with SIGTERM are seen gone in the same look. The one the launcher stopped comes second."""
    from compatmatrix.watch import judge as J

    beats = [tuple([J.Beat(0, rank, 4000 + rank, 1.0, "running", "flight-recorder", {"0": (3, 3)})]) for rank in range(2)]
    views = [J.RankView(0, beats[0], J.ProcessFact(False, "Z", signal.SIGTERM, 5.0)), J.RankView(1, beats[1], J.ProcessFact(False, "", None, 5.0))]
    assert [d.rank for d in J.judge(views, 6.0)] == [1, 0]
    views[1] = J.RankView(1, beats[1], J.ProcessFact(False, "", None, 5.5))  # seen later: time decides
    assert [d.rank for d in J.judge(views, 6.0)] == [0, 1]
