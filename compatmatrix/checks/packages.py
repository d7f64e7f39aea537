"""The installed tuple against the matrix: pairings (with their evidence), known-bad sets, device builds, library gates,
duplicates, builds, end of life."""

from __future__ import annotations

from typing import Optional

from packaging.version import Version

from ..console import plural
from ..devices import DeviceBuild, device_build
from ..environment.from_pins import PINNED_INSTALLER
from ..environment.snapshot import Distribution
from ..findings import Finding, Status
from ..matrix.model import (
    COMPONENTS,
    AbsentRelease,
    CclRelease,
    Component,
    ComponentInfo,
    IpexRelease,
    LibraryLine,
    UnlistedRelease,
    absent_release,
    components_where,
    distributions_where,
    nearest_pinned,
    unlisted_release,
)
from ..rules import fits, known_bad, pairing_evidence, problem_with
from ..sentences import (
    absent_fix,
    absent_nearest,
    absent_phrase,
    ccl_torch_phrase,
    declaration_phrase,
    device_build_fix,
    device_build_sentence,
    ipex_torch_phrase,
    known_bad_phrase,
    nearest_verified,
    pairing_phrase,
    python_list,
    range_text,
    requirement,
    sources_text,
    unlisted_nearest,
    unlisted_phrase,
)
from .registry import COMPANION_RECORDS, Context, check, pairing_check_id

IPEX_NAMES = COMPONENTS[Component.IPEX].names
CCL_NAMES = COMPONENTS[Component.CCL].names

GUARD_EFFECT = {
    "os_exit": "importing it prints 'needs to work with PyTorch {series}' and then fails with AttributeError: module 'os' has no attribute 'exit'",
    "exit127": "importing it prints 'needs to work with PyTorch {series}' and exits the process with status 127",
    "exit127_after_C": "importing it loads its C extension first (which may fail with an undefined symbol) and then exits with status 127",
    "none": "it has no import check: a mismatch shows up later as an undefined symbol or a crash",
}


def torch_dist(ctx: Context) -> Optional[Distribution]:
    return ctx.snapshot.get("torch")


def torch_version(ctx: Context) -> Optional[Version]:
    dist = torch_dist(ctx)
    return dist.public_version if dist else None


def _line(ctx: Context, component: Component, version: Version) -> Optional[LibraryLine]:
    for line in ctx.matrix.releases[component]:
        if isinstance(line, LibraryLine) and (version in line.versions or line.line.release[:2] == version.release[:2]):
            return line
    return None


def _fits_torch(component: Component, release, torch: Version) -> bool:
    """The resolver's own pair rules between this release and torch."""
    return fits(component, release, release.version, Component.TORCH, torch)


def _host_hint(ctx: Context, component: Component, release) -> str:
    """`pip install` flags for the first host (in preference order) with a wheel for this Python."""
    by_host = {w.host: w for w in release.wheels}
    for host_id in ctx.matrix.policy.host_preference[component]:
        wheels = by_host.get(host_id)
        if wheels and wheels.has_python(ctx.snapshot.python_minor):
            host = ctx.matrix.hosts[host_id]
            return "" if host_id == "pypi" else f" {host.pip_flag} {host.url}"
    return ""


def installed_device_build(ctx: Context, component: Component, dist: Optional[Distribution]) -> Optional[DeviceBuild]:
    """The XPU/GPU build an installed distribution is, by its full version (label included), or None."""
    if dist is None or dist.version is None:
        return None
    return device_build(ctx.matrix, component, dist.version)


def _device_finding(cid: str, build: DeviceBuild, dist: Distribution) -> Finding:
    return Finding(cid, Status.FAIL, device_build_sentence(build), (dist.path, f"source: {sources_text(build.sources)}"), device_build_fix(build))


def _torch_label(ctx: Context) -> Optional[str]:
    """The installed torch build's local label ("+cpu", "" for none), None when unreadable."""
    dist = torch_dist(ctx)
    version = dist.version if dist is not None else None
    return None if version is None else (f"+{version.local}" if version.local else "")


def _installed_with_torch(ctx: Context, cid: str, names: tuple[str, ...], label: str, finder, component: Component):
    """(installed torch, the matrix entry of the installed package), or the finding that ends the check: SKIP/WARN,
    or FAIL for an XPU/GPU build (never judged as the CPU release of the same number)."""
    dist = ctx.snapshot.get(*names)
    torch = torch_version(ctx)
    if dist is None:
        return Finding(cid, Status.SKIP, f"{label} is not installed")
    device = installed_device_build(ctx, component, dist)
    if device is not None:
        return _device_finding(cid, device, dist)
    if torch is None or dist.public_version is None:
        return Finding(cid, Status.SKIP, "torch is not installed" if torch is None else f"unreadable {label} version {dist.raw_version!r}")
    torch_device = installed_device_build(ctx, Component.TORCH, torch_dist(ctx))
    if torch_device is not None:
        return Finding(cid, Status.SKIP, f"{device_build_sentence(torch_device)}: its pairing with {label} is not judged (see packages.torch-installed)")
    release = finder(dist.public_version)
    if release is None:
        return Finding(cid, Status.WARN, f"{label} {dist.raw_version} is not in the matrix", (dist.path,), "Upgrade compatmatrix, or check the pairing by hand.")
    return torch, release


