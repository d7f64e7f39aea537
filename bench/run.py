#!/usr/bin/env python3
"""Wall-time benchmarks: compat's commands as ratios to the interpreter floor, next to issue 15's goals.

Every command runs as a user runs it, in a subprocess (the `compat` entry point of a virtual environment), in
turn with the floor -- `python -c "import importlib.metadata"` of the same environment -- A B A B ..., after one
warm-up run of each (which also writes the bytecode caches). A row's ratio is the median of the per-pair ratios,
so a machine whose speed drifts during the run moves both sides of a pair alike; the times are medians too.

Two installations are measured: the development venv this script runs in (usually an editable install: its .pth
finder runs at every start, the floor's too) and a non-editable one, a wheel built from this tree into a scratch
venv (what users run; `--skip-wheel` leaves it out).

Goals (issues 15 and 20; ratios measured in one run, never timed tests):
  compat check --python ENV <= 1.5x the floor  compat resolve --json <= 1.5x  compat check -r FILE <= 1.5x (issue 35)  (issue 20: ENV is what users check, torch 2.13
  CPU + transformers + accelerate, tests/real_envs.py "torch213-stock"; the wheel install is the one that counts)
  a five-pin conflict <= 2.5x
  resolve time grows at most linearly with the matrix: the resolver's own time (in-process, caches cold) for a
  matrix 8x the size (bench/scale_matrix.py) <= 8x; the whole `compat resolve --json --matrix` command <= 2x.
  compat doctor --python ENV --json (static checks + the import probe, no --live) <= 1.1x the slowest single import
  of the stack in ENV (`ENV -c "import intel_extension_for_pytorch"`; the bindings, else torch, when IPEX is absent).

    python bench/run.py [--runs 9] [--env PYTHON] [--doctor-env PYTHON] [--skip-wheel] [--skip-pip] [--quick] [--only ROWS]

--env names the interpreter of an environment with torch and transformers installed (default: the test suite's
stock environment, tests/real_envs.py "torch213-stock", built on first use when torch 2.13.0 is in pip's find-links);
without one the check rows are left out, with the reason. --doctor-env names one with the real stack whose imports the doctor row measures (default: the cached
"torch280-ipex280", torch 2.8 + IPEX 2.8, when it exists); without one that row is left out, with the reason.
--only picks row groups (repeatable): base, check, resolve, scaling, doctor, pip, export (compat export --validate of a
TrainJob, goal: a median under 0.5 s, issue 21). The pip rows (pip check on ENV; `pip install --dry-run` of the set compat resolves, which asks PyPI)
are context, not goals; --skip-pip leaves the dry-run out.

Side effects: a scratch venv and scaled matrices in a temporary folder (removed at the end); compat's caches in
$XDG_CACHE_HOME/compatmatrix are used as a user's would be (warm after the warm-up run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900
FLOOR = ["-c", "import importlib.metadata"]
FIVE_PINS = ["torch==2.1.0", "intel-extension-for-pytorch==2.3.0", "oneccl-bind-pt==2.0.0", "transformers==4.30.0", "accelerate==0.20.0"]
SCALE = 8
CHECK_GOAL = RESOLVE_GOAL = 1.5  # issue 20 (issue 15 asked 2x)


@dataclass
class Row:
    name: str
    install: str
    times: list[float]
    floor: list[float] = field(default_factory=list)  # the floor runs paired with ``times`` (empty: no ratio)
    goal: Optional[float] = None
    ratio_label: str = "× floor"
    seconds_goal: Optional[float] = None  # a goal on the median time itself (issue 21: export --validate < 0.5 s)

    @property
    def ratio(self) -> Optional[float]:
        if not self.floor:
            return None
        return statistics.median(a / b for a, b in zip(self.times, self.floor))


def run_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=TIMEOUT_S, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench: {' '.join(argv)} failed (exit {done.returncode}): {done.stderr.decode(errors='replace')[-800:]}")
    return elapsed


def timed(argv: list[str], runs: int, env: dict[str, str], warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        run_once(argv, env)
    return [run_once(argv, env) for _ in range(runs)]


def paired(argv: list[str], base: list[str], runs: int, env: dict[str, str], base_env: Optional[dict[str, str]] = None) -> tuple[list[float], list[float]]:
    """``argv`` and ``base`` in turn (A B A B ...) after a warm-up of each: (A's times, B's times)."""
    run_once(argv, env)
    run_once(base, base_env or env)
    a, b = [], []
    for _ in range(runs):
        a.append(run_once(argv, env))
        b.append(run_once(base, base_env or env))
    return a, b


@dataclass
class Install:
    label: str
    python: str  # the venv's interpreter
    compat: list[str]  # how to run compat there

    @property
    def floor(self) -> list[str]:
        return [self.python, *FLOOR]


def dev_install() -> Install:
    script = Path(sys.executable).with_name("compat")
    compat = [str(script)] if script.exists() else [sys.executable, "-m", "compatmatrix"]
    kind = "editable" if _editable(sys.executable) else "installed"
    return Install(f"dev venv ({kind})", sys.executable, compat)


def _editable(python: str) -> bool:
    done = subprocess.run([python, "-c", "import compatmatrix, sys; print(compatmatrix.__file__)"], capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0 and done.stdout.strip().startswith(str(ROOT))


def wheel_install(folder: Path) -> Install:
    """A scratch venv with compatmatrix built from this tree as a wheel (not editable), bytecode compiled."""
    venv = folder / "wheel-venv"
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    env = _env()
    if Path(uv).exists():
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=600, env=env)
        subprocess.run([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(venv / "bin" / "python"), str(ROOT)],
                       check=True, timeout=1200, env=env)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600, env=env)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(ROOT)], check=True, timeout=1200, env=env)
    return Install("wheel venv (not editable)", str(venv / "bin" / "python"), [str(venv / "bin" / "compat")])


def _env() -> dict[str, str]:
    """The caller's environment, colour off, and bytecode caches written as on a user's machine."""
    env = dict(os.environ, NO_COLOR="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def inprocess_scaling(python: str, small: Path, large: Path, env: dict[str, str]) -> dict[str, list[float]]:
    """The resolver's own time (best of several, caches cleared before each) per request and matrix, in a child."""
    code = r"""
import gc, json, sys, time
import compatmatrix.rules as rules
from compatmatrix.matrix.load import load_matrix
from compatmatrix.resolve import build_request, resolve
from compatmatrix.target import Platform, PythonTarget
requests = json.loads(sys.argv[3])
out = {}
for label, (python, pins) in requests.items():
    out[label] = []
    for path in sys.argv[1:3]:
        matrix = load_matrix(path)
        gc.collect()
        gc.disable()  # as compat resolve runs (cli.SHORT_LIVED): a collector scanning the matrix is not the resolver's time
        request = build_request(matrix, PythonTarget.parse(python), Platform.from_tag("manylinux_2_28_x86_64"), None, [], pins)
        best = float("inf")
        for _ in range(7):
            if hasattr(rules, "forget_answers"):  # the per-process answers: each measurement starts cold
                rules.forget_answers()
            start = time.perf_counter()
            resolve(matrix, request)
            best = min(best, time.perf_counter() - start)
        out[label].append(best)
print(json.dumps(out))
"""
    requests = {"compat resolve (ddp-ccl, Python 3.11)": ["3.11", []], "five-pin conflict (Python 3.10)": ["3.10", FIVE_PINS]}
    done = subprocess.run([python, "-c", code, str(small), str(large), json.dumps(requests)], capture_output=True, text=True, env=env, timeout=600, check=True)
    return json.loads(done.stdout)


