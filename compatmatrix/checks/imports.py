"""Import each part of the stack in a child process with a timeout, and classify how it ended.

The doctor never imports torch, IPEX or the bindings itself: a broken stack can abort, hang or
hit an illegal instruction, and the doctor has to survive that to report it.
Side effects: child processes (environment/child.py: own process group, die with compat, killed as a group).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

from ..environment.child import run_child
from .crash import Verdict, classify
from .finding import Context, Finding, Status, check
from .packages import CCL_NAMES, IPEX_NAMES

MARK = "COMPAT-PROBE "

TORCH_CODE = """
import json, torch
print(%(mark)r + json.dumps({"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "debug": bool(getattr(torch.version, "debug", False))}))
"""

IPEX_CODE = """
import json, torch
import %(module)s as ipex
print(%(mark)r + json.dumps({"version": getattr(ipex, "__version__", "?"), "torch": torch.__version__}))
"""

CCL_CODE = """
import json, torch
import torch.distributed as dist
import %(module)s as bindings
registered = None
try:
    registered = bool(dist.is_backend_available("ccl"))
except Exception:
    backend = getattr(dist, "Backend", None)
    registered = "ccl" in getattr(backend, "backend_list", []) or "ccl" in getattr(backend, "_plugins", {})
print(%(mark)r + json.dumps({"registered": registered, "cwd": getattr(bindings, "cwd", None), "torch": torch.__version__}))
"""


@dataclass(frozen=True)
class ImportResult:
    verdict: Verdict
    data: Optional[dict[str, Any]]
    stderr: str
    returncode: Optional[int]


def run_import(python: str, code: str, what: str, timeout: float) -> ImportResult:
    """Run ``code`` with ``python`` in its own process group (dies with compat); the whole group is killed on
    timeout, on Ctrl-C and on SIGTERM (which then ends compat with 143)."""
    try:
        ended = run_child([python, "-c", code], timeout, env=dict(os.environ, PYTHONFAULTHANDLER="1"),
                          cwd=tempfile.gettempdir())  # `python -c` puts the working directory first on sys.path: not the caller's checkout
    except OSError as exc:
        verdict = Verdict("error", f"importing {what} could not start: {python} cannot be run ({exc.strerror})", (), "Pass a working interpreter with --python.")
        return ImportResult(verdict, None, "", None)
    stdout, stderr = ended.stdout.decode(errors="replace"), ended.stderr.decode(errors="replace")
    data = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK):])
            except ValueError:
                data = None
    verdict = classify(ended.returncode, stdout, stderr, ended.timed_out, what, timeout)
    if verdict.ok and data is None:  # exited 0 without reaching the end of the probe
        verdict = Verdict("error", f"importing {what} ended early (exit 0 before the probe finished)", (stderr.strip()[-300:],))
    return ImportResult(verdict, data, stderr, ended.returncode)


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
    result = _imports(ctx, "torch", TORCH_CODE % {"mark": MARK}, "torch")
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
    result = _imports(ctx, "ipex", IPEX_CODE % {"mark": MARK, "module": module}, module)
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
    result = _imports(ctx, "ccl", CCL_CODE % {"mark": MARK, "module": module}, module)
    finding = _finding(cid, result, f"{module} imports and registers the ccl backend")
    if finding.status is Status.PASS and not (result.data or {}).get("registered"):
        return Finding(cid, Status.FAIL, f"{module} imports but the ccl backend is not registered",
                       (f"torch.distributed.is_backend_available('ccl') is False after import {module}",),
                       "Reinstall the oneccl_bind_pt built for this torch (compat check shows which).")
    return finding
