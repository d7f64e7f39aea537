"""The wheels compat fetched for uv, kept by sha256 so the next install neither downloads them again nor hands uv a
new path: uv keeps the unpacked wheels of local files in its cache by the file's path, so a wheel given at the same
path is installed from uv's own cache.

Layout: ``$XDG_CACHE_HOME/compatmatrix/wheels/<sha256>/<wheel file name>``, with ``<sha256>/.checked`` holding the
file's size, inode, mtime and ctime when compat last checked its sha256, and the indexes that published that sha256
when compat fetched the wheel from them. An entry is used only when the folders and
the file belong to this user and nobody else may write them, the file is a regular file (never a link or a FIFO)
and its stat matches ``.checked`` (any write changes the ctime, which nobody can set back); otherwise the file is
hashed again, and an entry that no longer matches its name is deleted. Entries unused for ``KEEP_DAYS`` days are
deleted. ``COMPAT_NO_CACHE`` turns the store off (every wheel is fetched into the install's work folder, as for pip).

Only wheels whose sha256 compat checked against their index (or computed, for an unverified wheel the user allowed)
are put in; the key is that sha256. A planned wheel is taken from the store when its host's page still publishes that
sha256; a dependency when uv, planning, lists that sha256 for it again and its index had published it (``published``):
the bytes are then the ones the index published, and uv saw them there again.

Side effects: reads and writes that folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .. import cachefiles
from ..redact import strip_credentials
from .files import NotRegular, sha256_of

if TYPE_CHECKING:
    from .wheelfiles import Listing

KEEP_DAYS = 30
CHECKED = ".checked"
LISTING = ".listing"  # the archive's raw members (wheelfiles.Members), with the wheel's stat; never a verdict
LISTING_FORMAT = 2  # a .listing of another format (1 kept verdicts) is read again
_HEX = frozenset("0123456789abcdef")


def _fingerprint(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_ino, info.st_dev, info.st_mtime_ns, info.st_ctime_ns]


def _with(published: list, url: Optional[str]) -> list:
    return [*published, url] if url and url not in published else list(published)


def _private_folder(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and cachefiles.private(info)


class WheelStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def open(cls) -> Optional["WheelStore"]:
        """The store, created if missing; None when caches are off or the folder is not this user's alone."""
        base = cachefiles.cache_dir()
        if base is None:
            return None
        root = Path(base) / "wheels"
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
        if not (_private_folder(root.parent) and _private_folder(root)):
            return None
        return cls(root)

    def _entry(self, sha256: str) -> Optional[Path]:
        if len(sha256) != 64 or not set(sha256) <= _HEX:
            return None
        return self.root / sha256

    def get(self, sha256: str, filename: str, published_by: Optional[str] = None) -> Optional[Path]:
        """The stored wheel with that sha256 and file name, checked; None when there is none (or it was damaged).
        ``published_by``: the index whose page publishes that sha256 now, noted for ``published``."""
        published_by = strip_credentials(published_by) if published_by else published_by  # no index credentials on disk
        entry = self._entry(sha256)
        if entry is None or "/" in filename or filename.startswith("."):
            return None
        path = entry / filename
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not (_private_folder(entry) and stat.S_ISREG(info.st_mode) and cachefiles.private(info)):
            return None
        record = self._read(entry)
        if record.get("stat") != _fingerprint(info):
            try:
                actual = sha256_of(path)
            except (NotRegular, OSError):
                return None
            if actual != sha256:
                self._drop(entry)
                return None
            self._record(entry, path, _with(record.get("published", []), published_by))
        elif published_by and published_by not in record.get("published", []):
            self._record(entry, path, _with(record.get("published", []), published_by))
        else:
            self._touch(entry)
        return path

    def published(self, sha256: str, index_url: str) -> Optional[Path]:
        """The stored wheel with that sha256 when ``index_url`` published that sha256 for it when compat fetched it
        from there (checked as get checks it); None otherwise."""
        index_url = strip_credentials(index_url)  # as get records it
        entry = self._entry(sha256)
        if entry is None or index_url not in self._read(entry).get("published", []):
            return None
        try:
            names = [name for name in os.listdir(entry) if name.endswith(".whl") and not name.startswith(".")]
        except OSError:
            return None
        return self.get(sha256, names[0]) if len(names) == 1 else None

    def listing(self, path: Path) -> Optional["Listing"]:
        """The Listing of a wheel of this store: its archive's Members (wheelfiles.read_members) read once and kept
        beside it (``.listing``, with the wheel's stat and LISTING_FORMAT: a wheel changed since, or a record of another
        format, is read again), judged by this compat's rules every time (wheelfiles.judge: a record never carries a
        verdict); None for a file outside the store."""
        from .wheelfiles import Members, judge, read_members

        entry = path.parent
        if entry.parent != self.root or self._entry(entry.name) is None:
            return None
        try:
            fingerprint = _fingerprint(os.lstat(path))
        except OSError:
            return None
        kept = cachefiles.read_json(str(entry), LISTING, 64 << 20)
        if (isinstance(kept, dict) and kept.get("format") == LISTING_FORMAT and kept.get("stat") == fingerprint
                and kept.get("name") == path.name):
            fields = [kept.get(key) for key in ("names", "record_paths", "entry_points")]
            if all(isinstance(f, list) and all(isinstance(x, str) for x in f) for f in fields):
                return judge(Members(*(tuple(f) for f in fields)))
        members = read_members(path)
        if members is None:
            return None
        try:
            cachefiles.write_json(str(entry), LISTING, {"format": LISTING_FORMAT, "stat": fingerprint, "name": path.name,
                                                        "names": list(members.names), "record_paths": list(members.record_paths),
                                                        "entry_points": list(members.entry_points)})
        except OSError:
            pass
        return judge(members)

    def _read(self, entry: Path) -> dict:
        record = cachefiles.read_json(str(entry), CHECKED, 1 << 16)
        if not isinstance(record, dict):
            return {}
        published = record.get("published")
        return {"stat": record.get("stat"), "published": [u for u in published if isinstance(u, str)] if isinstance(published, list) else []}

    def put(self, source: Path, sha256: str, published_by: Optional[str] = None) -> Optional[Path]:
        """Move ``source`` (whose sha256 the caller checked; against what ``published_by``, an index URL, publishes, if
        given) into the store (a copy across file systems); returns the stored path, or None when it cannot be kept
        (no room, another user's folder): the caller goes on with ``source``, which is then still there."""
        published_by = strip_credentials(published_by) if published_by else published_by  # no index credentials on disk
        entry = self._entry(sha256)
        if entry is None:
            return None
        kept = self.get(sha256, source.name, published_by)
        if kept is not None:
            return kept
        part: Optional[Path] = None
        moved = False
        try:
            entry.mkdir(mode=0o700, exist_ok=True)
            if not _private_folder(entry):
                return None
            target = entry / source.name
            part = entry / f".part-{os.getpid()}-{source.name}"
            part.unlink(missing_ok=True)
            try:
                os.rename(source, part)  # same file system: no copy
                moved = True
            except OSError:
                shutil.copyfile(source, part)
            os.chmod(part, 0o600)
            os.replace(part, target)
        except OSError:
            if part is not None:
                try:
                    if moved:
                        os.rename(part, source)  # the caller goes on with its own file
                    else:
                        part.unlink(missing_ok=True)
                except OSError:
                    pass
            return None
        self._record(entry, target, [published_by] if published_by else [])
        return target

    def _record(self, entry: Path, path: Path, published: list) -> None:
        try:
            cachefiles.write_json(str(entry), CHECKED, {"stat": _fingerprint(os.lstat(path)), "published": published[-16:]})
        except OSError:
            pass

    def _touch(self, entry: Path) -> None:
        try:
            os.utime(entry / CHECKED)
        except OSError:
            pass

    def _drop(self, entry: Path) -> None:
        shutil.rmtree(entry, ignore_errors=True)

    def prune(self, keep_days: float = KEEP_DAYS) -> None:
        """Delete the entries no install used for ``keep_days`` days (and leftovers of interrupted writes)."""
        limit = time.time() - keep_days * 86400
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False) or self._entry(entry.name) is None:
                continue
            try:
                used = os.lstat(os.path.join(entry.path, CHECKED)).st_mtime
            except OSError:
                used = 0.0
                try:
                    used = entry.stat(follow_symlinks=False).st_mtime
                except OSError:
                    pass
            if used < limit:
                self._drop(Path(entry.path))
