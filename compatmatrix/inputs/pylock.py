"""PEP 751 `pylock.toml`: each `[[packages]]` entry as an exact pin with its index, wheel URL, hashes and marker.

Pure: takes the text, returns requirements. Only what compat needs is read; a lock it cannot understand is an
InputError naming the file and the entry.
"""

from __future__ import annotations

import sys
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .model import InputError, InputRequirement, Origin

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib


def read_pylock(path, text: str) -> list[InputRequirement]:
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise InputError(f"{path} is not valid TOML ({exc}).", "Write it again with a PEP 751 tool (pip lock, uv export --format pylock.toml).") from None
    if not isinstance(data, dict) or "lock-version" not in data:
        raise InputError(f"{path} has no 'lock-version', so it is not a PEP 751 lock file.", "Pass a pylock.toml, or name a requirements file instead.")
    packages = data.get("packages", [])
    if not isinstance(packages, list):
        raise InputError(f"{path}: 'packages' is not an array of tables.", "Write it again with a PEP 751 tool.")
    return [_package(path, index, entry) for index, entry in enumerate(packages, start=1)]


def _package(path, index: int, entry: Any) -> InputRequirement:
    origin = Origin(str(path), 0)
    where = f"{path}: packages[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise InputError(f"{where} has no name.", "Every [[packages]] entry needs name (and version).")
    name = entry["name"]
    version_text = entry.get("version")
    specifier = SpecifierSet()
    label = ""
    if version_text is not None:
        try:
            version = Version(str(version_text))
        except (InvalidVersion, ValueError):
            raise InputError(f"{where} ({name}): '{version_text}' is not a version.", "Correct the lock entry.") from None
        specifier = SpecifierSet(f"=={version}")
        label = f"+{version.local}" if version.local else ""
    marker = None
    if entry.get("marker"):
        try:
            marker = Marker(str(entry["marker"]))
        except InvalidMarker as exc:
            raise InputError(f"{where} ({name}): the marker cannot be read ({exc}).", "Correct the lock entry.") from None
    wheels = entry.get("wheels") or []
    url = ""
    hashes: list[str] = []
    if isinstance(wheels, list):
        for wheel in wheels:
            if isinstance(wheel, dict):
                url = url or str(wheel.get("url") or wheel.get("path") or wheel.get("name") or "")
                for algorithm, digest in (wheel.get("hashes") or {}).items():
                    hashes.append(f"{str(algorithm).lower()}:{str(digest).lower()}")
    return InputRequirement(name, specifier, origin, marker, url=url, hashes=tuple(dict.fromkeys(hashes)), index=str(entry.get("index") or ""),
                            local_label=label)
