"""Every sentence about rejections, explanations, notes and alternatives, written once, from their types.

:mod:`compatmatrix.rules` and :mod:`compatmatrix.explain` return frozen records (:mod:`compatmatrix.reasons`); this module is the
only place that turns them into words (`compat resolve`'s reasons, notes and "what would work", the
phrases `compat check` quotes).  Nothing parses these sentences back.  Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import AbsentRelease, CclRelease, Component, IpexRelease, IsaFloor, KnownBad, Pairing, UnlistedRelease, Yank
from .rules import GlibcTooOld, MissingFeature, NoWheel, PairRule, Rejected, Rejection, RequiresPython, Undeclared, UserConstraint, Yanked

if TYPE_CHECKING:  # the records are imported when the first one is written: `compat check` needs only the phrases
    from . import reasons as x
    from .devices import DeviceBuild

# --- small pieces --------------------------------------------------------------------------------


def spec_text(component: Component, spec: SpecifierSet) -> str:
    return f"{component.label}{spec}"


_OPERATOR_ORDER = {">=": 0, ">": 1, "~=": 2, "==": 3, "===": 4, "!=": 5, "<": 6, "<=": 7}


def range_text(spec: SpecifierSet) -> str:
    """A specifier set written lower bound first (``>=4.29.0,<5.1.0``), as people read ranges."""
    return ",".join(str(s) for s in sorted(spec, key=lambda s: (_OPERATOR_ORDER.get(s.operator, 9), s.version)))


def python_list(pythons: Iterable[Version]) -> str:
    ordered = sorted(pythons)
    if not ordered:
        return "none"
    return ", ".join(f"{v.major}.{v.minor}" for v in ordered)


def versions_text(versions: Sequence[Version], limit: int = 6) -> str:
    ordered = sorted(set(versions), reverse=True)
    if len(ordered) <= limit:
        return ", ".join(str(v) for v in ordered)
    return ", ".join(str(v) for v in ordered[:limit]) + f", ... ({len(ordered)} in all)"


def _and(components: Sequence[Component]) -> str:
    labels = [c.label for c in components]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def where_yanked(yank: Yank) -> str:
    """"pypi (for security.)", "PyPI"."""
    return (yank.host or "PyPI") + (f" ({yank.reason})" if yank.reason else "")


def yanked_clause(component: Component, version: Version, yank: Yank) -> str:
    return f"{component.label} {version} is yanked on {where_yanked(yank)}"


# --- what a release needs of its partner, per pair rule ----------------------------------------


def ipex_torch_phrase(release: IpexRelease) -> str:
    series = f"{release.torch.major}.{release.torch.minor}.*"
    if str(release.torch_accepts):
        return f"is built for torch {release.torch} and its import check accepts only torch{release.torch_accepts}"
    return f"is built for torch {release.torch} and works only with torch {series} (it has no import check)"


def ccl_torch_phrase(release: CclRelease) -> str:
    """"is built for torch 2.5.0 and pairs only with torch 2.5.* (reported working with torch 2.5.1)"."""
    series = f"{release.torch.major}.{release.torch.minor}.*"
    known = []
    for pairing in release.pairings:
        if pairing.evidence == "reported-working":
            known.append(f"reported working with torch {pairing.torch}")
        elif pairing.evidence == "documented-break":
            known.append(f"documented not to work with torch {pairing.torch}: {sources_text(pairing.provenance.sources)}")
    extra = f" ({'; '.join(known)})" if known else ""
    return f"is built for torch {release.torch} and pairs only with torch {series}{extra}"


def sources_text(sources: Sequence[str], limit: int = 2) -> str:
    """Sources as a reader follows them: the first two, then how many more."""
    shown_sources = list(sources[:limit])
    more = len(sources) - limit
    return ", ".join(shown_sources) + (f" and {more} more" if more > 0 else "")


def pairing_phrase(pairing: Pairing, detail: bool = False) -> str:
    """How a pairing is known, as a clause that names its source: "reported working by https://...", "unverified (...)";
    ``detail``: with the note of a report that could not be verified."""
    phrase = _PAIRING_PHRASES.get(pairing.evidence)
    return phrase(pairing, detail) if phrase is not None else "unverified: no source says whether this pair works"


def _declared_phrase(pairing: Pairing, detail: bool) -> str:
    return f"declared only: {pairing.provenance.note}" if detail else "declared only: its METADATA's range admits it, no source verified the pair"


def _reported_phrase(pairing: Pairing, detail: bool) -> str:
    if pairing.provenance.verified:
        caveat = ""
    elif detail and pairing.provenance.note:
        caveat = f" (not verified: {pairing.provenance.note.rstrip('.')})"
    else:
        caveat = " (not verified)"
    return f"reported working by {sources_text(pairing.provenance.sources)}{caveat}"


def _break_phrase(pairing: Pairing, detail: bool) -> str:
    if pairing.tested:
        return f"tested here: it fails ({pairing.provenance.note})"
    return f"documented not to work ({sources_text(pairing.provenance.sources)})"


#: pairing_phrase per evidence (any other: unverified).
_PAIRING_PHRASES: dict[str, Callable[[Pairing, bool], str]] = {
    "built-for": lambda pairing, detail: "built for it",
    "pinned": lambda pairing, detail: "its METADATA pins it",
    "declared": _declared_phrase,
    "verified": lambda pairing, detail: f"declared and verified ({sources_text(pairing.provenance.sources)})",
    "reported-working": _reported_phrase,
    "tested-here": lambda pairing, detail: f"tested here: it works ({pairing.provenance.note})",
    "documented-break": _break_phrase,
}


def nearest_verified(component: Component, built_for: Any, version: Version, partner: Optional[Version]) -> str:
    """"torch 2.5.0 with oneccl_bind_pt 2.5.0 (or oneccl_bind_pt 2.6.0, built for torch 2.6.0)"."""
    text = f"torch {built_for} with {component.label} {version}"
    return text + (f", or {component.label} {partner} (built for this torch)" if partner is not None else "")


def _and_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def unlisted_phrase(release: UnlistedRelease) -> str:
    """"torchvision 0.99.0 is not in the matrix: its pairing with torch, Python coverage and glibc floor are not known"."""
    return f"{release.component.label} {release.version} is not in the matrix: its {_and_list(release.missing)} are not known"


def unlisted_pairing(release: UnlistedRelease, torch: Version) -> str:
    """"with torch 2.14.1: unverified (within the 2.14 series its line's listed releases pin)"."""
    where = (f"within the torch {'.'.join(map(str, release.series))} series its line's listed releases pin" if release.series is not None
             else "no listed release of its line says which torch it pairs with")
    return f"with torch {torch}: unverified ({where})"


def unlisted_nearest(release: UnlistedRelease) -> str:
    """"the nearest verified pairing: torch 2.14.0 with torchvision 0.29.0" (or the nearest listed release)."""
    if release.nearest is None:
        return f"the matrix lists no {release.component.label} release"
    if release.nearest_torch is None:
        return f"the nearest listed release: {release.component.label} {release.nearest}"
    return f"the nearest verified pairing: {nearest_verified(release.component, release.nearest_torch, release.nearest, None)}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _real_release(component: Component, version: Version, torch: Optional[Version]) -> str:
    return f"{component.label} {version}" + (f" (pins torch {torch})" if torch is not None else "")


def absent_phrase(release: AbsentRelease) -> str:
    """"there is no torchaudio 1.13.1: the registries go from 0.13.1 to 2.0.0 (...)": a pin inside the listed span."""
    label = release.component.label
    checked = f", checked {release.checked}" if release.checked else ""
    return (f"there is no {label} {release.version}: the registries go from {label} {release.below} to {release.above} (the matrix lists every "
            f"{label} release of its span{checked}), so pip would stop with 'No matching distribution'")


def absent_nearest(release: AbsentRelease) -> str:
    """"the nearest real releases: torchaudio 0.13.1 (pins torch 1.13.1) and torchaudio 2.0.0 (pins torch 2.0.0)"."""
    return (f"the nearest real releases: {_real_release(release.component, release.below, release.below_torch)} and "
            f"{_real_release(release.component, release.above, release.above_torch)}")


def absent_fix(release: AbsentRelease) -> str:
    name = release.component.distribution
    return f"Pin a real release: {name}=={release.above} or {name}=={release.below}."


def unlisted_sentence(release: UnlistedRelease, torch: Optional[Version]) -> str:
    """The note on an unlisted pick: what is missing, how it was taken, the nearest verified pairing, what settles it."""
    parts = [unlisted_phrase(release)]
    if torch is not None:
        parts.append(f"taken {unlisted_pairing(release, torch)}")
    if release.component is not Component.TORCH:
        parts.append(unlisted_nearest(release))
    return "; ".join(parts) + f". Settle it: {release.settle(torch)}."


def _companion_pin(release: Any) -> str:
    """What a torchvision/torchaudio release declares of torch, in its own terms: "pins torch 2.14.0" only for an exact
    pin; "declares torch>=2.14.0" for a floor or a range; "declares no torch"."""
    if isinstance(release, UnlistedRelease):
        return (f"is not in the matrix, and its line's listed releases pin torch {'.'.join(map(str, release.series))}.*" if release.series is not None
                else "is not in the matrix")
    return declaration_phrase(release)


def declaration_phrase(release: Any) -> str:
    if release.torch is not None:
        return f"pins torch {release.torch}"
    requirement = release.requirement
    return "declares no torch" if requirement is None else f"declares torch{range_text(requirement)}"


def known_bad_phrase(entry: KnownBad) -> str:
    """"torch 2.1.0 with oneccl_bind_pt 2.1.0 is a known-bad set: <what fails> (open: <sources>)"."""
    if entry.torch_label is None:
        torch = f"torch {entry.torch}"
    else:
        torch = f"torch {entry.torch}{entry.torch_label}" if entry.torch_label else f"torch {entry.torch} (its unlabelled PyPI build)"
    return (f"{torch} with {entry.component.label} {entry.version} is a known-bad set, reported failing: {entry.failure} "
            f"({entry.status}: {sources_text(entry.provenance.sources)})")


def isa_phrase(floor: IsaFloor) -> str:
    return f"needs a CPU with {floor.name} ({', '.join(floor.flags)})"


def device_build_sentence(build: "DeviceBuild") -> str:
    """"oneccl_bind_pt 2.5.0+xpu is an XPU build; compatmatrix covers the CPU stack"."""
    article = "an" if build.device == "XPU" else "a"
    return f"{build.component.label} {build.version} is {article} {build.device} build; compatmatrix covers the CPU stack"


def device_build_fix(build: "DeviceBuild") -> str:
    label = build.component.label
    article = "an" if build.device == "XPU" else "a"
    where = f" (source: {sources_text(build.sources)})"
    if build.cpu_release is not None:
        return f"The CPU release of that number is {label} {build.cpu_release}: pin {label}=={build.cpu_release} (compat takes its CPU build){where}."
    if build.cpu_series:
        return f"{build.version.public} exists only as {article} {build.device} build; the CPU releases of the {build.version.major}.{build.version.minor} series are {versions_text(build.cpu_series, limit=4)}{where}."
    return f"{build.version.public} exists only as {article} {build.device} build, and the matrix has no CPU release of that series{where}."


def _needs(minimum_of: str, partner: str, suffix: str = "") -> Callable[[Any], Optional[str]]:
    def phrase(release: Any) -> Optional[str]:
        minimum = getattr(release, minimum_of)
        return None if minimum is None else f"needs {partner} >= {minimum}{suffix}"

    return phrase


#: What the subject's release needs of its partner, by rule name ("is built for torch 2.7.0 only").
REQUIREMENT: dict[str, Callable[[Any], Optional[str]]] = {
    "ipex-import-check": ipex_torch_phrase,
    "ipex-torch-series": ipex_torch_phrase,
    "ccl-torch-series": ccl_torch_phrase,
    "ccl-torch-break": ccl_torch_phrase,
    "torchvision-torch": _companion_pin,
    "torchaudio-torch": _companion_pin,
    "transformers-torch": _needs("torch_min", "torch"),
    "accelerate-torch": _needs("torch_min", "torch"),
    "transformers-accelerate": _needs("accelerate_min", "accelerate", " for its Trainer"),
}


def requirement(rule: PairRule, release: Any) -> Optional[str]:
    phrase = REQUIREMENT.get(rule.name)
    return phrase(release) if phrase is not None else f"does not meet {rule.name} ({rule.source})"


# --- rejections ----------------------------------------------------------------------------------


def rejection_sentence(rejection: Rejection) -> str:
    """Why a unary rule dropped a release ("intel-extension-for-pytorch 2.5.0 is yanked on pypi ...")."""
    component, version, cause = rejection.component, rejection.version, rejection.cause
    if isinstance(cause, UserConstraint):
        return f"you asked for {spec_text(component, cause.spec)}"
    if isinstance(cause, NoWheel):
        coverage = "; ".join(f"{w.host}: {python_list(w.python)}" for w in cause.wheels)
        return f"{component.label} {version} has no wheel for Python {cause.python.label} ({coverage})"
    if isinstance(cause, GlibcTooOld):
        floors = "; ".join(f"{w.host}: glibc >= {w.glibc_min}" for w in cause.wheels)
        return f"{component.label} {version}'s wheels for this Python need a newer glibc than {cause.platform.tag} has ({cause.platform.glibc_text}; {floors})"
    if isinstance(cause, RequiresPython) and cause.release:
        target = f"Python {cause.python}" if cause.python is not None else "this Python"
        return f"{component.label} {version} requires Python {range_text(cause.spec)} (its Requires-Python), which excludes {target}"
    if isinstance(cause, RequiresPython):
        return f"{component.distribution} {cause.line}.* requires Python {cause.spec}"
    if isinstance(cause, MissingFeature):
        return f"only {component.distribution}{range_text(cause.feature.versions)} {cause.feature.description}"
    if isinstance(cause, Yanked):
        return f"{yanked_clause(component, version, cause.yank)}; pin {component.label}=={version} to use it anyway"
    if isinstance(cause, Undeclared):
        return (f"{component.label} {version} declares no torch and no source pairs it with one; pin {component.label}=={version} "
                "to use it anyway (unverified with any torch)")
    raise TypeError(f"no sentence for {cause!r}")  # pragma: no cover


def rejected_sentence(rejected: Rejected) -> str:
    """Why a pair rule rules a release out next to a partner ("oneccl_bind_pt 2.5.0 is built for torch 2.5.0 and pairs only
    with torch 2.5.*, not torch 2.7.0"; a documented break names its source)."""
    if rejected.rule.evidence == "documented-break":
        return (
            f"{rejected.component.label} {rejected.version} is documented not to work with {rejected.partner.label} {rejected.partner_version} "
            f"({sources_text(rejected.source)}; it is built for torch {rejected.release.torch})"
        )
    needs = requirement(rejected.rule, rejected.release)
    return f"{rejected.component.label} {rejected.version} {needs}, not {rejected.partner.label} {rejected.partner_version}"


# --- explanations, notes, changes ----------------------------------------------------------------


def _fits_no_torch(item: x.FitsNoTorch) -> str:
    candidate = item.candidate
    needs = requirement(item.rule, candidate.release) if item.rule is not None else None
    text = f"{candidate} {needs or 'fits no allowed torch'}"
    if not item.torches:
        text += "; the matrix has no such torch release"
    elif item.torch_rejections:
        text += "; " + "; ".join(dict.fromkeys(rejection_sentence(r) for r in item.torch_rejections))
    return text + "."


def _none_usable(item: x.NoneUsable) -> str:
    scope = f"matching {spec_text(item.component, item.spec)} " if item.spec is not None else ""
    return f"No {item.component.label} release {scope}can be used" + (f" for Python {item.python}:" if item.python else " here:")


def _group(item: x.RejectionGroup) -> str:
    example = rejection_sentence(item.example)
    if len(item.rejections) == 1:
        return example
    first, last = item.rejections[0].version, item.rejections[-1].version
    return f"{len(item.rejections)} releases ({first} to {last}) for this kind of reason: {example}"


def _torch_pairs_with(item: x.TorchPairsWith) -> str:
    text = f"torch {item.torch} pairs with {item.component.label} {item.version}"
    if item.rejection is not None:
        text += f", but {rejection_sentence(item.rejection)}"
    return text + "."


def _no_common_torch(item: x.NoCommonTorch) -> str:
    parts = [f"{c.label} {versions_text(kept, limit=3)} fits torch {versions_text(torches, limit=4)}" for c, kept, torches in item.fits]
    return f"No allowed torch release fits every package: {'; '.join(parts)}."


def _newer_ruled_out(item: x.NewerRuledOut) -> str:
    plural = "s" if item.newer > 1 else ""
    text = f"{item.candidate}: {item.newer} newer release{plural} ruled out; the next, {item.next_version}: {sentence(item.why)}"
    if item.newest is not None:
        text += f" (newest in the matrix: {item.newest})"
    return text + "."


def _unverified(item: x.UnverifiedNote) -> str:
    parts = []
    if item.entry:
        parts.append("the release entry")
    if item.coverage_host:
        parts.append(f"its Python coverage on {item.coverage_host}")
    if item.host_url:
        parts.append(f"the host {item.host_url}")
    return (
        f"{item.candidate}: not verified against a live source: {', '.join(parts)} "
        f"(compat matrix --package {item.candidate.component.distribution} --sources)."
    )


def _pairing_note(item: x.PairingNote) -> str:
    candidate = item.candidate
    if item.pairing.evidence in ("declared", "verified"):  # inside its own floor or range: what pip installs, said as such
        return (f"{candidate} with torch {item.pairing.torch}: {pairing_phrase(item.pairing, detail=True)}. "
                f"Settle it: compat matrix verify {candidate.component.distribution}=={candidate.version} --with torch=={item.pairing.torch}.")
    if item.pairing.tested:  # compat matrix verify tried it here: the record is the note (nothing left to settle)
        built = f" (it is built for torch {item.built_for})" if item.built_for is not None else ""
        return f"{candidate} with torch {item.pairing.torch}: {pairing_phrase(item.pairing)}{built}."
    if item.built_for is None:  # a companion that declares no torch requirement
        nearest = (f"; the nearest verified (pinned) pairing: {nearest_verified(candidate.component, item.nearest[1], item.nearest[0], item.partner)}"
                   if item.nearest is not None else "")
        return (f"{candidate} with torch {item.pairing.torch}: {pairing_phrase(item.pairing)} ({item.pairing.provenance.note}){nearest}. "
                f"Settle it: compat matrix verify {candidate.component.distribution}=={candidate.version} --with torch=={item.pairing.torch}.")
    return (
        f"{candidate} with torch {item.pairing.torch}: {pairing_phrase(item.pairing, detail=True)} (it is built for torch {item.built_for}); "
        f"the nearest verified (built-for) pairing: {nearest_verified(candidate.component, item.built_for, candidate.version, item.partner)}."
    )


def _weaker(pairing: Optional[Pairing], bad: Optional[KnownBad]) -> str:
    if bad is not None:
        return known_bad_phrase(bad)
    if pairing is None:
        return "its pairing is less well known"
    return "unverified: no source says whether this pair works" if pairing.evidence == "unverified" else pairing_phrase(pairing)


def _python_undecided(item: x.PythonUndecidedNote) -> str:
    return (f"{item.candidate} requires Python {range_text(item.spec)} (its Requires-Python): undecided for Python {item.python}, whose "
            f"{item.python}.x releases it admits only in part; pass the full version (--python-version {item.python}.N) or --python PATH to decide.")


def _weaker_pairing(why: x.WeakerPairing) -> str:
    chosen = "built for it" if why.chosen_pairing is None or why.chosen_pairing.evidence == "built-for" else pairing_phrase(why.chosen_pairing)
    return f"with torch {why.torch} it is {_weaker(why.pairing, why.known_bad)}, while {why.chosen.version} is {chosen} (the better-known pairing is preferred)"


def _weaker_set(why: x.WeakerSet) -> str:
    return (
        f"its set pairs {why.pick} with it only as {_weaker(why.pairing, why.known_bad)}; within the {why.torch.major}.{why.torch.minor} series "
        f"a set that is better known is preferred (torch {why.chosen_torch})"
    )


def _glibc_unknown(item: x.GlibcUnknownNote) -> str:
    return (
        f"{item.candidate} from {item.wheels.host} needs glibc >= {item.wheels.glibc_min}; the platform {item.platform.tag} does not say which glibc "
        f"the target has (pass a manylinux tag, e.g. --platform manylinux2014_x86_64, or --python with its interpreter)."
    )


def _setvars(item: x.SetvarsNote) -> str:
    release = item.release
    return (f'After installing, set up oneCCL with eval "$(compat env)" (add --python PATH for another environment): it exports what the '
            f"bindings' {release.setvars} sets, plus the thread settings, in place of sourcing that script by hand.")


def _yanked_newer(item: x.YankedNewerNote) -> str:
    first, last = item.versions[0], item.versions[-1]
    span = f"{first} to {last}" if len(item.versions) > 1 else str(first)
    label = item.component.label
    return (
        f"newer {label} releases ({span}) are yanked on {where_yanked(item.yank)}: they were skipped; "
        f"to use one anyway, pin it: compat resolve {label}=={last} ..."
    )


def _pin_yanked(item: x.PinYanked) -> str:
    rejection = item.rejection
    assert isinstance(rejection.cause, Yanked)
    return f"pin {rejection.component.label}=={rejection.version} ({yanked_clause(rejection.component, rejection.version, rejection.cause.yank)})"


def _because(item: x.Because) -> str:
    """Why an alternative is offered, from its change (reasons.Because)."""
    from . import reasons as x

    edit = item.edit
    if isinstance(edit, x.MovePin):
        pinned = next(iter(edit.spec)).version
        text = (f"the nearest {edit.component.label} release to {pinned} with a consistent set"
                + ("; none nearer has every pairing built for its torch, and this one does not either" if item.weaker
                   else f" whose pairings the releases declare ({'; '.join(item.declared)})" if item.declared
                   else " whose pairings are all built for their torch"))
    elif isinstance(edit, x.PinYanked):
        text = (f"{edit.rejection.component.label} {edit.rejection.version} is the release the other pins pair with; "
                "compat takes a yanked release only for an exact pin")
    elif isinstance(edit, x.DropConstraint):
        text = "the newest set without that constraint"
    elif isinstance(edit, x.UseProfile):
        text = "the sibling profile, whose features the request's packages can meet"
    elif isinstance(edit, x.UsePython):
        text = "the nearest Python with a consistent set"
    else:
        text = f"nothing nearer works, and the rest resolves without {edit.component.label}"
    if item.older_than is not None:
        text += (f"; it is older than {item.older_than.component.label} {item.older_than.version}, which is yanked for security, "
                 "and no set at least as new works without that release")
    return text


@functools.lru_cache(maxsize=None)
def _writers() -> dict[type, Callable[[Any], str]]:
    """One writer per record type."""
    from . import reasons as x

    return {
        # why no set
        x.Unsupported: lambda item: item.text,
        x.PythonOutsideRange: lambda item: (
            f"The matrix covers Python {item.low}–{item.high}; Python {item.python} is outside it, so no curated release fits it."
        ),
        x.NoneMatches: lambda item: (
            f"No {item.component.label} release in the matrix matches {spec_text(item.component, item.spec)}; "
            f"the matrix knows {item.component.label} {item.oldest} to {item.newest}."
        ),
        x.NoSuchRelease: lambda item: f"{_capital(absent_phrase(item.absent))}; {absent_nearest(item.absent)}.",
        x.NoneUsable: _none_usable,
        x.RejectionGroup: _group,
        x.WouldDo: lambda item: f"(without {spec_text(item.component, item.spec)}, these would do: {versions_text(item.versions, limit=4)})",
        x.FitsNoTorch: _fits_no_torch,
        x.MoreFitNoTorch: lambda item: f"... and {item.count} other {item.component.label} releases fit no allowed torch either.",
        x.NoPartnerForTorch: lambda item: f"No {item.component.label} release in the matrix pairs with torch {item.torch}.",
        x.TorchPairsWith: _torch_pairs_with,
        x.NoCommonTorch: _no_common_torch,
        x.PartnerBreak: lambda item: f"{rejected_sentence(item.rejected)}; the newest allowed {item.rejected.partner.label} is {item.newest_partner}.",
        x.NoConsistentCombination: lambda item: "No combination of the allowed releases is consistent.",
        # why these versions
        x.Newest: lambda item: (f"{item.candidate}: the release pinned (the matrix does not list it: see the notes)." if isinstance(item.candidate.release, UnlistedRelease)
                                else f"{item.candidate}: the newest {item.candidate.component.label} in the matrix."),
        x.NewerRuledOut: _newer_ruled_out,
        # notes
        x.EolNote: lambda item: f"{item.component.label} is {item.eol.status}{' since ' + item.eol.date if item.eol.date else ''}; {item.eol.advice}",
        x.UnverifiedNote: _unverified,
        x.UnlistedNote: lambda item: unlisted_sentence(item.release, item.torch),
        x.YankedPinNote: lambda item: (
            f"{item.candidate} is yanked on {item.yank.host or 'PyPI'}{': ' + item.yank.reason.rstrip('.') if item.yank.reason else ''}"
            + (f"; a security yank holds for the same build on {item.candidate.host.id} too" if item.yank.host not in (None, item.candidate.host.id) else "")
            + " (used because you pinned it)."
        ),
        x.YankedElsewhereNote: lambda item: (
            f"{item.candidate} is yanked on {where_yanked(item.yank)}; compat takes it from {item.candidate.host.id}, which does not mark it "
            f"yanked (the same build: the reason may hold for it too)."
        ),
        x.OffBuildNote: lambda item: (
            f"{item.candidate} was built against torch {item.built_for}; its import check accepts torch {item.torch}. "
            f"Pin torch=={item.built_for} to match the build exactly."
        ),
        x.PairingNote: _pairing_note,
        x.PythonUndecidedNote: _python_undecided,
        x.KnownBadNote: lambda item: f"{item.candidate}: {known_bad_phrase(item.known_bad)}.",
        x.IsaFloorNote: lambda item: (
            f"{item.candidate} {isa_phrase(item.floor)}: it does not run on CPUs without them "
            f"(source: {sources_text(item.floor.provenance.sources)}); compat check --python PATH checks the machine."
        ),
        x.GlibcUnknownNote: _glibc_unknown,
        x.CclWorkerCountNote: lambda item: (
            "export CCL_WORKER_COUNT=1 (or more) before launching: accelerate takes ccl only when CCL_WORKER_COUNT > 0, and "
            "without it --ddp_backend ccl stops with \"ValueError: Your assigned backend ccl is not available\" (accelerate/state.py)."
        ),
        x.SetvarsNote: _setvars,
        x.YankedNewerNote: _yanked_newer,
        # what would work
        x.MovePin: lambda item: f"change {spec_text(item.component, item.spec)} to {item.component.label}=={item.version}",
        x.PinYanked: _pin_yanked,
        x.DropConstraint: lambda item: f"drop the constraint {spec_text(item.component, item.spec)}",
        x.UseProfile: lambda item: f"use --profile {item.name} ({item.description.partition(':')[0]})",
        x.UsePython: lambda item: f"use Python {item.version}",
        x.LeaveOut: lambda item: f"leave out {item.component.label}",
        x.Because: _because,
        # why the next newer release was not taken (inside NewerRuledOut)
        x.NotInRequest: lambda why: "not allowed by the request",
        x.NoPartnerForThisTorch: lambda why: f"no allowed {why.component.label} release pairs with it ({rejected_sentence(why.example)})",
        x.GroupHasNoSet: lambda why: f"{_and(why.group)} have no pair that fits it",
        x.ExactBuildPreferred: lambda why: (
            f"it is built for torch {why.built_for}, while {why.chosen} is built for the chosen torch {why.torch} (the exact build is preferred)"
        ),
        x.WeakerPairing: _weaker_pairing,
        x.WeakerSet: _weaker_set,
        x.NoPartnerTogether: lambda why: f"no allowed {_and(why.partners)} release fits it together with the chosen torch",
        x.NotChosen: lambda why: "not chosen",
        # rejections, where they stand alone
        Rejection: rejection_sentence,
        Rejected: rejected_sentence,
    }


def sentence(item: Any) -> str:
    """The sentence for one record."""
    return _writers()[type(item)](item)


def depth(item: Any) -> int:
    """0 for a reason, 1 for a detail line under the reason before it."""
    return getattr(item, "depth", 0)


def sentences(items: Iterable[Any]) -> tuple[str, ...]:
    """The lines of an explanation: detail lines indented by two spaces (as in the JSON output)."""
    return tuple("  " * depth(item) + sentence(item) for item in items)
