"""Kubernetes manifests as YAML: the notes as comments on top, then the document (``compat export pytorchjob``).

PyYAML is imported here only, when a manifest is written or read, so the static paths (``compat check``,
``compat resolve``, ``compat export requirements``) never load it (tests/test_startup.py). YAML is read with a bound on
what its aliases may add (MAX_ALIAS_NODES). Every string is written so that a YAML parser reads back exactly that string
(scalar_style), and notes are comments on one line each. Pure.
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


# Nodes that aliases (*name, and << merges) may add to a file, all its documents together: a template shared between
# the Master and the Worker adds a few hundred; an alias bomb of 1 KB adds billions and is refused at this count.
MAX_ALIAS_NODES = 10_000


class AliasLimitError(ValueError):
    """The YAML's aliases expand it past MAX_ALIAS_NODES, or an alias refers to a node that contains it."""

    def __init__(self, problem: str, line: int) -> None:
        super().__init__(f"{problem} (line {line})")
        self.problem = problem
        self.line = line


def load_documents(text: str, duplicates: Optional[list[list[str]]] = None) -> list[Any]:
    """Every YAML document of a file (a manifest file may hold several), safely; yaml.YAMLError when it is not YAML,
    AliasLimitError when its aliases would make it grow past MAX_ALIAS_NODES nodes or refer to themselves. The caller
    caps the file's size. ``duplicates``, when given, gets for each document the paths of the keys a mapping repeats
    (YAML keeps the last value silently; Kubernetes' strict field validation refuses them)."""
    import yaml

    class _BoundedLoader(yaml.SafeLoader):
        """SafeLoader that counts what every alias adds (the anchored node, expanded) before taking it."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.added = 0
            self.open_anchors: set[str] = set()

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            anchor = event.anchor
            if isinstance(event, yaml.AliasEvent):
                if anchor in self.open_anchors:
                    raise AliasLimitError(f"the alias *{anchor} refers to a node that contains it", event.start_mark.line + 1)
                node = self.anchors.get(anchor)
                if node is not None:
                    self.added += _expanded_size(node, MAX_ALIAS_NODES - self.added + 1)
                    if self.added > MAX_ALIAS_NODES:
                        raise AliasLimitError(f"its aliases expand it by more than {MAX_ALIAS_NODES:,} nodes", event.start_mark.line + 1)
                return super().compose_node(parent, index)
            if anchor is None:
                return super().compose_node(parent, index)
            self.open_anchors.add(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                self.open_anchors.discard(anchor)

    loader = _BoundedLoader(text)
    try:
        documents = []
        while loader.check_node():
            node = loader.get_node()
            document = loader.construct_document(node) if node is not None else None
            if document is not None:
                documents.append(document)
                if duplicates is not None:
                    duplicates.append(_repeated_keys(node))
        return documents
    finally:
        loader.dispose()


def _repeated_keys(root: Any) -> list[str]:
    """The paths (spec.trainer.env[0].name) of the keys that a mapping of the composed document repeats."""
    import yaml

    found: list[str] = []
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > 200:
            continue
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                child = f"{path}.{name}" if path else name
                if name in seen:
                    found.append(child)
                seen.add(name)
                stack.append((value, child, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                stack.append((item, f"{path}[{i}]", depth + 1))
    return sorted(set(found))


def _expanded_size(node: Any, budget: int) -> int:
    """Nodes in ``node`` with every alias in it written out, counted up to ``budget`` (where counting stops)."""
    count, stack = 0, [node]
    while stack and count < budget:
        current = stack.pop()
        count += 1
        value = current.value
        if isinstance(value, list):
            for item in value:
                if isinstance(item, tuple):  # a mapping's (key, value) pair
                    stack.extend(item)
                else:
                    stack.append(item)
    return count
