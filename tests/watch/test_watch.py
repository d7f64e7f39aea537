"""compat launch --watch without ranks: the pure judgement (stall, death, straggler) on made-up heartbeats, the ring
files as the agent writes them (the agent run by a plain Python, no torch), the text and JSON, the options."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from compatmatrix.watch import judge as J
from compatmatrix.watch import ring
from compatmatrix.watch.render import finding_json, finding_text, watch_json
from compatmatrix.watch.service import SITE, Watcher, WatchOptions, WatchOutcome, activity, agent_env

SITE_FILE = SITE / "sitecustomize.py"


def _beats(rank: int, times: list[float], progress: list[tuple[int, int]], entries: list[tuple[J.Collective, ...]] | None = None,
           state: str = "running") -> tuple[J.Beat, ...]:
    entries = entries or [()] * len(times)
    return tuple(J.Beat(n, rank, 1000 + rank, t, state, "flight-recorder", {"0": p}, e) for n, (t, p, e) in enumerate(zip(times, progress, entries)))


def _collectives(rank: int, count: int, start: float, gap: float, late: float = 0.0) -> tuple[J.Collective, ...]:
    return tuple(J.Collective("0", seq, "gloo:all_reduce", 4225, start + seq * gap + late, "default_pg") for seq in range(1, count + 1))


def _stalled_job(world: int, culprit: int, done: int, stalled_since: float, now_gap: float, gap: float = 0.2):
    """Every rank completed ``done`` collectives (one per ``gap`` seconds); the culprit then stopped (its heartbeats
    too), the others entered collective done + 1 and wait in it."""
    views = []
    t_stop = done * gap
    for rank in range(world):
        collectives = _collectives(rank, done, 0.0, gap)
        if rank == culprit:
            times = [t_stop - 0.5, t_stop]
            progress = [(done, done), (done, done)]
        else:
            collectives += (J.Collective("0", done + 1, "gloo:all_reduce", 4225, t_stop + 0.01, "default_pg"),)
            times = [t_stop - 0.5, t_stop + 0.02, t_stop + stalled_since + now_gap]
            progress = [(done, done), (done + 1, done), (done + 1, done)]
        views.append(J.RankView(rank, _beats(rank, times, progress), J.ProcessFact(True, "T" if rank == culprit else "S"), collectives))
    now = t_stop + 0.02 + stalled_since + now_gap
    return views, now


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 6), data=st.data(), done=st.integers(3, 200), wait=st.floats(0.0, 100.0))
def test_a_stall_names_the_rank_that_never_entered_and_what_the_others_wait_in(world, data, done, wait):
    culprit = data.draw(st.integers(0, world - 1))
    views, now = _stalled_job(world, culprit, done, wait, 0.0)
    found = J.judge(views, now, world=world)
    bound, _ = J.stall_bound(views, None)
    assume(abs(wait - bound) > 1e-6)  # at the bound itself the float sums of the test's own times decide, not the rule
    stalls = [f for f in found if isinstance(f, J.Stall)]
    if wait <= bound:
        assert not stalls
        return
    (stall,) = stalls
    assert stall.rank == culprit and stall.seq == done + 1 and stall.last_entered == done
    assert stall.collective is not None and stall.collective.op == "gloo:all_reduce" and stall.collective.numel == 4225
    assert sorted(w.rank for w in stall.waiting) == [r for r in range(world) if r != culprit]
    assert all(w.seq == done + 1 for w in stall.waiting)
    assert stall.process_state == "T"


def test_a_stalled_ranks_progress_is_what_the_others_completed_with_it_when_its_heartbeat_is_older():
    views, now = _stalled_job(2, 1, 20, 60.0, 0.0)
    stale = J.RankView(1, _beats(1, [3.0], [(14, 14)]), views[1].process, views[1].collectives)  # its last heartbeat: 6 collectives ago
    (stall,) = J.judge([views[0], stale], now, world=2)
    assert (stall.rank, stall.seq, stall.last_entered, stall.last_completed) == (1, 21, 20, 20)


def test_the_stall_bound_follows_the_jobs_pace_and_the_option_overrides_it():
    fast, _ = _stalled_job(2, 1, 20, 0.0, 0.0, gap=0.2)
    slow, _ = _stalled_job(2, 1, 20, 0.0, 0.0, gap=8.0)
    assert J.stall_bound(fast, None) == (J.STOPPED_FLOOR_S, "derived")
    assert J.stall_bound(slow, None) == (J.STALL_FACTOR * 8.0, "derived")
    assert J.stall_bound(slow, 3.0) == (3.0, "--stall-after")
    views, now = _stalled_job(2, 1, 20, 5.0, 0.0, gap=8.0)  # 5 s without progress in a job that takes 8 s between collectives
    assert not J.judge(views, now, world=2)
    assert [f.rank for f in J.judge(views, now, stall_after=3.0, world=2)] == [1]


def _with_process(views, rank, fact):
    return [J.RankView(v.rank, v.beats, fact, v.collectives) if v.rank == rank else v for v in views]


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 6), done=st.integers(3, 100), wait=st.floats(0.0, 5000.0), state=st.sampled_from(["R", "S", "D", "T"]))
def test_no_stall_while_no_rank_is_inside_a_collective(world, done, wait, state):
    """A checkpoint, an evaluation, a long first step: every rank completed what it entered."""
    views = []
    for rank in range(world):
        beats = _beats(rank, [done * 0.2, done * 0.2 + 1.0], [(done, done), (done, done)])
        views.append(J.RankView(rank, beats, J.ProcessFact(True, state), _collectives(rank, done, 0.0, 0.2)))
    assert not J.judge(views, done * 0.2 + wait, world=world)


@settings(max_examples=40, deadline=None)
@given(world=st.integers(2, 6), wait=st.floats(0.0, 5000.0))
def test_no_stall_when_every_rank_entered_the_collective(world, wait):
    views = []
    for rank in range(world):
        beats = _beats(rank, [4.0, 4.1], [(20, 20), (21, 20)])
        views.append(J.RankView(rank, beats, J.ProcessFact(True, "S"), _collectives(rank, 21, 0.0, 0.2)))
    assert not J.judge(views, 4.1 + wait, world=world)


@settings(max_examples=60, deadline=None)
@given(wait=st.floats(0.0, 1000.0), state=st.sampled_from(["R", "S", "D", "T"]), active_ago=st.one_of(st.none(), st.floats(0.0, 100.0)))
def test_a_rank_gaining_cpu_time_is_named_only_after_the_long_bound_and_an_idle_one_after_its_floor(wait, state, active_ago):
    views, now = _stalled_job(2, 1, 20, wait, 0.0)
    fact = J.ProcessFact(True, state, active_at=None if active_ago is None else now - active_ago)
    views = _with_process(views, 1, fact)
    stalls = [f for f in J.judge(views, now, world=2) if isinstance(f, J.Stall)]
    stalled_for = wait  # since the others entered
    if (active_ago is not None and active_ago < J.ACTIVE_S) or state == "D":
        bound = J.BUSY_BOUND_S
    else:
        bound = J.STOPPED_FLOOR_S if state == "T" else J.STALL_FLOOR_S
    if stalled_for <= bound - 1e-6:
        assert not stalls
    elif stalled_for > bound + 1e-6:
        (stall,) = stalls
        assert stall.rank == 1 and stall.bound == bound and stall.busy == (bound == J.BUSY_BOUND_S)
        assert ("stopped first" in finding_text(stall)) != stall.busy


def test_the_watcher_sees_a_computing_rank_gain_cpu_time_and_a_stopped_one_not():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = activity(child.pid)
        time.sleep(0.3)
        second = activity(child.pid)
        assert first is not None and second is not None and second[0] > first[0]
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.1)
        stopped = activity(child.pid)
        time.sleep(0.3)
        assert activity(child.pid) == stopped
    finally:
        child.kill()
        child.wait()
    assert activity(child.pid) is None


def test_no_stall_is_judged_before_every_rank_has_entered_a_collective():
    views, now = _stalled_job(2, 1, 20, 500.0, 0.0)
    starting = J.RankView(1, (J.Beat(0, 1, 1001, 0.0, "starting"),), J.ProcessFact(True, "S"))
    assert not J.judge([views[0], starting], now, world=2)
    assert not J.judge([views[0]], now, world=2)  # a rank not seen yet


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 6), gone=st.lists(st.tuples(st.floats(0, 100), st.sampled_from([9, 15, 6, 0x300, 0x100])), min_size=1, max_size=6, unique_by=lambda g: g[0]))
def test_deaths_are_named_earliest_first_with_their_status(world, gone):
    gone = gone[:world]
    views = []
    for rank in range(world):
        beats = _beats(rank, [0.0], [(1, 1)])
        if rank < len(gone):
            at, status = gone[rank]
            views.append(J.RankView(rank, beats, J.ProcessFact(False, "Z", status, at)))
        else:
            views.append(J.RankView(rank, beats, J.ProcessFact(True, "S")))
    found = J.judge(views, 200.0, world=world)
    assert [f.rank for f in found] == sorted(range(len(gone)), key=lambda r: (gone[r][0], r))
    for death in found:
        status = gone[death.rank][1]
        assert (death.signal, death.exit_code) == ((status, None) if status & 0x7F else (None, status >> 8))


def test_a_clean_exit_is_no_death_and_an_exception_is():
    left = J.RankView(0, _beats(0, [0.0, 1.0], [(1, 1), (1, 1)], state="left"), J.ProcessFact(False, "Z", 0, 2.0))
    gone = J.RankView(1, _beats(1, [0.0], [(1, 1)]), J.ProcessFact(False, "", None, 3.0))
    assert J.judge([left], 10.0) == ()
    (death,) = J.judge([left, gone], 10.0)
    assert death.rank == 1 and death.signal is None and death.exit_code is None
    assert "ended without a word" in finding_text(death)
    raised = J.RankView(1, (J.Beat(0, 1, 7, 1.0, "exception", exception="ValueError: bad batch"),), J.ProcessFact(True, "S"))
    assert J.judge([left, raised], 10.0) == ()  # still alive: its status decides
    raised = J.RankView(1, raised.beats, J.ProcessFact(False, "Z", 0x100, 2.0))
    (death,) = J.judge([left, raised], 10.0)
    assert death.exception == "ValueError: bad batch" and "ValueError: bad batch" in finding_text(death) and death.exit_code == 1


@settings(max_examples=60, deadline=None)
@given(state=st.sampled_from(["starting", "running", "exception", "left"]), alive=st.booleans(), exception=st.text(max_size=20))
def test_exit_0_is_never_a_death(state, alive, exception):
    """Whatever the last heartbeat said (sys.exit(False), os._exit(0), an exception caught): a known status 0 is no death."""
    beats = (J.Beat(0, 1, 7, 1.0, state, exception=exception),)
    assert J.judge([J.RankView(1, beats, J.ProcessFact(alive, "" if alive else "Z", None if alive else 0, None if alive else 2.0))], 10.0) == ()


def _paced(world: int, slow: int, count: int, gap: float, late: float) -> list[J.RankView]:
    views = []
    for rank in range(world):
        collectives = _collectives(rank, count, 0.0, gap, late if rank == slow else 0.0)
        views.append(J.RankView(rank, _beats(rank, [0.0, count * gap], [(count, count), (count, count)]), J.ProcessFact(True, "S"), collectives))
    return views


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 6), data=st.data(), count=st.integers(J.STRAGGLER_MIN + J.STRAGGLER_WARMUP, 200), gap=st.floats(0.01, 5.0),
       late_share=st.floats(0.0, 0.95))
def test_the_straggler_is_the_rank_the_others_wait_for(world, data, count, gap, late_share):
    slow = data.draw(st.integers(0, world - 1))
    views = _paced(world, slow, count, gap, late_share * gap)
    found = [f for f in J.judge(views, count * gap, world=world) if isinstance(f, J.Straggler)]
    judged = count - J.STRAGGLER_WARMUP  # the first are warm-up
    span = (judged - 1) * gap + late_share * gap
    others_share = judged * late_share * gap / span if span > 0 else 0
    if late_share > 0 and others_share >= J.STRAGGLER_OTHERS_WAIT + 0.01:
        (straggler,) = found
        assert straggler.rank == slow and straggler.wait_share[slow] == 0.0 and straggler.last_share == 1.0
        assert finding_text(straggler).startswith(f"straggler: rank {slow} holds the others back")
    elif others_share < J.STRAGGLER_OTHERS_WAIT - 0.01:
        assert not found


def test_no_straggler_when_the_ranks_keep_pace_or_too_few_collectives():
    assert not J.straggler_of(_paced(2, 1, 50, 0.2, 0.001))
    assert not J.straggler_of(_paced(2, 1, J.STRAGGLER_WARMUP + J.STRAGGLER_MIN - 1, 0.2, 0.15))
    assert J.straggler_of(_paced(2, 1, J.STRAGGLER_WARMUP + J.STRAGGLER_MIN, 0.2, 0.15)).rank == 1


def test_a_slow_warm_up_is_no_straggler():
    """Rank 1 late in the first collectives only (a first step that builds its caches), then in step."""
    views = []
    for rank in range(2):
        collectives = tuple(J.Collective("0", seq, "gloo:all_reduce", 4, seq * 0.2 + rank * (0.5 if seq <= 5 else 0.0001))
                            for seq in range(1, 5 + J.STRAGGLER_MIN + 1))
        views.append(J.RankView(rank, _beats(rank, [0.0], [(1, 1)]), J.ProcessFact(True, "S"), collectives))
    assert J.straggler_of(views) is None


# --- the ring files, written by the agent itself (a plain Python: no torch, so progress says "none")


def test_the_ring_constants_are_the_agents():
    text = SITE_FILE.read_text()
    for name in ("SLOTS", "SLOT", "FORMAT"):
        assert f"\n{name} = {getattr(ring, name)}\n" in text


def _agent(tmp_path: Path, code: str, rank: str = "1", extra: dict | None = None) -> subprocess.CompletedProcess:
    env = agent_env({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK")}, tmp_path, "test", 0.05)
    env.update({"RANK": rank, "WORLD_SIZE": "2", "LOCAL_RANK": rank, "TORCHELASTIC_RESTART_COUNT": "0", **(extra or {})})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_agent_writes_a_bounded_ring_of_heartbeats_and_a_clean_exit(tmp_path):
    done = _agent(tmp_path, "import time; time.sleep(4)")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "rank-1.ring"
    assert path.stat().st_size == ring.SLOTS * ring.SLOT + 32 * 512  # 80 heartbeats in 4 s: the ring wrapped, the file did not grow (the line ring after it)
    beats = ring.beats_of(path.read_bytes(), 1)
    assert len(beats) == ring.SLOTS and beats[-1].state == "left" and beats[-1].source == "none"
    assert [b.n for b in beats] == list(range(beats[0].n, beats[0].n + ring.SLOTS))
    assert not ring.lock_held(path)


def test_the_agent_records_the_exception_that_ends_a_rank_and_stays_out_of_other_processes(tmp_path):
    done = _agent(tmp_path, "raise ValueError('bad batch')")
    assert done.returncode == 1 and "ValueError: bad batch" in done.stderr  # the rank's own traceback is untouched
    (exc,) = [b for b in ring.beats_of((tmp_path / "rank-1.ring").read_bytes(), 1) if b.state == "exception"]
    assert exc.exception == "ValueError: bad batch"
    for rank in ("", "x", "\u00b2", "1\u0661"):  # torchrun's own agent process (no RANK), or not ASCII digits
        assert _agent(tmp_path / "none", "pass", rank=rank).returncode == 0
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("extra, acts", [
    ({"LOCAL_RANK": None, "TORCHELASTIC_RESTART_COUNT": None}, False),  # RANK in compat's environment: torchrun itself
    ({"TORCHELASTIC_RESTART_COUNT": None}, False),
    ({"LOCAL_RANK": None}, False),
    ({"TORCHELASTIC_RESTART_COUNT": None, "TORCHELASTIC_RUN_ID": "x"}, True),  # a torchrun worker
    ({"LOCAL_RANK": None, "TORCHELASTIC_RESTART_COUNT": None, "COMPAT_WATCH_RANK": "1"}, True),  # compat's spawn
    ({"COMPAT_WATCH_RANK": "0"}, False),  # another rank's marker: not this rank's worker
])
def test_the_agent_acts_only_in_a_worker(tmp_path, extra, acts):
    env = agent_env({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK") and not k.startswith("TORCHELASTIC_")}, tmp_path, "t", 0.05)
    env.update({"RANK": "1", "LOCAL_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "0"})
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    assert subprocess.run([sys.executable, "-c", "pass"], env=env, timeout=60).returncode == 0
    assert (tmp_path / "rank-1.ring").exists() == acts


def test_the_launch_guardian_runs_without_the_watch(tmp_path, monkeypatch):
    from compatmatrix.launchers import run as launch_run

    env = agent_env({"PATH": os.environ.get("PATH", ""), "PYTHONPATH": "/x"}, tmp_path, "t", 0.5)
    seen = {}

    class FixturePopen:
        """FIXTURE: records the guardian's environment instead of starting it."""

        def __init__(self, argv, **kw):
            seen.update(kw["env"])

    monkeypatch.setattr(launch_run.subprocess, "Popen", FixturePopen)
    launch_run._start_guardian(1, "r", env)
    assert not any(k.startswith("COMPAT_WATCH_") for k in seen) and str(SITE) not in seen["PYTHONPATH"].split(os.pathsep)
    assert "/x" in seen["PYTHONPATH"].split(os.pathsep)
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("code, status", [
    ("import sys\ntry:\n    sys.exit(3)\nexcept SystemExit:\n    pass", 0),  # a SystemExit caught
    ("import sys, threading\nt = threading.Thread(target=sys.exit, args=(1,))\nt.start(); t.join()", 0),  # ends the thread only
    ("import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(1)\nos.waitpid(pid, 0)", 0),  # a forked helper's status
    ("import sys; sys.exit(False)", 0),
    ("import os, time; time.sleep(0.2); os._exit(0)", 0),
    ("import sys; sys.exit(3)", 3),
])
def test_the_agent_records_no_exit_status_the_process_status_decides(tmp_path, code, status):
    done = _agent(tmp_path, code)
    assert done.returncode == status, done.stderr
    beats = ring.beats_of((tmp_path / "rank-1.ring").read_bytes(), 1)
    assert len({b.pid for b in beats}) == 1 and beats[0].pid != 0  # a forked child wrote nothing
    fact = J.ProcessFact(False, "Z", status << 8, 5.0)
    found = J.judge([J.RankView(1, tuple(beats), fact)], 10.0)
    assert (found == ()) == (status == 0)


