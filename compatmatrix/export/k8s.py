"""Kubernetes manifests for a resolved training set: a Kubeflow PyTorchJob (kubeflow.org/v1) or a Kubeflow Trainer
TrainJob (trainer.kubeflow.org/v1alpha1) of a given Trainer release (export/releases.py), as plain data (dicts);
rendering to YAML is render/manifest.py's job.

Pure: no I/O. What the objects carry, and why (kubeflow/training-operator at 374e88af, the v1 operator's last release
line; a TrainJob follows the facts of its release in data/trainer.toml):
- N nodes = a ``Master`` (replicas exactly 1, which the operator's webhook requires) + ``Worker`` (N-1). Only with a
  Master does the operator give every pod PET_MASTER_ADDR/PET_MASTER_PORT/PET_NODE_RANK, so ``torchrun`` needs no flags;
  ``nprocPerNode`` is set explicitly (the default ``auto`` starts one rank per CPU on a CPU pod).
- ``restartPolicy: Never`` on every replica: a failed rendezvous fails the job instead of restarting for ever
  (OnFailure without a backoffLimit never stops); the container is named ``pytorch`` with the port
  ``pytorchjob-port`` (23456, the operator's default master port).
- ``/dev/shm`` is an ``emptyDir`` with ``medium: Memory`` and a ``sizeLimit``, and it is mounted (Intel's own chart
  defines the volume and never mounts it); requests equal limits (Guaranteed QoS: the static CPU manager can pin).
- The thread settings of ``compat launch``'s plan for the pod's CPUs; LD_PRELOAD is left to the image (its
  compat-env.sh names only libraries the image has).
- Before training, every pod runs ``compat doctor --live`` with the operator's rendezvous settings (its JSON goes to
  the pod's log), so a broken image or network fails in seconds; then ``exec torchrun`` with the training command.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..values import dns1035_ok, dns1123_ok, image_reference_ok, quantity_ok, quoted
from .command import launch_words
from .contract import ShapeError, cpu_count, plan_threads

if TYPE_CHECKING:
    from ..jobspec import JobSpec, WatchSpec
    from .releases import Release

__all__ = ["ShapeError", "cpu_count"]  # here since the first exports; export/contract.py holds them

PYTORCHJOB_API = "kubeflow.org/v1"
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
CONTAINER = "pytorch"  # the operator finds the master port and the exit code only in a container of this name
PORT_NAME = "pytorchjob-port"
PORT = 23456  # the operator's default master port
TRAINER_PORT = 29500  # the Trainer's torch plugin sets PET_MASTER_PORT to this
TRAINJOB_RUNTIME = "torch-distributed"  # the Trainer's default torch ClusterTrainingRuntime
COMPAT = "/opt/compat/bin/compat"  # where examples/Dockerfile and compat export dockerfile put compat
PYTHON = "/opt/train/bin/python"


@dataclass(frozen=True)
class JobShape:
    """What the user asked for; ``command`` is the training command each rank runs (after torchrun)."""

    name: str
    image: str
    nnodes: int
    nproc_per_node: int
    cpu: str  # CPUs per pod (a Kubernetes quantity: "8", "7500m")
    memory: str  # per pod ("16Gi")
    command: tuple[str, ...]
    namespace: Optional[str] = None
    shm_size: str = "2Gi"
    threads_per_core: int = 1  # 2: the pod's CPU units are hyperthreads of SMT nodes
    ccl_workers: Optional[int] = None  # per rank; None: compat launch's default
    preflight: bool = True  # compat doctor --live in every pod before training
    compat: str = COMPAT
    python: str = PYTHON
    extra_env: tuple[tuple[str, str], ...] = ()
    ccl: bool = False  # the set has the oneCCL bindings (CCL_WORKER_COUNT, worker cores set aside)
    watch: Optional[WatchSpec] = None  # --watch: the pods run compat launch --watch --launcher torchrun (jobspec.WatchSpec)


@dataclass(frozen=True)
class Manifest:
    """The object and what the user should know about it (rendered as comments above the YAML)."""

    document: dict[str, Any]
    notes: tuple[str, ...] = field(default=())


def check_shape(shape: JobShape) -> None:
    """Every value of the shape as Kubernetes takes it (whole-string matches: a trailing newline is not a name), or
    ShapeError naming the option."""
    if not dns1035_ok(shape.name):
        raise ShapeError(f"--name '{quoted(shape.name)}' is not a DNS-1035 label (lower case letters, digits and '-', starting with a letter, at most 63)")
    if shape.namespace is not None and not dns1123_ok(shape.namespace):
        raise ShapeError(f"--namespace '{quoted(shape.namespace)}' is not a DNS-1123 label (lower case letters, digits and '-', at most 63)")
    if not quantity_ok(shape.memory):
        raise ShapeError(f"--memory '{quoted(shape.memory)}' is not a memory quantity (such as 16Gi)")
    if not quantity_ok(shape.shm_size):
        raise ShapeError(f"--shm-size '{quoted(shape.shm_size)}' is not a memory quantity (such as 2Gi)")
    if not shape.image.strip():
        raise ShapeError("--image is empty")
    if not image_reference_ok(shape.image):
        raise ShapeError(f"--image '{quoted(shape.image)}' is not an image reference ([HOST[:PORT]/]NAME[:TAG][@DIGEST], such as registry.example/train:1)")
    if not shape.command:
        raise ShapeError("no training command: give it after --, e.g. -- train.py --ddp_backend gloo")
    for word in shape.command:  # a container's arguments are C strings in UTF-8: no NUL, no lone surrogate
        if "\0" in word or any("\ud800" <= ch <= "\udfff" for ch in word):
            raise ShapeError(f"the training command's word '{quoted(word)}' holds a NUL or an undecodable byte, which no container argument can")
    cpu_count(shape.cpu)


def pod_threads(shape: JobShape) -> dict[str, str]:
    """compat launch's thread plan for ``nproc_per_node`` ranks on the pod's CPUs (its cgroup quota), as variables."""
    return dict(plan_threads(shape.cpu, shape.threads_per_core, shape.nproc_per_node, shape.ccl, shape.ccl_workers).variables())


def shape_of(spec: JobSpec, image: str, namespace: Optional[str]) -> JobShape:
    """The pod's view of the job contract: the image and namespace are Kubernetes' own options."""
    res = spec.resources
    return JobShape(name=spec.name, image=image, nnodes=spec.nodes, nproc_per_node=spec.ranks_per_node, cpu=res.cpu or "", memory=res.memory or "",
                    command=spec.command if spec.watch is None else launch_words(spec.command), namespace=namespace, shm_size=res.shm_size,
                    threads_per_core=res.threads_per_core, preflight=spec.preflight, ccl=spec.backend == "ccl", watch=spec.watch)


def pytorchjob_for(spec: JobSpec, image: str, namespace: Optional[str]) -> Manifest:
    """The PyTorchJob that runs the job contract: its exports are the pods' env."""
    return pytorchjob(shape_of(spec, image, namespace), spec.notes, dict(spec.exports))


