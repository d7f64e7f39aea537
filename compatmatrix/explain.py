"""Why a set was chosen, why no set exists, what would work instead, what to know about it: as data.

Pure functions over the matrix, the request and the candidate table the search built (compatmatrix/search.py).
They return the frozen records of compatmatrix/reasons.py (:class:`~compatmatrix.record.Record`s), which hold the
rejections and releases they are about;
:mod:`compatmatrix.sentences` writes their sentences, once.  Nothing here builds or reads a sentence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product
from typing import Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import (
    COMPONENT_ORDER,
    COMPONENTS,
    PAIRING_RANK,
    AbsentRelease,
    CclRelease,
    Component,
    IpexRelease,
    Matrix,
    UnlistedRelease,
    Yank,
    absent_release,
    nearest_pinned,
    security_yank,
)
from .reasons import (
    Because,
    CclWorkerCountNote,
    Change,
    ConflictReason,
    DropConstraint,
    EolNote,
    ExactBuildPreferred,
    FitsNoTorch,
    GlibcUnknownNote,
    GroupHasNoSet,
    IsaFloorNote,
    KnownBadNote,
    LeaveOut,
    MoreFitNoTorch,
    MovePin,
    NewerRuledOut,
    Newest,
    NoCommonTorch,
    NoConsistentCombination,
    NoneMatches,
    NoneUsable,
    NoPartnerForThisTorch,
    NoPartnerForTorch,
    NoPartnerTogether,
    NoSuchRelease,
    NotChosen,
    Note,
    NotInRequest,
    OffBuildNote,
    PairingNote,
    PartnerBreak,
    PickReason,
    PinYanked,
    PythonOutsideRange,
    PythonUndecidedNote,
    RejectionGroup,
    SetvarsNote,
    TorchPairsWith,
    UnlistedNote,
    UnverifiedNote,
    UseProfile,
    UsePython,
    WeakerPairing,
    WeakerSet,
    WhyNot,
    WouldDo,
    YankedElsewhereNote,
    YankedNewerNote,
    YankedPinNote,
)
from .rules import (
    Candidate,
    PairRule,
    Rejection,
    Yanked,
    candidates,
    fits,
    is_pin,
    known_bad,
    pair_problem,
    pairing_evidence,
    python_undecided,
    rules_between,
    set_standing,
    standing,
)
from .search import Alternative, CandidateTable, Request, Resolution, best_in_group, complete_set, find_set, groups, preference
from .target import Platform, PythonTarget

MAX_LISTED = 3
MAX_ALTERNATIVES = 4

def declared_only(picks: Mapping[Component, Any]) -> tuple[str, ...]:
    """The pairings of a set with its torch that rest on the release's declaration alone (a floor or range, evidence
    ``declared``): said as "X declares torch>=Y", never as built for that torch."""
    from .rules import pairing_evidence

    torch = picks.get(Component.TORCH)
    if torch is None:
        return ()
    out = []
    for component, pick in picks.items():
        if component is Component.TORCH:
            continue
        pairing = pairing_evidence(pick.release, torch.version)
        requirement = getattr(pick.release, "requirement", None)
        if pairing is not None and pairing.evidence == "declared" and requirement is not None:
            out.append(f"{component.label} {pick.version} declares torch{requirement}")
    return tuple(out)


# --- helpers -------------------------------------------------------------------------------------


def _rejection_index(table: CandidateTable) -> dict[tuple[Component, Version], Rejection]:
    return {(r.component, r.version): r for rejected in table.rejected.values() for r in rejected}


def distance(a: Version, b: Version) -> tuple:
    """How far two versions are apart, release segment by segment (major first)."""
    ra, rb = a.release + (0,) * 4, b.release + (0,) * 4
    return tuple(abs(x - y) for x, y in zip(ra[:4], rb[:4]))


def by_nearness(versions: Sequence[Version], target: Version) -> list[Version]:
    """Releases nearest to ``target`` first: the same major.minor, then by position in release order
    (a step down before a step up)."""
    ordered = sorted(set(versions))
    position = sum(1 for v in ordered if v < target)
    index_of = {version: index for index, version in enumerate(ordered)}  # not ordered.index(): quadratic in the matrix

    def key(version: Version) -> tuple:
        index = index_of[version]
        steps = position - index if version < target else index - position + 1
        return (version.release[:2] != target.release[:2], steps, version > target)

    return sorted((v for v in ordered if v != target), key=key)


def _torch_of(candidate: Candidate) -> Optional[Version]:
    """The torch a release is built for (or the least it needs), where it says."""
    release = candidate.release
    return getattr(release, "torch", None) or getattr(release, "torch_min", None)


def nearest_first(items: Sequence[Candidate], torches: Sequence[Version]) -> list[Candidate]:
    """Candidates ordered by how close the torch they need is to the allowed torch releases."""
    if not torches:
        return list(items)

    def key(candidate: Candidate) -> tuple:
        needed = _torch_of(candidate)
        if needed is None:
            return ((99,), -candidate.version.release[0])
        return (min(distance(needed, t) for t in torches), tuple(-x for x in candidate.version.release))

    return sorted(items, key=key)


def best_known_first(releases: Sequence, torch: Version) -> list:
    """Releases that fit ``torch``, the best-known pairing first (built-for, reported-working, unverified), then the newest."""

    def key(release) -> tuple:
        pairing = pairing_evidence(release, torch)
        return (PAIRING_RANK.get(pairing.evidence, len(PAIRING_RANK)) if pairing is not None else 0, tuple(-x for x in release.version.release))

    return sorted(releases, key=key)


def _torch_rule(component: Component) -> Optional[PairRule]:
    """The first rule in which ``component`` states what it needs of torch."""
    return next((r for r in rules_between(component, Component.TORCH) if r.subject is component), None)


def _torch_versions_for(matrix: Matrix, candidate: Candidate) -> list[Version]:
    """The torch releases in the matrix that ``candidate`` pairs with."""
    return [
        t.version for t in matrix.releases[Component.TORCH]
        if fits(candidate.component, candidate.release, candidate.version, Component.TORCH, t.version)
    ]


# --- why no set ----------------------------------------------------------------------------------


def conflict_reasons(matrix: Matrix, request: Request, table: CandidateTable) -> list[ConflictReason]:
    """What rules out every candidate set, most fundamental first."""
    reasons: list[ConflictReason] = []
    low, high = matrix.policy.python_range
    if not (low <= request.python.version <= high):
        reasons.append(PythonOutsideRange(low, high, request.python.label))
    empty = [c for c in request.ordered_components if not table.kept[c]]
    for component in empty:
        reasons.extend(_no_candidate_reasons(matrix, request, component, table.rejected[component]))
    if empty:
        return reasons
    reasons.extend(_pairing_reasons(matrix, request, table))
    return reasons or [NoConsistentCombination()]


def _absent_pin(matrix: Matrix, component: Component, spec: SpecifierSet) -> Optional[AbsentRelease]:
    """The AbsentRelease an exact ``==X`` pin names, or None."""
    items = tuple(spec)
    if len(items) != 1 or items[0].operator not in ("==", "===") or items[0].version.endswith(".*"):
        return None
    try:
        return absent_release(matrix, component, Version(items[0].version))
    except ValueError:  # InvalidVersion: build_request has refused it already
        return None


def _no_candidate_reasons(matrix: Matrix, request: Request, component: Component, rejected: Sequence[Rejection]) -> list[ConflictReason]:
    spec = request.spec(component)
    other = [r for r in rejected if r.kind != "user"]
    if spec is not None and not other:
        absent = _absent_pin(matrix, component, spec)
        if absent is not None:
            return [NoSuchRelease(absent)]
        known = matrix.versions(component)
        return [NoneMatches(component, spec, known[-1], known[0])]
    python_bound = any(r.kind in ("python", "requires-python", "platform") for r in other)
    out: list[ConflictReason] = [NoneUsable(component, spec, request.python.label if python_bound else None)]
    out.extend(_grouped(other))
    if spec is not None:
        usable, _ = candidates(matrix, component, request.python, None, request.features, request.platform)
        if usable:
            out.append(WouldDo(component, spec, tuple(c.version for c in usable)))
    return out


_KIND_ORDER = ("feature", "python", "platform", "requires-python", "yanked", "undeclared")


def _grouped(rejections: Sequence[Rejection]) -> list[ConflictReason]:
    """One group per kind of rejection, with the releases it covers and the most telling example.

    For Python and glibc problems the example is the oldest release (the one that comes closest to fitting);
    for the rest it is the newest.
    """
    out: list[ConflictReason] = []
    kinds = sorted({r.kind for r in rejections}, key=lambda k: _KIND_ORDER.index(k) if k in _KIND_ORDER else 99)
    for kind in kinds:
        group = sorted((r for r in rejections if r.kind == kind), key=lambda r: r.version)
        example = group[0] if kind in ("python", "requires-python", "platform") else group[-1]
        out.append(RejectionGroup(tuple(group), example))
    return out


def _pairing_reasons(matrix: Matrix, request: Request, table: CandidateTable) -> list[ConflictReason]:
    rejections = _rejection_index(table)
    torches = table.kept[Component.TORCH]
    torch_versions = [t.version for t in torches]
    reasons: list[ConflictReason] = []
    fitting: dict[Component, set[Version]] = {}
    for component in request.ordered_components:
        if component is Component.TORCH:
            continue
        fitting[component] = {
            t.version for t in torches if any(pair_problem(c, t) is None for c in table.kept[component])
        }
        if not fitting[component]:
            reasons.extend(_explain_torch_mismatch(matrix, request, component, table, rejections, torch_versions))
    if reasons:
        return reasons
    # Each component fits some torch on its own, but not all on the same one.
    common = set(torch_versions).intersection(*fitting.values())
    if not common:
        return [NoCommonTorch(tuple((c, tuple(k.version for k in table.kept[c]), tuple(sorted(v))) for c, v in fitting.items()))]
    # Torch is not the problem: the rules between the other components are.
    torch = next(t for t in torches if t.version in common)
    for group in groups(tuple(request.ordered_components)):
        for subject, partner in product(group, group):
            if any(r.subject is subject for r in rules_between(subject, partner)):
                reasons.extend(_partner_breaks(table, torch, subject, partner))
    return reasons


def _partner_breaks(table: CandidateTable, torch: Candidate, subject: Component, partner: Component) -> list[ConflictReason]:
    """How the first candidates of ``subject`` that fit ``torch`` break the rule with the first ``partner`` that does."""
    partners = [c for c in table.kept[partner] if pair_problem(c, torch) is None]
    if not partners:
        return []
    subjects = [c for c in table.kept[subject] if pair_problem(c, torch) is None]
    problems = (pair_problem(candidate, partners[0]) for candidate in subjects[:MAX_LISTED])
    return [PartnerBreak(problem, partners[0].version) for problem in problems if problem]


def _explain_torch_mismatch(
    matrix: Matrix,
    request: Request,
    component: Component,
    table: CandidateTable,
    rejections: Mapping[tuple[Component, Version], Rejection],
    torch_versions: Sequence[Version],
) -> list[ConflictReason]:
    out: list[ConflictReason] = []
    rule = _torch_rule(component)
    for candidate in nearest_first(table.kept[component], torch_versions)[:MAX_LISTED]:
        needed = _torch_versions_for(matrix, candidate)
        why = tuple(rejections[(Component.TORCH, v)] for v in needed if (Component.TORCH, v) in rejections)
        out.append(FitsNoTorch(candidate, rule, tuple(needed), why))
    if len(table.kept[component]) > MAX_LISTED:
        out.append(MoreFitNoTorch(component, len(table.kept[component]) - MAX_LISTED))
    for torch in torch_versions[:2]:
        partners = best_known_first([r for r in matrix.releases[component] if fits(component, r, r.version, Component.TORCH, torch)], torch)
        if not partners:
            out.append(NoPartnerForTorch(component, torch))
            continue
        version = partners[0].version
        out.append(TorchPairsWith(torch, component, version, rejections.get((component, version))))
    return out


# --- what would work instead ---------------------------------------------------------------------

MAX_REPLACEMENT_TRIES = 12
#: The components "leave out" tries dropping, in order, when nothing nearer works.
_OPTIONAL = tuple(sorted((c for c, info in COMPONENTS.items() if info.leave_out), key=lambda c: COMPONENTS[c].leave_out))


class _Tries:
    """The changed requests tried so far: the ones that resolve, each set once, at most MAX_ALTERNATIVES. (A plain
    class: resolve makes no dataclass, tests/test_startup.py.)"""

    __slots__ = ("matrix", "found", "seen")

    def __init__(self, matrix: Matrix) -> None:
        self.matrix = matrix
        self.found: list[Alternative] = []
        self.seen: set = set()

    def full(self) -> bool:
        return len(self.found) >= MAX_ALTERNATIVES

    def attempt(self, change: Change, changed: Request, weaker: bool = False) -> bool:
        """Resolve ``changed``; keep it when it resolves to a set not found yet. True when it resolves."""
        if self.full():
            return False
        outcome = find_set(self.matrix, changed)
        if not isinstance(outcome, Resolution):
            return False
        key = (changed.python.version, tuple(sorted((c.distribution, str(p.version)) for c, p in outcome.picks.items())))
        if key not in self.seen:
            self.seen.add(key)
            self.found.append(Alternative(change, outcome, Because(change, weaker, declared=declared_only(outcome.picks))))
        return True


def alternatives(matrix: Matrix, request: Request) -> list[Alternative]:
    """The nearest requests that resolve: a pin moved to the nearest release that works, a constraint
    dropped, a yanked release pinned, another Python, the sibling profile, a package left out."""
    tries = _Tries(matrix)
    _move_pins(tries, request)
    _pin_yanked(tries, request)
    _drop_constraints(tries, request)
    _sibling_profile(tries, request)
    _other_pythons(tries, request)
    if not tries.found:
        _leave_out(tries, request)
    return _newer_than_security_yanks(tries.found)


def _without(request: Request, component: Component) -> dict[Component, SpecifierSet]:
    """The request's constraints but the one on ``component``."""
    return {c: s for c, s in request.specifiers.items() if c is not component}


