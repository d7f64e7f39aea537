"""Helpers for the install fault tests: FIXTURE stacks on a local index, venv templates copied per test,
a file-by-file manifest of an environment, and processes found through a marker in their environment.

Side effects: starts FIXTURE index servers on 127.0.0.1 (stopped by the callers), creates venvs under the
given folders, reads /proc, and (``kill_marked``, test cleanup only) kills processes carrying a test's mark.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from .fixture_index import TORCH_DISTRIBUTED_SOURCE, TORCH_SOURCE, FixtureIndex, build_wheel
from .procs import MARK_VARIABLE, cmdline, kill_marked, marked, new_mark, wait_until  # noqa: F401 (re-exported for the install tests)

RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the venvs the tests install into are the running Python's
_CP = f"cp{sys.version_info.major}{sys.version_info.minor}"
CP_HERE = f"{_CP}-{_CP}-manylinux_2_28_x86_64"  # FIXTURE wheels are built for the running Python
PLATFORM = ("--python-version", RUNNING_PYTHON, "--platform", "manylinux_2_28_x86_64")
TORCH_270 = f"torch-2.7.0+cpu-{CP_HERE}.whl"


STACK = ("torch==2.7.0", "--with", "ipex")

# FIXTURE IPEX whose import does what the test asks through its environment (the import probe inherits it):
# writes its pid to FIXTURE_IPEX_MARKER, sleeps FIXTURE_IPEX_SLEEP seconds, fails when FIXTURE_IPEX_BROKEN is set.
IPEX_SOURCE = """
import os as _os, time as _time
if _os.environ.get("FIXTURE_IPEX_MARKER"):
    with open(_os.environ["FIXTURE_IPEX_MARKER"], "w") as _out:
        _out.write(str(_os.getpid()))
_time.sleep(float(_os.environ.get("FIXTURE_IPEX_SLEEP", "0")))
if _os.environ.get("FIXTURE_IPEX_BROKEN"):
    raise ImportError("FIXTURE: Intel(R) Extension for PyTorch* needs to work with PyTorch 2.6.*, but PyTorch 2.7.0 is found")