def _absent_finding(cid: str, release: AbsentRelease, dist: Distribution) -> Finding:
    """A version inside the span the matrix lists that the registries never had: FAIL for a pin in a file (pip stops
    there: 'No matching distribution'), WARN for an installed one (built here, or from somewhere else)."""
    evidence = (absent_nearest(release), dist.path)
    if dist.installer == PINNED_INSTALLER:
        return Finding(cid, Status.FAIL, absent_phrase(release), evidence, absent_fix(release))
    return Finding(cid, Status.WARN, f"{release.component.label} {dist.raw_version} is installed, but {absent_phrase(release).replace(', so pip would', ': pip would')}"
                   " (a build from elsewhere?)", evidence, absent_fix(release).replace("Pin", "Install"))


def _absent(ctx: Context, component: Component, dist: Distribution) -> Optional[AbsentRelease]:
    return absent_release(ctx.matrix, component, dist.public_version) if dist.public_version is not None else None


def _unlisted_finding(ctx: Context, cid: str, release: UnlistedRelease, dist: Distribution, torch: Optional[Version]) -> Finding:
    """An installed (or pinned) release the matrix does not list: its pairing with torch is graded as the resolver grades
    it (rules.pairing_evidence: unverified within its line's torch series) -- WARN unverified, naming the missing facts,
    the nearest verified pairing and the command that settles it; FAIL outside that series (the same rule refuses it)."""
    evidence = (unlisted_phrase(release), unlisted_nearest(release), dist.path)
    fix = f"Settle it: {release.settle(torch)}."
    if torch is None:  # torch itself
        return Finding(cid, Status.WARN, f"torch {dist.raw_version}: not in the matrix (unverified)", evidence[:1] + evidence[2:], fix)
    pairing = pairing_evidence(release, torch)
    label = release.component.label
    if pairing is None:
        problem = problem_with(release.component, release, release.version, Component.TORCH, torch)
        listed = next((r for r in ctx.matrix.releases[release.component] if _fits_torch(release.component, r, torch)), None)
        also = f"; or pip install {label}=={listed.version} (listed, pairs with torch {torch})" if listed is not None else ""
        return Finding(cid, Status.FAIL, f"{label} {release.version} " + ((requirement(problem.rule, release) or "does not pair") if problem is not None else "does not pair")
                       + f", but torch {torch} is installed", evidence, fix + also)
    return Finding(cid, Status.WARN, f"{label} {release.version} with torch {torch}: {pairing_phrase(pairing)}", evidence, fix)


def _is_running(executable: str) -> bool:
    """Whether ``executable`` is the interpreter compat runs in (the target when none was named)."""
    import os
    import sys

    try:
        return os.path.samefile(executable, sys.executable)
    except OSError:
        return False


@check("packages.torch-installed", "torch is installed (and which build)")
def torch_installed(ctx: Context) -> Finding:
    dist = torch_dist(ctx)
    if dist is None:
        return Finding(
            "packages.torch-installed",
            Status.FAIL,
            f"torch is not installed for {ctx.snapshot.executable}" + (" (the interpreter compat itself runs in, examined when no --python PATH or COMPAT_PYTHON is given)"
                                                                       if _is_running(ctx.snapshot.executable) else ""),
            fix="Pass the interpreter of the environment you train in with --python (a venv's bin/python, e.g. --python ~/venvs/train/bin/python), "
                f"or install the set compat resolve gives into this one: compat install --python {ctx.snapshot.executable} --yes.",
        )
    if dist.version is None:
        return Finding("packages.torch-installed", Status.WARN, f"torch's metadata has an unreadable version {dist.raw_version!r}", (dist.path,),
                       f"Reinstall torch: {ctx.snapshot.executable} -m pip install --force-reinstall --no-deps torch==<the version you want>")
    device = installed_device_build(ctx, Component.TORCH, dist)
    if device is not None:
        return _device_finding("packages.torch-installed", device, dist)
    unlisted = unlisted_release(ctx.matrix, Component.TORCH, dist.public_version) if dist.public_version is not None else None
    if unlisted is not None:
        return _unlisted_finding(ctx, "packages.torch-installed", unlisted, dist, None)
    absent = _absent(ctx, Component.TORCH, dist)
    if absent is not None:
        return _absent_finding("packages.torch-installed", absent, dist)
    return Finding("packages.torch-installed", Status.PASS, f"torch {dist.raw_version}", (dist.path,))


