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


def _entry_problem(path: str, taken: TakenNames) -> Optional[str]:
    problem = path_problem(path)
    if problem:
        return problem
    parts = path.split("/")
    if len(parts) >= 3 and parts[0].endswith(".data") and parts[2]:
        if parts[1] not in SCHEME_KEYS:
            return f"is in .data/{parts[1]}, a folder the install scheme does not have ({', '.join(SCHEME_KEYS)})"
        if parts[1] == "scripts":
            return taken.why(parts[2])
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


def wheel_refusals(wheel: Path, taken: TakenNames, listed: Optional[dict[Path, list[str]]] = None) -> list[str]:
    """What ``wheel`` would write that no wheel may, each as "'ENTRY' WHY"; empty when it stays in the scheme. With
    ``listed``, the archive's names are kept there under ``wheel`` (datafiles.install_targets reads them: a wheel's
    central directory is read once; torch's holds some ten thousand names)."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile, ValueError):
        return []  # the installer says what is wrong with it
    found: list[str] = []
    with archive:
        names = archive.namelist()
        if listed is not None:
            listed[wheel] = names
        for name in names:
            problem = _entry_problem(name, taken)
            if problem:
                found.append(f"{name!r} {problem}")
        checked = set(names)  # a RECORD row naming an archive entry was judged with it (path_problem is part of _entry_problem)
        infos = [n for n in names if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")]
        for name in infos:
            leaf = name.split("/")[1]
            try:
                if leaf == "RECORD":
                    for row in csv.reader(io.StringIO(_read(archive, name))):
                        problem = path_problem(row[0]) if row and row[0] not in checked else None
                        if row and problem:
                            found.append(f"RECORD's {row[0]!r} {problem}")
                elif leaf == "entry_points.txt":
                    for script in _script_names(_read(archive, name)):
                        problem = taken.why(script)
                        if problem:
                            found.append(f"the script {script!r} it makes (entry_points.txt) {problem}")
            except (OSError, zipfile.BadZipFile, ValueError, csv.Error, RuntimeError):
                continue  # an unreadable member: the installer refuses the wheel
    return found
