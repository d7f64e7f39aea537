"""Pairings tried on this machine (``compat matrix verify``): the overlay's ``tested`` records, typed, and what they add to
the matrix. Pure: JSON values in, records and pairings out.

A record says which release of a package was installed next to which torch (with the hosts and local labels of both
builds), whether the smoke operation through the extension worked, the error class of a failure (the import-probe
classifier's, checks/crash.py), what ran, how long it took, when, and on which machine (CPU model, glibc, Python).
Recorded as ``tested-here`` evidence (docs/MATRIX.md, "Evidence"): it ranks above ``unverified`` and below every
sourced level; a pairing the release is built for is never changed by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.version import InvalidVersion, Version

from ..record import Record
from .model import COMPONENTS, TESTED_SOURCE, Component, Pairing, Provenance

#: The packages compat matrix verify has a smoke operation for.
VERIFIABLE = tuple(c for c, info in COMPONENTS.items() if info.smoke)
#: What a result is, in the record and in --json.
RESULTS = ("works", "breaks")
_KEYS = frozenset({"package", "version", "host", "label", "torch", "torch_host", "torch_label", "result", "error_class", "summary",
                   "ran", "seconds", "date", "machine"})
_MACHINE_KEYS = frozenset({"cpu", "glibc", "python"})
MAX_RECORDS = 10_000  # tested records the overlay keeps at most
_TEXT_LIMIT = 500  # characters of one text field kept (a summary quotes a child's last line)
_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_LABEL = re.compile(r"(\+[A-Za-z0-9.]+)?")
_HOST = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_CLASS = re.compile(r"[a-z][a-z-]{0,39}")


class Machine(Record):
    cpu: str  # the CPU model (/proc/cpuinfo "model name")
    glibc: str  # "2.35"
    python: str  # "3.11.7"

    def text(self) -> str:
        return f"{self.cpu}, glibc {self.glibc}, Python {self.python}"


class Tested(Record):
    """One pairing tried by compat matrix verify."""

    component: Component
    version: Version
    host: str  # where the package's wheel came from
    label: str  # its local label ("+cpu" or "")
    torch: Version
    torch_host: str
    torch_label: str
    works: bool
    error_class: str  # the import-probe classifier's kind ("" when it works)
    summary: str  # what failed, in one line ("" when it works)
    ran: str  # the smoke operation, e.g. "torchvision.ops.nms on 2 boxes"
    seconds: float  # the whole verification: venv, install, smoke
    date: str  # UTC, 2026-11-26T21:40:00Z
    machine: Machine

    @property
    def key(self) -> tuple[Component, Version, Version]:
        return (self.component, self.version, self.torch)

    @property
    def source(self) -> str:
        return f"{TESTED_SOURCE}{self.date}"

    def builds(self) -> str:
        """"torchvision 0.29.1 (pypi) with torch 2.13.0+cpu (pytorch-cpu)"."""
        return (f"{self.component.distribution} {self.version}{self.label} ({self.host}) "
                f"with torch {self.torch}{self.torch_label} ({self.torch_host})")

    def note(self) -> str:
        outcome = "works" if self.works else f"breaks: {self.error_class}: {self.summary}"
        return f"{self.builds()}: {outcome}; ran {self.ran} on {self.machine.text()}, {self.date}, {self.seconds:.0f} s"

    def pairing(self) -> Pairing:
        """The record as the matrix's pairing: ``tested-here`` when it works, ``documented-break`` (by this test) when not."""
        return Pairing(self.torch, "tested-here" if self.works else "documented-break", Provenance((self.source,), True, self.note()))

    def to_json(self) -> dict[str, Any]:
        """The record as the overlay keeps it: every text field escaped for one line (values.record_text: a child's TAB or
        terminal escape in ``summary`` is written as ``\\t`` / ``\\x1b``), so ``parse_one`` reads back what is written."""
        text = _kept_text
        return {"package": self.component.distribution, "version": str(self.version), "host": text(self.host), "label": text(self.label),
                "torch": str(self.torch), "torch_host": text(self.torch_host), "torch_label": text(self.torch_label),
                "result": "works" if self.works else "breaks", "error_class": text(self.error_class), "summary": text(self.summary),
                "ran": text(self.ran), "seconds": round(self.seconds, 1), "date": text(self.date),
                "machine": {"cpu": text(self.machine.cpu), "glibc": text(self.machine.glibc), "python": text(self.machine.python)}}


class TestedProblem(ValueError):
    pass


def _kept_text(value: str) -> str:
    from ..values import record_text

    return record_text(value, _TEXT_LIMIT)


def _text(item: Mapping[str, Any], key: str, pattern: "re.Pattern[str] | None" = None) -> str:
    value = item.get(key)
    if not isinstance(value, str) or len(value) > _TEXT_LIMIT or not value.isprintable():  # what to_json writes, nothing else
        raise TestedProblem(f"'{key}' is not a line of text")
    if pattern is not None and not pattern.fullmatch(value):
        raise TestedProblem(f"'{key}' is not of the expected form")
    return value


def _version(item: Mapping[str, Any], key: str) -> Version:
    try:
        return Version(_text(item, key))
    except (InvalidVersion, ValueError):
        raise TestedProblem(f"'{key}' is not a version") from None


