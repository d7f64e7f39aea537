"""The install as a transaction on the environment's folders: snapshot, journal, commit, restore, and the lock
that keeps one install at a time per environment.

Each step below is atomic, so a SIGKILL between any two leaves a state that ``compat install --restore`` or
the next install can handle:

1. snapshot: hard-link copies of site-packages, platlib (where it is another folder, as in RHEL/Fedora's lib64
   layout), the scripts folder and the prefix's data folders the plan's wheels write into (share/, include/, ...;
   one that does not exist yet is recorded as absent) in ``.compat-snapshot-XXXX`` next to site-packages (pip
   and uv unlink a file before writing it, so a hard link keeps the old contents); then
   the snapshot's manifest (every relative path with its kind and size), written last and atomically; then
   the journal, atomically. Killed before the journal exists: the environment is untouched, and the next
   install deletes the orphan snapshot.
2. the installer changes the live folders. Killed now: the journal names a complete snapshot.
3. commit: the journal is removed (the commit point), then the snapshot is deleted. Killed while deleting:
   there is no journal, the new state stands, and the next install deletes the rest.

restore: the snapshot is checked against its manifest before the live tree is touched; each live folder is
swapped with its copy in one atomic step (renameat2 RENAME_EXCHANGE: the scripts folder, which holds the
venv's python, is never missing); where the file system cannot exchange, the live folder is moved into the
snapshot root and the copy moved into place. It resumes after a kill: a folder already swapped is
recognised because it is the copy (same inodes as the manifest records); a folder recorded as absent is moved
into the snapshot root. Then the journal is removed, then the snapshot root with the replaced folders is deleted.

The journal and the manifest are not trusted: they are read without following a symlink or blocking on a FIFO,
at most 16 MiB (files.read_small), before any signal is held. Each live folder the journal names must be one
of this environment's own (site-packages, platlib, the scripts folder, or a folder directly in its data root),
each at most once, its snapshot a ``.compat-snapshot-*`` folder next to site-packages (symlinks resolved on both
sides: where compat itself puts it), and each copy exactly ``{index}-{name}`` directly inside it, as compat names
them; otherwise nothing is moved or deleted.

Side effects: creates, renames and deletes folders next to site-packages, platlib, the scripts folder and the
snapshotted data folders of the prefix; a lock file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..console import plural
from . import JOURNAL_NAME
from .checkpoints import checkpoint
from .errors import InstallError, InstallInputError
from .files import Unreadable, fsync_dir, no_space, read_small, write_atomic

SNAPSHOT_PREFIX = ".compat-snapshot-"
MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".compat-install.lock"


@dataclass(frozen=True)
class EnvFolders:
    """The folders of one environment an install changes, symlinks resolved. ``data`` is the root pip writes a
    wheel's .data/data files under (the prefix, for a venv); None where it is not known."""

    prefix: Path
    purelib: Path
    scripts: Path
    platlib: Optional[Path] = None
    data: Optional[Path] = None

    @classmethod
    def of(cls, prefix: str, purelib: str, scripts: str, platlib: Optional[str] = None, data: Optional[str] = None) -> "EnvFolders":
        def real(path: Optional[str]) -> Optional[Path]:
            return Path(os.path.realpath(path)) if path else None

        return cls(Path(os.path.realpath(prefix)), Path(os.path.realpath(purelib)), Path(os.path.realpath(scripts or purelib)), real(platlib), real(data))

    @classmethod
    def of_snapshot(cls, snapshot: Any) -> "EnvFolders":
        """The folders of the environment an EnvSnapshot (environment/snapshot.py) describes."""
        python = snapshot.raw.get("python") or {}
        return cls.of(snapshot.prefix, snapshot.purelib, snapshot.scripts, python.get("platlib") or None, python.get("data") or None)

    @property
    def parent(self) -> Path:
        """Where the journal, the lock and the snapshots live: next to site-packages."""
        return self.purelib.parent

    @property
    def journal(self) -> Path:
        return self.parent / JOURNAL_NAME

    def own(self) -> list[Path]:
        """site-packages, platlib and the scripts folder, each once (platlib is often site-packages itself)."""
        return list(dict.fromkeys(p for p in (self.purelib, self.platlib, self.scripts) if p is not None))

    def live(self) -> list[Path]:
        return [f for f in self.own() if f.is_dir()]

    def data_folder(self, folder: Path) -> bool:
        """Whether ``folder`` may be snapshotted as a data folder: directly in the data root, holding none of
        the environment's own folders or the snapshots (share/, include/, etc/, ...)."""
        if self.data is None or folder.parent != self.data or folder.name.startswith("."):
            return False
        return not any(p == folder or folder in p.parents for p in [*self.own(), self.parent])

