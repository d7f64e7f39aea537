"""What a registry's project pages say about releases, as matrix entries (pure: pages in, entries out).

``compat matrix update`` (maintain/registry.py reads the pages) and ``scripts/crosscheck_registry.py`` share this one
reading of a registry: a host's files (PEP 691 JSON or PEP 503 HTML, with PEP 592 yanks, PEP 700 upload times and
PEP 658/714 metadata flags) become, per release and host, the facts the matrix records in its own format
(docs/MATRIX.md): the CPython versions with a Linux x86_64 wheel, the glibc floor of the manylinux tags, the local
label, the yank and its reason, Requires-Python, the release date; the torch a torchvision/torchaudio release
declares (its METADATA's ``Requires-Dist: torch``); for transformers/accelerate the minor lines, their releases, yanks,
Requires-Python and the torch / accelerate floors their METADATA declares. ``harvest`` compares them with a matrix:
the entries the matrix lacks (or has incompletely) and every disagreement with a curated fact. No network, no files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..record import Record
from .compare import Comparison, Disagreement, compare_line, compare_wheels
from .model import COMPONENTS, CompanionRelease, Component, LibraryLine, Matrix, WheelSet, components_where

__all__ = ["Comparison", "Disagreement", "compare_line", "compare_wheels"]

#: The packages `compat matrix update` reads, as the registries name them.
PACKAGES: tuple[Component, ...] = components_where(registry_read=True)
#: Binary packages: facts per release and host.  Libraries: per minor line, from PyPI.
BINARIES = tuple(c for c in PACKAGES if COMPONENTS[c].kind != "library")
LIBRARIES = tuple(c for c in PACKAGES if COMPONENTS[c].kind == "library")
COMPANIONS = components_where(kind="companion")
_LEGACY = {"manylinux1": Version("2.5"), "manylinux2010": Version("2.12"), "manylinux2014": Version("2.17")}
_PEP600 = re.compile(r"^manylinux_(\d+)_(\d+)_")
_CPYTHON = re.compile(r"^cp3(\d{1,2})$")


class RegistryFile(Record):
    """One file of a project page, with what the page says about it."""

    filename: str
    url: str
    yanked: bool
    yanked_reason: str
    requires_python: Optional[str]
    upload_time: str  # ISO 8601 (PEP 700), "" when the page does not say
    metadata: bool  # the index serves its METADATA next to it (PEP 658 / 714)


class ProjectPage(Record):
    """A host's page for one project: where it was read, how, when."""

    host: str
    project: str
    url: str
    kind: str  # "PEP 691 JSON" or "PEP 503 HTML"
    read_at: str  # UTC, ISO 8601 to the second
    files: tuple[RegistryFile, ...]


def tag_glibc(platform: str) -> Optional[Version]:
    """The glibc a manylinux platform tag promises (``manylinux_2_28_x86_64`` -> 2.28); None for others."""
    match = _PEP600.match(platform)
    if match:
        return Version(f"{match.group(1)}.{match.group(2)}")
    legacy = re.match(r"^(manylinux(?:1|2010|2014))_", platform)
    return _LEGACY[legacy.group(1)] if legacy else None


def _linux_x86_64(platform: str) -> bool:
    return platform.endswith("x86_64") and "linux" in platform


def wheel_of(filename: str):
    """(name, version, tags) of a wheel file name; None for anything else."""
    if not filename.endswith(".whl"):
        return None
    try:
        name, version, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, ValueError):
        return None
    return name, version, tags


def version_of(filename: str) -> Optional[Version]:
    """The release a wheel or sdist file belongs to (None for other files)."""
    wheel = wheel_of(filename)
    if wheel is not None:
        return wheel[1]
    try:
        return parse_sdist_filename(filename)[1]
    except (InvalidSdistFilename, InvalidVersion, ValueError):
        return None


def by_release(files: Iterable[RegistryFile]) -> dict[Version, list[RegistryFile]]:
    """The files of each release (labelled builds ``2.7.0+cpu`` under their public version ``2.7.0``)."""
    releases: dict[Version, list[RegistryFile]] = {}
    for entry in files:
        version = version_of(entry.filename)
        if version is None:
            continue
        releases.setdefault(Version(version.public), []).append(entry)
    return releases


