"""The pods a cluster runs for a PyTorchJob or a TrainJob (as the API server stored it: apiserver.admit), and compat's
rules judged on those pods rather than on the manifest.

TrainJob: the release's torch-distributed runtime (releases.Release.runtime) merged the way that release's controller
does (kubeflow/trainer pkg/runtime/core/trainingruntime.go, plugins/jobset, plugins/torch at the commit of
data/trainer.toml): the override field aimed at the runtime's jobs and containers (a job or container the runtime lacks
is refused by the webhook), merged by name; the trainer's image, command, args, env and resourcesPerNode on the
``node`` container; PET_NNODES, PET_NPROC_PER_NODE (numProcPerNode, auto on a node without GPUs by the release's
rule), PET_NODE_RANK (the Job's completion index), PET_MASTER_ADDR/PORT; one pod per node.
PyTorchJob: the operator's env (kubeflow/training-operator 374e88af pkg/controller.v1/pytorch/envvar.go, master.go):
PYTHONUNBUFFERED, MASTER_ADDR/PORT and PET_MASTER_ADDR/PORT (with a Master), WORLD_SIZE, RANK, PET_NODE_RANK,
PET_NPROC_PER_NODE (nprocPerNode, defaulted to auto), PET_NNODES.

Pure: plain data in, plain data and findings out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ..findings import Finding, Status
from .apiserver import document_copy
from .k8s import CONTAINER, PORT, PORT_NAME, ShapeError, cpu_count
from .releases import Release, override_parts

_CCL_BACKEND = re.compile(r"--ddp_backend(=|\s+)[\"']?ccl\b|backend\s*=\s*[\"']ccl[\"']")
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# list fields of a pod spec merged by a key (strategic merge patch: k8s.io/api/core/v1 patchMergeKey)
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "volumeMounts": "mountPath", "env": "name",
               "imagePullSecrets": "name", "schedulingGates": "name", "ports": "containerPort"}


@dataclass
class Pods:
    """The pods of one job (one entry per distinct pod: ``count`` of them run), and what the controller refuses."""

    pods: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (role, count, Pod)
    container: str = CONTAINER  # the training container's name
    findings: list[Finding] = field(default_factory=list)  # the webhook's refusals, the merge's notes


def _merged_list(base: list, patch: list, key: str) -> list:
    """``base`` with each item of ``patch`` merged into the first item of the same ``key`` (or appended): linear, an
    index by key (a key value that cannot be hashed, which no schema-typed list holds, is looked up by a scan)."""
    out = [document_copy(item) for item in base]
    index: dict[Any, int] = {}
    for i, item in enumerate(out):
        if isinstance(item, dict):
            _index(index, item.get(key), i)
    for item in patch:
        if not isinstance(item, dict):
            continue
        value = item.get(key)
        try:
            match = index.get(value)
        except TypeError:
            match = next((i for i, b in enumerate(out) if isinstance(b, dict) and b.get(key) == value), None)
        if match is None:
            out.append(document_copy(item))
            _index(index, value, len(out) - 1)
        else:
            out[match] = merge(out[match], item)
    return out


def _index(index: dict[Any, int], value: Any, position: int) -> None:
    try:
        index.setdefault(value, position)
    except TypeError:  # a list or a mapping as the key's value: found by the scan above
        pass


def merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of a pod spec (or part of one): maps merged, keyed lists merged by key, the rest replaced."""
    out = document_copy(dict(base))
    for key, value in patch.items():
        if isinstance(value, list) and key in _MERGE_KEYS and isinstance(out.get(key), list):
            out[key] = _merged_list(out[key], value, _MERGE_KEYS[key])
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = document_copy(value)
    return out


def _upsert_env(env: list, items: list) -> list:
    return _merged_list(env or [], [i for i in items if isinstance(i, dict)], "name")


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def _domain_prefixed_path(value: str) -> bool:
    """k8s.io/apimachinery validation.IsDomainPrefixedPath: a DNS-1123 subdomain, '/', then a path of URL characters."""
    domain, slash, path = value.partition("/")
    return bool(slash) and len(domain) <= 253 and bool(_SUBDOMAIN.match(domain)) and bool(_PATH.match(path))


def _cpus(quantity: Any) -> Optional[float]:
    try:
        return cpu_count(str(quantity)) if quantity is not None else None
    except ShapeError:
        return None