def test_a_child_forked_while_the_agent_holds_its_lock_runs_and_writes_nothing(tmp_path):
    code = ("import os, sys, time, sitecustomize\nagent = sitecustomize._AGENT\nagent.lock.acquire()\npid = os.fork()\n"
            "if pid == 0:\n    agent.record('running')\n    sys.exit(0)\nagent.lock.release()\n"
            "for _ in range(100):\n    done, status = os.waitpid(pid, os.WNOHANG)\n    if done:\n        print('child', status); break\n    time.sleep(0.05)\n"
            "else:\n    os.kill(pid, 9); print('child hung')")
    done = _agent(tmp_path, code)
    assert done.returncode == 0 and done.stdout.strip() == "child 0", (done.stdout, done.stderr)
    assert len({b.pid for b in ring.beats_of((tmp_path / "rank-1.ring").read_bytes(), 1)}) == 1


def test_a_second_process_of_a_rank_leaves_the_ring_to_the_first(tmp_path):
    code = ("import os, subprocess, sys; r = subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.3)']);"
            "print(len([l for l in open('/proc/self/status')]))")
    assert _agent(tmp_path, code).returncode == 0
    pids = {b.pid for b in ring.beats_of((tmp_path / "rank-1.ring").read_bytes(), 1)}
    assert len(pids) == 1


