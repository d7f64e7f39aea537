"""PEP 751 `pylock.toml`: each `[[packages]]` entry as an exact pin with its index, wheel URL, hashes and marker.

Pure: takes the text, returns requirements. Only what compat needs is read; a lock it cannot understand is an
InputError naming the file and the entry.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Optional

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import shown
from ..names import canonical_name
from .model import InputError, InputRequirement, Origin, checked_name
from .wheels import wheel_name_version

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
    if not isinstance(packages, list) or not all(isinstance(entry, dict) for entry in packages):
        raise InputError(f"{path}: 'packages' is not an array of tables.", "Write it again with a PEP 751 tool.")
    return [_package(path, index, entry) for index, entry in enumerate(packages, start=1)]


def _package(path, index: int, entry: Any) -> InputRequirement:
    origin = Origin(str(path), 0)
    where = f"{path}: packages[{index}]"
    if not isinstance(entry, dict):
        raise InputError(f"{where} is not a table.", "Every [[packages]] entry is a table with name and version.")
    if "name" not in entry:
        raise InputError(f"{where} has no name.", "Every [[packages]] entry needs name (and version).")
    name = checked_name(_text(entry, "name", where), f"{where}.name")
    where = f"{where} ({name})"
    specifier, label = _pin(entry, where)
    marker = _marker(entry, where)
    url, hashes = _wheels(entry, where, name)
    package_index = ""
    if entry.get("index") is not None:
        package_index = _text(entry, "index", where)
        if any(not c.isprintable() for c in package_index):
            raise InputError(f"{where}.index holds a control character.", "Correct the lock entry.")
    return InputRequirement(name, specifier, origin, marker, url=url, hashes=tuple(dict.fromkeys(hashes)), index=package_index, local_label=label)


def _pin(entry: dict, where: str) -> tuple[SpecifierSet, str]:
    """The entry's version as ``==VERSION`` and its local label ("+cpu"); no version: any, no label."""
    if entry.get("version") is None:
        return SpecifierSet(), ""
    version_text = _text(entry, "version", where)
    try:
        version = Version(version_text)
    except (InvalidVersion, ValueError):
        raise InputError(f"{where}.version: {shown(version_text)!r} is not a PEP 440 version.", "Correct the lock entry.") from None
    return SpecifierSet(f"=={version}"), f"+{version.local}" if version.local else ""


def _marker(entry: dict, where: str) -> Optional[Marker]:
    if entry.get("marker") is None:
        return None
    try:
        return Marker(_text(entry, "marker", where))
    except InvalidMarker as exc:
        raise InputError(f"{where}.marker cannot be read ({shown(str(exc), 100)}).", "Correct the lock entry.") from None


def _wheels(entry: dict, where: str, name: str) -> tuple[str, list[str]]:
    """(the first wheel's URL, path or name; every wheel's hashes as ALGORITHM:HEX)."""
    wheels = entry.get("wheels", [])
    if not isinstance(wheels, list):
        raise InputError(f"{where}.wheels is not an array of tables.", "Write it again with a PEP 751 tool.")
    url = ""
    hashes: list[str] = []
    for number, wheel in enumerate(wheels, start=1):
        at = f"{where}.wheels[{number}]"
        if not isinstance(wheel, dict):
            raise InputError(f"{at} is not a table.", "Write it again with a PEP 751 tool.")
        url = url or _wheel_url(wheel, at, name)
        hashes += _wheel_hashes(wheel, at)
    return url, hashes


def _wheel_url(wheel: dict, at: str, name: str) -> str:
    """The wheel's first non-empty url, path or name (each checked: printable, a wheel of ``name``)."""
    url = ""
    for key in ("url", "path", "name"):
        if wheel.get(key) is not None:
            value = _text(wheel, key, at)
            if any(not c.isprintable() for c in value):
                raise InputError(f"{at}.{key} holds a control character.", "Correct the lock entry.")
            url = url or value
            named = wheel_name_version(value, f"{at}.{key}")
            if named is not None and canonical_name(named[0]) != canonical_name(name):
                raise InputError(f"{at}.{key} is a wheel of another project ({named[0]}).", "Write it again with a PEP 751 tool.")
    return url


def _wheel_hashes(wheel: dict, at: str) -> list[str]:
    digests = wheel.get("hashes", {})
    if not isinstance(digests, dict):
        raise InputError(f"{at}.hashes is not a table of ALGORITHM = HEX.", "Write it again with a PEP 751 tool.")
    hashes = []
    for algorithm, digest in digests.items():
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]+", digest) or not re.fullmatch(r"[A-Za-z0-9_-]+", algorithm):
            raise InputError(f"{at}.hashes.{shown(str(algorithm))} is not a hex digest.", "Write it again with a PEP 751 tool.")
        hashes.append(f"{algorithm.lower()}:{digest.lower()}")
    return hashes


def _text(table: dict, key: str, where: str) -> str:
    value = table[key]
    if not isinstance(value, str):
        raise InputError(f"{where}.{key} is a {type(value).__name__}, not a string.", "Write it again with a PEP 751 tool.")
    return value
