"""Streams, locales and paths that once ended in the internal-error guard (issue 19).

A closed or full standard error, as docs/guarantees.md promises: every command runs as a real subprocess with descriptor 2
closed (`2>&-`) and pointed at /dev/full (`2>/dev/full`); its exit code and its output must be those of the same
command with stderr on /dev/null. An ASCII locale (LC_ALL=C, UTF-8 mode off, PYTHONIOENCODING unset) with non-ASCII
paths, and paths the file system refuses (a name over 255 bytes, a path over PATH_MAX): one sentence, never the guard.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = [
    ["matrix"],
    ["check"],
    ["resolve", "torch==2.7.0"],
    ["resolve", "torch==9.9"],  # no set: the reasons go to stderr, exit 1
    ["install", "--dry-run", "--python-version", "3.11", "torch==2.7.0"],
    ["doctor", "--list"],
    ["env", "--json"],
    ["export", "requirements", "--python-version", "3.11", "torch==2.7.0"],
    ["translate", "--transformers", "4.30.2", "--", "python", "run.py", "--no_cuda"],
    ["resolve", "--python-version", "nope"],  # a usage error: exit 2 whether or not it can be said
]


def _run(args, stderr_setup):
    env = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_PYTHON")}
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                          timeout=120, env=env, preexec_fn=stderr_setup)


def _closed():
    os.close(2)


def _full():
    fd = os.open("/dev/full", os.O_WRONLY)
    os.dup2(fd, 2)
    os.close(fd)


def _null():
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 2)
    os.close(fd)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:40])
def test_a_closed_or_full_stderr_changes_neither_the_exit_code_nor_the_output(args):
    expected = _run(args, _null)
    closed = _run(args, _closed)
    assert (closed.returncode, closed.stdout) == (expected.returncode, expected.stdout), "stderr closed (2>&-)"
    if os.path.exists("/dev/full"):
        full = _run(args, _full)
        assert (full.returncode, full.stdout) == (expected.returncode, expected.stdout), "stderr full (2>/dev/full)"


# ---------------------------------------------------------------- an ASCII locale


def _ascii_locale(args, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_PYTHON", "PYTHONIOENCODING", "LANG", "LANGUAGE")
           and not k.startswith("LC_")}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env, cwd=cwd)


def test_an_ascii_locale_with_non_ascii_paths_ends_in_output_not_in_the_guard(tmp_path):
    folder = tmp_path / "r\u00e9sum\u00e9"
    folder.mkdir()
    requirements = folder / "requirements-\u00fc.txt"
    requirements.write_text("torch==2.7.0  # caf\u00e9\n", encoding="utf-8")
    for args, code in [(["resolve"], 0), (["check", "-r", str(requirements), "--python-version", "3.11"], None),
                       (["resolve", "-r", str(requirements), "--python-version", "3.11"], 0), (["resolve", "-r", str(folder / "gone-\u00e9.txt")], 2),
                       (["check", "--python", str(folder / "python")], 2)]:
        done = _ascii_locale(args)
        said = done.stdout + done.stderr
        assert b"internal error" not in said and b"Traceback" not in said, (args, said[-1500:])
        assert code is None or done.returncode == code, (args, done.returncode, said[-1500:])
        if args[0] == "check" or done.returncode == 2:
            assert os.fsencode(folder) in said, (args, said[-800:])  # a path is written as its bytes, not as escapes


# ---------------------------------------------------------------- paths the file system refuses


def _in_process(argv, capsys):
    from compatmatrix.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


LONG_NAME = "/tmp/" + "n" * 300  # a name over 255 bytes
DEEP = "/tmp/" + "/".join(["d" * 200] * 22)  # over PATH_MAX (4096)


@pytest.mark.parametrize("argv", [
    ["check", "-r", LONG_NAME], ["resolve", "-r", DEEP + "/r.txt"], ["check", "--python", LONG_NAME], ["doctor", "--python", DEEP + "/python"],
    ["install", "--dry-run", "--python", DEEP + "/python", "torch"], ["env", "--python", LONG_NAME],
])
def test_a_path_the_file_system_refuses_is_one_sentence(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    code, out, err = _in_process(argv, capsys)
    assert code == 2 and "internal error" not in err, err[-1000:]
    assert "is longer than the file system allows" in err and len(err.strip().splitlines()[-1]) < 400, err


def test_a_missing_requirements_file_says_no_such_file(capsys, tmp_path):
    code, out, err = _in_process(["check", "-r", str(tmp_path / "requirements.txt")], capsys)
    assert code == 2 and f"{tmp_path / 'requirements.txt'} does not exist (no such file or folder)" in err, err
