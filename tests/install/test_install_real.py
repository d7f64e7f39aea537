"""compat install against the REAL registry: a fresh venv of the running Python gets the real torch and IPEX.

Slow (a minute or more, ~7 GB: PyPI's torch is the CUDA build, taken with --torch-from-pypi whether or not the PyTorch
CPU index is reachable from the machine; installed with --installer uv, the uv in compat's own environment) and needs PyPI: skipped, with the reason, where PyPI cannot be reached. pip's
cache (~/.cache/pip) makes later runs faster. The refusal for an unreachable CPU index is forced (a port the test
has just closed), so it holds on every network.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import sys

import pytest

from ..clean_env import base_env

pytestmark = [pytest.mark.integration, pytest.mark.network]

PYPI_PAGE = "https://pypi.org/simple/intel-extension-for-pytorch/"  # the matrix's PyPI host, as compat and pip reach it


@functools.lru_cache(maxsize=None)
def pypi_unreachable():
    """None when PyPI answers (one request, bounded; through the proxy the environment names, as pip goes); else why not."""
    import requests

    try:
        response = requests.get(PYPI_PAGE, timeout=(10, 30))
    except requests.RequestException as exc:
        return f"{exc.__class__.__name__}: {str(exc)[:200]}"
    return None if response.ok else f"HTTP {response.status_code}"


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed by this test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def freeze(python) -> str:
    return subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, timeout=120, check=True).stdout


def test_install_ipex_profile_for_real(tmp_path, ipex280_torch280):
    # ipex280_torch280 (the cached torch 2.8 + IPEX 2.8 environment, built with uv into uv's cache) first: compat's uv then
    # takes these ~7 GB from that cache, where with empty caches this test and the environment's build (on the other
    # worker) each downloaded them, at the same time
    why = pypi_unreachable()
    if why:
        pytest.skip(f"PyPI cannot be reached from this machine ({PYPI_PAGE}: {why})")
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    python = target / "bin" / "python"
    env = base_env({"NO_COLOR": "1"})  # tests/clean_env.py: no COMPAT_PYTHON, COMPAT_INDEX_* ... of the CI shell
    try:
        # an unreachable PyTorch CPU index (forced: a port just closed, whatever this machine's network): compat says so,
        # names the way out and changes nothing
        before = freeze(python)
        dead = f"http://127.0.0.1:{closed_port()}/simple"
        refused = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(python), "--profile", "ipex", "--yes", "--index", f"pytorch-cpu={dead}"],
                                 capture_output=True, text=True, timeout=600, env=env, check=False)
        assert refused.returncode == 1, refused.stdout[-2000:] + refused.stderr[-2000:]
        assert f"{dead} (pytorch-cpu, from --index) cannot be reached" in refused.stderr
        assert "--torch-from-pypi" in refused.stderr
        assert freeze(python) == before
        # installed by uv: the same plan, the other installer compat runs; ~3x faster for these 7 GB (uv writes no .pyc and unpacks
        # in parallel: 70 s against pip's 210 s here from an empty cache). pip's real install of a real torch is test_migrate_real's
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(python), "--profile", "ipex", "--yes", "--torch-from-pypi",
                               "--installer", "uv", "--json"],
                              capture_output=True, text=True, timeout=3000, env=env, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        data = json.loads(done.stdout)
        checks = {c["id"]: c for c in data["checks"]}
        assert checks["packages.ipex-torch"]["summary"] == "intel-extension-for-pytorch 2.8.0 fits torch 2.8.0"
        assert checks["imports.ipex"]["status"] == "pass"
        imported = subprocess.run([str(python), "-c", "import intel_extension_for_pytorch as ipex, torch; print(ipex.__version__, torch.__version__)"],
                                  capture_output=True, text=True, timeout=300, check=False, env=base_env())
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.split()[0].startswith("2.8.0")
        check = subprocess.run([sys.executable, "-m", "compatmatrix", "check", "--python", str(python), "--only", "packages"],
                               capture_output=True, text=True, timeout=300, env=env, check=False)
        assert check.returncode == 0, check.stdout
    finally:
        shutil.rmtree(target, ignore_errors=True)
