"""File operations an install relies on: reading only regular files (a FIFO named like a wheel must not
block compat), copying while hashing, and writing small files atomically (tmp + fsync + rename).

Side effects: reads and writes the files it is given.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Optional

from .errors import InstallError, InstallInputError

CHUNK = 1 << 20


class NotRegular(Exception):
    """The path is missing, or is a FIFO, device, socket or folder rather than a regular file."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


def open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (following symlinks), without ever blocking: a FIFO
    is opened non-blocking, seen for what it is, and refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotRegular(path, "is missing (a dangling link, or deleted)") from None
    except OSError as exc:
        raise NotRegular(path, f"cannot be opened ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
        raise NotRegular(path, f"is not a regular file (it is {kind})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def sha256_of(path: Path) -> str:
    """sha256 of a regular file (NotRegular otherwise)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def refuse_not_regular(exc: NotRegular, whose: str) -> InstallInputError:
    return InstallInputError(f"{exc.path} ({whose}) {exc.why}; refused, nothing was changed.",
                             "Put the real wheel file there (compat reads regular files only), or remove that entry.")


def no_space(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def copy_hashing(chunks: Iterable[bytes], path: Path, cap: int, on_chunk: Optional[Callable[[], None]] = None) -> tuple[str, int]:
    """Write ``chunks`` into a new file at ``path``, at most ``cap`` bytes; returns (sha256, size).
    More than ``cap`` bytes raises OverflowError; on any failure the partial file is removed."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "wb") as out:
            for block in chunks:
                size += len(block)
                if size > cap:
                    raise OverflowError(size)
                digest.update(block)
                out.write(block)
                if on_chunk is not None:
                    on_chunk()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return digest.hexdigest(), size


def read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    return iter(lambda: handle.read(CHUNK), b"")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the whole new one:
    a temporary file next to it, fsync, rename, fsync of the folder."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def disk_full(where: Path, what: str) -> InstallError:
    return InstallError(f"No space left on device in {where} while {what}; nothing was changed.",
                        "Free space there (or point TMPDIR at a disk with room), then run this again.")
