"""compat doctor / check / env when the environment misbehaves: hanging imports and setvars.sh, a
setvars.sh that fails, OpenMP nesting lists. Children are found from outside through /proc (tests/procs.py).

FIXTURE environments (tests/fixture_envs.py); every wait is bounded and every test cleans up what it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..fixture_envs import FixtureEnv
from ..procs import MARK_VARIABLE, cmdline, kill_marked, marked, new_mark, wait_until
from .test_doctor import clean_environ, compat_json

ENDINGS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)]


def _start(args, env_extra):
    return subprocess.Popen([sys.executable, "-m", "compatmatrix", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_environ(env_extra))


def _hanging_bindings(tmp_path: Path) -> tuple[FixtureEnv, Path]:
    """Bindings whose import announces itself (a file) and then hangs."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    reached = tmp_path / "import-reached"
    env.module("oneccl_bindings_for_pytorch/__init__.py", f"import time\nopen({str(reached)!r}, 'w').close()\ntime.sleep(3600)\n")
    return env, reached


def _hanging_setvars(tmp_path: Path) -> tuple[FixtureEnv, Path]:
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    reached = tmp_path / "setvars-reached"
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(f"# FIXTURE setvars.sh that hangs\n: > {reached}\nsleep 1000\nexport CCL_ROOT=/nowhere\n")
    return env, reached


# --- 1. import probes do not outlive compat --------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-3"])
def test_import_timeout_must_be_a_positive_finite_number(tmp_path, value):
    env, reached = _hanging_bindings(tmp_path)
    mark = new_mark()
    try:
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "doctor", "--python", str(env.python), "--only", "imports.ccl",
                               "--import-timeout", value], capture_output=True, text=True, timeout=60,
                              env=clean_environ({MARK_VARIABLE: mark}), check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "--import-timeout" in done.stderr and "Traceback" not in done.stderr
        assert not reached.exists(), "no import probe may start with a timeout that cannot be kept"
        assert marked(mark) == []
    finally:
        kill_marked(mark)


@pytest.mark.parametrize("sig, code", ENDINGS, ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_hanging_import_probe_dies_with_compat(tmp_path, sig, code):
    env, reached = _hanging_bindings(tmp_path)
    mark = new_mark()
    process = _start(["doctor", "--python", str(env.python), "--only", "imports.ccl", "--import-timeout", "600"], {MARK_VARIABLE: mark})
    try:
        assert wait_until(reached.exists, 60), "the import probe never started"
        probes = marked(mark, exclude=[process.pid])
        assert probes and any("oneccl_bindings_for_pytorch" in cmdline(pid) for pid in probes), [cmdline(p) for p in probes]
        process.send_signal(sig)
        _, err = process.communicate(timeout=30)
        assert process.returncode == code, err
        if sig != signal.SIGKILL:
            assert b"Traceback" not in err and b"interrupted" in err
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        process.kill()
        process.communicate(timeout=30)
        kill_marked(mark)


# --- 2. a hanging setvars.sh leaves nothing behind ---------------------------------------------------


def test_hanging_setvars_is_killed_with_its_children_after_the_timeout(tmp_path):
    env, reached = _hanging_setvars(tmp_path)
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("check", env.python, "--only", "oneccl.setvars", env={MARK_VARIABLE: mark, "COMPAT_SETVARS_TIMEOUT": "2"}, code=1, timeout=90)
        assert time.monotonic() - started < 25, "COMPAT_SETVARS_TIMEOUT lowers the 30 s limit"
        finding = checks["oneccl.setvars"]
        assert finding["status"] == "fail"
        assert "did not finish within 2 s" in finding["summary"]
        assert reached.exists()
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


def test_compat_env_with_a_hanging_setvars_exits_2_and_leaves_nothing(tmp_path):
    env, _ = _hanging_setvars(tmp_path)
    mark = new_mark()
    try:
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "env", "--python", str(env.python)], capture_output=True, text=True,
                              timeout=90, env=clean_environ({MARK_VARIABLE: mark, "COMPAT_SETVARS_TIMEOUT": "1.5"}), check=False)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert "did not finish within 1.5 s" in done.stderr and done.stderr.count("\n") == 1
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


