#!/usr/bin/env python3
"""compat resolve against uv: the same packages, the same Python, the same platform (issue 30).

For each Python version given (default 3.10, 3.11, 3.12, 3.13) this runs

    compat resolve --profile stock --with torchvision,torchaudio --python-version X --json
    uv pip compile --python-version X --python-platform x86_64-manylinux_2_28 -   (torch, torchvision, torchaudio,
                                                                                  transformers, accelerate on stdin)

and prints one table: the torch, torchvision and torchaudio each answers, whether they agree, and which of compat's
pairings rest on a declaration alone (``declared``: a floor or range admits that torch, no source verified it).
transformers/accelerate are shown too (uv reads the registry today; compat the matrix, and the overlay after
``compat matrix update``). ``--data-home DIR`` runs compat with XDG_DATA_HOME=DIR (the overlay a ``compat matrix
update`` there wrote). uv is the one next to this interpreter, else on PATH (pip install uv); it reads PyPI, so the
machine needs the registry. Each command has a deadline.

Exit codes: 0 every row agrees on torch, torchvision and torchaudio; 1 some row differs; 2 a command failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = ("torch", "torchvision", "torchaudio", "transformers", "accelerate")
COMPARED = ("torch", "torchvision", "torchaudio")
DEADLINE_S = 300
PLATFORM = "x86_64-manylinux_2_28"


def compat_answer(python: str, data_home: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(package -> version, package -> pairing evidence) of compat resolve --json."""
    env = dict(os.environ)
    if data_home:
        env["XDG_DATA_HOME"] = data_home
    command = [sys.executable, "-m", "compatmatrix", "resolve", "--profile", "stock", "--with", "torchvision,torchaudio",
               "--python-version", python, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE_S, env=env, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"compat resolve exited {done.returncode}: {done.stderr.strip()[-300:]}")
    document = json.loads(done.stdout)
    evidence = {name: pairing["evidence"] for name, pairing in document.get("pairings", {}).items()}
    return dict(document.get("packages", {})), evidence


def uv_answer(uv: str, python: str) -> dict[str, str]:
    """package -> version of uv pip compile for the same packages (no annotations, no header)."""
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
    command = [uv, "pip", "compile", "--python-version", python, "--python-platform", PLATFORM, "--no-header", "--no-annotate", "-"]
    done = subprocess.run(command, input="\n".join(PACKAGES) + "\n", capture_output=True, text=True, timeout=DEADLINE_S, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"uv pip compile exited {done.returncode}: {done.stderr.strip()[-300:]}")
    pins = {}
    for line in done.stdout.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name in PACKAGES:
            pins[name] = version
    return pins


def find_uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise RuntimeError("uv is not installed: pip install uv")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pythons", nargs="*", default=["3.10", "3.11", "3.12", "3.13"])
    parser.add_argument("--data-home", help="XDG_DATA_HOME for compat (the overlay of a compat matrix update)")
    args = parser.parse_args(argv)
    try:
        uv = find_uv()
        rows = [(python, *compat_answer(python, args.data_home), uv_answer(uv, python)) for python in args.pythons]
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as exc:
        print(f"compare_uv: {exc}", file=sys.stderr)
        return 2
    header = ["python"] + [f"{p} compat / uv" for p in PACKAGES] + ["same torch/vision/audio", "declared-only pairings"]
    table = [header]
    differ = False
    for python, compat, evidence, uv_pins in rows:
        same = all(compat.get(p) == uv_pins.get(p) for p in COMPARED)
        differ |= not same
        declared = ", ".join(f"{p} ({evidence[p]})" for p in COMPARED if evidence.get(p) == "declared") or "none"
        table.append([python] + [f"{compat.get(p, '-')} / {uv_pins.get(p, '-')}" for p in PACKAGES] + ["yes" if same else "NO", declared])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
