"""Runtime settings: LD_PRELOAD, threads per rank against the CPUs allowed, CPU features, /dev/shm.

Side effects: reads files (library folders, the first bytes of LD_PRELOAD entries); nothing else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

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


_THREAD_LIST = re.compile(r"^\s*\+?[0-9]+\s*(,\s*\+?[0-9]+\s*)*$")


def first_level_threads(value: str) -> Optional[int]:
    """OMP_NUM_THREADS as OpenMP reads it: a positive count, or a comma-separated list of them, one per nesting
    level (``4,2``); the first level is what each rank starts. None when OpenMP would not accept it."""
    if not _THREAD_LIST.fullmatch(value):
        return None
    levels = [int(part) for part in value.split(",")]
    return levels[0] if all(level >= 1 for level in levels) else None


def _worker_count(value: str) -> Optional[int]:
    """CCL_WORKER_COUNT: a whole number, 0 or more."""
    text = value.strip()
    return int(text) if re.fullmatch(r"\+?[0-9]+", text) else None


def _bad_count(key: str, value: str) -> Finding:
    if key == "OMP_NUM_THREADS":
        summary = f"OMP_NUM_THREADS={value!r} is not a thread count: OpenMP takes a whole number above 0, or a comma-separated list of them for nested levels (4,2)"
    else:
        summary = f"CCL_WORKER_COUNT={value!r} is not a worker count: oneCCL takes a whole number, 0 or more"
    return Finding("runtime.threads", Status.FAIL, summary, fix=f"export {key}=<a whole number>   (compat env prints the value for this machine)")


@check("runtime.threads", "OMP_NUM_THREADS x ranks and CCL_WORKER_COUNT fit the CPUs this process may use")
def threads(ctx: Context) -> Finding:
    cid = "runtime.threads"
    cpus = ctx.snapshot.allowed_cpus
    ranks = max(1, ctx.options.ranks_per_node)
    omp_text = ctx.snapshot.env.get("OMP_NUM_THREADS")
    workers_text = ctx.snapshot.env.get("CCL_WORKER_COUNT")
    omp = first_level_threads(omp_text) if omp_text is not None else None
    workers = _worker_count(workers_text) if workers_text is not None else None
    if omp_text is not None and omp is None:
        return _bad_count("OMP_NUM_THREADS", omp_text)
    if workers_text is not None and workers is None:
        return _bad_count("CCL_WORKER_COUNT", workers_text)
    workers_n = workers if isinstance(workers, int) else 0
    recommended = max(1, cpus // ranks - workers_n)
    fix = f"export OMP_NUM_THREADS={recommended}" + ("" if workers is not None else " CCL_WORKER_COUNT=1") + f"   (for {ranks} ranks on {cpus} CPUs; compat env --ranks-per-node {ranks})"
    evidence = (f"{cpus} CPUs allowed for this process" + (f" (cgroup quota {ctx.snapshot.cgroup_quota:g})" if ctx.snapshot.cgroup_quota else ""), f"{ranks} ranks per node (--ranks-per-node)")
    if omp is None:
        if ranks > 1:
            return Finding(cid, Status.WARN, f"OMP_NUM_THREADS is not set: each of {ranks} ranks will start {cpus} threads on {cpus} CPUs", evidence, fix)
        return Finding(cid, Status.PASS, "OMP_NUM_THREADS is not set (one rank uses every allowed CPU)", evidence)
    used = (omp + workers_n) * ranks
    if omp_text is not None and "," in omp_text:
        evidence += (f"OMP_NUM_THREADS={omp_text.strip()} sets nested levels: each rank starts {omp} threads at the first level",)
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
    return Finding(cid, Status.PASS, isa_summary(flags), evidence)


def isa_summary(flags) -> str:
    """What the CPU has, in words: native bf16 (which), else its widest vector ISA, and no native bf16."""
    native = sorted(set(flags) & {"avx512_bf16", "amx_bf16"})
    if native:
        return f"native bf16 ({', '.join(native)})"
    vectors = [name for flag, name in (("avx2", "AVX2"), ("avx512f", "AVX-512")) if flag in flags]
    return (" and ".join(vectors) if vectors else "no AVX2 or AVX-512") + ", no native bf16"


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
