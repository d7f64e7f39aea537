"""The check registry (CATALOGUE, @check, run_checks) and the context checks read from (Context: the environment facts' memo,
environment/facts.Facts, plus the options of the run). The verdict record they give is compatmatrix/findings.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

from ..environment.facts import Facts
from ..findings import Finding, Status
from ..matrix.model import REGISTRY as COMPONENT_RECORDS
from ..matrix.model import ComponentInfo
from ..record import Record, replace


class Options(Record):
    ranks_per_node: int = 2
    bf16: bool = False
    import_timeout: float = 120.0
    launcher: Optional[str] = None  # compat check --launcher: the launcher whose oneCCL needs oneccl.launcher judges
    # the launcher of the run the fixes are for when no --launcher asked for oneccl.launcher: doctor --live's (given, or
    # detected: srun inside an srun step); every `compat env` a fix names carries it (checks/oneccl_env.env_command)
    env_launcher: Optional[str] = None
    # check -r: the files name the PyTorch CPU index, where pip takes an unlabelled torch/torchvision/torchaudio pin's +cpu build
    cpu_index: bool = False


class Context(Facts):
    """What every check may read: the environment's facts (environment/facts.Facts: matrix, snapshot, and the memo of
    the expensive ones, the setvars diff, computed once, on demand) and the options of the run. ``cache``: the memo, the
    one mutable part, shared by the copies run_checks makes."""

    options: Options = Options()
    cache: Optional[dict[str, Any]] = None  # None: a new dict (each context its own)
    selected: frozenset[str] = frozenset()  # the ids of the checks this run evaluates (run_checks sets it); empty: all


CheckFn = Callable[[Context], Finding]


class Check(Record):
    id: str
    description: str
    static: bool  # False: runs the stack in a child process (doctor only)
    run: CheckFn

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


REGISTRY: dict[str, Check] = {}


def check(id: str, description: str, static: bool = True) -> Callable[[CheckFn], CheckFn]:
    """Register a check under a stable id (``area.name``)."""

    def register(fn: CheckFn) -> CheckFn:
        if id in REGISTRY:
            raise ValueError(f"check id {id} registered twice")
        REGISTRY[id] = Check(id, description, static, fn)
        return fn

    return register


#: The components whose checks are made from their record (matrix/model.py, kind "companion": torchvision, torchaudio),
#: in the registry's order: each gets packages.<distribution>-torch (checks/packages.py: what it declares of torch) and
#: imports.<module> (checks/imports.py: its import in the shared child). Their ids are public (JSON, tests, docs).
COMPANION_RECORDS: tuple[ComponentInfo, ...] = tuple(info for info in COMPONENT_RECORDS if info.kind == "companion")


def pairing_check_id(info: ComponentInfo) -> str:
    """``packages.torchvision-torch``: the id of a companion's generated pairing check."""
    return f"packages.{info.distribution}-torch"


def import_check_id(info: ComponentInfo) -> str:
    """``imports.torchvision``: the id of a companion's generated import check."""
    return f"imports.{info.module}"


#: Every check, in the order they run and print: (id, its module in compatmatrix.checks, static). A module registers
#: its checks (@check) when imported, and the registry imports it when one of its checks runs or is described: compat
#: check -r runs the packages.* checks alone and loads neither the oneCCL, runtime nor import-probe modules, compat check
#: never the import probes (tests/test_startup.py; a test there holds this list to the registrations).
CATALOGUE: tuple[tuple[str, str, bool], ...] = (
    ("packages.torch-installed", "packages", True),
    ("packages.ipex-torch", "packages", True),
    ("packages.ccl-torch", "packages", True),
    ("packages.known-bad", "packages", True),
    *((pairing_check_id(info), "packages", True) for info in COMPANION_RECORDS),
    ("packages.transformers-torch", "packages", True),
    ("packages.ccl-trainer", "packages", True),
    ("packages.cuda-build", "packages", True),
    ("packages.duplicates", "packages", True),
    ("packages.interrupted-install", "packages", True),
    ("packages.python-support", "packages", True),
    ("packages.eol", "packages", True),
    ("packages.extension-build", "builds", True),
    ("imports.torch", "imports", False),
    ("imports.ipex", "imports", False),
    ("imports.ccl", "imports", False),
    *((import_check_id(info), "imports", False) for info in COMPANION_RECORDS),
    ("oneccl.setvars", "oneccl_env", True),
    ("oneccl.fi-provider", "oneccl_env", True),
    ("oneccl.libfabric", "oneccl_env", True),
    ("oneccl.mpirun", "oneccl_env", True),
    ("oneccl.stale-prefix", "oneccl_env", True),
    ("oneccl.kvs-iface", "oneccl_env", True),
    ("oneccl.launcher", "oneccl_env", True),
    ("runtime.ld-preload", "runtime", True),
    ("runtime.threads", "runtime", True),
    ("runtime.isa", "runtime", True),
    ("runtime.shm", "runtime", True),
)


class Listed(Record):
    """A check as CATALOGUE lists it: what select() needs, without its module; description and run load it."""

    id: str
    static: bool
    module: str

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def registered(self) -> Check:
        if self.id not in REGISTRY:  # __import__, not importlib.import_module: -X importtime (and so tests/test_startup.py) sees it
            __import__(f"{__package__}.{self.module}")
        return REGISTRY[self.id]

    @property
    def description(self) -> str:
        return self.registered().description

    def run(self, context: Context) -> Finding:
        return self.registered().run(context)


def all_checks() -> list[Listed]:
    return [Listed(id, static, module) for id, module, static in CATALOGUE]


def select(checks: Iterable[Listed], only: Sequence[str] = (), skip: Sequence[str] = (), static_only: bool = False) -> list[Listed]:
    """Filter by ids or areas (``packages`` selects every ``packages.*`` check)."""

    def matches(c: Listed, names: Sequence[str]) -> bool:
        return any(c.id == n or c.area == n for n in names)

    chosen = [c for c in checks if (not static_only or c.static)]
    if only:
        chosen = [c for c in chosen if matches(c, only)]
    return [c for c in chosen if not matches(c, skip)]


def unknown_names(names: Sequence[str]) -> list[str]:
    ids = {c.id for c in all_checks()} | {c.area for c in all_checks()}
    return [n for n in names if n not in ids]


def run_checks(checks: Iterable[Listed], context: Context) -> list[Finding]:
    checks = list(checks)
    context = replace(context, selected=frozenset(c.id for c in checks))  # what a shared probe needs to cover (checks/imports.py)
    findings = []
    for item in checks:
        try:
            finding = item.run(context)
        except Exception as exc:  # a check must never take the doctor down with it
            finding = Finding(item.id, Status.FAIL, f"the check itself failed: {exc.__class__.__name__}: {exc}", fix="Report this as a compatmatrix bug.")
        findings.append(finding)
    return findings
