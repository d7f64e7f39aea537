"""The parsed-matrix cache ($XDG_CACHE_HOME/compatmatrix) holds data, never code: whatever is planted there
(a hostile pickle, corrupt or truncated JSON, JSON of another matrix, a FIFO, a file others may write) is
ignored without a word and the answer stays what the matrix file says. The key follows the matrix text
and compat's version.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from compatmatrix.matrix import load_matrix

from .conftest import FIXTURES

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
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_cache_is_ignored_silently(cached, tmp_path, kind):
    cache, answer, files = cached
    for file in files:
        file.write_bytes(CORRUPT[kind](file.read_bytes(), tmp_path))
    done = compat(*RESOLVE, cache=cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout == answer and done.stderr == ""


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
        data = json.loads(file.read_text())
        data["document"]["registry_checked"] = "planted by someone else"
        file.write_text(json.dumps(data))
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
    data = json.loads(file.read_text())  # plain data: nothing to execute
    assert data["format"] == 1 and data["compat"] == compatmatrix.__version__
    # a cache that says something else than the file, under the right name (written by this user): the next
    # version of compat does not read it, and a changed matrix text does not either
    data["document"]["registry_checked"] = "from the cache"
    file.write_text(json.dumps(data))
    file.chmod(0o600)
    assert load_matrix(source).registry_checked == "from the cache"  # proof that the cache is read at all
    monkeypatch.setattr(compatmatrix, "__version__", "999.0")
    assert load_matrix(source) == first and load_matrix(source).registry_checked == first.registry_checked
    assert len(cache_files(tmp_path / "cache")) == 2
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source.write_text(text.replace('registry_checked = "fixture"', 'registry_checked = "edited"'))
    assert load_matrix(source).registry_checked == "edited"
