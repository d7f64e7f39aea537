"""compat launch's plan on RECORDED topologies (tests/data/topologies: this machine's /sys copied, and a 2-socket
Xeon with Hyper-Threading constructed in /sys's layout): exact per-rank CPUs, oneCCL worker cores and environment;
the launcher commands; the thread advice that compat doctor and compat env share with it; --print and --json.

Nothing here depends on the machine running the tests, except where a test says it reads this machine on purpose.
The real launches are in tests/launchers/test_launch_real.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
from packaging.version import Version

from compatmatrix.checks import runtime
from compatmatrix.checks.registry import Context, Options
from compatmatrix.environment import env_probe
from compatmatrix.environment.snapshot import CpuInfo, Distribution, EnvSnapshot
from compatmatrix.findings import Status
from compatmatrix.launchers.interface import PathEntries, Tools
from compatmatrix.placement.binding import binder_script, compose, pin_domain
from compatmatrix.placement.environment import KMP_AFFINITY, Preload, choose_preload, launch_environment
from compatmatrix.placement.plan import PlacementError, plan_ranks, thread_advice
from compatmatrix.placement.sysfs import read_machine
from compatmatrix.placement.topology import Machine, Topology, cpu_list_text, machine_from_probe, topology_from_probe
from compatmatrix.processes import rank_command
from compatmatrix.target import Platform

from ..conftest import ROOT, run_compat

TOPOLOGIES = Path(__file__).resolve().parents[1] / "data" / "topologies"
XEON = TOPOLOGIES / "xeon-2s-28c-ht-2numa"
VM = TOPOLOGIES / "vm-1s-2c-nosmt"
SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "launch-v1.json").read_text())
NO_LIBS = Preload((), None, False)


def xeon(affinity=None, quota=None) -> Machine:
    machine = read_machine(str(XEON))
    return Machine(machine.topology, frozenset(affinity) if affinity is not None else machine.affinity, quota)


def span(first, last):
    return tuple(range(first, last + 1))


def layout(plan):
    return [(r.local_rank, r.cpus, r.worker_cpus, r.numa_node) for r in plan.ranks]


# --- reading the recorded topologies ----------------------------------------------------------------------


def test_the_recorded_xeon_reads_as_2_sockets_2_nodes_56_cores_112_cpus():
    topology = read_machine(str(XEON)).topology
    assert topology.packages == (0, 1) and topology.nodes == (0, 1)
    assert len(topology.cores) == 56 and len(topology.cpus) == 112 and topology.threads_per_core == 2
    assert topology.cores[0].threads == (0, 56) and topology.cores[28].threads == (28, 84)
    assert {c.node for c in topology.cores[:28]} == {0} and {c.node for c in topology.cores[28:]} == {1}


def test_this_machines_recorded_sysfs_reads_as_one_socket_without_smt():
    machine = read_machine(str(VM))
    assert [core.threads for core in machine.topology.cores] == [(0,), (1,)]
    assert machine.topology.packages == (0,) and machine.topology.nodes == (0,) and machine.quota is None


def test_cpu_lists_as_the_kernel_writes_them():
    assert env_probe.cpu_list("0-27,56-83\n") == list(range(28)) + list(range(56, 84))
    assert env_probe.cpu_list("5") == [5] and env_probe.cpu_list("") == []
    assert env_probe.cpu_list("3-1") is None and env_probe.cpu_list("0-3:2") is None and env_probe.cpu_list("a") is None
    assert cpu_list_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_a_broken_recording_is_one_sentence(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(VM, root)
    (root / "devices/system/cpu/cpu1/topology/core_id").unlink()
    done = run_compat("launch", "--print", "--sysfs-root", str(root), "--launcher", "torchrun", "--nproc-per-node", "1", "--", "train.py")
    assert done.returncode == 2
    assert "cpu1/topology/core_id is missing or unreadable" in done.stderr and "Traceback" not in done.stderr
    not_sys = run_compat("launch", "--print", "--sysfs-root", str(tmp_path), "--launcher", "torchrun", "--nproc-per-node", "1", "--", "train.py")
    assert not_sys.returncode == 2 and "it is not shaped like /sys" in not_sys.stderr


def test_siblings_on_two_sockets_are_refused():
    data = {"online": [0, 1], "cpus": [{"cpu": 0, "package": 0, "core": 0, "siblings": [0, 1]}, {"cpu": 1, "package": 1, "core": 0, "siblings": [0, 1]}],
            "nodes": {}, "problem": None}
    with pytest.raises(ValueError, match="different sockets"):
        topology_from_probe(data, "test")
    # the live machine falls back to flat CPUs instead of refusing
    assert machine_from_probe(data, [0, 1], None, 2).topology.source == "flat"


@pytest.mark.parametrize("files, quota", [
    ({"fs/cgroup/cpu.max": "800000 100000\n"}, 8.0),  # cgroup v2: docker --cpus=8
    ({"fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"fs/cgroup/cpu/cpu.cfs_quota_us": "250000\n", "fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 2.5),  # cgroup v1
    ({"fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, None),
])
def test_the_cgroup_quota_is_read_from_v2_and_v1_files(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert env_probe.cgroup_quota(str(tmp_path), own_path=False) == quota


def test_the_quota_is_the_smallest_on_the_way_to_the_process_own_cgroup(tmp_path, monkeypatch):
    # a Kubernetes pod without a cgroup namespace: the limit sits on the pod's folder, the container's says "max"
    for folder, text in (("kubepods/pod1", "400000 100000"), ("kubepods/pod1/ctr", "max 100000")):
        (tmp_path / "fs/cgroup" / folder).mkdir(parents=True)
        (tmp_path / "fs/cgroup" / folder / "cpu.max").write_text(text + "\n")
    monkeypatch.setattr(env_probe, "_own_cgroup_paths", lambda: {"": "/kubepods/pod1/ctr"})
    assert env_probe.cgroup_quota(str(tmp_path)) == 4.0
    monkeypatch.setattr(env_probe, "_own_cgroup_paths", lambda: {"": "/"})
    assert env_probe.cgroup_quota(str(tmp_path)) is None


# --- the plan: exact CPUs per rank --------------------------------------------------------------------------


def test_two_ranks_on_the_two_socket_xeon_get_a_socket_each_and_27_threads():
    """The issue's case: 2 x 28 cores, 112 CPUs, 2 ranks: 27 OpenMP threads + 1 oneCCL worker per rank, not 55."""
    plan = plan_ranks(xeon(), 2)
    assert layout(plan) == [(0, span(1, 27), (0,), 0), (1, span(29, 55), (28,), 1)]
    assert plan.omp_threads == 27 and plan.worker_cpus == (0, 28) and plan.domain == "NUMA node"
    assert "one OpenMP thread per physical core: the hyperthread siblings (56-111) stay idle" in plan.notes
    env = launch_environment(plan, NO_LIBS)
    assert env == {"OMP_NUM_THREADS": "27", "OMP_PROC_BIND": "close", "OMP_PLACES": "cores", "CCL_WORKER_COUNT": "1", "CCL_WORKER_AFFINITY": "0,28"}


