"""A launch plan as text (comments, exports, the one-line command: ``eval`` runs it) and as the versioned JSON
document of ``compat launch --print --json`` (compatmatrix/schemas/launch-v1.json).

Side effects: none.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..launchers.interface import Invocation
from .plan import Plan, RankPlacement
from .topology import cpu_list_text, plural

SCHEMA_VERSION = 1


def _rank_line(rank: RankPlacement, plan: Plan) -> str:
    where = f"NUMA node {rank.numa_node}" if rank.numa_node is not None else (
        f"NUMA nodes {', '.join(map(str, rank.nodes))}" if rank.nodes else f"socket {', '.join(map(str, rank.packages))}")
    cpus = "CPU" if len(rank.cpus) == 1 else "CPUs"
    text = f"rank {rank.local_rank}: {cpus} {cpu_list_text(rank.cpus)} ({where}), {plural(plan.omp_threads, 'OpenMP thread')}"
    if rank.worker_cpus:
        text += f", oneCCL {'workers on CPUs' if len(rank.worker_cpus) > 1 else 'worker on CPU'} {cpu_list_text(rank.worker_cpus)}"
    return text


def summary_lines(plan: Plan, invocation: Invocation, notes: Sequence[str]) -> list[str]:
    lines = [f"{plural(len(plan.ranks), 'rank')} on {plan.machine.describe()}; bound by {invocation.binding}"]
    lines += [_rank_line(rank, plan) for rank in plan.ranks]
    lines += [f"note: {note}" for note in notes]
    return lines


def launch_text(plan: Plan, invocation: Invocation, notes: Sequence[str]) -> str:
    lines = [f"# {line}" for line in summary_lines(plan, invocation, notes)]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in invocation.env.items()]
    if invocation.additions:
        from ..environment.setvars import PathAddition
        from ..shell import sh_addition

        for name, added in invocation.additions.items():  # joined to the value the shell has: never a PATH written out whole
            lines += sh_addition(name, PathAddition(added.prepend, added.append))
    lines.append(invocation.shell_line())
    return "\n".join(lines) + "\n"


def launch_json(plan: Plan, invocation: Invocation, rank_env: Mapping[str, str], notes: Sequence[str]) -> dict[str, Any]:
    machine = plan.machine
    topology = machine.topology
    nodes: dict[int, list[int]] = {}
    for core in topology.cores:
        if core.node is not None:
            nodes.setdefault(core.node, []).extend(core.threads)
    return {
        "schema_version": SCHEMA_VERSION,
        "launcher": invocation.launcher,
        "flavor": invocation.flavor,
        "binding": invocation.binding,
        "nproc_per_node": len(plan.ranks),
        "omp_num_threads": plan.omp_threads,
        "ccl_workers": plan.ccl_workers,
        "ranks": [
            {"rank": rank.local_rank, "cpus": list(rank.cpus), "ccl_worker_cpus": list(rank.worker_cpus), "numa_node": rank.numa_node,
             "numa_nodes": list(rank.nodes), "sockets": list(rank.packages), "env": dict(rank_env)}
            for rank in plan.ranks
        ],
        "command": list(invocation.argv),
        "env": dict(invocation.env),
        "additions": {name: {"prepend": list(added.prepend), "append": list(added.append)} for name, added in invocation.additions.items()},
        "topology": {
            "source": topology.source,
            "sockets": len(topology.packages),
            "numa_nodes": [{"node": node, "cpus": sorted(cpus)} for node, cpus in sorted(nodes.items())],
            "physical_cores": len(topology.cores),
            "cpus": len(topology.cpus),
            "threads_per_core": topology.threads_per_core,
            "allowed_cpus": sorted(machine.affinity),
            "cgroup_quota": machine.quota,
            "usable_physical_cores": len(machine.usable_cores),
            "core_budget": machine.core_budget,
            "spread_over": plan.domain,
        },
        "notes": list(notes),
    }
