"""The rules a consistent set obeys: data, and pure functions over matrix entries.

Two kinds of rule:

* *unary*: can this release be installed at all for the target (the user's constraint, a wheel for
  this Python and this platform's glibc on some host, not yanked unless pinned, the library features the
  profile needs)?  :func:`candidates` applies them and keeps a :class:`Rejection` for every release it
  drops, with a typed cause: :class:`UserConstraint`, :class:`NoWheel`, :class:`GlibcTooOld`,
  :class:`RequiresPython`, :class:`MissingFeature` or :class:`Yanked`.
* *pairwise*: do two chosen releases work together?  Every such fact is a :class:`PairRule` in
  :data:`PAIR_RULES` (which two components, the predicate, its evidence and where its facts live);
  :func:`pair_problem` returns a :class:`Rejected` naming the rule, or ``None``.
* *evidence* of a pairing the rules allow: :func:`pairing_evidence` (``built-for``, ``reported-working``,
  ``unverified``) and :func:`known_bad` (a matched set a source reports failing); :func:`standing` ranks
  them for the resolver, which prefers stronger evidence (docs/MATRIX.md, "Evidence").

The resolver, the explanations and the environment checks all use these same objects.  Nothing here
writes sentences: :mod:`compatmatrix.sentences` does, from these types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, ClassVar, Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import (
    DECLARED_LEVELS,
    PAIRING_RANK,
    Component,
    Feature,
    Host,
    KnownBad,
    Matrix,
    Pairing,
    Release,
    WheelSet,
    Yank,
    components_where,
    security_yank,
    unlisted_release,
)
from .record import Record
from .target import Platform, PythonTarget


class Candidate(Record):
    """A release that passed every unary rule, with the host it will come from (callers replace its host:
    record.replace)."""

    component: Component
    version: Version
    release: Release
    host: Host
    wheels: Optional[WheelSet]  # None for pure-Python libraries taken from their index

    @property
    def local_label(self) -> str:
        return self.wheels.local_label if self.wheels else ""

    @property
    def name(self) -> str:
        """The name to say and install: the component's, or the release's own distribution when it was published under
        another (IPEX <= 1.9 is torch_ipex, the bindings <= 1.x torch_ccl): one rule for every sentence and table."""
        from .names import canonical_name

        own = self.release.distribution
        return self.component.label if canonical_name(own) == canonical_name(self.component.distribution) else own

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


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


class GlibcTooOld(Record):
    """Wheels for the target Python exist, but each needs a newer glibc than the platform has (``wheels``: those)."""

    platform: Platform
    wheels: tuple[WheelSet, ...]
    kind: ClassVar[str] = "platform"


class RequiresPython(Record):
    """A release whose Requires-Python excludes the target: a pure-Python line (``line``: its major.minor), or one
    binary release (``release``: True, ``line`` the release) judged with the target's full version (``python``)."""

    line: Version
    spec: SpecifierSet
    kind: ClassVar[str] = "requires-python"
    release: bool = False
    python: Optional[Version] = None


class MissingFeature(Record):
    """The release lacks a library feature the profile needs."""

    feature: Feature
    kind: ClassVar[str] = "feature"


class Yanked(Record):
    """The release is yanked and was not pinned with ``==``."""

    yank: Yank
    kind: ClassVar[str] = "yanked"


class Undeclared(Record):
    """A torchvision/torchaudio release whose METADATA declares no torch and that no source (nor compat matrix verify
    here) pairs with one: taken only when pinned with ``==``. Newest-torch-first would otherwise pair it, unverified,
    with every newer torch series, though its extension is built against one torch."""

    kind: ClassVar[str] = "undeclared"


Cause = Union[UserConstraint, NoWheel, GlibcTooOld, RequiresPython, MissingFeature, Yanked, Undeclared]


class Rejection(Record):
    """A release dropped by a unary rule, and why."""

    component: Component
    version: Version
    release: Release
    cause: Cause

    @property
    def kind(self) -> str:
        """user, python, platform, requires-python, feature, yanked or undeclared."""
        return self.cause.kind


def is_pin(spec: Optional[SpecifierSet]) -> bool:
    """True for ``==X`` / ``===X`` without a wildcard: the user asked for that exact release."""
    if spec is None or len(spec) != 1:
        return False
    (single,) = tuple(spec)
    return single.operator in ("==", "===") and not single.version.endswith(".*")


