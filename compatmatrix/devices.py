"""Is this version an Intel GPU (XPU/GPU) build?  compatmatrix covers the CPU stack only.

``[[device_build]]`` in the matrix lists, per package, the local labels (``+xpu``, ``+gpu``, ``+cxx11.abi``,
matched exactly) and the version numbers that exist only as device builds (IPEX 2.1.10, torch 2.1.0a0, ...).
:func:`device_build` is the one judgement every caller uses: the request builder (a pin of a device build is
refused), ``compat check`` (an installed device build fails, and is never judged as the CPU release of the
same number).  The sentence about it is written in :mod:`compatmatrix.sentences`.  Pure.
"""

from __future__ import annotations

from typing import Optional

from packaging.version import Version

from .matrix.model import Component, DeviceBuildEntry, Matrix, public
from .record import Record


class DeviceBuild(Record):
    """``version`` of ``component`` is a device build: why (``by``: "label" or "version"), the matrix entry that says
    so (its provenance is the source), and the CPU releases a user meant, where the matrix has them."""

    component: Component
    version: Version
    device: str  # "XPU", "GPU"
    by: str  # "label": its local label marks it; "version": the number exists only as a device build
    entry: DeviceBuildEntry
    cpu_release: Optional[Version]  # the CPU release of the same number (2.5.0+xpu -> 2.5.0)
    cpu_series: tuple[Version, ...]  # otherwise: the CPU releases of the same major.minor, newest first

    @property
    def sources(self) -> tuple[str, ...]:
        return self.entry.provenance.sources


def device_build(matrix: Matrix, component: Component, version: Version) -> Optional[DeviceBuild]:
    """The device build ``version`` is (with its local label, if any), or None for a CPU (or unknown) build."""
    if not matrix.device_builds:
        return None
    label = f"+{version.local}" if version.local is not None else None
    number = public(version)
    for entry in matrix.device_builds:
        if entry.component is not component:
            continue
        if label is not None and label in entry.labels:
            by = "label"
        elif number in entry.versions:
            by = "version"
        else:
            continue
        cpu = matrix.versions(component)
        same = number if number in cpu else None
        series = () if same is not None else tuple(v for v in cpu if v.release[:2] == number.release[:2])
        return DeviceBuild(component, version, entry.device, by, entry, same, series)
    return None
