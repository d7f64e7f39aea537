"""Real virtual environments with real packages from the registry, built once and cached.

Each environment is keyed by its Python and requirement list; a marker file records the spec, so a
changed spec rebuilds it. The cache lives in $COMPAT_TEST_CACHE (default ~/.cache/compatmatrix-tests)
and holds only what the registry serves; delete it to rebuild from scratch.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from .clean_env import base_env

CACHE = Path(os.environ.get("COMPAT_TEST_CACHE") or Path.home() / ".cache" / "compatmatrix-tests")
BUILD_TIMEOUT_S = 1800

# name -> (requirements, extra pip arguments)
SPECS = {
    # torch 2.13.0 is the local CPU wheel (pip's find-links); IPEX 2.8.0 accepts only torch 2.8.*: a real mismatch
    "torch213-ipex280": (["torch==2.13.0", "intel-extension-for-pytorch==2.8.0"], []),
    # IPEX 2.5.0 (yanked on PyPI, installable when pinned) has the older exit(127) guard
    "torch213-ipex250": (["torch==2.13.0", "intel-extension-for-pytorch==2.5.0"], []),
    # the real clean IPEX set; torch 2.8.0 from PyPI is the CUDA build (~7 GB with its nvidia-* packages)
    # plus the last transformers with --use_ipex (4.56) and an accelerate that still runs ccl (<1.13): the live Trainer probe
    # applies IPEX through the Trainer here
    "torch280-ipex280": (["torch==2.8.0", "intel-extension-for-pytorch==2.8.0", "transformers==4.56.2", "accelerate==1.10.1"], []),
    # stock PyTorch (the local CPU wheel) + the newest transformers/accelerate: the migration target
    # the newest transformers and accelerate the matrix knows for torch 2.13 (test_migrate_real: a stock environment at
    # the newest set is left alone), so a matrix update that adds a newer release moves these pins too
    "torch213-stock": (["torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0"], []),
    # the stock set and Ray Train on top (tests/export/test_ray_real.py): ray[train] leaves the local CPU torch as it is
    "torch213-ray": (["torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0", "ray[train]==2.60.0"], []),
    # Intel MPI's runtime from PyPI: a real mpirun (hydra) that sets PMI_RANK / PMI_SIZE / MPI_LOCALRANKID
    "impi": (["impi-rt==2021.18.1"], []),
    # SkyPilot (no cloud extra): its own task schema (sky.utils.schemas.get_task_schema) judges compat export skypilot's YAML
    "skypilot": (["skypilot==0.14.1"], []),
}


# name -> the cached environment it starts from: a full copy of it (cp -a, seconds), then its own requirements on top,
# so an environment that only adds to another pays for what it adds (Ray on the stock set: ~3 min instead of ~11 from
# empty caches). A copy, never hard links: pip writes into the copy, never through into the environment it came from.
# IPEX 2.5's environment differs from IPEX 2.8's only by IPEX: pip keeps the copied torch 2.13.0 and swaps IPEX.
BASES = {"torch213-ray": "torch213-stock", "torch213-ipex250": "torch213-ipex280"}


class RealEnvUnavailable(RuntimeError):
    """A real environment cannot be built on this machine for a reason that is not a defect (the tests skip)."""


# requirements that come from a local wheel (pip's find-links), not from the registry: not every machine or Python has it
LOCAL_WHEELS = ("torch==2.13.0",)


def local_wheel_or_skip(python: str, requirement: str) -> None:
    """Raise RealEnvUnavailable unless ``python``'s pip finds ``requirement`` without any index (find-links only)."""
    done = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--no-index", "--quiet",
                           "--disable-pip-version-check", requirement], capture_output=True, text=True, timeout=300, env=base_env(), check=False)
    if done.returncode != 0:
        version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=60, check=False)
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        raise RealEnvUnavailable(f"{requirement} (the local CPU wheel these tests use, found through pip's find-links) is not available for "
                                 f"Python {version.stdout.strip() or '?'} on this machine: {lines[-1]}")