@dataclass(frozen=True)
class Snapshot:
    folders: tuple[tuple[Path, Path], ...]  # (live folder, hard-linked copy)
    root: Path
    journal: Path  # says an install is under way; outlives a compat that was killed
    pid: int = 0


def process_start(pid: int) -> Optional[str]:
    """The start time of a process (field 22 of /proc/PID/stat): a PID with another start time is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class EnvironmentLock:
    """One compat install at a time per environment (an fcntl lock next to site-packages)."""

    def __init__(self, env: EnvFolders) -> None:
        self.path = env.parent / LOCK_NAME
        self.fd: Optional[int] = None

    def __enter__(self) -> "EnvironmentLock":
        import fcntl

        try:  # no O_TRUNC, no following a planted symlink
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InstallInputError(f"{self.path} cannot be created ({exc.strerror}), so compat cannot lock the environment; nothing was changed.",
                                    f"Install into an environment you can write to, or fix the permissions of {self.path.parent}.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InstallError(f"Another compat install into {self.path.parent} is running; nothing was changed.", "Wait for it to finish, then run this again.") from None
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def check_writable(env: EnvFolders) -> None:
    """The folders an install writes and renames are writable (a read-only mount or an immutable folder is
    refused here, before anything is downloaded or touched)."""
    for folder in dict.fromkeys([*env.own(), env.parent, env.scripts.parent] + ([env.platlib.parent] if env.platlib else [])):
        if not folder.is_dir():
            continue
        why = ""
        try:
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                why = "it is on a read-only file system"
        except OSError as exc:
            why = exc.strerror or "it cannot be inspected"
        if not why and not os.access(folder, os.W_OK):
            why = "permission denied, or the folder is immutable"
        if why:
            raise InstallInputError(f"{folder} is not writable ({why}); nothing was changed.",
                                    "Install into an environment you can write to (a venv of your own), or fix it (chattr -i, a read-write mount, chmod).")


# the manifest: what a complete copy holds


def listing(folder: Path) -> list[str]:
    """Every entry under ``folder`` and the folder itself: 'relative path NUL kind NUL size-or-link-target NUL
    inode', sorted. Files of a hard-link copy share their inodes with the folder they were copied from, and
    a folder swapped into place keeps the inodes of the copy, so the listing also tells which tree is where."""
    entries = [f".\0d\0\0{os.lstat(folder).st_ino}"]

    def fail(exc: OSError) -> None:
        raise exc

    for dirpath, dirnames, filenames in os.walk(folder, onerror=fail):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                entries.append(f"{rel}\0l\0{os.readlink(path)}\0{info.st_ino}")
            elif stat.S_ISDIR(info.st_mode):
                entries.append(f"{rel}\0d\0\0{info.st_ino}")
            else:
                entries.append(f"{rel}\0f\0{info.st_size}\0{info.st_ino}")
    return sorted(entries)


def _digest(entries: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(entries)).encode()).hexdigest()


def _manifest(pairs: Sequence[tuple[Path, Path]]) -> dict[str, Any]:
    folders = []
    for live, copy in pairs:
        absent = not os.path.lexists(copy)
        entries = [] if absent else listing(copy)
        folders.append({"live": str(live), "copy": copy.name, "absent": absent, "count": len(entries), "digest": _digest(entries), "entries": entries})
    return {"version": 2, "folders": folders}


def _link_tree(source: Path, dest: Path) -> None:
    """``dest`` as a copy of ``source`` made of hard links (files) and new symlinks; folder modes copied last."""
    os.mkdir(dest)
    folders = [(source, dest)]
    for dirpath, dirnames, filenames in os.walk(source):
        here = dest / os.path.relpath(dirpath, source)
        for name in dirnames + filenames:
            src, dst = os.path.join(dirpath, name), here / name
            info = os.lstat(src)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISDIR(info.st_mode):
                os.mkdir(dst)
                folders.append((Path(src), dst))
            else:
                checkpoint("snapshot")
                os.link(src, dst, follow_symlinks=False)
    for src_dir, dst_dir in reversed(folders):
        shutil.copystat(src_dir, dst_dir, follow_symlinks=False)


def take_snapshot(env: EnvFolders, data_folders: Sequence[Path] = ()) -> Snapshot:
    """Hard-link copies of site-packages, platlib, the scripts folder and ``data_folders`` (one that does not
    exist is recorded as absent: a restore removes what the install created there), their manifest, then the journal."""
    live = list(dict.fromkeys([*env.live(), *data_folders]))
    root = Path(tempfile.mkdtemp(prefix=SNAPSHOT_PREFIX, dir=env.parent))
    journal_written = False
    try:
        pairs = []
        for index, folder in enumerate(live):
            copy = root / copy_name(index, folder)
            if os.path.isdir(folder) and not os.path.islink(folder):
                _link_tree(folder, copy)
            pairs.append((folder, copy))
        checkpoint("snapshot")
        write_atomic(root / MANIFEST_NAME, json.dumps(_manifest(pairs)))
        checkpoint("snapshot")
        snapshot = Snapshot(tuple(pairs), root, env.journal, os.getpid())
        journal_written = True
        write_atomic(env.journal, json.dumps(_journal_data(snapshot, env)))
        checkpoint("snapshot")
        return snapshot
    except OSError as exc:
        _abandon(root, env.journal if journal_written else None)
        if no_space(exc):
            raise InstallError(f"No space left on device in {env.parent} while snapshotting the environment; nothing was changed.",
                               "Free space on that disk, then run this again.") from None
        raise InstallError(f"The environment cannot be snapshotted before installing ({exc.strerror}: {exc.filename}); nothing was changed.",
                           "compat needs site-packages, platlib, the scripts folder and the data folders on one file system it can write to.") from None
    except BaseException:
        _abandon(root, env.journal if journal_written else None)
        raise


def copy_name(index: int, live: Path) -> str:
    """The name of the copy of the index-th folder in a snapshot root (the journal is checked against it)."""
    return f"{index}-{live.name}"


def _abandon(root: Path, journal: Optional[Path]) -> None:
    """Undo a snapshot the installer never used (the environment is untouched): journal first, then the copies."""
    if journal is not None:
        journal.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)


def _journal_data(snapshot: Snapshot, env: EnvFolders) -> dict[str, Any]:
    return {"version": 3, "pid": snapshot.pid, "pid_start": process_start(snapshot.pid), "started": time.time(), "prefix": str(env.prefix),
            "env": {"purelib": str(env.purelib), "platlib": str(env.platlib or ""), "scripts": str(env.scripts), "data": str(env.data or "")},
            "root": str(snapshot.root), "folders": [[str(a), str(b)] for a, b in snapshot.folders]}


# the journal, read as untrusted input


def interrupted_install(env: EnvFolders) -> Optional[Snapshot]:
    """The snapshot of an earlier install whose compat process is gone, if one was left behind (the journal
    checked: InstallInputError when it names anything compat would not have written)."""
    path = env.journal
    if not os.path.lexists(path):
        return None
    data = read_journal(path)
    snapshot = _trusted(data, env, path)
    recorded = data.get("pid_start")
    alive = process_start(snapshot.pid)
    if alive is not None and (recorded is None or alive == recorded) and snapshot.pid != os.getpid():
        return None  # that install is still running
    return snapshot


def read_journal(path: Path) -> object:
    """The journal's JSON, read as untrusted input (no symlink, no FIFO, at most 16 MiB): InstallInputError otherwise."""
    fix = f"If no compat install is running, look at it and remove it (rm {path}), then check the environment with compat check."
    try:
        return json.loads(read_small(path))
    except Unreadable as exc:
        raise InstallInputError(f"The install journal {exc.path} {exc.why}; nothing was moved or deleted.", fix) from None
    except ValueError as exc:
        raise InstallInputError(f"The install journal {path} cannot be read ({exc.__class__.__name__}); nothing was moved or deleted.", fix) from None