def _admits(spec: Optional[SpecifierSet], minor: int) -> bool:
    """Does Requires-Python admit some 3.<minor>.x?"""
    if spec is None:
        return True
    return any(spec.contains(Version(f"3.{minor}.{patch}"), prereleases=True) for patch in range(0, 31))


def _spec(text: Optional[str]) -> Optional[SpecifierSet]:
    if not text:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def linux_pythons(files: Iterable[RegistryFile], python_range: tuple[Version, Version]) -> set[Version]:
    """CPython 3.X versions with a Linux x86_64 wheel: ``cp3X`` tags (free-threaded ``t`` builds left out); a
    ``py3-none`` or ``abi3`` wheel covers every version of ``python_range`` its Requires-Python admits."""
    low, high = python_range
    found: set[Version] = set()
    for entry in files:
        wheel = wheel_of(entry.filename)
        if wheel is None:
            continue
        spec = _spec(entry.requires_python)
        for tag in wheel[2]:
            if not _linux_x86_64(tag.platform):
                continue
            match = _CPYTHON.match(tag.interpreter)
            if match and tag.abi == "abi3":
                found.update(Version(f"3.{m}") for m in range(int(match.group(1)), high.minor + 1) if _admits(spec, m))
            elif match and not tag.abi.endswith("t"):
                found.add(Version(f"3.{match.group(1)}"))
            elif tag.interpreter in ("py3", "py2.py3") and tag.abi == "none":
                found.update(Version(f"3.{m}") for m in range(low.minor, high.minor + 1) if _admits(spec, m))
    return found


def glibc_floor(files: Iterable[RegistryFile]) -> Optional[Version]:
    """The strictest glibc floor among a release's Linux x86_64 wheels (per file the lowest its tags accept)."""
    floors = []
    for entry in files:
        wheel = wheel_of(entry.filename)
        if wheel is None:
            continue
        found = [tag_glibc(t.platform) for t in wheel[2] if _linux_x86_64(t.platform)]
        found = [f for f in found if f is not None]
        if found:
            floors.append(min(found))
    return max(floors) if floors else None


def local_labels(files: Iterable[RegistryFile]) -> set[str]:
    labels = set()
    for entry in files:
        wheel = wheel_of(entry.filename)
        if wheel is not None:
            labels.add(f"+{wheel[1].local}" if wheel[1].local else "")
    return labels


def linux_files(files: Iterable[RegistryFile]) -> list[RegistryFile]:
    out = []
    for entry in files:
        wheel = wheel_of(entry.filename)
        if wheel is not None and any(_linux_x86_64(t.platform) for t in wheel[2]):
            out.append(entry)
    return out


def _yank(files: Sequence[RegistryFile]) -> tuple[bool, str]:
    """Yanked when every file is; the first reason given."""
    yanked = bool(files) and all(f.yanked for f in files)
    reason = next((f.yanked_reason for f in files if f.yanked and f.yanked_reason), "") if yanked else ""
    return yanked, reason.strip()


def source_of(host: str, project: str, version: Version) -> str:
    """``registry:pypi/torchvision/0.29.2``: the registry listing a fact was read from."""
    return f"registry:{host}/{project}/{version}"


def _read_note(page: ProjectPage) -> str:
    return f"read {page.read_at} from {page.url} ({page.kind})"


# --- metadata ---------------------------------------------------------------------------------------------------


class Declared(Record):
    """What a release's METADATA declares about its partners."""

    torch: Optional[SpecifierSet]  # Requires-Dist: torch (no extra), None when it declares none
    torch_extra: Optional[SpecifierSet]  # Requires-Dist: torch ...; extra == "torch" (transformers)
    accelerate_extra: Optional[SpecifierSet]  # Requires-Dist: accelerate ...; extra == "torch"
    requires_python: Optional[str]


