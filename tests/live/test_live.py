"""compat doctor --live without torch: the launcher plans, the supervisor (real processes, real signals, real
/proc), and the pure report over hand-written rank records."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from compatmatrix.findings import Status as S
from compatmatrix.launchers import LAUNCHERS
from compatmatrix.launchers.interface import LaunchError
from compatmatrix.launchers.interface import RankLayout as Topology
from compatmatrix.launchers.live import plan_launch
from compatmatrix.launchers.mpirun import read_hostfile
from compatmatrix.live.report import Expectation, RankRecord, hang_finding, live_findings, stuck_frames, trainer_finding
from compatmatrix.live.supervise import RUN_ID_VAR, Supervised, supervise
from compatmatrix.processes import tagged_processes
from compatmatrix.translate import ipex_through_trainer

WORKER = ["worker.py", "--run-dir", "/tmp/x"]


def write_exe(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# --- launcher plans ---------------------------------------------------------------------------------


def test_spawn_sets_rank_variables_and_a_loopback_master():
    launch = plan_launch("spawn", "/py", WORKER, Topology(nproc_per_node=2), {"PATH": "/bin"}, threads_per_rank=1)
    assert [c[0] for c in launch.commands] == ["/py", "/py"]
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) for e in launch.envs] == [("0", "0", "2"), ("1", "1", "2")]
    assert {e["MASTER_ADDR"] for e in launch.envs} == {"127.0.0.1"} and int(launch.envs[0]["MASTER_PORT"]) > 0
    assert launch.envs[0]["OMP_NUM_THREADS"] == "1"


def test_spawn_on_node_one_of_two_numbers_its_ranks_after_node_zero():
    topology = Topology(nproc_per_node=2, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500)
    launch = plan_launch("spawn", "/py", WORKER, topology, {}, threads_per_rank=4)
    assert [e["RANK"] for e in launch.envs] == ["2", "3"] and launch.envs[0]["WORLD_SIZE"] == "4"
    assert launch.master == "10.0.0.1:29500"


def test_without_rank_env_spawn_sets_no_rank_variables():
    launch = plan_launch("spawn", "/py", WORKER, Topology(), {}, threads_per_rank=1, rank_env=False)
    assert all("RANK" not in e and "WORLD_SIZE" not in e for e in launch.envs)


def test_torchrun_is_the_target_interpreters_torch_distributed_run():
    topology = Topology(nproc_per_node=2, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500)
    launch = plan_launch("torchrun", "/env/bin/python", WORKER, topology, {}, threads_per_rank=1)
    # underscore spellings: torch < 2.0 knows only those
    assert launch.commands == (("/env/bin/python", "-m", "torch.distributed.run", "--max_restarts", "0", "--nnodes", "2", "--nproc_per_node", "2", "--node_rank", "1",
                                "--master_addr", "10.0.0.1", "--master_port", "29500", *WORKER),)


@pytest.mark.parametrize("missing", ["--master-addr", "--master-port"])
def test_multi_node_needs_an_agreed_master(missing):
    topology = Topology(nnodes=2, master_addr=None if missing == "--master-addr" else "10.0.0.1", master_port=None if missing == "--master-port" else 29500)
    with pytest.raises(LaunchError, match=missing):
        plan_launch("torchrun", "/py", WORKER, topology, {}, threads_per_rank=1)


def test_hostfile_forms(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1\nnode2:4\nnode3 slots=8\n\n")
    assert read_hostfile(str(hostfile)) == [("node1", None), ("node2", 4), ("node3", 8)]
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(LaunchError, match="lists no hosts"):
        read_hostfile(str(empty))


def test_intel_mpi_command_maps_pmi_and_passes_the_master(tmp_path):
    # FIXTURE mpirun: only answers --version like Intel MPI's (the real one is exercised in test_live_real.py)
    mpirun = write_exe(tmp_path / "mpirun", "#!/bin/sh\necho 'Intel(R) MPI Library for Linux* OS, Version 2021.18'\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    launch = plan_launch("mpirun", "/py", WORKER, Topology(nproc_per_node=2, hostfile=str(hostfile)), {"PATH": "/usr/bin"}, 1, mpirun=mpirun)
    command = list(launch.commands[0])
    assert launch.flavor == "intel-mpi" and launch.world_size == 4
    assert command[:5] == [mpirun, "-n", "4", "-ppn", "2"] and command[5:7] == ["-f", str(hostfile)]
    assert command[command.index("MASTER_ADDR") + 1] == "node1"  # the hostfile's first host
    assert command[-5:] == ["/py", *WORKER, "--map-mpi"]
    assert launch.envs[0]["PATH"].split(os.pathsep)[0] == str(tmp_path)  # Intel's mpirun finds mpiexec.hydra on PATH


@pytest.mark.parametrize("euid", [0, 1000])  # root in a container, a user on a cluster: both forced, whoever runs the tests
def test_open_mpi_command_exports_with_x(tmp_path, monkeypatch, euid):
    mpirun = write_exe(tmp_path / "mpirun", "#!/bin/sh\necho 'mpirun (Open MPI) 4.1.4'\n")  # FIXTURE: --version only
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    launch = plan_launch("mpirun", "/py", WORKER, Topology(nproc_per_node=2), {}, 1, mpirun=mpirun)
    command = list(launch.commands[0])
    assert launch.flavor == "open-mpi" and command[:4] == [mpirun, "-np", "2", "--oversubscribe"]
    # Open MPI refuses to run as root without --allow-run-as-root; compat adds it only then
    assert ("--allow-run-as-root" in command) is (euid == 0)
    if euid == 0:
        assert command[4] == "--allow-run-as-root"
    assert ["-x", "MASTER_ADDR"] == command[command.index("MASTER_ADDR") - 1: command.index("MASTER_ADDR") + 1]


def test_unknown_mpirun_and_missing_mpirun_are_one_sentence_with_a_fix(tmp_path):
    other = write_exe(tmp_path / "mpirun", "#!/bin/sh\necho 'something else'\n")
    with pytest.raises(LaunchError, match="neither Intel MPI, MPICH nor Open MPI"):
        plan_launch("mpirun", "/py", WORKER, Topology(), {}, 1, mpirun=other)
    with pytest.raises(LaunchError, match="not an executable") as raised:
        plan_launch("mpirun", "/py", WORKER, Topology(), {}, 1, mpirun=str(tmp_path / "nope"))
    assert raised.value.fix


# --- the supervisor: real processes ------------------------------------------------------------------

ESCAPER = """
import os, subprocess, sys, time
# a child that leaves the process group (setsid) and would outlive a plain killpg; it writes its pid once it runs
grandchild = os.path.join(sys.argv[1], "grandchild.pid")
subprocess.Popen([sys.executable, "-c", "import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)", grandchild],
                 start_new_session=True)
