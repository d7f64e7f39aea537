"""compat check / doctor against REAL environments: real torch and IPEX wheels from the registry.

The environments are built once per machine (tests/real_envs.py, cached; the torch 2.8.0 one is
about 7 GB because PyPI's torch brings its CUDA libraries). Nothing here is a fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..clean_env import base_env

pytestmark = pytest.mark.integration


def compat(command, python, *args, timeout=600):
    done = subprocess.run([sys.executable, "-m", "compatmatrix", command, "--json", "--python", str(python), *args],
                          capture_output=True, text=True, timeout=timeout, check=False, env=base_env())
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    return done.returncode, {c["id"]: c for c in data["checks"]}


def test_real_mismatch_is_flagged_statically_before_any_import(ipex280_torch213):
    code, checks = compat("check", ipex280_torch213)
    assert code == 1
    finding = checks["packages.ipex-torch"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "intel-extension-for-pytorch 2.8.0 does not work with torch 2.13.0"
    assert "module 'os' has no attribute 'exit'" in " ".join(finding["evidence"])
    assert "pip install torch==2.8.0" in finding["fix"]
    assert not any(c.startswith("imports.") for c in checks)


def test_real_mismatch_import_probe_catches_the_os_exit_guard(ipex280_torch213):
    code, checks = compat("doctor", ipex280_torch213, "--only", "imports")
    assert code == 1
    assert checks["imports.torch"]["status"] == "pass" and "torch 2.13.0+cpu imports" == checks["imports.torch"]["summary"]
    ipex = checks["imports.ipex"]
    assert ipex["summary"] == "IPEX's version check refused torch 2.13.0+cpu: it needs PyTorch 2.8.*"
    assert "crashed with AttributeError: module 'os' has no attribute 'exit'" in " ".join(ipex["evidence"])


def test_real_mismatch_with_the_exit_127_guard(ipex250_torch213):
    code, checks = compat("doctor", ipex250_torch213, "--only", "imports.ipex", "--only", "packages.ipex-torch")
    assert code == 1
    assert "exits the process with status 127" in " ".join(checks["packages.ipex-torch"]["evidence"])
    assert checks["imports.ipex"]["summary"] == "IPEX's version check refused torch 2.13.0+cpu: it needs PyTorch 2.5.*"
    assert "exited with status 127" in " ".join(checks["imports.ipex"]["evidence"])


def test_real_clean_ipex_set(ipex280_torch280):
    code, checks = compat("doctor", ipex280_torch280, "--only", "packages", "--only", "imports")
    assert code == 0
    assert checks["packages.ipex-torch"]["summary"] == "intel-extension-for-pytorch 2.8.0 fits torch 2.8.0"
    assert checks["imports.ipex"]["status"] == "pass"
    assert checks["imports.torch"]["summary"].startswith("torch 2.8.0+cu")  # PyPI's Linux torch is the CUDA build
    assert checks["packages.cuda-build"]["status"] == "warn"


def test_real_pypi_torchaudio_over_a_cpu_torch_fails_check_and_doctor(stock_torch213):
    """PyPI's real torchaudio 2.11.1 (installed --no-deps into a cached overlay folder on PYTHONPATH, tests/real_envs.py)
    over the cached torch 2.13.0+cpu: its _torchaudio.so links libc10_cuda.so, so `import torchaudio` fails; check
    reads that from the file, doctor's import probe sees it happen. The same environment without it passes (below)."""
    from ..real_envs import real_overlay

    overlay = real_overlay("torchaudio-2.11.1", stock_torch213)
    env = dict(base_env(), PYTHONPATH=str(overlay))
    for command, extra in (("check", ()), ("doctor", ("--only", "packages", "--only", "imports"))):
        done = subprocess.run([sys.executable, "-m", "compatmatrix", command, "--json", "--python", str(stock_torch213), *extra],
                              capture_output=True, text=True, timeout=600, check=False, env=env)
        assert done.returncode == 1, done.stderr
        checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
        finding = checks["packages.extension-build"]
        assert finding["status"] == "fail"
        assert finding["summary"].startswith("torchaudio 2.11.1 is a CUDA build (its _torchaudio.so links libc10_cuda.so), but torch 2.13.0+cpu is a CPU build")
        assert f"{overlay}/torchaudio/lib/" in finding["evidence"][0] and "libtorch_cuda.so" in finding["evidence"][0]
        assert "pip install torchaudio==2.11.1+cpu --index-url https://download.pytorch.org/whl/cpu" in finding["fix"]
        if command == "doctor":
            imported = checks["imports.torchaudio"]
            assert imported["status"] == "fail" and "libc10_cuda.so" in imported["summary"]
            assert "OSError: Could not load this library" in " ".join(imported["evidence"])
            assert checks["imports.torch"]["status"] == "pass"
        else:
            assert not any(c.startswith("imports.") for c in checks)


def test_real_stock_environment_is_clean(stock_torch213):
    code, checks = compat("doctor", stock_torch213, "--only", "packages", "--only", "imports")
    assert code == 0
    assert checks["packages.transformers-torch"]["status"] == "pass"
    assert checks["packages.eol"]["summary"] == "no end-of-life packages installed"
    assert checks["imports.ipex"]["status"] == "skip" and checks["imports.ccl"]["status"] == "skip"
    assert checks["packages.extension-build"]["status"] == "skip" and checks["packages.cuda-build"]["summary"] == "torch 2.13.0+cpu is a CPU build"
