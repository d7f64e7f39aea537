"""compat tune's output: the table and the winner as text, and the ``--json`` document (schemas/tune-v1.json).

Side effects: none.
"""

from __future__ import annotations

import shlex
from typing import Any, Optional

from .interval import LEVEL
from .service import Measured, Outcome, export_arguments, launch_arguments, training_flags

SCHEMA_VERSION = 1


def _verdict_words(m: Measured) -> str:
    if m.problem:
        return "not measured: " + m.problem
    if m.verdict is None:
        return ""
    if m.verdict.accepted:
        return "exact" if m.verdict.exact else f"same model (within {m.verdict.worst_loss:.2g})"
    return "REJECTED: " + m.verdict.reason


def _rate(value: Optional[float]) -> str:
    return f"{value:,.1f}" if value is not None else "-"


def _estimate_words(outcome: Outcome) -> str:
    if outcome.space.estimated is not None:
        return f"estimated {outcome.space.estimated:.0f} s"
    timed = ", ".join(f"{dtype} {seconds:.1f} s" for dtype, seconds in outcome.reference_seconds)
    return f"each run estimated from its reference run's {timed}" if timed else "no reference run timed"


def _interval_words(outcome: Outcome) -> str:
    """What the table's interval column is, and what decided the repeats and the winner where it is missing."""
    level = f"{LEVEL:.0%}"
    if outcome.workload == "command":
        return (f"# interval: {level} CI is the distribution-free {level} confidence interval of the median steps/s of the runs (order "
                f"statistics); fewer than 6 runs cannot reach {level} ('-'), so repeats and the winner went by the spread of 2 runs or "
                "more (rate / (1 ± spread): a spread, not a confidence statement), and a single run overlaps every other")
    return (f"# interval: {level} CI is the distribution-free {level} confidence interval of the median steps/s (order statistics of "
            "the timed step times pooled over the runs); repeats and the winner go by it. It assumes the step times exchangeable: "
            "consecutive steps are correlated in practice, so the interval is optimistic (narrower than the truth)")


def tune_text(outcome: Outcome) -> str:
    lines = [f"# compat tune: {outcome.space.machine_text}; {outcome.python}, launcher {outcome.launcher}",
             f"# budget {outcome.space.budget:g} s ({_estimate_words(outcome)}), took {outcome.seconds:.0f} s"
             + ("; INTERRUPTED: the table holds what was measured before Ctrl-C" if outcome.interrupted else "")]
    lines += _table_lines(outcome)
    if any(m.steps_per_second is not None for m in outcome.measured):
        lines.append(_interval_words(outcome))
    lines += [f"# proof: {text}" for text in sorted({m.tolerance for m in outcome.measured if m.tolerance})]
    if outcome.winner is not None:
        lines += _winner_lines(outcome)
    else:
        lines.append("# no configuration was measured and proven to train the same model as the reference"
                     + ("; none of them fitted the budget left after the reference run (left out below): pass a larger --budget"
                        if outcome.pruned and not any(m.steps_per_second is not None for m in outcome.measured) else ""))
    lines += [f"# left out: {pruned.name}: {pruned.reason}" for pruned in outcome.space.pruned + outcome.pruned]
    lines += [f"# note: {note}" for note in outcome.notes]
    return "\n".join(lines) + "\n"


