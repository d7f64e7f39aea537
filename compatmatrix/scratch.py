"""compat's own temporary folders, owned by the compat process that made them, and the sweep at the next start of
those a killed compat (SIGKILL, an OOM kill: no cleanup runs) left behind. One rule for compat tune's scratch folder
(compat-tune-*), doctor --live's run folder (compat-live-*, possibly in a --run-dir several hosts see) and matrix
verify's throw-away venv (compat-verify-*).

A folder is ``<parent>/<prefix>XXXXXXXX`` (tempfile.mkdtemp: private, mode 0700; parent: the temp folder unless given)
holding an owner lock file, OWNER_LOCK, that names ``HOST:PID:STARTTIME`` of its compat (STARTTIME: /proc/PID/stat
field 22, so a reused pid is told apart) and on which that compat holds an exclusive flock for as long as it lives;
the kernel drops the lock when the process dies. The file is written and locked under a name of its own, then renamed
into place: a sweep never sees it half written or unlocked while its compat lives. Where the file system takes no
flock (some network file systems) the folder is made all the same; it is removed at the end, never swept.

``sweep_stale(prefix, parent)`` removes a ``<prefix>*`` folder of ``parent`` only when all of these hold: it is a
folder (not a symbolic link) of this user; its owner lock is a regular file of this user whose lock it can take (no
live compat holds it); the lock names this host (a shared folder: another host's pids mean nothing here) and a process
that is gone (no such pid, a zombie, or a pid now started at another time). A folder without an owner lock (one being
made, or an older compat's that may still run) is left alone, unless ``orphan_age`` is given and it is older than that
(matrix verify's rule: a day). At most ``limit`` entries of ``parent`` are looked at per sweep.

Use ``scratch_folder`` (sweep, claim, remove at the end of the block), or ``claim`` / ``release`` where the folder's
life is not one block. Side effects: creates, locks and removes folders in ``parent``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

OWNER_LOCK = "owner.lock"
_OWNER_NEW = "owner.lock.new"  # written and locked under this name, then renamed to OWNER_LOCK
MAX_SCAN = 10_000  # entries of the parent looked at per sweep (a temp folder may hold very many)
ORPHAN_AGE_S = 86400.0  # matrix verify's rule for a folder without an owner lock: removed once a day old
_OWNER_MAX = 512  # bytes of an owner lock read


@dataclass(frozen=True)
class Claim:
    """A folder this process owns: ``fd`` is its owner lock's descriptor (flocked while open when ``locked``)."""

    folder: Path
    fd: int
    locked: bool


def process_start(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (field 22 of /proc/PID/stat, clock ticks since boot); None when there is no
    such process or it is a zombie (it has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[-1].split()
        return None if fields[0] == b"Z" else fields[19].decode("ascii")
    except (OSError, IndexError, ValueError):
        return None


def own_identity() -> str:
    """HOST:PID:STARTTIME of this process (STARTTIME empty where /proc cannot be read)."""
    pid = os.getpid()
    return f"{os.uname().nodename}:{pid}:{process_start(pid) or ''}"


def parse_identity(text: str) -> Optional[tuple[str, int, str]]:
    """(host, pid, start) of an owner lock's HOST:PID:STARTTIME; None when it is not one."""
    parts = text.strip().rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not (parts[2] == "" or parts[2].isdigit()):
        return None
    pid = int(parts[1])
    return (parts[0], pid, parts[2]) if pid > 0 else None


def process_gone(pid: int, start: str) -> bool:
    """Whether the process an owner lock names has ended: its pid is absent (or a zombie), or now belongs to a process
    started at another time. Where /proc is not there, nothing can be told: not gone."""
    if not os.path.isdir("/proc/self"):
        return False
    now = process_start(pid)
    return now is None or (start != "" and now != start)


def claim(prefix: str, parent: "str | os.PathLike[str] | None" = None) -> Claim:
    """A new folder ``<parent>/<prefix>XXXXXXXX`` owned by this process (its owner lock held); :func:`release` ends it."""
    import fcntl

    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = -1
    try:
        fd = os.open(folder / _OWNER_NEW, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except OSError:  # no flock on this file system: the folder works, it is never swept
            locked = False
        os.write(fd, own_identity().encode())
        os.rename(folder / _OWNER_NEW, folder / OWNER_LOCK)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Claim(folder, fd, locked)


def release(owned: Claim) -> None:
    """Remove the folder (its lock still held, so no sweep races it), then let the lock go."""
    try:
        shutil.rmtree(owned.folder, ignore_errors=True)
    finally:
        os.close(owned.fd)


@contextmanager
def scratch_folder(prefix: str, parent: "str | os.PathLike[str] | None" = None, orphan_age: Optional[float] = None) -> Iterator[Path]:
    """The stale folders of ``prefix`` swept, then a new owned folder, removed at the end of the block."""
    sweep_stale(prefix, parent, orphan_age=orphan_age)
    owned = claim(prefix, parent)
    try:
        yield owned.folder
    finally:
        release(owned)


def sweep_stale(prefix: str, parent: "str | os.PathLike[str] | None" = None, *, orphan_age: Optional[float] = None,
                limit: int = MAX_SCAN, now: Optional[float] = None) -> list[Path]:
    """Remove the ``<parent>/<prefix>*`` folders a compat that is gone left behind (the rule: module docstring); the
    folders removed. ``parent``: the temp folder unless given."""
    root = os.fspath(parent) if parent is not None else tempfile.gettempdir()
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = os.scandir(root)
    except OSError:
        return removed
    with entries:
        for seen, entry in enumerate(entries):
            if seen >= limit:
                break
            if not entry.name.startswith(prefix):
                continue
            try:
                status = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
                    continue
                folder_fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if _remove_if_stale(entry.path, folder_fd, status.st_mtime, orphan_age, now):
                    removed.append(Path(entry.path))
            finally:
                os.close(folder_fd)
    return removed


def _remove_if_stale(path: str, folder_fd: int, mtime: float, orphan_age: Optional[float], now: float) -> bool:
    """Remove one folder if its owner is gone, holding its owner lock while it does; whether it was removed."""
    import fcntl

    try:
        fd = os.open(OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except FileNotFoundError:  # no owner: being made, or an older compat's
        return orphan_age is not None and now - mtime > orphan_age and _remove(path)
    except OSError:  # a symbolic link in its place, unreadable: not compat's
        return False
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (its compat lives), or no flock here: left alone
            return False
        owner = parse_identity(os.read(fd, _OWNER_MAX).decode("ascii", "replace"))
        if owner is None:  # not an owner compat wrote: like a folder without one
            return orphan_age is not None and now - mtime > orphan_age and _remove(path)
        host, pid, start = owner
        return host == os.uname().nodename and process_gone(pid, start) and _remove(path)
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove(path: str) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)