def test_the_agent_chains_the_environments_own_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    (tmp_path / "run").mkdir()
    done = _agent(tmp_path / "run", "import os; print(os.environ.get('OWN_SITE'))", extra={"PYTHONPATH": f"{SITE}{os.pathsep}{own}"})
    assert done.stdout.strip() == "ran"
    assert (tmp_path / "run" / "rank-1.ring").exists()


@pytest.mark.parametrize("site", ["compatmatrix/watch/site", "compatmatrix/tune/fixture_site"])
def test_the_users_sitecustomize_keeps_its_path_and_its_module_and_its_errors(tmp_path, site):
    folder = Path(__file__).resolve().parents[2] / site
    own, extra = tmp_path / "own", tmp_path / "extra"
    own.mkdir(), extra.mkdir()
    (extra / "usermod.py").write_text("X = 42\n")
    (own / "sitecustomize.py").write_text(f"import sys\nsys.path.append({str(extra)!r})\nMARK = 'users'\n")
    code = "import sys, sitecustomize, usermod; print(usermod.X, sitecustomize.MARK, {folder!r} in sys.path)".replace("{folder!r}", repr(str(folder)))
    done = _agent(tmp_path, code, extra={"PYTHONPATH": f"{folder}{os.pathsep}{own}"})
    assert done.returncode == 0 and done.stdout.split() == ["42", "users", "False"], done.stderr
    (own / "sitecustomize.py").write_text("import not_installed_anywhere_xyz\n")
    done = _agent(tmp_path, "print('ran')", extra={"PYTHONPATH": f"{folder}{os.pathsep}{own}"})
    assert "Error in sitecustomize" in done.stderr and "not_installed_anywhere_xyz" in done.stderr, done.stderr  # as Python says it
    (own / "sitecustomize.py").unlink()
    done = _agent(tmp_path, "import sitecustomize; print(sitecustomize.__file__)", extra={"PYTHONPATH": f"{folder}{os.pathsep}{own}"})
    assert done.stdout.strip() == str(folder / "sitecustomize.py"), done.stderr


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3 * ring.SLOT))
def test_the_ring_reader_takes_any_bytes(data):
    for beat in ring.beats_of(data, 0):
        assert beat.rank == 0


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12))
def test_a_slot_of_any_json_is_a_beat_or_nothing(body):
    for rank in (0,):
        slot = json.dumps({"v": 1, "rank": 0, "t": 1.0, "pg": body, "entries": body, "state": body, "n": body})
        assume(len(slot.encode()) < ring.SLOT)  # the agent never writes a longer one
        beats = ring.beats_of(slot.encode(), rank)
        assert len(beats) == 1 and beats[0].t == 1.0