def trainjob_ranks(release: Release, trainer: Mapping[str, Any], runtime_policy: Mapping[str, Any]) -> tuple[str, str]:
    """PET_NPROC_PER_NODE as the release's torch plugin sets it, and how it came about."""
    asked = trainer.get("numProcPerNode")
    if asked is None and release.runtime_num_proc_per_node:
        asked = runtime_policy.get("numProcPerNode")
    asked = "auto" if asked is None else asked
    if isinstance(asked, int):
        return str(asked), "numProcPerNode"
    resources = trainer.get("resourcesPerNode")
    if not isinstance(resources, dict):
        if release.auto_cpu == "limit-then-request":
            return str(asked), f"numProcPerNode {asked} without resourcesPerNode: torchrun starts one rank per CPU of the node"
        return "1", f"numProcPerNode {asked} without resourcesPerNode: 1"
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    gpu = any("gpu" in str(name).lower() for name in {**limits, **requests})
    if asked == "auto" and gpu:
        return "auto", "numProcPerNode auto with GPUs: one rank per GPU"
    if asked not in ("auto", "cpu"):
        return str(asked), "numProcPerNode"
    order = (("limit", limits), ("request", requests)) if release.auto_cpu == "limit-then-request" else (("request", requests), ("limit", limits))
    for said, amounts in order:
        cpus = _cpus(amounts.get("cpu"))
        if cpus:
            return str(max(1, math.ceil(cpus))), f"numProcPerNode {asked} on a node without GPUs: the CPU {said} ({amounts.get('cpu')}), one rank per CPU"
    return "1", f"numProcPerNode {asked} without a CPU amount: 1"


_OVERRIDE_FIELDS = ("volumes", "containers", "initContainers", "nodeSelector", "tolerations", "serviceAccountName", "affinity", "imagePullSecrets",
                    "schedulingGates", "securityContext", "terminationGracePeriodSeconds")


def trainjob_pods(document: Mapping[str, Any], release: Release) -> Pods:
    out = Pods(container=release.runtime_container)
    spec = document.get("spec") or {}
    name = str((document.get("metadata") or {}).get("name") or "trainjob")
    runtime_name = str((spec.get("runtimeRef") or {}).get("name") or "")
    runtime = release.runtime
    if runtime_name != (runtime.get("metadata") or {}).get("name"):
        out.findings.append(Finding("export.pod-runtime", Status.SKIP, f"runtimeRef {runtime_name!r} is not a runtime compat ships ({(runtime.get('metadata') or {}).get('name')} of "
                                    f"{release.label}): its pods are not rendered", (), "Validate against torch-distributed, or check the runtime's own pod template."))
        return out
    jobs = {j.get("name"): j for j in ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs", [])}
    templates = {job_name: document_copy(((job.get("template") or {}).get("spec") or {}).get("template") or {}) for job_name, job in jobs.items()}
    if release.override == "runtimePatches":
        out.findings += _manager_findings(spec)
    for target, part, path in override_parts(release.override, spec):
        if target not in templates:
            out.findings.append(Finding("export.pod-override", Status.FAIL, f"{path}: the runtime {runtime_name} has no replicated job {target!r} (its jobs: "
                                        f"{', '.join(sorted(map(str, templates)))}): the Trainer's webhook refuses the TrainJob", (),
                                        f"Aim the override at {release.runtime_job!r} (compat export pytorchjob --trainer-v2 --trainer-version {release.version} does)."))
            continue
        out.findings += _override_container_findings(release, templates[target], target, part, path, runtime_name)
        patch = {k: v for k, v in part.items() if k in _OVERRIDE_FIELDS}
        templates[target]["spec"] = merge(templates[target].get("spec") or {}, patch)
    trainer = spec.get("trainer") or {}
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    ranks, why = trainjob_ranks(release, trainer, policy.get("torch") or {})
    nodes = trainer.get("numNodes") if isinstance(trainer.get("numNodes"), int) else policy.get("numNodes", 1)
    template = templates.get(release.runtime_job) or {}
    pod_spec = template.get("spec") or {}
    for container in pod_spec.get("containers") or []:
        if container.get("name") == release.runtime_container:
            _trainer_container(container, trainer, release, name, nodes, ranks)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-{release.runtime_job}-0-N", "labels": {**((template.get("metadata") or {}).get("labels") or {}),
                                                                                "jobset.sigs.k8s.io/jobset-name": name}},
           "spec": pod_spec}
    out.pods.append((f"{release.runtime_job} (N = 0..{max(0, int(nodes) - 1)}, PET_NODE_RANK = N)", int(nodes), pod))
    out.findings.append(Finding("export.pod-ranks-source", Status.PASS, f"{release.label}: PET_NPROC_PER_NODE={ranks} ({why})"))
    return out


