"""The validated matrix, kept in compat's cache folder: a run whose matrix file has not changed neither reads TOML
nor validates it again.

Validating every entry is linear in the matrix but slow in Python: for a matrix eight times the bundled one
(1.5 MB, bench/scale_matrix.py) about 55 ms on every run even with the TOML already parsed, where rebuilding the
model from this cache takes about 17 ms, its bounds and types checked (the TOML parser alone takes longer than
both). After a matrix file's bytes have been read and validated, the :class:`~compatmatrix.matrix.model.Matrix`
built from them is written to ``matrix-<key>.json`` in compat's cache folder (compatmatrix/cachefiles.py:
owner-only, replaced atomically); the next run with the same bytes rebuilds the model from that file instead.

The key is a BLAKE2b digest of the matrix file's bytes and of everything else the model built from them depends
on: this format (:data:`FORMAT`), compat's version, the Python and ``packaging`` versions, the model's classes and
their fields, and the size and modification time of the loader's own source files (an edit of the loader
during development is a new key). Any change to the file's content is a new key, whatever its size or time
stamps; a file that does not validate is never written, so a broken matrix is reported every time.

The file holds data, never code: two lines of JSON, a header ``{"format", "key", "check"}`` (``check``: the
BLAKE2b of the second line) and the model as a flat list of nodes, each value once (equal values share a node;
a node refers to earlier ones by their index; the last one is the Matrix). A node is a JSON string, number,
``true``/``false``/``null`` (itself), or a list whose first item says what it is: ``["V", text]`` a Version,
``["S", text]`` a SpecifierSet, ``["C", value]`` a Component, ``["t", i, ...]`` a tuple, ``["f", i, ...]`` a
frozenset, ``["d", key, value, ...]`` a dict, ``["R", class, i, ...]`` a model record (its fields in order).
Decoding makes nothing else (no pickle, no class a file can name outside matrix/model.py). A file that is
missing, not private, for another key, damaged (its check), or anything else unexpected reads as no cache, and
the caller reads the TOML: never a traceback. A private file with the right key and check was written by compat
after the matrix validated, or by the user (who could as well edit compat), so its values are not validated again;
but what could make compat hang or fail is refused all the same (the file is then read as no cache, and written
again from the TOML): a model that expands to more than :data:`EXPANSION` values per byte of the file or nests
deeper than :data:`MAX_DEPTH` (shared nodes: a small file could stand for 2**70 values), a set or a dict key of
other than plain values, a record field whose value is not of the type its class declares (a string where a
Version should be), a component's releases of another record class than the loader's.

Side effects: reads and writes $XDG_CACHE_HOME/compatmatrix/matrix-*.json (files not written for 30 days are
removed when a new one is written); stats the loader's source files.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import sys
from typing import Any, Callable, Optional

import packaging
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import cachefiles
from ..record import Record, replace
from . import model
from .model import Component, Matrix

#: Bump when the encoding, or what the loader builds from the same bytes, changes (released versions also differ
#: by compat's version; the loader's source files are part of the key too).
FORMAT = 2
PREFIX, SUFFIX = "matrix-", ".json"
MAX_AGE_S = 30 * 86400
#: The loader's modules: their size and time stamp are part of the key.
_SOURCES = ("load.py", "cache.py", "model.py", os.path.join(os.pardir, "record.py"))
#: How much a file may say: its model expanded (a shared node counted at each place it is used) is at most this many
#: values per byte of the file (the bundled matrix: 0.06; 8 to 64 times its size: 0.2 to 0.28), nested at most
#: MAX_DEPTH deep (the model: 8). Without a bound, sharing lets a small file stand for a huge model: 70 nested pairs
#: of one tuple are 2**70 values, which hashing or printing the model would visit one by one.
EXPANSION = 4
MAX_DEPTH = 12
#: What a frozenset or a dict key may hold: values whose hash costs next to nothing.
_PLAIN = frozenset((str, int, bool, type(None), Version, Component))
#: The record class of each component's releases (what matrix/load.py builds).
_RELEASE_CLASSES = {component: getattr(model, info.release) for component, info in model.COMPONENTS.items()}


def _model_types() -> dict[str, type]:
    """The record classes a cache file may name: those of matrix/model.py, by name (not UnlistedRelease: never in a matrix)."""
    return {name: value for name, value in vars(model).items()
            if isinstance(value, type) and issubclass(value, Record) and value is not Record and not getattr(value, "_not_in_matrix", False)}


def key(data: bytes) -> str:
    """The cache key of a matrix file's bytes (hex): every input the model built from them depends on."""
    from .. import __version__  # read now: a test may change it

    here = os.path.dirname(os.path.abspath(__file__))
    stamps = []
    for name in _SOURCES:
        try:
            info = os.stat(os.path.join(here, name))
            stamps.append(f"{name}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:  # not a folder (a zip): compat's version stands for them
            stamps.append(f"{name}:-")
    types = ";".join(f"{name}:{','.join(cls._fields)}" for name, cls in sorted(_model_types().items()))  # type: ignore[attr-defined]
    facts = f"{FORMAT}|{__version__}|{sys.version_info[0]}.{sys.version_info[1]}|{getattr(packaging, '__version__', '?')}|{types}|{'|'.join(stamps)}|"
    return cachefiles.blake2b(facts.encode("utf-8", "surrogatepass") + data).hexdigest()


def file_name(cache_key: str) -> str:
    return f"{PREFIX}{cache_key[:32]}{SUFFIX}"


def read(directory: str, cache_key: str, path: str, limit: int) -> Optional[Matrix]:
    """The matrix kept under ``cache_key`` (its ``source_path``: ``path``), or None for any problem at all."""
    data = cachefiles.read_bytes(directory, file_name(cache_key), limit)
    if data is None:
        return None
    try:
        head, _, body = data.partition(b"\n")
        header = json.loads(head)
        if type(header) is not dict or header.get("format") != FORMAT or header.get("key") != cache_key:
            return None
        if header.get("check") != cachefiles.blake2b(body).hexdigest():
            return None
        matrix = decode(json.loads(body), EXPANSION * len(body))
        if type(matrix) is not Matrix or matrix.releases.keys() != _RELEASE_CLASSES.keys():
            return None
        for component, releases in matrix.releases.items():
            if not {_RELEASE_CLASSES[component]}.issuperset(map(type, releases)):
                return None
        return replace(matrix, source_path=path)
    except Exception:  # noqa: BLE001 - whatever is wrong with a cache file, the answer is "no cache": read the TOML
        return None


def write(directory: str, cache_key: str, matrix: Matrix) -> None:
    """Best effort: keep ``matrix`` (validated) under ``cache_key``; silent on any failure. Files of this kind not
    written for MAX_AGE_S are removed (other matrices, other versions of compat)."""
    try:
        body = json.dumps(encode(replace(matrix, source_path="")), separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    except Exception:  # noqa: BLE001 - a value the encoding does not know: nothing is kept, the next run reads the TOML again
        return
    header = json.dumps({"format": FORMAT, "key": cache_key, "check": cachefiles.blake2b(body).hexdigest()}, separators=(",", ":"))
    name = file_name(cache_key)
    cachefiles.write_bytes(directory, name, header.encode("ascii") + b"\n" + body)
    cachefiles.prune(directory, PREFIX, SUFFIX, MAX_AGE_S, keep=name)


def encode(matrix: Matrix) -> list[Any]:
    """The matrix as a list of nodes (see the module); raises TypeError for a value of a type it does not know."""
    encoder = _Encoder()
    root = encoder.enc(matrix)
    if root != len(encoder.nodes) - 1:  # pragma: no cover - the matrix is the last node made
        raise TypeError("the matrix is not the last node")
    return encoder.nodes


class _Encoder:
    """The nodes made so far: each equal node once, each object encoded once."""

    def __init__(self) -> None:
        self.types = _model_types()
        self.nodes: list[Any] = []
        self.index: dict[Any, int] = {}  # a node's own form -> its position (equal values share one node)
        self.seen: dict[int, tuple[int, Any]] = {}  # id(value) -> (position, value): each object encoded once

    def put(self, node: Any, form: Any) -> int:
        position = self.index.get(form)
        if position is None:
            position = self.index[form] = len(self.nodes)
            self.nodes.append(node)
        return position

    def enc(self, value: Any) -> int:
        """The position of ``value``'s node, made (and its items') if new."""
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return self.put(value, (kind, value))
        known = self.seen.get(id(value))
        if known is not None:
            return known[0]
        node = self.node(value)
        position = self.put(node, tuple(node))
        self.seen[id(value)] = (position, value)  # the value held: its id is not reused while encoding
        return position

    def node(self, value: Any) -> list[Any]:
        """The node of a value that is not a plain one (its items encoded first)."""
        kind = type(value)
        make = _NODES.get(kind)
        if make is not None:
            return make(self, value)
        if self.types.get(kind.__name__) is kind:
            return ["R", kind.__name__, *[self.enc(value.__dict__[name]) for name in kind._fields]]
        raise TypeError(f"the matrix cache cannot keep a {kind.__name__}")


def _dict_node(encoder: _Encoder, value: dict) -> list[Any]:
    node: list[Any] = ["d"]
    for item_key, item in value.items():
        node += [encoder.enc(item_key), encoder.enc(item)]
    return node


#: The node of each value type other than plain values and model records, by its exact type.
_NODES: dict[type, Callable[[_Encoder, Any], list[Any]]] = {
    Version: lambda encoder, value: ["V", str(value)],
    SpecifierSet: lambda encoder, value: ["S", str(value)],
    Component: lambda encoder, value: ["C", value.value],
    tuple: lambda encoder, value: ["t", *[encoder.enc(item) for item in value]],
    frozenset: lambda encoder, value: ["f", *[encoder.enc(item) for item in value]],
    dict: _dict_node,
}


def decode(nodes: list[Any], budget: int) -> Any:
    """The value of the last node (see the module); raises on anything unexpected (the caller reads the TOML),
    among which a node whose value, expanded, is more than ``budget`` values or nests deeper than MAX_DEPTH (checked
    before the value is made), a set or dict key of other than plain values, a record field whose value is not of
    the type its class declares."""
    types = _model_types()
    # Every list has a slot per node, so that any index (a negative one, or one of a later node: None so far) names
    # the same node in all three.
    values: list[Any] = [None] * len(nodes)
    sizes = [1] * len(nodes)  # each node's value expanded: 1 + its items' sizes (a shared node counted each time)
    depths = [0] * len(nodes)
    item_of, size_of, depth_of = values.__getitem__, sizes.__getitem__, depths.__getitem__
    for position, node in enumerate(nodes):
        if type(node) is not list:
            values[position] = _plain(node)
            continue
        tag = node[0]
        if tag == "V" or tag == "S" or tag == "C":
            values[position] = _leaf(tag, node[1])
            continue
        refs = node[2:] if tag == "R" else node[1:]
        size = sizes[position] = 1 + sum(map(size_of, refs))
        depth = depths[position] = 1 + max(map(depth_of, refs)) if refs else 1  # (max's default= costs as much again)
        if size > budget or depth > MAX_DEPTH:
            raise ValueError("the model is larger than its file can say")
        items = list(map(item_of, refs))
        values[position] = _record(types[node[1]], node[1], items) if tag == "R" else _container(tag, items)
    return values[-1]


def _plain(node: Any) -> Any:
    if type(node) not in (str, int, bool) and node is not None:
        raise TypeError("not a value of the matrix")
    return node


def _leaf(tag: str, text: Any) -> Any:
    """The value of a "V", "S" or "C" node."""
    if type(text) is not str:
        raise TypeError("not a version, range or component")
    return Version(text) if tag == "V" else SpecifierSet(text) if tag == "S" else Component(text)


def _record(cls: type, name: str, items: list[Any]) -> Any:
    """A model record of class ``cls`` (named ``name`` in the file) from its fields' values, each of its declared type."""
    kinds, deep = _CHECKS.get(cls) or _field_checks(cls)
    if len(items) != len(kinds) or not all(map(frozenset.__contains__, kinds, map(type, items))):
        raise TypeError(f"the fields of {name} are not of its types")
    for at, check in deep:
        if not check(items[at]):
            raise TypeError(f"the {cls._fields[at]} of {name} is not a {_annotations(cls)[cls._fields[at]]}")  # type: ignore[attr-defined]
    made = object.__new__(cls)  # Record.__init__'s common case, without its call: a thousand records a start
    made.__dict__.update(zip(cls._fields, items))  # type: ignore[attr-defined]
    return made


def _container(tag: Any, items: list[Any]) -> Any:
    """The value of a "t", "f" or "d" node from its items' values."""
    if tag == "t":
        return tuple(items)
    if tag == "f":
        if not _PLAIN.issuperset(map(type, items)):
            raise TypeError("a set of other than plain values")
        return frozenset(items)
    if tag == "d":
        keys = items[::2]
        if len(items) % 2 or not _PLAIN.issuperset(map(type, keys)):
            raise TypeError("a dict without plain keys")
        return dict(zip(keys, items[1::2]))
    raise ValueError(f"unknown node {tag!r}")


# --- what a record's fields may hold: their annotations (matrix/model.py), read once a class, as checks ------------
#
# The annotations are the strings ``from __future__ import annotations`` keeps; the few forms the model uses are
# read here (typing.get_type_hints would take ~3 ms): a class of the model or a builtin, Optional[X], tuple[X, ...],
# tuple[X, Y], frozenset[X], dict[K, V]; a Protocol (Release) stands for the model's records that have its members.
# An annotation reads as a check: (the types a value may have, exactly: a bool is no int; for a container a function
# that checks its items, else None). The model's records do not contain themselves: what passes is nested as deep as
# the model (8), whatever the file says.

_TOKENS = re.compile(r"\s*(?:(\.\.\.)|([\[\],])|([A-Za-z_][A-Za-z0-9_]*)|'([^']*)'|\"([^\"]*)\")")
_CHECKS: dict[type, tuple[tuple[frozenset[type], ...], tuple[tuple[int, Callable[[Any], bool]], ...]]] = {}
_Check = tuple[frozenset[type], Optional[Callable[[Any], bool]]]
_READ: dict[str, _Check] = {}  # annotation -> its check (most are "str", "Version", "Provenance")
_NONE = type(None)


def _annotations(cls: type) -> dict[str, str]:
    annotations: dict[str, str] = {}
    for owner in reversed(cls.__mro__):
        annotations.update({name: str(value) for name, value in owner.__dict__.get("__annotations__", {}).items()})
    return annotations


def _field_checks(cls: type) -> tuple[tuple[frozenset[type], ...], tuple[tuple[int, Callable[[Any], bool]], ...]]:
    """A model record class's fields: the types each may have, and (field position, check of its items) for the
    containers; raises for an annotation not understood."""
    checks = _CHECKS.get(cls)
    if checks is None:
        annotations = _annotations(cls)
        each = [_READ.get(annotations[name]) or _check(annotations[name]) for name in cls._fields]  # type: ignore[attr-defined]
        kinds = tuple(kind for kind, _ in each)
        deep = tuple((at, items) for at, (_, items) in enumerate(each) if items is not None)
        checks = _CHECKS[cls] = (kinds, deep)
    return checks


def _check(annotation: str) -> _Check:
    tokens = []
    at = 0
    text = annotation.strip()
    while at < len(text):
        match = _TOKENS.match(text, at)
        if match is None:
            raise ValueError(f"cannot read the annotation {annotation!r}")
        tokens.append(next(group for group in match.groups() if group is not None))
        at = match.end()
    tokens.append("")
    position = 0

    def parse() -> Any:
        nonlocal position
        name = tokens[position]
        position += 1
        if tokens[position] != "[":
            if "[" in name:  # a quoted annotation: "tuple[Component, ...]"
                return _check(name)
            return _kinds(name), None
        position += 1
        args = [parse()]
        while tokens[position] == ",":
            position += 1
            if tokens[position] == "...":
                position += 1
                args.append(...)
            else:
                args.append(parse())
        if tokens[position] != "]":
            raise ValueError(f"cannot read the annotation {annotation!r}")
        position += 1
        return _generic(name, args, annotation)

    check = parse()
    if tokens[position] != "":
        raise ValueError(f"cannot read the annotation {annotation!r}")
    _READ[annotation] = check
    return check


def _kinds(name: str) -> frozenset[type]:
    """The types a name admits."""
    if name == "None":
        return frozenset((_NONE,))
    value = vars(model).get(name, vars(builtins).get(name))
    if not isinstance(value, type):
        raise ValueError(f"{name} is not a type")
    if getattr(value, "_is_protocol", False):  # Release: the model's records that have all its members
        members = [name for name in vars(value) if not name.startswith("_")]
        records = _model_types().values()
        return frozenset(cls for cls in records if all(member in cls._fields or hasattr(cls, member) for member in members))  # type: ignore[attr-defined]
    return frozenset((value,))


def _each(check: _Check) -> Callable[[Any], bool]:
    """A check of every item of an iterable."""
    kinds, items = check
    if items is None:
        return lambda values: kinds.issuperset(map(type, values))
    return lambda values: kinds.issuperset(map(type, values)) and all(map(items, values))


def _whole(check: _Check) -> Callable[[Any], bool]:
    """A check of one value."""
    kinds, items = check
    return lambda value: type(value) in kinds and (items is None or items(value))


def _generic(name: str, args: list[Any], annotation: str) -> _Check:
    if name == "Optional" and len(args) == 1 and args[0] is not ...:
        kinds, items = args[0]
        return kinds | {_NONE}, None if items is None else lambda value: value is None or items(value)
    if (name == "tuple" and len(args) == 2 and args[1] is ...) or (name == "frozenset" and len(args) == 1 and args[0] is not ...):
        return frozenset((tuple if name == "tuple" else frozenset,)), _each(args[0])
    if name == "tuple" and ... not in args:
        each = tuple(map(_whole, args))
        return frozenset((tuple,)), lambda value: len(value) == len(each) and all(check(item) for check, item in zip(each, value))
    if name == "dict" and len(args) == 2 and ... not in args:
        keys, values = _each(args[0]), _each(args[1])
        return frozenset((dict,)), lambda value: keys(value) and values(value.values())
    raise ValueError(f"cannot read the annotation {annotation!r}")
