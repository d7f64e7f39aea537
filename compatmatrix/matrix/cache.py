"""The validated matrix, kept in compat's cache folder: a run whose matrix file has not changed neither reads TOML
nor validates it again.

Validating every entry is linear in the matrix but slow in Python: for a matrix eight times the bundled one
(1.5 MB, bench/scale_matrix.py) about 55 ms on every run even with the TOML already parsed, where rebuilding the
model from this cache takes about 12 ms (the TOML parser alone takes longer than both). After a matrix file's
bytes have been read and validated, the :class:`~compatmatrix.matrix.model.Matrix` built from them is written to
``matrix-<key>.json`` in compat's cache folder (compatmatrix/cachefiles.py: owner-only, replaced atomically); the
next run with the same bytes rebuilds the model from that file instead.

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
the caller reads the TOML: never a traceback. What a private file with the right key and check says is taken as
it is: compat wrote it after the matrix validated, and only the user (who could as well edit compat) can change it.

Side effects: reads and writes $XDG_CACHE_HOME/compatmatrix/matrix-*.json (files not written for 30 days are
removed when a new one is written); stats the loader's source files.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

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


def _model_types() -> dict[str, type]:
    """The record classes a cache file may name: those of matrix/model.py, by name."""
    return {name: value for name, value in vars(model).items() if isinstance(value, type) and issubclass(value, Record) and value is not Record}


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
        matrix = decode(json.loads(body))
        if type(matrix) is not Matrix or set(matrix.releases) != set(Component):
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
    types = _model_types()
    nodes: list[Any] = []
    index: dict[Any, int] = {}  # a node's own form -> its position (equal values share one node)
    seen: dict[int, tuple[int, Any]] = {}  # id(value) -> (position, value): each object encoded once

    def put(node: Any, form: Any) -> int:
        position = index.get(form)
        if position is None:
            position = index[form] = len(nodes)
            nodes.append(node)
        return position

    def enc(value: Any) -> int:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return put(value, (kind, value))
        known = seen.get(id(value))
        if known is not None:
            return known[0]
        if kind is Version:
            node: list[Any] = ["V", str(value)]
        elif kind is SpecifierSet:
            node = ["S", str(value)]
        elif kind is Component:
            node = ["C", value.value]
        elif kind is tuple:
            node = ["t", *[enc(item) for item in value]]
        elif kind is frozenset:
            node = ["f", *[enc(item) for item in value]]
        elif kind is dict:
            node = ["d"]
            for item_key, item in value.items():
                node += [enc(item_key), enc(item)]
        elif types.get(kind.__name__) is kind:
            node = ["R", kind.__name__, *[enc(value.__dict__[name]) for name in kind._fields]]
        else:
            raise TypeError(f"the matrix cache cannot keep a {kind.__name__}")
        position = put(node, tuple(node))
        seen[id(value)] = (position, value)  # the value held: its id is not reused while encoding
        return position

    root = enc(matrix)
    if root != len(nodes) - 1:  # pragma: no cover - the matrix is the last node made
        raise TypeError("the matrix is not the last node")
    return nodes


def decode(nodes: list[Any]) -> Any:
    """The value of the last node (see the module); raises on anything unexpected (the caller reads the TOML)."""
    types = _model_types()
    values: list[Any] = []
    append = values.append
    for node in nodes:
        if type(node) is not list:
            if type(node) not in (str, int, bool) and node is not None:
                raise TypeError("not a value of the matrix")
            append(node)
            continue
        tag = node[0]
        if tag == "R":
            cls = types[node[1]]
            fields = [values[i] for i in node[2:]]
            if len(fields) != len(cls._fields):  # type: ignore[attr-defined]
                raise ValueError(f"{node[1]} takes {len(cls._fields)} fields")  # type: ignore[attr-defined]
            append(cls(*fields))
        elif tag == "V":
            append(Version(node[1]))
        elif tag == "t":
            append(tuple([values[i] for i in node[1:]]))
        elif tag == "f":
            append(frozenset([values[i] for i in node[1:]]))
        elif tag == "d":
            items = iter([values[i] for i in node[1:]])
            append(dict(zip(items, items)))
        elif tag == "S":
            append(SpecifierSet(node[1]))
        elif tag == "C":
            append(Component(node[1]))
        else:
            raise ValueError(f"unknown node {tag!r}")
    return values[-1]
