"""The built wheel ships the matrix, and a fresh venv installed from it answers correctly."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile

import pytest

from .conftest import ROOT


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("compatmatrix-*.whl")
    return wheel


@pytest.mark.integration
def test_wheel_contains_the_repo_matrix_and_schema(built_wheel):
    with zipfile.ZipFile(built_wheel) as archive:
        names = set(archive.namelist())
        assert "compatmatrix/data/matrix.toml" in names
        assert "compatmatrix/schemas/resolve-v1.json" in names
        assert "compatmatrix/environment/interpreter_probe.py" in names
        assert archive.read("compatmatrix/data/matrix.toml") == (ROOT / "data" / "matrix.toml").read_bytes()


@pytest.mark.integration
def test_fresh_venv_from_the_wheel_resolves(built_wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(built_wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert install.returncode == 0, install.stderr
    done = subprocess.run([str(env_dir / "bin" / "compat"), "resolve", "--json", "--python-version", "3.11"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["packages"]["oneccl-bind-pt"] == "2.7.0"
