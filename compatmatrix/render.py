"""Output: rich text for people (colour only on a terminal, NO_COLOR honoured), versioned JSON for machines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .console import JSON_SCHEMA_VERSION
from .matrix.model import COMPONENT_ORDER, Component, Matrix
from .resolve import Conflict, Outcome, Resolution
from .rules import Candidate, ipex_accepts_torch, python_list, range_text, yanked_wheels

# --- resolve ---------------------------------------------------------------------------------


def _index_json(candidate: Candidate) -> dict[str, Any]:
    return {
        "host": candidate.host.id,
        "url": candidate.host.url,
        "style": candidate.host.style,
        "pip_flag": candidate.host.pip_flag,
        "local_label": candidate.local_label,
    }


def _sources(candidate: Candidate) -> list[str]:
    sources = list(candidate.release.provenance.sources)
    if candidate.wheels is not None:
        sources += [s for s in candidate.wheels.provenance.sources if s not in sources]
    return sources


def _picks_json(picks: Mapping[Component, Candidate]) -> dict[str, str]:
    return {c.distribution: str(picks[c].version) for c in COMPONENT_ORDER if c in picks}


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    request = outcome.request
    data: dict[str, Any] = {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "resolve",
        "ok": outcome.ok,
        "python": request.python.label,
        "python_origin": request.python.origin,
        "platform": request.platform.tag,
        "profile": request.profile,
        "components": [c.distribution for c in request.ordered_components],
        "constraints": {c.distribution: str(s) for c, s in request.specifiers.items()},
        "features": [f"{p}:{n}" for p, n in request.features],
        "packages": {},
        "indexes": {},
        "explanation": [],
        "notes": [],
        "alternatives": [],
        "unsupported": False,
        "sources": {},
        "yanked": {},
    }
    if isinstance(outcome, Resolution):
        picks = outcome.picks
        data["packages"] = _picks_json(picks)
        data["indexes"] = {c.distribution: _index_json(picks[c]) for c in COMPONENT_ORDER if c in picks}
        data["explanation"] = list(outcome.reasons)
        data["notes"] = list(request.notes) + list(outcome.notes)
        data["yanked"] = {
            c.distribution: (yanked.yanked_reason or "yanked")
            for c in COMPONENT_ORDER
            if c in picks and (yanked := yanked_wheels(picks[c].release)) is not None
        }
        data["sources"] = {
            c.distribution: _sources(picks[c])
            for c in COMPONENT_ORDER
            if c in picks
        }
    else:
        data["explanation"] = list(outcome.reasons)
        data["notes"] = list(request.notes)
        data["unsupported"] = outcome.unsupported
        data["alternatives"] = [
            {
                "change": alt.change,
                "python": alt.resolution.request.python.label,
                "profile": alt.resolution.request.profile,
                "constraints": {c.distribution: str(s) for c, s in alt.resolution.request.specifiers.items()},
                "packages": _picks_json(alt.resolution.picks),
                "indexes": {c.distribution: _index_json(alt.resolution.picks[c]) for c in COMPONENT_ORDER if c in alt.resolution.picks},
            }
            for alt in outcome.alternatives
        ]
    return data


def _set_text(picks: Mapping[Component, Candidate]) -> str:
    return ", ".join(f"{c.label} {picks[c].version}" for c in COMPONENT_ORDER if c in picks)


def render_outcome(console: Console, outcome: Outcome) -> None:
    request = outcome.request
    constraints = " ".join(f"{c.label}{s}" for c, s in request.specifiers.items())
    header = f"Python {request.python.label} ({request.python.origin}) · {request.platform.tag}"
    if request.profile:
        header = f"profile {request.profile} · " + header
    if constraints:
        header += f" · {constraints}"
    console.print(escape(header), style="dim")
    for note in request.notes:
        console.print(f"  note: {escape(note)}", style="dim")
    if isinstance(outcome, Resolution):
        console.print("[bold green]OK[/] a consistent set exists:")
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("package")
        table.add_column("version")
        table.add_column("from")
        for component in COMPONENT_ORDER:
            if component not in outcome.picks:
                continue
            pick = outcome.picks[component]
            label = f" ({pick.local_label})" if pick.local_label else ""
            source = "pypi" if pick.host.id == "pypi" else f"{pick.host.id}  {pick.host.pip_flag} {pick.host.url}{label}"
            table.add_row(component.distribution, str(pick.version), escape(source))
        console.print(table)
        if outcome.reasons:
            console.print("\n[bold]Why these versions[/]")
            for reason in outcome.reasons:
                console.print(f"  - {escape(reason)}")
        if outcome.notes:
            console.print("\n[bold]Notes[/]")
            for note in outcome.notes:
                console.print(f"  ! {escape(note)}", style="yellow")
        return
    assert isinstance(outcome, Conflict)
    if outcome.unsupported:
        console.print("[bold red]NOT SUPPORTED[/] " + escape(outcome.reasons[0]))
        return
    console.print("[bold red]NO SET[/] no consistent set exists, because:")
    for reason in outcome.reasons:
        console.print(f"  x {escape(reason)}" if not reason.startswith("  ") else f"    {escape(reason.strip())}")
    if outcome.alternatives:
        console.print("\n[bold]What would work[/]")
        for alt in outcome.alternatives:
            console.print(f"  -> {escape(alt.change)}: {escape(_set_text(alt.resolution.picks))}", style="green")
    else:
        console.print("\nNo nearby change (one constraint dropped, another Python) gives a consistent set.")


# --- matrix ----------------------------------------------------------------------------------


def _wheels_json(wheels) -> list[dict[str, Any]]:
    return [
        {
            "host": w.host,
            "python": [f"{v.major}.{v.minor}" for v in sorted(w.python)],
            "local_label": w.local_label,
            "yanked": w.yanked,
            "verified": w.provenance.verified,
        }
        for w in wheels
    ]


def _provenance_json(provenance) -> dict[str, Any]:
    return {"sources": list(provenance.sources), "verified": provenance.verified, "note": provenance.note}


def matrix_rows(matrix: Matrix, packages: Sequence[Component], python: Optional[Version], torch: Optional[SpecifierSet]) -> dict[str, list[dict[str, Any]]]:
    """The releases ``compat matrix`` lists, filtered, as plain dicts (shared by JSON and the tables)."""

    def python_ok(pythons) -> bool:
        return python is None or python in pythons

    def torch_ok(version: Version) -> bool:
        return torch is None or torch.contains(version, prereleases=True)

    rows: dict[str, list[dict[str, Any]]] = {}
    if Component.TORCH in packages:
        rows["torch"] = [
            {"version": str(r.version), "requires_python": str(r.requires_python or ""), "released": r.released,
             "wheels": _wheels_json(r.wheels), **_provenance_json(r.provenance)}
            for r in matrix.torch
            if torch_ok(r.version) and any(python_ok(w.python) for w in r.wheels)
        ]
    if Component.IPEX in packages:
        rows[Component.IPEX.distribution] = [
            {"version": str(r.version), "module": r.module, "torch": str(r.torch), "torch_accepts": str(r.torch_accepts),
             "guard": r.guard, "released": r.released, "wheels": _wheels_json(r.wheels), **_provenance_json(r.provenance)}
            for r in matrix.ipex
            if any(python_ok(w.python) for w in r.wheels) and (torch is None or any(ipex_accepts_torch(r, t.version) and torch_ok(t.version) for t in matrix.torch))
        ]
    if Component.CCL in packages:
        rows[Component.CCL.distribution] = [
            {"version": str(r.version), "module": r.module, "torch": str(r.torch), "has_cwd": r.has_cwd, "setvars": r.setvars,
             "oneccl": r.oneccl, "released": r.released, "wheels": _wheels_json(r.wheels), **_provenance_json(r.provenance)}
            for r in matrix.ccl
            if torch_ok(r.torch) and any(python_ok(w.python) for w in r.wheels)
        ]
    for component, lines in ((Component.TRANSFORMERS, matrix.transformers), (Component.ACCELERATE, matrix.accelerate)):
        if component not in packages:
            continue
        rows[component.distribution] = [
            {"line": str(line.line), "latest": str(line.latest), "requires_python": str(line.requires_python or ""),
             "torch_min": str(line.torch_min or ""), "accelerate_min": str(line.accelerate_min or ""),
             "features": _line_features(matrix, component, line),
             **_provenance_json(line.provenance)}
            for line in lines
            if (python is None or line.requires_python is None or line.requires_python.contains(Version(f"{python}.0")))
            and (torch is None or line.torch_min is None or any(torch_ok(t.version) and t.version >= line.torch_min for t in matrix.torch))
        ]
    return rows


def _line_features(matrix: Matrix, component: Component, line) -> list[str]:
    """Features of a line: the name when every release has it, name (range) when only some do."""
    out = []
    for feature in matrix.features_of(component.distribution):
        having = [v for v in line.versions if feature.present_in(v)]
        if len(having) == len(line.versions):
            out.append(feature.name)
        elif having:
            out.append(f"{feature.name} ({range_text(feature.versions)})")
    return out


def matrix_json(matrix: Matrix, rows: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "matrix",
        "matrix_schema_version": matrix.schema_version,
        "registry_checked": matrix.registry_checked,
        "python_range": [str(v) for v in matrix.policy.python_range],
        "releases": dict(rows),
        "hosts": {h.id: {"url": h.url, "style": h.style, "verified": h.provenance.verified} for h in matrix.hosts.values()},
        "profiles": {
            p.name: {"description": p.description, "components": sorted(c.distribution for c in p.components)}
            for p in matrix.profiles.values()
        },
        "end_of_life": [
            {"package": e.package, "status": e.status, "last_release": str(e.last_release), "date": e.date,
             "statement": e.statement, "advice": e.advice, "sources": list(e.provenance.sources)}
            for e in matrix.eol
        ],
    }


def _coverage(wheels: list[dict[str, Any]]) -> str:
    parts = []
    for w in wheels:
        pythons = [Version(p) for p in w["python"]]
        mark = "" if w["verified"] else "?"
        yanked = " yanked" if w["yanked"] else ""
        parts.append(f"{w['host']}{mark}: {python_list(pythons)}{yanked}")
    return "\n".join(parts)


def render_matrix(console: Console, matrix: Matrix, rows: Mapping[str, list[dict[str, Any]]], show_sources: bool) -> None:
    titles = {
        "torch": ("torch", ["version", "python wheels (host: versions)", "released"]),
        Component.IPEX.distribution: ("intel-extension-for-pytorch", ["version", "built for torch", "import check accepts", "python wheels (host: versions)", "module"]),
        Component.CCL.distribution: ("oneccl_bind_pt", ["version", "torch (exact)", "python wheels (host: versions)", "module", "oneCCL"]),
        Component.TRANSFORMERS.distribution: ("transformers", ["line", "latest", "requires python", "torch >=", "accelerate >=", "features"]),
        Component.ACCELERATE.distribution: ("accelerate", ["line", "latest", "requires python", "torch >=", "features"]),
    }
    for key, entries in rows.items():
        title, columns = titles[key]
        table = Table(title=f"{title} ({len(entries)})", title_justify="left", header_style="bold", show_lines=False)
        for column in columns + (["source"] if show_sources else []):
            table.add_column(column)
        for e in entries:
            if key == "torch":
                cells = [e["version"], _coverage(e["wheels"]), e["released"]]
            elif key == Component.IPEX.distribution:
                cells = [e["version"], e["torch"], e["torch_accepts"], _coverage(e["wheels"]), e["module"]]
            elif key == Component.CCL.distribution:
                cells = [e["version"], e["torch"], _coverage(e["wheels"]), e["module"], e["oneccl"]]
            elif key == Component.TRANSFORMERS.distribution:
                cells = [e["line"], e["latest"], e["requires_python"], e["torch_min"], e["accelerate_min"], ", ".join(e["features"])]
            else:
                cells = [e["line"], e["latest"], e["requires_python"], e["torch_min"], ", ".join(e["features"])]
            if not e["verified"]:
                cells[0] += " ?"
            if show_sources:
                cells.append("\n".join(e["sources"]))
            table.add_row(*(escape(c) for c in cells))
        console.print(table)
    console.print("? = not verified against its source (see the note in data/matrix.toml)", style="dim")
    for entry in matrix.eol:
        console.print(escape(f"{entry.package}: {entry.status}, last release {entry.last_release}. {entry.advice}"), style="yellow")
    checked = matrix.registry_checked or "never"
    console.print(f"Registry facts last cross-checked against PyPI: {checked}", style="dim")