@check("packages.ipex-torch", "IPEX's import check accepts the installed torch")
def ipex_torch(ctx: Context) -> Finding:
    cid = "packages.ipex-torch"
    found = _installed_with_torch(ctx, cid, IPEX_NAMES, "intel-extension-for-pytorch", ctx.matrix.ipex_release, Component.IPEX)
    if isinstance(found, Finding):
        return found
    torch, release = found
    if _fits_torch(Component.IPEX, release, torch):
        exact = "" if release.torch == torch else f" (built for {release.torch}; its import check accepts {torch})"
        return Finding(cid, Status.PASS, f"intel-extension-for-pytorch {release.version} fits torch {torch}{exact}")
    series = f"{release.torch.major}.{release.torch.minor}.*"
    evidence = (
        f"intel-extension-for-pytorch {release.version} {ipex_torch_phrase(release)}",
        GUARD_EFFECT.get(release.guard, release.guard).format(series=series),
        f"source: {release.provenance.sources[0]}",
    )
    matching = [r for r in ctx.matrix.releases[Component.IPEX] if _fits_torch(Component.IPEX, r, torch) and any(w.has_python(ctx.snapshot.python_minor) for w in r.wheels)]
    if matching:
        best: IpexRelease = max(matching, key=lambda r: (r.torch == torch, r.version))  # type: ignore[assignment]
        fix = f"pip install {best.distribution}=={best.version}{_host_hint(ctx, Component.IPEX, best)}  (the IPEX for torch {torch}), or pip install torch=={release.torch}"
    else:
        torch_release = ctx.matrix.torch_release(release.torch)
        hint = _host_hint(ctx, Component.TORCH, torch_release) if torch_release is not None else ""
        fix = f"No IPEX release fits torch {torch}: pip install torch=={release.torch}{hint} (the torch IPEX {release.version} was built for), or drop IPEX (compat resolve --profile stock)."
    return Finding(cid, Status.FAIL, f"intel-extension-for-pytorch {release.version} does not work with torch {torch}", evidence, fix)


@check("packages.ccl-torch", "oneccl_bind_pt pairs with the installed torch, and how that is known")
def ccl_torch(ctx: Context) -> Finding:
    """PASS built for the installed torch; WARN reported working (its source) or unverified (the same major.minor, no
    source either way), naming the nearest verified pairing; FAIL a documented break (its source) or another major.minor."""
    cid = "packages.ccl-torch"
    found = _installed_with_torch(ctx, cid, CCL_NAMES, "oneccl_bind_pt", ctx.matrix.ccl_release, Component.CCL)
    if isinstance(found, Finding):
        return found
    torch, release = found
    built: Optional[CclRelease] = next((r for r in ctx.matrix.releases[Component.CCL] if r.torch == torch), None)  # type: ignore[misc, attr-defined]
    pairing = pairing_evidence(release, torch)
    module = f"module {release.module}, bundled oneCCL {release.oneccl}"
    if pairing is not None and pairing.evidence == "built-for":
        return Finding(cid, Status.PASS, f"oneccl_bind_pt {release.version} is built for torch {torch}", (module,))
    nearest = nearest_verified(Component.CCL, release.torch, release.version, built.version if built is not None and built is not release else None)
    if pairing is not None and pairing.evidence != "documented-break":
        evidence = (
            f"oneccl_bind_pt {release.version} {ccl_torch_phrase(release)}",
            f"the nearest verified (built-for) pairing: {nearest}",
            *(f"source: {s}" for s in pairing.provenance.sources[:2]),
            module,
        )
        fix = (f"pip install oneccl_bind_pt=={built.version}{_host_hint(ctx, Component.CCL, built)}  (built for torch {torch})" if built is not None and built is not release
               else f"pip install torch=={release.torch}  (the torch oneccl_bind_pt {release.version} is built for)")
        return Finding(cid, Status.WARN, f"oneccl_bind_pt {release.version} with torch {torch}: {pairing_phrase(pairing, detail=True)}", evidence, fix)
    if pairing is not None:  # a documented break
        summary = f"oneccl_bind_pt {release.version} does not work with torch {torch}: {pairing_phrase(pairing)}"
        evidence = [pairing.provenance.note] if pairing.provenance.note else []
        evidence.append(f"source: {sources_text(pairing.provenance.sources)}")
    else:
        summary = f"oneccl_bind_pt {release.version} does not work with torch {torch}"
        evidence = [
            f"oneccl_bind_pt {release.version} {ccl_torch_phrase(release)}",
            f"torch {torch} is of another major.minor series, whose C++ ABI differs (rule ccl-torch-series): a mismatch fails at import with "
            "'undefined symbol' or aborts with 'Mismatch in kernel C++ signatures'",
            f"source: {release.provenance.sources[0]}",
        ]
    if built is not None:
        evidence.append(f"torch {torch} pairs with oneccl_bind_pt {built.version} (built for it)")
        fix = f"pip install oneccl_bind_pt=={built.version}{_host_hint(ctx, Component.CCL, built)}  (or pip install torch=={release.torch})"
    else:
        fix = f"No oneccl_bind_pt release is built for torch {torch}: pip install torch=={release.torch}, or use the gloo backend (compat resolve --profile stock)."
    return Finding(cid, Status.FAIL, summary, tuple(evidence), fix)