def _untrusted(journal: Path, named: object, why: str) -> InstallInputError:
    return InstallInputError(f"The install journal {journal} names {named}, which {why}; nothing was moved or deleted.",
                             f"compat trusts only its own snapshots next to site-packages: if you did not write this journal, remove it (rm {journal}).")


def _trusted(data: object, env: EnvFolders, journal: Path) -> Snapshot:
    if not isinstance(data, dict) or not isinstance(data.get("root"), str) or not isinstance(data.get("folders"), list) or not isinstance(data.get("pid"), int):
        raise _untrusted(journal, "no snapshot in the form compat writes", "is not a journal of this compat")
    root = Path(data["root"])
    real_root = Path(os.path.realpath(root))
    if not root.is_absolute() or os.path.islink(root):
        raise _untrusted(journal, root, "is a relative path or a symbolic link")
    # where compat itself puts it: next to site-packages, both sides with symlinks resolved (site-packages may be a link)
    if real_root.parent != env.parent or not real_root.name.startswith(SNAPSHOT_PREFIX) or Path(os.path.normpath(root)) != real_root:
        raise _untrusted(journal, root, f"is not a {SNAPSHOT_PREFIX}* folder next to {env.purelib}")
    own = env.own()
    pairs: list[tuple[Path, Path]] = []
    for index, entry in enumerate(data["folders"]):
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(p, str) for p in entry)):
            raise _untrusted(journal, entry, "is not a (folder, copy) pair")
        live, copy = Path(entry[0]), Path(entry[1])
        real_live = Path(os.path.realpath(live))
        if not live.is_absolute() or not (real_live in own or env.data_folder(real_live)) or Path(os.path.normpath(live)) != real_live:
            raise _untrusted(journal, live, f"is not one of this environment's folders ({', '.join(map(str, own))}, or a folder directly in {env.data or env.prefix})")
        if any(real_live == p for p, _ in pairs):
            raise _untrusted(journal, live, "is named twice")
        expected = real_root / copy_name(index, real_live)
        if not copy.is_absolute() or os.path.islink(copy) or Path(os.path.normpath(copy)) != expected:
            raise _untrusted(journal, copy, f"is not the copy compat makes of {real_live} ({expected})")
        pairs.append((real_live, expected))
    return Snapshot(tuple(pairs), real_root, journal, data["pid"])