def read_metadata(text: str) -> Declared:
    """The partner requirements of a METADATA file, read by ``packaging.metadata.parse_email`` (the core-metadata fields
    as packaging reads them: any Metadata-Version, folded headers); unreadable requirements are skipped. Which extra a
    requirement belongs to is its marker, evaluated by packaging (``extra == "torch"``), not matched as text."""
    from packaging.metadata import parse_email  # here: the overlay's merge (every command) needs none of this
    from packaging.requirements import InvalidRequirement, Requirement

    raw, _ = parse_email(text)
    torch = extra_torch = extra_accelerate = None
    for line in raw.get("requires_dist", []):
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            continue
        name = requirement.name.lower().replace("_", "-")
        marker = requirement.marker
        in_torch_extra = marker is not None and _in_extra(marker, "torch")
        if name == "torch" and marker is None:
            torch = requirement.specifier
        elif name == "torch" and in_torch_extra:
            extra_torch = requirement.specifier
        elif name == "accelerate" and in_torch_extra:
            extra_accelerate = requirement.specifier
    requires = raw.get("requires_python")
    return Declared(torch, extra_torch, extra_accelerate, str(requires) if requires else None)


def _in_extra(marker: Any, extra: str) -> bool:
    """Is a requirement with this marker asked for by ``extra`` alone (true with it, false without)?"""
    from packaging.markers import UndefinedEnvironmentName

    try:
        return bool(marker.evaluate({"extra": extra})) and not marker.evaluate({"extra": ""})
    except (UndefinedEnvironmentName, ValueError, TypeError):
        return False


def _floor(spec: Optional[SpecifierSet]) -> Optional[Version]:
    """The version a ``>=X`` (or ``==X``) specifier starts at; None for none."""
    if spec is None:
        return None
    for item in spec:
        if item.operator in (">=", "==", "~=") and not item.version.endswith(".*"):
            try:
                return Version(item.version)
            except InvalidVersion:
                return None
    return None


def _exact(spec: Optional[SpecifierSet]) -> Optional[Version]:
    if spec is None:
        return None
    items = list(spec)
    if len(items) == 1 and items[0].operator in ("==", "===") and not items[0].version.endswith(".*"):
        try:
            return Version(items[0].version)
        except InvalidVersion:
            return None
    return None


def metadata_wanted(component: Component, page: ProjectPage, matrix: Matrix) -> list[RegistryFile]:
    """The files whose METADATA ``harvest`` needs from this page: one Linux x86_64 wheel of each companion release the
    matrix lacks; for a library, one wheel of the newest release of each line the matrix lacks or lacks releases of."""
    releases = by_release(page.files)
    wanted = []
    if component in COMPANIONS:
        known = set(matrix.versions(component))
        oldest = min(known, default=None)
        for version, files in releases.items():
            linux = linux_files(files)
            if oldest is not None and version < oldest:
                continue
            if version not in known and linux and not version.is_prerelease and not version.is_devrelease:
                wanted.append(linux[0])
    elif component in LIBRARIES:
        lines = _lines(releases)
        curated = {line.line.release[:2]: line for line in matrix.releases[component]}  # type: ignore[union-attr]
        oldest = min(curated, default=None)
        for key, versions in lines.items():
            line = curated.get(key)
            if oldest is not None and key < oldest:
                continue
            if line is None or set(versions) - set(line.versions):
                wheels = [f for f in releases[versions[0]] if f.filename.endswith(".whl")]
                if wheels:
                    wanted.append(wheels[0])
    return wanted


# --- facts -> matrix entries -----------------------------------------------------------------------------------------


def wheel_entry(host: str, project: str, version: Version, files: Sequence[RegistryFile], page: ProjectPage,
                python_range: tuple[Version, Version]) -> Optional[dict[str, Any]]:
    """A ``[[<table>.wheels]]`` entry for one host, as the matrix writes it; None without Linux x86_64 CPython wheels."""
    linux = linux_files(files)
    pythons = linux_pythons(linux, python_range)
    if not pythons:
        return None
    entry: dict[str, Any] = {"host": host, "python": [f"3.{v.minor}" for v in sorted(pythons)]}
    floor = glibc_floor(linux)
    if floor is not None:
        entry["glibc_min"] = f"{floor.major}.{floor.minor}"
    labels = sorted(label for label in local_labels(linux) if label)
    if labels:
        entry["local_label"] = labels[0]
    yanked, reason = _yank(linux)
    if yanked:
        entry["yanked"] = True
        if reason:
            entry["yanked_reason"] = reason
    entry["source"] = source_of(host, project, version)
    tags = sorted({t.platform for f in linux for t in (wheel_of(f.filename) or ("", "", ()))[2] if _linux_x86_64(t.platform)})
    entry["note"] = f"Linux x86_64 files tagged {', '.join(tags)}; {_read_note(page)}."
    return entry


