"""PEP 508 environment markers judged for the real target, never guessed.

A target knows some marker values: all of them for an interpreter that was asked (``--python PATH``, or the running
one when it is the target), only what ``--python-version X.Y`` and the platform decide otherwise. A marker that
needs a value the target does not know (``python_full_version`` from X.Y alone, ``platform_release``,
``platform_version``, ...) is *undecided*: its line is left out and said, with the names it needs. Evaluation is
three-valued (Kleene): ``python_version < "3.10" and platform_release >= "5"`` is false at 3.11 whatever the kernel.

Pure: a marker and a target in, True / False / None out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional

from ..record import Record

if TYPE_CHECKING:  # packaging.markers is imported where a marker is read or evaluated (start-up: compat check -r of a
    from packaging.markers import Marker  # file without markers loads neither it nor packaging.tags)

#: Every PEP 508 marker variable; `extra` is "" for a top-level requirement, as pip evaluates one.
MARKER_NAMES = ("implementation_name", "implementation_version", "os_name", "platform_machine", "platform_python_implementation",
                "platform_release", "platform_system", "platform_version", "python_full_version", "python_version", "sys_platform")
_PLATFORM_NAMES = ("os_name", "sys_platform", "platform_system", "platform_machine", "platform_release", "platform_version")
_SYSTEMS = {"linux": ("posix", "linux", "Linux"), "macos": ("posix", "darwin", "Darwin"), "windows": ("nt", "win32", "Windows")}
_WINDOWS_MACHINES = {"x86_64": "AMD64", "x86": "x86", "arm64": "ARM64"}


class MarkerTarget(Record):
    """The marker values a target decides (name -> value), what it is called in a sentence, and how to decide more."""

    values: tuple[tuple[str, str], ...]
    label: str  # "Python 3.11 on linux_x86_64", "--python /venv/bin/python"
    python: str  # "3.11": for the fix

    def fix(self, lacking) -> str:
        """How to give the values ``lacking``: the micro version, or the target's interpreter, which knows them all."""
        if set(lacking) <= {"python_full_version", "implementation_version"}:
            return f"Pass the full version, e.g. --python-version {self.python}.Z, or --python PATH of the target's interpreter."
        return "Run compat on the target machine without --python-version, or pass --python PATH of the target's interpreter (resolve, install)."

    @property
    def known(self) -> dict[str, str]:
        return dict(self.values)

    def undecided(self) -> tuple[str, ...]:
        known = self.known
        return tuple(name for name in MARKER_NAMES if name not in known)


def marker_target(python, platform=None) -> MarkerTarget:
    """The marker values of a target.PythonTarget on a target.Platform (None: Linux x86_64, the platform compat covers).

    An interpreter's own values (``python.markers``) are used whole for the Python; its platform values only when the
    platform is the interpreter's own (a --platform for another machine does not share its kernel release)."""
    own = dict(python.markers)
    tag = platform.tag if platform is not None else "linux_x86_64"
    system = platform.system if platform is not None else "linux"
    machine = platform.machine if platform is not None else "x86_64"
    values: dict[str, str] = {"python_version": f"{python.version.major}.{python.version.minor}", "implementation_name": "cpython",
                              "platform_python_implementation": "CPython", "extra": ""}
    if python.full is not None:
        values["python_full_version"] = values["implementation_version"] = str(python.full)
    if system in _SYSTEMS:
        values["os_name"], values["sys_platform"], values["platform_system"] = _SYSTEMS[system]
        values["platform_machine"] = _WINDOWS_MACHINES.get(machine, machine) if system == "windows" else machine
    if own:
        same_platform = _normal_tag(python.markers_platform) == _normal_tag(tag) if platform is not None else True
        values.update({k: v for k, v in own.items() if k not in _PLATFORM_NAMES or same_platform})
        label = python.origin if same_platform else f"{python.origin} on {tag}"
    else:
        label = f"Python {python.full or python.label} on {tag}"
    return MarkerTarget(tuple(sorted(values.items())), label, python.label)


def _normal_tag(tag: str) -> str:
    return tag.strip().lower().replace("-", "_").replace(".", "_")


def decide(marker: Marker, values: Mapping[str, str]) -> tuple[Optional[bool], tuple[str, ...]]:
    """(True/False, ()) when ``values`` decide the marker; (None, the names it needs and they lack) when they do not."""
    missing: list[str] = []
    result = _decide_list(marker._markers, values, missing)  # packaging's parsed form: atoms, 'and'/'or', nested lists
    return result, tuple(dict.fromkeys(missing)) if result is None else ()


def _decide_list(items, values: Mapping[str, str], missing: list[str]) -> Optional[bool]:
    # 'and' binds tighter than 'or': a list of and-groups joined by 'or'
    groups: list[list[Optional[bool]]] = [[]]
    for item in items:
        if isinstance(item, str):
            if item == "or":
                groups.append([])
            continue
        groups[-1].append(_decide_list(item, values, missing) if isinstance(item, list) else _decide_atom(item, values, missing))
    results = [_all(group) for group in groups]
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False


def _all(group: list[Optional[bool]]) -> Optional[bool]:
    if any(r is False for r in group):
        return False
    return None if any(r is None for r in group) else True


def _decide_atom(atom, values: Mapping[str, str], missing: list[str]) -> Optional[bool]:
    lhs, op, rhs = atom
    names = [side.value for side in (lhs, rhs) if type(side).__name__ == "Variable"]
    lacking = [name for name in names if name not in values]
    if lacking:
        missing.extend(lacking)
        return None
    from packaging.markers import Marker

    return Marker(f"{lhs.serialize()} {op.serialize()} {rhs.serialize()}").evaluate(dict(values))
