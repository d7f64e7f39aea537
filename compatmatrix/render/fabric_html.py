"""``compat doctor --live --fabric --report FILE.html``: one self-contained HTML page drawn from the doctor ``--json``
document (a pure function of it: the same numbers, nothing measured here).

The charts are matplotlib figures written as inline SVG (no JavaScript, no font, no style sheet, nothing fetched to
open the file): the pair heat-map (hosts x hosts, the slower direction of each link), bus bandwidth against message
size for each collective (one line per backend and type) with the memory-copy lines, and under them the tables of
the same numbers and the findings. matplotlib is imported here only (``--report``'s path); every value from outside
(host names, messages) is HTML-escaped, with the characters that act on a terminal written as visible escapes.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..console import visible, visible_line

#: The ids the charts carry in the page (the browser test looks for them).
HEATMAP_ID = "fabric-heatmap"
SWEEP_ID = "fabric-sweep"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
DTYPES = ("fp32", "bf16")
_CELL_LABELS_UP_TO = 16  # hosts: above this the heat-map cells carry no numbers (the table below has them)
STYLE = """body{font-family:sans-serif;margin:1.5em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td.t,th.t{text-align:left}.fail{color:#b00}.warn{color:#a60}
.pass{color:#070}.skip{color:#666}svg{max-width:100%;height:auto}pre{white-space:pre-wrap;margin:0}"""


def text(value: Any) -> str:
    """A value from outside as HTML text: terminal controls as visible escapes (console.visible_line), a lone
    surrogate as its escape (UTF-8 cannot hold it), then HTML-escaped (quotes too: safe in an attribute)."""
    return html.escape(_encodable(visible_line(str(value))), quote=True)


def block(value: Any) -> str:
    """``text`` for a message that may hold line breaks (kept: shown in a <pre>)."""
    return html.escape(_encodable(visible(str(value))), quote=True)


def _encodable(value: str) -> str:
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def gb(value: float) -> str:
    """bytes/s as the page shows it (GB/s, 3 significant digits): live.fabric's gbps without the unit."""
    return f"{value / 1e9:.3g}"


def size_label(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _number(value: float) -> str:
    """The JSON number itself (repr: it reads back to the same float), for the data-v attribute of its cell."""
    return repr(float(value))


def render_report(document: Mapping[str, Any]) -> str:
    """The HTML page of a ``compat doctor --live --fabric --json`` document."""
    live = document.get("live") or {}
    backend = str(live.get("backend") or "?")
    sweep = live.get("fabric")
    pairs = live.get("pairs")
    memcpy = live.get("memcpy") or {}
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>compat doctor --live --fabric</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>Fabric report</h1>",
             f"<p>launcher {text(live.get('launcher', '?'))}, backend {text(backend)}, {text(live.get('world_size', '?'))} ranks; "
             f"python {text(document.get('python_version', '?'))}. Bandwidths in GB/s (10<sup>9</sup> bytes/s).</p>"]
    parts += _deadline_section(sweep, pairs)
    parts += _pairs_section(pairs)
    parts += _sweep_section(sweep, backend, memcpy)
    parts += _findings_section(document.get("checks") or [])
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _deadline_section(sweep: Any, pairs: Any) -> list[str]:
    """--fabric-deadline: the bound, the link the sweep was sized to, and every size not measured with why (the
    --json document's ``fabric.deadline``, ``fabric.skipped`` and ``pairs.skipped``); nothing without a deadline."""
    deadline = (sweep or {}).get("deadline") if isinstance(sweep, Mapping) else None
    if not isinstance(deadline, Mapping):
        return []
    out = ['<h2 id="deadline">Deadline and what was not measured</h2>']
    spent = deadline.get("spent")
    link = deadline.get("link")
    sized = (f"sized to the slowest link, {text(link.get('a'))} &lt;-&gt; {text(link.get('b'))} "
             f'(<span data-v="{_number(link["bandwidth"])}">{gb(link["bandwidth"])}</span> GB/s)') if isinstance(link, Mapping) else "sized to the memory copy (one host)"
    out.append(f'<p>--fabric-deadline <span data-v="{_number(deadline["seconds"])}">{float(deadline["seconds"]):g}</span> s from the pairs\' start'
               + (f', the last sweep ended at <span data-v="{_number(spent)}">{float(spent):.1f}</span> s' if isinstance(spent, (int, float)) else "")
               + f"; the sweep was {sized}, {text(deadline.get('timed'))} s of timed calls per case.</p>")
    skipped = [item for item in sweep.get("skipped") or [] if isinstance(item, Mapping)]
    skipped_pairs = [str(item) for item in (pairs or {}).get("skipped") or []] if isinstance(pairs, Mapping) else []
    if not skipped and not skipped_pairs:
        return out + ["<p>Everything asked for was measured.</p>"]
    out.append('<table id="skipped"><tr><th class="t">backend</th><th class="t">collective</th><th class="t">type</th><th class="t">sizes not measured</th><th class="t">why</th></tr>')
    for item in skipped:
        sizes = ", ".join(size_label(int(size)) for size in item.get("sizes") or [])
        out.append(f'<tr><td class="t">{text(item.get("backend", ""))}</td><td class="t">{text(item.get("collective"))}</td><td class="t">{text(item.get("dtype"))}</td>'
                   f'<td class="t">{text(sizes)}</td><td class="t">{text(item.get("why"))}</td></tr>')
    out.append("</table>")
    out += [f"<p>Pairs: not measured: {text(item)}</p>" for item in skipped_pairs]
    return out


def _findings_section(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    live = [c for c in checks if str(c.get("id", "")).startswith("live.")]
    rest = [c for c in checks if c not in live]
    out = ["<h2>Findings</h2>", '<table id="findings"><tr><th class="t">status</th><th class="t">check</th><th class="t">summary</th></tr>']
    for check in live + rest:
        status = str(check.get("status", ""))
        detail = "".join(f"<pre>{block(line)}</pre>" for line in check.get("evidence") or [])
        if check.get("fix"):
            detail += f"<pre>fix: {block(check['fix'])}</pre>"
        out.append(f'<tr><td class="t {text(status)}">{text(status.upper())}</td><td class="t">{text(check.get("id", ""))}</td>'
                   f'<td class="t"><pre>{block(check.get("summary", ""))}</pre>{detail}</td></tr>')
    out.append("</table>")
    return out


def _pairs_section(pairs: Any) -> list[str]:
    if not pairs:
        return ["<h2>Pairs of hosts</h2>", "<p>No pairs measured (one host, or no rank reached the pair tests).</p>"]
    hosts = [str(h) for h in pairs.get("hosts") or []]
    out = ["<h2>Pairs of hosts</h2>"]
    if pairs.get("error"):
        out.append(f'<p class="fail">{block(pairs["error"])}</p>')
    links = pairs.get("links") or []
    median = pairs.get("median")
    out.append(f"<p>{len(links)} pairs of {len(hosts)} hosts in {text(pairs.get('rounds'))} rounds ({text(pairs.get('mode'))})"
               + (f", median link {gb(median)} GB/s" if median else "") + ". Each cell is the slower direction of the link.</p>")
    if links:
        named_links = {tuple(x) for key in ("slow_links", "lossy_links", "silent_links") for x in pairs.get(key) or []}
        named_hosts = {h for key in ("slow_hosts", "lossy_hosts", "silent_hosts") for h in pairs.get(key) or []}
        out.append(inline_svg(_heatmap_figure(hosts, links, named_links, named_hosts), HEATMAP_ID))
    out.append('<table id="hosts"><tr><th>#</th><th class="t">host</th><th>memcpy GB/s</th></tr>')
    host_memcpy = pairs.get("memcpy") or {}
    for i, host in enumerate(hosts, 1):
        value = host_memcpy.get(host)
        cell = f'<td data-v="{_number(value)}">{gb(value)}</td>' if value is not None else "<td>-</td>"
        out.append(f'<tr><td>{i}</td><td class="t">{text(host)}</td>{cell}</tr>')
    out.append("</table>")
    out.append('<table id="links"><tr><th class="t">link</th><th>GB/s</th><th>a → b GB/s</th><th>b → a GB/s</th><th>latency µs</th>'
               '<th>two-rank all_reduce GB/s</th><th>TCP segments retransmitted</th></tr>')
    for link in links:
        out.append(f'<tr><td class="t">{text(link["a"])} ↔ {text(link["b"])}</td>' + "".join(_link_cells(link)) + "</tr>")
    out.append("</table>")
    return out


def _cell(value: Any, shown: str) -> str:
    return f'<td data-v="{_number(value)}">{shown}</td>' if value is not None else "<td>-</td>"


def _link_cells(link: Mapping[str, Any]) -> list[str]:
    """The cells of one measured pair; a pair that did not answer within its deadline says so in place of its numbers."""
    cells = [_cell(link["bandwidth"], gb(link["bandwidth"]))]
    if link.get("error"):
        return cells + [f'<td class="t fail" colspan="3">{text(link["error"])}</td>', "<td>-</td>", _retransmitted(link)]
    latency = link.get("latency")
    allreduce = link.get("allreduce") or {}
    cells += [_cell(link.get("out"), gb(link["out"]) if link.get("out") is not None else ""),
              _cell(link.get("back"), gb(link["back"]) if link.get("back") is not None else ""),
              _cell(latency, f"{latency * 1e6:.0f}" if latency is not None else ""),
              _cell(allreduce.get("busbw"), gb(allreduce["busbw"]) if allreduce.get("busbw") is not None else ""),
              _retransmitted(link)]
    return cells


def _retransmitted(link: Mapping[str, Any]) -> str:
    sent, again = link.get("sent"), link.get("retransmitted")
    if sent is None or again is None:
        return "<td>-</td>"
    spurious = link.get("spurious")
    late = f", {int(spurious)} D-SACKed (arrived after all)" if isinstance(spurious, (int, float)) and spurious else ""
    return f'<td data-v="{_number(again)}">{int(again)} of {int(sent)}{late}</td>'


def _sweep_section(sweep: Any, backend: str, memcpy: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Bus bandwidth against message size</h2>"]
    if not sweep or not any(r["collective"] in COLLECTIVES and r["dtype"] in DTYPES for r in sweep.get("rows") or []):
        return out + ["<p>No sweep (no rank reached it, or no size fits in the ranks' memory).</p>"]
    rows = sweep["rows"]
    out.append(f"<p>nccl-tests' bus bandwidth over {text(sweep.get('world_size'))} ranks, the slowest rank's mean time per call; "
               "every iteration checked exactly. Dashed: memory copy (one thread per rank).</p>")
    backends = [str(b) for b in sweep.get("backends") or [backend]]
    fixtures = set(sweep.get("fixture_backends") or [])

    def shown(name: str) -> str:
        return f"{name} (TEST FIXTURE on gloo, not oneCCL)" if name in fixtures else name

    if len(backends) > 1:
        out.append(f"<p>Compared on the same ranks in the same run: {text(', '.join(shown(b) for b in backends))}.</p>")
    out.append(inline_svg(_sweep_figure(rows, backends, memcpy, shown), SWEEP_ID))
    if memcpy:
        out.append('<table id="memcpy"><tr><th class="t">memory copy</th><th>GB/s</th></tr>')
        for key, label in (("per_rank", "one rank"), ("all_ranks", "every rank at once, in all")):
            if isinstance(memcpy.get(key), (int, float)):
                out.append(f'<tr><td class="t">{label}</td><td data-v="{_number(memcpy[key])}">{gb(memcpy[key])}</td></tr>')
        out.append("</table>")
    out.append('<table id="sweep"><tr><th class="t">backend</th><th class="t">collective</th><th class="t">type</th><th>size</th><th>bytes</th>'
               "<th>iterations</th><th>time µs</th><th>algbw GB/s</th><th>busbw GB/s</th><th>ranks wrong</th></tr>")
    for row in rows:
        out.append(f'<tr><td class="t">{text(shown(str(row.get("backend", backend))))}</td><td class="t">{text(row["collective"])}</td><td class="t">{text(row["dtype"])}</td>'
                   f'<td>{size_label(int(row["bytes"]))}</td><td>{int(row["bytes"])}</td><td>{int(row["iterations"])}</td>'
                   f'<td data-v="{_number(row["seconds"])}">{row["seconds"] * 1e6:.1f}</td>'
                   f'<td data-v="{_number(row["algbw"])}">{gb(row["algbw"])}</td><td data-v="{_number(row["busbw"])}">{gb(row["busbw"])}</td>'
                   f'<td>{int(row.get("ranks_wrong", 0))}</td></tr>')
    out.append("</table>")
    for item in sweep.get("unsupported") or []:
        out.append(f"<p>{text(item.get('collective'))} {text(item.get('dtype'))}: not supported by {text(shown(str(item.get('backend', backend))))}: "
                   f"{text(item.get('error'))}</p>")
    return out


def inline_svg(figure, element_id: str) -> str:
    """The figure as an inline <svg> with ``element_id`` (no XML prolog, no DOCTYPE: HTML takes the element itself)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": element_id}):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    return f'<figure>{svg.replace("<svg", f"<svg id={chr(34)}{element_id}{chr(34)}", 1)}</figure>'


def _heatmap_figure(hosts: Sequence[str], links: Sequence[Mapping[str, Any]], slow_links: set, slow_hosts: set):
    """Hosts x hosts, each measured link's bandwidth (GB/s); hosts by number (the table beside names them: a host
    name from outside never goes through matplotlib's text parser)."""
    from matplotlib.figure import Figure

    n = len(hosts)
    index = {host: i for i, host in enumerate(hosts)}
    grid = [[math.nan] * n for _ in range(n)]
    for link in links:
        a, b = index[link["a"]], index[link["b"]]
        grid[a][b] = grid[b][a] = link["bandwidth"] / 1e9
    side = min(3.0 + 0.45 * n, 12.0)
    figure = Figure(figsize=(side + 1.2, side))
    axes = figure.add_subplot()
    image = axes.imshow(grid, cmap="viridis", vmin=0, interpolation="nearest")
    image.set_gid("heatmap-cells")
    figure.colorbar(image, ax=axes, label="link bandwidth, GB/s")
    ticks = range(n) if n <= 32 else range(0, n, max(1, n // 16))
    axes.set_xticks(list(ticks), [str(i + 1) for i in ticks])
    axes.set_yticks(list(ticks), [str(i + 1) for i in ticks])
    axes.set_xlabel("host #")
    axes.set_ylabel("host #")
    if n <= _CELL_LABELS_UP_TO:
        for a in range(n):
            for b in range(n):
                if not math.isnan(grid[a][b]):
                    slow = (hosts[a], hosts[b]) in slow_links or (hosts[b], hosts[a]) in slow_links or hosts[a] in slow_hosts or hosts[b] in slow_hosts
                    axes.text(b, a, f"{grid[a][b]:.3g}", ha="center", va="center", fontsize=8, parse_math=False,
                              color="red" if slow else "white", fontweight="bold" if slow else "normal").set_gid(f"link-{a + 1}-{b + 1}")
    return figure


def _sweep_figure(rows: Sequence[Mapping[str, Any]], backends: Sequence[str], memcpy: Mapping[str, Any], shown):
    """One panel per collective: bus bandwidth (GB/s) against message size, log-log, a line per backend and type."""
    from matplotlib.figure import Figure

    rows = [r for r in rows if r["collective"] in COLLECTIVES and r["dtype"] in DTYPES]  # the schema's names only reach matplotlib
    names = [c for c in COLLECTIVES if any(r["collective"] == c for r in rows)]
    columns = min(3, len(names))
    lines = -(-len(names) // columns)
    figure = Figure(figsize=(4.4 * columns, 3.6 * lines), layout="constrained")
    panels = figure.subplots(lines, columns, sharey=True, squeeze=False).flatten()
    for axes in panels[len(names):]:
        axes.set_visible(False)
    for axes, name in zip(panels, names):
        for number, backend in enumerate(backends):  # the run's backend keeps the plain ids; a compared one's carry its place
            mine = [r for r in rows if r.get("backend", backends[0]) == backend and r["collective"] == name]
            for dtype in dict.fromkeys(r["dtype"] for r in mine):
                points = sorted((int(r["bytes"]), r["busbw"] / 1e9) for r in mine if r["dtype"] == dtype and r["busbw"] > 0)
                if points:
                    (line,) = axes.plot([p[0] for p in points], [p[1] for p in points], marker="o" if number == 0 else "s",
                                        linestyle="-" if number == 0 else "-.", label=f"{chart_label(shown(backend))} {dtype}")
                    line.set_gid(f"sweep-{name}-{dtype}" + (f"-vs{number}" if number else ""))
        for key, label, style in (("per_rank", "memcpy, one rank", "--"), ("all_ranks", "memcpy, all ranks", ":")):
            if isinstance(memcpy.get(key), (int, float)) and memcpy[key] > 0:
                axes.axhline(memcpy[key] / 1e9, color="grey", linestyle=style, label=label).set_gid(f"memcpy-{key}-{name}")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_title(name)
        axes.set_xlabel("message size, bytes")
        axes.grid(True, which="major", alpha=0.3)
    panels[0].set_ylabel("bus bandwidth, GB/s")
    panels[0].legend(fontsize=8)
    return figure


def chart_label(value: str) -> str:
    """A backend name as a legend label: matplotlib's math text ($...$) and controls kept out, and a leading underscore
    behind a space (matplotlib leaves a label that starts with "_" out of the legend)."""
    label = _encodable(visible_line(value)).replace("$", r"\$")
    return " " + label if label.startswith("_") else label
