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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import datetime

from ..errors import MatrixError, shown
from ..record import Record, replace
from .model import COMPONENT_ORDER, COMPONENTS, Component, LibraryLine, Matrix, Provenance, Release
from .tested import MAX_RECORDS, Tested, rewritable
from .tested import parse_each as parse_tested_each
from .tested import parse_one as parse_tested_one

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
    skipped: tuple[str, ...] = ()  # a note for each record (entry, tested record) skipped alone; the rest is used
    ignored_kind: str = ""  # NEWER: a newer compat's overlay (never replaced); else "" (update moves it aside)

    @property
    def ignored_advice(self) -> str:
        return ignored_advice(self.ignored_kind)

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


NEWER = "newer"  # OverlayIgnored.kind: written by a newer compat (a schema_version above SCHEMA)
BAD_SUFFIX = ".bad-"  # an unreadable overlay is moved aside to overlay.json.bad-<UTC time> before a new one is written


class OverlayIgnored(Exception):
    """Why the overlay file cannot be used; ``kind`` NEWER for a newer compat's overlay (refused, never replaced), ""
    for one that is no overlay this compat can read (compat matrix update moves it aside, then writes a new one)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def ignored_advice(kind: str) -> str:
    """The fix every reader gives for an overlay it ignores: never 'run compat matrix update' for one that update would
    not replace."""
    if kind == NEWER:
        return "Upgrade compat, or move the file aside (compat matrix update will not replace it)."
    return (f"Run 'compat matrix update': it moves the file aside to {FILE_NAME}{BAD_SUFFIX}<UTC time> (kept, for you to read) "
            "and writes a new one; or remove the file.")


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
        document = json.loads(data.decode("utf-8"))
        if b"\\ud" in data.lower():  # only JSON's \ud800-style escapes make lone surrogates (UTF-8 bytes cannot)
            document = json_text(document)  # its strings as text: a \ud800 escape crashed every printer
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise OverlayIgnored("it is not UTF-8 JSON") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise OverlayIgnored(f"it is not a compatmatrix overlay (no \"format\": \"{FORMAT}\")")
    version = document.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA:
        raise OverlayIgnored(f"it was written by a newer compat (schema_version {shown(str(version), 20)}; this compat reads {SCHEMA})", NEWER)
    if version != SCHEMA:
        raise OverlayIgnored(f"its schema_version is {shown(repr(document.get('schema_version')), 40)}; this compatmatrix reads {SCHEMA}")
    return document


#: Top-level keys of the overlay (anything else: not an overlay this compatmatrix wrote, ignored whole).
_TOP_KEYS = ("format", "schema_version", "read_at", "hosts_unread", "generator", "tested")
_NOTES_KEPT = 20  # notes about skipped records said one by one; the rest counted


def _note(text: str) -> str:
    from ..values import comment_text

    return comment_text(shown(text, 300))


def _skip_note(exc: Exception) -> str:
    if isinstance(exc, MatrixError):
        where = f"{exc.where}, field '{exc.field}'" if exc.field else exc.where
        return _note(f"{where}: {exc.problem}" if where else exc.problem)
    return _note(f"a value of an unexpected type or size ({type(exc).__name__})")


class Entries(Record):
    """The overlay's harvested entries, each validated alone: the releases, the raw entries that passed (per table, as
    written: what a rewrite keeps), and a note for each entry skipped."""

    releases: dict[Component, list[Release]]
    kept: dict[str, list[Any]]
    skipped: tuple[str, ...]


def read_entries(document: Mapping[str, Any], matrix: Matrix, path: str) -> Entries:
    """The overlay's entries as releases, each entry validated alone by the matrix loader's own parsers against the
    matrix's hosts and torches (those of the overlay's valid torch entries too). A bad entry -- unknown key, bad version,
    unknown host or torch, a release listed twice, no wheels -- is skipped with a note naming it; the others are used.
    MatrixError only for what makes the file no overlay at all (an unknown top-level key, ``entries`` not a table).
    Linear in the number of entries."""
    from .load import _Entry

    root = _Entry(path, "top level", dict(document))
    for key in _TOP_KEYS:
        root.raw(key, None)
    table_of_entries = root.raw("entries", {})
    root.done()
    if not isinstance(table_of_entries, dict):
        raise MatrixError(path, "entries", "", "must be a table of the harvested packages' entries")
    known_tables = {c.table: c for c in COMPONENT_ORDER if COMPONENTS[c].overlay_kept}
    releases: dict[Component, list[Release]] = {c: [] for c in known_tables.values()}
    kept: dict[str, list[Any]] = {}
    skipped = [_unharvested_note(table) for table in table_of_entries if table not in known_tables]
    torch_versions = set(matrix.versions(Component.TORCH))
    for component in sorted(known_tables.values(), key=lambda c: c is not Component.TORCH):  # torch first: the others pair with it
        table = component.table
        items = table_of_entries.get(table, [])
        if not isinstance(items, list):
            skipped.append(_note(f"entries > {table} is not a list of entries: skipped"))
            continue
        found, items_kept, notes = _read_table(component, items, path, matrix.hosts, torch_versions)
        releases[component].extend(found)
        if items_kept:
            kept[table] = items_kept
        skipped.extend(notes)
        if component is Component.TORCH:
            torch_versions.update(map(_release_key, found))
    return Entries(releases, kept, tuple(skipped))


def _unharvested_note(table: str) -> str:
    why = "is not harvested (IPEX's and the bindings' facts are curated by hand)" if table in {c.table for c in COMPONENT_ORDER} \
        else "is not a package compat matrix update harvests"
    return _note(f"entries > {table} {why}: skipped")


def _release_key(release: Release) -> Any:
    """What makes a release one of its component's: a line's version line, else its version."""
    return release.line if isinstance(release, LibraryLine) else release.version


def _read_table(component: Component, items: list[Any], path: str, hosts: Any,
                torch_versions: set[Any]) -> tuple[list[Release], list[Any], list[str]]:
    """One component's overlay entries, each validated alone: (the releases, the raw entries they came from, a note for
    each entry skipped)."""
    from .load import _KEY, _PARSERS, _describe, _Entry, _torch_release

    table = component.table
    describe = _describe(table, _KEY.get(component, "version"))
    seen: set[Any] = set()
    releases: list[Release] = []
    kept: list[Any] = []
    skipped: list[str] = []
    for index, item in enumerate(items):
        where = f"entries > {describe(index, item)}"
        try:
            entry = _Entry(path, where, item)
            release = _torch_release(entry, hosts) if component is Component.TORCH else _PARSERS[component](entry, hosts, torch_versions, table)
        except (MatrixError, TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as exc:
            skipped.append(_skip_note(exc) if isinstance(exc, MatrixError) else _note(f"{where}: {_skip_note(exc)}"))
            continue
        key = _release_key(release)
        if key in seen:
            skipped.append(_note(f"{where}: lists a release an earlier entry lists: skipped"))
            continue
        if not release.wheels and not isinstance(release, LibraryLine):
            skipped.append(_note(f"{where}, field 'wheels': lists no host with wheels: skipped"))
            continue
        seen.add(key)
        releases.append(release)
        kept.append(item)
    return releases, kept, skipped


def valid_entries(entries: Mapping[str, Sequence[Mapping[str, Any]]], matrix: Matrix) -> tuple[dict[str, tuple[dict[str, Any], ...]], tuple[str, ...]]:
    """Harvested entries as they may be stored: each validated alone, as ``apply`` will read it; (the entries that pass,
    a note naming each one that does not and why). One odd registry value (``Requires-Python: ===3.11``, a tag
    ``manylinux_2_999999999``) costs its own release, never the update."""
    from ..values import json_text

    document = {"entries": json_text({table: [dict(e) for e in items] for table, items in entries.items()})}
    found = read_entries(document, matrix, "the harvest")
    return {table: tuple(items) for table, items in found.kept.items()}, found.skipped


def parse_entries(document: Mapping[str, Any], matrix: Matrix, path: str) -> dict[Component, list[Release]]:
    """``read_entries``, strict: MatrixError naming the first entry that would be skipped."""
    found = read_entries(document, matrix, path)
    if found.skipped:
        raise MatrixError(path, "", "", found.skipped[0])
    return found.releases


def said_notes(notes: Sequence[str]) -> tuple[str, ...]:
    """At most _NOTES_KEPT notes, then how many more: a file of 16,000 bad entries is 21 lines, not 16,000."""
    if len(notes) <= _NOTES_KEPT:
        return tuple(notes)
    return tuple(notes[:_NOTES_KEPT]) + (f"... and {len(notes) - _NOTES_KEPT} more records skipped",)


def _with_source(provenance: Provenance, other: Provenance, what: str) -> Provenance:
    sources = provenance.sources + tuple(s for s in other.sources if s not in provenance.sources)
    return Provenance(sources, provenance.verified, (provenance.note + " " if provenance.note else "") + f"{what} harvested: {other.note}")


class _Merging:
    """What a merge has done so far: the (component, version) added, how many releases it filled in, the
    disagreements as sentences."""

    def __init__(self) -> None:
        self.added: set[tuple[Component, str]] = set()
        self.filled = 0
        self.disagreements: list[str] = []


def merge(matrix: Matrix, harvested: Mapping[Component, list[Release]], path: str = "", read_at: str = "",
          hosts_unread: tuple[str, ...] = ()) -> tuple[Matrix, OverlayState]:
    """The curated matrix with the harvested releases: curated facts win, a disagreement is kept as a sentence.
    Linear: each harvested release finds its curated one through an index by key (version, or a line's major.minor)."""
    done = _Merging()
    releases = dict(matrix.releases)
    for component in COMPONENT_ORDER:
        items = harvested.get(component) or []
        if items:
            releases[component] = _merge_component(component, matrix.releases[component], items, done)
    merged = replace(matrix, releases=releases)
    return merged, OverlayState(path, read_at, frozenset(done.added), done.filled, tuple(done.disagreements), hosts_unread)


def _merge_component(component: Component, curated: Sequence[Release], items: Sequence[Release], done: _Merging) -> tuple:
    """One component's curated releases with its harvested ones, newest first."""
    from .load import _newest_first

    mine = list(curated)
    lines = {r.line.release[:2]: i for i, r in enumerate(mine) if isinstance(r, LibraryLine)}
    versions = {r.version: i for i, r in enumerate(mine) if not isinstance(r, LibraryLine)}
    for release in items:
        if isinstance(release, LibraryLine):
            index = lines.get(release.line.release[:2])
            if index is None:
                lines[release.line.release[:2]] = len(mine)
                mine.append(release)
                done.added.add((component, str(release.line)))
            else:
                mine[index] = _merge_line(component, mine[index], release, done)  # type: ignore[arg-type]
            continue
        index = versions.get(release.version)
        if index is None:
            versions[release.version] = len(mine)
            mine.append(release)
            done.added.add((component, str(release.version)))
        else:
            mine[index] = _merge_release(component, mine[index], release, done)
    key = (lambda r: r.line) if COMPONENTS[component].kind == "library" else (lambda r: r.version)
    return _newest_first(mine, key=key)


def _merge_line(component: Component, curated: LibraryLine, release: LibraryLine, done: _Merging) -> LibraryLine:
    """A curated library line with the versions a harvested one adds."""
    from .compare import compare_line

    found = compare_line(component, curated, release)
    done.disagreements.extend(d.sentence() for d in found.disagreements)
    have = set(curated.versions)
    new = [v for v in release.versions if v not in have]
    if not new:
        return curated
    done.filled += len(new)
    done.added.update((component, str(v)) for v in new)
    return replace(curated, versions=tuple(sorted(curated.versions + tuple(new), reverse=True)),
                   yanked=curated.yanked | (release.yanked & frozenset(new)),
                   provenance=_with_source(curated.provenance, release.provenance, f"releases {', '.join(map(str, new))}"))


def _merge_release(component: Component, curated: Release, release: Release, done: _Merging) -> Release:
    """A curated release with the wheel sets (or glibc floors) a harvested one of the same version adds; a
    disagreement on wheels or on the torch it declares is kept as a sentence."""
    from .compare import compare_wheels

    found = compare_wheels(component, release.version, curated.wheels, release.wheels)
    done.disagreements.extend(d.sentence() for d in found.disagreements)
    curated_requirement = getattr(curated, "requirement", None)  # what a companion declares of torch: pin, floor, range
    if curated_requirement is not None and getattr(release, "requirement", None) != curated_requirement:
        declared = getattr(release, "requirement", None)
        done.disagreements.append(f"{component.distribution} {release.version}: declares {'torch' + str(declared) if declared is not None else 'no torch'} "
                                  f"per {release.provenance.sources[0]}, the curated matrix says torch{curated_requirement} (the curated fact is used)")
    wheels = _merged_wheels(curated.wheels, release.wheels)
    if wheels is None:
        return curated
    done.filled += 1
    return replace(curated, wheels=wheels)


def _merged_wheels(curated: Sequence[Any], harvested: Sequence[Any]) -> Optional[tuple]:
    """The curated wheel sets with another host's harvested set added (marked as harvested: compat matrix shows "+h")
    and a missing glibc floor filled in; None when the harvest adds nothing."""
    wheels = list(curated)
    by_host = {w.host: i for i, w in enumerate(wheels)}
    changed = False
    for made in harvested:
        at = by_host.get(made.host)
        if at is None:  # another host's wheel set: marked as harvested (compat matrix shows "+h")
            wheels.append(replace(made, provenance=Provenance(made.provenance.sources, made.provenance.verified,
                                                              f"wheel set harvested: {made.provenance.note}")))
            changed = True
        elif wheels[at].glibc_min is None and made.glibc_min is not None:
            wheels[at] = replace(wheels[at], glibc_min=made.glibc_min, provenance=_with_source(wheels[at].provenance, made.provenance, "glibc_min"))
            changed = True
    return tuple(wheels) if changed else None


def with_tested(matrix: Matrix, tested: Sequence[Tested]) -> Matrix:
    """The matrix with the pairings compat matrix verify tried added to the releases they name (torchvision, torchaudio,
    oneccl_bind_pt: the releases whose pairing with torch is graded); a release the matrix lacks gets none. The pairing
    a release is built for is never changed: ``pairing_with`` answers it before any tested one."""
    if not tested:
        return matrix
    releases = dict(matrix.releases)
    by_release: dict[tuple[Component, Any], list[Tested]] = {}
    for t in tested:
        by_release.setdefault((t.component, t.version), []).append(t)
    for component in {t.component for t in tested}:
        items = list(releases[component])
        for i, release in enumerate(items):
            mine = [t.pairing() for v in release.versions for t in by_release.get((component, v), ())]
            if mine and hasattr(release, "pairings"):
                items[i] = replace(release, pairings=tuple(release.pairings) + tuple(mine))  # type: ignore[attr-defined]
        releases[component] = tuple(items)
    return replace(matrix, releases=releases)


def apply(matrix: Matrix, environ: Mapping[str, str] = os.environ) -> tuple[Matrix, Optional[OverlayState]]:
    """The matrix with the user's overlay, if there is one. Each record (a harvested entry, a tested record) is validated
    alone: a bad one is skipped and named in ``OverlayState.skipped``, the rest used. Only a file that is no overlay at all
    (not UTF-8 JSON, another format or schema, over the size cap, an unknown top-level key) leaves the matrix as it is and
    says why in ``OverlayState.ignored``."""
    path = overlay_path(environ)
    if path is None:
        return matrix, None
    with gc_paused():
        return _apply(matrix, path)


class gc_paused:
    """The cyclic garbage collector paused while a large document is read into many small objects (none of them in a
    cycle): its full collections, triggered by allocation counts, made reading an overlay at the size cap grow faster than
    linearly (about half the time at 16,500 entries). Restored as it was."""

    def __enter__(self) -> None:
        import gc

        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        import gc

        if self.was:
            gc.enable()


def _apply(matrix: Matrix, path: str) -> tuple[Matrix, Optional[OverlayState]]:
    try:
        document = read_document(path)
    except OverlayIgnored as exc:
        return matrix, OverlayState(str(path), "", frozenset(), 0, (), (), str(exc), ignored_kind=exc.kind)
    if document is None:
        return matrix, None
    try:
        found = read_entries(document, matrix, str(path))
        read_at = document.get("read_at") if isinstance(document.get("read_at"), str) else ""
        unread = document.get("hosts_unread") or []
        unread_lines = tuple(shown(str(u), 200) for u in unread[:50]) if isinstance(unread, list) else ()
        tested, tested_notes = parse_tested_each(document.get("tested"), list(matrix.hosts))
        merged, state = merge(matrix, found.releases, str(path), read_at, unread_lines)
        return with_tested(merged, tested), replace(state, tested=tested, skipped=said_notes(found.skipped + tested_notes))
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
    """The tested records of the overlay at ``path``, as JSON, to keep when the overlay is written again: each record
    alone (a bad one costs no other), escaped where it only lacked escaping; none when the file is no overlay at all."""
    try:
        document = read_document(path)
    except OverlayIgnored:
        return []
    if document is None:
        return []
    return [t.to_json() for t in rewritable(document.get("tested"), list(matrix.hosts))[0]]


# --- writing: one writer at a time, each merging into what the file holds when it writes ---------------------------

NOT_READ = object()  # transact's read_at_start when the writer took no fingerprint at its start
LOCK_WAIT_S = 30.0  # how long a writer waits for another compat's write (a write takes well under a second)


class Stored(Record):
    """What a write of the overlay did."""

    path: str
    skipped: tuple[str, ...]  # records not written (each invalid alone), with why
    changed_meanwhile: bool  # the file changed between the writer's start and its write (another compat wrote it): merged
    replaced_unreadable: str = ""  # why the file compat moved aside could not be read ("" when it could)
    document: Any = None  # what was written
    moved_to: str = ""  # where the unreadable file was moved (overlay.json.bad-<UTC time>), "" when none was


def fingerprint(path: Optional[str]) -> Optional[str]:
    """sha256 of the file's bytes, None when there is none (or it cannot be read): what a writer read at its start, to
    compare with what it finds when it writes."""
    import hashlib

    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read(MAX_BYTES + 1)).hexdigest()
    except OSError:
        return None