def _table_lines(outcome: Outcome) -> list[str]:
    """The table of configurations, fastest first: steps/s, spread, interval, runs and the correctness verdict."""
    rows = [("configuration", "steps/s", "spread", f"{LEVEL:.0%} CI", "runs", "correctness")]
    for m in sorted(outcome.measured, key=lambda m: -(m.steps_per_second or 0.0)):
        name = m.config.name + (" (default plan)" if m.config.default else "") + (" (your current settings)" if m.config.current else "") + (" *" if outcome.winner is m else "")
        rows.append((name, _rate(m.steps_per_second), f"±{m.spread:.0%}" if m.spread is not None else "-",
                     f"{_rate(m.interval[0])}–{_rate(m.interval[1])}" if m.interval is not None else "-",
                     str(m.runs) if m.steps_per_second is not None else "-", _verdict_words(m)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return [f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}  {row[4]:>{widths[4]}}  {row[5]}".rstrip()
            for row in rows]


def _winner_lines(outcome: Outcome) -> list[str]:
    """The winner, why it won, against your current settings, and the commands and flags that run it."""
    assert outcome.winner is not None
    config = outcome.winner.config
    speedup = outcome.speedup
    if config.default:
        why = "; no configuration was faster than the default plan beyond the measured intervals"
    elif speedup is not None:
        why = f"; {speedup:.2f}x the default plan's steps/s, beyond both intervals"
    else:
        why = "; the default plan was not measured and accepted"
    lines = [f"# winner: {config.name}: {config.describe()}{why}"]
    if outcome.current is not None:
        over = outcome.speedup_over_current
        lines.append(f"# your current settings ({outcome.current.config.name}): "
                     + (f"the winner runs {over:.2f}x their steps/s" if over is not None else "not measured and accepted, no speed-up to say"))
    lines.append("compat launch " + shlex.join(launch_arguments(outcome)) + " -- YOUR_TRAINING_COMMAND")
    lines.append("compat export sbatch " + shlex.join(export_arguments(outcome, "sbatch")) + " -- YOUR_TRAINING_COMMAND")
    lines.append("compat export pytorchjob " + shlex.join(export_arguments(outcome, "pytorchjob"))
                 + " --image IMG --memory MEM -- YOUR_TRAINING_COMMAND")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(outcome.winner_env.items())]
    flags = training_flags(config)
    if flags:
        lines.append("# an HF Trainer script's flags for it: " + shlex.join(flags))
    return lines


def tune_json(outcome: Outcome) -> dict[str, Any]:
    def configuration(m: Measured) -> dict[str, Any]:
        c = m.config
        return {
            "name": c.name, "ranks": c.ranks, "layout": c.layout, "omp_threads": c.omp_threads, "ccl_workers": c.ccl_workers,
            "backend": c.backend, "dtype": c.dtype, "compile": c.compile, "default": c.default, "current": c.current,
            "steps_per_second": m.steps_per_second, "spread": m.spread,
            "interval": None if m.interval is None else {"low": m.interval[0], "high": m.interval[1], "level": LEVEL}, "runs": m.runs, "seconds": round(m.seconds, 3),
            "problem": m.problem or None,
            "verdict": None if m.verdict is None else {
                "accepted": m.verdict.accepted, "exact": m.verdict.exact, "reason": m.verdict.reason,
                "worst_loss": m.verdict.worst_loss, "worst_param": m.verdict.worst_param, "tolerance": m.tolerance},
        }

    winner = None
    if outcome.winner is not None:
        winner = {"name": outcome.winner.config.name, "speedup_over_default": outcome.speedup,
                  "speedup_over_current": outcome.speedup_over_current,
                  "launch_arguments": launch_arguments(outcome),
                  "export_arguments": {form: export_arguments(outcome, form) for form in ("pytorchjob", "sbatch")}, "environment": dict(outcome.winner_env),
                  "training_flags": training_flags(outcome.winner.config)}
    return {
        "schema_version": SCHEMA_VERSION,
        "python": outcome.python,
        "launcher": outcome.launcher,
        "machine": outcome.space.machine_text,
        "workload": outcome.workload,
        "budget_seconds": outcome.space.budget,
        "estimated_seconds": outcome.space.estimated,
        "seconds": round(outcome.seconds, 3),
        "interrupted": bool(outcome.interrupted),
        "configurations": [configuration(m) for m in outcome.measured],
        "pruned": [{"name": p.name, "reason": p.reason} for p in outcome.space.pruned + outcome.pruned],
        "reference_seconds": dict(outcome.reference_seconds),
        "winner": winner,
        "notes": list(outcome.notes),
    }
