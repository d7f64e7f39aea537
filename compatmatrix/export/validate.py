"""``compat export --validate FILE``: a hand-written PyTorchJob, TrainJob or Dockerfile held to the rules the generated
ones follow (export/k8s.py, export/dockerfile.py), as findings.

Pure: takes the parsed document (or the Dockerfile's text) and the versions the training command will meet; the
caller reads the file and parses YAML. Words live here because each rule is its own sentence.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from packaging.version import Version

from ..findings import Finding, Status
from ..matrix.model import Matrix
from ..translate import translate
from ..values import dns1035_ok, image_reference_ok
from .k8s import CONTAINER, PYTORCHJOB_API, TRAINJOB_API

if TYPE_CHECKING:
    from .releases import Release


def _containers(template: Any) -> list[dict[str, Any]]:
    spec = (template or {}).get("spec") or {}
    return [c for c in spec.get("containers") or [] if isinstance(c, dict)]


def _volumes(template: Any) -> list[dict[str, Any]]:
    spec = (template or {}).get("spec") or {}
    return [v for v in spec.get("volumes") or [] if isinstance(v, dict)]


def _env(container: Mapping[str, Any]) -> dict[str, Optional[str]]:
    found: dict[str, Optional[str]] = {}
    for item in container.get("env") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            value = item.get("value")
            found[item["name"]] = None if value is None and "valueFrom" not in item else str(value if value is not None else "<valueFrom>")
    return found


def _replicas(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    specs = ((doc.get("spec") or {}).get("pytorchReplicaSpecs")) or {}
    return {name: spec for name, spec in specs.items() if isinstance(spec, dict)}


def _command(container: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def _training_argv(argv: Sequence[str]) -> list[str]:
    """The training script's own arguments inside a container command (after torchrun/python and a .py script), or []."""
    joined = list(argv)
    if len(joined) >= 3 and joined[0].endswith("bash") and joined[1] == "-c":  # bash -c 'script' name args...
        try:
            joined = shlex.split(joined[2]) + joined[4:]
        except ValueError:
            return []
    for i, token in enumerate(joined):
        if token.endswith(".py"):
            return joined[i + 1:]
    return []


# a flag the target transformers rejects outright (its argument parser exits): the job fails at start
_ARG_FEATURES = {"--no_cuda": "no_cuda_arg", "--use_cpu": "use_cpu_arg", "--use_ipex": "use_ipex_arg", "--xpu_backend": "xpu_backend_arg",
                 "--ddp_backend": "ddp_backend_arg"}


def _edit_status(matrix: Matrix, transformers: Version, before: str) -> Status:
    flag = before.split()[0].split("=")[0] if before else ""
    feature = {f.name: f for f in matrix.features_of("transformers")}.get(_ARG_FEATURES.get(flag, ""))
    return Status.FAIL if feature is not None and not feature.present_in(transformers) else Status.WARN


def _command_findings(cid: str, where: str, argv: Sequence[str], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version],
                      torch: Optional[Version]) -> Iterator[Finding]:
    if transformers is None:
        yield Finding(cid, Status.SKIP, f"{where}the training command is not checked: no transformers version to check it against")
        return
    done = translate(matrix, argv, transformers, accelerate, torch)
    for edit in done.edits:
        status = _edit_status(matrix, transformers, edit.before)
        said = "rejected by" if status is Status.FAIL else "to rewrite for"
        yield Finding(cid, status, f"{where}{edit.before} → {edit.after or '(dropped)'}, {said} transformers {transformers}: {edit.why}",
                      (), "compat translate -- <the command> rewrites it.")
    for blocked in done.blocking:
        yield Finding(cid, Status.FAIL, f"{where}{blocked}", (), "Pick versions where this command works (compat resolve), or change the backend.")