# restore, commit, discard


def _incomplete(detail: str) -> InstallError:
    return InstallError(f"The snapshot to restore is incomplete ({detail}); the environment was left as it is.",
                        "Keep the environment as it is now with compat install --discard-snapshot, then reinstall what you need.", state="unknown")


def _read_manifest(snapshot: Snapshot) -> dict[str, Any]:
    path = snapshot.root / MANIFEST_NAME
    if not snapshot.root.is_dir():
        raise _incomplete(f"{snapshot.root} is gone")
    try:
        data = json.loads(read_small(path))
        folders = {str(f["live"]): f for f in data["folders"]}
    except Unreadable as exc:
        raise _incomplete(f"its manifest {exc.path} {exc.why}, so the copy cannot be checked") from None
    except (ValueError, KeyError, TypeError):
        raise _incomplete(f"{path} is unreadable, so the copy cannot be checked") from None
    return folders


def _matches(folder: Path, expected: list[str]) -> bool:
    try:
        return os.path.isdir(folder) and not os.path.islink(folder) and listing(folder) == expected
    except OSError:
        return False


def _difference(folder: Path, expected: list[str]) -> str:
    """How ``folder`` differs from the manifest, in words (for the refusal)."""
    try:
        actual = listing(folder) if os.path.lexists(folder) else []
    except OSError as exc:
        return f"{folder} cannot be read ({exc.strerror})"
    paths = {e.split("\0")[0] for e in actual}
    missing = sorted({e.split("\0")[0] for e in expected} - paths)
    if missing:
        return f"{len(missing)} of {plural(len(expected), 'entry', 'entries')} {'is' if len(missing) == 1 else 'are'} missing from {folder}, e.g. {missing[0]}"
    changed = sorted({e.split("\0")[0] for e in set(expected) ^ set(actual)})
    return f"{plural(len(changed), 'entry', 'entries')} of {folder} {'differs' if len(changed) == 1 else 'differ'} from the snapshot (replaced after it was taken), e.g. {changed[0]}"


