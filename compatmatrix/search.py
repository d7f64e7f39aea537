"""The resolver's search and its records: a Request -> the newest consistent set (Resolution), or a Conflict.

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

The outcome carries typed explanations (:mod:`compatmatrix.explain` builds them, :mod:`compatmatrix.resolve` attaches
them); ``reasons`` and ``notes`` are their sentences, written by :mod:`compatmatrix.sentences`. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional, Union

from packaging.specifiers import SpecifierSet

from .matrix.model import COMPONENT_ORDER, Component, Matrix
from .reasons import Unsupported
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


def find_set(matrix: Matrix, request: Request) -> Outcome:
    """The newest consistent set for ``request``, or a Conflict, without saying why (resolve.resolve(..., explain=False);
    explain.alternatives tries its changed requests with it)."""
    unsupported = request.platform.unsupported_reason()
    if unsupported:
        return Conflict(request, (Unsupported(unsupported),), unsupported=True)
    picks = search(candidate_table(matrix, request, rejections=False), request)
    if picks is None:
        return Conflict(request, ())
    return Resolution(request, MappingProxyType(picks))
