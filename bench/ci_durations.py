#!/usr/bin/env python3
"""CI time per test file against a budget: makes a new slow test visible without a timed test.

Reads the JUnit XML that pytest writes with ``--junitxml=FILE`` (``.ci/run`` writes one for every run), adds up each
test file's time (setup, call and teardown: pytest's junit ``time`` attribute includes all three by default), and holds
each file against ``bench/ci_budget.toml``: a file over its budget, or a file with no budget that took longer than the
default, is listed first. The figures are a worker's wall time per file; with ``-n 2 --dist loadgroup`` every integration
test runs on one worker, one at a time, so the integration files' sum is the run's critical path (also printed).

    python bench/ci_durations.py FILE.xml [--budget bench/ci_budget.toml] [--strict] [--top N]

Exit status: 0, or with ``--strict`` 1 when a file is over its budget; 2 when the XML cannot be read.
Side effects: none (reads two files, prints a table).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET = ROOT / "bench" / "ci_budget.toml"
MAX_XML_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class FileTime:
    path: str
    seconds: float
    tests: int
    integration: float  # seconds of it spent in the serial integration group (the one worker that runs them one at a time)
    beside: float  # seconds of it spent in the integration-beside group


def file_of(classname: str) -> str:
    """``tests.test_x.TestY`` -> ``tests/test_x.py`` (pytest's junit classname is the module path, then classes)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        if parts[end - 1].startswith("test_") or parts[end - 1] == "conftest":
            return "/".join(parts[:end]) + ".py"
    return "/".join(parts) + ".py"


def tier(case: ET.Element) -> str:
    """tests/conftest.py names every integration test's group in the junit property ``tier``; "unit" for the others."""
    return next((p.get("value") or "unit" for p in case.iter("property") if p.get("name") == "tier"), "unit")


def read_times(xml_path: Path) -> list[FileTime]:
    if xml_path.stat().st_size > MAX_XML_BYTES:
        raise ValueError(f"{xml_path} is larger than {MAX_XML_BYTES} bytes")
    root = ET.parse(xml_path).getroot()
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    integration: dict[str, float] = defaultdict(float)
    beside: dict[str, float] = defaultdict(float)
    for case in root.iter("testcase"):
        path = file_of(case.get("classname", "?"))
        took = float(case.get("time", "0") or 0)
        seconds[path] += took
        counts[path] += 1
        group = tier(case)
        if group == "integration":
            integration[path] += took
        elif group == "integration-beside":
            beside[path] += took
    return sorted((FileTime(p, seconds[p], counts[p], integration[p], beside[p]) for p in seconds), key=lambda f: -f.seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", type=Path)
    parser.add_argument("--budget", type=Path, default=DEFAULT_BUDGET)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a file is over its budget")
    parser.add_argument("--top", type=int, default=25, help="rows to print besides the files over budget")
    args = parser.parse_args(argv)
    try:
        budget_doc = tomllib.loads(args.budget.read_text(encoding="utf-8"))
        times = read_times(args.xml)
    except (OSError, ValueError, ET.ParseError, tomllib.TOMLDecodeError) as exc:
        print(f"ci_durations: cannot read the durations: {exc}. Run pytest with --junitxml=FILE first.", file=sys.stderr)
        return 2
    default = float(budget_doc.get("default_seconds", 60))
    budgets = {str(k): float(v) for k, v in budget_doc.get("files", {}).items()}
    over = [t for t in times if t.seconds > budgets.get(t.path, default)]
    total = sum(t.seconds for t in times)
    print(f"{len(times)} test files, {sum(t.tests for t in times)} tests, {total:.0f} s of worker time in all")
    serial, beside = sum(t.integration for t in times), sum(t.beside for t in times)
    print(f"integration tests one at a time on one worker: {serial:.0f} s; integration tests beside the unit tests: {beside:.0f} s; "
          f"unit tests: {total - serial - beside:.0f} s; two workers need at least {max(serial, total / 2):.0f} s")
    if over:
        print(f"OVER BUDGET ({len(over)}): a file's time above bench/ci_budget.toml (default {default:.0f} s for a file not listed)")
        for t in over:
            print(f"  {t.path:48} {t.seconds:8.1f} s  budget {budgets.get(t.path, default):6.0f} s  ({t.tests} tests)")
    print(f"slowest {args.top}:")
    for t in times[: args.top]:
        print(f"  {t.path:48} {t.seconds:8.1f} s  ({t.tests} tests; {t.integration:.0f} s serial, {t.beside:.0f} s beside)")
    return 1 if (over and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