open(os.path.join(sys.argv[1], "proc-%d.json" % os.getpid()), "w").write("{}")
time.sleep(600)
"""
ESCAPER_TIMEOUT_S = 8.0  # both interpreters start well within it on a loaded 1-CPU machine; the test asserts they did


def test_timeout_kills_everything_including_a_grandchild_that_escaped_the_group(tmp_path):
    from ..procs import MARK_VARIABLE, marked, new_mark

    script = tmp_path / "escaper.py"
    script.write_text(ESCAPER)
    mark = new_mark()  # inherited by the child and the grandchild: found in /proc whatever their group or session
    env = dict(os.environ, **{MARK_VARIABLE: mark})
    started = time.monotonic()
    result = supervise([[sys.executable, str(script), str(tmp_path)]], [env], tmp_path, timeout=ESCAPER_TIMEOUT_S, run_id="t" + os.urandom(6).hex(), stack_dump_wait=0.2)
    # the escape really happened before the deadline: the child wrote its record, the grandchild (in its own session) its pid
    assert list(tmp_path.glob("proc-*.json")), "the child never started: nothing escaped"
    assert (tmp_path / "grandchild.pid").exists(), "the grandchild never started: nothing escaped"
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert result.timed_out and result.leftovers == ()
    assert tagged_processes(result.run_id, RUN_ID_VAR) == []
    assert grandchild not in marked(mark) and marked(mark) == [], "the grandchild that left the process group outlived the run"
    assert time.monotonic() - started < ESCAPER_TIMEOUT_S + 10
    assert result.ends[0].returncode is None  # it was still running at the deadline


def test_a_failed_process_stops_the_others_after_a_grace_period(tmp_path):
    env = dict(os.environ)
    commands = [[sys.executable, "-c", "import sys; sys.exit(3)"], [sys.executable, "-c", "import time; time.sleep(600)"]]
    result = supervise(commands, [env, env], tmp_path, timeout=60, run_id="g" + os.urandom(6).hex(), grace_after_failure=0.5, stack_dump_wait=0.1)
    assert result.stopped_early and not result.timed_out and result.seconds < 15
    assert [e.returncode for e in result.ends] == [3, None]
    assert tagged_processes(result.run_id, RUN_ID_VAR) == []


def test_a_clean_run_ends_by_itself_and_keeps_the_launcher_output(tmp_path):
    env = dict(os.environ)
    result = supervise([[sys.executable, "-c", "print('hello from the launcher')"]], [env], tmp_path, timeout=30, run_id="c" + os.urandom(6).hex())
    assert not result.timed_out and not result.stopped_early and result.ends[0].returncode == 0
    assert "hello from the launcher" in result.ends[0].log


# --- the report: pure ---------------------------------------------------------------------------------


def rank(r, stage="done", returncode=0, **status):
    base = {"rank": r, "stage": stage, "started": 0.0, "updated": 1.0, "world_size": 2, "rank_source": "RANK/WORLD_SIZE", "backend": "gloo",
            "backend_reason": "no oneCCL bindings are installed, so gloo", "imports": {"torch": {"version": "2.13.0+cpu", "ok": True}}}
    base.update(status)
    return RankRecord(pid=1000 + (r or 0), status=base, log="compat-live: stage start\n", returncode=returncode)


def trainer(rows, digest="abc", world=2, steps=3, **extra):
    return {"transformers": "5.23.0", "accelerate": "1.15.0", "flags": {"use_cpu": True, "ddp_backend": "gloo"}, "world_size": world, "steps_done": steps,
            "rows_per_step": rows, "params_sha256": digest, "step_seconds": [0.1, 0.02, 0.02], "losses": [4.9, 4.8, 4.7], **extra}


EXPECT = Expectation(world_size=2, trainer=True, steps=3, per_device_batch=2, backend="auto", ccl_installed=False, timeout=60)
ENDED = Supervised("x", (), False, False, 5.0, False, ())


def test_a_good_trainer_step_passes():
    ranks = [rank(0, trainer=trainer([[0, 1], [4, 5], [8, 9]])), rank(1, trainer=trainer([[2, 3], [6, 7], [10, 11]]))]
    finding = trainer_finding(ranks, EXPECT)
    assert finding.status is S.PASS and "world size 2, batch 4 per step, identical parameters on every rank" in finding.summary


@pytest.mark.parametrize(
    "second, expected",
    [
        (trainer([[2, 3], [6, 7], [10, 11]], digest="other"), "the parameters differ between ranks"),
        (trainer([[0, 1], [4, 5], [8, 9]], world=1), "every rank trains alone: the Trainer saw world size"),
        (trainer([[0, 1], [6, 7], [10, 11]]), "step 1: the ranks trained on the same samples"),
        (trainer([[2, 3], [6, 7]], steps=2), "the Trainer took [2, 3] steps, expected 3"),
    ],
)
def test_each_broken_invariant_fails_the_trainer_finding(second, expected):
    first = trainer([[0, 1], [4, 5], [8, 9]], world=second["world_size"])
    finding = trainer_finding([rank(0, trainer=first), rank(1, trainer=second)], EXPECT)
    assert finding.status is S.FAIL
    assert expected in " ".join((finding.summary, *finding.evidence))


def test_ipex_asked_but_not_applied_fails():
    expect = Expectation(**{**EXPECT.__dict__, "ipex_mode": "trainer"})
    ranks = [rank(0, trainer=trainer([[0, 1], [4, 5], [8, 9]], ipex_optimized=True)), rank(1, trainer=trainer([[2, 3], [6, 7], [10, 11]], ipex_optimized=False))]
    finding = trainer_finding(ranks, expect)
    assert finding.status is S.FAIL and "not optimized" in finding.summary


DUMP = '''compat-live: stage init
Current thread 0x00007f (most recent call first):
  File "/usr/lib/python3/site-packages/torch/distributed/rendezvous.py", line 199 in _create_c10d_store
  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 1892 in init_process_group
  File "/tmp/run/worker.py", line 410 in main
'''


def test_stack_dump_gives_the_frames_and_not_the_tail():
    assert stuck_frames(DUMP) == "_create_c10d_store (rendezvous.py:199) <- init_process_group (distributed_c10d.py:1892) <- main (worker.py:410)"


def test_timeout_is_a_hang_naming_the_laggard_and_the_causes():
    ranks = [RankRecord(1, {"rank": 0, "stage": "init", "started": 0, "updated": 2}, DUMP), RankRecord(2, {"rank": 1, "stage": "import:torch", "started": 0, "updated": 1}, "")]
    supervised = Supervised("x", (), True, False, 30.0, True, ())
    finding = hang_finding(ranks, supervised, EXPECT, 2)
    assert finding.status is S.FAIL
    assert finding.summary == "hang: the run did not finish within the 60 s timeout; rank 1 stuck at stage import:torch"
    evidence = " ".join(finding.evidence)
    assert "stuck in _create_c10d_store" in evidence and "hangs while importing" in evidence and "MASTER_ADDR:MASTER_PORT" in evidence


def test_missing_ranks_point_at_the_launcher():
    supervised = Supervised("x", (), True, False, 30.0, True, ())
    finding = hang_finding([RankRecord(1, {"rank": 0, "stage": "init", "started": 0, "updated": 2}, "")], supervised, EXPECT, 2)
    assert "1 rank(s) never started" in " ".join(finding.evidence) and "the launcher did not start every rank" in " ".join(finding.evidence)


def test_an_abort_after_finishing_is_a_warning_not_a_failure():
    ranks = [rank(0), RankRecord(1001, rank(1).status, "terminate called without an active exception\n", returncode=-6)]
    findings = {f.id: f for f in live_findings(_launch(), ENDED, ranks, Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.ranks"].status is S.WARN and "killed by signal SIGABRT at interpreter exit" in findings["live.ranks"].summary
    assert findings["live.hang"].status is S.PASS


def test_survivors_fail_the_cleanup_finding():
    supervised = Supervised("x", (), False, False, 5.0, False, (4242,))
    findings = {f.id: f for f in live_findings(_launch(), supervised, [rank(0), rank(1)], Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.cleanup"].status is S.FAIL and "pid 4242" in findings["live.cleanup"].evidence


def test_a_fixture_ccl_backend_is_labelled_and_a_gloo_fallback_warns_when_bindings_are_installed():
    fixture = {"ccl": {"module": "oneccl_bindings_for_pytorch", "ok": True, "fixture": "tests/fixture_ccl.py", "registered": True}}
    ranks = [rank(r, backend="ccl", backend_reason="... (a TEST FIXTURE on top of gloo, not oneCCL)", imports=fixture) for r in (0, 1)]
    findings = {f.id: f for f in live_findings(_launch(), ENDED, ranks, Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.backend"].summary.startswith("ccl, FIXTURE:")
    fallback = {f.id: f for f in live_findings(_launch(), ENDED, [rank(0), rank(1)], Expectation(**{**EXPECT.__dict__, "trainer": False, "ccl_installed": True}))}
    assert fallback["live.backend"].status is S.WARN


def _launch():
    from compatmatrix.launchers.interface import Launch

    return Launch("spawn", "spawn", ((sys.executable,),), ({},), "127.0.0.1:1", 2, 2)


# --- which way IPEX is applied, from the matrix -----------------------------------------------------------


@pytest.mark.parametrize(
    "transformers, accelerate, torch, through_trainer, words",
    [
        ("4.30.2", "0.20.3", "2.0.1", True, "the Trainer applies IPEX itself"),
        ("4.52.4", "1.10.1", "2.8.0", True, "the Trainer applies IPEX itself"),
        ("4.56.2", "1.7.0", "2.8.0", True, "accelerate 1.7.0 applies IPEX in prepare()"),
        ("4.56.2", "1.10.1", "2.6.0", True, "accelerate 1.10.1 applies IPEX in prepare()"),
        ("4.56.2", "1.10.1", "2.8.0", False, "--use_ipex does nothing here: accelerate 1.10.1 applies IPEX only below torch 2.7.0"),
        ("4.56.2", "1.10.1", None, False, "accelerate 1.10.1 applies IPEX only below torch 2.7.0"),
        ("4.56.2", "1.13.0", "2.6.0", False, "accelerate 1.13.0 has no IPEX support"),
        ("5.23.0", "1.15.0", "2.8.0", False, "transformers 5.23.0 has no --use_ipex"),
    ],
)
def test_ipex_through_trainer_follows_the_matrix(matrix, transformers, accelerate, torch, through_trainer, words):
    from packaging.version import Version

    applies, note = ipex_through_trainer(matrix, Version(transformers), Version(accelerate), Version(torch) if torch else None)
    assert applies is through_trainer and words in note


def test_translate_warns_when_use_ipex_is_accepted_but_does_nothing(matrix):
    from packaging.version import Version

    from compatmatrix.translate import translate

    argv = ["python", "train.py", "--use_cpu", "--use_ipex", "--ddp_backend", "ccl"]
    quiet = translate(matrix, argv, Version("4.52.4"), Version("1.10.1"), Version("2.8.0"))
    assert "--use_ipex" in quiet.argv and not any("ipex" in w for w in quiet.warnings)
    silent = translate(matrix, argv, Version("4.56.2"), Version("1.10.1"), Version("2.8.0"))
    assert "--use_ipex" in silent.argv
    assert any(w.startswith("--use_ipex does nothing here: accelerate 1.10.1 applies IPEX only below torch 2.7.0") for w in silent.warnings)


# --- the Trainer's flags for the installed versions (plan_trainer) ---------------------------------------------


class _Dist:
    def __init__(self, version):
        from packaging.version import Version

        self.public_version = Version(version)


class _Snapshot:
    """A stand-in for EnvSnapshot with just what plan_trainer reads: installed versions and CPU flags."""

    def __init__(self, cpu_flags=(), **versions):
        self.versions = versions
        self.cpu = type("Cpu", (), {"flags": frozenset(cpu_flags)})()

    def get(self, *names):
        for name in names:
            key = name.replace("-", "_")
            if key in self.versions:
                return _Dist(self.versions[key])
        return None


@pytest.mark.parametrize(
    "versions, cpu_flags, flags, backend_flag, blocked",
    [
        ({"transformers": "4.28.1", "accelerate": "0.18.0", "torch": "1.13.1"}, (), {"no_cuda": True}, "xpu_backend", False),
        ({"transformers": "4.30.2", "accelerate": "0.20.3", "torch": "2.0.1"}, (), {"no_cuda": True}, "ddp_backend", False),
        ({"transformers": "4.56.2", "accelerate": "1.10.1", "torch": "2.8.0"}, ("avx512_bf16",), {"use_cpu": True, "bf16": True}, "ddp_backend", False),
        ({"transformers": "5.23.0", "accelerate": "1.15.0", "torch": "2.13.0"}, ("amx_bf16",), {"use_cpu": True, "bf16": True}, "ddp_backend", True),
        ({"transformers": "5.23.0", "accelerate": "1.15.0", "torch": "2.13.0"}, ("avx2",), {"use_cpu": True}, "ddp_backend", True),
    ],
)
def test_trainer_flags_follow_the_installed_transformers(matrix, versions, cpu_flags, flags, backend_flag, blocked):
    from compatmatrix.checks.registry import Context
    from compatmatrix.live.service import LiveOptions, plan_trainer

    plan = plan_trainer(Context(matrix, _Snapshot(cpu_flags, **versions)), LiveOptions())  # type: ignore[arg-type]
    assert plan.flags == flags and plan.backend_flag == backend_flag and bool(plan.ccl_blocked) is blocked
    assert plan.ipex_mode == "none"


@pytest.mark.parametrize(
    "cpu_flags, asked, on, why",
    [
        (("avx2",), None, False, "off: this CPU has no avx512_bf16 or amx_bf16"),
        (("avx512_bf16",), None, True, "on: this CPU has native bf16 (avx512_bf16)"),
        (("amx_bf16", "avx512_bf16"), False, False, "off (--no-bf16)"),
        (("avx2",), True, True, "on (--bf16): this CPU has no native bf16, so it is emulated"),
        (("amx_bf16",), True, True, "on (--bf16): native on this CPU (amx_bf16)"),
    ],
)
def test_bf16_of_the_live_trainer_step_follows_the_cpu_unless_forced(matrix, cpu_flags, asked, on, why):
    """The same plan on every machine: the CPU flags are given, not read from the machine running the test."""
    from compatmatrix.checks.registry import Context
    from compatmatrix.live.service import LiveOptions, plan_trainer

    snapshot = _Snapshot(cpu_flags, transformers="5.23.0", accelerate="1.15.0", torch="2.13.0")
    plan = plan_trainer(Context(matrix, snapshot), LiveOptions(bf16=asked))  # type: ignore[arg-type]
    assert plan.flags.get("bf16", False) is on and plan.bf16_why.startswith(why)


def test_trainer_plan_with_ipex_picks_the_path_that_really_applies_it(matrix):
    from compatmatrix.checks.registry import Context
    from compatmatrix.live.service import LiveOptions, plan_trainer

    old = plan_trainer(Context(matrix, _Snapshot(transformers="4.52.4", accelerate="1.10.1", torch="2.8.0", intel_extension_for_pytorch="2.8.0")), LiveOptions())
    assert old.ipex_mode == "trainer" and old.flags["use_ipex"] is True
    new = plan_trainer(Context(matrix, _Snapshot(transformers="4.56.2", accelerate="1.10.1", torch="2.8.0", intel_extension_for_pytorch="2.8.0")), LiveOptions())
    assert new.ipex_mode == "direct" and "use_ipex" not in new.flags and new.ipex_note.endswith("applied directly, as your script must")
    none = plan_trainer(Context(matrix, _Snapshot(torch="2.8.0")), LiveOptions())
    assert none.skip_reason == "transformers is not installed"


# --- what the launchers report, and how messages are cut --------------------------------------------------------

TORCHRUN_REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5151)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 5152)
"""
# as Intel MPI's mpirun printed it here (impi-rt 2021.18.1)
HYDRA_REPORT = ("\n=====\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 0 PID 6478 RUNNING AT vm\n=   KILLED BY SIGNAL: 15 (Terminated)\n"
                "=====\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 1 PID 6479 RUNNING AT vm\n=   KILLED BY SIGNAL: 11 (Segmentation fault)\n"
                "=   RANK 2 PID 7000 RUNNING AT vm\n=   EXIT CODE: 9\n")


