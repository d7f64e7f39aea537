"""The migrate-v1 document as text for a terminal: the plan, the command with each change explained (as compat
translate prints it), the environment as shell lines, the script findings, the validation and the measured
comparison side by side. Pure: a document in, a string out (the CLI writes it)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

_STATES = {
    "planned": "the plan (nothing was changed)",
    "migrated": "migrated and validated",
    "unchanged": "nothing to change",
    "refused": "refused: nothing was changed",
    "failed": "FAILED: nothing was changed",
    "restored": "FAILED: the old set was put back",
    "unknown": "FAILED: the restore did not finish (see the error)",
    "no-set": "no stock set: nothing would be changed",
}


def format_text(doc: Mapping[str, Any]) -> str:
    lines = [f"compat migrate: Python {doc['python']} ({doc['python_origin']}) · {doc['platform']} — {_STATES.get(doc['state'], doc['state'])}"]
    for section in _SECTIONS:
        lines += section(doc)
    return "\n".join(lines) + "\n"


def _removals(doc: Mapping[str, Any]) -> list[str]:
    if not doc["removals"]:
        return []
    return ["remove"] + [f"  {r['name']} {r['version']}: {r['why']}" for r in doc["removals"]]


def _changes(doc: Mapping[str, Any]) -> list[str]:
    """What is installed, each with its reason; or, without a stock set, why there is none."""
    if not doc["changes"]:
        return ["why no stock set"] + [f"  {r}" for r in doc["reasons"]] if doc["reasons"] else []
    lines = ["install"]
    width = max(len(c["name"]) for c in doc["changes"])
    for change in doc["changes"]:
        before = f"{change['before']} -> " if change["before"] and change["kind"] != "keep" else ""
        kept = {"keep": " (kept)", "install": " (new)"}.get(change["kind"], "")
        lines.append(f"  {change['name']:<{width}}  {before}{change['after']}{kept}  from {change['host']}")
        lines.append(f"  {'':<{width}}  why: {change['why']}")
    return lines


def _command(doc: Mapping[str, Any]) -> list[str]:
    """The rewritten training command, each change explained (as compat translate prints it)."""
    if doc["command"] is None:
        return []
    lines = ["command", "  " + shlex.join(doc["command"])]
    lines += [f"  # {edit['before'] or '(added)'} -> {edit['after'] or '(dropped)'}: {edit['why']}" for edit in doc["command_edits"]]
    lines += [f"  # CANNOT WORK: {b}" for b in doc["command_blocking"]]
    lines += [f"  # note: {w}" for w in doc["command_warnings"]]
    return lines


def _source(doc: Mapping[str, Any]) -> list[str]:
    """The IPEX / oneCCL calls found in the training scripts, each with its replacement."""
    if not doc["source"]:
        return []
    lines = ["training scripts (nothing was rewritten)"]
    for found in doc["source"]:
        where = f"{found['file']}:{found['line']}"
        lines.append(f"  {where}  {found['call'] or found['kind']}")
        lines.append(f"  {'':<{len(where)}}  -> {found['replacement']}")
    return lines


def _notes(doc: Mapping[str, Any]) -> list[str]:
    return ["notes"] + [f"  {n}" for n in doc["notes"]] if doc["notes"] else []


def _validation(doc: Mapping[str, Any]) -> list[str]:
    """The checks of compat doctor --live on the new set that ran."""
    if doc["validation"] is None:
        return []
    return ["validation (compat doctor --live on the new set)"] + [
        f"  {check['status'].upper():<4} {check['id']}: {check['summary']}" for check in doc["validation"]["checks"] if check["status"] != "skip"
    ]


def _error(doc: Mapping[str, Any]) -> list[str]:
    error = doc["error"]
    if not error:
        return []
    return [f"compat: {error['message']}" + (f" {error['fix']}" if error.get("fix") else "")]


#: The sections of the text after its first line, in order; each gives its lines ([] when it has nothing to say).
_SECTIONS: tuple[Callable[[Mapping[str, Any]], list[str]], ...] = (
    _removals,
    _changes,
    _command,
    lambda doc: _environment(doc["env"]),
    _source,
    _notes,
    _validation,
    lambda doc: compare_lines(doc["compare"]) if doc["compare"] is not None else [],
    _error,
)


def _environment(env: Mapping[str, Any]) -> list[str]:
    if not (env["unset"] or env["set"] or env["drop"]):
        return []
    lines = ["environment (where the job is launched)"]
    why = env.get("why") or {}
    lines += [f"  unset {name}  # {why.get(name, '')}" for name in env["unset"]]
    for name, entries in env["drop"].items():
        lines.append(f"  # take out of {name}: {':'.join(entries)}")
    lines += [f"  export {name}={shlex.quote(value)}  # {why.get(name, '')}" for name, value in env["set"].items()]
    return lines


def _cell(value: Optional[float], unit: str) -> str:
    return "—" if value is None else f"{value:g} {unit}"


def compare_lines(compare: Mapping[str, Any]) -> list[str]:
    """The two live runs side by side: backend, bus bandwidth, Trainer step time, losses, loss parity."""
    before, after = compare["before"], compare["after"]
    mib = after.get("bandwidth_mib") or before.get("bandwidth_mib")
    rows: Sequence[tuple[str, str, str]] = [
        ("backend", _backend(before), _backend(after)),
        (f"bus bandwidth ({mib} MiB allreduce)", _cell(before.get("bus_bandwidth_gbps"), "GB/s"), _cell(after.get("bus_bandwidth_gbps"), "GB/s")),
        ("Trainer step (median after the first)", _cell(before.get("step_ms_median"), "ms"), _cell(after.get("step_ms_median"), "ms")),
        ("Trainer first step", _cell(before.get("step_ms_first"), "ms"), _cell(after.get("step_ms_first"), "ms")),
        ("losses", _losses(before), _losses(after)),
        ("live doctor", "pass" if before.get("ok") else "FAIL " + ", ".join(before.get("failed") or []),
         "pass" if after.get("ok") else "FAIL " + ", ".join(after.get("failed") or [])),
    ]
    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows + [("", "before", "")])
    lines = ["compare (compat doctor --live, the same ranks and Trainer probe)", f"  {'':<{width}}  {'before':<{left}}  after"]
    lines += [f"  {name:<{width}}  {old:<{left}}  {new}" for name, old, new in rows]
    parity = compare.get("loss_parity") or {}
    if parity.get("steps"):
        verdict = "within" if parity["within"] else "NOT within"
        lines.append(f"  loss parity: {parity['steps']} steps, largest difference {parity['max_abs_diff']} ({100 * parity['max_rel_diff']:.2f}%), "
                     f"{verdict} {100 * parity['tolerance']:g}%")
    return lines


def _backend(measure: Mapping[str, Any]) -> str:
    backend = measure.get("backend") or "—"
    if measure.get("backend_is_fixture"):
        backend += " (TEST FIXTURE, not oneCCL)"
    extra = [x for x in (f"IPEX {measure['ipex_mode']}" if measure.get("ipex_mode") not in (None, "none") else "",
                         "bf16" if measure.get("bf16") else "fp32") if x]
    return f"{backend}, {', '.join(extra)}" if extra else backend


def _losses(measure: Mapping[str, Any]) -> str:
    losses = measure.get("losses") or []
    return ", ".join(f"{x:.3f}" for x in losses) if losses else "—"
