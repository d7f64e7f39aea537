"""Plan N ranks on one node: which physical cores each rank computes on, which cores its oneCCL workers get, how
many OpenMP threads it starts. The one source of the thread advice: ``compat launch`` binds by this plan, and
``compat doctor``'s runtime.threads and ``compat env`` quote its numbers.

Rules (as ipexrun did, physical cores only):
* Ranks are spread over the NUMA nodes (sockets when the kernel reports no nodes): each node gets ranks in
  proportion to its usable cores, and no rank straddles two nodes unless there are fewer ranks than nodes (then each
  rank takes a run of whole nodes).
* Every rank gets the same number of cores (DDP steps are synchronous: the slowest rank sets the pace); cores that
  do not divide evenly stay idle, and a note says so.
* One OpenMP thread per physical core: a core is used through its first allowed hyperthread, the siblings stay idle.
* The first ``ccl_workers`` cores of each rank's share run its oneCCL workers (CCL_WORKER_AFFINITY); the rest compute.
* A cgroup quota of Q CPUs caps the cores used at floor(Q).

Side effects: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..errors import CompatError
from ..record import Record
from .topology import Core, Machine, cpu_list_text, plural


class PlacementError(CompatError):
    """The request cannot be placed on this machine (exit 2): one sentence, and the fix."""


class RankPlacement(Record):
    local_rank: int
    cpus: tuple[int, ...]  # one CPU per compute core: what the rank is bound to
    worker_cpus: tuple[int, ...]  # one CPU per oneCCL worker core (outside ``cpus``)
    nodes: tuple[int, ...]  # NUMA nodes of those cores (empty: no NUMA information)
    packages: tuple[int, ...]

    @property
    def numa_node(self) -> Optional[int]:
        return self.nodes[0] if len(self.nodes) == 1 else None


class Plan(Record):
    machine: Machine
    ranks: tuple[RankPlacement, ...]
    cores_per_rank: int  # compute + worker cores
    ccl_workers: int
    domain: str  # "NUMA node" or "socket": what ranks are spread over
    notes: tuple[str, ...]

    @property
    def omp_threads(self) -> int:
        return self.cores_per_rank - self.ccl_workers

    @property
    def worker_cpus(self) -> tuple[int, ...]:
        """CCL_WORKER_AFFINITY: every local worker's core, local rank 0's first."""
        return tuple(cpu for rank in self.ranks for cpu in rank.worker_cpus)


def _why(machine: Machine) -> str:
    usable = machine.usable_cores
    text = f"{plural(len(usable), 'physical core')} in its affinity"
    if machine.quota_cores is not None and machine.quota_cores < len(usable):
        text += f", capped to {machine.quota_cores} by the cgroup quota of {machine.quota:g} CPUs"
    return text


def _domains(cores: Sequence[Core]) -> tuple[str, list[list[Core]]]:
    """Usable cores grouped by NUMA node (else socket), nodes in ascending order, cores by first hyperthread."""
    by_node = all(core.node is not None for core in cores)
    groups: dict[int, list[Core]] = {}
    for core in cores:
        key = core.node if by_node and core.node is not None else core.package
        groups.setdefault(key, []).append(core)
    return ("NUMA node" if by_node else "socket"), [sorted(groups[key], key=lambda c: c.threads[0]) for key in sorted(groups)]


def _apportion(domains: list[list[Core]], ranks: int) -> tuple[list[list[Core]], int]:
    """ranks >= domains: each domain gets ranks in proportion to its cores (the greatest-divisor rule, which keeps
    the smallest share as large as it can be); a domain's cores are cut into equal runs, one per rank."""
    counts = [0] * len(domains)
    for _ in range(ranks):
        best = max(range(len(domains)), key=lambda k: (len(domains[k]) // (counts[k] + 1), -counts[k], -k))
        counts[best] += 1
    share = min(len(domains[k]) // counts[k] for k in range(len(domains)) if counts[k])
    regions = []
    for k, domain in enumerate(domains):
        size = len(domain) // counts[k] if counts[k] else 0
        regions += [domain[i * size:(i + 1) * size] for i in range(counts[k])]
    return regions, share


def _group(domains: list[list[Core]], ranks: int) -> tuple[list[list[Core]], int]:
    """ranks < domains: each rank takes a run of whole neighbouring domains; the runs are chosen so that the
    smallest one is as large as possible."""
    sizes = [len(d) for d in domains]

    def cuts(target: int) -> Optional[list[int]]:
        starts, total = [0], 0
        for k, size in enumerate(sizes):
            total += size
            if total >= target and len(starts) < ranks and k + 1 < len(sizes):
                starts.append(k + 1)
                total = 0
        if len(starts) < ranks or sum(sizes[starts[-1]:]) < target:
            return None
        return starts

    best = None
    for target in range(sum(sizes) // ranks, 0, -1):
        best = cuts(target)
        if best is not None:
            break
    assert best is not None  # target 1 always fits: every domain has a core and ranks < domains
    bounds = best + [len(domains)]
    regions = [[core for domain in domains[bounds[i]:bounds[i + 1]] for core in domain] for i in range(ranks)]
    return regions, min(len(r) for r in regions)


def plan_ranks(machine: Machine, ranks: int, ccl_workers: int = 1) -> Plan:
    """Place ``ranks`` ranks with ``ccl_workers`` oneCCL worker cores each. Raises PlacementError when they do not fit."""
    if ranks < 1 or ccl_workers < 0:
        raise PlacementError("The ranks per node must be at least 1 and the oneCCL workers at least 0.", "Pass --nproc-per-node N (1 or more) and --ccl-workers K (0 or more).")
    budget = machine.core_budget
    if ranks > budget:
        raise PlacementError(f"{plural(ranks, 'rank')} need at least {ranks} physical cores, one each, but this process may use {budget} ({_why(machine)}).",
                             f"Start at most {plural(budget, 'rank')} per node (--nproc-per-node {budget}), or run where more cores are allowed.")
    need = ranks * (1 + ccl_workers)
    if need > budget:
        fewer = budget // (1 + ccl_workers)
        raise PlacementError(
            f"{plural(ranks, 'rank')} with {plural(ccl_workers, 'oneCCL worker core')} each need {need} physical cores, but this process may use {budget} ({_why(machine)}).",
            "Pass --ccl-workers 0 (each rank's oneCCL worker then shares the rank's own cores)" + (f", or start at most {plural(fewer, 'rank')} per node." if fewer else "."))
    domain, domains = _domains(machine.usable_cores)
    regions, share = (_apportion if ranks >= len(domains) else _group)(domains, ranks)
    per_rank = min(share, budget // ranks)
    if per_rank < 1 + ccl_workers:
        raise PlacementError(
            f"Spread over the {domain}s without straddling one, each of the {plural(ranks, 'rank')} gets {plural(share, 'physical core')}: "
            f"too few for 1 OpenMP thread and {plural(ccl_workers, 'oneCCL worker core')}.",
            f"Pass --ccl-workers 0, or start {len(domains)} ranks per node (one per {domain}).")
    placements = []
    for index, region in enumerate(regions):
        cores = region[:per_rank]
        placements.append(RankPlacement(
            local_rank=index,
            cpus=tuple(core.threads[0] for core in cores[ccl_workers:]),
            worker_cpus=tuple(core.threads[0] for core in cores[:ccl_workers]),
            nodes=tuple(sorted({core.node for core in cores if core.node is not None})),
            packages=tuple(sorted({core.package for core in cores})),
        ))
    return Plan(machine, tuple(placements), per_rank, ccl_workers, domain, _notes(machine, placements, per_rank, ranks, domain, len(domains)))


def _notes(machine: Machine, placements: list[RankPlacement], per_rank: int, ranks: int, domain: str, domain_count: int) -> tuple[str, ...]:
    notes = []
    topology = machine.topology
    if topology.source == "flat":
        notes.append("the CPU topology was not readable from sysfs: every allowed CPU is counted as one physical core, and sockets and NUMA nodes are unknown")
    usable = machine.usable_cores
    siblings = [cpu for core in usable for cpu in core.threads[1:]]
    if siblings:
        notes.append(f"one OpenMP thread per physical core: the hyperthread siblings ({cpu_list_text(siblings)}) stay idle")
    idle = len(usable) - per_rank * ranks
    if idle > 0:
        if machine.quota_cores is not None and machine.quota_cores < len(usable):
            why = f"the cgroup quota of {machine.quota:g} CPUs pays for {machine.quota_cores}"
        elif ranks >= domain_count and ranks % domain_count:
            why = f"{ranks} ranks do not divide evenly over {domain_count} {domain}s and every rank gets the same share"
        else:
            why = "every rank gets the same share"
        notes.append(f"{idle} of {len(usable)} usable physical cores stay idle: {why}")
    for placement in placements:
        if len(placement.nodes) > 1:
            notes.append(f"rank {placement.local_rank} spans NUMA nodes {', '.join(map(str, placement.nodes))}: there are fewer ranks than NUMA nodes")
    return tuple(notes)


class ThreadAdvice(Record):
    """What to set for ``ranks`` ranks per node: from the plan when one exists, else the least a rank can use."""

    omp_threads: int
    ccl_workers: int
    cores: int  # physical cores this process may keep busy
    cpus: int  # CPUs, hyperthreads included, it may keep busy
    plan: Optional[Plan]
    problem: str  # why no plan exists ("" when one does)


def thread_advice(machine: Machine, ranks: int, ccl_workers: int = 1) -> ThreadAdvice:
    ranks = max(1, ranks)
    try:
        plan = plan_ranks(machine, ranks, ccl_workers)
    except PlacementError as exc:
        omp = max(1, machine.core_budget // ranks - ccl_workers)
        return ThreadAdvice(omp, ccl_workers, machine.core_budget, machine.thread_budget, None, exc.message)
    return ThreadAdvice(plan.omp_threads, ccl_workers, machine.core_budget, machine.thread_budget, plan, "")
