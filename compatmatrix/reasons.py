"""The explanations as data: why no set exists, why each pick, what to know about a set, the changes to a request that
resolve and why each is offered. explain.py makes these records, sentences.py writes their sentences (once); nothing
here builds or reads a sentence. Pure."""

from __future__ import annotations

from typing import Any, ClassVar, Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import AbsentRelease, CclRelease, Component, EndOfLife, IsaFloor, KnownBad, Pairing, UnlistedRelease, WheelSet, Yank
from .record import Record
from .rules import Candidate, PairRule, Rejected, Rejection
from .target import Platform

# --- the records ---------------------------------------------------------------------------------
# ``depth`` 1 marks a detail line under the reason before it.


class Unsupported(Record):
    """The platform is not one the matrix speaks for (the sentence comes from the platform check)."""

    text: str
    depth: ClassVar[int] = 0


class PythonOutsideRange(Record):
    low: Version
    high: Version
    python: str
    depth: ClassVar[int] = 0


class NoneMatches(Record):
    """No release of the component matches the user's constraint at all."""

    component: Component
    spec: SpecifierSet
    oldest: Version
    newest: Version
    depth: ClassVar[int] = 0


class NoSuchRelease(Record):
    """The user pinned a version inside the span the matrix lists that the registries never had (matrix/model.py
    AbsentRelease): no such release, with the nearest real ones."""

    absent: AbsentRelease
    depth: ClassVar[int] = 0


class NoneUsable(Record):
    """Every release (matching ``spec``) is ruled out by unary rules; ``python`` when some are about the Python."""

    component: Component
    spec: Optional[SpecifierSet]
    python: Optional[str]
    depth: ClassVar[int] = 0


class RejectionGroup(Record):
    """Releases ruled out for the same kind of reason, with the most telling example."""

    rejections: tuple[Rejection, ...]  # oldest first
    example: Rejection
    depth: ClassVar[int] = 1


class WouldDo(Record):
    """Without the user's constraint, these releases would be usable."""

    component: Component
    spec: SpecifierSet
    versions: tuple[Version, ...]
    depth: ClassVar[int] = 1


class FitsNoTorch(Record):
    """A candidate that pairs with no allowed torch: the torch releases it pairs with, and why each is out."""

    candidate: Candidate
    rule: Optional[PairRule]  # the rule that states what it needs of torch
    torches: tuple[Version, ...]
    torch_rejections: tuple[Rejection, ...]
    depth: ClassVar[int] = 0


class MoreFitNoTorch(Record):
    component: Component
    count: int
    depth: ClassVar[int] = 0


class NoPartnerForTorch(Record):
    component: Component
    torch: Version
    depth: ClassVar[int] = 0


class TorchPairsWith(Record):
    """``torch`` pairs with this release of ``component``; ``rejection`` when a unary rule rules it out."""

    torch: Version
    component: Component
    version: Version
    rejection: Optional[Rejection]
    depth: ClassVar[int] = 0


class NoCommonTorch(Record):
    """Each component fits some torch, but no torch fits them all: (component, its candidates, the torches it fits)."""

    fits: tuple[tuple[Component, tuple[Version, ...], tuple[Version, ...]], ...]
    depth: ClassVar[int] = 0


class PartnerBreak(Record):
    """Torch is not the problem: a rule between two other components, against the newest allowed partner."""

    rejected: Rejected
    newest_partner: Version
    depth: ClassVar[int] = 0


class NoConsistentCombination(Record):
    depth: ClassVar[int] = 0


ConflictReason = Union[
    Unsupported, PythonOutsideRange, NoneMatches, NoSuchRelease, NoneUsable, RejectionGroup, WouldDo, FitsNoTorch, MoreFitNoTorch,
    NoPartnerForTorch, TorchPairsWith, NoCommonTorch, PartnerBreak, NoConsistentCombination,
]

# Why the next newer release of a pick was not taken (beside a Rejection or a Rejected):


class NotInRequest(Record):
    pass


class NoPartnerForThisTorch(Record):
    """No allowed release of ``component`` pairs with this torch; ``example`` is the nearest one's rejection."""

    component: Component
    example: Rejected


class GroupHasNoSet(Record):
    """The components of a group (transformers and accelerate) have no assignment that fits this torch."""

    group: tuple[Component, ...]


class ExactBuildPreferred(Record):
    candidate: Candidate
    built_for: Version
    chosen: Version
    torch: Version


class NoPartnerTogether(Record):
    """No release of ``partners`` fits this one together with the chosen torch."""

    partners: tuple[Component, ...]


class WeakerPairing(Record):
    """A release that fits the chosen torch, but whose pairing with it is less well known than the chosen one's."""

    candidate: Candidate
    pairing: Optional[Pairing]
    known_bad: Optional[KnownBad]
    chosen: Candidate
    chosen_pairing: Optional[Pairing]
    torch: Version


