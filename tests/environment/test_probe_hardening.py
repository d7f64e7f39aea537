"""The children compat runs with the target interpreter or bash cannot be fooled or outlive it: import probes ignore
modules planted in the temp folder or the working directory and answer over a private file; a setvars.sh that breaks
PATH is a failure, not an empty environment; FIFOs are refused instead of read forever; absurd timeouts are capped;
processes a probe or setvars.sh started in another session (setsid) are swept by an environment marker.

FIXTURE environments (tests/fixture_envs.py); processes are checked from outside through /proc (tests/procs.py);
every wait is bounded and every test cleans up what it started.
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

from ..checks.test_doctor import clean_environ, compat_json
from ..fixture_envs import FixtureEnv
from ..procs import MARK_VARIABLE, cmdline, kill_marked, marked, new_mark, wait_until

COMPAT = Path(sys.executable).with_name("compat")  # the console script of this venv


def compat(*args, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_environ(env), cwd=cwd, check=False)


def one_sentence(done, *texts):
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("compat: error: ")]
    assert len(lines) == 1 and done.stderr.endswith("\n"), done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    for text in texts:
        assert text in done.stderr, done.stderr


def full_env(tmp_path: Path, torch: str = "2.7.0", **ipex) -> FixtureEnv:
    return FixtureEnv(tmp_path / "env").torch(torch).ipex(**ipex).bindings()


def sticky_folder(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o1777)
    return path


# --- H1: code planted in the temp folder or the working directory never runs --------------------------------


def test_import_probes_ignore_modules_planted_in_the_temp_folder(tmp_path):
    env = full_env(tmp_path)
    planted = sticky_folder(tmp_path / "T")
    marker = tmp_path / "PWNED"
    for name in ("torch", "json", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"):
        (planted / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name} ran\\n'); __version__ = '6.6.6'\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "torch.py").write_text((planted / "torch.py").read_text())
    # the `compat` command as a user runs it (`python -m` would put the working directory on compat's own sys.path)
    done = subprocess.run([str(COMPAT), "doctor", "--json", "--python", str(env.python), "--only", "imports"], capture_output=True, text=True,
                          timeout=180, env=clean_environ({"TMPDIR": str(planted)}), cwd=str(cwd), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert not marker.exists(), marker.read_text()
    assert checks["imports.torch"]["status"] == "pass" and "torch 2.7.0 imports" in checks["imports.torch"]["summary"]
    assert checks["imports.ipex"]["status"] == "pass" and "with torch 2.7.0" in checks["imports.ipex"]["summary"]
    assert checks["imports.ccl"]["status"] == "pass", checks["imports.ccl"]
    # the environment probe and the interpreter probe: `compat check` and `compat resolve` from the planted folder itself
    for command in (["check", "--json"], ["resolve", "--json"]):
        done = subprocess.run([str(COMPAT), *command, "--python", str(env.python)], capture_output=True, text=True, timeout=180,
                              env=clean_environ({"TMPDIR": str(planted)}), cwd=str(planted), check=False)
        assert done.returncode in (0, 1), done.stderr
        assert not marker.exists(), marker.read_text()
    # nothing left behind in the temp folder (the private working folders are removed)
    assert sorted(p.name for p in planted.iterdir()) == sorted(f"{n}.py" for n in ("torch", "json", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"))


def test_install_verification_is_not_fooled_by_a_planted_torch(tmp_path, monkeypatch):
    """A broken IPEX (its guard refuses the installed torch) must fail the verification even when a working
    intel_extension_for_pytorch.py and a torch.py wait in the temp folder."""
    import tempfile

    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.install.service import verify
    from compatmatrix.matrix import load_matrix

    env = full_env(tmp_path, ending="exit127", series="2.8.*")
    planted = sticky_folder(tmp_path / "T")
    marker = tmp_path / "PWNED"
    for name in ("torch", "intel_extension_for_pytorch"):
        (planted / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('ran'); __version__ = '2.7.0'\n")
    monkeypatch.setenv("TMPDIR", str(planted))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    findings = {f.id: f for f in verify(load_matrix(), take_snapshot(str(env.python)))}
    assert not marker.exists()
    assert findings["imports.ipex"].status.value == "fail", findings["imports.ipex"]
    assert "needs PyTorch 2.8.*" in findings["imports.ipex"].summary


# --- LOW: the probe's answer travels in a private file, not on stdout ------------------------------------------


def test_probe_answer_is_not_taken_from_stdout(tmp_path):
    env = full_env(tmp_path)
    (env.site / "sitecustomize.py").write_text(
        "# FIXTURE: prints a fake probe line at exit\nimport atexit\n"
        "atexit.register(lambda: print('COMPAT-PROBE {\"version\": \"6.6.6\", \"torch\": \"6.6.6\", \"registered\": false}'))\n")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=0)
    assert checks["imports.torch"]["status"] == "pass" and "torch 2.7.0 imports" in checks["imports.torch"]["summary"]
    assert checks["imports.ipex"]["status"] == "pass" and "with torch 2.7.0" in checks["imports.ipex"]["summary"]
    assert checks["imports.ccl"]["status"] == "pass", checks["imports.ccl"]


def test_probe_that_exits_0_early_still_says_so(tmp_path):
    env = full_env(tmp_path)
    env.module("intel_extension_for_pytorch/__init__.py", "import os\nos._exit(0)\n")
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ipex", code=1)
    assert "ended early" in checks["imports.ipex"]["summary"]


# --- H2: a setvars.sh that breaks PATH ----------------------------------------------------------------------------

BREAKERS = [
    pytest.param('export PATH="$I_MPI_ROOT/bin"\n', "removes PATH entries", id="path-replaced"),
    pytest.param("unset PATH\n", "unsets PATH", id="path-unset"),
    pytest.param("for __v in $(compgen -e); do unset \"$__v\"; done\n", "no environment variables", id="everything-unset"),
]


@pytest.mark.parametrize("line, said", BREAKERS)
def test_setvars_that_breaks_path_is_a_failure_in_check_and_env(tmp_path, line, said):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(setvars.read_text() + "# FIXTURE: breaks PATH\n" + line)
    checks, _ = compat_json("check", env.python, "--only", "oneccl.setvars", code=1)
    finding = checks["oneccl.setvars"]
    assert finding["status"] == "fail", finding
    assert said in finding["summary"] and str(setvars) in finding["summary"], finding
    done = compat("env", "--python", str(env.python))
    one_sentence(done, said, str(setvars))
    assert done.stdout == ""


def test_setvars_environment_is_read_with_builtins(tmp_path):
    """A setvars.sh that leaves PATH without `env` (but with every entry it had) still gives its exports."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(setvars.read_text() + "# FIXTURE: shadows env\nenv() { return 7; }\n")
    done = compat("env", "--json", "--python", str(env.python))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["exports"]["CCL_ROOT"] == str(env.site / "oneccl_bindings_for_pytorch")
    assert answer["additions"]["PATH"]["prepend"] == [str(env.site / "oneccl_bindings_for_pytorch" / "opt" / "mpi" / "bin")]