"""


def torch_wheel(folder: Path, version: str, tag: str = CP_HERE, payload_bytes: int = 0) -> Path:
    """A FIXTURE torch wheel (``payload_bytes``: one extra file of random hex that size, to make it big)."""
    extra = {"torch/distributed/__init__.py": TORCH_DISTRIBUTED_SOURCE}
    if payload_bytes:
        extra["torch/payload.txt"] = os.urandom(payload_bytes // 2).hex()
    return build_wheel(folder, "torch", version, tag, requires=("filelock",), init_source=TORCH_SOURCE, files_extra=extra)


def ipex_wheel(folder: Path, init_source: str = "") -> Path:
    return build_wheel(folder, "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch", init_source=init_source)


def skip_unless_fixture_stack_fits() -> None:
    """The FIXTURE stack is torch 2.7.0 + IPEX 2.7.0 as x86_64 wheels for the running Python: skip where compat
    would plan something else (another machine, a Python the matrix has no such set for)."""
    import pytest

    reason = _why_the_fixture_stack_does_not_fit()
    if reason:
        pytest.skip(reason)


@functools.lru_cache(maxsize=1)
def _why_the_fixture_stack_does_not_fit() -> str:
    import json
    import platform

    if platform.machine() != "x86_64" or not sys.platform.startswith("linux"):
        return f"compat installs for x86_64 Linux; this is {sys.platform} {platform.machine()}"
    done = compat("resolve", "--json", "--python-version", RUNNING_PYTHON, *STACK)
    packages = json.loads(done.stdout).get("packages") if done.returncode == 0 else None
    if packages != {"torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0"}:
        return f"the FIXTURE stack is torch 2.7.0 + IPEX 2.7.0; for Python {RUNNING_PYTHON} compat resolves {packages}"
    return ""


def stack_index(root: Path, ipex_source: str = IPEX_SOURCE) -> FixtureIndex:
    """FIXTURE hosts for `torch==2.7.0 --with ipex`: torch 2.7.0/2.8.0 (pytorch-cpu), filelock + IPEX 2.7.0 (pypi)."""
    skip_unless_fixture_stack_fits()
    wheels = root / "wheels"
    index = FixtureIndex(root / "index")
    index.add("pytorch-cpu", torch_wheel(wheels / "t270", "2.7.0+cpu"))
    index.add("pytorch-cpu", torch_wheel(wheels / "t280", "2.8.0+cpu"))
    index.add("pypi", build_wheel(wheels, "filelock", "3.0.0"))
    index.add("pypi", ipex_wheel(wheels / "ipex", ipex_source))
    return index


def make_venv(path: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", *extra, str(path)], check=True, timeout=300)
    return path / "bin" / "python"


def copy_venv(template: Path, dest: Path) -> Path:
    """A fresh copy of a template venv at ``dest`` (cp -a keeps links, modes and times)."""
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["cp", "-a", str(template), str(dest)], check=True, timeout=120)
    return dest / "bin" / "python"


def pip_install_fixture(python: Path, wheel: Path) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300, capture_output=True, env=clean_env())


def site_packages(python: Path) -> Path:
    done = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True, timeout=60)
    return Path(done.stdout.strip())


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "COMPAT_"))}
    env.update(NO_COLOR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def compat(*args: str, env: Optional[dict[str, str]] = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(**(env or {})), check=False, stdin=subprocess.DEVNULL)


def start_compat(*args: str, env: Optional[dict[str, str]] = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "compatmatrix", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(**(env or {})), stdin=subprocess.DEVNULL)


def tree(*folders: Path) -> dict[str, tuple]:
    """relative path -> (kind, size, sha256 or link target), for every entry under ``folders``."""
    found: dict[str, tuple] = {}
    for base in folders:
        if not base.exists():
            found[f"{base.name}/"] = ("missing",)
            continue
        for path in sorted(base.rglob("*")):
            rel = f"{base.name}/{path.relative_to(base)}"
            info = path.lstat()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", info.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def env_tree(python: Path) -> dict[str, tuple]:
    """The manifest of a venv's site-packages and bin, file by file."""
    venv = python.parent.parent
    return tree(next((venv / "lib").glob("python3*/site-packages")), venv / "bin")


def loose(manifest: dict[str, tuple]) -> dict[str, tuple]:
    """The manifest without the bytes of .pyc files: pip compiles them at install time with the source's mtime
    in their header, so two installs of the same wheels differ there and nowhere else."""
    return {k: (v[:2] if k.endswith(".pyc") and v[0] == "file" else v) for k, v in manifest.items()}


def diff(a: dict[str, tuple], b: dict[str, tuple], limit: int = 8) -> str:
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return f"{len(changed)} entries differ, e.g. {changed[:limit]}"


def survivors(mark: str, grace: float) -> list[str]:
    """The marked processes still alive after ``grace`` seconds (their command lines); kills them afterwards."""
    wait_until(lambda: not marked(mark), grace)
    left = [f"{pid}: {cmdline(pid)[:160]}" for pid in marked(mark)]
    kill_marked(mark)
    return left


def wait_for(predicate, timeout: float, interval: float = 0.02) -> bool:
    return wait_until(predicate, timeout, interval) or bool(predicate())


class served:
    """``with served(index):`` the FIXTURE index answers on 127.0.0.1 for the block."""

    def __init__(self, index: FixtureIndex) -> None:
        self.index = index
        self.server = None

    def __enter__(self) -> FixtureIndex:
        from .fixture_index import serve

        self.server, _ = serve(self.index)
        return self.index

    def __exit__(self, *exc) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


def template_venv(root: Path) -> Path:
    """A venv with pip and a FIXTURE torch 2.8.0+cpu installed by hand: the state every fault test starts from."""
    skip_unless_fixture_stack_fits()
    python = make_venv(root)
    pip_install_fixture(python, torch_wheel(root.parent / "template-wheels", "2.8.0+cpu"))
    return root

