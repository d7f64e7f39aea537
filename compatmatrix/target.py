"""What the resolver resolves for: a CPython version and a platform (PEP 425 platform tag)."""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from typing import Optional

from packaging.version import InvalidVersion, Version

from .errors import UsageError, shown
from .record import Record, replace

_MANYLINUX = re.compile(r"^(manylinux_\d+_\d+|musllinux_\d+_\d+|manylinux\d*|linux)_(?P<arch>.+)$")
_PEP600 = re.compile(r"^manylinux_(?P<major>\d+)_(?P<minor>\d+)_")
#: The legacy manylinux tags and the glibc each promises (PEP 513, 571, 599).
_LEGACY_GLIBC = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
_MACOS = re.compile(r"^macosx_\d+_\d+_(?P<arch>.+)$")
_PYTHON_VERSION = re.compile(r"^(?:python|py|cp)?(?P<major>\d)\.?(?P<minor>\d{1,2})(?:\.(?P<micro>\d+))?$")


class Platform(Record):
    """A platform, from a PEP 425 tag (``manylinux_2_28_x86_64``, ``macosx_14_0_arm64``, ``win_amd64``)."""

    tag: str
    system: str  # linux, macos, windows, unknown
    machine: str
    libc: str  # glibc, musl, "" when not Linux
    glibc: Optional[Version] = None  # the glibc the target has (a manylinux tag's promise, or the machine's); None: not known

    @classmethod
    def from_tag(cls, tag: str) -> "Platform":
        normal = tag.strip().lower().replace("-", "_").replace(".", "_")
        match = _MANYLINUX.match(normal)
        if match:
            libc = "musl" if normal.startswith("musllinux") else "glibc"
            return cls(tag=normal, system="linux", machine=match.group("arch"), libc=libc, glibc=_tag_glibc(normal))
        match = _MACOS.match(normal)
        if match:
            return cls(tag=normal, system="macos", machine=match.group("arch"), libc="")
        if normal in ("win_amd64", "win32", "win_arm64"):
            machine = {"win_amd64": "x86_64", "win32": "x86", "win_arm64": "arm64"}[normal]
            return cls(tag=normal, system="windows", machine=machine, libc="")
        raise UsageError(
            f"'{tag}' is not a platform tag compatmatrix understands.",
            "Use a PEP 425 platform tag such as manylinux_2_28_x86_64, linux_x86_64 or macosx_14_0_arm64.",
        )

    @classmethod
    def current(cls) -> "Platform":
        """This machine's platform; on glibc Linux with the running C library's version (the tag does not say it)."""
        platform = cls.from_tag(sysconfig.get_platform())
        if platform.libc == "glibc" and platform.glibc is None:
            platform = platform.with_glibc(_running_glibc())
        return platform

    def with_glibc(self, version: Optional[str]) -> "Platform":
        """The same platform with the glibc an interpreter or the machine reported ("2.36"); unchanged for an unreadable one."""
        try:
            return replace(self, glibc=Version(version)) if version and self.libc == "glibc" else self
        except (InvalidVersion, ValueError):
            return self

    @property
    def glibc_text(self) -> str:
        """"glibc 2.17", or "an unknown glibc"."""
        return f"glibc {self.glibc}" if self.glibc is not None else "an unknown glibc"

    def unsupported_reason(self) -> Optional[str]:
        """Why the Intel CPU stack cannot be installed here, or None on Linux x86_64 with glibc."""
        if self.system != "linux":
            return (
                f"{self.tag} is not Linux: Intel Extension for PyTorch and oneccl_bind_pt publish CPU wheels "
                "for Linux x86_64 only, and compatmatrix curates Linux x86_64 wheels only."
            )
        if self.machine not in ("x86_64", "amd64"):
            return (
                f"{self.tag} is a {self.machine} platform: Intel Extension for PyTorch and oneccl_bind_pt "
                "publish CPU wheels for x86_64 only."
            )
        if self.libc == "musl":
            return (
                f"{self.tag} is a musl platform: torch, IPEX and oneccl_bind_pt wheels are built for glibc "
                "(manylinux) only."
            )
        return None


