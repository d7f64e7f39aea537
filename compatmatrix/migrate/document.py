"""The ``compat migrate --json`` document (schema_version 1; JSON Schema:
compatmatrix/schemas/migrate-v1.json) and the measured before/after comparison. Pure.

The document::

    {"schema_version": 1, "document": "migrate", "ok": bool, "state": "planned" | "migrated" | "unchanged" | "refused" | "failed" | "restored" | "unknown" | "no-set",
     "dry_run": bool, "python": "3.11", "python_origin": "...", "platform": "...",
     "remove": ["intel-extension-for-pytorch", ...],                        # PEP 503 names, what goes
     "removals": [{"name", "version", "why", "location"}],
     "install": {"torch": "2.13.0+cpu", "transformers": "5.23.0", ...},     # PEP 503 name -> version (+ local label)
     "changes": [{"name", "before", "after", "kind", "host", "why"}],       # why: the resolver's own reason for the version
     "reasons": [...],                                                       # the resolver's explanation (or why no stock set exists)
     "command": [...] | null, "command_edits": [{"before", "after", "why"}], "command_warnings": [...], "command_blocking": [...],
     "launcher": "torchrun" | "mpirun" | ... | null,
     "env": {"unset": [...], "set": {...}, "drop": {"PATH": [...]}, "why": {...}, "inspected": bool},
     "source": [{"file", "line", "column", "kind", "call", "replacement"}],
     "notes": [...],
     "validation": null | {"ok": bool, "checks": [findings-v1 check objects]},
     "compare": null | {"before": measure, "after": measure, "loss_parity": {...}},
     "error": null | {"message", "fix"}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..findings import Finding, Status
from .command import MigratedCommand
from .environment import EnvironmentPlan
from .plan import MigrationPlan, installed_pins
from .source import SourceFinding

SCHEMA_VERSION = 1
LOSS_TOLERANCE = 0.05  # relative: the same seed and data on another torch (and without IPEX's kernels) lands this close


def build_document(plan: MigrationPlan, command: Optional[MigratedCommand], environment: EnvironmentPlan, sources: Sequence[SourceFinding],
                   *, state: str, dry_run: bool, notes: Sequence[str] = ()) -> dict[str, Any]:
    reasons = list(plan.resolution.reasons) if plan.ok else list(plan.conflict_reasons)
    return {
        "schema_version": SCHEMA_VERSION,
        "document": "migrate",  # not "command": the issue gives "command" to the rewritten training command
        "ok": state in ("planned", "migrated", "unchanged") and not (command is not None and command.blocking),
        "state": state,
        "dry_run": dry_run,
        "python": plan.python.label,
        "python_origin": plan.python.origin,
        "platform": plan.platform.tag,
        "remove": [r.canonical for r in plan.removals],
        "removals": [{"name": r.canonical, "version": r.version, "why": r.why, "location": r.location} for r in plan.removals],
        "install": dict(installed_pins(plan)),
        "changes": [{"name": t.name, "before": t.before, "after": t.pin, "kind": t.kind, "host": t.host, "why": t.why} for t in plan.targets],
        "reasons": reasons,
        "command": list(command.argv) if command is not None else None,
        "command_edits": [{"before": e.before, "after": e.after, "why": e.why} for e in command.edits] if command is not None else [],
        "command_warnings": list(command.warnings) if command is not None else [],
        "command_blocking": list(command.blocking) if command is not None else [],
        "launcher": command.launcher if command is not None else None,
        "env": environment.to_json(),
        "source": [f.to_json() for f in sources],
        "notes": list(dict.fromkeys([*plan.notes, *environment.notes, *notes])),
        "validation": None,
        "compare": None,
        "error": None,
    }


def validation_json(findings: Sequence[Finding]) -> dict[str, Any]:
    return {"ok": not any(f.status is Status.FAIL for f in findings), "checks": [f.to_json() for f in findings]}


def measure(findings: Sequence[Finding], details: Mapping[str, Any]) -> dict[str, Any]:
    """What a live doctor run measured: backend, bus bandwidth at the largest size, Trainer step time, losses."""
    bandwidth = details.get("bandwidth") or []
    largest = max(bandwidth, key=lambda row: row.get("mib", 0), default=None)
    memcpy = (details.get("memcpy") or {}).get("all_ranks")
    ranks = details.get("ranks") or []
    first = next((r for r in ranks if r.get("rank") == 0), ranks[0] if ranks else {})
    steps = [float(x) for x in first.get("step_seconds") or [] if isinstance(x, (int, float))]
    later = sorted(steps[1:] or steps)
    losses = [x for x in first.get("losses") or [] if isinstance(x, (int, float))]
    failed = [f.id for f in findings if f.status is Status.FAIL]
    return {
        "ok": not failed,
        "failed": failed,
        "backend": details.get("backend"),
        "backend_is_fixture": bool(details.get("backend_is_fixture")),
        "launcher": details.get("launcher"),
        "world_size": details.get("world_size"),
        "bus_bandwidth_gbps": round(largest["busbw"] / 1e9, 3) if largest and largest.get("busbw") else None,
        "bandwidth_mib": largest.get("mib") if largest else None,
        "memcpy_gbps": round(memcpy / 1e9, 3) if memcpy else None,
        "step_ms_first": round(steps[0] * 1000, 1) if steps else None,
        "step_ms_median": round(later[len(later) // 2] * 1000, 1) if later else None,
        "losses": losses,
        "bf16": (details.get("bf16") or {}).get("on"),
        "ipex_mode": details.get("ipex_mode"),
        "seconds": details.get("seconds"),
    }


def loss_parity(before: Sequence[float], after: Sequence[float], tolerance: float = LOSS_TOLERANCE) -> dict[str, Any]:
    """Step by step, how far the new set's losses are from the old set's (same seed, same data, same model)."""
    pairs = [(a, b) for a, b in zip(before, after) if math.isfinite(a) and math.isfinite(b)]
    if not pairs:
        return {"steps": 0, "max_abs_diff": None, "max_rel_diff": None, "within": None, "tolerance": tolerance}
    diffs = [abs(b - a) for a, b in pairs]
    rel = max(abs(b - a) / abs(a) if a else (0.0 if b == a else 1.0) for a, b in pairs)  # a loss of exactly 0 is no scale: any other value is "100%"
    return {"steps": len(pairs), "max_abs_diff": round(max(diffs), 5), "max_rel_diff": round(rel, 5), "within": rel <= tolerance, "tolerance": tolerance}


def compare_json(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    return {"before": dict(before), "after": dict(after), "loss_parity": loss_parity(before.get("losses") or [], after.get("losses") or [])}
