"""Finding, the check registry, and the context checks read from."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

from ..environment.snapshot import EnvSnapshot
from ..matrix.model import Matrix
from ..record import Record, replace


class Status(enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def word(self) -> str:
        return self.value.upper()


class Finding(Record):
    id: str
    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "area": self.area,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


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


class Context(Record):
    """What every check may read. Expensive facts (the setvars diff) are computed once, on demand (``cache``: the one
    mutable part, shared by the copies run_checks makes)."""

    matrix: Matrix
    snapshot: EnvSnapshot
    options: Options = Options()
    cache: Optional[dict[str, Any]] = None  # None: a new dict (each context its own)
    selected: frozenset[str] = frozenset()  # the ids of the checks this run evaluates (run_checks sets it); empty: all

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.cache is None:
            self.__dict__["cache"] = {}

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


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


def all_checks() -> list[Check]:
    from . import builds, imports, oneccl_env, packages, runtime  # noqa: F401  (registration)

    return list(REGISTRY.values())


def select(checks: Iterable[Check], only: Sequence[str] = (), skip: Sequence[str] = (), static_only: bool = False) -> list[Check]:
    """Filter by ids or areas (``packages`` selects every ``packages.*`` check)."""

    def matches(c: Check, names: Sequence[str]) -> bool:
        return any(c.id == n or c.area == n for n in names)

    chosen = [c for c in checks if (not static_only or c.static)]
    if only:
        chosen = [c for c in chosen if matches(c, only)]
    return [c for c in chosen if not matches(c, skip)]


def unknown_names(names: Sequence[str]) -> list[str]:
    ids = {c.id for c in all_checks()} | {c.area for c in all_checks()}
    return [n for n in names if n not in ids]


def run_checks(checks: Iterable[Check], context: Context) -> list[Finding]:
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


def worst(findings: Iterable[Finding]) -> Optional[Status]:
    order = [Status.FAIL, Status.WARN, Status.PASS, Status.SKIP]
    statuses = {f.status for f in findings}
    return next((s for s in order if s in statuses), None)