@pytest.mark.parametrize("ranks, expected, omp", [
    (1, [(0, span(1, 55), (0,), None)], 55),  # one rank spans both nodes
    (4, [(0, span(1, 13), (0,), 0), (1, span(15, 27), (14,), 0), (2, span(29, 41), (28,), 1), (3, span(43, 55), (42,), 1)], 13),
    (3, [(0, span(1, 13), (0,), 0), (1, span(15, 27), (14,), 0), (2, span(29, 41), (28,), 1)], 13),  # no rank straddles a node
])
def test_ranks_spread_over_the_numa_nodes(ranks, expected, omp):
    plan = plan_ranks(xeon(), ranks)
    assert layout(plan) == expected and plan.omp_threads == omp
    if ranks == 3:
        assert "14 of 56 usable physical cores stay idle: 3 ranks do not divide evenly over 2 NUMA nodes and every rank gets the same share" in plan.notes
    if ranks == 1:
        assert plan.ranks[0].nodes == (0, 1) and any("spans NUMA nodes 0, 1" in n for n in plan.notes)


def test_more_oneccl_workers_take_the_first_cores_of_each_share():
    plan = plan_ranks(xeon(), 2, ccl_workers=4)
    assert layout(plan) == [(0, span(4, 27), span(0, 3), 0), (1, span(32, 55), span(28, 31), 1)]
    assert launch_environment(plan, NO_LIBS)["CCL_WORKER_AFFINITY"] == "0,1,2,3,28,29,30,31" and plan.omp_threads == 24


