"""A newcomer's first ten minutes (issue 19): the quick start's file exists and resolves, the doctor's first run says
which environment to pass, and resolve's advice is `compat env`, not sourcing setvars.sh by hand."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from ..conftest import run_compat

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _quick_start() -> str:
    return README.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_the_quick_start_names_a_file_the_repository_ships():
    named = set(re.findall(r"-r (\S+)", _quick_start()))
    assert named, "the quick start shows -r FILE"
    for name in named:
        assert (ROOT / name).is_file(), f"the quick start names {name}, which the repository does not ship"


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12"])
def test_the_example_requirements_resolve_and_pass_check(python):
    example = str(ROOT / "examples" / "requirements.txt")
    resolved = run_compat("resolve", "--json", "-r", example, "--python-version", python)
    assert resolved.returncode == 0, resolved.stderr[-1500:]
    packages = json.loads(resolved.stdout)["packages"]
    assert {"torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "transformers", "accelerate"} <= set(packages), packages
    checked = run_compat("check", "-r", example, "--python-version", python)
    assert checked.returncode == 0, checked.stdout[-1500:] + checked.stderr[-500:]


def test_resolve_advises_compat_env_not_sourcing_setvars():
    """The defect: resolve said "source $(python -c ...)/env/setvars.sh" where docs/commands/env.md says compat env replaces it."""
    done = run_compat("resolve", "--python-version", "3.11", "torch==2.7.0", "--with", "ccl")
    assert done.returncode == 0, done.stderr[-1500:]
    assert 'eval "$(compat env)"' in done.stdout, done.stdout[-2000:]
    assert not re.search(r"source \S*setvars", done.stdout), done.stdout[-2000:]


def test_the_first_doctor_run_says_which_environment_to_pass(tmp_path):
    """Right after the quick start (compat's own venv, no torch): the finding names the interpreter examined, why it
    was that one, and the --python PATH to pass instead."""
    from ..fixture_envs import FixtureEnv

    bare = FixtureEnv(tmp_path / "venv", sys.executable)
    done = run_compat("check", "--json", "--python", str(bare.python))
    finding = next(f for f in json.loads(done.stdout)["checks"] if f["id"] == "packages.torch-installed")
    assert finding["status"] == "fail" and "--python" in finding["fix"] and "bin/python" in finding["fix"], finding
    assert f"compat install --python {bare.python} --yes" in finding["fix"], finding
    own = run_compat("check", "--json")  # no --python: compat's own interpreter
    mine = next(f for f in json.loads(own.stdout)["checks"] if f["id"] == "packages.torch-installed")
    if mine["status"] == "fail":  # compat's own venv without torch, as after the quick start
        assert "examined when no --python PATH or COMPAT_PYTHON is given" in mine["summary"], mine
