"""compat's scratch folders in the temp folder, and the sweep of those a killed compat left behind.

A scratch folder is ``<tempdir>/<prefix>XXXXXXXX`` (tempfile.mkdtemp: private, mode 0700) on whose directory compat
holds an exclusive flock while it lives; the kernel drops the lock when compat dies, SIGKILL included. An ``owner``
file is written once the lock is held. ``sweep_stale(prefix)``, run first by ``scratch_folder``, removes every folder
of that prefix owned by this user that has its ``owner`` file and whose lock it can take (no live compat holds it). A
folder without the file is never removed: its compat may be between mkdtemp and the lock, or be an older compat that
took no lock (and may still be running). At most MAX_SCAN entries of the temp folder are looked at per start.

Side effects: creates, locks and removes folders in the temp folder (TMPDIR).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OWNER = "owner"
MAX_SCAN = 100_000


@contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new locked scratch folder (stale ones of ``prefix`` swept first), removed at the end of the block."""
    import fcntl

    sweep_stale(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)  # a sweeper that took it first sees no owner file yet and lets it be
        (folder / OWNER).write_text(f"{os.getpid()}\n")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(handle)


def sweep_stale(prefix: str, root: "str | None" = None) -> list[Path]:
    """Remove the folders ``<root>/<prefix>*`` of this user that no live compat holds; the ones removed."""
    import fcntl

    removed: list[Path] = []
    try:
        entries = os.scandir(root or tempfile.gettempdir())
    except OSError:
        return removed
    with entries:
        for seen, entry in enumerate(entries):
            if seen >= MAX_SCAN:
                break
            if not entry.name.startswith(prefix):
                continue
            try:
                if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                    continue
                handle = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its compat is alive
                os.close(handle)
                continue
            try:
                if os.path.isfile(os.path.join(entry.path, OWNER)):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(Path(entry.path))
            finally:
                os.close(handle)
    return removed