def _shm(template: Any, container: Mapping[str, Any]) -> tuple[bool, bool, str]:
    """(a Memory emptyDir volume exists, it is mounted at /dev/shm, its name)."""
    memory = {v.get("name"): v for v in _volumes(template) if ((v.get("emptyDir") or {}).get("medium") == "Memory")}
    mounts = [m for m in container.get("volumeMounts") or [] if isinstance(m, dict) and m.get("mountPath") == "/dev/shm"]
    mounted = any(m.get("name") in memory for m in mounts)
    return bool(memory), mounted, ", ".join(str(n) for n in memory) or "dshm"


@dataclass
class Examined:
    """One manifest as the cluster would keep and run it: the findings, the object the API server stores, its pods."""

    findings: list[Finding]
    stored: Optional[dict[str, Any]] = None
    pods: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)


def validate_manifest(doc: Mapping[str, Any], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version],
                      torch: Optional[Version], release: Optional[Release] = None, duplicates: Sequence[str] = ()) -> list[Finding]:
    """The findings for one PyTorchJob or TrainJob; ``transformers`` None: its training command is not judged (SKIP)."""
    return examine(doc, matrix, transformers, accelerate, torch, release, duplicates).findings


def examine(doc: Mapping[str, Any], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version],
            torch: Optional[Version], release: Optional[Release] = None, duplicates: Sequence[str] = (), ccl: Optional[bool] = None,
            no_json: Sequence[tuple[str, str]] = ()) -> Examined:
    """The API server's view (apiserver.admit against the PyTorchJob v1 CRD or the TrainJob CRD of ``release``, default
    the newest Trainer compat knows), then compat's rules on what the server keeps and on the pods it runs (pods.py);
    ``ccl``: whether the image's set has the oneCCL bindings (None: not known, the ccl backend is not judged);
    ``duplicates`` / ``no_json``: what render/manifest.load_documents found repeated / without a JSON form."""
    kind, api = doc.get("kind"), doc.get("apiVersion")
    if not ((kind == "PyTorchJob" and api == PYTORCHJOB_API) or (kind == "TrainJob" and api == TRAINJOB_API)):
        return Examined([Finding("export.kind", Status.FAIL, f"not a PyTorchJob ({PYTORCHJOB_API}) or TrainJob ({TRAINJOB_API}): kind {kind!r}, apiVersion {api!r}",
                                 (), "Pass the manifest of the training job.")])
    from . import releases
    from .apiserver import admit
    from .pods import judge, pytorchjob_pods, trainjob_pods

    if kind == "TrainJob":
        release = release or releases.newest()
        admitted = admit(doc, release.schema, duplicates, bounded=release.rules_from_file, no_json=no_json)
        findings = list(_api_findings(admitted, release.schema_from or f"the TrainJob CRD of {release.label} ({release.cited})", release))
        stored = admitted.document
        findings += list(_trainjob(stored, matrix, transformers, accelerate, torch, release))
        pods = trainjob_pods(stored, release)
        findings += pods.findings + list(judge(pods, ccl=ccl))
    else:
        admitted = admit(doc, releases.pytorchjob_schema(), duplicates, no_json=no_json)
        findings = list(_api_findings(admitted, "the PyTorchJob v1 CRD (kubeflow/training-operator@374e88af)", None))
        stored = admitted.document
        findings += list(_pytorchjob(stored, matrix, transformers, accelerate, torch))
        pods = pytorchjob_pods(stored)
        findings += pods.findings + list(judge(pods, shm_and_qos=False, ccl=ccl))  # /dev/shm and QoS: the replica rules above, on the same template
    return Examined(findings, stored, pods.pods)


def _keeps(schema: Mapping[str, Any], path: str) -> bool:
    """Whether a schema lists the field at ``path`` (spec.podSpecOverrides[0].volumes)."""
    node: Any = schema
    for part in re.sub(r"\[\d+\]", ".[]", path).split("."):
        if not part:
            continue
        if part == "[]":
            node = node.get("items") or {}
            continue
        props = node.get("properties") or {}
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        else:
            return False
    return True


