"""Kubernetes manifests as YAML: the notes as comments on top, then the document (``compat export pytorchjob``).

PyYAML is imported here only, when a manifest is written or read, so the static paths (``compat check``,
``compat resolve``, ``compat export requirements``) never load it (tests/test_startup.py). Every string is written so
that a YAML parser reads back exactly that string (scalar_style), and notes are comments on one line each. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..values import UnwritableValue, comment_text


def scalar_style(value: str) -> Optional[str]:
    """How a string is written so that a YAML parser reads back exactly it: double-quoted (every escape YAML has) when
    it holds a character that is not printable, a YAML line break other than \\n (U+0085, U+2028, U+2029, \\r: PyYAML's
    own choice, single quotes, folds them into a space), or a tab; a block (``|``) for the container's bash script;
    else PyYAML's choice (plain or single-quoted, with its own quoting of ': ', '- ', '#', '&', '*', '!'). A lone
    surrogate, which no UTF-8 file (and no Kubernetes object) holds, is refused (values.UnwritableValue)."""
    for ch in value:
        if "\ud800" <= ch <= "\udfff":
            raise UnwritableValue("value", value, "a YAML manifest", f"it holds a lone surrogate ({ascii(ch)[1:-1]}), which is not a character")
    if any(not (ch.isprintable() or ch == "\n") for ch in value):
        return '"'
    return "|" if "\n" in value else None


def manifest_text(document: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    import yaml  # the manifest path only

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the Master and Worker templates are written out in full, no &anchors
            return True

    def _text(dumper: yaml.SafeDumper, value: str) -> Any:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=scalar_style(value))

    _Dumper.add_representer(str, _text)
    head = "".join(f"# {comment_text(line)}\n" for note in notes for line in note.splitlines())
    return head + yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def load_documents(text: str) -> list[Any]:
    """Every YAML document of a file (a manifest file may hold several), safely; yaml.YAMLError when it is not YAML."""
    import yaml

    return [d for d in yaml.safe_load_all(text) if d is not None]