@pytest.mark.parametrize("sig, code", ENDINGS, ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_setvars_sleep_dies_with_compat(tmp_path, sig, code):
    env, reached = _hanging_setvars(tmp_path)
    mark = new_mark()
    process = _start(["check", "--python", str(env.python), "--only", "oneccl.setvars"], {MARK_VARIABLE: mark})
    try:
        assert wait_until(reached.exists, 60), "setvars.sh was never sourced"
        assert wait_until(lambda: any(cmdline(p).startswith("sleep 1000") for p in marked(mark)), 10)
        process.send_signal(sig)
        _, err = process.communicate(timeout=30)
        assert process.returncode == code, err
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        process.kill()
        process.communicate(timeout=30)
        kill_marked(mark)


def test_setvars_timeout_default_stays_30_s(monkeypatch):
    from compatmatrix.environment import setvars as oneccl_env

    monkeypatch.delenv("COMPAT_SETVARS_TIMEOUT", raising=False)
    assert oneccl_env.setvars_timeout() == 30.0
    for junk in ("nan", "-1", "0", "soon", "inf"):
        monkeypatch.setenv("COMPAT_SETVARS_TIMEOUT", junk)
        assert oneccl_env.setvars_timeout() == 30.0
    monkeypatch.setenv("COMPAT_SETVARS_TIMEOUT", "4")
    assert oneccl_env.setvars_timeout() == 4.0


# --- 3. a setvars.sh that fails is a failure -----------------------------------------------------


FAILING_SETVARS = [
    pytest.param('echo "setvars: cannot find the oneCCL runtime" >&2\nreturn 3\n', "failed (exit status 3)", "setvars: cannot find the oneCCL runtime", id="return-3"),
    pytest.param('echo "setvars: giving up early" >&2\nexit 0\nexport CCL_ROOT=/nowhere\n', "exited (exit status 0) before it finished", "setvars: giving up early", id="exit-0-before-exporting"),
    pytest.param("export CCL_ROOT=/x\nif then fi\n", "failed (exit status 2)", "syntax error", id="syntax-error"),
    pytest.param("set -e\nfalse\nexport CCL_ROOT=/x\n", "exited (exit status 1) before it finished", "", id="set-e"),
]


@pytest.mark.parametrize("script, summary, quoted", FAILING_SETVARS)
def test_failing_setvars_is_a_failure_that_quotes_the_script(tmp_path, script, summary, quoted):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text("# FIXTURE setvars.sh that fails\n" + script)
    checks, _ = compat_json("check", env.python, "--only", "oneccl", code=1)
    finding = checks["oneccl.setvars"]
    assert finding["status"] == "fail", finding
    assert summary in finding["summary"] and str(setvars) in finding["summary"]
    assert quoted in " ".join(finding["evidence"])
    assert checks["oneccl.fi-provider"]["status"] == "skip"
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "env", "--python", str(env.python)], capture_output=True, text=True,
                          timeout=120, env=clean_environ(), check=False)
    assert done.returncode == 2, done.stdout
    assert done.stdout == "", "no half environment to eval"
    assert summary in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    if quoted:
        assert quoted in done.stderr


def test_setvars_that_talks_still_works(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text("echo ':: initializing oneCCL'\necho 'a warning' >&2\n" + setvars.read_text())
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "env", "--json", "--python", str(env.python)], capture_output=True, text=True,
                          timeout=120, env=clean_environ(), check=False)
    assert done.returncode == 0, done.stderr
    exports = json.loads(done.stdout)["exports"]
    assert exports["CCL_ROOT"] == str(env.site / "oneccl_bindings_for_pytorch")
    assert exports["CCL_CONFIGURATION"] == "cpu"


# --- 4. OpenMP nesting lists --------------------------------------------------------------------


@pytest.mark.parametrize("value, first", [("1,1", 1), ("1, 2,3", 1), (" 1 ", 1)])
def test_omp_nesting_list_uses_the_first_level(tmp_path, value, first):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", "--ranks-per-node", "1",
                            env={"OMP_NUM_THREADS": value, "CCL_WORKER_COUNT": "0"}, code=0)
    finding = checks["runtime.threads"]
    assert finding["status"] == "pass", finding
    assert f"OMP_NUM_THREADS={first}" in finding["summary"]


def test_omp_nesting_list_first_level_counts_against_the_cpus(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    cpus = len(os.sched_getaffinity(0))
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", "--ranks-per-node", "2",
                            env={"OMP_NUM_THREADS": f"{cpus},2", "CCL_WORKER_COUNT": "1"}, code=1)
    assert checks["runtime.threads"]["summary"].startswith(f"2 ranks x (OMP_NUM_THREADS={cpus} + CCL_WORKER_COUNT=1)")


@pytest.mark.parametrize("value", ["four", "4,x", "0", "4,,2", "-2", "", "1.5"])
def test_omp_garbage_is_a_failure_with_a_sentence(tmp_path, value):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", env={"OMP_NUM_THREADS": value}, code=1)
    finding = checks["runtime.threads"]
    assert finding["status"] == "fail"
    assert finding["summary"].startswith(f"OMP_NUM_THREADS={value!r} is not a thread count")
    assert "export OMP_NUM_THREADS=" in finding["fix"]


def test_thread_values_parse():
    from compatmatrix.checks.runtime import first_level_threads

    assert first_level_threads("8") == 8
    assert first_level_threads("8,4,2") == 8
    assert first_level_threads(" 8 , 1") == 8
    for junk in ("", "x", "8,", ",8", "0", "0,2", "8,0", "8 8", "١"):
        assert first_level_threads(junk) is None, junk
