"""The allocator and OpenMP libraries on this machine (tcmalloc, jemalloc, Intel OpenMP) and the entries of an LD_PRELOAD:
what compat env and compat launch preload, and what doctor's runtime.ld-preload checks.

Side effects: reads files (library folders, the first bytes of a file to see that it is ELF); nothing else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ALLOCATOR_PATTERNS = ("libtcmalloc.so*", "libtcmalloc_minimal.so*", "libjemalloc.so*", "libiomp5.so")
_STEMS = tuple(pattern.rstrip("*") for pattern in ALLOCATOR_PATTERNS)  # what a name starts with to match any pattern


def library_dirs(prefix: str) -> list[Path]:
    dirs = [Path(prefix) / "lib", Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib")]
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        dirs.insert(0, Path(conda) / "lib")
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def _pattern_of(name: str) -> int:
    """The index in ALLOCATOR_PATTERNS of the pattern ``name`` matches (as glob matches it), -1 for none: each library
    folder is listed once (/usr/lib/x86_64-linux-gnu holds thousands of files, and a glob per pattern lists it again
    and compiles a regex)."""
    if not name.startswith(_STEMS):  # nearly every name of a library folder: one test
        return -1
    for index, pattern in enumerate(ALLOCATOR_PATTERNS):
        if name == pattern if not pattern.endswith("*") else name.startswith(pattern[:-1]):
            return index
    return -1


def preload_candidates(prefix: str) -> dict[str, list[Path]]:
    """Real allocator / OpenMP libraries on this machine, by kind (tcmalloc, jemalloc, iomp5): per folder, in the
    order of ALLOCATOR_PATTERNS, sorted by name within a pattern."""
    found: dict[str, list[Path]] = {"tcmalloc": [], "jemalloc": [], "iomp5": []}
    for directory in library_dirs(prefix):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        matched = sorted((index, name) for name in names if not name.startswith(".") and (index := _pattern_of(name)) >= 0)
        for _, name in matched:
            path = directory / name
            if is_elf(path):
                kind = "tcmalloc" if "tcmalloc" in name else "jemalloc" if "jemalloc" in name else "iomp5"
                found[kind].append(path)
    return found


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def preload_entries(value: str) -> list[str]:
    return [e for e in re.split(r"[:\s]+", value) if e]
