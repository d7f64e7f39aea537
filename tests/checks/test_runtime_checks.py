"""runtime.isa / runtime.threads / runtime.shm / runtime.ld-preload and compat env's LD_PRELOAD, on RECORDED machines.

The checks read an EnvSnapshot; here it is built by hand from what the probe records on real machines (the CPU
flag lines below are /proc/cpuinfo excerpts, filtered through the probe's own CPU_FLAGS), so every branch runs on
every CI machine: whatever CPU, core count, cgroup quota, /dev/shm or allocator libraries the machine running the
tests has. Nothing here reads this machine's CPU.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from compatmatrix.checks import runtime
from compatmatrix.checks.registry import Context, Options
from compatmatrix.environment.env_probe import CPU_FLAGS
from compatmatrix.environment.snapshot import CpuInfo, Distribution, EnvSnapshot, _effective_cpus
from compatmatrix.findings import Status
from compatmatrix.target import Platform


def probe_flags(cpuinfo_flags: str) -> frozenset:
    """What the probe keeps of a /proc/cpuinfo flags line."""
    present = set(cpuinfo_flags.split())
    return frozenset(f for f in CPU_FLAGS if f in present)


# /proc/cpuinfo "flags" excerpts (the vector/matrix part) of real CPUs
SAPPHIRE_RAPIDS = ("Intel(R) Xeon(R) Platinum 8480+", probe_flags(
    "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl "
    "avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes avx512_vnni avx512_bitalg avx512_vpopcntdq amx_bf16 avx512_fp16 amx_tile amx_int8"))
ZEN4 = ("AMD EPYC 9654 96-Core Processor", probe_flags(
    "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl "
    "avx512_bf16 clzero avx512vbmi avx512_vbmi2 gfni vaes avx512_vnni avx512_bitalg avx512_vpopcntdq"))
ZEN3_AVX2 = ("AMD EPYC 7763 64-Core Processor", probe_flags("fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 sha_ni clzero"))
SANDY_BRIDGE_NO_AVX2 = ("Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", probe_flags("fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 popcnt aes xsave avx"))

IPEX = Distribution("intel-extension-for-pytorch", "intel-extension-for-pytorch", "2.8.0+cpu", "/env/site/intel_extension_for_pytorch-2.8.0.dist-info", "/env/site")


def snapshot(cpu=ZEN3_AVX2, cpus=8, quota=None, shm=8 << 30, env=None, distributions=()) -> EnvSnapshot:
    model, flags = cpu
    return EnvSnapshot(
        executable="/env/bin/python", python=Version("3.11.7"), prefix="/env", purelib="/env/site", scripts="/env/bin", paths=("/env/site",),
        platform=Platform.from_tag("manylinux_2_28_x86_64"), libc_version="2.36",
        cpu=CpuInfo(model=model, flags=flags, sockets=1, cores=cpus, logical=cpus, numa_nodes=1),
        allowed_cpus=cpus, cgroup_quota=quota, shm_bytes=shm, env=dict(env or {}), distributions=tuple(distributions), modules={}, which={},
    )


def run(matrix, check, snap, **options):
    return check(Context(matrix, snap, Options(**options)))


# --- runtime.isa --------------------------------------------------------------------------------------


def test_recorded_flag_sets_are_what_the_probe_keeps():
    assert {"amx_bf16", "avx512_bf16", "avx2"} <= SAPPHIRE_RAPIDS[1]
    assert "avx512_bf16" in ZEN4[1] and not {"amx_bf16", "amx_tile"} & ZEN4[1]
    assert ZEN3_AVX2[1] == {"avx2"}
    assert SANDY_BRIDGE_NO_AVX2[1] == frozenset()


@pytest.mark.parametrize("cpu, summary, bf16", [
    (SAPPHIRE_RAPIDS, "native bf16 (amx_bf16, avx512_bf16)", False),
    (SAPPHIRE_RAPIDS, "native bf16 (amx_bf16, avx512_bf16)", True),  # --bf16 asked: native, nothing to warn about
    (ZEN4, "native bf16 (avx512_bf16)", False),
    (ZEN4, "native bf16 (avx512_bf16)", True),
    (ZEN3_AVX2, "AVX2, no native bf16", False),  # with --bf16: test_bf16_asked_on_an_avx2_only_cpu_is_a_warning
])
def test_isa_passes_with_avx2_and_names_native_bf16(matrix, cpu, summary, bf16):
    finding = run(matrix, runtime.isa, snapshot(cpu, distributions=[IPEX]), bf16=bf16)
    assert finding.status is Status.PASS and finding.summary == summary
    assert finding.evidence[0].startswith(cpu[0] + ": ")


def test_avx512_without_bf16_is_named(matrix):
    skylake = ("Intel(R) Xeon(R) Gold 6148", probe_flags("avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl"))
    finding = run(matrix, runtime.isa, snapshot(skylake))
    assert finding.status is Status.PASS and finding.summary == "AVX2 and AVX-512, no native bf16"


def test_bf16_asked_on_an_avx2_only_cpu_is_a_warning(matrix):
    finding = run(matrix, runtime.isa, snapshot(ZEN3_AVX2), bf16=True)
    assert finding.status is Status.WARN
    assert finding.summary.startswith(f"bf16 was asked for, but {ZEN3_AVX2[0]} has no avx512_bf16 or amx_bf16")
    assert "drop --bf16" in finding.fix


def test_ipex_on_a_cpu_without_avx2_fails(matrix):
    finding = run(matrix, runtime.isa, snapshot(SANDY_BRIDGE_NO_AVX2, distributions=[IPEX]))
    assert finding.status is Status.FAIL
    assert finding.summary == f"intel-extension-for-pytorch 2.8.0 needs a CPU with AVX2 (avx2); {SANDY_BRIDGE_NO_AVX2[0]} lacks avx2"
    evidence = " ".join(finding.evidence)
    assert "only works on machines with instruction sets equal or newer than AVX2" in evidence  # the release's own check
    assert "source: intel/intel-extension-for-pytorch@v2.1.100+cpu:intel_extension_for_pytorch/cpu/utils/_cpu_isa.py" in evidence


# The floor is the installed release's ([[ipex]] isa_min), not one rule for all: 1.10.x wheels are AVX-512 builds, 1.11 and
# later dispatch at run time from AVX2, and 1.12.0's AVX2 path was broken (fixed in 1.12.100).
SKYLAKE = ("Intel(R) Xeon(R) Gold 6148", probe_flags("avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl"))


def ipex_dist(version):
    return Distribution("intel-extension-for-pytorch", "intel-extension-for-pytorch", version, f"/env/site/intel_extension_for_pytorch-{version}.dist-info", "/env/site")


def torch_dist(version):
    return Distribution("torch", "torch", version, f"/env/site/torch-{version}.dist-info", "/env/site")


@pytest.mark.parametrize(
    "ipex, cpu, status, text",
    [
        ("1.10.0", ZEN3_AVX2, Status.FAIL, "intel-extension-for-pytorch 1.10.0 needs a CPU with AVX-512 (avx512f, avx512bw, avx512vl, avx512dq); "
                                           "AMD EPYC 7763 64-Core Processor lacks avx512f, avx512bw, avx512vl, avx512dq"),
        ("1.10.100+cpu", ZEN3_AVX2, Status.FAIL, "intel-extension-for-pytorch 1.10.100 needs a CPU with AVX-512"),
        ("1.10.0", SKYLAKE, Status.PASS, "AVX2 and AVX-512, no native bf16"),
        ("1.10.0", SAPPHIRE_RAPIDS, Status.PASS, "native bf16 (amx_bf16, avx512_bf16)"),
        ("1.11.0", ZEN3_AVX2, Status.PASS, "AVX2, no native bf16"),
        ("1.12.0", ZEN3_AVX2, Status.FAIL, "intel-extension-for-pytorch 1.12.0 needs a CPU with AVX-512"),
        ("1.12.0", SKYLAKE, Status.PASS, "AVX2 and AVX-512, no native bf16"),
        ("1.12.100", ZEN3_AVX2, Status.PASS, "AVX2, no native bf16"),
        ("2.8.0", ZEN4, Status.PASS, "native bf16 (avx512_bf16)"),
        ("2.7.10+xpu", SANDY_BRIDGE_NO_AVX2, Status.PASS, "no AVX2 or AVX-512, no native bf16"),  # an XPU build: packages.ipex-torch fails it
    ],
)
def test_isa_floor_is_the_installed_releases(matrix, ipex, cpu, status, text):
    finding = run(matrix, runtime.isa, snapshot(cpu, distributions=[ipex_dist(ipex)]))
    assert finding.status is status
    assert finding.summary.startswith(text), finding.summary


def test_the_1_12_0_failure_names_the_fixed_release_and_a_release_that_runs(matrix):
    snap = dataclasses.replace(snapshot(ZEN3_AVX2, distributions=[ipex_dist("1.12.0"), torch_dist("1.12.0")]), python=Version("3.10.12"))
    finding = run(matrix, runtime.isa, snap)
    assert finding.status is Status.FAIL
    assert "fix the AVX2 issue that blocks running on non-AVX512 platforms" in " ".join(finding.evidence)
    assert "source: intel/intel-extension-for-pytorch@v1.12.100:docs/tutorials/releases.md" in finding.evidence
    assert finding.fix.startswith("pip install intel-extension-for-pytorch==1.12.300 (runs on this CPU and pairs with torch 1.12.0)")


def test_an_ipex_release_without_a_recorded_floor_on_a_cpu_without_avx2_is_a_warning(matrix):
    for version in ("1.9.0", "2.99.0"):  # no isa_min recorded / not in the matrix
        finding = run(matrix, runtime.isa, snapshot(SANDY_BRIDGE_NO_AVX2, distributions=[ipex_dist(version)]))
        assert finding.status is Status.WARN and "the least any recorded IPEX release needs" in finding.summary


def test_no_avx2_without_ipex_is_not_a_failure(matrix):
    finding = run(matrix, runtime.isa, snapshot(SANDY_BRIDGE_NO_AVX2))
    assert finding.status is Status.PASS
    assert finding.evidence == (f"{SANDY_BRIDGE_NO_AVX2[0]}: no AVX2/AVX-512/AMX flags",)


def test_bf16_asked_on_a_cpu_without_avx2_is_a_warning(matrix):
    finding = run(matrix, runtime.isa, snapshot(SANDY_BRIDGE_NO_AVX2), bf16=True)
    assert finding.status is Status.WARN and "will be emulated and slow" in finding.summary


# --- runtime.threads -------------------------------------------------------------------------------------


CCL = Distribution("oneccl_bind_pt", "oneccl-bind-pt", "2.7.0+cpu", "/env/site/oneccl_bind_pt-2.7.0+cpu.dist-info", "/env/site")


def test_threads_unset_one_rank_passes_and_several_ranks_warn(matrix):
    one = run(matrix, runtime.threads, snapshot(cpus=4), ranks_per_node=1)
    assert one.status is Status.PASS and one.summary == "OMP_NUM_THREADS is not set (one rank uses every allowed CPU)"
    two = run(matrix, runtime.threads, snapshot(cpus=4, distributions=(CCL,)), ranks_per_node=2)
    assert two.status is Status.WARN
    assert two.summary == "OMP_NUM_THREADS is not set: each of 2 ranks will start 4 threads on 4 physical cores (under torchrun: 1 thread each)"
    # 2 cores per rank: 1 OpenMP thread + 1 oneCCL worker (the old advice, OMP_NUM_THREADS=2 with a worker, made 6 threads on 4 CPUs)
    assert two.fix.startswith("export OMP_NUM_THREADS=1 CCL_WORKER_COUNT=1   (for 2 ranks on 4 physical cores;")


def test_without_the_bindings_no_core_is_kept_for_oneccl_workers(matrix):
    """The defect: in an environment without oneCCL bindings the advice reserved a worker core per rank and named
    CCL_WORKER_COUNT (and, on 2 cores with 2 ranks, said the ranks did not fit)."""
    finding = run(matrix, runtime.threads, snapshot(cpus=2), ranks_per_node=2)
    assert "CCL_WORKER_COUNT" not in finding.fix and "oneCCL worker" not in " ".join(finding.evidence), finding
    assert finding.fix.startswith("export OMP_NUM_THREADS=1   (for 2 ranks on 2 physical cores;"), finding.fix
    four = run(matrix, runtime.threads, snapshot(cpus=4), ranks_per_node=2)
    assert four.fix.startswith("export OMP_NUM_THREADS=2   (for 2 ranks on 4 physical cores;"), four.fix


@pytest.mark.parametrize("cpus, omp, workers, ranks, status", [
    (1, 2, 0, 1, Status.FAIL),  # one CPU, two threads
    (64, 31, 1, 2, Status.PASS),  # 2 x (31 + 1) = 64 on 64
    (64, 32, 1, 2, Status.FAIL),  # 66 on 64
    (2, 1, 0, 2, Status.PASS),
])
def test_threads_times_ranks_against_the_cpus(matrix, cpus, omp, workers, ranks, status):
    snap = snapshot(cpus=cpus, env={"OMP_NUM_THREADS": str(omp), "CCL_WORKER_COUNT": str(workers)})
    finding = run(matrix, runtime.threads, snap, ranks_per_node=ranks)
    used = (omp + workers) * ranks
    assert finding.status is status
    cores = f"{cpus} physical core" + ("" if cpus == 1 else "s")  # a snapshot without a recorded topology: each CPU is a core
    assert finding.summary == f"{ranks} ranks x (OMP_NUM_THREADS={omp} + CCL_WORKER_COUNT={workers}) = {used} threads on {cores}"
    if status is Status.FAIL:
        assert finding.fix.startswith(f"export OMP_NUM_THREADS={max(1, cpus // ranks - workers)}   (for {ranks} ranks on {cores};")


def test_more_ranks_than_cpus_at_one_thread_each_is_a_warning_with_fewer_ranks(matrix):
    snap = snapshot(cpus=2, env={"OMP_NUM_THREADS": "1", "CCL_WORKER_COUNT": "1"})
    finding = run(matrix, runtime.threads, snap, ranks_per_node=2)
    assert finding.status is Status.WARN
    assert finding.summary == "2 ranks x (OMP_NUM_THREADS=1 + CCL_WORKER_COUNT=1) = 4 threads on 2 physical cores: more ranks than physical cores can carry even at one thread each"
    assert finding.fix.startswith("Start fewer ranks per node (at most 1 here)")


def test_a_cgroup_quota_is_what_counts(matrix):
    # docker run --cpus=4 on a 64-core node: the affinity says 64, the quota 4
    snap = snapshot(cpus=_effective_cpus(64, 4.0), quota=4.0, env={"OMP_NUM_THREADS": "8", "CCL_WORKER_COUNT": "0"})
    finding = run(matrix, runtime.threads, snap, ranks_per_node=1)
    assert finding.status is Status.FAIL and finding.summary.endswith("= 8 threads on 4 physical cores")
    assert "4 physical cores allowed for this process (cgroup quota 4)" in finding.evidence


# --- runtime.shm -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size, status, summary", [
    (64 << 20, Status.WARN, "/dev/shm is only 64 MiB"),  # Docker's default
    ((1 << 30) - 1, Status.WARN, "/dev/shm is only 1024 MiB"),
    (1 << 30, Status.PASS, "/dev/shm is 1.0 GiB"),
    (32 << 30, Status.PASS, "/dev/shm is 32.0 GiB"),
    (None, Status.WARN, "/dev/shm does not exist"),
])
def test_shm_size(matrix, size, status, summary):
    finding = run(matrix, runtime.shm, snapshot(shm=size))
    assert finding.status is status and finding.summary == summary
    if status is Status.WARN:
        assert "docker run --shm-size" in finding.fix or "tmpfs" in finding.fix


# --- runtime.ld-preload and compat env's LD_PRELOAD: both sides of "an allocator library exists here" ----------------


def fake_libraries(tmp_path: Path) -> dict:
    libs = {}
    for kind, name in (("tcmalloc", "libtcmalloc.so.4"), ("jemalloc", "libjemalloc.so.2"), ("iomp5", "libiomp5.so")):
        path = tmp_path / "lib" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"\x7fELF FIXTURE")
        libs[kind] = [path]
    return libs


NONE_FOUND = {"tcmalloc": [], "jemalloc": [], "iomp5": []}


def test_ld_preload_check_with_and_without_allocators_on_the_machine(matrix, tmp_path, monkeypatch):
    libs = fake_libraries(tmp_path)
    broken = {"LD_PRELOAD": str(tmp_path / "missing" / "libtcmalloc.so.4")}
    monkeypatch.setattr(runtime, "preload_candidates", lambda prefix: libs)
    unset = run(matrix, runtime.ld_preload, snapshot())
    assert unset.status is Status.PASS and f"available: {libs['tcmalloc'][0]}" in unset.evidence
    failed = run(matrix, runtime.ld_preload, snapshot(env=broken))
    assert failed.status is Status.FAIL and failed.fix.startswith(f"export LD_PRELOAD={libs['tcmalloc'][0]}:{libs['jemalloc'][0]}")
    monkeypatch.setattr(runtime, "preload_candidates", lambda prefix: NONE_FOUND)
    unset = run(matrix, runtime.ld_preload, snapshot())
    assert unset.status is Status.PASS and unset.evidence == ("no tcmalloc, jemalloc or libiomp5 found on this machine",)
    failed = run(matrix, runtime.ld_preload, snapshot(env=broken))
    assert failed.status is Status.FAIL and failed.fix.startswith("unset LD_PRELOAD, or install tcmalloc")


@pytest.fixture
def bindings_context(matrix, tmp_path):
    """A FIXTURE environment with the bindings and their setvars.sh, probed for real."""
    from compatmatrix.environment.snapshot import take_snapshot

    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env", sys.executable).torch("2.7.0").bindings("2.7.0")
    return Context(matrix, take_snapshot(str(env.python)))


def test_compat_env_exports_ld_preload_only_for_libraries_that_exist(bindings_context, tmp_path, monkeypatch):
    from compatmatrix import shell_env
    from compatmatrix.shell import format_env

    libs = fake_libraries(tmp_path)
    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: libs)
    plan = shell_env.plan_env(bindings_context, 1)
    assert plan.exports["LD_PRELOAD"] == f"{libs['tcmalloc'][0]}:{libs['iomp5'][0]}"  # one allocator (tcmalloc first) + OpenMP
    assert any(c.startswith("LD_PRELOAD: allocator / OpenMP libraries found") for c in plan.comments)
    only_jemalloc = {**NONE_FOUND, "jemalloc": libs["jemalloc"]}
    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: only_jemalloc)
    assert shell_env.plan_env(bindings_context, 1).exports["LD_PRELOAD"] == str(libs["jemalloc"][0])
    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: NONE_FOUND)
    plan = shell_env.plan_env(bindings_context, 1)
    assert "LD_PRELOAD" not in plan.exports
    assert "LD_PRELOAD: no tcmalloc, jemalloc or libiomp5 found on this machine; none set" in plan.comments
    assert "export LD_PRELOAD" not in format_env(plan, "bash")


@pytest.mark.parametrize("cpus, ranks, omp", [(1, 1, 1), (1, 2, 1), (2, 2, 1), (64, 2, 31), (64, 1, 63)])
def test_compat_env_threads_follow_the_allowed_cpus(bindings_context, monkeypatch, cpus, ranks, omp):
    from compatmatrix import shell_env

    monkeypatch.setattr(shell_env, "preload_candidates", lambda prefix: NONE_FOUND)
    # raw={}: no recorded topology, so the plan counts the snapshot's allowed CPUs as cores (tests/launchers/test_placement.py has real topologies)
    context = dataclasses.replace(bindings_context, snapshot=dataclasses.replace(bindings_context.snapshot, allowed_cpus=cpus, raw={}), cache={})
    plan = shell_env.plan_env(context, ranks)
    assert plan.exports["CCL_WORKER_COUNT"] == "1" and plan.exports["OMP_NUM_THREADS"] == str(omp)


# --- the allocator libraries: one listing per folder, the glob's answer ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(name=st.one_of(st.sampled_from(["libtcmalloc.so", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4.5", "libjemalloc.so.2", "libiomp5.so",
                                       "libiomp5.so.1", "libjemalloc.so", "libtcmalloc", "xlibiomp5.so"]), st.text(min_size=1, max_size=30)))
def test_a_library_name_matches_the_first_pattern_glob_would_match(name):
    import fnmatch

    from compatmatrix.environment.libraries import ALLOCATOR_PATTERNS, _pattern_of

    expected = next((i for i, pattern in enumerate(ALLOCATOR_PATTERNS) if fnmatch.fnmatchcase(name, pattern)), -1)
    assert _pattern_of(name) == expected


def test_preload_candidates_list_a_folder_as_the_globs_did(tmp_path):
    from compatmatrix.environment.libraries import ALLOCATOR_PATTERNS, is_elf, preload_candidates

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libjemalloc.so.2", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so", "libiomp5.so", "libiomp5.so.1", "notes.txt"):
        (lib / name).write_bytes(b"\x7fELF" + name.encode())
    (lib / "libjemalloc.so.1").write_bytes(b"not elf")
    globbed = [p for pattern in ALLOCATOR_PATTERNS for p in sorted(lib.glob(pattern)) if is_elf(p)]
    found = [p for paths in preload_candidates(str(tmp_path)).values() for p in paths if p.parent == lib]
    assert sorted(found) == sorted(globbed)
    kinds = preload_candidates(str(tmp_path))
    assert [p.name for p in kinds["tcmalloc"] if p.parent == lib] == ["libtcmalloc.so", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4"]
    assert [p.name for p in kinds["iomp5"] if p.parent == lib] == ["libiomp5.so"]


def test_without_the_bindings_the_thread_summary_speaks_of_no_oneccl_worker(matrix):
    """Issue 31: the old summary said 'OMP_NUM_THREADS=1 + CCL_WORKER_COUNT=0' in an environment where no oneCCL worker can run."""
    finding = run(matrix, runtime.threads, snapshot(cpus=2, env={"OMP_NUM_THREADS": "1"}), ranks_per_node=2)
    assert finding.status is Status.PASS and finding.summary == "2 ranks x OMP_NUM_THREADS=1 = 2 threads on 2 physical cores", finding
    assert "CCL" not in " ".join((finding.summary, finding.fix, *finding.evidence)) and "oneCCL" not in " ".join(finding.evidence)


def test_with_the_bindings_and_too_few_cores_the_advice_is_launchs_automatic_choice(matrix):
    """2 ranks on 2 cores with the bindings: compat launch sets no core aside (and keeps CCL_WORKER_COUNT=1); the old
    advice kept a worker core per rank and told the doctor's reader to 'Pass --ccl-workers 0', a launch flag."""
    finding = run(matrix, runtime.threads, snapshot(cpus=2, distributions=(CCL,)), ranks_per_node=2)
    text = " ".join((finding.summary, finding.fix, *finding.evidence))
    assert "--ccl-workers" not in text and "oneCCL worker core each" not in text, finding
    assert finding.fix.startswith("export OMP_NUM_THREADS=1 CCL_WORKER_COUNT=1   (for 2 ranks on 2 physical cores;"), finding.fix
    assert any("no core is set aside for oneCCL workers" in e for e in finding.evidence), finding.evidence


def test_an_explicit_ccl_workers_0_without_the_bindings_speaks_of_no_oneccl_worker():
    from compatmatrix.placement.environment import Preload, environment_notes
    from compatmatrix.placement.plan import plan_ranks
    from compatmatrix.placement.topology import machine_from_snapshot

    plan = plan_ranks(machine_from_snapshot(snapshot(cpus=4)), 2, 0)
    notes = environment_notes(plan, Preload((), None, False), {}, workers_asked=True, ccl=False)
    assert not [n for n in notes if "worker" in n.replace("--ccl-workers", "")], notes  # the old note: "oneCCL's worker (1 by default) shares its rank's CPUs"
    assert "--ccl-workers 0: nothing set aside (no oneCCL bindings in this environment)" in notes
    with_ccl = environment_notes(plan, Preload((), None, False), {}, workers_asked=True, ccl=True)
    assert any(n.startswith("--ccl-workers 0: no cores set aside; oneCCL's worker") for n in with_ccl)
