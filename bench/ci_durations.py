#!/usr/bin/env python3
"""CI time per test file against a budget: makes a new slow test visible without a timed test.

Reads the JUnit XML that pytest writes with ``--junitxml=FILE`` (``.ci/run`` writes one for every run), adds up each
test file's time (setup, call and teardown: pytest's junit ``time`` attribute includes all three by default), and holds
each file against ``bench/ci_budget.toml``: a file over its budget, or a file with no budget that took longer than the
default, is listed first. The figures are a worker's wall time per file; with ``-n 2 --dist loadgroup`` each group of
integration tests (tests/conftest.py: serial, beside) runs on one worker, one at a time, so the largest group's
sum is the least the run can take (printed, with each group's share and the unit tests').

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
    groups: dict[str, float]  # seconds of it in each xdist group ("integration", "integration-beside", "integration-builds", "unit")

    @property
    def integration(self) -> float:  # the serial group: real ranks, namespaces, daemons, timings
        return self.groups.get("integration", 0.0)


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
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for case in root.iter("testcase"):
        path = file_of(case.get("classname", "?"))
        took = float(case.get("time", "0") or 0)
        seconds[path] += took
        counts[path] += 1
        groups[path][tier(case)] += took
    return sorted((FileTime(p, seconds[p], counts[p], dict(groups[p])) for p in seconds), key=lambda f: -f.seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", type=Path)
    parser.add_argument("--budget", type=Path, default=DEFAULT_BUDGET)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a file is over its budget")
    parser.add_argument("--top", type=int, default=25, help="rows to print besides the files over budget")
    parser.add_argument("--workers", type=int, default=2, help="the test command's -n (for the least the run can take)")
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
    shares: dict[str, float] = defaultdict(float)
    for t in times:
        for group, took in t.groups.items():
            shares[group] += took
    largest = max((took for group, took in shares.items() if group != "unit"), default=0.0)
    print("; ".join(f"{group}: {took:.0f} s" for group, took in sorted(shares.items(), key=lambda item: -item[1]))
          + f"; {args.workers} workers need at least {max(largest, total / max(1, args.workers)):.0f} s")
    if over:
        print(f"OVER BUDGET ({len(over)}): a file's time above bench/ci_budget.toml (default {default:.0f} s for a file not listed)")
        for t in over:
            print(f"  {t.path:48} {t.seconds:8.1f} s  budget {budgets.get(t.path, default):6.0f} s  ({t.tests} tests)")
    print(f"slowest {args.top}:")
    for t in times[: args.top]:
        where = ", ".join(f"{took:.0f} s {group}" for group, took in sorted(t.groups.items(), key=lambda item: -item[1]))
        print(f"  {t.path:48} {t.seconds:8.1f} s  ({t.tests} tests; {where})")
    return 1 if (over and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
