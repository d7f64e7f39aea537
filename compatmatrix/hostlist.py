"""A job's hosts as text from outside gives them: an mpirun hostfile (``read_hosts``) or a Slurm node list
(``expand_nodelist``), read the one way doctor --hostfile, doctor --live --hostfile, compat launch and the launchers
share (``read_host_list``, ``is_node_list``); one host name or address as a hostfile line's first word (``parse_host``).

Hostfiles: a regular file of at most HOSTFILE_MAX_BYTES and HOSTFILE_MAX_LINES, and every host in it is a host name, an
IPv4 or an IPv6 address (never an option such as ``-oProxyCommand=...``). Anything else is a :class:`HostfileError`:
one sentence, and the fix.

Slurm's node list syntax (``node[01-16]``, ``a[1-3,7],b5``, ``rack[1-2]-n[01-04]``) expanded into host names, as
``scontrol show hostnames`` expands it: entries split at the commas outside brackets; each bracket group a list of
numbers and ranges, its zero padding kept (the width of the range's first bound: ``[08-10]`` gives 08, 09, 10); several
groups in one entry multiply; repeated names kept once, in order.

Bounds (a node list is text from outside): at most NODELIST_MAX_CHARS characters and NODELIST_MAX_HOSTS names, counted
before anything is expanded, so ``n[0-99999999]`` is refused at once; a number has at most 9 digits; every name is a
host name (parse_host's rule). Anything else is a :class:`NodeListError`: one sentence, and the fix. Pure.

Pure except ``read_hosts`` / ``read_host_list`` (read the hostfile).
"""

from __future__ import annotations

import os
import re
from typing import Optional

from .console import visible_line
from .errors import shown

HOSTFILE_MAX_BYTES = 1 << 20  # 1 MiB: some 50,000 hosts of 20 characters
HOSTFILE_MAX_LINES = 65_536


