"""The pre-commit hook, run by the real pre-commit package (try-repo builds the hook's own venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..fixture_envs import FixtureEnv

pytestmark = pytest.mark.integration


def _pre_commit():
    return [sys.executable, "-m", "pre_commit"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project: a git repository with one file, where hooks run."""
    root = tmp_path_factory.mktemp("project")
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    (root / "train.py").write_text("print('hello')\n")
    subprocess.run(["git", "-C", str(root), "add", "train.py"], check=True, timeout=60)
    return root


def try_repo(project: Path, home: Path, env_extra=None):
    env = base_env({"PRE_COMMIT_HOME": str(home), "NO_COLOR": "1", **(env_extra or {})})  # no COMPAT_PYTHON, OMP_* ... of the CI shell
    return subprocess.run([*_pre_commit(), "try-repo", str(ROOT), "compat-check", "--all-files", "--verbose"],
                          cwd=project, capture_output=True, text=True, timeout=900, env=env, check=False)


def test_try_repo_runs_compat_check_in_the_hook_env(project, tmp_path_factory):
    home = tmp_path_factory.mktemp("pre-commit-home")
    done = try_repo(project, home)
    out = done.stdout + done.stderr
    assert "compat check" in out
    # the hook's own venv has compatmatrix but no torch: a real run of compat check, which says so
    assert done.returncode == 1, out
    assert "packages.torch-installed: torch is not installed" in out


def test_try_repo_checks_the_interpreter_named_by_compat_python(project, tmp_path_factory, tmp_path):
    home = tmp_path_factory.mktemp("pre-commit-home")
    good = FixtureEnv(tmp_path / "good").torch("2.7.0").ipex("2.7.0")
    done = try_repo(project, home, {"COMPAT_PYTHON": str(good.python), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout
    bad = FixtureEnv(tmp_path / "bad").torch("2.8.0").ipex("2.7.0")
    done = try_repo(project, home, {"COMPAT_PYTHON": str(bad.python), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1
    assert "packages.ipex-torch: intel-extension-for-pytorch 2.7.0 does not work with torch 2.8.0" in done.stdout
    shutil.rmtree(home, ignore_errors=True)
