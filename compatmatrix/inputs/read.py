"""Read pip requirements files (as pip reads them), `pip freeze` output and PEP 751 pylock.toml into an InputSet.

The requirements format follows pip's own reader (pip/_internal/req/req_file.py): lines ending in a backslash are
joined, `#` starts a comment at the line start or after white space, `${VAR}` is expanded from the environment,
options come after the requirement (`--hash`) or stand alone (`-r`, `-c`, `-f`, `-i`, `--extra-index-url`, `--pre`,
`--no-index`, ...), and `-r`/`-c` paths are relative to the file that names them. Nothing is fetched: a remote
`-r https://...` is refused by name. Environment markers are judged for the real target (inputs.markers); includes are read once each, within
one budget of bytes, lines and depth.

Side effects: reads the files named (through ``reader``, so tests can give text directly).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union
from urllib.parse import unquote, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import path_refused, shown
from ..names import canonical_name
from ..record import replace
from ..redact import conceal_variables
from .markers import MarkerTarget, decide, marker_target
from .model import IndexLine, InputError, InputRequirement, InputSet, Origin, checked_name, is_name
from .wheels import check_wheel_target, wheel_name_version

if TYPE_CHECKING:
    from packaging.markers import Marker

    from ..target import Platform, PythonTarget

# packaging.markers and packaging.requirements are imported where a line needs them: together with what they import
# (packaging.tags, logging, platform, dataclasses, inspect) ~20 ms of CPU, a third of the interpreter's own start,
# which compat check -r of a file of NAME==X lines does without (issue 35; tests/test_startup.py)

Reader = Callable[[Path], str]
MAX_DEPTH = 100  # -r inside -r inside ...: pip has no limit of its own (Python's recursion ends it); a chain this long is not a real one
MAX_BYTES = 8 * 1024 * 1024  # all files together (each -r/-c include counted once): no set of requirements files is larger
MAX_LINES = 200_000  # logical lines of all files together

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")  # C0/C1 controls (a tab is white space)
_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"(?P<var>\$\{(?P<name>[A-Z0-9_]+)\})")
_INDEX_OPTIONS = {"-i": "index-url", "--index-url": "index-url", "--extra-index-url": "extra-index-url",
                  "-f": "find-links", "--find-links": "find-links"}
_IGNORED_OPTIONS = {"--trusted-host", "--use-feature", "--only-binary", "--no-binary", "--config-settings", "--global-option",
                    "--progress-bar", "--use-pep517"}  # take a value; do not change what is resolved
_IGNORED_FLAGS = {"--prefer-binary", "--require-hashes", "--no-deps", "--no-build-isolation"}
_REQUIREMENT_OPTIONS = {"--hash", "--config-settings", "--global-option"}  # what pip applies to the requirement on the line


def _read_text(path: Path) -> str:
    why = path_refused(str(path))
    if why or not path.is_file():
        raise InputError(f"{shown(str(path), 160)} {why or 'is not a regular file'}.", "Pass the path of a requirements file, a pip freeze list or a pylock.toml.")
    if path.stat().st_size > MAX_BYTES:
        raise InputError(f"{path} is larger than {MAX_BYTES // (1024 * 1024)} MiB, which no requirements file is.", "Pass the requirements file itself.")
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}).", "Save it as UTF-8, as pip expects.") from None
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror}).", "Check the path and its permissions.") from None


class _Budget:
    """What one read may still take: bytes and lines of all files together, and the files already read (each once)."""

    __slots__ = ("bytes", "lines", "read")

    def __init__(self) -> None:
        self.bytes = MAX_BYTES
        self.lines = MAX_LINES
        self.read: set[tuple[str, bool]] = set()

    def take(self, path: Path, text: str) -> None:
        self.bytes -= len(text.encode("utf-8", "surrogatepass"))
        self.lines -= text.count("\n")
        if self.bytes < 0 or self.lines < 0:
            raise InputError(f"{path}: the files and their -r/-c includes together pass {MAX_BYTES // (1024 * 1024)} MiB or {MAX_LINES:,} lines, "
                             "which no set of requirements files does.", "Pass the requirements files themselves.")


def read_inputs(paths: Sequence[str], python: Union[PythonTarget, Version, None] = None, reader: Reader = _read_text,
                platform: Optional[Platform] = None) -> InputSet:
    """Read every file (requirements/freeze or pylock.toml) and combine them, markers judged for the target: ``python``
    is a target.PythonTarget (its interpreter's own marker values when it has them) or a bare X.Y Version, ``platform``
    a target.Platform (None: Linux x86_64). A marker the target does not decide leaves its line out, said in
    ``InputSet.warnings``; a wheel URL not built for the target is refused, as pip refuses it."""
    requirements: list[InputRequirement] = []
    indexes: list[IndexLine] = []
    skipped: list[str] = []
    warnings: list[str] = []
    state = {"pre": False, "budget": _Budget()}
    kinds = set()
    for name in paths:
        path = Path(name)
        if _is_pylock(path):
            kinds.add("pylock")
            from .pylock import read_pylock

            text = reader(path)
            state["budget"].take(path, text)
            requirements += read_pylock(path, text)
        else:
            first = len(requirements)
            _read_requirements(path, reader, requirements, indexes, state, constraint=False, depth=0, seen=())
            kinds.add("freeze" if _looks_frozen(requirements[first:]) else "requirements")
    kept = []
    python_target = _python_target(python) if python is not None else None
    environment = marker_target(python_target, platform) if python_target is not None else None
    values = environment.known if environment is not None else {}
    for requirement in requirements:
        try:
            if _applies(requirement, environment, values, python_target, platform, warnings, skipped):
                kept.append(requirement)
        except InputError as exc:
            if not requirement.variables:
                raise
            raise _concealed(exc, requirement.origin, requirement.variables) from None
    kind = "pylock" if kinds == {"pylock"} else "freeze" if kinds == {"freeze"} else "requirements"
    return InputSet(tuple(kept), tuple(indexes), state["pre"], tuple(str(p) for p in paths), tuple(skipped), kind, tuple(dict.fromkeys(warnings)))


def _applies(requirement: InputRequirement, environment: Optional[MarkerTarget], values: Mapping[str, str], python_target: Optional[PythonTarget],
             platform: Optional[Platform], warnings: list[str], skipped: list[str]) -> bool:
    """Whether ``requirement`` applies to the target; what is left out or ignored is said in ``warnings`` / ``skipped``,
    naming a ${VAR} the line expanded, never its value."""
    def say(text: str) -> str:
        return _conceal(text, requirement.variables) if requirement.variables else text

    warnings += [say(f"{requirement.origin}: pip ignores {option} after a requirement (only --hash, --config-settings and --global-option "
                     "apply to the requirement on the line); put it on a line of its own if it was meant") for option in requirement.ignored_options]
    if environment is None:  # no target: every line, as written
        return True
    if requirement.marker is not None:
        from packaging.markers import UndefinedComparison, UndefinedEnvironmentName

        try:
            applies, lacking = decide(requirement.marker, values)
        except (UndefinedComparison, UndefinedEnvironmentName) as exc:
            raise InputError(f"{requirement.origin}: the marker '{shown(str(requirement.marker))}' cannot be evaluated ({shown(str(exc), 100)}).",
                             "Write the marker with PEP 508 names, e.g. python_version < '3.10'.") from None
        if applies is None:
            warnings.append(say(f"{requirement.origin}: whether {requirement.name} applies depends on {', '.join(lacking)}, which {environment.label} "
                                f"does not decide ({shown(str(requirement.marker))}): compat leaves the line out rather than guess. {environment.fix(lacking)}"))
            return False
        if not applies:
            skipped.append(say(f"{requirement.origin}: {requirement.name} does not apply to {environment.label} ({shown(str(requirement.marker))})"))
            return False
    if requirement.url and requirement.origin.line:  # a requirements line; a pylock entry lists a wheel per target
        check_wheel_target(requirement, python_target, platform)
    return True


def _python_target(python: Union[PythonTarget, Version]) -> PythonTarget:
    """A target.PythonTarget for ``python`` (a bare Version is --python-version X.Y: no interpreter was asked)."""
    if isinstance(python, Version):
        from ..target import PythonTarget

        return PythonTarget(version=Version(f"{python.major}.{python.minor}"), full=None, origin=f"Python {python.major}.{python.minor}")
    return python


def _is_pylock(path: Path) -> bool:
    return path.name == "pylock.toml" or bool(re.fullmatch(r"pylock\.[^.]+\.toml", path.name))


def _looks_frozen(requirements: Iterable[InputRequirement]) -> bool:
    items = list(requirements)
    return bool(items) and all(r.pinned is not None or r.url for r in items)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's preprocessing: join continued lines, drop comments, expand ${VAR}; (first line number, text) pairs."""
    return [(number, line) for number, line, _ in _expanded_lines(text)]


Expansions = tuple[tuple[str, str], ...]  # (variable name, its value) for each ${VAR} a line expanded


def _expanded_lines(text: str) -> list[tuple[int, str, Expansions]]:
    """logical_lines, with the ${VAR}s each line expanded (their values are never shown: _concealed)."""
    joined: list[tuple[int, str]] = []
    buffer: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not buffer:
            start = number
        if line.endswith("\\") and not _COMMENT.search(line):
            buffer.append(line[:-1])
            continue
        if _COMMENT.match(line) and buffer:  # pip: a comment line ends a continuation
            joined.append((start, "".join(buffer)))
            buffer = []
            continue
        buffer.append(line)
        joined.append((start, "".join(buffer)))
        buffer = []
    if buffer:
        joined.append((start, "".join(buffer)))
    result = []
    for number, line in joined:
        line = _COMMENT.sub("", line).strip()
        if not line:
            continue
        expansions = []
        for match in _ENV_VAR.finditer(line):
            value = os.environ.get(match.group("name"))
            if value is not None:
                line = line.replace(match.group("var"), value)
                expansions.append((match.group("name"), value))
        result.append((number, line, tuple(expansions)))
    return result


_conceal = conceal_variables  # the one rule (redact.py): a ${VAR}'s value is named, never shown


def _concealed(error: InputError, origin: Origin, expansions: Expansions) -> InputError:
    """``error`` of a line that expanded ${VAR}s, their values replaced by their names (_conceal)."""
    def conceal(text: str) -> str:
        return _conceal(text, expansions)

    names = ", ".join(dict.fromkeys("${" + name + "}" for name, _ in expansions))
    return InputError(f"{conceal(error.message).rstrip('.')} ({origin} expands {names} from the environment; the value is not shown).",
                      conceal(error.fix))


class Include:
    """The line that includes a file (-r/-c): where it is and what it says, for every message about the included file."""

    __slots__ = ("origin", "option", "value")

    def __init__(self, origin: Origin, option: str, value: str) -> None:
        self.origin, self.option, self.value = origin, option, value

    def __str__(self) -> str:
        return f"{self.origin}: '{self.option} {shown(self.value, 120)}'"


def _read_requirements(path: Path, reader: Reader, requirements: list, indexes: list, state: dict, constraint: bool, depth: int,
                       seen: tuple[tuple[str, str], ...], include: Optional[Include] = None) -> None:
    """``seen``: (real path, path as named) of each file on the chain of includes down to this one; ``include``: the
    line that names this file (None for a file named on the command line)."""
    key = _real_key(path, include)
    _check_chain(key, path, include, depth, seen)
    budget: _Budget = state["budget"]
    if (key, constraint) in budget.read:  # a diamond of includes: pip would read the same lines again, to the same effect
        return
    budget.read.add((key, constraint))
    text = _read_included(path, reader, include)
    budget.take(path, text)
    for number, line, expansions in _expanded_lines(text):
        origin = Origin(str(path), number)
        control = _CONTROL.search(line)
        if control is not None:
            raise InputError(f"{origin}: the line holds the control character U+{ord(control.group()):04X}, which no requirement has.",
                             "Remove it (pip reads one requirement or option per line).")
        before = len(indexes)
        first = len(requirements)
        try:
            _read_line(line, origin, path, reader, requirements, indexes, state, constraint, depth, (*seen, (key, str(path))))
        except InputError as exc:
            if not expansions:
                raise
            raise _concealed(exc, origin, expansions) from None  # a ${VAR}'s value is not shown, its name is
        if expansions:
            indexes[before:] = [replace(item, written=_conceal(item.url, expansions)) if item.origin == origin else item for item in indexes[before:]]
            requirements[first:] = [replace(item, variables=expansions) if item.origin == origin else item for item in requirements[first:]]


def _check_chain(key: str, path: Path, include: Optional[Include], depth: int, seen: tuple[tuple[str, str], ...]) -> None:
    """InputError for a file already on the chain of includes (a loop) or one nested deeper than MAX_DEPTH."""
    chain = [named for _, named in seen]
    if key in (real for real, _ in seen):
        start = next(index for index, (real, _) in enumerate(seen) if real == key)
        loop = " -> ".join([*chain[start:], str(path)])
        raise InputError(f"{include}: {path} is already being read ({loop}): the includes loop, so pip would never finish reading them.",
                         "Remove the include that loops back.")
    if depth > MAX_DEPTH:
        raise InputError(f"{include}: a chain of {depth} nested includes (-r inside -r ..., {chain[0]} -> ... -> {path}) passes compat's limit "
                         f"of {MAX_DEPTH} levels; the files are all different (no loop), but no real set of requirements nests this deep.",
                         "Name some of the nested files directly (compat check -r A -r B ...).")


def _read_included(path: Path, reader: Reader, include: Optional[Include]) -> str:
    """The file's text; one it includes that cannot be read is said as the include line's problem."""
    try:
        return reader(path)
    except InputError as exc:
        if include is None:
            raise
        raise InputError(f"{include} names a file that cannot be read: {exc.message.rstrip('.')}.",
                         f"Correct the {include.option} line in {include.origin.path}, or create the file it names.") from None


def _read_line(line: str, origin: Origin, path: Path, reader: Reader, requirements: list, indexes: list, state: dict, constraint: bool,
               depth: int, seen: tuple[tuple[str, str], ...]) -> None:
    """One logical line: a requirement (with its options) or an option line."""
    requirement_text, option_text = _break_args_options(line)
    try:
        options = shlex.split(option_text, posix=True)
    except ValueError as exc:
        raise InputError(f"{origin}: the options cannot be split into words ({exc}).", "Close the quote or remove it.") from None
    if not requirement_text:
        _option_line(options, origin, path, reader, requirements, indexes, state, constraint, depth, seen)
        return
    requirements.append(parse_requirement(requirement_text, origin, options, constraint))


def _break_args_options(line: str) -> tuple[str, str]:
    """pip's break_args_options: the requirement is every word before the first that starts with '-' (split on
    spaces only, so a marker's quotes survive); the options are the rest, split later like a shell."""
    words = line.split(" ")
    for index, word in enumerate(words):
        if word.startswith("-"):
            return " ".join(words[:index]).strip(), " ".join(words[index:])
    return line.strip(), ""


def _option_line(tokens: list[str], origin: Origin, path: Path, reader: Reader, requirements: list, indexes: list, state: dict,
                 constraint: bool, depth: int, seen: tuple[tuple[str, str], ...]) -> None:
    option, value, rest = _take_option(tokens, origin)
    if option in ("-r", "--requirement", "-c", "--constraint"):
        included = path.parent / _included_path(value, Include(origin, option, value))  # an absolute path stays itself
        _read_requirements(included, reader, requirements, indexes, state, constraint or option in ("-c", "--constraint"), depth + 1, seen,
                           Include(origin, option, value))
    elif option in _INDEX_OPTIONS:
        _check_url(value, origin, option)
        indexes.append(IndexLine(_INDEX_OPTIONS[option], value, origin))
    elif option == "--no-index":
        indexes.append(IndexLine("no-index", "", origin))
    elif option == "--pre":
        state["pre"] = True
    elif option in ("-e", "--editable"):
        requirements.append(parse_requirement(value, origin, [], constraint, editable=True))
    elif option in _IGNORED_OPTIONS or option in _IGNORED_FLAGS:
        pass
    else:
        raise InputError(f"{origin}: '{shown(option)}' is not an option of pip's requirements format.",
                         "See pip's 'Requirements File Format'; compat reads what pip reads.")
    if rest:
        _option_line(rest, origin, path, reader, requirements, indexes, state, constraint, depth, seen)


def _included_path(value: str, include: Include) -> Path:
    """The local path an include names, as pip reads it (req_file.get_file_content, pypa/pip 6d309205): a path, or a
    file: URL whose host is empty or 'localhost' (pip's url_to_path, utils/urls.py: "non-local file URIs are not
    supported on this platform" otherwise); an http(s) or other URL is refused by name, as compat fetches nothing."""
    scheme = re.match(r"^([a-z][a-z0-9+.-]*):(//)?", value, re.IGNORECASE)
    if scheme is None or (scheme.group(1).lower() not in ("file", "http", "https") and not scheme.group(2)):
        return Path(value)  # pip opens anything but http(s) and file URLs as a path ("sub:dir/r.txt" too)
    if scheme.group(1).lower() != "file":
        raise InputError(f"{include} names a remote file, which compat does not download.", "Download it and name the local copy.")
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise InputError(f"{include} is not a file URL ({exc}).", f"Correct the {include.option} line.") from None
    if parts.netloc not in ("", "localhost"):
        raise InputError(f"{include} names a file on another host ({shown(parts.netloc, 60)}), which pip refuses "
                         "(non-local file URIs are not supported).", "Copy the file here and name its local path.")
    return Path(unquote(parts.path))


def _real_key(path: Path, include: Optional[Include]) -> str:
    """The file's real path (what makes two names of one file the same include), or one sentence naming the include."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError) as exc:
        what = f"{include} names" if include is not None else "The path"
        raise InputError(f"{what} {shown(str(path), 160)}, which cannot be looked at ({shown(str(exc), 80)}).",
                         "Name the file by a shorter path that exists.") from None


_VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", *_INDEX_OPTIONS, *_IGNORED_OPTIONS}


def _take_option(tokens: list[str], origin: Origin) -> tuple[str, str, list[str]]:
    """(option, value, the remaining tokens) for `-r FILE`, `-rFILE`, `--requirement=FILE`, `--pre`."""
    first = tokens[0]
    if "=" in first and first.startswith("--"):
        option, value = first.split("=", 1)
        return option, value, tokens[1:]
    if first in _VALUE_OPTIONS:
        if len(tokens) < 2:
            raise InputError(f"{origin}: '{first}' needs a value.", f"Write it as '{first} VALUE'.")
        return first, tokens[1], tokens[2:]
    if len(first) > 2 and first[:2] in _VALUE_OPTIONS and not first.startswith("--"):  # -rFILE, -fURL
        return first[:2], first[2:], tokens[1:]
    return first, "", tokens[1:]


def _check_url(value: str, origin: Origin, option: str) -> None:
    if any(ord(c) < 32 for c in value):
        raise InputError(f"{origin}: the {option} value has a control character.", "Write the URL on one line.")
    try:
        urlsplit(value)
    except ValueError as exc:
        raise InputError(f"{origin}: '{shown(value)}' is not a URL ({exc}).", f"Correct the {option} line.") from None


def parse_requirement(text: str, origin: Origin, options: Sequence[str] = (), constraint: bool = False, editable: bool = False) -> InputRequirement:
    """One requirement line: PEP 508 (name, extras, specifier, marker, `name @ URL`), a bare wheel URL or path, or -e."""
    hashes, ignored = _line_options(options, origin)
    text = text.strip()
    if editable:
        return _from_location(text, origin, hashes, constraint, editable, ignored)
    text, marker = _marker_split(text, origin)
    if _is_bare_location(text):
        return replace(_from_location(text, origin, hashes, constraint, editable, ignored), marker=marker)
    simple = _simple_requirement(text, origin, marker, hashes, constraint, ignored)
    if simple is not None:
        return simple
    from packaging.markers import InvalidMarker
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise InputError(f"{origin}: '{_line_start(text)}' is not a requirement pip accepts ({_why(exc)}).",
                         "Write it like 'torch==2.7.0' or 'intel-extension-for-pytorch>=2.5'.") from None
    except (InvalidSpecifier, InvalidMarker, InvalidVersion, ValueError) as exc:
        raise InputError(f"{origin}: '{_line_start(text)}' cannot be read ({_why(exc)}).", "Correct the line.") from None
    name = checked_name(requirement.name, origin)
    url = requirement.url or ""
    specifier, label = _pin_of(name, requirement.specifier, url, origin)
    return InputRequirement(name, specifier, origin, marker, frozenset(requirement.extras), url, hashes, constraint,
                            local_label=label, ignored_options=ignored)


def _simple_requirement(text: str, origin: Origin, marker: Any, hashes: Any, constraint: bool, ignored: Any) -> Optional[InputRequirement]:
    """NAME, or NAME OP VERSION[,OP VERSION...], read without packaging's Requirement parser: what Requirement would
    make of it (test_inputs.py); None for anything else, or a specifier Requirement should word the problem of."""
    simple = _SIMPLE.fullmatch(text)
    if simple is None:
        return None
    try:
        specifier = SpecifierSet(simple.group(2) or "")
    except InvalidSpecifier:
        return None  # Requirement says why, in its own words
    return InputRequirement(checked_name(simple.group(1), origin), specifier, origin, marker, frozenset(), "", hashes, constraint,
                            local_label=_label_of(specifier), ignored_options=ignored)


def _pin_of(name: str, specifier: SpecifierSet, url: str, origin: Origin) -> tuple[SpecifierSet, str]:
    """A requirement's specifier and local label: for ``name @ URL`` of a wheel, that wheel's version; InputError for a
    wheel of another project (pip: "inconsistent name")."""
    wheel = wheel_name_version(url, origin) if url else None
    if wheel is None:
        return specifier, _label_of(specifier)
    if canonical_name(wheel[0]) != canonical_name(name):  # pip: "inconsistent name"
        raise InputError(f"{origin}: {name} @ … names the wheel of another project ({wheel[0]}): pip refuses it (inconsistent name).",
                         f"Name the project the file is of, or the file of {name}.")
    version = wheel[1]
    return SpecifierSet(f"=={version}"), f"+{version.local}" if version.local else ""


# pip's is_url (pip/_internal/vcs/versioncontrol.py): these schemes and its VCS backends' (vcs/git.py, mercurial.py,
# subversion.py, bazaar.py `schemes`), at pypa/pip 6d309205
_PIP_URL_SCHEMES = frozenset({"http", "https", "file", "ftp",
                              *(f"git+{s}" for s in ("http", "https", "ssh", "git", "file")),
                              *(f"hg+{s}" for s in ("file", "http", "https", "ssh", "static-http")),
                              *(f"svn+{s}" for s in ("ssh", "http", "https", "svn", "file")),
                              *(f"bzr+{s}" for s in ("http", "https", "ssh", "sftp", "ftp", "lp", "file"))})


def _is_pip_url(text: str) -> bool:
    try:
        return urlsplit(text).scheme.lower() in _PIP_URL_SCHEMES
    except ValueError:
        return False


# A requirement that is a PEP 508 name alone or with version specifiers and nothing else (no extras, URL, parentheses,
# spaces inside or between the specifiers): its name and packaging's SpecifierSet of the rest are what
# packaging.requirements.Requirement gives for it; every other line is read by Requirement.
_OPERATOR_VERSION = r"(?:~=|===|==|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+"
_SIMPLE = re.compile(rf"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*({_OPERATOR_VERSION}(?:,{_OPERATOR_VERSION})*)?")


def _marker_split(text: str, origin: Origin) -> tuple[str, Optional[Marker]]:
    """pip's split of a requirement line from its marker (parse_req_from_line in pip/_internal/req/constructors.py,
    pypa/pip 6d309205, 2026-08-20): a line that is itself a URL ends at its first '; ', any other line at its first ';'
    (so `name @ URL; marker` with no space before the ';' is read, which packaging's PEP 508 grammar alone refuses).
    The requirement part is then read by packaging, the marker part by packaging.markers."""
    separator = "; " if _is_pip_url(text) else ";"
    if separator not in text:
        return text, None
    requirement, marker_text = text.split(separator, 1)
    marker_text = marker_text.strip()
    if not marker_text:
        return requirement.strip(), None
    from packaging.markers import InvalidMarker, Marker

    try:
        return requirement.strip(), Marker(marker_text)
    except InvalidMarker as exc:
        raise InputError(f"{origin}: '{_line_start(requirement.strip())}' has a marker pip refuses ({_why(exc)}).",
                         "Write the marker with PEP 508 names, e.g. python_version < '3.10'.") from None


_NAME_START = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")


def _line_start(text: str) -> str:
    """What an error quotes of a line that is not a requirement: the name it starts with, not the rest. The file may
    not be a requirements file at all (`-r ~/.netrc`, a .env): its contents must not reach a terminal or a CI log."""
    match = _NAME_START.match(text)
    start = match.group(0) if match else ""
    return start if start == text else f"{start}..."


def _why(exc: Exception) -> str:
    """packaging's reason, without the copy of the line it adds under it (see _line_start)."""
    return shown(str(exc).split("\n", 1)[0], 100)


_LINE_FLAGS = {"--pre", "--no-index", *_IGNORED_FLAGS}


def _line_options(options: Sequence[str], origin: Origin) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The hashes of a requirement's line, and pip's other line options on it, which pip parses and ignores (by name:
    their values may hold credentials); an option pip does not know is refused, as pip refuses it."""
    hashes = []
    ignored: list[str] = []
    tokens = list(options)
    while tokens:
        token = tokens.pop(0)
        option = token.split("=", 1)[0] if token.startswith("--") else token[:2] if token[:2] in _VALUE_OPTIONS else token
        if option == "--hash":
            if token == "--hash" and not tokens:
                raise InputError(f"{origin}: '--hash' needs a value.", "Write --hash=sha256:<64 hex digits>.")
            value = token.split("=", 1)[1] if "=" in token else tokens.pop(0)
        elif option in _REQUIREMENT_OPTIONS or option in _VALUE_OPTIONS:
            if token == option and tokens:
                tokens.pop(0)
            if option not in _REQUIREMENT_OPTIONS:
                ignored.append(option)
            continue
        elif option in _LINE_FLAGS:
            ignored.append(option)
            continue
        else:
            raise InputError(f"{origin}: '{shown(token)}' is not an option pip takes after a requirement.", "Use --hash=sha256:HEX (or move the option to its own line).")
        algorithm, _, digest = value.partition(":")
        if not digest or not re.fullmatch(r"[0-9a-fA-F]+", digest):
            raise InputError(f"{origin}: '--hash={shown(value)}' is not ALGORITHM:HEX.", "Write --hash=sha256:<64 hex digits>.")
        hashes.append(f"{algorithm.lower()}:{digest.lower()}")
    return tuple(hashes), tuple(dict.fromkeys(ignored))


def _label_of(specifier: SpecifierSet) -> str:
    for item in specifier:
        if item.operator in ("==", "===") and "+" in item.version:
            return "+" + item.version.split("+", 1)[1]
    return ""


def _is_bare_location(text: str) -> bool:
    if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@", text):
        return False  # name @ URL: PEP 508
    return bool(re.match(r"^[a-z][a-z0-9+.-]*://", text, re.IGNORECASE)) or text.startswith((".", "/")) or text.endswith((".whl", ".zip", ".tar.gz"))


def _from_location(text: str, origin: Origin, hashes: tuple[str, ...], constraint: bool, editable: bool,
                   ignored: tuple[str, ...] = ()) -> InputRequirement:
    wheel = wheel_name_version(text, origin)
    if wheel is not None:
        name, version = wheel
        return InputRequirement(checked_name(name, origin), SpecifierSet(f"=={version}"), origin, url=text, hashes=hashes, constraint=constraint,
                                local_label=f"+{version.local}" if version.local else "", ignored_options=ignored)
    egg = re.search(r"[#&]egg=([A-Za-z0-9_.\-]+)", text)
    name = egg.group(1) if egg else Path(urlsplit(text).path.rstrip("/")).name or text
    what = "an editable install" if editable else "a source location"
    if not egg and not editable and "://" not in text:
        raise InputError(f"{origin}: '{shown(text)}' is {what} whose package name compat cannot tell.", "Name it: 'NAME @ URL'.")
    if not is_name(name):  # `-e .`, `-e git+https://...`: pip takes the name from the project itself
        name = "unnamed-project"
    return InputRequirement(name, SpecifierSet(), origin, url=text, hashes=hashes, constraint=constraint, ignored_options=ignored)