class LockHeld(OSError):
    """Another process held a folder's lock for longer than a writer waits: ``holder`` its pid and name, when
    /proc/locks names it ("" otherwise)."""

    def __init__(self, folder: str, seconds: float, holder: str = "") -> None:
        super().__init__(errno.EWOULDBLOCK, f"another process{f' ({holder})' if holder else ''} has held the lock on {folder} for over {seconds:g} s")
        self.folder = folder
        self.seconds = seconds
        self.holder = holder

    def sentence(self, what: str) -> tuple[str, str]:
        """(the error, the fix) for a write of ``what`` that gave up waiting."""
        who = f"another process ({self.holder})" if self.holder else "another process"
        pid = self.holder.split(" ", 2)[1].rstrip(",") if self.holder.startswith("pid ") else ""
        return (f"{what} is locked: {who} has held the lock on {shown(self.folder, 200)} for over {self.seconds:g} s "
                "(another compat matrix update or verify writing it).",
                "Wait for it to finish, or stop it" + (f" (kill {pid})" if pid else "") + ", then run the same command again.")


def lock_holder(fd: int) -> str:
    """'pid N, NAME' of the process holding the flock on ``fd``'s file, read from /proc/locks (bounded); "" when it
    cannot be told (no /proc, another kind of lock)."""
    try:
        status = os.fstat(fd)
        wanted = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
        with open("/proc/locks", "rb") as handle:
            text = handle.read(1 << 20).decode("ascii", "replace")
    except OSError:
        return ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[1] != "FLOCK" or fields[5] != wanted or not fields[4].isdigit():
            continue
        pid = fields[4]
        if not os.path.exists(f"/proc/{pid}"):  # the process that took it is gone (a child it passed the lock to holds it)
            return ""
        try:
            with open(f"/proc/{pid}/comm", "rb") as handle:
                name = handle.read(64).decode("utf-8", "replace").strip()
        except OSError:
            name = ""
        from ..values import comment_text

        return f"pid {pid}" + (f", {comment_text(shown(name, 40))}" if name else "")
    return ""