def _released(files: Iterable[RegistryFile]) -> str:
    times = sorted(f.upload_time[:10] for f in files if re.match(r"^\d{4}-\d{2}-\d{2}", f.upload_time or ""))
    return times[0] if times else ""


def _lines(releases: Mapping[Version, Sequence[RegistryFile]]) -> dict[tuple[int, ...], list[Version]]:
    lines: dict[tuple[int, ...], list[Version]] = {}
    for version in releases:
        if version.is_prerelease or version.is_devrelease or version.local:
            continue
        lines.setdefault(tuple(version.release[:2]), []).append(version)
    return {key: sorted(values, reverse=True) for key, values in lines.items()}


class Harvest(Record):
    """What a registry read adds to a matrix: new entries (the matrix's own format, per table) and facts the curated
    entries lack (``missing``: a wheel set of another host, a glibc floor), the disagreements, and what could not be
    derived (sentences)."""

    entries: dict[str, tuple[dict[str, Any], ...]]  # table -> entries the matrix lacks or has incompletely
    disagreements: tuple[Disagreement, ...]
    unverified: tuple[str, ...]  # facts left unverified, in words
    skipped: tuple[str, ...]  # releases not harvested, in words


#: Does the model take a torchvision/torchaudio release that declares no torch (``torch`` left out: it pairs ``unverified``
#: with any torch)?  Where it does not, such a release is not harvested but named (see _binary).
UNPINNED_COMPANIONS = "Optional" in str(CompanionRelease.__annotations__.get("torch", ""))


def _companion_torch(component: Component, version: Version, declared: Optional[Declared], torch_versions: set[Version],
                     source: str) -> tuple[dict[str, str], bool, str]:
    """(fields, verified, note) of a companion release the matrix lacks, from what its METADATA declares, as declared:
    an exact pin is ``torch`` (pinned); a floor or a range is ``torch_requires`` (every torch inside it ``declared``, none
    verified); no declaration at all leaves both out (the release pairs ``unverified`` with any torch). Its
    Requires-Python goes into ``requires_python`` as written."""
    if declared is None:
        return {}, False, f"its METADATA could not be read; the torch it goes with is unknown ({source})"
    fields: dict[str, str] = {}
    if declared.requires_python and _spec(declared.requires_python) is not None:
        fields["requires_python"] = str(_spec(declared.requires_python))
    exact = _exact(declared.torch)
    if exact is not None:
        fields["torch"] = str(Version(exact.public))
        return fields, True, f"METADATA declares Requires-Dist: torch=={fields['torch']} ({source})"
    if declared.torch is not None and str(declared.torch):
        fields["torch_requires"] = str(declared.torch)
        return fields, True, (f"METADATA declares Requires-Dist: torch{declared.torch}: a floor or a range, kept as declared: every torch "
                              f"it admits pairs as declared, none verified ({source})")
    return fields, True, f"METADATA declares no torch requirement: no torch is pinned, every pairing is unverified until curated ({source})"


def stable_abi_fact(files: Iterable[RegistryFile]) -> str:
    """What a release's Linux x86_64 wheel tags say of a stable ABI: "a py3-none wheel", "abi3 wheels"; "" for neither
    (a ``*_stable.so`` inside a wheel is not on the page: curate it from the wheel's file list)."""
    tags = {t for f in linux_files(files) for t in (wheel_of(f.filename) or ("", "", ()))[2]}
    if any(t.interpreter.startswith("py3") and t.abi == "none" for t in tags):
        return "a py3-none wheel"
    if any(t.abi == "abi3" for t in tags):
        return "abi3 wheels"
    return ""


