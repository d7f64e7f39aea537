"""Read pip requirements files (as pip reads them), `pip freeze` output and PEP 751 pylock.toml into an InputSet.

The requirements format follows pip's own reader (pip/_internal/req/req_file.py): lines ending in a backslash are
joined, `#` starts a comment at the line start or after white space, `${VAR}` is expanded from the environment,
options come after the requirement (`--hash`) or stand alone (`-r`, `-c`, `-f`, `-i`, `--extra-index-url`, `--pre`,
`--no-index`, ...), and `-r`/`-c` paths are relative to the file that names them. Nothing is fetched: a remote
`-r https://...` is refused by name. Environment markers are evaluated for the target Python on Linux x86_64.

Side effects: reads the files named (through ``reader``, so tests can give text directly).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import path_refused, shown
from .model import IndexLine, InputError, InputRequirement, InputSet, Origin

Reader = Callable[[Path], str]
MAX_DEPTH = 20  # -r inside -r inside ...: pip has no limit, but a cycle must end
MAX_BYTES = 8 * 1024 * 1024  # a requirements file larger than this is not one

_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"(?P<var>\$\{(?P<name>[A-Z0-9_]+)\})")
_INDEX_OPTIONS = {"-i": "index-url", "--index-url": "index-url", "--extra-index-url": "extra-index-url",
                  "-f": "find-links", "--find-links": "find-links"}
_IGNORED_OPTIONS = {"--trusted-host", "--use-feature", "--only-binary", "--no-binary", "--config-settings", "--global-option",
                    "--progress-bar", "--use-pep517"}  # take a value; do not change what is resolved
_IGNORED_FLAGS = {"--prefer-binary", "--require-hashes", "--no-deps", "--no-build-isolation"}


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


def target_environment(python: Version) -> dict[str, str]:
    """PEP 508 marker values for CPython ``python`` on Linux x86_64, the platform compatmatrix covers."""
    return {"python_version": f"{python.major}.{python.minor}", "python_full_version": f"{python.major}.{python.minor}.0",
            "implementation_name": "cpython", "implementation_version": f"{python.major}.{python.minor}.0",
            "platform_python_implementation": "CPython", "os_name": "posix", "sys_platform": "linux", "platform_system": "Linux",
            "platform_machine": "x86_64", "platform_release": "", "platform_version": "", "extra": ""}


def read_inputs(paths: Sequence[str], python: Optional[Version] = None, reader: Reader = _read_text) -> InputSet:
    """Read every file (requirements/freeze or pylock.toml) and combine them, markers evaluated for ``python``."""
    requirements: list[InputRequirement] = []
    indexes: list[IndexLine] = []
    skipped: list[str] = []
    state = {"pre": False}
    kinds = set()
    for name in paths:
        path = Path(name)
        if _is_pylock(path):
            kinds.add("pylock")
            from .pylock import read_pylock

            requirements += read_pylock(path, reader(path))
        else:
            _read_requirements(path, reader, requirements, indexes, state, constraint=False, depth=0, seen=())
            kinds.add("freeze" if _looks_frozen(requirements) else "requirements")
    environment = target_environment(python) if python is not None else None
    kept = []
    for requirement in requirements:
        if requirement.marker is not None and environment is not None:
            try:
                applies = requirement.marker.evaluate(environment)
            except (UndefinedComparison, UndefinedEnvironmentName) as exc:
                raise InputError(f"{requirement.origin}: the marker '{requirement.marker}' cannot be evaluated ({exc}).",
                                 "Write the marker with PEP 508 names, e.g. python_version < '3.10'.") from None
            if not applies:
                skipped.append(f"{requirement.origin}: {requirement.name} does not apply to Python {python} on Linux x86_64 ({requirement.marker})")
                continue
        kept.append(requirement)
    kind = "pylock" if kinds == {"pylock"} else "freeze" if kinds == {"freeze"} else "requirements"
    return InputSet(tuple(kept), tuple(indexes), state["pre"], tuple(str(p) for p in paths), tuple(skipped), kind)


def _is_pylock(path: Path) -> bool:
    return path.name == "pylock.toml" or bool(re.fullmatch(r"pylock\.[^.]+\.toml", path.name))


def _looks_frozen(requirements: Iterable[InputRequirement]) -> bool:
    items = list(requirements)
    return bool(items) and all(r.pinned is not None or r.url for r in items)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's preprocessing: join continued lines, drop comments, expand ${VAR}; (first line number, text) pairs."""
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
        for match in _ENV_VAR.finditer(line):
            value = os.environ.get(match.group("name"))
            if value is not None:
                line = line.replace(match.group("var"), value)
        result.append((number, line))
    return result


