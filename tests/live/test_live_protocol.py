"""The live protocol (compatmatrix/live/protocol.py): the records a rank writes and compat reads. Round trips of every
record, refusal of what a broken rank, a shared --run-dir or another compat's worker may write, the version, the
target interpreter's side (standard library only, Python 3.6's stand-in for dataclasses) and that the report reads
the records by attribute, not by string key."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compatmatrix.live import protocol
from compatmatrix.live.protocol import PROTOCOL_VERSION, ProtocolError, RankStatus, Record, field_names, loads_status, read_parts

LIVE = Path(protocol.__file__).parent
RECORDS = sorted((value for value in vars(protocol).values() if isinstance(value, type) and issubclass(value, Record) and value is not Record),
                 key=lambda cls: cls.__name__)

json_scalars = st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def strategy(tp):
    """Values of a protocol type, as the worker could write them."""
    if tp is typing.Any:
        return json_values
    origin = getattr(tp, "__origin__", None)
    if origin is typing.Union:
        (inner,) = [t for t in tp.__args__ if t is not type(None)]
        return st.none() | strategy(inner)
    if isinstance(tp, type) and issubclass(tp, Record):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{name: strategy(hints[name]) for name in field_names(tp)})
    if origin is tuple:
        return st.lists(strategy(tp.__args__[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy(tp.__args__[1]), max_size=3)
    return {bool: st.booleans(), int: st.integers(-2**53, 2**53), float: st.floats(allow_nan=False).map(float), str: st.text(max_size=20)}[tp]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_record_survives_the_round_trip_through_the_file(cls, data):
    record = data.draw(strategy(cls))
    assert cls.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_the_status_carries_the_version_and_is_read_back_from_its_text():
    status = RankStatus(pid=7, rank=0, stage="done", stages=(protocol.StageMark("start", 0.0),),
                        trainer=protocol.TrainerInfo(losses=(4.8, float("nan"))), fabric_case=protocol.FabricCase("all_reduce", "fp32", 1024, 3))
    written = protocol.dumps(status)
    assert json.loads(written)["protocol"] == PROTOCOL_VERSION == status.protocol
    assert json.loads(written)["stages"] == [["start", 0.0]] and json.loads(written)["fabric_case"] == ["all_reduce", "fp32", 1024, 3]
    back = loads_status(written)
    assert back.rank == 0 and back.stages == status.stages and math.isnan(back.trainer.losses[1])  # a diverged loss stays NaN


def versioned(**fields):
    return json.dumps({"protocol": PROTOCOL_VERSION, **fields})


@pytest.mark.parametrize("text,said", [
    (json.dumps({"protocol": PROTOCOL_VERSION + 1, "rank": 0}), f"protocol version {PROTOCOL_VERSION + 1}, written by a newer compat"),
    (json.dumps({"protocol": 0, "rank": 0}), "written by an older compat"),
    (json.dumps({"rank": 0, "stage": "done"}), "no protocol version"),
    (json.dumps({"protocol": "1"}), "not a whole number"),
    (json.dumps({"protocol": True}), "not a whole number"),
    (json.dumps([1, 2]), "not a mapping"),
    ("{half a reco", "not JSON"),
    ("[" * 100_000, "nested too deeply"),
    (versioned(rank="0"), "record.rank: a whole number was expected, not str '0'"),
    (versioned(rank=True), "record.rank: a whole number was expected"),
    (versioned(world_size=2.0), "record.world_size: a whole number was expected"),
    (versioned(updated="soon"), "record.updated: a number was expected"),
    (versioned(stages=[["start"]]), "record.stages[0]: 2 items were expected, not 1"),
    (versioned(pairs={"hosts": "ab"}), "record.pairs.hosts: a list was expected"),
    (versioned(pairs={"hosts": ["a", "b"], "links": [{"a": 0, "b": 1, "sent": "many"}]}), "record.pairs.links[0].sent: a whole number was expected"),
    (versioned(fabric={"rows": [{"collective": "all_reduce"}]}), "record.fabric.rows[0]: missing fields dtype, bytes, iterations, seconds"),
    (versioned(fabric_others=["gloo"]), "record.fabric_others: a mapping was expected"),
    (versioned(imports=["ccl"]), "record.imports: a mapping was expected"),
    (versioned(error={"type": "X", "message": "m", "extra": 1}), "record.error: unknown field extra"),
    (versioned(surprise=1), "record: unknown field surprise"),
    (versioned(stage="x" * (protocol.MAX_TEXT + 1)), f"more than {protocol.MAX_TEXT}"),
    (versioned(stages=[["s", 0.0]] * (protocol.MAX_ITEMS + 1)), f"more than {protocol.MAX_ITEMS}"),
    (versioned(trainer={"flags": {"a": [[[[[[[[[[1]]]]]]]]]]}}), "nested deeper than 8"),
], ids=lambda value: value[:40] if isinstance(value, str) else None)
def test_a_record_not_of_this_protocol_is_refused_with_one_sentence_that_says_where(text, said):
    with pytest.raises(ProtocolError) as refused:
        loads_status(text)
    assert said in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_record_larger_than_the_bound_is_refused_before_it_is_parsed():
    with pytest.raises(ProtocolError, match="bytes, more than"):
        loads_status(" " * (protocol.MAX_RECORD_BYTES + 1))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(field_names(RankStatus) + ["other"]), json_values, max_size=8))
def test_garbage_in_a_status_file_is_refused_or_read_never_a_traceback(fields):
    text = json.dumps({**fields, "protocol": PROTOCOL_VERSION})
    try:
        status = loads_status(text)
    except ProtocolError:
        return
    assert isinstance(status, RankStatus)


def test_a_part_not_of_the_shape_is_named_and_the_rest_is_read():
    status, refused = read_parts(RankStatus, {"rank": 1, "stage": "done", "pairs": {"hosts": "ab"}, "world_size": "two"})
    assert (status.rank, status.stage, status.pairs, status.world_size) == (1, "done", None, None)
    assert set(refused) == {"pairs", "world_size"} and refused["pairs"].startswith("RankStatus.pairs.hosts: a list was expected")


def test_records_are_frozen():
    with pytest.raises(AttributeError):
        RankStatus().rank = 3  # type: ignore[misc]


def test_the_python_36_stand_in_binds_fields_like_a_frozen_dataclass():
    class Mark:
        __annotations__ = {"name": str, "seconds": float, "note": str}
        seconds = 0.0
        note = ""

    Mark = protocol._frozen(Mark)
    assert (Mark("a"), Mark("a", 1.0, note="n")) == (Mark(name="a", seconds=0.0, note=""), Mark(note="n", seconds=1.0, name="a"))
    assert repr(Mark("a")) == "Mark(name='a', seconds=0.0, note='')" and hash(Mark("a")) == hash(Mark("a"))
    for args, kwargs, said in (((1, 2, 3, 4), {}, "Mark takes 3 fields"), (("a",), {"name": "b"}, "unexpected or repeated field 'name'"),
                               ((), {"other": 1}, "unexpected or repeated field 'other'"), ((), {"note": "n"}, "missing field 'name'")):
        with pytest.raises(TypeError, match=re.escape(said)):
            Mark(*args, **kwargs)
    with pytest.raises(AttributeError):
        Mark("a").name = "b"  # type: ignore[misc]


WORKER_STATUS = {  # what a rank of a --fabric run across two hosts writes (the shape of live/worker.py's save calls)
    "protocol": PROTOCOL_VERSION, "pid": 10, "started": 1.0, "host": "n1", "python": "3.11.2", "rank": 0, "world_size_env": 2, "local_rank": 0,
    "rank_source": "RANK/WORLD_SIZE", "master": "n1:29500", "stages": [["start", 0.0], ["done", 9.5]], "stage": "done", "updated": 10.5,
    "network": {"host": "n1", "interfaces": ["eth0", "lo"], "iface_variables": {"GLOO_SOCKET_IFNAME": "eth0"},
                "host_resolves": [{"address": "10.0.0.1", "loopback": False, "local": True}], "master_addr": "n1",
                "master_resolves": [{"address": "10.0.0.1", "local": True}]},
    "imports": {"torch": {"version": "2.8.0", "ok": True}, "ccl": {"module": "oneccl_bindings_for_pytorch", "ok": True, "version": None, "cwd": None,
                                                                  "fixture": "tests/fixture_ccl.py", "registered": True}},
    "torch": "2.8.0", "backend": "ccl", "backend_reason": "why", "groups_created": 1, "world_size": 2, "group_rank": 0, "group_backend": "ccl",
    "group_made_by": "compat", "allreduce": {"fp32": {"ok": True, "elements": 65536, "wrong": 0}, "bf16": {"ok": None, "unsupported": True, "error": "no"}},
    "memcpy": {"mib": 64, "per_rank": 5e9, "all_ranks": 1e10}, "pairs_round": 0, "pairs_rounds": 1,
    "pairs": {"hosts": ["n1", "n2"], "mode": "all", "rounds": 1, "deadline": 30.0, "seconds": 1.5, "skipped": [],
              "links": [{"latency": 1e-4, "out": 1e9, "back": 9e8, "allreduce": {"busbw": 8e8, "bytes": 262144, "wrong": 0}, "tcp_source": "connections",
                         "seconds": 0.6, "sent": 100, "retransmitted": 0, "a": 0, "b": 1, "round": 0, "measured": 2}],
              "memcpy": [5e9, None], "tcp": [{"out": 100, "retrans": 0}, None],
              "interfaces": [{"interface": "eth0", "address": "10.0.0.1", "mtu": 1500, "speed": None, "gloo_ifname": "eth0"}, None]},
    "fabric_case": ["broadcast", "bf16", 4096, 40], "fabric_backend": "gloo", "fabric_comparing": "gloo",
    "fabric": {"sizes": [1024, 4096], "bound": 16777216, "dropped": [], "rows": [{"collective": "all_reduce", "dtype": "fp32", "bytes": 1024, "iterations": 20,
               "seconds": 1e-4, "wrong": 0, "ranks_wrong": 0}], "errors": [{"collective": "all_reduce", "dtype": "fp32", "bytes": 1024, "iteration": 0,
               "iterations_wrong": 1, "iterations": 21, "wrong": 1, "elements": 256, "index": 0, "got": 2.0, "expected": 1.0}],
               "unsupported": [{"collective": "all_to_all", "dtype": "bf16", "error": "no"}], "cut": [{"collective": "all_gather", "dtype": "fp32",
               "after": 1024, "seconds": 3.0, "limit": 2.0, "sizes": [4096]}],
               "deadline": {"seconds": 60.0, "began": 2.0, "budget": 40.0, "link": ["n1", "n2", 9e8], "planned": True, "timed": 0.5, "estimate": 30.0, "spent": 33.0},
               "skipped": [{"collective": "all_to_all", "dtype": "fp32", "sizes": [4096], "why": "deadline"}]},
    "fabric_others": {"gloo": {"error": "the group could not be formed on another rank"}},
    "trainer": {"transformers": "4.57.0", "steps_wanted": 3, "per_device_batch": 4, "accelerate": None, "loss_kwargs": True, "flags": {"bf16": False, "ddp_backend": "ccl"},
                "dropped": [], "ipex": "applied by the Trainer (use_ipex=True)", "group": {"made_by": "compat", "adopted": True, "created_by_trainer": 0,
                "ddp_on_it": True, "created": 1}, "world_size": 2, "process_index": 0, "parallel_mode": "ParallelMode.DISTRIBUTED", "train_seconds": 1.2,
                "steps_done": 3, "step_seconds": [0.5, 0.1], "losses": [4.85, 4.8], "rows_per_step": [[0, 1], [2, 3]], "train_batch_size": 4,
                "wrapped_in": "DistributedDataParallel", "params_sha256": "ab" * 32, "ipex_optimized": True},
    "error": {"type": "RuntimeError", "message": "m", "traceback": "t"},
}


def load_worker():
    """live/worker.py as a module (it is a script: its imports are the standard library's), with its protocol loaded."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compat_worker_under_test", LIVE / "worker.py")
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    worker.PROTOCOL = worker.load_protocol()
    return worker


def test_what_the_worker_writes_is_the_protocols_record_and_reads_back_whole():
    worker = load_worker()
    text = worker.record_text(WORKER_STATUS)
    status = loads_status(text)
    assert json.loads(text) == json.loads(protocol.dumps(status))
    assert status.pairs.links[0].allreduce.busbw == 8e8 and status.fabric.deadline.link == protocol.SlowLink("n1", "n2", 9e8)
    assert status.fabric_others["gloo"].error and status.imports.ccl.fixture and status.trainer.group.ddp_on_it is True


def test_a_worker_out_of_step_with_its_protocol_says_so_and_compat_refuses_the_record(capsys):
    worker = load_worker()
    text = worker.record_text({**WORKER_STATUS, "newfield": 1})
    assert "this rank's record does not fit the protocol: record: unknown field newfield" in capsys.readouterr().err
    with pytest.raises(ProtocolError, match="unknown field newfield"):
        loads_status(text)


def test_the_protocol_runs_on_the_standard_library_alone_and_without_dataclasses(tmp_path):
    """The target interpreter imports it by path, with nothing of compat; on Python 3.6 there is no dataclasses
    module: the stand-in gives the same records (here: dataclasses made unimportable)."""
    script = (
        "import importlib.util, json, sys\n"
        "sys.modules['dataclasses'] = None\n"
        f"spec = importlib.util.spec_from_file_location('compat_live_protocol', {str(LIVE / 'protocol.py')!r})\n"
        "p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n"
        "s = p.loads_status(sys.stdin.read())\n"
        "assert p.loads_status(p.dumps(s)) == s and hash(s.fabric.rows[0]) == hash(p.SweepRow(**s.fabric.rows[0].to_json()))\n"
        "try:\n    s.rank = 1\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit('not frozen')\n"
        "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith(('compatmatrix', 'packaging'))), 'dataclasses' in sys.modules and sys.modules['dataclasses'] is not None)\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", script], input=json.dumps(WORKER_STATUS), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "False"]


