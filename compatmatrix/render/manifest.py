"""Kubernetes manifests as YAML: the notes as comments on top, then the document (``compat export pytorchjob``).

PyYAML is imported here only, when a manifest is written or read, so the static paths (``compat check``,
``compat resolve``, ``compat export requirements``) never load it (tests/test_startup.py). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def manifest_text(document: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    import yaml  # the manifest path only

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the Master and Worker templates are written out in full, no &anchors
            return True

    def _text(dumper: yaml.SafeDumper, value: str) -> Any:
        style = "|" if "\n" in value else None  # the bash script of the container reads as a block
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _text)
    head = "".join(f"# {line}\n" for note in notes for line in note.splitlines())
    return head + yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def load_documents(text: str) -> list[Any]:
    """Every YAML document of a file (a manifest file may hold several), safely; yaml.YAMLError when it is not YAML."""
    import yaml

    return [d for d in yaml.safe_load_all(text) if d is not None]
