"""A curated fact against a harvested one (pure): the disagreements `compat matrix update` prints and every command's
overlay merge (matrix/overlay.py) keeps, and whether the harvested facts add to a curated entry. Light on purpose: the
merge runs at every command's start."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from packaging.version import Version

from ..record import Record
from .model import Component, LibraryLine, WheelSet


class Disagreement(Record):
    """A curated fact and what a registry says instead: the curated one is used, this is printed."""

    component: Component
    version: Version
    host: str  # "" for a library line
    field: str
    curated: str
    harvested: str
    source: str

    def sentence(self) -> str:
        where = f" on {self.host}" if self.host else ""
        return (f"{self.component.distribution} {self.version}{where}: {self.field} is {self.harvested} per {self.source}, "
                f"the curated matrix says {self.curated} (the curated fact is used)")


class Comparison(Record):
    disagreements: tuple[Disagreement, ...]
    adds: bool  # the harvested sets hold a fact the curated ones lack (another host, a glibc floor)


def compare_wheels(component: Component, version: Version, curated: Sequence[WheelSet], harvested: Sequence[WheelSet]) -> Comparison:
    """The curated wheel sets of a release against harvested ones: every disagreement, and whether the harvested
    ones add a fact (a host the curated entry does not list, a glibc floor above 2.17 it does not record)."""
    differ: list[Disagreement] = []
    adds = False
    by_host = {w.host: w for w in curated}
    for made in harvested:
        wheels = by_host.get(made.host)
        source = made.provenance.sources[0] if made.provenance.sources else "the overlay"
        if wheels is None:
            adds = True
            continue
        if made.python != wheels.python:
            differ.append(Disagreement(component, version, made.host, "the CPython versions with a Linux x86_64 wheel", _pythons(wheels.python), _pythons(made.python), source))
        if made.yanked != wheels.yanked:
            differ.append(Disagreement(component, version, made.host, "yanked", str(wheels.yanked).lower(), str(made.yanked).lower(), source))
        elif wheels.yanked and made.yanked_reason.strip() != wheels.yanked_reason.strip():
            differ.append(Disagreement(component, version, made.host, "the yank reason", repr(wheels.yanked_reason), repr(made.yanked_reason), source))
        if made.local_label != wheels.local_label:
            differ.append(Disagreement(component, version, made.host, "the local label", repr(wheels.local_label), repr(made.local_label), source))
        if wheels.glibc_min is not None and made.glibc_min is not None and made.glibc_min != wheels.glibc_min:
            differ.append(Disagreement(component, version, made.host, "glibc_min", str(wheels.glibc_min), str(made.glibc_min), source))
        elif wheels.glibc_min is None and made.glibc_min is not None and made.glibc_min > Version("2.17"):
            adds = True
    return Comparison(tuple(differ), adds)


def _pythons(versions: Iterable[Version]) -> str:
    return ", ".join(f"3.{v.minor}" for v in sorted(versions)) or "none"


def compare_line(component: Component, curated: LibraryLine, harvested: LibraryLine) -> Comparison:
    """A curated library line against a harvested one: yanks of the releases both list, Requires-Python; adds when
    the harvested line lists releases the curated one does not."""
    differ: list[Disagreement] = []
    source = harvested.provenance.sources[0] if harvested.provenance.sources else "the overlay"
    for v in harvested.versions:
        if v in curated.versions and (v in harvested.yanked) != (v in curated.yanked):
            differ.append(Disagreement(component, v, "", "yanked", str(v in curated.yanked).lower(), str(v in harvested.yanked).lower(), source))
    if harvested.requires_python is not None and harvested.latest in curated.versions and harvested.requires_python != curated.requires_python:
        differ.append(Disagreement(component, harvested.latest, "", "Requires-Python", repr(str(curated.requires_python or "")), repr(str(harvested.requires_python)), source))
    return Comparison(tuple(differ), bool(set(harvested.versions) - set(curated.versions)))