class HostfileError(ValueError):
    """A hostfile that cannot be used: one sentence, and the fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"  # RFC 1123 (and '_', which /etc/hosts names carry)
_HOST_NAME = re.compile(rf"(?:{_LABEL})(?:\.{_LABEL})*\.?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_SLOTS = re.compile(r"[0-9]{1,6}")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}(?:%[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?")
HOSTFILE_FORMS = "HOST, HOST:SLOTS (Intel MPI), HOST slots=N max_slots=M (Open MPI), with USER@ in front if needed"


def parse_host(word: str) -> tuple[Optional[tuple[str, Optional[int]]], str]:
    """((host as the remote shell gets it, slots or None), "") for a hostfile line's first word -- ``name``,
    ``name:N``, ``user@name``, an IPv4 address, an IPv6 address (without :N) -- or (None, what is wrong with it).
    A word starting with '-' is never a host: it would reach the remote shell as an option."""
    user, at, rest = word.rpartition("@")
    if at and not _USER.fullmatch(user):
        return None, "its user name is not one"
    if rest.startswith("["):  # [::1] or [::1]:2, as a URL writes it: mpirun's hostfiles take the bare address
        return None, "an IPv6 address goes in a hostfile without brackets (::1, not [::1]), and its slots after slots=N"
    if ":" in rest and rest.count(":") > 1:  # an IPv6 address (host:N has one colon)
        import ipaddress

        try:
            if not _IPV6.fullmatch(rest):  # ipaddress takes any scope after '%'; an interface name is all a scope is
                raise ValueError(rest)
            ipaddress.IPv6Address(rest)
        except ValueError:
            return None, "it is not an IPv6 address"
        return (word, None), ""
    name, colon, count = rest.partition(":")
    if colon and not _SLOTS.fullmatch(count):
        return None, "its slots after ':' are not a number"
    if colon and int(count) == 0:
        return None, "it has 0 slots after ':' (a host with no rank has no place in the hostfile)"
    if len(name) > 253 or not _HOST_NAME.fullmatch(name):
        return None, "it is not a host name, an IPv4 or an IPv6 address"
    return (f"{user}@{name}" if at else name, int(count) if colon else None), ""


def read_hosts(path: str) -> list[tuple[str, Optional[int]]]:
    """The hosts of an mpirun hostfile with their slots (None: not given), in order: one per line as ``parse_host``
    takes them, then Open MPI's ``slots=N`` / ``max_slots=N``; comments (#) and blank lines skipped. Raises
    HostfileError for a file that is not a regular file, larger than HOSTFILE_MAX_BYTES, longer than
    HOSTFILE_MAX_LINES, with a line that names no host, or with no host at all."""
    text = _hostfile_text(path)
    lines = text.split("\n")
    if len(lines) > HOSTFILE_MAX_LINES:
        raise HostfileError(f"the hostfile {shown(path, 200)} has {len(lines):,} lines, more than {HOSTFILE_MAX_LINES:,}.",
                            "Pass the hostfile of one job, one host per line.")
    hosts: list[tuple[str, Optional[int]]] = []
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        entry, problem = parse_host(words[0])
        if entry is None:
            raise HostfileError(f"line {number} of the hostfile {shown(path, 200)} names {visible_line(repr(words[0][:80]))}: {problem}.",
                                f"Write one host per line: {HOSTFILE_FORMS}.")
        name, slots = entry
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key in ("slots", "max_slots") and _SLOTS.fullmatch(value):
                if int(value) == 0:
                    raise HostfileError(f"line {number} of the hostfile {shown(path, 200)} gives {visible_line(repr(words[0][:80]))} {key}=0.",
                                        "Give every host at least one slot, or leave the host out.")
                slots = int(value)
        hosts.append((name, slots))
    if not hosts:
        raise HostfileError(f"the hostfile {shown(path, 200)} lists no hosts.", "Write one host name per line.")
    return hosts


NODELIST_OR_FILE = "Pass a file with one host name per line, or a Slurm node list such as node[01-16] or a[1-3,7],b5."


def read_host_list(given: str) -> list[tuple[str, Optional[int]]]:
    """--hostfile's hosts, read the one way doctor --hostfile (static) and doctor --live --hostfile share: a hostfile
    (read_hosts, with its slots), or, where no such file exists, a Slurm node list such as ``node[01-16]``
    (expand_nodelist; no slots). HostfileError either way."""
    if not os.path.exists(given) and looks_like_nodelist(given):
        try:
            return [(name, None) for name in expand_nodelist(given)]
        except NodeListError as exc:
            raise HostfileError(f"--hostfile {shown(given, 200)}: {exc}", exc.fix) from None
    if not os.path.isfile(given):
        raise HostfileError(f"--hostfile {shown(given, 200)} is not a readable file.", NODELIST_OR_FILE)
    return read_hosts(given)


def is_node_list(given: str) -> bool:
    """--hostfile names a Slurm node list (read_host_list's rule: node list syntax, and no such file)."""
    return not os.path.exists(given) and looks_like_nodelist(given)


def _hostfile_text(path: str) -> str:
    """The hostfile's text: a regular file (install.files.open_regular: a FIFO is refused without blocking) of at
    most HOSTFILE_MAX_BYTES."""
    from pathlib import Path

    from .install.files import NotRegular, open_regular

    try:
        with open_regular(Path(path)) as handle:
            data = handle.read(HOSTFILE_MAX_BYTES + 1)
    except NotRegular as exc:
        raise HostfileError(f"the hostfile {shown(path, 200)} {exc.why}.", "Pass a file with one host per line.") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise HostfileError(f"cannot read the hostfile {shown(path, 200)}: {getattr(exc, 'strerror', None) or exc}.",
                            "Pass an existing file with one host per line.") from None
    if len(data) > HOSTFILE_MAX_BYTES:
        raise HostfileError(f"the hostfile {shown(path, 200)} is larger than {HOSTFILE_MAX_BYTES:,} bytes.", "Pass the hostfile of one job, one host per line.")
    return data.decode("utf-8", errors="replace")


# --- Slurm node lists ------------------------------------------------------------------------------------------------


NODELIST_MAX_CHARS = 65_536
NODELIST_MAX_HOSTS = 65_536  # HOSTFILE_MAX_LINES: the same bound for a job's hosts either way
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
