"""A plan in pip's own forms: a requirements file (with the index lines pip needs), constraints (the pins alone), and
the one-line ``pip install`` (``compat export requirements|constraints|pip-command``; ``compat install --print``).

These are for setups without compat: pip sees every host at once (``--extra-index-url`` / ``-f``), so any of them may
serve any name -- the shadowing risk compat install avoids by fetching each package from its own host. Pure.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..redact import CREDENTIALS_NOTE
from ..redact import strip_credentials as exported

if TYPE_CHECKING:
    from ..install.plan import InstallPlan

KINDS = ("requirements", "constraints", "pip-command")


def _other_hosts(plan: InstallPlan) -> list:
    """The packages' hosts other than the dependency index, each once, in the plan's order."""
    return list(dict.fromkeys(p.location for p in plan.packages if p.location.host_id != plan.dependency_index.host_id))


def pip_command_text(plan: InstallPlan) -> str:
    """The conventional one-line pip command for the plan (for Dockerfiles that do not run compat).

    It lists every host with --extra-index-url / -f, so pip may take a name from any of them: compat
    install avoids that by fetching each package from its own host."""
    args = ["pip", "install", "--index-url", exported(plan.dependency_index.url)]
    for location in _other_hosts(plan):
        args += ["-f", exported(location.url)] if location.style == "find-links" else ["--extra-index-url", exported(location.url)]
    args += [p.pin for p in plan.packages] + [exported(line) for line in plan.passthrough]
    return " ".join(shlex.quote(a) for a in args)


def requirements_text(plan: InstallPlan, kind: str) -> str:
    """Pins for pip (``kind``: requirements or constraints). No hashes: one hash line makes pip demand hashes for every
    dependency too, and the full closure is known only to an install or a download (compat download writes a hashed lock)."""
    lines = [f"# compat install plan: Python {plan.resolution.request.python.label}, {plan.resolution.request.platform.tag}"]
    if kind == "requirements":
        lines.append("# no --hash lines: pip would then need hashes for every dependency; compat download -d DIR writes them all")
        lines.append(f"--index-url {exported(plan.dependency_index.url)}")
        for location in _other_hosts(plan):
            lines.append(f"{'--find-links' if location.style == 'find-links' else '--extra-index-url'} {exported(location.url)}")
    for package in plan.packages:
        lines.append(package.pin)
    if plan.passthrough:
        lines.append("# not resolved by compat, passed through as written:")
        lines += [exported(line) for line in plan.passthrough]
    if plan.carries_credentials and (kind == "requirements" or any(exported(line) != line for line in plan.passthrough)):
        lines.insert(1, f"# {CREDENTIALS_NOTE}")
    return "\n".join(lines) + "\n"


def plan_text(plan: InstallPlan, kind: str) -> str:
    """The plan as ``kind`` (one of KINDS), ending in a newline."""
    if kind == "pip-command":  # one command line; the credentials note comes before it, as a shell comment
        return (f"# {CREDENTIALS_NOTE}\n" if plan.carries_credentials else "") + pip_command_text(plan) + "\n"
    return requirements_text(plan, kind)