# the API server's problem kinds (export/apiserver.Problem.kind) -> (finding id, status, summary, fix); "" any other
_PROBLEMS: dict[str, tuple[str, Status, str, str]] = {
    "null": ("export.api-pruned", Status.WARN, "{message} by {against}", "Give the field a value or leave it out."),
    "duplicate": ("export.api-duplicate", Status.FAIL, "{message}", "Keep one of the two keys."),
    "unquoted": ("export.api-schema", Status.FAIL, "{message}: {against} refuses the object",
                 "Quote the value: unquoted, YAML as kubectl and the API server read it (go-yaml) makes 2e-5, 0o17 and 1.0 numbers and "
                 "y, n, on, off booleans."),
    "json": ("export.api-json", Status.FAIL, "{message}", "Quote it to make it a string ('.inf'), or write a finite number."),
    "cel": ("export.api-cel", Status.FAIL, "{message}: {against} refuses the object", "Change the value so that the rule holds."),
    "": ("export.api-schema", Status.FAIL, "{message}: {against} refuses the object", "Correct the value (kubectl explain shows the field's type)."),
}


def _pruned_finding(problem: Any, against: str, release: Optional[Release]) -> Finding:
    """An unknown field the server drops: named as a field of the other releases that have it, with the fix for the
    release validated against."""
    from . import releases

    others = [r for r in releases.known() if release is not None and r.version != release.version and _keeps(r.schema, problem.path)]
    where = f"; a field of {', '.join(r.label for r in others)}" if others else ""
    fix = (f"If the cluster runs {' or '.join(r.label for r in others)}, validate with --trainer-version "
           f"{' (or '.join(r.version for r in others)}{')' * (len(others) - 1)}; for {release.label} write it as "
           f"{release.override} (compat export pytorchjob --trainer-v2 --trainer-version {release.version} does)." if others and release is not None
           else "Remove the field or correct its spelling (kubectl explain lists the fields).")
    return Finding("export.api-pruned", Status.FAIL, f"{problem.path}: {against} does not have this field: the API server drops it without an error "
                   f"(kubectl --validate=strict refuses it){where}", (), fix)


def _api_findings(admitted: Any, against: str, release: Optional[Release]) -> Iterator[Finding]:
    for problem in admitted.problems:
        if problem.kind == "unknown":
            yield _pruned_finding(problem, against, release)
        elif problem.kind != "cel-unavailable":  # those: one finding for all of them, below
            check, status, summary, fix = _PROBLEMS.get(problem.kind, _PROBLEMS[""])
            yield Finding(check, status, summary.format(message=problem.message, against=against), (), fix)
    unevaluated = [p.message for p in admitted.problems if p.kind == "cel-unavailable"]
    if unevaluated:
        yield Finding("export.api-cel", Status.WARN, f"{len(unevaluated)} x-kubernetes-validations rule(s) of {against} not evaluated: "
                      "no CEL library here, so whether the API server accepts the object is not known", tuple(unevaluated),
                      "pip install common-expression-language (it needs Python >= 3.11) beside compat, then validate again.")
    if len(unevaluated) == len(admitted.problems):
        defaults = f"; defaults applied: {', '.join(admitted.defaulted)}" if admitted.defaulted else ""
        yield Finding("export.api", Status.PASS, f"valid for {against}: strict field validation passes, nothing pruned{defaults}")


