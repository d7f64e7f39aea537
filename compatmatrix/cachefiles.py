"""compat's private cache folder ($XDG_CACHE_HOME/compatmatrix): JSON data files, never code.

Used for the validated matrix (matrix/cache.py) and for the facts of an interpreter's environment
(environment/probe_cache.py). A file is read only when the folder and the file belong to this user and
nobody else may write them, the file is regular (a FIFO must not block) and not larger than the caller's
limit; anything else reads as "no cache", silently. Files are written privately (0600) and replaced
atomically. ``COMPAT_NO_CACHE`` (any value) turns every cache off.

Side effects: reads and writes files in that folder. Imports nothing beyond the standard library's basics
(start-up: tempfile only when writing).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Optional

NO_CACHE_ENV = "COMPAT_NO_CACHE"


def cache_dir() -> Optional[str]:
    """Where compat keeps its caches ($XDG_CACHE_HOME/compatmatrix); None when COMPAT_NO_CACHE is set."""
    if os.environ.get(NO_CACHE_ENV):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: the XDG spec says to ignore it (a relative one would follow the working directory)
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):  # a relative HOME: no cache rather than one wherever compat happens to run
        return None
    return os.path.join(base, "compatmatrix")


def sha256(data: bytes) -> Any:
    """hashlib.sha256: CPython's built-in implementation where there is one (hashlib loads OpenSSL first, ~3 ms of
    start-up); the digest is the same."""
    try:
        from _sha2 import sha256 as hasher  # type: ignore[import-not-found]  # CPython 3.12+
    except ImportError:
        try:
            from _sha256 import sha256 as hasher  # type: ignore[import-not-found,no-redef]  # CPython <= 3.11
        except ImportError:
            from hashlib import sha256 as hasher  # type: ignore[no-redef]
    return hasher(data)


def blake2b(data: bytes) -> Any:
    """hashlib.blake2b (64-byte digest) without importing hashlib (which loads OpenSSL first, ~3 ms of start-up):
    CPython's own implementation, about four times as fast as its sha256 (1 ms for a 1.5 MB matrix)."""
    try:
        from _blake2 import blake2b as hasher  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - CPython always has it
        from hashlib import blake2b as hasher  # type: ignore[no-redef]
    return hasher(data)


def digest(text: str) -> str:
    """The sha256 of ``text`` (UTF-8; lone surrogates kept), in hex."""
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def private(info: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_bytes(directory: str, name: str, limit: int) -> Optional[bytes]:
    """The bytes of ``directory/name``, or None for any problem at all (missing, not private, not a regular file,
    larger than ``limit`` bytes)."""
    try:
        folder = os.lstat(directory)
        if not stat.S_ISDIR(folder.st_mode) or not private(folder):
            return None
        handle = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or not private(info) or info.st_size > limit:
            return None
        chunks = []
        left = info.st_size + 1  # one byte more: a file that grew since fstat is refused below
        while left > 0:
            chunk = os.read(handle, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(handle)
    return data if len(data) <= limit else None


def read_json(directory: str, name: str, limit: int) -> Optional[Any]:
    """The JSON value in ``directory/name``, or None for any problem at all (missing, not private, not a regular
    file, larger than ``limit`` bytes, not JSON)."""
    data = read_bytes(directory, name, limit)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a number too long, nested too deep
        return None


def write_json(directory: str, name: str, value: Any) -> None:
    """Best effort: a private folder, a private file (mkstemp: 0600), replaced atomically; silent on any failure."""
    try:
        payload = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):  # not JSON data (a TOML date)
        return
    write_bytes(directory, name, payload.encode("utf-8", "surrogatepass"))


def write_bytes(directory: str, name: str, data: bytes) -> None:
    """Best effort: a private folder, a private file (mkstemp: 0600), replaced atomically; silent on any failure."""
    import tempfile

    temporary = None
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not private(os.lstat(directory)) or not os.path.isdir(directory):
            return
        with tempfile.NamedTemporaryFile("wb", dir=directory, prefix=".cache-", suffix=".tmp", delete=False) as out:
            temporary = out.name
            out.write(data)
        os.replace(temporary, os.path.join(directory, name))
        temporary = None
    except (OSError, ValueError, RecursionError):  # RecursionError: makedirs of a path thousands of folders deep
        pass
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass


def prune(directory: str, prefix: str, suffix: str, older_than_s: float, keep: str = "") -> None:
    """Best effort: remove this folder's ``prefix*suffix`` files (not ``keep``) last written more than ``older_than_s``
    seconds ago; silent on any failure."""
    import time

    try:
        if not private(os.lstat(directory)):
            return
        limit = time.time() - older_than_s
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(suffix) and entry.name != keep:
                    try:
                        if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < limit:
                            os.unlink(entry.path)
                    except OSError:
                        pass
    except (OSError, ValueError):
        pass