def test_the_watcher_keeps_what_the_ring_forgets_and_sees_a_gone_process(tmp_path):
    done = _agent(tmp_path, "pass", rank="0")
    assert done.returncode == 0
    watcher = Watcher(tmp_path, WatchOptions())
    watcher.read(5.0)
    (view,) = watcher.views()
    assert view.rank == 0 and not view.process.alive and view.last.state == "left"
    assert watcher.judge(6.0) == ()  # it left cleanly
    assert watcher.sources() == ("none",)


# --- words and the document


def test_the_json_document_follows_its_schema_for_every_kind():
    import jsonschema

    from compatmatrix.render import schema_path

    views, now = _stalled_job(3, 1, 30, 60.0, 0.0)
    stall = J.judge(views, now, world=3)[0]
    death = J.Death(1, 42, 3.0, 9, None, "", "running")
    straggler = J.straggler_of(_paced(2, 1, 20, 0.2, 0.15))
    outcome = WatchOutcome(1, (stall, death, straggler), True, 5.0, ("flight-recorder",), ())
    document = watch_json(outcome)
    jsonschema.validate(document, json.loads(schema_path("launch --watch").read_text()))
    assert document["exit_status"] == 1 and [f["kind"] for f in document["findings"]] == ["stall", "death", "straggler"]
    assert finding_json(death)["signal"] == "SIGKILL"
    text = finding_text(stall)
    assert text.startswith("stall: rank 1 stopped first: it never entered gloo:all_reduce #31 of process group 0 (default_pg), 4225 elements")
    assert "rank 0 waits in gloo:all_reduce #31" in text and "rank 2 waits in gloo:all_reduce #31" in text and "its process is stopped" in text
    assert WatchOutcome(3, (straggler,)).exit_status == 3  # a straggler alone keeps the job's own status
    assert WatchOutcome(0, ()).exit_status == 0


@pytest.mark.parametrize("argv, message", [
    (["--stall-after", "5"], "--stall-after goes with --watch"),
    (["--watch", "--print"], "--watch runs the job"),
    (["--watch", "--stall-after", "0"], "give seconds above 0"),
    (["--watch", "--stall-after", "2.5"], "Give --stall-after 3 or more"),
    (["--report", "r.html"], "--report draws what compat launch --watch saw: it goes with --watch"),
    (["--watch", "--report", "/nonexistent-folder/r.html"], "is not a file in an existing folder"),
    (["--watch", "--report", "/proc/compat-watch.html"], "cannot be written: its folder /proc refuses a new file ("),
])
def test_the_watch_options_are_checked(argv, message):
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--launcher", "torchrun", "--nproc-per-node", "2", *argv, "--", "train.py"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_watch_under_srun_needs_a_run_folder_every_node_sees():
    """srun's tasks run on the allocation's nodes, which need not be this host: a private folder of this host would
    leave the watcher blind, so --watch-dir is required (as across hosts)."""
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--launcher", "srun", "--nproc-per-node", "2", "--watch", "--", "train.py"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Under srun each task runs on a node of the allocation" in done.stderr and "--watch-dir DIR" in done.stderr