def harvest(matrix: Matrix, pages: Mapping[Component, Sequence[ProjectPage]],
            metadata: Mapping[str, Optional[str]], unread: Optional[Mapping[str, str]] = None) -> Harvest:
    """Compare the pages read with ``matrix``: the entries it lacks or has incompletely, and the disagreements.

    ``metadata`` maps a file's URL to its METADATA text (None where it could not be read); ``unread``: the hosts that
    could not be read (host -> why): a new release gets an assumed wheel set there, ``verified = false``, as curated
    entries do (the same build as PyPI's, labelled as that host labels its builds)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    disagreements: list[Disagreement] = []
    unverified: list[str] = []
    skipped: list[str] = []
    python_range = matrix.policy.python_range
    torch_versions = set(matrix.versions(Component.TORCH))
    # torch first: the companions pair with the torches the read adds too
    ordered = sorted(pages, key=lambda c: (c is not Component.TORCH, list(Component).index(c)))
    for component in ordered:
        if component in LIBRARIES:
            new, differ, loose = _library(matrix, component, pages[component], metadata)
            entries.setdefault(component.table, []).extend(new)
            disagreements.extend(differ)
            unverified.extend(loose)
            continue
        new, differ, loose, skip = _binary(matrix, component, pages[component], metadata, python_range, torch_versions, unread or {})
        entries.setdefault(component.table, []).extend(new)
        disagreements.extend(differ)
        unverified.extend(loose)
        skipped.extend(skip)
        if component is Component.TORCH:
            torch_versions |= {Version(e["version"]) for e in new}
    return Harvest({table: tuple(items) for table, items in entries.items() if items}, tuple(disagreements), tuple(unverified), tuple(skipped))


class _Found:
    """What reading one package's pages found: entries to add, disagreements with the curated matrix, notes on what is
    unverified, notes on the releases skipped."""

    def __init__(self) -> None:
        self.new: list[dict[str, Any]] = []
        self.differ: list[Disagreement] = []
        self.loose: list[str] = []
        self.skip: list[str] = []


def _binary(matrix: Matrix, component: Component, pages: Sequence[ProjectPage], metadata: Mapping[str, Optional[str]],
            python_range: tuple[Version, Version], torch_versions: set[Version], unread: Mapping[str, str]):
    project = component.distribution
    per_host = _per_host(pages)
    found = _Found()
    oldest = min(matrix.versions(component), default=None)
    for version in sorted(per_host, reverse=True):
        hosts = per_host[version]
        curated = matrix.release(component, version)
        sets = _wheel_entries(project, version, hosts, python_range)
        if not sets:
            continue
        if curated is not None:
            _curated_entry(component, version, curated, sets, found)
            continue
        if oldest is None or version < oldest:
            continue  # older than anything the matrix speaks for: not news
        reason = _not_harvested(component, project, version, sets)
        if reason:
            found.skip.append(reason)
            continue
        entry = _new_entry(matrix, component, version, hosts, sets, metadata, torch_versions, found)
        if entry is None:
            continue
        entry["wheels"] = _entry_wheels(matrix, component, version, sets, unread, found)
        found.new.append(entry)
    return found.new, found.differ, found.loose, found.skip


def _per_host(pages: Sequence[ProjectPage]) -> dict[Version, dict[str, tuple[ProjectPage, list[RegistryFile]]]]:
    """Each final release's files on each host's page."""
    per_host: dict[Version, dict[str, tuple[ProjectPage, list[RegistryFile]]]] = {}
    for page in pages:
        for version, files in by_release(page.files).items():
            if version.is_prerelease or version.is_devrelease:
                continue
            per_host.setdefault(version, {})[page.host] = (page, files)
    return per_host


def _wheel_entries(project: str, version: Version, hosts: Mapping[str, tuple[ProjectPage, list[RegistryFile]]],
                   python_range: tuple[Version, Version]) -> dict[str, dict[str, Any]]:
    """The ``[[x.wheels]]`` entry of each host that has wheels of the release."""
    sets = {}
    for host, (page, files) in hosts.items():
        made = wheel_entry(host, project, version, files, page, python_range)
        if made is not None:
            sets[host] = made
    return sets


def _curated_entry(component: Component, version: Version, curated: Any, sets: Mapping[str, dict[str, Any]], found: _Found) -> None:
    """A release the curated matrix has: an entry only for what it adds or where it disagrees."""
    harvested = wheel_sets(sets)
    compared = compare_wheels(component, version, curated.wheels, harvested)
    found.differ.extend(compared.disagreements)
    if not (compared.adds or compared.disagreements):
        return
    # kept: every command merges it, and prints the disagreement
    entry = {"version": str(version)}
    if isinstance(curated, CompanionRelease):  # what it declares, as curated (a pin, a floor or range, none)
        if curated.torch is not None:
            entry["torch"] = str(curated.torch)
        elif curated.torch_requires is not None:
            entry["torch_requires"] = str(curated.torch_requires)
    entry["source"] = next(iter(sets.values()))["source"]
    entry["note"] = "harvested for a release the curated matrix has: the facts it lacks are added (a host's wheel set, a glibc floor), curated facts win where they disagree"
    entry["wheels"] = list(sets.values())
    found.new.append(entry)


def _not_harvested(component: Component, project: str, version: Version, sets: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a release the curated matrix lacks is not added whatever its metadata says ("" if it may be)."""
    if all(e.get("yanked") for e in sets.values()):
        return f"{project} {version}: yanked on every host read ({next(iter(sets.values())).get('yanked_reason') or 'no reason given'}): not added"
    if not COMPONENTS[component].overlay_kept:  # curated by hand (IPEX)
        return (f"{project} {version}: on {', '.join(sorted(sets))}, not harvested: the torch its import check accepts and its CPU "
                "floor are not in its metadata (curate it by hand)")
    return ""


