"""The allocator and OpenMP libraries on this machine (tcmalloc, jemalloc, Intel OpenMP) and the entries of an LD_PRELOAD:
what compat env and compat launch preload, and what doctor's runtime.ld-preload checks.

Side effects: reads files (library folders, the first bytes of a file to see that it is ELF); nothing else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ALLOCATOR_PATTERNS = ("libtcmalloc.so*", "libtcmalloc_minimal.so*", "libjemalloc.so*", "libiomp5.so")


def library_dirs(prefix: str) -> list[Path]:
    dirs = [Path(prefix) / "lib", Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib")]
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        dirs.insert(0, Path(conda) / "lib")
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def preload_candidates(prefix: str) -> dict[str, list[Path]]:
    """Real allocator / OpenMP libraries on this machine, by kind (tcmalloc, jemalloc, iomp5)."""
    found: dict[str, list[Path]] = {"tcmalloc": [], "jemalloc": [], "iomp5": []}
    for directory in library_dirs(prefix):
        for pattern in ALLOCATOR_PATTERNS:
            for path in sorted(directory.glob(pattern)):
                if is_elf(path):
                    kind = "tcmalloc" if "tcmalloc" in path.name else "jemalloc" if "jemalloc" in path.name else "iomp5"
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