def _manager_findings(spec: Mapping[str, Any]) -> list[Finding]:
    """The jobset plugin's webhook: validation.IsDomainPrefixedPath(manager) of every runtime patch."""
    found = []
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        manager = str(patch.get("manager", "")) if isinstance(patch, dict) else ""
        if manager and not _domain_prefixed_path(manager):
            found.append(Finding("export.pod-override", Status.FAIL, f"spec.runtimePatches[{i}].manager {manager!r} is not a domain-prefixed path "
                                 "(DOMAIN/PATH): the Trainer's webhook refuses the TrainJob", (), "Name the manager like example.com/team."))
    return found


def _override_container_findings(release: Release, template: Mapping[str, Any], target: str, part: Mapping[str, Any], path: str,
                                 runtime_name: str) -> list[Finding]:
    """An override's containers: each must be one of the replicated job's, and none may set the trainer container's env."""
    pod_spec = template.get("spec") or {}
    have = {c.get("name") for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", [])}
    found = []
    for c in [c for kind in ("containers", "initContainers") for c in part.get(kind) or [] if isinstance(c, dict)]:
        if c.get("name") not in have:
            found.append(Finding("export.pod-override", Status.FAIL, f"{path}: the job {target!r} of {runtime_name} has no container {c.get('name')!r} "
                                 f"(its containers: {', '.join(sorted(map(str, have)))}): the Trainer's webhook refuses the TrainJob", (),
                                 f"Name the container {release.runtime_container!r}."))
        elif c.get("env") and c.get("name") == release.runtime_container:
            found.append(Finding("export.pod-override", Status.FAIL, f"{path}: env for the {release.runtime_container!r} container in an override: the Trainer's "
                                 "webhook refuses it", (), "Put the variables in spec.trainer.env."))
    return found


def _trainer_container(container: dict, trainer: Mapping[str, Any], release: Release, name: str, nodes: Any, ranks: str) -> None:
    """The runtime's trainer container as the Trainer makes it: spec.trainer's image, command, args, resources and env,
    then the torch plugin's PET_* variables and the master port."""
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            container[key] = document_copy(trainer[key])
    if isinstance(trainer.get("resourcesPerNode"), dict):
        container["resources"] = document_copy(trainer["resourcesPerNode"])
    container["env"] = _upsert_env(container.get("env") or [], trainer.get("env") or [])
    container["env"] = _upsert_env(container["env"], [
        {"name": "PET_NNODES", "value": str(nodes)}, {"name": "PET_NPROC_PER_NODE", "value": ranks},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{release.runtime_job}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(release.master_port)}])
    container["ports"] = _merged_list(container.get("ports") or [], [{"containerPort": release.master_port}], "containerPort")


