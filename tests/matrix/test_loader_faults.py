"""Hostile and broken input files: a --matrix file or the config file that is not UTF-8, nests 100,000 deep,
has the wrong types or absurd numbers is one sentence naming the file and the problem (exit 2), never a
traceback. A hypothesis test feeds random and mutated TOML to the loader: it loads or raises MatrixError.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compatmatrix.errors import MatrixError
from compatmatrix.matrix import load_matrix

from ..conftest import FIXTURES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MINI = (FIXTURES / "mini_matrix.toml").read_text()
DEEP = 100_000


def compat(*args, env=None, timeout=60):
    environ = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_CONFIG")}
    environ["COMPAT_NO_CACHE"] = "1"
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout, env=environ, check=False)


def assert_one_sentence(done, path: Path, *texts: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("compat: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert str(path) in done.stderr, done.stderr
    assert len(done.stderr) < 600, done.stderr
    for text in texts:
        assert text in done.stderr, done.stderr


def _replace(old: str, new: str) -> str:
    assert old in MINI, old
    return MINI.replace(old, new, 1)


MATRICES = {
    "not-utf8": (MINI.encode().replace(b"# FIXTURE", b"# FIXTURE \xff\xfe", 1), "is not UTF-8 text"),
    "latin1-in-a-string": (_replace('registry_checked = "fixture"', 'registry_checked = "caf\xe9"').encode("latin-1"), "is not UTF-8 text"),
    "nested-arrays": (("deep = " + "[" * DEEP + "]" * DEEP + "\n" + MINI).encode(), "nests too deeply"),
    "nested-inline-tables": (("deep = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n" + MINI).encode(), "nests too deeply"),
    "array-of-tables-for-a-table": (_replace("[hosts.pypi]", "[[hosts]]").replace("[hosts.intel]", "[[hosts]]").encode(), "field 'hosts'"),
    "array-of-tables-for-policy": (_replace("[policy]\n", "[[policy]]\n").replace("[policy.host_preference]", "[policy.host_preference_x]").encode(), "[policy]"),
    "list-of-profiles": (_replace("[profiles.ddp-ccl]", "[[profiles]]").replace("[profiles.stock]", "[[profiles]]").encode(), "field 'profiles'"),
    "string-for-a-list": (_replace('components = ["torch", "transformers", "accelerate"]', 'components = 5').encode(), "field 'components'"),
    "huge-integer": (_replace("schema_version = 1", "schema_version = 1" + "0" * 5000).encode(), "number"),
    "large-integer": (_replace("schema_version = 1", "schema_version = 1" + "0" * 3000).encode(), "field 'schema_version'"),
    "boolean-schema": (_replace("schema_version = 1", "schema_version = true").encode(), "field 'schema_version'"),
    "version-of-10000-digits": (_replace('[[torch]]\nversion = "1.12.1"', '[[torch]]\nversion = "' + "1" * 10000 + '"').encode(), "field 'version'"),
    "specifier-of-10000-digits": (_replace('torch_accepts = "==1.12.*"', 'torch_accepts = "==1.12.*,<' + "9" * 10000 + '"').encode(), "field 'torch_accepts'"),
    "long-unknown-key": (_replace("schema_version = 1", "schema_version = 1\n" + "k" * 10000 + " = 1").encode(), "is not a known key"),
    "deep-value-in-a-message": (_replace('components = ["torch", "transformers", "accelerate"]', "components = " + "[" * 150 + "]" * 150).encode(), "field 'components'"),
    "date-for-a-string": (_replace('registry_checked = "fixture"', "registry_checked = 2024-01-01").encode(), "field 'registry_checked'"),
}


@pytest.mark.parametrize("kind", sorted(MATRICES))
def test_broken_matrix_file_is_one_sentence(tmp_path, kind):
    content, text = MATRICES[kind]
    path = tmp_path / "matrix.toml"
    path.write_bytes(content)
    assert_one_sentence(compat("resolve", "--matrix", str(path), "--python-version", "3.10"), path, text)


def test_matrix_that_is_a_folder_or_too_big(tmp_path):
    assert_one_sentence(compat("resolve", "--matrix", str(tmp_path), "--python-version", "3.10"), tmp_path, "cannot be read")
    big = tmp_path / "big.toml"
    with open(big, "wb") as handle:
        handle.truncate(65 << 20)  # sparse: no disk space used
    assert_one_sentence(compat("resolve", "--matrix", str(big), "--python-version", "3.10"), big, "larger than")


CONFIGS = {
    "not-utf8": (b'[indexes]\npypi = "https://mirror.example/caf\xe9"\n', "is not UTF-8 text"),
    "nested-arrays": (("x = " + "[" * DEEP + "]" * DEEP + "\n").encode(), "nests too deeply"),
    "array-of-tables": (b'[[indexes]]\npypi = "https://mirror.example/simple"\n', "[indexes]"),
    "string-for-a-table": (b'indexes = "https://mirror.example/simple"\n', "[indexes]"),
    "number-for-a-url": (b"[indexes]\npypi = 5\n", "[indexes]"),
    "huge-integer": (("[indexes]\npypi = 1" + "0" * 5000 + "\n").encode(), "number"),
    "invalid-toml": (b"[indexes\n", "is not valid TOML"),
    "nul-in-a-url": (b'[indexes]\npypi = "https://mirror\\u0000.example/"\n', "[indexes]"),
    "long-host-id": (('[indexes]\n"' + "h" * 5000 + '" = "https://mirror.example/"\n').encode(), "[indexes]"),
}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_broken_config_file_is_one_sentence(tmp_path, kind):
    content, text = CONFIGS[kind]
    config = tmp_path / "xdg" / "compatmatrix" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_bytes(content)
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock",
                  env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert_one_sentence(done, config, text)


def test_good_config_file_still_works(tmp_path):
    config = tmp_path / "xdg" / "compatmatrix" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[indexes]\npypi = "https://mirror.example/simple"\n')
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock",
                  env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "--index-url https://mirror.example/simple" in done.stdout


# --- random TOML: it loads or it is a MatrixError ----------------------------------------------------------


def _key(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string (json.dumps escapes all non-ASCII)


def to_toml(document: dict) -> str:
    """A dict as TOML: top-level ``key = value`` lines, nested values inline."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in document.items())


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return json.dumps(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        return repr(value) if abs(value) != float("inf") else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))  # dates: not produced here


