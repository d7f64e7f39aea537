"""compat install against the REAL registry: a fresh Python 3.11 venv gets the real torch and IPEX.

Slow (minutes, ~7 GB: PyPI's torch is the CUDA build, because the PyTorch CPU index is not reachable
from this machine) and needs PyPI. pip's cache (~/.cache/pip) makes later runs faster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.network]


def test_install_ipex_profile_for_real(tmp_path):
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    python = target / "bin" / "python"
    env = dict(os.environ, NO_COLOR="1")
    env.pop("COMPAT_PYTHON", None)
    try:
        # the PyTorch CPU index cannot be reached from here: compat says so and changes nothing
        refused = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(python), "--profile", "ipex", "--yes"],
                                 capture_output=True, text=True, timeout=600, env=env, check=False)
        if refused.returncode == 0:
            pytest.fail("the PyTorch CPU index answered; this test expects the sandbox where it does not: " + refused.stderr[-400:])
        assert "https://download.pytorch.org/whl/cpu (pytorch-cpu, from matrix) cannot be reached" in refused.stderr
        assert "--torch-from-pypi" in refused.stderr
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(python), "--profile", "ipex", "--yes", "--torch-from-pypi", "--json"],
                              capture_output=True, text=True, timeout=3000, env=env, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        data = json.loads(done.stdout)
        checks = {c["id"]: c for c in data["checks"]}
        assert checks["packages.ipex-torch"]["summary"] == "intel-extension-for-pytorch 2.8.0 fits torch 2.8.0"
        assert checks["imports.ipex"]["status"] == "pass"
        imported = subprocess.run([str(python), "-c", "import intel_extension_for_pytorch as ipex, torch; print(ipex.__version__, torch.__version__)"],
                                  capture_output=True, text=True, timeout=300, check=False)
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.split()[0].startswith("2.8.0")
        check = subprocess.run([sys.executable, "-m", "compatmatrix", "check", "--python", str(python), "--only", "packages"],
                               capture_output=True, text=True, timeout=300, env=env, check=False)
        assert check.returncode == 0, check.stdout
    finally:
        shutil.rmtree(target, ignore_errors=True)
