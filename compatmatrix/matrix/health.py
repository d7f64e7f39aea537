"""`compat matrix update --health`: what the registries make impossible or surprising for the matrix's packages, each
with its source (the page or file it was read from, and when).

* unsatisfiable: a release's Requires-Dist (for Linux x86_64 CPython, no extra) that no configured index can meet
  (the project's page answers 404, or holds no release inside the specifier);
* requires-python-hole: a Requires-Python with an exclusion (``!=3.14.1``): pip refuses the release on that Python
  only, which a minor version (``--python-version 3.14``) cannot decide;
* yanked: a release withdrawn, with the reason its index gives;
* host-builds-differ: one version, different builds per host (PyPI's CUDA torch declaring nvidia-* packages and the
  CPU index's ``+cpu``; the files' labels or Python tags differ between hosts);
* pip-backtracks: what pip installs for a bare requirement when the newest release cannot be installed (the runtime
  wheels: matrix/runtime.py's choice, over the facts read now).

Pure: pages and METADATA texts in (maintain/health_read.py reads them), a HealthReport out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from ..names import canonical_name
from ..record import Record, replace
from .harvest import ProjectPage, RegistryFile, by_release, linux_files, linux_pythons, local_labels, version_of
from .model import Matrix, Provenance, RuntimeRelease, Unavailable

KINDS = ("unsatisfiable", "requires-python-hole", "yanked", "host-builds-differ", "pip-backtracks")
MAX_ITEMS_PER_KIND = 40


class HealthItem(Record):
    kind: str  # one of KINDS
    package: str
    versions: tuple[str, ...]
    summary: str
    sources: tuple[str, ...]  # "URL (how, read at)"


class HealthReport(Record):
    items: tuple[HealthItem, ...]
    pages: tuple[str, ...]  # every page read: "URL (how, read at)"
    unread: tuple[tuple[str, str], ...]  # (host or file, why)
    dependencies_checked: tuple[str, ...]  # dependency projects whose pages were read
    read_at: str
    left_out: int = 0  # items beyond MAX_ITEMS_PER_KIND of a kind


def page_source(page: ProjectPage) -> str:
    return f"{page.url} ({page.kind}, read {page.read_at})"


def requires_dist(text: str) -> list[Requirement]:
    """The Requires-Dist lines of a METADATA text, as packaging reads them (unreadable lines left out)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line; the description follows
        if line.lower().startswith("requires-dist:"):
            try:
                out.append(Requirement(line.split(":", 1)[1].strip()))
            except InvalidRequirement:
                continue
    return out


def applies_on_linux(requirement: Requirement, pythons: Iterable[Version]) -> bool:
    """Does the requirement apply on Linux x86_64 CPython for any of ``pythons`` (no extra asked)?"""
    marker: Optional[Marker] = requirement.marker
    if marker is None:
        return True
    for python in pythons:
        environment = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                       "implementation_name": "cpython", "platform_python_implementation": "CPython",
                       "python_version": f"{python.major}.{python.minor}", "python_full_version": f"{python.major}.{python.minor}.0", "extra": ""}
        try:
            if marker.evaluate(environment):
                return True
        except Exception:  # noqa: BLE001 - a marker packaging cannot evaluate: taken to apply
            return True
    return False


def matrix_pythons(matrix: Matrix) -> list[Version]:
    low, high = matrix.policy.python_range
    return [Version(f"3.{m}") for m in range(low.minor, high.minor + 1)]


def _satisfied(requirement: Requirement, page: Optional[ProjectPage]) -> Optional[str]:
    """None when some non-yanked release on the page meets the requirement; otherwise why not (a clause)."""
    if page is None:
        return "its page was not read"
    if not page.files:
        return f"{page.url} answered 404 (no such project)" if page.kind.startswith("404") else f"{page.url} lists no files"
    releases = by_release(page.files)
    fitting = [v for v, files in releases.items() if requirement.specifier.contains(v) and not all(f.yanked for f in files)]
    if fitting:
        return None
    newest = max(releases, default=None)
    return f"{page.url} has no release inside it (newest: {newest})"