def _read_requirements(path: Path, reader: Reader, requirements: list, indexes: list, state: dict, constraint: bool, depth: int,
                       seen: tuple[str, ...]) -> None:
    key = os.path.realpath(path)
    if key in seen or depth > MAX_DEPTH:
        raise InputError(f"{path} includes itself (through -r/-c), so it never ends.", "Remove the include that loops back.")
    text = reader(path)
    for number, line in logical_lines(text):
        origin = Origin(str(path), number)
        requirement_text, option_text = _break_args_options(line)
        try:
            options = shlex.split(option_text, posix=True)
        except ValueError as exc:
            raise InputError(f"{origin}: the options cannot be split into words ({exc}).", "Close the quote or remove it.") from None
        if not requirement_text:
            _option_line(options, origin, path, reader, requirements, indexes, state, constraint, depth, (*seen, key))
            continue
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
                 constraint: bool, depth: int, seen: tuple[str, ...]) -> None:
    option, value, rest = _take_option(tokens, origin)
    if option in ("-r", "--requirement", "-c", "--constraint"):
        if re.match(r"^[a-z][a-z0-9+.-]*://", value, re.IGNORECASE) and not value.startswith("file://"):
            raise InputError(f"{origin}: '{option} {shown(value)}' names a remote file, which compat does not download.",
                             "Download it and name the local copy.")
        included = Path(unquote(urlsplit(value).path) if value.startswith("file://") else value)
        if not included.is_absolute():
            included = path.parent / included
        _read_requirements(included, reader, requirements, indexes, state, constraint or option in ("-c", "--constraint"), depth + 1, seen)
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
    hashes = _hashes(options, origin)
    text = text.strip()
    if editable or _is_bare_location(text):
        return _from_location(text, origin, hashes, constraint, editable)
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise InputError(f"{origin}: '{shown(text)}' is not a requirement pip accepts ({shown(str(exc), 100)}).",
                         "Write it like 'torch==2.7.0' or 'intel-extension-for-pytorch>=2.5'.") from None
    except (InvalidSpecifier, InvalidMarker, InvalidVersion, ValueError) as exc:
        raise InputError(f"{origin}: '{shown(text)}' cannot be read ({shown(str(exc), 100)}).", "Correct the line.") from None
    specifier = requirement.specifier
    url = requirement.url or ""
    label = _label_of(specifier)
    if url:
        wheel = _wheel_name_version(url)
        if wheel is not None:
            version = wheel[1]
            specifier = SpecifierSet(f"=={version}")
            label = f"+{version.local}" if version.local else ""
    return InputRequirement(requirement.name, specifier, origin, requirement.marker, frozenset(requirement.extras), url, hashes, constraint,
                            local_label=label)


def _hashes(options: Sequence[str], origin: Origin) -> tuple[str, ...]:
    hashes = []
    tokens = list(options)
    while tokens:
        token = tokens.pop(0)
        if token.startswith("--hash="):
            value = token.split("=", 1)[1]
        elif token == "--hash" and tokens:
            value = tokens.pop(0)
        elif token in ("--config-settings", "--global-option") and tokens:
            tokens.pop(0)
            continue
        elif token.startswith(("--config-settings=", "--global-option=")):
            continue
        else:
            raise InputError(f"{origin}: '{shown(token)}' is not an option pip takes after a requirement.", "Use --hash=sha256:HEX (or move the option to its own line).")
        algorithm, _, digest = value.partition(":")
        if not digest or not re.fullmatch(r"[0-9a-fA-F]+", digest):
            raise InputError(f"{origin}: '--hash={shown(value)}' is not ALGORITHM:HEX.", "Write --hash=sha256:<64 hex digits>.")
        hashes.append(f"{algorithm.lower()}:{digest.lower()}")
    return tuple(hashes)


def _label_of(specifier: SpecifierSet) -> str:
    for item in specifier:
        if item.operator in ("==", "===") and "+" in item.version:
            return "+" + item.version.split("+", 1)[1]
    return ""


def _is_bare_location(text: str) -> bool:
    if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@", text):
        return False  # name @ URL: PEP 508
    return bool(re.match(r"^[a-z][a-z0-9+.-]*://", text, re.IGNORECASE)) or text.startswith((".", "/")) or text.endswith((".whl", ".zip", ".tar.gz"))


def _wheel_name_version(url: str) -> Optional[tuple[str, Version]]:
    """(name, version with its local label) from a wheel URL or path; None when it is not a wheel file name."""
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1]).split("#", 1)[0]
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    try:
        return parts[0], Version(parts[1])
    except (InvalidVersion, ValueError):
        return None


def _from_location(text: str, origin: Origin, hashes: tuple[str, ...], constraint: bool, editable: bool) -> InputRequirement:
    wheel = _wheel_name_version(text)
    if wheel is not None:
        name, version = wheel
        return InputRequirement(name, SpecifierSet(f"=={version}"), origin, url=text, hashes=hashes, constraint=constraint,
                                local_label=f"+{version.local}" if version.local else "")
    egg = re.search(r"[#&]egg=([A-Za-z0-9_.\-]+)", text)
    name = egg.group(1) if egg else Path(urlsplit(text).path.rstrip("/")).name or text
    what = "an editable install" if editable else "a source location"
    if not egg and not editable and "://" not in text:
        raise InputError(f"{origin}: '{shown(text)}' is {what} whose package name compat cannot tell.", "Name it: 'NAME @ URL'.")
    return InputRequirement(name, SpecifierSet(), origin, url=text, hashes=hashes, constraint=constraint)