def _move_pins(tries: _Tries, request: Request) -> None:
    """Each pin moved to the nearest release that resolves."""
    for component in request.ordered_components:
        spec = request.spec(component)
        if spec is not None and is_pin(spec):
            _move_pin(tries, request, component, spec)


def _move_pin(tries: _Tries, request: Request, component: Component, spec: SpecifierSet) -> None:
    """The nearest release that resolves; but a set whose pairings are all built for their torch beats a nearer one
    that rests on a reported or unverified pairing (or a known-bad set), within the tries."""
    remaining = _without(request, component)
    pinned = Version(next(iter(spec)).version)
    fallback: Optional[tuple[Change, Request]] = None
    for version in by_nearness(tries.matrix.versions(component), pinned)[:MAX_REPLACEMENT_TRIES]:
        replaced = dict(remaining)
        replaced[component] = SpecifierSet(f"=={version}")
        changed = request.replace(specifiers=replaced)
        outcome = find_set(tries.matrix, changed)
        if not isinstance(outcome, Resolution):
            continue
        if set_standing(outcome.picks) == (0, 0):
            tries.attempt(MovePin(component, spec, version), changed)
            return
        if fallback is None:
            fallback = (MovePin(component, spec, version), changed)
    if fallback is not None:
        tries.attempt(*fallback, weaker=True)


