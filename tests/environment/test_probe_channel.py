"""`--python` probes answer over a private channel (a file compat names), not on stdout: wrappers and
sitecustomize hooks that print are ignored, a missing or malformed answer is one sentence (exit 2),
and a probe that hangs is killed with everything it started. FIXTURE interpreters are shell scripts here.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ..checks.test_doctor import clean_environ
from ..conftest import pyenv_python
from ..procs import MARK_VARIABLE, cmdline, kill_marked, marked, new_mark, wait_until

RUNNING = platform.python_version()


def compat(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_environ(env), check=False)


def script(path: Path, body: str, executable: bool = True) -> Path:
    path.write_text("#!/bin/sh\n# FIXTURE interpreter written by tests/environment/test_probe_channel.py\n" + textwrap.dedent(body))
    path.chmod(0o755 if executable else 0o644)
    return path


def assert_one_sentence(done, *texts):
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("compat: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    for text in texts:
        assert text in done.stderr, done.stderr


# --- noise on stdout is ignored -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["after", "before"])
def test_wrapper_that_prints_json_is_ignored(tmp_path, where):
    real = sys.executable
    if where == "after":
        body = f'"{real}" "$@"\nstatus=$?\necho "{{}}"\nexit $status\n'
    else:
        body = f'echo "{{}}"\nexec "{real}" "$@"\n'
    wrapper = script(tmp_path / "python", body)
    resolved = compat("resolve", "--json", "--python", str(wrapper))
    assert resolved.returncode in (0, 1), resolved.stderr
    assert json.loads(resolved.stdout)["python"] == ".".join(RUNNING.split(".")[:2])
    checked = compat("check", "--json", "--only", "packages", "--python", str(wrapper))
    assert checked.returncode in (0, 1), checked.stderr
    assert json.loads(checked.stdout)["python_version"] == RUNNING


def test_sitecustomize_that_prints_json_at_exit_is_ignored(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (site / "zz_noise.pth").write_text('import atexit, sys; atexit.register(lambda: print(\'{"probe": 1, "python": {}}\'))\n')
    (site / "sitecustomize.py").write_text("# FIXTURE\nimport atexit\natexit.register(lambda: print('{\"noise\": true}'))\n")
    noisy = subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], capture_output=True, text=True, timeout=60, check=True)
    assert "noise" in noisy.stdout and "probe" in noisy.stdout  # the hooks really print
    checked = compat("check", "--json", "--only", "packages", "--python", str(venv / "bin" / "python"))
    assert checked.returncode in (0, 1), checked.stderr
    data = json.loads(checked.stdout)
    assert data["python_version"] == RUNNING
    resolved = compat("resolve", "--json", "--python", str(venv / "bin" / "python"))
    assert resolved.returncode in (0, 1), resolved.stderr


# --- no answer, a bad answer, no interpreter ----------------------------------------------------------


@pytest.mark.parametrize("command", ["resolve", "check"])
def test_interpreter_that_prints_nothing_and_exits_0(tmp_path, command):
    silent = script(tmp_path / "python", "exit 0\n")
    assert_one_sentence(compat(command, "--python", str(silent)), str(silent), "--python")


@pytest.mark.parametrize("command", ["resolve", "check"])
@pytest.mark.parametrize("answer", ["not json at all", '{"probe": 1}', "[1, 2, 3]", '{"python": {"version": 7}, "platform": []}'])
def test_malformed_answer_is_one_sentence(tmp_path, command, answer):
    # writes the answer file itself: the last argument after --answer
    liar = script(tmp_path / "python", f"""\
        while [ $# -gt 0 ]; do [ "$1" = "--answer" ] && out="$2"; shift; done
        printf '%s' '{answer}' > "$out"
        exit 0
    """)
    assert_one_sentence(compat(command, "--python", str(liar)), str(liar))


@pytest.mark.parametrize("command", ["resolve", "check"])
def test_interpreter_that_is_not_executable(tmp_path, command):
    plain = script(tmp_path / "python", "exit 0\n", executable=False)
    assert_one_sentence(compat(command, "--python", str(plain)), "cannot be run", "Permission denied")


@pytest.mark.parametrize("command", ["resolve", "check"])
def test_interpreter_that_hangs_is_killed_with_its_children(tmp_path, command):
    hang = script(tmp_path / "python", "sleep 1000\necho never\n")
    mark = new_mark()
    try:
        started = time.monotonic()
        done = compat(command, "--python", str(hang), env={MARK_VARIABLE: mark, "COMPAT_PROBE_TIMEOUT": "2"}, timeout=90)
        assert time.monotonic() - started < 30
        assert_one_sentence(done, "did not finish", "within 2 s")
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


def test_probe_timeout_default_is_kept(monkeypatch):
    from compatmatrix.environment import interpreter, snapshot

    monkeypatch.delenv("COMPAT_PROBE_TIMEOUT", raising=False)
    assert interpreter.probe_timeout(interpreter.PROBE_TIMEOUT_S) == 30.0
    assert interpreter.probe_timeout(snapshot.PROBE_TIMEOUT_S) == 60.0
    monkeypatch.setenv("COMPAT_PROBE_TIMEOUT", "nan")
    assert interpreter.probe_timeout(30.0) == 30.0


# --- old and new interpreters speak the same private channel -------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("minor", ["6", "13"])
def test_private_channel_on_old_and_new_python(tmp_path, minor):
    real = pyenv_python(minor)
    if real is None:
        pytest.skip(f"no pyenv CPython 3.{minor} on this machine")
    wrapper = script(tmp_path / "python", f'echo "{{}}"\n"{real}" "$@"\nstatus=$?\necho "{{}}"\nexit $status\n')
    resolved = compat("resolve", "--json", "--python", str(wrapper))
    assert resolved.returncode in (0, 1), resolved.stderr
    assert json.loads(resolved.stdout)["python"] == f"3.{minor}"
    checked = compat("check", "--json", "--only", "packages", "--python", str(wrapper))
    assert checked.returncode in (0, 1), checked.stderr
    assert json.loads(checked.stdout)["python_version"].startswith(f"3.{minor}.")
