"""compat tune's search space: the launch configurations worth measuring on this machine, each explained, and the
ones left out, each with its reason. Derived from the topology plan (placement/plan.py, the same cores ``compat
launch`` binds) and from what is installed; nothing here runs or reads anything.

The dimensions, and where each comes from:
* ranks per node: one process (no DDP: also the correctness reference's layout), one per socket, one per NUMA node
  (either only where the machine has more than one), two per NUMA node (or socket), four per NUMA node (or socket).
* OpenMP threads per rank: the plan's share (one thread per physical core of the rank's share, minus its oneCCL
  worker cores); with SMT also "with the hyperthreads" (the rank's CPUs, siblings included), which oversubscribes
  the physical cores and is therefore listed as pruned, with the arithmetic.
* oneCCL worker cores per rank: only with the ccl backend (the bindings installed): 1 (a core set aside for the
  worker, compat launch's default where the cores allow it) and 0 (the worker shares the rank's cores).
* backend: gloo always; ccl where the oneCCL bindings are installed. One process has none.
* dtype: fp32 always; bf16 autocast only where the CPU has native bf16 (avx512_bf16 or amx_bf16): emulated bf16 is
  slower than fp32 (intel/intel-extension-for-pytorch#637), so it is pruned with that reason.
* torch.compile: off always; on where torch is 2.0 or newer (torch.compile's first release).

Pruning rules, each with its reason: the plan cannot place the ranks (plan_ranks' own sentence); OpenMP threads x
ranks + oneCCL worker cores x ranks exceed the physical cores this process may use (the affinity, capped by a cgroup
quota); the dimension does not apply (bf16, compile, ccl, as above); the budget is spent.

Order and budget: the topology plan's default configuration first (one rank per NUMA node, else per socket, the
plan's threads, compat launch's worker rule, fp32, eager: what ``compat launch`` does unasked), then the rest by how
many dimensions they change from it (one at a time first), then cheapest first by estimated seconds (``Costs``),
then fewer ranks first. The single-process reference runs (one per
dtype measured) are paid first; configurations are kept while the running total fits the budget.

Side effects: none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Optional

from packaging.version import Version

from ..placement.plan import PlacementError, plan_ranks
from ..placement.topology import Machine, plural
from ..record import Record

COMPILE_SINCE = Version("2.0")  # torch.compile's first release
BACKENDS = ("gloo", "ccl")
DTYPES = ("fp32", "bf16")


class Installed(Record):
    """What the target environment offers the search: torch's version (None: not installed), the oneCCL bindings,
    native bf16 in the CPU."""

    torch: Optional[Version]
    ccl_bindings: bool
    native_bf16: bool


class Costs(Record):
    """Estimated seconds, for ordering and the budget: starting a launch (imports, the process group), one measuring
    window (warm-up and timed steps), and the extra of a first torch.compile."""

    start: float = 8.0
    measure: float = 4.0
    compile: float = 25.0


DEFAULT_COSTS = Costs()


class Configuration(Record):
    ranks: int  # per node
    layout: str  # "one process", "one per socket", "two per NUMA node", ...
    omp_threads: int  # per rank
    ccl_workers: int  # oneCCL worker cores per rank (0: the worker shares the rank's cores)
    backend: Optional[str]  # "gloo" / "ccl"; None for one process
    dtype: str  # "fp32" / "bf16"
    compile: bool
    threads_note: str  # "the plan's share", "with the hyperthreads"
    default: bool = False  # the topology plan's default (what compat launch does unasked)
    current: bool = False  # the user's current settings (OMP_NUM_THREADS / CCL_WORKER_COUNT of the run's environment)

    @property
    def name(self) -> str:
        """A short stable name: 2r-13t-ccl1w-bf16-compile."""
        parts = [f"{self.ranks}r", f"{self.omp_threads}t"]
        if self.backend:
            parts.append(self.backend + (f"{self.ccl_workers}w" if self.backend == "ccl" else ""))
        parts.append(self.dtype)
        if self.compile:
            parts.append("compile")
        return "-".join(parts)

    @property
    def busy_cores(self) -> int:
        """Physical cores the configuration keeps busy: OpenMP threads and dedicated oneCCL worker cores of every rank."""
        return self.ranks * (self.omp_threads + self.ccl_workers)

    def describe(self) -> str:
        words = [self.layout, f"{plural(self.omp_threads, 'OpenMP thread')} per rank ({self.threads_note})"]
        if self.backend == "ccl":
            words.append(f"ccl with {plural(self.ccl_workers, 'worker core')} per rank")
        elif self.backend:
            words.append(self.backend)
        words.append(self.dtype + (", torch.compile" if self.compile else ", eager"))
        return ", ".join(words)


class Pruned(Record):
    name: str  # the configuration's name, or the dimension's value ("bf16", "compile", "3 ranks")
    reason: str


class Space(Record):
    machine_text: str  # Machine.describe()
    configurations: tuple[Configuration, ...]  # in measuring order, within the budget
    pruned: tuple[Pruned, ...]
    budget: float
    estimated: Optional[float]  # seconds: the references and the configurations kept (None: the costs are not known before measuring)

    @property
    def default(self) -> Optional[Configuration]:
        return next((c for c in self.configurations if c.default), None)


def _domains(machine: Machine) -> tuple[str, int]:
    """What ranks are spread over (as plan_ranks does) and how many of them the usable cores touch."""
    usable = machine.usable_cores
    nodes = {core.node for core in usable}
    if None not in nodes:
        return "NUMA node", len(nodes)
    return "socket", len({core.package for core in usable})


def rank_layouts(machine: Machine) -> list[tuple[int, str]]:
    """(ranks, layout words) for every layout the search tries, duplicates merged, ascending."""
    usable = machine.usable_cores
    sockets = len({core.package for core in usable})
    nodes = len({core.node for core in usable if core.node is not None}) if all(c.node is not None for c in usable) else 0
    domain, count = _domains(machine)
    wanted: list[tuple[int, str]] = [(1, "one process")]
    if sockets > 1:
        wanted.append((sockets, "one per socket"))
    if nodes > 1:
        wanted.append((nodes, "one per NUMA node"))
    wanted.append((2 * count, f"two per {domain}"))
    wanted.append((4 * count, f"four per {domain}"))
    merged: dict[int, str] = {}
    for ranks, words in wanted:
        merged[ranks] = f"{merged[ranks]} = {words}" if ranks in merged else words
    return sorted(merged.items())


def estimate_seconds(config: Configuration, costs: Costs) -> float:
    return costs.start + costs.measure + (costs.compile if config.compile else 0.0)


def run_estimate(config: Configuration, references: Mapping[str, float], compile_extra: float = DEFAULT_COSTS.compile) -> Optional[float]:
    """Seconds the next run of ``config`` is expected to take, from what the single-process reference runs took (wall
    time, start to exit: a training command's imports and start-up are most of it, and they do not shrink with more
    ranks on the same node): its dtype's reference's; where its dtype has no reference yet, the slowest reference
    timed, twice (its own reference runs first); plus ``compile_extra`` with torch.compile (the references are eager).
    None while no reference has been timed (nothing to estimate from: the first configuration starts)."""
    timed = {dtype: seconds for dtype, seconds in references.items() if seconds > 0}
    if not timed:
        return None
    own = timed.get(config.dtype)
    seconds = own if own is not None else 2.0 * max(timed.values())
    return seconds + (compile_extra if config.compile else 0.0)


def over_budget(estimate: Optional[float], left: float) -> Optional[str]:
    """Why a run estimated at ``estimate`` seconds is not started with ``left`` seconds of the budget left (None: it
    fits, or nothing is known to estimate from while some budget is left). The seconds are rounded so that the sentence
    reads as the comparison it is: the need up, what is left down."""
    if estimate is None:
        return None if left > 0 else "no budget left to start it"
    if estimate <= left:
        return None
    return f"needs ~{math.ceil(estimate):d} s, {max(0, math.floor(left)):d} s of budget left"


def reference_seconds(costs: Costs) -> float:
    """One single-process reference run (eager) of the same global batch."""
    return costs.start + costs.measure


def _thread_choices(machine: Machine, ranks: int, workers: int, share: int) -> list[tuple[int, str]]:
    choices = [(share, "the plan's share")]
    with_siblings = machine.thread_budget // ranks - workers
    if with_siblings > share:
        choices.append((with_siblings, "with the hyperthreads"))
    return choices


def search_space(machine: Machine, installed: Installed, budget: float, costs: Optional[Costs] = DEFAULT_COSTS, bf16: bool = True,
                 compile: bool = True) -> Space:
    """The configurations to measure, in order and within ``budget`` seconds, and every one left out with its reason.
    ``bf16`` / ``compile`` False: the user left that dimension out (--no-bf16, --no-compile: the training cannot use it).
    ``costs`` None: what a run costs is not known before one is measured (a user's training command): nothing is left
    out by the budget here (the measuring estimates each run from the reference run's wall time: run_estimate), and
    the space's ``estimated`` is None."""
    pruned: list[Pruned] = []
    builder = _Candidates(machine, installed, pruned, _dtypes(installed, bf16, pruned), _compiles(installed, compile, pruned),
                          _backends(installed, pruned))
    candidates = [config for ranks, layout in rank_layouts(machine) for config in builder.of_ranks(ranks, layout)]
    default = next((c for c in candidates if c.default), None)
    candidates.sort(key=lambda c: (not c.default, _distance(c, default), estimate_seconds(c, costs or DEFAULT_COSTS), c.ranks, c.name))
    if costs is None:
        return Space(machine.describe(), tuple(candidates), tuple(pruned), budget, None)
    kept, spent = _within_budget(candidates, costs, budget, pruned)
    return Space(machine.describe(), tuple(kept), tuple(pruned), budget, spent)


def _dtypes(installed: Installed, bf16: bool, pruned: list[Pruned]) -> list[str]:
    """fp32, and bf16 where asked and native (else why not, in ``pruned``)."""
    if not bf16:
        pruned.append(Pruned("bf16", "not asked (--no-bf16)"))
    elif installed.native_bf16:
        return ["fp32", "bf16"]
    else:
        pruned.append(Pruned("bf16", "the CPU has no native bf16 (avx512_bf16 or amx_bf16): emulated bf16 autocast is slower than fp32"))
    return ["fp32"]


def _compiles(installed: Installed, compile: bool, pruned: list[Pruned]) -> list[bool]:
    """Eager, and torch.compile where asked and this torch has it (else why not, in ``pruned``)."""
    if not compile:
        pruned.append(Pruned("compile", "not asked (--no-compile)"))
    elif installed.torch is not None and installed.torch >= COMPILE_SINCE:
        return [False, True]
    else:
        pruned.append(Pruned("compile", f"torch.compile needs torch {COMPILE_SINCE} or newer; "
                                        + (f"torch {installed.torch} is installed" if installed.torch else "torch is not installed")))
    return [False]


def _backends(installed: Installed, pruned: list[Pruned]) -> list[tuple[Optional[str], int]]:
    """(backend, worker cores) of a run of several ranks: ccl with and without a worker core, and gloo; gloo alone
    without the oneCCL bindings (why, in ``pruned``)."""
    if installed.ccl_bindings:
        return [("ccl", 1), ("ccl", 0), ("gloo", 0)]
    pruned.append(Pruned("ccl", "the oneCCL bindings (oneccl_bind_pt) are not installed: gloo is the only backend"))
    return [("gloo", 0)]


class _Candidates:
    """The configurations of each rank layout of search_space, and in ``pruned`` each one left out with its reason."""

    def __init__(self, machine: Machine, installed: Installed, pruned: list[Pruned], dtypes: list[str], compiles: list[bool],
                 backends: list[tuple[Optional[str], int]]) -> None:
        self.machine, self.installed, self.pruned = machine, installed, pruned
        self.dtypes, self.compiles, self.backends = dtypes, compiles, backends
        self.budget_cores = machine.core_budget
        self.default_ranks = max(1, _domains(machine)[1])

    def of_ranks(self, ranks: int, layout: str) -> list[Configuration]:
        if ranks > self.budget_cores:
            self.pruned.append(Pruned(f"{ranks} ranks ({layout})", f"{plural(ranks, 'rank')} need {ranks} physical cores, one each; this process may use {self.budget_cores}"))
            return []
        per_rank = [(None, 0)] if ranks == 1 else self.backends
        default_workers = None  # compat launch's rule: a worker core per rank where the cores allow it (ccl only)
        if ranks == self.default_ranks:
            default_workers = 1 if ranks > 1 and self.installed.ccl_bindings and _fits(self.machine, ranks, 1) else 0
        return [config for backend, workers in per_rank for config in self.of_backend(ranks, layout, backend, workers, default_workers)]

    def of_backend(self, ranks: int, layout: str, backend: Optional[str], workers: int, default_workers: Optional[int]) -> list[Configuration]:
        try:
            plan = plan_ranks(self.machine, ranks, workers)
        except PlacementError as exc:
            self.pruned.append(Pruned(_name(ranks, None, backend, workers), exc.message))
            return []
        found = []
        for threads, note in _thread_choices(self.machine, ranks, workers, plan.omp_threads):
            busy = ranks * (threads + workers)
            if busy > self.budget_cores:
                self.pruned.append(Pruned(f"{_name(ranks, threads, backend, workers)} ({note})",
                                          f"oversubscribes the physical cores: {ranks} x ({plural(threads, 'OpenMP thread')} + {plural(workers, 'worker core')}) = "
                                          f"{busy} > the {self.budget_cores} this process may use"))
                continue
            default_backend = None if ranks == 1 else ("ccl" if self.installed.ccl_bindings else "gloo")
            found += [Configuration(ranks, layout, threads, workers, backend, dtype, compiled, note,
                                    ranks == self.default_ranks and note == "the plan's share" and dtype == "fp32" and not compiled
                                    and workers == default_workers and backend == default_backend)
                      for dtype in self.dtypes for compiled in self.compiles]
        return found


def _within_budget(candidates: list[Configuration], costs: Costs, budget: float, pruned: list[Pruned]) -> tuple[list[Configuration], float]:
    """(the candidates, in order, whose estimated runs fit ``budget`` with the references they need, the seconds
    estimated in all); the others go to ``pruned``."""
    spent = reference_seconds(costs)  # the fp32 single-process reference
    kept: list[Configuration] = []
    references = {"fp32"}
    for config in candidates:
        extra = reference_seconds(costs) if config.dtype not in references else 0.0
        cost = estimate_seconds(config, costs) + extra
        if spent + cost > budget:
            pruned.append(Pruned(config.name, f"over the budget: {cost:.0f} s estimated, {max(0.0, budget - spent):.0f} s of {budget:.0f} s left"))
            continue
        spent += cost
        references.add(config.dtype)
        kept.append(config)
    return kept, spent


MAX_SETTING = 65536  # OMP_NUM_THREADS / CCL_WORKER_COUNT past this are no setting a run could be measured with


def current_settings(environ) -> tuple[Optional[int], Optional[int], tuple[str, ...]]:  # noqa: ANN001 - a Mapping
    """OMP_NUM_THREADS and CCL_WORKER_COUNT of ``environ`` as whole numbers from 1 to MAX_SETTING written in ASCII digits
    (None: not set), and a note for each one set to something else (ignored: '²' or '٣' is no thread count for libgomp)."""
    from ..values import whole_number

    values: list[Optional[int]] = []
    notes: list[str] = []
    for key in ("OMP_NUM_THREADS", "CCL_WORKER_COUNT"):
        text = str(environ.get(key) or "").strip()
        number = whole_number(text, 1, MAX_SETTING)
        if text and number is None:
            notes.append(f"{key} is set to {text[:40]!r}, not a whole number from 1 to {MAX_SETTING} in ASCII digits: your current settings leave it out")
        values.append(number)
    return values[0], values[1], tuple(notes)


def current_configuration(default: Optional[Configuration], omp_threads: Optional[int], ccl_workers: Optional[int]) -> Optional[Configuration]:
    """The default plan's layout with the user's OMP_NUM_THREADS (and, with the ccl backend, CCL_WORKER_COUNT as the
    worker cores per rank) instead of the plan's: measured, labelled "your current settings", when it differs from the
    default. None when nothing is set, nothing differs, or there is no default."""
    if default is None or (omp_threads is None and ccl_workers is None):
        return None
    threads = omp_threads if omp_threads is not None else default.omp_threads
    workers = ccl_workers if (ccl_workers is not None and default.backend == "ccl") else default.ccl_workers
    if (threads, workers) == (default.omp_threads, default.ccl_workers):
        return None
    return Configuration(default.ranks, default.layout, threads, workers, default.backend, default.dtype, default.compile,
                         "your current settings", current=True)


def _distance(config: Configuration, default: Optional[Configuration]) -> int:
    """In how many dimensions ``config`` differs from the default (ranks, threads, backend and workers, dtype, compile).
    One process against DDP ranks is one dimension, the ranks: the backend comes with the ranks (one process has none)."""
    if default is None:
        return 0
    backend = (config.backend, config.ccl_workers) != (default.backend, default.ccl_workers) and None not in (config.backend, default.backend)
    return ((config.ranks != default.ranks) + (config.threads_note != default.threads_note)
            + backend + (config.dtype != default.dtype) + (config.compile != default.compile))


def _fits(machine: Machine, ranks: int, workers: int) -> bool:
    try:
        plan_ranks(machine, ranks, workers)
    except PlacementError:
        return False
    return True


def _name(ranks: int, threads: Optional[int], backend: Optional[str], workers: int) -> str:
    return f"{ranks}r" + (f"-{threads}t" if threads else "") + (f"-{backend}" + (f"{workers}w" if backend == "ccl" else "") if backend else "")


def installed_from_snapshot(snapshot) -> Installed:  # noqa: ANN001 - an EnvSnapshot
    """What the search needs of an environment snapshot (the probe's answer: packages, CPU flags)."""
    from ..environment.snapshot import NATIVE_BF16_FLAGS
    from ..placement.service import oneccl_bindings_installed

    torch = snapshot.get("torch")
    return Installed(torch.public_version if torch is not None else None, oneccl_bindings_installed(snapshot),
                     bool(set(snapshot.cpu.flags) & NATIVE_BF16_FLAGS))


def names(configs: Iterable[Configuration]) -> list[str]:
    return [c.name for c in configs]
