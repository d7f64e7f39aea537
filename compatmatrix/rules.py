"""The rules a consistent set obeys: data, and pure functions over matrix entries.

Two kinds of rule:

* *unary*: can this release be installed at all for the target (the user's constraint, a wheel for
  this Python on some host, not yanked unless pinned, the library features the profile needs)?
  :func:`candidates` applies them and keeps a :class:`Rejection` for every release it drops, with a
  typed cause: :class:`UserConstraint`, :class:`NoWheel`, :class:`RequiresPython`,
  :class:`MissingFeature` or :class:`Yanked`.
* *pairwise*: do two chosen releases work together?  Every such fact is a :class:`PairRule` in
  :data:`PAIR_RULES` (which two components, the predicate, its evidence and where its facts live);
  :func:`pair_problem` returns a :class:`Rejected` naming the rule, or ``None``.

The resolver, the explanations and the environment checks all use these same objects.  Nothing here
writes sentences: :mod:`compatmatrix.sentences` does, from these types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import (
    Component,
    Feature,
    Host,
    Matrix,
    Release,
    WheelSet,
    Yank,
)
from .record import Record
from .target import PythonTarget


@dataclass(frozen=True)
class Candidate:
    """A release that passed every unary rule, with the host it will come from (a dataclass: callers replace its host)."""

    component: Component
    version: Version
    release: Release
    host: Host
    wheels: Optional[WheelSet]  # None for pure-Python libraries taken from their index

    @property
    def local_label(self) -> str:
        return self.wheels.local_label if self.wheels else ""

    def __str__(self) -> str:
        return f"{self.component.label} {self.version}"


# --- unary rules -------------------------------------------------------------------------------


class UserConstraint(Record):
    """The release does not match what the user asked for."""

    spec: SpecifierSet
    kind: ClassVar[str] = "user"


class NoWheel(Record):
    """No host has a wheel of the release for the target Python (``wheels``: its coverage, host by host)."""

    python: PythonTarget
    wheels: tuple[WheelSet, ...]
    kind: ClassVar[str] = "python"


class RequiresPython(Record):
    """A pure-Python line whose Requires-Python excludes the target."""

    line: Version
    spec: SpecifierSet
    kind: ClassVar[str] = "requires-python"


class MissingFeature(Record):
    """The release lacks a library feature the profile needs."""

    feature: Feature
    kind: ClassVar[str] = "feature"


class Yanked(Record):
    """The release is yanked and was not pinned with ``==``."""

    yank: Yank
    kind: ClassVar[str] = "yanked"


Cause = Union[UserConstraint, NoWheel, RequiresPython, MissingFeature, Yanked]


class Rejection(Record):
    """A release dropped by a unary rule, and why."""

    component: Component
    version: Version
    release: Release
    cause: Cause

    @property
    def kind(self) -> str:
        """user, python, requires-python, feature or yanked."""
        return self.cause.kind


def is_pin(spec: Optional[SpecifierSet]) -> bool:
    """True for ``==X`` / ``===X`` without a wildcard: the user asked for that exact release."""
    if spec is None or len(spec) != 1:
        return False
    (single,) = tuple(spec)
    return single.operator in ("==", "===") and not single.version.endswith(".*")


def candidates(
    matrix: Matrix,
    component: Component,
    python: PythonTarget,
    spec: Optional[SpecifierSet],
    features: Sequence[tuple[str, str]] = (),
) -> tuple[list[Candidate], list[Rejection]]:
    """Releases of ``component`` that pass every unary rule (newest first), and those that do not.

    The rules, in order: the user's constraint, a wheel for this Python (a pure-Python line: its
    Requires-Python), the profile's features, not yanked unless pinned.  Each entry yields at most one
    candidate: its newest release that passes.  Everything the matrix knows about a library line
    (Requires-Python, minimum torch, features) holds for every release of it, so an older release of
    the same line can never fit better.
    """
    kept: list[Candidate] = []
    rejected: list[Rejection] = []
    pinned = is_pin(spec)
    wanted = [MissingFeature(matrix.feature(package, name)) for package, name in features if package == component.distribution]
    asked = UserConstraint(spec) if spec is not None else None
    requires = python.for_requires_python
    for release in matrix.releases[component]:
        coverage: Optional[Cause] = None
        covered = False
        for version in release.versions:
            if spec is not None and not spec.contains(version, prereleases=True):
                cause: Optional[Cause] = asked
            else:
                if not covered:  # the same for every release of the entry
                    coverage, covered = _python_problem(release, python, requires), True
                cause = coverage or _feature_or_yank(release, version, wanted, pinned)
            if cause is not None:
                rejected.append(Rejection(component, version, release, cause))
                continue
            kept.append(_candidate(matrix, component, release, version, python))
            break
    return kept, rejected


def _python_problem(release: Release, python: PythonTarget, requires: Version) -> Optional[Cause]:
    """Binary entries: some host has a wheel for the target Python; pure-Python lines: Requires-Python admits it."""
    if release.wheels:
        return None if any(w.has_python(python.version) for w in release.wheels) else NoWheel(python, release.wheels)
    if release.requires_python is not None and not release.requires_python.contains(requires, prereleases=True):
        return RequiresPython(Version(f"{release.version.major}.{release.version.minor}"), release.requires_python)
    return None


def _feature_or_yank(release: Release, version: Version, features: Sequence[MissingFeature], pinned: bool) -> Optional[Cause]:
    missing = next((f for f in features if not f.feature.present_in(version)), None)
    if missing is not None:
        return missing
    # Yanked is a property of the version, not of one host: the same build on another host is no
    # better. Only an explicit == pin takes it.
    yank = None if pinned else release.yank(version)
    return Yanked(yank) if yank is not None else None


def _candidate(matrix: Matrix, component: Component, release: Release, version: Version, python: PythonTarget) -> Candidate:
    """The release from the first host, in the component's order of preference (then as listed), with a wheel for this Python."""
    if not release.wheels:
        return Candidate(component, version, release, matrix.hosts[matrix.policy.host_preference[component][0]], None)
    by_host = {w.host: w for w in release.wheels}
    order = [h for h in matrix.policy.host_preference.get(component, ()) if h in by_host]
    order += [h for h in by_host if h not in order]
    chosen = next(by_host[h] for h in order if by_host[h].has_python(python.version))
    return Candidate(component, version, release, matrix.hosts[chosen.host], chosen)