def pytorchjob_pods(document: Mapping[str, Any]) -> Pods:
    out = Pods()
    spec = document.get("spec") or {}
    name = str((document.get("metadata") or {}).get("name") or "pytorchjob")
    replicas = {k: v for k, v in (spec.get("pytorchReplicaSpecs") or {}).items() if isinstance(v, dict)}
    elastic = spec.get("elasticPolicy")
    nproc = spec.get("nprocPerNode")
    if nproc is None and (not elastic or (isinstance(elastic, dict) and elastic.get("nProcPerNode") is None)):
        nproc = "auto"  # the operator's defaulting (pytorch_defaults.go setDefaultNprocPerNode)
    total = sum(int(r.get("replicas", 1)) for r in replicas.values() if isinstance(r.get("replicas", 1), int))
    master = replicas.get("Master")
    world = _OperatorEnv(name, _master_port(master), total, nproc, elastic, master is not None)
    for rtype in sorted(replicas, key=lambda r: (r != "Master", r)):
        replica = replicas[rtype]
        count = int(replica.get("replicas", 1)) if isinstance(replica.get("replicas", 1), int) else 1
        if count < 1:
            continue  # one pod of each replica type: the others differ in their rank only
        template = document_copy(replica.get("template") or {})
        pod_spec = template.get("spec") or {}
        for container in pod_spec.get("containers") or []:
            container["env"] = (container.get("env") or []) + world.env(rtype)
        if replica.get("restartPolicy") and "restartPolicy" not in pod_spec:
            pod_spec["restartPolicy"] = "Never" if replica["restartPolicy"] == "ExitCode" else replica["restartPolicy"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{rtype.lower()}-{'0' if rtype == 'Master' else 'N'}",
                                                                "labels": {"training.kubeflow.org/job-name": name,
                                                                           "training.kubeflow.org/replica-type": rtype.lower()}},
               "spec": pod_spec}
        role = rtype if rtype == "Master" else f"{rtype} (N = 0..{count - 1}" + (", PET_NODE_RANK = N + 1)" if master is not None else ")")
        out.pods.append((role, count, pod))
    return out


def _master_port(master: Optional[Mapping[str, Any]]) -> Any:
    """The Master's pytorchjob-port of its pytorch container (the operator's default 23456 without one)."""
    port = PORT
    for c in ((master or {}).get("template") or {}).get("spec", {}).get("containers", []) if master else []:
        if c.get("name") == CONTAINER:
            port = next((p.get("containerPort") for p in c.get("ports") or [] if p.get("name") == PORT_NAME), PORT)
    return port


@dataclass(frozen=True)
class _OperatorEnv:
    """What the v1 operator adds to every container of a PyTorchJob's pods (pytorch.go setPodEnv, elastic.go)."""

    name: str
    port: Any
    total: int
    nproc: Any
    elastic: Any
    has_master: bool

    def env(self, rtype: str) -> list[dict[str, Any]]:
        nproc_int = int(self.nproc) if isinstance(self.nproc, str) and self.nproc.isdigit() else 1
        rank = "0" if rtype == "Master" else "N"  # the first pod of each type: index 0 (+1 for a Worker, shown as N)
        env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        if self.has_master:
            addr = f"{self.name}-master-0"
            env += [{"name": "MASTER_PORT", "value": str(self.port)}, {"name": "PET_MASTER_PORT", "value": str(self.port)},
                    {"name": "MASTER_ADDR", "value": addr}, {"name": "PET_MASTER_ADDR", "value": addr},
                    {"name": "WORLD_SIZE", "value": str(self.total * nproc_int)}, {"name": "RANK", "value": rank},
                    {"name": "PET_NODE_RANK", "value": rank}]
        if self.nproc is not None:
            env.append({"name": "PET_NPROC_PER_NODE", "value": str(self.nproc)})
        if not self.elastic:
            env.append({"name": "PET_NNODES", "value": str(self.total)})
        else:
            low, high = (self.elastic or {}).get("minReplicas", self.total), (self.elastic or {}).get("maxReplicas", self.total)
            env.append({"name": "PET_NNODES", "value": f"{low}:{high}"})
        return env


# --- compat's rules on the rendered pods --------------------------------------------------------------------------------


def _env_value(container: Mapping[str, Any], key: str) -> Optional[str]:
    for item in container.get("env") or []:
        if isinstance(item, dict) and item.get("name") == key:
            return str(item["value"]) if item.get("value") is not None else None
    return None