# --- M3: FIFOs are refused, not read forever ----------------------------------------------------------------------


def test_matrix_fifo_is_refused(tmp_path):
    fifo = tmp_path / "matrix.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = compat("resolve", "--matrix", str(fifo), "--python-version", "3.10", env={"COMPAT_NO_CACHE": "1"}, timeout=30)
    assert time.monotonic() - started < 25
    one_sentence(done, str(fifo), "not a regular file")


@pytest.mark.parametrize("how", ["COMPAT_CONFIG", "XDG"])
def test_config_fifo_is_refused(tmp_path, how):
    if how == "XDG":
        fifo = tmp_path / "xdg" / "compatmatrix" / "config.toml"
        fifo.parent.mkdir(parents=True)
        env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    else:
        fifo = tmp_path / "config.toml"
        env = {"COMPAT_CONFIG": str(fifo)}
    os.mkfifo(fifo)
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock", env=env, timeout=30)
    one_sentence(done, str(fifo), "not a regular file")


def test_symlinked_config_still_works(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text('[indexes]\npypi = "https://mirror.example/simple"\n')
    link = tmp_path / "xdg" / "compatmatrix" / "config.toml"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock",
                  env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "--index-url https://mirror.example/simple" in done.stdout


@pytest.mark.parametrize("target", ["loop", "missing"])
def test_a_config_link_that_leads_nowhere_is_one_sentence_not_ignored(tmp_path, target):
    """The defect: a config.toml that is a symlink loop or a dangling link was skipped as if absent (Path.exists()
    follows the link): the mirrors the user configured were silently not used."""
    link = tmp_path / "xdg" / "compatmatrix" / "config.toml"
    link.parent.mkdir(parents=True)
    if target == "loop":
        (link.parent / "other.toml").symlink_to(link)
        link.symlink_to(link.parent / "other.toml")
    else:
        link.symlink_to(tmp_path / "moved-away.toml")
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock",
                  env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}, timeout=30)
    one_sentence(done, str(link), "cannot be read")


