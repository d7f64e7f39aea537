"""The curated matrix as frozen value objects.

Everything here is plain data: versions are :class:`packaging.version.Version`, ranges are
:class:`packaging.specifiers.SpecifierSet`.  Nothing in this module reads files or talks to
the network; :mod:`compatmatrix.matrix.load` builds these objects from ``data/matrix.toml``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..names import canonical_name


class Component(enum.Enum):
    """A package the resolver can choose a version for."""

    TORCH = "torch"
    IPEX = "intel-extension-for-pytorch"
    CCL = "oneccl-bind-pt"
    TRANSFORMERS = "transformers"
    ACCELERATE = "accelerate"

    @property
    def distribution(self) -> str:
        """PEP 503 canonical distribution name (the key used in JSON output)."""
        return self.value

    @property
    def label(self) -> str:
        """The name people use in sentences."""
        return _LABELS[self]

    @classmethod
    def from_name(cls, name: str) -> "Component":
        """Map a distribution name, module name or short alias to a component.

        Raises ``KeyError`` for names the matrix does not cover.
        """
        return _ALIASES[canonical_name(name)]


_LABELS = {
    Component.TORCH: "torch",
    Component.IPEX: "intel-extension-for-pytorch",
    Component.CCL: "oneccl_bind_pt",
    Component.TRANSFORMERS: "transformers",
    Component.ACCELERATE: "accelerate",
}

_ALIASES = {
    canonical_name(alias): component
    for component, aliases in {
        Component.TORCH: ("torch", "pytorch"),
        Component.IPEX: (
            "intel-extension-for-pytorch",
            "intel_extension_for_pytorch",
            "ipex",
            "torch-ipex",
            "torch_ipex",
        ),
        Component.CCL: (
            "oneccl-bind-pt",
            "oneccl_bind_pt",
            "oneccl_bindings_for_pytorch",
            "torch-ccl",
            "torch_ccl",
            "ccl",
        ),
        Component.TRANSFORMERS: ("transformers",),
        Component.ACCELERATE: ("accelerate",),
    }.items()
    for alias in aliases
}

#: The order in which the resolver maximises versions: a newer torch beats a newer IPEX, and so on.
COMPONENT_ORDER: tuple[Component, ...] = (
    Component.TORCH,
    Component.IPEX,
    Component.CCL,
    Component.TRANSFORMERS,
    Component.ACCELERATE,
)


@dataclass(frozen=True)
class Provenance:
    """Where a fact comes from, and whether it was checked against that source."""

    sources: tuple[str, ...]
    verified: bool = True
    note: str = ""


@dataclass(frozen=True)
class Host:
    """A place wheels are downloaded from (a PEP 503 index or a find-links page)."""

    id: str
    url: str
    style: str  # "index" (--index-url / --extra-index-url) or "find-links" (-f)
    description: str
    provenance: Provenance

    @property
    def pip_flag(self) -> str:
        return "-f" if self.style == "find-links" else "--extra-index-url"


@dataclass(frozen=True)
class WheelSet:
    """The CPython versions one release has Linux x86_64 wheels for on one host."""

    host: str
    python: frozenset[Version]
    local_label: str
    yanked: bool
    yanked_reason: str
    provenance: Provenance

    def has_python(self, python: Version) -> bool:
        return python in self.python


@dataclass(frozen=True)
class TorchRelease:
    version: Version
    wheels: tuple[WheelSet, ...]
    requires_python: Optional[SpecifierSet]
    released: str
    provenance: Provenance


@dataclass(frozen=True)
class IpexRelease:
    version: Version
    distribution: str
    module: str
    torch: Version  # the torch it was built against
    torch_accepts: SpecifierSet  # what its import-time version guard lets through
    guard: str  # how the guard fails: exit127, os_exit, raise, none, ...
    released: str
    wheels: tuple[WheelSet, ...]
    provenance: Provenance


@dataclass(frozen=True)
class CclRelease:
    version: Version
    distribution: str
    module: str
    torch: Version  # the torch version the prebuilt wheel is built for
    has_cwd: bool
    setvars: str  # path of setvars.sh relative to the module directory
    oneccl: str  # bundled oneCCL version
    released: str
    wheels: tuple[WheelSet, ...]
    provenance: Provenance
    torch_also: tuple[Version, ...] = ()  # other torch versions Intel shipped it with (sourced)

    @property
    def torch_versions(self) -> tuple[Version, ...]:
        """Every torch this prebuilt wheel works with: exactly the one it is built for, plus sourced exceptions."""
        return (self.torch, *self.torch_also)


@dataclass(frozen=True)
class CompanionRelease:
    """torchvision / torchaudio: each release pins exactly one torch."""

    package: str
    version: Version
    torch: Version
    python: frozenset[Version]
    provenance: Provenance


@dataclass(frozen=True)
class LibraryLine:
    """One minor line of a pure-Python library (transformers 4.29.*, accelerate 0.20.*)."""

    package: str
    line: Version
    versions: tuple[Version, ...]  # every release of the line, newest first
    yanked: frozenset[Version]
    requires_python: Optional[SpecifierSet]
    torch_min: Optional[Version]
    accelerate_min: Optional[Version]
    provenance: Provenance

    @property
    def latest(self) -> Version:
        return self.versions[0]


@dataclass(frozen=True)
class Feature:
    """A behaviour of a library that exists in a range of its versions (a flag, a backend)."""

    package: str
    name: str
    versions: SpecifierSet
    description: str
    evidence: str
    provenance: Provenance

    def present_in(self, version: Version) -> bool:
        return self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class EndOfLife:
    package: str
    status: str  # "archived", "deprecated"
    last_release: Version
    date: str
    statement: str
    advice: str
    provenance: Provenance


@dataclass(frozen=True)
class Profile:
    """A named set of components plus the library features that set must support."""

    name: str
    description: str
    components: frozenset[Component]
    features: tuple[tuple[str, str], ...]  # (package, feature name)


@dataclass(frozen=True)
class Policy:
    """Which host each component is taken from, in order of preference."""

    host_preference: dict[Component, tuple[str, ...]]
    python_range: tuple[Version, Version]  # the CPython versions the matrix speaks for
    default_profile: str
    features_with_ccl: tuple[tuple[str, str], ...]  # what transformers/accelerate must support next to oneccl_bind_pt


@dataclass(frozen=True)
class Matrix:
    schema_version: int
    registry_checked: str
    hosts: dict[str, Host]
    policy: Policy
    profiles: dict[str, Profile]
    torch: tuple[TorchRelease, ...]
    ipex: tuple[IpexRelease, ...]
    ccl: tuple[CclRelease, ...]
    torchvision: tuple[CompanionRelease, ...]
    torchaudio: tuple[CompanionRelease, ...]
    transformers: tuple[LibraryLine, ...]
    accelerate: tuple[LibraryLine, ...]
    features: tuple[Feature, ...]
    eol: tuple[EndOfLife, ...]
    source_path: str = field(default="", compare=False)

    def __repr__(self) -> str:
        return (
            f"Matrix({self.source_path or 'in memory'}: {len(self.torch)} torch, {len(self.ipex)} IPEX, "
            f"{len(self.ccl)} oneccl_bind_pt, {len(self.transformers)} transformers lines, {len(self.accelerate)} accelerate lines)"
        )

    def feature(self, package: str, name: str) -> Feature:
        for feature in self.features:
            if feature.package == package and feature.name == name:
                return feature
        raise KeyError(f"{package}:{name}")

    def features_of(self, package: str) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.package == package)

    def eol_of(self, package: str) -> Optional[EndOfLife]:
        for entry in self.eol:
            if entry.package == package:
                return entry
        return None

    def torch_release(self, version: Version) -> Optional[TorchRelease]:
        return _find(self.torch, version)

    def ipex_release(self, version: Version) -> Optional[IpexRelease]:
        return _find(self.ipex, version)

    def ccl_release(self, version: Version) -> Optional[CclRelease]:
        return _find(self.ccl, version)


def _find(releases: Iterable, version: Version):
    for release in releases:
        if release.version == version:
            return release
    return None
