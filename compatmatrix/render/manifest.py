"""Kubernetes manifests as YAML: the notes as comments on top, then the document (``compat export pytorchjob``).

PyYAML is imported here only, when a manifest is written or read, so the static paths (``compat check``,
``compat resolve``, ``compat export requirements``) never load it (tests/test_startup.py). YAML is read with a bound on
what its aliases may add (MAX_ALIAS_NODES). Plain scalars are typed, both ways, by the rules of kubectl and the API
server (go-yaml v2, then JSON: render/goyaml.py), not PyYAML's YAML 1.1: what is read is what the server would hold
(``2e-5`` a number, ``1:30`` and ``2024-01-01`` strings, ``1.0`` the integer 1), and a string is written plain only when
go-yaml reads it back as that string (else quoted). Notes are comments on one line each. Pure.
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


_TAG = "tag:yaml.org,2002:"
_CLASSES: dict[str, Any] = {}


def _typed(node: Any) -> Any:
    """A scalar node as go-yaml types it (goyaml.Resolved; None for a merge key); ValueError as go-yaml's failf."""
    from .goyaml import Resolved, go_yaml_tagged

    tag = str(node.tag)
    short = tag[len(_TAG):] if tag.startswith(_TAG) else "str"  # go-yaml hands a scalar of any other tag over as its text
    if short == "merge":  # resolve.go resolvableTag: !!merge is not resolved, its text kept; "<<" merges as a key (_is_merge)
        return None if node.value == "<<" else Resolved("str", node.value)
    return go_yaml_tagged(short, node.value)


def _is_merge(node: Any) -> bool:
    """decode.go isMerge (go-yaml v2.4.0, lines 813-815): a scalar "<<" that is implicit (plain, or tagged with the
    non-specific ``!``) or tagged !!merge; the resolver and compose_scalar_node give both the merge tag."""
    import yaml

    return isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "merge" and node.value == "<<"


def _resolved(node: Any) -> Any:
    """_typed, with go-yaml's failure as the loader's ConstructorError at the node."""
    import yaml

    try:
        return _typed(node)
    except ValueError as exc:
        raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from None


def _json_key(node: Any) -> str:
    """A mapping key as the JSON key it becomes (a null key or a uint64 kept as its text: load_documents' no_json
    names its path)."""
    import yaml

    from .goyaml import NoJSONForm, wire_key

    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "a mapping key that is a list or a mapping (go-yaml: invalid map key)", node.start_mark)
    found = _resolved(node)
    if found is None:
        return "<<"
    try:
        return wire_key(found)
    except NoJSONForm:
        return node.value


def _go_scalar(loader: Any, node: Any) -> Any:
    """A scalar as go-yaml types it, then JSON's value (NaN, ±Inf kept as the float: load_documents' no_json names its
    path); a mapping or a sequence by its kind, not its tag."""
    import yaml

    from .goyaml import NoJSONForm, wire_value

    if not isinstance(node, yaml.ScalarNode):
        return _go_other(loader, node)
    found = _resolved(node)
    if found is None:
        return "<<"
    try:
        return wire_value(found)
    except NoJSONForm:
        return found.value


