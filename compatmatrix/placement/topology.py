"""The machine as values: physical cores (their hyperthreads, socket, NUMA node) and what this process may use
(its affinity mask and cgroup CPU quota). Built from the environment probe's plain data (environment/env_probe.py
``cpu_topology``: the live /sys, or a recorded copy of it); nothing here reads a file.

Side effects: none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ..console import plural  # noqa: F401 - the one rule for a count in words; imported from here by name too
from ..record import Record


class TopologyError(ValueError):
    """Topology data that cannot be a machine (a CPU listed twice, siblings of another socket, ...)."""


class Core(Record):
    """One physical core: its hyperthreads (online CPU numbers, ascending), its socket and its NUMA node."""

    threads: tuple[int, ...]
    package: int
    node: Optional[int]  # None: the kernel reports no NUMA nodes


class Topology(Record):
    cores: tuple[Core, ...]  # ascending by first hyperthread
    source: str  # "/sys", a recorded folder, or "flat" (only a CPU count was known)

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for core in self.cores for cpu in core.threads))

    @property
    def packages(self) -> tuple[int, ...]:
        return tuple(sorted({core.package for core in self.cores}))

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({core.node for core in self.cores if core.node is not None}))

    @property
    def threads_per_core(self) -> int:
        return max((len(core.threads) for core in self.cores), default=1)

    @classmethod
    def flat(cls, count: int) -> "Topology":
        """``count`` CPUs and nothing else known: each its own core, one socket, no NUMA information."""
        return cls(tuple(Core((cpu,), 0, None) for cpu in range(max(1, count))), "flat")

    @classmethod
    def smt(cls, cores: int, threads_per_core: int) -> "Topology":
        """``cores`` physical cores of ``threads_per_core`` hyperthreads each (siblings numbered as Linux does: core i has
        CPUs i, i+cores, ...), one socket, no NUMA information: a pod's CPUs on an SMT node, where nothing else is known."""
        cores, per = max(1, cores), max(1, threads_per_core)
        return cls(tuple(Core(tuple(i + k * cores for k in range(per)), 0, None) for i in range(cores)), "flat")


class Machine(Record):
    """The topology plus what this process may use of it."""

    topology: Topology
    affinity: frozenset[int]  # CPUs in this process's sched affinity (cpuset included)
    quota: Optional[float] = None  # cgroup CPU quota, in CPUs (docker --cpus, Kubernetes limits)

    @property
    def usable_cores(self) -> tuple[Core, ...]:
        """The physical cores with at least one hyperthread in the affinity, each reduced to its allowed threads."""
        usable = []
        for core in self.topology.cores:
            threads = tuple(cpu for cpu in core.threads if cpu in self.affinity)
            if threads:
                usable.append(Core(threads, core.package, core.node))
        return tuple(usable)

    @property
    def quota_cores(self) -> Optional[int]:
        """Whole cores the quota pays for (rounded down: a busy thread on a fraction of a core is throttled)."""
        return max(1, math.floor(self.quota + 1e-9)) if self.quota else None

    @property
    def core_budget(self) -> int:
        """Physical cores this process may keep busy: the usable cores, capped by the quota."""
        usable = len(self.usable_cores)
        return min(usable, self.quota_cores) if self.quota_cores is not None else usable

    @property
    def thread_budget(self) -> int:
        """CPUs (hyperthreads included) this process may keep busy: the affinity, capped by the quota."""
        allowed = sum(len(core.threads) for core in self.usable_cores)
        return min(allowed, self.quota_cores) if self.quota_cores is not None else allowed

    def describe(self) -> str:
        """'2 sockets, 2 NUMA nodes, 56 physical cores (112 CPUs with hyperthreads); this process may use ...'."""
        topo = self.topology
        cores, cpus = len(topo.cores), len(topo.cpus)
        parts = [plural(len(topo.packages), "socket")]
        if topo.nodes:
            parts.append(plural(len(topo.nodes), "NUMA node"))
        parts.append(f"{plural(cores, 'physical core')}" + (f" ({cpus} CPUs with hyperthreads)" if cpus != cores else ""))
        text = ", ".join(parts)
        usable = self.usable_cores
        limits = []
        if len(usable) != cores or sum(len(c.threads) for c in usable) != cpus:
            limits.append(f"affinity {cpu_list_text(sorted(self.affinity & set(topo.cpus)))}: {plural(len(usable), 'physical core')}")
        if self.quota is not None:
            limits.append(f"cgroup quota {self.quota:g} CPUs: {plural(self.quota_cores or 0, 'core')}")
        if limits:
            text += "; this process may use " + ", ".join(limits)
        return text