# the parts of the stack, heaviest import first: the doctor row's baseline is the first one ENV has
HEAVIEST = ("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch", "torch_ccl", "torch")
GROUPS = ("base", "check", "resolve", "scaling", "doctor", "pip", "export")


def heaviest_part(python: str, env: dict[str, str]) -> Optional[str]:
    """The first module of HEAVIEST that ``python`` can find (found, not imported), None when none is there."""
    code = f"import importlib.util as u; print(next((m for m in {HEAVIEST!r} if u.find_spec(m)), ''))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def doctor_row(install: Install, args: argparse.Namespace, env: dict[str, str]) -> Row:
    """compat doctor --python ENV --json vs the slowest single import in ENV, in turn (A B A B ...)."""
    python = args.doctor_env
    module = heaviest_part(python, env)
    if module is None:
        raise SystemExit(f"bench: {python} has none of {', '.join(HEAVIEST)}: pass --doctor-env an environment with the stack")
    a, b = paired(install.compat + ["doctor", "--python", python, "--json"], [python, "-c", f"import {module}"], args.runs, env)
    name = f"compat doctor --python ENV --json: import probes (ENV: {Path(python).parents[1].name}) vs ENV -c 'import {module}'"
    return Row(name, install.label, a, b, 1.1, "× import")