def _pin_yanked(tries: _Tries, request: Request) -> None:
    """A yanked release pinned: also where other releases are kept but none of them fits the rest (a release yanked
    for security is left out of every range, so it may be the only one that pairs with another pin)."""
    table: Optional[CandidateTable] = None
    for component in request.ordered_components:
        if is_pin(request.spec(component)):
            continue
        if table is None:
            from .search import candidate_table

            table = candidate_table(tries.matrix, request)
        yanked = [r for r in table.rejected[component] if r.kind == "yanked"]
        for rejection in sorted(yanked, key=lambda r: r.version, reverse=True)[:MAX_REPLACEMENT_TRIES]:
            pinned_spec = dict(request.specifiers)
            pinned_spec[component] = SpecifierSet(f"=={rejection.version}")
            if tries.attempt(PinYanked(rejection), request.replace(specifiers=pinned_spec)):
                break


def _drop_constraints(tries: _Tries, request: Request) -> None:
    for component in request.ordered_components:
        spec = request.spec(component)
        if spec is not None:
            tries.attempt(DropConstraint(component, spec), request.replace(specifiers=_without(request, component)))


#: The profile "use the sibling profile" offers for each profile that has one.
_SIBLING_PROFILE = {"ddp-ccl": "ddp-ccl-legacy", "ddp-ccl-legacy": "ddp-ccl"}


