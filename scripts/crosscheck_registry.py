#!/usr/bin/env python3
"""Cross-check the matrix's registry facts against the live PyPI listing.

For every package the matrix takes from PyPI (torch, intel-extension-for-pytorch, transformers,
accelerate, torchvision, torchaudio) this compares, release by release:

* that the release exists on the registry,
* the CPython versions with a Linux x86_64 wheel (manylinux/linux tags, free-threaded builds left out),
* the yanked flag (a release counts as yanked when every one of its files is) and, for a yanked release,
  the reason PyPI gives (torch, IPEX, torchvision and torchaudio alike),
* the local label: PyPI files carry none (PEP 440 local versions are refused there), so a PyPI wheel set
  in the matrix must say ``local_label = ""``; a filename with a label is reported too,
* the glibc floor: where the matrix records ``glibc_min`` for a PyPI wheel set, it must be the floor of the
  release's manylinux tags (the strictest of its Linux x86_64 files); where it records none and PyPI's
  files need more than glibc 2.17, that is printed as ``FLOOR ...`` (news, not a failure),
* for transformers/accelerate lines: the list of releases, the yanked ones, and Requires-Python.

Every disagreement is printed (``DISAGREE ...``) and makes the exit code 1. Releases on the registry
that the matrix does not know yet are printed as ``NEW ...`` and do not fail the check.
``--record`` writes today's date into ``registry_checked`` in the matrix when the check passes.

The pages are read, and their facts derived, by compat's own registry code (compatmatrix/maintain/registry.py and
harvest.py: what ``compat matrix update`` reads and writes with ``--write data/matrix.toml``); only the comparison and
its report are this script's.

Exit codes: 0 all facts agree, 1 disagreements, 2 the registry could not be read.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compatmatrix.errors import CompatError  # noqa: E402
from compatmatrix.maintain import registry as registry_reader  # noqa: E402
from compatmatrix.matrix import load_matrix  # noqa: E402
from compatmatrix.matrix.harvest import (  # noqa: E402
    PACKAGES,
    ProjectPage,
    by_release,
    glibc_floor,
    linux_files,
    linux_pythons,
    local_labels,
)
from compatmatrix.matrix.model import Component, LibraryLine, Matrix  # noqa: E402

DEFAULT_PYPI = "https://pypi.org/simple/"


class RegistryError(Exception):
    pass


def release_facts(page: ProjectPage, python_range: tuple[Version, Version]) -> dict[Version, dict]:
    """A project page's releases and the facts compared below, read by compat's own registry code (matrix/harvest.py)."""
    facts = {}
    for version, files in by_release(page.files).items():
        if not files:
            continue
        linux = linux_files(files)
        facts[version] = {
            "python": linux_pythons(linux, python_range),
            "yanked": all(f.yanked for f in files),
            "yanked_reason": next((f.yanked_reason for f in files if f.yanked and f.yanked_reason), "") or "",
            "requires_python": next((f.requires_python for f in files if f.requires_python), None),
            "labels": local_labels(files),
            "glibc": glibc_floor(linux),
        }
    return facts


def _pythons(versions) -> str:
    return ", ".join(f"3.{v.minor}" for v in sorted(versions)) or "none"


def check_binary(name: str, releases, registry: dict[Version, dict], report: "Report", pypi_host: str = "pypi") -> None:
    """torch / IPEX / torchvision / torchaudio: the PyPI wheel facts of each release."""
    known = set()
    for release in releases:
        known.add(release.version)
        wheels = next((w for w in release.wheels if w.host == pypi_host), None)
        facts = registry.get(release.version)
        if wheels is None:
            if facts is not None and facts["python"]:
                report.disagree(f"{name} {release.version}: PyPI has Linux x86_64 wheels for {_pythons(facts['python'])}, the matrix lists no PyPI wheels")
            continue
        if facts is None:
            report.disagree(f"{name} {release.version}: the matrix lists PyPI wheels, PyPI has no such release")
            continue
        report.checked += 1
        if facts["python"] != set(wheels.python):
            report.disagree(f"{name} {release.version}: PyPI wheels are for Python {_pythons(facts['python'])}, the matrix says {_pythons(wheels.python)}")
        if facts["yanked"] != wheels.yanked:
            report.disagree(f"{name} {release.version}: PyPI yanked={facts['yanked']}, the matrix says yanked={wheels.yanked}")
        elif wheels.yanked and facts["yanked_reason"].strip() != wheels.yanked_reason.strip():
            report.disagree(f"{name} {release.version}: PyPI's yank reason is {facts['yanked_reason']!r}, the matrix says {wheels.yanked_reason!r}")
        labelled = sorted(label for label in facts["labels"] if label)
        if wheels.local_label or labelled:
            pypi = ", ".join(labelled) or "none (PyPI refuses local versions)"
            report.disagree(f"{name} {release.version}: PyPI file labels: {pypi}; the matrix says local_label={wheels.local_label!r} for its PyPI wheels")
        floor = facts["glibc"]
        if wheels.glibc_min is not None and floor != wheels.glibc_min:
            report.disagree(f"{name} {release.version}: PyPI's Linux x86_64 wheels need glibc >= {floor or 'unknown'}, the matrix says glibc_min={wheels.glibc_min}")
        elif wheels.glibc_min is None and floor is not None and floor > Version("2.17"):
            report.floors.append(f"{name} {release.version}: PyPI's Linux x86_64 wheels need glibc >= {floor}; the matrix records no glibc_min")
    _new(name, known, registry, report)


def check_lines(name: str, lines: Iterable[LibraryLine], registry: dict[Version, dict], report: "Report") -> None:
    known = set()
    for line in lines:
        on_registry = sorted(
            (v for v in registry if v.release[:2] == line.line.release[:2] and not v.is_prerelease and not v.is_devrelease),
            reverse=True,
        )
        known.update(on_registry)
        report.checked += 1
        if list(line.versions) != on_registry:
            missing = sorted(set(on_registry) - set(line.versions))
            extra = sorted(set(line.versions) - set(on_registry))
            report.disagree(f"{name} {line.line}.*: releases differ (on PyPI only: {', '.join(map(str, missing)) or '-'}; in the matrix only: {', '.join(map(str, extra)) or '-'})")
            continue
        yanked = {v for v in on_registry if registry[v]["yanked"]}
        if yanked != set(line.yanked):
            report.disagree(f"{name} {line.line}.*: yanked on PyPI: {', '.join(map(str, sorted(yanked))) or 'none'}; the matrix says {', '.join(map(str, sorted(line.yanked))) or 'none'}")
        requires = registry[line.latest]["requires_python"]
        if (requires or None) != (str(line.requires_python) if line.requires_python is not None else None):
            from packaging.specifiers import SpecifierSet

            if requires is None or line.requires_python is None or SpecifierSet(requires) != line.requires_python:
                report.disagree(f"{name} {line.latest}: PyPI Requires-Python is {requires!r}, the matrix says {str(line.requires_python or '')!r}")
    _new(name, known, registry, report)


def _new(name: str, known: set[Version], registry: dict[Version, dict], report: "Report") -> None:
    if not known:
        return
    oldest = min(known)
    for version in sorted(registry):
        if version > oldest and version not in known and not version.is_prerelease and not version.is_devrelease and not registry[version]["yanked"]:
            report.new.append(f"{name} {version}: on PyPI, not in the matrix yet")


class Report:
    def __init__(self) -> None:
        self.disagreements: list[str] = []
        self.new: list[str] = []
        self.floors: list[str] = []
        self.checked = 0

    def disagree(self, line: str) -> None:
        self.disagreements.append(line)


def crosscheck(matrix: Matrix, base: str, timeout: float) -> Report:
    """Read PyPI's project pages (``base``: its simple index, PEP 691 JSON or PEP 503 HTML) with compat matrix update's
    reader, and compare."""
    from compatmatrix.install.indexes import configure_indexes

    registry_reader.PAGE_S = timeout
    try:
        locations = configure_indexes(matrix, [f"pypi={base}"])
    except CompatError as exc:
        raise RegistryError(exc.message) from None
    read = registry_reader.read_registries(matrix, locations, PACKAGES, metadata=False, every_package_from="pypi")
    if "pypi" in read.unread:
        raise RegistryError(read.unread["pypi"])
    registry = {c.distribution: release_facts(next(p for p in read.pages[c] if p.host == "pypi"), matrix.policy.python_range) for c in PACKAGES}
    report = Report()
    for component in (Component.TORCH, Component.IPEX, Component.TORCHVISION, Component.TORCHAUDIO):
        check_binary(component.distribution, matrix.releases[component], registry[component.distribution], report)
    for component in (Component.TRANSFORMERS, Component.ACCELERATE):
        check_lines(component.distribution, matrix.releases[component], registry[component.distribution], report)  # type: ignore[arg-type]
    return report


def record(matrix_path: Path, today: str) -> None:
    text = matrix_path.read_text(encoding="utf-8")
    updated, count = re.subn(r'(?m)^registry_checked = ".*"$', f'registry_checked = "{today}"', text, count=1)
    if count != 1:
        raise SystemExit(f"crosscheck: {matrix_path} has no top-level registry_checked line to update.")
    matrix_path.write_text(updated, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=ROOT / "data" / "matrix.toml")
    parser.add_argument("--pypi-url", default=DEFAULT_PYPI, help=f"PyPI's simple index, PEP 691 JSON or PEP 503 HTML (default {DEFAULT_PYPI})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per page")
    parser.add_argument("--record", action="store_true", help="write today's date into registry_checked when everything agrees")
    args = parser.parse_args(argv)
    matrix = load_matrix(args.matrix)
    try:
        report = crosscheck(matrix, args.pypi_url, args.timeout)
    except RegistryError as exc:
        print(f"crosscheck: error: {exc}. Check the network or pass --pypi-url.", file=sys.stderr)
        return 2
    for line in report.disagreements:
        print(f"DISAGREE {line}")
    for line in report.new:
        print(f"NEW      {line}")
    for line in report.floors:
        print(f"FLOOR    {line}")
    print(f"{report.checked} releases/lines checked, {len(report.disagreements)} disagreements, {len(report.new)} new upstream releases, "
          f"{len(report.floors)} glibc floors not recorded")
    if report.disagreements:
        return 1
    if args.record:
        today = datetime.date.today().isoformat()
        record(args.matrix, today)
        print(f"recorded registry_checked = {today} in {args.matrix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
