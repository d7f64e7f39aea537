"""A PEP 751 ``pylock.toml`` (export/pylock.py's lock data) as TOML text, with a header that says what the file holds
and what it does not. Written by hand: the data is flat (strings, a table of hashes, arrays of tables), and strings
are TOML basic strings (JSON's escapes are TOML's). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: \" \\ \n \uXXXX are the same in both
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() and key.isascii() else json.dumps(key)


def pylock_text(data: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    lines = [f"# {line}" for line in header]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in data.items() if k != "packages"]
    for package in data.get("packages", []):
        lines += ["", "[[packages]]"]
        lines += [f"{_key(k)} = {_value(v)}" for k, v in package.items() if k != "wheels"]
        for wheel in package.get("wheels", []):
            lines += ["", "[[packages.wheels]]"]
            lines += [f"{_key(k)} = {_value(v)}" for k, v in wheel.items()]
    return "\n".join(lines) + "\n"
