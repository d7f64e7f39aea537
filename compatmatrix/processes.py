"""Small process helpers shared by the installer runner and the live supervisor."""

from __future__ import annotations

import signal


def die_with_parent() -> None:
    """In a child process (preexec_fn): get SIGKILL when compat dies, so no child outlives it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
