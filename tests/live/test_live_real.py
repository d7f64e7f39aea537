"""compat doctor --live with REAL ranks: the local torch 2.13 CPU wheel with transformers 5.23 / accelerate 1.15
from the registry, real torch 2.8 + IPEX 2.8 with transformers 4.56, and Intel MPI's real mpirun from impi-rt.

Each run is checked from the outside as well: every process compat starts inherits COMPAT_TEST_TREE_MARK, and
after compat returns no live process in /proc may carry it (no orphans, whatever compat itself believes).
The only test double is the FIXTURE ccl backend of tests/fixture_ccl.py (gloo under the name ccl), and the
tests assert that compat labels it as a fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import jsonschema
import pytest

from ..clean_env import base_env
from ..fixture_ccl import fixture_ccl_path
from ..procs import cmdline
from ..real_envs import SPECS, real_env, real_overlay

pytestmark = pytest.mark.integration
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "findings-v1.json").read_text())


@pytest.fixture(scope="session")
def stock(stock_torch213):
    return stock_torch213


@pytest.fixture(scope="session")
def ipex_env(ipex280_torch280):
    return ipex280_torch280


def hostname_unresolvable():
    """Why Intel MPI cannot run here, or None: hydra's proxies connect back to the launcher by this host's name."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except OSError as exc:
        return f"this host's name {name!r} does not resolve ({exc}); Intel MPI's hydra proxies connect back to the launcher by host name"
    return None


@pytest.fixture(scope="session")
def mpirun():
    why = hostname_unresolvable()
    if why:
        pytest.skip(why)
    return str(real_env("impi").parent / "mpirun")


DEFAULT_LIVE_TIMEOUT_S = 120.0  # compat doctor --live's default --live-timeout


def assert_ended_before_the_limit(details, seconds, limit):
    """compat ended the run itself (every rank finished, or one failed and compat stopped the rest), not at --live-timeout."""
    assert details["timed_out"] is False, details
    assert seconds < limit * 0.75, f"{seconds:.1f} s: compat waited for most of the {limit:g} s --live-timeout"


def assert_held_to_the_limit(seconds, limit):
    """A hang ends by --live-timeout; compat's own start (the environment probe) and report come on top, small next to it."""
    assert seconds < limit + max(15.0, limit / 2), f"{seconds:.1f} s for a --live-timeout of {limit:g} s"


def native_bf16() -> bool:
    """Whether this CPU has native bf16, read the way compat's probe reads it: the expectations follow the machine."""
    from compatmatrix.environment.snapshot import NATIVE_BF16_FLAGS, take_snapshot

    return bool(set(take_snapshot(None).cpu.flags) & NATIVE_BF16_FLAGS)


NATIVE_BF16 = native_bf16()
NO_NATIVE_BF16 = "this CPU has no avx512_bf16/amx_bf16: the native bf16 Trainer step runs only on such a CPU (the forced and fp32 paths are tested here)"


def expected_flags(**flags) -> dict:
    """The Trainer flags of a default run (bf16 is added on a CPU with native bf16)."""
    return {**flags, **({"bf16": True} if NATIVE_BF16 else {})}


def arguments_text(flags: dict, backend: str) -> str:
    """The TrainingArguments(...) evidence line, as live/report writes it (sorted keys)."""
    items = {**flags, "ddp_backend": backend}
    return "TrainingArguments(" + " ".join(f"{k}={v}" for k, v in sorted(items.items())) + ")"


def assert_real_bf16_step(checks, details):
    """A real bf16 Trainer step: it passed, every logged loss is finite, the parameters are identical on every rank."""
    assert details["bf16"]["on"] is True and checks["live.trainer"]["status"] == "pass", checks["live.trainer"]
    assert details["trainer_flags"]["bf16"] is True
    losses = [x for rank in details["ranks"] for x in rank["losses"]]
    assert losses and all(isinstance(x, float) and x == x and abs(x) != float("inf") for x in losses), losses
    assert len({rank["params_sha256"] for rank in details["ranks"]}) == 1 and details["ranks"][0]["params_sha256"]