def test_a_cgroup_quota_smaller_than_the_machine_limits_the_plan():
    plan = plan_ranks(xeon(quota=8.0), 2)  # docker --cpus=8 on the 112-CPU node
    assert layout(plan) == [(0, (1, 2, 3), (0,), 0), (1, (29, 30, 31), (28,), 1)]
    assert plan.omp_threads == 3
    assert "48 of 56 usable physical cores stay idle: the cgroup quota of 8 CPUs pays for 8" in plan.notes
    # a fraction of a CPU pays for no whole core: 2.5 CPUs are 2 cores, too few for 2 ranks with a worker core each
    with pytest.raises(PlacementError) as raised:
        plan_ranks(xeon(quota=2.5), 2)
    assert raised.value.message == ("2 ranks with 1 oneCCL worker core each need 4 physical cores, but this process may use 2 "
                                    "(56 physical cores in its affinity, capped to 2 by the cgroup quota of 2.5 CPUs).")
    assert layout(plan_ranks(xeon(quota=2.5), 2, ccl_workers=0)) == [(0, (0,), (), 0), (1, (28,), (), 1)]


def test_an_affinity_mask_smaller_than_the_machine_limits_the_plan():
    # taskset -c 0-13,56-69: socket 0's first 14 cores with both hyperthreads
    plan = plan_ranks(xeon(affinity=list(range(14)) + list(range(56, 70))), 2)
    assert layout(plan) == [(0, span(1, 6), (0,), 0), (1, span(8, 13), (7,), 0)]
    assert plan.omp_threads == 6 and "one OpenMP thread per physical core: the hyperthread siblings (56-69) stay idle" in plan.notes


def test_a_core_allowed_only_through_its_second_hyperthread_is_used_through_it():
    plan = plan_ranks(xeon(affinity=range(56, 84)), 1)  # socket 0's sibling threads only: still 28 physical cores
    assert layout(plan) == [(0, span(57, 83), (56,), 0)]


def test_uneven_nodes_put_both_ranks_on_the_big_one():
    # all of node 0 and 4 cores of node 1: two ranks of 14 cores on node 0 beat one of 4 on each node
    plan = plan_ranks(xeon(affinity=list(range(32))), 2)
    assert layout(plan) == [(0, span(1, 13), (0,), 0), (1, span(15, 27), (14,), 0)]
    assert "4 of 32 usable physical cores stay idle: every rank gets the same share" in plan.notes


def test_this_machines_recording():
    machine = read_machine(str(VM))
    assert layout(plan_ranks(machine, 1)) == [(0, (1,), (0,), 0)]
    assert layout(plan_ranks(machine, 2, ccl_workers=0)) == [(0, (0,), (), 0), (1, (1,), (), 0)]


@pytest.mark.parametrize("ranks, workers, message, fix", [
    (3, 0, "3 ranks need at least 3 physical cores, one each, but this process may use 2 (2 physical cores in its affinity).",
     "Start at most 2 ranks per node (--nproc-per-node 2), or run where more cores are allowed."),
    (2, 1, "2 ranks with 1 oneCCL worker core each need 4 physical cores, but this process may use 2 (2 physical cores in its affinity).",
     "Pass --ccl-workers 0 (each rank's oneCCL worker then shares the rank's own cores), or start at most 1 rank per node."),
])
def test_impossible_requests_name_the_fix(ranks, workers, message, fix):
    with pytest.raises(PlacementError) as raised:
        plan_ranks(read_machine(str(VM)), ranks, workers)
    assert raised.value.message == message and raised.value.fix == fix


def test_a_flat_machine_is_what_a_snapshot_without_topology_gives():
    machine = Machine(Topology.flat(64), frozenset(range(64)))
    plan = plan_ranks(machine, 2)
    assert plan.omp_threads == 31 and plan.domain == "socket"
    assert any("topology was not readable" in n for n in plan.notes)


# --- environment and launchers ------------------------------------------------------------------------------


