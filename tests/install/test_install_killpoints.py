"""THE KILL-POINT TEST: `compat install` SIGKILLed at deterministic points of every phase, and what is left.

How compat is killed: the TEST-ONLY hook ``COMPAT_TEST_KILL_AT=<phase>:<n>`` (compatmatrix/install/checkpoints.py,
inert unless the variable is set) makes compat SIGKILL itself at the n-th checkpoint it passes in that phase:
preflight (each host), plan (pip check, each located wheel, pip's dry-run, each dependency hash), fetch (each
wheel and MiB, pip download), snapshot (each hard link, the manifest, the journal), install (every 50 ms while
the installer runs), verify (before/after the environment probe and the checks), commit (the journal's
removal, each entry of the snapshot deleted) and restore (each folder swapped, the journal, the deletion).
While the variable is set, compat also prints ``compat-test-checkpoint <phase> <n>`` to stderr at each
checkpoint: one full run with a phase that never happens ("count:0") counts them, and the kill points are
drawn from those counts with a fixed seed. A SIGKILL cannot be caught, so this is the real thing, at
reproducible places rather than at random times.

After each kill: no process started by compat may be alive (each child carries COMPAT_TEST_MARK in its
environment; /proc is read), and the environment (site-packages and bin, file by file: path, size, sha256,
link target) must equal the state before exactly, or the complete new state (there, .pyc files by size:
pip writes the install time into them); when a journal was left, the next
`compat install` must refuse and propose --restore, and `compat install --restore` (itself killed once at
a drawn point for some of them, then run again) must bring back exactly the state before.

FIXTURE wheels (tests/install_helpers.py) from a local index on 127.0.0.1; one pristine venv copied per kill.
"""

from __future__ import annotations

import random
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from ..install_helpers import (
    MARK_VARIABLE,
    STACK,
    compat,
    copy_venv,
    diff,
    env_tree,
    loose,
    new_mark,
    served,
    site_packages,
    stack_index,
    survivors,
    template_venv,
)

pytestmark = pytest.mark.integration

PHASES = {"preflight": 3, "plan": 5, "fetch": 5, "snapshot": 8, "install": 6, "verify": 3, "commit": 6}  # 36 kill points
SEED = 20240611
JOURNAL = ".compat-install-journal.json"


def _checkpoints(stderr: str) -> Counter:
    counts: Counter = Counter()
    for phase, n in re.findall(r"^compat-test-checkpoint (\S+) (\d+)$", stderr, re.M):
        counts[phase] = max(counts[phase], int(n))
    return counts


def _kill_points(counts: Counter, rng: random.Random) -> list[tuple[str, int]]:
    points, short = [], 0
    for phase, wanted in PHASES.items():
        available = counts.get(phase, 0)
        if phase == "install":
            available = max(1, int(available * 0.8))  # polls: a faster run has fewer
        take = min(wanted, available)
        short += wanted - take
        points += [(phase, n) for n in sorted(rng.sample(range(1, available + 1), take))]
    extra = [n for n in range(1, counts["snapshot"] + 1) if ("snapshot", n) not in points]
    points += [("snapshot", n) for n in sorted(rng.sample(extra, min(short, len(extra))))]
    return points


def test_sigkill_at_every_phase_leaves_the_old_or_the_new_environment(tmp_path):
    rng = random.Random(SEED)
    template = template_venv(tmp_path / "template")
    work = tmp_path / "venv"
    with served(stack_index(tmp_path / "stack")) as index:
        args = ("install", "--python", str(work / "bin" / "python"), "--yes", *STACK, *index.index_args())
        python = copy_venv(template, work)
        before = env_tree(python)
        full = compat(*args, env={"COMPAT_TEST_KILL_AT": "count:0"})
        assert full.returncode == 0, full.stderr[-3000:]
        after = env_tree(python)
        assert after != before
        counts = _checkpoints(full.stderr)
        assert set(PHASES) <= set(counts), counts
        points = _kill_points(counts, rng)
        assert len(points) >= 30, (points, counts)

        outcomes: Counter = Counter()
        orphans: list[str] = []
        compared = 0
        for phase, n in points:
            python = copy_venv(template, work)
            mark = new_mark()
            killed = compat(*args, env={"COMPAT_TEST_KILL_AT": f"{phase}:{n}", MARK_VARIABLE: mark})
            orphans += [f"{phase}:{n} {line}" for line in survivors(mark, grace=2.0)]
            if killed.returncode == 0 and phase == "install":
                outcomes["installer finished first"] += 1
            else:
                assert killed.returncode == -signal.SIGKILL, (phase, n, killed.returncode, killed.stderr[-2000:])
            journal = site_packages(python).parent / JOURNAL
            if journal.exists():
                refused = compat(*args)
                assert refused.returncode == 1 and "--restore" in refused.stderr, (phase, n, refused.stderr[-1500:])
                if outcomes["journal, restored to before"] % 2 == 0:  # every other time: kill the restore itself, then restore again
                    mark = new_mark()
                    half = compat("install", "--restore", "--python", str(python), env={"COMPAT_TEST_KILL_AT": f"restore:{rng.randint(1, 4)}", MARK_VARIABLE: mark})
                    orphans += survivors(mark, grace=2.0)
                    assert half.returncode in (0, -signal.SIGKILL), half.stderr[-1500:]
                    outcomes["restore killed"] += half.returncode == -signal.SIGKILL
                if journal.exists():
                    restored = compat("install", "--restore", "--python", str(python))
                    assert restored.returncode == 0, (phase, n, restored.stderr[-1500:])
                state = env_tree(python)
                compared += 1
                assert state == before, (phase, n, "after --restore", diff(before, state))
                outcomes["journal, restored to before"] += 1
            else:
                state = env_tree(python)
                compared += 1
                assert state == before or loose(state) == loose(after), (phase, n, diff(before, state), diff(loose(after), loose(state)))
                outcomes["no journal, " + ("before" if state == before else "complete new state")] += 1
        print(f"\nkill points: {len(points)} ({dict(Counter(p for p, _ in points))}); environments compared: {compared + 2}; "
              f"outcomes: {dict(outcomes)}; orphans: {len(orphans)}")
    assert orphans == [], orphans
    assert Path(work).exists()
