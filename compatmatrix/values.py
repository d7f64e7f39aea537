"""Values from outside, typed at the edge, and the characters a generated file cannot carry.

Each ``*_ok`` predicate is the one rule for its kind of value (a PEP 508 package name, a Kubernetes name, an OCI image
reference, ...), written with ``fullmatch`` and ``\\Z`` so that a trailing newline never passes (Python's ``$`` matches
before one). The edges (cli/, export/service.py, export/k8s.py, planning.py) call them and refuse a value with one
sentence naming the input (UsageError, exit 2); the writers (render/*, shell.py, install/planners.py) call them
again, so a hostile value that reaches a writer by another road is refused there too (UnwritableValue, exit 2) instead
of starting a new line, instruction or entry in the file.

Pure; imports only ``re`` (the static commands start fast: tests/test_startup.py).
"""

from __future__ import annotations

import re

from .errors import CompatError, shown

#: what str.splitlines splits on -- and so pip's requirements reader (pip/_internal/req/req_file.py) and compat's
#: (inputs/read.py); YAML takes \x85, \u2028 and \u2029 for line breaks too
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

# PEP 508 (and packaging.utils): letters, digits, '.', '_', '-', beginning and ending with a letter or digit
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# Kubernetes (apimachinery validation): RFC 1035 / RFC 1123 labels, at most 63 characters
_DNS1035 = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123 = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?")

# the OCI distribution reference grammar (distribution/reference, regexp.go), ASCII only
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
_NAME_MAX = 255  # the reference's name part, as distribution/reference limits it

# a path a Dockerfile's COPY takes as written: no space, quote, '$' (Docker expands it), glob character or leading '-'
_BUILD_PATH = re.compile(r"[A-Za-z0-9._/@+=,~][A-Za-z0-9._/@+=,~-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE = re.compile(r"[0-9]{1,20}", re.ASCII)  # str.isdigit() takes '²' and '٣', which int() refuses or reads


class UnwritableValue(CompatError):
    """A value a generated file cannot carry as written (exit 2): the message names the value and the format."""

    def __init__(self, what: str, value: str, fmt: str, why: str) -> None:
        super().__init__(f"The {what} '{quoted(value)}' cannot be written into {fmt}: {why}.",
                         "Correct the value where it comes from (the command line or the file that gave it).")


def json_text(data: object) -> object:
    """A decoded JSON document with every string (keys too) made writable text: JSON's \\ud800 escapes decode to lone
    surrogates, which no UTF-8 output (a terminal, a file compat writes) can take; each becomes U+FFFD. For every JSON
    document from outside (a registry's page, the overlay). RecursionError on a document nested past the stack."""
    if isinstance(data, str):
        return data if data.isascii() else data.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(data, dict):
        return {json_text(key): json_text(value) for key, value in data.items()}
    if isinstance(data, list):
        return [json_text(value) for value in data]
    return data


def odd_character(text: str) -> str:
    """Why ``text`` cannot stand on one line of a generated file ('' when it can): a line break (any that Python, pip
    or YAML break lines at), a control or format character, a lone surrogate (no UTF-8 file can hold it)."""
    for ch in text:
        if ch in LINE_BREAKS:
            return f"it holds a line break ({ascii(ch)[1:-1]})"
        if "\ud800" <= ch <= "\udfff":
            return f"it holds a lone surrogate ({ascii(ch)[1:-1]}), which is not a character"
        if not ch.isprintable() and ch != " ":
            return f"it holds the control character {ascii(ch)[1:-1]}"
    return ""


def comment_text(text: str) -> str:
    """``text`` for one comment line of any format compat writes (shell, TOML, YAML, Dockerfile, requirements): every
    character that is not printable (a line break, a control character, a lone surrogate) as its Python escape, so a
    comment can never end early and start a line the reader takes as content."""
    return "".join(ch if ch.isprintable() or ch == "\t" else ascii(ch)[1:-1] for ch in text)


def record_text(text: str, limit: int) -> str:
    """``text`` for one text field of a record compat keeps and reads back (the overlay's tested records): every character
    that is not printable -- TAB, a line break, a terminal escape, a lone surrogate -- as its Python escape (``\\t``,
    ``\\x1b``), then cut to ``limit`` characters; what it returns is printable, so the reader's own rule takes it."""
    escaped = text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return escaped if len(escaped) <= limit else escaped[: limit - 3] + "..."


def quoted(text: str, limit: int = 80) -> str:
    """User input inside an error message: cut (errors.shown), every character that is not printable escaped."""
    return comment_text(shown(text, limit))


def package_name_ok(text: str) -> bool:
    return bool(_PACKAGE_NAME.fullmatch(text))


def dns1035_ok(text: str) -> bool:
    return bool(_DNS1035.fullmatch(text))


def dns1123_ok(text: str) -> bool:
    return bool(_DNS1123.fullmatch(text))


def quantity_ok(text: str) -> bool:
    return bool(_QUANTITY.fullmatch(text))


def image_reference_ok(text: str) -> bool:
    """An image reference as docker, containerd and the kubelet parse it: [HOST[:PORT]/]PATH[:TAG][@DIGEST]."""
    match = _REFERENCE.fullmatch(text)
    return bool(match) and len(match.group("name")) <= _NAME_MAX


def build_path_ok(text: str) -> bool:
    """A path of the build context that a Dockerfile's COPY reads as written (no quoting, expansion or glob)."""
    return bool(_BUILD_PATH.fullmatch(text))


def env_name_ok(text: str) -> bool:
    """A variable name every shell (bash, zsh, dash, fish) and a Dockerfile's ARG/ENV take."""
    return bool(_ENV_NAME.fullmatch(text))


def whole_number(text: str, low: int, high: int) -> "int | None":
    """``text`` (surrounding blanks stripped) as a whole number written in ASCII digits within [low, high], else None:
    never a superscript, another script's digits, a sign, a fraction or a number past ``high``."""
    stripped = text.strip()
    if not _WHOLE.fullmatch(stripped):
        return None
    number = int(stripped)
    return number if low <= number <= high else None