def measure(install: Install, args: argparse.Namespace, scratch: Path, env: dict[str, str]) -> list[Row]:
    rows: list[Row] = []
    compat, floor, runs = install.compat, install.floor, args.runs

    def goal_row(name: str, argv: list[str], goal: Optional[float], row_env: Optional[dict[str, str]] = None) -> None:
        a, b = paired(argv, floor, runs, row_env or env, env)
        rows.append(Row(name, install.label, a, b, goal))

    def wanted(group: str) -> bool:
        return not args.only or group in args.only

    if wanted("base"):
        rows.append(Row("python -c pass", install.label, *paired([install.python, "-c", "pass"], floor, runs, env)))
    if args.env and wanted("check"):
        goal_row(f"compat check --python ENV (ENV: {Path(args.env).parents[1].name})", compat + ["check", "--python", args.env], CHECK_GOAL)
        if not args.quick:
            goal_row("compat check --python ENV, every cache off (COMPAT_NO_CACHE=1)", compat + ["check", "--python", args.env], None, dict(env, COMPAT_NO_CACHE="1"))
            goal_row("compat check --python ENV --json", compat + ["check", "--python", args.env, "--json"], None)
    if wanted("check"):  # issue 35: the static check of a requirements file, and `compat env`, beside the floor
        goal_row("compat check -r examples/requirements.txt", compat + ["check", "-r", str(ROOT / "examples" / "requirements.txt")], CHECK_GOAL)
        if not args.quick:
            goal_row("compat env", compat + ["env"], None)
    if args.doctor_env and wanted("doctor"):
        rows.append(doctor_row(install, args, env))
    if wanted("export"):  # issue 21: the API server's view and the pods of a TrainJob, CEL rules included
        manifest = str(ROOT / "tests" / "data" / "k8s" / "trainjob_auto_cpu.yaml")
        a, b = paired(compat + ["export", "--validate", manifest, "--python-version", "3.11", "--trainer-version", "v2.3", "--json"], floor, runs, env)
        rows.append(Row("compat export --validate TRAINJOB --trainer-version v2.3 --json", install.label, a, b, seconds_goal=0.5))
    if not wanted("resolve") and not wanted("scaling"):
        return rows
    if wanted("resolve"):
        goal_row("compat resolve --json (ddp-ccl, Python 3.11)", compat + ["resolve", "--json", "--python-version", "3.11"], RESOLVE_GOAL)
        goal_row("compat resolve, five conflicting pins (Python 3.10, text)", compat + ["resolve", "--python-version", "3.10", *FIVE_PINS], 2.5)
    if not args.quick and wanted("resolve"):
        goal_row("compat resolve --json, five conflicting pins", compat + ["resolve", "--json", "--python-version", "3.10", *FIVE_PINS], None)
        goal_row("compat resolve (conflict + alternatives: torch==1.12.1 ccl==1.12.0)", compat + ["resolve", "--python-version", "3.10", "torch==1.12.1", "ccl==1.12.0"], None)
        goal_row("compat matrix --json", compat + ["matrix", "--json"], None)
        goal_row("compat matrix (tables)", compat + ["matrix"], None)
        goal_row("compat --help", compat + ["--help"], None)
    if not wanted("scaling"):
        return rows
    small, large = scratch / "matrix-x1.toml", scratch / f"matrix-x{SCALE}.toml"
    whole = [*compat, "resolve", "--json", "--python-version", "3.11", "--matrix"]
    a, b = paired(whole + [str(large)], whole + [str(small)], runs, env)
    rows.append(Row(f"compat resolve --json --matrix (x{SCALE} matrix vs x1)", install.label, a, b, 2.0, f"x{SCALE} / x1"))
    if install.label.startswith("dev"):
        for label, (t_small, t_large) in inprocess_scaling(install.python, small, large, env).items():
            rows.append(Row(f"resolver time in-process, {label} (x{SCALE} matrix vs x1)", install.label, [t_large], [t_small], float(SCALE), f"x{SCALE} / x1"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="counted runs of each command (and of the floor beside it)")
    parser.add_argument("--env", help="interpreter of an environment with torch + transformers, for the check rows")
    parser.add_argument("--skip-wheel", action="store_true", help="measure the development venv only")
    parser.add_argument("--skip-pip", action="store_true", help="leave out pip install --dry-run (needs PyPI)")
    parser.add_argument("--quick", action="store_true", help="the goal rows only")
    parser.add_argument("--doctor-env", metavar="PYTHON", help="interpreter of an environment with the real stack (torch, IPEX), for the doctor row")
    parser.add_argument("--only", action="append", choices=GROUPS, default=[], help="measure only these row groups (repeatable)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.real_envs import CACHE, RealEnvUnavailable, real_env

    left_out = []
    if args.env is None and (not args.only or "check" in args.only):
        # the environment users check (issue 20): torch 2.13 CPU (pip's find-links) + transformers + accelerate, built once
        try:
            args.env = str(real_env("torch213-stock"))
        except RealEnvUnavailable as exc:
            left_out.append(f"the check rows: no --env, and the torch213-stock environment cannot be built here ({exc})")
    if args.doctor_env is None:
        candidate = CACHE / "torch280-ipex280" / "bin" / "python"
        args.doctor_env = str(candidate) if candidate.exists() else None
        if args.doctor_env is None:
            left_out.append(f"the doctor row: no --doctor-env and no cached {candidate.parents[1]} (tests/real_envs.py builds it)")
    from bench.scale_matrix import write_scaled

    env = _env()
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="compat-bench-") as folder:
        scratch = Path(folder)
        write_scaled(1, scratch / "matrix-x1.toml")
        write_scaled(SCALE, scratch / f"matrix-x{SCALE}.toml")
        installs = [dev_install()]
        if not args.skip_wheel:
            installs.append(wheel_install(scratch))
        for install in installs:
            rows += measure(install, args, scratch, env)
        dev = installs[0]
        if args.env and (not args.only or "pip" in args.only):
            rows.append(Row("ENV/bin/python -m pip check", "ENV", *paired([args.env, "-m", "pip", "check"], dev.floor, args.runs, env)))
        if not args.skip_pip and (not args.only or "pip" in args.only):
            resolved = subprocess.run(dev.compat + ["resolve", "--json", "--python-version", "3.11", "--profile", "ipex"], capture_output=True, text=True, timeout=120, check=True, env=env)
            pins = [f"{name}=={version}" for name, version in json.loads(resolved.stdout)["packages"].items()]
            with tempfile.TemporaryDirectory() as cache:
                pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--cache-dir", cache, *pins]
                rows.append(Row(f"pip install --dry-run {' '.join(pins)} (cold cache)", "dev venv", timed(pip, 1, env, warmup=0)))
                rows.append(Row(f"pip install --dry-run {' '.join(pins)} (warm cache)", "dev venv", timed(pip, args.runs, env)))
    load_after = os.getloadavg()
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; Python {platform.python_version()}; {started}; "
          f"load average (1/5/15 min) {' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after")
    print(f"floor: <venv>/bin/python {' '.join(FLOOR[:1])} '{FLOOR[1]}' in the same venv, run in turn with each command; {args.runs} runs each, medians\n")
    print("| command | install | runs | median s | floor s | ratio | goal | result |\n|---|---|---:|---:|---:|---:|---:|---|")
    failed = 0
    for row in rows:
        ratio = row.ratio
        floor = f"{statistics.median(row.floor):.3f}" if row.floor and row.ratio_label == "× floor" else ""
        ratio_text = f"{ratio:.2f} ({row.ratio_label})" if ratio is not None else ""
        if row.seconds_goal is not None:
            goal, verdict = f"≤ {row.seconds_goal:g} s", "pass" if statistics.median(row.times) <= row.seconds_goal else "FAIL"
            failed += verdict == "FAIL"
        elif row.goal is None or ratio is None:
            goal, verdict = "", ""
        else:
            goal, verdict = f"≤ {row.goal:g}", "pass" if ratio <= row.goal else "FAIL"
            failed += verdict == "FAIL"
        print(f"| {row.name} | {row.install} | {len(row.times)} | {statistics.median(row.times):.3f} | {floor} | {ratio_text} | {goal} | {verdict} |")
    print(f"\n{sum(1 for r in rows if (r.goal is not None and r.ratio is not None) or r.seconds_goal is not None)} goals measured, {failed} not met")
    for reason in left_out:
        print(f"left out: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
