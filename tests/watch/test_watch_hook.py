"""The agent's hook (compatmatrix/watch/site/sitecustomize.py): its record of the collectives called through
torch.distributed where the Flight Recorder records nothing. In-process on a FIXTURE torch.distributed (FakeDist below:
plain Python, no torch), and in a plain Python rank whose ``torch`` is the FIXTURE package FAKE_TORCH (written to a
temporary folder: a torch.distributed with a few collectives and, with FAKE_FR set, a FIXTURE ``_dump_fr_trace``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import types

import pytest

from compatmatrix.watch import ring
from compatmatrix.watch.service import SITE, agent_env

SITE_FILE = SITE / "sitecustomize.py"


def _site():
    """The agent's module, imported under another name (no side effects: it installs only as ``sitecustomize``)."""
    spec = importlib.util.spec_from_file_location("compat_watch_site_under_test", SITE_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeTensor:
    """FIXTURE tensor: only numel()."""

    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n


class FakeWork:
    """FIXTURE Work: completed when waited, or when ``done`` is set."""

    def __init__(self):
        self.done = False

    def wait(self, timeout=None):
        self.done = True
        return True

    def is_completed(self):
        return self.done


def _fake_dist():
    """A FIXTURE torch.distributed module: distributed_c10d with a few collectives (broadcast_object_list calls
    broadcast, as torch's does), the package re-exporting them, a Work class."""
    c10d = types.ModuleType("fake_c10d")
    c10d.Work = FakeWork
    c10d.calls = []
    world = object()

    def all_reduce(tensor, op=None, group=None, async_op=False):
        c10d.calls.append("all_reduce")
        if getattr(tensor, "n", 0) < 0:
            raise RuntimeError("FIXTURE: a negative tensor")
        tensor.n += 1000  # what it "returns" is in place, and its return value passes through
        return FakeWork() if async_op else None

    def broadcast(tensor, src=0, group=None, async_op=False):
        c10d.calls.append("broadcast")
        return FakeWork() if async_op else "broadcast-result"

    def broadcast_object_list(object_list, src=0, group=None, device=None):
        broadcast(FakeTensor(1), src, group)
        broadcast(FakeTensor(len(object_list)), src, group)

    def barrier(group=None, async_op=False, device_ids=None):
        c10d.calls.append("barrier")

    for function in (all_reduce, broadcast, broadcast_object_list, barrier):
        setattr(c10d, function.__name__, function)
    c10d._get_default_group = lambda: world
    c10d._get_process_group_name = lambda pg: "0" if pg is world else "7"
    dist = types.ModuleType("fake_dist")
    dist.distributed_c10d = c10d
    for name in ("all_reduce", "broadcast", "broadcast_object_list", "barrier"):
        setattr(dist, name, getattr(c10d, name))
    return dist


def test_the_hook_records_each_collective_once_with_its_group_sequence_op_and_size():
    site = _site()
    dist, hook = _fake_dist(), site._Hook()
    site._hook_torch_distributed(dist, hook)
    tensor = FakeTensor(10)
    assert dist.all_reduce(tensor) is None and tensor.n == 1010  # the collective's effect and result, unchanged
    assert dist.broadcast(FakeTensor(3), 0) == "broadcast-result"
    dist.broadcast_object_list([1, 2])  # calls broadcast twice inside: recorded once, as itself
    other = object()
    dist.distributed_c10d.barrier(group=other)  # the module's own name is wrapped too, another group
    dist.barrier(other)
    progress, records = hook.snapshot()
    assert dist.distributed_c10d.calls == ["all_reduce", "broadcast", "broadcast", "broadcast", "barrier", "barrier"]
    assert progress == {"0": [3, 3], "7": [2, 2]}
    assert [(r[0], r[1], r[2], r[3]) for r in records] == [("0", 1, "all_reduce", 10), ("0", 2, "broadcast", 3), ("0", 3, "broadcast_object_list", 0),
                                                         ("7", 1, "barrier", 0), ("7", 2, "barrier", 0)]
    assert all(isinstance(r[4], int) and r[4] > 1.7e18 for r in records)  # time entered, ns since the epoch as the Flight Recorder's
    assert hook.returned == 5


def test_an_async_collective_completes_when_its_work_is_waited_or_seen_completed():
    site = _site()
    dist, hook = _fake_dist(), site._Hook()
    site._hook_torch_distributed(dist, hook)
    first = dist.all_reduce(FakeTensor(4), async_op=True)
    second = dist.broadcast(FakeTensor(4), 0, None, True)  # async_op given by position
    assert isinstance(first, FakeWork) and isinstance(second, FakeWork)  # the work itself, not a stand-in
    assert hook.snapshot()[0] == {"0": [2, 0]}  # both entered, none completed
    assert first.wait() is True  # Work.wait, wrapped at the class, returns what it returned
    assert hook.snapshot()[0] == {"0": [2, 1]}
    second.done = True  # completed without a wait: the heartbeat's poll sees it
    assert hook.snapshot()[0] == {"0": [2, 2]} and hook.pending == []


def test_an_exception_passes_unchanged_and_the_collective_stays_entered_not_completed():
    site = _site()
    dist, hook = _fake_dist(), site._Hook()
    site._hook_torch_distributed(dist, hook)
    with pytest.raises(RuntimeError, match="FIXTURE: a negative tensor"):
        dist.all_reduce(FakeTensor(-1))
    assert hook.snapshot()[0] == {"0": [1, 0]}
    assert dist.broadcast(FakeTensor(1)) == "broadcast-result"  # the nesting guard was reset by the exception
    assert hook.snapshot()[0] == {"0": [2, 2]}


def test_the_hook_never_wraps_twice_and_keeps_the_functions_names():
    site = _site()
    dist, hook = _fake_dist(), site._Hook()
    site._hook_torch_distributed(dist, hook)
    wrapped = (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.distributed_c10d.Work.wait)
    site._hook_torch_distributed(dist, site._Hook())  # a second install: nothing changes
    assert (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.distributed_c10d.Work.wait) == wrapped
    assert dist.all_reduce is dist.distributed_c10d.all_reduce and dist.all_reduce.__name__ == "all_reduce"
    dist.all_reduce(FakeTensor(1))
    assert hook.snapshot()[0] == {"0": [1, 1]}


def test_the_hooks_ring_is_bounded_and_keeps_the_newest():
    site = _site()
    dist, hook = _fake_dist(), site._Hook(size=8)
    site._hook_torch_distributed(dist, hook)
    works = [dist.all_reduce(FakeTensor(n), async_op=True) for n in range(20)]
    progress, records = hook.snapshot()
    assert len(records) == 8 and [r[1] for r in records] == list(range(13, 21)) and len(hook.pending) == 8
    assert progress == {"0": [20, 0]}
    works[-1].wait()
    assert hook.snapshot()[0] == {"0": [20, 20]}


# A FIXTURE torch package for a plain-Python rank: torch.distributed with all_reduce and an initialised group; FAKE_FR
# "records" gives it a FIXTURE Flight Recorder that records the calls, "empty" one that records nothing, unset none.
FAKE_TORCH = {
    "torch/__init__.py": "",
    "torch/_C/__init__.py": "",
    "torch/_C/_distributed_c10d.py": textwrap.dedent('''\
        """FIXTURE Flight Recorder (tests/watch/test_watch_hook.py)."""
        import os, pickle
        CALLS = []
        if os.environ.get("FAKE_FR") in ("records", "empty"):
            def _dump_fr_trace(a, b, c):
                if os.environ["FAKE_FR"] == "empty":
                    return pickle.dumps({"entries": [], "pg_status": {}})
                entries = [{"process_group": ("0", "default_pg"), "collective_seq_id": i + 1, "profiling_name": "gloo:all_reduce",
                            "input_sizes": [[n]], "time_created_ns": t} for i, (n, t) in enumerate(CALLS)]
                return pickle.dumps({"entries": entries, "pg_status": {"0": {"last_enqueued_collective": len(CALLS), "last_completed_collective": len(CALLS)}}})
        '''),
    "torch/distributed/__init__.py": textwrap.dedent('''\
        """FIXTURE torch.distributed (tests/watch/test_watch_hook.py)."""
        from . import distributed_c10d
        from .distributed_c10d import all_reduce, is_initialized
        def is_available():
            return True
        '''),
    "torch/distributed/distributed_c10d.py": textwrap.dedent('''\
        import time
        from torch._C import _distributed_c10d as _C
        class Work:
            def wait(self):
                return True
        def is_initialized():
            return True
        def _get_default_group():
            return None
        def _get_process_group_name(pg):
            return "0"
        def all_reduce(tensor, op=None, group=None, async_op=False):
            _C.CALLS.append((tensor.numel(), time.time_ns()))
        '''),
}

RANK_CODE = textwrap.dedent('''\
    import sys, time
    import torch.distributed as dist
    class T:
        def __init__(self, n): self.n = n
        def numel(self): return self.n
    print(getattr(dist.all_reduce, "__compat_watch_hook__", False))
    for n in (5, 6, 7):
        dist.all_reduce(T(n))
    time.sleep(0.6)
    ''')


@pytest.mark.parametrize("fake_fr, switch, source", [
    ("", "", "hook"),  # no Flight Recorder (torch before 2.9)
    ("empty", "", "hook"),  # a Flight Recorder that records nothing for this backend
    ("records", "", "flight-recorder"),  # it records: the hook is installed but not read
    ("records", "1", "hook"),  # TEST ONLY switch: the agent ignores the Flight Recorder
])
def test_a_rank_reports_the_hooks_record_where_the_flight_recorder_has_none(tmp_path, fake_fr, switch, source):
    fake = tmp_path / "fake"
    for name, text in FAKE_TORCH.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    env = agent_env({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RANK")}, tmp_path / "run", "test", 0.05)
    (tmp_path / "run").mkdir()
    env.update({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "0", "FAKE_FR": fake_fr,
                "COMPAT_WATCH_FIXTURE_NO_FR": switch, "PYTHONPATH": f"{env['PYTHONPATH']}{os.pathsep}{fake}"})
    done = subprocess.run([sys.executable, "-c", RANK_CODE], env=env, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr  # wrapped before the script's first call
    beats = [b for b in ring.beats_of((tmp_path / "run" / "rank-1.ring").read_bytes(), 1) if b.state == "running"]
    last = beats[-1]
    assert last.source == source and dict(last.progress) == {"0": (3, 3)}, beats
    seen = [c for b in beats for c in b.entries]
    assert sorted({(c.seq, c.numel) for c in seen}) == [(1, 5), (2, 6), (3, 7)]
    assert {c.op for c in seen} == {"all_reduce" if source == "hook" else "gloo:all_reduce"}
    assert {b.source for b in beats if b.progress} == {source}  # one source for the rank's whole run, never a mix
    assert {b.source for b in beats if not b.progress} <= {"none", "flight-recorder"}  # before its first collective returned


@pytest.mark.parametrize("sources, noted", [(("hook",), True), (("flight-recorder",), False), (("flight-recorder", "hook"), True)])
def test_a_finding_from_the_hooks_record_says_so(sources, noted):
    import json

    import jsonschema

    from compatmatrix.render import schema_path
    from compatmatrix.watch import judge as J
    from compatmatrix.watch.render import HOOK_NOTE, text_lines, watch_json
    from compatmatrix.watch.service import WatchOutcome

    death = J.Death(1, 42, 3.0, 9, None, "", "running")
    outcome = WatchOutcome(1, (death,), True, 5.0, sources, ())
    assert (HOOK_NOTE in text_lines(outcome)) == noted
    assert "progress from: hook" in HOOK_NOTE and HOOK_NOTE not in text_lines(WatchOutcome(0, (), False, None, sources, ()))
    document = watch_json(outcome)
    assert document["sources"] == list(sources)
    jsonschema.validate(document, json.loads(schema_path("launch --watch").read_text()))
