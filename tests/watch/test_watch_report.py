"""compat launch --watch --report FILE.html: the timeline (watch/timeline.py) read from ring files and drawn
(render/watch_html.py, made with the fabric report's helpers). The rings here are FIXTURES written as the agent writes
them (synthetic heartbeats of ranks "on another host", so the watcher judges them by their heartbeats and their
ring's lock, which the test holds for a living rank); the page is read back with html.parser, and hostile host and op
names must stay text (as tests/live/test_fabric_report.py holds for the fabric page)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compatmatrix.console import visible_line
from compatmatrix.watch import judge as J
from compatmatrix.watch import lines, ring
from compatmatrix.watch.render import watch_json
from compatmatrix.watch.service import Watcher, WatchOptions, WatchOutcome
from compatmatrix.watch.timeline import MAX_MARKS, MAX_RANKS, TAIL_MARKS, timeline_of

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

from compatmatrix.render.watch_html import TIMELINE_ID, render_watch_report  # noqa: E402

from ..live.test_fabric_report import _drawn_vocabulary, _shape, html_hostile, read  # noqa: E402

T0 = 1_800_000_000.0  # the FIXTURE job's clock: seconds since the epoch
GAP = 0.2


def fixture_ring(folder: Path, rank: int, host: str, beats: list[dict], out_lines: tuple[str, ...] = ()) -> Path:
    """FIXTURE: rank-<rank>.ring as the agent writes it: heartbeat slots, then the line ring."""
    path = folder / f"rank-{rank}.ring"
    data = bytearray(b" " * (ring.SLOTS * ring.SLOT + lines.LINES * lines.LINE))
    for n, beat in enumerate(beats[-ring.SLOTS:], start=max(0, len(beats) - ring.SLOTS)):
        body = {"v": ring.FORMAT, "n": n, "rank": rank, "pid": 4000 + rank, "t": beat["t"], "state": beat.get("state", "running"),
                "source": "flight-recorder", "pg": {"0": list(beat["progress"])}, "entries": beat.get("entries", []), "host": host, "ns": "pid:[1]", "cpu": 1.0}
        text = json.dumps(body).encode()
        data[(n % ring.SLOTS) * ring.SLOT:(n % ring.SLOTS) * ring.SLOT + len(text)] = text
    base = ring.SLOTS * ring.SLOT
    for n, line in enumerate(out_lines):
        text = json.dumps({"n": n, "pid": 4000 + rank, "s": "e", "t": T0, "l": line}).encode()
        data[base + (n % lines.LINES) * lines.LINE:base + (n % lines.LINES) * lines.LINE + len(text)] = text
    path.write_bytes(bytes(data))
    return path


def fixture_job(done: int, stop: int | None = None, hosts=("fixture-host-a", "fixture-host-b"), op: str = "gloo:all_reduce", late: float = 0.0):
    """FIXTURE: two ranks' heartbeats; each beat enters collective seq (one per GAP s) and completes the one before; rank
    1 (late by ``late`` s in each) stops after collective ``stop`` (its heartbeats stop), rank 0 enters stop + 1 and waits."""
    jobs = {}
    for rank in (0, 1):
        beats = []
        last = done if stop is None else stop
        for seq in range(1, last + 1):
            t = T0 + seq * GAP + (late if rank == 1 else 0.0)
            beats.append({"t": t + 0.01, "progress": (seq, seq - 1), "entries": [["0", seq, op, 4225, int(t * 1e9), "default_pg"]]})
        beats.append({"t": T0 + (last + 0.5) * GAP + late * rank, "progress": (last, last)})
        if stop is not None and rank == 0:
            t = T0 + (stop + 1) * GAP
            beats.append({"t": t + 0.01, "progress": (stop + 1, stop), "entries": [["0", stop + 1, op, 4225, int(t * 1e9), "default_pg"]]})
            beats += [{"t": t + 1.0 * k, "progress": (stop + 1, stop)} for k in range(1, 16)]  # within the ring's 64 slots
        jobs[rank] = (hosts[rank], beats)
    return jobs


class Held:
    """The rings' locks, as the living ranks' agents hold them (a rank whose lock is free is gone)."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def hold(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fds.append(fd)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def held():
    locks = Held()
    yield locks
    locks.close()