@dataclass(frozen=True)
class Expected:
    """What the manifest says of one folder: its listing, or that it did not exist before the install."""

    entries: list[str]
    absent: bool = False


def _expected(snapshot: Snapshot) -> list[Expected]:
    """The manifest's listing of each folder's copy, in the journal's order (checked against its digest and the
    journal's copy names)."""
    manifest = _read_manifest(snapshot)
    listings = []
    for live, copy in snapshot.folders:
        entry = manifest.get(str(live))
        if not isinstance(entry, dict) or not isinstance(entry.get("entries"), list) or _digest(entry["entries"]) != entry.get("digest") \
                or entry.get("copy") != copy.name:
            raise _incomplete(f"the manifest does not describe {live}")
        absent = entry.get("absent") is True
        if absent and entry["entries"]:
            raise _incomplete(f"the manifest does not describe {live}")
        listings.append(Expected(list(entry["entries"]), absent))
    return listings


def check_restorable(snapshot: Snapshot) -> list[Expected]:
    """Each folder's copy is intact (or the folder is the copy already: swapped back by an interrupted restore);
    checked before anything changes, and before any signal is held (it reads the manifest, untrusted input).
    Returns the manifest's listings, for restore()."""
    listings = _expected(snapshot)
    for (live, copy), expected in zip(snapshot.folders, listings):
        if expected.absent:
            continue
        if not (_matches(live, expected.entries) or _matches(copy, expected.entries)):
            raise _incomplete(_difference(copy, expected.entries))
    return listings


def restore(snapshot: Snapshot, listings: Optional[list[Expected]] = None) -> None:
    """Put the copies back in place of the live folders (checked first, unless check_restorable's ``listings``
    are given; resumable after a kill). A folder that did not exist before the install is moved into the
    snapshot root, to be deleted with it."""
    if listings is None:
        listings = check_restorable(snapshot)
    for index, ((live, copy), expected) in enumerate(zip(snapshot.folders, listings)):
        try:
            if expected.absent:
                if os.path.lexists(live):
                    checkpoint("restore")
                    os.rename(live, _free_name(snapshot.root / f"replaced-{index}-{live.name}"))
                continue
            if _matches(live, expected.entries):
                continue  # swapped back already
            checkpoint("restore")
            if not os.path.lexists(live) or not exchange(live, copy):
                _swap_by_renames(live, copy, snapshot.root / f"replaced-{index}-{live.name}")
        except OSError as exc:
            if expected.absent:
                raise InstallError(f"Removing {live}, which the install created, failed ({exc.strerror}); the rest was not restored yet.",
                                   f"Remove it by hand (rm -rf {live}), then run compat install --restore again.", state="unknown") from None
            raise InstallError(f"Restoring {live} failed ({exc.strerror}); the saved copy is at {copy}.",
                               f"Move it back by hand: rm -rf {live} && mv {copy} {live}", state="unknown") from None
    checkpoint("restore")
    snapshot.journal.unlink(missing_ok=True)
    fsync_dir(snapshot.journal.parent)
    remove_tree(snapshot.root, "restore")