def test_the_service_copies_the_protocol_beside_the_worker_under_the_name_the_worker_loads():
    worker = (LIVE / "worker.py").read_text()
    service = (LIVE / "service.py").read_text()
    assert 'PROTOCOL_NAME = "compat_live_protocol"' in worker and 'run_dir / "compat_live_protocol.py"' in service


READERS = ["live/report.py", "live/service.py", "live/fabric.py", "live/oneccl_causes.py", "live/progress.py", "live/supervise.py", "render/fabric_html.py"]
BY_KEY = re.compile(r"\bstatus\.get\(|\bstatus\[|\.error\.get\(|\berror or \{\}|\bstatus\b\s*=\s*json\.loads")  # 74 lines of the report matched before the protocol


@pytest.mark.parametrize("name", READERS)
def test_no_reader_of_a_rank_record_reads_it_by_string_key(name):
    """The report and its neighbours read the ranks' records as the protocol's records (attribute access): no status,
    error or record section is read by key. The string keys left are the report's own tables (the sweep and the pairs
    of its --json document, which render/fabric_html draws), not a rank's record."""
    source = (LIVE.parent / name).read_text()
    found = [line.strip() for line in source.splitlines() if BY_KEY.search(line)]
    assert found == [], found


def test_the_report_names_a_record_of_a_newer_compat_and_reads_the_rest_of_a_record_with_a_broken_part(tmp_path):
    """read_ranks: a status file of another protocol version is not read (its rank fails with the reason); a record
    whose pairs are not of the shape keeps everything else, and live.pairs says it could not read them."""
    from compatmatrix.live.report import RankRecord, pairs_finding, ranks_finding, read_ranks
    from compatmatrix.live.supervise import Supervised

    (tmp_path / "proc-n1-11.json").write_text(json.dumps({"protocol": PROTOCOL_VERSION + 1, "rank": 0, "stage": "done"}))
    (tmp_path / "proc-n1-12.json").write_text(versioned(rank=1, host="n1", stage="done", world_size=2, pairs={"hosts": "ab"}))
    broken, newer = read_ranks(tmp_path, {11: 0, 12: 0})  # a record without a rank last
    assert isinstance(newer, RankRecord) and newer.rank is None and newer.stage == "unreadable status"
    assert newer.error.type == "UnreadableRecord" and "written by a newer compat" in newer.error.message
    assert (broken.rank, broken.status.world_size, broken.status.pairs) == (1, 2, None) and set(broken.refused) == {"pairs"}
    assert pairs_finding([broken]).summary.startswith("a rank's record of the pairs could not be read (ProtocolError: record.pairs.hosts: a list")
    supervised = Supervised("run", (), False, False, 1.0, False, ())
    finding = ranks_finding([broken, newer], supervised)
    assert finding.status.value == "fail" and "UnreadableRecord: proc-n1-11.json: the record is of protocol version" in finding.summary, finding.summary


