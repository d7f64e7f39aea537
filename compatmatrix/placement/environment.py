"""The environment every rank gets from a plan: OpenMP threads and binding, oneCCL workers and their cores, and
LD_PRELOAD of an allocator and Intel OpenMP, only of libraries that exist (found by environment/libraries.preload_candidates).

Side effects: none (the library search happens before, in the caller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from ..record import Record
from .plan import Plan
from .topology import cpu_list_text

# ipexrun's settings (intel_extension_for_pytorch/cpu/launch/launcher_base.py): Intel OpenMP binds thread i to the
# i-th core of the rank's mask; GNU OpenMP (torch's own libgomp) gets the standard OpenMP equivalent.
KMP_AFFINITY = "granularity=fine,compact,1,0"
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto"  # ipexrun's, for training


class Preload(Record):
    """What goes into LD_PRELOAD: one allocator (tcmalloc before jemalloc), Intel OpenMP, and the entries already
    in LD_PRELOAD that exist."""

    paths: tuple[str, ...]
    allocator: Optional[str]  # "tcmalloc", "jemalloc" or None
    iomp5: bool


def choose_preload(candidates: Mapping[str, Sequence[Path]], current: Sequence[str] = ()) -> Preload:
    """From environment/libraries.preload_candidates' answer (libraries on this machine, by kind) and the existing entries."""
    allocator = next((kind for kind in ("tcmalloc", "jemalloc") if candidates.get(kind)), None)
    chosen = [str(candidates[allocator][0])] if allocator else []
    iomp5 = bool(candidates.get("iomp5"))
    if iomp5:
        chosen.append(str(candidates["iomp5"][0]))
    kept = [entry for entry in current if Path(entry).is_file()]
    return Preload(tuple(dict.fromkeys(chosen + kept)), allocator, iomp5 or any(Path(e).name.startswith("libiomp5") for e in kept))


def launch_environment(plan: Plan, preload: Preload, ccl: bool = False) -> dict[str, str]:
    """The variables compat sets for every rank (the same for all: the per-rank part is the binding). ``ccl``: the
    oneCCL bindings are installed, so CCL_WORKER_COUNT is at least 1 even where no core is set aside for a worker
    (accelerate takes ccl only when CCL_WORKER_COUNT > 0: accelerate/state.py _prepare_backend)."""
    env = {"OMP_NUM_THREADS": str(plan.omp_threads)}
    if preload.iomp5:
        env["KMP_AFFINITY"] = KMP_AFFINITY
        env["KMP_BLOCKTIME"] = "1"
    else:
        env["OMP_PROC_BIND"] = "close"
        env["OMP_PLACES"] = "cores"
    if plan.ccl_workers:
        env["CCL_WORKER_COUNT"] = str(plan.ccl_workers)
        env["CCL_WORKER_AFFINITY"] = ",".join(str(cpu) for cpu in plan.worker_cpus)
    elif ccl:
        env["CCL_WORKER_COUNT"] = "1"  # its worker shares the rank's CPUs
    if preload.paths:
        env["LD_PRELOAD"] = ":".join(preload.paths)
    if preload.allocator == "jemalloc":
        env["MALLOC_CONF"] = JEMALLOC_CONF
    return env


def environment_notes(plan: Plan, preload: Preload, inherited: Mapping[str, str], workers_asked: bool, ccl: bool) -> tuple[str, ...]:
    """``workers_asked``: --ccl-workers was given (a plan without workers that nobody asked for, the automatic choice,
    is explained by the caller, never as "--ccl-workers 0"); ``ccl``: the oneCCL bindings are installed."""
    notes = []
    if preload.iomp5:
        notes.append(f"Intel OpenMP (libiomp5) is preloaded: KMP_AFFINITY={KMP_AFFINITY} binds OpenMP thread i to the i-th core of the rank's CPUs")
    else:
        notes.append("no libiomp5 on this machine: torch's GNU OpenMP binds its threads with OMP_PROC_BIND=close OMP_PLACES=cores")
    if preload.allocator is None:
        notes.append("no tcmalloc or jemalloc on this machine: the default allocator stays (apt-get install libgoogle-perftools4, or pip install intel-openmp for libiomp5)")
    if plan.ccl_workers:
        notes.append(f"oneCCL: {plan.ccl_workers} worker(s) per rank on CPUs {cpu_list_text(plan.worker_cpus)} (CCL_WORKER_AFFINITY lists local rank 0's first), outside the ranks' compute CPUs")
    elif workers_asked and ccl:
        notes.append("--ccl-workers 0: no cores set aside; oneCCL's worker (1 by default) shares its rank's CPUs")
    elif workers_asked:  # no bindings: no oneCCL worker runs, so there was nothing to set aside
        notes.append("--ccl-workers 0: nothing set aside (no oneCCL bindings in this environment)")
    if ccl and not plan.ccl_workers:
        notes.append("CCL_WORKER_COUNT=1 although no core is set aside: accelerate takes ccl only when CCL_WORKER_COUNT > 0 "
                     "(\"ValueError: Your assigned backend ccl is not available\" otherwise)")
    planned = launch_environment(plan, preload, ccl)
    for name in ("OMP_NUM_THREADS", "CCL_WORKER_COUNT", "KMP_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES"):
        if name in inherited and inherited[name] != planned.get(name, inherited[name]):
            notes.append(f"{name}={inherited[name]} from your environment is replaced by {planned[name]}")
    return tuple(notes)