def marked_processes(mark: str) -> list[int]:
    needle = f"COMPAT_TEST_TREE_MARK={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as handle:
                    if needle in handle.read().split(b"\0"):
                        with open(f"/proc/{entry.name}/stat", "rb") as stat:
                            if stat.read().rsplit(b")", 1)[-1].split()[0] != b"Z":
                                found.append(int(entry.name))
            except OSError:
                pass
    return found


def start_live(python, *args, env_extra=None):
    """Start compat doctor --live --json as a user would; finish_live() collects it."""
    mark = uuid.uuid4().hex
    # tests/clean_env.py: no I_MPI_*, HYDRA_*, SLURM_*, PBS_*, OMP_*, CCL_*, COMPAT_*, PYTHONPATH ... of the CI shell
    env = base_env({"COMPAT_TEST_TREE_MARK": mark, **(env_extra or {})}, drop=("COMPAT_LIVE_FIXTURE_FAULT", "CCL_WORKER_COUNT", "PYTHONPATH"))
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--live", "--json", "--only", "live", "--python", str(python), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return process, mark, time.monotonic()


def finish_live(started, timeout=300):
    """(exit code, checks by id, live details, seconds) of a run start_live() started; nothing of it may be left running."""
    process, mark, began = started
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    seconds = time.monotonic() - began
    assert process.returncode in (0, 1), err
    assert marked_processes(mark) == [], "processes of the run outlived compat"
    data = json.loads(out)
    jsonschema.validate(data, SCHEMA)
    # and by pid, not only by the marker: every rank and launcher process compat reported is gone
    pids = [r["pid"] for r in data["live"].get("ranks", [])] + [p["pid"] for p in data["live"].get("launcher_processes", [])]
    assert [pid for pid in pids if alive(pid)] == []
    return process.returncode, {c["id"]: c for c in data["checks"]}, data["live"], seconds


def live(python, *args, env_extra=None, timeout=300):
    """Run compat doctor --live --json as a user would; return (exit code, checks by id, live details, seconds)."""
    return finish_live(start_live(python, *args, env_extra=env_extra), timeout=timeout)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def assert_passes(checks, launcher_text, backend_text="gloo"):
    failed = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert not failed, json.dumps(failed, indent=1)[:3000]
    assert checks["live.launch"]["summary"].startswith(launcher_text)
    assert checks["live.backend"]["summary"].startswith(backend_text)
    assert checks["live.world"]["status"] == "pass"
    assert checks["live.allreduce"]["status"] == "pass"
    assert checks["live.trainer"]["status"] == "pass"
    assert "world size 2, batch 8 per step, identical parameters on every rank" in checks["live.trainer"]["summary"]
    assert checks["live.hang"]["status"] == "pass" and checks["live.ranks"]["status"] == "pass" and checks["live.cleanup"]["status"] == "pass"


def test_spawn_passes_and_reports_bandwidth_next_to_memory_copy(stock):
    code, checks, details, seconds = live(stock)
    assert code == 0
    assert_passes(checks, "spawn started 2 of 2 ranks here, world size 2")
    assert details["backend"] == "gloo" and details["backend_is_fixture"] is False
    assert [row["mib"] for row in details["bandwidth"]] == [1, 16, 64]
    # both measured and positive; their order depends on the machine (memory vs loopback, core count), so it is not asserted
    assert all(row["busbw"] > 0 for row in details["bandwidth"]) and details["memcpy"]["all_ranks"] > 0
    assert "of the ranks' memory-copy bandwidth" in checks["live.bandwidth"]["summary"]
    # transformers 5.23: --use_cpu; --bf16 where this CPU has native bf16; the backend is the one the run proved
    assert details["trainer_flags"] == expected_flags(use_cpu=True)
    assert details["bf16"]["on"] is NATIVE_BF16
    assert arguments_text(details["trainer_flags"], "gloo") in " ".join(checks["live.trainer"]["evidence"])
    assert {r["rank"] for r in details["ranks"]} == {0, 1} and all("compat-live: stage done" in r["output"] for r in details["ranks"])
    assert_ended_before_the_limit(details, seconds, DEFAULT_LIVE_TIMEOUT_S)


