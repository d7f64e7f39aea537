"""File operations an install relies on: reading only regular files (a FIFO named like a wheel must not
block compat), copying while hashing, and writing small files atomically (tmp + fsync + rename).

Side effects: reads and writes the files it is given.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
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
    """Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the whole new one: a new
    temporary file next to it (mkstemp: a random name, O_CREAT|O_EXCL, so a symlink planted there is never
    followed), fsync, rename, fsync of the folder."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # what open(path, "w") would have made (mkstemp makes 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


SMALL_CAP = 16 * (1 << 20)  # a journal or a manifest compat writes is far smaller


class Unreadable(Exception):
    """A small file compat wrote itself (a journal, a manifest) that is not what it wrote: in words."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


def read_small(path: Path, cap: int = SMALL_CAP) -> str:
    """The text of a small regular file, read without ever blocking or following a symlink: opened with
    O_NOFOLLOW|O_NONBLOCK (a FIFO is seen for what it is), checked to be a regular file of at most ``cap``
    bytes, then read. Unreadable (with the reason in words) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Unreadable(path, "is missing") from None
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise Unreadable(path, why) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode) else "a device or socket"
            raise Unreadable(path, f"is not a regular file (it is {kind})")
        if info.st_size > cap:
            raise Unreadable(path, f"is larger than {cap >> 20} MiB ({info.st_size} bytes), far more than compat ever writes there")
        os.set_blocking(fd, True)
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise Unreadable(path, f"is larger than {cap >> 20} MiB, far more than compat ever writes there")
    return data.decode("utf-8", errors="replace")


def safe_write(stream, text: str) -> None:
    """Progress on stderr: a full disk or a closed descriptor there must never fail an install."""
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        pass


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
