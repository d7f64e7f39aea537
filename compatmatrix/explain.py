"""Plain-sentence explanations: why a set was chosen, why no set exists, what would work instead.

Pure functions over the matrix, the request and the candidate table the resolver built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix.model import COMPONENT_ORDER, CclRelease, Component, IpexRelease, LibraryLine, Matrix
from .resolve import Alternative, CandidateTable, Request, Resolution, complete_set, resolve
from .rules import (
    Candidate,
    Rejection,
    all_versions,
    candidates,
    ccl_torch_phrase,
    ipex_torch_phrase,
    is_pin,
    pair_problem,
    releases_of,
    spec_text,
    yanked_wheels,
)

MAX_LISTED = 3
MAX_ALTERNATIVES = 4


def versions_text(versions: Sequence[Version], limit: int = 6) -> str:
    ordered = sorted(set(versions), reverse=True)
    if len(ordered) <= limit:
        return ", ".join(str(v) for v in ordered)
    return ", ".join(str(v) for v in ordered[:limit]) + f", ... ({len(ordered)} in all)"


def _rejection_index(table: CandidateTable) -> dict[tuple[Component, Version], Rejection]:
    return {(r.component, r.version): r for rejected in table.rejected.values() for r in rejected}


def distance(a: Version, b: Version) -> tuple:
    """How far two versions are apart, release segment by segment (major first)."""
    ra, rb = a.release + (0,) * 4, b.release + (0,) * 4
    return tuple(abs(x - y) for x, y in zip(ra[:4], rb[:4]))


def by_nearness(versions: Sequence[Version], target: Version) -> list[Version]:
    """Releases nearest to ``target`` first: the same major.minor, then by position in release order
    (a step down before a step up)."""
    ordered = sorted(set(versions))
    position = sum(1 for v in ordered if v < target)

    def key(version: Version) -> tuple:
        index = ordered.index(version)
        steps = position - index if version < target else index - position + 1
        return (version.release[:2] != target.release[:2], steps, version > target)

    return sorted((v for v in ordered if v != target), key=key)


def _torch_of(candidate: Candidate) -> Optional[Version]:
    release = candidate.release
    if isinstance(release, (IpexRelease, CclRelease)):
        return release.torch
    if isinstance(release, LibraryLine):
        return release.torch_min
    return None


def nearest_first(items: Sequence[Candidate], torches: Sequence[Version]) -> list[Candidate]:
    """Candidates ordered by how close the torch they need is to the allowed torch releases."""
    if not torches:
        return list(items)

    def key(candidate: Candidate) -> tuple:
        needed = _torch_of(candidate)
        if needed is None:
            return ((99,), -candidate.version.release[0])
        return (min(distance(needed, t) for t in torches), tuple(-x for x in candidate.version.release))

    return sorted(items, key=key)


def _needs_torch(component: Component, candidate: Candidate) -> str:
    release = candidate.release
    if isinstance(release, IpexRelease):
        return f"intel-extension-for-pytorch {candidate.version} {ipex_torch_phrase(release)}"
    if isinstance(release, CclRelease):
        return f"oneccl_bind_pt {candidate.version} {ccl_torch_phrase(release)}"
    if isinstance(release, LibraryLine) and release.torch_min is not None:
        return f"{release.package} {candidate.version} needs torch >= {release.torch_min}"
    return f"{component.label} {candidate.version} fits no allowed torch"


def _torch_versions_for(matrix: Matrix, candidate: Candidate) -> list[Version]:
    """The torch releases in the matrix that ``candidate`` pairs with."""
    return [t.version for t in matrix.torch if pair_problem_for_torch(candidate, t.version) is None]


def pair_problem_for_torch(candidate: Candidate, torch: Version) -> Optional[str]:
    from .rules import torch_pair_problem

    return torch_pair_problem(candidate.component, candidate.release, candidate.version, torch)


def conflict_reasons(matrix: Matrix, request: Request, table: CandidateTable) -> list[str]:
    """Sentences that rule out every candidate set, most fundamental first."""
    reasons: list[str] = []
    low, high = matrix.policy.python_range
    if not (low <= request.python.version <= high):
        reasons.append(
            f"The matrix covers Python {low}–{high}; Python {request.python.label} is outside it, so no curated release fits it."
        )
    empty = [c for c in request.ordered_components if not table.kept[c]]
    for component in empty:
        reasons.extend(_no_candidate_reasons(matrix, request, component, table.rejected[component]))
    if empty:
        return reasons
    reasons.extend(_pairing_reasons(matrix, request, table))
    return reasons or ["No combination of the allowed releases is consistent."]


def _no_candidate_reasons(matrix: Matrix, request: Request, component: Component, rejected: Sequence[Rejection]) -> list[str]:
    spec = request.spec(component)
    label = component.label
    other = [r for r in rejected if r.kind != "user"]
    if spec is not None and not other:
        known = all_versions(matrix, component)
        return [
            f"No {label} release in the matrix matches {spec_text(component, spec)}; "
            f"the matrix knows {label} {known[-1]} to {known[0]}."
        ]
    scope = f"matching {spec_text(component, spec)} " if spec is not None else ""
    python_bound = any(r.kind in ("python", "requires-python") for r in other)
    out = [f"No {label} release {scope}can be used" + (f" for Python {request.python.label}:" if python_bound else " here:")]
    out.extend(f"  {line}" for line in _grouped(other))
    if spec is not None:
        usable, _ = candidates(matrix, component, request.python, None, request.features)
        if usable:
            out.append(f"  (without {spec_text(component, spec)}, these would do: {versions_text([c.version for c in usable], limit=4)})")
    return out


_KIND_ORDER = ("feature", "python", "requires-python", "yanked")


def _grouped(rejections: Sequence[Rejection]) -> list[str]:
    """One line per kind of rejection, with the releases it covers and the most telling example.

    For Python problems the example is the oldest release (the one that comes closest to fitting);
    for the rest it is the newest.
    """
    lines = []
    kinds = sorted({r.kind for r in rejections}, key=lambda k: _KIND_ORDER.index(k) if k in _KIND_ORDER else 99)
    for kind in kinds:
        group = sorted((r for r in rejections if r.kind == kind), key=lambda r: r.version)
        example = group[0] if kind in ("python", "requires-python") else group[-1]
        if len(group) == 1:
            lines.append(example.reason)
            continue
        lines.append(f"{len(group)} releases ({group[0].version} to {group[-1].version}) for this kind of reason: {example.reason}")
    return lines


def _pairing_reasons(matrix: Matrix, request: Request, table: CandidateTable) -> list[str]:
    rejections = _rejection_index(table)
    torches = table.kept[Component.TORCH]
    torch_versions = [t.version for t in torches]
    reasons: list[str] = []
    fits: dict[Component, set[Version]] = {}
    for component in request.ordered_components:
        if component is Component.TORCH:
            continue
        fits[component] = {
            t.version for t in torches if any(pair_problem(c, t) is None for c in table.kept[component])
        }
        if fits[component]:
            continue
        reasons.extend(_explain_torch_mismatch(matrix, request, component, table, rejections, torch_versions))
    if reasons:
        return reasons
    # Each component fits some torch on its own, but not all on the same one.
    common = set(torch_versions)
    for versions in fits.values():
        common &= versions
    if not common:
        parts = [
            f"{c.label} {versions_text([k.version for k in table.kept[c]], limit=3)} fits torch {versions_text(sorted(v), limit=4)}"
            for c, v in fits.items()
        ]
        return [f"No allowed torch release fits every package: {'; '.join(parts)}."]
    # Torch is not the problem: transformers and accelerate do not fit each other.
    if Component.TRANSFORMERS in request.components and Component.ACCELERATE in request.components:
        torch = next(t for t in torches if t.version in common)
        transformers = [c for c in table.kept[Component.TRANSFORMERS] if pair_problem(c, torch) is None]
        accelerates = [c for c in table.kept[Component.ACCELERATE] if pair_problem(c, torch) is None]
        for candidate in transformers[:MAX_LISTED]:
            problem = pair_problem(candidate, accelerates[0]) if accelerates else None
            if problem:
                reasons.append(f"{problem}; the newest allowed accelerate is {accelerates[0].version}.")
    return reasons


def _explain_torch_mismatch(
    matrix: Matrix,
    request: Request,
    component: Component,
    table: CandidateTable,
    rejections: Mapping[tuple[Component, Version], Rejection],
    torch_versions: Sequence[Version],
) -> list[str]:
    out = []
    for candidate in nearest_first(table.kept[component], torch_versions)[:MAX_LISTED]:
        needed = _torch_versions_for(matrix, candidate)
        why = [rejections[(Component.TORCH, v)].reason for v in needed if (Component.TORCH, v) in rejections]
        sentence = _needs_torch(component, candidate)
        if not needed:
            sentence += "; the matrix has no such torch release"
        elif why:
            sentence += "; " + "; ".join(dict.fromkeys(why))
        out.append(sentence + ".")
    if len(table.kept[component]) > MAX_LISTED:
        out.append(f"... and {len(table.kept[component]) - MAX_LISTED} other {component.label} releases fit no allowed torch either.")
    for torch in torch_versions[:2]:
        partners = [r for r in releases_of(matrix, component) if _release_fits_torch(component, r, torch)]
        if not partners:
            out.append(f"No {component.label} release in the matrix pairs with torch {torch}.")
            continue
        newest = partners[0]
        version = newest.latest if isinstance(newest, LibraryLine) else newest.version
        sentence = f"torch {torch} pairs with {component.label} {version}"
        rejection = rejections.get((component, version))
        if rejection is not None:
            sentence += f", but {rejection.reason}"
        out.append(sentence + ".")
    return out


def _release_fits_torch(component: Component, release, torch: Version) -> bool:
    from .rules import torch_pair_problem

    version = release.latest if isinstance(release, LibraryLine) else release.version
    return torch_pair_problem(component, release, version, torch) is None


MAX_REPLACEMENT_TRIES = 12


def alternatives(matrix: Matrix, request: Request) -> list[Alternative]:
    """The nearest requests that resolve: a pin moved to the nearest release that works, a constraint
    dropped, a yanked release pinned, another Python, the sibling profile, a package left out."""
    found: list[Alternative] = []
    seen: set = set()

    def attempt(change: str, changed: Request) -> bool:
        if len(found) >= MAX_ALTERNATIVES:
            return False
        outcome = resolve(matrix, changed, explain=False)
        if isinstance(outcome, Resolution):
            key = (changed.python.version, tuple(sorted((c.distribution, str(p.version)) for c, p in outcome.picks.items())))
            if key not in seen:
                seen.add(key)
                found.append(Alternative(change, outcome))
            return True
        return False

    for component in request.ordered_components:
        spec = request.spec(component)
        if spec is None:
            continue
        remaining = {c: s for c, s in request.specifiers.items() if c is not component}
        if is_pin(spec):
            pinned = Version(next(iter(spec)).version)
            others = by_nearness(all_versions(matrix, component), pinned)
            for version in others[:MAX_REPLACEMENT_TRIES]:
                replaced = dict(remaining)
                replaced[component] = SpecifierSet(f"=={version}")
                if attempt(f"change {spec_text(component, spec)} to {component.label}=={version}", request.replace(specifiers=replaced)):
                    break
    table = None
    for component in request.ordered_components:
        if is_pin(request.spec(component)):
            continue
        if table is None:
            from .resolve import candidate_table

            table = candidate_table(matrix, request)
        if table.kept[component]:
            continue
        yanked = [r for r in table.rejected[component] if r.kind == "yanked"]
        for rejection in sorted(yanked, key=lambda r: r.version, reverse=True)[:3]:
            pinned_spec = dict(request.specifiers)
            pinned_spec[component] = SpecifierSet(f"=={rejection.version}")
            if attempt(f"pin {component.label}=={rejection.version} ({rejection.reason.split('; pin')[0]})", request.replace(specifiers=pinned_spec)):
                break
    for component in request.ordered_components:
        spec = request.spec(component)
        if spec is not None:
            remaining = {c: s for c, s in request.specifiers.items() if c is not component}
            attempt(f"drop the constraint {spec_text(component, spec)}", request.replace(specifiers=remaining))
    if request.profile is not None:
        sibling = {"ddp-ccl": "ddp-ccl-legacy", "ddp-ccl-legacy": "ddp-ccl"}.get(request.profile)
        if sibling in matrix.profiles:
            profile = matrix.profiles[sibling]
            attempt(
                f"use --profile {sibling} ({profile.description.split(':')[0]})",
                request.replace(profile=sibling, features=profile.features, components=request.components | profile.components),
            )
    low, high = matrix.policy.python_range
    pythons = [Version(f"3.{minor}") for minor in range(low.minor, high.minor + 1)]
    pythons = sorted(
        (p for p in pythons if p != request.python.version),
        key=lambda p: (abs(p.minor - request.python.version.minor), -p.minor),
    )
    python_found = 0
    for python in pythons:
        if python_found == 2 or len(found) >= MAX_ALTERNATIVES:
            break
        from .target import PythonTarget

        if attempt(f"use Python {python}", request.replace(python=PythonTarget(python, None, f"alternative Python {python}"))):
            python_found += 1
    if not found:
        for component in (Component.CCL, Component.IPEX):
            if component in request.components:
                remaining = {c: s for c, s in request.specifiers.items() if c is not component}
                features = tuple(f for f in request.features if f not in matrix.policy.features_with_ccl or component is not Component.CCL)
                attempt(
                    f"leave out {component.label}",
                    request.replace(components=request.components - {component}, specifiers=remaining, features=features),
                )
    return found


def pick_reasons(
    matrix: Matrix, request: Request, table: CandidateTable, picks: Mapping[Component, Candidate]
) -> list[str]:
    """One sentence per chosen package: it is the newest, or why the next newer release is not."""
    rejections = _rejection_index(table)
    out = []
    for component in COMPONENT_ORDER:
        if component not in picks:
            continue
        chosen = picks[component]
        newer = sorted(v for v in all_versions(matrix, component) if v > chosen.version)
        if not newer:
            out.append(f"{chosen}: the newest {component.label} in the matrix.")
            continue
        nxt = newer[0]
        why = _why_not(matrix, request, table, picks, rejections, component, nxt)
        sentence = f"{chosen}: {len(newer)} newer release{'s' if len(newer) > 1 else ''} ruled out; the next, {nxt}: {why}"
        if newer[-1] != nxt:
            sentence += f" (newest in the matrix: {newer[-1]})"
        out.append(sentence + ".")
    return out


def _why_not(
    matrix: Matrix,
    request: Request,
    table: CandidateTable,
    picks: Mapping[Component, Candidate],
    rejections: Mapping[tuple[Component, Version], Rejection],
    component: Component,
    version: Version,
) -> str:
    rejection = rejections.get((component, version))
    if rejection is not None:
        return rejection.reason
    candidate = _candidate_for(table, component, version)
    if candidate is None:
        return "not allowed by the request"
    if component is Component.TORCH:
        for other in request.ordered_components:
            if other is Component.TORCH:
                continue
            fitting = [c for c in table.kept[other] if pair_problem(c, candidate) is None]
            if not fitting:
                example = nearest_first(table.kept[other], [candidate.version])[0]
                return f"no allowed {other.label} release pairs with it ({pair_problem(example, candidate)})"
        if complete_set(table, candidate, request.ordered_components) is None:
            return "transformers and accelerate have no pair that fits it"
        return "not chosen"  # pragma: no cover - a torch with a full set would have been picked
    for other, pick in picks.items():
        if other is component:
            continue
        problem = pair_problem(candidate, pick)
        if problem:
            return problem
    chosen_torch = picks.get(Component.TORCH)
    if component is Component.IPEX and chosen_torch is not None and isinstance(candidate.release, IpexRelease):
        return (
            f"it is built for torch {candidate.release.torch}, while {picks[component].version} is built for the chosen "
            f"torch {chosen_torch.version} (the exact build is preferred)"
        )
    if component is Component.TRANSFORMERS:
        return "no allowed accelerate release fits it together with the chosen torch"
    return "not chosen"  # pragma: no cover


def _candidate_for(table: CandidateTable, component: Component, version: Version) -> Optional[Candidate]:
    for candidate in table.kept.get(component, ()):
        if candidate.version == version:
            return candidate
        release = candidate.release
        if isinstance(release, LibraryLine) and version in release.versions:
            return candidate  # same line, same facts
    return None


def notes(matrix: Matrix, picks: Mapping[Component, Candidate]) -> list[str]:
    """End-of-life status, the unverified facts the answer rests on, and the next step for oneCCL."""
    out = []
    for component in picks:
        eol = matrix.eol_of(component.distribution)
        if eol is not None:
            since = f" since {eol.date}" if eol.date else ""
            out.append(f"{component.label} is {eol.status}{since}; {eol.advice}")
    for component, pick in picks.items():
        unverified = []
        if not pick.release.provenance.verified:
            unverified.append("the release entry")
        if pick.wheels is not None and not pick.wheels.provenance.verified:
            unverified.append(f"its Python coverage on {pick.host.id}")
        if not pick.host.provenance.verified:
            unverified.append(f"the host {pick.host.url}")
        if unverified:
            out.append(
                f"{pick}: not verified against a live source: {', '.join(unverified)} "
                f"(compat matrix --package {component.distribution} --sources)."
            )
    for pick in picks.values():
        yanked = yanked_wheels(pick.release)
        if yanked is not None:
            why = f": {yanked.yanked_reason}" if yanked.yanked_reason else ""
            out.append(f"{pick} is yanked on {yanked.host}{why} (used because you pinned it).")
    ipex, torch = picks.get(Component.IPEX), picks.get(Component.TORCH)
    if ipex is not None and torch is not None and isinstance(ipex.release, IpexRelease) and ipex.release.torch != torch.version:
        out.append(
            f"{ipex} was built against torch {ipex.release.torch}; its import check accepts torch {torch.version}. "
            f"Pin torch=={ipex.release.torch} to match the build exactly."
        )
    ccl = picks.get(Component.CCL)
    if ccl is not None and Component.ACCELERATE in picks:
        out.append("export CCL_WORKER_COUNT=1 (or more) before launching: without it accelerate quietly picks gloo instead of ccl.")
    if ccl is not None and isinstance(ccl.release, CclRelease):
        release = ccl.release
        if release.has_cwd:
            locate = f'$(python -c "from {release.module} import cwd; print(cwd)")'
        else:
            locate = f'$(python -c "import torch, {release.module}, os; print(os.path.dirname({release.module}.__file__))")'
        out.append(f"After installing, set up oneCCL: source {locate}/{release.setvars}")
    return out


def yanked_newer_notes(table: CandidateTable, picks: Mapping[Component, Candidate]) -> list[str]:
    """Newer releases skipped only because PyPI yanked them: say so, and how to pin one anyway."""
    out = []
    for component, pick in picks.items():
        newer = sorted((r for r in table.rejected.get(component, ()) if r.kind == "yanked" and r.version > pick.version), key=lambda r: r.version)
        if newer:
            reason = newer[-1].reason.split(" is yanked on ", 1)[1].split("; pin", 1)[0]
            span = f"{newer[0].version} to {newer[-1].version}" if len(newer) > 1 else str(newer[0].version)
            out.append(
                f"newer {component.label} releases ({span}) are yanked on {reason}: they were skipped; "
                f"to use one anyway, pin it: compat resolve {component.label}=={newer[-1].version} ..."
            )
    return out