def hole_versions(text: str, python_range: tuple[Version, Version]) -> list[str]:
    """The full Python versions a Requires-Python excludes one by one (``!=3.14.1``) inside a minor version of
    ``python_range`` it otherwise admits: the holes a minor version cannot see. Whole-minor exclusions (``!=3.4.*``)
    and exclusions outside the range are no holes."""
    try:
        spec = SpecifierSet(text)
    except InvalidSpecifier:
        return []
    low, high = python_range
    out = []
    for item in spec:
        if item.operator != "!=" or item.version.endswith(".*"):
            continue
        try:
            version = Version(item.version)
        except ValueError:
            continue
        minor = Version(f"{version.major}.{version.minor}")
        if version.major == 3 and low <= minor <= high and any(spec.contains(Version(f"3.{version.minor}.{p}"), prereleases=True) for p in range(0, 31)):
            out.append(str(version))
    return out


def _release_span(versions: Sequence[Version]) -> str:
    ordered = sorted(versions)
    return str(ordered[0]) if len(ordered) == 1 else f"{ordered[0]}–{ordered[-1]}"


def _none_has(read: str, matrix: Matrix, unread: Mapping[str, str]) -> str:
    """Who was asked, as it happened: "none of the indexes read (pypi) has it; pytorch-cpu and intel-cpu-us could not be
    reached" -- never "no configured index" when some configured index was not read."""
    unreached = sorted(host for host in unread if host in matrix.hosts and host != read)
    said = f"none of the indexes read ({read}) can satisfy"
    if not unreached:
        return said
    names = unreached[0] if len(unreached) == 1 else f"{', '.join(unreached[:-1])} and {unreached[-1]}"
    return f"{said} ({names} could not be reached)"


class _Read(Record):
    """What a health read found, as the judgements below use it: the pages, the METADATA by file URL, the hosts not
    read and why, when; ``file_of``: each file whose METADATA was read -> (its page, the file, its release);
    ``by_project``: each project's pages, one per host."""

    matrix: Matrix
    pages: Sequence[ProjectPage]
    metadata: Mapping[str, Optional[str]]
    unread: Mapping[str, str]
    read_at: str
    file_of: dict[str, tuple[ProjectPage, RegistryFile, Version]]
    by_project: dict[str, list[ProjectPage]]

    def read_files(self) -> Iterable[tuple[str, str, ProjectPage, RegistryFile, Version]]:
        """(url, METADATA text, page, file, release) of each file whose METADATA was read."""
        for url, text in self.metadata.items():
            if text is None or url not in self.file_of:
                continue
            page, entry, version = self.file_of[url]
            yield url, text, page, entry, version


def judge(matrix: Matrix, pages: Sequence[ProjectPage], metadata: Mapping[str, Optional[str]], dependency_pages: Mapping[str, ProjectPage],
          unread: Mapping[str, str], read_at: str, runtime_projects: Sequence[str] = ()) -> HealthReport:
    by_project: dict[str, list[ProjectPage]] = {}
    for page in pages:
        by_project.setdefault(canonical_name(page.project), []).append(page)
    read = _Read(matrix, pages, metadata, unread, read_at, _files_of(pages, metadata), by_project)
    known_pages = {canonical_name(p.project): p for p in pages if p.host == "pypi"}
    known_pages.update({canonical_name(k): v for k, v in dependency_pages.items()})

    # unsatisfiable dependencies, and the declared dependencies per release (for pip's choice below)
    items, declared, gone = _unsatisfiable(read, known_pages)
    # what pip installs for each runtime wheel, over the facts read now
    if runtime_projects:
        items += _pip_backtracks(read, declared, gone, runtime_projects)
    # Requires-Python holes and yanks, per page
    for page in pages:
        items += _page_items(page, matrix.policy.python_range)
    # one version, different builds per host
    for project, host_pages in by_project.items():
        items += _builds_differ(project, host_pages, matrix.policy.python_range)
    items += _cuda_builds(read, declared)

    kept: list[HealthItem] = []
    left = 0
    for kind in KINDS:
        of_kind = [i for i in items if i.kind == kind]
        kept += of_kind[:MAX_ITEMS_PER_KIND]
        left += max(0, len(of_kind) - MAX_ITEMS_PER_KIND)
    return HealthReport(tuple(kept), tuple(page_source(p) for p in pages), tuple(sorted(unread.items())),
                        tuple(sorted(dependency_pages)), read_at, left)