# --- M4 / M5: absurd timeouts are capped or refused, never an overflow -----------------------------------------------


@pytest.mark.parametrize("variable", ["COMPAT_PROBE_TIMEOUT", "COMPAT_SETVARS_TIMEOUT"])
def test_huge_timeouts_from_the_environment_are_capped(tmp_path, variable):
    env = full_env(tmp_path)
    done = compat("check", "--json", "--python", str(env.python), env={variable: "1e308"})
    assert done.returncode in (0, 1), done.stderr
    assert "internal error" not in done.stderr and "Overflow" not in done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert "the check itself failed" not in checks["oneccl.setvars"]["summary"], checks["oneccl.setvars"]


def test_env_timeout_cap(monkeypatch):
    from compatmatrix.environment.child import MAX_TIMEOUT_S, env_timeout

    assert MAX_TIMEOUT_S == 86400
    for huge in ("1e308", "9999999999", "1e20"):
        monkeypatch.setenv("COMPAT_X_TIMEOUT", huge)
        assert env_timeout("COMPAT_X_TIMEOUT", 30.0) == MAX_TIMEOUT_S


def test_run_child_never_overflows():
    from compatmatrix.environment.child import run_child

    for timeout in (1e308, 1e20, 9999999999.0):
        ended = run_child(["sh", "-c", "echo ok"], timeout)
        assert ended.returncode == 0 and ended.stdout == b"ok\n" and not ended.timed_out


@pytest.mark.parametrize("value", ["1e20", "9999999999", "1e308", "86400.5"])
@pytest.mark.parametrize("option", [["doctor", "--import-timeout"], ["doctor", "--live", "--live-timeout"]])
def test_huge_timeout_options_are_usage_errors(value, option):
    done = compat(*option, value)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "86400" in done.stderr and option[-1] in done.stderr and "Traceback" not in done.stderr


def test_the_largest_timeouts_are_kept(tmp_path):
    from compatmatrix.cli import parse
    from compatmatrix.cli.doctor import _live_options

    env = full_env(tmp_path)
    checks, _ = compat_json("doctor", env.python, "--only", "imports", "--import-timeout", "86400", code=0)
    assert all(checks[c]["status"] == "pass" for c in ("imports.torch", "imports.ipex", "imports.ccl")), checks
    assert _live_options(parse(["doctor", "--live", "--live-timeout", "86400"])).timeout == 86400.0  # typed arguments (options.py)


# --- M10: grandchildren that called setsid are swept ----------------------------------------------------------------


def _setsid_ipex(tmp_path: Path, seconds: int, then: str = "") -> FixtureEnv:
    env = full_env(tmp_path)
    env.module("intel_extension_for_pytorch/__init__.py",
               f'import subprocess, torch\n__version__ = "2.7.0+cpu"\nsubprocess.Popen(["setsid", "-f", "sleep", "{seconds}"])\n{then}\n')
    return env


def _sleepers(mark: str, seconds: int) -> list[int]:
    return [pid for pid in marked(mark) if cmdline(pid).startswith(f"sleep {seconds}")]


