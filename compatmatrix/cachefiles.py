"""compat's private cache folder ($XDG_CACHE_HOME/compatmatrix): JSON data files, never code.

Used for the parsed matrix (matrix/load.py) and for the facts of an interpreter's environment
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
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
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


def digest(text: str) -> str:
    """The sha256 of ``text`` (UTF-8; lone surrogates kept), in hex."""
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def private(info: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_json(directory: str, name: str, limit: int) -> Optional[Any]:
    """The JSON value in ``directory/name``, or None for any problem at all (missing, not private, not a regular
    file, larger than ``limit`` bytes, not JSON)."""
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
        data = os.read(handle, limit + 1)
    except OSError:
        return None
    finally:
        os.close(handle)
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
    import tempfile

    temporary = None
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not private(os.lstat(directory)) or not os.path.isdir(directory):
            return
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=directory, prefix=".cache-", suffix=".tmp", delete=False) as out:
            temporary = out.name
            out.write(payload)
        os.replace(temporary, os.path.join(directory, name))
        temporary = None
    except (OSError, ValueError):
        pass
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
