"""`compat matrix update`: read the registries, harvest, keep the result in the overlay (or --write it into a matrix file).

The service behind the command and behind ``scripts/crosscheck_registry.py`` (one implementation of "read the registry"):
maintain/registry.py reads, matrix/harvest.py derives, matrix/overlay.py keeps and merges, maintain/write.py writes a file.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import CompatError, MatrixError, shown
from ..matrix.harvest import PACKAGES, Harvest, harvest
from ..matrix.model import Component, Matrix
from ..record import replace


class UpdateResult:
    def __init__(self, found: Harvest, read, overlay: Optional[Path], write: Optional[Path], written, state, read_at: str,
                 notes: Sequence[str] = ()) -> None:
        self.harvest = found
        self.read = read
        self.overlay = overlay
        self.write = write
        self.written = written
        self.state = state  # the overlay merged with the curated matrix (disagreements), None with --write
        self.read_at = read_at
        self.notes = tuple(notes)  # what the write of the overlay kept, merged or dropped (one sentence each)


def read_and_harvest(matrix: Matrix, indexes: Sequence[str] = (), packages: Sequence[Component] = PACKAGES,
                     progress: Optional[Callable[[str], None]] = None, session=None):
    """(the registry read, the harvest) for ``matrix``; CompatError (exit 2) when no page could be read at all."""
    from ..install.indexes import configure_indexes
    from .registry import read_registries

    locations = configure_indexes(matrix, indexes)
    read = read_registries(matrix, locations, packages, progress, session)
    if not any(read.pages.get(c) for c in packages):
        why = "; ".join(f"{host}: {reason}" for host, reason in sorted(read.unread.items())) or "no host to read"
        raise CompatError(f"No registry could be read ({why}).", "Check the network, or point --index HOST=URL at a reachable mirror.")
    return read, harvest(matrix, read.pages, read.metadata, read.unread)


def update(matrix: Matrix, indexes: Sequence[str] = (), write: Optional[str] = None, packages: Sequence[Component] = PACKAGES,
           progress: Optional[Callable[[str], None]] = None, environ: Optional[Mapping[str, str]] = None,
           lock_wait: Optional[float] = None) -> UpdateResult:
    """Read the registries for ``packages`` and keep what they add: in the overlay (merged per package into what it
    holds when it is written, under its lock: the other packages' entries and the tested records stay), or with
    ``write`` in that matrix file (refused, unchanged, when the file changed while the registries were read). Each
    harvested entry is validated alone before it is kept: an odd one is skipped with a note, the rest kept. An overlay
    that cannot be read is moved aside (overlay.json.bad-<UTC time>, said) before the new one is written; a newer
    compat's is refused (exit 2), never replaced. ``lock_wait``: how long to wait for another writer's lock (seconds)."""
    import os

    from ..matrix import overlay

    environ = os.environ if environ is None else environ
    lock_wait = overlay.LOCK_WAIT_S if lock_wait is None else lock_wait
    read_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if write is None:
        at_start = _overlay_at_start(overlay, environ)
    else:
        target, text, matrix = _read_write_target(write)
    read, found = read_and_harvest(matrix, indexes, packages, progress)
    entries, odd = overlay.valid_entries(found.entries, matrix)
    found = replace(found, entries=entries, skipped=found.skipped + tuple(f"{note}: not kept" for note in odd))
    if write is not None:
        return _write_matrix(target, text, matrix, found, read, read_at, lock_wait)
    kept: list[str] = []
    change = _overlay_change(overlay, found, read, read_at, {c.table for c in packages}, kept)
    stored = _transact(overlay, change, matrix, environ, at_start, lock_wait)
    notes = _overlay_notes(kept, stored)
    harvested = overlay.read_entries(stored.document, matrix, stored.path).releases
    _, state = overlay.merge(matrix, harvested, stored.path, stored.document.get("read_at", ""), tuple(stored.document.get("hosts_unread", ())))
    return UpdateResult(found, read, Path(stored.path), None, None, state, read_at, notes)


def _overlay_at_start(overlay, environ: Mapping[str, str]) -> Any:
    """The overlay's fingerprint before the registries are read; CompatError, said before they are read (not after),
    when the overlay has no place or is a newer compat's."""
    if overlay.overlay_path(environ) is None:
        raise CompatError("The overlay has no place: HOME is a relative path and XDG_DATA_HOME is not set.",
                          "Set HOME (or XDG_DATA_HOME) to an absolute path, or pass --write FILE.")
    at_start = overlay.fingerprint(overlay.overlay_path(environ))
    _refuse_newer(overlay, overlay.overlay_path(environ))
    return at_start


def _read_write_target(write: str) -> tuple[Path, str, Matrix]:
    """The ``--write`` matrix file: its path, its text and the matrix it holds (CompatError if it cannot be read)."""
    from ..matrix.load import load_matrix, read_text_file

    target = Path(write)
    try:
        text = read_text_file(target)
    except (OSError, ValueError) as exc:
        raise CompatError(f"--write {shown(str(target), 200)} cannot be read ({getattr(exc, 'strerror', None) or exc}).",
                          "Pass the matrix file to update, e.g. --write data/matrix.toml.") from None
    return target, text, load_matrix(target)


def _overlay_change(overlay, found: Harvest, read: Any, read_at: str, tables: set[str], kept: list[str]) -> Callable[[Optional[dict[str, Any]]], dict[str, Any]]:
    """The change ``overlay.transact`` applies under the overlay's lock: this read's entries for the packages read, the
    other packages' entries (each table said in ``kept``) and the tested records as the overlay holds them."""

    def change(current: Optional[dict[str, Any]]) -> dict[str, Any]:
        before = current.get("entries") if current is not None and isinstance(current.get("entries"), dict) else {}
        others = {table: items for table, items in before.items() if table not in tables and isinstance(items, list) and items}
        kept.extend(f"{table}: {len(items)} entries from an earlier update (not read this time)" for table, items in sorted(others.items()))
        document = overlay.document_of({**others, **found.entries}, _oldest(read_at, current) if others else read_at, read.unread)
        document["tested"] = current.get("tested") if current is not None else []  # what compat matrix verify recorded stays
        return document

    return change


def _transact(overlay, change: Callable[[Optional[dict[str, Any]]], dict[str, Any]], matrix: Matrix, environ: Mapping[str, str],
              at_start: Any, lock_wait: float) -> Any:
    """``overlay.transact``, its failures as CompatError."""
    try:
        return overlay.transact(change, matrix, environ, read_at_start=at_start, lock_wait=lock_wait)
    except overlay.OverlayIgnored as exc:  # a newer compat's overlay (the only one transact refuses)
        raise _newer_error(overlay, overlay.overlay_path(environ), exc) from None
    except overlay.LockHeld as exc:
        raise CompatError(*exc.sentence(f"The overlay {shown(str(overlay.overlay_path(environ)), 200)}")) from None
    except OSError as exc:
        raise CompatError(f"The overlay cannot be written to {shown(str(overlay.overlay_path(environ)), 200)} ({exc.strerror or exc}).",
                          "Make XDG_DATA_HOME (or ~/.local/share) writable, or pass --write FILE.") from None


def _overlay_notes(kept: Sequence[str], stored: Any) -> list[str]:
    """What the overlay write did besides storing this read: tables kept, a concurrent write merged, an unreadable file
    moved aside, records skipped."""
    notes = [f"KEPT {line}" for line in kept]
    if stored.changed_meanwhile:
        notes.append("MERGED the overlay changed while the registries were read (another compat wrote it): this update was merged into it, nothing it held was lost")
    if stored.replaced_unreadable:
        notes.append(f"MOVED ASIDE the overlay could not be read ({stored.replaced_unreadable}): it is kept as {stored.moved_to}, and a new one was written")
    notes += [f"SKIPPED {note}: not kept" for note in stored.skipped]
    return notes


def _newer_error(overlay, path: Optional[str], exc: Exception) -> CompatError:
    return CompatError(f"The overlay {shown(str(path), 200)} was written by a newer compat ({exc}); compat matrix update does not replace it.",
                       "Upgrade compat, or move the file aside, then run compat matrix update again.")


def _refuse_newer(overlay, path: Optional[str]) -> None:
    """CompatError (exit 2) for a newer compat's overlay, before any registry is read."""
    if path is None:
        return
    try:
        overlay.read_document(path)
    except overlay.OverlayIgnored as exc:
        if exc.kind == overlay.NEWER:
            raise _newer_error(overlay, path, exc) from None


def _oldest(read_at: str, current: Optional[Mapping[str, Any]]) -> str:
    """The older of this read and the overlay's: entries kept from an earlier update are as old as it is."""
    earlier = current.get("read_at") if current is not None else None
    try:
        then = datetime.datetime.strptime(str(earlier), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return read_at
    return earlier if then < datetime.datetime.strptime(read_at, "%Y-%m-%dT%H:%M:%SZ") else read_at  # type: ignore[return-value]


def _write_matrix(target: Path, text: str, matrix: Matrix, found: Harvest, read, read_at: str, lock_wait: float) -> UpdateResult:
    """--write: the entries added into the matrix file, under its folder's lock, only if the file is still what was read
    at the start (a compare-and-swap: another update --write or an edit saved meanwhile is never reverted)."""
    import os

    from ..matrix.load import parse_matrix, read_text_file
    from ..matrix.overlay import LockHeld, folder_lock
    from .write import insert_entries

    written = insert_entries(text, matrix, found.entries)
    try:
        parse_matrix(written.text, str(target))
    except MatrixError as exc:
        raise CompatError(f"The harvested entries do not validate in {shown(str(target), 200)} ({exc.message}); nothing was written.",
                          "Report this as a bug of compat matrix update.") from None
    if written.text != text:
        try:
            with folder_lock(os.path.dirname(os.path.realpath(target)), lock_wait):
                try:
                    now = read_text_file(target)
                except (OSError, ValueError):
                    now = None
                if now != text:
                    raise CompatError(f"--write {shown(str(target), 200)} changed while the registries were read (another compat matrix update "
                                      "--write, or an edit saved meanwhile); nothing was written, the file keeps that change.",
                                      "Run the same compat matrix update --write again: it starts from the file as it is now.")
                replace_text(target, in_line_endings_of(text, written.text))
        except LockHeld as exc:
            raise CompatError(*exc.sentence(f"--write {shown(str(target), 200)}")) from None
        except OSError as exc:
            raise CompatError(f"--write {shown(str(target), 200)} cannot be written ({exc.strerror or exc}); it is unchanged.",
                              "Pass a matrix file in a folder you can write to.") from None
    return UpdateResult(found, read, None, target, written, None, read_at)


def in_line_endings_of(original: str, text: str) -> str:
    """``text`` with the line endings ``original`` uses: a matrix file written with CRLF keeps CRLF on every line, the
    added ones included (the entries are made with LF)."""
    crlf = original.count("\r\n")
    if not crlf or crlf < original.count("\n") - crlf:  # LF, or mostly LF: as made
        return text
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` over the file at ``path`` (through a symbolic link, to the file it names) as a new file renamed over
    it: a reader, or compat killed midway, sees the old file or the new one, never half of one; its mode and owner are
    kept. Where a rename cannot keep the file what it is -- a file with other hard links, a folder compat may not write
    to, a file bind-mounted on its own (EBUSY) -- it is written in place instead. A file compat may not write is refused."""
    import errno
    import os
    import tempfile

    real = Path(os.path.realpath(path))
    status = os.stat(real)
    if not os.access(real, os.W_OK):
        raise PermissionError(errno.EACCES, "the file is not writable")
    if status.st_nlink > 1:
        return _write_in_place(real, text)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{real.name}-", suffix=".tmp", dir=str(real.parent))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return _write_in_place(real, text)
        raise
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:  # newline="": the endings exactly as given
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, status.st_mode & 0o7777)
        if hasattr(os, "chown") and os.geteuid() == 0:
            os.chown(temporary, status.st_uid, status.st_gid)
        try:
            os.replace(temporary, real)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EXDEV, errno.EACCES, errno.EPERM):
                raise
            os.unlink(temporary)
            return _write_in_place(real, text)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _write_in_place(real: Path, text: str) -> None:
    import os

    with open(real, "w", encoding="utf-8", newline="") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())


def update_json(result: UpdateResult) -> dict[str, Any]:
    """``compat matrix update --json`` (compatmatrix/schemas/matrix-update-v1.json)."""
    entries = {table: [dict(e) for e in items] for table, items in result.harvest.entries.items()}
    return {
        "schema_version": 1,
        "command": "matrix update",
        "read_at": result.read_at,
        "seconds": round(result.read.seconds, 2),
        "overlay": str(result.overlay) if result.overlay else None,
        "written_to": str(result.write) if result.write else None,
        "pages": [{"host": p.host, "project": p.project, "url": p.url, "kind": p.kind, "files": len(p.files)}
                  for pages in result.read.pages.values() for p in pages],
        "hosts_unread": dict(sorted(result.read.unread.items())),
        "entries": entries,
        "disagreements": [{"package": d.component.distribution, "version": str(d.version), "host": d.host, "field": d.field,
                           "curated": d.curated, "harvested": d.harvested, "source": d.source} for d in result.harvest.disagreements],
        "unverified": list(result.harvest.unverified),
        "skipped": list(result.harvest.skipped),
        "metadata_problems": list(result.read.metadata_problems),
        "overlay_notes": list(result.notes),
        "written": None if result.written is None else {"added": result.written.added, "extended": result.written.extended,
                                                         "not_written": result.written.not_written},
    }


def update_lines(result: UpdateResult) -> list[str]:
    """The human summary (one fact a line)."""
    out = _read_lines(result) + _harvest_lines(result)
    for line in result.read.metadata_problems:
        out.append(f"METADATA {line}")
    out += list(result.notes)
    out += _written_lines(result)
    out.append(f"{result.read.seconds:.1f} s")
    return out


def _read_lines(result: UpdateResult) -> list[str]:
    out = []
    for pages in result.read.pages.values():
        for p in pages:
            out.append(f"read {p.host}/{p.project}: {len(p.files)} files ({p.kind})")
    for host, why in sorted(result.read.unread.items()):
        out.append(f"NOT READ {host}: {why}")
    return out


def _harvest_lines(result: UpdateResult) -> list[str]:
    out = []
    for table, items in result.harvest.entries.items():
        for e in items:
            name = f"{table} {e.get('version') or e.get('line') + '.*'}"
            extra = f" (torch {e['torch']})" if "torch" in e else ""
            out.append(f"HARVESTED {name}{extra} [{e['source']}]" + ("  unverified" if e.get("verified") is False else ""))
    out += [f"DISAGREE {d.sentence()}" for d in result.harvest.disagreements]
    out += [f"UNVERIFIED {line}" for line in result.harvest.unverified]
    out += [f"SKIPPED {line}" for line in result.harvest.skipped]
    return out


def _written_lines(result: UpdateResult) -> list[str]:
    if result.written is None:
        return [f"overlay written: {result.overlay} ({sum(len(v) for v in result.harvest.entries.values())} entries, read {result.read_at})"]
    out = [f"WROTE {line}" for line in result.written.added]
    out += [f"EXTENDED {line}" for line in result.written.extended]
    out += [f"NOT WRITTEN {line}" for line in result.written.not_written]
    out.append(f"{result.write}: {len(result.written.added)} entries added, {len(result.written.extended)} lines extended")
    return out
