"""Slurm's node list syntax (``node[01-16]``, ``a[1-3,7],b5``, ``rack[1-2]-n[01-04]``) expanded into host names, as
``scontrol show hostnames`` expands it: entries split at the commas outside brackets; each bracket group a list of
numbers and ranges, its zero padding kept (the width of the range's first bound: ``[08-10]`` gives 08, 09, 10); several
groups in one entry multiply; repeated names kept once, in order.

Bounds (a node list is text from outside): at most NODELIST_MAX_CHARS characters and NODELIST_MAX_HOSTS names, counted
before anything is expanded, so ``n[0-99999999]`` is refused at once; a number has at most 9 digits; every name is a
host name (hosts.parse_host's rule). Anything else is a :class:`NodeListError`: one sentence, and the fix. Pure.
"""

from __future__ import annotations

import re

NODELIST_MAX_CHARS = 65_536
NODELIST_MAX_HOSTS = 65_536  # hosts.HOSTFILE_MAX_LINES: the same bound for a job's hosts either way
_DIGITS = 9
_TEXT = re.compile(r"[A-Za-z0-9_.,\[\]-]+")
FORMS = "HOST, PREFIX[01-16], PREFIX[1-3,7], several joined by commas (Slurm's node list)"


class NodeListError(ValueError):
    """A node list that cannot be used: one sentence (the message), and the fix."""

    def __init__(self, message: str, fix: str = f"Write a node list as Slurm does: {FORMS}.") -> None:
        super().__init__(message)
        self.fix = fix


def looks_like_nodelist(text: str) -> bool:
    """Whether ``text`` is written in node list syntax with a bracket or a comma (a plain word may be a file name)."""
    return bool(_TEXT.fullmatch(text)) and ("[" in text or "," in text)


def _entries(text: str) -> list[str]:
    """The entries of a node list: split at commas outside brackets; brackets must pair and not nest."""
    entries, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeListError(f"the node list has a bracket inside a bracket at character {index + 1}.")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"the node list closes a bracket it did not open at character {index + 1}.")
        elif char == "," and depth == 0:
            entries.append(text[start:index])
            start = index + 1
    if depth:
        raise NodeListError("the node list opens a bracket it does not close.")
    entries.append(text[start:])
    return entries


def _numbers(group: str) -> list[tuple[int, int, int]]:
    """A bracket group's parts as (first, last, width): ``01-16`` -> (1, 16, 2), ``7`` -> (7, 7, 1)."""
    parts = []
    for part in group.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or len(low) > _DIGITS or len(high) > _DIGITS:
            raise NodeListError(f"[{group}] in the node list holds {part!r}, which is not a number or a range of numbers (at most {_DIGITS} digits).")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise NodeListError(f"the range {part} in the node list runs backwards.")
        parts.append((first, last, len(low)))
    return parts


def _pieces(entry: str) -> list[object]:
    """An entry as literal text and bracket groups, in order."""
    if "[]" in entry:
        raise NodeListError("the node list has an empty bracket [].")
    pieces: list[object] = []
    for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", entry):
        if literal:
            pieces.append(literal)
        if group:
            pieces.append(_numbers(group))
    return pieces


def nodelist_size(text: str) -> int:
    """How many names ``text`` expands to (before duplicates are dropped), computed without expanding it."""
    total = 0
    for entry in _entries(text):
        count = 1
        for piece in _pieces(entry):
            if isinstance(piece, list):
                count *= sum(last - first + 1 for first, last, _ in piece)
        total += count
        if total > NODELIST_MAX_HOSTS:
            break
    return total


def expand_nodelist(text: str) -> list[str]:
    """The host names of a Slurm node list, in order, each once. Raises NodeListError (see the module's bounds)."""
    from .hosts import parse_host

    if len(text) > NODELIST_MAX_CHARS:
        raise NodeListError(f"the node list is {len(text):,} characters long, more than {NODELIST_MAX_CHARS:,}.", "Pass the node list of one job.")
    if not _TEXT.fullmatch(text):
        odd = next((c for c in text if not _TEXT.fullmatch(c)), "")
        raise NodeListError(f"the node list holds {odd!r}, which no node list holds." if odd else "the node list is empty.")
    size = nodelist_size(text)
    if size > NODELIST_MAX_HOSTS:
        raise NodeListError(f"the node list expands to more than {NODELIST_MAX_HOSTS:,} hosts, more than one job has.", "Pass the node list of one job.")
    names: dict[str, None] = {}
    for entry in _entries(text):
        if not entry:
            raise NodeListError("the node list has an empty entry (two commas, or one at an end).")
        partial = [""]
        for piece in _pieces(entry):
            if isinstance(piece, str):
                partial = [name + piece for name in partial]
            else:
                partial = [name + str(number).zfill(width) for name in partial for first, last, width in piece for number in range(first, last + 1)]
        for name in partial:
            host, problem = parse_host(name)
            if host is None or "@" in name or host[1] is not None:
                raise NodeListError(f"{name!r} of the node list is not a host name ({problem or 'it names a user or slots'}).")
            names.setdefault(name, None)
    return list(names)