def test_a_task_of_compat_launchs_srun_line_is_watched_as_the_rank_it_maps(tmp_path):
    """One task of the srun line, as srun starts it (FIXTURE scontrol: the list node1,node2; Slurm numbers node2 first,
    so SLURM_PROCID 0 runs there and the line maps it to RANK 1): under the watch the task marks its rank, the agent
    writes rank-1.ring (not rank-0), a Python child of the rank leaves it alone; without the watch nothing is marked."""
    from compatmatrix.launchers.srun import _MAP_RANKS

    tools = tmp_path / "fixture-bin"
    tools.mkdir()
    (tools / "scontrol").write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames node[1-2]" ] && printf "node1\\nnode2\\n"\n')  # FIXTURE scontrol
    (tools / "scontrol").chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    task = {"PATH": f"{tools}:{os.environ['PATH']}", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1",
            "SLURM_JOB_ID": "54321", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": "node2"}
    code = ("import os, subprocess, sys; print(os.environ['RANK'], os.environ.get('COMPAT_WATCH_RANK', '-'));"
            "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.3)'], check=True); import time; time.sleep(0.3)")
    watched = agent_env({}, run_dir, "t", 0.05) | task
    done = subprocess.run(["sh", "-c", _MAP_RANKS, "compat-launch-rank", sys.executable, "-c", code], env=watched, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["1", "1"], done.stderr
    assert [p.name for p in run_dir.iterdir()] == ["rank-1.ring"]
    beats = ring.beats_of((run_dir / "rank-1.ring").read_bytes(), 1)
    assert len({beat.pid for beat in beats}) == 1 and beats[-1].state == "left" and beats[-1].world == 2
    plain = subprocess.run(["sh", "-c", _MAP_RANKS, "compat-launch-rank", sys.executable, "-c", code], env=task, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.split() == ["1", "-"], plain.stderr


# --- spawn: compat starts the ranks (plain Python ranks here: the agent's liveness and the exact exit statuses)


def _spawned(code: str, nproc: int = 2, stall_after=None):
    from compatmatrix.watch.render import finding_text as words
    from compatmatrix.watch.service import watch_launch
    from compatmatrix.watch.spawn import SpawnRun

    from ..clean_env import base_env
    from ..procs import MARK_VARIABLE, marked, new_mark

    mark = new_mark()
    said: list[str] = []
    spawn = SpawnRun(("-c", code), sys.executable, nproc, said.append)
    started = time.monotonic()
    outcome = watch_launch(spawn, base_env({MARK_VARIABLE: mark}), WatchOptions(stall_after=stall_after, world=nproc), said.append, words, spawn.exits)
    return outcome, said, time.monotonic() - started, marked(mark)


def test_spawn_names_a_rank_that_exits_non_zero_with_its_status():
    outcome, said, _seconds, left = _spawned("import os, sys, time; time.sleep(0.5); sys.exit(3 if os.environ['RANK'] == '1' else 0)")
    (death,) = outcome.findings
    assert death.rank == 1 and death.exit_code == 3 and death.signal is None
    assert outcome.job_status == 3 and outcome.exit_status == 1 and left == []


def test_spawn_names_a_killed_rank_with_its_signal_and_stops_the_others():
    code = "import os, signal, time; time.sleep(1.0)\nif os.environ['RANK'] == '1': os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(120)"
    outcome, said, seconds, left = _spawned(code)
    death = outcome.findings[0]
    assert death.rank == 1 and death.signal == 9 and finding_text(death).endswith("was killed by SIGKILL.")
    assert outcome.job_status == 128 + 9 and seconds < 30 and left == []
    assert any("rank 1 (pid" in line for line in said)


def test_spawn_keeps_a_healthy_jobs_status_and_says_nothing():
    outcome, said, _seconds, left = _spawned("import time; time.sleep(0.5)")
    assert outcome.findings == () and outcome.exit_status == 0 and left == []


def test_the_stack_of_a_stopped_process_is_taken_from_outside():
    """py-spy reads a process stopped by SIGSTOP (what a stalled rank often is); without py-spy the reason is given."""
    import signal as signals

    from compatmatrix.watch.stacks import find_py_spy, take

    process = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting_here():\n    time.sleep(60)\nwaiting_here()"])
    try:
        time.sleep(0.5)
        os.kill(process.pid, signals.SIGSTOP)
        py_spy = find_py_spy(os.environ)
        (stack,) = take(py_spy, {1: process.pid})
        if py_spy is None:
            assert "py-spy is not installed" in stack.error
        else:
            assert "waiting_here" in stack.text, stack.error
        (none,) = take(None, {1: process.pid})
        assert none.text == "" and "pip install py-spy" in none.error
    finally:
        process.kill()
        process.wait()


def test_the_agents_environment_keeps_the_users_path_and_flight_recorder_size(tmp_path):
    env = agent_env({"PYTHONPATH": "/mine", "TORCH_FR_BUFFER_SIZE": "0"}, tmp_path, "id", 0.5)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE), "/mine"] and env["TORCH_FR_BUFFER_SIZE"] == "0"
    assert env["COMPAT_WATCH_DIR"] == str(tmp_path) and env["COMPAT_WATCH_RUN"] == "id"
    assert agent_env({}, tmp_path, "id", 0.5)["TORCH_FR_BUFFER_SIZE"] == "256"


def test_a_rank_that_ended_because_its_peer_went_away_comes_after_the_one_that_died():
    peer = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:2480. "
            "This is typically caused by a remote worker crashing.")
    follower = J.RankView(0, (J.Beat(3, 0, 10, 5.0, "exception", exception=peer),), J.ProcessFact(False, "Z", 0x100, 5.1))
    killed = J.RankView(1, _beats(1, [4.9], [(1, 1)]), J.ProcessFact(False, "", 9, 5.3))
    first, second = J.judge([follower, killed], 6.0)
    assert (first.rank, first.signal, second.rank, second.follows_another) == (1, 9, 0, True)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_nothing_of_a_watched_spawn_outlives_compat(sig, tmp_path):
    """Ctrl-C to compat, or compat killed outright: the ranks (and what they started) are gone, read from /proc."""
    import signal as signals

    from ..clean_env import base_env
    from ..procs import MARK_VARIABLE, marked, new_mark, wait_until

    mark = new_mark()
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); time.sleep(300)"
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "launch", "--watch", "--launcher", "spawn", "--nproc-per-node", "2", "--", "-c", code],
                               env=base_env({MARK_VARIABLE: mark}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # compat, its guardian, two ranks and the two sleepers they started in sessions of their own
        assert wait_until(lambda: len(marked(mark)) >= 6, 60), marked(mark)
        process.send_signal(getattr(signals, sig))
        process.wait(timeout=60)
        assert wait_until(lambda: marked(mark) == [], 15), marked(mark)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in marked(mark):
            os.kill(pid, signals.SIGKILL)
    if sig == "SIGINT":
        assert process.returncode == 130
    assert "death" not in process.stderr.read()


def test_a_signal_to_compat_stops_the_judging_and_is_the_exit_status(tmp_path):
    """As under torchrun: the launch handles the signal itself and passes it on to the rank, which dies of it. That
    death is no finding, and the exit status is 128 + the signal."""
    import signal as signals
    import threading

    from compatmatrix.watch.service import watch_launch

    said: list[str] = []

    def run(env):  # a launcher's run: forwards SIGTERM to its rank, returns the rank's status
        env = {**env, "RANK": "0", "LOCAL_RANK": "0", "TORCHELASTIC_RESTART_COUNT": "0", "WORLD_SIZE": "1"}
        rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        previous = signals.signal(signals.SIGTERM, lambda *_: rank.send_signal(signals.SIGTERM))
        try:
            threading.Timer(1.5, os.kill, (os.getpid(), signals.SIGTERM)).start()
            return rank.wait(timeout=30)
        finally:
            signals.signal(signals.SIGTERM, previous)

    outcome = watch_launch(run, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, WatchOptions(world=1), said.append)
    assert outcome.job_status == -15 and outcome.interrupted == signals.SIGTERM
    assert outcome.findings == () and outcome.exit_status == 143 and not said, said


def test_a_sigterm_to_compat_gives_spawned_ranks_their_grace(tmp_path):
    """SIGTERM to compat: each rank gets TERM first and time to save (COMPAT_LAUNCH_GRACE), no death is said, 143."""
    from ..clean_env import base_env
    from ..procs import wait_until

    code = ("import os, signal, sys, time\n"
            "def save(*_):\n    time.sleep(1.0); open(os.path.join(sys.argv[1], 'saved-' + os.environ['RANK']), 'w').close(); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, save)\nopen(os.path.join(sys.argv[1], 'up-' + os.environ['RANK']), 'w').close()\ntime.sleep(120)")
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "launch", "--watch", "--launcher", "spawn", "--nproc-per-node", "2", "--", "-c", code,
                                str(tmp_path)], env=base_env({"COMPAT_LAUNCH_GRACE": "20"}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(list(tmp_path.glob("up-*"))) == 2, 60)
        process.terminate()
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert sorted(p.name for p in tmp_path.glob("saved-*")) == ["saved-0", "saved-1"]
    assert process.returncode == 143 and "death" not in err and "ending the job" not in err, err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 10**400])