@check("packages.known-bad", "the installed set is not one a source reports failing")
def known_bad_sets(ctx: Context) -> Finding:
    """WARN when the installed torch and a package form a [[known_bad]] set (with what fails and the source)."""
    cid = "packages.known-bad"
    torch = torch_version(ctx)
    if torch is None:
        return Finding(cid, Status.SKIP, "torch is not installed")
    label = _torch_label(ctx)
    hits = []
    for component in components_where(known_bad_checked=True):
        names = COMPONENTS[component].names
        dist = ctx.snapshot.get(*names)
        if dist is None or dist.public_version is None or installed_device_build(ctx, component, dist) is not None:
            continue
        release = ctx.matrix.release(component, dist.public_version)
        bad = known_bad(release, dist.public_version, torch, label) if release is not None else None
        if bad is not None:
            hits.append(bad)
    if not hits:
        return Finding(cid, Status.PASS, f"no known-bad set among the installed packages ({len(ctx.matrix.known_bad)} in the matrix)")
    first = hits[0]
    evidence = tuple(known_bad_phrase(b) for b in hits[1:]) + tuple(n for n in (first.provenance.note,) if n)
    return Finding(cid, Status.WARN, known_bad_phrase(first), evidence,
                   f"Use another set of the series if you can (compat resolve torch=={torch.major}.{torch.minor}.* {first.component.distribution}); "
                   "otherwise test the failing path before relying on it.")


def _companion(ctx: Context, component: Component) -> Finding:
    """A companion's generated check (packages.<distribution>-torch, made from its record below): what its installed
    release declares of torch (pin, floor, range), or what compat matrix verify recorded of the pair here."""
    package = component.distribution
    cid = f"packages.{package}-torch"
    dist = ctx.snapshot.get(package)
    torch = torch_version(ctx)
    if dist is None or torch is None:
        return Finding(cid, Status.SKIP, f"{package} is not installed" if dist is None else "torch is not installed")
    device = installed_device_build(ctx, component, dist)
    if device is not None:
        return _device_finding(cid, device, dist)
    release = ctx.matrix.release(component, dist.public_version) if dist.public_version is not None else None
    if release is None:
        return _companion_unlisted(ctx, cid, component, dist, torch)
    pairing = pairing_evidence(release, torch)
    if pairing is not None and pairing.tested:  # compat matrix verify tried this pair here: its record decides
        return _companion_tested(ctx, cid, component, release, pairing, torch)
    return _companion_declared(ctx, cid, component, release, pairing, torch)


def _companion_unlisted(ctx: Context, cid: str, component: Component, dist: Distribution, torch: Version) -> Finding:
    """An installed companion release the matrix does not list: unlisted (newer), absent (never published) or unknown."""
    unlisted = unlisted_release(ctx.matrix, component, dist.public_version) if dist.public_version is not None else None
    if unlisted is not None:
        return _unlisted_finding(ctx, cid, unlisted, dist, torch)
    absent = _absent(ctx, component, dist)
    if absent is not None:
        return _absent_finding(cid, absent, dist)
    package = component.distribution
    return Finding(cid, Status.WARN, f"{package} {dist.raw_version} is not in the matrix", (dist.path,), "Check its torch pin by hand: pip show " + package)


def _companion_tested(ctx: Context, cid: str, component: Component, release, pairing, torch: Version) -> Finding:
    """PASS or FAIL as compat matrix verify's record of the pair on this machine says."""
    package = component.distribution
    if pairing.evidence == "tested-here":
        return Finding(cid, Status.PASS, f"{package} {release.version} with torch {torch}: tested here, it works", (pairing.provenance.note,))
    pinned = nearest_pinned(ctx.matrix, component, release.version)
    pin = getattr(release, "torch", None)
    fix = (f"pip install torch=={pin}  (the torch {package} {release.version} pins)" if pin is not None
           else f"pip install {package}=={pinned[0]}  (it pins torch {pinned[1]})" if pinned is not None
           else f"Uninstall {package}, or install the torch it was tested to work with.")
    return Finding(cid, Status.FAIL, f"{package} {release.version} does not work with torch {torch}: tested here, it breaks",
                   (pairing.provenance.note, f"source: {pairing.provenance.sources[0]}"), fix)


