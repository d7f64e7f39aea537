"""Import each part of the stack in a child process with a timeout, and classify how it ended.

The doctor never imports torch, IPEX or the bindings itself: a broken stack can abort, hang or
hit an illegal instruction, and the doctor has to survive that to report it.
Side effects: child processes (environment/child.py: own process group, die with compat, killed as a group).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

from ..environment.child import run_child
from .crash import Verdict, classify
from .finding import Context, Finding, Status, check
from .packages import CCL_NAMES, IPEX_NAMES

# Every probe starts like this: `python -c` puts the working directory ('') first on sys.path, so a torch.py or
# json.py waiting there would be imported instead of the real module. The probe also runs in a private, empty
# folder; it drops '' (and that folder) from sys.path before importing anything else. No -I/-P: PYTHONPATH, the
# user site and .pth files are part of the environment being checked (and -P needs 3.11).
# The answer goes into the file named by the first argument (written whole, then renamed), never to stdout, which
# a sitecustomize, an atexit hook or the package itself may write anything to.
PRELUDE = """
import sys, os
_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _here]
del _here
import json

def _answer(data):
    with open(sys.argv[1] + ".part", "w") as handle:
        json.dump(data, handle)
    os.rename(sys.argv[1] + ".part", sys.argv[1])
"""

TORCH_CODE = PRELUDE + """
import torch
_answer({"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "debug": bool(getattr(torch.version, "debug", False))})
"""

IPEX_CODE = PRELUDE + """
import torch
import %(module)s as ipex
_answer({"version": getattr(ipex, "__version__", "?"), "torch": torch.__version__})
"""

CCL_CODE = PRELUDE + """
import torch
import torch.distributed as dist
import %(module)s as bindings
registered = None
try:
    registered = bool(dist.is_backend_available("ccl"))
except Exception:
    backend = getattr(dist, "Backend", None)
    registered = "ccl" in getattr(backend, "backend_list", []) or "ccl" in getattr(backend, "_plugins", {})
_answer({"registered": registered, "cwd": getattr(bindings, "cwd", None), "torch": torch.__version__})
"""
ANSWER_LIMIT = 1 << 20  # bytes; a real answer is under 1 kB


@dataclass(frozen=True)
class ImportResult:
    verdict: Verdict
    data: Optional[dict[str, Any]]
    stderr: str
    returncode: Optional[int]


def run_import(python: str, code: str, what: str, timeout: float) -> ImportResult:
    """Run ``code`` with ``python`` in its own process group (dies with compat), from a private empty folder that is
    removed afterwards; the whole group, and what it started in other sessions, is killed on timeout, on Ctrl-C and
    on SIGTERM (which then ends compat with 143). The probe's answer is read from a file in that folder."""
    folder = tempfile.mkdtemp(prefix="compat-import-")  # mode 0700: nobody else can plant a module in it
    try:
        answer = os.path.join(folder, "answer.json")
        try:
            ended = run_child([python, "-c", code, answer], timeout, env=dict(os.environ, PYTHONFAULTHANDLER="1"), cwd=folder)
        except OSError as exc:
            verdict = Verdict("error", f"importing {what} could not start: {python} cannot be run ({exc.strerror})", (), "Pass a working interpreter with --python.")
            return ImportResult(verdict, None, "", None)
        data = _read_answer(answer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stdout, stderr = ended.stdout.decode(errors="replace"), ended.stderr.decode(errors="replace")
    verdict = classify(ended.returncode, stdout, stderr, ended.timed_out, what, timeout)
    if verdict.ok and data is None:  # exited 0 without reaching the end of the probe
        verdict = Verdict("error", f"importing {what} ended early (exit 0 before the probe finished)", (stderr.strip()[-300:],))
    return ImportResult(verdict, data, stderr, ended.returncode)


def _read_answer(path: str) -> Optional[dict[str, Any]]:
    """The JSON object the probe wrote, or None (no file: it did not get that far)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(ANSWER_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _finding(cid: str, result: ImportResult, ok_summary: str) -> Finding:
    verdict = result.verdict
    if verdict.ok:
        return Finding(cid, Status.PASS, ok_summary)
    evidence = tuple(d for d in verdict.detail if d) + ((f"stderr: {result.stderr.strip()[-400:]}",) if result.stderr.strip() else ())
    return Finding(cid, Status.FAIL, verdict.summary, evidence, verdict.fix)


def _imports(ctx: Context, key: str, code: str, what: str) -> ImportResult:
    return ctx.once(f"import:{key}", lambda: run_import(ctx.snapshot.executable, code, what, ctx.options.import_timeout))


@check("imports.torch", "torch imports in a child process", static=False)
def import_torch(ctx: Context) -> Finding:
    cid = "imports.torch"
    if ctx.snapshot.get("torch") is None:
        return Finding(cid, Status.SKIP, "torch is not installed")
    result = _imports(ctx, "torch", TORCH_CODE, "torch")
    data = result.data or {}
    return _finding(cid, result, f"torch {data.get('version')} imports" + (f" (CUDA {data['cuda']} build)" if data.get("cuda") else ""))


@check("imports.ipex", "intel_extension_for_pytorch imports in a child process", static=False)
def import_ipex(ctx: Context) -> Finding:
    cid = "imports.ipex"
    dist = ctx.snapshot.get(*IPEX_NAMES)
    if dist is None:
        return Finding(cid, Status.SKIP, "intel-extension-for-pytorch is not installed")
    release = ctx.matrix.ipex_release(dist.public_version) if dist.public_version else None
    module = release.module if release else "intel_extension_for_pytorch"
    result = _imports(ctx, "ipex", IPEX_CODE % {"module": module}, module)
    data = result.data or {}
    return _finding(cid, result, f"{module} {data.get('version')} imports with torch {data.get('torch')}")


@check("imports.ccl", "the oneCCL bindings import and register the ccl backend", static=False)
def import_ccl(ctx: Context) -> Finding:
    cid = "imports.ccl"
    dist = ctx.snapshot.get(*CCL_NAMES)
    if dist is None:
        return Finding(cid, Status.SKIP, "oneccl_bind_pt is not installed")
    release = ctx.matrix.ccl_release(dist.public_version) if dist.public_version else None
    module = release.module if release else ("oneccl_bindings_for_pytorch" if "oneccl_bindings_for_pytorch" in ctx.snapshot.modules else "torch_ccl")
    result = _imports(ctx, "ccl", CCL_CODE % {"module": module}, module)
    finding = _finding(cid, result, f"{module} imports and registers the ccl backend")
    if finding.status is Status.PASS and not (result.data or {}).get("registered"):
        return Finding(cid, Status.FAIL, f"{module} imports but the ccl backend is not registered",
                       (f"torch.distributed.is_backend_available('ccl') is False after import {module}",),
                       "Reinstall the oneccl_bind_pt built for this torch (compat check shows which).")
    return finding