def _sibling_profile(tries: _Tries, request: Request) -> None:
    if request.profile is None:
        return
    sibling = _SIBLING_PROFILE.get(request.profile)
    if sibling in tries.matrix.profiles:
        profile = tries.matrix.profiles[sibling]
        tries.attempt(
            UseProfile(sibling, profile.description),
            request.replace(profile=sibling, features=profile.features, components=request.components | profile.components),
        )


def _other_pythons(tries: _Tries, request: Request) -> None:
    """At most two other Pythons of the policy's range, the nearest first (the newer of two as near)."""
    low, high = tries.matrix.policy.python_range
    pythons = [Version(f"3.{minor}") for minor in range(low.minor, high.minor + 1)]
    pythons = sorted(
        (p for p in pythons if p != request.python.version),
        key=lambda p: (abs(p.minor - request.python.version.minor), -p.minor),
    )
    python_found = 0
    for python in pythons:
        if python_found == 2 or tries.full():
            break
        if tries.attempt(UsePython(python), request.replace(python=PythonTarget(python, None, f"alternative Python {python}"))):
            python_found += 1


def _leave_out(tries: _Tries, request: Request) -> None:
    """Each optional package of the request left out (with the features that need oneCCL when it is oneCCL)."""
    features_with_ccl = tries.matrix.policy.features_with_ccl
    for component in _OPTIONAL:
        if component in request.components:
            features = tuple(f for f in request.features if f not in features_with_ccl or component is not Component.CCL)
            tries.attempt(
                LeaveOut(component),
                request.replace(components=request.components - {component}, specifiers=_without(request, component), features=features),
            )


