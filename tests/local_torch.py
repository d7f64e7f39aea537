"""The machine's real CPU torch wheel (pip's find-links) served by a local PEP 503 index on 127.0.0.1 as the
pytorch-cpu host: the PyTorch CPU index itself cannot be reached from the machines the tests run on."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .clean_env import base_env
from .fixture_index import FixtureIndex
from .install_helpers import served

TORCH = "torch==2.13.0"


@contextlib.contextmanager
def local_torch_index(wheel_folder: Path, index_folder: Path, requirement: str = TORCH) -> Iterator[FixtureIndex]:
    """The index while the block runs (skips the test, with the reason, where the wheel is not on this machine)."""
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--quiet", "-d", str(wheel_folder), requirement],
                          capture_output=True, text=True, timeout=600, env=base_env(), check=False)
    wheels = sorted(wheel_folder.glob("torch-*.whl"))
    if done.returncode != 0 or not wheels:
        pytest.skip(f"{requirement} (the local CPU wheel, through pip's find-links) is not on this machine: {(done.stderr or done.stdout).strip()[-300:]}")
    index = FixtureIndex(index_folder)
    index.add("pytorch-cpu", wheels[0])
    with served(index):
        yield index
