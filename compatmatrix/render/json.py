"""Every ``--json`` document compat prints, built here and nowhere else; each has a versioned JSON Schema in
compatmatrix/schemas/ (``SCHEMAS`` in this package's __init__), and tests/cli/test_json_schemas.py runs every command's
``--json`` against it.

A document only grows: a new field is optional in its schema; renaming or removing one is a new ``schema_version``
(``compat env`` is at 2). The core is imported inside each builder, so a command loads only what its own document
needs. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..console import JSON_SCHEMA_VERSION

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from ..findings import Finding
    from ..matrix.model import Component, Matrix
    from ..rules import Candidate
    from ..search import Outcome

# --- compat resolve (resolve-v1.json) ---------------------------------------------------------------------------------


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
    from ..matrix.model import COMPONENT_ORDER

    return {c.distribution: str(picks[c].version) for c in COMPONENT_ORDER if c in picks}


def _pairings_json(picks: Mapping[Component, Candidate]) -> dict[str, dict[str, Any]]:
    """The graded pairings with torch, with their sources: oneccl_bind_pt (built-for, reported-working, unverified);
    torchvision / torchaudio as they declare torch (pinned, declared, verified; unverified when they declare none; tested-here),
    with the declaration itself and whether the pairing rests on it alone."""
    from ..matrix.model import COMPONENT_ORDER, Component
    from ..rules import pairing_evidence

    torch = picks.get(Component.TORCH)
    out: dict[str, dict[str, Any]] = {}
    for component in COMPONENT_ORDER:
        pick = picks.get(component)
        pairing = pairing_evidence(pick.release, torch.version) if pick is not None and torch is not None and component is not Component.TORCH else None
        if pairing is not None:
            out[component.distribution] = {"torch": str(torch.version), "evidence": pairing.evidence,  # type: ignore[union-attr]
                                           "sources": list(pairing.provenance.sources), "verified": pairing.provenance.verified}
            requirement = getattr(pick.release, "requirement", None)  # type: ignore[union-attr]
            if getattr(pick.release, "package", None) is not None:  # a companion: what it declares, as declared ("" none)
                out[component.distribution]["declares"] = "" if requirement is None else str(requirement)
                out[component.distribution]["declared_only"] = pairing.evidence == "declared"
                if pick.release.stable_abi:  # type: ignore[union-attr]
                    out[component.distribution]["stable_abi"] = pick.release.stable_abi  # type: ignore[union-attr]
    return out


def _unlisted_json(picks: Mapping[Component, Candidate]) -> dict[str, dict[str, Any]]:
    """Picks the matrix does not list (an exact pin it has not caught up with): the facts missing, the nearest listed
    release and the torch it pins, and the commands that settle it."""
    from ..matrix.model import COMPONENT_ORDER, Component, UnlistedRelease

    torch = picks.get(Component.TORCH)
    out: dict[str, dict[str, Any]] = {}
    for component in COMPONENT_ORDER:
        pick = picks.get(component)
        if pick is not None and isinstance(pick.release, UnlistedRelease):
            release = pick.release
            partner = torch.version if torch is not None and component is not Component.TORCH else None
            out[component.distribution] = {"version": str(release.version), "missing": list(release.missing),
                                           "nearest": str(release.nearest or ""), "nearest_torch": str(release.nearest_torch or ""),
                                           "settle": release.settle(partner)}
    return out


def _known_bad_json(picks: Mapping[Component, Candidate]) -> list[dict[str, Any]]:
    from ..matrix.model import COMPONENT_ORDER, Component
    from ..rules import known_bad

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
    """``compat resolve --json`` for an answer (a set, or why there is none and what would work)."""
    from ..matrix.model import COMPONENT_ORDER
    from ..search import Resolution

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
        data["unlisted"] = _unlisted_json(picks)
    else:
        data["explanation"] = list(outcome.reasons)
        data["notes"] = list(request.notes)
        data["unsupported"] = outcome.unsupported
        data["alternatives"] = [
            {
                "change": alt.change,
                "why": alt.reason,
                "python": alt.resolution.request.python.label,
                "profile": alt.resolution.request.profile,
                "constraints": {c.distribution: str(s) for c, s in alt.resolution.request.specifiers.items()},
                "packages": _picks_json(alt.resolution.picks),
                "indexes": {c.distribution: _index_json(alt.resolution.picks[c]) for c in COMPONENT_ORDER if c in alt.resolution.picks},
            }
            for alt in outcome.alternatives
        ]
    return data


def resolve_document(outcome: Outcome, files: Optional[Sequence[str]] = None, passthrough: Sequence[str] = ()) -> dict[str, Any]:
    """``compat resolve --json``: the answer, and with ``-r`` the files read and what passes through them untouched."""
    document = outcome_json(outcome)
    if files is not None:
        document["passthrough"] = list(passthrough)
        document["files"] = list(files)
    return document


# --- compat matrix (matrix-v1.json) -----------------------------------------------------------------------------------


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
    from ..matrix.model import Component, LibraryLine

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
    elif hasattr(release, "torch"):  # torchvision, torchaudio: the torch they pin ("": a floor, a range or none), what they declare
        requirement = getattr(release, "requirement", None)
        row.update(torch=str(release.torch or ""), torch_requires=str(requirement or ""))
        if getattr(release, "requires_python", None) is not None:
            row.update(requires_python=str(release.requires_python))
        if getattr(release, "package", None) is not None:
            row.update(verified_with=str(release.verified_with or ""), stable_abi=release.stable_abi)
    row["wheels"] = _wheels_json(release.wheels)
    return row


def matrix_rows(matrix: Matrix, packages: Sequence[Component], python: Optional[Version], torch: Optional[SpecifierSet],
                overlay: Any = None) -> dict[str, list[dict[str, Any]]]:
    """The releases ``compat matrix`` lists, filtered, as plain dicts (shared by the JSON document and the tables).

    ``python``: releases with a wheel for it (library lines: whose Requires-Python admits it);
    ``torch``: releases that pair with some torch in that range.
    """
    from packaging.version import Version

    from ..matrix.model import COMPONENT_ORDER, Component, LibraryLine
    from ..rules import fits

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
             **_provenance_json(r.provenance), "origin": _origin(component, r, overlay)}
            for r in matrix.releases[component]
            if python_ok(r) and torch_ok(component, r)
        ]
    return rows


def _origin(component: Component, release: Any, overlay: Any) -> str:
    """``curated`` (the bundled matrix), ``harvested`` (the overlay added it), ``curated+harvested`` (the overlay added
    facts to a curated entry: a line's newer releases, another host's wheels, a floor)."""
    if overlay is None or not overlay.harvested:
        return "curated"
    from ..matrix.model import LibraryLine

    key = str(release.line) if isinstance(release, LibraryLine) else str(release.version)
    if (component, key) in overlay.harvested:
        return "harvested"
    if isinstance(release, LibraryLine) and any((component, str(v)) in overlay.harvested for v in release.versions):
        return "curated+harvested"  # a curated line with releases the overlay added
    if any(" harvested: " in w.provenance.note for w in release.wheels):
        return "curated+harvested"  # a wheel set or a floor the overlay added
    return "curated"


def overlay_json(overlay: Any) -> Optional[dict[str, Any]]:
    if overlay is None:
        return None
    return {"path": overlay.path, "read_at": overlay.read_at or None, "age": overlay.age() if overlay.read_at else None,
            "used": not overlay.ignored, "ignored_because": overlay.ignored or None,
            "harvested": sorted(f"{c.distribution} {v}" for c, v in overlay.harvested), "facts_added_to_curated": overlay.filled,
            "disagreements": list(overlay.disagreements), "hosts_unread": list(overlay.hosts_unread),
            "tested": [t.to_json() for t in overlay.tested], "skipped": list(overlay.skipped)}


def _line_features(matrix: Matrix, component: Component, line) -> list[str]:
    """Features of a line: the name when every release has it, name (range) when only some do."""
    from ..sentences import range_text

    out = []
    for feature in matrix.features_of(component.distribution):
        having = [v for v in line.versions if feature.present_in(v)]
        if len(having) == len(line.versions):
            out.append(feature.name)
        elif having:
            out.append(f"{feature.name} ({range_text(feature.versions)})")
    return out


def matrix_json(matrix: Matrix, rows: Mapping[str, list[dict[str, Any]]], overlay: Any = None) -> dict[str, Any]:
    """``compat matrix --json``: the (filtered) releases, hosts, profiles and end-of-life statements, and the overlay."""
    return {
        "overlay": overlay_json(overlay),
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


# --- findings: compat doctor / check (findings-v1.json), compat export --validate (export-validate-v1.json) --------------


def summary_counts(findings: Iterable[Finding]) -> dict[str, int]:
    from ..findings import summary_counts as counts  # the text summary's too (without this module)

    return counts(findings)


def findings_json(command: str, snapshot, findings: Sequence[Finding], files: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """``compat doctor --json`` / ``compat check --json`` (the callers add "host", "hosts" and "live"); ``files``:
    ``compat check -r``'s files, which are judged instead of an interpreter ("python" is then null)."""
    counts = summary_counts(findings)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": command,
        "ok": counts["fail"] == 0,
        "python": snapshot.executable if files is None else None,
        **({"files": list(files)} if files is not None else {}),
        "python_version": str(snapshot.python),
        "platform": snapshot.platform.tag,
        "summary": counts,
        "checks": [f.to_json() for f in findings],
    }


