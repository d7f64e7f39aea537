#!/usr/bin/env python3
"""compat doctor --live against a bare hand-written script (bench/bare_live.py) doing the same allreduce and
Trainer step with the same launcher, alternated in the same run; plus the allreduce bus bandwidth as a
fraction of the memory-copy bandwidth compat measured in that run.

    python bench/live_bench.py --python ENV/bin/python [--launcher torchrun] [--runs 5]

ENV needs torch and transformers (e.g. the tests' torch213-stock environment: python -m tests.real_envs torch213-stock).
Goal (issue 5): compat's overhead at most 25% of the bare script's wall time.
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


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(argv: list[str], env: dict[str, str], ok=(0,)) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"bench: {' '.join(argv[:8])} ... exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="interpreter of an environment with torch + transformers")
    parser.add_argument("--launcher", choices=["torchrun", "mpirun"], default="torchrun")
    parser.add_argument("--mpirun", help="mpirun binary (with --launcher mpirun)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    bare_script = str(ROOT / "bench" / "bare_live.py")
    # --no-bf16: the bare script trains in fp32, so compat must too, or the ratio would depend on the CPU
    compat = [sys.executable, "-m", "compatmatrix", "doctor", "--live", "--json", "--no-bf16", "--python", args.python, "--launcher", args.launcher]
    if args.mpirun:
        compat += ["--mpirun", args.mpirun]

    def bare() -> list[str]:
        if args.launcher == "torchrun":
            return [args.python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()), bare_script]
        mpirun = args.mpirun or str(Path(args.python).parent / "mpirun")
        # by hand, the user maps PMI_* to RANK/WORLD_SIZE themselves: a two-line wrapper
        wrapper = "import os, runpy; os.environ.update(RANK=os.environ['PMI_RANK'], WORLD_SIZE=os.environ['PMI_SIZE'], LOCAL_RANK=os.environ.get('MPI_LOCALRANKID', '0')); runpy.run_path(%r, run_name='__main__')" % bare_script
        return [mpirun, "-n", "2", "-genv", "MASTER_ADDR", "127.0.0.1", "-genv", "MASTER_PORT", str(free_port()), args.python, "-c", wrapper]

    launcher_dir = Path(args.mpirun).parent if args.mpirun else Path(args.python).parent  # Intel's mpirun runs mpiexec.hydra from PATH
    bare_env = dict(env, PATH=f"{launcher_dir}{os.pathsep}{env.get('PATH', '')}")
    run(bare(), bare_env)  # warm the page cache for both
    run(compat, env, ok=(0, 1))
    bare_times, compat_times, fractions, reports = [], [], [], []
    for _ in range(args.runs):
        bare_times.append(run(bare(), bare_env)[0])
        seconds, out = run(compat, env, ok=(0, 1))
        compat_times.append(seconds)
        report = json.loads(out)
        if not report["ok"]:
            raise SystemExit("bench: compat doctor --live did not pass:\n" + json.dumps([c for c in report["checks"] if c["status"] == "fail"], indent=1))
        live = report["live"]
        fractions.append(live["bandwidth"][-1]["busbw"] / live["memcpy"]["all_ranks"])
        reports.append(live)
    bare_median, compat_median = statistics.median(bare_times), statistics.median(compat_times)
    last = reports[-1]
    result = {
        "launcher": args.launcher,
        "runs": args.runs,
        "bare_seconds": [round(t, 2) for t in bare_times],
        "compat_seconds": [round(t, 2) for t in compat_times],
        "bare_median": round(bare_median, 2),
        "compat_median": round(compat_median, 2),
        "overhead": round(compat_median / bare_median - 1, 3),
        "goal_overhead_at_most": 0.25,
        "busbw_64mib_gbs": round(last["bandwidth"][-1]["busbw"] / 1e9, 2),
        "memcpy_gbs": round(last["memcpy"]["all_ranks"] / 1e9, 2),
        "busbw_fraction_of_memcpy_median": round(statistics.median(fractions), 3),
    }
    print(json.dumps(result, indent=2))
    return 0 if result["overhead"] <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
