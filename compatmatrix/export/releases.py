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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

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
    note: Optional[str] = None  # set for a release judged from a --crd file only, or known from its release notes only
    rules_from_file: bool = False  # the schema's CEL rules and patterns are a --crd file's, none compat ships: run bounded
    source: Optional[str] = None  # a release known from its notes only (data/trainer.toml [[announced]]): their URL
    name_max: Optional[int] = None  # the ReplicatedJob names a TrainJob targets have at most this many characters (the notes')
    schema_from: Optional[str] = None  # whose CRD the schema is, when not this release's own (a release known from its notes)

    @property
    def label(self) -> str:
        return f"Trainer {self.version}"

    @property
    def cited(self) -> str:
        if self.source:
            return f"{REPOSITORY} {self.tag} release notes, {self.source}"
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


@lru_cache(maxsize=None)
def announced() -> tuple[Mapping[str, Any], ...]:
    """The releases data/trainer.toml knows from their release notes only (no CRD of theirs is at hand), oldest first."""
    return tuple(_load_toml(DATA / "trainer.toml").get("announced", ()))


def _announced(version: Optional[str]) -> Optional[Mapping[str, Any]]:
    wanted = (version or "").strip().lower().lstrip("v")
    return next((entry for entry in announced() if wanted in (entry["version"].lstrip("v"), entry["tag"].lstrip("v"))), None)


def notes_only(version: Optional[str]) -> bool:
    """Whether --trainer-version names a release compat knows from its release notes only (--crd may go with it)."""
    return _announced(version) is not None


def from_notes(version: str, crd: Optional[Release] = None) -> Release:
    """A release known from its notes: the TrainJob API of the entry's ``api_of`` (or of ``crd``, the cluster's CRD),
    with the notes' rules (name_max) and a note that says in one line what is validated and what is not."""
    entry = _announced(version)
    if entry is None:
        raise ReleaseError(f"--trainer-version {version!r} is not a Trainer release compat knows ({', '.join(versions())})")
    limit = entry.get("replicated_job_name_max")
    rule = f"the ReplicatedJob names a TrainJob targets have at most {limit} characters" if limit else "none"
    if crd is None:
        base = by_version(entry["api_of"])
        schema_from = f"the TrainJob CRD of {base.label} ({base.cited}; {entry['version']}'s CRD is not at hand)"
        note = (f"{entry['version']} is known from its {entry['evidence']} only, without its CRD: the TrainJob's schema and CEL rules of {entry['version']} "
                f"are not validated (those of {base.version} are used; --crd FILE takes your cluster's); checked from the notes: {rule}")
    else:
        base = crd
        schema_from = f"the TrainJob CRD of --crd (for {entry['version']})"
        note = (f"the schema and CEL rules are --crd's; checked from {entry['version']}'s {entry['evidence']}: {rule}"
                + (f"; {crd.note}" if crd.note else ""))
    return replace(base, version=entry["version"], tag=entry["tag"], commit="", date="", source=entry["source"], name_max=limit, note=note,
                   schema_from=schema_from)


def name_problems(release: Release, spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, name) of every ReplicatedJob name a TrainJob spec targets (runtimePatches' replicatedJobs, targetJobs of
    any override field) that is longer than the release's notes allow (nothing when they state no limit)."""
    if not release.name_max or not isinstance(spec, Mapping):
        return []
    return [(f"{path}.name", name) for field in OVERRIDES for name, _, path in override_parts(field, spec) if len(name) > release.name_max]


def versions() -> tuple[str, ...]:
    return (*(r.version for r in known()), *(entry["version"] for entry in announced()))


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
    if notes_only(version):
        return from_notes(version)
    raise ReleaseError(f"--trainer-version {version!r} is not a Trainer release compat knows ({', '.join(versions())})")


def pytorchjob_schema() -> Mapping[str, Any]:
    return _json("pytorchjob-v1.json")


def _crd_schema(crd: Any) -> Mapping[str, Any]:
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ReleaseError("--crd is not a CustomResourceDefinition (kubectl get crd trainjobs.trainer.kubeflow.org -o yaml writes one)")
    spec = crd.get("spec") if isinstance(crd.get("spec"), dict) else {}
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    if names.get("kind") != "TrainJob" or spec.get("group") != "trainer.kubeflow.org":
        raise ReleaseError("--crd is not the TrainJob CRD (trainjobs.trainer.kubeflow.org)")
    versions = spec.get("versions") if isinstance(spec.get("versions"), list) else []
    for version in versions:
        if isinstance(version, dict) and version.get("name") == "v1alpha1":
            schema = ((version.get("schema") if isinstance(version.get("schema"), dict) else {}).get("openAPIV3Schema"))
            if isinstance(schema, dict):
                problem = structural_problem(schema)
                if problem:
                    raise ReleaseError(f"--crd's v1alpha1 openAPIV3Schema is not one the API server takes: {problem}")
                return schema
    raise ReleaseError("--crd has no v1alpha1 version with an openAPIV3Schema")


