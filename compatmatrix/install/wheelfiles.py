"""What a wheel may write, checked before anything is installed: every path in its archive and its RECORD stays in
the install scheme (relative, no '..', a .data folder the scheme has: purelib, platlib, headers, scripts, data), and
no script it ships (.data/scripts/NAME) or generates (console_scripts, gui_scripts) is named like the environment's
interpreter (python, python3, python3.X, ...) or like a file already in the scripts folder that no distribution
being replaced owns (the venv's activate scripts, another package's command).

pip and uv check some of this (uv refuses a script named python3; pip driving a uv-made venv replaced the
interpreter with a wheel's script), so compat checks it once, itself, for both.

Side effects: reads the wheels' file lists, their RECORD and entry_points.txt (size-capped).
"""

from __future__ import annotations

import configparser
import csv
import io
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SCHEME_KEYS = ("purelib", "platlib", "headers", "scripts", "data")
#: Names an interpreter goes by in a scripts folder: python, python3, python3.11, python3.13t, pythonw, pypy3, ...
INTERPRETER = re.compile(r"(python|pypy)(\d+(\.\d+)?)?t?w?")
_TEXT_CAP = 16 << 20  # RECORD / entry_points.txt bytes read at most (a real RECORD of torch is ~2 MiB)
_SCRIPT_SECTIONS = ("console_scripts", "gui_scripts")


@dataclass(frozen=True)
class TakenNames:
    """The script names a wheel may not use in this environment."""

    occupied: frozenset[str]  # in the scripts folder, owned by no distribution being replaced
    interpreters: frozenset[str] = frozenset()  # the interpreter's own names here, whatever they look like

    def why(self, name: str) -> Optional[str]:
        if INTERPRETER.fullmatch(name) or name in self.interpreters:
            return "is named like the environment's interpreter, which no wheel may replace"
        if name in self.occupied:
            return "is already in the scripts folder and belongs to no package being replaced"
        return None


def script_names_taken(existing: Iterable[str], owned: Iterable[str] = (), interpreters: Iterable[str] = ()) -> TakenNames:
    """``existing``: the names in the scripts folder; ``owned``: those the RECORD of a distribution being replaced lists."""
    return TakenNames(frozenset(existing) - frozenset(owned), frozenset(interpreters))


_DRIVE = re.compile(r"[A-Za-z]:")
_PARENT = re.compile(r"(^|[/\\])\.\.([/\\]|$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def path_problem(path: str) -> Optional[str]:
    """Why ``path`` (an archive entry or a RECORD row, relative to the wheel's root) would leave the install scheme."""
    if not path:
        return "is an empty path"
    if path.startswith(("/", "\\")) or _DRIVE.match(path):
        return "is an absolute path"
    if ".." in path and _PARENT.search(path):
        return "climbs out with '..'"
    if _CONTROL.search(path):
        return "holds a control character"
    return None


def _read(archive: zipfile.ZipFile, name: str) -> str:
    with archive.open(name) as handle:
        return handle.read(_TEXT_CAP).decode("utf-8", errors="replace")


def _script_names(text: str) -> list[str]:
    parser = configparser.RawConfigParser(delimiters=("=",), strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
    try:
        parser.read_string(text)
    except configparser.Error:
        return []  # the installer says what is wrong with it
    return [name.strip() for section in _SCRIPT_SECTIONS if parser.has_section(section) for name in parser.options(section)]


@dataclass(frozen=True)
class Listing:
    """What the checks read of one wheel's archive, in the archive's order, so that it is read once (and, for a wheel
    of the store, once for all installs: store.py keeps it beside the wheel). ``verdicts``: ("fixed", sentence) for
    what no wheel may write in any environment, ("script", words, NAME) for a script judged against the environment
    (TakenNames); ``data``: the archive's names under its .data folder (datafiles.wheel_targets)."""

    verdicts: tuple[tuple[str, ...], ...]
    data: tuple[str, ...]

    def refusals(self, taken: TakenNames) -> list[str]:
        found = []
        for verdict in self.verdicts:
            if verdict[0] == "fixed":
                found.append(verdict[1])
            else:
                why = taken.why(verdict[2])
                if why:
                    found.append(verdict[1] + why)
        return found


@dataclass(frozen=True)
class Members:
    """What is read of one wheel's archive, raw (nothing judged): its member names in the archive's order, the first
    field of each row of its .dist-info/RECORD files, and the text of its .dist-info/entry_points.txt files. The
    wheel store keeps this beside a stored wheel; the rules (judge) run on it at every install."""

    names: tuple[str, ...]
    record_paths: tuple[str, ...]
    entry_points: tuple[str, ...]


def read_members(wheel: Path) -> Optional[Members]:
    """The wheel's Members; None when it is no readable archive (the installer says what is wrong with it)."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    record_paths: list[str] = []
    entry_points: list[str] = []
    with archive:
        names = archive.namelist()
        for name in names:
            if not (name.count("/") == 1 and name.split("/")[0].endswith(".dist-info")):
                continue
            leaf = name.split("/")[1]
            try:
                if leaf == "RECORD":
                    record_paths += [row[0] for row in csv.reader(io.StringIO(_read(archive, name))) if row]
                elif leaf == "entry_points.txt":
                    entry_points.append(_read(archive, name))
            except (OSError, zipfile.BadZipFile, ValueError, csv.Error, RuntimeError):
                continue  # an unreadable member: the installer refuses the wheel
    return Members(tuple(names), tuple(record_paths), tuple(entry_points))


def judge(members: Members) -> Listing:
    """The Listing of a wheel: the path rules run on its Members."""
    verdicts: list[tuple[str, ...]] = []
    for name in members.names:
        problem = path_problem(name)
        parts = name.split("/")
        if problem:
            verdicts.append(("fixed", f"{name!r} {problem}"))
        elif len(parts) >= 3 and parts[0].endswith(".data") and parts[2]:
            if parts[1] not in SCHEME_KEYS:
                verdicts.append(("fixed", f"{name!r} is in .data/{parts[1]}, a folder the install scheme does not have ({', '.join(SCHEME_KEYS)})"))
            elif parts[1] == "scripts":
                verdicts.append(("script", f"{name!r} ", parts[2]))
    checked = set(members.names)  # a RECORD row naming an archive entry was judged with it
    for path in members.record_paths:
        problem = path_problem(path) if path not in checked else None
        if problem:
            verdicts.append(("fixed", f"RECORD's {path!r} {problem}"))
    for text in members.entry_points:
        for script in _script_names(text):
            verdicts.append(("script", f"the script {script!r} it makes (entry_points.txt) ", script))
    data = tuple(n for n in members.names if n.split("/", 1)[0].endswith(".data"))
    return Listing(tuple(verdicts), data)


def read_listing(wheel: Path) -> Optional[Listing]:
    """The wheel's Listing; None when it is no readable archive (the installer says what is wrong with it)."""
    members = read_members(wheel)
    return judge(members) if members is not None else None


def wheel_refusals(wheel: Path, taken: TakenNames) -> list[str]:
    """What ``wheel`` would write that no wheel may, each as "'ENTRY' WHY"; empty when it stays in the scheme."""
    listing = read_listing(wheel)
    return listing.refusals(taken) if listing is not None else []
