"""The installer runner's own guarantees, with small real processes (no network)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from compatmatrix.install.runner import run_installer

from ..clean_env import base_env
from ..procs import MARK_VARIABLE, kill_marked, marked, new_mark, wait_until

DEADLINE_S = 10.0  # long enough for the installer to start and write its marker on a loaded 1-CPU machine


def test_a_silent_hung_installer_is_killed_at_its_deadline(tmp_path):
    """A silent installer that hangs (with a child in its process group) is killed, group and all, at its deadline.
    The test first waits (bounded) for the installer's own marker: it judges a hang that really started."""
    marker = tmp_path / "pids"
    mark = new_mark()
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(marker)!r} + '.tmp', 'w').write('%d %d' % (os.getpid(), child.pid))\n"
            f"os.replace({str(marker)!r} + '.tmp', {str(marker)!r})\n"
            "time.sleep(600)\n")
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = run_installer([sys.executable, "-c", code], base_env({MARK_VARIABLE: mark}), timeout=DEADLINE_S)
        except Exception as exc:  # handed to the test's thread
            outcome["raised"] = exc

    start = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        assert wait_until(marker.exists, DEADLINE_S + 30), "the installer never started"
        installer, child = (int(pid) for pid in marker.read_text().split())
        assert time.monotonic() - start < DEADLINE_S, "the installer started only after its deadline: nothing was tested"
        worker.join(timeout=DEADLINE_S + 60)
        assert not worker.is_alive(), "run_installer did not return after its deadline"
        assert isinstance(outcome.get("raised"), subprocess.TimeoutExpired), outcome
        assert time.monotonic() - start < DEADLINE_S + 30
        assert not os.path.exists(f"/proc/{installer}"), "the installer must be gone (and reaped)"
        assert wait_until(lambda: not marked(mark), 10), f"the installer's process group must be gone: {marked(mark)} (its child was {child})"
    finally:
        kill_marked(mark)


def test_output_is_returned_with_the_exit_code():
    code, output = run_installer([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], base_env(), timeout=60)
    assert code == 3 and "hello" in output