# --- pair rules --------------------------------------------------------------------------------


class PairRule(Record):
    """One pairing fact between two components.

    ``holds(release, version, partner_version)`` reads the fact off ``subject``'s release; the
    ``partner`` side is a version.  ``evidence`` says how the fact is known (see
    :data:`~compatmatrix.matrix.model.EVIDENCE`); ``source`` names the matrix fields it reads (each
    release entry carries the source of its own values).
    """

    name: str
    subject: Component
    partner: Component
    holds: Callable[[Any, Version, Version], bool]
    evidence: str
    source: str

    def check(self, release: Release, version: Version, partner_version: Version) -> Optional["Rejected"]:
        if self.holds(release, version, partner_version):
            return None
        evidence = self.evidence if release.provenance.verified else "unverified"
        return Rejected(self.subject, version, release, self.partner, partner_version, self, evidence, release.provenance.sources)


class Rejected(Record):
    """A release ruled out by a pair rule next to a partner version.

    ``evidence`` is the rule's, or ``unverified`` when the release entry the fact comes from could not
    be checked against its source; ``source`` is that entry's sources.
    """

    component: Component
    version: Version
    release: Release
    partner: Component
    partner_version: Version
    rule: PairRule
    evidence: str
    source: tuple[str, ...]


def _ipex_import_check(release: Any, version: Version, torch: Version) -> bool:
    return bool(release.torch_accepts.contains(torch, prereleases=True))


