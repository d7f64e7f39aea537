"""The transport settings of the user's pip configuration (CA bundle, proxy, timeouts, trusted hosts), read once per
compat run: what runner.installer_env gives the pip it runs, and where trust.py finds pip's ``cert``. Below both
(it imports neither), so the installer's environment and the TLS decision share one reading without an import cycle.

Side effects: one child process (``python -m pip config list``, bounded), at the first call or in a thread that
read_ahead starts.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Optional

from ..processes import run_bounded

TRANSPORT_KEYS = ("cert", "client-cert", "proxy", "trusted-host", "timeout", "default-timeout", "retries")
Settings = tuple[tuple[str, str], ...]

_lock = threading.Lock()  # held while pip is asked: a second caller waits for the one reading
_read: Optional[Settings] = None


def configured_transport() -> Settings:
    """The transport settings of pip's configuration files, as PIP_* variables and values (not the PIP_* variables of
    this moment: installer_env passes those it keeps itself). Read once per run; a reading under way (read_ahead)
    is waited for."""
    global _read
    with _lock:
        if _read is None:
            _read = _ask_pip()
        return _read


def read_ahead() -> None:
    """Start reading pip's configuration in a thread (a pip start takes a good part of a second), so that the first
    configured_transport() finds it read, or under way, while the install does other work."""
    if _read is None and not _lock.locked():
        threading.Thread(target=configured_transport, daemon=True, name="compat-pip-config").start()


def forget() -> None:
    """Read pip's configuration again at the next call (the tests: one test's settings must not reach the next)."""
    global _read
    with _lock:
        _read = None


def _ask_pip() -> Settings:
    try:
        listing = run_bounded([sys.executable, "-m", "pip", "config", "list"], timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    found = []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        if key.startswith(":env:"):  # a PIP_* variable, not a file: installer_env already passes those it keeps
            continue
        name = key.split(".", 1)[-1].strip()
        if name in TRANSPORT_KEYS and value:
            found.append(("PIP_" + name.upper().replace("-", "_"), value.strip().strip("'\"")))
    return tuple(found)


def config_cert() -> Optional[str]:
    """``cert`` from pip's configuration, as installer_env gives it to pip (the first one pip config list shows)."""
    return next((value for variable, value in configured_transport() if variable == "PIP_CERT" and value), None)