def test_a_heartbeats_time_must_be_a_finite_number(value):
    body = json.dumps({"v": 1, "n": 0, "rank": 0, "pid": 5, "t": value, "state": "running"}).encode()
    assert ring.beats_of(body.ljust(ring.SLOT - 1) + b"\n", 0) == []
    assert ring._float(1.5) == 1.5


def test_the_agent_writes_no_planted_file_and_the_reader_follows_no_link(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank-1.ring").symlink_to(precious)
    assert _agent(run, "pass").returncode == 0
    assert precious.read_text() == "keep" and ring.read_ring(run / "rank-1.ring") == b""
    (run / "rank-1.ring").unlink()
    os.link(precious, run / "rank-1.ring")  # a hard link: two names
    assert _agent(run, "pass").returncode == 0
    assert precious.read_text() == "keep"
    (run / "rank-1.ring").unlink()
    os.mkfifo(run / "rank-1.ring")
    started = time.monotonic()
    assert _agent(run, "pass").returncode == 0 and ring.read_ring(run / "rank-1.ring") == b""
    assert time.monotonic() - started < 30


def test_the_death_fix_names_the_oom_killer_only_for_a_sigkill():
    from compatmatrix.watch.render import fix_of

    def death(sig=None, code=None, exception=""):
        return J.Death(1, 7, 1.0, sig, code, exception, "running")

    assert "OOM" in fix_of(death(signal.SIGKILL))
    for other in (death(signal.SIGSEGV), death(code=3), death(exception="ValueError: x")):
        assert "OOM" not in fix_of(other)
    assert "status 3" in fix_of(death(code=3)) and "SIGSEGV" in fix_of(death(signal.SIGSEGV))
    straggler = J.Straggler(1, {0: 0.5, 1: 0.0}, 1.0, 20)
    assert "spawn binds none" in fix_of(straggler)


def test_spawn_gives_the_ranks_loopback_whatever_compats_environment_says(tmp_path):
    code = f"import os; open(os.path.join({str(tmp_path)!r}, 'addr-' + os.environ['RANK']), 'w').write(os.environ['MASTER_ADDR'])"
    from compatmatrix.watch.spawn import SpawnRun

    status = SpawnRun(("-c", code), sys.executable, 1)({k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"MASTER_ADDR": "10.9.9.9", "COMPAT_WATCH_RUN": "t"})
    assert status == 0 and (tmp_path / "addr-0").read_text() == "127.0.0.1"


def _write_beat(path: Path, n: int, rank: int, pid: int, progress: tuple[int, int], state: str = "running") -> None:
    """FIXTURE heartbeat, as the agent writes one (the agent's progress needs torch's Flight Recorder)."""
    body = json.dumps({"v": ring.FORMAT, "n": n, "rank": rank, "pid": pid, "t": time.time(), "state": state, "source": "flight-recorder",
                       "pg": {"0": list(progress)}, "entries": []})
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.seek((n % ring.SLOTS) * ring.SLOT)
        handle.write((body + " " * (ring.SLOT - 1 - len(body)) + "\n").encode())


def test_watch_only_says_a_stall_resolved_and_keeps_the_jobs_status():
    """--watch-only: rank 1 stays out of collective #21 for ~5 s (bound 3 s), then both go on: the stall is said, then
    said resolved, and the outcome is the job's own status with the stall among the resolved."""
    from compatmatrix.watch.service import WATCH_DIR_VAR, watch_launch

    said: list[str] = []

    def run(env):  # FIXTURE launch: two sleeping processes stand for the ranks, the test writes their heartbeats
        folder = Path(env[WATCH_DIR_VAR])
        ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
        try:
            paths = [folder / f"rank-{rank}.ring" for rank in range(2)]
            n = 0
            for step in range(40):  # 0.2 s each
                stuck = 5 <= step < 30
                for rank in range(2):
                    progress = (21, 20) if stuck and rank == 0 else (22, 22) if step >= 30 else (20, 20)
                    _write_beat(paths[rank], n, rank, ranks[rank].pid, progress)
                n += 1
                time.sleep(0.2)
            for rank in range(2):  # a clean end, as the agent writes it at exit: the kill below is then no death (under load the
                _write_beat(paths[rank], n, rank, ranks[rank].pid, (22, 22), state="left")  # watcher once looked in between)
            return 0
        finally:
            for process in ranks:
                process.kill()
                process.wait()

    outcome = watch_launch(run, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, WatchOptions(watch_only=True, stall_after=3.0, world=2),
                           said.append, finding_text)
    assert any("stall: rank 1 stopped first" in line for line in said), said
    assert any("the stall resolved" in line for line in said), said
    assert outcome.findings == () and [s.rank for s in outcome.resolved] == [1] and outcome.exit_status == 0
    document = watch_json(outcome)
    import jsonschema

    jsonschema.validate(document, json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "watch-v1.json").read_text()))
    assert document["resolved"][0]["kind"] == "stall"


def test_spawn_takes_compat_launchs_grace():
    from compatmatrix.launchers.run import GRACE_S
    from compatmatrix.watch import spawn

    assert spawn.GRACE_S == GRACE_S and spawn.GRACE_VAR == "COMPAT_LAUNCH_GRACE"


