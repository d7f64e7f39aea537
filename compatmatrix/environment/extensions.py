"""The native extensions an installed distribution brings, and what each asks of the loader (DT_NEEDED), read from the
files (environment/elf.py) without importing anything: what packages.extension-build judges.

Which files: the distribution's own RECORD (the files pip installed for it, as PEP 376 lists them), else the package
folders named by its top_level.txt (or its import name). Every read is bounded: RECORD_BYTES of a RECORD,
MAX_EXTENSIONS files per distribution, the ELF reader's own bounds per file.

Side effects: reads files (RECORD, the extension files' headers and dynamic sections, torch's lib folder's names).
"""

from __future__ import annotations

import io
import os
import re
from typing import Optional

from ..record import Record
from .elf import ElfError, read_elf

RECORD_BYTES = 8 << 20  # torch's own RECORD is ~2 MB; a companion's a few kB
MAX_EXTENSIONS = 64  # torchaudio has 3, torchvision 2-4, IPEX about 10
_SHARED = re.compile(r"\.so(\.[0-9]+)*$")

# The libraries that make a build a device build. torch's own per-device libraries (its lib folder holds them only in
# that build), then the vendor runtimes an extension may link directly (the nvidia-* / ROCm wheels provide them).
TORCH_DEVICE_LIBRARIES = {
    "libc10_cuda.so": "cuda", "libtorch_cuda.so": "cuda", "libtorch_cuda_cpp.so": "cuda", "libtorch_cuda_cu.so": "cuda",
    "libc10_xpu.so": "xpu", "libtorch_xpu.so": "xpu",
    "libc10_hip.so": "rocm", "libtorch_hip.so": "rocm",
}
_RUNTIMES = (
    (re.compile(r"^lib(cudart|cublas|cublasLt|cudnn\w*|cufft|cufile|curand|cusolver|cusparse\w*|nvrtc|nvToolsExt|nvJitLink|nccl|nvshmem\w*|cupti)\.so"), "cuda"),
    (re.compile(r"^lib(amdhip64|rocblas|hipblas\w*|MIOpen|rccl|roctx64)\.so"), "rocm"),
)
TORCH_CORE = frozenset({"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"})  # a torch extension links these
DEVICE_WORDS = {"cuda": "CUDA", "xpu": "XPU", "rocm": "ROCm"}


def device_of(library: str) -> Optional[str]:
    """The device ("cuda", "xpu", "rocm") a DT_NEEDED name belongs to, or None for a CPU (or unrelated) library."""
    if library in TORCH_DEVICE_LIBRARIES:
        return TORCH_DEVICE_LIBRARIES[library]
    for pattern, device in _RUNTIMES:
        if pattern.match(library):
            return device
    return None


def cuda_runtime_major(needed: tuple[str, ...]) -> Optional[str]:
    """The CUDA runtime major a DT_NEEDED list names (libcudart.so.13 -> "13"), or None."""
    for name in needed:
        if name.startswith("libcudart.so."):
            return name[len("libcudart.so."):].split(".", 1)[0]
    return None


class Extension(Record):
    """One native file of a distribution: what it links, or why it could not be read."""

    path: str
    needed: tuple[str, ...] = ()
    error: str = ""

    @property
    def devices(self) -> dict[str, str]:
        """device -> the first library of it this file links."""
        found: dict[str, str] = {}
        for name in self.needed:
            device = device_of(name)
            if device is not None:
                found.setdefault(device, name)
        return found

    def libraries_of(self, device: str) -> tuple[str, ...]:
        """Every library of ``device`` this file links, torch's own first (libc10_cuda.so before libcudart.so.13)."""
        names = [n for n in self.needed if device_of(n) == device]
        return tuple(sorted(names, key=lambda n: n not in TORCH_DEVICE_LIBRARIES))

    @property
    def links_torch(self) -> bool:
        return any(name in TORCH_CORE for name in self.needed)


class Extensions(Record):
    """A distribution's native files (at most MAX_EXTENSIONS), how they were found, and whether the list was cut."""

    files: tuple[Extension, ...]
    listed_by: str  # "RECORD", "the package folder", or "" (nothing to read)
    cut: bool = False


