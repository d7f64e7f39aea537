"""compat resolve's core: a request read from the command line and requirement files (``build_request``), then the newest
consistent set for it, or a Conflict, with why (``resolve``: the search, compatmatrix/search.py, then the explanations,
compatmatrix/explain.py, attached to its outcome).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import UsageError, shown
from .matrix.model import Component, Matrix, Profile
from .reasons import Unsupported
from .search import Conflict, Outcome, Request, Resolution, candidate_table, find_set, search
from .target import Platform, PythonTarget


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
    specifiers: dict[Component, list[SpecifierSet]] = {}
    with_components = list(with_components)
    requirements = list(requirements)

    notes: list[str] = []
    profile = _profile_name(matrix, profile, bool(with_components or requirements), notes)
    if profile is not None:
        chosen = _profile(matrix, profile)
        components |= chosen.components
        features += chosen.features
    for name in with_components:
        components.add(_component(name))
    for text in requirements:
        component, specifier = _read_requirement(matrix, text, notes)
        components.add(component)
        if specifier:
            specifiers.setdefault(component, []).append(specifier)
    if Component.TRANSFORMERS in components:
        components.add(Component.ACCELERATE)  # the Trainer needs accelerate
    if Component.CCL in components and not any(package != "torch" for package, _ in features):
        # No profile said which library features it needs: ask for the ones ccl needs.
        features += [f for f in matrix.policy.features_with_ccl if Component.from_name(f[0]) in components]
    return Request(
        python=python,
        platform=platform,
        components=frozenset(components),
        specifiers=MappingProxyType({component: all_of(sets) for component, sets in specifiers.items()}),
        features=tuple(dict.fromkeys(features)),
        profile=profile,
        notes=tuple(notes),
    )


def _profile_name(matrix: Matrix, profile: Optional[str], names_packages: bool, notes: list[str]) -> Optional[str]:
    """The profile asked for; the default one when nothing is named; None (with a note) when only packages are."""
    if profile is None and not names_packages:
        return matrix.policy.default_profile
    if profile is None:
        notes.append(
            f"no profile: resolving only the packages named (and torch); add --profile {matrix.policy.default_profile} for the full stack"
        )
    return profile


def _profile(matrix: Matrix, name: str) -> Profile:
    if name not in matrix.profiles:
        raise UsageError(f"'{name}' is not a profile.", f"Use one of: {', '.join(sorted(matrix.profiles))}.")
    return matrix.profiles[name]


def _read_requirement(matrix: Matrix, text: str, notes: list[str]) -> tuple[Component, SpecifierSet]:
    """One PEP 508 requirement: its package and its specifier without local labels (a note says what was dropped);
    UsageError for a version that is none, an unknown package or a device pin."""
    requirement = _requirement(text)
    check_specifier_versions(text, requirement.specifier)
    component = _component(requirement.name)
    refuse_device_pins(matrix, component, requirement.specifier)
    specifier, label_note = _without_local_labels(component, requirement.specifier)
    if label_note:
        notes.append(label_note)
    return component, specifier


def all_of(sets: Iterable[SpecifierSet]) -> SpecifierSet:
    """The specifier sets together (what ``a & b & ...`` allows), each specifier once, in one step. packaging >= 26
    keeps repeats (``&`` concatenates, and copies): a file pinning one package on 40,000 lines was quadratic to read
    and left a set of 40,000 specifiers for every later ``contains``."""
    return SpecifierSet(dict.fromkeys(spec for specifier_set in sets for spec in specifier_set))


def _requirement(text: str) -> Any:
    """A name and a version specifier (PEP 508, no URL, marker or extras), or the UsageError that says why not."""
    # imported here: packaging's requirement parser costs ~3.5 ms of start-up, and a profile alone needs none
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise UsageError(f"'{shown(text)}' is not a valid requirement ({shown(str(exc), 120)}).", "Write requirements like 'torch==2.7.0' or 'transformers<4.50'.") from None
    if requirement.url or requirement.marker or requirement.extras:
        raise UsageError(f"'{shown(text)}' has a URL, marker or extras, which compat resolve does not take.", "Give a name and a version specifier only.")
    return requirement


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


def with_constraints(matrix: Matrix, request: Request, constraints: Mapping[Component, SpecifierSet]) -> Request:
    """Add constraints (pip's -c files) to a request: they limit the versions of packages the request already asks
    for, and ask for nothing new. A constraint pinning an Intel GPU build is refused like a requirement."""
    specifiers = dict(request.specifiers)
    notes = list(request.notes)
    for component, spec in constraints.items():
        refuse_device_pins(matrix, component, spec)
        if component not in request.components:
            continue
        stripped, note = _without_local_labels(component, spec)
        if note:
            notes.append(note)
        if stripped:
            specifiers[component] = all_of([specifiers[component], stripped]) if component in specifiers else stripped
    return request.replace(specifiers=MappingProxyType(specifiers), notes=tuple(dict.fromkeys(notes)))


def refuse_device_pins(matrix: Matrix, component: Component, spec: SpecifierSet) -> None:
    """A pin (``==``) of an Intel GPU build (``oneccl_bind_pt==2.5.0+xpu``, ``intel-extension-for-pytorch==2.1.10``)
    is a UsageError: compat covers the CPU stack, and the CPU release of the same number is another build."""
    from .devices import device_build

    for item in spec:
        if item.operator != "==" or item.version.endswith(".*"):
            continue
        try:
            version = Version(item.version)
        except (InvalidVersion, ValueError):
            continue  # check_specifier_versions has said why
        build = device_build(matrix, component, version)
        if build is not None:
            from .sentences import device_build_fix, device_build_sentence

            raise UsageError(device_build_sentence(build) + ".", device_build_fix(build))


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


def resolve(matrix: Matrix, request: Request, *, explain: bool = True) -> Outcome:
    """Find the newest consistent set for ``request``; with ``explain``, say why (or why not)."""
    if not explain:
        return find_set(matrix, request)
    from . import explain as explanations  # explanations build on the search; imported late (compat check needs none)

    unsupported = request.platform.unsupported_reason()
    if unsupported:
        return Conflict(request, (Unsupported(unsupported),), unsupported=True)
    table = candidate_table(matrix, request)
    picks = search(table, request)
    if picks is None:
        return Conflict(
            request,
            tuple(explanations.conflict_reasons(matrix, request, table)),
            tuple(explanations.alternatives(matrix, request)),
        )
    return Resolution(
        request,
        MappingProxyType(picks),
        explanation=tuple(explanations.pick_reasons(matrix, request, table, picks)),
        remarks=tuple(explanations.notes(matrix, picks, request.platform, request.python) + explanations.yanked_newer_notes(table, picks)),
    )