def validate_json(file: str, kind: str, documents: int, versions: Mapping[str, Optional[str]], versions_from: str,
                  findings: Sequence[Finding]) -> dict[str, Any]:
    """``compat export --validate FILE --json``: what the file is, the versions its training command was judged
    against, and the findings (as doctor's)."""
    counts = summary_counts(findings)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "export",
        "validate": file,
        "kind": kind,
        "documents": documents,
        "versions": dict(versions),
        "versions_from": versions_from,
        "ok": counts["fail"] == 0,
        "summary": counts,
        "checks": [f.to_json() for f in findings],
    }


# --- compat install / download (install-v1.json, download-v1.json) --------------------------------------------------


def install_plan_json(python: str, plan) -> dict[str, Any]:
    """``compat install --dry-run --json``: the planned set and each package's host."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": "install", "dry_run": True, "python": python,
            "packages": {p.component.distribution: p.pin for p in plan.packages},
            "hosts": {p.component.distribution: p.location.url for p in plan.packages}}


def install_result_json(result) -> dict[str, Any]:
    """``compat install --json``: installed (verified or not), what changed, the verification's findings."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": "install", "ok": result.ok, "state": "installed", "installer": result.installer,
            "changes": [{"name": c.name, "before": c.before, "after": c.after, "kind": c.kind} for c in result.changes],
            "checks": [f.to_json() for f in result.findings]}


