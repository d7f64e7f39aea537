"""``compat export``: from a resolved set (planning.Planned) and the typed arguments to the document each format
writes, and ``--validate FILE``: a manifest or Dockerfile read, parsed and judged (export/validate.py).

The builders (k8s.py, dockerfile.py, pylock.py) are pure; this module adds the decisions that need the set: the
oneCCL bindings in the set give the job its ccl settings, the training command is translated for the resolved
transformers/accelerate (a command that cannot work is refused, exit 1), a ``python`` in front of the script is
dropped (torchrun runs the script itself), the hosts of the plan become the Dockerfile's mirror arguments.

Side effects: ``--validate`` reads the file (a regular file, at most 4 MiB; YAML aliases may add at most
render.manifest.MAX_ALIAS_NODES nodes); ``--python`` is probed by the caller.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..errors import UsageError, shown
from .command import (  # noqa: F401 - named here too: the export service's callers and tests read them from it
    _PYTHON,
    CCL_KEY,
    CannotWork,
    _for_the_set,
    held_set,
    installed_versions,
    refuse_rank_starters,
    resolved_versions,
    training_command,
)
from .contract import TORCHRUN_CCL_ENV, ShapeError

if TYPE_CHECKING:
    from packaging.version import Version

    from ..findings import Finding
    from ..matrix.model import Matrix
    from ..options import DockerArgs, JobArgs, RayArgs, SlurmArgs
    from ..planning import Planned
    from .k8s import Manifest
    from .releases import Release

# what the pods' env sets for ccl under torchrun, the launcher of a PyTorchJob: torchrun's own ccl_exports outright (its
# transport); the rest of the plan (libfabric's places, the providers) is the image's compat-env.sh, written by
# compat env --launcher torchrun --defaults, so the two render one plan (tests/launchers/test_one_plan_every_form.py holds them equal)
POD_CCL_ENV = TORCHRUN_CCL_ENV  # the job contract's (export/contract.py), named here since the first export
MAX_FILE = 4 * 1024 * 1024  # a manifest or a Dockerfile larger than this is not one
_DOCKERFILE = re.compile(r"^FROM\s+\S", re.IGNORECASE | re.MULTILINE)  # an instruction at the start of a line; YAML has "key:" there


# --- pytorchjob / trainjob --------------------------------------------------------------------------------------------


def trainer_release(version: Optional[str], crd_path: Optional[str]) -> Release:
    """The Trainer release a TrainJob is written for or judged against: --crd FILE's (the cluster's CRD), else
    --trainer-version's, else the newest compat knows (UsageError for an unknown version or a file that is no TrainJob
    CRD); --crd with the --trainer-version of a release known from its notes only (v2.4): the CRD's schema with the
    notes' rules."""
    from .releases import ReleaseError, by_version, from_crd, from_notes

    try:
        if crd_path is None:
            return by_version(version)
        text = read_file(crd_path, "--crd")
        try:
            documents = _yaml_documents(crd_path, text, "--crd")
        except UsageError:
            raise
        crd = from_crd(documents[0] if len(documents) == 1 else None)
        return from_notes(version, crd) if version is not None else crd
    except ReleaseError as exc:
        from .releases import versions

        raise UsageError(f"{exc}.", f"Pass --trainer-version {' | '.join(versions())}, or --crd with the output of "
                         "kubectl get crd trainjobs.trainer.kubeflow.org -o yaml.") from None


def job_manifest(planned: Planned, job: JobArgs, release: Optional[Release] = None) -> Manifest:
    """The PyTorchJob (or with --trainer-v2 the TrainJob for ``release``, default the newest) for the resolved set; refuses a training command that cannot
    work with the set's transformers/accelerate (CannotWork) and a shape that cannot give a valid manifest (UsageError)."""
    from .k8s import pytorchjob_for, trainjob_for

    if not job.image:
        raise UsageError("compat export pytorchjob needs --image: the image the set is installed in.",
                         "Build one with compat export dockerfile and pass --image REGISTRY/NAME:TAG.")
    if not job.cpu or not job.memory:
        raise UsageError(f"compat export pytorchjob needs --{'cpu' if not job.cpu else 'memory'}: each pod's requests and limits (the thread plan follows the CPUs).",
                         "Pass --cpu C --memory M, e.g. --cpu 8 --memory 16Gi.")
    from .contract import build_job

    try:
        spec = build_job(planned, job, "trainjob" if job.trainer_v2 else "pytorchjob")
    except ShapeError as exc:
        raise UsageError(f"{exc}.", "Correct that option (compat export --help lists them).") from None
    try:
        if job.trainer_v2:
            release = release or trainer_release(None, None)
            spec_fields = ((release.schema.get("properties") or {}).get("spec") or {}).get("properties") or {}
            if release.override not in spec_fields:
                from .releases import OVERRIDES

                raise UsageError(f"--crd describes a TrainJob with none of the fields compat knows for changing the runtime's pods ({', '.join(OVERRIDES)}), "
                                 "so /dev/shm cannot be written for it.", "Pass --trainer-version for a release compat knows, or add the dshm volume to the runtime's pod template.")
            manifest = trainjob_for(spec, release, job.image, job.namespace)
            from .releases import name_problems

            for path, name in name_problems(release, manifest.document.get("spec") or {}):
                raise UsageError(f"The TrainJob's {path} {name!r} is longer than {release.label} allows ({release.name_max} characters, "
                                 "its release notes): no runtime of that release has such a ReplicatedJob.",
                                 f"Name the runtime's job in {release.name_max} characters or fewer, or pass --trainer-version v2.3.")
            return manifest
        return pytorchjob_for(spec, job.image, job.namespace)
    except ShapeError as exc:
        raise UsageError(f"{exc}.", "Correct that option (compat export --help lists them).") from None