def real_env(name: str, python: str = sys.executable) -> Path:
    """The interpreter of a cached real environment, building it first if needed (one builder at a time).
    Raises RealEnvUnavailable when a local wheel it needs is not on this machine (or not for this Python)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _real_env(name, python)


def uv_binary() -> Optional[str]:
    """The uv of the test environment (a test dependency, next to its interpreter), else one on PATH, else None."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def installer(interpreter: Path, requirements: list[str], extra: list[str]) -> list[str]:
    """The command that fills a new environment. Sets from the registry alone go through uv, into uv's own cache
    (~/.cache/uv): test_install_real installs the same torch 2.8.0 + IPEX 2.8.0 (~7 GB) with `compat install --installer
    uv`, which then takes them from that cache instead of downloading them a second time (an empty-cache CI run paid that
    download twice, once for pip's cache and once for uv's). ``--link-mode copy``: a test may write into an environment's
    files, which must never write through into uv's cache. A set with a local wheel (pip's find-links, which uv does not
    read) goes through the environment's own pip, as do all sets where uv is missing. ``--no-compile``: pip would
    byte-compile every module of torch, transformers and Ray (6,000-14,000 files an environment, all on the CPU the
    tests share), where a test imports a small part of them; Python compiles what is imported (as uv leaves it too)."""
    uv = uv_binary()
    if uv and not any(requirement in LOCAL_WHEELS for requirement in requirements) and not extra:
        return [uv, "pip", "install", "--quiet", "--link-mode", "copy", "--python", str(interpreter), *requirements]
    return [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", *extra, *requirements]


def _real_env(name: str, python: str) -> Path:
    requirements, extra = SPECS[name]
    target = CACHE / name
    marker = target / ".compat-test-env.json"
    spec = {"python": os.path.realpath(python), "requirements": requirements, "extra": extra, "base": BASES.get(name)}
    interpreter = target / "bin" / "python"
    if marker.exists() and interpreter.exists():
        try:
            if json.loads(marker.read_text()) == spec:
                return interpreter
        except ValueError:
            pass
    for requirement in requirements:
        if requirement in LOCAL_WHEELS:
            local_wheel_or_skip(python, requirement)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if name in BASES:
        _copy_env(real_env(BASES[name], python).parent.parent, target)
    else:
        subprocess.run([python, "-m", "venv", str(target)], check=True, timeout=300, env=base_env())
    done = subprocess.run(installer(interpreter, requirements, extra),
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False, env=base_env())
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise RuntimeError(f"building the real environment {name} failed:\n{done.stderr[-3000:]}")
    _warm(interpreter, requirements)
    marker.write_text(json.dumps(spec))
    return interpreter


# what the tests import of a set, imported once after the build so that Python writes their bytecode then (the install
# compiled nothing: --no-compile), not in the first test's ranks, two at a time and inside its deadlines
WARM = {"torch": "import torch, torch.distributed", "transformers": "from transformers import Trainer, TrainingArguments"}


def _warm(interpreter: Path, requirements: list[str]) -> None:
    names = {requirement.split("==")[0].split("[")[0] for requirement in requirements}
    code = "; ".join(statement for module, statement in WARM.items() if module in names)
    if code:  # a failure is not the build's: some sets are broken on purpose, and the tests look at how
        subprocess.run([str(interpreter), "-c", code], capture_output=True, timeout=600, check=False, env=base_env())


def _copy_env(source: Path, target: Path) -> None:
    """A full copy of the venv ``source`` at ``target``: its scripts' #! lines and activate files name the copy."""
    subprocess.run(["cp", "-a", str(source), str(target)], check=True, timeout=600)
    old, new = str(source).encode(), str(target).encode()
    for script in (target / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        content = script.read_bytes()
        if old in content and b"\0" not in content:
            script.write_bytes(content.replace(old, new))


# name -> requirements installed with `pip install --no-deps --target`: real packages put first on PYTHONPATH to
# shadow a cached environment's copy (cheaper than another 7 GB environment for one older release)
OVERLAYS = {
    # the last transformers whose Trainer applies IPEX itself (--use_ipex), with the tokenizers it requires
    "transformers-4.52.4": ["transformers==4.52.4", "tokenizers>=0.21,<0.22"],
    # PyPI's torchaudio 2.11.1 (py3-none, declares torch>=2.11): a CUDA build (its _torchaudio.so links libc10_cuda.so),
    # put over the cached CPU torch 2.13.0+cpu of torch213-stock: the build mismatch packages.extension-build reads
    "torchaudio-2.11.1": ["torchaudio==2.11.1"],
}


def real_overlay(name: str, python: Path) -> Path:
    """A folder of real wheels' contents for PYTHONPATH, installed by ``python``'s pip (cached like the environments)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".overlay-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        target = CACHE / f"overlay-{name}"
        marker = target / ".compat-test-overlay.json"
        spec = {"python": str(python), "requirements": OVERLAYS[name]}
        try:
            if json.loads(marker.read_text()) == spec:
                return target
        except (OSError, ValueError):
            pass
        shutil.rmtree(target, ignore_errors=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "--no-deps", "--target", str(target), *OVERLAYS[name]],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False, env=base_env())
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeError(f"building the overlay {name} failed:\n{done.stderr[-3000:]}")
        marker.write_text(json.dumps(spec))
        return target


if __name__ == "__main__":  # python -m tests.real_envs NAME...: build ahead of a test run
    for env_name in sys.argv[1:] or list(SPECS):
        print(env_name, real_env(env_name), flush=True)