def _newer_than_security_yanks(found: list[Alternative]) -> list[Alternative]:
    """Never offer a set older than a release yanked for security that another alternative pins (IPEX 1.10.0, never on
    PyPI, ahead of the IPEX 1.13.100 it would replace): such a set is dropped when another alternative keeps the
    package at least that new without the yank, and otherwise comes after the yanked pin, saying why."""
    out = list(found)
    for pin in [a for a in found if isinstance(a.edit, PinYanked) and _for_security(a.edit.rejection)]:
        component, yanked = pin.edit.rejection.component, pin.edit.rejection.version

        def older(alt: Alternative, component: Component = component, yanked: Version = yanked) -> bool:
            pick = alt.resolution.picks.get(component)
            return pick is not None and pick.version < yanked

        newer_exists = any(a is not pin and not isinstance(a.edit, PinYanked) and component in a.resolution.picks and not older(a) for a in out)
        behind = [] if newer_exists else [Alternative(a.edit, a.resolution, Because(a.edit, bool(a.why and a.why.weaker), pin.edit.rejection))
                                          for a in out if a is not pin and older(a)]
        kept = [a for a in out if a is pin or not older(a)]
        at = kept.index(pin) + 1
        out = kept[:at] + behind + kept[at:]
    return out


def _for_security(rejection: Rejection) -> bool:
    cause = rejection.cause
    return isinstance(cause, Yanked) and "security" in cause.yank.reason.casefold()


