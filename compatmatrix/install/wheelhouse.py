"""Wheelhouses: the lock compat download writes (sha256 of every wheel, `sha256sum` format), and staging a
wheelhouse for an offline install.

Staging copies exactly the files the lock lists into a private folder, hashing the bytes as they are
copied; the plan and the install then read only that folder, with --only-binary. Anything else in the
wheelhouse (an sdist, a stray wheel, a FIFO) is refused by name: nothing outside the lock is ever read by
pip, so no build backend can run. A wheelhouse without a lock is refused unless unverified wheels are
explicitly allowed (never with --require-hashes).

Side effects: reads the wheelhouse, writes into the staging folder it is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

from ..errors import shown
from ..values import UnwritableValue, odd_character
from .errors import InstallError, InstallInputError
from .files import NotRegular, copy_hashing, no_space, open_regular, read_chunks, refuse_not_regular, sha256_of, write_atomic
from .limits import limits

WHEELHOUSE_LOCK = "compat-wheelhouse.lock"
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


class LockError(InstallError):
    """A wheelhouse lock that cannot be read as compat download writes it."""


def parse_lock(text: str, where: Path) -> dict[str, str]:
    """filename -> sha256 (lowercase) from `sha256sum` lines ("HASH  NAME" or "HASH *NAME"); '#' comments."""
    hashes: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, _, name = line.partition(" ")
        name = name[1:] if name[:1] in (" ", "*") else name
        if any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise LockError(f"Line {number} of {where} names a file with a control character ('{shown(name)}'), which no wheel has; "
                            "the wheelhouse cannot be checked, nothing was changed.", "Make the wheelhouse again with compat download.")
        if not _SHA256.match(digest) or not name or "/" in name or name.startswith(".") or not name.endswith(".whl"):
            raise LockError(f"Line {number} of {where} is not 'SHA256  FILE.whl'; the wheelhouse cannot be checked, nothing was changed.",
                            "Make the wheelhouse again with compat download.")
        hashes[name] = digest.lower()
    return hashes


def read_lock(folder: Path) -> Optional[dict[str, str]]:
    """The lock of ``folder``, or None when it has none."""
    path = folder / WHEELHOUSE_LOCK
    try:
        with open_regular(path) as handle:
            text = handle.read(limits().page_bytes + 1).decode("utf-8", errors="replace")
    except NotRegular as exc:
        if "missing" in exc.why:
            return None
        raise refuse_not_regular(exc, "the wheelhouse lock") from None
    return parse_lock(text, path)


def stage(folder: Path, dest: Path, allow_unverified: bool, require_hashes: bool, say: Callable[[str], None]) -> dict[str, str]:
    """Copy the locked wheels of ``folder`` into ``dest`` (hash-checked as they are copied) and write their lock
    there. Returns filename -> sha256 ('' for unverified wheels, allowed only without a lock and with
    ``allow_unverified``)."""
    if not folder.is_dir():
        raise InstallInputError(f"The wheelhouse {folder} is not a folder; nothing was changed.", "Pass --wheelhouse DIR, a folder made by compat download.")
    hashes = read_lock(folder)
    if hashes is None:
        if require_hashes or not allow_unverified:
            why = "--require-hashes refuses an unverified wheelhouse" if require_hashes else "nothing in it can be checked"
            raise InstallError(f"{folder} has no {WHEELHOUSE_LOCK}; {why}. Nothing was changed.",
                               "Make the wheelhouse with compat download, which writes the lock" + ("." if require_hashes else ", or pass --allow-unverified to install its wheels unchecked."))
        hashes = {p.name: "" for p in sorted(folder.iterdir()) if p.name.endswith(".whl")}
        say(f"  unverified: {folder} has no {WHEELHOUSE_LOCK}; the wheels used from it are installed unchecked (--allow-unverified)")
    _refuse_strangers(folder, hashes)
    dest.mkdir(parents=True, exist_ok=True)
    staged = {}
    for name, expected in sorted(hashes.items()):
        staged[name] = _stage_one(folder / name, dest / name, expected)
    write_lock(dest, [dest / n for n in staged if staged[n]], {n: h for n, h in staged.items() if h})
    return {n: (h if hashes[n] else "") for n, h in staged.items()}


def _refuse_strangers(folder: Path, hashes: dict[str, str]) -> None:
    strangers = sorted(p.name for p in folder.iterdir() if p.name != WHEELHOUSE_LOCK and p.name not in hashes)
    if strangers:
        listed = ", ".join(strangers[:5]) + (f" and {len(strangers) - 5} more" if len(strangers) > 5 else "")
        raise InstallError(f"The wheelhouse {folder} holds {listed}, which its {WHEELHOUSE_LOCK} does not list; refused (only locked wheels are used, "
                           "and an sdist would run its build code). Nothing was changed.",
                           "Remove them, or make the wheelhouse again with compat download.")


def _stage_one(source: Path, target: Path, expected: str) -> str:
    try:
        with open_regular(source) as handle:
            actual, _ = copy_hashing(read_chunks(handle), target, limits().wheel_bytes)
    except NotRegular as exc:
        raise refuse_not_regular(exc, "in the wheelhouse") from None
    except OverflowError:
        raise InstallError(f"{source} is larger than the wheel size cap; refused, nothing was changed.", "Check the wheelhouse.") from None
    except OSError as exc:
        if no_space(exc):
            raise InstallError(f"No space left on device in {target.parent} while staging the wheelhouse; nothing was changed.",
                               "Free space there (or point TMPDIR at a disk with room), then run this again.") from None
        raise
    if expected and actual != expected:
        raise InstallError(f"{source.name} does not match the wheelhouse's {WHEELHOUSE_LOCK}; refused, nothing was changed.",
                           "The folder was changed after compat download: make it again.")
    return actual


def write_lock(folder: Path, files: Sequence[Path], known: Optional[dict[str, str]] = None) -> None:
    """sha256 of every wheel, in `sha256sum` format (`sha256sum -c compat-wheelhouse.lock` works too)."""
    known = known or {}
    for path in files:  # one line per file: a name with a line break would add a line of its own (parse_lock refuses it)
        why = odd_character(path.name)
        if why:
            raise UnwritableValue("wheel file name", path.name, f"the wheelhouse's {WHEELHOUSE_LOCK}", why)
    lines = ["# written by compat download: the sha256 of every wheel in this folder"]
    lines += [f"{known.get(path.name) or sha256_of(path)}  {path.name}" for path in files]
    write_atomic(folder / WHEELHOUSE_LOCK, "\n".join(lines) + "\n")
