"""Run the environment probe and parse what it says into an :class:`EnvSnapshot`.

Side effects: for another interpreter, a child process (environment/interpreter.py: the answer comes back in a
private file, the child dies with compat); for the running interpreter, none (the probe runs in-process).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ..errors import CompatError, InterpreterError
from ..names import canonical_name
from ..record import Record
from ..target import Platform, PythonTarget, probed_platform
from .interpreter import _resolve_executable, probe_timeout, run_json_probe

PROBE_PATH = Path(__file__).with_name("env_probe.py")
PROBE_TIMEOUT_S = 60.0


class Distribution(Record):
    name: str
    canonical: str
    raw_version: str
    path: str
    site: str
    installer: str = ""
    direct_url: Optional[Mapping[str, Any]] = None

    @property
    def version(self) -> Optional[Version]:
        try:
            return Version(self.raw_version)
        except InvalidVersion:
            return None

    @property
    def public_version(self) -> Optional[Version]:
        version = self.version
        return Version(version.public) if version is not None else None


NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo flags of native bf16 (AVX512-BF16, AMX)


class CpuInfo(Record):
    model: str
    flags: frozenset[str]
    sockets: Optional[int]
    cores: Optional[int]
    logical: Optional[int]
    numa_nodes: Optional[int]


class EnvSnapshot(Record):
    executable: str
    python: Version
    prefix: str
    purelib: str
    scripts: str
    paths: tuple[str, ...]
    platform: Platform
    libc_version: str
    cpu: CpuInfo
    allowed_cpus: int
    cgroup_quota: Optional[float]
    shm_bytes: Optional[int]
    env: Mapping[str, str]
    distributions: tuple[Distribution, ...]
    modules: Mapping[str, str]
    which: Mapping[str, Optional[str]]
    raw: Mapping[str, Any] = MappingProxyType({})  # the probe's answer as it came: not compared, not shown

    _uncompared = frozenset({"raw"})

    def __repr__(self) -> str:
        return "EnvSnapshot(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields if name != "raw") + ")"

    @property
    def python_minor(self) -> Version:
        return Version(f"{self.python.major}.{self.python.minor}")

    def python_target(self) -> PythonTarget:
        """The CPython this environment runs, with the probe's own marker values (they hold on its platform only)."""
        from .interpreter import typed_markers

        return PythonTarget(self.python_minor, self.python, f"--python {self.executable}",
                            typed_markers((self.raw.get("python") or {}).get("markers")), self.platform.tag)

    def all_of(self, name: str) -> list[Distribution]:
        """Every installed copy of a distribution, in sys.path order."""
        wanted = canonical_name(name)
        return [d for d in self.distributions if d.canonical == wanted]

    def versions(self) -> dict[str, str]:
        """canonical name -> version of the copy an import finds, for every installed distribution."""
        found: dict[str, str] = {}
        for dist in self.distributions:
            found.setdefault(dist.canonical, dist.raw_version)
        return found

    def get(self, *names: str) -> Optional[Distribution]:
        """The copy an import would find (first on sys.path) of the first name that is installed."""
        for name in names:
            found = self.all_of(name)
            if found:
                return found[0]
        return None


def run_probe(python: Optional[str] = None, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
              watch: bool = False) -> dict[str, Any]:
    """The probe's JSON. ``python=None`` probes the running interpreter in this process (no child needed:
    the probe is stdlib-only and imports nothing of the stack). ``watch``: the answer also lists what it depends
    on ("watch", for environment/probe_cache.py)."""
    if python is None:
        from . import env_probe

        return json.loads(json.dumps(env_probe.report()))  # the same plain data a child's answer gives
    executable = _resolve_executable(python)
    limit = probe_timeout(PROBE_TIMEOUT_S) if timeout is None else timeout
    # No -I / -S: the probe must see what `import` sees in that environment (site, .pth files,
    # PYTHONPATH, user site). `-c` with the source keeps this package's directory off sys.path.
    source = ["-c", PROBE_PATH.read_text(encoding="utf-8")] + (["--watch"] if watch else [])
    return run_json_probe(executable, source, "the environment probe", limit, env)


