"""Named points of an install, and the TEST-ONLY kill hook that uses them.

``checkpoint(phase)`` is called at the points where a real crash would leave the most interesting state
(each host checked, each wheel fetched, each hard link of the snapshot, every 50 ms of the installer, each
entry of the snapshot deleted, ...). It does nothing unless the TEST-ONLY variable ``COMPAT_TEST_KILL_AT``
is set (tests/install/test_install_killpoints.py sets it):

    COMPAT_TEST_KILL_AT=<phase>:<n>   SIGKILL this process at the n-th checkpoint of <phase>

and while it is set, each checkpoint is also printed to stderr as ``compat-test-checkpoint <phase> <n>``
(so a run with a phase that never happens, e.g. ``count:0``, counts them). Side effects only when set:
a line on stderr, and SIGKILL of this very process.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from typing import Optional

TEST_KILL_VARIABLE = "COMPAT_TEST_KILL_AT"

_passed: Counter = Counter()


def _target() -> Optional[tuple[str, int]]:
    value = os.environ.get(TEST_KILL_VARIABLE)
    if not value:
        return None
    phase, _, number = value.partition(":")
    try:
        return phase, int(number or 0)
    except ValueError:
        return phase, 0


def checkpoint(phase: str) -> None:
    """A point of ``phase`` where compat may be killed in the kill-point test; inert unless COMPAT_TEST_KILL_AT is set."""
    target = _target()
    if target is None:
        return
    _passed[phase] += 1
    try:
        sys.stderr.write(f"compat-test-checkpoint {phase} {_passed[phase]}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if target == (phase, _passed[phase]):
        os.kill(os.getpid(), signal.SIGKILL)