#: candidates() answers, per matrix object and arguments: (matrix, kept, rejected or None). The explanations ask the
#: same question many times (alternatives() resolves up to ~80 changed requests, most of which differ in one
#: constraint); each distinct question is answered once. The matrix is held, so its id() is not reused while a key.
_ANSWERS: dict[tuple, tuple[Matrix, tuple[Candidate, ...], Optional[tuple[Rejection, ...]]]] = {}
_ANSWERS_LIMIT = 1024


def candidates(
    matrix: Matrix,
    component: Component,
    python: PythonTarget,
    spec: Optional[SpecifierSet],
    features: Sequence[tuple[str, str]] = (),
    platform: Optional[Platform] = None,
) -> tuple[list[Candidate], list[Rejection]]:
    """Releases of ``component`` that pass every unary rule (newest first), and those that do not.

    The rules, in order: the user's constraint, a wheel for this Python whose glibc floor the platform
    meets (a pure-Python line: its Requires-Python), the profile's features, not yanked unless pinned (a
    binary release counts as yanked when every host with such a wheel has it yanked, or any host yanked it for security: a yanked PyPI file
    does not hide the same build on an Intel host that does not mark it, and the answer says so).  Each
    entry yields at most one candidate: its newest release that passes.  Everything the matrix knows about a library line
    (Requires-Python, minimum torch, features) holds for every release of it, so an older release of
    the same line can never fit better.

    Pure: the same question about the same matrix object is answered once (new lists each call).
    """
    kept, rejected = _answer(matrix, component, python, spec, tuple(features), platform, True)
    assert rejected is not None
    return list(kept), list(rejected)


def usable(
    matrix: Matrix,
    component: Component,
    python: PythonTarget,
    spec: Optional[SpecifierSet],
    features: Sequence[tuple[str, str]] = (),
    platform: Optional[Platform] = None,
) -> list[Candidate]:
    """What :func:`candidates` keeps, without building a Rejection for what it drops (a search that explains nothing)."""
    return list(_answer(matrix, component, python, spec, tuple(features), platform, False)[0])


def _answer(matrix: Matrix, component: Component, python: PythonTarget, spec: Optional[SpecifierSet], features: tuple[tuple[str, str], ...],
            platform: Optional[Platform], rejections: bool) -> tuple[tuple[Candidate, ...], Optional[tuple[Rejection, ...]]]:
    key = (id(matrix), component, python, spec, features, platform)
    known = _ANSWERS.get(key)
    if known is None or known[0] is not matrix or (rejections and known[2] is None):
        kept, rejected = _candidates(matrix, component, python, spec, features, platform, rejections)
        if len(_ANSWERS) >= _ANSWERS_LIMIT:
            _ANSWERS.clear()
        known = _ANSWERS[key] = (matrix, tuple(kept), tuple(rejected) if rejections else None)
    return known[1], known[2]


def _candidates(matrix: Matrix, component: Component, python: PythonTarget, spec: Optional[SpecifierSet], features: Sequence[tuple[str, str]],
                platform: Optional[Platform], rejections: bool) -> tuple[list[Candidate], list[Rejection]]:
    """candidates(), computed; ``rejections=False`` leaves the rejected list empty (and skips the entries the user's
    constraint rules out whole)."""
    kept: list[Candidate] = []
    rejected: list[Rejection] = []
    pinned = is_pin(spec)
    wanted = [MissingFeature(matrix.feature(package, name)) for package, name in features if package == component.distribution]
    asked = UserConstraint(spec) if spec is not None else None
    admitted, entries = _admitted(matrix, component, spec)
    requires = python.for_requires_python
    glibc = platform.glibc if platform is not None else None
    for release in matrix.releases[component]:
        if not rejections and entries is not None and id(release) not in entries:
            continue
        coverage: Optional[Cause] = None
        covered = False
        for version in release.versions:
            if admitted is not None and version not in admitted:  # the user's constraint rules it out
                if rejections:
                    rejected.append(Rejection(component, version, release, asked))
                continue
            if not covered:  # the same for every release of the entry
                coverage, covered = _python_problem(release, python, requires, platform, glibc), True
            cause = coverage or _feature_or_yank(release, version, wanted, pinned, python, glibc)
            if cause is not None:
                if rejections:
                    rejected.append(Rejection(component, version, release, cause))
                continue
            kept.append(_candidate(matrix, component, release, version, python, glibc))
            break
    if pinned and admitted is not None and not admitted:
        _unlisted(matrix, component, spec, wanted, kept, rejected, rejections)
    return kept, rejected


