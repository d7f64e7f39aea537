#!/usr/bin/env python3
"""Wall-time benchmarks: compat's own commands next to pip resolving the same set.

Runs each command several times in a subprocess (as a user would) and prints a Markdown table
with the median, min and max wall time. The pip row resolves the set `compat resolve --profile ipex`
picks for Python 3.11 (`pip install --dry-run --ignore-installed`, which asks the registry), so it
needs PyPI; pass --skip-pip to leave it out.

    python bench/run.py [--runs 5] [--skip-pip] [--env PYTHON]

--env names the interpreter of an environment with torch and transformers installed (default: the
test suite's cached stock environment, tests/real_envs.py "torch213-stock", when it exists); the
script then times `compat check --python PYTHON` against `PYTHON -m pip check` on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900


def timed(argv: list[str], runs: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=TIMEOUT_S, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode not in (0, 1):
            raise SystemExit(f"bench: {' '.join(argv)} failed (exit {done.returncode}): {done.stderr.decode()[-500:]}")
        times.append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-pip", action="store_true")
    parser.add_argument("--env", help="interpreter of an environment with torch + transformers, for the check rows")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.env is None:
        from tests.real_envs import CACHE

        candidate = CACHE / "torch213-stock" / "bin" / "python"
        args.env = str(candidate) if candidate.exists() else None
    env = dict(os.environ, NO_COLOR="1")
    compat = [sys.executable, "-m", "compatmatrix"]
    rows: list[tuple[str, list[float]]] = []
    rows.append(("python -c pass (interpreter start, floor)", timed([sys.executable, "-c", "pass"], args.runs, env)))
    rows.append(("compat resolve --json (ddp-ccl, Python 3.11)", timed(compat + ["resolve", "--json", "--python-version", "3.11"], args.runs, env)))
    rows.append(("compat resolve (conflict + alternatives)", timed(compat + ["resolve", "--python-version", "3.10", "torch==1.12.1", "ccl==1.12.0"], args.runs, env)))
    rows.append(("compat matrix --json", timed(compat + ["matrix", "--json"], args.runs, env)))
    rows.append(("compat matrix (tables)", timed(compat + ["matrix"], args.runs, env)))
    if args.env:
        subprocess.run(compat + ["check", "--python", args.env], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=120, check=False)  # warm the matrix cache
        rows.append((f"compat check --python ENV (ENV: {Path(args.env).parents[1].name})", timed(compat + ["check", "--python", args.env], args.runs, env)))
        rows.append(("ENV/bin/python -m pip check", timed([args.env, "-m", "pip", "check"], args.runs, env)))
        no_cache = dict(env, COMPAT_NO_CACHE="1")
        rows.append(("compat check --python ENV, matrix cache off", timed(compat + ["check", "--python", args.env], args.runs, no_cache)))
    if not args.skip_pip:
        resolved = subprocess.run(compat + ["resolve", "--json", "--python-version", "3.11", "--profile", "ipex"], capture_output=True, text=True, timeout=120, check=True)
        packages = json.loads(resolved.stdout)["packages"]
        pins = [f"{name}=={version}" for name, version in packages.items()]
        with tempfile.TemporaryDirectory() as cache:
            pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--cache-dir", cache, *pins]
            rows.append((f"pip install --dry-run {' '.join(pins)} (cold cache)", timed(pip, 1, env)))
            rows.append((f"pip install --dry-run {' '.join(pins)} (warm cache)", timed(pip, args.runs, env)))
            shutil.rmtree(cache, ignore_errors=True)
    print("| command | runs | median s | min s | max s |\n|---|---:|---:|---:|---:|")
    for name, times in rows:
        print(f"| {name} | {len(times)} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
