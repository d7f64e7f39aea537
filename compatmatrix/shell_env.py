"""`compat env`: the exports that replace `python -c '... import cwd'` + `source setvars.sh`, plus runtime settings.

Side effects: none of its own; the setvars.sh it reads is sourced by checks/oneccl_env.py (a bash child).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .checks.finding import Context
from .checks.oneccl_env import find_bindings, setvars_fix, setvars_result
from .checks.runtime import preload_candidates, preload_entries
from .errors import CompatError

SHELLS = ("bash", "zsh", "fish")


@dataclass(frozen=True)
class EnvPlan:
    exports: Mapping[str, str]
    comments: tuple[str, ...]


def plan_env(ctx: Context, ranks_per_node: int) -> EnvPlan:
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
    candidates = preload_candidates(ctx.snapshot.prefix)
    preload = [str(candidates[k][0]) for k in ("tcmalloc", "jemalloc") if candidates[k]][:1] + [str(p) for p in candidates["iomp5"][:1]]
    current = [e for e in preload_entries(ctx.snapshot.env.get("LD_PRELOAD", "")) if Path(e).is_file()]
    preload_all = list(dict.fromkeys(preload + current))
    if preload_all:
        exports["LD_PRELOAD"] = ":".join(preload_all)
        comments.append("LD_PRELOAD: allocator / OpenMP libraries found on this machine (only paths that exist)")
    else:
        comments.append("LD_PRELOAD: no tcmalloc, jemalloc or libiomp5 found on this machine; none set")
    workers = ctx.snapshot.env.get("CCL_WORKER_COUNT", "1")
    try:
        worker_count = max(0, int(workers))
    except ValueError:
        worker_count = 1
    cpus = ctx.snapshot.allowed_cpus
    exports["CCL_WORKER_COUNT"] = str(worker_count)
    exports["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, ranks_per_node) - worker_count))
    comments.append(f"threads: {cpus} CPUs allowed, {ranks_per_node} ranks per node, {worker_count} oneCCL worker(s) per rank")
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