# --- sbatch ------------------------------------------------------------------------------------------------------------


def sbatch(planned: Planned, job: JobArgs, slurm: SlurmArgs, python: Optional[str], compat: Sequence[str], snapshot: Any = None) -> str:
    """The Slurm batch script for the resolved set (render/sbatch.py): the training command checked against the set's
    transformers/accelerate as for pytorchjob; ``python``: the environment's interpreter on the cluster (--python);
    ``snapshot``: that environment probed here, when it is on this machine: the set is then what it holds (held_set),
    not the newest the matrix resolves."""
    from ..render.sbatch import sbatch_for

    if not python:
        raise UsageError("compat export sbatch needs --python PATH: the interpreter of the environment that holds the set, at the same path on every node.",
                         "Pass --python /shared/venv/bin/python (compat install puts the set there).")
    if not job.command:
        raise UsageError("No training command.", "Write it after --, e.g. compat export sbatch --python PATH --nnodes 2 --nproc-per-node 2 -- train.py")
    from .contract import build_job

    return sbatch_for(build_job(planned, job, "sbatch", os.path.abspath(python), compat, snapshot), slurm.time, slurm.partition)


# --- skypilot -----------------------------------------------------------------------------------------------------------


def skypilot(planned: Planned, job: JobArgs, snapshot: Any = None) -> tuple[dict, tuple[str, ...]]:
    """The SkyPilot task (export/skypilot.py) for the resolved set, or the set --python's environment holds
    (``snapshot``, as for sbatch): setup installs it into the training venv it makes on every node (~/compat-train;
    this machine's interpreter path means nothing on a cloud node); the training command checked against the set as
    for pytorchjob. (document, notes)."""
    from .contract import build_job
    from .skypilot import ResourceError, check_resources, task

    if not job.cpu or not job.memory:
        raise UsageError(f"compat export skypilot needs --{'cpu' if not job.cpu else 'memory'}: each node's resources (the thread plan follows the CPUs).",
                         "Pass --cpu N --memory GB in SkyPilot's forms, e.g. --cpu 8 --memory 32+.")
    try:
        check_resources(job.cpu, job.memory)
    except (ResourceError, ShapeError) as exc:
        raise UsageError(f"{exc}.", "Correct that option (compat export --help lists them).") from None
    cpus = float(job.cpu.rstrip("+"))
    if job.nproc_per_node > cpus:
        raise UsageError(f"{job.nproc_per_node} ranks per node do not fit in --cpu {job.cpu} (each rank needs at least one vCPU).",
                         f"Pass --nproc-per-node {max(1, int(cpus))} or fewer, or more --cpu.")
    try:
        return task(build_job(planned, job, "skypilot", None, (), snapshot))
    except (ResourceError, ShapeError) as exc:
        raise UsageError(f"{exc}.", "Correct that option (compat export --help lists them).") from None


# --- ray ---------------------------------------------------------------------------------------------------------------


