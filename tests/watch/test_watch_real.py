"""compat launch --watch for REAL: torchrun of the real torch 2.13 CPU environment, two ranks on gloo running a small
DDP loop (tests/data/watch_train.py) in which rank 1 stops itself (SIGSTOP), kills itself (SIGKILL) or nothing goes
wrong; and the same stall on the FIXTURE ccl backend (tests/fixture_ccl.py: gloo under the name "ccl", NOT oneCCL) and
on gloo with the agent's hook forced (COMPAT_WATCH_FIXTURE_NO_FR=1, test only). Times are measured from the line rank 1 prints just before its fault to the watcher's line on stderr. Every
process compat starts carries COMPAT_TEST_MARK; after compat returns none may be left (read from /proc).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..procs import MARK_VARIABLE, marked, new_mark, wait_until

pytestmark = pytest.mark.integration
SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "watch-v1.json").read_text())
TRAIN = ROOT / "tests" / "data" / "watch_train.py"


class Streamed:
    """A process whose stderr lines are read as they come, each with the time it was read (time.monotonic); its stdout
    kept whole."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.seen: list[tuple[float, str]] = []
        self.out: list[str] = []
        self.threads = [threading.Thread(target=self._err), threading.Thread(target=lambda: self.out.append(self.process.stdout.read()))]
        for thread in self.threads:
            thread.start()

    def _err(self) -> None:
        for line in self.process.stderr:
            self.seen.append((time.monotonic(), line.rstrip("\n")))

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            for thread in self.threads:
                thread.join(timeout=30)
        return code

    def first(self, needle: str):
        return first(self.seen, needle)

    def document(self) -> dict:
        """The JSON document compat wrote last on stdout (after the job's own output, from a line "{")."""
        text = "".join(self.out)
        lines = [line for line in text.splitlines() if line.startswith("{")] or ["{}"]
        return json.loads(text[text.index("{\n"):]) if "{\n" in text else json.loads(lines[-1])


def streamed(argv, env) -> Streamed:
    """``argv`` started here (this repository as its folder), streamed."""
    return Streamed(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)))


def watched(python: str, fault: str = "", steps: int = 40, extra: tuple[str, ...] = (), env_extra: dict | None = None, timeout: float = 240,
            launcher: str = "torchrun"):
    """Run compat launch --watch --json; (exit status, the document, {line: when seen}, the mark)."""
    mark = new_mark()
    env = base_env({MARK_VARIABLE: mark, "WATCH_FAULT": fault, "WATCH_STEPS": str(steps), **(env_extra or {})})
    argv = [sys.executable, "-m", "compatmatrix", "launch", "--watch", "--json", "--launcher", launcher, "--nproc-per-node", "2",
            "--python", python, *extra, "--", str(TRAIN)]
    launch = streamed(argv, env)
    code = launch.finish(timeout)
    return code, launch.document(), launch.seen, mark


def first(seen, needle):
    return next((when for when, line in seen if needle in line), None)


@pytest.fixture(scope="module")
def torch_python(stock_torch213):
    return str(stock_torch213)


def test_a_healthy_job_keeps_its_exit_status_and_has_no_finding(torch_python):
    code, document, seen, mark = watched(torch_python, steps=20)
    jsonschema.validate(document, SCHEMA)
    assert code == 0 and document["job_status"] == 0 and document["findings"] == [], seen
    assert document["sources"] == ["flight-recorder"]
    assert marked(mark) == []


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_a_stopped_rank_is_named_with_the_collective_it_never_entered_and_the_job_ends(torch_python, launcher, tmp_path):
    report = tmp_path / "watch.html"  # --report on this run: the page is written when the job ends, with the stopped rank marked
    code, document, seen, mark = watched(torch_python, fault="stop@15", steps=400, launcher=launcher, extra=("--report", str(report)))
    jsonschema.validate(document, SCHEMA)
    _stopped_rank_on_the_page(report)
    assert code == 1 and document["ended_by_watch"], seen
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert stall["rank"] == 1 and stall["process_state"] == "T"
    assert stall["last_entered"] < stall["seq"] and "all_reduce" in stall["collective"]["op"].replace("allreduce", "all_reduce")
    assert [w["rank"] for w in stall["waiting"]] == [0] and stall["waiting"][0]["seq"] == stall["seq"]
    stacks = {s["rank"]: s for s in document["stacks"]}
    assert sorted(stacks) == [0, 1]
    assert "watch_train.py" in (stacks[1]["text"] or ""), stacks[1]  # the stopped rank, read while stopped
    assert "backward" in (stacks[0]["text"] or "") or "watch_train.py" in (stacks[0]["text"] or ""), stacks[0]
    stopped, named = first(seen, "rank 1: stop at step"), first(seen, "compat launch --watch: stall: rank 1")
    assert stopped is not None and named is not None, seen
    print(f"{launcher}: SIGSTOP to finding: {named - stopped:.1f} s (bound {stall['bound']} s)")
    assert named - stopped < 60
    assert marked(mark) == []