class folder_lock:
    """An exclusive lock (flock) on a folder, held while one writer reads, merges and writes a file in it; every other
    compat writing there waits for it, up to ``seconds`` (then OSError EWOULDBLOCK, said as one sentence by the caller).
    A lock on the folder itself: nothing is left behind, and a rename over the file keeps it. Advisory: readers need no
    lock (a write is a rename, so a reader sees the old file or the new one)."""

    def __init__(self, folder: str, seconds: float = LOCK_WAIT_S) -> None:
        self.folder = folder
        self.seconds = seconds
        self.fd = -1

    def __enter__(self) -> "folder_lock":
        import fcntl
        import time

        self.fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        deadline = time.monotonic() + self.seconds
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = lock_holder(self.fd)
                    os.close(self.fd)
                    self.fd = -1
                    raise LockHeld(self.folder, self.seconds, holder) from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1


def transact(change: Callable[[Optional[dict[str, Any]]], dict[str, Any]], matrix: Matrix, environ: Mapping[str, str] = os.environ,
             read_at_start: Any = NOT_READ, keep_unreadable: bool = False, lock_wait: float = LOCK_WAIT_S) -> Stored:
    """Read the overlay, ``change`` it, validate and escape every record, and write it -- all under the folder's lock, so
    two writers at once (two updates, an update and a verify) each merge into what the other wrote instead of one
    reverting the other. ``change`` gets the current document (None when there is none, or it is no overlay and
    ``keep_unreadable`` is false: it is first moved aside to ``overlay.json.bad-<UTC time>``, never lost); with
    ``keep_unreadable`` an unreadable file is left as it is (OverlayIgnored). A newer compat's overlay is never
    replaced (OverlayIgnored, kind NEWER). ``read_at_start``: the file's fingerprint when the writer started; ``Stored.changed_meanwhile``
    says whether it differs now (the write merged with what another compat wrote). OSError when it cannot be written."""
    path = overlay_path(environ)
    if path is None:
        raise OSError(errno.ENOENT, "HOME is a relative path and XDG_DATA_HOME is not set, so the overlay has no place")
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with folder_lock(folder, lock_wait):
        unreadable, moved = "", ""
        changed = read_at_start is not NOT_READ and fingerprint(path) != read_at_start
        try:
            current = read_document(path)
            shape = _shape_problem(current)
            if shape:
                raise OverlayIgnored(shape)
        except OverlayIgnored as exc:
            if keep_unreadable or exc.kind == NEWER:
                raise
            unreadable = str(exc)
            moved = _move_aside(path)
            current = None
        with gc_paused():
            document, skipped = valid_document(change(current), matrix, path)
        _write(path, document)
    return Stored(path, skipped, changed, unreadable, document, moved)


