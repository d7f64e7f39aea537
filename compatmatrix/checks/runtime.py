"""Runtime settings: LD_PRELOAD, threads per rank against the CPUs allowed, CPU features, /dev/shm."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .finding import Context, Finding, Status, check

ALLOCATOR_PATTERNS = ("libtcmalloc.so*", "libtcmalloc_minimal.so*", "libjemalloc.so*", "libiomp5.so")
SMALL_SHM = 1 << 30  # 1 GiB; Docker's default is 64 MiB


def library_dirs(prefix: str) -> list[Path]:
    dirs = [Path(prefix) / "lib", Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib")]
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        dirs.insert(0, Path(conda) / "lib")
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def preload_candidates(prefix: str) -> dict[str, list[Path]]:
    """Real allocator / OpenMP libraries on this machine, by kind (tcmalloc, jemalloc, iomp5)."""
    found: dict[str, list[Path]] = {"tcmalloc": [], "jemalloc": [], "iomp5": []}
    for directory in library_dirs(prefix):
        for pattern in ALLOCATOR_PATTERNS:
            for path in sorted(directory.glob(pattern)):
                if is_elf(path):
                    kind = "tcmalloc" if "tcmalloc" in path.name else "jemalloc" if "jemalloc" in path.name else "iomp5"
                    found[kind].append(path)
    return found


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def preload_entries(value: str) -> list[str]:
    return [e for e in re.split(r"[:\s]+", value) if e]


@check("runtime.ld-preload", "every LD_PRELOAD entry exists and is a shared library")
def ld_preload(ctx: Context) -> Finding:
    cid = "runtime.ld-preload"
    value = ctx.snapshot.env.get("LD_PRELOAD", "")
    candidates = preload_candidates(ctx.snapshot.prefix)
    found = [str(p) for paths in candidates.values() for p in paths[:2]]
    if not value:
        evidence = tuple(f"available: {p}" for p in found) or ("no tcmalloc, jemalloc or libiomp5 found on this machine",)
        return Finding(cid, Status.PASS, "LD_PRELOAD is not set", evidence)
    bad = []
    for entry in preload_entries(value):
        path = Path(entry)
        if not path.exists():
            bad.append(f"{entry} does not exist")
        elif not is_elf(path):
            bad.append(f"{entry} is not an ELF shared library")
    if not bad:
        return Finding(cid, Status.PASS, f"LD_PRELOAD: {value}")
    if found:
        fix = f"export LD_PRELOAD={':'.join(found[:2])}   (libraries found on this machine; compat env prints this)"
    else:
        fix = "unset LD_PRELOAD, or install tcmalloc (apt-get install libgoogle-perftools4) and libiomp5 (pip install intel-openmp)"
    return Finding(cid, Status.FAIL, bad[0], tuple(bad[1:]) + tuple(f"available: {p}" for p in found), fix)


def _int_env(ctx: Context, key: str):
    value = ctx.snapshot.env.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value


@check("runtime.threads", "OMP_NUM_THREADS x ranks and CCL_WORKER_COUNT fit the CPUs this process may use")
def threads(ctx: Context) -> Finding:
    cid = "runtime.threads"
    cpus = ctx.snapshot.allowed_cpus
    ranks = max(1, ctx.options.ranks_per_node)
    omp = _int_env(ctx, "OMP_NUM_THREADS")
    workers = _int_env(ctx, "CCL_WORKER_COUNT")
    for key, value in (("OMP_NUM_THREADS", omp), ("CCL_WORKER_COUNT", workers)):
        if isinstance(value, str) or (isinstance(value, int) and value < (1 if key == "OMP_NUM_THREADS" else 0)):
            return Finding(cid, Status.FAIL, f"{key}={value} is not a valid count", fix=f"export {key}=<a whole number>")
    workers_n = workers if isinstance(workers, int) else 0
    recommended = max(1, cpus // ranks - workers_n)
    fix = f"export OMP_NUM_THREADS={recommended}" + ("" if workers is not None else " CCL_WORKER_COUNT=1") + f"   (for {ranks} ranks on {cpus} CPUs; compat env --ranks-per-node {ranks})"
    evidence = (f"{cpus} CPUs allowed for this process" + (f" (cgroup quota {ctx.snapshot.cgroup_quota:g})" if ctx.snapshot.cgroup_quota else ""), f"{ranks} ranks per node (--ranks-per-node)")
    if omp is None:
        if ranks > 1:
            return Finding(cid, Status.WARN, f"OMP_NUM_THREADS is not set: each of {ranks} ranks will start {cpus} threads on {cpus} CPUs", evidence, fix)
        return Finding(cid, Status.PASS, "OMP_NUM_THREADS is not set (one rank uses every allowed CPU)", evidence)
    assert isinstance(omp, int)
    used = (omp + workers_n) * ranks
    summary = f"{ranks} ranks x (OMP_NUM_THREADS={omp} + CCL_WORKER_COUNT={workers_n}) = {used} threads on {cpus} CPUs"
    if used > cpus and (1 + workers_n) * ranks > cpus and omp == 1:
        # no setting fits: this is already the least a rank can use
        return Finding(cid, Status.WARN, summary + ": more ranks than CPUs can carry even at one thread each", evidence,
                       f"Start fewer ranks per node (at most {max(1, cpus // (1 + workers_n))} here), or run on more CPUs.")
    if used > cpus:
        return Finding(cid, Status.FAIL, summary, evidence, fix)
    return Finding(cid, Status.PASS, summary, evidence)


@check("runtime.isa", "the CPU has what IPEX and bf16 need")
def isa(ctx: Context) -> Finding:
    from .packages import IPEX_NAMES

    cid = "runtime.isa"
    flags = ctx.snapshot.cpu.flags
    model = ctx.snapshot.cpu.model or "this CPU"
    evidence = (f"{model}: {', '.join(sorted(flags)) or 'no AVX2/AVX-512/AMX flags'}",)
    ipex = ctx.snapshot.get(*IPEX_NAMES)
    if ipex is not None and "avx2" not in flags:
        return Finding(cid, Status.FAIL, f"intel-extension-for-pytorch needs AVX2; {model} does not have it", evidence + ("importing IPEX ends with an illegal instruction (SIGILL)",),
                       "Run on a CPU with AVX2 (AVX-512 or AMX for bf16), or uninstall IPEX and use stock PyTorch.")
    bf16_native = bool(flags & {"avx512_bf16", "amx_bf16"})
    if ctx.options.bf16 and not bf16_native:
        return Finding(cid, Status.WARN, f"bf16 was asked for, but {model} has no avx512_bf16 or amx_bf16: bf16 will be emulated and slow", evidence, "Train in fp32 here (drop --bf16), or use a CPU with AVX512-BF16 / AMX (Cooper Lake, Sapphire Rapids or newer).")
    summary = "native bf16 (" + ", ".join(sorted(flags & {"avx512_bf16", "amx_bf16"})) + ")" if bf16_native else "AVX2" + (" and AVX-512" if "avx512f" in flags else "") + ", no native bf16"
    return Finding(cid, Status.PASS, summary, evidence)


@check("runtime.shm", "/dev/shm is large enough for multi-process data loading and collectives")
def shm(ctx: Context) -> Finding:
    cid = "runtime.shm"
    size = ctx.snapshot.shm_bytes
    if size is None:
        return Finding(cid, Status.WARN, "/dev/shm does not exist", fix="Mount a tmpfs on /dev/shm (Kubernetes: an emptyDir with medium: Memory).")
    text = f"{size / (1 << 30):.1f} GiB" if size >= (1 << 30) else f"{size / (1 << 20):.0f} MiB"
    if size < SMALL_SHM:
        return Finding(cid, Status.WARN, f"/dev/shm is only {text}", ("Docker's default is 64 MiB; DataLoader workers and shared-memory transports need more",),
                       "docker run --shm-size=8g ...; Kubernetes: mount an emptyDir with medium: Memory on /dev/shm (as in the PyTorchJob example).")
    return Finding(cid, Status.PASS, f"/dev/shm is {text}")
