"""The installer runner's own guarantees, with small real processes (no network)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from compatmatrix.install.runner import run_installer


def test_a_silent_hung_installer_is_killed_at_its_deadline(tmp_path):
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_installer([sys.executable, "-c", code], os.environ, timeout=2)
    assert time.monotonic() - start < 30
    pid = int(marker.read_text())
    assert not os.path.exists(f"/proc/{pid}"), "the installer's process group must be gone"


def test_output_is_returned_with_the_exit_code():
    code, output = run_installer([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], os.environ, timeout=60)
    assert code == 3 and "hello" in output