def ray(planned: Planned, job: JobArgs, ray_args: RayArgs, python: Optional[str], compat: Sequence[str], snapshot: Any = None,
        env_plan: Any = None) -> str:
    """The Ray Train driver for the resolved set: the job contract (export/contract.py build_job, engine "ray") of
    ``--cpus-per-node`` CPUs per node (default: this machine's), written by render/ray.py through its ray_shape adapter;
    ``python``/``snapshot``: the environment that holds the set on every node (--python), probed here: the set is then
    what it holds and Ray installs nothing; ``env_plan``: compat env's plan for it (shell_env.plan_env), whose exports
    (path lists as the driver's additions) become the runtime_env's env_vars."""
    from ..record import replace
    from ..render.ray import ray_driver, ray_shape
    from .contract import build_job

    if not job.command:
        raise UsageError("No training command.", "Write it after --, e.g. compat export ray --nnodes 2 --nproc-per-node 2 -- train.py")
    cpus = ray_args.cpus_per_node or len(os.sched_getaffinity(0))
    ranks = job.nproc_per_node
    if cpus < ranks:
        raise UsageError(f"{ranks} ranks per node do not fit in {cpus} CPUs per node (each Ray Train worker asks for at least one).",
                         f"Pass --nproc-per-node {cpus} or less, or --cpus-per-node with the CPUs ray start --num-cpus gives each node.")
    spec = build_job(planned, replace(job, cpu=str(cpus), threads_per_core=1), "ray", python, compat, snapshot)
    if spec.set.read_from is None:
        from ..render.requirements import plan_text

        # the lines of compat export requirements (its index options with them: pip reads Ray's list as a requirements file)
        requirements = tuple(line for line in plan_text(planned.plan, "requirements").splitlines() if line.strip() and not line.startswith("#"))
    else:
        requirements = spec.set.installable
    plan = None
    if env_plan is not None:
        plan = (dict(env_plan.exports), {key: (tuple(added.prepend), tuple(added.append)) for key, added in env_plan.additions.items()})
    shape, notes = ray_shape(spec, requirements, ray_args.runtime_pip, os.path.abspath(python) if python else None, ray_args.gloo_timeout,
                             ray_args.preflight_timeout, plan)
    return ray_driver(shape, notes)


# --- dockerfile, pylock -----------------------------------------------------------------------------------------------


def dockerfile(planned: Planned, docker: DockerArgs) -> str:
    """The Dockerfile; --base must be an image reference and --wheelhouse a folder COPY takes as written (UsageError)."""
    from ..render.dockerfile import dockerfile_text
    from ..values import build_path_ok, image_reference_ok, quoted
    from .dockerfile import dockerfile_shape, notes_for

    if docker.base is not None and not image_reference_ok(docker.base):
        raise UsageError(f"--base '{quoted(docker.base)}' is not an image reference.", "Write it like python:3.11-slim or registry.example:5000/team/base:1.2.")
    if docker.wheelhouse is not None and not build_path_ok(docker.wheelhouse):
        raise UsageError(f"--wheelhouse '{quoted(docker.wheelhouse)}' cannot be copied by a Dockerfile as written (white space, quotes, '$', "
                         "a glob character, a line break or a leading '-').", "Name the folder of the build context with letters, digits and . _ - / only, e.g. --wheelhouse wheels.")
    shape = dockerfile_shape(planned.plan, planned.outcome.request.profile, docker.base, docker.ranks_per_node, docker.wheelhouse)
    found = os.path.isdir(docker.wheelhouse) if docker.wheelhouse else None
    return dockerfile_text(shape, notes_for(planned.plan, found))


def pylock(planned: Planned) -> str:
    from ..redact import CREDENTIALS_NOTE, has_credentials
    from ..render.pylock import pylock_text
    from .pylock import known_wheels, lock_data

    inputs = planned.asked.inputs
    data, left_out = lock_data(planned.plan, known_wheels(inputs.requirements) if inputs is not None else {})
    request = planned.outcome.request
    header = [
        f"PEP 751 lock written by compat export pylock: Python {request.python.label}, {request.platform.tag}"
        + (f", profile {request.profile}" if request.profile else ""),
        "Only the resolved set: its dependencies are not included (pip or uv resolves them when installing); entries without",
        "[[packages.wheels]] are exact pins with their index. compat download -d DIR writes the full hashed lock of every wheel",
        "(DIR/compat-wheelhouse.lock). compat install -r pylock.toml and compat check -r pylock.toml read this file back.",
    ]
    if left_out:
        header.append("left out (not exact pins): " + ", ".join(left_out))
    if planned.plan.carries_credentials or any(has_credentials(item.url) for item in (inputs.requirements if inputs is not None else ())):
        header.append(CREDENTIALS_NOTE)
    return pylock_text(data, header)


# --- --validate -------------------------------------------------------------------------------------------------------


def read_file(path: str, flag: str = "--validate") -> str:
    """The file's text: a regular file (a FIFO or a device is refused without blocking), at most MAX_FILE, UTF-8."""
    import stat

    what = "Pass a Kubernetes manifest (YAML) or a Dockerfile." if flag == "--validate" else "Pass the output of kubectl get crd trainjobs.trainer.kubeflow.org -o yaml."
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{flag} {shown(path, 200)} cannot be read ({exc.strerror}).", what) from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{flag} {shown(path, 200)} is not a regular file.", what)
    if info.st_size > MAX_FILE:
        raise UsageError(f"{flag} {shown(path, 200)} is {info.st_size} bytes, more than a manifest or Dockerfile ({MAX_FILE}).", what)
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE + 1).decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{flag} {shown(path, 200)} cannot be read ({exc.strerror}).", what) from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {shown(path, 200)} is not UTF-8 text.", what) from None


