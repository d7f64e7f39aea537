"""The runtime wheels compat passes on to pip (oneccl-cpu, impi-rt: ``[[runtime]]``): which release pip ends up with for
a requirement, as pip's resolver would (newest first, a release whose declared dependencies cannot be satisfied passed
over), and the releases it passes over quietly, each with why (``[[unavailable]]``: a project no configured index has).

A release whose dependencies no index can satisfy is never planned: a pin of it is refused (pip would fail), an open
requirement is said with the release pip falls back to. Pure: the matrix in, records out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from packaging.specifiers import SpecifierSet

if TYPE_CHECKING:  # imported where a requirement is read: compat check -r imports this module for runtime_names
    from packaging.requirements import Requirement

from ..names import canonical_name
from ..record import Record
from .model import Matrix, RuntimeRelease

MAX_DEPTH = 8  # runtime wheels depend on each other one level deep (oneccl-cpu -> impi-rt)


class Passed(Record):
    """A release pip passes over, and why (a sentence)."""

    release: RuntimeRelease
    why: str


class RuntimeChoice(Record):
    """What pip installs for one requirement on a runtime wheel."""

    requirement: str  # as asked ("oneccl-cpu", "impi-rt==2021.19.0")
    picked: tuple[RuntimeRelease, ...]  # the release and the runtime releases it pulls in; empty: nothing installs
    passed: tuple[Passed, ...]  # newer releases pip passes over quietly (or, for a pin, the one that fails)

    @property
    def refused(self) -> bool:
        return not self.picked


def runtime_names(matrix: Matrix) -> frozenset[str]:
    return frozenset(r.distribution for r in matrix.runtime)


def _unavailable_why(matrix: Matrix, requirement: Requirement) -> Optional[str]:
    name = canonical_name(requirement.name)
    gone = next((u for u in matrix.unavailable if u.project == name), None)
    if gone is None:
        return None
    return (f"declares {requirement}, which no configured index has ({', '.join(gone.provenance.sources)}: "
            f"no such project on {', '.join(gone.hosts)}, checked {gone.checked})")


def _choose(matrix: Matrix, name: str, spec: SpecifierSet, depth: int) -> tuple[tuple[RuntimeRelease, ...], tuple[Passed, ...]]:
    """(picked closure, passed-over releases) for ``name`` within ``spec``: pip's newest-first backtracking."""
    from packaging.requirements import Requirement

    passed: list[Passed] = []
    for release in (r for r in matrix.runtime if r.distribution == name and spec.contains(r.version, prereleases=True)):
        closure: list[RuntimeRelease] = [release]
        below: list[Passed] = []
        why = None
        for text in release.requires:
            dependency = Requirement(text)
            why = _unavailable_why(matrix, dependency)
            if why is not None:
                break
            dep_name = canonical_name(dependency.name)
            if dep_name in runtime_names(matrix) and depth < MAX_DEPTH:
                picked, skipped = _choose(matrix, dep_name, dependency.specifier, depth + 1)
                if not picked:
                    why = f"declares {dependency}, and no release of {dep_name} in it installs ({skipped[0].why if skipped else 'none is listed'})"
                    break
                closure += picked
                below += skipped
        if why is None:
            return tuple(closure), tuple(passed + below)
        passed.append(Passed(release, why))
    return (), tuple(passed)


def pip_choice(matrix: Matrix, requirement: Requirement) -> Optional[RuntimeChoice]:
    """What pip installs for ``requirement`` (None: not a runtime wheel of the matrix)."""
    name = canonical_name(requirement.name)
    if name not in runtime_names(matrix):
        return None
    picked, passed = _choose(matrix, name, requirement.specifier, 0)
    return RuntimeChoice(str(requirement), picked, passed)


def newest_installable(matrix: Matrix, name: str) -> Optional[RuntimeRelease]:
    picked, _ = _choose(matrix, canonical_name(name), SpecifierSet(), 0)
    return picked[0] if picked else None


def install_words(matrix: Matrix, name: str) -> str:
    """``impi-rt==2021.18.1`` (the newest release that installs, pinned) or the bare name when the matrix lists none."""
    release = newest_installable(matrix, name)
    return f"{name}=={release.version}" if release is not None else name


def _releases(items) -> str:
    return " and ".join(f"{r.distribution} {r.version}" for r in items)


def choice_sentence(matrix: Matrix, choice: RuntimeChoice) -> Optional[str]:
    """What to tell about a choice: a refusal (pip fails), or the quiet fall-back; None when pip takes the newest."""
    if choice.refused:
        from packaging.requirements import Requirement

        name = canonical_name(Requirement(choice.requirement).name)
        best = newest_installable(matrix, name)
        first = choice.passed[0] if choice.passed else None
        return (f"{choice.requirement} cannot be installed: " + (f"{first.release.distribution} {first.release.version} {first.why}" if first else "no release fits")
                + "; pip fails on it" + (f". The newest release that installs: {name}=={best.version}" if best is not None else ""))
    if not choice.passed:
        return None
    groups: dict[str, list[RuntimeRelease]] = {}
    for item in choice.passed:
        groups.setdefault(item.why, []).append(item.release)
    if len(groups) == 1:
        (why, group), = groups.items()
        said = ("each " if len(group) > 1 else "it ") + why
    else:
        said = "; ".join(f"{_releases(group)} {why}" for why, group in groups.items())
    return f"{choice.requirement}: pip installs {_releases(choice.picked)}, quietly passing over the newer {_releases(p.release for p in choice.passed)}: {said}"
