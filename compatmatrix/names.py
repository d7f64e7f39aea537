"""PEP 503 name normalisation (the same rule as packaging.utils.canonicalize_name, without importing
packaging.tags, which costs ~20 ms on every `compat check`)."""

from __future__ import annotations

import re

_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()
