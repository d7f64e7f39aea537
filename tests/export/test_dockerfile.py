"""examples/Dockerfile: its RUN steps that call compat, executed in fresh venvs against the FIXTURE index.

No Docker engine runs here; the test reads the Dockerfile's own RUN lines, so it breaks when the
Dockerfile's commands stop working."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..install.test_install import index  # noqa: F401  (the FIXTURE index fixture)

pytestmark = pytest.mark.integration


def compat_runs(dockerfile: Path) -> list[str]:
    """The RUN lines that call compat, continuation lines joined."""
    runs, joined = [], ""
    for raw in dockerfile.read_text().splitlines():
        joined += raw.rstrip("\\")
        if raw.endswith("\\"):
            continue
        if joined.startswith("RUN ") and "/opt/compat/bin/compat " in joined:
            runs.append(joined[4:])
        joined = ""
    return runs


def test_dockerfile_install_steps_work_in_a_fresh_venv(index, tmp_path):  # noqa: F811
    runs = compat_runs(ROOT / "examples" / "Dockerfile")
    assert len(runs) == 3 and "compat install" in runs[0] and "compat env" in runs[1] and "compat check" in runs[2]
    train = tmp_path / "train"
    subprocess.run([sys.executable, "-m", "venv", str(train)], check=True, timeout=300)
    env = base_env({"NO_COLOR": "1", "PROFILE": "ddp-ccl", "RANKS_PER_NODE": "1"})  # the Dockerfile's ARG defaults; no COMPAT_* of the CI shell
    for host in index.hosts:
        env["COMPAT_INDEX_" + host.upper().replace("-", "_")] = index.host_url(host)
    compat = f"{shlex.quote(sys.executable)} -m compatmatrix"
    for run in runs:
        line = run.replace("/opt/compat/bin/compat", compat).replace("/opt/train", str(train))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-c", line], capture_output=True, text=True, timeout=900, env=env, check=False)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    exported = (train / "compat-env.sh").read_text()
    assert "export CCL_ROOT=" in exported and "export OMP_NUM_THREADS=" in exported