def _pytorchjob(doc: Mapping[str, Any], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version], torch: Optional[Version]) -> Iterator[Finding]:
    name = str((doc.get("metadata") or {}).get("name") or "")
    yield (Finding("export.name", Status.PASS, f"name {name} is a DNS-1035 label") if dns1035_ok(name) else
           Finding("export.name", Status.FAIL, f"name {name!r} is not a DNS-1035 label: the operator's webhook refuses it", (),
                   "Use lower case letters, digits and '-', starting with a letter, at most 63 characters."))
    replicas = _replicas(doc)
    spec = doc.get("spec") or {}
    unknown = sorted(set(replicas) - {"Master", "Worker"})
    if unknown:
        yield Finding("export.replicas", Status.FAIL, f"replica types {', '.join(unknown)}: the webhook accepts only Master and Worker (exact case)", (),
                      "Rename them Master / Worker.")
    master = replicas.get("Master")
    elastic = spec.get("elasticPolicy")
    if master is not None and master.get("replicas") != 1:
        yield Finding("export.replicas", Status.FAIL, f"Master replicas is {master.get('replicas')!r}: the webhook requires exactly 1", (), "Set Master replicas: 1.")
    if master is None and not elastic:
        yield Finding("export.rendezvous", Status.FAIL, "no Master and no elasticPolicy: the operator gives the pods no master address or node rank, "
                      "so every pod's torchrun starts alone as node 0", (), "Add a Master replica (replicas: 1) and Workers for the other nodes (compat export pytorchjob does).")
    elif master is not None and elastic:
        yield Finding("export.rendezvous", Status.WARN, "a Master together with an elasticPolicy: PET_NNODES counts the Workers only while PET_NODE_RANK counts the Master",
                      (), "Use either a Master with Workers (static rendezvous) or Workers with an elasticPolicy.")
    nproc = spec.get("nprocPerNode") or ((elastic or {}).get("nProcPerNode"))
    if nproc in (None, "auto", "cpu"):
        yield Finding("export.nproc", Status.WARN, f"nprocPerNode is {nproc or 'unset (auto)'}: on a CPU pod torchrun then starts one rank per CPU", (),
                      "Set spec.nprocPerNode to the ranks each pod should run.")
    for rtype, replica in sorted(replicas.items()):
        yield from _replica(rtype, replica, matrix, transformers, accelerate, torch)


def _replica(rtype: str, replica: Mapping[str, Any], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version],
             torch: Optional[Version]) -> Iterator[Finding]:
    template = replica.get("template") or {}
    containers = _containers(template)
    main = next((c for c in containers if c.get("name") == CONTAINER), None)
    if main is None:
        yield Finding(f"export.{rtype.lower()}-container", Status.FAIL, f"{rtype}: no container named {CONTAINER}: the operator reads the master port and the exit code only from it",
                      (), f"Name the training container {CONTAINER}.")
        return
    image = str(main.get("image") or "")
    if not image_reference_ok(image):
        yield Finding(f"export.{rtype.lower()}-image", Status.FAIL, f"{rtype}: image {image!r} is not an image reference", (),
                      "Name the image the training set was installed in (compat export dockerfile builds one).")
    policy = replica.get("restartPolicy", "OnFailure (the operator's default)")
    if str(policy).startswith(("OnFailure", "Always")):
        yield Finding(f"export.{rtype.lower()}-restart", Status.WARN, f"{rtype}: restartPolicy {policy}: a rendezvous that fails restarts for ever unless runPolicy.backoffLimit is set",
                      (), "Use restartPolicy: Never (the job fails on the first failed pod), or set runPolicy.backoffLimit.")
    has_volume, mounted, names = _shm(template, main)
    if not mounted:
        said = f"a Memory emptyDir ({names}) is defined but not mounted at /dev/shm" if has_volume else "no Memory emptyDir is mounted at /dev/shm"
        yield Finding(f"export.{rtype.lower()}-shm", Status.FAIL, f"{rtype}: {said}: the container keeps the runtime's 64 MB /dev/shm", (),
                      "Mount an emptyDir with medium: Memory (and a sizeLimit) at /dev/shm in the pytorch container.")
    else:
        yield Finding(f"export.{rtype.lower()}-shm", Status.PASS, f"{rtype}: /dev/shm is a Memory emptyDir")
    resources = main.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    differ = [k for k in ("cpu", "memory") if str(requests.get(k)) != str(limits.get(k))]
    if differ or not limits:
        shown = ", ".join(f"{k}: requests {requests.get(k)} / limits {limits.get(k)}" for k in (differ or ["cpu", "memory"]))
        yield Finding(f"export.{rtype.lower()}-qos", Status.WARN, f"{rtype}: requests differ from limits ({shown}): not Guaranteed QoS, so the CPU manager cannot pin the ranks",
                      (), "Set requests equal to limits for cpu and memory.")
    env = _env(main)
    threads = env.get("OMP_NUM_THREADS")
    if "OMP_NUM_THREADS" in env and threads in (None, ""):
        yield Finding(f"export.{rtype.lower()}-threads", Status.FAIL, f"{rtype}: OMP_NUM_THREADS is listed with no value", (),
                      "Give it the value compat export pytorchjob computes for the pod's CPUs (or compat launch --print in the image).")
    elif "OMP_NUM_THREADS" not in env:
        yield Finding(f"export.{rtype.lower()}-threads", Status.WARN, f"{rtype}: OMP_NUM_THREADS is not set: torchrun sets it to 1 for every rank", (),
                      "Set OMP_NUM_THREADS to the physical cores per rank.")
    preload = env.get("LD_PRELOAD")
    if preload and preload != "<valueFrom>":
        yield Finding(f"export.{rtype.lower()}-preload", Status.WARN, f"{rtype}: LD_PRELOAD names fixed library paths ({preload}); a path the image lacks only prints an error per process",
                      (), "Leave LD_PRELOAD to the image (compat env writes it from the libraries the image has).")
    argv = _training_argv(_command(main))
    if argv:
        yield from _command_findings(f"export.{rtype.lower()}-command", f"{rtype}: ", argv, matrix, transformers, accelerate, torch)


