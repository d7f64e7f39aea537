"""``compat launch --watch --report FILE.html``: one self-contained HTML page of a watched run, drawn from its
``--json`` document (watch-v1.json) and its timeline (compatmatrix/watch/timeline.py): a pure function of the two.

Made as the fabric report is (render/fabric_html.py, whose helpers it uses): a matplotlib figure written as inline
SVG (no JavaScript, no font, no style sheet, nothing fetched to open the file), and tables of the same facts. Every
value from outside (host names, op names, messages, a rank's output lines) is HTML-escaped with the characters that
act on a terminal written as visible escapes; in the chart the ranks are numbers and the op names legend labels
(fabric_html.chart_label: matplotlib's math text kept out); host names are only in the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .fabric_html import STYLE, block, chart_label, inline_svg, text

TIMELINE_ID = "watch-timeline"
#: one colour per op (the timeline has at most watch/timeline.MAX_OPS of them, "other" included)
COLOURS = ("#4477aa", "#66ccee", "#228833", "#ccbb44", "#aa3377", "#bbbbbb", "#44aa99", "#999933", "#882255")
_EXTRA_STYLE = ".lines{background:#f6f6f6;padding:2px 6px}td pre{margin:0}"


def render_watch_report(document: Mapping[str, Any], timeline: Mapping[str, Any]) -> str:
    """The HTML page of a watched run: its findings, the timeline per rank, the ranks, the stacks."""
    status = document.get("job_status")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', "<title>compat launch --watch</title>",
             f"<style>{STYLE}{_EXTRA_STYLE}</style></head><body>", "<h1>Watched run</h1>",
             f"<p>the job's exit status {text(status)}, compat's {text(document.get('exit_status'))}"
             + ("; the watch ended the job" if document.get("ended_by_watch") else "")
             + (f"; compat received {text(document['interrupted'])}" if document.get("interrupted") else "")
             + f". Progress of the collectives from: {text(', '.join(map(str, document.get('sources') or [])) or 'no rank reported')}.</p>"]
    parts += _findings_section(document.get("findings") or [])
    parts += _timeline_section(timeline)
    parts += _stacks_section(document.get("stacks") or [])
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _findings_section(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    out = ["<h2>Findings</h2>"]
    if not findings:
        return out + ["<p>No finding: no rank stalled, died or held the others back.</p>"]
    out.append('<table id="findings"><tr><th class="t">finding</th><th>rank</th><th class="t">host</th><th class="t">what the watch saw</th></tr>')
    for finding in findings:
        kind = str(finding.get("kind", ""))
        detail = f"<pre>{block(finding.get('message', ''))}</pre><pre>fix: {block(finding.get('fix', ''))}</pre>"
        lines = finding.get("last_lines") or []
        if lines:
            source = {"pipe": "compat's pipes of its stdout and stderr", "agent": "its agent's copy of what it wrote through sys.stdout and sys.stderr"}
            detail += (f"<p>its last {len(lines)} lines (from {text(source.get(str(finding.get('lines_from')), finding.get('lines_from') or 'the rank'))}):</p>"
                       f'<pre class="lines">{"<br>".join(text(line) for line in lines)}</pre>')
        out.append(f'<tr><td class="t fail">{text(kind)}</td><td>{text(finding.get("rank", ""))}</td><td class="t">{text(finding.get("host", ""))}</td>'
                   f'<td class="t">{detail}</td></tr>')
    out.append("</table>")
    return out


def _timeline_section(timeline: Mapping[str, Any]) -> list[str]:
    out = ['<h2 id="timeline">Timeline of the collectives, per rank</h2>']
    ranks = [rank for rank in timeline.get("ranks") or [] if isinstance(rank, Mapping)]
    if not ranks or not any(rank.get("marks") for rank in ranks):
        return out + ["<p>No collective was recorded (no rank reached one, or the run was too short for a heartbeat).</p>"]
    out.append("<p>Each bar is one collective of that rank: from the time the rank entered it to the time the last rank entered it (no rank can "
               "leave a collective before every rank has entered it; the time it took itself is not recorded), drawn once the rank's heartbeats "
               "said it completed. A bar outlined in red runs to the end: the rank was still inside when the watch ended. "
               "&#x2715; a rank that died; the dashed line: when the watch named the stall, the red tick on the stopped rank's lane its last progress; "
               "a shaded lane: the straggler. Seconds from the first collective any rank entered"
               + (" (the ranks span several hosts: each host's clock is its own)" if len({str(r.get("host", "")) for r in ranks}) > 1 else "") + ".</p>")
    known, drawn = timeline.get("ranks_known", len(ranks)), len(ranks)
    if known > drawn:
        out.append(f"<p>{drawn} of {text(known)} ranks drawn (at most {text(timeline.get('max_ranks'))}: those the findings name first, then the lowest).</p>")
    thinned = [rank for rank in ranks if int(rank.get("step", 1)) > 1]
    if thinned:
        out.append(f"<p>A rank with more than {text(timeline.get('max_marks'))} collectives is drawn with its last {text(timeline.get('tail_marks'))} "
                   "and an even sample of those before them (the table says which); the watch keeps each rank's newest collectives only.</p>")
    out.append(inline_svg(_timeline_figure(timeline, ranks), TIMELINE_ID))
    out.append('<table id="ranks"><tr><th>rank</th><th class="t">host</th><th>collectives known</th><th>drawn</th><th>last progress, s</th>'
               "<th>died at, s</th></tr>")
    for rank in ranks:
        step = int(rank.get("step", 1))
        drawn_text = f"{int(rank.get('drawn', 0))}" + (f" (every {step}th, then the last {text(timeline.get('tail_marks'))})" if step > 1 else "")
        gone = rank.get("gone")
        out.append(f'<tr><td>{text(rank.get("rank"))}</td><td class="t">{text(rank.get("host", ""))}</td><td>{int(rank.get("known", 0))}</td>'
                   f'<td>{drawn_text}</td><td>{float(rank.get("last_progress", 0.0)):.2f}</td><td>{"-" if gone is None else f"{float(gone):.2f}"}</td></tr>')
    out.append("</table>")
    ops = [str(op) for op in timeline.get("ops") or []]
    out.append("<p>Ops: " + ", ".join(f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#x25A0;</span> {text(op)}' for i, op in enumerate(ops)) + "</p>")
    return out


def _stacks_section(stacks: Sequence[Mapping[str, Any]]) -> list[str]:
    if not stacks:
        return []
    out = ["<h2>Python stacks</h2>"]
    for stack in stacks:
        out.append(f"<p>rank {text(stack.get('rank'))} (pid {text(stack.get('pid'))}):</p>")
        out.append(f"<pre>{block(stack.get('text') or stack.get('error') or '')}</pre>")
    return out


def _timeline_figure(timeline: Mapping[str, Any], ranks: Sequence[Mapping[str, Any]]):
    """One lane per rank (rank numbers only), a bar per collective coloured by its op; the findings' marks."""
    from matplotlib.figure import Figure

    end = max(float(timeline.get("end") or 0.0), 1e-3)
    ops = [str(op) for op in timeline.get("ops") or []]
    stall = timeline.get("stall") if isinstance(timeline.get("stall"), Mapping) else None
    deaths = {int(d["rank"]): float(d["at"]) for d in timeline.get("deaths") or [] if isinstance(d, Mapping)}
    straggler = timeline.get("straggler")
    figure = Figure(figsize=(11, 1.2 + 0.38 * len(ranks)), layout="constrained")
    axes = figure.add_subplot()
    thin = end / 600  # a collective the rank entered last is as long as its own wait: nothing; drawn this wide (a tick)
    labelled: set[int] = set()
    for lane, rank in enumerate(ranks):
        number = int(rank["rank"])
        by_op: dict[int, list[tuple[float, float]]] = {}
        still: list[tuple[float, float]] = []
        for entered, left, op, _seq, _pg in rank.get("marks") or []:
            if left is None:
                still.append((float(entered), max(end - float(entered), thin)))
            else:
                by_op.setdefault(int(op), []).append((float(entered), max(float(left) - float(entered), thin)))
        for op, bars in sorted(by_op.items()):
            label = chart_label(ops[op]) if op < len(ops) and op not in labelled else None
            labelled.add(op)
            axes.broken_barh(bars, (lane - 0.35, 0.7), facecolors=COLOURS[op % len(COLOURS)], label=label).set_gid(f"rank-{number}-op-{op}")
        if still:
            axes.broken_barh(still, (lane - 0.35, 0.7), facecolors="none", edgecolors="red", hatch="//").set_gid(f"rank-{number}-open")
        if number in deaths:
            axes.plot([deaths[number]], [lane], marker="X", color="black", markersize=11, linestyle="none")[0].set_gid(f"death-rank-{number}")
        if stall is not None and number == int(stall["rank"]):
            axes.plot([float(stall["stopped_at"])], [lane], marker="|", color="red", markersize=22, markeredgewidth=3,
                      linestyle="none")[0].set_gid(f"stall-rank-{number}")
        if straggler is not None and number == int(straggler):
            axes.axhspan(lane - 0.5, lane + 0.5, color="orange", alpha=0.2).set_gid(f"straggler-rank-{number}")
    if stall is not None and timeline.get("finding_at") is not None:
        axes.axvline(float(timeline["finding_at"]), color="red", linestyle="--").set_gid("stall-found")

    def lane_label(rank: Mapping[str, Any]) -> str:
        number = int(rank["rank"])
        said = ("stopped" if stall is not None and number == int(stall["rank"]) else "died" if number in deaths
                else "straggler" if straggler is not None and number == int(straggler) else "")
        return f"rank {number}" + (f" ({said})" if said else "")

    axes.set_yticks(range(len(ranks)), [lane_label(rank) for rank in ranks])
    axes.set_ylim(len(ranks) - 0.5, -0.5)
    axes.set_xlim(0, end * 1.01)
    axes.set_xlabel("seconds from the first collective")
    axes.grid(True, axis="x", alpha=0.3)
    if labelled:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure
