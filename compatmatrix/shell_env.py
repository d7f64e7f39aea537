"""`compat env`: the exports that replace `python -c '... import cwd'` + `source setvars.sh`, plus runtime settings.

The oneCCL environment and the launcher's needs are launchers/environment.py's (the one computation compat launch and
compat check share); this command adds the node's thread settings and LD_PRELOAD, and shell.py writes the plan (path
lists as additions to the sourcing shell's value; with `--defaults` the other settings as defaults a value set at
sourcing time overrides). Without the oneCCL bindings (the stock profile, gloo) only LD_PRELOAD and the thread count are
printed.

Side effects: none of its own; those of launchers/environment.py (setvars.sh sourced in a bash child, ELF files read for
a system oneCCL, the interfaces read from /sys/class/net).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from .environment.facts import Facts
from .environment.interfaces import RouteFacts
from .environment.libraries import preload_candidates, preload_entries
from .launchers.environment import ccl_worker_count, launcher_env, oneccl_environment
from .placement.environment import choose_preload
from .placement.plan import thread_advice
from .placement.topology import machine_from_snapshot
from .shell import EnvPlan


def ccl_launch_env(ctx: Facts, launcher: Optional[str]) -> Optional[EnvPlan]:
    """What a launch of the ccl backend under ``launcher`` needs beyond the thread settings, as compat env --launcher
    prints it: the oneCCL environment, CCL_WORKER_COUNT (at least 1) and the launcher's needs; None without the bindings.
    compat translate's notes print it."""
    oneccl = oneccl_environment(ctx, launcher)
    if not oneccl.bindings:
        return None
    exports = {**oneccl.exports, "CCL_WORKER_COUNT": str(ccl_worker_count(ctx.snapshot.env)), **oneccl.launcher_exports}
    return EnvPlan(exports, oneccl.comments + oneccl.launcher_comments, dict(oneccl.additions))


def plan_env(ctx: Facts, ranks_per_node: int, launcher: Optional[str] = None, master_addr: Optional[str] = None, nnodes: int = 1,
             route: Optional[Callable[[str], RouteFacts]] = None, mpirun: Optional[str] = None) -> EnvPlan:
    """compat env's plan. ``master_addr`` (--master-addr, else $MASTER_ADDR) and ``nnodes``: the interface that reaches
    the master is exported for gloo, oneCCL and the launcher (``network_exports``); ``route``: how the master's way is
    asked (environment/interfaces.route_facts; a test passes its own facts); ``mpirun`` (--mpirun): the mpirun the job
    runs, whose MPI decides oneCCL's transport under --launcher mpirun."""
    shared = launcher_env(ctx, launcher, mpirun, master_addr, nnodes, route)  # the plan compat launch renders too
    oneccl = shared.oneccl
    exports = dict(oneccl.exports)
    additions = dict(oneccl.additions)
    comments = list(oneccl.comments)
    preload = choose_preload(preload_candidates(ctx.snapshot.prefix), preload_entries(ctx.snapshot.env.get("LD_PRELOAD", "")))
    if preload.paths:
        exports["LD_PRELOAD"] = ":".join(preload.paths)
        comments.append("LD_PRELOAD: allocator / OpenMP libraries found on this machine (only paths that exist)")
    else:
        comments.append("LD_PRELOAD: no tcmalloc, jemalloc or libiomp5 found on this machine; none set")
    worker_count = ccl_worker_count(ctx.snapshot.env) if oneccl.bindings else 0
    # the same plan compat launch binds by and runtime.threads checks against: physical cores, not hyperthreads
    advice = thread_advice(machine_from_snapshot(ctx.snapshot), ranks_per_node, worker_count)
    if advice.problem and oneccl.bindings and "CCL_WORKER_COUNT" not in ctx.snapshot.env:  # compat launch's automatic choice
        advice = thread_advice(machine_from_snapshot(ctx.snapshot), ranks_per_node, 0)
        comments.append(f"threads: no core is set aside for oneCCL workers: {ranks_per_node} ranks leave none on {advice.cores} physical cores "
                        "(as compat launch chooses); each rank's worker shares its cores")
    if oneccl.bindings:
        exports["CCL_WORKER_COUNT"] = str(worker_count)  # at least 1, with or without a core set aside (ccl_worker_count)
    exports["OMP_NUM_THREADS"] = str(advice.omp_threads)
    hyper = f" ({advice.cpus} CPUs with hyperthreads)" if advice.cpus != advice.cores else ""
    workers = f", {worker_count} oneCCL worker(s) per rank" if oneccl.bindings else ""
    comments.append(f"threads: {advice.cores} physical cores{hyper} allowed, {ranks_per_node} ranks per node{workers}")
    if advice.problem:
        comments.append(f"threads: {advice.problem} The ranks will share cores; compat launch says what fits.")
    comments.append("no per-rank binding here (the same values for every rank): compat launch binds each rank to its own cores")
    exports.update(shared.exports)
    comments += shared.comments
    return EnvPlan(exports, tuple(comments), additions)
