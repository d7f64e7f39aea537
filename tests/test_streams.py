"""Closed and full standard error, as the README promises: progress and messages are dropped, never a failure.

Every command runs as a real subprocess with descriptor 2 closed (`2>&-`) and pointed at /dev/full (`2>/dev/full`);
its exit code and its output must be those of the same command with stderr on /dev/null.
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