def trainjob_for(spec: JobSpec, release: Release, image: str, namespace: Optional[str]) -> Manifest:
    """The TrainJob (for ``release``) that runs the job contract."""
    return trainjob(shape_of(spec, image, namespace), release, spec.notes, dict(spec.exports))


def preflight_script(shape: JobShape, addr: str, port: str, nnodes: str, node_rank: str) -> list[str]:
    """The lines that run compat doctor --live across the pods with the operator's rendezvous settings."""
    argv = [shape.compat, "doctor", "--live", "--json", "--only", "live", "--python", shape.python, "--launcher", "torchrun",
            "--nproc-per-node", str(shape.nproc_per_node)]
    quoted = " ".join(shlex.quote(a) for a in argv)
    return [
        f'echo "compat preflight: node {node_rank} of {nnodes}, master {addr}:{port}" >&2',
        f'{quoted} --nnodes "{nnodes}" --node-rank "{node_rank}" --master-addr "{addr}" --master-port "{port}"'
        ' || { echo "compat preflight failed: see the JSON above; not training" >&2; exit 1; }',
    ]


def container_args(shape: JobShape, rendezvous: Mapping[str, str]) -> list[str]:
    """``bash -c SCRIPT compat-job TRAINING...``: preflight (optional), then exec torchrun with the training command."""
    lines = ["set -eu"]
    if shape.preflight:
        lines += preflight_script(shape, rendezvous["addr"], rendezvous["port"], rendezvous["nnodes"], rendezvous["node_rank"])
    if shape.watch is not None:
        lines.append(watched_launch(shape, rendezvous))
        return ["bash", "-c", "\n".join(lines), "compat-job", *shape.command]
    # --nproc_per_node: the spelling every torchrun takes (the dashed one only from torch 2.x)
    lines.append('exec torchrun --nproc_per_node "' + str(shape.nproc_per_node) + '" "$@"')
    return ["bash", "-c", "\n".join(lines), "compat-job", *shape.command]


