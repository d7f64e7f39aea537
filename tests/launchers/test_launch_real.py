"""compat launch for REAL on this machine: torchrun from the real torch 2.13 environment, Intel MPI's real mpirun
(impi-rt), and Open MPI's mpirun when the machine has one. Each rank is a plain ``python -c`` that writes what it
got (its sched affinity, OMP_NUM_THREADS, the oneCCL variables); the expectations come from ``compat launch --print
--json`` of the same request (the plan), never from what this machine happens to be. Every process compat starts
carries COMPAT_TEST_MARK, and after compat returns none may be left (read from /proc).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..procs import MARK_VARIABLE, marked, new_mark
from ..real_envs import real_env

pytestmark = pytest.mark.integration
SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "launch-v1.json").read_text())

RANK_SCRIPT = """
import json, os, sys
rank = next(os.environ[v] for v in ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK") if v in os.environ)
names = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY", "CCL_WORKER_COUNT", "CCL_WORKER_AFFINITY", "LD_PRELOAD",
         "MASTER_ADDR", "MASTER_PORT", "CCL_ATL_TRANSPORT", "FI_PROVIDER_PATH", "I_MPI_ROOT")  # the plan's, and compat env --launcher's
record = {"rank": int(rank), "cpus": sorted(os.sched_getaffinity(0)), "env": {n: os.environ[n] for n in names if n in os.environ}}
with open(os.path.join(sys.argv[1], "rank-%s.json" % rank), "w") as out:
    json.dump(record, out)
