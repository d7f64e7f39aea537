"""processes.py: the one Terminated, the signal-to-exception context, and the /proc sweep every supervisor stands on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from compatmatrix.processes import Terminated, new_run_id, raise_on_termination, sweep, tagged_processes

MARK = "COMPAT_TEST_SWEEP_RUN"


def _sigterm_to_self_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    return timer


def test_sigterm_inside_the_block_is_terminated_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with raise_on_termination():
            _sigterm_to_self_after(0.1)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_handler_someone_else_installed_is_left_alone_when_asked():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with raise_on_termination(replace=False):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_helper_child_and_the_live_supervisor_raise_the_one_terminated(tmp_path):
    """SIGTERM while a helper child runs is processes.Terminated (cli.main tells it from Ctrl-C by type: exit 143);
    environment/child and live/supervise each had a class of their own with the same name."""
    from compatmatrix.environment.child import run_child
    from compatmatrix.live.supervise import supervise

    _sigterm_to_self_after(0.3)
    with pytest.raises(Terminated):
        run_child([sys.executable, "-c", "import time; time.sleep(20)"], timeout=30)
    _sigterm_to_self_after(0.3)
    with pytest.raises(Terminated):
        supervise([[sys.executable, "-c", "import time; time.sleep(20)"]], [dict(os.environ)], tmp_path, 30, new_run_id())


def test_sweep_ends_a_tagged_process_that_left_its_group():
    run_id = new_run_id()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, MARK: run_id}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while child.pid not in tagged_processes(run_id, MARK) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tagged_processes(run_id, MARK) == [child.pid]
        assert sweep(run_id, (), wait=3.0, variable=MARK) == ()
        assert child.wait(timeout=5) is not None
    finally:
        child.kill()
        child.wait()
