"""Human and JSON output of compat doctor / compat check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .console import JSON_SCHEMA_VERSION, escape

if TYPE_CHECKING:
    from rich.console import Console

_STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def findings_json(command: str, snapshot, findings) -> dict[str, Any]:
    counts = {status: sum(1 for f in findings if f.status.value == status) for status in ("pass", "warn", "fail", "skip")}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": command,
        "ok": counts["fail"] == 0,
        "python": snapshot.executable,
        "python_version": str(snapshot.python),
        "platform": snapshot.platform.tag,
        "summary": counts,
        "checks": [f.to_json() for f in findings],
    }


def render_findings(console: Console, command: str, snapshot, findings, verbose: bool = False, live: Optional[dict[str, Any]] = None) -> None:
    console.print(escape(f"compat {command} · {snapshot.executable} (Python {snapshot.python}) · {snapshot.platform.tag}"), style="dim")
    if live and live.get("launcher") and not live.get("error"):
        backend = live.get("backend") or "no backend"
        if live.get("backend_is_fixture"):
            backend += " (TEST FIXTURE, not oneCCL)"
        console.print(escape(f"live: {live['launcher']} ({live.get('flavor')}), {backend}, world size {live.get('world_size')}, {live.get('seconds', 0):.1f} s"), style="dim")
    area = None
    for finding in findings:
        if finding.area != area:
            area = finding.area
            console.print(f"\n[bold]{area}[/]")
        style = _STATUS_STYLE[finding.status.value]
        console.print(f"  [{style}]{finding.status.word:<4}[/] {escape(finding.id)}: {escape(finding.summary)}")
        if finding.status.value in ("fail", "warn") or verbose:
            for line in finding.evidence:
                console.print(f"         {escape(line)}", style="dim")
            if finding.fix and finding.status.value in ("fail", "warn"):
                console.print(f"         fix: {escape(finding.fix)}", style="cyan")
    if live and verbose:
        for rank in live.get("ranks", []):
            name = f"rank {rank['rank']}" if rank["rank"] is not None else f"pid {rank['pid']}"
            console.print(f"\n[bold]{escape(name)}[/] output (stage {escape(str(rank['stage']))}):")
            console.print(escape(rank["output"].rstrip() or "(nothing)"), style="dim", highlight=False)
        for process in live.get("launcher_processes", []):
            if process["output"].strip():
                console.print(f"\n[bold]launcher[/] output ({escape(' '.join(process['command'][:3]))} ...):")
                console.print(escape(process["output"].rstrip()), style="dim", highlight=False)
    counts = {status: sum(1 for f in findings if f.status.value == status) for status in ("pass", "warn", "fail", "skip")}
    verdict = "[bold red]FAIL[/]" if counts["fail"] else "[bold yellow]OK with warnings[/]" if counts["warn"] else "[bold green]OK[/]"
    console.print(f"\n{verdict}: {counts['fail']} failed, {counts['warn']} warnings, {counts['pass']} passed, {counts['skip']} skipped")


def render_check_list(console: Console, checks) -> None:
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