class WeakerSet(Record):
    """A newer torch of the chosen series has a full set, but its weakest pairing (``pick`` with it) is less well
    known than the chosen set's: within a series, evidence comes before the newer patch release."""

    torch: Version
    pick: Candidate
    pairing: Optional[Pairing]
    known_bad: Optional[KnownBad]
    chosen_torch: Version


class NotChosen(Record):
    pass


WhyNot = Union[
    Rejection, Rejected, NotInRequest, NoPartnerForThisTorch, GroupHasNoSet, ExactBuildPreferred, WeakerPairing, WeakerSet, NoPartnerTogether,
    NotChosen,
]


class Newest(Record):
    candidate: Candidate


class NewerRuledOut(Record):
    candidate: Candidate
    newer: int  # how many newer releases the matrix knows
    next_version: Version
    why: WhyNot
    newest: Optional[Version]  # the newest in the matrix, when it is not the next one


PickReason = Union[Newest, NewerRuledOut]

# Notes on a resolution:


class EolNote(Record):
    component: Component
    eol: EndOfLife


class UnverifiedNote(Record):
    candidate: Candidate
    entry: bool  # the release entry itself
    coverage_host: Optional[str]  # its Python coverage on this host
    host_url: Optional[str]  # the host


class UnlistedNote(Record):
    """A pick the matrix does not list: the facts it lacks, the torch it was taken with (unverified), and the
    nearest verified pairing (the listed release nearest to it and the torch that one pins)."""

    candidate: Candidate
    release: UnlistedRelease
    torch: Optional[Version]  # the set's torch (None: the pick is torch)


class YankedPinNote(Record):
    candidate: Candidate
    yank: Yank


class YankedElsewhereNote(Record):
    """The pick's wheel comes from a host that does not mark it yanked, while another host yanked the same release."""

    candidate: Candidate
    yank: Yank


class OffBuildNote(Record):
    """IPEX built against another torch of the series than the chosen one (its import check accepts it)."""

    candidate: Candidate
    built_for: Version
    torch: Version


class PairingNote(Record):
    """A pick paired with torch on weaker evidence than built-for: reported working (with its source) or unverified;
    ``built_for``: the torch its release is built for; ``partner``: the release of the component built for this torch,
    if the matrix has one (the nearest verified pairings)."""

    candidate: Candidate
    pairing: Pairing
    built_for: Optional[Version]  # None: its METADATA declares no torch requirement (torchaudio 2.11.0)
    partner: Optional[Version]
    nearest: Optional[tuple[Version, Version]] = None  # when built_for is None: (the nearest release that pins a torch, that torch)


class PythonUndecidedNote(Record):
    """A pick whose Requires-Python admits only part of the target's X.Y line (``!=3.14.1`` inside 3.14) and the target's
    full version is not known: undecided, said with how to decide."""

    candidate: Candidate
    spec: SpecifierSet
    python: str


class KnownBadNote(Record):
    candidate: Candidate
    known_bad: KnownBad


class IsaFloorNote(Record):
    """A pick that needs more than AVX2 (IPEX 1.10.x: AVX-512 builds; 1.12.0: its AVX2 path is broken)."""

    candidate: Candidate
    floor: IsaFloor


class GlibcUnknownNote(Record):
    """A pick whose wheel needs a glibc floor the platform tag does not state (linux_x86_64)."""

    candidate: Candidate
    wheels: WheelSet
    platform: Platform


class CclWorkerCountNote(Record):
    pass


class SetvarsNote(Record):
    release: CclRelease


class YankedNewerNote(Record):
    """Newer releases skipped only because they are yanked (oldest first)."""

    component: Component
    versions: tuple[Version, ...]
    yank: Yank


Note = Union[
    EolNote, UnlistedNote, UnverifiedNote, YankedPinNote, YankedElsewhereNote, OffBuildNote, PairingNote, PythonUndecidedNote, KnownBadNote, IsaFloorNote, GlibcUnknownNote, CclWorkerCountNote, SetvarsNote,
    YankedNewerNote,
]

# Changes to the request that resolve:


class MovePin(Record):
    component: Component
    spec: SpecifierSet
    version: Version


class PinYanked(Record):
    rejection: Rejection  # its cause is Yanked


class DropConstraint(Record):
    component: Component
    spec: SpecifierSet


class UseProfile(Record):
    name: str
    description: str


class UsePython(Record):
    version: Version


class LeaveOut(Record):
    component: Component


Change = Union[MovePin, PinYanked, DropConstraint, UseProfile, UsePython, LeaveOut]


class Because(Record):
    """Why an alternative is offered: its change, whether its set rests on a pairing that is not built for its torch
    (``weaker``: a moved pin where no nearer set is wholly built-for), and the release yanked for security it is older
    than (``older_than``: offered only because no set at least as new works without that release)."""

    edit: Any  # a Change
    weaker: bool = False
    older_than: Optional[Rejection] = None
    declared: tuple[str, ...] = ()  # "torchvision 0.29.2 declares torch>=2.14.0": the set's pairings that rest on a declaration only