def judge(pods: Pods, shm_and_qos: bool = True, ccl: Optional[bool] = None) -> Iterator[Finding]:
    """compat's rules on each rendered pod: /dev/shm from a Memory emptyDir mounted in the training container, Guaranteed
    QoS, ranks per pod x threads per rank within the CPU limit, the live preflight before training, and (``ccl`` known)
    the ccl backend only where the image's set has the oneCCL bindings."""
    for role, _, pod in pods.pods:
        short = role.split(" ")[0].lower()
        spec = pod.get("spec") or {}
        main = next((c for c in spec.get("containers") or [] if c.get("name") == pods.container), None)
        if main is None:
            yield Finding(f"export.pod-{short}-container", Status.FAIL, f"{role}: no container {pods.container!r} in the pod", (), f"Name the training container {pods.container}.")
            continue
        if shm_and_qos:
            memory = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict) and (v.get("emptyDir") or {}).get("medium") == "Memory"}
            mounted = [m for m in main.get("volumeMounts") or [] if isinstance(m, dict) and m.get("mountPath") == "/dev/shm"]
            if any(m.get("name") in memory for m in mounted):
                yield Finding(f"export.pod-{short}-shm", Status.PASS, f"{role}: /dev/shm is a Memory emptyDir, mounted")
            else:
                said = ("a Memory emptyDir exists but is not mounted at /dev/shm" if memory else "no Memory emptyDir is mounted at /dev/shm")
                yield Finding(f"export.pod-{short}-shm", Status.FAIL, f"{role}: {said} in the pod the cluster runs: the container keeps the runtime's 64 MB /dev/shm",
                              (), "Mount an emptyDir with medium: Memory at /dev/shm in the training container, through the release's override "
                              "(compat export pytorchjob --trainer-v2 --trainer-version V writes it).")
            resources = main.get("resources") or {}
            limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
            requests = {**limits, **requests}  # a missing request defaults to the limit
            differ = [k for k in ("cpu", "memory") if k not in limits or str(requests.get(k)) != str(limits.get(k))]
            if differ:
                yield Finding(f"export.pod-{short}-qos", Status.WARN, f"{role}: not Guaranteed QoS (" + ", ".join(f"{k}: requests {requests.get(k)} / limits {limits.get(k)}" for k in differ)
                              + "): the CPU manager cannot pin the ranks", (), "Set requests equal to limits for cpu and memory.")
            else:
                yield Finding(f"export.pod-{short}-qos", Status.PASS, f"{role}: Guaranteed QoS (requests = limits)")
        yield from _ranks(role, short, main)
        script = " ".join(str(a) for a in (main.get("command") or []) + (main.get("args") or []))
        if ccl is False and _CCL_BACKEND.search(script):
            yield Finding(f"export.pod-{short}-ccl", Status.FAIL, f"{role}: the training command asks for the ccl backend, and the image's set has no oneCCL "
                          "bindings (oneccl-bind-pt): init_process_group fails", (), "Use --ddp_backend gloo, or a set with the bindings (compat resolve --profile ddp-ccl).")
        if "doctor --live" in script:
            yield Finding(f"export.pod-{short}-preflight", Status.PASS, f"{role}: compat doctor --live runs before training")
        else:
            yield Finding(f"export.pod-{short}-preflight", Status.WARN, f"{role}: no live preflight: a broken image or network fails only inside the training", (),
                          "Run compat doctor --live before torchrun (compat export pytorchjob writes it).")


def _ranks(role: str, short: str, main: Mapping[str, Any]) -> Iterator[Finding]:
    ranks = _env_value(main, "PET_NPROC_PER_NODE")
    limit = _cpus(((main.get("resources") or {}).get("limits") or {}).get("cpu"))
    if ranks is None or not ranks.isdigit():
        yield Finding(f"export.pod-{short}-ranks", Status.FAIL, f"{role}: PET_NPROC_PER_NODE is {ranks or 'unset'}: torchrun starts one rank per CPU of the node "
                      "(os.cpu_count(), not the pod's limit)", (), "Set the ranks per node explicitly (nprocPerNode / trainer.numProcPerNode).")
        return
    threads_text = _env_value(main, "OMP_NUM_THREADS")
    threads = int(threads_text) if threads_text and threads_text.isdigit() else 1  # torchrun sets 1 for more than one rank
    if limit is None:
        yield Finding(f"export.pod-{short}-ranks", Status.WARN, f"{role}: {ranks} ranks x {threads} threads with no CPU limit: nothing bounds them", (),
                      "Set a CPU limit equal to the request.")
    elif int(ranks) * threads > limit:
        yield Finding(f"export.pod-{short}-ranks", Status.FAIL, f"{role}: {ranks} ranks x {threads} threads = {int(ranks) * threads} > the CPU limit {limit:g}: "
                      "the ranks are throttled (and the collectives stall)", (),
                      "Lower the ranks per node or OMP_NUM_THREADS (compat export pytorchjob computes both for --cpu).")
    else:
        yield Finding(f"export.pod-{short}-ranks", Status.PASS, f"{role}: {ranks} ranks x {threads} threads within the CPU limit {limit:g}")
