"""Where the dynamic loader (glibc's ld.so) would find a shared library an object names in DT_NEEDED, worked out from the
files alone: nothing is loaded, executed or imported.

The loader's order (ld.so(8)): DT_RPATH of the object, then of the objects that loaded it, then of the program (all of
them only when the object has no DT_RUNPATH); LD_LIBRARY_PATH; DT_RUNPATH of the object (its own needs only, never
inherited); ldconfig's cache; the default folders. ``$ORIGIN`` is the folder of the object that names the path (of the
program: its real path). A candidate must be an ELF file of the object's class and machine, as the loader requires.
Places the loader does not search (the environment's own lib folder, CCL_ROOT/lib, ...) can be given as ``extra``: a
library found only there is reported as such (``loader=False``).

Side effects: reads ELF headers and dynamic sections (environment/elf.py), looks at folders, and runs ``ldconfig -p``
once per search (argument list, its own process group, LDCONFIG_TIMEOUT_S) unless the cache is given.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Optional

from ..record import Record
from .elf import ElfError, ElfInfo, elf_identity, read_elf

LDCONFIG_TIMEOUT_S = 10.0
MAX_OBJECTS = 64  # objects followed through DT_NEEDED inside one folder tree
MAX_PLACES = 256  # distinct search folders per lookup (real objects have a handful)
MAX_NEEDED = 256  # DT_NEEDED names followed per object (real libraries have about ten)
SEARCH_BUDGET_S = 5.0  # the whole DT_NEEDED walk; a crafted tree ends with a sentence, not a hang
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$")
_ORIGIN = re.compile(r"\$(?:ORIGIN\b|\{ORIGIN\})")


class Located(Record):
    name: str  # the DT_NEEDED name asked for
    path: str  # the file found
    how: str  # where it was found, in words: "RUNPATH $ORIGIN/lib of /x/_C.so", "LD_LIBRARY_PATH", "ldconfig's cache", ...
    loader: bool  # the loader searches that place (False: found only in a place compat looked besides)

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)


class Needed(Record):
    """One DT_NEEDED name of one object and where it was found, following the objects inside a folder tree."""

    name: str
    requester: str  # the object that names it
    chain: tuple[str, ...]  # the objects from the first one read to the requester
    located: Optional[Located]
    looked: tuple[str, ...]  # the places searched, in order, when it was not found (or found outside the loader's places)


def ldconfig_cache(timeout: float = LDCONFIG_TIMEOUT_S) -> dict[str, list[str]]:
    """name -> paths, from ``ldconfig -p`` (the loader's cache, /etc/ld.so.cache); empty when ldconfig is missing,
    fails or takes longer than ``timeout``."""
    import subprocess  # here: the static checks import this module, and start no ldconfig unless a library is looked up

    from ..processes import run_bounded

    program = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    if program is None:
        return {}
    try:
        done = run_bounded([program, "-p"], timeout, env={"LC_ALL": "C", "PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_ldconfig(done.stdout) if done.returncode == 0 else {}


def parse_ldconfig(text: str) -> dict[str, list[str]]:
    """``ldconfig -p`` output -> name -> paths, in the cache's order (the loader takes the first that fits)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _LDCONFIG_LINE.match(line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(3))
    return found


def default_dirs(machine: Optional[str] = None) -> tuple[str, ...]:
    """The folders the loader searches last (glibc's built-in list: the multiarch folders on Debian-like systems,
    lib64 on 64-bit ones, then /lib and /usr/lib)."""
    arch = machine or os.uname().machine  # what platform.machine() answers on Linux, without importing platform
    triplet = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu"}.get(arch)
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    dirs += ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    return tuple(dirs)


def expand_origin(entry: str, origin: str) -> Optional[str]:
    """A DT_RPATH/DT_RUNPATH entry with $ORIGIN expanded; None for one the loader would take relative to the working
    directory, or that names another token ($LIB, $PLATFORM): compat cannot know those for the run."""
    text = _ORIGIN.sub(lambda _: origin, entry)
    if "$" in text or not os.path.isabs(text):
        return None
    return os.path.normpath(text)


class LibrarySearch:
    """The loader's search for one environment: LD_LIBRARY_PATH, the program's DT_RPATH, ldconfig's cache, the default
    folders, and places compat looks besides (``extra``: (folder, words), not searched by the loader)."""

    def __init__(self, ld_library_path: str = "", executable: Optional[str] = None, ldconfig: Optional[Mapping[str, Sequence[str]]] = None,
                 system_dirs: Optional[Sequence[str]] = None, extra: Sequence[tuple[str, str]] = ()) -> None:
        self.ld_library_path = tuple(e for e in ld_library_path.split(":") if e)
        self.program: Optional[ElfInfo] = None
        if executable:
            try:
                self.program = read_elf(os.path.realpath(executable))
            except ElfError:
                self.program = None
        self._ldconfig = ldconfig
        self.system_dirs = default_dirs() if system_dirs is None else tuple(system_dirs)
        self.extra = tuple(extra)

    @property
    def ldconfig(self) -> Mapping[str, Sequence[str]]:
        if self._ldconfig is None:
            self._ldconfig = ldconfig_cache()
        return self._ldconfig

    def with_ld_library_path(self, folders: Iterable[str]) -> "LibrarySearch":
        """The same search with ``folders`` added in front of LD_LIBRARY_PATH (what `compat env` exports)."""
        other = LibrarySearch.__new__(LibrarySearch)
        other.__dict__.update(self.__dict__)
        other.ld_library_path = tuple(dict.fromkeys([*folders, *self.ld_library_path]))
        return other

    def places(self, requester: Optional[ElfInfo], ancestors: Sequence[ElfInfo] = ()) -> list[tuple[str, str, bool]]:
        """(folder, words, searched by the loader) in the loader's order, before ldconfig's cache; then the default
        folders and the extra places."""
        found: list[tuple[str, str, bool]] = []
        if requester is None or not requester.has_runpath:
            owners = [o for o in (requester, *ancestors) if o is not None]
            if self.program is not None and all(o.path != self.program.path for o in owners):
                owners.append(self.program)
            for owner in owners:
                if not owner.has_runpath:  # the loader drops the DT_RPATH of an object that has a DT_RUNPATH
                    found += self._expanded(owner, owner.rpath, "RPATH")
        found += [(entry, "LD_LIBRARY_PATH", True) for entry in self.ld_library_path if os.path.isabs(entry)]
        if requester is not None:
            found += self._expanded(requester, requester.runpath, "RUNPATH")
        unique: dict[str, tuple[str, str, bool]] = {}
        for place in found:  # the loader looks in a folder once: the first mention counts
            unique.setdefault(place[0], place)
        return list(unique.values())[:MAX_PLACES]  # a crafted object cannot make the search unbounded

    def _expanded(self, owner: ElfInfo, entries: Sequence[str], kind: str) -> list[tuple[str, str, bool]]:
        origin = os.path.dirname(owner.path)
        expanded = []
        for entry in entries:
            folder = expand_origin(entry, origin)
            if folder is not None:
                expanded.append((folder, f"{kind} {entry} of {owner.path}", True))
        return expanded

    def find(self, name: str, requester: Optional[ElfInfo], ancestors: Sequence[ElfInfo] = (), loader_only: bool = False) -> tuple[Optional[Located], tuple[str, ...]]:
        """Where the loader finds ``name`` for ``requester`` (None: a library no object names, looked up as the program
        would), and the places looked at, in order."""
        identity = requester.identity if requester is not None else self.program.identity if self.program is not None else None

        looked: list[str] = []
        if "/" in name:  # a path, taken as it is
            return (Located(name, name, "its own path", True) if _fits(name, identity, looked) else None), tuple(looked) or (name,)
        for candidate, how, loader in self._candidates(name, requester, ancestors, loader_only, looked):
            if _fits(candidate, identity, looked):
                return Located(name, candidate, how, loader), tuple(looked)
        return None, tuple(looked)

    def _candidates(self, name: str, requester: Optional[ElfInfo], ancestors: Sequence[ElfInfo], loader_only: bool,
                    looked: list[str]) -> Iterator[tuple[str, str, bool]]:
        """The paths the loader tries for ``name``, in its order, as (path, how it was found, found by the loader itself);
        each place is added to ``looked`` as it is reached. Past the loader's own places (``loader_only``: not), the extra
        folders compat also looks in."""
        for folder, how, loader in self.places(requester, ancestors):
            looked.append(f"{folder} ({how})")
            yield os.path.join(folder, name), how, loader
        looked.append("ldconfig's cache (ldconfig -p)")
        for candidate in self.ldconfig.get(name, ()):
            yield candidate, "ldconfig's cache (ldconfig -p)", True
        if self.system_dirs:
            looked.append(f"the loader's default folders ({', '.join(self.system_dirs)})")
        for folder in self.system_dirs:
            yield os.path.join(folder, name), "the loader's default folders", True
        if not loader_only:
            for folder, how in self.extra:
                looked.append(f"{folder} ({how})")
                yield os.path.join(folder, name), how, False


def _fits(path: str, identity: Optional[tuple[int, int]], looked: list[str]) -> bool:
    """``path`` is a file the loader would take: an ELF object of ``identity`` (class and machine; None: any). A folder
    this user may not search and a file it may not read are said in ``looked``."""
    try:
        is_file = stat.S_ISREG(os.stat(path).st_mode)
    except PermissionError:  # a folder on the way that this user may not search: said, not passed over in silence
        note = f"{os.path.dirname(path)} (this user cannot look inside it: permission denied; the loader cannot either)"
        if note not in looked:
            looked.append(note)
        return False
    except (OSError, ValueError):
        return False
    if not is_file:
        return False
    found = elf_identity(path)
    if found is None and not os.access(path, os.R_OK):  # there, but not for this user
        looked.append(f"{path} (there, but this user cannot read it: permission denied; the loader cannot open it either)")
    return found is not None and (identity is None or found == identity)


class _Walk:
    """The DT_NEEDED walk inside one folder tree: the objects still to read, the real paths met, what could not be read.
    (A plain class: compat env and check make no dataclass, tests/test_startup.py.)"""

    __slots__ = ("search", "tree", "deadline", "queue", "seen", "unreadable")

    def __init__(self, search: LibrarySearch, tree: str, deadline: float, queue: list[tuple[ElfInfo, tuple[ElfInfo, ...]]], seen: set[str],
                 unreadable: list[str]) -> None:
        self.search = search
        self.tree = tree  # the real path of the tree
        self.deadline = deadline  # time.monotonic() at which the walk stops
        self.queue = queue
        self.seen = seen
        self.unreadable = unreadable

    def follow(self, info: ElfInfo, ancestors: tuple[ElfInfo, ...]) -> None:
        """Queue the objects ``info`` needs that the loader finds inside the tree and that were not met yet."""
        for name in info.needed[:MAX_NEEDED]:
            if time.monotonic() > self.deadline:
                break
            located, _ = self.search.find(name, info, ancestors, loader_only=True)
            if located is None:
                continue
            real = os.path.realpath(located.path)
            if real in self.seen or os.path.commonpath([real, self.tree]) != self.tree:
                continue
            self.seen.add(real)
            try:
                self.queue.append((read_elf(located.path), (info, *ancestors)))
            except ElfError as exc:
                self.unreadable.append(str(exc))


def find_needed(roots: Sequence[str], wanted: Callable[[str], bool], tree: str, search: LibrarySearch) -> tuple[Optional[Needed], tuple[str, ...]]:
    """The first DT_NEEDED name ``wanted`` accepts, met by following DT_NEEDED from ``roots`` through the objects the
    loader would find inside the folder ``tree`` (as the loader would load them); with the objects that could not be read."""
    unreadable: list[str] = []
    queue: list[tuple[ElfInfo, tuple[ElfInfo, ...]]] = []
    seen: set[str] = set()
    for root in roots:
        try:
            queue.append((read_elf(root), ()))
            seen.add(os.path.realpath(root))
        except ElfError as exc:
            unreadable.append(str(exc))
    walk = _Walk(search, os.path.realpath(tree), time.monotonic() + SEARCH_BUDGET_S, queue, seen, unreadable)
    while walk.queue and len(walk.seen) <= MAX_OBJECTS:
        if time.monotonic() > walk.deadline:
            walk.unreadable.append(f"the search stopped after {SEARCH_BUDGET_S:g} s: the objects under {tree} name too many libraries or search folders")
            break
        info, ancestors = walk.queue.pop(0)
        needed = _wanted_need(info, ancestors, wanted, search)
        if needed is not None:
            return needed, tuple(walk.unreadable)
        walk.follow(info, ancestors)
    return None, tuple(walk.unreadable)


def _wanted_need(info: ElfInfo, ancestors: tuple[ElfInfo, ...], wanted: Callable[[str], bool], search: LibrarySearch) -> Optional[Needed]:
    """The first DT_NEEDED name of ``info`` that ``wanted`` accepts, with where the loader finds it (the places looked
    at when it does not), and the chain of objects that led to it."""
    for name in info.needed[:MAX_NEEDED]:
        if wanted(name):
            located, looked = search.find(name, info, ancestors)
            chain = tuple(a.path for a in reversed(ancestors)) + (info.path,)
            return Needed(name, info.path, chain, located, () if located is not None and located.loader else looked)
    return None