def parse_one(item: Any, hosts: Sequence[str]) -> Tested:
    """One record of the overlay's ``tested`` list (TestedProblem for anything wrong: the overlay is untrusted)."""
    if not isinstance(item, dict):
        raise TestedProblem("a record is not a table")
    unknown = set(item) - _KEYS
    if unknown or set(item) != _KEYS:
        raise TestedProblem(f"a record has the keys {sorted(map(str, item))[:20]}; expected {sorted(_KEYS)}")
    component = _component(item)
    host, torch_host = _text(item, "host", _HOST), _text(item, "torch_host", _HOST)
    for name in (host, torch_host):
        if name not in hosts:
            raise TestedProblem(f"the host '{name}' is not one of the matrix's")
    result, error_class = _result(item)
    seconds = _seconds(item)
    machine = item.get("machine")
    if not isinstance(machine, dict) or set(machine) != _MACHINE_KEYS:
        raise TestedProblem(f"'machine' is not a table of {sorted(_MACHINE_KEYS)}")
    return Tested(component, _version(item, "version"), host, _text(item, "label", _LABEL), _version(item, "torch"), torch_host,
                  _text(item, "torch_label", _LABEL), result == "works", error_class, _text(item, "summary"), _text(item, "ran"),
                  float(seconds), _text(item, "date", _DATE), Machine(*(_text(machine, k) for k in ("cpu", "glibc", "python"))))


def _component(item: Mapping[str, Any]) -> Component:
    """A record's package: one compat matrix verify tries."""
    try:
        component = Component.from_name(_text(item, "package"))
    except KeyError:
        raise TestedProblem("'package' is not a package in the matrix") from None
    if component not in VERIFIABLE:
        raise TestedProblem(f"'package' {component.distribution} is not one compat matrix verify tries")
    return component


def _result(item: Mapping[str, Any]) -> tuple[str, str]:
    """A record's result and the error class that goes with it (none for "works")."""
    result = _text(item, "result")
    if result not in RESULTS:
        raise TestedProblem("'result' is neither works nor breaks")
    error_class = _text(item, "error_class")
    if (result == "works") != (error_class == "") or (error_class and not _CLASS.fullmatch(error_class)):
        raise TestedProblem("'error_class' does not go with 'result'")
    return result, error_class


def _seconds(item: Mapping[str, Any]) -> Any:
    """A record's duration: a number (not a bool) of seconds under a day."""
    seconds = item.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 86400:
        raise TestedProblem("'seconds' is not a number of seconds")
    return seconds


def parse(items: Any, hosts: Sequence[str]) -> tuple[Tested, ...]:
    """The overlay's ``tested`` list; a pair tried twice keeps its newest record (the later in the list)."""
    if items is None:
        return ()
    if not isinstance(items, list) or len(items) > MAX_RECORDS:
        raise TestedProblem("'tested' is not a list of records")
    kept: dict[tuple[Component, Version, Version], Tested] = {}
    for item in items:
        record = parse_one(item, hosts)
        kept.pop(record.key, None)
        kept[record.key] = record
    return tuple(kept.values())


def _named(item: Any, index: int) -> str:
    """"tested #3 (torchvision 0.29.1 with torch 2.13.0)": a record named for a note, from whatever it holds (escaped)."""
    from ..values import quoted

    name = f"tested #{index + 1}"
    if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("package", "version", "torch")):
        name += f" ({quoted(item['package'], 40)} {quoted(item['version'], 30)} with torch {quoted(item['torch'], 30)})"
    return name


def parse_each(items: Any, hosts: Sequence[str]) -> tuple[tuple[Tested, ...], tuple[str, ...]]:
    """The overlay's ``tested`` list, each record read alone: (the records, a note for each one skipped). A bad record
    never costs the others; a pair tried twice keeps its newest record (the later in the list)."""
    if items is None:
        return (), ()
    if not isinstance(items, list) or len(items) > MAX_RECORDS:
        return (), (f"'tested' is not a list of at most {MAX_RECORDS} records: none of it is used",)
    kept: dict[tuple[Component, Version, Version], Tested] = {}
    notes: list[str] = []
    for index, item in enumerate(items):
        try:
            record = parse_one(item, hosts)
        except TestedProblem as exc:
            notes.append(f"{_named(item, index)}: {exc}")
            continue
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            notes.append(f"{_named(item, index)}: it holds a value of an unexpected type or size ({type(exc).__name__})")
            continue
        kept.pop(record.key, None)
        kept[record.key] = record
    return tuple(kept.values()), tuple(notes)


def rewritable(items: Any, hosts: Sequence[str]) -> tuple[tuple[Tested, ...], tuple[str, ...]]:
    """``parse_each`` of records about to be written again (compat matrix update, verify): a text field that only lacks
    escaping (a raw TAB or terminal escape an older compat stored) is escaped first, so such a record is kept, escaped,
    rather than lost; anything else wrong skips that record alone, with its note."""
    if isinstance(items, list) and len(items) <= MAX_RECORDS:
        items = [_escaped(item) for item in items]
    return parse_each(items, hosts)


def _escaped(item: Any) -> Any:
    if isinstance(item, str):
        return _kept_text(item)
    if isinstance(item, dict):
        return {key: _escaped(value) for key, value in item.items()}
    return item


def recorded(items: Sequence[Tested], new: Tested) -> tuple[Tested, ...]:
    """``items`` with ``new`` added, replacing an older record of the same pair."""
    return tuple(t for t in items if t.key != new.key) + (new,)
