"""`compat matrix update`: read the registries, harvest, keep the result in the overlay (or --write it into a matrix file).

The service behind the command and behind ``scripts/crosscheck_registry.py`` (one implementation of "read the registry"):
matrix/registry.py reads, matrix/harvest.py derives, matrix/overlay.py keeps and merges, matrix/write.py writes a file.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import CompatError, MatrixError, shown
from .harvest import PACKAGES, Harvest, harvest
from .model import Component, Matrix


class UpdateResult:
    def __init__(self, found: Harvest, read, overlay: Optional[Path], write: Optional[Path], written, state, read_at: str) -> None:
        self.harvest = found
        self.read = read
        self.overlay = overlay
        self.write = write
        self.written = written
        self.state = state  # the overlay merged with the curated matrix (disagreements), None with --write
        self.read_at = read_at


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
           progress: Optional[Callable[[str], None]] = None) -> UpdateResult:
    read_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if write is None:
        from .overlay import overlay_path

        if overlay_path() is None:  # said before the registries are read, not after
            raise CompatError("The overlay has no place: HOME is a relative path and XDG_DATA_HOME is not set.",
                              "Set HOME (or XDG_DATA_HOME) to an absolute path, or pass --write FILE.")
    if write is not None:
        from .load import load_matrix, read_text_file

        target = Path(write)
        try:
            text = read_text_file(target)
        except (OSError, ValueError) as exc:
            raise CompatError(f"--write {shown(str(target), 200)} cannot be read ({getattr(exc, 'strerror', None) or exc}).",
                              "Pass the matrix file to update, e.g. --write data/matrix.toml.") from None
        matrix = load_matrix(target)
    read, found = read_and_harvest(matrix, indexes, packages, progress)
    if write is not None:
        from .load import parse_matrix
        from .write import insert_entries

        written = insert_entries(text, matrix, found.entries)
        try:
            parse_matrix(written.text, str(target))
        except MatrixError as exc:
            raise CompatError(f"The harvested entries do not validate in {shown(str(target), 200)} ({exc.message}); nothing was written.",
                              "Report this as a bug of compat matrix update.") from None
        if written.text != text:
            try:
                replace_text(target, in_line_endings_of(text, written.text))
            except OSError as exc:
                raise CompatError(f"--write {shown(str(target), 200)} cannot be written ({exc.strerror or exc}); it is unchanged.",
                                  "Pass a matrix file in a folder you can write to.") from None
        return UpdateResult(found, read, None, target, written, None, read_at)
    from . import overlay

    document = overlay.document_of(found.entries, read_at, read.unread)
    path = overlay.overlay_path()
    document["tested"] = overlay.kept_tested(path, matrix)  # what compat matrix verify recorded stays
    harvested = overlay.parse_entries(document, matrix, str(path))  # what every command will read: it must validate
    _, state = overlay.merge(matrix, harvested, str(path), read_at, tuple(f"{h}: {w}" for h, w in sorted(read.unread.items())))
    try:
        saved = overlay.save(document)
    except OSError as exc:
        raise CompatError(f"The overlay cannot be written to {shown(str(path), 200)} ({exc.strerror or exc}).",
                          "Make XDG_DATA_HOME (or ~/.local/share) writable, or pass --write FILE.") from None
    return UpdateResult(found, read, saved, None, None, state, read_at)


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
        "written": None if result.written is None else {"added": result.written.added, "extended": result.written.extended,
                                                         "not_written": result.written.not_written},
    }


def update_lines(result: UpdateResult) -> list[str]:
    """The human summary (one fact a line)."""
    out = []
    for pages in result.read.pages.values():
        for p in pages:
            out.append(f"read {p.host}/{p.project}: {len(p.files)} files ({p.kind})")
    for host, why in sorted(result.read.unread.items()):
        out.append(f"NOT READ {host}: {why}")
    for table, items in result.harvest.entries.items():
        for e in items:
            name = f"{table} {e.get('version') or e.get('line') + '.*'}"
            extra = f" (torch {e['torch']})" if "torch" in e else ""
            out.append(f"HARVESTED {name}{extra} [{e['source']}]" + ("  unverified" if e.get("verified") is False else ""))
    for d in result.harvest.disagreements:
        out.append(f"DISAGREE {d.sentence()}")
    for line in result.harvest.unverified:
        out.append(f"UNVERIFIED {line}")
    for line in result.harvest.skipped:
        out.append(f"SKIPPED {line}")
    for line in result.read.metadata_problems:
        out.append(f"METADATA {line}")
    if result.written is not None:
        out += [f"WROTE {line}" for line in result.written.added]
        out += [f"EXTENDED {line}" for line in result.written.extended]
        out += [f"NOT WRITTEN {line}" for line in result.written.not_written]
        out.append(f"{result.write}: {len(result.written.added)} entries added, {len(result.written.extended)} lines extended")
    else:
        out.append(f"overlay written: {result.overlay} ({sum(len(v) for v in result.harvest.entries.values())} entries, read {result.read_at})")
    out.append(f"{result.read.seconds:.1f} s")
    return out