def _companion_declared(ctx: Context, cid: str, component: Component, release, pairing, torch: Version) -> Finding:
    """What the release declares of torch: a pin or a range torch is in (PASS), nothing (WARN unverified), another (FAIL)."""
    package = component.distribution
    source = f"source: {release.provenance.sources[0]}" if release.provenance.sources else "source: the matrix"
    if pairing is not None and pairing.evidence == "pinned":
        return Finding(cid, Status.PASS, f"{package} {release.version} pins torch {torch}", (source,))
    if pairing is not None and pairing.evidence in ("declared", "verified"):  # inside its own floor or range: pip installs it
        return Finding(cid, Status.PASS, f"{package} {release.version} with torch {torch}: {pairing_phrase(pairing)}", (pairing.provenance.note, source))
    if pairing is not None:  # declares no torch requirement, nothing curated: unverified, as the resolver grades it
        pinned = nearest_pinned(ctx.matrix, component, release.version)
        evidence = (f"{package} {release.version}: {pairing.provenance.note}",
                    *((f"the nearest verified (pinned) pairing: {nearest_verified(component, pinned[1], pinned[0], None)}",) if pinned is not None else ()))
        return Finding(cid, Status.WARN, f"{package} {release.version} with torch {torch}: {pairing_phrase(pairing)}", evidence,
                       f"Settle it: compat matrix verify {package}=={release.version} --with torch=={torch}.")
    partner = next((r for r in ctx.matrix.releases[component] if getattr(r, "requirement", None) is not None and _fits_torch(component, r, torch)), None)
    declared = declaration_phrase(release)
    wanted = (f"pip install torch=={release.torch}" if release.torch is not None else f"pip install 'torch{range_text(release.requirement)}'")
    fix = f"pip install {package}=={partner.version}" if partner else f"No {package} release declares torch {torch}; uninstall it or {wanted}"
    return Finding(cid, Status.FAIL, f"{package} {release.version} {declared}, but torch {torch} is installed", (source,), fix)


def _register_companion(info: ComponentInfo) -> None:
    """packages.<distribution>-torch for one companion record (checks/registry.COMPANION_RECORDS lists the ids)."""
    component = Component(info.distribution)

    def companion_torch(ctx: Context) -> Finding:
        return _companion(ctx, component)

    check(pairing_check_id(info), f"{info.label} declares the installed torch (its pin, floor or range)")(companion_torch)


for _record in COMPANION_RECORDS:
    _register_companion(_record)


class _Libraries:
    """What packages.transformers-torch gathers over the library components (transformers, accelerate)."""

    def __init__(self) -> None:
        self.problems: list[str] = []  # FAIL: a floor the installed torch (or accelerate) is below
        self.cautions: list[str] = []  # what only the Trainer needs (a WARN): transformers runs without accelerate
        self.evidence: list[str] = []
        self.unlisted: list[Finding] = []  # a release the matrix does not list (its own finding)
        self.checked = False  # at least one installed release was judged against its line


def _library_line(ctx: Context, cid: str, component: Component, dist: Distribution, torch: Version, found: _Libraries) -> Optional[LibraryLine]:
    """The matrix's line of an installed library release, or None after noting why it cannot be judged."""
    line = _line(ctx, component, dist.public_version)
    absent = _absent(ctx, component, dist) if line is not None and dist.public_version not in line.versions else None
    if absent is not None:  # a patch its line never had
        found.unlisted.append(_absent_finding(cid, absent, dist))
        return None
    if line is not None:
        return line
    release = unlisted_release(ctx.matrix, component, dist.public_version)
    absent = _absent(ctx, component, dist) if release is None else None
    if release is not None:
        found.unlisted.append(_unlisted_finding(ctx, cid, release, dist, torch))
    elif absent is not None:
        found.unlisted.append(_absent_finding(cid, absent, dist))
    else:
        found.evidence.append(f"{component.distribution} {dist.raw_version} is not in the matrix")
    return None


def _trainer_accelerate(ctx: Context, line: LibraryLine, dist: Distribution, found: _Libraries) -> None:
    """transformers' Trainer needs accelerate >= its line's accelerate_min: a caution when it is missing, a problem below."""
    accelerate = ctx.snapshot.get("accelerate")
    if accelerate is None:  # transformers does not require accelerate (no Requires-Dist): only its Trainer does
        found.cautions.append(f"transformers {dist.raw_version}'s Trainer needs accelerate >= {line.accelerate_min}, which the set does not have "
                              "(transformers itself does not require it: only a script that uses the Trainer does)")
    elif accelerate.public_version is not None and problem_with(Component.TRANSFORMERS, line, dist.public_version, Component.ACCELERATE, accelerate.public_version):
        found.problems.append(f"transformers {dist.raw_version}'s Trainer needs accelerate >= {line.accelerate_min}, accelerate {accelerate.raw_version} is installed")