def _stopped_rank_on_the_page(report) -> None:
    """The --report page of a run whose rank 1 stopped: it parses (html.parser), its timeline is drawn, rank 1's lane
    carries the stall's mark and rank 0's the collective it was left waiting in (a bar open to the end)."""
    from html.parser import HTMLParser

    class Page(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.ids: set[str] = set()
            self.texts: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.ids.add(dict(attrs).get("id") or "")

        def handle_data(self, data):
            self.texts.append(data)

    page = Page()
    page.feed(report.read_text(encoding="utf-8"))
    page.close()
    assert {"watch-timeline", "stall-rank-1", "stall-found", "rank-0-open"} <= page.ids, sorted(i for i in page.ids if "rank" in i or "stall" in i)
    assert "rank 1 (stopped)" in "".join(page.texts)


def _named_stall(document, seen, mark, label, op="all_reduce"):
    """The stall finding of rank 1 stopped by SIGSTOP: the collective it never entered, rank 0 waiting in it, within
    60 s, nothing left running; returns the seconds from the stop to the finding's line."""
    jsonschema.validate(document, SCHEMA)
    assert document["ended_by_watch"], seen
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert stall["rank"] == 1 and stall["process_state"] == "T", stall
    assert stall["last_entered"] < stall["seq"] and op in stall["collective"]["op"].replace("allreduce", "all_reduce"), stall
    assert [w["rank"] for w in stall["waiting"]] == [0] and stall["waiting"][0]["seq"] == stall["seq"]
    stopped, named = first(seen, "rank 1: stop at step"), first(seen, "compat launch --watch: stall: rank 1")
    assert stopped is not None and named is not None, seen
    print(f"{label}: sources {document['sources']}, SIGSTOP to finding: {named - stopped:.1f} s (bound {stall['bound']} s)")
    assert named - stopped < 60
    assert marked(mark) == []
    return named - stopped


@pytest.fixture(scope="module")
def fixture_ccl(tmp_path_factory):
    from ..fixture_ccl import fixture_ccl_path

    return str(fixture_ccl_path(tmp_path_factory.mktemp("ccl")))


def test_the_fixture_ccl_backend_is_watched_from_the_flight_recorder_and_a_stopped_rank_named(torch_python, fixture_ccl):
    """Measured: torch 2.13's Flight Recorder records the FIXTURE ccl's collectives (its group is a ProcessGroupGloo
    under another name), so the watch reads it and the hook is not used."""
    code, document, seen, mark = watched(torch_python, fault="stop@15", steps=400, env_extra={"WATCH_BACKEND": "ccl", "PYTHONPATH": fixture_ccl})
    assert code == 1 and document["sources"] == ["flight-recorder"], (document, seen)
    _named_stall(document, seen, mark, "fixture ccl")


def test_where_the_flight_recorder_is_ignored_the_hook_names_the_stopped_rank_on_gloo(torch_python):
    """COMPAT_WATCH_FIXTURE_NO_FR=1 (test only): the agent reads no Flight Recorder, as with a backend that records none;
    the hook sees the collectives called through torch.distributed's functions (WATCH_SYNC: the loss's all_reduce before
    backward; DDP's own gradient all-reduces run in C++, out of its sight)."""
    code, document, seen, mark = watched(torch_python, fault="stop@15", steps=400, env_extra={"WATCH_SYNC": "1", "COMPAT_WATCH_FIXTURE_NO_FR": "1"})
    assert code == 1 and document["sources"] == ["hook"], (document, seen)
    _named_stall(document, seen, mark, "gloo, hook forced")
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert stall["collective"]["op"] == "all_reduce" and stall["collective"]["numel"] == 1, stall


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_a_killed_rank_is_named_within_ten_seconds(torch_python, launcher):
    code, document, seen, mark = watched(torch_python, fault="kill@15", steps=400, launcher=launcher)
    jsonschema.validate(document, SCHEMA)
    assert code == 1, seen
    death = document["findings"][0]
    assert death["kind"] == "death" and death["rank"] == 1, document
    # the exact signal is known when the watcher saw the process as a zombie before torchrun reaped it
    assert death["signal"] in (("SIGKILL",) if launcher == "spawn" else ("SIGKILL", None)) and death["exception"] is None
    killed, named = first(seen, "rank 1: kill at step"), first(seen, "compat launch --watch: rank 1 (pid")
    assert killed is not None and named is not None, seen
    # its last lines: the line it wrote to stderr just before the kill, from compat's pipes (spawn) or its agent's ring
    assert death["last_lines"][-1] == "rank 1: kill at step 15" and death["lines_from"] == ("pipe" if launcher == "spawn" else "agent"), death
    print(f"{launcher}: SIGKILL to finding: {named - killed:.1f} s, signal {death['signal']}")
    assert named - killed < 10
    assert marked(mark) == []


def test_a_rank_slowed_on_purpose_is_named_the_straggler_and_the_job_keeps_its_status(torch_python):
    code, document, seen, mark = watched(torch_python, fault="slow", steps=80, env_extra={"WATCH_SLOW_S": "0.15"})
    jsonschema.validate(document, SCHEMA)
    assert code == 0 and document["job_status"] == 0, seen
    (straggler,) = [f for f in document["findings"] if f["kind"] == "straggler"]
    assert straggler["rank"] == 1 and straggler["wait_share"]["0"] > straggler["wait_share"]["1"]
    print(f"straggler: wait shares {straggler['wait_share']}, last in {straggler['last_share']:.0%} of {straggler['collectives']}")
    assert marked(mark) == []


def test_compat_watch_attached_from_another_process_names_the_stopped_rank_and_ends_with_the_job(torch_python, tmp_path):
    """compat launch --watch-only --watch-dir D (torchrun, 2 ranks, rank 1 stops itself with SIGSTOP at step 15) in the
    background; compat watch D from another process names rank 1, the collective it never entered and rank 0 waiting in
    it, and does not end the job; the job is then ended as the fix says (Ctrl-C to its compat launch) and compat watch
    ends with it: exit 1, its document attached, nothing of either left running."""
    run_dir = tmp_path / "run"
    mark = new_mark()
    env = base_env({MARK_VARIABLE: mark, "WATCH_FAULT": "stop@15", "WATCH_STEPS": "400", "COMPAT_LAUNCH_GRACE": "3"})
    started = time.monotonic()
    launch = streamed([sys.executable, "-m", "compatmatrix", "launch", "--watch-only", "--watch-dir", str(run_dir), "--launcher", "torchrun",
                       "--nproc-per-node", "2", "--python", torch_python, "--", str(TRAIN)], env)
    watch = None
    try:
        assert wait_until(lambda: len(list(run_dir.glob("rank-*.ring"))) == 2 or launch.process.poll() is not None, 120), launch.seen
        watch = streamed([sys.executable, "-m", "compatmatrix", "watch", "--json", "--stall-after", "5", str(run_dir)], env)
        assert wait_until(lambda: watch.first("compat watch: stall: rank 1") or watch.process.poll() is not None, 90), (watch.seen, launch.seen)
        named = watch.first("compat watch: stall: rank 1")
        time.sleep(1.0)
        assert watch.process.poll() is None, watch.seen  # it does not end with its finding: the job runs on
        launch.process.send_signal(signal.SIGINT)  # the fix: Ctrl-C to the compat launch that started the job
        launch_code = launch.finish(60)
        code = watch.finish(60)
    finally:
        for started_here in (launch, watch):
            if started_here is not None and started_here.process.poll() is None:
                started_here.process.kill()
                started_here.finish(30)
    document = watch.document()
    jsonschema.validate(document, SCHEMA)
    assert code == 1 and launch_code == 130, (watch.seen, launch.seen[-20:])
    assert document["attached"] is True and document["job_status"] is None and not document["ended_by_watch"] and document["left_running"] == []
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert stall["rank"] == 1 and stall["process_state"] == "T", stall
    assert stall["last_entered"] < stall["seq"] and "all_reduce" in stall["collective"]["op"].replace("allreduce", "all_reduce"), stall
    assert [w["rank"] for w in stall["waiting"]] == [0] and stall["waiting"][0]["seq"] == stall["seq"]
    assert "does not end it" in stall["fix"] and "Ctrl-C" in stall["fix"]
    stopped = launch.first("rank 1: stop at step")
    assert stopped is not None and named is not None, launch.seen
    print(f"compat watch: SIGSTOP to finding {named - stopped:.1f} s (bound {stall['bound']} s); the whole test {time.monotonic() - started:.1f} s")
    assert named - stopped < 60
    assert marked(mark) == []