def probed_platform(tag: object, libc: object, libc_version: object) -> Platform:
    """The platform an interpreter's probe reported: its tag (``linux_x86_64``) with the C library it runs on, which
    the tag does not say. The one reading of a probe's platform: ``--python`` (interpreter probe) and the environment
    snapshot (install, doctor, migrate) both give the target its glibc through it."""
    platform = Platform.from_tag(str(tag).replace("-", "_").replace(".", "_"))
    libc_name = str(libc or "")
    if platform.system == "linux" and libc_name not in ("glibc", ""):
        return Platform(tag=platform.tag, system="linux", machine=platform.machine, libc=libc_name)
    if platform.libc == "glibc" and platform.glibc is None:
        return platform.with_glibc(str(libc_version or ""))
    return platform


def _tag_glibc(tag: str) -> Optional[Version]:
    """The glibc a manylinux tag promises (``manylinux_2_28_x86_64`` -> 2.28, ``manylinux2014_x86_64`` -> 2.17); None for ``linux_*``."""
    match = _PEP600.match(tag)
    if match:
        return Version(f"{int(match.group('major'))}.{int(match.group('minor'))}")
    legacy = re.match(r"^(manylinux(?:1|2010|2014))_", tag)
    return Version(_LEGACY_GLIBC[legacy.group(1)]) if legacy else None


def _running_glibc() -> Optional[str]:
    """The C library this process runs on ("2.36"), from confstr; None when it is not glibc or cannot be read."""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, OSError, ValueError):
        return None
    name, _, version = value.partition(" ")
    return version if name == "glibc" else None


class PythonTarget(Record):
    """The CPython the set is for: ``version`` is major.minor; ``full`` when an interpreter told us."""

    version: Version
    full: Optional[Version]
    origin: str  # "running interpreter", "--python-version 3.11", "--python /path"
    markers: tuple[tuple[str, str], ...] = ()  # an interpreter's own PEP 508 marker values, when one was asked
    markers_platform: str = ""  # the platform tag of that interpreter (its platform values hold only there)

    @property
    def label(self) -> str:
        return f"{self.version.major}.{self.version.minor}"

    @property
    def for_requires_python(self) -> Version:
        """The version to test a ``Requires-Python`` specifier with."""
        return self.full or Version(f"{self.label}.0")

    @classmethod
    def parse(cls, text: str, origin: Optional[str] = None) -> "PythonTarget":
        match = _PYTHON_VERSION.match(text.strip())
        if not match:
            raise UsageError(f"'{shown(text)}' is not a Python version.", "Pass --python-version as X.Y, for example 3.11.")
        major, minor, micro = match.group("major"), match.group("minor"), match.group("micro")
        try:
            version = Version(f"{major}.{minor}")
            full = Version(f"{major}.{minor}.{micro}") if micro is not None else None
        except (InvalidVersion, ValueError):  # ValueError: more digits than int() takes
            raise UsageError(f"'{shown(text)}' is not a Python version.", "Pass --python-version as X.Y.") from None
        return cls(version=version, full=full, origin=origin or f"--python-version {text}")

    @classmethod
    def running(cls) -> "PythonTarget":
        info = sys.version_info
        return cls(
            version=Version(f"{info.major}.{info.minor}"),
            full=Version(f"{info.major}.{info.minor}.{info.micro}"),
            origin=f"running interpreter {sys.executable}",
            markers=_running_markers(),
            markers_platform=sysconfig.get_platform(),
        )


def _running_markers() -> tuple[tuple[str, str], ...]:
    """This interpreter's PEP 508 marker values, as packaging.markers.default_environment() gives them (without
    importing the platform module: the same values from sys and os.uname)."""
    uname = os.uname()
    implementation = sys.implementation
    level = implementation.version.releaselevel
    implementation_version = "{0.major}.{0.minor}.{0.micro}".format(implementation.version)
    if level != "final":
        implementation_version += level[0] + str(implementation.version.serial)
    values = {
        "implementation_name": implementation.name, "implementation_version": implementation_version, "os_name": os.name,
        "platform_machine": uname.machine, "platform_release": uname.release, "platform_system": uname.sysname,
        "platform_version": uname.version, "python_full_version": sys.version.split()[0],
        "platform_python_implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(implementation.name, implementation.name),
        "python_version": f"{sys.version_info.major}.{sys.version_info.minor}", "sys_platform": sys.platform,
    }
    return tuple(sorted(values.items()))