def _new_entry(matrix: Matrix, component: Component, version: Version, hosts: Mapping[str, tuple[ProjectPage, list[RegistryFile]]],
               sets: Mapping[str, Any], metadata: Mapping[str, Optional[str]], torch_versions: set[Version],
               found: _Found) -> Optional[dict[str, Any]]:
    """The entry of a release the curated matrix lacks, its wheels aside; None if it is skipped (noted in ``found``)."""
    project = component.distribution
    host_order = [h for h in matrix.policy.host_preference.get(component, ()) if h in sets] + [h for h in sets if h not in matrix.policy.host_preference.get(component, ())]
    pypi_first = "pypi" if "pypi" in sets else host_order[0]
    source = source_of(pypi_first, project, version)
    entry: dict[str, Any] = {"version": str(version)}
    if component is Component.TORCH:
        entry.update(_torch_fields(hosts))
    else:
        fields = _companion_fields(component, version, hosts, metadata, torch_versions, source, found)
        if fields is None:
            return None
        entry.update(fields)
    entry["source"] = source
    return entry


def _torch_fields(hosts: Mapping[str, tuple[ProjectPage, list[RegistryFile]]]) -> dict[str, Any]:
    """A new torch release's Requires-Python and release date."""
    fields: dict[str, Any] = {}
    first_page, first_files = next(iter(hosts.values()))
    all_files = [f for _, files in hosts.values() for f in files]
    requires = next((f.requires_python for f in all_files if f.requires_python), None)
    if requires and _spec(requires) is not None:
        fields["requires_python"] = requires
    released = _released(hosts.get("pypi", (first_page, first_files))[1])
    if released:
        fields["released"] = released
    return fields


def _companion_fields(component: Component, version: Version, hosts: Mapping[str, tuple[ProjectPage, list[RegistryFile]]],
                      metadata: Mapping[str, Optional[str]], torch_versions: set[Version], source: str,
                      found: _Found) -> Optional[dict[str, Any]]:
    """A new companion release's torch pin or range (from its METADATA), stable-ABI fact and note; None if it is
    skipped (noted in ``found``)."""
    project = component.distribution
    declared_text = next((metadata.get(f.url) for _, files in hosts.values() for f in linux_files(files) if metadata.get(f.url)), None)
    declared = read_metadata(declared_text) if declared_text else None
    fields, verified, note = _companion_torch(component, version, declared, torch_versions, source)
    unpinned = "torch" not in fields and "torch_requires" not in fields and declared is not None
    reason = _companion_skipped(project, version, fields, declared, unpinned, note, torch_versions)
    if reason:
        found.skip.append(reason)
        return None
    entry: dict[str, Any] = dict(fields)
    abi = stable_abi_fact([f for _, files in hosts.values() for f in files])
    if abi:
        entry["stable_abi"] = abi
    if not verified:
        entry["verified"] = False
    if "torch_requires" in fields or unpinned:
        found.loose.append(f"{project} {version}: {note}")
    entry["note"] = note
    return entry