# --- why these versions --------------------------------------------------------------------------


def pick_reasons(
    matrix: Matrix, request: Request, table: CandidateTable, picks: Mapping[Component, Candidate]
) -> list[PickReason]:
    """One record per chosen package: it is the newest, or why the next newer release is not."""
    rejections = _rejection_index(table)
    out: list[PickReason] = []
    for component in COMPONENT_ORDER:
        if component not in picks:
            continue
        chosen = picks[component]
        newer = sorted(v for v in matrix.versions(component) if v > chosen.version)
        if not newer:
            out.append(Newest(chosen))
            continue
        nxt = newer[0]
        why = _why_not(matrix, request, table, picks, rejections, component, nxt)
        out.append(NewerRuledOut(chosen, len(newer), nxt, why, newer[-1] if newer[-1] != nxt else None))
    return out


def _why_not(
    matrix: Matrix,
    request: Request,
    table: CandidateTable,
    picks: Mapping[Component, Candidate],
    rejections: Mapping[tuple[Component, Version], Rejection],
    component: Component,
    version: Version,
) -> WhyNot:
    rejection = rejections.get((component, version))
    if rejection is not None:
        return rejection
    candidate = _candidate_for(table, component, version)
    if candidate is None:
        return NotInRequest()
    if component is Component.TORCH:
        return _why_not_torch(request, table, picks, candidate)
    return _why_not_companion(request, picks, component, candidate)


def _why_not_torch(request: Request, table: CandidateTable, picks: Mapping[Component, Candidate], candidate: Candidate) -> WhyNot:
    """Why a newer torch was not chosen: a package has no partner for it, a group has no set with it, or its set is weaker."""
    for other in request.ordered_components:
        if other is Component.TORCH:
            continue
        fitting = [c for c in table.kept[other] if pair_problem(c, candidate) is None]
        if not fitting:
            example = nearest_first(table.kept[other], [candidate.version])[0]
            problem = pair_problem(example, candidate)
            assert problem is not None
            return NoPartnerForThisTorch(other, problem)
    full = complete_set(table, candidate, request.ordered_components)
    if full is None:
        group = next((g for g in groups(tuple(request.ordered_components)) if best_in_group(table, candidate, g) is None), None)
        if group is not None:
            return GroupHasNoSet(group)
    else:
        weakest = max((p for c, p in full.items() if c is not Component.TORCH), key=lambda p: standing(p, candidate), default=None)
        if weakest is not None and set_standing(full) > set_standing(picks):
            return WeakerSet(
                candidate.version, weakest, pairing_evidence(weakest.release, candidate.version),
                known_bad(weakest.release, weakest.version, candidate.version, candidate.local_label), picks[Component.TORCH].version,
            )
    return NotChosen()  # pragma: no cover - a torch with a full set of the same standing would have been picked


def _why_not_companion(request: Request, picks: Mapping[Component, Candidate], component: Component, candidate: Candidate) -> WhyNot:
    """Why a newer release of a package other than torch was not chosen: it breaks a rule with a pick, pairs less well
    with the chosen torch, or has no partner in its group."""
    for other, pick in picks.items():
        if other is component:
            continue
        problem = pair_problem(candidate, pick)
        if problem:
            return problem
    chosen_torch = picks.get(Component.TORCH)
    if chosen_torch is not None:
        weaker = _weaker_with_torch(candidate, picks[component], chosen_torch)
        if weaker is not None:
            return weaker
    group = next((g for g in groups(tuple(request.ordered_components)) if component in g), ())
    partners = tuple(c for c in group if c is not component)
    if partners and any(r.subject is component for p in partners for r in rules_between(component, p)):
        return NoPartnerTogether(partners)
    return NotChosen()  # pragma: no cover


