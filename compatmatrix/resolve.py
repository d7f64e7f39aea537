"""Request -> the newest consistent set, or a Conflict that says why none exists.

"Newest" is lexicographic in :data:`~compatmatrix.matrix.model.COMPONENT_ORDER`: the newest torch
for which a full set exists, then the newest IPEX for that torch, then oneccl_bind_pt, torchvision,
torchaudio, transformers, accelerate.  Evidence refines it (docs/MATRIX.md, "Evidence"): torch is taken
by major.minor series, newest first; within a series the set whose weakest graded pairing is best known
wins (no [[known_bad]] set before a known-bad one, then built-for, reported-working, unverified), and
only then the newer torch; each component's candidates next to a torch are ordered the same way (then
the exact IPEX build, then the newest).  Every other component pairs with torch
(:data:`~compatmatrix.rules.PAIR_RULES`); the rules between the others split them into independent
groups (transformers with accelerate; each of the rest alone).  So trying torch releases
newest-first and, for each, the best assignment of each group (a small backtracking search inside
the group) is complete and deterministic.

The outcome carries typed explanations (:mod:`compatmatrix.explain` builds them); ``reasons`` and
``notes`` are their sentences, written by :mod:`compatmatrix.sentences`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import UsageError, shown
from .matrix.model import COMPONENT_ORDER, Component, Matrix
from .record import Record, replace
from .rules import PAIR_RULES, Candidate, Rejection, candidates, pair_problem, set_standing, standing, usable
from .target import Platform, PythonTarget


class Request(Record):
    python: PythonTarget
    platform: Platform
    components: frozenset[Component]
    specifiers: Mapping[Component, SpecifierSet] = MappingProxyType({})  # read-only: one shared empty default
    features: tuple[tuple[str, str], ...] = ()
    profile: Optional[str] = None
    notes: tuple[str, ...] = ()  # how the request was read (local labels dropped, no profile, ...)

    def spec(self, component: Component) -> Optional[SpecifierSet]:
        return self.specifiers.get(component)

    @property
    def ordered_components(self) -> list[Component]:
        return [c for c in COMPONENT_ORDER if c in self.components]

    def replace(self, **changes) -> "Request":
        return replace(self, **changes)


class Resolution(Record):
    request: Request
    picks: Mapping[Component, Candidate]
    explanation: tuple[Any, ...] = ()  # explain.PickReason per pick: why it is the newest that fits
    remarks: tuple[Any, ...] = ()  # explain's notes: end-of-life, unverified facts the answer rests on, next steps

    ok = True

    @functools.cached_property
    def reasons(self) -> tuple[str, ...]:
        from .sentences import sentences

        return sentences(self.explanation)

    @functools.cached_property
    def notes(self) -> tuple[str, ...]:
        from .sentences import sentences

        return sentences(self.remarks)


class Alternative(Record):
    edit: Any  # explain's change to the request: MovePin, PinYanked, DropConstraint, UseProfile, UsePython, LeaveOut
    resolution: Resolution
    why: Any = None  # explain's Because: why this change is offered (None: no reason recorded)

    @property
    def change(self) -> str:
        """"drop the constraint torch==1.12.1", "use Python 3.10"."""
        from .sentences import sentence

        return sentence(self.edit)

    @property
    def reason(self) -> str:
        """Why it is offered: "the nearest oneccl_bind_pt release to 1.13 with a set whose pairings are all built for their torch"."""
        from .sentences import sentence

        return sentence(self.why) if self.why is not None else ""


class Conflict(Record):
    request: Request
    explanation: tuple[Any, ...]  # explain's reasons, most fundamental first
    alternatives: tuple[Alternative, ...] = ()
    unsupported: bool = False

    ok = False

    @functools.cached_property
    def reasons(self) -> tuple[str, ...]:
        from .sentences import sentences

        return sentences(self.explanation)


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
    specifiers: dict[Component, list[SpecifierSet]] = {}
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
        requirement = _requirement(text)
        check_specifier_versions(text, requirement.specifier)
        component = _component(requirement.name)
        refuse_device_pins(matrix, component, requirement.specifier)
        components.add(component)
        specifier, label_note = _without_local_labels(component, requirement.specifier)
        if label_note:
            notes.append(label_note)
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


class CandidateTable(Record):
    """The unary-filtered candidates and rejections of every wanted component."""

    kept: Mapping[Component, Sequence[Candidate]]
    rejected: Mapping[Component, Sequence[Rejection]]


def candidate_table(matrix: Matrix, request: Request, rejections: bool = True) -> CandidateTable:
    """Every wanted component's candidates; ``rejections=False``: what was dropped is left out (empty lists), for a
    search that explains nothing."""
    kept, rejected = {}, {}
    for component in request.ordered_components:
        if rejections:
            kept[component], rejected[component] = candidates(
                matrix, component, request.python, request.spec(component), request.features, request.platform
            )
        else:
            kept[component] = usable(matrix, component, request.python, request.spec(component), request.features, request.platform)
            rejected[component] = []
    return CandidateTable(kept, rejected)


def complete_set(table: CandidateTable, torch: Candidate, components: Sequence[Component]) -> Optional[dict[Component, Candidate]]:
    """The newest set built on ``torch``, or None when some group of components has nothing that fits it."""
    picks = {Component.TORCH: torch}
    for group in groups(tuple(components)):
        chosen = best_in_group(table, torch, group)
        if chosen is None:
            return None
        picks.update(chosen)
    return {c: picks[c] for c in COMPONENT_ORDER if c in picks}


@functools.lru_cache(maxsize=64)
def groups(components: tuple[Component, ...]) -> tuple[tuple[Component, ...], ...]:
    """The components other than torch, split into groups no pair rule connects (each in COMPONENT_ORDER).

    Given torch, groups are independent: the newest set is the newest assignment of each group.
    """
    others = [c for c in COMPONENT_ORDER if c in components and c is not Component.TORCH]
    group_of = {c: {c} for c in others}
    for rule in PAIR_RULES:
        if rule.subject in group_of and rule.partner in group_of and group_of[rule.subject] is not group_of[rule.partner]:
            merged = group_of[rule.subject] | group_of[rule.partner]
            for c in merged:
                group_of[c] = merged
    seen: list[set[Component]] = []
    for c in others:
        if not any(group_of[c] is g for g in seen):
            seen.append(group_of[c])
    return tuple(tuple(c for c in others if c in g) for g in seen)


def best_in_group(table: CandidateTable, torch: Candidate, group: Sequence[Component]) -> Optional[dict[Component, Candidate]]:
    """The best assignment of ``group`` next to ``torch`` (each component's candidates in order of
    :func:`preference`, backtracking over the rules inside the group), or None."""
    if len(group) == 1:  # the common case: no rule inside the group, the best fitting candidate
        (component,) = group
        best = max((c for c in table.kept[component] if pair_problem(c, torch) is None), key=lambda c: preference(c, torch), default=None)
        return None if best is None else {component: best}
    pools = [sorted((c for c in table.kept[component] if pair_problem(c, torch) is None), key=lambda c: preference(c, torch), reverse=True) for component in group]
    chosen: dict[Component, Candidate] = {}

    def walk(i: int) -> bool:
        if i == len(pools):
            return True
        for candidate in pools[i]:
            if all(pair_problem(candidate, other) is None for other in chosen.values()):
                chosen[candidate.component] = candidate
                if walk(i + 1):
                    return True
                del chosen[candidate.component]
        return False

    return dict(chosen) if walk(0) else None


def preference(candidate: Candidate, torch: Candidate) -> tuple:
    """Among releases that fit ``torch`` (the larger the better): not a known-bad set, then the strongest evidence
    of the pairing (built-for, reported-working, unverified), then the one built for exactly that torch, then the newest.

    IPEX's import check accepts any torch of the same major.minor, but a release built against
    torch 1.13.1 next to torch 1.13.0 is a needless risk when a build for 1.13.0 exists.
    """
    bad, rank = standing(candidate, torch)
    built_for = getattr(candidate.release, "torch", None)
    return (-bad, -rank, built_for == torch.version, candidate.version)


def search(table: CandidateTable, request: Request) -> Optional[dict[Component, Candidate]]:
    """The best set: torch series newest first; inside a series the set of the best standing, then the newest torch."""
    components = request.ordered_components
    if any(not table.kept[c] for c in components):
        return None
    torches = table.kept[Component.TORCH]
    i = 0
    while i < len(torches):
        series = torches[i].version.release[:2]
        best: Optional[dict[Component, Candidate]] = None
        best_standing = (0, 0)
        while i < len(torches) and torches[i].version.release[:2] == series:
            if best is None or best_standing > (0, 0):  # a set built for its torch cannot be bettered by an older torch
                picks = complete_set(table, torches[i], components)
                if picks is not None:
                    found = set_standing(picks)
                    if best is None or found < best_standing:
                        best, best_standing = picks, found
            i += 1
        if best is not None:
            return best
    return None


def resolve(matrix: Matrix, request: Request, *, explain: bool = True) -> Outcome:
    """Find the newest consistent set for ``request``; with ``explain``, say why (or why not)."""
    from . import explain as explanations  # explanations build on resolve(); imported late

    unsupported = request.platform.unsupported_reason()
    if unsupported:
        return Conflict(request, (explanations.Unsupported(unsupported),), unsupported=True)
    table = candidate_table(matrix, request, rejections=explain)
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
    return replace(
        resolution,
        explanation=tuple(explanations.pick_reasons(matrix, request, table, picks)),
        remarks=tuple(explanations.notes(matrix, picks, request.platform, request.python) + explanations.yanked_newer_notes(table, picks)),
    )
