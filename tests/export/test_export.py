"""compat export: PyTorchJob / TrainJob manifests validated against the REAL CRD schemas (../shared/k8s, from
kubeflow/training-operator), the Dockerfile text, and --validate on the seed guide's own PyTorchJob."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from packaging.version import Version

from compatmatrix.export.dockerfile import DockerfileShape
from compatmatrix.export.k8s import JobShape, ShapeError, pod_threads, pytorchjob, trainjob
from compatmatrix.export.validate import validate_dockerfile, validate_manifest
from compatmatrix.findings import Status
from compatmatrix.matrix.load import load_matrix
from compatmatrix.render.dockerfile import dockerfile_text
from compatmatrix.render.manifest import load_documents, manifest_text

from ..conftest import SHARED

K8S = SHARED / "k8s"
DATA = Path(__file__).parents[1] / "data" / "export"


def crd_schema(file: str, version: str) -> dict:
    path = K8S / file
    if not path.is_file():
        pytest.skip(f"the CRD schemas are not next to the repository ({path})")
    crd = yaml.safe_load(path.read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """The CRD schema with additionalProperties: false wherever it lists properties (Kubernetes prunes unknown fields
    silently; here an unknown field is a test failure, so a misspelt key cannot pass)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


SHAPES = [
    dict(nnodes=1, nproc_per_node=1, cpu="4", memory="8Gi"),
    dict(nnodes=2, nproc_per_node=2, cpu="8", memory="16Gi"),
    dict(nnodes=4, nproc_per_node=2, cpu="56", memory="128Gi", threads_per_core=2, ccl=True),
    dict(nnodes=3, nproc_per_node=4, cpu="7500m", memory="30000Mi", ccl=True, preflight=False),
]


def shape(**kw) -> JobShape:
    base = dict(name="bert-ddp", image="registry.example/train:1", command=("train.py", "--ddp_backend", "gloo"))
    return JobShape(**{**base, **kw})


@pytest.mark.parametrize("kw", SHAPES, ids=lambda kw: f"{kw['nnodes']}x{kw['nproc_per_node']}-{kw['cpu']}")
def test_generated_pytorchjob_validates_against_the_crd(kw):
    manifest = pytorchjob(shape(**kw))
    document = yaml.safe_load(manifest_text(manifest.document, manifest.notes))  # what the user gets, read back
    jsonschema.validate(document, strict(crd_schema("kubeflow.org_pytorchjobs.yaml", "v1")))
    replicas = document["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {}).get("replicas", 0) == kw["nnodes"] - 1
    assert document["spec"]["nprocPerNode"] == str(kw["nproc_per_node"])
    for spec in replicas.values():
        assert spec["restartPolicy"] == "Never"
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert container["name"] == "pytorch"
        assert container["resources"]["requests"] == container["resources"]["limits"] == {"cpu": kw["cpu"], "memory": kw["memory"]}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert int(env["OMP_NUM_THREADS"]) >= 1 and ("CCL_WORKER_COUNT" in env) is bool(kw.get("ccl"))
        script = container["args"][1]
        assert ("doctor --live" in script) is kw.get("preflight", True)
        assert container["args"][-3:] == ["train.py", "--ddp_backend", "gloo"]
    # the generated manifest passes compat's own rules
    matrix = load_matrix()
    findings = validate_manifest(document, matrix, Version("5.23.0"), Version("1.15.0"), Version("2.13.0"))
    not_passed = {f.id for f in findings if f.status is not Status.PASS}
    assert not_passed == (set() if kw.get("preflight", True) else {f"export.pod-{r.lower()}-preflight" for r in replicas})


TRAINER_TAGS = {"v2.0": "v2.0.1", "v2.1": "v2.1.0", "v2.2": "v2.2.1", "v2.3": "v2.3.0"}


def runtime_parts(tag: str) -> tuple[str, set[str]]:
    """The torch-distributed runtime's trainer job and its containers, read from the release's own runtime file."""
    path = K8S / "trainer" / tag / "torch_distributed.yaml"
    if not path.is_file():
        pytest.skip(f"the Trainer runtimes are not next to the repository ({path})")
    (job,) = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]["replicatedJobs"]
    return job["name"], {c["name"] for c in job["template"]["spec"]["template"]["spec"]["containers"]}


@pytest.mark.parametrize("version", sorted(TRAINER_TAGS))
@pytest.mark.parametrize("kw", SHAPES[:3], ids=lambda kw: f"{kw['nnodes']}x{kw['nproc_per_node']}")
def test_generated_trainjob_validates_against_its_releases_crd_and_aims_at_the_runtimes_parts(kw, version):
    from compatmatrix.export.releases import by_version, override_parts

    release = by_version(version)
    manifest = trainjob(shape(**kw), release)
    document = yaml.safe_load(manifest_text(manifest.document, manifest.notes))
    tag = TRAINER_TAGS[version]
    jsonschema.validate(document, strict(crd_schema(f"trainer/{tag}/trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")))
    trainer = document["spec"]["trainer"]
    assert trainer["numNodes"] == kw["nnodes"] and trainer["numProcPerNode"] == kw["nproc_per_node"]
    assert trainer["resourcesPerNode"]["requests"] == trainer["resourcesPerNode"]["limits"]
    assert document["spec"]["runtimeRef"]["name"] == "torch-distributed"
    job, containers = runtime_parts(tag)
    parts = override_parts(release.override, document["spec"])
    assert parts, f"no {release.override} in the TrainJob for {version}"
    for target, pod, _ in parts:  # the override reaches the runtime's own job and container (the old one named trainer-node/trainer)
        assert target == job
        assert {c["name"] for c in pod["containers"]} <= containers
        assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
        assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"


