"""Ask another interpreter what it is, by running a small stdlib-only probe with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import InterpreterError
from ..target import Platform, PythonTarget

PROBE_TIMEOUT_S = 30.0
PROBE_PATH = Path(__file__).with_name("interpreter_probe.py")


@dataclass(frozen=True)
class InterpreterInfo:
    executable: str
    version: Version
    implementation: str
    platform: Platform
    in_virtualenv: bool

    def python_target(self, origin: str) -> PythonTarget:
        return PythonTarget(
            version=Version(f"{self.version.major}.{self.version.minor}"),
            full=self.version,
            origin=origin,
        )


def _resolve_executable(path: str) -> str:
    if os.sep in path or (os.altsep and os.altsep in path):
        if not Path(path).exists():
            raise InterpreterError(f"'{path}' does not exist.", "Pass the path of a Python interpreter with --python.")
        return path
    found = shutil.which(path)
    if found is None:
        raise InterpreterError(f"'{path}' is not on PATH.", "Pass the full path of a Python interpreter with --python.")
    return found


def run_json_probe(executable: str, args: list[str], what: str, timeout: float, env=None) -> dict:
    """Run ``executable args`` and parse the JSON object on the last line of its output; every failure
    becomes one InterpreterError sentence."""
    try:
        done = subprocess.run([executable, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              env=dict(env) if env is not None else None, check=False)
    except subprocess.TimeoutExpired:
        raise InterpreterError(f"'{executable}' did not finish {what} within {timeout:.0f} s.", "Check that it is a working Python interpreter.") from None
    except OSError as exc:
        raise InterpreterError(f"'{executable}' cannot be run ({exc.strerror}).", "Pass the path of a Python interpreter with --python.") from None
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise InterpreterError(f"'{executable}' failed {what} (exit {done.returncode}: {last}).", "Pass the path of a Python 3.6+ interpreter with --python.")
    try:
        data = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict):
        raise InterpreterError(f"'{executable}' is not a Python interpreter (its answer to {what} is not what a Python 3.6+ prints).", "Pass the path of a CPython interpreter with --python.")
    return data


def query_interpreter(path: str, timeout: float = PROBE_TIMEOUT_S) -> InterpreterInfo:
    """Run the probe with ``path`` (``-I -S``: no user site, no site-packages imports) and parse its answer."""
    executable = _resolve_executable(path)
    data = run_json_probe(executable, ["-I", "-S", "-c", PROBE_PATH.read_text(encoding="utf-8")], "the probe", timeout)
    try:
        version = Version(data["version"])
        implementation = str(data["implementation"])
        tag = str(data["platform"]).replace("-", "_").replace(".", "_")
        platform = Platform.from_tag(tag)
        if platform.system == "linux" and data.get("libc") not in ("glibc", ""):
            platform = Platform(tag=platform.tag, system="linux", machine=platform.machine, libc=str(data["libc"]))
    except (ValueError, KeyError, TypeError, InvalidVersion):
        raise InterpreterError(f"'{executable}' is not a Python interpreter (its answer to the probe is not what a Python 3.6+ prints).", "Pass the path of a CPython interpreter with --python.") from None
    if implementation != "cpython":
        raise InterpreterError(
            f"'{executable}' is {implementation}, not CPython: torch, IPEX and oneccl_bind_pt publish CPython wheels only.",
            "Pass a CPython interpreter with --python.",
        )
    return InterpreterInfo(
        executable=str(data.get("executable") or executable),
        version=version,
        implementation=implementation,
        platform=platform,
        in_virtualenv=data.get("prefix") != data.get("base_prefix"),
    )
