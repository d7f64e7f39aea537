"""What people read: the resolve and matrix tables, findings (doctor, check, export --validate), and the lines of
translate, download and install. Everything goes through a console.TextConsole: colour only on a terminal (NO_COLOR,
--no-color), and rich imported only for what needs it (tables, colour, lines it would wrap); tables import
rich.table where one is printed. The JSON documents for the same answers are json.py's.

Side effects: writes to the console it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..console import escape, plural
from ..redact import redact_url

if TYPE_CHECKING:
    from rich.console import Console

    from ..findings import Finding
    from ..matrix.model import Component, Matrix
    from ..rules import Candidate
    from ..search import Conflict, Outcome, Request, Resolution

# --- compat resolve ---------------------------------------------------------------------------------------------------


def _set_text(picks: Mapping[Component, Candidate]) -> str:
    from ..matrix.model import COMPONENT_ORDER

    return ", ".join(str(picks[c]) for c in COMPONENT_ORDER if c in picks)


def render_outcome(console: Console, outcome: Outcome) -> None:
    from ..search import Conflict, Resolution

    _print_request(console, outcome.request)
    if isinstance(outcome, Resolution):
        _print_resolution(console, outcome)
        return
    assert isinstance(outcome, Conflict)
    _print_conflict(console, outcome)


def _print_request(console: Console, request: Request) -> None:
    """The header line (profile, Python, platform, constraints) and the request's notes."""
    constraints = " ".join(f"{c.label}{s}" for c, s in request.specifiers.items())
    header = f"Python {request.python.label} ({request.python.origin}) · {request.platform.tag}"
    if request.profile:
        header = f"profile {request.profile} · " + header
    if constraints:
        header += f" · {constraints}"
    console.print(escape(header), style="dim")
    for note in request.notes:
        console.print(f"  note: {escape(note)}", style="dim")


def _pick_source(pick: Candidate) -> str:
    """Where a pick comes from: "pypi", or the host with its pip flag, URL (redacted) and local label."""
    label = f" ({pick.local_label})" if pick.local_label else ""
    return "pypi" if pick.host.id == "pypi" else f"{pick.host.id}  {pick.host.pip_flag} {redact_url(pick.host.url)}{label}"


def _print_resolution(console: Console, outcome: Resolution) -> None:
    # rich's tables are imported where one is printed: --json output and a conflict need none (start-up)
    from ..matrix.model import COMPONENT_ORDER

    console.print("[bold green]OK[/] a consistent set exists:")
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("package")
    table.add_column("version")
    table.add_column("from")
    for component in COMPONENT_ORDER:
        if component in outcome.picks:
            pick = outcome.picks[component]
            table.add_row(pick.release.distribution, str(pick.version), escape(_pick_source(pick)))
    console.print(table)
    _print_section(console, "\n[bold]Why these versions[/]", [f"  - {escape(reason)}" for reason in outcome.reasons])
    _print_section(console, "\n[bold]Notes[/]", [f"  ! {escape(note)}" for note in outcome.notes], style="yellow")


def _print_section(console: Console, title: str, lines: Sequence[str], style: Optional[str] = None) -> None:
    """A titled list, nothing when it is empty."""
    if not lines:
        return
    console.print(title)
    for line in lines:
        console.print(line, style=style)


def _print_conflict(console: Console, outcome: Conflict) -> None:
    from ..sentences import depth, sentence

    if outcome.unsupported:
        console.print("[bold red]NOT SUPPORTED[/] " + escape(outcome.reasons[0]))
        return
    console.print("[bold red]NO SET[/] no consistent set exists, because:")
    for item in outcome.explanation:
        console.print(f"    {escape(sentence(item))}" if depth(item) else f"  x {escape(sentence(item))}")
    if not outcome.alternatives:
        console.print("\nNo nearby change (one constraint dropped, another Python) gives a consistent set.")
        return
    console.print("\n[bold]What would work[/]")
    for alt in outcome.alternatives:
        console.print(f"  -> {escape(alt.change)}: {escape(_set_text(alt.resolution.picks))}", style="green")
        if alt.reason:
            console.print(f"     why: {escape(alt.reason)}", style="dim")


# --- compat matrix ----------------------------------------------------------------------------------------------------


def _coverage(wheels: list[dict[str, Any]]) -> str:
    from packaging.version import Version

    from ..sentences import python_list

    parts = []
    for w in wheels:
        pythons = [Version(p) for p in w["python"]]
        mark = "" if w["verified"] else "?"
        yanked = " yanked" if w["yanked"] else ""
        parts.append(f"{w['host']}{mark}: {python_list(pythons)}{yanked}")
    return "\n".join(parts)