def _old_interpreters() -> list[str]:
    """Python 3.6-3.10 interpreters on this machine (on PATH, or pyenv's), the ones the IPEX 1.x stacks run the worker in."""
    import glob
    import shutil

    found = {}
    for minor in range(6, 11):
        name = f"python3.{minor}"
        on_path = shutil.which(name)
        path = (next(iter(sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/{name}")))), None)
                or (on_path if on_path and "/shims/" not in on_path else None))  # a pyenv shim runs nothing unless selected
        if path:
            found[minor] = path
    return list(found.values())


@pytest.mark.parametrize("python", _old_interpreters() or [pytest.param(None, marks=pytest.mark.skip(reason="no Python 3.6-3.10 here"))])
def test_the_worker_writes_its_record_under_the_older_pythons_it_serves(tmp_path, python):
    """The worker loads the protocol by path as the run folder holds it; on Python 3.6-3.9, typing.get_type_hints looks
    a record's module up in sys.modules, so the loaded module must be there (a KeyError there wrote no record at all)."""
    shutil.copy(LIVE / "worker.py", tmp_path / "worker.py")
    shutil.copy(LIVE / "protocol.py", tmp_path / "compat_live_protocol.py")
    script = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport worker\nworker.PROTOCOL = worker.load_protocol()\n"
              "text = worker.record_text(json.loads(sys.stdin.read()))\nworker.PROTOCOL.loads_status(text)\nprint('written', len(text))\n")
    done = subprocess.run([python, "-I", "-c", script, str(tmp_path)], input=json.dumps(WORKER_STATUS), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("written"), done.stderr[-2000:]
    assert "does not fit the protocol" not in done.stderr, done.stderr[-2000:]


def test_a_huge_fifo_or_undecodable_rank_file_is_refused_without_reading_it_whole(tmp_path):
    """A rank's file is outside input: one larger than the bound is refused after reading at most bound + 1 bytes (its
    size is not read into memory), a FIFO is never opened for blocking reads, bytes that are not UTF-8 are replaced;
    the progress line and the report read through it (a non-UTF-8 status file crashed the progress line)."""
    import io
    import resource

    from compatmatrix.live.progress import TerminalProgress
    from compatmatrix.live.protocol import read_record_text, read_tail_text

    big = tmp_path / "proc-h-1.json"
    with open(big, "wb") as handle:
        handle.truncate(200 << 20)  # sparse: 200 MiB that take no disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ProtocolError, match="more than"):
        read_record_text(big)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 << 10  # KiB: nothing like 200 MiB read
    assert len(read_tail_text(big, 1000)) == 1000
    fifo = tmp_path / "proc-h-2.json"
    os.mkfifo(fifo)
    with pytest.raises(ProtocolError, match="not a regular file"):
        read_record_text(fifo)
    assert read_tail_text(fifo, 10) == ""
    (tmp_path / "proc-h-3.json").write_bytes(b"\xff\xfe" + json.dumps(WORKER_STATUS).encode())
    big.unlink()
    fifo.unlink()
    TerminalProgress(io.StringIO(), tmp_path, every=0).look()  # no UnicodeDecodeError out of the supervisor's loop
