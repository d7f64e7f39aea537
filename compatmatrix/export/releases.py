"""Kubeflow Trainer releases as sourced data (compatmatrix/data/trainer.toml, one entry per release with the commit
its facts were read from) and the API schemas compat ships for them (compatmatrix/data/k8s/*.json), or a release
read from a user's CRD (``--crd FILE``: ``kubectl get crd trainjobs.trainer.kubeflow.org -o yaml``).

The generator (k8s.py), the API-server emulation (apiserver.py) and the pod renderer (pods.py) ask a ``Release`` for
field names, part names and the controller's rules; none of them branches on a version. Side effects: reads the
package's data files (and the --crd file) when asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

DATA = Path(__file__).resolve().parents[1] / "data"
OVERRIDES = ("podSpecOverrides", "podTemplateOverrides", "runtimePatches")
REPOSITORY = "kubeflow/trainer"


class ReleaseError(ValueError):
    """A --trainer-version compat does not know, or a --crd file that is not a TrainJob CRD (the message says which)."""


@dataclass(frozen=True)
class Release:
    """One Trainer release: where its facts come from and what its API and controller do."""

    version: str  # "v2.3"
    tag: str
    commit: str
    date: str
    override: str  # podSpecOverrides | podTemplateOverrides | runtimePatches
    runtime_job: str
    runtime_container: str
    num_proc_per_node: str  # int-or-string | integer
    runtime_num_proc_per_node: bool
    auto_cpu: str  # limit-then-request | request-then-limit
    master_port: int
    sources: tuple[str, ...]
    schema: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)  # the TrainJob's openAPIV3Schema
    runtime: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)  # the torch-distributed runtime
    note: Optional[str] = None  # set for a release judged from a --crd file only

    @property
    def label(self) -> str:
        return f"Trainer {self.version}"

    @property
    def cited(self) -> str:
        return f"{REPOSITORY} {self.tag} @{self.commit[:8]}"


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _json(name: str) -> Any:
    return json.loads((DATA / "k8s" / name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def known() -> tuple[Release, ...]:
    """The releases of data/trainer.toml, oldest first, each with its shipped schema and runtime."""
    entries = _load_toml(DATA / "trainer.toml")["release"]
    out = []
    for entry in entries:
        facts = {k: (tuple(v) if isinstance(v, list) else v) for k, v in entry.items()}
        out.append(Release(**facts, schema=_json(f"trainjob-{entry['tag']}.json"), runtime=_json(f"runtime-{entry['tag']}.json")))
    return tuple(out)


def versions() -> tuple[str, ...]:
    return tuple(r.version for r in known())


def newest() -> Release:
    return known()[-1]


def by_version(version: Optional[str]) -> Release:
    """``v2.2``, ``2.2``, ``v2.2.1`` -> that release; None -> the newest known."""
    if version is None:
        return newest()
    wanted = version.strip().lower().lstrip("v")
    for release in known():
        if wanted in (release.version.lstrip("v"), release.tag.lstrip("v")):
            return release
    raise ReleaseError(f"--trainer-version {version!r} is not a Trainer release compat knows ({', '.join(versions())})")


def pytorchjob_schema() -> Mapping[str, Any]:
    return _json("pytorchjob-v1.json")


def _crd_schema(crd: Any) -> Mapping[str, Any]:
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ReleaseError("--crd is not a CustomResourceDefinition (kubectl get crd trainjobs.trainer.kubeflow.org -o yaml writes one)")
    spec = crd.get("spec") or {}
    if (spec.get("names") or {}).get("kind") != "TrainJob" or spec.get("group") != "trainer.kubeflow.org":
        raise ReleaseError("--crd is not the TrainJob CRD (trainjobs.trainer.kubeflow.org)")
    for version in spec.get("versions") or []:
        if isinstance(version, dict) and version.get("name") == "v1alpha1":
            schema = ((version.get("schema") or {}).get("openAPIV3Schema"))
            if isinstance(schema, dict):
                return schema
    raise ReleaseError("--crd has no v1alpha1 version with an openAPIV3Schema")


def from_crd(crd: Any) -> Release:
    """The release a cluster's TrainJob CRD describes: a known one when its override field says which (and the schema
    of the CRD itself is used), else an unknown newer release judged by its schema alone (with a note)."""
    schema = _crd_schema(crd)
    spec = ((schema.get("properties") or {}).get("spec") or {})
    props = spec.get("properties") or {}
    present = [name for name in OVERRIDES if name in props]
    override = present[-1] if present else ""
    npp = (((props.get("trainer") or {}).get("properties") or {}).get("numProcPerNode") or {})
    npp_type = "int-or-string" if npp.get("x-kubernetes-int-or-string") else "integer"
    candidates = [r for r in known() if r.override == override and r.num_proc_per_node == npp_type]
    labels = ((crd.get("metadata") or {}).get("labels") or {}) if isinstance(crd.get("metadata"), dict) else {}
    said = str(labels.get("app.kubernetes.io/version") or "")
    plain = _without_descriptions(schema)
    exact = [r for r in candidates if (said and said.lstrip("v") in (r.tag.lstrip("v"), r.version.lstrip("v"))) or plain == r.schema]
    base = (exact or candidates or [newest()])[-1]
    if exact:
        return _with_schema(base, schema, None)
    how = (f"its fields match {base.label} (override field {override})" if candidates else
           f"its fields match no release compat knows (override field: {override or 'none'}); compat's rules of {base.label} are used")
    return _with_schema(base, schema, f"the release of this CRD is not one compat knows by name: it is judged by its own schema; {how}")


def _without_descriptions(node: Any) -> Any:
    """A schema as compat ships it (scripts/k8s_schemas.py): every ``description`` left out."""
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def _with_schema(base: Release, schema: Mapping[str, Any], note: Optional[str]) -> Release:
    from dataclasses import replace

    return replace(base, schema=schema, note=note)


def override_document(release: Release, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> tuple[str, Any]:
    """The TrainJob spec field (and its value) that adds ``volumes`` to the runtime's trainer pods and ``mounts`` to
    its trainer container, in the shape of the release's override mechanism."""
    job, container = release.runtime_job, release.runtime_container
    if release.override == "podSpecOverrides":
        return release.override, [{"targetJobs": [{"name": job}], "volumes": volumes, "containers": [{"name": container, "volumeMounts": mounts}]}]
    if release.override == "podTemplateOverrides":
        return release.override, [{"targetJobs": [{"name": job}], "spec": {"volumes": volumes, "containers": [{"name": container, "volumeMounts": mounts}]}}]
    pod = {"volumes": volumes, "containers": [{"name": container, "volumeMounts": mounts}]}
    patch = {"name": job, "template": {"spec": {"template": {"spec": pod}}}}
    return release.override, [{"manager": "compatmatrix/export", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [patch]}}}}]


def override_parts(release_override: str, spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], str]]:
    """Every (target job name, pod spec part, path) an override field of a TrainJob spec aims at; the pod spec part
    holds volumes / containers / initContainers as that mechanism writes them."""
    out: list[tuple[str, Mapping[str, Any], str]] = []
    items = spec.get(release_override)
    if not isinstance(items, list):
        return out
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if release_override == "runtimePatches":
            jobs = ((((item.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs")) or []
            for j, rjob in enumerate(jobs if isinstance(jobs, list) else []):
                if isinstance(rjob, dict):
                    pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
                    out.append((str(rjob.get("name")), pod if isinstance(pod, dict) else {},
                                f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"))
            continue
        pod = item.get("spec") if release_override == "podTemplateOverrides" else item
        for t, target in enumerate(item.get("targetJobs") or []):
            if isinstance(target, dict):
                out.append((str(target.get("name")), pod if isinstance(pod, dict) else {}, f"spec.{release_override}[{i}].targetJobs[{t}]"))
    return out