def _watched(folder: Path, jobs, alive=(0, 1), out_lines=None, now: float | None = None):
    """The FIXTURE rings written and held, read by the watcher: (findings, timeline, document, page)."""
    locks = Held()
    try:
        for rank, (host, beats) in jobs.items():
            path = fixture_ring(folder, rank, host, beats, (out_lines or {}).get(rank, ()))
            if rank in alive:
                locks.hold(path)
        now = now if now is not None else max(beat["t"] for _host, beats in jobs.values() for beat in beats) + 0.1
        watcher = Watcher(folder, WatchOptions(world=len(jobs)))
        watcher.read(now)
        findings = watcher.judge(now)
        timeline = timeline_of(watcher.views(), now, findings, now)
        outcome = WatchOutcome(1 if findings else 0, findings, bool(findings), now if findings else None, ("flight-recorder",), ())
        document = json.loads(json.dumps(watch_json(outcome)))
        return findings, timeline, document, render_watch_report(document, timeline)
    finally:
        locks.close()


def _ids(page) -> set:
    return {attributes.get("id") for _tag, attributes in page.tags}


def test_a_stalled_run_from_its_rings_marks_the_stopped_rank_and_the_one_left_waiting(tmp_path):
    findings, timeline, document, html = _watched(tmp_path, fixture_job(0, stop=30))
    (stall,) = findings
    assert isinstance(stall, J.Stall) and stall.rank == 1 and stall.seq == 31
    page = read(html)
    ids = _ids(page)
    assert TIMELINE_ID in ids and {"stall-rank-1", "stall-found", "rank-0-open", "rank-0-op-0", "rank-1-op-0"} <= ids
    assert "rank-1-open" not in ids  # rank 1 never entered #31: nothing of it is open
    rank0 = timeline["ranks"][0]
    assert rank0["known"] == 31 and rank0["marks"][-1][1] is None and all(mark[1] is not None for mark in rank0["marks"][:-1])
    # a mark runs to the time the last rank entered that collective (both entered #k at the same time here)
    assert rank0["marks"][4][0] == pytest.approx(4 * GAP) and rank0["marks"][4][1] == pytest.approx(4 * GAP)
    text = "".join(page.texts)
    assert "rank 1 (stopped)" in text and "stall" in text and "fixture-host-b" in text
    assert not {"script", "link", "iframe", "object", "embed", "base"} & {tag for tag, _ in page.tags}


def test_a_dead_rank_is_marked_and_its_last_lines_are_on_the_page(tmp_path):
    jobs = fixture_job(20)
    said = ("step 19 loss 0.25", "\x1b[31mred</pre><script>alert(1)</script>", "https://user:hunter2@example.invalid/simple")
    findings, timeline, _document, html = _watched(tmp_path, jobs, alive=(0,), out_lines={1: said})
    (death,) = findings
    assert isinstance(death, J.Death) and death.rank == 1 and death.lines_from == "agent" and len(death.lines) == 3
    page = read(html)
    assert "death-rank-1" in _ids(page) and timeline["deaths"][0]["rank"] == 1
    text = "".join(page.texts)
    assert "step 19 loss 0.25" in text and visible_line("\x1b[31mred</pre><script>alert(1)</script>") in text
    assert "<script>" not in html and "hunter2" not in html and "user:****@example.invalid" in text
    assert "rank 1 (died)" in text


def test_a_straggler_is_marked_and_a_healthy_run_has_no_finding(tmp_path):
    (tmp_path / "slow").mkdir()
    findings, _timeline, _document, html = _watched(tmp_path / "slow", fixture_job(40, late=0.15))
    assert [type(f) for f in findings] == [J.Straggler] and findings[0].rank == 1
    assert "straggler-rank-1" in _ids(read(html)) and "rank 1 (straggler)" in "".join(read(html).texts)
    (tmp_path / "even").mkdir()
    findings, _timeline, _document, html = _watched(tmp_path / "even", fixture_job(40))
    page = read(html)
    assert findings == () and "No finding" in "".join(page.texts) and TIMELINE_ID in _ids(page)
    assert not {i for i in _ids(page) if i and i.startswith(("stall-", "death-", "straggler-"))}