def test_no_bf16_keeps_the_trainer_step_in_fp32_on_any_cpu(stock):
    code, checks, details, _ = live(stock, "--no-bf16")
    assert code == 0, checks
    assert details["trainer_flags"] == {"use_cpu": True}
    assert details["bf16"] == {"on": False, "why": "off (--no-bf16)"}
    assert "bf16 off (--no-bf16)" in checks["live.trainer"]["evidence"]
    assert "TrainingArguments(ddp_backend=gloo use_cpu=True)" in " ".join(checks["live.trainer"]["evidence"])


def test_bf16_forced_on_trains_in_bf16_natively_or_emulated(stock):
    """--bf16 trains the step in bf16 on every CPU: natively where it can, emulated elsewhere (and compat says which)."""
    code, checks, details, _ = live(stock, "--bf16")
    assert code == 0, checks
    assert_real_bf16_step(checks, details)
    assert details["bf16"]["why"].startswith("on (--bf16): " + ("native on this CPU" if NATIVE_BF16 else "this CPU has no native bf16"))


def test_torchrun_passes(stock, tmp_path):
    code, checks, details, _ = live(stock, "--launcher", "torchrun", env_extra={"TMPDIR": str(tmp_path)})
    assert code == 0, checks
    assert list(tmp_path.iterdir()) == []  # torchrun's torchelastic_* folder went with compat's run folder (issue 31)
    assert_passes(checks, "torchrun started 2 of 2 ranks here")
    assert "rank variables from RANK/WORLD_SIZE" in checks["live.world"]["summary"]


def test_intel_mpirun_passes_with_pmi_mapped(stock, mpirun):
    code, checks, details, _ = live(stock, "--launcher", "mpirun", "--mpirun", mpirun)
    assert code == 0, checks
    assert_passes(checks, "mpirun (intel-mpi) started 2 of 2 ranks here")
    assert "rank variables from PMI_RANK/PMI_SIZE" in checks["live.world"]["summary"]


