"""Runtime settings: LD_PRELOAD, threads per rank against the CPUs allowed, CPU features, /dev/shm.

Side effects: reads files (library folders, the first bytes of LD_PRELOAD entries: environment/libraries.py); nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from ..environment.libraries import is_elf, preload_candidates, preload_entries
from ..environment.snapshot import NATIVE_BF16_FLAGS
from ..findings import Finding, Status
from .registry import Context, check

SMALL_SHM = 1 << 30  # 1 GiB; Docker's default is 64 MiB


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
        from .oneccl_env import env_command

        fix = f"export LD_PRELOAD={':'.join(found[:2])}   (libraries found on this machine; {env_command(ctx)} sets it)"
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


def _bad_count(key: str, value: str, ctx: Context) -> Finding:
    if key == "OMP_NUM_THREADS":
        summary = f"OMP_NUM_THREADS={value!r} is not a thread count: OpenMP takes a whole number above 0, or a comma-separated list of them for nested levels (4,2)"
    else:
        summary = f"CCL_WORKER_COUNT={value!r} is not a worker count: oneCCL takes a whole number, 0 or more"
    from .oneccl_env import env_command

    return Finding("runtime.threads", Status.FAIL, summary, fix=f"export {key}=<a whole number>   ({env_command(ctx)} sets the value for this machine)")


@check("runtime.threads", "OMP_NUM_THREADS x ranks and CCL_WORKER_COUNT fit the physical cores this process may use")
def threads(ctx: Context) -> Finding:
    """Counted in physical cores, not hyperthreads, against the same plan compat launch binds by (placement/plan.py)."""
    from ..placement.topology import machine_from_snapshot
    from .packages import CCL_NAMES

    ranks = max(1, ctx.options.ranks_per_node)
    omp_text = ctx.snapshot.env.get("OMP_NUM_THREADS")
    workers_text = ctx.snapshot.env.get("CCL_WORKER_COUNT")
    omp = first_level_threads(omp_text) if omp_text is not None else None
    workers = _worker_count(workers_text) if workers_text is not None else None
    if omp_text is not None and omp is None:
        return _bad_count("OMP_NUM_THREADS", omp_text, ctx)
    if workers_text is not None and workers is None:
        return _bad_count("CCL_WORKER_COUNT", workers_text, ctx)
    machine = machine_from_snapshot(ctx.snapshot)
    bindings = ctx.snapshot.get(*CCL_NAMES) is not None  # without them no oneCCL worker runs: no core is set aside, none advised
    advice, evidence = _thread_plan(ctx, machine, ranks, workers, bindings)
    fix = _threads_fix(advice, ranks, workers, bindings)
    if omp is None:
        return _omp_unset(machine, ranks, advice.cores, evidence, fix)
    return _threads_used(ranks, omp, omp_text or "", workers, bindings, advice, evidence, fix)


def _thread_plan(ctx: Context, machine, ranks: int, workers: Optional[int], bindings: bool):
    """(compat launch's thread advice for this machine, the evidence that says what it counted)."""
    from ..placement.plan import thread_advice
    from ..placement.topology import plural

    advice = thread_advice(machine, ranks, workers if workers is not None else (1 if bindings else 0))
    automatic = ""
    if workers is None and bindings and advice.problem:  # compat launch's automatic choice: no core aside where none is left
        advice = thread_advice(machine, ranks, 0)
        automatic = (f"no core is set aside for oneCCL workers: {plural(ranks, 'rank')} leave none on {plural(advice.cores, 'physical core')} "
                     "(as compat launch chooses; each rank's worker shares its cores)")
    hyper = f" ({advice.cpus} CPUs with hyperthreads)" if advice.cpus != advice.cores else ""
    evidence = (f"{plural(advice.cores, 'physical core')}{hyper} allowed for this process"
                + (f" (cgroup quota {ctx.snapshot.cgroup_quota:g})" if ctx.snapshot.cgroup_quota else ""), f"{ranks} ranks per node (--ranks-per-node)")
    return advice, evidence + tuple(e for e in (automatic, advice.problem) if e)


def _threads_fix(advice, ranks: int, workers: Optional[int], bindings: bool) -> str:
    from ..placement.topology import plural

    return (f"export OMP_NUM_THREADS={advice.omp_threads}" + ("" if workers is not None or not bindings else f" CCL_WORKER_COUNT={max(1, advice.ccl_workers)}")
            + f"   (for {ranks} ranks on {plural(advice.cores, 'physical core')}; compat launch --nproc-per-node {ranks} also binds each rank to its cores)")


def _omp_unset(machine, ranks: int, cores: int, evidence: tuple[str, ...], fix: str) -> Finding:
    from ..placement.topology import plural

    if ranks > 1:
        allowed = sum(len(core.threads) for core in machine.usable_cores)  # what OpenMP counts by default
        return Finding("runtime.threads", Status.WARN, f"OMP_NUM_THREADS is not set: each of {ranks} ranks will start {allowed} threads on {plural(cores, 'physical core')}"
                       " (under torchrun: 1 thread each)", evidence, fix)
    return Finding("runtime.threads", Status.PASS, "OMP_NUM_THREADS is not set (one rank uses every allowed CPU)", evidence)


def _threads_used(ranks: int, omp: int, omp_text: str, workers: Optional[int], bindings: bool, advice, evidence: tuple[str, ...], fix: str) -> Finding:
    """OMP_NUM_THREADS (and the oneCCL workers) times the ranks against the physical cores."""
    from ..placement.topology import plural

    cid, cores = "runtime.threads", advice.cores
    workers_n = workers if workers is not None else 0
    used = (omp + workers_n) * ranks
    if "," in omp_text:
        evidence += (f"OMP_NUM_THREADS={omp_text.strip()} sets nested levels: each rank starts {omp} threads at the first level",)
    threads_text = (f"(OMP_NUM_THREADS={omp} + CCL_WORKER_COUNT={workers_n})" if workers is not None or bindings
                    else f"OMP_NUM_THREADS={omp}")  # no bindings and no CCL_WORKER_COUNT: no oneCCL worker to speak of
    summary = f"{ranks} ranks x {threads_text} = {used} threads on {plural(cores, 'physical core')}"
    if used > cores and (1 + workers_n) * ranks > cores and omp == 1:
        # no setting fits: this is already the least a rank can use
        return Finding(cid, Status.WARN, summary + ": more ranks than physical cores can carry even at one thread each", evidence,
                       f"Start fewer ranks per node (at most {max(1, cores // (1 + workers_n))} here), or run on more cores.")
    if used > cores and used <= advice.cpus:
        return Finding(cid, Status.WARN, summary + f": the threads share cores with their hyperthread siblings ({advice.cpus} CPUs)", evidence, fix)
    if used > cores:
        return Finding(cid, Status.FAIL, summary, evidence, fix)
    return Finding(cid, Status.PASS, summary, evidence)


@check("runtime.isa", "the CPU has the instruction set the installed IPEX release needs, and what bf16 needs")
def isa(ctx: Context) -> Finding:
    """The installed IPEX release's own floor ([[ipex]] isa_min: AVX-512 for 1.10.x and 1.12.0, AVX2 otherwise), not one
    rule for every release; a release without a recorded floor is held to AVX2, the least any recorded release needs."""
    from ..devices import device_build
    from ..matrix.model import Component
    from ..sentences import isa_phrase, sources_text
    from .packages import IPEX_NAMES

    cid = "runtime.isa"
    flags = ctx.snapshot.cpu.flags
    model = ctx.snapshot.cpu.model or "this CPU"
    evidence = (f"{model}: {', '.join(sorted(flags)) or 'no AVX2/AVX-512/AMX flags'}",)
    ipex = ctx.snapshot.get(*IPEX_NAMES)
    if ipex is not None and ipex.version is not None and device_build(ctx.matrix, Component.IPEX, ipex.version) is None:
        release = ctx.matrix.ipex_release(ipex.public_version) if ipex.public_version is not None else None
        floor = release.isa_min if release is not None else None
        name = f"intel-extension-for-pytorch {ipex.public_version}"
        if floor is not None:
            missing = [f for f in floor.flags if f not in flags]
            if missing:
                why = (floor.provenance.note,) if floor.provenance.note else ()
                return Finding(cid, Status.FAIL, f"{name} {isa_phrase(floor)}; {model} lacks {', '.join(missing)}",
                               evidence + why + (f"source: {sources_text(floor.provenance.sources)}",), _isa_fix(ctx, floor.level))
        elif "avx2" not in flags:
            unknown = "is not in the matrix" if release is None else "has no recorded CPU floor"
            return Finding(cid, Status.WARN, f"{name} {unknown}, and {model} has no AVX2, the least any recorded IPEX release needs", evidence,
                           _isa_fix(ctx, "avx2"))
    bf16_native = bool(flags & NATIVE_BF16_FLAGS)
    if ctx.options.bf16 and not bf16_native:
        return Finding(cid, Status.WARN, f"bf16 was asked for, but {model} has no avx512_bf16 or amx_bf16: bf16 will be emulated and slow", evidence, "Train in fp32 here (drop --bf16), or use a CPU with AVX512-BF16 / AMX (Cooper Lake, Sapphire Rapids or newer).")
    return Finding(cid, Status.PASS, isa_summary(flags), evidence)


def _isa_fix(ctx: Context, level: str) -> str:
    """The newest IPEX release this CPU can run that pairs with the installed torch (by the matrix), else a general fix."""
    from ..matrix.model import ISA_FLAGS, ISA_NAMES, Component, IpexRelease
    from ..rules import fits

    flags = ctx.snapshot.cpu.flags
    dist = ctx.snapshot.get("torch")
    torch = dist.public_version if dist is not None else None
    runnable = [
        r for r in ctx.matrix.releases[Component.IPEX]
        if isinstance(r, IpexRelease) and r.isa_min is not None and all(f in flags for f in ISA_FLAGS[r.isa_min.level])
        and torch is not None and fits(Component.IPEX, r, r.version, Component.TORCH, torch)
        and any(w.has_python(ctx.snapshot.python_minor) for w in r.wheels)
    ]
    if runnable:
        best = max(runnable, key=lambda r: r.version)
        return f"pip install intel-extension-for-pytorch=={best.version} (runs on this CPU and pairs with torch {torch}), or run on a CPU with {ISA_NAMES[level]}."
    if level == "avx2":
        return "Run on a CPU with AVX2 (AVX-512 or AMX for bf16), or uninstall IPEX and use stock PyTorch."
    return "Run on a CPU with AVX-512, install a newer IPEX that needs only AVX2 (compat resolve shows one for your Python), or uninstall IPEX and use stock PyTorch."


def isa_summary(flags) -> str:
    """What the CPU has, in words: native bf16 (which), else its widest vector ISA, and no native bf16."""
    native = sorted(set(flags) & NATIVE_BF16_FLAGS)
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
