"""compat migrate's environment part: the setvars.sh leftovers and the guides' exports to unset, the path entries of
the bindings' bundled oneCCL / MPI to take out, and what compat env prints for the stock set."""

from __future__ import annotations

import os

from compatmatrix.migrate import MigrateOptions, run_migrate
from compatmatrix.migrate.environment import plan_environment

from ..fixture_envs import FixtureEnv

BINDINGS = "/venv/lib/python3.11/site-packages/oneccl_bindings_for_pytorch"
SETVARS_ENV = {  # what sourcing the bindings' setvars.sh and the guides' exports leave in a shell
    "CCL_ROOT": BINDINGS,
    "I_MPI_ROOT": f"{BINDINGS}/opt/mpi",
    "FI_PROVIDER_PATH": f"{BINDINGS}/opt/mpi/libfabric/lib/prov:/usr/lib64/libfabric",
    "CCL_CONFIGURATION": "cpu",
    "CCL_WORKER_COUNT": "1",
    "CCL_WORKER_AFFINITY": "0,1,2,3,32,33,34,35",
    "CCL_ATL_TRANSPORT": "ofi",
    "ATL_PROGRESS_MODE": "0",
    "KMP_AFFINITY": "granularity=fine,compact,1,0",
    "OMP_NUM_THREADS": "23",
    "MASTER_ADDR": "127.0.0.1",
    "PATH": f"{BINDINGS}/opt/mpi/bin:/usr/local/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": f"{BINDINGS}/lib:{BINDINGS}/opt/mpi/libfabric/lib:/opt/other/lib",
    "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4:/usr/local/lib/libiomp5.so",
}


def test_setvars_leftovers_are_unset_and_path_entries_dropped():
    plan = plan_environment(SETVARS_ENV, [BINDINGS], {"OMP_NUM_THREADS": "28"}, keeps_mpi=False)
    unset = [name for name, _ in plan.unset]
    assert unset == ["ATL_PROGRESS_MODE", "CCL_ATL_TRANSPORT", "CCL_CONFIGURATION", "CCL_ROOT", "CCL_WORKER_AFFINITY", "CCL_WORKER_COUNT",
                     "FI_PROVIDER_PATH", "I_MPI_ROOT", "KMP_AFFINITY", "LD_PRELOAD"]
    why = dict(plan.unset)
    assert "gloo does not read it" in why["CCL_WORKER_COUNT"] and "Intel OpenMP" in why["KMP_AFFINITY"]
    assert plan.drop == {"PATH": (f"{BINDINGS}/opt/mpi/bin",), "LD_LIBRARY_PATH": (f"{BINDINGS}/lib", f"{BINDINGS}/opt/mpi/libfabric/lib")}
    assert plan.set == {"OMP_NUM_THREADS": "28"}  # compat env for the stock set; MASTER_ADDR is left alone
    assert "compat launch's plan" in plan.set_why["OMP_NUM_THREADS"]


def test_a_kept_mpirun_keeps_its_mpi_variables():
    plan = plan_environment(SETVARS_ENV, [BINDINGS], {}, keeps_mpi=True)
    unset = {name for name, _ in plan.unset}
    assert "I_MPI_ROOT" not in unset and "FI_PROVIDER_PATH" not in unset and "CCL_WORKER_COUNT" in unset
    assert any("I_MPI_* and FI_* stay" in n for n in plan.notes)


def test_preloads_that_exist_stay_and_those_inside_removed_packages_go():
    stock = {"LD_PRELOAD": f"/usr/lib/libtcmalloc.so.4:{BINDINGS}/lib/libiomp5.so", "OMP_NUM_THREADS": "4"}
    plan = plan_environment({"LD_PRELOAD": stock["LD_PRELOAD"], "KMP_BLOCKTIME": "1"}, [BINDINGS], stock, keeps_mpi=False)
    assert plan.set["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so.4"
    assert any("goes with the package it belongs to" in n for n in plan.notes)
    assert [name for name, _ in plan.unset] == ["KMP_BLOCKTIME"]  # no libiomp5 preloaded any more
    with_iomp = plan_environment({"KMP_BLOCKTIME": "1"}, [], {"LD_PRELOAD": "/opt/intel/lib/libiomp5.so"}, keeps_mpi=False)
    assert with_iomp.unset == ()


def test_the_commands_exports_are_part_of_set():
    plan = plan_environment({}, [], {"OMP_NUM_THREADS": "2"}, False, {"OMP_NUM_THREADS": "1", "FOO": "bar"}, {"FOO": "from -genv FOO=bar"})
    assert plan.set == {"OMP_NUM_THREADS": "1", "FOO": "bar"} and plan.set_why["FOO"] == "from -genv FOO=bar"


def test_pins_only_say_what_to_do_by_hand():
    plan = plan_environment(None, [], {}, False)
    assert plan.known is False and plan.unset == () and "unset CCL_*, I_MPI_*, FI_*" in plan.notes[0]


def test_environment_of_a_fixture_bindings_env_with_its_setvars_sourced(tmp_path, monkeypatch):
    # FIXTURE bindings (tests/fixture_envs.py) with their setvars.sh's variables in the environment the probe sees
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0").ipex("2.7.0")
    env.dist("transformers", "5.0.0")
    env.dist("accelerate", "1.12.0")
    root = env.site / "oneccl_bindings_for_pytorch"
    monkeypatch.setenv("CCL_ROOT", str(root))
    monkeypatch.setenv("I_MPI_ROOT", f"{root}/opt/mpi")
    monkeypatch.setenv("FI_PROVIDER_PATH", f"{root}/opt/mpi/libfabric/lib/prov")
    monkeypatch.setenv("CCL_WORKER_COUNT", "1")
    monkeypatch.setenv("PATH", f"{root}/opt/mpi/bin{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{root}/lib")
    code, doc = run_migrate(MigrateOptions(python=str(env.python), dry_run=True, command=("mpirun", "-n", "2", "python", "train.py", "--ddp_backend", "ccl")))
    assert code == 0
    assert set(doc["env"]["unset"]) >= {"CCL_ROOT", "I_MPI_ROOT", "FI_PROVIDER_PATH", "CCL_WORKER_COUNT"}
    assert doc["env"]["drop"]["PATH"] == [f"{root}/opt/mpi/bin"] and doc["env"]["drop"]["LD_LIBRARY_PATH"] == [f"{root}/lib"]
    assert "OMP_NUM_THREADS" in doc["env"]["set"]
    # the mpirun on PATH is the bindings' own (FIXTURE opt/mpi/bin/mpirun): it goes with them, so torchrun starts the ranks
    assert doc["command"][0] == "torchrun" and doc["launcher"] == "torchrun"
    assert sorted(doc["remove"]) == ["intel-extension-for-pytorch", "oneccl-bind-pt"]