def test_intel_mpirun_with_a_hostfile(stock, mpirun, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost\n")
    code, checks, details, _ = live(stock, "--launcher", "mpirun", "--mpirun", mpirun, "--hostfile", str(hostfile), "--no-trainer",
                                    "--fabric", "--sizes", "1K,64K")
    assert code == 0, checks
    assert details["master"].startswith("localhost:")  # MASTER_ADDR defaults to the hostfile's first host
    assert checks["live.world"]["summary"] == "2 ranks here joined a group of 2 (rank variables from PMI_RANK/PMI_SIZE)"
    assert checks["live.fabric"]["status"] == "pass" and details["fabric"]["errors"] == []  # the sweep under Intel's mpirun, every value checked
    assert details["fabric"]["backends"] == ["gloo"]  # torch from PyPI has no MPI backend to compare


def open_mpi() -> str | None:
    found = shutil.which("mpirun")
    if not found:
        return None
    done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return found if "Open MPI" in done.stdout + done.stderr else None


@pytest.mark.skipif(open_mpi() is None, reason="Open MPI is not installed (.ci/run installs Debian's openmpi-bin when it can)")
def test_open_mpi_mpirun_passes_with_ompi_mapped(stock):
    code, checks, details, _ = live(stock, "--launcher", "mpirun", "--mpirun", open_mpi())
    assert code == 0, checks
    assert details["flavor"] == "open-mpi"
    assert_passes(checks, "mpirun (open-mpi) started 2 of 2 ranks here")
    assert "rank variables from OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE" in checks["live.world"]["summary"]


def test_ranks_without_rank_variables_are_caught_training_alone(stock):
    code, checks, _, _ = live(stock, "--no-rank-env")
    assert code == 1
    assert checks["live.world"]["status"] == "fail" and "without RANK/WORLD_SIZE" in checks["live.world"]["summary"]
    trainer = checks["live.trainer"]
    assert trainer["status"] == "fail"
    assert trainer["summary"] == "every rank trains alone: the Trainer saw world size 1, expected 2"
    assert any("trained on the same samples" in e for e in trainer["evidence"])


def test_mpirun_without_pmi_mapping_is_caught_for_scripts_but_accelerate_maps_it_itself(stock, mpirun):
    code, checks, _, _ = live(stock, "--launcher", "mpirun", "--mpirun", mpirun, "--no-rank-env")
    world = checks["live.world"]
    # a plain torch.distributed script would be alone; the Trainer (accelerate 1.15) reads PMI_RANK/PMI_SIZE itself
    assert world["status"] == "warn" and world["summary"].startswith("2 of 2 processes got no RANK/WORLD_SIZE")
    assert checks["live.trainer"]["status"] == "pass" and code == 0


def test_rank_variables_inherited_from_the_callers_shell_do_not_leak_into_the_ranks(stock, mpirun):
    code, checks, _, _ = live(stock, "--launcher", "mpirun", "--mpirun", mpirun, "--no-trainer",
                              env_extra={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "1"})
    assert code == 0, checks
    assert checks["live.world"]["summary"] == "2 ranks here joined a group of 2 (rank variables from PMI_RANK/PMI_SIZE)"


@pytest.mark.parametrize("launcher, summary", [
    ("torchrun", "rank 1 exited early (exit status 3) at stage backend"),  # torchrun reports each rank's exit code
    ("mpirun", "rank 1 ended at stage backend without an error of its own (crashed, exited or was killed)"),  # hydra does not, /proc tells
])
def test_a_rank_that_exits_early_under_a_launcher_is_named(stock, request, launcher, summary):
    limit = 120.0
    mpi = ["--mpirun", request.getfixturevalue("mpirun")] if launcher == "mpirun" else []  # Intel MPI only where it can run
    code, checks, details, seconds = live(stock, "--launcher", launcher, *mpi, "--live-timeout", f"{limit:g}", "--no-trainer",
                                          env_extra={"COMPAT_LIVE_FIXTURE_FAULT": "exit:1"})
    assert code == 1
    assert checks["live.ranks"]["summary"] == summary
    assert checks["live.hang"]["summary"].startswith("not a hang: rank 1 ended early")
    assert_ended_before_the_limit(details, seconds, limit)  # compat stops the waiting rank 0 soon after rank 1 died


def test_a_rank_that_exits_0_before_finishing_fails_the_run(stock):
    code, checks, _, _ = live(stock, env_extra={"COMPAT_LIVE_FIXTURE_FAULT": "exit0:1"})
    assert code == 1
    assert checks["live.ranks"]["summary"] == "rank 1 exited with status 0 at stage trainer before finishing"


def test_torchrun_options_inherited_from_kubeflow_do_not_restart_the_ranks(stock):
    code, checks, _, _ = live(stock, "--launcher", "torchrun", "--no-trainer",
                              env_extra={"PET_MAX_RESTARTS": "3", "COMPAT_LIVE_FIXTURE_FAULT": "exit:1"})
    assert code == 1
    assert checks["live.launch"]["summary"].startswith("torchrun started 2 of 2 ranks")
    assert checks["live.ranks"]["summary"] == "rank 1 exited early (exit status 3) at stage backend"


@pytest.mark.skipif(open_mpi() is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("fault, summary", [
    ("exit:1", "rank 1 exited early (exit status 3) at stage backend"),
    ("segv:1", "rank 1 was killed by signal SIGSEGV at stage trainer"),
])
def test_open_mpi_names_the_rank_that_failed(stock, fault, summary):
    code, checks, _, _ = live(stock, "--launcher", "mpirun", "--mpirun", open_mpi(), env_extra={"COMPAT_LIVE_FIXTURE_FAULT": fault})
    assert code == 1
    assert checks["live.ranks"]["summary"] == summary  # from Open MPI's own report, which names ranks, not pids


def test_sigkill_to_compat_under_intel_mpirun_leaves_nothing_for_long(stock, mpirun):
    """Intel's mpirun is a shell script: the ranks watch compat's pid and end themselves when it is gone."""
    import signal

    mark = uuid.uuid4().hex
    env = base_env({"COMPAT_TEST_TREE_MARK": mark, "COMPAT_LIVE_FIXTURE_FAULT": "sleep:1"})
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--live", "--only", "live", "--launcher", "mpirun", "--mpirun", mpirun,
                                "--no-trainer", "--python", str(stock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def started():  # compat, mpirun/hydra, the proxy and both ranks (the worker's command line names worker.py)
        pids = marked_processes(mark)
        return len(pids) >= 5 and len([pid for pid in pids if "worker.py" in cmdline(pid)]) >= 2

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not started():
        time.sleep(0.2)
    if not started():
        process.kill()
        process.wait(timeout=30)
    assert started(), f"the run never got both ranks going before the SIGKILL: {[cmdline(pid) for pid in marked_processes(mark)]}"
    time.sleep(1.0)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and marked_processes(mark):
        time.sleep(0.25)
    left = marked_processes(mark)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == []


def test_a_killed_doctor_live_leaves_its_folder_and_the_next_start_removes_it(stock, tmp_path):
    """SIGKILL of compat doctor --live left its compat-live-* folder for good. Checked from outside: the folder a killed
    run left is removed at the next start (its owner lock, fcntl.flock, is free and the pid and start time it names are
    gone); a folder whose lock is held (a run going on) and one without a lock are left alone."""
    import fcntl
    import signal

    from compatmatrix.scratch import OWNER_LOCK, own_identity

    mark = uuid.uuid4().hex
    runs = tmp_path / "runs"
    env = base_env({"COMPAT_TEST_TREE_MARK": mark, "COMPAT_LIVE_FIXTURE_FAULT": "sleep:1"})  # rank 1 never joins: the run waits
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--live", "--only", "live", "--launcher", "spawn", "--no-trainer",
                                "--run-dir", str(runs), "--python", str(stock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not list(runs.glob("compat-live-*/proc-*.json")):  # a rank is going
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    left = list(runs.glob("compat-live-*"))
    assert len(left) == 1 and (left[0] / OWNER_LOCK).is_file(), left
    held = runs / "compat-live-held"  # a run going on: this test holds its lock, under its own identity
    held.mkdir()
    lock = os.open(held / OWNER_LOCK, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.write(lock, own_identity().encode())
    unlocked = runs / "compat-live-nolock"  # an older compat's folder, or one being made: no lock file
    unlocked.mkdir()
    try:
        # the next start: a target without torch ends at once, after the sweep (the sweep runs first)
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "doctor", "--live", "--only", "live", "--run-dir", str(runs), "--no-trainer",
                               "--python", sys.executable, "--json"], capture_output=True, text=True, timeout=300, env=base_env({"COMPAT_TEST_TREE_MARK": mark}))
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert not left[0].exists() and held.is_dir() and unlocked.is_dir()
    finally:
        os.close(lock)
        for pid in marked_processes(mark):  # the ranks end themselves once compat is gone; never leave one to the next test
            os.kill(pid, signal.SIGKILL)


def test_a_rank_crashing_in_the_trainer_under_torchrun_fails_the_run(stock):
    """A SIGSEGV leaves no Python error behind: the rank's exit code comes from torchrun's report."""
    code, checks, _, _ = live(stock, "--launcher", "torchrun", env_extra={"COMPAT_LIVE_FIXTURE_FAULT": "segv:1"})
    assert code == 1
    assert checks["live.ranks"]["summary"] == "rank 1 was killed by signal SIGSEGV at stage trainer"
    assert "Segmentation fault" in " ".join(checks["live.ranks"]["evidence"])


# --- hangs: every scenario below only waits out its own deadline, so they are started side by side -----------------------

HANG_LIMIT_S = 60.0  # --live-timeout: room for every rank of every scenario to import torch and reach its stage while all start at once
WORKER_LEAD_S = 45  # the bare worker's --deadline, from its start: room to import torch and reach its fault under the same load


@pytest.fixture(scope="module")
def hangs(stock, request, tmp_path_factory):
    """The hang scenarios, all started at once and all collected before the first of their tests goes on: each one only waits
    for a deadline, so side by side they cost the wall clock of the longest (~45 s) instead of their sum (~160 s one after
    another). Nothing else of this module runs meanwhile. name -> finish_live()'s answer, or the exception it raised; the
    bare worker's entry is (return code, seconds, deadline, run folder); the mpirun entry is the skip reason where Intel MPI
    cannot run here."""
    from compatmatrix.live.service import WORKER

    limit = ["--live-timeout", f"{HANG_LIMIT_S:g}", "--no-trainer"]
    try:
        mpi = ["--launcher", "mpirun", "--mpirun", request.getfixturevalue("mpirun")]
    except pytest.skip.Exception as exc:
        mpi = exc
    scenarios = {"spawn, never joins": (limit, "sleep:1"), "torchrun, never joins": (["--launcher", "torchrun", *limit], "sleep:1"),
                 "collective never returns": (limit, "stall:1")}
    if not isinstance(mpi, BaseException):
        scenarios["mpirun, never joins"] = ([*mpi, *limit], "sleep:1")
    run_dir = tmp_path_factory.mktemp("bare-worker")
    deadline = int(time.time()) + WORKER_LEAD_S
    env = base_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
                    "COMPAT_LIVE_FIXTURE_FAULT": "sleep:0"})
    bare_started = time.monotonic()
    bare = subprocess.Popen([str(stock), str(WORKER), "--run-dir", str(run_dir), "--expect-world", "1", "--deadline", str(deadline)],
                            env=env, cwd=str(run_dir))
    bare_ended = []  # (wall clock, seconds) when it ended, taken by a thread while the other runs are collected
    waiter = threading.Thread(target=lambda: (bare.wait(timeout=WORKER_LEAD_S + 90), bare_ended.append((time.time(), time.monotonic() - bare_started))),
                              daemon=True)
    waiter.start()
    started = {name: start_live(stock, *args, env_extra={"COMPAT_LIVE_FIXTURE_FAULT": fault}) for name, (args, fault) in scenarios.items()}
    results = {}
    for name, run in started.items():
        try:
            results[name] = finish_live(run, timeout=HANG_LIMIT_S + 120)
        except Exception as exc:  # noqa: BLE001 - handed to the scenario's own test, which raises it
            results[name] = exc
    waiter.join(timeout=WORKER_LEAD_S + 120)
    if bare.poll() is None:
        bare.kill()
        bare.wait()
    ended, seconds = bare_ended[0] if bare_ended else (time.time(), time.monotonic() - bare_started)
    results["bare worker"] = (bare.returncode, ended, seconds, deadline, run_dir)
    results["mpirun, never joins"] = results.get("mpirun, never joins", mpi)
    return results


def hang(hangs, name):
    result = hangs[name]
    if isinstance(result, pytest.skip.Exception):
        pytest.skip(str(result))
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_a_rank_that_never_joins_under_a_launcher_is_a_hang(hangs, launcher):
    code, checks, _, seconds = hang(hangs, f"{launcher}, never joins")
    assert code == 1
    assert checks["live.hang"]["status"] == "fail" and checks["live.hang"]["summary"].endswith("rank 1 stuck at stage backend")
    assert_held_to_the_limit(seconds, HANG_LIMIT_S)


def test_a_rank_that_never_joins_is_a_hang_within_the_timeout(hangs):
    code, checks, details, seconds = hang(hangs, "spawn, never joins")
    assert code == 1
    hang_check = checks["live.hang"]
    # rank 0's own rendezvous timeout (half the limit) or compat's deadline: either way it is a hang that names rank 1
    assert hang_check["status"] == "fail" and hang_check["summary"].startswith("hang: ")
    assert hang_check["summary"].endswith("rank 1 stuck at stage backend")
    evidence = " ".join(hang_check["evidence"])
    assert "rank 1: last stage backend" in evidence and "stuck in fixture_fault (worker.py" in evidence  # its stack, dumped on SIGUSR1
    assert "likely causes:" in evidence and "MASTER_ADDR:MASTER_PORT" in evidence
    assert checks["live.cleanup"]["status"] == "pass"
    assert_held_to_the_limit(seconds, HANG_LIMIT_S)


def test_a_collective_that_never_returns_is_a_hang_killed_at_the_deadline(hangs):
    # rank 1 joins and then never enters the allreduce (an endless stall); the whole run is held to the hard limit. Rank 0's
    # collective timeout (half the limit) or compat's deadline ends it: either way a hang naming rank 1
    code, checks, details, seconds = hang(hangs, "collective never returns")
    assert code == 1
    hang_check = checks["live.hang"]
    assert hang_check["status"] == "fail"
    assert "rank 1 stuck at stage joined" in hang_check["summary"]
    assert "a collective never returned" in " ".join(hang_check["evidence"])
    assert_held_to_the_limit(seconds, HANG_LIMIT_S)


def test_a_rank_ends_itself_at_its_own_deadline_even_without_compat(hangs):
    """The last line of defence: the worker run by hand (no compat, no launcher) with a rank that sleeps forever;
    the kernel's SIGALRM ends it at --deadline."""
    import signal

    returncode, ended, seconds, deadline, run_dir = hangs["bare worker"]
    assert returncode == -signal.SIGALRM
    assert ended >= deadline - 1, "the rank ended before its deadline"
    assert seconds < WORKER_LEAD_S + 30
    (status,) = [json.loads(p.read_text()) for p in run_dir.glob("proc-*.json")]
    assert status["fixture_fault"] == "sleep before joining"
    assert status["updated"] < deadline, "the fault was recorded only after the alarm: the sleep was never reached"


def test_a_rank_that_exits_early_is_reported_and_the_rest_are_stopped(stock):
    limit = 120.0
    code, checks, details, seconds = live(stock, "--live-timeout", f"{limit:g}", "--no-trainer", env_extra={"COMPAT_LIVE_FIXTURE_FAULT": "exit:1"})
    assert code == 1
    assert checks["live.ranks"]["summary"] == "rank 1 exited early (exit status 3) at stage backend"
    assert checks["live.hang"]["status"] == "skip"
    assert_ended_before_the_limit(details, seconds, limit)  # compat stops the waiting rank 0 a few seconds after rank 1 died


def test_sigterm_to_compat_mid_run_leaves_nothing_running(stock):
    """compat is stopped (SIGTERM) while torchrun's ranks are busy: it cleans up, exits 143, and no process is left."""
    import signal

    mark = uuid.uuid4().hex
    env = base_env({"COMPAT_TEST_TREE_MARK": mark})
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--live", "--only", "live", "--launcher", "torchrun", "--python", str(stock)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(marked_processes(mark)) < 4:  # compat, torchrun, two ranks
        time.sleep(0.2)
    assert len(marked_processes(mark)) >= 4
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and "nothing of the run is left running" in err
    assert marked_processes(mark) == []


def test_fixture_ccl_is_chosen_labelled_and_blocked_for_the_trainer_on_transformers_5(stock, tmp_path):
    code, checks, details, _ = live(stock, env_extra={"PYTHONPATH": str(fixture_ccl_path(tmp_path))})
    assert details["backend"] == "ccl" and details["backend_is_fixture"] is True
    assert checks["live.backend"]["summary"].startswith("ccl, FIXTURE:") and "not oneCCL" in checks["live.backend"]["summary"]
    assert checks["live.allreduce"]["summary"].startswith("fp32 and bf16 allreduce on ccl is exact")
    trainer = checks["live.trainer"]
    assert code == 1 and trainer["status"] == "fail"
    built = dict(r.split("==") for r in SPECS["torch213-stock"][0])  # what the environment was built with, not a copy
    transformers, accelerate = built["transformers"], built["accelerate"]
    assert trainer["summary"].startswith(f"the Trainer cannot use ccl with transformers {transformers} / accelerate {accelerate}")
    assert any(f"transformers {transformers} no longer accepts ccl" in e for e in trainer["evidence"])


def test_real_ipex_applied_with_the_fixture_ccl_backend(ipex_env, tmp_path):
    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "CCL_WORKER_COUNT": "1"}
    code, checks, details, _ = live(ipex_env, env_extra=env)
    assert code == 0, checks
    assert_passes(checks, "spawn started 2 of 2 ranks here", backend_text="ccl, FIXTURE:")
    assert "intel_extension_for_pytorch 2.8.0" in checks["live.imports"]["summary"]
    # transformers 4.56 still takes --use_ipex, but leaves IPEX to accelerate, and accelerate 1.10 applies it only below
    # torch 2.7 (a first run with use_ipex=True trained an unoptimized model): the probe applies ipex.optimize itself
    assert details["ipex_mode"] == "direct" and "use_ipex" not in details["trainer_flags"]
    assert "accelerate 1.10.1 applies IPEX only below torch 2.7.0" in details["ipex_note"]
    assert checks["live.trainer"]["summary"].endswith("IPEX applied")  # params_attr left by ipex.optimize on every rank


