"""`compat check -r`: what the files themselves say, as findings, and how "not installed" reads for a file.

A file that does not pin torch is incomplete, not broken: the pairings with torch cannot be checked, and
`compat resolve -r FILE` names the torch it needs. Pure: findings in, findings out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..console import plural
from ..findings import Finding, Status
from ..names import canonical_name
from .request import FileRequest, component_of

FIX = "Pin every stack package with == (pip freeze, or compat install --print requirements), and take each package from its own host (compat install)."


def name_of(line: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0]


def is_exact(line: str) -> bool:
    try:
        spec = SpecifierSet(line[len(name_of(line)):].split(";")[0].strip())
    except InvalidSpecifier:
        return False
    return len(spec) == 1 and next(iter(spec)).operator in ("==", "===") and not next(iter(spec)).version.endswith(".*")


def file_findings(paths: Sequence[str], files: FileRequest, findings: Sequence[Finding]) -> list[Finding]:
    """The `input.files` finding first, then the package findings, with 'torch is not installed' read as 'not pinned'."""
    unpinned = [line for line in files.requirements if component_of(name_of(line)) is not None and not is_exact(line)]
    problems = list(files.warnings) + [f"{line} is not an exact pin: only pinned versions can be checked without an environment" for line in unpinned]
    torch_pinned = "torch" in {canonical_name(name) for name in files.pinned}
    if not torch_pinned:
        problems.append("torch is not pinned in the files: the pairings with torch cannot be checked (compat resolve -r FILE names the torch they need)")
    evidence = tuple(files.notes) + tuple(f"passed through (not modelled): {line}" for line in files.shown_passthrough)
    if files.refusals:  # pip install -r fails on such a pin: the file is broken, not incomplete
        head = Finding("input.files", Status.FAIL, files.refusals[0], tuple(problems[len(files.refusals):]) + files.refusals[1:] + evidence,
                       "Pin the newest release that installs, as named, in its place.")
    elif problems:
        head = Finding("input.files", Status.WARN, problems[0], tuple(problems[1:]) + evidence, FIX)
    else:
        head = Finding("input.files", Status.PASS, f"read {', '.join(paths)}: {plural(len(files.pinned), 'exact pin')}", evidence)
    out = [head]
    for finding in findings:
        if finding.id == "packages.torch-installed" and not torch_pinned:
            finding = Finding(finding.id, Status.SKIP, "torch is not pinned in the files (see input.files)")
        out.append(finding)
    return out
