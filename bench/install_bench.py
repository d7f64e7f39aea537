#!/usr/bin/env python3
"""compat install with pip and with uv for the same plan, against the raw installer doing the same install, and the
ratios issue 15 sets goals for, all from one run.

Real packages (the default): the `stock` profile with torch 2.13.0 (this machine's CPU wheel, served with its sha256
by a PEP 503 index on 127.0.0.1 that this script starts, as --index pytorch-cpu=URL; or the plain folder with
--torch-from folder, which publishes no sha256 and needs --allow-unverified) and transformers / accelerate (and their
dependencies) from PyPI. FIXTURE packages (--fixture): the tiny FIXTURE torch 2.7.0 + IPEX stack of the tests on a
FIXTURE index on 127.0.0.1 (compat's own overhead, nearly nothing to install).

Each run installs into a fresh venv; pip's, uv's and compat's caches are warmed first, so the rows compare installing,
not downloading. The runs of the four commands alternate (a load that changes over the run touches all of them).
compat's summary line (``phases: ...``) gives the time of each of its phases; the report gives each phase's median
and its share of compat's median run, and what lies outside the phases (the interpreter's start, the resolve, the
target's first probe, the exit). ``--baseline DIR`` adds the same compat rows run from another source tree (an
earlier commit, unpacked with ``git archive``), alternating with the others: before and after from one run.

    python bench/install_bench.py [--runs 3] [--torch-dir /opt/wheels] [--torch-from index|folder] [--fixture]
                                  [--installers pip,uv] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOALS = ("compat uv <= 1.5x raw uv, verify included", "compat pip <= 1.1x raw pip")  # issue 35


def fresh_venv(base: Path, name: str) -> Path:
    target = base / name
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    return target / "bin" / "python"


def clean_env() -> dict[str, str]:
    """No PIP_*/UV_* settings of this shell (PIP_FIND_LINKS would hand the raw installers a shortcut)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "COMPAT_"))}
    env.update(NO_COLOR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    for keep in ("PIP_CERT", "UV_CACHE_DIR", "PIP_CACHE_DIR"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    return env


def timed(argv: list[str], timeout: float = 1800, cwd: Path = ROOT) -> tuple[float, str]:
    """``argv`` run to the end, from ``cwd`` (`python -m compatmatrix` takes compat from there: this tree or --baseline's)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=clean_env(), stdin=subprocess.DEVNULL, cwd=str(cwd))
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv[:8])} ... failed:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stderr


PHASE_LINE = re.compile(r"phases: (.*)$", re.M)


def phases(stderr: str) -> dict[str, float]:
    found = PHASE_LINE.findall(stderr)
    if not found:
        return {}
    return {name: float(seconds) for name, seconds in re.findall(r"(\w+) ([\d.]+) s", found[-1])}


def phase_shares(runs: list[dict[str, float]], wall: float) -> str:
    """Each phase's median and its share of the command's median wall time; "outside" is the rest (the interpreter's
    start, matrix and resolve, the target's first probe, the exit), "total" the phases' own clock."""
    names = [n for n in runs[0] if n != "total"]
    medians = {n: statistics.median(r.get(n, 0.0) for r in runs) for n in names}
    parts = [f"{n} {s:.2f} s ({s / wall:.0%})" for n, s in medians.items()]
    clock = statistics.median(r.get("total", sum(r.values())) for r in runs)
    between = clock - sum(medians.values())  # the steps before the first phase and the commit after the last
    outside = wall - clock
    return ", ".join(parts + [f"between them {between:.2f} s ({between / wall:.0%})", f"outside the phases {outside:.2f} s ({outside / wall:.0%})"])


def serve_torch_index(folder: Path, work: Path) -> str:
    """A PEP 503 index (simple/torch/ with #sha256 fragments) of the torch wheels in ``folder``, on 127.0.0.1."""
    root = work / "torch-index"
    (root / "simple" / "torch").mkdir(parents=True)
    (root / "files").mkdir()
    links = []
    for wheel in sorted(folder.glob("torch-*.whl")):
        (root / "files" / wheel.name).symlink_to(wheel)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        links.append(f'<a href="../../files/{wheel.name.replace("+", "%2B")}#sha256={digest}">{wheel.name}</a><br/>')
    (root / "simple" / "torch" / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (root / "simple" / "index.html").write_text('<!DOCTYPE html><html><body><a href="torch/">torch</a></body></html>\n')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/simple"


def real_cases(args, work: Path, uv: str | None) -> tuple[list[str], list[tuple[str, object]]]:
    compat = [sys.executable, "-m", "compatmatrix"]
    plan = json.loads(subprocess.run(compat + ["install", "--dry-run", "--json", "--python-version", "3.11", "--profile", "stock", "torch==2.13.0"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)["packages"]
    pins = list(plan.values())
    if args.torch_from == "index":
        url = serve_torch_index(Path(args.torch_dir), work)
        index, raw_index = ["--index", f"pytorch-cpu={url}"], ["--extra-index-url", url]
    else:
        index, raw_index = ["--index", f"pytorch-cpu={args.torch_dir}", "--allow-unverified"], ["--find-links", args.torch_dir]  # a plain folder publishes no sha256
    request = ["--profile", "stock", "torch==2.13.0"]
    cases = [
        ("compat install --installer pip", lambda py: compat + ["install", "--yes", "--python", str(py), *request, "--installer", "pip", *index]),
        ("raw pip install (same pins)", lambda py: [str(py), "-m", "pip", "install", "--quiet", *raw_index, *pins]),
    ]
    if uv:
        cases += [
            ("compat install --installer uv", lambda py: compat + ["install", "--yes", "--python", str(py), *request, "--installer", "uv", *index]),
            ("raw uv pip install (same pins)", lambda py: [uv, "pip", "install", "--python", str(py), *raw_index, *pins]),
        ]
    return pins, cases


def fixture_cases(work: Path, uv: str | None) -> tuple[list[str], list[tuple[str, object]]]:
    from tests.fixture_index import serve
    from tests.install_helpers import STACK, stack_index

    index = stack_index(work / "fixture")
    serve(index)
    compat = [sys.executable, "-m", "compatmatrix"]
    pins = ["torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0"]
    raw_index = ["--index-url", index.host_url("pypi"), "--extra-index-url", index.host_url("pytorch-cpu")]
    cases = [
        ("compat install --installer pip", lambda py: compat + ["install", "--yes", "--python", str(py), *STACK, "--installer", "pip", *index.index_args()]),
        ("raw pip install (same pins)", lambda py: [str(py), "-m", "pip", "install", "--quiet", *raw_index, *pins]),
    ]
    if uv:
        cases += [
            ("compat install --installer uv", lambda py: compat + ["install", "--yes", "--python", str(py), *STACK, "--installer", "uv", *index.index_args()]),
            ("raw uv pip install (same pins)", lambda py: [uv, "pip", "install", "--python", str(py), *raw_index, *pins]),
        ]
    return pins, cases


def main() -> int:
    from compatmatrix.install.runner import uv_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-dir", default="/opt/wheels", help="folder holding the torch 2.13.0 CPU wheel")
    parser.add_argument("--torch-from", choices=["index", "folder"], default="index",
                        help="serve that folder as a PEP 503 index with sha256 on 127.0.0.1 (default), or pass the plain folder")
    parser.add_argument("--fixture", action="store_true", help="the FIXTURE stack of the tests instead of real packages")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--installers", default="pip,uv", help="which installers' rows to run (pip, uv or both)")
    parser.add_argument("--baseline", type=Path, help="a source tree of another compat (git archive of a commit): its compat rows run too, alternating")
    args = parser.parse_args()
    wanted = set(args.installers.split(","))
    uv = uv_binary() if "uv" in wanted else None
    rows: dict[str, list[float]] = {}
    split: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="compat-install-bench-") as work:
        base = Path(work)
        pins, cases = fixture_cases(base, uv) if args.fixture else real_cases(args, base, uv)
        cases = [(name, command) for name, command in cases if "pip" in wanted or "pip" not in name.replace("uv pip", "uv")]
        runs = [(name, command, ROOT) for name, command in cases]
        if args.baseline is not None:
            runs += [(f"{name} (baseline)", command, args.baseline.resolve()) for name, command in cases if name.startswith("compat")]
        for _name, command, where in runs:  # warm pip's, uv's and compat's caches
            timed(command(fresh_venv(base, "warm")), cwd=where)
        for _ in range(args.runs):
            for name, command, where in runs:
                seconds, stderr = timed(command(fresh_venv(base, "run")), cwd=where)
                rows.setdefault(name, []).append(seconds)
                if name.startswith("compat"):
                    split.setdefault(name, []).append(phases(stderr))
    median = {name: statistics.median(times) for name, times in rows.items()}
    print(f"plan: {' '.join(pins)}{' (FIXTURE)' if args.fixture else ''}\n")
    print("| command | runs | median s | min s |\n|---|---:|---:|---:|")
    for name, times in rows.items():
        print(f"| {name} | {len(times)} | {median[name]:.2f} | {min(times):.2f} |")
    for name, phase_runs in split.items():
        if phase_runs and phase_runs[0]:
            print(f"\n{name}, its phases (median s, share of its median run): " + phase_shares(phase_runs, median[name]))
    if args.fixture:
        print("\n(FIXTURE: almost nothing to install, so these rows show compat's fixed cost; the goals are for real packages)")
    print()
    for suffix in ("", " (baseline)"):
        if f"compat install --installer pip{suffix}" in median:
            ratio = median[f"compat install --installer pip{suffix}"] / median["raw pip install (same pins)"]
            print(f"compat pip{suffix} vs raw pip: {ratio:.2f}x (goal <= 1.1x)")
        if uv and f"compat install --installer uv{suffix}" in median:
            mine, raw = median[f"compat install --installer uv{suffix}"], median["raw uv pip install (same pins)"]
            verify = statistics.median(r.get("verify", 0.0) for r in split[f"compat install --installer uv{suffix}"])
            print(f"compat uv{suffix} vs raw uv: {mine / raw:.2f}x (goal <= 1.5x); without its verify phase (the import of torch, "
                  f"{verify:.2f} s): {(mine - verify) / raw:.2f}x")
    if "pip" in wanted and uv:
        print(f"compat uv vs compat pip: {median['compat install --installer pip'] / median['compat install --installer uv']:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