def _weaker_with_torch(candidate: Candidate, chosen: Candidate, torch: Candidate) -> Optional[WhyNot]:
    """``candidate`` pairs less well with the chosen torch than the chosen release, or is built for another torch
    where the chosen one is built for this one; None when neither."""
    if standing(candidate, torch) > standing(chosen, torch):
        return WeakerPairing(
            candidate, pairing_evidence(candidate.release, torch.version),
            known_bad(candidate.release, candidate.version, torch.version, torch.local_label),
            chosen, pairing_evidence(chosen.release, torch.version), torch.version,
        )
    built_for = getattr(candidate.release, "torch", None)
    if built_for is not None and preference(candidate, torch) < preference(chosen, torch):
        return ExactBuildPreferred(candidate, built_for, chosen.version, torch.version)
    return None


def _candidate_for(table: CandidateTable, component: Component, version: Version) -> Optional[Candidate]:
    for candidate in table.kept.get(component, ()):
        if version in candidate.release.versions:
            return candidate  # the same entry (a library line: same line, same facts)
    return None


# --- what to know about the set ------------------------------------------------------------------


def notes(matrix: Matrix, picks: Mapping[Component, Candidate], platform: Optional[Platform] = None, python: Optional[PythonTarget] = None) -> list[Note]:
    """End-of-life status, the unverified facts the answer rests on (unverified entries, pairings weaker than built-for,
    pairings that rest on a declaration alone, known-bad sets), a Requires-Python left undecided by ``X.Y``, CPU and glibc
    floors to know about, and the next step for oneCCL."""
    out: list[Note] = []
    if python is not None:
        out += _python_undecided_notes(picks, python)
    out += _eol_notes(matrix, picks)
    out += _unverified_notes(picks)
    out += [note for note in map(_yank_note, picks.values()) if note is not None]
    out += _torch_pairing_notes(matrix, picks)
    out += _floor_notes(picks, platform)
    out += _ccl_notes(picks)
    return out


def _python_undecided_notes(picks: Mapping[Component, Candidate], python: PythonTarget) -> list[Note]:
    """Picks whose Requires-Python ``X.Y`` leaves undecided."""
    out: list[Note] = []
    for pick in picks.values():
        spec = python_undecided(pick.release, python)
        if spec is not None:
            out.append(PythonUndecidedNote(pick, spec, python.label))
    return out


def _eol_notes(matrix: Matrix, picks: Mapping[Component, Candidate]) -> list[Note]:
    out: list[Note] = []
    for component in picks:
        eol = matrix.eol_of(component.distribution)
        if eol is not None:
            out.append(EolNote(component, eol))
    return out


def _unverified_notes(picks: Mapping[Component, Candidate]) -> list[Note]:
    """Picks outside the matrix, and picks whose entry, Python coverage or host is not verified against a live source."""
    torch = picks.get(Component.TORCH)
    out: list[Note] = []
    for pick in picks.values():
        if isinstance(pick.release, UnlistedRelease):
            out.append(UnlistedNote(pick, pick.release, torch.version if torch is not None and pick is not torch else None))
            continue
        entry = not pick.release.provenance.verified
        coverage = pick.host.id if pick.wheels is not None and not pick.wheels.provenance.verified else None
        host = pick.host.url if not pick.host.provenance.verified else None
        if entry or coverage or host:
            out.append(UnverifiedNote(pick, entry, coverage, host))
    return out


