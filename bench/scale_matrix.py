#!/usr/bin/env python3
"""A matrix K times the size of data/matrix.toml, for measuring how the resolver's time grows with the matrix.

Copy k (1 <= k < K) of every release entry is a release of its own, newer than the one before it:

* torch, IPEX, oneccl_bind_pt, torchvision, torchaudio: every version moved up by 100*k major versions, and so is
  every torch version the entry names (the torch it is built for, IPEX's torch_accepts range, oneccl_bind_pt's
  pairings, the torch of torchvision/torchaudio): each copy is a consistent stack of its own;
* the transformers and accelerate lines: the minor version moved up by 1000*k (4.30 -> 4.1030), the floors they
  state (torch_min, accelerate_min) kept: the features' ranges (">=4.20.0", "<5.0.0") still speak for them, so a
  copied line is as usable as its original.

Everything else (hosts, policy, profiles, features, end-of-life entries, known-bad sets, device builds) is kept
once, as it is.

    python bench/scale_matrix.py K OUT.toml        (K = 1 writes the bundled matrix through the same writer)

Side effects: writes OUT.toml.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHIFT = 100  # major versions between two copies
_RELEASE_TABLES = ("torch", "ipex", "oneccl_bind_pt", "torchvision", "torchaudio", "transformers", "accelerate")
_MAJOR = re.compile(r"^(\d+)")


def _shift_version(text: str, k: int) -> str:
    return _MAJOR.sub(lambda m: str(int(m.group(1)) + SHIFT * k), text, count=1)


def _shift_spec(text: str, k: int) -> str:
    """Every version in a specifier set such as '>=2.1,<2.2' or '==2.1.*', moved up."""
    if not text.strip():
        return text  # no constraint
    parts = []
    for clause in text.split(","):
        clause = clause.strip()
        operator = re.match(r"^(===|==|!=|~=|<=|>=|<|>)", clause)
        if operator is None:
            raise ValueError(f"cannot shift the specifier {text!r}")
        parts.append(operator.group(1) + _shift_version(clause[len(operator.group(1)) :].strip(), k))
    return ",".join(parts)


_MINOR = re.compile(r"^(\d+)\.(\d+)")
_LIBRARIES = ("transformers", "accelerate")


def _shift_minor(text: str, k: int) -> str:
    return _MINOR.sub(lambda m: f"{m.group(1)}.{int(m.group(2)) + 1000 * k}", text, count=1)


def _copy(table: str, entry: dict[str, Any], k: int) -> dict[str, Any]:
    out = json.loads(json.dumps(entry))
    if table in _LIBRARIES:
        out["line"] = _shift_minor(out["line"], k)
        for key in ("versions", "yanked"):
            out[key] = [_shift_minor(v, k) for v in out.get(key, [])]
        return out
    for key in ("version", "torch"):
        if key in out:
            out[key] = _shift_version(out[key], k)
    if "torch_accepts" in out:
        out["torch_accepts"] = _shift_spec(out["torch_accepts"], k)
    for pairing in out.get("pairing", ()):
        pairing["torch"] = _shift_version(pairing["torch"], k)
    return out


def scaled_document(document: dict[str, Any], factor: int) -> dict[str, Any]:
    """The parsed matrix with ``factor`` copies of every release entry (newest copy first, as the file lists them)."""
    out = dict(document)
    for table in _RELEASE_TABLES:
        entries = document.get(table, [])
        out[table] = [_copy(table, e, k) for k in range(factor - 1, 0, -1) for e in entries] + list(entries)
    return out


# --- a TOML writer for the matrix's shapes (tables, arrays of tables, strings, numbers, booleans, arrays) ---------


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _key(key: str) -> str:
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else json.dumps(key)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(lines: list[str], path: str, table: dict[str, Any], array: bool) -> None:
    """One table: its keys, then its sub-tables. Inside an array of tables a plain table is written inline."""
    if path:
        lines.append(f"[[{path}]]" if array else f"[{path}]")
    below = []
    for key, value in table.items():
        if _is_table_array(value) or (isinstance(value, dict) and not array):
            below.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    lines.append("")
    for key, value in below:
        child = f"{path}.{_key(key)}" if path else _key(key)
        if isinstance(value, list):
            for item in value:
                _table(lines, child, item, True)
        else:
            _table(lines, child, value, False)


def dumps(document: dict[str, Any]) -> str:
    lines: list[str] = []
    _table(lines, "", document, False)
    return "\n".join(lines) + "\n"


def write_scaled(factor: int, out: Path) -> Path:
    import tomllib

    document = tomllib.loads((ROOT / "data" / "matrix.toml").read_text(encoding="utf-8"))
    out.write_text(dumps(scaled_document(document, factor)), encoding="utf-8")
    return out


def main() -> int:
    if len(sys.argv) != 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print(__doc__.strip().splitlines()[-3].strip(), file=sys.stderr)
        return 2
    write_scaled(int(sys.argv[1]), Path(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
