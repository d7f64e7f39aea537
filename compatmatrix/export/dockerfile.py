"""What a Dockerfile for a resolved set holds (``compat export dockerfile``): the exact pins, the profile, the Python
the base image must have, the hosts whose mirrors are build arguments, an optional ``compat download`` wheelhouse.
render/dockerfile.py writes the text.

Pure: no I/O. The lessons of the first real build (tests/export/test_docker_real.py) are in the text: the training venv is
put first on PATH before ``compat env`` runs, compat env writes additions to PATH-like variables, never a frozen copy,
and its thread settings are defaults (``--defaults``) that a container's own environment (``docker run -e``, a pod's
env) overrides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ..redact import strip_credentials

DEFAULT_BASE = "python:3.11-slim"


@dataclass(frozen=True)
class DockerfileShape:
    pins: tuple[str, ...]  # exact pins of the resolved set ("torch==2.7.0+cpu", ...), as compat install takes them
    profile: Optional[str]  # None: no --profile (the pins name every package of the set)
    python: str  # the resolved set's Python (X.Y): the base image must have it
    base: str = DEFAULT_BASE
    ranks_per_node: int = 1
    wheelhouse: Optional[str] = None  # a compat download folder in the build context: install with no network
    compat_dist: str = "compat-dist"  # the build context's folder with compatmatrix's wheel (never a bare name on an index)
    hosts: tuple[str, ...] = ()  # the index hosts the plan uses (COMPAT_INDEX_<HOST> build arguments for mirrors)
    ccl: bool = True  # the set has the oneCCL bindings


def base_for(python: str) -> str:
    """The official slim image of that Python (python:3.10-slim for a set resolved for 3.10)."""
    return f"python:{python}-slim"


def dockerfile_shape(plan, profile: Optional[str], base: Optional[str], ranks_per_node: int, wheelhouse: Optional[str]) -> DockerfileShape:
    """The shape of an install plan (install/plan.py): its pins as ``compat install`` takes them (``PlannedPackage.pin``,
    the host's local label included), the dependency index first among the hosts, then each package's host."""
    from ..matrix.model import Component

    python = plan.resolution.request.python.label
    hosts = tuple(dict.fromkeys([plan.dependency_index.host_id] + [p.location.host_id for p in plan.packages]))
    ccl = any(p.component is Component.CCL for p in plan.packages)
    return DockerfileShape(tuple(p.pin for p in plan.packages), profile, python, base or base_for(python), ranks_per_node, wheelhouse,
                           hosts=hosts, ccl=ccl)


def notes_for(plan, wheelhouse_found: Optional[bool]) -> Sequence[str]:
    """What the Dockerfile's reader should know that its lines do not say."""
    said = []
    if plan.passthrough:
        said.append("not in this image: the -r files' requirements compat does not resolve (" + ", ".join([strip_credentials(line) for line in plan.exported_passthrough] + list(plan.left_out_for_variables)) + "); "
                    "add RUN /opt/train/bin/pip install ... after the compat install step")
    if wheelhouse_found is False:
        said.append("the wheelhouse is not a folder here yet: make it in the build context with compat download -d DIR (same pins, "
                    "--python-version and --platform of the image) before docker build")
    return said