def _files_of(pages: Sequence[ProjectPage], metadata: Mapping[str, Optional[str]]) -> dict[str, tuple[ProjectPage, RegistryFile, Version]]:
    """Each file whose METADATA was asked for: its page, the file, its release."""
    file_of: dict[str, tuple[ProjectPage, RegistryFile, Version]] = {}
    for page in pages:
        for entry in page.files:
            version = version_of(entry.filename)
            if version is not None and entry.url in metadata:
                file_of[entry.url] = (page, entry, version)
    return file_of


def _unsatisfiable(read: _Read, known_pages: Mapping[str, ProjectPage]) -> tuple[list[HealthItem], dict[tuple[str, Version], tuple[Requirement, ...]], dict[str, Unavailable]]:
    """(an item for each declared dependency no index read can satisfy, each release's dependencies that apply on Linux,
    each dependency that cannot be had as the matrix would record it)."""
    items: list[HealthItem] = []
    pythons = matrix_pythons(read.matrix)
    declared: dict[tuple[str, Version], tuple[Requirement, ...]] = {}
    gone: dict[str, Unavailable] = {}
    for _url, text, page, entry, version in read.read_files():
        project = canonical_name(page.project)
        requirements = tuple(r for r in requires_dist(text) if applies_on_linux(r, pythons))
        declared[(project, version)] = requirements
        for requirement in requirements:
            dependency = canonical_name(requirement.name)
            why = _satisfied(requirement, known_pages.get(dependency))
            if why is None or why == "its page was not read":
                continue
            dep_page = known_pages[dependency]
            items.append(HealthItem("unsatisfiable", project, (str(version),),
                                    f"{project} {version} declares Requires-Dist: {requirement}, which {_none_has(dep_page.host, read.matrix, read.unread)}: {why}; "
                                    f"pinned, pip fails; unpinned, pip passes over it",
                                    (f"{entry.url} (METADATA, read {read.read_at})", page_source(dep_page))))
            gone.setdefault(dependency, Unavailable(dependency, (dep_page.host,), dep_page.read_at[:10], Provenance((dep_page.url,), note=why)))
    return items, declared, gone


def _pip_backtracks(read: _Read, declared: Mapping[tuple[str, Version], tuple[Requirement, ...]], gone: Mapping[str, Unavailable],
                    runtime_projects: Sequence[str]) -> list[HealthItem]:
    """What pip installs for each runtime wheel, over the facts read now: an item where it is not the newest."""
    from .runtime import choice_sentence, pip_choice

    items: list[HealthItem] = []
    live: list[RuntimeRelease] = []
    for (project, version), requirements in declared.items():
        if project in runtime_projects:
            live.append(RuntimeRelease(project, version, tuple(str(r) for r in requirements), "", Provenance((f"{project} {version} METADATA",))))
    now = replace(read.matrix, runtime=tuple(sorted(live, key=lambda r: (r.distribution, r.version), reverse=True)), unavailable=tuple(gone.values()))
    for project in runtime_projects:
        choice = pip_choice(now, Requirement(project))
        said = choice_sentence(now, choice) if choice is not None else None
        if said is not None and choice is not None:
            sources = tuple(page_source(p) for p in read.by_project.get(project, ()))
            items.append(HealthItem("pip-backtracks", project, tuple(str(r.version) for r in choice.picked), said, sources))
    return items


def _page_items(page: ProjectPage, python_range: tuple[Version, Version]) -> list[HealthItem]:
    """One page's yanked releases, then its Requires-Python holes (releases with the same Requires-Python together)."""
    items: list[HealthItem] = []
    project = canonical_name(page.project)
    holes: dict[frozenset[str], tuple[str, list[Version], list[str]]] = {}
    for version, files in sorted(by_release(page.files).items()):
        texts = {f.requires_python for f in files if f.requires_python}
        for text in texts:
            excluded = hole_versions(text, python_range)
            if excluded:
                key = frozenset(str(s) for s in SpecifierSet(text))
                holes.setdefault(key, (text.strip(), [], excluded))[1].append(version)
        if files and all(f.yanked for f in files):
            reason = next((f.yanked_reason.strip() for f in files if f.yanked_reason.strip()), "")
            items.append(HealthItem("yanked", project, (str(version),),
                                    f"{project} {version} is yanked on {page.host}: " + (reason if reason else "no reason given")
                                    + " (pip takes it only when pinned with ==)", (page_source(page),)))
    for text, versions, excluded in holes.values():
        items.append(HealthItem("requires-python-hole", project, tuple(str(v) for v in versions),
                                f"{project} {_release_span(versions)} declare{'s' if len(versions) == 1 else ''} Requires-Python {text}: "
                                f"pip refuses {'it' if len(versions) == 1 else 'them'} on Python {', '.join(excluded)} only, "
                                f"which the minor version ({', '.join(sorted({'.'.join(e.split('.')[:2]) for e in excluded}))}) alone cannot decide: "
                                "give the full version (--python-version X.Y.Z, or --python)", (page_source(page),)))
    return items


