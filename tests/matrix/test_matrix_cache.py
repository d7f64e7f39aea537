"""The validated-matrix cache ($XDG_CACHE_HOME/compatmatrix, compatmatrix/matrix/cache.py) holds data, never code:
whatever is planted there (a hostile pickle, corrupt or truncated JSON, another matrix's file, a damaged model, a
class from outside the model, a FIFO, a file others may write) is ignored without a word and the answer stays what
the matrix file says. The key follows the matrix file's bytes (not its size or time stamps), compat's version and
what else the model depends on; a matrix that does not validate is never kept; a cache folder compat cannot use
changes nothing but the time.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from compatmatrix import cachefiles
from compatmatrix.matrix import load_matrix
from compatmatrix.matrix.model import Matrix

from ..conftest import FIXTURES, ROOT

RESOLVE = ["resolve", "--json", "--python-version", "3.11"]


def compat(*args, cache: Path, no_cache: bool = False, timeout: float = 60):
    env = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_NO_CACHE")}
    env["XDG_CACHE_HOME"] = str(cache)
    if no_cache:
        env["COMPAT_NO_CACHE"] = "1"
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


class _Plant:
    """Unpickling this creates ``marker``: proof that loading the cache ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def cache_files(cache: Path) -> list[Path]:
    folder = cache / "compatmatrix"
    return sorted(p for p in folder.iterdir() if p.name.startswith("matrix-")) if folder.is_dir() else []


def split(file: Path) -> tuple[dict, list]:
    """A cache file's header and nodes."""
    head, _, body = file.read_bytes().partition(b"\n")
    return json.loads(head), json.loads(body)


def rewrite(file: Path, nodes: list, header: Optional[dict] = None) -> None:
    """The cache file with other nodes, and a check that matches them (what only a deliberate edit would do)."""
    header = dict(header or split(file)[0])
    body = json.dumps(nodes, separators=(",", ":"), ensure_ascii=False).encode()
    header["check"] = cachefiles.blake2b(body).hexdigest()
    file.write_bytes(json.dumps(header).encode() + b"\n" + body)
    file.chmod(0o600)


def plant_registry_checked(file: Path, value: str) -> None:
    """Rewrite the cached Matrix's registry_checked (a well-formed file whose check matches)."""
    header, nodes = split(file)
    root = nodes.pop()
    assert root[:2] == ["R", "Matrix"]
    nodes.append(value)
    root[2 + Matrix._fields.index("registry_checked")] = len(nodes) - 1
    nodes.append(root)
    rewrite(file, nodes, header)


@pytest.fixture()
def cached(tmp_path):
    """(cache folder, the answer without any cache, the cache files one run wrote)."""
    cache = tmp_path / "cache"
    baseline = compat(*RESOLVE, cache=tmp_path / "unused", no_cache=True)
    assert baseline.returncode == 0, baseline.stderr
    first = compat(*RESOLVE, cache=cache)
    assert first.stdout == baseline.stdout
    files = cache_files(cache)
    assert files, "the first run writes the cache"
    return cache, baseline.stdout, files


def test_planted_pickle_runs_no_code_and_changes_nothing(cached, tmp_path):
    cache, answer, files = cached
    marker = tmp_path / "code-ran"
    hostile = pickle.dumps(_Plant(marker))
    for file in files:
        file.write_bytes(hostile)
    done = compat(*RESOLVE, cache=cache)
    assert not marker.exists(), "loading the cache ran code"
    assert done.returncode == 0 and done.stdout == answer and done.stderr == ""


def _other_matrix_cache(tmp_path: Path) -> bytes:
    other = tmp_path / "other-cache"
    done = compat("resolve", "--json", "--python-version", "3.10", "--matrix", str(FIXTURES / "mini_matrix.toml"), cache=other)
    assert done.returncode in (0, 1), done.stderr
    (file,) = cache_files(other)
    return file.read_bytes()