def _trainjob(doc: Mapping[str, Any], matrix: Matrix, transformers: Optional[Version], accelerate: Optional[Version], torch: Optional[Version],
              release: Release) -> Iterator[Finding]:
    from .pods import trainjob_ranks

    spec = doc.get("spec") or {}
    trainer = spec.get("trainer") or {}
    if not (spec.get("runtimeRef") or {}).get("name"):
        yield Finding("export.runtime", Status.FAIL, "no runtimeRef.name", (), "Name the ClusterTrainingRuntime (torch-distributed).")
    if release.note:
        said = f"{release.label}: {release.note}" if release.source else f"--crd: {release.note}"
        yield Finding("export.release", Status.WARN, said, (), "Check the findings against your release's notes.")
    from .releases import name_problems

    for path, name in name_problems(release, spec):
        yield Finding("export.release-names", Status.FAIL, f"{path} {name!r} has {len(name)} characters: {release.label}'s runtimes have no "
                      f"ReplicatedJob name longer than {release.name_max} ({release.cited})", (),
                      f"Target the runtime's job by its name (at most {release.name_max} characters).")
    if trainer.get("numProcPerNode") in (None, "auto", "cpu"):
        policy = ((release.runtime.get("spec") or {}).get("mlPolicy") or {}).get("torch") or {}
        ranks, why = trainjob_ranks(release, trainer, policy)
        resources = trainer.get("resourcesPerNode") if isinstance(trainer.get("resourcesPerNode"), dict) else {}
        gpu = any("gpu" in str(k).lower() for part in resources.values() if isinstance(part, dict) for k in part)
        if not gpu and ranks == "1" and not resources:
            yield Finding("export.nproc", Status.WARN, f"trainer.numProcPerNode is unset (auto) and resourcesPerNode too: {release.label} sets "
                          f"PET_NPROC_PER_NODE={ranks} ({why}), and the same TrainJob with resources gets one rank per CPU", (),
                          "Set trainer.numProcPerNode to the ranks each node should run.")
        elif not gpu:
            yield Finding("export.nproc", Status.FAIL, f"trainer.numProcPerNode is {trainer.get('numProcPerNode') or 'unset (auto)'} on a CPU node: {release.label} "
                          f"sets PET_NPROC_PER_NODE={ranks} ({why}); kubeflow/trainer#2407: one rank per CPU runs out of memory or deadlocks", (),
                          "Set trainer.numProcPerNode to the ranks each node should run (compat export pytorchjob --trainer-v2 --nproc-per-node M).")
    argv = _training_argv([str(a) for a in (trainer.get("command") or []) + (trainer.get("args") or [])])
    if argv:
        yield from _command_findings("export.command", "", argv, matrix, transformers, accelerate, torch)


