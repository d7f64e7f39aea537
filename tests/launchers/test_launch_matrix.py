"""`compat launch` judges the environment against the matrix the command was handed, as `compat env` does: with
COMPAT_MATRIX (or --matrix) naming another matrix file, both read where the installed bindings keep their setvars.sh
from that file, so the oneCCL environment `compat launch --print` carries is the one `compat env` exports. (It used to
load the bundled matrix for itself, so the two could judge the same bindings against different matrices.)

FIXTURE: the environment (tests/fixture_envs.py: torch 1.12.1, oneccl_bind_pt 1.12.100 with the setvars.sh every
release has) with a second setvars.sh at custom/setvars.sh that exports one variable more; the matrix is
tests/fixtures/mini_matrix.toml (a made-up matrix) with that release's ``setvars`` pointed at custom/setvars.sh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..fixture_envs import SETVARS_SOURCE, FixtureEnv

MINI = ROOT / "tests" / "fixtures" / "mini_matrix.toml"
MARK = "COMPAT_FIXTURE_SETVARS"  # exported by custom/setvars.sh only
THREADS = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY", "KMP_BLOCKTIME", "LD_PRELOAD", "MALLOC_CONF", "CCL_WORKER_COUNT",
           "CCL_WORKER_AFFINITY", "I_MPI_PIN", "I_MPI_PIN_DOMAIN")  # the launch plan's own thread and binding settings


def custom_matrix(tmp_path: Path) -> Path:
    """The mini matrix with oneccl_bind_pt 1.12.100's setvars.sh at custom/setvars.sh (the release is found by its version)."""
    text = MINI.read_text()
    entry = text.index('[[oneccl_bind_pt]]\nversion = "1.12.100"\n')
    at = text.index('setvars = "env/setvars.sh"', entry)
    assert at < text.index("[[oneccl_bind_pt]]", entry + 1)  # the line belongs to that release
    path = tmp_path / "custom-matrix.toml"
    path.write_text(text[:at] + 'setvars = "custom/setvars.sh"' + text[at + len('setvars = "env/setvars.sh"'):])
    return path


@pytest.fixture
def environment(tmp_path) -> FixtureEnv:
    env = FixtureEnv(tmp_path / "env").torch("1.12.1").bindings("1.12.100")
    custom = env.site / "oneccl_bindings_for_pytorch" / "custom"
    custom.mkdir()
    (custom / "setvars.sh").write_text(SETVARS_SOURCE + f"export {MARK}=custom\n")
    return env


def compat_json(env_extra, *args) -> dict:
    flags = ("--print", "--json") if args[0] == "launch" else ("--json",)
    done = subprocess.run([sys.executable, "-m", "compatmatrix", args[0], *flags, *args[1:]], capture_output=True, text=True, timeout=180,
                          env=base_env(env_extra), check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def oneccl_of(exports: dict) -> dict:
    return {k: v for k, v in exports.items() if k not in THREADS}


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_launch_and_env_judge_against_the_matrix_compat_matrix_names(environment, tmp_path, launcher):
    python = str(environment.python)
    given = {"COMPAT_MATRIX": str(custom_matrix(tmp_path))}
    exported = compat_json(given, "env", "--python", python, "--launcher", launcher)
    printed = compat_json(given, "launch", "--python", python, "--launcher", launcher, "--nproc-per-node", "1", "--ccl-workers", "0", "--", "train.py")
    assert exported["exports"][MARK] == "custom"  # compat env read the setvars.sh the custom matrix names
    assert printed["env"][MARK] == "custom", printed["env"]  # and so did compat launch
    assert oneccl_of(printed["env"]) == oneccl_of(exported["exports"])
    assert printed["additions"] == exported["additions"]


def test_launch_matrix_option_is_the_one_compat_env_takes(environment, tmp_path):
    """--matrix PATH is what COMPAT_MATRIX stands for; without either both read the bundled matrix (with the overlay),
    whose release keeps its setvars.sh at env/setvars.sh."""
    python = str(environment.python)
    matrix = str(custom_matrix(tmp_path))
    launch = ("launch", "--python", python, "--launcher", "torchrun", "--nproc-per-node", "1", "--ccl-workers", "0")
    assert compat_json({}, *launch, "--matrix", matrix, "--", "train.py")["env"][MARK] == "custom"
    bundled = compat_json({"COMPAT_MATRIX": None}, *launch, "--", "train.py")
    assert MARK not in bundled["env"]
    assert MARK not in compat_json({"COMPAT_MATRIX": None}, "env", "--python", python, "--launcher", "torchrun")["exports"]
