from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compatmatrix.matrix import load_matrix
from compatmatrix.resolve import build_request
from compatmatrix.target import Platform, PythonTarget

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LINUX = Platform.from_tag("manylinux_2_28_x86_64")


@pytest.fixture(scope="session")
def matrix():
    """The real, bundled matrix."""
    return load_matrix()


@pytest.fixture(scope="session")
def mini_matrix():
    """FIXTURE matrix with made-up facts (tests/fixtures/mini_matrix.toml)."""
    return load_matrix(FIXTURES / "mini_matrix.toml")


def make_request(matrix, python="3.11", *requirements, profile=None, with_=(), platform=LINUX):
    return build_request(matrix, PythonTarget.parse(python), platform, profile, with_, requirements)


def run_compat(*args, env_extra=None, timeout=120):
    """Run the installed `compat` entry point as a user would (a real subprocess)."""
    env = dict(os.environ)
    env.pop("COMPAT_MATRIX", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "compatmatrix", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def pyenv_python(minor: str) -> str | None:
    """The pyenv interpreter for CPython 3.<minor>, if this machine has it."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    versions = Path(root) / "versions"
    if not versions.is_dir():
        return None
    for entry in sorted(versions.iterdir(), reverse=True):
        if entry.name.startswith(f"3.{minor}.") and (entry / "bin" / "python").exists():
            return str(entry / "bin" / "python")
    return None


# The cached real environments (tests/real_envs.py), shared by the doctor and live tests. Built on first use.


@pytest.fixture(scope="session")
def ipex280_torch213():
    from .real_envs import real_env

    return real_env("torch213-ipex280")


@pytest.fixture(scope="session")
def ipex250_torch213():
    from .real_envs import real_env

    return real_env("torch213-ipex250")


@pytest.fixture(scope="session")
def ipex280_torch280():
    from .real_envs import real_env

    return real_env("torch280-ipex280")


@pytest.fixture(scope="session")
def stock_torch213():
    from .real_envs import real_env

    return real_env("torch213-stock")