_FROM = re.compile(r"^\s*FROM\s", re.IGNORECASE | re.MULTILINE)


def _instructions(text: str) -> list[str]:
    joined, out = "", []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not joined and (not line.strip() or line.lstrip().startswith("#")):
            continue
        joined += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(joined.strip())
            joined = ""
    return out


def validate_dockerfile(text: str) -> list[Finding]:
    steps = _instructions(text)
    findings: list[Finding] = []
    if not _FROM.search(text):
        return [Finding("export.dockerfile", Status.FAIL, "no FROM instruction: not a Dockerfile", (), "Pass a Dockerfile.")]
    runs = [s[4:] for s in steps if s.upper().startswith("RUN ")]
    stack = ("intel-extension-for-pytorch", "intel_extension_for_pytorch", "oneccl_bind_pt", "oneccl-bind-pt", "torch")
    for run in runs:
        if re.search(r"\bpip3?\s+install\b", run) and any(re.search(rf"(^|\s){re.escape(p)}(\s|$|[<>=!~])", run) for p in stack):
            unpinned = [p for p in stack if re.search(rf"(^|\s){re.escape(p)}(\s|$)", run)]
            if unpinned:
                findings.append(Finding("export.dockerfile-pins", Status.FAIL, f"pip installs {', '.join(unpinned)} without a version: pip pairs any torch with any IPEX/oneCCL build",
                                        (run[:200],), "Install the set with compat install --yes <pins> (compat export dockerfile writes it)."))
            else:
                findings.append(Finding("export.dockerfile-pins", Status.WARN, "the stack is installed by pip, which does not check that torch, IPEX and oneCCL fit",
                                        (run[:200],), "Run compat check after the install, or install with compat install."))
    if not any("compat check" in r or "compat doctor" in r for r in runs):
        findings.append(Finding("export.dockerfile-check", Status.WARN, "no compat check step: a mismatched set builds and fails at the first import", (),
                                "Add RUN compat check --python <the training python> after the install."))
    uses_ccl = "oneccl" in text.lower() or "ccl" in " ".join(runs).lower()
    sources = any("setvars.sh" in s or "compat env" in s or "compat-env.sh" in s for s in steps)
    if uses_ccl and not sources:
        findings.append(Finding("export.dockerfile-setvars", Status.FAIL, "the oneCCL bindings are installed but nothing sources their setvars.sh for the container's commands",
                                (), "Write compat env into a file, set ENV BASH_ENV to it and source it in the entrypoint (compat export dockerfile does)."))
    frozen = [s for s in steps if re.search(r"(export|ENV)\s+(PATH|LD_LIBRARY_PATH)=", s) and "$PATH" not in s and "${PATH" not in s
              and "$LD_LIBRARY_PATH" not in s and "${LD_LIBRARY_PATH" not in s]
    for step in frozen:
        findings.append(Finding("export.dockerfile-path", Status.WARN, "a PATH-like variable is set to a fixed value, dropping what the image and later steps add",
                                (step[:200],), "Prepend to the variable (ENV PATH=/opt/venv/bin:${PATH})."))
    if not findings:
        findings.append(Finding("export.dockerfile", Status.PASS, "the Dockerfile installs through compat, checks the set and carries the oneCCL environment"))
    return findings
