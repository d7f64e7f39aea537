"""`compat env`: the exports that replace `python -c '... import cwd'` + `source setvars.sh`, plus runtime settings.

Side effects: none of its own; the setvars.sh it reads is sourced by checks/oneccl_env.py (a bash child).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .checks.finding import Context
from .checks.oneccl_env import find_bindings, setvars_fix, setvars_result
from .checks.runtime import preload_candidates, preload_entries
from .errors import CompatError
from .placement.environment import choose_preload
from .placement.plan import thread_advice
from .placement.topology import machine_from_snapshot

SHELLS = ("bash", "zsh", "fish")


@dataclass(frozen=True)
class EnvPlan:
    exports: Mapping[str, str]
    comments: tuple[str, ...]


def plan_env(ctx: Context, ranks_per_node: int, launcher: Optional[str] = None) -> EnvPlan:
    bindings = find_bindings(ctx)
    if bindings is None:
        raise CompatError(
            f"The oneCCL bindings (oneccl_bindings_for_pytorch / torch_ccl) are not installed for {ctx.snapshot.executable}.",
            "Install the oneccl_bind_pt built for your torch (compat resolve torch==<your torch> ccl names it and its index), or pass --python.",
        )
    result = setvars_result(ctx)
    assert result is not None
    if not result.ok:  # no half environment to eval: exit 2 with the reason and the script's last words
        said = f" (it said: {' | '.join(result.output[-2:])})" if result.output else ""
        raise CompatError(f"The bindings' setvars.sh cannot be used: {result.error}{said}.", setvars_fix(result.path))
    exports = dict(result.exports)
    comments = [f"oneCCL environment from {result.path} ({bindings.module})"]
    preload = choose_preload(preload_candidates(ctx.snapshot.prefix), preload_entries(ctx.snapshot.env.get("LD_PRELOAD", "")))
    if preload.paths:
        exports["LD_PRELOAD"] = ":".join(preload.paths)
        comments.append("LD_PRELOAD: allocator / OpenMP libraries found on this machine (only paths that exist)")
    else:
        comments.append("LD_PRELOAD: no tcmalloc, jemalloc or libiomp5 found on this machine; none set")
    workers = ctx.snapshot.env.get("CCL_WORKER_COUNT", "1")
    try:
        worker_count = max(0, int(workers))
    except ValueError:
        worker_count = 1
    # the same plan compat launch binds by and runtime.threads checks against: physical cores, not hyperthreads
    advice = thread_advice(machine_from_snapshot(ctx.snapshot), ranks_per_node, worker_count)
    exports["CCL_WORKER_COUNT"] = str(advice.ccl_workers)
    exports["OMP_NUM_THREADS"] = str(advice.omp_threads)
    hyper = f" ({advice.cpus} CPUs with hyperthreads)" if advice.cpus != advice.cores else ""
    comments.append(f"threads: {advice.cores} physical cores{hyper} allowed, {ranks_per_node} ranks per node, {worker_count} oneCCL worker(s) per rank")
    if advice.problem:
        comments.append(f"threads: {advice.problem} The ranks will share cores; compat launch says what fits.")
    comments.append("no per-rank binding here (the same values for every rank): compat launch binds each rank to its own cores")
    if launcher:
        extra, said = launcher_exports(launcher, exports, ctx.snapshot.env, bindings.directory, up_interfaces())
        exports.update(extra)
        comments += said
    return EnvPlan(exports, tuple(comments))


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_env(plan: EnvPlan, shell: str) -> str:
    lines = [f"# {c}" for c in plan.comments]
    for key, value in plan.exports.items():
        if shell == "fish":
            if key == "PATH":
                lines.append("set -gx PATH " + " ".join(_fish_quote(p) for p in value.split(":") if p))
            else:
                lines.append(f"set -gx {key} {_fish_quote(value)}")
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


LAUNCHERS = ("torchrun", "spawn", "mpirun")


def up_interfaces(sys_net: str = "/sys/class/net") -> list[str]:
    """Network interfaces that are up here (loopback's state is 'unknown'), by name."""
    found = []
    for entry in sorted(Path(sys_net).iterdir()) if Path(sys_net).is_dir() else []:
        try:
            state = (entry / "operstate").read_text().strip()
        except OSError:
            continue
        if state in ("up", "unknown"):
            found.append(entry.name)
    return found


def launcher_exports(launcher: str, exports: Mapping[str, str], env: Mapping[str, str], bindings_dir: Path,
                     interfaces: list[str]) -> tuple[dict[str, str], list[str]]:
    """What a launch of the ccl backend needs on top of setvars.sh. oneCCL's default transport is MPI (CCL_ATL_TRANSPORT=mpi),
    which needs an MPI launcher: without one (torchrun, a script that spawns its ranks) every rank fails "failed to initialize
    ATL", so such launches take the libfabric transport (ofi), which loads its providers from FI_PROVIDER_PATH and finds the
    other ranks through oneCCL's key-value store on an interface it picks (CCL_KVS_IFACE)."""
    if launcher == "mpirun":
        return {}, [f"launcher mpirun: oneCCL's default MPI transport works under it (CCL_ATL_TRANSPORT={env.get('CCL_ATL_TRANSPORT', 'mpi')}); nothing added"]
    extra = {"CCL_ATL_TRANSPORT": "ofi"}
    said = [f"launcher {launcher}: CCL_ATL_TRANSPORT=ofi, because oneCCL's MPI transport needs an MPI launcher (\"failed to initialize ATL\" otherwise)"]
    provider = exports.get("FI_PROVIDER_PATH") or env.get("FI_PROVIDER_PATH")
    if not provider:
        found = sorted(str(p) for p in bindings_dir.glob("**/libfabric/lib/prov") if p.is_dir())
        provider = found[0] if found else ""
    if provider:
        extra["FI_PROVIDER_PATH"] = provider
        said.append("FI_PROVIDER_PATH: the libfabric providers of the bindings' setvars environment (ofi loads them from there)")
    else:
        said.append("FI_PROVIDER_PATH: no libfabric provider folder found in the bindings; ofi falls back to the system's providers")
    others = [name for name in interfaces if name != "lo"]
    if not others:
        extra["CCL_KVS_IFACE"] = "lo"
        said.append("CCL_KVS_IFACE=lo: lo is the only interface that is up here (oneCCL's key-value store finds no other)")
    else:
        said.append(f"CCL_KVS_IFACE, FI_TCP_IFACE: not set; on several hosts set both to the interface that reaches the others ({', '.join(others)})")
    return extra, said
