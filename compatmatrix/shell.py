"""The shell writers: an environment plan (``EnvPlan``: variables set outright, path-list additions, comments) as bash/zsh
or fish lines, quoted so that nothing in a value is expanded or split. compat env prints them, compat launch --print
writes its path lists with ``sh_addition``, the sbatch and Dockerfile lines run compat env's.

Path lists (PATH, LD_LIBRARY_PATH, ...: environment/setvars.ADDITIVE) are written as additions joined to the value the
shell has when it sources the file (`export PATH="/added${PATH:+:$PATH}"`), never as the value they had when compat ran:
a file written during `docker build` must not undo the image's later `ENV PATH=...`. Each addition is skipped when the
value already holds it, so a file sourced twice (BASH_ENV and an entrypoint) adds its entries once; MANPATH keeps man's
default search path (an empty entry) when it was unset. With ``defaults`` (compat env --defaults) the other settings
are written as defaults a value set at sourcing time overrides (`export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"`), so
that file gives way to a pod's env or `docker run -e`. Pure.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .record import Record
from .values import UnwritableValue, comment_text, env_name_ok

if TYPE_CHECKING:  # the writers read an addition's two lists; environment/setvars.py makes them
    from .environment.setvars import PathAddition

SHELLS = ("bash", "zsh", "fish")


class EnvPlan(Record):
    exports: Mapping[str, str]  # set outright
    comments: tuple[str, ...]
    additions: Mapping[str, PathAddition] = MappingProxyType({})  # joined to the value the sourcing shell has

    def to_json(self, python: str) -> dict[str, Any]:
        """The `compat env --json` document (schema_version 2: path lists moved from "exports" to "additions")."""
        return {"schema_version": 2, "command": "env", "python": python, "exports": dict(self.exports),
                "additions": {k: {"prepend": list(a.prepend), "append": list(a.append)} for k, a in self.additions.items()},
                "comments": list(self.comments)}


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _safe(text: str) -> bool:
    return shlex.quote(text) == text  # nothing the shell would expand or split: it may stand inside double quotes


# MANPATH: an empty entry (a leading or trailing ':') stands for man's default search path, so an addition to an unset
# MANPATH keeps that entry ("/added:"), as oneAPI's own setvars.sh does; without it man would find only the added pages
KEEPS_EMPTY = frozenset({"MANPATH"})


def _sh_guard(key: str, text: str) -> str:
    """The `case` line that skips an addition already in KEY as one block, so sourcing the file twice (BASH_ENV and an
    entrypoint, a nested shell) does not add the entries twice."""
    block = f'":{text}:"' if _safe(text) else ":" + shlex.quote(text) + ":"
    return f'case ":${{{key}-}}:" in *{block}*) ;; *)'


def sh_addition(key: str, added: PathAddition) -> list[str]:
    """`export KEY="/a:/b${KEY:+:$KEY}"`: the added entries in front of (or after) the value KEY has when this runs, inside
    a `case` that leaves KEY alone when it already holds them; entries with spaces, quotes or $ are single-quoted (shlex)
    next to the double-quoted expansion."""
    lines = []
    keeps_empty = key in KEEPS_EMPTY
    live_after = f":${{{key}-}}" if keeps_empty else f"${{{key}:+:${key}}}"  # `-`: a `set -u` shell with KEY unset does not stop
    live_before = f"${{{key}:-:}}${{{key}:+:}}" if keeps_empty else f"${{{key}:+${key}:}}"
    if added.prepend:
        text = ":".join(added.prepend)
        lines += [_sh_guard(key, text),
                  f'export {key}="{text}{live_after}"' if _safe(text) else f'export {key}={shlex.quote(text)}"{live_after}"', "esac"]
    if added.append:
        text = ":".join(added.append)
        lines += [_sh_guard(key, text),
                  f'export {key}="{live_before}{text}"' if _safe(text) else f'export {key}="{live_before}"{shlex.quote(text)}', "esac"]
    return lines


def _fish_addition(key: str, added: PathAddition) -> list[str]:
    """fish (3.0 and later) keeps every variable whose name ends in PATH as a list, split and joined on ':'; its empty
    entries (an empty value) are left out, as bash's ${KEY:+...} leaves out an empty value (MANPATH keeps them, and gets
    one when it was unset). An addition whose entries KEY already holds is skipped."""
    lines = []
    if key in KEEPS_EMPTY:
        live = f"(if set -q {key}; printf '%s\\n' ${key}; else; echo ''; end)"
    else:
        live = f"(string match -v -- '' ${key})"
    for entries, line in ((added.prepend, f"set -gx {key} {' '.join(_fish_quote(e) for e in added.prepend)} {live}"),
                          (added.append, f"set -gx {key} {live} {' '.join(_fish_quote(e) for e in added.append)}")):
        if entries:
            missing = "; or ".join(f"not contains -- {_fish_quote(e)} ${key}" for e in entries)
            lines.append(f"if {missing}; {line}; end")
    return lines


def _sh_default(key: str, value: str) -> str:
    """`export KEY="${KEY:-value}"`: the value only where KEY is unset or empty when this runs; a value with spaces,
    quotes or $ is set in a second step, single-quoted (shlex), so nothing in it is expanded."""
    if _safe(value):
        return f'export {key}="${{{key}:-{value}}}"'
    return f'[ -n "${{{key}:-}}" ] || {key}={shlex.quote(value)}; export {key}'


def _comment(text: str) -> str:
    """One comment line: a path with a newline in it (an interpreter, a bindings folder) must not end the comment and
    put the rest of it on a line the shell runs when the file is eval'd or sourced."""
    return comment_text(text)


def _checked(plan: EnvPlan) -> None:
    """Names every shell takes as a variable name; values a shell variable can hold (no NUL) and a UTF-8 file can (no
    lone surrogate); anything else is refused (the quoting of each shell carries every other character)."""
    values = [*plan.exports.items(), *[(k, e) for k, a in plan.additions.items() for e in (*a.prepend, *a.append)]]
    for key, value in values:
        if not env_name_ok(key):
            raise UnwritableValue("variable name", key, "a shell's exports", "a name is letters, digits and '_', not starting with a digit")
        if "\0" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
            raise UnwritableValue(f"value of {key}", value, "a shell's exports", "it holds a NUL or an undecodable byte, which no shell variable holds")


def format_env(plan: EnvPlan, shell: str, defaults: bool = False) -> str:
    """The plan as bash/zsh or fish lines. ``defaults`` (compat env --defaults): the settings set outright (thread counts,
    LD_PRELOAD, the oneCCL variables) are written as defaults that a value the sourcing shell already has overrides, so a
    file written during docker build gives way to a pod's env or docker run -e; path lists are additions either way."""
    _checked(plan)
    lines = [f"# {_comment(c)}" for c in plan.comments]
    if defaults and plan.exports:
        lines.append("# --defaults: a value already set when this file is sourced is kept (docker run -e, a pod's env)")
    for key, added in plan.additions.items():
        lines += _fish_addition(key, added) if shell == "fish" else sh_addition(key, added)
    for key, value in plan.exports.items():
        if shell == "fish":
            # `if`, not `set -q KEY; or set ...`: fish's set keeps the status before it, so that line would end the file with 1
            lines.append(f'if test -z "${key}"; set -gx {key} {_fish_quote(value)}; end' if defaults else f"set -gx {key} {_fish_quote(value)}")
        else:
            lines.append(_sh_default(key, value) if defaults else f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"
