"""The oneCCL that oneccl_bind_pt loads when the bindings do not bundle one: a build with USE_SYSTEM_ONECCL=1 against the
PyPI ``oneccl-cpu`` runtime, conda's oneccl, a oneAPI install or a oneCCL built from source. Such bindings carry no
``env/setvars.sh``; what they load is the libccl.so.* their native code names in DT_NEEDED, found by the loader's rules
(environment/linker.py), or, where the loader would not look, in the places such a oneCCL is installed.

Side effects: reads ELF files and folders, runs ``ldconfig -p`` once (environment/linker.py); never loads a library.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..record import Record
from .elf import ElfError, read_elf
from .linker import LibrarySearch, Located, Needed, find_needed

if TYPE_CHECKING:
    from .oneccl_layouts import ResolvedLayout

LIBCCL = re.compile(r"^libccl\.so(\.[0-9]+)*$")
DEFAULT_SONAME = "libccl.so.1"  # the soname of every oneCCL 2021.x and 2022.x libccl
PROVIDERS = "lib*-fi.so"  # libfabric provider files
MAX_OBJECTS = 16  # native files read at the top of the bindings
LIB_VARIANTS = ("cpu", "cpu_icc", "cpu_gpu_dpcpp")  # oneAPI 2021.1-2021.4 kept libccl under lib/<configuration>
SCRIPTS = ("env/vars.sh", "env/setvars.sh")  # a oneCCL install's own environment script, relative to its root


class SystemOneccl(Record):
    """Where the libccl of bindings built against a system oneCCL is, how it was found, and what an environment for it needs."""

    name: str  # the libccl asked for: the bindings' DT_NEEDED name, or DEFAULT_SONAME when no native file names one
    named: str  # how the name was learnt: "<object> names libccl.so.1 (DT_NEEDED)", or why the soname is assumed
    located: Optional[Located]
    chain: tuple[str, ...] = ()  # the bindings' objects from the extension to the one that names libccl
    looked: tuple[str, ...] = ()  # places searched, when it was not found where the loader looks
    unreadable: tuple[str, ...] = ()  # native files that could not be read (a sentence each)
    root: Optional[str] = None  # its install root: the folder above its lib/
    script: Optional[Path] = None  # <root>/env/vars.sh when that oneCCL has one
    providers: Optional[str] = None  # a folder holding libfabric providers for it
    unresolved: tuple[str, ...] = ()  # libccl's own DT_NEEDED names the loader would not find (e.g. libccl.so.2)
    layout: Optional[ResolvedLayout] = None  # the PyPI runtime's folders (impi-rt: libfabric, providers, I_MPI_ROOT)

    @property
    def found(self) -> bool:
        return self.located is not None

    def after(self, before: Mapping[str, str]) -> dict[str, str]:
        """The environment ``before`` with what this oneCCL needs: its lib folder in front of LD_LIBRARY_PATH where the
        loader would not find libccl otherwise; for the PyPI runtime (oneccl-cpu + impi-rt: ``layout``) the libfabric
        folder libccl dlopens from, and FI_PROVIDER_PATH its providers (where it is unset or holds none), as the wheels'
        own activation scripts set them; otherwise FI_PROVIDER_PATH when unset and a provider folder was found. No
        CCL_ROOT: oneCCL on CPUs runs without it (the hand check of issue 25 never needed it), so no finding asks for
        it (a oneCCL's own env/vars.sh, when it has one, still sets it). I_MPI_ROOT is the mpirun launcher's
        (launchers/mpirun.py ccl_exports): only oneCCL's MPI transport asks for it."""
        after = dict(before)
        if self.located is None:
            return after
        old = [e for e in before.get("LD_LIBRARY_PATH", "").split(":") if e]
        front = [] if self.located.loader else [self.located.directory]
        if self.layout is not None and self.layout.libfabric not in old + front:
            front.append(self.layout.libfabric)
        if front:
            after["LD_LIBRARY_PATH"] = ":".join(front + old)
        if self.layout is not None:
            from .oneccl_layouts import holds_providers

            if not any(holds_providers(e) for e in before.get("FI_PROVIDER_PATH", "").split(":") if e):
                after["FI_PROVIDER_PATH"] = self.layout.providers
            return after
        if self.providers and not before.get("FI_PROVIDER_PATH"):
            after["FI_PROVIDER_PATH"] = self.providers
        return after


def native_objects(directory: Path) -> list[str]:
    """The bindings' native files to start from: the Python extensions at the top of the package (_C.cpython-*.so),
    else the libraries in its lib/ folder."""
    top = sorted(str(p) for p in directory.glob("*.so") if p.is_file())
    if not top:
        top = sorted(str(p) for p in directory.glob("lib/*.so*") if p.is_file() and not LIBCCL.match(p.name))
    return top[:MAX_OBJECTS]


def extra_places(prefix: str, data: Optional[str], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Where a system oneCCL is installed although the loader does not look there: the environment's own lib folder
    (the oneccl-cpu and impi-rt wheels install into <prefix>/lib), CONDA_PREFIX/lib, CCL_ROOT/lib, oneAPI's ccl/latest/lib."""
    places = [(os.path.join(prefix, "lib"), "the environment's own lib folder, where the oneccl-cpu wheel installs")]
    if data and os.path.realpath(data) != os.path.realpath(prefix):
        places.append((os.path.join(data, "lib"), "the environment's data lib folder, where the oneccl-cpu wheel installs"))
    if env.get("CONDA_PREFIX"):
        places.append((os.path.join(env["CONDA_PREFIX"], "lib"), "CONDA_PREFIX/lib"))
    if env.get("CCL_ROOT"):
        places.append((os.path.join(env["CCL_ROOT"], "lib"), "CCL_ROOT/lib"))
        places += [(os.path.join(env["CCL_ROOT"], "lib", v), f"CCL_ROOT/lib/{v}") for v in LIB_VARIANTS]
    oneapi = env.get("ONEAPI_ROOT") or "/opt/intel/oneapi"
    places.append((os.path.join(oneapi, "ccl", "latest", "lib"), "oneAPI's ccl/latest/lib"))
    seen: set[str] = set()
    unique = []
    for folder, words in places:
        if os.path.normpath(folder) not in seen:
            seen.add(os.path.normpath(folder))
            unique.append((folder, words))
    return unique


def oneccl_root(library_dir: str) -> Optional[str]:
    """The install root above a lib folder holding libccl (<root>/lib, or oneAPI 2021's <root>/lib/cpu); None for a
    distribution's own folders (/usr/lib/x86_64-linux-gnu, /lib64, ...), which are no oneCCL root."""
    folder = Path(library_dir)
    if folder.name in LIB_VARIANTS and folder.parent.name == "lib":
        folder = folder.parent
    if folder.name not in ("lib", "lib64"):
        return None
    root = folder.parent
    return None if str(root) in ("/", "/usr") else str(root)


def provider_folder(root: Optional[str], library_dir: str, env: Mapping[str, str], layout: Optional[ResolvedLayout] = None) -> Optional[str]:
    """The first folder holding libfabric providers among: the PyPI runtime's (``layout``: impi-rt's activation script
    names it), the oneCCL root's own (lib/prov, opt/mpi/libfabric/lib/prov), I_MPI_ROOT's, and the folder holding libccl."""
    candidates = [layout.providers] if layout is not None else []
    if root:
        candidates += [os.path.join(root, "lib", "prov"), os.path.join(root, "opt", "mpi", "libfabric", "lib", "prov")]
    if env.get("I_MPI_ROOT"):
        mpi = env["I_MPI_ROOT"]
        candidates += [os.path.join(mpi, "opt", "mpi", "libfabric", "lib", "prov"), os.path.join(mpi, "libfabric", "lib", "prov"), os.path.join(mpi, "lib")]
    candidates.append(library_dir)
    for folder in candidates:
        if os.path.isdir(folder) and any(Path(folder).glob(PROVIDERS)):
            return folder
    return None


def locate(bindings_dir: Path, search: LibrarySearch, env: Mapping[str, str]) -> SystemOneccl:
    """The libccl the bindings in ``bindings_dir`` load, how it was found, and what an environment for it needs."""
    roots = native_objects(bindings_dir)
    needed: Optional[Needed] = None
    unreadable: tuple[str, ...] = ()
    if roots:
        needed, unreadable = find_needed(roots, lambda name: bool(LIBCCL.match(name)), str(bindings_dir), search)
    if needed is not None:
        name, named = needed.name, f"{needed.requester} names {needed.name} (DT_NEEDED)"
        located, looked, chain = needed.located, needed.looked, needed.chain
    else:
        what = "no native file in the bindings names libccl" if roots else "the bindings hold no native file to read"
        name, named = DEFAULT_SONAME, f"{what}; looked for {DEFAULT_SONAME}, the soname of oneCCL 2021 and 2022"
        located, looked = search.find(DEFAULT_SONAME, None)
        looked = () if located is not None and located.loader else looked
        chain = ()
    if located is None:
        return SystemOneccl(name, named, None, chain, looked, unreadable)
    root = oneccl_root(located.directory)
    script = next((Path(root) / s for s in SCRIPTS if (Path(root) / s).is_file()), None) if root else None
    try:
        unresolved = _unresolved(located, search)
    except ElfError as exc:
        unreadable, unresolved = unreadable + (str(exc),), ()
    from .oneccl_layouts import runtime_layout  # only once a system oneCCL is found: compat check's start stays light

    layout = runtime_layout(root) if root else None
    return SystemOneccl(name, named, located, chain, looked, unreadable, root, script, provider_folder(root, located.directory, env, layout), unresolved,
                        layout)


def _unresolved(located: Located, search: LibrarySearch) -> tuple[str, ...]:
    """libccl's own DT_NEEDED names the loader would not find (with libccl's folder on LD_LIBRARY_PATH where compat env
    puts it there)."""
    info = read_elf(located.path)
    own = search if located.loader else search.with_ld_library_path([located.directory])
    return tuple(name for name in info.needed if own.find(name, info, loader_only=True)[0] is None)
