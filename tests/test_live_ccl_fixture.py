"""What a real oneCCL showed, reproduced with the FIXTURE ccl backend of tests/fixture_ccl.py (gloo under the name ccl,
in the modes that imitate each failure). A real oneccl_bind_pt cannot be installed here: these tests prove compat's
handling of the failure, not oneCCL itself; every run asserts the backend is labelled a FIXTURE.

* One process group per process: under Intel MPI's mpirun real oneCCL killed every rank with SIGSEGV in the Trainer
  stage, because the probe destroyed its ccl group and the Trainer formed a second one (mode mpi-reinit-segv).
* oneCCL's MPI transport without an MPI launcher: "atl_mpi_comm.cpp: failed to initialize ATL" (mode atl-mpi), and
  `compat env --launcher torchrun`, which exports what such a launch needs.
* "Mismatch in kernel C++ signatures" at import (mode import-abort): named alike by the static probe and live.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from .clean_env import base_env
from .conftest import run_compat
from .fixture_ccl import fixture_ccl_path
from .fixture_envs import FixtureEnv
from .test_live_real import assert_passes, live, mpirun  # noqa: F401  (mpirun: the fixture giving Intel MPI's real mpirun)

pytestmark = pytest.mark.integration

ATL_SENTENCE = ("oneCCL's MPI transport needs an MPI launcher: under torchrun/spawn set CCL_ATL_TRANSPORT=ofi "
                "(and FI_PROVIDER_PATH to the bindings' libfabric providers)")


@pytest.fixture(scope="module")
def stock(stock_torch213):
    return stock_torch213


@pytest.fixture(scope="module")
def ipex_env(ipex280_torch280):
    return ipex280_torch280


def test_one_process_group_under_intel_mpirun_with_a_ccl_that_dies_on_a_second_group(ipex_env, mpirun, tmp_path):  # noqa: F811
    """transformers 4.56 + accelerate 1.10 take ccl: the Trainer adopts the group the allreduce ran on. With the worker
    that destroyed its group and let the Trainer form another, every rank died with SIGSEGV here (as with real oneCCL)."""
    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "CCL_WORKER_COUNT": "1", "COMPAT_FIXTURE_CCL_MODE": "mpi-reinit-segv"}
    code, checks, details, _ = live(ipex_env, "--launcher", "mpirun", "--mpirun", mpirun, env_extra=env)
    assert code == 0, {k: v["summary"] for k, v in checks.items() if v["status"] != "pass"}
    assert_passes(checks, "mpirun (intel-mpi) started 2 of 2 ranks here", backend_text="ccl, FIXTURE:")
    assert details["backend_is_fixture"] is True
    evidence = " ".join(checks["live.trainer"]["evidence"])
    assert "one process group per process: formed with init_process_group('ccl') before TrainingArguments, and the Trainer adopted it" in evidence
    assert "DDP reduced the gradients on it" in evidence


def test_the_mpi_transport_without_an_mpi_launcher_is_named_with_the_fix(stock, tmp_path):
    env = {"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "COMPAT_FIXTURE_CCL_MODE": "atl-mpi"}
    code, checks, _, _ = live(stock, "--no-trainer", env_extra=env)
    assert code == 1
    ranks = checks["live.ranks"]
    assert ranks["summary"].endswith("failed at stage init: " + ATL_SENTENCE)
    assert "atl_mpi_comm.cpp: failed to initialize ATL" in ranks["evidence"]
    assert 'compat env --launcher torchrun' in ranks["fix"]
    # the same fixture with the transport the finding names: the ranks form their group under torchrun
    code, checks, _, _ = live(stock, "--no-trainer", "--launcher", "torchrun", env_extra={**env, "CCL_ATL_TRANSPORT": "ofi"})
    assert code == 0, {k: v["summary"] for k, v in checks.items() if v["status"] != "pass"}
    assert checks["live.backend"]["summary"].startswith("ccl, FIXTURE:")


def test_compat_env_for_torchrun_exports_the_ofi_transport_and_the_bindings_providers(tmp_path):
    env = FixtureEnv(tmp_path / "venv").torch("2.7.0").bindings("2.7.0")  # FIXTURE bindings with an env/setvars.sh
    done = run_compat("env", "--launcher", "torchrun", "--python", str(env.python), "--json")
    assert done.returncode == 0, done.stderr
    exports = json.loads(done.stdout)["exports"]
    assert exports["CCL_ATL_TRANSPORT"] == "ofi"
    assert exports["FI_PROVIDER_PATH"].startswith(str(env.site / "oneccl_bindings_for_pytorch" / "opt" / "mpi" / "libfabric" / "lib" / "prov"))
    assert "CCL_KVS_IFACE" not in exports  # this machine has more than lo up
    mpi = json.loads(run_compat("env", "--launcher", "mpirun", "--python", str(env.python), "--json").stdout)
    assert "CCL_ATL_TRANSPORT" not in mpi["exports"] and any("mpirun" in c for c in mpi["comments"])


def test_compat_env_for_torchrun_on_a_host_with_only_loopback_sets_the_kvs_interface(tmp_path):
    """In a network namespace of its own (only lo, down until raised): oneCCL's key-value store finds no other interface."""
    import os

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace with only lo")
    env = FixtureEnv(tmp_path / "venv").torch("2.7.0").bindings("2.7.0")
    namespace = f"cmt{os.getpid()}x{uuid.uuid4().hex[:6]}-lo"
    made = subprocess.run(["ip", "netns", "add", namespace], capture_output=True, text=True, timeout=20, check=False)
    if made.returncode != 0:
        pytest.skip(f"a network namespace cannot be made here: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True, timeout=20)
        import sys

        done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "compatmatrix", "env", "--launcher", "torchrun",
                               "--python", str(env.python)], capture_output=True, text=True, timeout=120, env=base_env(), check=False)
    finally:
        subprocess.run(["ip", "netns", "del", namespace], timeout=20, check=False)
    assert done.returncode == 0, done.stderr
    assert "export CCL_KVS_IFACE=lo" in done.stdout and "export CCL_ATL_TRANSPORT=ofi" in done.stdout


def test_an_import_that_aborts_with_mismatched_kernel_signatures_is_named_alike_by_the_static_probe_and_live(stock, tmp_path):
    phrase = "aborted: 'Mismatch in kernel C++ signatures'"
    static_env = FixtureEnv(tmp_path / "venv").torch("2.7.0").bindings("2.7.0", ending="abi_abort")
    static = run_compat("doctor", "--python", str(static_env.python), "--only", "imports.ccl", "--json")
    (probe,) = json.loads(static.stdout)["checks"]
    assert phrase in probe["summary"]
    code, checks, _, _ = live(stock, "--no-trainer", "--launcher", "torchrun",
                              env_extra={"PYTHONPATH": str(fixture_ccl_path(tmp_path)), "COMPAT_FIXTURE_CCL_MODE": "import-abort"})
    assert code == 1
    assert phrase in checks["live.imports"]["summary"] and phrase in checks["live.ranks"]["summary"]
    assert all("registers kernels for a different torch" in fix for fix in (probe["fix"], checks["live.imports"]["fix"], checks["live.ranks"]["fix"]))