def _pairings_text(row: Mapping[str, Any]) -> str:
    """"2.5.1 reported-working; others unverified" (docs/MATRIX.md, Evidence)."""
    stated = [f"{p['torch']} {p['evidence']}{'' if p['verified'] else '?'}" for p in row.get("pairings", [])]
    return "; ".join(stated + ["others unverified"])


_Columns = list[tuple[str, Callable[[dict[str, Any]], str]]]

def _declared(row: Mapping[str, Any]) -> str:
    """A companion's torch as its METADATA declares it: "==2.14.0 (pin)", ">=2.14.0 (floor, stable ABI)", "none declared";
    with its Requires-Python when it has one."""
    requires = row.get("torch_requires", "") or (f"=={row['torch']}" if row.get("torch") else "")
    kind = "pin" if row.get("torch") else "floor" if requires.startswith(">=") and "," not in requires else "range"
    text = f"{requires} ({kind}{', stable ABI' if row.get('stable_abi') else ''})" if requires else "none declared"
    return text + (f"; Python {row['requires_python']}" if row.get("requires_python") else "")


#: The tables of ``compat matrix``: per package (its distribution name), the title and (column, cell) per column.
_TABLES: dict[str, tuple[str, _Columns]] = {
    "torch": ("torch", [("version", lambda e: e["version"]), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])),
                        ("released", lambda e: e["released"])]),
    "intel-extension-for-pytorch": ("intel-extension-for-pytorch", [
        ("version", lambda e: e["version"]), ("built for torch", lambda e: e["torch"]), ("import check accepts", lambda e: e["torch_accepts"]),
        ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])), ("module", lambda e: e["module"])]),
    "oneccl-bind-pt": ("oneccl_bind_pt", [
        ("version", lambda e: e["version"]), ("built for torch", lambda e: e["torch"]), ("other torch of the series", _pairings_text),
        ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])),
        ("module", lambda e: e["module"]), ("oneCCL", lambda e: e["oneccl"])]),
    "torchvision": ("torchvision", [
        ("version", lambda e: e["version"]), ("torch (declared)", lambda e: _declared(e)), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"]))]),
    "torchaudio": ("torchaudio", [
        ("version", lambda e: e["version"]), ("torch (declared)", lambda e: _declared(e)), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"]))]),
    "transformers": ("transformers", [
        ("line", lambda e: e["line"]), ("latest", lambda e: e["latest"]), ("requires python", lambda e: e["requires_python"]),
        ("torch >=", lambda e: e["torch_min"]), ("accelerate >=", lambda e: e["accelerate_min"]), ("features", lambda e: ", ".join(e["features"]))]),
    "accelerate": ("accelerate", [
        ("line", lambda e: e["line"]), ("latest", lambda e: e["latest"]), ("requires python", lambda e: e["requires_python"]),
        ("torch >=", lambda e: e["torch_min"]), ("features", lambda e: ", ".join(e["features"]))]),
}


def render_matrix(console: Console, matrix: Matrix, rows: Mapping[str, list[dict[str, Any]]], show_sources: bool, overlay: Any = None) -> None:
    """The rows of json.matrix_rows as one table per package, then the end-of-life statements."""
    for key, entries in rows.items():
        console.print(_matrix_table(key, entries, show_sources))
    console.print("? = not verified against its source (see the note in data/matrix.toml)", style="dim")
    for entry in matrix.eol:
        console.print(escape(f"{entry.package}: {entry.status}, last release {entry.last_release}. {entry.advice}"), style="yellow")
    checked = matrix.registry_checked or "never"
    console.print(f"Registry facts last cross-checked against PyPI: {checked}", style="dim")
    if overlay is None:
        console.print("No overlay: every fact is curated (compat matrix update harvests the registries' newer releases).", style="dim")
    elif overlay.ignored:
        console.print(escape(f"Overlay {overlay.path} ignored: {overlay.ignored}. {overlay.ignored_advice}"), style="yellow")
    else:
        _print_overlay(console, overlay, rows)


#: The mark after a version for where its entry comes from (a curated entry has none).
_ORIGIN_MARK = {"harvested": " (h)", "curated+harvested": " (+h)"}


def _matrix_table(key: str, entries: list[dict[str, Any]], show_sources: bool) -> Any:
    """One package's table: its columns, a row per entry (marked unverified / harvested), its sources if asked."""
    from rich.table import Table  # imported here: see _print_resolution

    title, columns = _TABLES.get(key, (key, _TABLES["torch"][1][:2]))  # a component without its own columns: version, wheels
    table = Table(title=f"{title} ({len(entries)})", title_justify="left", header_style="bold", show_lines=False)
    for column, _ in columns:
        table.add_column(column)
    if show_sources:
        table.add_column("source")
    for e in entries:
        cells = [cell(e) for _, cell in columns]
        if not e["verified"]:
            cells[0] += " ?"
        cells[0] += _ORIGIN_MARK.get(e.get("origin"), "")
        if show_sources:
            cells.append("\n".join(e["sources"]))
        table.add_row(*(escape(c) for c in cells))
    return table


def _print_overlay(console: Console, overlay: Any, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    """What the overlay of compat matrix update adds: its harvest, the hosts it did not read, what it skipped or disagrees
    with, and the pairings tested here for the packages shown."""
    if overlay.read_at:
        console.print(escape(f"(h) = harvested from a registry, kept in the overlay {overlay.path} (read {overlay.read_at}, {overlay.age()}): "
                             f"{plural(len(overlay.harvested), 'release')}; (+h) = a curated entry with facts the overlay added"), style="dim")
    else:
        console.print(escape(f"The overlay {overlay.path} holds no harvest (compat matrix update has not written it)."), style="dim")
    for line in overlay.hosts_unread:
        console.print(escape(f"  not read by that update: {line}"), style="dim")
    for line in overlay.skipped:
        console.print(escape(f"SKIPPED (overlay) {line}"), style="yellow")
    for line in overlay.disagreements:
        console.print(escape(f"DISAGREE {line}"), style="yellow")
    for record in overlay.tested:
        if record.component.distribution in rows:
            console.print(escape(f"TESTED {record.note()} (tested-here evidence, compat matrix verify)"), style="green" if record.works else "yellow")


# --- findings: compat doctor / check, compat export --validate --------------------------------------------------------

_STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def findings_header(command: str, snapshot) -> str:
    """The first line of doctor's and check's report: what was inspected."""
    return f"compat {command} · {snapshot.executable} (Python {snapshot.python}) · {snapshot.platform.tag}"


def render_findings(console: Console, header: str, findings: Sequence[Finding], verbose: bool = False, live: Optional[dict[str, Any]] = None) -> None:
    """Findings grouped by area (PASS/WARN/FAIL/SKIP, the evidence and the fix of what did not pass), then the verdict."""
    console.print(escape(header), style="dim")
    if live and live.get("launcher") and not live.get("error"):
        _print_live_run(console, live)
    area = None
    for finding in findings:
        if finding.area != area:
            area = finding.area
            console.print(f"\n[bold]{area}[/]")
        _print_finding(console, finding, verbose)
    if live and verbose:
        _print_live_output(console, live)
    from ..findings import summary_counts  # not render/json.py: the text path loads no JSON builders

    counts = summary_counts(findings)
    verdict = "[bold red]FAIL[/]" if counts["fail"] else "[bold yellow]OK with warnings[/]" if counts["warn"] else "[bold green]OK[/]"
    console.print(f"\n{verdict}: {counts['fail']} failed, {plural(counts['warn'], 'warning')}, {counts['pass']} passed, {counts['skip']} skipped")


def _print_live_run(console: Console, live: dict[str, Any]) -> None:
    """One line for the live run: launcher, backend (marked when it is the test fixture), world size, time."""
    backend = live.get("backend") or "no backend"
    if live.get("backend_is_fixture"):
        backend += " (TEST FIXTURE, not oneCCL)"
    console.print(escape(f"live: {live['launcher']} ({live.get('flavor')}), {backend}, world size {live.get('world_size')}, {live.get('seconds', 0):.1f} s"), style="dim")


def _print_finding(console: Console, finding: Finding, verbose: bool) -> None:
    """A finding's status line; its evidence and fix when it did not pass (the evidence of every finding with verbose)."""
    style = _STATUS_STYLE[finding.status.value]
    console.print(f"  [{style}]{finding.status.word:<4}[/] {escape(finding.id)}: {escape(finding.summary)}")
    failed = finding.status.value in ("fail", "warn")
    if not (failed or verbose):
        return
    for line in finding.evidence:
        console.print(f"         {escape(line)}", style="dim")
    if finding.fix and failed:
        console.print(f"         fix: {escape(finding.fix)}", style="cyan")


def _print_live_output(console: Console, live: dict[str, Any]) -> None:
    """What each rank and each launcher process of the live run wrote (verbose)."""
    for rank in live.get("ranks", []):
        name = f"rank {rank['rank']}" if rank["rank"] is not None else f"pid {rank['pid']}"
        console.print(f"\n[bold]{escape(name)}[/] output (stage {escape(str(rank['stage']))}):")
        console.print(escape(rank["output"].rstrip() or "(nothing)"), style="dim", highlight=False)
    for process in live.get("launcher_processes", []):
        if process["output"].strip():
            console.print(f"\n[bold]launcher[/] output ({escape(' '.join(process['command'][:3]))} ...):")
            console.print(escape(process["output"].rstrip()), style="dim", highlight=False)


def render_check_list(console: Console, checks) -> None:
    """``--list``: every check's id, kind and what it checks (doctor: the live ones too)."""
    from rich.table import Table

    table = Table(show_edge=False, box=None, header_style="bold")
    table.add_column("id")
    table.add_column("kind")
    table.add_column("what it checks")
    for item in checks:
        table.add_row(item.id, "static" if item.static else "import probe", escape(item.description))
    if any(not item.static for item in checks):  # doctor: the live area too
        for cid, description in LIVE_CHECKS:
            table.add_row(cid, "--live", description)
    console.print(table)


LIVE_CHECKS = (
    ("live.launch", "the launcher (spawn, torchrun, mpirun) started every rank"),
    ("live.imports", "every rank imports torch, IPEX and the oneCCL bindings"),
    ("live.backend", "which backend the ranks used (ccl when the bindings register it, else gloo) and why"),
    ("live.world", "the ranks got their rank variables and formed one group of the expected size"),
    ("live.allreduce", "fp32 and bf16 allreduce results are exact"),
    ("live.bandwidth", "allreduce bandwidth at 1/16/64 MiB next to the memory-copy bandwidth"),
    ("live.trainer", "a short Trainer run: world size, batch per step, identical parameters, loss scale, IPEX applied"),
    ("live.network", "host names, MASTER_ADDR and interface variables work between the hosts; compat reaches MASTER_ADDR:PORT when the group did not form"),
    ("live.hang", "no rank hung (a rank that never joins, a collective that never returns)"),
    ("live.ranks", "every rank finished and exited cleanly; the rank that failed first is named"),
    ("live.cleanup", "no process of the run is left"),
)


# --- compat translate, download, install ------------------------------------------------------------------------------


def translate_text(result, environment=None) -> str:  # noqa: ANN001
    """The translated command (shell-quoted: eval runs it) after one comment line, then each change, what cannot work
    and the notes, as comments. ``environment``: (launcher, eval line, plan) of a ccl command (cli/translate.py, _translated_environment):
    the oneCCL environment compat env --launcher exports, each line as a comment."""
    import shlex

    accelerate = f" / accelerate {result.accelerate}" if result.accelerate else ""
    lines = [f"# for transformers {result.transformers}{accelerate}", shlex.join(result.argv)]
    lines += [f"# {edit.before} -> {edit.after or '(dropped)'}: {edit.why}" for edit in result.edits]
    lines += [f"# CANNOT WORK: {line}" for line in result.blocking]
    lines += [f"# note: {line}" for line in result.warnings]
    if environment is not None:
        launcher, line, plan = environment
        under = f" under {launcher}" if launcher else ""
        if plan is None:
            lines.append(f"# note: ccl{under} needs the oneCCL environment and CCL_WORKER_COUNT>=1: {line}")
        else:
            from ..shell import EnvPlan, format_env

            lines.append(f"# note: ccl{under} needs this environment ({line} sets it):")
            lines += [f"#   {text}" for text in format_env(EnvPlan(plan.exports, (), plan.additions), "bash").splitlines()]
    return "\n".join(lines) + "\n"


def download_text(count: int, dest: str, python: str, platform: str, again: Sequence[str]) -> str:
    """What ``compat download`` made, and the command that installs it on the other machine."""
    import shlex

    return (f"{count} wheels in {dest} for Python {python} on {platform}; install them with:\n"
            f"  {shlex.join(['compat', 'install', '--offline', '--wheelhouse', dest, *again])}\n")


def install_plan_lines(python: str, origin: str, platform: str, plan) -> list[str]:
    """``compat install``'s first lines (stderr): the target and each planned package with its host."""
    lines = [f"compat install: Python {python} ({origin}) · {platform}"]
    lines += [f"  plan: {package.pin:<45} from {package.location.host_id} {package.location.url}" for package in plan.packages]
    return lines


def dry_run_lines(plan, installed: Mapping[str, str]) -> list[str]:
    """``compat install --dry-run``: what would be installed or replaced (``installed``: canonical name -> version)."""
    from ..names import canonical_name

    lines = []
    for package in plan.packages:
        before = installed.get(canonical_name(package.distribution))
        after = f"{package.version}{package.local_label}"
        if before is None:
            lines.append(f"  would install {package.distribution} {after}")
        elif before != after:
            lines.append(f"  would replace {package.distribution} {before} -> {after} (needs --yes)")
    lines.append("  (dependencies are planned by pip at install time; this is the planned set only)")
    return lines


def verification_lines(findings: Sequence[Finding], ok: bool) -> list[str]:
    """``compat install``'s last lines: the verification's findings and the verdict."""
    lines = ["verification:"]
    lines += [f"  {f.status.word} {f.id}: {f.summary}" for f in findings if f.status.value != "skip"]
    lines.append("OK: installed and verified" if ok else "FAIL: installed, but the verification above failed")
    return lines