def test_real_ipex_applied_by_the_trainer_itself_on_transformers_4_52(ipex_env, tmp_path):
    # real transformers 4.52.4 (its Trainer still calls ipex.optimize for --use_ipex) shadows the env's 4.56.2
    overlay = real_overlay("transformers-4.52.4", ipex_env)
    env = {"PYTHONPATH": os.pathsep.join([str(overlay), str(fixture_ccl_path(tmp_path))]), "CCL_WORKER_COUNT": "1"}
    code, checks, details, _ = live(ipex_env, env_extra=env)
    assert code == 0, checks
    assert details["ipex_mode"] == "trainer" and details["trainer_flags"] == expected_flags(use_cpu=True, use_ipex=True)
    assert "transformers 4.52.4: the Trainer applies IPEX itself" in details["ipex_note"]
    assert arguments_text(details["trainer_flags"], "ccl") in " ".join(checks["live.trainer"]["evidence"])
    assert checks["live.trainer"]["summary"].endswith("IPEX applied")  # ipex.optimize's params_attr on the trained model, every rank


def test_real_ipex_fp32_trainer_step_with_no_bf16(ipex_env, tmp_path):
    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "CCL_WORKER_COUNT": "1"}
    code, checks, details, _ = live(ipex_env, "--no-bf16", env_extra=env)
    assert code == 0, checks
    assert details["bf16"]["on"] is False and "bf16" not in details["trainer_flags"]
    assert checks["live.trainer"]["summary"].endswith("IPEX applied")