def install_error_json(error) -> dict[str, Any]:
    """``compat install --json`` refused or failed (the environment as ``state`` says), with the findings that said so."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": "install", "ok": False, "state": error.state, "error": error.message, "fix": error.fix,
            "checks": [f.to_json() for f in error.findings]}


def recover_json(message: str, restore: bool) -> dict[str, Any]:
    """``compat install --restore|--discard-snapshot --json``: what was done, in the sentence the text output prints."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": "install", "ok": True, "state": "restored" if restore else "snapshot-discarded",
            "message": message}


def download_json(dest: str, files: Sequence[Any], plan) -> dict[str, Any]:
    """``compat download --json``: the wheelhouse folder, its wheels, the planned pins."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": "download", "dest": dest, "files": [f.name for f in files],
            "packages": {p.component.distribution: p.pin for p in plan.packages}}


# --- compat translate, env, launch ------------------------------------------------------------------------------------


def translate_json(result, environment=None) -> dict[str, Any]:  # noqa: ANN001
    """``compat translate --json`` (translate-v1.json). ``environment``: as render/text.translate_text takes it."""
    document = {"schema_version": JSON_SCHEMA_VERSION, "command": "translate", "transformers": str(result.transformers),
                "accelerate": str(result.accelerate) if result.accelerate else None, "argv": list(result.argv),
                "edits": [{"before": e.before, "after": e.after, "why": e.why} for e in result.edits],
                "warnings": list(result.warnings), "blocking": list(result.blocking)}
    if environment is not None:
        launcher, line, plan = environment
        document["environment"] = {"launcher": launcher, "command": line, "exports": dict(plan.exports) if plan else None,
                                   "additions": {k: {"prepend": list(a.prepend), "append": list(a.append)} for k, a in plan.additions.items()} if plan else None,
                                   "comments": list(plan.comments) if plan else []}
    return document


def env_json(plan, python: str) -> dict[str, Any]:
    """``compat env --json`` (env-v2.json: path lists under "additions")."""
    return plan.to_json(python)


def launch_json(prepared) -> dict[str, Any]:
    """``compat launch --print --json`` (launch-v1.json), written by placement/render.py, which knows the plan."""
    from ..placement.render import launch_json as plan_json

    return plan_json(prepared.plan, prepared.invocation, prepared.rank_env, prepared.notes)