def already_restored(env: EnvFolders, root: Path) -> bool:
    """Whether ``root`` is what a restore leaves when killed after removing its journal: every live folder its
    manifest names is this environment's own and is the copy (same inodes), every absent one is gone."""
    try:
        data = json.loads(read_small(root / MANIFEST_NAME))
        folders = data["folders"]
        if not isinstance(folders, list) or not folders:
            return False
        for entry in folders:
            live = Path(entry["live"])
            if not (live in env.own() or env.data_folder(live)) or _digest(entry["entries"]) != entry["digest"]:
                return False
            if entry.get("absent") is True:
                if os.path.lexists(live):
                    return False
            elif not _matches(live, list(entry["entries"])):
                return False
    except (Unreadable, ValueError, KeyError, TypeError):
        return False
    return True


def _swap_by_renames(live: Path, copy: Path, trash: Path) -> None:
    """Where the file system cannot exchange: the live folder into the snapshot root, then the copy into place."""
    if os.path.lexists(live):
        os.rename(live, _free_name(trash))
        checkpoint("restore")
    os.rename(copy, live)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 with RENAME_EXCHANGE); False where this system cannot."""
    import ctypes
    import errno
    import platform

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    at_fdcwd, rename_exchange = -100, 2
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        result = function(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    else:
        number = {"x86_64": 316, "aarch64": 276}.get(platform.machine())
        if number is None:
            return False
        result = libc.syscall(ctypes.c_long(number), ctypes.c_int(at_fdcwd), ctypes.c_char_p(os.fsencode(a)), ctypes.c_int(at_fdcwd),
                              ctypes.c_char_p(os.fsencode(b)), ctypes.c_uint(rename_exchange))
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(a))


def _free_name(path: Path) -> Path:
    candidate, n = path, 0
    while os.path.lexists(candidate):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def commit(snapshot: Snapshot, phase: str = "commit") -> bool:
    """The commit point: the journal goes first, then the snapshot. Returns whether the snapshot is all gone."""
    checkpoint(phase)
    snapshot.journal.unlink(missing_ok=True)
    fsync_dir(snapshot.journal.parent)
    checkpoint(phase)
    return remove_tree(snapshot.root, phase)


def remove_tree(root: Path, phase: str) -> bool:
    """Delete a snapshot root entry by entry (a checkpoint each); returns whether it is gone."""
    if os.path.islink(root) or not root.is_dir():
        return not os.path.lexists(root)
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.is_symlink():
            for entry in sorted(folder.iterdir()):
                checkpoint(phase)
                _remove(entry)
    shutil.rmtree(root, ignore_errors=True)
    return not os.path.lexists(root)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        try:
            entry.unlink()
        except OSError:
            pass


def orphan_snapshots(env: EnvFolders) -> list[Path]:
    """Snapshot folders no journal refers to (left by a kill before the journal was written or after it was
    removed); only meaningful under the environment lock with no journal present."""
    if os.path.lexists(env.journal):
        return []
    try:
        entries: Iterable[Path] = list(env.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p.name.startswith(SNAPSHOT_PREFIX) and p.is_dir() and not p.is_symlink())