def _ipex_torch_series(release: Any, version: Version, torch: Version) -> bool:
    return bool(torch.release[:2] == release.torch.release[:2])


def _ccl_built_for(release: Any, version: Version, torch: Version) -> bool:
    return torch in release.torch_versions


def _pins_torch(release: Any, version: Version, torch: Version) -> bool:
    return bool(torch == release.torch)


def _torch_min(release: Any, version: Version, torch: Version) -> bool:
    return release.torch_min is None or torch >= release.torch_min


def _accelerate_min(release: Any, version: Version, accelerate: Version) -> bool:
    return release.accelerate_min is None or accelerate >= release.accelerate_min


T, IPEX, CCL = Component.TORCH, Component.IPEX, Component.CCL

#: Every pairing fact the resolver, the explanations and `compat check` apply, in the order they are tried.
PAIR_RULES: tuple[PairRule, ...] = (
    PairRule("ipex-import-check", IPEX, T, _ipex_import_check, "import-guard", "[[ipex]] torch_accepts (guard: how it fails)"),
    PairRule("ipex-torch-series", IPEX, T, _ipex_torch_series, "built-for", "[[ipex]] torch (the major.minor it is built for)"),
    PairRule("ccl-torch", CCL, T, _ccl_built_for, "built-for", "[[oneccl_bind_pt]] torch, torch_also"),
    PairRule("torchvision-torch", Component.TORCHVISION, T, _pins_torch, "built-for", "[[torchvision]] torch (its pinned requirement)"),
    PairRule("torchaudio-torch", Component.TORCHAUDIO, T, _pins_torch, "built-for", "[[torchaudio]] torch (its pinned requirement)"),
    PairRule("transformers-torch", Component.TRANSFORMERS, T, _torch_min, "declared", "[[transformers]] torch_min"),
    PairRule("accelerate-torch", Component.ACCELERATE, T, _torch_min, "declared", "[[accelerate]] torch_min"),
    PairRule(
        "transformers-accelerate", Component.TRANSFORMERS, Component.ACCELERATE, _accelerate_min, "import-guard",
        "[[transformers]] accelerate_min (its Trainer's version check)",
    ),
)

_BY_PAIR: dict[frozenset[Component], tuple[PairRule, ...]] = {}
for _rule in PAIR_RULES:
    _key = frozenset((_rule.subject, _rule.partner))
    _BY_PAIR[_key] = (*_BY_PAIR.get(_key, ()), _rule)
del _rule, _key


def rules_between(a: Component, b: Component) -> tuple[PairRule, ...]:
    """The pair rules between two components (either may be the subject)."""
    return _BY_PAIR.get(frozenset((a, b)), ())


def problem_with(component: Component, release: Release, version: Version, partner: Component, partner_version: Version) -> Optional[Rejected]:
    """The first rule in which ``release`` (``version`` of ``component``) rules out ``partner_version``, or None."""
    for rule in rules_between(component, partner):
        if rule.subject is component:
            rejected = rule.check(release, version, partner_version)
            if rejected is not None:
                return rejected
    return None


def fits(component: Component, release: Release, version: Version, partner: Component, partner_version: Version) -> bool:
    """Does ``version`` of ``component`` work next to ``partner_version`` of ``partner``, by every rule it states?"""
    return problem_with(component, release, version, partner, partner_version) is None


def pair_problem(a: Candidate, b: Candidate) -> Optional[Rejected]:
    """Why two candidates cannot be installed together, or None when they can."""
    for rule in rules_between(a.component, b.component):
        subject, partner = (a, b) if rule.subject is a.component else (b, a)
        rejected = rule.check(subject.release, subject.version, partner.version)
        if rejected is not None:
            return rejected
    return None


def set_problems(picks: Mapping[Component, Candidate]) -> list[Rejected]:
    """Every pairwise rule a chosen set breaks (empty for a consistent set)."""
    problems = []
    ordered = list(picks.values())
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            problem = pair_problem(a, b)
            if problem:
                problems.append(problem)
    return problems