SCALARS = st.one_of(
    st.text(max_size=12), st.integers(), st.booleans(), st.floats(allow_nan=False),
    st.sampled_from(["1.12.0", "1.12.1", "2.7.0", "==1.12.*", ">=3.8", "3.10", "pypi", "intel", "torch", "exit127", "", "x" * 50]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
MINI_DOC = tomllib.loads(MINI)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


PATHS = [p for p in _paths(MINI_DOC) if p]


SHALLOW = [p for p in PATHS if len(p) <= 3]  # whole tables and arrays of tables: where wrong types hurt most


@st.composite
def mutated_mini(draw):
    """The fixture matrix with a few values replaced by random ones, or deleted."""
    document = json.loads(json.dumps(MINI_DOC))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(SHALLOW) if draw(st.booleans()) else st.sampled_from(PATHS))
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    return to_toml(document)


@st.composite
def retyped_mini(draw):
    """The fixture matrix with one top-level entry (a table, an array of tables) of another type."""
    document = json.loads(json.dumps(MINI_DOC))
    document[draw(st.sampled_from(sorted(document)))] = draw(VALUES)
    return to_toml(document)


@st.composite
def mangled_text(draw):
    """The fixture matrix's text with lines dropped, duplicated or cut."""
    lines = MINI.splitlines(True)
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 4))):
        index = rng.randrange(len(lines))
        action = rng.choice(["drop", "duplicate", "cut", "junk"])
        if action == "drop":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "cut":
            lines[index] = lines[index][: rng.randrange(len(lines[index]) + 1)] + "\n"
        else:
            lines[index] = rng.choice(["[", "]", "=", '"', "{", "[[x]]", "a.b.c = 1", "\\u0000"]) + lines[index]
        if not lines:
            break
    return "".join(lines)


TEXTS = st.one_of(st.dictionaries(st.text(max_size=10), VALUES, max_size=6).map(to_toml), mutated_mini(), retyped_mini(), mangled_text())


@contextlib.contextmanager
def cache_in(folder: str):
    """load_matrix with its cache in ``folder`` (hypothesis examples share one process: restore afterwards)."""
    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "COMPAT_NO_CACHE")}
    os.environ["XDG_CACHE_HOME"] = folder
    os.environ.pop("COMPAT_NO_CACHE", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_random_toml_loads_or_is_a_matrix_error(text):
    with tempfile.TemporaryDirectory() as folder, cache_in(folder):
        path = Path(folder) / "matrix.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            first = load_matrix(path)
        except MatrixError as exc:
            event("MatrixError")
            assert exc.message.startswith(str(path)), exc.message
            assert "\n" not in exc.message and len(exc.message) < 600, exc.message
            return
        event("loads")
        assert load_matrix(path) == first  # the second time from the cache: the same matrix