SCHEMA_MAX_NODES = 100_000  # the TrainJob CRDs of the releases compat knows have under 20,000
SCHEMA_MAX_DEPTH = 64
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_NUMBERS = ("minimum", "maximum")
_COUNTS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")
_FLAGS = ("exclusiveMinimum", "exclusiveMaximum", "nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
          "x-kubernetes-embedded-resource")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_rule(rule: Any) -> bool:
    return (isinstance(rule, dict) and isinstance(rule.get("rule"), str) and isinstance(rule.get("message", ""), str)
            and isinstance(rule.get("messageExpression", ""), str))


# (keywords, the test of a value of each, what is wrong with one that fails it), in the order they are judged
_KEYWORDS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (_NUMBERS, _is_number, "is not a number"),
    (_COUNTS, _is_count, "is not a whole number of at least 0"),
    (_FLAGS, lambda value: isinstance(value, bool), "is not true or false"),
    (("pattern", "format"), lambda value: isinstance(value, str), "is not a string"),
    (("enum",), lambda value: isinstance(value, list), "is not a list"),
    (("required",), _is_names, "is not a list of field names"),
    (("x-kubernetes-list-type",), lambda value: isinstance(value, str), "is not a string"),
    (("x-kubernetes-list-map-keys",), _is_names, "is not a list of field names"),
    (("x-kubernetes-validations",), lambda value: isinstance(value, list), "is not a list"),
)
_SUBSCHEMAS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (("properties",), lambda value: isinstance(value, dict), "is not an object"),
    (("anyOf", "allOf", "oneOf"), lambda value: isinstance(value, list), "is not a list"),
)


def _first_bad(node: dict, path: str, table: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...]) -> str:
    for keys, test, said in table:
        bad = next((key for key in keys if key in node and not test(node[key])), None)
        if bad is not None:
            return f"{path}.{bad} {said}"
    return ""


def _keyword_problem(node: dict, path: str) -> str:
    """The first keyword of one schema node whose value the emulation cannot read ('' when none)."""
    kind = node.get("type")
    if kind is not None and (not isinstance(kind, str) or kind not in _TYPES):
        return f"{path}.type is not one of {', '.join(sorted(_TYPES))}"
    problem = _first_bad(node, path, _KEYWORDS)
    if problem:
        return problem
    bad_rule = next((i for i, rule in enumerate(node.get("x-kubernetes-validations", [])) if not _is_rule(rule)), None)
    if bad_rule is not None:
        return f"{path}.x-kubernetes-validations[{bad_rule}] is not a rule (an object with a string rule and message)"
    return _first_bad(node, path, _SUBSCHEMAS)


def _subschemas(node: dict, path: str) -> list[tuple[Any, str]]:
    """The schema nodes below one node, with their paths (properties, additionalProperties, items, anyOf / allOf /
    oneOf, not)."""
    below = [(child, f"{path}.properties.{name}") for name, child in node.get("properties", {}).items()]
    extra = node.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        below.append((extra, f"{path}.additionalProperties"))
    if "items" in node:
        below.append((node["items"], f"{path}.items"))
    below += [(child, f"{path}.{key}[{i}]") for key in ("anyOf", "allOf", "oneOf") if key in node for i, child in enumerate(node[key])]
    if "not" in node:
        below.append((node["not"], f"{path}.not"))
    return below


def structural_problem(schema: Any) -> str:
    """Why ``schema`` is not a structural schema of the shape compat's emulation reads (the API server refuses such a
    CRD before any object meets it), as words; '' when it is. Every keyword the emulation reads is type-checked, the
    walk bounded (SCHEMA_MAX_NODES nodes, SCHEMA_MAX_DEPTH levels), so a hostile --crd is one sentence, never a crash."""
    stack: list[tuple[Any, str, int]] = [(schema, "<root>", 0)]
    seen = 0
    while stack:
        node, path, depth = stack.pop()
        seen += 1
        if seen > SCHEMA_MAX_NODES:
            return f"it has more than {SCHEMA_MAX_NODES:,} schema nodes"
        if depth > SCHEMA_MAX_DEPTH:
            return f"{path} is nested more than {SCHEMA_MAX_DEPTH} levels deep"
        if not isinstance(node, dict):
            return f"{path} is not a schema (an object)"
        problem = _keyword_problem(node, path)
        if problem:
            return problem
        stack += [(child, where, depth + 1) for child, where in _subschemas(node, path)]
    return ""


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
        return _with_schema(base, schema, None, not any(plain == r.schema for r in known()))
    how = (f"its fields match {base.label} (override field {override})" if candidates else
           f"its fields match no release compat knows (override field: {override or 'none'}); compat's rules of {base.label} are used")
    return _with_schema(base, schema, f"the release of this CRD is not one compat knows by name: it is judged by its own schema; {how}", True)


def _without_descriptions(node: Any) -> Any:
    """A schema as compat ships it (scripts/k8s_schemas.py): every ``description`` left out."""
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def _with_schema(base: Release, schema: Mapping[str, Any], note: Optional[str], rules_from_file: bool) -> Release:
    return replace(base, schema=schema, note=note, rules_from_file=rules_from_file)


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
