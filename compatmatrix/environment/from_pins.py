"""An environment made of pins alone: what `compat check -r FILE` judges when nothing is installed yet.

The snapshot holds one distribution per exact pin (name and version as written, local label kept) and nothing
about a machine: no CPU flags, no environment variables, no files. Only the package checks apply to it; the
command says so. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import Version

from ..names import canonical_name
from ..target import Platform
from .snapshot import CpuInfo, Distribution, EnvSnapshot

PINNED_INSTALLER = "compat-check-r"  # the installer a pinned (not installed) distribution carries: checks tell a file's pin by it


def snapshot_from_pins(pins: Mapping[str, str], python: Version, platform: Platform, origin: str) -> EnvSnapshot:
    """``pins``: distribution name -> exact version; ``origin`` names the files (shown where an interpreter would be)."""
    distributions = tuple(Distribution(name=name, canonical=canonical_name(name), raw_version=version, path=f"{origin} (pinned)", site=origin,
                                       installer=PINNED_INSTALLER)
                          for name, version in pins.items())
    return EnvSnapshot(executable=origin, python=python, prefix="", purelib="", scripts="", paths=(), platform=platform, libc_version="",
                       cpu=CpuInfo(model="", flags=frozenset(), sockets=None, cores=None, logical=None, numa_nodes=None),
                       allowed_cpus=1, cgroup_quota=None, shm_bytes=None, env={}, distributions=distributions, modules={}, which={})
