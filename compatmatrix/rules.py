"""The rules a consistent set obeys, as pure functions over matrix entries.

Two kinds of rule:

* *unary*: can this release be installed at all for the target (user constraint, a wheel for this
  Python on some host, not yanked unless pinned, the library features the profile needs)?
  :func:`candidates` applies them and keeps a :class:`Rejection` for every release it drops.
* *pairwise*: do two chosen releases work together (IPEX's import check accepts the torch,
  oneccl_bind_pt is built for exactly that torch, ...)?  :func:`pair_problem` returns the reason
  sentence, or ``None``.

The resolver, the explanations and (later) the environment checks all use these same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import (
    CclRelease,
    Component,
    Host,
    IpexRelease,
    LibraryLine,
    Matrix,
    TorchRelease,
    WheelSet,
)
from .target import PythonTarget

Release = Union[TorchRelease, IpexRelease, CclRelease, LibraryLine]


@dataclass(frozen=True)
class Candidate:
    """A release that passed every unary rule, with the host it will come from."""

    component: Component
    version: Version
    release: Release
    host: Host
    wheels: Optional[WheelSet]  # None for pure-Python libraries taken from PyPI

    @property
    def local_label(self) -> str:
        return self.wheels.local_label if self.wheels else ""

    def __str__(self) -> str:
        return f"{self.component.label} {self.version}"


@dataclass(frozen=True)
class Rejection:
    """A release dropped by a unary rule: ``kind`` is user, python, yanked, feature or requires-python."""

    component: Component
    version: Version
    kind: str
    reason: str


def is_pin(spec: Optional[SpecifierSet]) -> bool:
    """True for ``==X`` / ``===X`` without a wildcard: the user asked for that exact release."""
    if spec is None or len(spec) != 1:
        return False
    (single,) = tuple(spec)
    return single.operator in ("==", "===") and not single.version.endswith(".*")


def spec_text(component: Component, spec: SpecifierSet) -> str:
    return f"{component.label}{spec}"


_OPERATOR_ORDER = {">=": 0, ">": 1, "~=": 2, "==": 3, "===": 4, "!=": 5, "<": 6, "<=": 7}


def range_text(spec: SpecifierSet) -> str:
    """A specifier set written lower bound first (``>=4.29.0,<5.1.0``), as people read ranges."""
    return ",".join(str(s) for s in sorted(spec, key=lambda s: (_OPERATOR_ORDER.get(s.operator, 9), s.version)))


def python_list(pythons) -> str:
    if not pythons:
        return "none"
    return ", ".join(f"{v.major}.{v.minor}" for v in sorted(pythons))


def releases_of(matrix: Matrix, component: Component) -> Sequence[Release]:
    """Every release (or library line) of a component, newest first."""
    table: dict[Component, Sequence[Release]] = {
        Component.TORCH: matrix.torch,
        Component.IPEX: matrix.ipex,
        Component.CCL: matrix.ccl,
        Component.TRANSFORMERS: matrix.transformers,
        Component.ACCELERATE: matrix.accelerate,
    }
    return table[component]


def all_versions(matrix: Matrix, component: Component) -> list[Version]:
    """Every known version of a component, newest first (library lines expanded)."""
    versions: list[Version] = []
    for release in releases_of(matrix, component):
        versions.extend(release.versions if isinstance(release, LibraryLine) else [release.version])
    return sorted(versions, reverse=True)


def yanked_wheels(release) -> Optional[WheelSet]:
    """The wheel set that marks this release yanked (PyPI), or None."""
    return next((w for w in getattr(release, "wheels", ()) if w.yanked), None)


def _wheel_candidate(
    matrix: Matrix,
    component: Component,
    release: Union[TorchRelease, IpexRelease, CclRelease],
    python: PythonTarget,
    pinned: bool,
) -> Union[Candidate, Rejection]:
    by_host = {w.host: w for w in release.wheels}
    order = [h for h in matrix.policy.host_preference[component] if h in by_host]
    order += [h for h in by_host if h not in order]
    yanked = yanked_wheels(release)
    for host_id in order:
        wheels = by_host[host_id]
        if not wheels.has_python(python.version):
            continue
        if yanked is not None and not pinned:
            # Yanked is a property of the version, not of one host: the same build on another
            # host is no better. Only an explicit == pin takes it.
            why = f" ({yanked.yanked_reason})" if yanked.yanked_reason else ""
            return Rejection(
                component,
                release.version,
                "yanked",
                f"{component.label} {release.version} is yanked on {yanked.host}{why}; pin {component.label}=={release.version} to use it anyway",
            )
        return Candidate(component, release.version, release, matrix.hosts[host_id], wheels)
    coverage = "; ".join(f"{w.host}: {python_list(w.python)}" for w in release.wheels)
    return Rejection(
        component,
        release.version,
        "python",
        f"{component.label} {release.version} has no wheel for Python {python.label} ({coverage})",
    )


def candidates(
    matrix: Matrix,
    component: Component,
    python: PythonTarget,
    spec: Optional[SpecifierSet],
    features: Sequence[tuple[str, str]] = (),
) -> tuple[list[Candidate], list[Rejection]]:
    """Releases of ``component`` that pass every unary rule (newest first), and those that do not."""
    kept: list[Candidate] = []
    rejected: list[Rejection] = []
    pinned = is_pin(spec)
    for release in releases_of(matrix, component):
        if isinstance(release, LibraryLine):
            _library_candidates(matrix, component, release, python, spec, pinned, features, kept, rejected)
            continue
        if spec is not None and not spec.contains(release.version, prereleases=True):
            rejected.append(Rejection(component, release.version, "user", f"you asked for {spec_text(component, spec)}"))
            continue
        outcome = _wheel_candidate(matrix, component, release, python, pinned)
        if isinstance(outcome, Candidate):
            kept.append(outcome)
        else:
            rejected.append(outcome)
    return kept, rejected


def _library_candidates(
    matrix: Matrix,
    component: Component,
    line: LibraryLine,
    python: PythonTarget,
    spec: Optional[SpecifierSet],
    pinned: bool,
    features: Sequence[tuple[str, str]],
    kept: list[Candidate],
    rejected: list[Rejection],
) -> None:
    """A library line yields at most one candidate: its newest release that passes the rules.

    Everything the matrix knows about a line (Requires-Python, minimum torch, features) holds
    for every release of it, so an older release of the same line can never fit better.
    """
    package = component.distribution
    wanted = [matrix.feature(pkg, name) for pkg, name in features if pkg == package]
    line_problem = None
    if line.requires_python is not None and not line.requires_python.contains(python.for_requires_python, prereleases=True):
        line_problem = ("requires-python", f"{package} {line.line}.* requires Python {line.requires_python}")
    for version in line.versions:
        if spec is not None and not spec.contains(version, prereleases=True):
            rejected.append(Rejection(component, version, "user", f"you asked for {spec_text(component, spec)}"))
            continue
        if line_problem:
            rejected.append(Rejection(component, version, line_problem[0], line_problem[1]))
            continue
        missing = next((f for f in wanted if not f.present_in(version)), None)
        if missing is not None:
            rejected.append(Rejection(component, version, "feature", f"only {package}{range_text(missing.versions)} {missing.description}"))
            continue
        if version in line.yanked and not pinned:
            rejected.append(
                Rejection(component, version, "yanked", f"{package} {version} is yanked on PyPI; pin {package}=={version} to use it anyway")
            )
            continue
        host = matrix.hosts[matrix.policy.host_preference[component][0]]
        kept.append(Candidate(component, version, line, host, None))
        return


def pair_problem(a: Candidate, b: Candidate) -> Optional[str]:
    """Why two candidates cannot be installed together, or None when they can."""
    by_component = {a.component: a, b.component: b}
    torch = by_component.get(Component.TORCH)
    if torch is not None:
        other = b if a is torch else a
        return torch_pair_problem(other.component, other.release, other.version, torch.version)
    transformers = by_component.get(Component.TRANSFORMERS)
    accelerate = by_component.get(Component.ACCELERATE)
    if transformers is not None and accelerate is not None and isinstance(transformers.release, LibraryLine):
        return transformers_accelerate_problem(transformers.release, transformers.version, accelerate.version)
    return None


def torch_pair_problem(component: Component, release: Release, version: Version, torch: Version) -> Optional[str]:
    """Why ``component`` ``version`` cannot run with ``torch``, or None."""
    if isinstance(release, IpexRelease):
        if not ipex_accepts_torch(release, torch):
            return f"intel-extension-for-pytorch {version} {ipex_torch_phrase(release)}, not torch {torch}"
        return None
    if isinstance(release, CclRelease):
        if torch not in release.torch_versions:
            return f"oneccl_bind_pt {version} {ccl_torch_phrase(release)}, not torch {torch}"
        return None
    if isinstance(release, LibraryLine):
        if release.torch_min is not None and torch < release.torch_min:
            return f"{release.package} {version} needs torch >= {release.torch_min}, not torch {torch}"
        return None
    return None


def ipex_accepts_torch(release: IpexRelease, torch: Version) -> bool:
    """IPEX works with the torch major.minor it was built for, and its import check (if any) must pass."""
    return torch.release[:2] == release.torch.release[:2] and release.torch_accepts.contains(torch, prereleases=True)


def ipex_torch_phrase(release: IpexRelease) -> str:
    series = f"{release.torch.major}.{release.torch.minor}.*"
    if str(release.torch_accepts):
        return f"is built for torch {release.torch} and its import check accepts only torch{release.torch_accepts}"
    return f"is built for torch {release.torch} and works only with torch {series} (it has no import check)"


def ccl_torch_phrase(release: CclRelease) -> str:
    if release.torch_also:
        also = ", ".join(str(v) for v in release.torch_also)
        return f"is built for torch {release.torch} only (Intel also ships it with torch {also})"
    return f"is built for torch {release.torch} only"


def transformers_accelerate_problem(line: LibraryLine, version: Version, accelerate: Version) -> Optional[str]:
    if line.accelerate_min is not None and accelerate < line.accelerate_min:
        return f"transformers {version} needs accelerate >= {line.accelerate_min} for its Trainer, not accelerate {accelerate}"
    return None


def set_problems(picks: Mapping[Component, Candidate]) -> list[str]:
    """Every pairwise rule a chosen set breaks (empty for a consistent set)."""
    problems = []
    ordered = list(picks.values())
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            problem = pair_problem(a, b)
            if problem:
                problems.append(problem)
    return problems