def _record_rows(dist_path: str) -> Optional[list[list[str]]]:
    """The rows of a distribution's RECORD (its first RECORD_BYTES), or None without one."""
    try:
        with open(os.path.join(dist_path, "RECORD"), "rb") as handle:
            data = handle.read(RECORD_BYTES)
    except OSError:
        return None
    import csv  # here, not at the top: compat check reads no RECORD without an extension installed (start-up time)

    return list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))


def _record_paths(dist_path: str) -> Optional[list[str]]:
    rows = _record_rows(dist_path)
    return None if rows is None else [row[0] for row in rows if row and _SHARED.search(row[0])]


def _folder_paths(site: str, packages: list[str]) -> list[str]:
    found: list[str] = []
    for package in packages:
        top = os.path.join(site, package)
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            found += [os.path.relpath(os.path.join(folder, n), site) for n in sorted(names) if _SHARED.search(n)]
            if len(found) > MAX_EXTENSIONS:
                return found
    return found


def _top_level(dist_path: str, fallback: str) -> list[str]:
    try:
        with open(os.path.join(dist_path, "top_level.txt"), encoding="utf-8", errors="replace") as handle:
            names = [line.strip() for line in handle.read(1 << 16).splitlines() if line.strip() and "/" not in line and ".." not in line]
    except OSError:
        names = []
    return names or [fallback]


def installed_extensions(dist_path: str, site: str, module: str) -> Extensions:
    """The native files of the distribution whose dist-info is ``dist_path`` (installed in ``site``; ``module``: its
    import name, where it has no RECORD and no top_level.txt), each with its DT_NEEDED."""
    listed = _record_paths(dist_path)
    how = "RECORD"
    if listed is None:
        listed, how = _folder_paths(site, _top_level(dist_path, module)), "the package folder"
    root = os.path.realpath(site)
    files: list[Extension] = []
    for relative in listed:
        path = os.path.normpath(os.path.join(site, relative))
        if not os.path.realpath(path).startswith(root + os.sep) or not os.path.isfile(path):
            continue  # outside the site folder (data and scripts) or gone
        if len(files) == MAX_EXTENSIONS:
            return Extensions(tuple(files), how, cut=True)
        try:
            files.append(Extension(path, read_elf(path).needed))
        except ElfError as exc:
            files.append(Extension(path, error=str(exc)))
    return Extensions(tuple(files), how if files or listed else "")


class TorchBuild(Record):
    """What the installed torch build provides, by the per-device libraries in its lib folder."""

    lib: str  # torch's lib folder
    devices: frozenset[str]  # "cuda", "xpu", "rocm"; empty: a CPU build
    cuda_major: Optional[str] = None  # the libcudart major its CUDA library links ("13"), when readable

    @property
    def words(self) -> str:
        return "a CPU build" if not self.devices else "a " + "/".join(DEVICE_WORDS[d] for d in sorted(self.devices)) + " build"


def torch_build(site: str) -> Optional[TorchBuild]:
    """The torch installed in ``site``: its device libraries, or None when its lib folder is not there."""
    lib = os.path.join(site, "torch", "lib")
    try:
        names = set(os.listdir(lib))
    except OSError:
        return None
    devices = frozenset(device for name, device in TORCH_DEVICE_LIBRARIES.items() if name in names)
    major = None
    if "cuda" in devices:
        for name in ("libtorch_cuda.so", "libc10_cuda.so"):
            if name in names:
                try:
                    major = cuda_runtime_major(read_elf(os.path.join(lib, name)).needed)
                except ElfError:
                    major = None
                if major is not None:
                    break
    return TorchBuild(lib, devices, major)


def distribution_bytes(dist_path: str) -> Optional[int]:
    """The bytes a distribution's files take, as its RECORD lists them (the size column), or None without a RECORD."""
    rows = _record_rows(dist_path)
    return None if rows is None else sum(int(row[2]) for row in rows if len(row) >= 3 and row[2].isascii() and row[2].isdigit())
