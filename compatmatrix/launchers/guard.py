"""The guardian of a compat launch: ``python -m compatmatrix.launchers.guard PGID[,PGID...] RUN_ID PARENT [VARIABLE]``
(VARIABLE: the environment variable that carries the run id, COMPAT_LAUNCH_RUN by default; compat doctor --live and
compat tune start one for their runs with COMPAT_LIVE_RUN, live/supervise.py).

compat starts it next to the launcher. It sleeps until compat dies (PR_SET_PDEATHSIG gives it SIGTERM) and then
stops the job: the launcher's process group and every process tagged with the run id, TERM then KILL. This is what
keeps a SIGKILLed compat from leaving the job behind where the launcher cannot pass the parent-death signal on
(Intel MPI's mpirun is a shell script: hydra and the ranks outlive it). When the job ends normally, compat kills
the guardian itself.

Side effects: signals to the job's processes; reads /proc.
"""

from __future__ import annotations

import os
import signal
import sys


def _stop(pgids: list[int], run_id: str, variable: str) -> None:
    from ..processes import sweep

    sweep(run_id, pgids, wait=5.0, variable=variable)


def main(argv: list[str]) -> int:
    from .run import RUN_ID_VAR

    pgids, run_id, parent = [int(p) for p in argv[0].split(",") if p], argv[1], int(argv[2])
    variable = argv[3] if len(argv) > 3 else RUN_ID_VAR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is compat's to pass on, not the guardian's
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # taken below by sigtimedwait
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    while os.getppid() == parent:  # also ends when compat died before the parent-death signal was in place
        if signal.sigtimedwait([signal.SIGTERM], 1.0) is not None:
            break
    _stop(pgids, run_id, variable)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
