"""A local copy of the PyPI wheels one test set needs, served by a local PEP 503 index on 127.0.0.1 as the pypi host.

The wheels are the real ones from PyPI (``pip download``, this machine's pip configuration), fetched once into the
tests' cache and reused: a test that installs a real set then talks only to 127.0.0.1, so a network blip during the
session (a proxy whose name stops resolving for a few seconds) cannot fail it. The one download is retried within a
deadline; if PyPI cannot be reached for all of it and nothing is cached, the test skips with the reason.

The wheels come from PyPI unchanged; the index that serves them is the tests' own (tests/fixture_index.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from .clean_env import base_env
from .fixture_index import FixtureIndex
from .install_helpers import served
from .real_envs import CACHE

DOWNLOAD_TIMEOUT_S = 900  # one pip download of the whole set
PAUSES_S = (0, 20, 60)  # one try, then two more after these pauses: a transient outage is waited out, a real one skips


def _key(requirements: Sequence[str], python: str) -> str:
    return hashlib.sha256("\n".join([python, *sorted(requirements)]).encode()).hexdigest()[:16]


def pypi_wheels(requirements: Sequence[str], python: str = sys.executable) -> Path:
    """The folder of the wheels ``python``'s pip would install for ``requirements`` (their dependencies included),
    downloaded once; skips the test when PyPI cannot be reached and nothing is cached."""
    folder = CACHE / "pypi-mirror" / _key(requirements, python)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one downloader at a time per set: the two pytest workers may both ask for it (tests/conftest.py BESIDE)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _pypi_wheels(requirements, python, folder)


def _pypi_wheels(requirements: Sequence[str], python: str, folder: Path) -> Path:
    stamp = folder / ".complete"
    if stamp.exists():
        return folder
    errors = []
    for pause in PAUSES_S:
        time.sleep(pause)
        scratch = folder.with_name(folder.name + ".part")
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run([python, "-m", "pip", "download", "--only-binary", ":all:", "--disable-pip-version-check", "--quiet",
                               "-d", str(scratch), *requirements], capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S,
                              env=base_env(), check=False)
        if done.returncode == 0:
            (scratch / ".complete").write_text("\n".join(requirements) + "\n")
            shutil.rmtree(folder, ignore_errors=True)
            scratch.rename(folder)
            return folder
        errors.append((done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"])
        shutil.rmtree(scratch, ignore_errors=True)
    pytest.skip(f"the PyPI wheels of {' '.join(requirements)} cannot be downloaded ({len(PAUSES_S)} tries): {errors[-1][0][:300]}")


@contextlib.contextmanager
def local_pypi_index(requirements: Sequence[str], index_folder: Path, index: FixtureIndex | None = None,
                     leave_out: Sequence[str] = ()) -> Iterator[FixtureIndex]:
    """Serve the wheels of ``requirements`` as the pypi host while the block runs. ``leave_out``: project names
    (as in the wheel file names, e.g. ``torch``) served by another host instead. With ``index``, the pypi host is
    added to that (already served) index and nothing new is started."""
    folder = pypi_wheels(requirements)
    wheels = [w for w in sorted(folder.glob("*.whl")) if w.name.split("-")[0].lower() not in {n.lower() for n in leave_out}]
    if index is not None:
        for wheel in wheels:
            index.add("pypi", wheel)
        yield index
        return
    own = FixtureIndex(index_folder)
    for wheel in wheels:
        own.add("pypi", wheel)
    with served(own):
        yield own