def _unlisted(matrix: Matrix, component: Component, spec: Optional[SpecifierSet], wanted: Sequence[MissingFeature], kept: list[Candidate],
              rejected: list[Rejection], rejections: bool) -> None:
    """An exact pin of a release the matrix does not list: an :class:`~compatmatrix.matrix.model.UnlistedRelease`
    candidate (its facts missing, nothing ruled out on them; the profile's features still apply, by their ranges),
    from the component's first host. Frozen components (IPEX, the bindings) have none: their pin matches nothing."""
    assert spec is not None
    (single,) = tuple(spec)
    try:
        version = Version(single.version)
    except ValueError:  # InvalidVersion: build_request has refused it already
        return
    release = unlisted_release(matrix, component, version)
    if release is None:
        return
    missing = next((f for f in wanted if not f.feature.present_in(version)), None)
    if missing is not None:
        if rejections:
            rejected.append(Rejection(component, version, release, missing))
        return
    kept.append(Candidate(component, version, release, matrix.hosts[matrix.policy.host_preference[component][0]], None))


_ADMITTED: dict[tuple, tuple[Matrix, Optional[frozenset[Version]], Optional[frozenset[int]]]] = {}
_BY_RELEASE: dict[tuple, tuple[Matrix, dict[tuple[int, ...], list[tuple[Version, Release]]]]] = {}


def _admitted(matrix: Matrix, component: Component, spec: Optional[SpecifierSet]) -> tuple[Optional[frozenset[Version]], Optional[frozenset[int]]]:
    """The versions of ``component`` that ``spec`` admits (pre-releases too: the user named them) and the id()s of the
    entries that hold them; (None, None) without a spec. Once per matrix and spec.

    An ``==X`` pin (the explanations try dozens) can only match a version with X's release numbers (trailing zeros
    aside), so packaging is asked only about those."""
    if spec is None:
        return None, None
    key = (id(matrix), component, spec)
    known = _ADMITTED.get(key)
    if known is None or known[0] is not matrix:
        pool: Iterable[tuple[Version, Release]] = ((v, r) for r in matrix.releases[component] for v in r.versions)
        single = tuple(spec)
        if len(single) == 1 and single[0].operator == "==" and not single[0].version.endswith(".*"):
            try:
                pool = _by_release(matrix, component).get(_trimmed(Version(single[0].version).release), [])
            except ValueError:  # InvalidVersion: packaging decides about every release
                pass
        hits = [(v, r) for v, r in pool if spec.contains(v, prereleases=True)]
        if len(_ADMITTED) >= _ANSWERS_LIMIT:
            _ADMITTED.clear()
        known = _ADMITTED[key] = (matrix, frozenset(v for v, _ in hits), frozenset(id(r) for _, r in hits))
    return known[1], known[2]


def _by_release(matrix: Matrix, component: Component) -> dict[tuple[int, ...], list[tuple[Version, Release]]]:
    """Every version of ``component`` (with its entry) by its release numbers without trailing zeros; once per matrix."""
    key = (id(matrix), component)
    known = _BY_RELEASE.get(key)
    if known is None or known[0] is not matrix:
        index: dict[tuple[int, ...], list[tuple[Version, Release]]] = {}
        for release in matrix.releases[component]:
            for version in release.versions:
                index.setdefault(_trimmed(version.release), []).append((version, release))
        if len(_BY_RELEASE) >= _ANSWERS_LIMIT:
            _BY_RELEASE.clear()
        known = _BY_RELEASE[key] = (matrix, index)
    return known[1]


def forget_answers() -> None:
    """Drop every remembered answer (candidates, admitted versions): for measurements that must start cold."""
    for memo in (_ANSWERS, _ADMITTED, _BY_RELEASE):
        memo.clear()


def _trimmed(release: tuple[int, ...]) -> tuple[int, ...]:
    """A release tuple without trailing zeros: 2.1.0 and 2.1 are the same version."""
    end = len(release)
    while end > 1 and release[end - 1] == 0:
        end -= 1
    return release[:end]


