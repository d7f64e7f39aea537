"""A plan in pip's own forms: a requirements file (with the index lines pip needs), constraints (the pins alone), and
the one-line ``pip install`` (``compat export requirements|constraints|pip-command``; ``compat install --print``).

These are for setups without compat: pip sees every host at once (``--extra-index-url`` / ``-f``), so any of them may
serve any name -- the shadowing risk compat install avoids by fetching each package from its own host.

Every line is written so that pip (and compat's own reader, inputs/read.py) reads back exactly what was asked, or the
value is refused (values.UnwritableValue, exit 2): a requirement is one line that pip does not split, take for an
option, cut at a comment, join to the next line or expand (``${VAR}``); an option's value is shell-quoted as pip
splits it (shlex). requirement_line is also what uv's input file (install/planners.py) and the plan's edge
(planning.py) hold requirements to. Pure.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from ..redact import CREDENTIALS_NOTE
from ..redact import strip_credentials as exported
from ..values import UnwritableValue, comment_text, odd_character

if TYPE_CHECKING:
    from ..install.plan import InstallPlan

KINDS = ("requirements", "constraints", "pip-command")
_ENV_VAR = re.compile(r"\$\{[A-Z0-9_]+\}")  # pip expands these in a requirements file (and compat's reader with it)
_COMMENT = re.compile(r"(^|\s)#")  # pip's comment: '#' at the start or after white space
_PIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?==[0-9A-Za-z.+!_-]+")  # name==version: no parser needed


def _line_problem(text: str) -> str:
    """What keeps ``text`` from being one line of a requirements file read back as written ('' when nothing)."""
    if not text:
        return "it is empty"
    why = odd_character(text)
    if why:
        return why
    if text != text.strip():
        return "it begins or ends with white space"
    if text.endswith("\\"):
        return "a final backslash joins the next line to it"
    if _COMMENT.search(text):
        return "a '#' after white space starts a comment"
    if _ENV_VAR.search(text):
        return "pip replaces ${NAME} with the value of that environment variable"
    return ""


def requirement_problem(text: str) -> str:
    """Why pip would not read ``text`` back as one requirement line ('' when it would): more or fewer lines, an option
    (a word starting with '-'), a comment, a variable, or no requirement at all."""
    why = _line_problem(text)
    if not why and (text.startswith("-") or " -" in text):
        why = "pip takes a word starting with '-' for an option"
    if not why and not _PIN.fullmatch(text):  # every planned pin is name==version: `compat export` loads no parser for them
        from ..inputs.model import InputError, Origin
        from ..inputs.read import _is_bare_location, parse_requirement

        try:  # a local path or URL (an editable's folder, an sdist) is read by pip as a location, whatever its name
            parse_requirement(text, Origin("", 0), editable=_is_bare_location(text))
        except InputError:
            why = "pip does not read it as a requirement"
    return why


def requirement_line(text: str, what: str = "requirement") -> str:
    """``text`` as one requirement line of a requirements file (and one argument of pip install); UnwritableValue when
    pip would read it otherwise (requirement_problem)."""
    why = requirement_problem(text)
    if why:
        raise UnwritableValue(what, text, "a requirements file", why)
    return text


def option_line(option: str, value: str) -> str:
    """``--index-url URL`` (or another option with a value) as one line: the value shell-quoted, as pip splits it."""
    why = _line_problem(value)
    if why:
        raise UnwritableValue(f"{option} value", value, "a requirements file", why)
    return f"{option} {shlex.quote(value)}"


def _other_hosts(plan: InstallPlan) -> list:
    """The packages' hosts other than the dependency index, each once, in the plan's order."""
    return list(dict.fromkeys(p.location for p in plan.packages if p.location.host_id != plan.dependency_index.host_id))


def variables_note(plan: InstallPlan) -> list[str]:
    """The comment that names the pass-through lines an export leaves out because they expanded a ${VAR} (its value
    may be a token: compat never writes it); empty when there are none."""
    left_out = plan.left_out_for_variables
    if not left_out:
        return []
    return [f"left out, as they take a value from the environment that compat does not write into a file: {', '.join(left_out)} "
            "(add them by hand where pip expands the variable, e.g. a requirements file)"]


def pip_command_text(plan: InstallPlan) -> str:
    """The conventional one-line pip command for the plan (for Dockerfiles that do not run compat).

    It lists every host with --extra-index-url / -f, so pip may take a name from any of them: compat
    install avoids that by fetching each package from its own host."""
    args = ["pip", "install", "--index-url", exported(plan.dependency_index.url)]
    for location in _other_hosts(plan):
        args += ["-f", exported(location.url)] if location.style == "find-links" else ["--extra-index-url", exported(location.url)]
    for option, value in zip(args[2::2], args[3::2]):
        why = odd_character(value)  # shlex.quote carries any other character; one line, no NUL
        if why:
            raise UnwritableValue(f"{option} value", value, "a pip command line", why)
    args += [requirement_line(r) for r in [p.pin for p in plan.packages] + [exported(line) for line in plan.exported_passthrough]]
    return " ".join(shlex.quote(a) for a in args)


def requirements_text(plan: InstallPlan, kind: str) -> str:
    """Pins for pip (``kind``: requirements or constraints). No hashes: one hash line makes pip demand hashes for every
    dependency too, and the full closure is known only to an install or a download (compat download writes a hashed lock)."""
    lines = [comment_text(f"# compat install plan: Python {plan.resolution.request.python.label}, {plan.resolution.request.platform.tag}")]
    if kind == "requirements":
        lines.append("# no --hash lines: pip would then need hashes for every dependency; compat download -d DIR writes them all")
        lines.append(option_line("--index-url", exported(plan.dependency_index.url)))
        for location in _other_hosts(plan):
            lines.append(option_line("--find-links" if location.style == "find-links" else "--extra-index-url", exported(location.url)))
    for package in plan.packages:
        lines.append(requirement_line(package.pin))
    if plan.exported_passthrough:
        lines.append("# not resolved by compat, passed through as written:")
        lines += [requirement_line(exported(line)) for line in plan.exported_passthrough]
    lines += [comment_text(f"# {note}") for note in variables_note(plan)]
    if plan.carries_credentials and (kind == "requirements" or any(exported(line) != line for line in plan.passthrough)):
        lines.insert(1, f"# {CREDENTIALS_NOTE}")
    return "\n".join(lines) + "\n"


def plan_text(plan: InstallPlan, kind: str) -> str:
    """The plan as ``kind`` (one of KINDS), ending in a newline."""
    if kind == "pip-command":  # one command line; the credentials note comes before it, as a shell comment
        return (f"# {CREDENTIALS_NOTE}\n" if plan.carries_credentials else "") + "".join(comment_text(f"# {note}") + "\n" for note in variables_note(plan)) \
            + pip_command_text(plan) + "\n"
    return requirements_text(plan, kind)
