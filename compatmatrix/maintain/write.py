"""`compat matrix update --write FILE`: the harvested entries written into a matrix TOML file in its own format.

The file is edited, never rewritten: its text, comments and order stay as they are. A release the file lacks becomes a
new ``[[<table>]]`` block (binaries: before the table's first entry, newest first as the file lists them; library
lines: after the table's last one); a library line the file has gains its new releases in its ``versions`` (and
``yanked``) line, its ``source`` moving to the newest release. Facts for releases the file already has (another host's
wheels, a floor) are not written: they are listed for a maintainer to edit by hand. The result must validate as a
matrix (matrix/load.py) or nothing is written. Pure: text in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.version import Version

from ..matrix.harvest import LIBRARIES
from ..matrix.model import Component, Matrix
from ..render.pylock import toml_string


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return toml_string(str(value))


def render_entry(table: str, entry: Mapping[str, Any]) -> str:
    """One ``[[table]]`` entry (and its ``[[table.wheels]]``) as the matrix writes them."""
    lines = [f"[[{table}]]"]
    lines += [f"{key} = {_value(value)}" for key, value in entry.items() if key != "wheels"]
    for wheels in entry.get("wheels", ()):
        lines += ["", f"[[{table}.wheels]]"] + [f"{key} = {_value(value)}" for key, value in wheels.items()]
    return "\n".join(lines) + "\n"


_HEADER = re.compile(r"^\[")


def _blocks(lines: Sequence[str], table: str) -> list[tuple[int, int]]:
    """(start, end) line ranges of each ``[[table]]`` entry with its sub-tables (end: the next other header)."""
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == f"[[{table}]]":
            j = i + 1
            while j < len(lines) and not (_HEADER.match(lines[j]) and not lines[j].startswith(f"[[{table}.")):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


class Written:
    def __init__(self, text: str, added: list[str], extended: list[str], not_written: list[str]) -> None:
        self.text = text
        self.added = added
        self.extended = extended
        self.not_written = not_written


def insert_entries(text: str, matrix: Matrix, entries: Mapping[str, Sequence[Mapping[str, Any]]]) -> Written:
    """``text`` (a matrix file, ``matrix`` its parsed model) with the harvested ``entries`` written in (no URL's
    credentials: redact.strip_document)."""
    from ..redact import strip_document

    entries = strip_document(entries)
    lines = text.splitlines()
    written = Written("", [], [], [])
    for table, items in entries.items():
        component = next(c for c in Component if c.table == table)
        if component in LIBRARIES:
            _insert_lines(lines, matrix, component, items, written)
        else:
            _insert_releases(lines, matrix, component, items, written)
    written.text = "\n".join(lines) + "\n"
    return written


def _insert_lines(lines: list[str], matrix: Matrix, component: Component, items: Sequence[Mapping[str, Any]], written: Written) -> None:
    """A library's harvested lines into ``lines``: a new line's entry after the table's last one, a curated line's new
    versions into its entry."""
    table = component.table
    curated = {line.line.release[:2]: line for line in matrix.releases[component]}  # type: ignore[union-attr]
    new_blocks = []
    for entry in items:
        key = tuple(int(p) for p in entry["line"].split(".")[:2])
        line = curated.get(key)
        if line is None:
            new_blocks.append(render_entry(table, entry))
            written.added.append(f"{component.distribution} {entry['line']}.* ({', '.join(entry['versions'])})")
            continue
        new = [v for v in entry["versions"] if v not in {str(x) for x in line.versions}]
        if new and _extend_line(lines, table, line, entry, new):
            written.extended.append(f"{component.distribution} {entry['line']}.*: {', '.join(new)}")
    if new_blocks:
        blocks = _blocks(lines, table)
        at = blocks[-1][1] if blocks else len(lines)
        while at > 0 and not lines[at - 1].strip():
            at -= 1
        insert = [""] + "\n\n".join(b.rstrip("\n") for b in new_blocks).splitlines()
        lines[at:at] = insert


def _extend_line(lines: list[str], table: str, line: Any, entry: Mapping[str, Any], new: Sequence[str]) -> bool:
    """A curated line's entry in ``lines`` with the ``new`` versions (and their yanks, and the harvest's source) written
    in; False if the file has no entry for the line."""
    for start, end in _blocks(lines, table):
        if any(re.fullmatch(rf'line = "{re.escape(entry["line"])}"\s*', lines[k]) for k in range(start, end)):
            versions = [str(v) for v in sorted({*line.versions, *map(Version, new)}, reverse=True)]
            yanked = [str(v) for v in sorted({*line.yanked, *(Version(v) for v in entry["yanked"] if v in new)}, reverse=True)]
            for k in range(start, end):
                if lines[k].startswith("versions = "):
                    lines[k] = f"versions = {_value(versions)}"
                elif lines[k].startswith("yanked = "):
                    lines[k] = f"yanked = {_value(yanked)}"
                elif lines[k].startswith("source = "):
                    lines[k] = f"source = {_value(entry['source'])}"
            return True
    return False


def _insert_releases(lines: list[str], matrix: Matrix, component: Component, items: Sequence[Mapping[str, Any]], written: Written) -> None:
    """A package's harvested releases the file lacks into ``lines``, before the table's first entry (newest first); a
    release it has is left to edit by hand (said)."""
    table = component.table
    known = {str(v) for v in matrix.versions(component)}  # once per table: a check per entry stays linear
    new_blocks = []
    for entry in items:
        if entry["version"] in known:
            written.not_written.append(f"{component.distribution} {entry['version']}: the file has this release; what the registry adds to it or says "
                                       f"otherwise ({', '.join(w['host'] for w in entry.get('wheels', ()))}) is listed above: edit that entry by hand")
            continue
        new_blocks.append(render_entry(table, entry))
        written.added.append(f"{component.distribution} {entry['version']}")
    if new_blocks:
        blocks = _blocks(lines, table)
        at = blocks[0][0] if blocks else len(lines)
        lines[at:at] = "\n\n".join(b.rstrip("\n") for b in new_blocks).splitlines() + [""]
