"""The overlay: registry facts `compat matrix update` harvested, kept in the user's data folder, read by every command.

``$XDG_DATA_HOME/compatmatrix/overlay.json`` (``~/.local/share/compatmatrix/overlay.json``): JSON (read without a TOML
parser: start-up), whose entries are matrix entries in the matrix's own keys (docs/MATRIX.md, "The overlay"), each with
its ``source`` (``registry:pypi/torchvision/0.29.2``) and a note saying when and from which page it was read. It is
untrusted input: size-capped, read only when the file exists, and validated by the matrix loader's own entry parsers
against the bundled matrix's hosts and torches; anything wrong and the whole overlay is ignored, in one sentence.

``apply`` merges it into the curated matrix: a release or line the curated matrix lacks is added (harvested); for a
release it has, the harvested facts the curated entry lacks are added (another host's wheel set, a glibc floor, a
line's newer releases) and every disagreement with a curated fact is kept for printing; the curated fact is used.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import datetime

from ..errors import MatrixError, shown
from ..record import Record, replace
from .model import COMPONENT_ORDER, Component, LibraryLine, Matrix, Provenance, Release
from .tested import Tested, TestedProblem
from .tested import parse as parse_tested

FORMAT = "compatmatrix-overlay"
SCHEMA = 1
FILE_NAME = "overlay.json"
MAX_BYTES = 4 << 20  # a harvest of every release of the six packages is ~100 KB


def data_dir(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """$XDG_DATA_HOME/compatmatrix, or ~/.local/share/compatmatrix (a relative XDG_DATA_HOME is ignored, as the spec says);
    None with a relative HOME (as cachefiles.cache_dir: the overlay would follow the working directory, and a folder a
    user merely runs compat in could hand every command its matrix facts).
    A string, not a Path: every command asks, and pathlib is not imported on the static paths (tests/test_startup.py)."""
    base = environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    if not os.path.isabs(base):
        return None
    return os.path.join(base, "compatmatrix")


def overlay_path(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Where the overlay is; None when there is no place for one (a relative HOME without XDG_DATA_HOME)."""
    folder = data_dir(environ)
    return None if folder is None else os.path.join(folder, FILE_NAME)