@check("packages.transformers-torch", "transformers and accelerate support the installed torch")
def transformers_torch(ctx: Context) -> Finding:
    cid = "packages.transformers-torch"
    torch = torch_version(ctx)
    found = _Libraries()
    for component in components_where(kind="library"):
        dist = ctx.snapshot.get(component.distribution)
        if dist is None or dist.public_version is None or torch is None:
            continue
        line = _library_line(ctx, cid, component, dist, torch, found)
        if line is None:
            continue
        found.checked = True
        if problem_with(component, line, dist.public_version, Component.TORCH, torch) is not None:
            found.problems.append(f"{component.distribution} {dist.raw_version} needs torch >= {line.torch_min}, torch {torch} is installed")
        if component is Component.TRANSFORMERS and line.accelerate_min is not None:
            _trainer_accelerate(ctx, line, dist, found)
    return _libraries_finding(cid, torch, found)


def _libraries_finding(cid: str, torch: Optional[Version], found: _Libraries) -> Finding:
    problems, cautions, evidence, unlisted = found.problems, found.cautions, found.evidence, found.unlisted
    if problems:
        return Finding(cid, Status.FAIL, problems[0], tuple(problems[1:] + cautions + evidence + [u.summary for u in unlisted]),
                       "pip install the versions `compat resolve --profile stock torch==" + str(torch) + "` gives")
    if unlisted:  # nothing unknown passes silently: the first unlisted release's finding, the others' summaries with it
        unlisted.sort(key=lambda u: u.status is not Status.FAIL)  # a release that does not exist first
        first = unlisted[0]
        return Finding(cid, first.status, first.summary, first.evidence + tuple(u.summary for u in unlisted[1:]) + tuple(cautions + evidence),
                       "; ".join(dict.fromkeys(u.fix for u in unlisted if u.fix)))
    if cautions:
        return Finding(cid, Status.WARN, cautions[0], tuple(cautions[1:] + evidence),
                       "If the script uses the Trainer, add the accelerate `compat resolve --profile stock torch==" + str(torch) + "` gives; otherwise nothing to do.")
    if not found.checked:
        return Finding(cid, Status.SKIP if not evidence else Status.WARN, "transformers / accelerate are not installed" if not evidence else evidence[0], tuple(evidence))
    return Finding(cid, Status.PASS, "transformers / accelerate support the installed torch", tuple(evidence))


@check("packages.ccl-trainer", "the installed transformers and accelerate can still use the ccl backend")
def ccl_trainer(ctx: Context) -> Finding:
    cid = "packages.ccl-trainer"
    if ctx.snapshot.get(*CCL_NAMES) is None:
        return Finding(cid, Status.SKIP, "oneccl_bind_pt is not installed")
    transformers = ctx.snapshot.get("transformers")
    if transformers is None or transformers.public_version is None:
        return Finding(cid, Status.SKIP, "transformers is not installed")
    version = transformers.public_version
    feature = {f.name: f for f in ctx.matrix.features_of("transformers")}
    accel = {f.name: f for f in ctx.matrix.features_of("accelerate")}
    if feature["ddp_backend_ccl"].present_in(version):
        accelerate = ctx.snapshot.get("accelerate")
        works = accel["ddp_backend_ccl_works"]
        if accelerate is None or accelerate.public_version is None:  # only the Trainer needs it: a WARN, as packages.transformers-torch says
            return Finding(cid, Status.WARN, f"transformers {version}'s Trainer hands --ddp_backend ccl to accelerate, which the set does not have",
                           ("transformers itself does not require accelerate: only a script that uses the Trainer does",),
                           "If the script uses the Trainer: pip install 'accelerate" + range_text(works.versions) + "'")
        if not works.present_in(accelerate.public_version):
            removed = accel.get("ccl_removed")
            why = (
                "accelerate >= 1.13 has no oneCCL path: 'Your assigned backend ccl is not available, please use gloo'"
                if removed is not None and removed.present_in(accelerate.public_version)
                else f"only accelerate{range_text(works.versions)} {works.description}"
            )
            return Finding(cid, Status.FAIL, f"accelerate {accelerate.raw_version} cannot run --ddp_backend ccl", (why, f"source: {works.provenance.sources[0]}"),
                           f"pip install 'accelerate{range_text(works.versions)}' (newest that works: compat resolve --profile ddp-ccl)")
        return Finding(cid, Status.PASS, f"transformers {version} accepts --ddp_backend ccl and accelerate {accelerate.raw_version} honours it")
    if feature["xpu_backend_arg"].present_in(version):
        return Finding(cid, Status.PASS, f"transformers {version} takes the older --xpu_backend ccl (not --ddp_backend)")
    ccl_range = range_text(feature["ddp_backend_ccl"].versions)
    return Finding(cid, Status.FAIL, f"transformers {version} does not accept --ddp_backend ccl",
                   (f"only transformers{ccl_range} accepts it; 5.1 and later replaced ccl with xccl (Intel GPUs)",),
                   f"pip install 'transformers{ccl_range}' 'accelerate<1.13', or train with --ddp_backend gloo (compat resolve --profile stock)")


