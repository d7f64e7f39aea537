"""Output: rich text for people (colour only on a terminal, NO_COLOR honoured), versioned JSON for machines."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .console import JSON_SCHEMA_VERSION, escape
from .matrix.model import COMPONENT_ORDER, Component, LibraryLine, Matrix
from .resolve import Conflict, Outcome, Resolution
from .rules import Candidate, fits, known_bad, pairing_evidence
from .sentences import depth, python_list, range_text, sentence

if TYPE_CHECKING:
    from rich.console import Console

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


def _pairings_json(picks: Mapping[Component, Candidate]) -> dict[str, dict[str, Any]]:
    """The graded pairings with torch (oneccl_bind_pt): built-for, reported-working or unverified, with their sources."""
    torch = picks.get(Component.TORCH)
    out: dict[str, dict[str, Any]] = {}
    for component in COMPONENT_ORDER:
        pick = picks.get(component)
        pairing = pairing_evidence(pick.release, torch.version) if pick is not None and torch is not None and component is not Component.TORCH else None
        if pairing is not None:
            out[component.distribution] = {"torch": str(torch.version), "evidence": pairing.evidence,  # type: ignore[union-attr]
                                           "sources": list(pairing.provenance.sources), "verified": pairing.provenance.verified}
    return out


def _known_bad_json(picks: Mapping[Component, Candidate]) -> list[dict[str, Any]]:
    torch = picks.get(Component.TORCH)
    out = []
    for component in COMPONENT_ORDER:
        pick = picks.get(component)
        bad = known_bad(pick.release, pick.version, torch.version, torch.local_label) if pick is not None and torch is not None and component is not Component.TORCH else None
        if bad is not None:
            out.append({"torch": str(bad.torch), "package": component.distribution, "version": str(bad.version), "failure": bad.failure,
                        "status": bad.status, "sources": list(bad.provenance.sources)})
    return out


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
            c.distribution: (yank.reason or "yanked")
            for c in COMPONENT_ORDER
            if c in picks and (yank := picks[c].release.yank(picks[c].version)) is not None
        }
        data["sources"] = {
            c.distribution: _sources(picks[c])
            for c in COMPONENT_ORDER
            if c in picks
        }
        data["pairings"] = _pairings_json(picks)
        data["known_bad"] = _known_bad_json(picks)
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
    # rich's tables are imported where one is printed: --json output and a conflict need none (start-up)
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
        from rich.table import Table

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
    for item in outcome.explanation:
        console.print(f"    {escape(sentence(item))}" if depth(item) else f"  x {escape(sentence(item))}")
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
            "glibc_min": str(w.glibc_min) if w.glibc_min is not None else None,
            "verified": w.provenance.verified,
        }
        for w in wheels
    ]


def _provenance_json(provenance) -> dict[str, Any]:
    return {"sources": list(provenance.sources), "verified": provenance.verified, "note": provenance.note}


def _release_row(component: Component, release: Any) -> dict[str, Any]:
    """One release as ``compat matrix`` shows it (the same dict for JSON and the tables)."""
    if isinstance(release, LibraryLine):
        return {"line": str(release.line), "latest": str(release.latest), "requires_python": str(release.requires_python or ""),
                "torch_min": str(release.torch_min or ""), "accelerate_min": str(release.accelerate_min or "")}
    row: dict[str, Any] = {"version": str(release.version)}
    if component is Component.TORCH:
        row.update(requires_python=str(release.requires_python or ""), released=release.released)
    elif component is Component.IPEX:
        row.update(module=release.module, torch=str(release.torch), torch_accepts=str(release.torch_accepts), guard=release.guard, released=release.released,
                   isa_min=release.isa_min.level if release.isa_min is not None else None)
    elif component is Component.CCL:
        row.update(module=release.module, torch=str(release.torch), has_cwd=release.has_cwd, setvars=release.setvars, oneccl=release.oneccl,
                   released=release.released,
                   pairings=[{"torch": str(p.torch), "evidence": p.evidence, **_provenance_json(p.provenance)} for p in release.pairings])
    elif getattr(release, "torch", None) is not None:  # torchvision, torchaudio: the torch they pin
        row.update(torch=str(release.torch))
    row["wheels"] = _wheels_json(release.wheels)
    return row


def matrix_rows(matrix: Matrix, packages: Sequence[Component], python: Optional[Version], torch: Optional[SpecifierSet]) -> dict[str, list[dict[str, Any]]]:
    """The releases ``compat matrix`` lists, filtered, as plain dicts (shared by JSON and the tables).

    ``python``: releases with a wheel for it (library lines: whose Requires-Python admits it);
    ``torch``: releases that pair with some torch in that range.
    """
    torches = [t.version for t in matrix.releases[Component.TORCH] if torch is None or torch.contains(t.version, prereleases=True)]

    def python_ok(release: Any) -> bool:
        if python is None:
            return True
        if release.wheels:
            return any(w.has_python(python) for w in release.wheels)
        return release.requires_python is None or release.requires_python.contains(Version(f"{python}.0"))

    def torch_ok(component: Component, release: Any) -> bool:
        if torch is None:
            return True
        if component is Component.TORCH:
            return release.version in torches
        return any(fits(component, release, release.version, Component.TORCH, t) for t in torches)

    rows: dict[str, list[dict[str, Any]]] = {}
    for component in COMPONENT_ORDER:
        if component not in packages:
            continue
        rows[component.distribution] = [
            {**_release_row(component, r), **({"features": _line_features(matrix, component, r)} if isinstance(r, LibraryLine) else {}),
             **_provenance_json(r.provenance)}
            for r in matrix.releases[component]
            if python_ok(r) and torch_ok(component, r)
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


#: The tables of ``compat matrix``: title, then (column, cell) per column.
def _pairings_text(row: Mapping[str, Any]) -> str:
    """"2.5.1 reported-working; others unverified" (docs/MATRIX.md, Evidence)."""
    stated = [f"{p['torch']} {p['evidence']}{'' if p['verified'] else '?'}" for p in row.get("pairings", [])]
    return "; ".join(stated + ["others unverified"])


_TABLES: dict[str, tuple[str, list[tuple[str, Callable[[dict[str, Any]], str]]]]] = {
    "torch": ("torch", [("version", lambda e: e["version"]), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])),
                        ("released", lambda e: e["released"])]),
    Component.IPEX.distribution: ("intel-extension-for-pytorch", [
        ("version", lambda e: e["version"]), ("built for torch", lambda e: e["torch"]), ("import check accepts", lambda e: e["torch_accepts"]),
        ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])), ("module", lambda e: e["module"])]),
    Component.CCL.distribution: ("oneccl_bind_pt", [
        ("version", lambda e: e["version"]), ("built for torch", lambda e: e["torch"]), ("other torch of the series", _pairings_text),
        ("python wheels (host: versions)", lambda e: _coverage(e["wheels"])),
        ("module", lambda e: e["module"]), ("oneCCL", lambda e: e["oneccl"])]),
    Component.TORCHVISION.distribution: ("torchvision", [
        ("version", lambda e: e["version"]), ("torch (pinned)", lambda e: e["torch"]), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"]))]),
    Component.TORCHAUDIO.distribution: ("torchaudio", [
        ("version", lambda e: e["version"]), ("torch (pinned)", lambda e: e["torch"]), ("python wheels (host: versions)", lambda e: _coverage(e["wheels"]))]),
    Component.TRANSFORMERS.distribution: ("transformers", [
        ("line", lambda e: e["line"]), ("latest", lambda e: e["latest"]), ("requires python", lambda e: e["requires_python"]),
        ("torch >=", lambda e: e["torch_min"]), ("accelerate >=", lambda e: e["accelerate_min"]), ("features", lambda e: ", ".join(e["features"]))]),
    Component.ACCELERATE.distribution: ("accelerate", [
        ("line", lambda e: e["line"]), ("latest", lambda e: e["latest"]), ("requires python", lambda e: e["requires_python"]),
        ("torch >=", lambda e: e["torch_min"]), ("features", lambda e: ", ".join(e["features"]))]),
}


def render_matrix(console: Console, matrix: Matrix, rows: Mapping[str, list[dict[str, Any]]], show_sources: bool) -> None:
    from rich.table import Table  # imported here: see render_outcome

    for key, entries in rows.items():
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
            if show_sources:
                cells.append("\n".join(e["sources"]))
            table.add_row(*(escape(c) for c in cells))
        console.print(table)
    console.print("? = not verified against its source (see the note in data/matrix.toml)", style="dim")
    for entry in matrix.eol:
        console.print(escape(f"{entry.package}: {entry.status}, last release {entry.last_release}. {entry.advice}"), style="yellow")
    checked = matrix.registry_checked or "never"
    console.print(f"Registry facts last cross-checked against PyPI: {checked}", style="dim")