def test_the_rings_read_from_a_run_folder_are_bounded(tmp_path, monkeypatch):
    """The job's processes can write into the run folder: the watcher reads at most MAX_RINGS rings from at most
    MAX_ENTRIES entries of it, and ignores what is not a ring."""
    from compatmatrix.watch import ring

    monkeypatch.setattr(ring, "MAX_RINGS", 3)
    for rank in range(5):
        (tmp_path / f"rank-{rank}.ring").write_bytes(b"")
    (tmp_path / "other.txt").write_text("x")
    assert len(ring.ring_files(tmp_path)) == 3
    monkeypatch.setattr(ring, "MAX_RINGS", 100)
    monkeypatch.setattr(ring, "MAX_ENTRIES", 2)
    assert len(ring.ring_files(tmp_path)) <= 2
    assert ring.ring_files(tmp_path / "missing") == {}


# --- across hosts, an incremental read, the JSON's own file, an interrupted run


def test_the_agent_acts_in_an_mpi_rank_by_its_own_rank_variable(tmp_path):
    env = agent_env({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK", "LOCAL_RANK") and not k.startswith(("TORCHELASTIC_", "PMI_", "OMPI_"))},
                    tmp_path, "t", 0.05)
    for extra, ring_name in (({"PMI_RANK": "3", "PMI_SIZE": "4"}, "rank-3.ring"), ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, "rank-2.ring"),
                             ({"PMI_RANK": "5"}, None), ({"PMI_RANK": "x", "PMI_SIZE": "4"}, None)):
        assert subprocess.run([sys.executable, "-c", "import time; time.sleep(0.2)"], env={**env, **extra}, timeout=60).returncode == 0
        if ring_name:
            (beat, *_) = ring.beats_of((tmp_path / ring_name).read_bytes(), int(ring_name[5]))
            assert beat.host and beat.namespace.startswith("pid:") and beat.cpu is not None and beat.cpu >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-2.ring", "rank-3.ring"]  # no ring without a size, none for a rank not in digits


def test_a_ring_is_read_incrementally_and_whole_only_when_lapped_or_restarted(tmp_path):
    from compatmatrix.watch.ring import RingCursor

    path = tmp_path / "rank-0.ring"
    for n in range(5):
        _write_beat(path, n, 0, 111, (n, n))
    cursor = RingCursor(path, 0)
    assert [b.n for b in cursor.new_beats()] == [0, 1, 2, 3, 4] and cursor.whole_reads == 1
    assert cursor.new_beats() == []  # nothing new: one slot looked at
    _write_beat(path, 5, 0, 111, (5, 5))
    _write_beat(path, 6, 0, 111, (6, 6))
    assert [b.n for b in cursor.new_beats()] == [5, 6] and cursor.whole_reads == 1
    for n in range(7, 7 + ring.SLOTS + 3):  # the agent laps the watcher
        _write_beat(path, n, 0, 111, (n, n))
    lapped = cursor.new_beats()
    assert cursor.whole_reads == 2 and [b.n for b in lapped] == list(range(10, 7 + ring.SLOTS + 3))
    path.write_bytes(b"")  # a new process of the rank starts its ring again
    _write_beat(path, 0, 0, 222, (0, 0))
    assert [(b.n, b.pid) for b in cursor.new_beats()] == [(0, 222)] and cursor.whole_reads == 3


def _write_remote_beat(path: Path, n: int, rank: int, progress, t: float, cpu: float, host: str = "elsewhere", ns: str = "pid:[1]", pid: int = 4242) -> None:
    body = json.dumps({"v": ring.FORMAT, "n": n, "rank": rank, "pid": pid, "t": t, "state": "running", "source": "flight-recorder",
                       "pg": {"0": list(progress)}, "entries": [], "host": host, "ns": ns, "cpu": cpu})
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.seek((n % ring.SLOTS) * ring.SLOT)
        handle.write((body + " " * (ring.SLOT - 1 - len(body)) + "\n").encode())


def test_a_rank_on_another_host_is_judged_by_its_heartbeats_and_its_rings_lock(tmp_path):
    """FIXTURE rings for a rank of another host (its host name is not this one's): alive while something holds its
    ring's lock, busy while its CPU seconds grow, silent once its heartbeats stop, gone once the lock is free."""
    import fcntl

    from compatmatrix.watch.service import where

    path = tmp_path / "rank-1.ring"
    now = time.time()
    for n in range(4):
        _write_remote_beat(path, n, 1, (n, n), now - 4 + n, cpu=float(n))
    _write_remote_beat(tmp_path / "rank-0.ring", 0, 0, (3, 3), now, 1.0, *where(), pid=os.getpid())  # this host's rank: this process stands for it
    holder = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        watcher = Watcher(tmp_path, WatchOptions(interval=0.5))
        watcher.read(now)
        (_, view) = watcher.views()
        assert watcher.ranks[0].local and not watcher.ranks[1].local
        assert view.process.alive and view.process.state == "" and view.process.active_at == now - 1 and view.last.host == "elsewhere"
        watcher.read(now + 5)  # no heartbeat for 6 s
        assert watcher.views()[1].process.state == "silent" and watcher.views()[1].process.alive
    finally:
        os.close(holder)
    watcher.read(now + 6)
    (_, view) = watcher.views()
    assert not view.process.alive and view.process.gone_at == now + 6
    (death,) = watcher.judge(now + 6)
    assert death.rank == 1 and death.host == "elsewhere" and death.signal is None and "on elsewhere" in finding_text(death)


def test_a_silent_rank_of_another_host_is_named_as_a_stopped_one_would_be():
    """The floor of a stopped rank (STOPPED_FLOOR_S), not that of an idle one, for a rank whose heartbeats stopped."""
    from compatmatrix.watch.judge import STALL_FLOOR_S, STOPPED_FLOOR_S, Beat, ProcessFact, RankView, judge

    def view(rank, progress, state, host):
        beats = tuple(Beat(n, rank, 10 + rank, 100.0 + n, "running", "flight-recorder", {"0": progress}, host=host) for n in range(3))
        return RankView(rank, beats, ProcessFact(True, state))

    views = [view(0, (21, 20), "S", "node1"), view(1, (20, 20), "silent", "node2")]
    (stall,) = judge(views, 102.0 + STOPPED_FLOOR_S + 1)
    assert stall.rank == 1 and stall.host == "node2" and stall.waiting[0].host == "node1" and stall.process_state == "silent"
    assert "rank 1 on node2 stopped first" in finding_text(stall) and "rank 0 on node1 waits in" in finding_text(stall)
    idle = [view(0, (21, 20), "S", "node1"), view(1, (20, 20), "S", "node2")]
    assert judge(idle, 102.0 + STOPPED_FLOOR_S + 1) == () and judge(idle, 102.0 + STALL_FLOOR_S + 1) != ()


