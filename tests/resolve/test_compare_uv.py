"""compat resolve against uv pip compile, for real (issue 30): after `compat matrix update` (the registry read now, into a
throw-away overlay), the stock set with torchvision and torchaudio for Python 3.10-3.13 is the torch, torchvision and
torchaudio that uv picks for the same packages and platform (scripts/compare_uv.py, which prints the table).

Needs PyPI (skipped, with the reason, where it cannot be reached) and uv (a test dependency).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..install.test_install_real import pypi_unreachable

pytestmark = [pytest.mark.integration, pytest.mark.network]


def test_resolve_picks_what_uv_picks_after_a_matrix_update(tmp_path):
    why = pypi_unreachable()
    if why:
        pytest.skip(f"PyPI cannot be reached from this machine: {why}")
    env = base_env({"XDG_DATA_HOME": str(tmp_path / "data"), "NO_COLOR": "1"})
    update = subprocess.run([sys.executable, "-m", "compatmatrix", "matrix", "update"], capture_output=True, text=True, timeout=600,
                            env=env, check=False)
    assert update.returncode in (0, 1), update.stdout[-2000:] + update.stderr[-2000:]  # 1: a host other than PyPI unreachable
    compared = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_uv.py"), "--data-home", str(tmp_path / "data")],
                              capture_output=True, text=True, timeout=1500, env=env, check=False)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    rows = [line for line in compared.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 4 and all(" yes " in f" {row} " for row in rows), compared.stdout
