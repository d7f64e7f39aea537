#!/usr/bin/env python3
"""The watch's overhead on a real Trainer step: compat launch --launcher torchrun --nproc-per-node 2 of
bench/watch_trainer.py (a Hugging Face Trainer on the doctor's tiny GPT-2, gloo), with and without --watch,
alternated in the same run (watched, plain, watched, plain, ...; which comes first alternates too). Each run's figure is
the median of its step times (TrainerCallback, warm-up steps left out); each side's figure the median of its runs'.

    python bench/watch_bench.py --python ENV/bin/python [--pairs 5] [--steps 120]

ENV needs torch and transformers (the tests' torch213-stock environment: python -m tests.real_envs torch213-stock).
Goal (issue 33): the watch costs a Trainer step at most 3% (overhead = watched median / plain median - 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.03


def one_run(python: str, watched: bool, steps: int, nproc: int) -> tuple[float, float]:
    """(median step seconds, wall seconds) of one compat launch."""
    with tempfile.TemporaryDirectory(prefix="watch-bench-") as folder:
        out = os.path.join(folder, "steps.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
        env.update({"WATCH_BENCH_OUT": out, "WATCH_BENCH_STEPS": str(steps), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)})
        argv = [sys.executable, "-m", "compatmatrix", "launch", *(["--watch"] if watched else []), "--launcher", "torchrun",
                "--nproc-per-node", str(nproc), "--ccl-workers", "0", "--python", python, "--", str(ROOT / "bench" / "watch_trainer.py")]
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, env=env, cwd=folder)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        with open(out) as handle:
            seconds = json.load(handle)["step_seconds"]
        return statistics.median(seconds), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="interpreter of an environment with torch + transformers")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()

    one_run(args.python, False, 20, args.nproc)  # warm the page cache
    watched, plain, walls = [], [], {"watched": [], "plain": []}
    for pair in range(args.pairs):
        order = (True, False) if pair % 2 == 0 else (False, True)
        for is_watched in order:
            step, wall = one_run(args.python, is_watched, args.steps, args.nproc)
            (watched if is_watched else plain).append(step)
            walls["watched" if is_watched else "plain"].append(wall)
    w, p = statistics.median(watched), statistics.median(plain)
    result = {
        "pairs": args.pairs, "steps": args.steps, "ranks": args.nproc,
        "watched_step_ms": [round(s * 1e3, 3) for s in watched],
        "plain_step_ms": [round(s * 1e3, 3) for s in plain],
        "watched_median_ms": round(w * 1e3, 3), "plain_median_ms": round(p * 1e3, 3),
        "overhead": round(w / p - 1, 4), "goal_overhead_at_most": GOAL,
        "wall_seconds_median": {k: round(statistics.median(v), 2) for k, v in walls.items()},
    }
    print(json.dumps(result, indent=2))
    return 0 if result["overhead"] <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