def test_setsid_grandchild_of_an_import_probe_is_swept(tmp_path):
    env = _setsid_ipex(tmp_path, 93)
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("doctor", env.python, "--only", "imports.ipex", "--import-timeout", "60", env={MARK_VARIABLE: mark}, code=0)
        assert checks["imports.ipex"]["status"] == "pass", checks["imports.ipex"]
        assert time.monotonic() - started < 45, "the probe ended: a leftover holding its pipes is not a hang"
        assert wait_until(lambda: not _sleepers(mark, 93), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


def test_setsid_grandchild_of_a_hanging_import_probe_is_swept_on_timeout(tmp_path):
    env = _setsid_ipex(tmp_path, 94, "import time\ntime.sleep(3600)")
    mark = new_mark()
    try:
        checks, _ = compat_json("doctor", env.python, "--only", "imports.ipex", "--import-timeout", "3", env={MARK_VARIABLE: mark}, code=1)
        assert "did not finish within 3 s" in checks["imports.ipex"]["summary"]
        assert wait_until(lambda: not _sleepers(mark, 94), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_setsid_grandchild_of_an_import_probe_is_swept_on_interrupt(tmp_path, sig, code):
    reached = tmp_path / "reached"
    env = _setsid_ipex(tmp_path, 95, f"open({str(reached)!r}, 'w').close()\nimport time\ntime.sleep(3600)")
    mark = new_mark()
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--python", str(env.python), "--only", "imports.ipex",
                                "--import-timeout", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=clean_environ({MARK_VARIABLE: mark}))
    try:
        assert wait_until(reached.exists, 60), "the import probe never started"
        assert wait_until(lambda: _sleepers(mark, 95), 10)
        process.send_signal(sig)
        _, err = process.communicate(timeout=30)
        assert process.returncode == code, err
        assert b"Traceback" not in err
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        process.kill()
        process.communicate(timeout=30)
        kill_marked(mark)


def test_setsid_grandchild_of_setvars_is_swept(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(setvars.read_text() + "# FIXTURE: leaves a daemon\nsetsid -f sleep 97\n")
    mark = new_mark()
    try:
        started = time.monotonic()
        checks, _ = compat_json("check", env.python, "--only", "oneccl.setvars", env={MARK_VARIABLE: mark}, code=1)
        assert time.monotonic() - started < 25
        assert "did not finish" not in checks["oneccl.setvars"]["summary"], checks["oneccl.setvars"]
        assert "missing" in checks["oneccl.setvars"]["summary"]
        assert wait_until(lambda: not _sleepers(mark, 97), 10), [cmdline(p) for p in marked(mark)]
        done = compat("env", "--python", str(env.python), env={MARK_VARIABLE: mark})
        assert done.returncode == 0, done.stderr
        assert wait_until(lambda: not _sleepers(mark, 97), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


def test_setsid_grandchild_of_a_hanging_setvars_is_swept_on_timeout(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    setvars = env.site / "oneccl_bindings_for_pytorch" / "env" / "setvars.sh"
    setvars.write_text(setvars.read_text() + "# FIXTURE\nsetsid -f sleep 98\nsleep 1000\n")
    mark = new_mark()
    try:
        checks, _ = compat_json("check", env.python, "--only", "oneccl.setvars", env={MARK_VARIABLE: mark, "COMPAT_SETVARS_TIMEOUT": "2"}, code=1)
        assert "did not finish within 2 s" in checks["oneccl.setvars"]["summary"]
        assert wait_until(lambda: not marked(mark), 10), [cmdline(p) for p in marked(mark)]
    finally:
        kill_marked(mark)


# --- LOW: messages -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["resolve", "check"])
def test_python_that_is_a_directory(tmp_path, command):
    done = compat(command, "--python", str(tmp_path))
    one_sentence(done, str(tmp_path), "is a directory")
    assert "Permission denied" not in done.stderr


def test_interpreter_killed_by_a_signal_says_which(tmp_path):
    crasher = tmp_path / "python"
    crasher.write_text("#!/bin/sh\n# FIXTURE interpreter that segfaults\nkill -SEGV $$\n")
    crasher.chmod(0o755)
    done = compat("check", "--python", str(crasher))
    one_sentence(done, "killed by SIGSEGV")
    assert "exit -11" not in done.stderr


def test_config_example_has_no_literal_backslash_n(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[indexes]]\npypi = "https://mirror.example/simple"\n')
    done = compat("install", "--print", "pip-command", "--python-version", "3.11", "--profile", "stock", env={"COMPAT_CONFIG": str(config)})
    one_sentence(done, "[indexes]")
    assert "\\n" not in done.stderr, done.stderr


def test_matrix_error_sentences_end_with_a_period(tmp_path):
    missing = tmp_path / "missing.toml"
    done = compat("resolve", "--matrix", str(missing), "--python-version", "3.10")
    one_sentence(done, "(No such file or directory). Pass an existing matrix file")


@pytest.mark.parametrize("argv", [["check", "--no-bf16"], ["check", "--bf16", "--no-bf16"], ["check", "--no-bf16", "--bf16"],
                                  ["doctor", "--no-bf16"], ["doctor", "--live", "--bf16", "--no-bf16"]])
def test_no_bf16_outside_live_and_contradictions_are_usage_errors(argv):
    done = compat(*argv, "--only", "packages")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bf16" in done.stderr.splitlines()[-1] and "Traceback" not in done.stderr


def test_bf16_on_check_still_works():
    done = compat("check", "--bf16", "--only", "runtime.isa")
    assert done.returncode in (0, 1), done.stderr