def test_exit_codes_from_the_launchers_reports():
    from compatmatrix.launchers.live import launcher_exit_codes

    assert launcher_exit_codes(TORCHRUN_REPORT) == {5151: -15, 5152: 3}
    assert launcher_exit_codes(HYDRA_REPORT) == {6478: -15, 6479: -11, 7000: 9}
    assert launcher_exit_codes("nothing here") == {}


def test_the_rank_that_died_is_named_before_the_one_the_launcher_stopped():
    ranks = [rank(0, stage="init", returncode=-15), rank(1, stage="trainer", returncode=-11)]
    findings = {f.id: f for f in live_findings(_launch(), Supervised("x", (), False, True, 5.0, True, ()), ranks, EXPECT)}
    assert findings["live.ranks"].summary == "rank 1 was killed by signal SIGSEGV at stage trainer"
    assert findings["live.hang"].summary.startswith("not a hang: rank 1 ended early")


def test_a_peer_error_is_not_blamed_over_the_rank_that_crashed():
    peer = rank(0, stage="trainer:train", error={"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:1234. Good luck!"})
    gone = RankRecord(1001, rank(1, stage="trainer").status, "", returncode=None)
    findings = {f.id: f for f in live_findings(_launch(), Supervised("x", (), False, True, 5.0, True, (), died=(1001,)), [peer, gone], EXPECT)}
    assert findings["live.ranks"].summary.startswith("rank 1 ended at stage trainer without an error of its own")
    assert findings["live.trainer"].status is S.SKIP