def _python_problem(release: Release, python: PythonTarget, requires: Version, platform: Optional[Platform], glibc: Optional[Version]) -> Optional[Cause]:
    """Binary entries: some host has a wheel for the target Python that runs on the platform's glibc; pure-Python
    lines: Requires-Python admits it."""
    if release.wheels:
        for_python = [w for w in release.wheels if w.has_python(python.version)]
        if not for_python:
            return NoWheel(python, release.wheels)
        if any(w.runs_on(glibc) for w in for_python):
            return _binary_requires_python(release, python)
        assert platform is not None  # a floor only bites with a known glibc
        return GlibcTooOld(platform, tuple(for_python))
    if release.requires_python is not None and python_admits(release.requires_python, python) is False:
        return RequiresPython(Version(f"{release.version.major}.{release.version.minor}"), release.requires_python)
    return None


def _binary_requires_python(release: Release, python: PythonTarget) -> Optional[Cause]:
    """A binary release's own Requires-Python (torchvision 0.29.2: ``>=3.10,!=3.14.1``) against the target: with the full
    version when it is known (``--python``, ``--python-version 3.14.1``); for ``X.Y`` alone only when it excludes the whole
    line (an exclusion inside it leaves the release in, undecided: :func:`python_undecided`)."""
    spec = release.requires_python
    if spec is None:
        return None
    if python_admits(spec, python) is False:
        return RequiresPython(release.version, spec, release=True, python=python.full)
    return None


_LINE_VERDICTS: dict[tuple[str, str], Optional[bool]] = {}


LINE_MICROS = 100  # micro releases judged per X.Y line (CPython's highest so far: 3.6.15, 2.7.18)


def python_admits(spec: SpecifierSet, python: PythonTarget) -> Optional[bool]:
    """Does Requires-Python ``spec`` admit the target?  With a full version (3.14.1) packaging's ``contains`` decides; for
    ``X.Y`` alone, every ``X.Y.z`` in the spec is True, none False, some (``!=3.14.1`` inside 3.14) None: undecided.
    The line's micro releases X.Y.0 to X.Y.99 are each judged by packaging (packaging.ranges would compare the line as a
    continuous range, where ``==3.9.5.*,>3.9.5`` admits 3.9.5.1, a version no Python has), once per spec and line."""
    if python.full is not None:
        return bool(spec.contains(python.full, prereleases=True))
    key = (str(spec), python.label)
    if key not in _LINE_VERDICTS:
        if _uniform_on_line(spec, python.version.release[:2]):  # the common case, without importing packaging.ranges (~5 ms)
            _LINE_VERDICTS[key] = bool(spec.contains(Version(f"{python.label}.0"), prereleases=True))
        else:  # each micro release of the line, as packaging judges it: a Python is X.Y.Z, never X.Y.Z.W
            said = {bool(spec.contains(Version(f"{python.label}.{micro}"), prereleases=True)) for micro in range(LINE_MICROS)}
            _LINE_VERDICTS[key] = said.pop() if len(said) == 1 else None
    return _LINE_VERDICTS[key]


def _uniform_on_line(spec: SpecifierSet, line: tuple[int, ...]) -> bool:
    """Does ``spec`` say the same of every X.Y.z of the line?  True when each specifier names a version outside the line
    (every X.Y.z compares alike with it) or is ``>=X.Y`` / ``<X.Y`` (``.0`` allowed): then X.Y.0 speaks for the line."""
    for item in spec:
        text = item.version[:-2] if item.version.endswith(".*") else item.version
        release = Version(text).release
        if tuple(release[:2]) != tuple(line) and not (len(release) < 2 and item.version.endswith(".*")):
            if item.operator != "~=" or tuple(release[:len(release) - 1][:2]) != tuple(line)[:len(release) - 1]:
                continue
            return False
        if item.operator in (">=", "<") and not item.version.endswith(".*") and all(part == 0 for part in release[2:]):
            continue
        return False
    return True


def python_undecided(release: Any, python: PythonTarget) -> Optional[SpecifierSet]:
    """The release's Requires-Python when it leaves the target's ``X.Y`` undecided (an exclusion inside the line and no
    full version known), else None."""
    spec = getattr(release, "requires_python", None)
    if spec is None:
        return None
    return spec if python_admits(spec, python) is None else None


