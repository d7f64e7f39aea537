"""Resolution + where the hosts are -> InstallPlan: one pinned wheel per package, from its own host. Pure."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..matrix.model import COMPONENT_ORDER, Component, Release
from ..names import canonical_name
from ..search import Resolution
from ..target import Platform
from .indexes import IndexLocation, Link

_LEGACY_MANYLINUX = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}


@dataclass(frozen=True)
class WheelTarget:
    python: Version  # 3.11
    platform: Platform
    glibc: Optional[tuple[int, int]] = None  # None: any manylinux level is taken


def glibc_of(text: str) -> Optional[tuple[int, int]]:
    match = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def wheel_fits(filename: str, target: WheelTarget) -> bool:
    """Does the wheel install on the target (Linux x86_64, its CPython, its glibc)?  Its tags against the target's
    supported tags as ``packaging.tags`` lists them (:func:`supported_tags`), the way pip and uv decide."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    return not supported_tags(target).isdisjoint(tags)


#: The newest glibc minor a target of unknown glibc is taken to have (any manylinux level is taken).
_ANY_GLIBC = (2, 99)


@functools.lru_cache(maxsize=32)
def supported_tags(target: WheelTarget) -> frozenset:
    """The wheel tags a target takes, by ``packaging.tags``: ``cpython_tags`` (its ABI, abi3 of older CPythons, none)
    and ``compatible_tags`` (py3-none, any) for the platforms its glibc meets: ``manylinux_2_M_x86_64`` from its glibc
    down to 2.5, the legacy aliases (manylinux2014/2010/1) where their level fits, and ``linux_x86_64``. CPython <= 3.7
    ABIs end in ``m``. (This replaced a hand-written tag matcher: tags, ABIs and manylinux levels as packaging reads them.)"""
    from packaging import tags

    major, minor = target.python.major, target.python.minor
    top = target.glibc or _ANY_GLIBC
    platforms = [f"manylinux_{top[0]}_{m}_x86_64" for m in range(top[1], 4, -1)]
    platforms += [name for name, level in _LEGACY_MANYLINUX.items() if level <= top]
    platforms.append("linux_x86_64")
    abi = f"cp{major}{minor}" + ("m" if (major, minor) <= (3, 7) else "")
    supported = set(tags.cpython_tags((major, minor), abis=[abi], platforms=platforms))
    supported.update(tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms))
    return frozenset(supported)


def _specificity(filename: str) -> int:
    return 0 if "-none-any" in filename else 1


def pick_link(links: Sequence[Link], version: Version, local_label: str, target: WheelTarget, project: str = "") -> Optional[Link]:
    """The wheel of ``project`` in exactly ``version`` (+ the host's local label) that fits the target, most specific first."""
    label = local_label.lstrip("+")
    fitting = []
    for link in links:
        try:
            file_project, file_version, _, _ = parse_wheel_filename(link.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if project and canonical_name(file_project) != canonical_name(project):
            continue  # a project page listing another project's file is not taken
        if Version(file_version.public) != version or (file_version.local or "") != label:
            continue
        if wheel_fits(link.filename, target):
            fitting.append(link)
    return max(fitting, key=lambda link: _specificity(link.filename), default=None)


@dataclass(frozen=True)
class PlannedPackage:
    component: Component
    distribution: str
    version: Version
    local_label: str
    location: IndexLocation

    @property
    def pin(self) -> str:
        return f"{self.distribution}=={self.version}{self.local_label}"


@dataclass(frozen=True)
class InstallPlan:
    resolution: Resolution
    packages: tuple[PlannedPackage, ...]
    dependency_index: IndexLocation  # where dependencies of the planned wheels come from (PyPI or its mirror)
    passthrough: tuple[str, ...] = ()  # requirements compat does not model (from -r files): pip plans them as written, from the dependency index
    withheld: tuple[tuple[str, str], ...] = ()  # (line, line as shown) of pass-through lines that expanded a ${VAR}: never exported

    @property
    def exported_passthrough(self) -> tuple[str, ...]:
        """The pass-through lines an export may carry: not those that expanded a ${VAR} (its value may be a token;
        ``left_out_for_variables`` names them)."""
        withheld = dict(self.withheld)
        return tuple(line for line in self.passthrough if line not in withheld)

    @property
    def left_out_for_variables(self) -> tuple[str, ...]:
        """The pass-through lines an export leaves out, as shown (each ${VAR} by its name)."""
        return tuple(dict.fromkeys(shown for line, shown in self.withheld if line in self.passthrough))

    def package(self, component: Component) -> PlannedPackage:
        return next(p for p in self.packages if p.component is component)

    @property
    def carries_credentials(self) -> bool:
        """An index URL or a pass-through line of the plan holds a user, password or token (exports leave it out, say so)."""
        from ..redact import has_credentials

        texts = [self.dependency_index.url, *(p.location.url for p in self.packages), *self.passthrough]
        return any(has_credentials(text) for text in texts)


def distribution_of(component: Component, release: Release) -> str:
    """The distribution to install (IPEX and the bindings were published under other names in some releases)."""
    return release.distribution


def make_plan(resolution: Resolution, locations: Mapping[str, IndexLocation]) -> InstallPlan:
    packages = []
    for component in COMPONENT_ORDER:
        pick = resolution.picks.get(component)
        if pick is None:
            continue
        packages.append(
            PlannedPackage(
                component=component,
                distribution=distribution_of(component, pick.release),
                version=pick.version,
                local_label=pick.local_label,
                location=locations[pick.host.id],
            )
        )
    return InstallPlan(resolution, tuple(packages), locations["pypi"])
