"""A resolved set as PEP 751 lock data (``compat export pylock``): one ``[[packages]]`` entry per planned package
(normalized name, exact version with the host's local label, the index it comes from), wheels (url + hashes) only
where compat knows them without the network -- the ``-r`` files' own entries for the same version (a pylock.toml, or
``name @ URL --hash``) -- and the files' exact pins of packages compat does not resolve, from the dependency index.

What it is not: a complete lock. The set's dependencies are not listed and entries without wheels are pins with an
index, which ``compat install -r`` / ``compat check -r`` read back (inputs/pylock.py) but a strict PEP 751 installer
refuses (each package needs a wheel with hashes); ``compat download -d DIR`` writes the hashed lock of every wheel.
render/pylock.py writes the TOML. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ..names import canonical_name
from ..redact import strip_credentials as exported

LOCK_VERSION = "1.0"
CREATED_BY = "compatmatrix"


def known_wheels(requirements: Iterable[Any]) -> dict[tuple[str, Version], dict[str, Any]]:
    """(canonical name, exact version) -> {"url", "hashes"} for the input requirements that name a wheel URL with hashes."""
    known: dict[tuple[str, Version], dict[str, Any]] = {}
    for item in requirements:
        version = item.pinned
        if version is None or not item.url or not item.hashes or "://" not in item.url or not item.url.split("?")[0].endswith(".whl"):
            continue
        digests: dict[str, list[str]] = {}
        for text in item.hashes:
            algorithm, _, digest = text.partition(":")
            if digest:
                digests.setdefault(algorithm, []).append(digest)
        # inputs/pylock.py keeps one URL and the hashes of every wheel of an entry: several digests of one algorithm
        # cannot be told apart, so such an entry gives no wheel rather than a wrong hash
        if digests and all(len(found) == 1 for found in digests.values()):
            known[(canonical_name(item.name), version)] = {"url": exported(item.url), "hashes": {a: found[0] for a, found in digests.items()}}
    return known


def _exact(line: str) -> Optional[tuple[str, Version]]:
    """name and version of a pass-through line that is an exact pin (``numpy==2.1.0``), else None."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return None
    items = list(requirement.specifier)
    if requirement.url or len(items) != 1 or items[0].operator != "==" or items[0].version.endswith(".*"):
        return None
    try:
        return requirement.name, Version(items[0].version)
    except InvalidVersion:
        return None


def lock_data(plan, known: Mapping[tuple[str, Version], Mapping[str, Any]] = {}) -> tuple[dict[str, Any], list[str]]:  # noqa: B006 - read only
    """The lock as TOML-ready data, and what was left out (pass-through lines that are not exact pins)."""
    python = plan.resolution.request.python.label
    packages = []
    for package in plan.packages:
        version = Version(f"{package.version}{package.local_label}")
        entry: dict[str, Any] = {"name": canonical_name(package.distribution), "version": str(version), "index": exported(package.location.url)}
        wheel = known.get((canonical_name(package.distribution), version))
        if wheel is not None:
            entry["wheels"] = [dict(wheel)]
        packages.append(entry)
    left_out = list(plan.left_out_for_variables)
    for line in plan.exported_passthrough:
        exact = _exact(line)
        if exact is None:
            left_out.append(exported(line))
            continue
        name, version = exact
        entry = {"name": canonical_name(name), "version": str(version), "index": exported(plan.dependency_index.url)}
        wheel = known.get((canonical_name(name), version))
        if wheel is not None:
            entry["wheels"] = [dict(wheel)]
        packages.append(entry)
    data = {"lock-version": LOCK_VERSION, "requires-python": f"=={python}.*", "created-by": CREATED_BY, "packages": packages}
    return data, left_out