def is_dockerfile(text: str) -> bool:
    """A FROM instruction at the start of a line: a Dockerfile (a YAML manifest has keys there, never FROM)."""
    return bool(_DOCKERFILE.search(text))


def _yaml_documents(path: str, text: str, flag: str, duplicates: Optional[list] = None, no_json: Optional[list] = None) -> list[Any]:
    """The YAML documents of a file read for ``flag`` (typed as the API server types them: render/goyaml.py), or
    UsageError naming the line; ``duplicates`` gets each document's repeated keys, ``no_json`` the paths JSON has no
    form for."""
    from ..render.manifest import AliasLimitError, load_documents

    try:
        return load_documents(text, duplicates, no_json)
    except AliasLimitError as exc:
        raise UsageError(f"{flag} {shown(path, 200)} is not read: {exc.problem} (line {exc.line}).",
                         "Write the manifest out without YAML anchors and aliases (kubectl get -o yaml does), or pass the Dockerfile.") from None
    except Exception as exc:  # noqa: BLE001 - yaml.YAMLError and what PyYAML raises on odd input: not YAML, one sentence
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        if flag != "--validate":
            raise UsageError(f"{flag} {shown(path, 200)} is not YAML ({problem}{line}).", "Pass the output of kubectl get crd trainjobs.trainer.kubeflow.org -o yaml.") from None
        raise UsageError(f"--validate {shown(path, 200)} is neither a Dockerfile (no FROM line) nor YAML ({problem}{line}).",
                         "Pass a PyTorchJob / TrainJob manifest or a Dockerfile.") from None


class Validated:
    __slots__ = ("kind", "documents", "findings", "pods", "release")

    def __init__(self, kind: str, documents: int, findings: list[Finding], pods: Optional[list] = None, release: Optional[Release] = None) -> None:
        self.kind = kind  # dockerfile | pytorchjob | trainjob | manifest (several kinds, or none compat knows)
        self.documents = documents
        self.findings = findings
        self.pods = pods or []  # (role, count, Pod) of every job document, as the cluster would run them
        self.release = release  # the Trainer release TrainJobs were judged against (None: no TrainJob)


def validate_text(path: str, text: str, matrix: Matrix, versions: Mapping[str, Optional[Version]], release: Optional[Release] = None) -> Validated:
    """The findings for a Dockerfile, or for every document of a YAML manifest file (prefixed with the document's kind
    and name when there are several); TrainJobs are judged against ``release`` (default: the newest known)."""
    from ..findings import Finding, Status
    from .validate import examine, validate_dockerfile

    if is_dockerfile(text):
        return Validated("dockerfile", 1, validate_dockerfile(text))
    repeated: list[list[str]] = []
    unencodable: list[list[str]] = []
    documents = _yaml_documents(path, text, "--validate", repeated, unencodable)
    if not documents:
        raise UsageError(f"--validate {shown(path, 200)} holds no YAML document and no FROM line.", "Pass a PyTorchJob / TrainJob manifest or a Dockerfile.")
    findings: list[Finding] = []
    pods: list = []
    kinds = set()
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, dict):
            findings.append(Finding("export.kind", Status.FAIL, f"document {number} is a YAML {type(document).__name__}, not a Kubernetes object", (),
                                    "Pass the manifest of the training job."))
            continue
        kinds.add(str(document.get("kind") or "").lower())
        done = examine(document, matrix, versions.get("transformers"), versions.get("accelerate"), versions.get("torch"), release,
                       repeated[number - 1] if number - 1 < len(repeated) else (),
                       ccl=(versions[CCL_KEY] is not None) if CCL_KEY in versions else None,
                       no_json=unencodable[number - 1] if number - 1 < len(unencodable) else ())
        found = done.findings
        pods += done.pods
        if len(documents) > 1:
            name = (document.get("metadata") or {}).get("name") if isinstance(document.get("metadata"), dict) else None
            label = f"{document.get('kind') or 'document'} {name or number}"
            found = [Finding(f.id, f.status, f"{label}: {f.summary}", f.evidence, f.fix) for f in found]
        findings += found
    kind = kinds.pop() if len(kinds) == 1 and kinds <= {"pytorchjob", "trainjob"} else "manifest"
    if "trainjob" in (kinds | {kind}) and release is None:
        from .releases import newest

        release = newest()
    return Validated(kind, len(documents), findings, pods, release if kind in ("trainjob", "manifest") else None)


