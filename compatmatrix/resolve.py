"""Request -> the newest consistent set, or a Conflict that says why none exists.

"Newest" is lexicographic in :data:`~compatmatrix.matrix.model.COMPONENT_ORDER`: the newest torch
for which a full set exists, then the newest IPEX for that torch, then oneccl_bind_pt, transformers,
accelerate.  The rules form a tree (IPEX, oneccl_bind_pt, transformers and accelerate each pair
with torch; accelerate also pairs with transformers), so trying torch releases newest-first and
taking the newest fitting release of each other component is complete and deterministic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Optional, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import UsageError, shown
from .matrix.model import COMPONENT_ORDER, Component, Matrix
from .rules import Candidate, Rejection, candidates, pair_problem
from .target import Platform, PythonTarget


@dataclass(frozen=True)
class Request:
    python: PythonTarget
    platform: Platform
    components: frozenset[Component]
    specifiers: Mapping[Component, SpecifierSet] = field(default_factory=lambda: MappingProxyType({}))
    features: tuple[tuple[str, str], ...] = ()
    profile: Optional[str] = None
    notes: tuple[str, ...] = ()  # how the request was read (local labels dropped, no profile, ...)

    def spec(self, component: Component) -> Optional[SpecifierSet]:
        return self.specifiers.get(component)

    @property
    def ordered_components(self) -> list[Component]:
        return [c for c in COMPONENT_ORDER if c in self.components]

    def replace(self, **changes) -> "Request":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Resolution:
    request: Request
    picks: Mapping[Component, Candidate]
    reasons: tuple[str, ...] = ()  # why each pick is the newest that fits
    notes: tuple[str, ...] = ()  # end-of-life, unverified facts the answer rests on

    ok = True


@dataclass(frozen=True)
class Alternative:
    change: str  # "drop the constraint torch==1.12.1", "use Python 3.10"
    resolution: Resolution


@dataclass(frozen=True)
class Conflict:
    request: Request
    reasons: tuple[str, ...]
    alternatives: tuple[Alternative, ...] = ()
    unsupported: bool = False

    ok = False


Outcome = Union[Resolution, Conflict]


def build_request(
    matrix: Matrix,
    python: PythonTarget,
    platform: Platform,
    profile: Optional[str] = None,
    with_components: Iterable[str] = (),
    requirements: Iterable[str] = (),
) -> Request:
    """Turn the command line's profile, ``--with`` list and PEP 508 requirements into a Request."""
    components: set[Component] = {Component.TORCH}
    features: list[tuple[str, str]] = []
    specifiers: dict[Component, SpecifierSet] = {}
    with_components = list(with_components)
    requirements = list(requirements)

    notes: list[str] = []
    if profile is None and not with_components and not requirements:
        profile = matrix.policy.default_profile
    elif profile is None:
        notes.append(
            f"no profile: resolving only the packages named (and torch); add --profile {matrix.policy.default_profile} for the full stack"
        )
    if profile is not None:
        if profile not in matrix.profiles:
            raise UsageError(f"'{profile}' is not a profile.", f"Use one of: {', '.join(sorted(matrix.profiles))}.")
        chosen = matrix.profiles[profile]
        components |= chosen.components
        features += chosen.features
    for name in with_components:
        components.add(_component(name))
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise UsageError(f"'{shown(text)}' is not a valid requirement ({shown(str(exc), 120)}).", "Write requirements like 'torch==2.7.0' or 'transformers<4.50'.") from None
        if requirement.url or requirement.marker or requirement.extras:
            raise UsageError(f"'{shown(text)}' has a URL, marker or extras, which compat resolve does not take.", "Give a name and a version specifier only.")
        check_specifier_versions(text, requirement.specifier)
        component = _component(requirement.name)
        components.add(component)
        specifier, label_note = _without_local_labels(component, requirement.specifier)
        if label_note:
            notes.append(label_note)
        if specifier:
            specifiers[component] = specifiers[component] & specifier if component in specifiers else specifier
    if Component.TRANSFORMERS in components:
        components.add(Component.ACCELERATE)  # the Trainer needs accelerate
    if Component.CCL in components and not any(package != "torch" for package, _ in features):
        # No profile said which library features it needs: ask for the ones ccl needs.
        features += [f for f in matrix.policy.features_with_ccl if Component.from_name(f[0]) in components]
    return Request(
        python=python,
        platform=platform,
        components=frozenset(components),
        specifiers=MappingProxyType(specifiers),
        features=tuple(dict.fromkeys(features)),
        profile=profile,
        notes=tuple(notes),
    )


def check_specifier_versions(text: str, spec: SpecifierSet) -> None:
    """Every version in a requirement must be one compat can compare: no '===' (string equality), nothing unreadable."""
    for item in spec:
        if item.operator == "===":
            raise UsageError(f"'{shown(text)}' uses '===', which compares strings, not versions.", "Write '==' with a version, e.g. 'torch==2.7.0'.")
        version = item.version[:-2] if item.version.endswith(".*") else item.version
        try:
            Version(version)
        except (InvalidVersion, ValueError):  # ValueError: a number too long for int() (over 4300 digits)
            raise UsageError(f"'{shown(version, 40)}' in a requirement is not a version compat can compare.", "Write a version like 2.7.0.") from None