"""


def compat(*args, mark=None, prefix=(), timeout=180):
    env = base_env({MARK_VARIABLE: mark} if mark else None)
    return subprocess.run([*prefix, sys.executable, "-m", "compatmatrix", "launch", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def planned(args, prefix=()):
    done = compat("--print", "--json", *args, prefix=prefix)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    jsonschema.validate(plan, SCHEMA)
    return plan


def run_and_compare(args, tmp_path, prefix=()):
    """Run the launch for real and check that each rank got exactly the CPUs and the environment of the plan."""
    out = tmp_path / "ranks"
    out.mkdir()
    command = ["--", "-c", RANK_SCRIPT, str(out)]
    plan = planned(list(args) + command, prefix)
    mark = new_mark()
    done = compat(*args, *command, mark=mark, prefix=prefix)
    assert done.returncode == 0, done.stderr
    assert marked(mark) == [], "a process of the job outlived compat launch"
    seen = {r["rank"]: r for r in (json.loads(p.read_text()) for p in out.glob("rank-*.json"))}
    assert sorted(seen) == [r["rank"] for r in plan["ranks"]]
    for rank in plan["ranks"]:
        got = seen[rank["rank"]]
        assert got["cpus"] == rank["cpus"], (rank["rank"], got, rank)
        for name, value in rank["env"].items():
            assert got["env"].get(name) == value, (name, got["env"], rank["env"])
    return plan, seen, done


@pytest.fixture(scope="module")
def torch_python(stock_torch213):
    return str(stock_torch213)


@pytest.fixture(scope="module")
def impi_python():
    from ..live.test_live_real import hostname_unresolvable

    why = hostname_unresolvable()
    if why:
        pytest.skip(why)
    return str(real_env("impi"))


def test_torchrun_two_ranks_each_on_the_cpus_the_plan_gave(torch_python, tmp_path):
    plan, seen, done = run_and_compare(["--python", torch_python, "--launcher", "torchrun", "--nproc-per-node", "2", "--ccl-workers", "0"], tmp_path)
    assert plan["binding"] in ("numactl", "taskset")
    assert len({tuple(r["cpus"]) for r in plan["ranks"]}) == 2  # two ranks, two disjoint CPU sets
    assert all(r["env"]["OMP_NUM_THREADS"] == str(plan["omp_num_threads"]) for r in seen.values())  # not torchrun's default of 1
    assert "compat launch: rank 0:" in done.stderr


def test_torchrun_one_rank_with_its_oneccl_worker_core_set_aside(torch_python, tmp_path):
    """Asked for (--ccl-workers 1): the torch environment has no oneCCL bindings, so by default no core is set aside."""
    plan, seen, _ = run_and_compare(["--python", torch_python, "--launcher", "torchrun", "--nproc-per-node", "1", "--ccl-workers", "1"], tmp_path)
    rank = plan["ranks"][0]
    assert rank["ccl_worker_cpus"] and not set(rank["ccl_worker_cpus"]) & set(rank["cpus"])
    assert seen[0]["env"]["CCL_WORKER_AFFINITY"] == ",".join(map(str, rank["ccl_worker_cpus"])) and seen[0]["env"]["CCL_WORKER_COUNT"] == "1"


def test_without_bindings_no_oneccl_worker_core_is_set_aside_for_real(torch_python, tmp_path):
    plan, seen, _ = run_and_compare(["--python", torch_python, "--launcher", "torchrun", "--nproc-per-node", "1"], tmp_path)
    assert plan["ranks"][0]["ccl_worker_cpus"] == [] and "CCL_WORKER_AFFINITY" not in seen[0]["env"]
    assert any("bindings are not installed" in note for note in plan["notes"]), plan["notes"]


def test_an_affinity_smaller_than_the_machine_limits_the_plan_for_real(torch_python, tmp_path):
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("no taskset on this machine")
    last = max(os.sched_getaffinity(0))
    plan, seen, _ = run_and_compare(["--python", torch_python, "--launcher", "torchrun", "--nproc-per-node", "1", "--ccl-workers", "0"], tmp_path,
                                    prefix=(taskset, "-c", str(last)))
    assert plan["topology"]["allowed_cpus"] == [last] and seen[0]["cpus"] == [last]


def test_intel_mpi_masks_are_os_cpu_numbers_under_a_narrower_affinity_too(impi_python, tmp_path):
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("no taskset on this machine")
    last = max(os.sched_getaffinity(0))
    plan, seen, _ = run_and_compare(["--python", impi_python, "--launcher", "mpirun", "--nproc-per-node", "1", "--ccl-workers", "0"], tmp_path,
                                    prefix=(taskset, "-c", str(last)))
    assert plan["env"]["I_MPI_PIN_DOMAIN"] == f"[{hex(1 << last)}]" and seen[0]["cpus"] == [last]


def test_intel_mpi_pins_each_rank_to_its_mask(impi_python, tmp_path):
    plan, _, _ = run_and_compare(["--python", impi_python, "--launcher", "mpirun", "--nproc-per-node", "2", "--ccl-workers", "0"], tmp_path)
    assert plan["flavor"] == "intel-mpi" and plan["binding"] == "I_MPI_PIN_DOMAIN"
    assert plan["env"]["I_MPI_PIN_DOMAIN"] == "[" + ",".join(hex(sum(1 << c for c in r["cpus"])) for r in plan["ranks"]) + "]"


def test_open_mpi_ranks_bound_by_the_wrapper(tmp_path):
    mpirun = shutil.which("mpirun")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30, check=False) if mpirun else None
    if version is None or "Open MPI" not in version.stdout + version.stderr:
        pytest.skip("no Open MPI mpirun on PATH")
    plan, _, _ = run_and_compare(["--python", sys.executable, "--launcher", "mpirun", "--mpirun", mpirun, "--nproc-per-node", "2", "--ccl-workers", "0"], tmp_path)
    assert plan["flavor"] == "open-mpi" and plan["command"][3:5] == ["--bind-to", "none"]


def test_the_exit_code_is_the_launchers(impi_python, tmp_path):
    mark = new_mark()
    done = compat("--python", impi_python, "--launcher", "mpirun", "--nproc-per-node", "1", "--ccl-workers", "0", "--", "-c", "import sys; sys.exit(7)", mark=mark)
    assert done.returncode == 7, done.stderr
    assert marked(mark) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_compat_reaches_the_whole_job_and_nothing_is_left(torch_python, tmp_path, sig):
    started = tmp_path / "started"
    started.mkdir()
    script = f"import os, time; open(os.path.join({str(started)!r}, str(os.getpid())), 'w').close(); time.sleep(600)"
    mark = new_mark()
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "launch", "--python", torch_python, "--launcher", "torchrun", "--nproc-per-node", "2",
                                "--ccl-workers", "0", "--", "-c", script], env=base_env({MARK_VARIABLE: mark}), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert len(list(started.iterdir())) == 2, process.communicate(timeout=30)
        ranks = [int(p.name) for p in started.iterdir()]
        assert set(ranks) <= set(marked(mark))
        process.send_signal(sig)  # to compat only: the job is in a process group of its own
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0, err
    assert marked(mark) == [], err  # torchrun, both ranks, the wrapper: all gone


def test_compat_killed_outright_leaves_no_rank_behind(impi_python, tmp_path):
    """SIGKILL cannot be passed on: the launcher gets SIGTERM from the kernel (parent death), and the guardian stops what
    the launcher cannot reach (Intel MPI's mpirun is a shell script; hydra and the ranks would outlive it)."""
    started = tmp_path / "started"
    started.mkdir()
    script = f"import os, time; open(os.path.join({str(started)!r}, str(os.getpid())), 'w').close(); time.sleep(600)"
    mark = new_mark()
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "launch", "--python", impi_python, "--launcher", "mpirun", "--nproc-per-node", "2",
                                "--ccl-workers", "0", "--", "-c", script], env=base_env({MARK_VARIABLE: mark}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert len(list(started.iterdir())) == 2, process.communicate(timeout=30)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 20
        while marked(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marked(mark) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