def _usable(release: Release, python: PythonTarget, glibc: Optional[Version]) -> list[WheelSet]:
    return [w for w in release.wheels if w.has_python(python.version) and w.runs_on(glibc)]


def _feature_or_yank(release: Release, version: Version, features: Sequence[MissingFeature], pinned: bool,
                     python: PythonTarget, glibc: Optional[Version]) -> Optional[Cause]:
    missing = next((f for f in features if not f.feature.present_in(version)), None)
    if missing is not None:
        return missing
    if pinned:  # an explicit == pin takes a yanked release (PEP 592), and a release that declares no torch
        return None
    if (getattr(release, "package", None) is not None and getattr(release, "requirement", False) is None
            and not any(p.tested and p.evidence != "documented-break" for p in getattr(release, "pairings", ()))):
        return Undeclared()
    if release.wheels:
        security = security_yank(release.wheels)
        if security is not None:  # yanked for security on one host: the same build is yanked for compat on every host
            return Yanked(security)
        # A binary is yanked for this target when every host with a usable wheel yanked it: pip, given that host,
        # installs the copy it does not mark (the answer notes the yank elsewhere, with its reason).
        usable = _usable(release, python, glibc)
        yanked = [w for w in usable if w.yanked]
        return Yanked(Yank(yanked[0].host, yanked[0].yanked_reason)) if usable and len(yanked) == len(usable) else None
    yank = release.yank(version)
    return Yanked(yank) if yank is not None else None


def _candidate(matrix: Matrix, component: Component, release: Release, version: Version, python: PythonTarget, glibc: Optional[Version] = None) -> Candidate:
    """The release from the first host, in the component's order of preference (then as listed), with a wheel for this
    Python that runs on the platform's glibc; a host that does not mark it yanked before one that does."""
    if not release.wheels:
        return Candidate(component, version, release, matrix.hosts[matrix.policy.host_preference[component][0]], None)
    by_host = {w.host: w for w in release.wheels}
    order = [h for h in matrix.policy.host_preference.get(component, ()) if h in by_host]
    order += [h for h in by_host if h not in order]
    usable = [by_host[h] for h in order if by_host[h].has_python(python.version) and by_host[h].runs_on(glibc)]
    chosen = next((w for w in usable if not w.yanked), usable[0])
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
    #: Where a rejection's facts come from, when not from the release entry itself: (release, version, partner) ->
    #: the Pairing that states it (a documented break); None: the release entry's provenance.
    fact: Optional[Callable[[Any, Version, Version], Optional[Pairing]]] = None
    #: The evidence of a rejection by this release, where it depends on the release (a companion's pin or floor).
    graded: Optional[Callable[[Any], str]] = None

    def check(self, release: Release, version: Version, partner_version: Version) -> Optional["Rejected"]:
        if self.holds(release, version, partner_version):
            return None
        stated = self.fact(release, version, partner_version) if self.fact is not None else None
        provenance = stated.provenance if stated is not None else release.provenance
        evidence = (self.graded(release) if self.graded is not None else self.evidence) if provenance.verified else "unverified"
        return Rejected(self.subject, version, release, self.partner, partner_version, self, evidence, provenance.sources)


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


def _ccl_torch_series(release: Any, version: Version, torch: Version) -> bool:
    return release.pairing_with(torch) is not None


def _ccl_break(release: Any, version: Version, torch: Version) -> Optional[Pairing]:
    pairing = release.pairing_with(torch)
    return pairing if pairing is not None and pairing.evidence == "documented-break" else None


def _ccl_no_break(release: Any, version: Version, torch: Version) -> bool:
    return _ccl_break(release, version, torch) is None


def _declared_torch(release: Any, version: Version, torch: Version) -> bool:
    """A listed companion's declaration decides (``pairing_with``): an exact pin admits its torch alone, a floor or a range
    every torch inside it (``declared``), a release that declares none any torch (``unverified``); a pairing compat
    matrix verify tried on this machine decides for any torch but a pinned one (``tested-here``: it works; a break: it
    does not). An unlisted one pairs (unverified) within its line's series."""
    pairing = release.pairing_with(torch)
    return pairing is not None and pairing.evidence != "documented-break"


def _declaration_level(release: Any) -> str:
    """``pinned`` for a release that pins one torch, ``declared`` for a floor or a range (what refuses the partner)."""
    return "pinned" if getattr(release, "torch", None) is not None else "declared"