def parse_snapshot(report: Mapping[str, Any]) -> EnvSnapshot:
    python = report["python"]
    platform = report["platform"]
    cpu = report.get("cpu") or {}
    allowed = report.get("allowed_cpus") or {}
    shm = report.get("shm") or {}
    return EnvSnapshot(
        executable=python["executable"],
        python=Version(python["version"]),
        prefix=python["prefix"],
        purelib=python.get("purelib") or "",
        scripts=python.get("scripts") or "",
        paths=tuple(python.get("path") or ()),
        platform=probed_platform(platform["tag"], platform.get("libc"), platform.get("libc_version")),  # glibc included
        libc_version=platform.get("libc_version") or "",
        cpu=CpuInfo(
            model=cpu.get("model") or "",
            flags=frozenset(cpu.get("flags") or ()),
            sockets=cpu.get("sockets"),
            cores=cpu.get("cores"),
            logical=cpu.get("logical"),
            numa_nodes=cpu.get("numa_nodes"),
        ),
        allowed_cpus=_effective_cpus(int(allowed.get("count") or cpu.get("logical") or 1), allowed.get("cgroup_quota")),
        cgroup_quota=allowed.get("cgroup_quota"),
        shm_bytes=shm.get("total_bytes"),
        env=dict(report.get("env") or {}),
        distributions=tuple(
            Distribution(
                name=d["name"],
                canonical=d["canonical"],
                raw_version=d["version"],
                path=d["path"],
                site=d["site"],
                installer=d.get("installer", ""),
                direct_url=d.get("direct_url"),
            )
            for d in report.get("distributions") or ()
        ),
        modules=dict(report.get("modules") or {}),
        which=dict(report.get("which") or {}),
        raw=report,
    )


def _effective_cpus(affinity: int, quota: Optional[float]) -> int:
    """The CPUs a process may really use: its affinity, capped by a cgroup CPU quota (docker --cpus, k8s limits)."""
    import math

    if quota:
        return max(1, min(affinity, math.ceil(quota)))
    return affinity


def take_snapshot(python: Optional[str] = None, cached: bool = False) -> EnvSnapshot:
    """Probe ``python`` (default: the running interpreter) and parse the answer.

    ``cached``: for another interpreter, reuse the answer kept from an earlier probe while the environment's
    fingerprint is unchanged (environment/probe_cache.py; the machine's facts are read afresh), else probe and keep
    it. The static commands (compat check, doctor) ask for it; what installs into an environment does not."""
    # Compare paths without resolving symlinks: every venv's python links to the same base binary.
    if python is not None and os.path.abspath(_resolve_executable(python)) == os.path.abspath(sys.executable):
        python = None
    if python is not None and cached:
        from . import probe_cache

        executable = os.path.abspath(_resolve_executable(python))
        source = PROBE_PATH.read_text(encoding="utf-8")
        kept = probe_cache.kept_report(executable, source)
        if kept is not None:
            try:
                return parse_snapshot(kept)
            except (KeyError, TypeError, ValueError, AttributeError, CompatError):
                pass  # not a probe's answer after all: ask the interpreter
        target = python
        report = probe_cache.probe_and_keep(executable, source, lambda: run_probe(target, watch=True))
    else:
        report = run_probe(python)
    try:
        return parse_snapshot(report)
    except (KeyError, TypeError, ValueError, AttributeError, CompatError) as exc:  # an answer that is JSON but not the probe's
        raise InterpreterError(f"'{python or sys.executable}' answered the environment probe with data compat cannot read ({type(exc).__name__}).",
                               "Pass the path of a CPython 3.6+ interpreter with --python.") from None