def test_ld_preload_and_openmp_binding_follow_the_libraries_found(tmp_path):
    libs = {}
    for kind, name in (("tcmalloc", "libtcmalloc.so.4"), ("jemalloc", "libjemalloc.so.2"), ("iomp5", "libiomp5.so")):
        libs[kind] = [tmp_path / name]
        (tmp_path / name).write_bytes(b"\x7fELF FIXTURE")
    plan = plan_ranks(xeon(), 2)
    env = launch_environment(plan, choose_preload(libs))
    assert env["LD_PRELOAD"] == f"{tmp_path}/libtcmalloc.so.4:{tmp_path}/libiomp5.so"
    assert env["KMP_AFFINITY"] == KMP_AFFINITY == "granularity=fine,compact,1,0" and env["KMP_BLOCKTIME"] == "1"
    assert "OMP_PROC_BIND" not in env and "MALLOC_CONF" not in env
    only_jemalloc = launch_environment(plan, choose_preload({"tcmalloc": [], "jemalloc": libs["jemalloc"], "iomp5": []}, [str(tmp_path / "gone.so")]))
    assert only_jemalloc["LD_PRELOAD"] == f"{tmp_path}/libjemalloc.so.2" and only_jemalloc["MALLOC_CONF"].startswith("oversize_threshold:1")
    assert only_jemalloc["OMP_PROC_BIND"] == "close" and only_jemalloc["OMP_PLACES"] == "cores"
    assert "LD_PRELOAD" not in launch_environment(plan, NO_LIBS)


def test_intel_mpi_gets_one_mask_per_rank():
    plan = plan_ranks(xeon(), 2)
    assert pin_domain(plan) == "[0xffffffe,0xffffffe0000000]"
    assert int("0xffffffe", 16) == sum(1 << cpu for cpu in span(1, 27))
    env = launch_environment(plan, NO_LIBS)
    call = compose(plan, env, "mpirun", ["train.py", "--bf16"], "/env/bin/python", Tools(), flavor="intel-mpi", mpirun="/env/bin/mpirun", path="/usr/bin")
    assert call.argv == ("/env/bin/mpirun", "-n", "2", "-ppn", "2", "-genvlist", ",".join(call.env), "/env/bin/python", "train.py", "--bf16")
    assert call.env["I_MPI_PIN_DOMAIN"] == "[0xffffffe,0xffffffe0000000]" and call.env["I_MPI_PIN"] == "1"
    # hydra's folder is put in front of the launching shell's PATH: the PATH compat saw is never written out whole
    assert "PATH" not in call.env and call.additions["PATH"].prepend == ("/env/bin",) and call.binding == "I_MPI_PIN_DOMAIN"
    assert call.environment({"PATH": "/usr/bin"})["PATH"] == "/env/bin:/usr/bin" == call.environment({"PATH": "/env/bin:/usr/bin"})["PATH"]
    # the oneCCL environment's own PATH entries (a bindings' setvars.sh: its opt/mpi/bin) stay, behind hydra's folder
    merged = compose(plan, env, "mpirun", ["train.py"], "/env/bin/python", Tools(), flavor="intel-mpi", mpirun="/env/bin/mpirun", path="/usr/bin",
                     additions={"PATH": PathEntries(("/b/opt/mpi/bin",)), "LD_LIBRARY_PATH": PathEntries(("/b/lib",))})
    assert merged.additions["PATH"] == PathEntries(("/env/bin", "/b/opt/mpi/bin")) and merged.additions["LD_LIBRARY_PATH"] == PathEntries(("/b/lib",))
    assert merged.argv[merged.argv.index("-genvlist") + 1].split(",") == [*env, "I_MPI_PIN", "I_MPI_PIN_DOMAIN", "LD_LIBRARY_PATH"]


def test_torchrun_binds_through_an_inline_wrapper_with_numactl_or_taskset():
    plan = plan_ranks(xeon(), 2)
    env = launch_environment(plan, NO_LIBS)
    with_numactl = compose(plan, env, "torchrun", ["train.py"], "/env/bin/python", Tools(numactl="/usr/bin/numactl", taskset="/usr/bin/taskset"))
    script = ('case "${LOCAL_RANK:-}" in 0) set -- numactl --physcpubind=1-27 --membind=0 "$@";; 1) set -- numactl --physcpubind=29-55 --membind=1 "$@";; '
              '*) echo "compat launch: no CPUs were planned for local rank ${LOCAL_RANK:-(unset)}; the plan has 2" >&2; exit 2;; esac; exec "$@"')
    assert with_numactl.argv == ("/env/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--no_python",
                                 "sh", "-c", script, "compat-launch-rank", "/env/bin/python", "train.py")
    assert with_numactl.env == env and with_numactl.binding == "numactl"
    taskset, tool = binder_script(plan, "LOCAL_RANK", Tools(taskset="/usr/bin/taskset"))
    assert tool == "taskset" and "0) set -- taskset -c 1-27 \"$@\";; 1) set -- taskset -c 29-55 \"$@\";;" in taskset
    with pytest.raises(Exception, match="Neither numactl nor taskset"):
        compose(plan, env, "torchrun", ["train.py"], "/env/bin/python", Tools())