@check("packages.cuda-build", "torch is not a CUDA build on a CPU stack (its size in nvidia-* wheels, the +cpu fix)")
def cuda_build(ctx: Context) -> Finding:
    """WARN a CUDA torch (label cu*, nvidia-* packages, or a libtorch_cuda.so in its lib folder): compat's stacks
    (stock, ddp-ccl, ipex, ccl) run on CPU nodes, where the CUDA libraries are gigabytes that nothing loads. In an
    environment the nvidia-* packages' size is read from their RECORD files; from pins (compat check -r) it is unknown."""
    cid = "packages.cuda-build"
    dist = torch_dist(ctx)
    if dist is None:
        return Finding(cid, Status.SKIP, "torch is not installed")
    version = dist.version
    pinned = not ctx.snapshot.purelib  # compat check -r: pins, no files
    nvidia = [d for d in ctx.snapshot.distributions if d.canonical.startswith("nvidia-")]
    cuda_label = version is not None and version.local is not None and version.local.startswith("cu")
    cuda_lib = False
    if not pinned and not (cuda_label or nvidia) and not (version is not None and version.local == "cpu"):  # +cpu: its label says it
        from ..environment.extensions import torch_build

        build = torch_build(dist.site)
        cuda_lib = build is not None and "cuda" in build.devices
    intel = ctx.snapshot.get(*IPEX_NAMES) or ctx.snapshot.get(*CCL_NAMES)
    if not (cuda_label or nvidia or cuda_lib):
        return Finding(cid, Status.PASS, f"torch {dist.raw_version} is a CPU build" if version and version.local == "cpu" else f"torch {dist.raw_version} brings no CUDA packages")
    cpu_host = ctx.matrix.hosts.get("pytorch-cpu")
    index = f" --index-url {cpu_host.url}" if cpu_host is not None else ""
    public = dist.public_version or dist.raw_version
    next_to = f" next to {intel.name}" if intel is not None else ""
    if pinned:
        return Finding(cid, Status.WARN, f"torch {dist.raw_version} is a CUDA build{next_to}: pip installs it with the nvidia-* CUDA wheels "
                       "(gigabytes) that a CPU node does not use",
                       (f"torch {dist.raw_version} pinned in {dist.site}", "the size is that of the nvidia-* wheels pip resolves for it (not read from a file)"),
                       f"Pin torch=={public}+cpu and install it from the CPU index: pip install torch=={public}+cpu{index} "
                       "(compat install and compat export requirements do this).")
    from ..environment.extensions import distribution_bytes

    sizes = [distribution_bytes(d.path) for d in nvidia]
    known = [s for s in sizes if s is not None]
    size = f"{sum(known) / 1e9:.1f} GB in {len(known)} nvidia-* package(s)" if known else ("nvidia-* packages of unread size" if nvidia else "torch's own CUDA libraries")
    evidence = tuple([f"torch {dist.raw_version}"] + [f"{d.name} {d.raw_version}" + (f" ({s / 1e6:.0f} MB)" if s is not None else "") for d, s in list(zip(nvidia, sizes))[:5]]
                     + ([f"... {len(nvidia) - 5} more nvidia-* packages"] if len(nvidia) > 5 else []) + (["sizes: the size column of each package's RECORD"] if known else []))
    py = ctx.snapshot.executable
    fix = (f"compat install --yes --python {py} torch=={public} (takes the +cpu build{', from ' + cpu_host.url if cpu_host is not None else ''})"
           + (f", then {py} -m pip uninstall -y " + " ".join(d.name for d in nvidia) if nvidia else ""))
    return Finding(cid, Status.WARN, f"torch {dist.raw_version} is a CUDA build{next_to}: {size} that a CPU node does not use", evidence, fix)


STACK = distributions_where(duplicate_checked=True)