def test_the_thread_plan_counts_physical_cores_of_the_pod():
    # 56 CPU units as hyperthreads = 28 cores; 2 ranks with one oneCCL worker core each: 13 threads per rank
    assert pod_threads(shape(nnodes=1, nproc_per_node=2, cpu="56", memory="1Gi", threads_per_core=2, ccl=True))["OMP_NUM_THREADS"] == "13"
    # the same CPUs counted as cores, no ccl: 28 per rank
    assert pod_threads(shape(nnodes=1, nproc_per_node=2, cpu="56", memory="1Gi"))["OMP_NUM_THREADS"] == "28"
    # a fractional quota pays for whole cores only
    assert pod_threads(shape(nnodes=1, nproc_per_node=1, cpu="7500m", memory="1Gi"))["OMP_NUM_THREADS"] == "7"


@pytest.mark.parametrize("bad, word", [
    (dict(name="Bert_DDP"), "--name"), (dict(cpu="8Gi"), "--cpu"), (dict(cpu="0"), "--cpu"), (dict(memory="lots"), "--memory"),
    (dict(command=()), "training command"), (dict(namespace="Not OK"), "--namespace"),
])
def test_shapes_that_cannot_give_a_valid_manifest_are_refused_by_option(bad, word):
    with pytest.raises(ShapeError, match=word):
        pytorchjob(shape(**{**dict(nnodes=2, nproc_per_node=1, cpu="4", memory="8Gi"), **bad}))


def test_validate_reports_the_seed_guides_own_pytorchjob():
    document = load_documents((DATA / "seed_pytorchjob.yaml").read_text())[0]
    jsonschema.validate(document, crd_schema("kubeflow.org_pytorchjobs.yaml", "v1"))  # valid for the API server...
    matrix = load_matrix()
    found = {(f.id, f.status) for f in validate_manifest(document, matrix, Version("5.23.0"), Version("1.15.0"), Version("2.13.0"))}
    # ... and still broken: what the guide's reader meets with today's transformers
    assert ("export.worker-threads", Status.FAIL) in found  # OMP_NUM_THREADS listed with no value
    assert ("export.worker-image", Status.FAIL) in found  # the placeholder image ":"
    assert ("export.worker-command", Status.FAIL) in found  # --no_cuda and --use_ipex rejected, ccl gone
    assert ("export.worker-restart", Status.WARN) in found and ("export.nproc", Status.WARN) in found
    assert ("export.worker-preload", Status.WARN) in found
    assert ("export.worker-shm", Status.PASS) in found  # this guide mounts /dev/shm
    # with the versions the guide was written for, --no_cuda is only a rewrite (4.35 still accepts it)
    old = [f for f in validate_manifest(document, matrix, Version("4.35.2"), Version("0.24.0"), Version("2.1.0")) if f.id == "export.worker-command"]
    assert old and all(f.status is Status.WARN for f in old)


def test_validate_finds_a_dev_shm_volume_that_is_never_mounted():
    manifest = pytorchjob(shape(nnodes=2, nproc_per_node=1, cpu="4", memory="8Gi"))
    document = copy.deepcopy(manifest.document)
    for spec in document["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["volumeMounts"] = []  # Intel's chart: the volume defined, never mounted
        spec["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    found = {f.id: f for f in validate_manifest(document, load_matrix(), Version("5.23.0"), Version("1.15.0"), Version("2.13.0"))}
    assert found["export.master-shm"].status is Status.FAIL and "defined but not mounted" in found["export.master-shm"].summary
    assert found["export.worker-qos"].status is Status.WARN and "requests 2 / limits 4" in found["export.worker-qos"].summary


def test_a_document_that_is_not_a_job_is_one_finding():
    found = validate_manifest({"apiVersion": "v1", "kind": "Pod"}, load_matrix(), Version("5.23.0"), None, None)
    assert [(f.id, f.status) for f in found] == [("export.kind", Status.FAIL)]


def test_generated_dockerfile_installs_checks_and_carries_the_environment():
    text = dockerfile_text(DockerfileShape(("torch==2.13.0+cpu", "transformers==5.23.0"), "stock", "3.11", hosts=("pypi", "pytorch-cpu")))
    assert "compat install --python /opt/train/bin/python --profile stock --yes torch==2.13.0+cpu transformers==5.23.0" in text
    assert text.index("ENV PATH=/opt/train/bin:${PATH}") < text.index("compat env")  # the PATH lesson
    assert "ARG COMPAT_INDEX_PYTORCH_CPU=" in text and "ENV BASH_ENV=/opt/train/compat-env.sh" in text
    assert [f.status for f in validate_dockerfile(text)] == [Status.PASS]
    offline = dockerfile_text(DockerfileShape(("torch==2.13.0+cpu",), "stock", "3.11", wheelhouse="wheels"))
    assert "COPY wheels/ /opt/wheelhouse/" in offline and "--offline --wheelhouse /opt/wheelhouse" in offline and "apt-get" not in offline.split("# offline")[0]


def test_validate_dockerfile_names_unpinned_stacks_and_frozen_paths():
    text = "FROM python:3.10\nRUN pip install torch intel-extension-for-pytorch oneccl_bind_pt -f https://x\nENV PATH=/opt/venv/bin\n"
    found = {f.id: f.status for f in validate_dockerfile(text)}
    assert found == {"export.dockerfile-pins": Status.FAIL, "export.dockerfile-check": Status.WARN,
                     "export.dockerfile-setvars": Status.FAIL, "export.dockerfile-path": Status.WARN}