def _builds_differ(project: str, host_pages: Sequence[ProjectPage], python_range: tuple[Version, Version]) -> list[HealthItem]:
    """The (newest five) releases of a project that are a different build on each host that has them."""
    if len(host_pages) < 2:
        return []
    items: list[HealthItem] = []
    per_host = {p.host: by_release(p.files) for p in host_pages}
    hosts = sorted(per_host)
    shared = set.intersection(*(set(r) for r in per_host.values()))
    for version in sorted(shared, reverse=True)[:5]:
        labels = {h: sorted(local_labels(linux_files(per_host[h][version]))) for h in hosts}
        tags = {h: sorted(str(p) for p in linux_pythons(per_host[h][version], python_range)) for h in hosts}
        if len({tuple(v) for v in labels.values()}) > 1 or len({tuple(v) for v in tags.values()}) > 1:
            said = "; ".join(f"{h}: {', '.join(label or '(unlabelled)' for label in labels[h]) or 'no Linux x86_64 wheel'} for Python {', '.join(tags[h]) or '-'}"
                             for h in hosts)
            items.append(HealthItem("host-builds-differ", project, (str(version),), f"{project} {version} is a different build per host: {said}",
                                    tuple(page_source(p) for p in host_pages)))
    return items


def _cuda_builds(read: _Read, declared: Mapping[tuple[str, Version], tuple[Requirement, ...]]) -> list[HealthItem]:
    """The releases on PyPI whose METADATA requires nvidia-* packages: a CUDA build, where the CPU index has the CPU one."""
    items: list[HealthItem] = []
    for _url, _text, page, entry, version in read.read_files():
        nvidia = sorted({canonical_name(r.name) for r in declared.get((canonical_name(page.project), version), ()) if canonical_name(r.name).startswith("nvidia-")})
        if nvidia and page.host == "pypi":
            cpu = read.matrix.hosts.get("pytorch-cpu")
            where = f" ({cpu.url})" if cpu is not None else ""
            items.append(HealthItem("host-builds-differ", canonical_name(page.project), (str(version),),
                                    f"{canonical_name(page.project)} {version} on pypi is a CUDA build: its METADATA requires {len(nvidia)} nvidia-* "
                                    f"packages on Linux ({', '.join(nvidia[:3])}{', ...' if len(nvidia) > 3 else ''}); the CPU build is {version}+cpu on the CPU index{where}",
                                    (f"{entry.url} (METADATA, read {read.read_at})",)))
    return items


def health_json(report: HealthReport) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "command": "matrix update --health",
        "read_at": report.read_at,
        "items": [{"kind": i.kind, "package": i.package, "versions": list(i.versions), "summary": i.summary, "sources": list(i.sources)} for i in report.items],
        "left_out": report.left_out,
        "pages": list(report.pages),
        "dependencies_checked": list(report.dependencies_checked),
        "unread": [{"where": where, "why": why} for where, why in report.unread],
    }


def health_lines(report: HealthReport) -> list[str]:
    words = {"unsatisfiable": "unsatisfiable dependency", "requires-python-hole": "Requires-Python hole", "yanked": "yanked",
             "host-builds-differ": "build differs by host", "pip-backtracks": "pip falls back"}
    lines = [f"Registry health, read {report.read_at}: {len(report.items)} finding(s) over {len(report.pages)} page(s)"
             f" and {len(report.dependencies_checked)} dependency page(s)"]
    for kind in KINDS:
        for item in (i for i in report.items if i.kind == kind):
            lines.append(f"  {words[kind]}: {item.summary}")
            lines += [f"      source: {s}" for s in item.sources]
    if report.left_out:
        lines.append(f"  ... {report.left_out} more (--json lists the first {MAX_ITEMS_PER_KIND} of each kind)")
    lines += [f"  not read: {where}: {why}" for where, why in report.unread]
    return lines