CORRUPT = {
    "empty": lambda good, tmp: b"",
    "truncated": lambda good, tmp: good[: len(good) // 2],
    "not-utf8": lambda good, tmp: b"\xff\xfe" + good[2:],
    "a-list": lambda good, tmp: b"[1, 2, 3]",
    "wrong-types": lambda good, tmp: json.dumps({"format": "1", "compat": 1, "sha256": [], "document": "x"}).encode(),
    "deep-nesting": lambda good, tmp: b"[" * 100000 + b"]" * 100000,
    "huge-number": lambda good, tmp: b"1" * 5000,
    "another-matrix": lambda good, tmp: _other_matrix_cache(tmp),
    "pickle-of-a-dict": lambda good, tmp: pickle.dumps({"format": 1}),
    "header-only": lambda good, tmp: good.partition(b"\n")[0],
    "truncated-model": lambda good, tmp: good[:-7],
    "one-byte-changed": lambda good, tmp: _flip_digit(good),
    "deep-nesting-checked": lambda good, tmp: _with_body(good, b"[" * 100000 + b"]" * 100000),
    "foreign-class-checked": lambda good, tmp: _checked(good, lambda nodes: nodes[:-1] + [["R", "Popen", 0]]),
    "bad-reference-checked": lambda good, tmp: _checked(good, lambda nodes: nodes[:-1] + [nodes[-1][:2] + [10**9] * (len(nodes[-1]) - 2)]),
    "missing-field-checked": lambda good, tmp: _checked(good, lambda nodes: nodes[:-1] + [nodes[-1][:-1]]),
    "unknown-tag-checked": lambda good, tmp: _checked(good, lambda nodes: [["X", 1]] + nodes),
    "not-a-matrix-checked": lambda good, tmp: _checked(good, lambda nodes: nodes + ["a string"]),
    "a-float-checked": lambda good, tmp: _checked(good, lambda nodes: [1.5] + nodes),
    "bad-version-checked": lambda good, tmp: _checked(good, lambda nodes: [["V", "not a version"]] + nodes),
    "no-nodes-checked": lambda good, tmp: _checked(good, lambda nodes: []),
}


def _with_body(good: bytes, body: bytes) -> bytes:
    header = json.loads(good.partition(b"\n")[0])
    header["check"] = cachefiles.blake2b(body).hexdigest()
    return json.dumps(header).encode() + b"\n" + body


def _checked(good: bytes, change) -> bytes:
    """A well-formed file (its check matches) whose model is damaged: as if written by someone on purpose."""
    return _with_body(good, json.dumps(change(json.loads(good.partition(b"\n")[2]))).encode())


def _flip_digit(good: bytes) -> bytes:
    """One digit of a reference in the model changed: still JSON, no longer what was written."""
    at = good.rindex(b",1")
    return good[: at + 1] + b"2" + good[at + 2 :]


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_cache_is_ignored_silently(cached, tmp_path, kind):
    cache, answer, files = cached
    for file in files:
        file.write_bytes(CORRUPT[kind](file.read_bytes(), tmp_path))
    done = compat(*RESOLVE, cache=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout == answer and done.stderr == ""


# --- files that are well formed (the check matches) but would make compat hang or fail: refused, the TOML is read ---


def _shifted(nodes: list, extra: list) -> list:
    """``extra`` (nodes referring to each other only) put before ``nodes``, whose references move along."""
    n = len(extra)

    def shift(node):
        if type(node) is not list or node[0] in ("V", "S", "C"):
            return node
        if node[0] == "R":
            return ["R", node[1], *[i + n for i in node[2:]]]
        return [node[0], *[i + n for i in node[1:]]]

    return extra + [shift(node) for node in nodes]


def _hash_bomb(nodes: list) -> list:
    """The reviewer's crafted file: 70 tuples, each holding the one before twice (2**70 values when expanded), in a
    frozenset (hashing it visits every one)."""
    return _shifted(nodes, [0, *[["t", i, i] for i in range(70)], ["f", 70]])


def _versions_as_strings(nodes: list) -> list:
    """The reviewer's crafted file: every Version a string (the resolver then compared a str with a Version)."""
    return [node[1] if type(node) is list and node[0] == "V" else node for node in nodes]


@pytest.mark.parametrize("craft", [_hash_bomb, _versions_as_strings], ids=["hash-bomb", "versions-as-strings"])
def test_crafted_cache_is_refused_and_written_again(cached, craft):
    from compatmatrix.matrix import cache as matrix_cache

    cache, answer, files = cached
    good = {file: matrix_cache.decode(split(file)[1], 1 << 24) for file in files}
    for file in files:
        rewrite(file, craft(split(file)[1]))
    done = compat(*RESOLVE, cache=cache, timeout=120)  # before the fix the hash bomb never ended
    assert (done.returncode, done.stdout, done.stderr) == (0, answer, "")
    # the TOML was read, and its model written again (the same model; not the same bytes: a set's order follows the
    # process's string hashes)
    assert {file: matrix_cache.decode(split(file)[1], 1 << 24) for file in files} == good


def _field(cls: str, field: str, extra: list):
    """The first ``cls`` record's ``field`` set to the last of ``extra`` (nodes put first)."""
    from compatmatrix.matrix import model

    def change(nodes: list) -> list:
        out = _shifted(nodes, extra)
        for node in out:
            if type(node) is list and node[:2] == ["R", cls]:
                node[2 + getattr(model, cls)._fields.index(field)] = len(extra) - 1
                return out
        raise AssertionError(f"no {cls} in the matrix")

    return change


def _swap_releases(first: str, second: str):
    """The releases of two components swapped in the Matrix's releases (each tuple well typed, of the wrong class)."""

    def change(nodes: list) -> list:
        from compatmatrix.matrix.model import Matrix

        table = nodes[nodes[-1][2 + Matrix._fields.index("releases")]]
        at = {nodes[table[i]][1]: i + 1 for i in range(1, len(table), 2)}
        table[at[first]], table[at[second]] = table[at[second]], table[at[first]]
        return nodes

    return change


_PROVENANCE = [["t"], True, "", ["R", "Provenance", 0, 1, 2]]
_PROFILE = ["p", ["f"], ["t"], ["R", "Profile", 0, 0, 1, 2]]
_COMPONENTS = ["torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torchvision", "torchaudio", "transformers", "accelerate"]

#: One file per kind of value that is not what the model declares, or that costs more than its size: (change, what
#: decode() says); None: decode() builds it, read() refuses it.
ILL_TYPED = {
    "str-for-version": (_field("TorchRelease", "version", ["2.1.0"]), "fields of TorchRelease"),
    "int-for-bool": (_field("Provenance", "verified", [1]), "fields of Provenance"),
    "bool-for-int": (_field("Matrix", "schema_version", [True]), "fields of Matrix"),
    "none-for-str": (_field("TorchRelease", "released", [None]), "fields of TorchRelease"),
    "str-for-optional-version": (_field("WheelSet", "glibc_min", ["2.28"]), "fields of WheelSet"),
    "str-for-tuple": (_field("Provenance", "sources", ["a"]), "fields of Provenance"),
    "tuple-of-ints-for-tuple-of-str": (_field("Provenance", "sources", [1, ["t", 0]]), "sources of Provenance"),
    "frozenset-of-str-for-frozenset-of-version": (_field("WheelSet", "python", ["3.11", ["f", 0]]), "python of WheelSet"),
    "record-of-another-class": (_field("Host", "provenance", ["x", ["R", "Yank", 0, 0]]), "fields of Host"),
    "pair-of-one": (_field("Policy", "python_range", [["V", "3.8"], ["t", 0]]), "python_range of Policy"),
    "pair-with-a-str": (_field("Policy", "python_range", [["V", "3.8"], "3.11", ["t", 0, 1]]), "python_range of Policy"),
    "pairs-of-one": (_field("Policy", "features_with_ccl", ["a", ["t", 0], ["t", 1]]), "features_with_ccl of Policy"),
    "dict-key-of-another-type": (_field("Matrix", "profiles", [*_PROFILE, 7, ["d", 4, 3]]), "profiles of Matrix"),
    "dict-value-of-another-type": (_field("Matrix", "profiles", ["p", ["d", 0, 0]]), "profiles of Matrix"),
    "release-that-is-no-release": (
        _field("Matrix", "releases", [*_PROVENANCE, ["t", 3], *[["C", c] for c in _COMPONENTS], ["d", *[x for i in range(5, 12) for x in (i, 4)]]]),
        "releases of Matrix",
    ),
    "releases-of-another-component": (_swap_releases("torch", "transformers"), None),
    "set-of-tuples": (lambda nodes: _shifted(nodes, [["t"], ["f", 0]]), "a set of other than plain values"),
    "dict-with-a-tuple-key": (lambda nodes: _shifted(nodes, [["t"], ["d", 0, 0]]), "a dict without plain keys"),
    "shared-tuples-without-a-set": (lambda nodes: _shifted(nodes, [0, *[["t", i, i] for i in range(40)]]), "larger than its file"),
    "shared-tuples-by-negative-index": (  # node k: ["t", k - 1 - n, k - 1 - n] (n: how many nodes), the node before it
        lambda nodes: (lambda n: _shifted(nodes, [0, *[["t", i - n, i - n] for i in range(40)]]))(len(nodes) + 41),
        "larger than its file",
    ),
    "thirteen-tuples-deep": (lambda nodes: _shifted(nodes, [0, *[["t", i] for i in range(13)]]), "larger than its file"),
}


def _read_nodes(tmp_path: Path, nodes: list):
    """What cache.read() makes of a well-formed file (right key, matching check) holding ``nodes``."""
    from compatmatrix.matrix import cache as matrix_cache

    folder = tmp_path / "read"
    folder.mkdir(mode=0o700, exist_ok=True)
    key = "0" * 128
    body = json.dumps(nodes, separators=(",", ":"), ensure_ascii=False).encode()
    header = {"format": matrix_cache.FORMAT, "key": key, "check": cachefiles.blake2b(body).hexdigest()}
    file = folder / matrix_cache.file_name(key)
    file.write_bytes(json.dumps(header).encode() + b"\n" + body)
    file.chmod(0o600)
    return matrix_cache.read(str(folder), key, "matrix.toml", limit=1 << 24)


@pytest.mark.parametrize("kind", sorted(ILL_TYPED))
def test_ill_typed_or_overlarge_model_is_refused(kind, mini_matrix, tmp_path):
    from compatmatrix.matrix import cache as matrix_cache
    from compatmatrix.record import replace

    good = json.loads(json.dumps(matrix_cache.encode(replace(mini_matrix, source_path=""))))
    assert _read_nodes(tmp_path, good) == mini_matrix  # the same file untouched is read
    change, says = ILL_TYPED[kind]
    nodes = change(json.loads(json.dumps(good)))
    if says is None:
        matrix_cache.decode(nodes, 1 << 20)
    else:
        with pytest.raises((TypeError, ValueError), match=says):
            matrix_cache.decode(nodes, 1 << 20)
    assert _read_nodes(tmp_path, nodes) is None


def test_cache_that_is_a_fifo_does_not_hang_compat(cached):
    cache, answer, files = cached
    for file in files:
        file.unlink()
        os.mkfifo(file)
    done = compat(*RESOLVE, cache=cache, timeout=60)
    assert done.returncode == 0 and done.stdout == answer


def test_cache_others_may_write_is_not_trusted(cached):
    cache, answer, files = cached
    for file in files:
        plant_registry_checked(file, "planted by someone else")
    done = compat("matrix", "--json", cache=cache)
    assert "planted by someone else" in done.stdout  # the planted file is well formed: it is read while private
    for file in files:
        file.chmod(0o666)
    done = compat("matrix", "--json", cache=cache)
    assert done.returncode == 0
    assert "planted by someone else" not in done.stdout


def test_cache_is_json_private_and_keyed_by_text_and_version(tmp_path, monkeypatch):
    import compatmatrix

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    source = tmp_path / "matrix.toml"
    text = (FIXTURES / "mini_matrix.toml").read_text()
    source.write_text(text)
    first = load_matrix(source)
    (file,) = cache_files(tmp_path / "cache")
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    header, nodes = split(file)  # plain data: nothing to execute
    assert header["format"] == 2 and len(header["key"]) == 128
    assert nodes[-1][:2] == ["R", "Matrix"]
    # a cache that says something else than the file, under the right name (written by this user): the next
    # version of compat does not read it, and a changed matrix text does not either
    plant_registry_checked(file, "from the cache")
    assert load_matrix(source).registry_checked == "from the cache"  # proof that the cache is read at all
    monkeypatch.setattr(compatmatrix, "__version__", "999.0")
    assert load_matrix(source) == first and load_matrix(source).registry_checked == first.registry_checked
    assert len(cache_files(tmp_path / "cache")) == 2
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source.write_text(text.replace('registry_checked = "fixture"', 'registry_checked = "edited"'))
    assert load_matrix(source).registry_checked == "edited"


def _load_in_process(monkeypatch, cache: Path, path: Path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    return load_matrix(path)


def test_one_byte_changed_with_size_and_time_kept_is_read_again(tmp_path, monkeypatch):
    source = tmp_path / "matrix.toml"
    text = (FIXTURES / "mini_matrix.toml").read_text()
    source.write_text(text)
    before = os.stat(source)
    assert _load_in_process(monkeypatch, tmp_path / "cache", source).registry_checked == "fixture"
    assert cache_files(tmp_path / "cache")
    source.write_text(text.replace('registry_checked = "fixture"', 'registry_checked = "fixturE"'))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(source)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert load_matrix(source).registry_checked == "fixturE"


def test_a_matrix_that_stops_validating_is_reported_every_time(tmp_path):
    """Cached while good; then broken at the same path (same size, same time): the error, never the old matrix."""
    cache = tmp_path / "cache"
    source = tmp_path / "matrix.toml"
    text = (FIXTURES / "mini_matrix.toml").read_text()
    source.write_text(text)
    before = os.stat(source)
    good = compat("resolve", "--json", "--python-version", "3.10", "--matrix", str(source), cache=cache)
    assert good.returncode == 0, good.stderr
    source.write_text(text.replace('version = "1.12.1"', 'version = "1.12.x"', 1))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    expected = compat("resolve", "--python-version", "3.10", "--matrix", str(source), cache=tmp_path / "unused", no_cache=True)
    assert expected.returncode == 2 and "1.12.x" in expected.stderr and "Traceback" not in expected.stderr
    for _ in range(2):
        done = compat("resolve", "--python-version", "3.10", "--matrix", str(source), cache=cache)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected.stderr)
    assert len(cache_files(cache)) == 1  # only the good one was kept


def test_broken_toml_is_reported_every_time(tmp_path):
    cache = tmp_path / "cache"
    source = tmp_path / "matrix.toml"
    source.write_text("schema_version = 1\n[policy\n")
    for _ in range(2):
        done = compat("matrix", "--json", "--matrix", str(source), cache=cache)
        assert done.returncode == 2 and "is not valid TOML" in done.stderr and "Fix the TOML syntax." in done.stderr
    source.write_bytes(b"schema_version = 1\nregistry_checked = \"\xff\"\n")
    done = compat("matrix", "--json", "--matrix", str(source), cache=cache)
    assert done.returncode == 2 and "is not UTF-8 text (byte 0xff" in done.stderr and "Save it as UTF-8 TOML" in done.stderr
    assert cache_files(cache) == []


def _home_is_a_file(home: Path) -> None:
    home.write_text("not a folder")


def _folder_is_a_file(home: Path) -> None:
    home.mkdir()
    (home / "compatmatrix").write_text("not a folder")


def _folder_others_may_write(home: Path) -> None:
    (home / "compatmatrix").mkdir(parents=True)
    (home / "compatmatrix").chmod(0o777)


def _folder_of_another_user(home: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    (home / "compatmatrix").mkdir(parents=True, mode=0o700)
    os.chown(home / "compatmatrix", 65534, 65534)


def _folder_read_only(home: Path) -> None:
    (home / "compatmatrix").mkdir(parents=True, mode=0o500)
    (home / "compatmatrix").chmod(0o500)  # root writes there anyway: then it is simply a cache that works


UNUSABLE = {
    "cache-home-is-a-file": _home_is_a_file,
    "folder-is-a-file": _folder_is_a_file,
    "folder-others-may-write": _folder_others_may_write,
    "folder-of-another-user": _folder_of_another_user,
    "folder-read-only": _folder_read_only,
}


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_a_cache_folder_compat_cannot_use_changes_nothing(tmp_path, kind):
    baseline = compat(*RESOLVE, cache=tmp_path / "unused", no_cache=True)
    home = tmp_path / "home"
    UNUSABLE[kind](home)
    for _ in range(2):
        done = compat(*RESOLVE, cache=home)
        assert (done.returncode, done.stdout, done.stderr) == (0, baseline.stdout, "")
    if kind != "folder-read-only" and (home / "compatmatrix").is_dir():
        assert cache_files(home) == []  # nothing written where compat would not read it


def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path, monkeypatch, mini_matrix):
    """Writing fails (a full or read-only disk): the matrix is loaded all the same, every time."""
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    for _ in range(2):
        assert _load_in_process(monkeypatch, tmp_path / "cache", FIXTURES / "mini_matrix.toml") == mini_matrix
    assert cache_files(tmp_path / "cache") == []


def _scaled(tmp_path: Path, factor: int) -> Path:
    sys.path.insert(0, str(ROOT))
    try:
        from bench.scale_matrix import write_scaled
    finally:
        sys.path.remove(str(ROOT))
    return write_scaled(factor, tmp_path / f"matrix-x{factor}.toml")


FIVE_PINS = ["torch==2.1.0", "intel-extension-for-pytorch==2.3.0", "oneccl-bind-pt==2.0.0", "transformers==4.30.0", "accelerate==0.20.0"]
COMMANDS = [
    ["resolve", "--json", "--python-version", "3.11"],
    ["resolve", "--json", "--python-version", "3.10", *FIVE_PINS],
    ["resolve", "--python-version", "3.10", *FIVE_PINS],
    ["resolve", "--python-version", "3.10", "torch==1.12.1", "ccl==1.12.0"],
    ["matrix", "--json"],
]


@pytest.mark.parametrize("factor", [None, 8])
def test_answers_from_the_cache_are_the_answers_without_it(tmp_path, factor):
    """Byte for byte: every command twice (the second from the cache) against the same command with every cache off,
    for the bundled matrix and one eight times its size."""
    extra = [] if factor is None else ["--matrix", str(_scaled(tmp_path, factor))]
    cache = tmp_path / "cache"
    for command in COMMANDS:
        expected = compat(*command, *extra, cache=tmp_path / "unused", no_cache=True)
        assert expected.returncode in (0, 1), expected.stderr
        for _ in range(2):
            done = compat(*command, *extra, cache=cache)
            assert (done.returncode, done.stdout, done.stderr) == (expected.returncode, expected.stdout, expected.stderr), command
    assert len(cache_files(cache)) == 1


@pytest.mark.parametrize("name", ["bundled", "mini", "x8"])
def test_the_model_survives_the_round_trip(name, matrix, mini_matrix, tmp_path):
    """encode/decode give back an equal Matrix whose versions and ranges print as before, within the bounds a file
    is held to (EXPANSION values per byte, MAX_DEPTH)."""
    from compatmatrix.matrix import cache as matrix_cache
    from compatmatrix.matrix.load import parse_matrix
    from compatmatrix.record import replace

    if name == "x8":
        original = parse_matrix(_scaled(tmp_path, 8).read_text(), "x8")
    else:
        original = {"bundled": matrix, "mini": mini_matrix}[name]
    body = json.dumps(matrix_cache.encode(replace(original, source_path="")), separators=(",", ":"), ensure_ascii=False).encode()
    copy = matrix_cache.decode(json.loads(body), matrix_cache.EXPANSION * len(body) // 4)  # a quarter of the bound: room to spare
    assert copy == original
    assert repr(replace(copy, source_path="")) == repr(replace(original, source_path=""))  # every field, as printed
    assert _read_nodes(tmp_path, json.loads(body)) == original  # and read() takes it (every component's release class)


def test_every_model_record_has_checks_for_its_fields():
    """Every annotation of matrix/model.py reads as a check (one the reader does not know would make every cache file
    unreadable: correct, but never a hit)."""
    from compatmatrix.matrix import cache as matrix_cache

    for cls in matrix_cache._model_types().values():
        kinds, _ = matrix_cache._field_checks(cls)
        assert len(kinds) == len(cls._fields), cls
    kinds, items = matrix_cache._check("tuple[Release, ...]")
    assert kinds == {tuple} and items is not None
    assert {cls.__name__ for cls in matrix_cache._kinds("Release")} == {"TorchRelease", "IpexRelease", "CclRelease", "CompanionRelease", "LibraryLine"}


def test_the_key_follows_what_the_model_depends_on(monkeypatch):
    import packaging

    from compatmatrix.matrix import cache as matrix_cache

    data = (FIXTURES / "mini_matrix.toml").read_bytes()
    base = matrix_cache.key(data)
    assert matrix_cache.key(data) == base
    assert matrix_cache.key(data.replace(b"fixture", b"fixturE")) != base
    changes = [
        (matrix_cache, "FORMAT", matrix_cache.FORMAT + 1),
        (packaging, "__version__", "0.0"),
        (matrix_cache, "_SOURCES", matrix_cache._SOURCES[:-1]),
        (matrix_cache.model.Provenance, "_fields", ("sources",)),
    ]
    for owner, name, value in changes:
        with monkeypatch.context() as patched:
            patched.setattr(owner, name, value)
            assert matrix_cache.key(data) != base, name


def test_a_loader_edit_is_a_new_key(tmp_path, monkeypatch):
    """The loader's source files are part of the key (development: an edited loader never reads an old model)."""
    from compatmatrix.matrix import cache as matrix_cache

    data = (FIXTURES / "mini_matrix.toml").read_bytes()
    base = matrix_cache.key(data)
    real_stat = os.stat

    def touched(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if str(path).endswith("load.py"):
            return os.stat_result((*info[:8], info.st_mtime + 1, info.st_ctime))
        return info

    monkeypatch.setattr(matrix_cache.os, "stat", touched)
    assert matrix_cache.key(data) != base


def test_old_cache_files_are_removed_when_one_is_written(tmp_path, monkeypatch):
    folder = tmp_path / "cache" / "compatmatrix"
    folder.mkdir(parents=True, mode=0o700)
    old, recent, other = folder / "matrix-old.json", folder / "matrix-recent.json", folder / "probe-old.json"
    for file in (old, recent, other):
        file.write_text("{}")
    month_ago = os.stat(old).st_mtime - 31 * 86400
    for file in (old, other):
        os.utime(file, (month_ago, month_ago))
    _load_in_process(monkeypatch, tmp_path / "cache", FIXTURES / "mini_matrix.toml")
    assert not old.exists() and recent.exists() and other.exists()
    assert len(cache_files(tmp_path / "cache")) == 2


@pytest.mark.parametrize("value", ["12", "relative/cache", "./x", ""])
def test_a_relative_or_empty_xdg_cache_home_is_ignored(value, monkeypatch, tmp_path):
    """The XDG spec: a relative path in XDG_CACHE_HOME is invalid and ignored (it would follow the working directory:
    `XDG_CACHE_HOME=12 compat ...` once wrote a folder named 12 wherever compat ran)."""
    from compatmatrix import cachefiles

    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert cachefiles.cache_dir() == os.path.join(str(tmp_path), ".cache", "compatmatrix")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert cachefiles.cache_dir() == str(tmp_path / "abs" / "compatmatrix")
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    monkeypatch.setenv("HOME", "relhome")  # and a relative HOME: no cache at all
    assert cachefiles.cache_dir() is None


def test_a_cache_folder_too_deep_to_make_is_skipped_silently(tmp_path):
    from compatmatrix import cachefiles

    deep = os.path.join(str(tmp_path), *(["x"] * 3000))
    cachefiles.write_bytes(deep, "f.json", b"{}")  # no RecursionError, no exception: the cache is best effort