class OverlayState(Record):
    """What the overlay added to the matrix, or why it was ignored."""

    path: str
    read_at: str  # when its registries were read (UTC)
    harvested: frozenset[tuple[Component, str]]  # (component, version or line) added from the overlay
    filled: int  # facts added to curated entries
    disagreements: tuple[str, ...]  # sentences: the curated fact is used
    hosts_unread: tuple[str, ...]  # "host: why", the hosts the update could not read
    ignored: str = ""  # why the overlay was not used ("" when it was)
    tested: tuple[Any, ...] = ()  # matrix.tested.Tested: the pairings compat matrix verify tried on this machine

    def age(self, now: Optional[datetime.datetime] = None) -> str:
        import datetime

        try:
            then = datetime.datetime.strptime(self.read_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return "unknown age"
        seconds = int(((now or datetime.datetime.now(datetime.timezone.utc)) - then).total_seconds())
        if seconds < -300:  # a clock that was wrong when it was written, or is now: said, never shown as fresh
            return "in the future: check this machine's clock"
        seconds = max(0, seconds)
        if seconds < 3600:
            return f"{seconds // 60} min old"
        if seconds < 2 * 86400:
            return f"{seconds // 3600} h old"
        return f"{seconds // 86400} days old"


class OverlayIgnored(Exception):
    pass


def read_document(path: str) -> Optional[dict[str, Any]]:
    """The overlay file as JSON, None when there is none; OverlayIgnored for one that cannot be read as one."""
    from .load import TomlProblem, read_file_bytes

    try:
        if not os.path.lexists(path):
            return None
        data = read_file_bytes(path)
    except TomlProblem as exc:
        raise OverlayIgnored(str(exc)) from None
    except OSError as exc:
        raise OverlayIgnored(f"it cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > MAX_BYTES:
        raise OverlayIgnored(f"it is larger than {MAX_BYTES >> 20} MiB")
    from ..values import json_text

    try:
        document = json_text(json.loads(data.decode("utf-8")))  # its strings as text: a \ud800 escape crashed every printer
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise OverlayIgnored("it is not UTF-8 JSON") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise OverlayIgnored(f"it is not a compatmatrix overlay (no \"format\": \"{FORMAT}\")")
    if document.get("schema_version") != SCHEMA:
        raise OverlayIgnored(f"its schema_version is {shown(repr(document.get('schema_version')), 40)}; this compatmatrix reads {SCHEMA}")
    return document


def parse_entries(document: Mapping[str, Any], matrix: Matrix, path: str) -> dict[Component, list[Release]]:
    """The overlay's entries as releases, validated by the matrix loader's parsers (MatrixError for anything wrong)."""
    from .load import _KEY, _PARSERS, _describe, _Entry, _torch_release

    root = _Entry(path, "top level", dict(document))
    for key in ("format", "schema_version", "read_at", "hosts_unread", "generator", "tested"):
        root.raw(key, None)
    entries = _Entry(path, "entries", root.raw("entries", {}))
    root.done()
    hosts = matrix.hosts
    releases: dict[Component, list[Release]] = {}
    torch_entries = [_torch_release(e, hosts) for e in entries.tables("torch", _describe("torch"))]
    releases[Component.TORCH] = list(torch_entries)
    torch_versions = set(matrix.versions(Component.TORCH)) | {r.version for r in torch_entries}
    for component in COMPONENT_ORDER:
        if component in (Component.TORCH,):
            continue
        table = component.table
        if component in (Component.IPEX, Component.CCL) and table in entries.table:
            raise entries.error(table, "is not harvested (IPEX's and the bindings' facts are curated by hand)")
        parse = _PARSERS[component]
        releases[component] = [parse(e, hosts, torch_versions, table) for e in entries.tables(table, _describe(table, _KEY.get(component, "version")))]
    entries.done()
    for component, items in releases.items():
        keys = [r.line if isinstance(r, LibraryLine) else r.version for r in items]
        if len(set(keys)) != len(keys):
            raise MatrixError(path, f"entries > {component.table}", "", "lists a release twice")
        for release in items:
            if not release.wheels and not isinstance(release, LibraryLine):
                raise MatrixError(path, f"entries > {component.table} {release.version}", "wheels", "lists no host with wheels")
    return releases


def _with_source(provenance: Provenance, other: Provenance, what: str) -> Provenance:
    sources = provenance.sources + tuple(s for s in other.sources if s not in provenance.sources)
    return Provenance(sources, provenance.verified, (provenance.note + " " if provenance.note else "") + f"{what} harvested: {other.note}")


def merge(matrix: Matrix, harvested: Mapping[Component, list[Release]], path: str = "", read_at: str = "",
          hosts_unread: tuple[str, ...] = ()) -> tuple[Matrix, OverlayState]:
    """The curated matrix with the harvested releases: curated facts win, a disagreement is kept as a sentence."""
    from .compare import compare_line, compare_wheels
    from .load import _newest_first

    added: set[tuple[Component, str]] = set()
    filled = 0
    disagreements: list[str] = []
    releases = dict(matrix.releases)
    for component in COMPONENT_ORDER:
        items = harvested.get(component) or []
        if not items:
            continue
        mine = list(matrix.releases[component])
        for release in items:
            if isinstance(release, LibraryLine):
                index = next((i for i, r in enumerate(mine) if isinstance(r, LibraryLine) and r.line.release[:2] == release.line.release[:2]), None)
                if index is None:
                    mine.append(release)
                    added.add((component, str(release.line)))
                    continue
                curated: LibraryLine = mine[index]  # type: ignore[assignment]
                found = compare_line(component, curated, release)
                disagreements.extend(d.sentence() for d in found.disagreements)
                new = [v for v in release.versions if v not in curated.versions]
                if new:
                    filled += len(new)
                    mine[index] = replace(curated, versions=tuple(sorted(curated.versions + tuple(new), reverse=True)),
                                          yanked=curated.yanked | (release.yanked & frozenset(new)),
                                          provenance=_with_source(curated.provenance, release.provenance, f"releases {', '.join(map(str, new))}"))
                    added.update((component, str(v)) for v in new)
                continue
            index = next((i for i, r in enumerate(mine) if r.version == release.version), None)
            if index is None:
                mine.append(release)
                added.add((component, str(release.version)))
                continue
            curated_release = mine[index]
            found = compare_wheels(component, release.version, curated_release.wheels, release.wheels)
            disagreements.extend(d.sentence() for d in found.disagreements)
            curated_requirement = getattr(curated_release, "requirement", None)  # what a companion declares of torch: pin, floor, range
            if curated_requirement is not None and getattr(release, "requirement", None) != curated_requirement:
                declared = getattr(release, "requirement", None)
                disagreements.append(f"{component.distribution} {release.version}: declares {'torch' + str(declared) if declared is not None else 'no torch'} "
                                     f"per {release.provenance.sources[0]}, the curated matrix says torch{curated_requirement} (the curated fact is used)")
            wheels = list(curated_release.wheels)
            by_host = {w.host: i for i, w in enumerate(wheels)}
            changed = False
            for made in release.wheels:
                at = by_host.get(made.host)
                if at is None:  # another host's wheel set: marked as harvested (compat matrix shows "+h")
                    wheels.append(replace(made, provenance=Provenance(made.provenance.sources, made.provenance.verified,
                                                                      f"wheel set harvested: {made.provenance.note}")))
                    changed = True
                elif wheels[at].glibc_min is None and made.glibc_min is not None:
                    wheels[at] = replace(wheels[at], glibc_min=made.glibc_min, provenance=_with_source(wheels[at].provenance, made.provenance, "glibc_min"))
                    changed = True
            if changed:
                filled += 1
                mine[index] = replace(curated_release, wheels=tuple(wheels))
        key = (lambda r: r.line) if component in (Component.TRANSFORMERS, Component.ACCELERATE) else (lambda r: r.version)
        releases[component] = _newest_first(mine, key=key)
    merged = replace(matrix, releases=releases)
    return merged, OverlayState(path, read_at, frozenset(added), filled, tuple(disagreements), hosts_unread)


def with_tested(matrix: Matrix, tested: Sequence[Tested]) -> Matrix:
    """The matrix with the pairings compat matrix verify tried added to the releases they name (torchvision, torchaudio,
    oneccl_bind_pt: the releases whose pairing with torch is graded); a release the matrix lacks gets none. The pairing
    a release is built for is never changed: ``pairing_with`` answers it before any tested one."""
    if not tested:
        return matrix
    releases = dict(matrix.releases)
    for component in {t.component for t in tested}:
        items = list(releases[component])
        for i, release in enumerate(items):
            mine = [t.pairing() for t in tested if t.component is component and t.version in release.versions]
            if mine and hasattr(release, "pairings"):
                items[i] = replace(release, pairings=tuple(release.pairings) + tuple(mine))  # type: ignore[attr-defined]
        releases[component] = tuple(items)
    return replace(matrix, releases=releases)


def apply(matrix: Matrix, environ: Mapping[str, str] = os.environ) -> tuple[Matrix, Optional[OverlayState]]:
    """The matrix with the user's overlay, if there is one; a broken or hostile overlay leaves the matrix as it is and
    says why in ``OverlayState.ignored``."""
    path = overlay_path(environ)
    if path is None:
        return matrix, None
    try:
        document = read_document(path)
    except OverlayIgnored as exc:
        return matrix, OverlayState(str(path), "", frozenset(), 0, (), (), str(exc))
    if document is None:
        return matrix, None
    try:
        harvested = parse_entries(document, matrix, str(path))
        read_at = document.get("read_at") if isinstance(document.get("read_at"), str) else ""
        unread = document.get("hosts_unread") or []
        unread_lines = tuple(shown(str(u), 200) for u in unread) if isinstance(unread, list) else ()
        tested = parse_tested(document.get("tested"), list(matrix.hosts))
        merged, state = merge(matrix, harvested, str(path), read_at, unread_lines)
        return with_tested(merged, tested), replace(state, tested=tested)
    except TestedProblem as exc:
        return matrix, OverlayState(str(path), "", frozenset(), 0, (), (), f"tested: {exc}")
    except MatrixError as exc:
        where = f"{exc.where}, field '{exc.field}'" if exc.field else exc.where
        return matrix, OverlayState(str(path), "", frozenset(), 0, (), (), f"{where}: {exc.problem}" if where else exc.problem)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as exc:
        return matrix, OverlayState(str(path), "", frozenset(), 0, (), (), f"it holds a value of an unexpected type or size ({type(exc).__name__})")


def document_of(entries: Mapping[str, Any], read_at: str, hosts_unread: Mapping[str, str]) -> dict[str, Any]:
    return {"format": FORMAT, "schema_version": SCHEMA, "generator": "compat matrix update", "read_at": read_at,
            "hosts_unread": [f"{host}: {why}" for host, why in sorted(hosts_unread.items())],
            "entries": {table: [dict(e) for e in items] for table, items in entries.items()}}


def kept_tested(path: str, matrix: Matrix) -> list[dict[str, Any]]:
    """The tested records of the overlay at ``path``, as JSON, to keep when the overlay is written again (none when it
    cannot be read: a broken overlay is replaced whole)."""
    try:
        document = read_document(path)
        return [t.to_json() for t in parse_tested(document.get("tested"), list(matrix.hosts))] if document is not None else []
    except (OverlayIgnored, TestedProblem):
        return []


def record_tested(record: Tested, matrix: Matrix, environ: Mapping[str, str] = os.environ) -> str:
    """Add ``record`` to the overlay (replacing an older record of the same pair), keeping everything else in it; an
    overlay that cannot be read is not overwritten (OverlayIgnored says why). Returns the overlay's path."""
    path = overlay_path(environ)
    document = read_document(path)
    if document is None:
        document = {"format": FORMAT, "schema_version": SCHEMA, "generator": "compat matrix verify", "read_at": "", "hosts_unread": [],
                    "entries": {}}
    try:
        kept = parse_tested(document.get("tested"), list(matrix.hosts))
    except TestedProblem as exc:
        raise OverlayIgnored(f"its tested records cannot be read ({exc})") from None
    from .tested import recorded

    document = dict(document)
    document["tested"] = [t.to_json() for t in recorded(kept, record)]
    return save(document, environ)


def save(document: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> str:
    """Write the overlay (a temporary file renamed over the old one: a reader never sees half a file)."""
    import tempfile

    from ..redact import strip_document

    path = overlay_path(environ)
    if path is None:
        raise OSError(errno.ENOENT, "HOME is a relative path and XDG_DATA_HOME is not set, so the overlay has no place")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = json.dumps(strip_document(document), indent=1, ensure_ascii=False) + "\n"
    fd, temp = tempfile.mkstemp(prefix=".overlay-", suffix=".json", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    return path
