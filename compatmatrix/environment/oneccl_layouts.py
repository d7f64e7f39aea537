"""Where a oneCCL runtime installed from wheels keeps what oneCCL loads at run time, as data read from the wheels' own files.

oneCCL's libccl dlopens libfabric (its OFI transport, and Intel MPI's), libfabric loads its providers from
FI_PROVIDER_PATH (it has no default folder of its own: ``fi_getinfo error: ret -61`` without one), and oneCCL's MPI
transport refuses Intel MPI unless I_MPI_ROOT (or ONEAPI_ROOT) is set. A pip venv runs none of the wheels' conda
activation scripts (``<prefix>/etc/conda/activate.d/``), which are where each wheel says those places are; the table
below holds what those scripts say, one row per wheel release read, with the file it was read from. A release not in
the table is read the same way from its installed script (as text, never run): ``read_activation``.

Side effects: reads folders and the installed activation script's text (``runtime_layout``); nothing is run or loaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from packaging.version import InvalidVersion, Version

ACTIVATION = "etc/conda/activate.d/mpivars.activate.sh"  # impi-rt's conda activation script, relative to the prefix
DISTRIBUTION = "impi-rt"
LIBFABRIC = "libfabric.so.1"  # the soname libccl and Intel MPI load
PROVIDERS = "lib*-fi.so"


@dataclass(frozen=True)
class RuntimeLayout:
    """Folders relative to the environment's prefix (``.``: the prefix itself), and where the row was read."""

    distribution: str
    release: str  # the wheel's release the row was read from ("2021.14.1"); rows apply to its major.minor line
    libfabric: str  # the folder holding libfabric.so.1: LD_LIBRARY_PATH gains it
    providers: str  # the folder holding libfabric's providers: FI_PROVIDER_PATH
    mpi_root: str  # I_MPI_ROOT (Intel MPI's root, which oneCCL's MPI transport asks for)
    source: str  # the file the row was read from

    def applies_to(self, version: Version) -> bool:
        own = Version(self.release)
        return (version.major, version.minor) == (own.major, own.minor)

    def resolved(self, prefix: str) -> "ResolvedLayout":
        def place(relative: str) -> str:
            return os.path.normpath(os.path.join(prefix, relative))

        return ResolvedLayout(place(self.libfabric), place(self.providers), place(self.mpi_root), self.source)


@dataclass(frozen=True)
class ResolvedLayout:
    """A row's folders in one environment."""

    libfabric: str
    providers: str
    mpi_root: str
    source: str


# Read from the wheels (`pip download --no-deps impi-rt==X`; `unzip -p ... mpivars.activate.sh`): its I_MPI_ROOT is
# ${CONDA_PREFIX}, its LD_LIBRARY_PATH and FI_PROVIDER_PATH lines name the folders (the second FI_PROVIDER_PATH entry,
# the distribution's /usr/lib*/libfabric, is the system's own and not the wheel's).
LAYOUTS: tuple[RuntimeLayout, ...] = (
    RuntimeLayout(DISTRIBUTION, "2021.14.1", "lib/libfabric", "lib/libfabric/prov", ".",
                  f"impi_rt-2021.14.1-py2.py3-none-manylinux_2_28_x86_64.whl: {ACTIVATION}"),
    RuntimeLayout(DISTRIBUTION, "2021.18.1", "lib", "lib", ".",
                  f"impi_rt-2021.18.1-py2.py3-none-manylinux_2_28_x86_64.whl (as pip installed it): {ACTIVATION}"),
    # 2021.19: the script sets I_MPI_ROOT only ("Do not set LD_LIBRARY_PATH/LIBRARY_PATH in Conda activation scripts"), and
    # the wheel holds no libfabric: it declares `Requires-Dist: libfabric (>=2.6)`, a distribution no index has (read
    # 2026-12-07; data/matrix.toml [[runtime]] impi-rt 2021.19.0). No folders: "" (NO_LIBFABRIC).
    RuntimeLayout(DISTRIBUTION, "2021.19.0", "", "", ".",
                  f"impi_rt-2021.19.0-py2.py3-none-manylinux_2_28_x86_64.whl: {ACTIVATION}, impi_rt-2021.19.0.dist-info/METADATA"),
)
NO_LIBFABRIC = ""  # a row's libfabric for a release whose wheel ships none

_ROOT = r'\$\{(?:I_MPI_ROOT|CONDA_PREFIX)\}'
_LD = re.compile(r'export\s+LD_LIBRARY_PATH="' + _ROOT + r'(/[^:"$]*)?[:"]')
_PROV = re.compile(r'export\s+FI_PROVIDER_PATH="' + _ROOT + r'(/[^:"$]*)?[:"]')
_MPI_ROOT = re.compile(r'export\s+I_MPI_ROOT="\$\{CONDA_PREFIX\}(/[^"$]*)?"')


def read_activation(text: str, release: str, source: str) -> Optional[RuntimeLayout]:
    """The row an impi-rt activation script's text gives (its LD_LIBRARY_PATH, FI_PROVIDER_PATH and I_MPI_ROOT lines,
    relative to the prefix), or None when it does not say all three."""
    ld, prov, root = _LD.search(text), _PROV.search(text), _MPI_ROOT.search(text)
    if ld is None or prov is None or root is None:
        return None
    mpi = (root.group(1) or "").strip("/") or "."

    def relative(match: "re.Match[str]") -> str:  # the ${I_MPI_ROOT} the line starts with is the MPI root
        return os.path.normpath(os.path.join(mpi, (match.group(1) or "").strip("/")))

    folders = (relative(ld), relative(prov), os.path.normpath(mpi))
    if any(f == ".." or f.startswith("../") for f in folders):  # a script's folders stay inside the environment
        return None
    return RuntimeLayout(DISTRIBUTION, release, folders[0], folders[1], folders[2], source)


def installed_release(prefix: str) -> Optional[Version]:
    """The impi-rt release installed in the environment at ``prefix`` (its dist-info folder's name), or None."""
    for dist_info in sorted(Path(prefix).glob("lib/python3*/site-packages/impi_rt-*.dist-info")):
        try:
            return Version(dist_info.name[len("impi_rt-"):-len(".dist-info")])
        except InvalidVersion:
            continue
    return None


def runtime_layout(prefix: str) -> Optional[ResolvedLayout]:
    """The impi-rt layout of the environment at ``prefix``: the table's row for its release, else what its installed
    activation script says (read as text); None without impi-rt, or when the folders named do not hold libfabric."""
    release = installed_release(prefix)
    if release is None:
        return None
    row = next((r for r in LAYOUTS if r.applies_to(release)), None)
    if row is not None and row.libfabric == NO_LIBFABRIC:
        return None  # the wheel ships no libfabric (and its script names none): nothing to find
    if row is not None:
        resolved = row.resolved(prefix)
        if os.path.isfile(os.path.join(resolved.libfabric, LIBFABRIC)):
            return resolved
    script = Path(prefix) / ACTIVATION  # a release the table lacks, or one laid out otherwise than its line's row says
    try:
        text = script.read_text(errors="replace")[:65536]
    except OSError:
        return None
    read = read_activation(text, str(release), f"the installed {script}")
    if read is None:
        return None
    resolved = read.resolved(prefix)
    return resolved if os.path.isfile(os.path.join(resolved.libfabric, LIBFABRIC)) else None


def holds_providers(folder: str) -> bool:
    return os.path.isdir(folder) and any(Path(folder).glob(PROVIDERS))