def test_a_rank_gone_without_any_record_of_why_is_never_a_pass():
    # under a launcher that reports nothing: not done, no error, no exit code, the launcher failed
    gone = RankRecord(1001, rank(1, stage="allreduce").status, "", returncode=None)
    supervised = Supervised("x", (_end(1),), False, False, 5.0, False, ())
    findings = {f.id: f for f in live_findings(_launch(), supervised, [rank(0), gone], Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.ranks"].status is S.FAIL and "rank 1 ended at stage allreduce" in findings["live.ranks"].summary
    assert findings["live.hang"].status is not S.PASS


def _end(code):
    from compatmatrix.live.supervise import ProcessEnd

    return ProcessEnd(("torchrun",), 99, code, "")


def test_two_processes_claiming_one_rank_fail_the_world_finding():
    findings = {f.id: f for f in live_findings(_launch(), ENDED, [rank(0), rank(0)], Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.world"].status is S.FAIL and findings["live.world"].summary == "2 processes claim rank 0: the rank variables are wrong"


def test_a_loss_scaled_by_the_world_size_fails():
    rows = ([[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]])
    doubled = [rank(r, trainer=trainer(rows[r], losses=[9.7, 9.6, 9.5])) for r in (0, 1)]
    finding = trainer_finding(doubled, EXPECT)
    assert finding.status is S.FAIL and "expected about ln(128) = 4.852" in finding.summary and "average_tokens_across_devices" in finding.summary


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_fails_the_trainer_step(bad):
    rows = ([[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]])
    diverged = [rank(r, trainer=trainer(rows[r], losses=[4.85, bad, 4.8])) for r in (0, 1)]
    finding = trainer_finding(diverged, EXPECT)
    assert finding.status is S.FAIL and f"the Trainer logged a loss of {bad}" in finding.summary


def test_messages_are_cut_to_their_first_sentence():
    from compatmatrix.live.report import first_sentence

    assert first_sentence("Connection closed by peer [127.0.0.1]:5. Good luck! 🏖️") == "Connection closed by peer [127.0.0.1]:5."
    assert first_sentence("\n\nno full stop here") == "no full stop here"
    assert len(first_sentence("x" * 500)) == 160


def test_every_live_finding_is_listed_by_doctor_list():
    from compatmatrix.render.text import LIVE_CHECKS

    from ..conftest import run_compat

    produced = {f.id for f in live_findings(_launch(), ENDED, [rank(0), rank(1)], EXPECT)}
    assert produced == {cid for cid, _ in LIVE_CHECKS}
    listed = run_compat("doctor", "--list").stdout
    assert all(cid in listed for cid in produced)
    assert "live." not in run_compat("check", "--list").stdout


OPEN_MPI_SIGNAL = "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 (Segmentation fault).\n"
OPEN_MPI_EXIT = ("mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be terminated. "
                 "The first process to do so was:\n\n  Process name: [[23445,1],1]\n  Exit code:    3\n")


def test_the_launchers_first_failure():
    from compatmatrix.launchers.live import launcher_first_failure

    assert launcher_first_failure(TORCHRUN_REPORT) == ("pid", 5152, 3)
    assert launcher_first_failure(OPEN_MPI_SIGNAL) == ("rank", 1, -11)  # Open MPI names ranks (its PID is 0 here)
    assert launcher_first_failure(OPEN_MPI_EXIT) == ("rank", 1, 3)
    assert launcher_first_failure(HYDRA_REPORT) is None


def test_a_rank_compat_stopped_is_never_the_root_cause_and_an_oom_kill_is():
    oom = rank(1, stage="trainer", returncode=-9)
    stopped = RankRecord(1000, rank(0, stage="trainer:train").status, "", returncode=None)
    supervised = Supervised("x", (), False, True, 5.0, True, (), died=(1001,), stopped=(1000,))
    findings = {f.id: f for f in live_findings(_launch(), supervised, [stopped, oom], EXPECT)}
    assert findings["live.ranks"].summary == "rank 1 was killed by signal SIGKILL at stage trainer"


def test_more_ranks_than_asked_for_fail_the_launch_finding():
    findings = {f.id: f for f in live_findings(_launch(), ENDED, [rank(0), rank(1), rank(2)], Expectation(**{**EXPECT.__dict__, "trainer": False}))}
    assert findings["live.launch"].status is S.FAIL and "started 3 of 2 ranks" in findings["live.launch"].summary


def test_an_unfinished_rank_never_lets_the_run_pass():
    quiet = RankRecord(1001, rank(1, stage="allreduce").status, "", returncode=None)
    findings = live_findings(_launch(), ENDED, [rank(0), quiet], Expectation(**{**EXPECT.__dict__, "trainer": False}))
    assert any(f.status is S.FAIL for f in findings)


@pytest.mark.parametrize("variables", LAUNCHERS["mpirun"].rank_variables)
def test_the_worker_maps_each_of_the_launchers_rank_variables(variables):
    """The worker keeps no table of its own: --rank-variables (the launcher's rank_variables) says what --map-mpi maps."""
    import json
    import subprocess

    from compatmatrix.live import service

    rank, size, local = variables
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({rank: "3", size: "4", local: "1"})
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import worker; "
            "print(json.dumps(worker.rank_variables(True, json.loads(sys.argv[2]))))")
    done = subprocess.run([sys.executable, "-c", code, str(service.WORKER.parent), json.dumps([list(variables)])],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [3, 4, 1, f"{rank}/{size}"]


def test_doctor_live_gives_the_worker_the_launchers_rank_variables(tmp_path):
    import json
    from types import SimpleNamespace

    from compatmatrix.live.service import LiveOptions, _worker_args

    no_trainer = SimpleNamespace(skip_reason="no Trainer step here")
    mpi = _worker_args(tmp_path, LiveOptions(launcher="mpirun"), 30.0, no_trainer, False, 0.0)
    given = mpi[mpi.index("--rank-variables") + 1]
    assert [tuple(names) for names in json.loads(given)] == list(LAUNCHERS["mpirun"].rank_variables)
    assert "--rank-variables" not in _worker_args(tmp_path, LiveOptions(launcher="spawn"), 30.0, no_trainer, False, 0.0)


@pytest.mark.parametrize(("version", "hosts_words"), [("Intel(R) MPI Library for Linux* OS, Version 2021.14", ["-hosts", "node01,node02"]),
                                                       ("mpirun (Open MPI) 4.1.4", ["--host", "node01:2,node02:2"])])
def test_a_slurm_node_list_as_the_live_hostfile_is_expanded_as_the_static_preflight_expands_it(tmp_path, monkeypatch, version, hosts_words):
    mpirun = write_exe(tmp_path / "mpirun", f"#!/bin/sh\necho '{version}'\n")  # FIXTURE mpirun: answers --version only
    monkeypatch.chdir(tmp_path)  # no file called node[01-02] here: the value is a node list
    launch = plan_launch("mpirun", "/py", WORKER, Topology(nproc_per_node=2, hostfile="node[01-02]"), {"PATH": "/usr/bin"}, 1, mpirun=mpirun)
    command = list(launch.commands[0])
    assert launch.world_size == 4 and launch.hosts == ("node01", "node02")
    at = command.index(hosts_words[0])
    assert command[at:at + 2] == hosts_words and "node[01-02]" not in command
    assert launch.envs[0]["MASTER_ADDR"] == "node01" and launch.master.startswith("node01:")  # the node list's first host, as a hostfile's


def test_doctor_live_hostfile_reads_a_node_list_by_the_static_preflights_rule(tmp_path):
    from ..conftest import run_compat

    done = run_compat("doctor", "--live", "--launcher", "mpirun", "--hostfile", "node[3-1]")  # a node list, but no valid one
    assert done.returncode == 2 and "the range 3-1 in the node list runs backwards" in done.stderr, done.stderr
    static = run_compat("doctor", "--hostfile", "node[3-1]")
    assert static.returncode == 2 and "the range 3-1 in the node list runs backwards" in static.stderr


# --- live.network on the master's host: the hosts that did not join are named where the job's hosts are known ----------

TIMED_OUT_RUN = Supervised("x", (), True, False, 30.0, False, ())


def _waiting(host: str, rank: int, joined: bool = False) -> RankRecord:
    return RankRecord(rank, {"rank": rank, "host": host, "stage": "backend", **({"world_size": 3} if joined else {})}, "")


def test_the_master_host_names_the_hostfile_hosts_that_did_not_start_or_join():
    from compatmatrix.live.service import reach_master

    here = os.uname()[1]
    ranks = [_waiting(here, 0), _waiting("node2", 1)]  # node2's rank wrote its record (shared run folder) but never joined; node3 wrote none
    reach = reach_master("127.0.0.1:29511", TIMED_OUT_RUN, ranks, ("127.0.0.1", "alice@node2", "node3.example.org"), True, 1, 0)
    assert "no rank on node3.example.org wrote a record into the run folder" in reach["problem"]
    assert "the ranks on alice@node2 started but did not join" in reach["problem"]
    assert "another host" not in reach["problem"]


def test_the_master_host_names_the_allocations_other_hosts_or_else_the_other_node_ranks():
    from compatmatrix.live.service import reach_master

    here = os.uname()[1]
    srun = reach_master("127.0.0.1:29512", TIMED_OUT_RUN, [_waiting(here, 0)], (here, "cn02"), False, 2, 0)  # srun: the allocation's hosts
    assert "a rank on cn02 (the host of the job other than this one) did not join" in srun["problem"]
    told = reach_master("127.0.0.1:29513", TIMED_OUT_RUN, [_waiting(here, 0)], (), False, 3, 0)  # torchrun --nnodes 3: no names here
    assert told["problem"].startswith("the group did not form: a rank on another host did not join at the rendezvous 127.0.0.1:29513")
    assert "(node rank 1, 2 of 3: each host runs its own compat" in told["problem"]


def test_srun_allocation_layout_keeps_the_hosts_in_node_order():
    from compatmatrix.launchers.srun import allocation_layout

    environ = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NNODES": "2",
               "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NODELIST": "cn[01-02]", "SLURMD_NODENAME": "cn02"}
    layout, _ = allocation_layout(environ, 2, hostnames=lambda text: ["cn01", "cn02"])  # FIXTURE scontrol: the list Slurm would give
    assert layout.hosts == ("cn01", "cn02") and layout.master_addr == "cn01" and layout.node_rank == 1


def _ccl_rank(rank: int, host: str, variables: dict) -> RankRecord:
    network = {"host": host, "interfaces": ["eth0", "lo"], "iface_variables": variables}
    return RankRecord(rank, {"rank": rank, "host": host, "stage": "init", "backend": "ccl", "started": 0, "updated": 2, "network": network}, "")


def test_a_ccl_hang_across_hosts_without_the_interface_variables_names_them_first():
    from compatmatrix.live.oneccl_causes import CclRun

    run = CclRun("torchrun", env_command='eval "$(compat env --launcher torchrun --python /env/bin/python)"')
    expect = Expectation(world_size=2, trainer=False, steps=1, per_device_batch=2, backend="auto", ccl_installed=True, timeout=60, multi_host=True, ccl=run)
    supervised = Supervised("x", (), True, False, 60.0, True, ())
    ranks = [_ccl_rank(0, "node1", {"GLOO_SOCKET_IFNAME": "eth0"}), _ccl_rank(1, "node2", {"FI_TCP_IFACE": "eth0"})]
    finding = hang_finding(ranks, supervised, expect, 1)
    causes = next(e for e in finding.evidence if e.startswith("likely causes: "))
    assert causes.startswith("likely causes: the ccl backend across hosts without CCL_KVS_IFACE and FI_TCP_IFACE "
                             "(CCL_KVS_IFACE not set on node1, node2; FI_TCP_IFACE not set on node1)")
    assert "CCL_KVS_IFACE and FI_TCP_IFACE set to the interface that reaches the master" in finding.fix
    assert 'eval "$(compat env --launcher torchrun --python /env/bin/python --master-addr MASTER --nnodes N)"' in finding.fix
    # set on every host, under gloo, or on one host: not this cause
    both = {"CCL_KVS_IFACE": "eth0", "FI_TCP_IFACE": "eth0"}
    assert "CCL_KVS_IFACE" not in " ".join(hang_finding([_ccl_rank(0, "node1", both), _ccl_rank(1, "node2", both)], supervised, expect, 1).evidence)
    gloo = [RankRecord(r.pid, {**r.status.to_json(), "backend": "gloo"}, "") for r in ranks]
    assert "CCL_KVS_IFACE" not in " ".join(hang_finding(gloo, supervised, expect, 1).evidence)
    unread = [ranks[0], RankRecord(2, {"rank": 1, "host": "node2", "stage": "import:torch", "started": 0, "updated": 1}, "")]  # node2 read nothing yet
    assert "(CCL_KVS_IFACE not set on node1; FI_TCP_IFACE not set on node1)" in " ".join(hang_finding(unread, supervised, expect, 1).evidence)
    one_host = Expectation(world_size=2, trainer=False, steps=1, per_device_batch=2, backend="auto", ccl_installed=True, timeout=60, ccl=run)
    assert "CCL_KVS_IFACE" not in " ".join(hang_finding(ranks, supervised, one_host, 2).evidence)
