"""What a requirements file, a freeze list or a pylock.toml says, as frozen values (no I/O here)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..errors import CompatError, shown
from ..record import Record

if TYPE_CHECKING:
    from packaging.markers import Marker  # imported where a marker is read (inputs/read.py)


class InputError(CompatError):
    """A requirements/lock file that cannot be read as pip would read it: names the file and line (exit 2)."""


_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)


def is_name(text: object) -> bool:
    """Whether ``text`` is a PEP 508 project name, whole (no newline, control character or space anywhere)."""
    return isinstance(text, str) and _NAME.fullmatch(text) is not None


def checked_name(text: object, where: object) -> str:
    """A project name typed at the edge: the name itself, or an InputError naming ``where`` (a file and line or key)."""
    if not is_name(text):
        raise InputError(f"{where}: {shown(str(text), 60)!r} is not a project name (PEP 508: letters, digits, '.', '_' and '-').",
                         "Correct the name in the file.")
    return str(text)


class Origin(Record):
    """Where a line came from: the file and the line number (1-based, the first line of a continued line)."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class IndexLine(Record):
    """An index option of a file: --index-url, --extra-index-url, -f/--find-links or --no-index."""

    kind: str  # "index-url" | "extra-index-url" | "find-links" | "no-index"
    url: str
    origin: Origin
    written: str = ""  # the URL with its ${VAR}s unexpanded, when it has any: what messages show (a value may be a token)


class InputRequirement(Record):
    """One requirement as written: the name in any spelling, the specifier, marker, extras, URL and hashes."""

    name: str  # as written (intel_extension_for_pytorch, oneccl-bind-pt, torch_ccl, ...)
    specifier: SpecifierSet
    origin: Origin
    marker: Optional[Marker] = None
    extras: frozenset[str] = frozenset()
    url: str = ""  # name @ URL, or a bare wheel URL / path
    hashes: tuple[str, ...] = ()  # "sha256:<hex>" as written (--hash or a pylock entry)
    constraint: bool = False  # from a -c file: limits versions, does not ask for the package
    index: str = ""  # pylock: the index the lock names for this package
    local_label: str = ""  # "+cpu", "+xpu", ... taken from the pin or the wheel file name
    ignored_options: tuple[str, ...] = ()  # pip's line options after the requirement (-f, -i, ...), which pip ignores
    # (NAME, value) of each ${NAME} its line expanded: pip gets the value, no one sees it (not in a repr: crash reports)
    variables: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # without the variables' values
        return f"InputRequirement({', '.join(f'{name}={getattr(self, name)!r}' for name in self._fields if name != 'variables')})"

    @property
    def pinned(self) -> Optional[Version]:
        """The version of an exact pin (== X or === X, or a wheel URL's version), else None."""
        items = list(self.specifier)
        if len(items) == 1 and items[0].operator in ("==", "===") and not items[0].version.endswith(".*"):
            try:
                return Version(items[0].version)
            except ValueError:
                return None
        return None


class InputSet(Record):
    """Everything the files said, in file order, with the options that apply to all of them."""

    requirements: tuple[InputRequirement, ...]
    indexes: tuple[IndexLine, ...] = ()
    pre: bool = False
    files: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # lines read but not applying to the target (markers), with why
    kind: str = "requirements"  # "requirements" | "freeze" | "pylock"
    warnings: tuple[str, ...] = ()  # what the target could not decide (markers) and options pip ignores, each naming its line