def _yank_note(pick: Candidate) -> Optional[Note]:
    """A pinned yanked release: yanked for security (on every host), yanked only on another host, or yanked here."""
    yank = pick.release.yank(pick.version)
    if yank is None:
        return None
    security = security_yank(pick.release.wheels)
    if security is not None:  # yanked for security on some host: yanked on every host, taken only because pinned
        return YankedPinNote(pick, security)
    if pick.wheels is not None and not pick.wheels.yanked:
        return YankedElsewhereNote(pick, yank)
    chosen = Yank(pick.wheels.host, pick.wheels.yanked_reason) if pick.wheels is not None else yank
    return YankedPinNote(pick, chosen)


def _torch_pairing_notes(matrix: Matrix, picks: Mapping[Component, Candidate]) -> list[Note]:
    """IPEX off its build, then per package the pairing with torch weaker than built-for and a known-bad set."""
    ipex, torch = picks.get(Component.IPEX), picks.get(Component.TORCH)
    out: list[Note] = []
    if ipex is not None and torch is not None and isinstance(ipex.release, IpexRelease) and ipex.release.torch != torch.version:
        out.append(OffBuildNote(ipex, ipex.release.torch, torch.version))
    if torch is None:
        return out
    for component, pick in picks.items():
        if component is Component.TORCH:
            continue
        pairing = _pairing_note(matrix, component, pick, torch)
        if pairing is not None:
            out.append(pairing)
        bad = known_bad(pick.release, pick.version, torch.version, torch.local_label)
        if bad is not None:
            out.append(KnownBadNote(pick, bad))
    return out


def _pairing_note(matrix: Matrix, component: Component, pick: Candidate, torch: Candidate) -> Optional[Note]:
    """A pick that pairs with torch on evidence weaker than built-for or pinned: its build, the release built for
    this torch, and (without a build) the nearest pinned release."""
    pairing = pairing_evidence(pick.release, torch.version)
    if pairing is None or pairing.evidence in ("built-for", "pinned") or isinstance(pick.release, UnlistedRelease):
        return None
    partner = next((r.version for r in matrix.releases[component] if getattr(r, "torch", None) == torch.version), None)
    built_for = pick.release.torch  # type: ignore[attr-defined]
    nearest = nearest_pinned(matrix, component, pick.version) if built_for is None else None
    return PairingNote(pick, pairing, built_for, partner, nearest)


def _floor_notes(picks: Mapping[Component, Candidate], platform: Optional[Platform]) -> list[Note]:
    """IPEX's CPU (ISA) floor above AVX2, and the glibc floors of wheels where the platform's glibc is unknown."""
    out: list[Note] = []
    ipex = picks.get(Component.IPEX)
    if ipex is not None and isinstance(ipex.release, IpexRelease) and ipex.release.isa_min is not None and ipex.release.isa_min.level != "avx2":
        out.append(IsaFloorNote(ipex, ipex.release.isa_min))
    if platform is not None and platform.glibc is None and platform.libc == "glibc":
        out += [GlibcUnknownNote(pick, pick.wheels, platform) for pick in picks.values() if pick.wheels is not None and pick.wheels.glibc_min is not None]
    return out


def _ccl_notes(picks: Mapping[Component, Candidate]) -> list[Note]:
    """With oneccl_bind_pt: the worker count with accelerate, and its setvars.sh."""
    ccl = picks.get(Component.CCL)
    out: list[Note] = []
    if ccl is not None and Component.ACCELERATE in picks:
        out.append(CclWorkerCountNote())
    if ccl is not None and isinstance(ccl.release, CclRelease):
        out.append(SetvarsNote(ccl.release))
    return out


def yanked_newer_notes(table: CandidateTable, picks: Mapping[Component, Candidate]) -> list[Note]:
    """Newer releases skipped only because they are yanked: say so, and how to pin one anyway."""
    out: list[Note] = []
    for component, pick in picks.items():
        newer = sorted((r for r in table.rejected.get(component, ()) if r.kind == "yanked" and r.version > pick.version), key=lambda r: r.version)
        cause = newer[-1].cause if newer else None
        if isinstance(cause, Yanked):
            out.append(YankedNewerNote(component, tuple(r.version for r in newer), cause.yank))
    return out