def _companion_skipped(project: str, version: Version, fields: Mapping[str, Any], declared: Optional[Declared], unpinned: bool,
                       note: str, torch_versions: set[Version]) -> str:
    """Why a new companion release is not harvested ("" if it is)."""
    if unpinned and not UNPINNED_COMPANIONS:
        return (f"{project} {version}: not harvested: {note}; this compat's matrix model takes no torchvision/torchaudio "
                "entry without a torch pin, so the release stays unlisted")
    if declared is None:
        return f"{project} {version}: not harvested: {note}"
    if "torch" in fields and Version(fields["torch"]) not in torch_versions:
        return f"{project} {version}: not harvested: it pins torch {fields['torch']}, which neither the matrix nor this read has"
    if "torch_requires" in fields and not any(SpecifierSet(fields["torch_requires"]).contains(t, prereleases=True) for t in torch_versions):
        return f"{project} {version}: not harvested: it declares torch{fields['torch_requires']}, which no torch of the matrix or this read meets"
    return ""


def _entry_wheels(matrix: Matrix, component: Component, version: Version, sets: Mapping[str, Any], unread: Mapping[str, str],
                  found: _Found) -> list[Any]:
    """A new release's wheel sets: those read, in the host preference's order, then those assumed for hosts not read."""
    project = component.distribution
    order = matrix.policy.host_preference.get(component, ())
    wheels = [sets[h] for h in order if h in sets] + [sets[h] for h in sets if h not in order]  # read, then assumed
    for host in order:
        assumed = _assumed_set(matrix, component, host, sets, unread)
        if assumed is not None:
            wheels.append(assumed)
            found.loose.append(f"{project} {version} on {host}: {assumed['note']}")
    return wheels


def _assumed_set(matrix: Matrix, component: Component, host: str, sets: Mapping[str, Mapping[str, Any]], unread: Mapping[str, str]) -> Optional[dict[str, Any]]:
    """A wheel set on a host that could not be read, taken to be PyPI's (as the curated entries take it): only for a host
    the newest curated release of the package has wheels on; labelled as there; ``verified = false``."""
    if host not in unread or host in sets or "pypi" not in sets:
        return None
    template = next((w for r in matrix.releases[component] for w in r.wheels if w.host == host), None)
    if template is None:
        return None
    pypi = sets["pypi"]
    made: dict[str, Any] = {"host": host, "python": list(pypi["python"])}
    if "glibc_min" in pypi:
        made["glibc_min"] = pypi["glibc_min"]
    if template.local_label:
        made["local_label"] = template.local_label
    made["source"] = matrix.hosts[host].url
    made["verified"] = False
    made["note"] = (f"assumed equal to the PyPI coverage (the same build; glibc_min too), labelled as the curated releases on {host} are: "
                    f"{host} could not be read when harvested ({unread[host]})")
    return made


def wheel_sets(entries: Mapping[str, Mapping[str, Any]]) -> tuple[WheelSet, ...]:
    """Harvested ``[[x.wheels]]`` entries as the model's wheel sets (they are well-formed: made above)."""
    from .model import Provenance

    return tuple(WheelSet(host=e["host"], python=frozenset(Version(p) for p in e["python"]), local_label=e.get("local_label", ""),
                          yanked=bool(e.get("yanked", False)), yanked_reason=e.get("yanked_reason", ""),
                          provenance=Provenance((e["source"],), True, e.get("note", "")),
                          glibc_min=Version(e["glibc_min"]) if e.get("glibc_min") else None) for e in entries.values())