def _without_local_labels(component: Component, spec: SpecifierSet) -> tuple[SpecifierSet, str]:
    """``torch==1.12.1+cpu`` -> ``torch==1.12.1``: the label names a build, which the host choice already makes."""
    if not any("+" in s.version for s in spec):
        return spec, ""
    parts = []
    for single in spec:
        version = single.version
        if "+" in version:
            public, _, label = version.partition("+")
            version = public
        parts.append(f"{single.operator}{version}")
    stripped = SpecifierSet(",".join(parts))
    return stripped, (
        f"{component.label}{spec} is read as {component.label}{stripped}: the local label (+{label}) names a build; "
        "compat takes each package's CPU build from its host (see the 'from' column)"
    )


def _component(name: str) -> Component:
    try:
        return Component.from_name(name)
    except KeyError:
        known = ", ".join(c.distribution for c in Component)
        raise UsageError(f"'{name}' is not a package compatmatrix resolves.", f"Use one of: {known} (or ipex, ccl).") from None


@dataclass(frozen=True)
class CandidateTable:
    """The unary-filtered candidates and rejections of every wanted component."""

    kept: Mapping[Component, Sequence[Candidate]]
    rejected: Mapping[Component, Sequence[Rejection]]


def candidate_table(matrix: Matrix, request: Request) -> CandidateTable:
    kept, rejected = {}, {}
    for component in request.ordered_components:
        kept[component], rejected[component] = candidates(
            matrix, component, request.python, request.spec(component), request.features
        )
    return CandidateTable(kept, rejected)


def complete_set(table: CandidateTable, torch: Candidate, components: Sequence[Component]) -> Optional[dict[Component, Candidate]]:
    """The newest set built on ``torch``, or None when some component has nothing that fits it."""
    picks = {Component.TORCH: torch}
    for component in (Component.IPEX, Component.CCL):
        if component in components:
            fitting = [c for c in table.kept[component] if pair_problem(c, torch) is None]
            if not fitting:
                return None
            picks[component] = max(fitting, key=lambda c: preference(c, torch))
    want_transformers = Component.TRANSFORMERS in components
    if Component.ACCELERATE in components:
        accelerates = [a for a in table.kept[Component.ACCELERATE] if pair_problem(a, torch) is None]
    else:
        accelerates = []
    if want_transformers:
        for transformers in table.kept[Component.TRANSFORMERS]:
            if pair_problem(transformers, torch) is not None:
                continue
            if Component.ACCELERATE in components:
                accelerate = next((a for a in accelerates if pair_problem(transformers, a) is None), None)
                if accelerate is None:
                    continue
                picks[Component.ACCELERATE] = accelerate
            picks[Component.TRANSFORMERS] = transformers
            break
        else:
            return None
    elif Component.ACCELERATE in components:
        if not accelerates:
            return None
        picks[Component.ACCELERATE] = accelerates[0]
    return {c: picks[c] for c in COMPONENT_ORDER if c in picks}


def preference(candidate: Candidate, torch: Candidate) -> tuple:
    """Among releases that fit ``torch``: the one built for exactly that torch first, then the newest.

    IPEX's import check accepts any torch of the same major.minor, but a release built against
    torch 1.13.1 next to torch 1.13.0 is a needless risk when a build for 1.13.0 exists.
    """
    built_for = getattr(candidate.release, "torch", None)
    return (built_for == torch.version, candidate.version)


def search(table: CandidateTable, request: Request) -> Optional[dict[Component, Candidate]]:
    components = request.ordered_components
    if any(not table.kept[c] for c in components):
        return None
    for torch in table.kept[Component.TORCH]:
        picks = complete_set(table, torch, components)
        if picks is not None:
            return picks
    return None


def resolve(matrix: Matrix, request: Request, *, explain: bool = True) -> Outcome:
    """Find the newest consistent set for ``request``; with ``explain``, say why (or why not)."""
    from . import explain as explanations  # explanations build on resolve(); imported late

    unsupported = request.platform.unsupported_reason()
    if unsupported:
        return Conflict(request, (unsupported,), unsupported=True)
    table = candidate_table(matrix, request)
    picks = search(table, request)
    if picks is None:
        if not explain:
            return Conflict(request, ())
        return Conflict(
            request,
            tuple(explanations.conflict_reasons(matrix, request, table)),
            tuple(explanations.alternatives(matrix, request)),
        )
    resolution = Resolution(request, MappingProxyType(picks))
    if not explain:
        return resolution
    return dataclasses.replace(
        resolution,
        reasons=tuple(explanations.pick_reasons(matrix, request, table, picks)),
        notes=tuple(explanations.notes(matrix, picks) + explanations.yanked_newer_notes(table, picks)),
    )
