"""From an IPEX / oneCCL environment to the newest stock set for its Python: what goes, what comes, and why.

The target is the resolver's own answer for the ``stock`` profile (torch + transformers + accelerate, plus torchvision /
torchaudio where they are installed) for the environment's Python, optionally limited by ``--to-torch``; each version
carries the resolver's reason (explain's records, as sentences). What goes: IPEX, the oneCCL bindings (oneccl_bind_pt,
torch_ccl) and the oneCCL runtime wheels only the bindings use. What stays and is worth saying (a CUDA torch's nvidia-*
wheels, a package folder no distribution owns) becomes a note.

Pure: a snapshot (an environment, or pins from -r files) and the matrix in, a MigrationPlan out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..environment.snapshot import Distribution, EnvSnapshot
from ..errors import UsageError, shown
from ..matrix.model import COMPONENT_ORDER, COMPONENTS, REGISTRY, Component, Matrix, components_where, distributions_where
from ..names import canonical_name
from ..resolve import build_request, resolve
from ..search import Conflict, Resolution
from ..target import Platform, PythonTarget

PROFILE = "stock"
# what migrating to stock PyTorch + gloo removes, by distribution name (former names too): each record's `migrate`
REMOVED = distributions_where(migrate="drop")
# Intel MPI's runtime from PyPI, which oneccl-cpu depends on: its mpirun, libmpi and libfabric (the mpirun such a job ran under)
INTEL_MPI_DISTRIBUTIONS = distributions_where(migrate="drop", owns_mpirun=True)
# the modules a removed distribution leaves importable when half uninstalled, with the distributions that own each
_OWNERS = {module: info.names for info in REGISTRY if info.migrate == "drop" for module in info.modules}
LEFTOVER_MODULES = tuple(_OWNERS)
OPTIONAL_COMPONENTS = components_where(migrate="keep-installed")  # in the target only where they are installed


@dataclass(frozen=True)
class Removal:
    name: str  # the distribution as installed
    version: str
    why: str
    location: str  # its dist-info (or the file it was pinned in)

    @property
    def canonical(self) -> str:
        return canonical_name(self.name)


@dataclass(frozen=True)
class TargetPackage:
    component: Component
    version: Version
    local_label: str  # "+cpu" from the PyTorch CPU index
    host: str  # the matrix host id it comes from
    before: Optional[str]  # the installed version (as installed, label kept), None when absent
    why: str  # the resolver's reason for this version

    @property
    def name(self) -> str:
        return self.component.distribution

    @property
    def pin(self) -> str:
        return f"{self.version}{self.local_label}"

    @property
    def kind(self) -> str:
        """install, upgrade, downgrade, keep (the same release is installed)."""
        if self.before is None:
            return "install"
        try:
            before = Version(self.before)
        except InvalidVersion:
            return "replace"
        if Version(before.public) == self.version:
            return "keep" if (f"+{before.local}" if before.local else "") in ("", self.local_label) else "replace"
        return "upgrade" if self.version > Version(before.public) else "downgrade"


@dataclass(frozen=True)
class MigrationPlan:
    python: PythonTarget
    platform: Platform
    removals: tuple[Removal, ...]
    targets: tuple[TargetPackage, ...]  # empty when no stock set exists (see ``conflict``)
    outcome: Union[Resolution, Conflict]
    notes: tuple[str, ...]
    removed_folders: tuple[str, ...] = field(default=())  # the package folders that go with the removals (module folders)

    @property
    def ok(self) -> bool:
        return isinstance(self.outcome, Resolution)

    @property
    def resolution(self) -> Resolution:
        assert isinstance(self.outcome, Resolution)
        return self.outcome

    @property
    def conflict_reasons(self) -> tuple[str, ...]:
        return () if self.ok else tuple(self.outcome.reasons)

    def target(self, component: Component) -> Optional[TargetPackage]:
        return next((t for t in self.targets if t.component is component), None)

    def target_pin(self, name: str) -> Optional[str]:
        """The planned version (with its local label) of a distribution, by name."""
        return next((t.pin for t in self.targets if t.name == canonical_name(name)), None)

    def version_of(self, component: Component) -> Optional[Version]:
        target = self.target(component)
        return target.version if target is not None else None

    @property
    def changes_anything(self) -> bool:
        return bool(self.removals) or any(t.kind != "keep" for t in self.targets)


def torch_spec(text: Optional[str]) -> Optional[SpecifierSet]:
    """``--to-torch``: ``2.13.0`` (that release), ``2.13`` (that series) or a specifier (``>=2.10,<2.14``)."""
    if text is None or not text.strip():
        return None
    given = text.strip()
    if given.startswith("torch"):
        given = given[len("torch"):].strip()
    version = _version_or_none(_release_of_pin(given))
    if version is not None:
        if version.local:
            version = Version(version.public)  # torch==2.13.0+cpu: the label names a build, which the host choice makes
        return SpecifierSet(f"=={version}" if len(version.release) >= 3 else f"=={version}.*")
    try:
        spec = SpecifierSet(given)
    except (InvalidSpecifier, ValueError):
        raise UsageError(f"--to-torch '{shown(text)}' is not a torch version or specifier.", "Pass e.g. --to-torch 2.13.0, --to-torch 2.13 or --to-torch '>=2.10,<2.14'.") from None
    return spec if list(spec) else None


def _release_of_pin(given: str) -> str:
    """``==2.13.0+cpu`` as ``2.13.0``: the release; the label names a build, which the host choice makes. Anything else as given."""
    if not given.startswith("==") or given.startswith("===") or "," in given:
        return given
    pinned = _version_or_none(given[2:].strip())
    return str(Version(pinned.public)) if pinned is not None and pinned.local else given


def _version_or_none(text: str) -> Optional[Version]:
    try:
        return Version(text)
    except (InvalidVersion, ValueError):
        return None


def python_target(snapshot: EnvSnapshot, origin: str) -> PythonTarget:
    return PythonTarget(snapshot.python_minor, snapshot.python, origin)


def plan_migration(matrix: Matrix, snapshot: EnvSnapshot, python: PythonTarget, platform: Platform, to_torch: Optional[SpecifierSet] = None) -> MigrationPlan:
    """The newest stock set for ``python`` (``to_torch`` limits torch), against what ``snapshot`` holds."""
    installed = {c: snapshot.get(c.distribution, *_aliases(c)) for c in COMPONENT_ORDER}
    optional = [c.distribution for c in OPTIONAL_COMPONENTS if installed[c] is not None]
    requirements = [f"torch{to_torch}"] if to_torch is not None else []
    request = build_request(matrix, python, platform, PROFILE, optional, requirements)
    outcome = resolve(matrix, request)
    removals = tuple(_removals(matrix, snapshot))
    folders = tuple(sorted({snapshot.modules[m] for m in LEFTOVER_MODULES if snapshot.modules.get(m) and _owned(m, snapshot)}))
    notes = list(_leftover_notes(snapshot))
    if isinstance(outcome, Conflict):
        notes.append(f"no stock set exists for Python {python.label}" + (f" with torch{to_torch}" if to_torch is not None else "") + ": nothing would be changed")
        return MigrationPlan(python, platform, removals, (), outcome, tuple(notes), folders)
    reasons = _reasons_by_component(outcome)
    targets = tuple(
        TargetPackage(component, pick.version, pick.local_label, pick.host.id, _installed_text(installed[component]), reasons.get(component, ""))
        for component, pick in outcome.picks.items()
    )
    notes += _target_notes(matrix, python, targets, to_torch)
    notes += _cuda_notes(snapshot, targets)
    notes += list(outcome.notes)
    return MigrationPlan(python, platform, removals, targets, outcome, tuple(dict.fromkeys(notes)), folders)


def _aliases(component: Component) -> tuple[str, ...]:
    return COMPONENTS[component].published_as


def _installed_text(dist: Optional[Distribution]) -> Optional[str]:
    return dist.raw_version if dist is not None else None


def _reasons_by_component(resolution: Resolution) -> dict[Component, str]:
    """The resolver's sentence for each pick (explain's PickReason records, one per chosen package, in order)."""
    from ..sentences import sentence

    found: dict[Component, str] = {}
    for record in resolution.explanation:
        candidate = getattr(record, "candidate", None)
        if candidate is not None and candidate.component not in found:
            found[candidate.component] = sentence(record)
    return found


def _removals(matrix: Matrix, snapshot: EnvSnapshot) -> list[Removal]:
    seen: set[str] = set()
    out = []
    for dist in snapshot.distributions:
        if dist.canonical not in REMOVED or dist.canonical in seen:
            continue
        seen.add(dist.canonical)
        out.append(Removal(dist.name, dist.raw_version, _why_removed(matrix, dist), dist.path))
    return out


def _why_removed(matrix: Matrix, dist: Distribution) -> str:
    info = next(i for i in REGISTRY if dist.canonical in i.names)
    if "{status}" not in info.migrate_why:
        return info.migrate_why
    eol = matrix.eol_of(info.distribution)
    status = f"{eol.status} (last CPU release {eol.last_release})" if eol else "no longer developed"
    return info.migrate_why.format(status=status)


def _owned(module: str, snapshot: EnvSnapshot) -> bool:
    return snapshot.get(*_OWNERS[module]) is not None


def _leftover_notes(snapshot: EnvSnapshot) -> list[str]:
    """A package folder that imports but that no installed distribution owns (a half-done uninstall, an egg)."""
    notes = []
    for module in LEFTOVER_MODULES:
        folder = snapshot.modules.get(module)
        if folder and not _owned(module, snapshot):
            notes.append(f"{folder} imports as {module} but no installed distribution owns it (left by an earlier uninstall or an egg): "
                         "compat does not delete it; remove it by hand")
    return notes


def _target_notes(matrix: Matrix, python: PythonTarget, targets: Sequence[TargetPackage], to_torch: Optional[SpecifierSet]) -> list[str]:
    notes = []
    torch = next((t for t in targets if t.component is Component.TORCH), None)
    newest = matrix.versions(Component.TORCH)[0]
    if torch is not None and torch.version < newest and to_torch is None:
        notes.append(f"the stock set for Python {python.label} has torch {torch.version}, not {newest} (the newest torch): {torch.why}")
    return notes


def _cuda_notes(snapshot: EnvSnapshot, targets: Sequence[TargetPackage]) -> list[str]:
    """PyPI's Linux torch is the CUDA build: its nvidia-* and triton wheels stay when the CPU build replaces it."""
    torch = next((t for t in targets if t.component is Component.TORCH), None)
    if torch is None or torch.local_label != "+cpu":
        return []
    cuda = sorted({d.name for d in snapshot.distributions if d.canonical.startswith("nvidia-") or d.canonical == "triton"})
    if not cuda:
        return []
    return [f"the installed torch is a CUDA build from PyPI; its {len(cuda)} CUDA wheels ({', '.join(cuda[:3])}{', ...' if len(cuda) > 3 else ''}) "
            f"stay installed: the CPU torch {torch.pin} does not use them (pip uninstall them afterwards if nothing else does)"]


def installed_pins(plan: MigrationPlan) -> Mapping[str, str]:
    """The ``install`` object of the document: PEP 503 name -> version with its local label."""
    return {t.name: t.pin for t in plan.targets}