def watched_launch(shape: JobShape, rendezvous: Mapping[str, str]) -> str:
    """--watch: the pod's last line, compat launch --watch --launcher torchrun with the operator's rendezvous (one pod:
    none) and the run folder (jobspec.WatchSpec), the training command after -- (compat launch's words)."""
    watch = shape.watch
    assert watch is not None
    argv = [shape.compat, "launch", "--watch", "--launcher", "torchrun", "--python", shape.python, "--nproc-per-node", str(shape.nproc_per_node)]
    line = "exec " + " ".join(shlex.quote(a) for a in argv)
    if shape.nnodes > 1:
        line += (f' --nnodes {shape.nnodes} --node-rank "{rendezvous["node_rank"]}" --master-addr "{rendezvous["addr"]}" '
                 f'--master-port "{rendezvous["port"]}"')
    if watch.folder:
        line += f" --watch-dir {shlex.quote(watch.folder)}"
    return line + ' -- "$@"'


def watch_volume(shape: JobShape) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The (volume, mount) of the watch's run folder: the claim, or an emptyDir of the pod's own; none for one pod."""
    watch = shape.watch
    if watch is None or not watch.mount:
        return []
    source = {"persistentVolumeClaim": {"claimName": watch.claim}} if watch.claim else {"emptyDir": {}}
    return [({"name": "compat-watch", **source}, {"name": "compat-watch", "mountPath": watch.mount})]


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in env.items()]


def _resources(shape: JobShape) -> dict[str, Any]:
    amounts = {"cpu": shape.cpu, "memory": shape.memory}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _shm_volume(shape: JobShape) -> dict[str, Any]:
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shape.shm_size}}


def _pod_template(shape: JobShape, env: Mapping[str, str], args: list[str]) -> dict[str, Any]:
    return {"spec": {
        "containers": [{
            "name": CONTAINER,
            "image": shape.image,
            "imagePullPolicy": "IfNotPresent",
            "command": args[:1],
            "args": args[1:],
            "env": _env_list(env),
            "ports": [{"name": PORT_NAME, "containerPort": PORT}],
            "resources": _resources(shape),
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *(mount for _volume, mount in watch_volume(shape))],
        }],
        "volumes": [_shm_volume(shape), *(volume for volume, _mount in watch_volume(shape))],
    }}


def _metadata(shape: JobShape) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": shape.name, "labels": {"app.kubernetes.io/managed-by": "compatmatrix"}}
    if shape.namespace:
        meta["namespace"] = shape.namespace
    return meta


# why no interface variable is written into the pods' env: the interface is the pod's, known only where it runs
INTERFACE_NOTE = ("no GLOO_SOCKET_IFNAME / CCL_KVS_IFACE / FI_TCP_IFACE: Kubernetes maps each pod's name to its pod address, so the ranks "
                  "find it themselves (a pod with several networks: set them in the pod's env to that network's interface)")


def pytorchjob(shape: JobShape, notes: Sequence[str] = (), env: Optional[Mapping[str, str]] = None) -> Manifest:
    """The PyTorchJob; ``env``: the pods' env (the job contract's exports), else the thread plan of ``shape``."""
    check_shape(shape)
    env = dict(env) if env is not None else {**pod_threads(shape), **dict(shape.extra_env)}
    # the operator sets these in every pod of a job with a Master (PET_* for torchrun, which reads them itself)
    rendezvous = {"addr": "$PET_MASTER_ADDR", "port": "$PET_MASTER_PORT", "nnodes": "$PET_NNODES", "node_rank": "$PET_NODE_RANK"}
    template = _pod_template(shape, env, container_args(shape, rendezvous))
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if shape.nnodes > 1:
        replicas["Worker"] = {"replicas": shape.nnodes - 1, "restartPolicy": "Never", "template": template}
    document = {
        "apiVersion": PYTORCHJOB_API,
        "kind": "PyTorchJob",
        "metadata": _metadata(shape),
        "spec": {
            "nprocPerNode": str(shape.nproc_per_node),
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
            "pytorchReplicaSpecs": replicas,
        },
    }
    said = [
        f"{shape.nnodes} pods (Master 1" + (f" + Worker {shape.nnodes - 1}" if shape.nnodes > 1 else "") + f"), {shape.nproc_per_node} ranks each: "
        f"world size {shape.nnodes * shape.nproc_per_node}",
        f"threads per rank: OMP_NUM_THREADS={env['OMP_NUM_THREADS']} for {shape.cpu} CPUs per pod"
        + (f" ({shape.threads_per_core} threads per core)" if shape.threads_per_core > 1 else " (CPU units counted as cores; --threads-per-core 2 on SMT nodes)"),
        "restartPolicy Never, backoffLimit 0: a failed rendezvous fails the job instead of restarting for ever",
        INTERFACE_NOTE,
        f"/dev/shm: emptyDir medium Memory, sizeLimit {shape.shm_size}, mounted; requests = limits (Guaranteed QoS)",
    ]
    if shape.preflight:
        said.append(f"every pod runs {shape.compat} doctor --live first (the image must have compat there: compat export dockerfile puts it there)")
    return Manifest(document, tuple(said) + tuple(notes))


def trainjob(shape: JobShape, release: Release, notes: Sequence[str] = (), env: Optional[Mapping[str, str]] = None) -> Manifest:
    """The TrainJob for ``release`` (export/releases.py): the trainer's image, command, env, resources and ranks per
    node in spec.trainer; /dev/shm through the release's override mechanism, aimed at the runtime's own replicated job
    and container (torch-distributed names both ``node``)."""
    from .releases import override_document

    check_shape(shape)
    env = dict(env) if env is not None else {**pod_threads(shape), **dict(shape.extra_env)}
    # the Trainer's torch plugin sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT
    rendezvous = {"addr": "$PET_MASTER_ADDR", "port": "$PET_MASTER_PORT", "nnodes": "$PET_NNODES", "node_rank": "$PET_NODE_RANK"}
    args = container_args(shape, rendezvous)
    field_name, override = override_document(release, [_shm_volume(shape), *(volume for volume, _mount in watch_volume(shape))],
                                             [{"name": "dshm", "mountPath": "/dev/shm"}, *(mount for _volume, mount in watch_volume(shape))])
    document = {
        "apiVersion": TRAINJOB_API,
        "kind": "TrainJob",
        "metadata": _metadata(shape),
        "spec": {
            "runtimeRef": {"name": TRAINJOB_RUNTIME, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {
                "image": shape.image,
                "command": args[:1],
                "args": args[1:],
                "env": _env_list(env),
                "numNodes": shape.nnodes,
                "numProcPerNode": shape.nproc_per_node,
                "resourcesPerNode": _resources(shape),
            },
            field_name: override,
        },
    }
    said = [
        f"for {release.label}: {release.cited}" + (f"; {release.note}" if release.note else ""),
        f"{shape.nnodes} nodes x {shape.nproc_per_node} ranks on the ClusterTrainingRuntime {TRAINJOB_RUNTIME} "
        "(numProcPerNode explicit: auto on a CPU node starts one rank per CPU)",
        f"threads per rank: OMP_NUM_THREADS={env['OMP_NUM_THREADS']} for {shape.cpu} CPUs per node; requests = limits",
        f"/dev/shm: a Memory emptyDir through spec.{field_name}, aimed at the runtime's replicated job {release.runtime_job!r} "
        f"and container {release.runtime_container!r}; another Trainer release needs --trainer-version (the API server drops "
        "an override field it does not know without an error)",
        INTERFACE_NOTE,
    ]
    if shape.preflight:
        said.append(f"every pod runs {shape.compat} doctor --live first (the image must have compat there: compat export dockerfile puts it there)")
    return Manifest(document, tuple(said) + tuple(notes))
