"""The Python stacks of the ranks a stall involves, taken from outside with ``py-spy dump --nonblocking``.

Chosen by measurement (torch 2.13 CPU, Python 3.11): a rank stopped by SIGSTOP cannot run anything of its own, so
neither faulthandler (a signal handler in the rank) nor torch's per-rank debug server (a thread in the rank) can answer
for it; py-spy reads the stopped process's memory and answered in 38 ms (blocking mode, which pauses the process
first, fails on a stopped one). It needs no code in the rank and costs the job nothing until a stall. It needs ptrace
rights over the ranks (the same user and kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE); where py-spy is not
installed or may not look, the finding says so instead of a stack.

Side effects: runs py-spy (bounded: STACK_TIMEOUT_S, its own process group).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ..processes import run_bounded

STACK_TIMEOUT_S = 10.0
MAX_CHARS = 16_000


@dataclass(frozen=True)
class Stack:
    rank: int
    pid: int
    text: str  # py-spy's dump, or "" when none was taken
    error: str  # why not, or ""


def find_py_spy(env: Mapping[str, str], pythons: Sequence[str] = ()) -> Optional[str]:
    """py-spy on PATH, else next to compat's interpreter or the training environment's."""
    found = shutil.which("py-spy", path=env.get("PATH"))
    if found:
        return found
    for python in (sys.executable, *pythons):
        if python:
            candidate = os.path.join(os.path.dirname(python), "py-spy")
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def take(py_spy: Optional[str], ranks: Mapping[int, int]) -> tuple[Stack, ...]:
    """The stacks of ``ranks`` (rank -> pid)."""
    stacks = []
    for rank, pid in sorted(ranks.items()):
        if py_spy is None:
            stacks.append(Stack(rank, pid, "", "py-spy is not installed (pip install py-spy), so no stack was taken"))
            continue
        try:
            done = run_bounded([py_spy, "dump", "--pid", str(pid), "--nonblocking"], timeout=STACK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stacks.append(Stack(rank, pid, "", f"py-spy took more than {STACK_TIMEOUT_S:.0f} s"))
            continue
        except OSError as exc:
            stacks.append(Stack(rank, pid, "", f"py-spy did not start: {exc.strerror or exc}"))
            continue
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no message"])[-1]
            stacks.append(Stack(rank, pid, "", f"py-spy could not read it ({why[:300]}); it needs ptrace rights over the ranks"))
            continue
        stacks.append(Stack(rank, pid, done.stdout[-MAX_CHARS:], ""))
    return tuple(stacks)