def test_open_mpi_and_mpich_use_their_own_local_rank_variables():
    plan = plan_ranks(xeon(), 2)
    env = launch_environment(plan, NO_LIBS)
    ompi = compose(plan, env, "mpirun", ["python", "train.py"], "/env/bin/python", Tools(taskset="taskset"), flavor="open-mpi", mpirun="/usr/bin/mpirun", as_root=True)
    assert ompi.argv[:6] == ("/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "--allow-run-as-root")
    assert [ompi.argv[i + 1] for i, word in enumerate(ompi.argv) if word == "-x"] == list(env)
    assert '"${OMPI_COMM_WORLD_LOCAL_RANK:-}"' in ompi.argv[-4] and ompi.argv[-2:] == ("python", "train.py")
    mpich = compose(plan, env, "mpirun", ["python", "train.py"], "/env/bin/python", Tools(taskset="taskset"), flavor="mpich", mpirun="mpirun")
    assert mpich.argv[:7] == ("mpirun", "-n", "2", "-ppn", "2", "-genvlist", ",".join(env)) and '"${MPI_LOCALRANKID:-}"' in mpich.argv[9]


def test_the_interpreter_goes_in_front_of_scripts_modules_and_code_only():
    assert rank_command(["train.py", "--x"], "/p") == ["/p", "train.py", "--x"]
    assert rank_command(["-m", "pkg.train"], "/p") == ["/p", "-m", "pkg.train"]
    assert rank_command(["./run.sh", "a.py"], "/p") == ["./run.sh", "a.py"]


# --- one source of truth: runtime.threads and compat env quote the plan -----------------------------------------


CCL_BINDINGS = Distribution("oneccl_bind_pt", "oneccl-bind-pt", "2.7.0+cpu", "/env/site/oneccl_bind_pt-2.7.0+cpu.dist-info", "/env/site")


def xeon_snapshot(env=None, quota=None) -> EnvSnapshot:
    """An EnvSnapshot as the probe would record it on the 2-socket Xeon (its topology read from the recording), of an
    environment with the oneCCL bindings (so the thread advice keeps a worker core per rank)."""
    raw = {"cpu": {"topology": env_probe.cpu_topology(str(XEON))}, "allowed_cpus": {"affinity": list(range(112)), "count": 112, "cgroup_quota": quota}}
    return EnvSnapshot(
        executable="/env/bin/python", python=Version("3.11.7"), prefix="/env", purelib="/env/site", scripts="/env/bin", paths=("/env/site",),
        platform=Platform.from_tag("manylinux_2_28_x86_64"), libc_version="2.36",
        cpu=CpuInfo(model="Intel(R) Xeon(R) Platinum 8280", flags=frozenset({"avx2", "avx512f"}), sockets=2, cores=56, logical=112, numa_nodes=2),
        allowed_cpus=112, cgroup_quota=quota, shm_bytes=8 << 30, env=dict(env or {}), distributions=(CCL_BINDINGS,), modules={}, which={}, raw=raw,
    )


def test_thread_advice_on_the_xeon_counts_physical_cores():
    advice = thread_advice(xeon(), 2)
    assert (advice.omp_threads, advice.ccl_workers, advice.cores, advice.cpus) == (27, 1, 56, 112) and advice.plan is not None


def test_the_doctor_no_longer_recommends_55_threads_per_rank_on_the_xeon(matrix):
    unset = runtime.threads(Context(matrix, xeon_snapshot(), Options(ranks_per_node=2)))
    assert unset.status is Status.WARN
    assert unset.fix.startswith("export OMP_NUM_THREADS=27 CCL_WORKER_COUNT=1   (for 2 ranks on 56 physical cores;")
    assert "56 physical cores (112 CPUs with hyperthreads) allowed for this process" in unset.evidence
    # what the old advice set: 2 x (55 + 1) = 112 threads, one per hyperthread
    old = runtime.threads(Context(matrix, xeon_snapshot({"OMP_NUM_THREADS": "55", "CCL_WORKER_COUNT": "1"}), Options(ranks_per_node=2)))
    assert old.status is Status.WARN
    assert old.summary == ("2 ranks x (OMP_NUM_THREADS=55 + CCL_WORKER_COUNT=1) = 112 threads on 56 physical cores: "
                           "the threads share cores with their hyperthread siblings (112 CPUs)")
    assert old.fix.startswith("export OMP_NUM_THREADS=27   (for 2 ranks on 56 physical cores;")
    good = runtime.threads(Context(matrix, xeon_snapshot({"OMP_NUM_THREADS": "27", "CCL_WORKER_COUNT": "1"}), Options(ranks_per_node=2)))
    assert good.status is Status.PASS and good.summary == "2 ranks x (OMP_NUM_THREADS=27 + CCL_WORKER_COUNT=1) = 56 threads on 56 physical cores"
    over = runtime.threads(Context(matrix, xeon_snapshot({"OMP_NUM_THREADS": "60", "CCL_WORKER_COUNT": "1"}), Options(ranks_per_node=2)))
    assert over.status is Status.FAIL  # 122 threads: more than the hyperthreads too
    quota = runtime.threads(Context(matrix, xeon_snapshot({"OMP_NUM_THREADS": "27", "CCL_WORKER_COUNT": "1"}, quota=16.0), Options(ranks_per_node=2)))
    assert quota.status is Status.FAIL and quota.fix.startswith("export OMP_NUM_THREADS=7   (for 2 ranks on 16 physical cores;")


def test_compat_env_exports_the_plans_numbers(matrix, tmp_path, monkeypatch):
    from compatmatrix import shell_env
    from compatmatrix.environment.snapshot import take_snapshot

    from ..fixture_envs import FixtureEnv

    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: {"tcmalloc": [], "jemalloc": [], "iomp5": []})
    env = FixtureEnv(tmp_path / "env", sys.executable).torch("2.7.0").bindings("2.7.0")
    real = take_snapshot(str(env.python))
    snapshot = dataclasses.replace(real, raw={**real.raw, **xeon_snapshot().raw})  # this FIXTURE environment, on the Xeon
    plan = shell_env.plan_env(Context(matrix, snapshot), 2)
    assert plan.exports["OMP_NUM_THREADS"] == "27" and plan.exports["CCL_WORKER_COUNT"] == "1"
    assert "threads: 56 physical cores (112 CPUs with hyperthreads) allowed, 2 ranks per node, 1 oneCCL worker(s) per rank" in plan.comments