def _views(world: int, count: int, hosts=None, ops=None) -> list[J.RankView]:
    views = []
    for rank in range(world):
        collectives = tuple(J.Collective("0", seq, (ops or ["gloo:all_reduce"])[seq % len(ops or [1])], 10, T0 + seq * 0.01 + rank * 0.001, "pg")
                            for seq in range(1, count + 1))
        beat = J.Beat(0, rank, 100 + rank, T0 + count * 0.01 + 1, "running", "flight-recorder", {"0": (count, count)}, (), "", (hosts or {}).get(rank, ""))
        views.append(J.RankView(rank, (beat,), J.ProcessFact(True, "S"), collectives))
    return views


def test_a_long_job_is_drawn_bounded_and_the_page_says_so():
    views = _views(MAX_RANKS + 8, 2048)
    death = J.Death(37, 137, T0 + 5, 9, None, "", "running")
    timeline = timeline_of(views, T0 + 30, (death,))
    assert len(timeline["ranks"]) == MAX_RANKS and timeline["ranks_known"] == MAX_RANKS + 8
    assert 37 in [rank["rank"] for rank in timeline["ranks"]]  # the rank a finding names is drawn first
    for rank in timeline["ranks"]:
        assert rank["known"] == 2048 and rank["drawn"] <= MAX_MARKS and rank["step"] > 1
        assert [mark[3] for mark in rank["marks"][-TAIL_MARKS:]] == list(range(2048 - TAIL_MARKS + 1, 2049))
    html = render_watch_report(watch_json(WatchOutcome(1, (death,))), timeline)
    text = "".join(read(html).texts)
    assert f"{MAX_RANKS} of {MAX_RANKS + 8} ranks drawn" in text and f"with its last {TAIL_MARKS}" in text and "(every " in text
    assert len(html) < 8_000_000


def test_no_collective_still_makes_a_page():
    views = _views(2, 0)
    html = render_watch_report(watch_json(WatchOutcome(0, ())), timeline_of(views, T0 + 3))
    assert "No collective was recorded" in "".join(read(html).texts) and TIMELINE_ID not in html


@pytest.fixture(scope="module")
def plain_page():
    views = _views(3, 30, {0: "h1", 1: "h2", 2: "h3"}, ["o1", "o2"])
    return read(render_watch_report(watch_json(WatchOutcome(0, ())), timeline_of(views, T0 + 3)))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(hosts=st.lists(html_hostile(), min_size=3, max_size=3, unique=True), ops=st.lists(html_hostile(), min_size=2, max_size=2, unique=True))
@example(hosts=["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "</td></tr></table>"], ops=["$x$", "_hidden"])
def test_hostile_host_and_op_names_are_text_and_inject_nothing(plain_page, hosts, ops):
    views = _views(3, 30, dict(enumerate(hosts)), ops)
    page = read(render_watch_report(watch_json(WatchOutcome(0, ())), timeline_of(views, T0 + 3)))
    assert _shape(page) == _shape(plain_page)  # the same elements with the same attributes: nothing injected, nothing broken
    tags, names = _drawn_vocabulary(page)
    plain_tags, plain_names = _drawn_vocabulary(plain_page)
    assert tags <= plain_tags and names <= plain_names, (tags - plain_tags, names - plain_names)
    text = "".join(page.texts)
    for value in (*hosts, *ops):
        assert visible_line(value).encode("utf-8", "backslashreplace").decode() in text


# the --report option refused before the job starts: tests/watch/test_watch.py test_the_watch_options_are_checked
def test_a_watched_spawn_writes_its_report_when_the_job_ends(tmp_path):
    """The command's path end to end with plain Python ranks (no collective): the page is written, and parses."""
    import subprocess
    import sys

    from ..clean_env import base_env

    code = "import os, sys, time; print('hello'); time.sleep(0.5); sys.exit(3 if os.environ['RANK'] == '1' else 0)"
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--watch", "--launcher", "spawn", "--nproc-per-node", "2",
                           "--report", str(tmp_path / "watch.html"), "--", "-c", code], env=base_env({}), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    page = read((tmp_path / "watch.html").read_text())
    text = "".join(page.texts)
    assert "exited with status 3" in text and "hello" in text and "No collective was recorded" in text
