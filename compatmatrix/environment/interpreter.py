"""Ask another interpreter what it is, by running a small stdlib-only probe with it.

Side effects: runs the interpreter as a child (environment/child.py: own process group, dies with compat,
killed as a group on timeout and interruption); the probe writes its answer into a file in a private
temporary folder that compat names (``--answer PATH``), so whatever the interpreter prints is ignored.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ..errors import CompatError, InterpreterError, path_refused, shown
from ..record import Record
from ..target import Platform, PythonTarget, probed_platform

# environment/child.py (subprocess, signal, tempfile, the process-group machinery) is imported where a child runs:
# a cached probe answer (compat check --python ENV) and compat check -r start none (tests/test_startup.py)

PROBE_TIMEOUT_S = 30.0
TIMEOUT_ENV = "COMPAT_PROBE_TIMEOUT"  # lowers (or raises) every probe's limit, for tests and slow file systems
ANSWER_LIMIT = 64 << 20  # bytes; a real answer is a few hundred kB at most
PROBE_PATH = Path(__file__).with_name("interpreter_probe.py")
_FIX = "Pass the path of a CPython 3.6+ interpreter with --python."


class InterpreterInfo(Record):
    executable: str
    version: Version
    implementation: str
    platform: Platform
    in_virtualenv: bool
    markers: tuple[tuple[str, str], ...] = ()  # its PEP 508 marker values, as the probe read them

    def python_target(self, origin: str) -> PythonTarget:
        return PythonTarget(
            version=Version(f"{self.version.major}.{self.version.minor}"),
            full=self.version,
            origin=origin,
            markers=self.markers,
            markers_platform=self.platform.tag,
        )


def _resolve_executable(path: str) -> str:
    if os.sep in path or (os.altsep and os.altsep in path):
        why = path_refused(path)
        if why:
            raise InterpreterError(f"'{shown(path, 160)}' {why}.", "Pass the path of a Python interpreter with --python.")
        if Path(path).is_dir():
            raise InterpreterError(f"'{path}' is a directory, not a Python interpreter.", "Pass the interpreter inside it with --python, such as bin/python of a virtual environment.")
        return path
    found = shutil.which(path)
    if found is None:
        raise InterpreterError(f"'{path}' is not on PATH.", "Pass the full path of a Python interpreter with --python.")
    return found


def probe_timeout(default: float) -> float:
    """``default``, or $COMPAT_PROBE_TIMEOUT when that is a finite number above 0 (at most a day: child.MAX_TIMEOUT_S)."""
    from .child import env_timeout

    return env_timeout(TIMEOUT_ENV, default)


def run_json_probe(executable: str, args: list[str], what: str, timeout: float, env=None) -> dict:
    """Run ``executable args --answer FILE`` and read the JSON object the probe wrote into FILE; every failure
    becomes one InterpreterError sentence. Output on stdout (wrappers, sitecustomize, .pth hooks) is ignored."""
    import tempfile

    from .child import run_child

    program = os.path.abspath(executable)
    with tempfile.TemporaryDirectory(prefix="compat-probe-") as folder:
        answer = os.path.join(folder, "answer.json")
        try:
            ended = run_child([program, *args, "--answer", answer], timeout, env=env, cwd=folder)
        except OSError as exc:
            raise InterpreterError(f"'{executable}' cannot be run ({exc.strerror}).", _FIX) from None
        if ended.timed_out:
            raise InterpreterError(f"'{executable}' did not finish {what} within {timeout:g} s.", "Check that it is a working Python interpreter (it was stopped, with everything it started).")
        if ended.returncode != 0:
            last = (ended.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise InterpreterError(f"'{executable}' failed {what} ({_ending(ended.returncode)}: {shown(last, 200)}).", _FIX)
        return _read_answer(executable, answer, what)


def _ending(returncode: Optional[int]) -> str:
    """'exit 3', or 'killed by SIGSEGV' for a child a signal ended (a negative status)."""
    import signal

    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def _read_answer(executable: str, path: str, what: str) -> dict:
    """The probe's JSON object from ``path`` (written whole, then renamed into place, so it is all or nothing)."""
    try:
        if os.path.getsize(path) > ANSWER_LIMIT:
            raise InterpreterError(f"'{executable}' answered {what} with more than {ANSWER_LIMIT >> 20} MB, which no Python 3.6+ probe writes.", _FIX)
        with open(path, encoding="utf-8") as handle:
            data: Any = json.load(handle)
    except FileNotFoundError:
        raise InterpreterError(f"'{executable}' is not a Python interpreter: it exited without answering {what}, which any Python 3.6+ does.", _FIX) from None
    except (OSError, ValueError, RecursionError):  # ValueError: not JSON, not UTF-8
        data = None
    if not isinstance(data, dict):
        raise InterpreterError(f"'{executable}' is not a Python interpreter (its answer to {what} is not what a Python 3.6+ writes).", _FIX)
    return data


def query_interpreter(path: str, timeout: Optional[float] = None) -> InterpreterInfo:
    """Run the probe with ``path`` (``-I -S``: no user site, no site-packages imports) and parse its answer."""
    executable = _resolve_executable(path)
    limit = probe_timeout(PROBE_TIMEOUT_S) if timeout is None else timeout
    data = run_json_probe(executable, ["-I", "-S", "-c", PROBE_PATH.read_text(encoding="utf-8")], "the probe", limit)
    try:
        version = Version(data["version"])
        implementation = str(data["implementation"])
        platform = probed_platform(data["platform"], data.get("libc"), data.get("libc_version"))
    except (ValueError, KeyError, TypeError, AttributeError, InvalidVersion, CompatError):  # CompatError: a platform tag compat cannot read
        raise InterpreterError(f"'{executable}' is not a Python interpreter (its answer to the probe is not what a Python 3.6+ writes).", _FIX) from None
    if implementation != "cpython":
        raise InterpreterError(
            f"'{executable}' is {shown(implementation)}, not CPython: torch, IPEX and oneccl_bind_pt publish CPython wheels only.",
            "Pass a CPython interpreter with --python.",
        )
    return InterpreterInfo(
        executable=str(data.get("executable") or executable),
        version=version,
        implementation=implementation,
        platform=platform,
        in_virtualenv=data.get("prefix") != data.get("base_prefix"),
        markers=typed_markers(data.get("markers")),
    )


def typed_markers(answer) -> tuple[tuple[str, str], ...]:
    """The probe's marker values, typed: known names with string values only (an odd answer gives none, so every
    marker that needs one is said to be undecided rather than guessed)."""
    from ..inputs.markers import MARKER_NAMES

    if not isinstance(answer, dict):
        return ()
    return tuple(sorted((name, value) for name, value in answer.items() if name in MARKER_NAMES and isinstance(value, str)
                        and value.isprintable()))