# --- the command line: --print, --json, exit 2 --------------------------------------------------------------


def launch_print(*args, env_extra=None):
    return run_compat("launch", "--print", *args, env_extra=env_extra)


@pytest.fixture(scope="module")
def with_bindings(tmp_path_factory):
    """``--python`` of a FIXTURE environment with torch and the oneCCL bindings (tests/fixture_envs.py): a worker core
    per rank is set aside only where the bindings are installed."""
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path_factory.mktemp("bindings") / "env", sys.executable).torch("2.7.0").bindings("2.7.0")
    return ("--python", str(env.python))


@pytest.fixture(scope="module")
def without_bindings(tmp_path_factory):
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path_factory.mktemp("torch-only") / "env", sys.executable).torch("2.7.0")
    return ("--python", str(env.python))


def test_print_json_follows_the_schema_with_exact_ranks(with_bindings):
    done = launch_print("--json", *with_bindings, "--sysfs-root", str(XEON), "--launcher", "mpirun", "--mpi-flavor", "intel-mpi", "--mpirun", "/opt/impi/bin/mpirun",
                        "--nproc-per-node", "2", "--", "train.py", "--bf16")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    assert [(r["rank"], r["cpus"], r["ccl_worker_cpus"], r["numa_node"]) for r in data["ranks"]] == [
        (0, list(span(1, 27)), [0], 0), (1, list(span(29, 55)), [28], 1)]
    for rank in data["ranks"]:
        assert rank["env"]["OMP_NUM_THREADS"] == "27" and rank["env"]["CCL_WORKER_COUNT"] == "1" and rank["env"]["CCL_WORKER_AFFINITY"] == "0,28"
    assert data["env"]["I_MPI_PIN_DOMAIN"] == "[0xffffffe,0xffffffe0000000]"
    assert data["command"][:5] == ["/opt/impi/bin/mpirun", "-n", "2", "-ppn", "2"] and data["command"][-2:] == ["train.py", "--bf16"]
    topology = data["topology"]
    assert (topology["sockets"], topology["physical_cores"], topology["cpus"], topology["threads_per_core"]) == (2, 56, 112, 2)
    assert [n["node"] for n in topology["numa_nodes"]] == [0, 1] and topology["source"] == str(XEON)