@check("packages.duplicates", "no distribution is installed twice where it matters")
def duplicates(ctx: Context) -> Finding:
    """Two copies in one folder (a half-done upgrade) fail; a stack package shadowed by another version
    elsewhere on sys.path fails; other shadowed copies (a venv over its base, user site) are normal."""
    cid = "packages.duplicates"
    seen: dict[str, list[Distribution]] = {}
    for dist in ctx.snapshot.distributions:
        seen.setdefault(dist.canonical, []).append(dist)
    broken, shadowed = [], []
    for name, copies in sorted(seen.items()):
        if len(copies) < 2:
            continue
        folders = [d.site for d in copies]
        versions = {d.raw_version for d in copies}
        if len(set(folders)) < len(folders) or (name in STACK and len(versions) > 1):
            broken.append((name, copies))
        else:
            shadowed.append((name, copies))
    notes = tuple(f"{name}: {copies[0].raw_version} at {copies[0].site} shadows {', '.join(d.raw_version + ' at ' + d.site for d in copies[1:])}" for name, copies in shadowed)
    if not broken:
        return Finding(cid, Status.PASS, f"{plural(len(seen), 'distribution')}; none installed twice where it matters", notes)
    evidence = tuple(f"{name}: " + "; ".join(f"{d.raw_version} at {d.path}" for d in copies) for name, copies in broken) + notes
    name, copies = broken[0]
    inside = [d for d in copies[1:] if d.site.startswith(ctx.snapshot.prefix)]
    target = inside[-1].path if inside else copies[-1].path
    return Finding(cid, Status.FAIL, f"{len(broken)} distribution(s) installed twice where it matters: {', '.join(n for n, _ in broken)}", evidence,
                   f"Remove the copy import does not use ({target}), or reinstall: {ctx.snapshot.executable} -m pip install --force-reinstall --no-deps {name}=={copies[0].raw_version}")


@check("packages.interrupted-install", "no compat install was stopped half-way in this environment")
def interrupted_install(ctx: Context) -> Finding:
    """A journal left next to site-packages by a killed compat install: the environment may be half-installed."""
    import os

    from ..install import JOURNAL_NAME

    cid = "packages.interrupted-install"
    snapshot = ctx.snapshot
    if not snapshot.purelib or not os.path.lexists(os.path.join(os.path.dirname(os.path.realpath(snapshot.purelib)), JOURNAL_NAME)):
        return Finding(cid, Status.PASS, "no interrupted compat install")
    from ..install.errors import InstallInputError
    from ..install.transaction import EnvFolders
    from ..install.transaction import interrupted_install as left_behind

    env = EnvFolders.of_snapshot(snapshot)
    restore = f"compat install --restore --python {snapshot.executable}"
    try:
        left = left_behind(env)
    except InstallInputError as exc:
        return Finding(cid, Status.FAIL, f"an install journal is left in this environment and cannot be trusted: {exc.message}", (str(env.journal),), exc.fix)
    if left is None or left.pid == os.getpid():  # running now (this very install, when it verifies what it installed)
        return Finding(cid, Status.PASS, "a compat install is running in this environment now", (str(env.journal),))
    return Finding(cid, Status.FAIL, f"a compat install into {snapshot.prefix} was stopped before it finished (process {left.pid} is gone): "
                   "the environment may be half-installed", (str(env.journal),),
                   f"Run {restore} to put back the state from before it, or compat install --discard-snapshot --python {snapshot.executable} "
                   "to keep the environment as it is now.")


@check("packages.python-support", "the installed Intel packages have wheels for this Python")
def python_support(ctx: Context) -> Finding:
    cid = "packages.python-support"
    python = ctx.snapshot.python_minor
    problems, seen = [], []
    for component in components_where(kind="extension"):
        dist = ctx.snapshot.get(*COMPONENTS[component].names)
        if dist is None or dist.public_version is None or installed_device_build(ctx, component, dist) is not None:
            continue  # a device build: packages.ipex-torch / packages.ccl-torch say so
        release: Optional[IpexRelease | CclRelease] = ctx.matrix.release(component, dist.public_version)  # type: ignore[assignment]
        if release is None:
            continue
        seen.append(f"{dist.name} {release.version}")
        if not any(w.has_python(python) for w in release.wheels):
            coverage = "; ".join(f"{w.host}: {python_list(w.python)}" for w in release.wheels)
            problems.append(f"{dist.name} {release.version} has no published wheel for Python {python} ({coverage})")
    if problems:
        return Finding(cid, Status.WARN, problems[0], tuple(problems[1:]) + ("a wheel that is not published for this Python was built locally or mis-tagged",),
                       "Use a Python the release was published for (compat resolve --python-version X.Y shows which).")
    if not seen:
        return Finding(cid, Status.SKIP, "no Intel packages installed")
    return Finding(cid, Status.PASS, f"{', '.join(seen)}: published for Python {python}")


@check("packages.eol", "end-of-life packages, with the migration path")
def end_of_life(ctx: Context) -> Finding:
    cid = "packages.eol"
    notes = []
    for info in (COMPONENTS[c] for c in components_where(kind="extension")):
        dist = ctx.snapshot.get(*info.names)
        eol = ctx.matrix.eol_of(info.distribution)
        if dist is not None and eol is not None:
            notes.append((dist, eol))
    if not notes:
        return Finding(cid, Status.PASS, "no end-of-life packages installed")
    evidence = tuple(f"{dist.name} {dist.raw_version}: {eol.status}{' since ' + eol.date if eol.date else ''}, last release {eol.last_release}" for dist, eol in notes)
    return Finding(cid, Status.WARN, " and ".join(f"{dist.name} is {eol.status}" for dist, eol in notes), evidence, notes[0][1].advice)