def _go_other(loader: Any, node: Any) -> Any:
    """A tag go-yaml does not resolve (and !!set, !!omap, !!pairs, which it does not know): a scalar's text, a
    sequence or a mapping as it is."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return node.value
    return loader.construct_yaml_seq(node) if isinstance(node, yaml.SequenceNode) else loader.construct_yaml_map(node)


def _merged_mapping(loader: Any, node: Any, deep: bool) -> dict:
    """The keys in order, each setting its value, a ``<<`` merge setting every key of its mapping (of a list of
    mappings: the first one's win) over what came before it: go-yaml v2's decode.go mapping() and merge(), where a key
    written before the merge loses to it (YAML's merge spec and PyYAML keep the key)."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
    mapping: dict = {}
    for key_node, value_node in node.value:
        if not _is_merge(key_node):
            mapping[_json_key(key_node)] = loader.construct_object(value_node, deep=deep)
            continue
        sources = value_node.value[::-1] if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(None, None, "map merge requires map or sequence of maps as the value", value_node.start_mark)
            mapping.update(_merged_mapping(loader, source, deep))
    return mapping


def _represent_text(dumper: Any, value: str) -> Any:
    # plain only when go-yaml and YAML 1.1 read the plain text back as this string (the resolvers tell the emitter)
    return dumper.represent_scalar(_TAG + "str", value, style=scalar_style(value))


def _add_constructors(loader: Any, merge: str) -> None:
    # !!map and !!seq too: go-yaml's decoder goes by the node's kind (a scalar tagged !!map is its text: resolve.go 76-89)
    for short in ("null", "bool", "int", "float", "str", "timestamp", "binary", merge, "map", "seq"):
        loader.add_constructor(_TAG + short, loader.construct_go_scalar)
    for other in (_TAG + "omap", _TAG + "pairs", _TAG + "set", None):
        loader.add_constructor(other, loader.construct_go_other)


def _go_yaml_classes() -> tuple[Any, Any]:
    """(a SafeLoader, a SafeDumper) whose implicit typing of plain scalars is go-yaml v2's (render/goyaml.py), built once."""
    if _CLASSES:
        return _CLASSES["loader"], _CLASSES["dumper"]
    import yaml

    from .goyaml import MERGE, go_yaml_resolve

    class GoYamlResolver(yaml.resolver.BaseResolver):
        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is yaml.ScalarNode and implicit[0]:
                # "<<" is a string to resolve.go and a merge to decode.go's isMerge when it is a key: the merge tag lets
                # SafeConstructor.flatten_mapping merge it, and a "<<" value is constructed as the text "<<"
                return _TAG + (MERGE if value == "<<" else go_yaml_resolve(value).tag)
            return super().resolve(kind, value, implicit)

    class GoYamlLoader(GoYamlResolver, yaml.SafeLoader):
        def compose_scalar_node(self, anchor: Any) -> Any:
            """The non-specific tag ``!``: go-yaml's parser makes the scalar implicit with the tag "!" (parserc.go
            470-471), which resolve() does not resolve (resolve.go 76-89): the text, whatever it looks like, and a merge
            as a key when it is "<<" (decode.go isMerge). PyYAML would resolve it as a plain scalar (`! 3e-5`: a float)."""
            event = self.peek_event()
            if event.tag == "!":
                event.tag = _TAG + (MERGE if event.value == "<<" else "str")
            return super().compose_scalar_node(anchor)

        construct_go_scalar = _go_scalar
        construct_go_other = _go_other

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            return _merged_mapping(self, node, deep)

    _add_constructors(GoYamlLoader, MERGE)

    class GoYamlDumper(GoYamlResolver, yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # the Master and Worker templates are written out in full, no &anchors
            return True

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            """A string is written plain only when go-yaml and YAML 1.1 (PyYAML, and the other readers of the file) both
            read the plain text back as that string."""
            tag = super().resolve(kind, value, implicit)
            if tag == _TAG + "str" and kind is yaml.ScalarNode and implicit[0]:
                return yaml.resolver.Resolver.resolve(self, kind, value, implicit)
            return tag

    GoYamlDumper.add_representer(str, _represent_text)
    _CLASSES.update(loader=GoYamlLoader, dumper=GoYamlDumper)
    return GoYamlLoader, GoYamlDumper


def manifest_text(document: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    import yaml  # the manifest path only

    head = "".join(f"# {comment_text(line)}\n" for note in notes for line in note.splitlines())
    return head + yaml.dump(dict(document), Dumper=_go_yaml_classes()[1], sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


# Nodes that aliases (*name, and << merges) may add to a file, all its documents together: a template shared between
# the Master and the Worker adds a few hundred; an alias bomb of 1 KB adds billions and is refused at this count.
MAX_ALIAS_NODES = 10_000


class AliasLimitError(ValueError):
    """The YAML's aliases expand it past MAX_ALIAS_NODES, or an alias refers to a node that contains it."""

    def __init__(self, problem: str, line: int) -> None:
        super().__init__(f"{problem} (line {line})")
        self.problem = problem
        self.line = line


def load_documents(text: str, duplicates: Optional[list[list[str]]] = None, no_json: Optional[list[list[tuple[str, str]]]] = None) -> list[Any]:
    """Every YAML document of a file (a manifest file may hold several), safely, typed as the API server types it
    (the module's docstring); yaml.YAMLError when it is not YAML, AliasLimitError when its aliases would make it grow
    past MAX_ALIAS_NODES nodes or refer to themselves. The caller caps the file's size. ``duplicates``, when given, gets
    for each document the paths of the keys a mapping repeats as JSON keys (YAML keeps the last value silently;
    Kubernetes' strict field validation refuses them); ``no_json`` (path, what) of the values and keys JSON has no form
    for (.inf, .nan, a null key: kubectl and the API server refuse the file)."""
    import yaml

    class _BoundedLoader(_go_yaml_classes()[0]):
        """SafeLoader that counts what every alias adds (the anchored node, expanded) before taking it."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.added = 0
            self.open_anchors: set[str] = set()

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                _count_alias(self, event)
                return super().compose_node(parent, index)
            if event.anchor is None:
                return super().compose_node(parent, index)
            self.open_anchors.add(event.anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                self.open_anchors.discard(event.anchor)

    loader = _BoundedLoader(text)
    try:
        documents = []
        while loader.check_node():
            node = loader.get_node()
            document = loader.construct_document(node) if node is not None else None
            if document is not None:
                documents.append(document)
                _note_keys(node, duplicates, no_json)
        return documents
    finally:
        loader.dispose()


def _count_alias(loader: Any, event: Any) -> None:
    """An alias taken by the bounded loader: AliasLimitError when it refers to a node that contains it, or when what
    the aliases add passes MAX_ALIAS_NODES."""
    anchor = event.anchor
    if anchor in loader.open_anchors:
        raise AliasLimitError(f"the alias *{anchor} refers to a node that contains it", event.start_mark.line + 1)
    node = loader.anchors.get(anchor)
    if node is not None:
        loader.added += _expanded_size(node, MAX_ALIAS_NODES - loader.added + 1)
        if loader.added > MAX_ALIAS_NODES:
            raise AliasLimitError(f"its aliases expand it by more than {MAX_ALIAS_NODES:,} nodes", event.start_mark.line + 1)


def _note_keys(node: Any, duplicates: Optional[list[list[str]]], no_json: Optional[list[list[tuple[str, str]]]]) -> None:
    """A document's repeated keys and JSON-less values, for the lists the caller asked for."""
    if duplicates is None and no_json is None:
        return
    repeated, unencodable = _repeated_keys(node)
    if duplicates is not None:
        duplicates.append(repeated)
    if no_json is not None:
        no_json.append(unencodable)


def _repeated_keys(root: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """The paths (spec.trainer.env[0].name) of the keys that a mapping of the composed document repeats, compared as
    the JSON keys they become (``on`` and ``true`` are one key), and of the values and keys JSON has no form for."""
    import yaml

    found: list[str] = []
    unencodable: list[tuple[str, str]] = []
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > 200:
            continue
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                name = _key_name(key, path, unencodable)
                child = f"{path}.{name}" if path else name
                if name in seen:
                    found.append(child)
                seen.add(name)
                stack.append((value, child, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.ScalarNode) and str(node.tag) == _TAG + "float":
            _json_value_problem(node, path, unencodable)
    return sorted(set(found)), sorted(set(unencodable))


def _typed_or_merge(node: Any) -> Any:
    from .goyaml import Resolved

    return _typed(node) or Resolved("str", "<<")


def _key_name(key: Any, path: str, unencodable: list[tuple[str, str]]) -> str:
    """A mapping key as the JSON key it becomes ('?' for a list or mapping key; its text when go-yaml cannot type it);
    a key JSON has no form for goes into ``unencodable`` with its path."""
    import yaml

    from .goyaml import NoJSONForm, wire_key

    if not isinstance(key, yaml.ScalarNode):
        return "?"
    name = str(key.value)
    try:
        return wire_key(_typed_or_merge(key))
    except NoJSONForm as exc:
        unencodable.append((f"{path}.{name}" if path else name, str(exc)))
    except ValueError:
        pass
    return name


def _json_value_problem(node: Any, path: str, unencodable: list[tuple[str, str]]) -> None:
    """A float JSON has no form for (.inf, .nan) goes into ``unencodable`` with its path."""
    from .goyaml import NoJSONForm, wire_value

    try:
        wire_value(_typed_or_merge(node))
    except NoJSONForm as exc:
        unencodable.append((path or "<root>", str(exc)))
    except ValueError:
        pass


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