def test_print_text_is_comments_exports_and_one_command_line(with_bindings):
    done = launch_print(*with_bindings, "--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "2", "--", "train.py", "--lr", "1e-4")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    comments = [line for line in lines if line.startswith("# ")]
    exports = [line for line in lines if line.startswith("export ")]
    guards = [line for line in lines if line.startswith("case \":${") or line == "esac"]  # a path list's addition, once (shell_env's writer)
    assert len(comments) + len(exports) + len(guards) + 1 == len(lines)
    assert lines[0].startswith("# 2 ranks on 2 sockets, 2 NUMA nodes, 56 physical cores (112 CPUs with hyperthreads)")
    assert "# rank 0: CPUs 1-27 (NUMA node 0), 27 OpenMP threads, oneCCL worker on CPU 0" in lines
    assert "export OMP_NUM_THREADS=27" in exports and "export CCL_WORKER_AFFINITY=0,28" in exports
    assert "-m torch.distributed.run --standalone --nproc_per_node 2 --no_python sh -c" in lines[-1] and lines[-1].endswith("train.py --lr 1e-4")


@pytest.mark.parametrize("files, expected", [
    ({"fs/cgroup/cpu.max": "800000 100000\n"}, [[1, 2, 3], [29, 30, 31]]),
    ({"fs/cgroup/cpu/cpu.cfs_quota_us": "400000\n", "fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, [[1], [29]]),
])
def test_a_recorded_cgroup_quota_limits_the_printed_plan(tmp_path, files, expected, with_bindings):
    root = tmp_path / "sys"
    shutil.copytree(XEON, root)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    done = launch_print("--json", *with_bindings, "--sysfs-root", str(root), "--launcher", "torchrun", "--nproc-per-node", "2", "--", "train.py")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    assert [r["cpus"] for r in data["ranks"]] == expected


@pytest.mark.parametrize("args, words", [
    (["--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "57", "--", "train.py"],
     "57 ranks need at least 57 physical cores, one each, but this process may use 56 (56 physical cores in its affinity). Start at most 56 ranks per node"),
    (["--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "29", "--ccl-workers", "1", "--", "train.py"],
     "29 ranks with 1 oneCCL worker core each need 58 physical cores, but this process may use 56"),
    (["--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "2"], "No command to launch."),
    (["--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "2", "--ccl-workers", "-1", "--", "x.py"], "argument --ccl-workers: '-1' is not a whole number"),
])
def test_impossible_requests_are_exit_2_with_one_sentence(args, words):
    done = launch_print(*args)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith(("usage:", " "))]  # argparse's usage lines come first
    assert len(said) == 1 and "Traceback" not in done.stderr and done.stdout == ""


def test_options_that_only_go_with_print():
    json_run = run_compat("launch", "--json", "--launcher", "torchrun", "--nproc-per-node", "1", "--", "x.py")
    assert json_run.returncode == 2 and "--json goes with --print" in json_run.stderr
    recorded = run_compat("launch", "--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "1", "--", "x.py")
    assert recorded.returncode == 2 and "--sysfs-root plans for a recorded machine, so it only goes with --print" in recorded.stderr


def test_running_torchrun_without_torch_is_refused_before_anything_starts(tmp_path):
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env", sys.executable)  # no torch at all
    done = run_compat("launch", "--python", str(env.python), "--launcher", "torchrun", "--nproc-per-node", "1", "--ccl-workers", "0", "--", "x.py")
    assert done.returncode == 2 and "torch is not installed for" in done.stderr and "torchrun comes with it" in done.stderr


def test_by_default_a_worker_core_is_set_aside_only_where_the_cores_allow_it(with_bindings):
    """29 ranks on 56 cores: no room for a worker core each, so the default sets none aside and says so."""
    from ..conftest import run_compat

    done = run_compat("launch", "--print", "--json", *with_bindings, "--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "29", "--", "train.py")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert any("no core for a oneCCL worker" in note for note in data["notes"])
    # no worker core, but CCL_WORKER_COUNT=1 all the same: accelerate takes ccl only when it is > 0
    assert data["env"]["CCL_WORKER_COUNT"] == "1" and "CCL_WORKER_AFFINITY" not in data["env"]
    assert not any("--ccl-workers 0" in note for note in data["notes"])  # nobody passed it
    two = json.loads(run_compat("launch", "--print", "--json", *with_bindings, "--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", "2", "--",
                                "t.py").stdout)
    assert two["env"]["CCL_WORKER_COUNT"] == "1"


def test_without_the_bindings_no_worker_core_is_set_aside_and_no_flag_is_invented(without_bindings):
    """The defect: without oneCCL bindings launch --print set a worker core aside per rank (or, where none fit, noted a
    '--ccl-workers 0' nobody passed)."""
    from ..conftest import run_compat

    for ranks in ("2", "29"):
        done = run_compat("launch", "--print", "--json", *without_bindings, "--sysfs-root", str(XEON), "--launcher", "torchrun", "--nproc-per-node", ranks, "--",
                          "train.py")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert "CCL_WORKER_COUNT" not in data["env"] and all(not r["ccl_worker_cpus"] for r in data["ranks"]), data["env"]
        assert not any("--ccl-workers 0" in note for note in data["notes"]), data["notes"]
        assert any("oneCCL bindings are not installed" in note for note in data["notes"]), data["notes"]
    asked = json.loads(run_compat("launch", "--print", "--json", *without_bindings, "--ccl-workers", "1", "--sysfs-root", str(XEON), "--launcher", "torchrun",
                                  "--nproc-per-node", "2", "--", "t.py").stdout)
    assert asked["env"]["CCL_WORKER_COUNT"] == "1"  # what the user asks for is kept


@pytest.mark.parametrize("written", ["1_0", "99999999999999999999999", "\u0663", "+3", "0x10", ""])
def test_a_sysfs_id_that_no_kernel_writes_is_named_not_read(tmp_path, written):
    """core_id / physical_package_id are ASCII digits (-1: no package); int() would take '1_0', '٣' and 23 digits."""
    root = tmp_path / "sys"
    shutil.copytree(XEON, root, symlinks=True)
    (root / "devices" / "system" / "cpu" / "cpu3" / "topology" / "core_id").write_text(written + "\n")
    answer = env_probe.cpu_topology(str(root))
    assert answer["cpus"] is None and answer["problem"].endswith("cpu3/topology/core_id is missing or unreadable"), answer["problem"]


def test_a_package_id_of_minus_one_is_read():
    """Some machines (VMs, some ARM boards) write -1: no package known; it is a value, not an error."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "sys"
        shutil.copytree(XEON, root, symlinks=True)
        for topology in (root / "devices" / "system" / "cpu").glob("cpu[0-9]*/topology"):
            (topology / "physical_package_id").write_text("-1\n")
        answer = env_probe.cpu_topology(str(root))
        assert answer["problem"] is None and {cpu["package"] for cpu in answer["cpus"]} == {-1}


def test_compat_env_with_too_few_cores_for_a_worker_each_follows_launchs_automatic_choice(matrix, tmp_path, monkeypatch):
    """Issue 31: the comment said '... Pass --ccl-workers 0' (a launch flag) where compat launch itself sets no core aside."""
    from compatmatrix import shell_env
    from compatmatrix.environment.snapshot import take_snapshot

    from ..fixture_envs import FixtureEnv

    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: {"tcmalloc": [], "jemalloc": [], "iomp5": []})
    env = FixtureEnv(tmp_path / "env", sys.executable).torch("2.7.0").bindings("2.7.0")
    real = take_snapshot(str(env.python))
    snapshot = dataclasses.replace(real, raw={**real.raw, **xeon_snapshot().raw}, env={})  # this FIXTURE environment, on the Xeon
    plan = shell_env.plan_env(Context(matrix, snapshot), 30)  # 30 x (1 + 1) > 56 cores
    assert plan.exports["OMP_NUM_THREADS"] == "1" and plan.exports["CCL_WORKER_COUNT"] == "1"
    assert not [c for c in plan.comments if "--ccl-workers" in c], plan.comments
    assert any("no core is set aside for oneCCL workers: 30 ranks leave none on 56 physical cores" in c for c in plan.comments)
