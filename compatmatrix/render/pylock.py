"""A PEP 751 ``pylock.toml`` (export/pylock.py's lock data) as TOML text, with a header that says what the file holds
and what it does not. Written by hand: the data is flat (strings, a table of hashes, arrays of tables). Strings are
TOML basic strings: any Unicode text is written so that a TOML parser reads back exactly that text (the characters
that are not printable escaped as \\uXXXX / \\UXXXXXXXX, non-BMP ones included); a lone surrogate, which no TOML
string can hold, is refused (values.UnwritableValue). Header lines are comments on one line each. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..values import UnwritableValue, comment_text

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string."""
    out = []
    for ch in value:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif "\ud800" <= ch <= "\udfff":
            raise UnwritableValue("value", value, "a TOML file", f"it holds a lone surrogate ({ascii(ch)[1:-1]}), which TOML cannot carry")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}")
    return '"' + "".join(out) + '"'


def _value(value: Any) -> str:
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def pylock_text(data: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    lines = [f"# {comment_text(line)}" for line in header]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in data.items() if k != "packages"]
    for package in data.get("packages", []):
        lines += ["", "[[packages]]"]
        lines += [f"{_key(k)} = {_value(v)}" for k, v in package.items() if k != "wheels"]
        for wheel in package.get("wheels", []):
            lines += ["", "[[packages.wheels]]"]
            lines += [f"{_key(k)} = {_value(v)}" for k, v in wheel.items()]
    return "\n".join(lines) + "\n"
