#!/usr/bin/env python3
"""compat install with pip and with uv for the same plan, against the raw installer doing the same install.

The plan: the `stock` profile with torch 2.13.0 (the CPU wheel in a local folder, --index pytorch-cpu=DIR)
and transformers / accelerate (and their dependencies) from PyPI. Each row installs into a fresh venv;
pip's and uv's caches are warmed first, so the rows compare installing, not downloading.

    python bench/install_bench.py [--torch-dir /opt/wheels] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fresh_venv(base: Path, name: str) -> Path:
    target = base / name
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    return target / "bin" / "python"


def timed(argv: list[str], timeout: float = 1800) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv[:6])} ... failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    return elapsed


def main() -> int:
    from compatmatrix.install.runner import uv_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-dir", default="/opt/wheels", help="folder holding the torch 2.13.0 CPU wheel")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    uv = uv_binary()
    compat = [sys.executable, "-m", "compatmatrix"]
    plan = json.loads(subprocess.run(compat + ["install", "--dry-run", "--json", "--python-version", "3.11", "--profile", "stock", "torch==2.13.0"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)["packages"]
    pins = list(plan.values())
    rows = []
    with tempfile.TemporaryDirectory(prefix="compat-install-bench-") as work:
        base = Path(work)
        index = ["--index", f"pytorch-cpu={args.torch_dir}", "--allow-unverified"]  # a plain folder publishes no sha256
        # warm caches
        timed(compat + ["install", "--yes", "--python", str(fresh_venv(base, "warm")), "--profile", "stock", "torch==2.13.0", *index])
        if uv:
            timed([uv, "pip", "install", "--python", str(fresh_venv(base, "warm-uv")), "--find-links", args.torch_dir, *pins])
        cases = [
            ("compat install --installer pip", lambda py: compat + ["install", "--yes", "--python", str(py), "--profile", "stock", "torch==2.13.0", "--installer", "pip", *index]),
            ("raw: pip install (same pins, --find-links for torch)", lambda py: [str(py), "-m", "pip", "install", "--quiet", "--find-links", args.torch_dir, *pins]),
        ]
        if uv:
            cases += [
                ("compat install --installer uv", lambda py: compat + ["install", "--yes", "--python", str(py), "--profile", "stock", "torch==2.13.0", "--installer", "uv", *index]),
                ("raw: uv pip install (same pins)", lambda py: [uv, "pip", "install", "--python", str(py), "--find-links", args.torch_dir, *pins]),
            ]
        for name, command in cases:
            times = [timed(command(fresh_venv(base, "run"))) for _ in range(args.runs)]
            rows.append((name, times))
    print(f"plan: {' '.join(pins)}\n")
    print("| command | runs | median s | min s |\n|---|---:|---:|---:|")
    for name, times in rows:
        print(f"| {name} | {len(times)} | {statistics.median(times):.1f} | {min(times):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