@pytest.mark.skipif(not NATIVE_BF16, reason=NO_NATIVE_BF16)
def test_real_ipex_bf16_trainer_step_on_a_native_bf16_cpu(ipex_env, tmp_path):
    """Real IPEX 2.8 + torch 2.8: ipex.optimize(dtype=bfloat16) and the Trainer's bf16 autocast on a CPU with native bf16."""
    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "CCL_WORKER_COUNT": "1"}
    code, checks, details, _ = live(ipex_env, "--bf16", env_extra=env)
    assert code == 0, checks
    assert_real_bf16_step(checks, details)
    assert details["ipex_mode"] == "direct" and checks["live.trainer"]["summary"].endswith("IPEX applied")
    assert details["bf16"]["why"].startswith("on (--bf16): native on this CPU")


def test_accelerate_needs_ccl_worker_count_for_ccl(ipex_env, tmp_path):
    # accelerate 1.10 picks ccl on CPU only with CCL_WORKER_COUNT >= 1: a real requirement the probe surfaces
    code, checks, _, _ = live(ipex_env, env_extra={"PYTHONPATH": str(fixture_ccl_path(tmp_path))})
    assert code == 1
    assert "Your assigned backend ccl is not avaliable" in checks["live.trainer"]["summary"]
    assert "CCL_WORKER_COUNT" in checks["live.trainer"]["fix"]


def test_two_nodes_on_loopback_with_torchrun_agree(stock):
    """Two compat runs as two nodes of one torchrun rendezvous (one rank each); their --json agree."""
    port = str(_free_port())
    common = ["--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    nodes = []
    for rank in ("0", "1"):
        mark = uuid.uuid4().hex
        command = [sys.executable, "-m", "compatmatrix", "doctor", "--live", "--json", "--only", "live", "--python", str(stock), *common, "--node-rank", rank]
        nodes.append((mark, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env({"COMPAT_TEST_TREE_MARK": mark}))))
    results = []
    for mark, process in nodes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, out[-3000:] + err[-2000:]
        assert marked_processes(mark) == []
        results.append(json.loads(out))
    for data in results:
        checks = {c["id"]: c for c in data["checks"]}
        assert checks["live.world"]["summary"] == "1 ranks here joined a group of 2 (rank variables from RANK/WORLD_SIZE)"
        assert checks["live.trainer"]["status"] == "pass"
    ranks = [data["live"]["ranks"][0] for data in results]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]  # same weights on both nodes after the steps
    assert results[0]["live"]["bandwidth"] == results[1]["live"]["bandwidth"]  # the slowest rank's time, agreed by allreduce


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