def test_rings_an_earlier_job_left_in_a_shared_watch_dir_are_left_out(tmp_path):
    now = time.time()
    _write_remote_beat(tmp_path / "rank-7.ring", 0, 7, (3, 3), now - 3600, 1.0)
    _write_remote_beat(tmp_path / "rank-0.ring", 0, 0, (3, 3), now, 1.0)
    watcher = Watcher(tmp_path, WatchOptions(), since=now - 1)
    watcher.read(now)
    assert [v.rank for v in watcher.views()] == [0]


def test_the_json_says_an_interrupted_run_and_goes_to_its_own_file(tmp_path):
    import jsonschema

    from compatmatrix.render import schema_path
    from compatmatrix.watch.command import write_json_file
    from compatmatrix.watch.render import watch_json
    from compatmatrix.watch.service import WatchOutcome

    schema = json.loads(schema_path("launch --watch").read_text())
    interrupted = watch_json(WatchOutcome(130, interrupted=signal.SIGINT))
    assert interrupted["interrupted"] == "SIGINT" and interrupted["exit_status"] == 128 + signal.SIGINT
    jsonschema.validate(interrupted, schema)
    plain = watch_json(WatchOutcome(0))
    assert plain["interrupted"] is None
    jsonschema.validate(plain, schema)
    older = {k: v for k, v in plain.items() if k != "interrupted"}  # a document of the compat before: still valid
    jsonschema.validate(older, schema)
    target = tmp_path / "watch.json"
    write_json_file(str(target), plain)
    assert json.loads(target.read_text()) == plain and [p.name for p in tmp_path.iterdir()] == ["watch.json"]


@pytest.mark.parametrize("argv, words", [
    (["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "0"], "needs the rendezvous"),
    (["--watch", "--launcher", "torchrun", "--nnodes", "2", "--master-addr", "h", "--master-port", "29500"], "--watch-dir"),
    (["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--master-port", "1"], "--node-rank 2 is not below"),
    (["--launcher", "torchrun", "--hostfile", "x"], "--hostfile goes with --launcher mpirun"),
    (["--launcher", "mpirun", "--rsh", "ssh"], "--rsh reaches the hosts of --hostfile"),
    (["--launcher", "torchrun", "--watch-dir", "d"], "--watch-dir goes with --watch"),
    (["--launcher", "torchrun", "--json-file", "d"], "--json-file goes with --watch"),
    (["--launcher", "mpirun", "--nnodes", "2", "--master-addr", "h", "--master-port", "1"], "--nnodes goes with --launcher torchrun"),
])
def test_launch_across_hosts_refuses_what_cannot_run(argv, words):
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--nproc-per-node", "1", *argv, "--", "train.py"], capture_output=True, text=True,
                          timeout=60, cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 2 and words in done.stderr, done.stderr


def _launch_refused(*argv: str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--nproc-per-node", "2", "--launcher", "torchrun", "--watch", *argv,
                           "--", "-c", "import time; time.sleep(30)"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - started < 30, (done.returncode, done.stderr)  # refused before any rank ran
    return done


def test_a_json_file_that_cannot_be_written_is_refused_before_the_job_runs(tmp_path):
    """Hostile review: --json-file naming a folder was found only after the whole job had run (its findings lost)."""
    assert "--json-file" in _launch_refused("--json-file", str(tmp_path)).stderr
    assert "missing or not writable" in _launch_refused("--json-file", str(tmp_path / "no" / "such" / "f.json")).stderr


def test_a_ring_the_agent_would_skip_is_refused_before_the_job_runs(tmp_path):
    """Hostile review: a rank-N.ring planted in --watch-dir (a link, a device) or held by another job's process left the
    watch blind ("no rank reported", exit 0). Each is named, with the fix, before the job starts."""
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "rank-0.ring").symlink_to("/dev/zero")
    assert "rank-0.ring, which is not a file of its own" in _launch_refused("--watch-dir", str(linked)).stderr
    held = tmp_path / "held"
    held.mkdir()
    ring_file = held / "rank-1.ring"
    ring_file.write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(60)", str(ring_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert "a running process holds" in _launch_refused("--watch-dir", str(held)).stderr
        # across torchrun nodes, another node's ranks hold theirs: node 1 of 2 (ranks 2 and 3) starts beside rank 1's ring
        from compatmatrix.watch.command import check_rings_left

        check_rings_left(str(held), range(2, 4))
        with pytest.raises(Exception, match="a running process holds"):
            check_rings_left(str(held), range(0, 2))
    finally:
        holder.kill()
        holder.wait(timeout=10)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "rank-0.ring").write_bytes(b"\0" * 64)  # an earlier job's ring, no longer held: the agent takes it over
    from compatmatrix.watch.command import check_rings_left

    check_rings_left(str(stale), None)


def test_the_launchers_carry_the_hosts_and_the_watchs_variables():
    from compatmatrix.launchers.interface import Across, BoundJob, PathEntries, Tool
    from compatmatrix.launchers.mpirun import Mpirun
    from compatmatrix.launchers.torchrun import TORCHRUN

    def job(tool, across, passed=()):
        return BoundJob(2, {"OMP_NUM_THREADS": "1"}, ("python", "t.py"), "python", tool, lambda variable: ("exec \"$@\"", "taskset"), (1, 2), "",
                        False, {"LD_LIBRARY_PATH": PathEntries(("/x",), ())}, across, passed)

    argv = TORCHRUN.bound(job(Tool("python", "torchrun"), Across(3, 2, "node1", 29400))).argv
    assert argv[3:13] == ("--nnodes", "3", "--node_rank", "2", "--master_addr", "node1", "--master_port", "29400", "--nproc_per_node", "2")
    assert "--standalone" in TORCHRUN.bound(job(Tool("python", "torchrun"), None)).argv
    hosts = (("node1", None), ("node2", None))
    intel = Mpirun().bound(job(Tool("/i/mpirun", "intel-mpi"), Across(1, 0, None, None, "/h", hosts, "/r/rsh"), ("COMPAT_WATCH_DIR", "PYTHONPATH"))).argv
    assert intel[:11] == ("/i/mpirun", "-n", "4", "-ppn", "2", "-f", "/h", "-bootstrap", "ssh", "-bootstrap-exec", "/r/rsh")
    assert intel[11] == "-genvlist" and intel[12].split(",")[-3:] == ["LD_LIBRARY_PATH", "COMPAT_WATCH_DIR", "PYTHONPATH"]
    ompi = Mpirun().bound(job(Tool("/o/mpirun", "open-mpi"), Across(1, 0, None, None, "/h", hosts, None), ("COMPAT_WATCH_DIR",))).argv
    assert ompi[:8] == ("/o/mpirun", "-np", "4", "--bind-to", "none", "--hostfile", "/h", "--map-by") and "COMPAT_WATCH_DIR" in ompi