def cpu_list_text(cpus: Iterable[int]) -> str:
    """CPU numbers in the kernel's list form: 0-27,56-83 (what taskset -c and numactl --physcpubind take)."""
    numbers = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in numbers:
        if start is None:
            start = previous = cpu
        elif cpu == previous + 1:
            previous = cpu
        else:
            ranges.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = previous = cpu
    if start is not None:
        ranges.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ",".join(ranges)


def topology_from_probe(data: Mapping[str, Any], source: str) -> Topology:
    """The Topology from env_probe.cpu_topology's answer. Raises TopologyError with what is wrong."""
    if data.get("problem") or not data.get("cpus"):
        raise TopologyError(data.get("problem") or "no CPUs listed")
    online = {int(cpu) for cpu in data.get("online") or ()}
    node_of: dict[int, int] = {}
    for node, members in (data.get("nodes") or {}).items():
        for cpu in members:
            if int(cpu) in node_of:
                raise TopologyError(f"CPU {cpu} is listed in NUMA node {node_of[int(cpu)]} and in node {node}")
            node_of[int(cpu)] = int(node)
    records = {int(r["cpu"]): r for r in data["cpus"]}
    seen: dict[int, int] = {}  # cpu -> index of its core
    cores: list[Core] = []
    for cpu in sorted(records):
        if cpu in seen:
            continue
        record = records[cpu]
        siblings = sorted(({int(s) for s in record["siblings"]} & online & set(records)) | {cpu})
        threads = tuple(s for s in siblings if s not in seen)
        packages = {int(records[s]["package"]) for s in threads}
        if len(packages) != 1:
            raise TopologyError(f"CPU {cpu}'s hyperthread siblings {cpu_list_text(threads)} sit on different sockets")
        nodes = {node_of.get(s) for s in threads}
        if node_of and len(nodes) != 1:
            raise TopologyError(f"CPU {cpu}'s hyperthread siblings {cpu_list_text(threads)} are in different NUMA nodes (or in none)")
        for s in threads:
            seen[s] = len(cores)
        cores.append(Core(threads, packages.pop(), nodes.pop() if node_of else None))
    return Topology(tuple(cores), source)


def machine_from_probe(cpu_topology: Optional[Mapping[str, Any]], affinity: Optional[Sequence[int]], quota: Optional[float],
                       count: int, source: str = "/sys") -> Machine:
    """The machine as the environment probe saw it; with no usable topology, ``count`` flat CPUs."""
    topology: Optional[Topology] = None
    if cpu_topology:
        try:
            topology = topology_from_probe(cpu_topology, source)
        except (TopologyError, KeyError, TypeError, ValueError):
            topology = None
    if topology is None:
        flat = Topology.flat(count)
        return Machine(flat, frozenset(flat.cpus), quota)
    allowed = frozenset(int(c) for c in affinity) & frozenset(topology.cpus) if affinity else frozenset(topology.cpus)
    return Machine(topology, allowed or frozenset(topology.cpus), quota)


def machine_from_snapshot(snapshot: Any) -> Machine:
    """The machine an EnvSnapshot's probe saw (its raw answer: topology, affinity, quota). A snapshot built without
    a probe answer (tests, ``compat check -r``) is ``allowed_cpus`` flat CPUs under its quota."""
    raw = getattr(snapshot, "raw", None) or {}
    cpu = raw.get("cpu") or {}
    allowed = raw.get("allowed_cpus") or {}
    if cpu.get("topology"):
        return machine_from_probe(cpu["topology"], allowed.get("affinity"), allowed.get("cgroup_quota"), snapshot.allowed_cpus)
    return machine_from_probe(None, None, snapshot.cgroup_quota, snapshot.allowed_cpus)