def _library(matrix: Matrix, component: Component, pages: Sequence[ProjectPage], metadata: Mapping[str, Optional[str]]):
    project = component.distribution
    page = next((p for p in pages if p.host == "pypi"), pages[0] if pages else None)
    new: list[dict[str, Any]] = []
    differ: list[Disagreement] = []
    loose: list[str] = []
    if page is None:
        return new, differ, loose
    releases = by_release(page.files)
    curated = {line.line.release[:2]: line for line in matrix.releases[component]}  # type: ignore[union-attr]
    oldest = min((line.line for line in curated.values()), default=None)
    for key, versions in sorted(_lines(releases).items()):
        line: Optional[LibraryLine] = curated.get(key)  # type: ignore[assignment]
        newest = versions[0]
        source = source_of(page.host, project, newest)
        yanked = sorted((v for v in versions if _yank(releases[v])[0]), reverse=True)
        requires = next((f.requires_python for f in releases[newest] if f.requires_python), None)
        if line is not None:
            found = _compare_line_read(component, line, versions, yanked, requires, source)
            differ.extend(found.disagreements)
            if not found.adds and not found.disagreements:  # kept otherwise: every command merges it, and prints the disagreement
                continue
        elif oldest is not None and Version(".".join(map(str, key))) < oldest:
            continue
        entry: dict[str, Any] = {"line": ".".join(map(str, key)), "versions": [str(v) for v in versions], "yanked": [str(v) for v in yanked]}
        if requires and _spec(requires) is not None:
            entry["requires_python"] = requires
        text = next((metadata.get(f.url) for f in releases[newest] if metadata.get(f.url)), None)
        declared = read_metadata(text) if text else None
        notes = [_read_note(page)]
        if line is not None:
            _curated_floors(line, entry, notes)
        else:
            _declared_floors(component, declared, entry, notes, loose)
        entry["source"] = source
        entry["note"] = "; ".join(notes) + "."
        new.append(entry)
    return new, differ, loose


def _compare_line_read(component: Component, line: LibraryLine, versions: Sequence[Version], yanked: Sequence[Version],
                       requires: Optional[str], source: str) -> Comparison:
    """A curated library line against the same line as read from the registry (its floors as curated)."""
    from .model import Provenance

    return compare_line(component, line, LibraryLine(
        package=component.table, line=line.line, versions=tuple(versions), yanked=frozenset(yanked),
        requires_python=_spec(requires), torch_min=line.torch_min, accelerate_min=line.accelerate_min,
        provenance=Provenance((source,), True, "")))


def _curated_floors(line: LibraryLine, entry: dict[str, Any], notes: list[str]) -> None:
    """A curated line's torch_min / accelerate_min, into its harvested entry."""
    for field in ("torch_min", "accelerate_min"):
        value = getattr(line, field)
        if value is not None:
            entry[field] = str(value)
    notes.append("torch_min / accelerate_min as curated for this line")


def _declared_floors(component: Component, declared: Optional[Declared], entry: dict[str, Any], notes: list[str], loose: list[str]) -> None:
    """A new line's torch_min / accelerate_min as its METADATA declares them, into its harvested entry; what is unverified
    about it, into ``loose``."""
    project = component.distribution
    torch_spec = None if declared is None else (declared.torch_extra if COMPONENTS[component].torch_extra else declared.torch)
    torch_min = _floor(torch_spec)
    if torch_min is not None:
        entry["torch_min"] = str(torch_min)
        notes.append(f"torch_min from Requires-Dist: torch {torch_spec}" + ("; extra == 'torch'" if COMPONENTS[component].torch_extra else ""))
    if COMPONENTS[component].torch_extra and declared is not None:
        accelerate_min = _floor(declared.accelerate_extra)
        if accelerate_min is not None:
            entry["accelerate_min"] = str(accelerate_min)
            notes.append(f"accelerate_min from Requires-Dist: accelerate {declared.accelerate_extra}; extra == 'torch'")
    if declared is None:
        entry["verified"] = False
        notes.append("its METADATA could not be read: torch_min not derived")
        loose.append(f"{project} {entry['line']}.*: METADATA not read, torch_min unverified")
    loose.append(f"{project} {entry['line']}.*: a new line; the behaviours the profiles gate on ([[feature]] ranges) are not in its "
                 "metadata and were not curated for it: unverified")
