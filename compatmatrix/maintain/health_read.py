"""Reading the registries for `compat matrix update --health` (the edge: network; matrix/health.py judges).

The pages `compat matrix update` reads (the matrix's packages on their index hosts), the runtime wheels' pages on the
package index (oneccl-cpu, impi-rt), the METADATA of the newest release of each (the newest RUNTIME_RELEASES of a runtime
wheel: what pip tries in turn), then the page of every project those declare (at most MAX_DEPENDENCIES), each
request under maintain/registry.py's own deadline and size cap. Nothing is written (no overlay).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Optional

from ..errors import CompatError
from ..matrix.harvest import PACKAGES, ProjectPage, RegistryFile, by_release, linux_files
from ..matrix.health import HealthReport, applies_on_linux, judge, matrix_pythons, requires_dist
from ..matrix.model import Component, Matrix
from ..names import canonical_name

RUNTIME_RELEASES = 4  # per runtime wheel, newest first: pip's first tries (oneccl-cpu 2022.2.0 -> 2022.1.2, ...)
MAX_DEPENDENCIES = 40  # dependency pages read at most (torch declares ~20)
PACKAGE_INDEX = "pypi"  # where dependencies come from (or its mirror: --index pypi=URL)


def _newest_linux(page: ProjectPage, count: int) -> list[RegistryFile]:
    out = []
    for version in sorted(by_release(page.files), reverse=True):
        if version.is_prerelease or version.is_devrelease:
            continue
        files = [f for f in linux_files(by_release(page.files)[version]) if not f.yanked]
        if files:
            out.append(files[0])
        if len(out) == count:
            break
    return out


def read_health(matrix: Matrix, indexes: Sequence[str] = (), packages: Sequence[Component] = PACKAGES,
                progress: Optional[Callable[[str], None]] = None, session=None) -> HealthReport:
    from ..install.indexes import configure_indexes
    from ..install.trust import trusted_session
    from .registry import page_seconds, read_registries

    read_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    locations = configure_indexes(matrix, indexes)
    session = session or trusted_session()
    read = read_registries(matrix, locations, packages, progress, session, metadata=False)
    pages: list[ProjectPage] = [p for component in packages for p in read.pages.get(component, [])]
    unread = dict(read.unread)
    index = locations.get(PACKAGE_INDEX)
    runtime = sorted({r.distribution for r in matrix.runtime})
    budget = page_seconds() + 2
    if index is not None:
        pages += _index_pages(session, index, runtime, budget, unread).values()
    if not pages:
        why = "; ".join(f"{host}: {reason}" for host, reason in sorted(unread.items())) or "no host to read"
        raise CompatError(f"No registry could be read ({why}).", "Check the network, or point --index HOST=URL at a reachable mirror.")
    wanted: list[RegistryFile] = []
    for page in pages:
        if page.host == PACKAGE_INDEX:
            wanted += _newest_linux(page, RUNTIME_RELEASES if canonical_name(page.project) in runtime else 1)
    metadata = _read_metadata(session, wanted, budget, unread)
    projects = _dependencies(matrix, metadata, {canonical_name(p.project) for p in pages if p.host == PACKAGE_INDEX})
    dependency_pages: dict[str, ProjectPage] = {}
    if index is not None:
        dependency_pages = _index_pages(session, index, projects[:MAX_DEPENDENCIES], budget, unread)
    if len(projects) > MAX_DEPENDENCIES:
        unread["dependencies"] = f"{len(projects) - MAX_DEPENDENCIES} dependency pages not read (at most {MAX_DEPENDENCIES})"
    return judge(matrix, pages, metadata, dependency_pages, unread, read_at, runtime)


def _index_pages(session, index, projects: Sequence[str], budget: float, unread: dict[str, str]) -> dict[str, ProjectPage]:
    """Each project's page on the package index, several at a time under ``budget`` seconds each; a page not read is
    said in ``unread``."""
    from .registry import ReadError, bounded_map, read_page

    def page_of(project: str):
        try:
            return project, read_page(session, index, project), ""
        except ReadError as exc:
            return project, None, str(exc)

    def late(project, seconds):
        return project, None, f"no complete answer within {seconds:.0f} s"

    pages: dict[str, ProjectPage] = {}
    for project, page, why in bounded_map(page_of, projects, budget, late):
        if page is not None:
            pages[project] = page
        else:
            unread[f"{PACKAGE_INDEX}/{project}"] = why
    return pages


def _read_metadata(session, wanted: Sequence[RegistryFile], budget: float, unread: dict[str, str]) -> dict[str, Optional[str]]:
    """Each file's METADATA by its URL (None: not read, said in ``unread``)."""
    from .registry import ReadError, bounded_map, read_metadata_text

    def metadata_of(file: RegistryFile):
        try:
            return file, read_metadata_text(session, file), ""
        except ReadError as exc:
            return file, None, str(exc)

    metadata: dict[str, Optional[str]] = {}
    for file, text, why in bounded_map(metadata_of, wanted, budget * 3, lambda file, seconds: (file, None, f"no complete answer within {seconds:.0f} s")):
        metadata[file.url] = text
        if text is None:
            unread[file.filename] = why
    return metadata


def _dependencies(matrix: Matrix, metadata: dict[str, Optional[str]], read_projects: set[str]) -> list[str]:
    """The projects the METADATA read declares (on Linux, for the matrix's Pythons) whose page was not read, in order."""
    pythons = matrix_pythons(matrix)
    projects: list[str] = []
    for text in metadata.values():
        for requirement in requires_dist(text or ""):
            name = canonical_name(requirement.name)
            if applies_on_linux(requirement, pythons) and name not in read_projects and name not in projects:
                projects.append(name)
    return projects