def _shape_problem(document: Optional[Mapping[str, Any]]) -> str:
    """Why ``document`` is no overlay the reader takes (an unknown top-level key, ``entries`` not a table), "" when it is:
    such a file is moved aside before a new one is written, as an unparseable one is."""
    if document is None:
        return ""
    unknown = [key for key in document if key not in _TOP_KEYS and key != "entries"]
    if unknown:
        return f"it has a top-level key this compat does not know ({shown(repr(unknown[0]), 40)})"
    if not isinstance(document.get("entries", {}), dict):
        return "its 'entries' is not a table"
    return ""


def _move_aside(path: str) -> str:
    """Rename the unreadable overlay to overlay.json.bad-<UTC time> (a -N suffix when that name is taken) in its folder;
    the new path. OSError when it cannot be moved (then nothing is written over it)."""
    import datetime

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = f"{path}{BAD_SUFFIX}{stamp}"
    for n in range(2, 102):
        if not os.path.lexists(target):
            break
        target = f"{path}{BAD_SUFFIX}{stamp}-{n}"
    else:
        raise OSError(errno.EEXIST, f"{target} exists: the overlay cannot be moved aside")
    os.rename(path, target)
    return target


def valid_document(document: Mapping[str, Any], matrix: Matrix, path: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The document as it may be written: every string made writable text (values.json_text: a lone surrogate becomes
    U+FFFD), credentials stripped (redact.strip_document), every tested record escaped for one line, and only the records
    the reader takes -- each entry and each tested record validated alone by the same parsers ``apply`` uses. What was
    dropped is said (one note a record). Whatever is written is read back whole."""
    from ..redact import strip_document
    from ..values import json_text

    clean: dict[str, Any] = json_text(strip_document(dict(document)))  # type: ignore[assignment]
    clean = {key: value for key, value in clean.items() if key in _TOP_KEYS or key == "entries"}
    clean.update(format=FORMAT, schema_version=SCHEMA)
    if not isinstance(clean.get("read_at"), str):
        clean["read_at"] = ""
    unread = clean.get("hosts_unread")
    clean["hosts_unread"] = [u for u in unread if isinstance(u, str)][:50] if isinstance(unread, list) else []
    if not isinstance(clean.get("entries"), dict):
        clean["entries"] = {}
    found = read_entries(clean, matrix, path)
    clean["entries"] = found.kept
    items = clean.get("tested")
    dropped: tuple[str, ...] = ()
    if isinstance(items, list) and len(items) > MAX_RECORDS:  # the bound the reader keeps: the oldest records go
        dropped = (f"the {len(items) - MAX_RECORDS} oldest tested records: the overlay keeps the newest {MAX_RECORDS}",)
        items = items[-MAX_RECORDS:]
    tested, notes = rewritable(items, list(matrix.hosts))
    clean["tested"] = [t.to_json() for t in tested]
    return clean, found.skipped + dropped + notes


def _write(path: str, document: Mapping[str, Any]) -> None:
    """A temporary file in the same folder, synced, renamed over the overlay: a reader never sees half a file."""
    import tempfile

    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    data = text.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise OSError(errno.EFBIG, f"the overlay would be larger than its {MAX_BYTES >> 20} MiB cap")
    fd, temp = tempfile.mkstemp(prefix=".overlay-", suffix=".json", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def record_tested(record: Tested, matrix: Matrix, environ: Mapping[str, str] = os.environ) -> str:
    """Add ``record`` to the overlay (replacing an older record of the same pair), keeping everything else in it, under
    the overlay's lock; an overlay that cannot be read is not overwritten (OverlayIgnored says why). A record that does
    not validate once escaped is not written (TestedProblem). Returns the overlay's path."""
    from .tested import recorded

    def change(document: Optional[dict[str, Any]]) -> dict[str, Any]:
        if document is None:
            document = {"format": FORMAT, "schema_version": SCHEMA, "generator": "compat matrix verify", "read_at": "", "hosts_unread": [],
                        "entries": {}}
        kept, _ = rewritable(document.get("tested"), list(matrix.hosts))
        return {**document, "tested": [t.to_json() for t in recorded(kept, record)]}

    parse_tested_one(record.to_json(), list(matrix.hosts))  # TestedProblem: the record itself would not be read back
    return transact(change, matrix, environ, keep_unreadable=True).path