def _tested_break(release: Any, version: Version, torch: Version) -> Optional[Pairing]:
    """The break compat matrix verify recorded for this pair (its provenance is cited), or None."""
    pairing = release.pairing_with(torch)
    return pairing if pairing is not None and pairing.tested and pairing.evidence == "documented-break" else None


def _torch_min(release: Any, version: Version, torch: Version) -> bool:
    return release.torch_min is None or torch >= release.torch_min


def _accelerate_min(release: Any, version: Version, accelerate: Version) -> bool:
    return release.accelerate_min is None or accelerate >= release.accelerate_min


T, IPEX, CCL = Component.TORCH, Component.IPEX, Component.CCL

#: Every pairing fact the resolver, the explanations and `compat check` apply, in the order they are tried.
PAIR_RULES: tuple[PairRule, ...] = (
    PairRule("ipex-import-check", IPEX, T, _ipex_import_check, "import-guard", "[[ipex]] torch_accepts (guard: how it fails)"),
    PairRule("ipex-torch-series", IPEX, T, _ipex_torch_series, "built-for", "[[ipex]] torch (the major.minor it is built for)"),
    PairRule(
        "ccl-torch-series", CCL, T, _ccl_torch_series, "built-for",
        "[[oneccl_bind_pt]] torch (the bindings are C++ built against one torch: another major.minor has another ABI)",
    ),
    PairRule("ccl-torch-break", CCL, T, _ccl_no_break, "documented-break", "[[oneccl_bind_pt.pairing]] evidence = \"documented-break\"", _ccl_break),
    *(PairRule(f"{c.distribution}-torch", c, T, _declared_torch, "declared",
               f"[[{c.table}]] torch / torch_requires (its declared Requires-Dist: torch: a pin, a floor or a range)", _tested_break, _declaration_level)
      for c in components_where(pairing="declared")),
    *(PairRule(f"{c.distribution}-torch", c, T, _torch_min, "declared", f"[[{c.table}]] torch_min") for c in components_where(pairing="torch-min")),
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


# --- evidence of the pairings the rules allow ----------------------------------------------------


def pairing_evidence(release: Any, torch: Version) -> Optional[Pairing]:
    """How ``release`` pairs with ``torch`` where the matrix grades it (oneccl_bind_pt: built-for, reported-working,
    unverified, documented-break); None for releases whose pairing with torch is not graded (the pair rules alone
    decide: IPEX's import check, companions' exact pins, libraries' minimums)."""
    grade = getattr(release, "pairing_with", None)
    return grade(torch) if grade is not None else None


def known_bad(release: Any, version: Version, torch: Version, torch_label: Optional[str] = None) -> Optional[KnownBad]:
    """The [[known_bad]] entry for ``version`` of ``release`` next to ``torch`` (and its build's local label), or None."""
    for entry in getattr(release, "known_bad", ()):
        if entry.matches(torch, torch_label, version):
            return entry
    return None


def standing(candidate: Candidate, torch: Candidate) -> tuple[int, int]:
    """How well ``candidate`` is known to pair with ``torch``, lower is better: (1 for a known-bad set else 0, the
    pairing's rank: built-for 0, reported-working 1, tested-here 2, unverified 4).  Ungraded pairings count as built-for, and so
    does a pairing a release's own declaration admits (pinned, declared, verified: pip installs it), so that evidence never
    holds torch back below what pip would install."""
    bad = known_bad(candidate.release, candidate.version, torch.version, torch.local_label)
    pairing = pairing_evidence(candidate.release, torch.version)
    if pairing is None or pairing.evidence in DECLARED_LEVELS:
        rank = 0
    else:
        declares = getattr(candidate.release, "declares", None)  # tested here inside its own declaration: still what pip installs
        rank = 0 if declares is not None and pairing.evidence == "tested-here" and declares(torch.version) else PAIRING_RANK.get(pairing.evidence, 0)
    return (1 if bad is not None else 0, rank)


def set_standing(picks: Mapping[Component, Candidate]) -> tuple[int, int]:
    """The weakest standing of any package's pairing with the set's torch: (0, 0) when every pairing is built for it."""
    torch = picks.get(Component.TORCH)
    if torch is None:
        return (0, 0)
    return max((standing(pick, torch) for component, pick in picks.items() if component is not Component.TORCH), default=(0, 0))
