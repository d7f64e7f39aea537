"""`compat export` as users run it (real subprocesses): every format for a resolved set, read back the way its consumer
reads it -- the PyTorchJob / TrainJob YAML against the REAL CRD schemas (../shared/k8s, as tests/export/test_export.py), the
Dockerfile's pins through compat install, the pylock.toml through compat resolve/check/install -r -- and --validate on
the seed guide's own PyTorchJob. `compat install --print` stays an alias of `compat export requirements|constraints|
pip-command`: the same bytes.
"""

from __future__ import annotations

import json
import shlex
import sys

import jsonschema
import pytest
import yaml

from ..conftest import ROOT, run_compat
from .test_export import DATA, crd_schema, strict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "export-validate-v1.json").read_text())
JOB = ("--image", "registry.example/train:1", "--cpu", "8", "--memory", "16Gi")


def export(*args, code=0):
    done = run_compat("export", *args)
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return done


# --- requirements / constraints / pip-command: the --print alias ----------------------------------------------------


@pytest.mark.parametrize("kind", ["requirements", "constraints", "pip-command"])
@pytest.mark.parametrize("args", [
    ("--python-version", "3.11"),
    ("--python-version", "3.10", "--profile", "stock", "--index", "pytorch-cpu=https://mirror.example/cpu"),
    ("--python-version", "3.8", "torch==2.4.0", "--with", "ccl"),
    ("--python-version", "3.11", "--profile", "stock", "--torch-from-pypi"),
], ids=["ddp-ccl", "stock-mirror", "pins", "torch-from-pypi"])
def test_install_print_is_an_alias_of_export(kind, args):
    exported = export(kind, *args)
    printed = run_compat("install", "--print", kind, *args)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == exported.stdout and printed.stderr == exported.stderr


def test_export_requirements_as_before():
    text = export("requirements", "--python-version", "3.11").stdout
    assert text.splitlines() == [
        "# compat install plan: Python 3.11, linux_x86_64",
        "# no --hash lines: pip would then need hashes for every dependency; compat download -d DIR writes them all",
        "--index-url https://pypi.org/simple/",
        "--extra-index-url https://download.pytorch.org/whl/cpu",
        "--extra-index-url https://pytorch-extension.intel.com/release-whl/stable/cpu/us/",
        "torch==2.7.0+cpu",
        "intel-extension-for-pytorch==2.7.0",
        "oneccl-bind-pt==2.7.0+cpu",
        "transformers==5.0.0",
        "accelerate==1.12.0",
    ]


def test_requirements_may_stand_after_the_options():
    before = export("constraints", "torch==2.13.0", "--profile", "stock", "--python-version", "3.11").stdout
    after = export("constraints", "--profile", "stock", "--python-version", "3.11", "torch==2.13.0").stdout
    assert before == after and "torch==2.13.0+cpu" in before


def test_a_conflict_is_exit_1_with_the_reasons():
    done = export("requirements", "--python-version", "3.10", "torch==1.12.1", "oneccl_bind_pt==1.12.0", code=1)
    assert done.stdout == "" and "NO SET" in done.stderr and "What would work" in done.stderr


@pytest.mark.parametrize("args, message", [
    ((), "needs a FORMAT or --validate FILE"),
    (("yaml",), "'yaml' is not an export format"),
    (("dockerfile", "--nnodes", "2"), "--nnodes goes with compat export pytorchjob, not dockerfile"),
    (("pytorchjob", "--base", "x", *JOB, "--", "t.py"), "--base goes with compat export dockerfile, not pytorchjob"),
    (("requirements", "--json"), "--json goes with --validate"),
    (("requirements", "--", "train.py"), "Only compat export pytorchjob, sbatch, skypilot and ray take a training command"),
    (("pylock", "--validate", "x.yaml"), "takes no FORMAT"),
    (("--validate", "x.yaml", "--nproc-per-node", "2"), "--nproc-per-node goes with compat export pytorchjob, not --validate"),
    (("pytorchjob", "--cpu", "8", "--memory", "1Gi", "--", "t.py"), "needs --image"),
    (("pytorchjob", "--image", "i:1", "--memory", "1Gi", "--", "t.py"), "needs --cpu"),
    (("pytorchjob", *JOB), "No training command"),
    (("pytorchjob", *JOB, "--", "python", "-c", "x"), "torchrun cannot run python -c"),
    (("pytorchjob", *JOB, "--", "torchrun", "--nproc-per-node", "2", "t.py"), "The pods start torchrun themselves"),
    # torchrun as the launchers registry knows it: its other module, and an interpreter named with its version
    (("pytorchjob", *JOB, "--", "python3.11", "-m", "torch.distributed.launch", "t.py"), "The pods start torchrun themselves"),
    (("pytorchjob", *JOB, "--", "/usr/bin/python3", "-m", "torch.distributed.run", "t.py"), "The pods start torchrun themselves"),
    (("pytorchjob", *JOB, "--name", "Bad_Name", "--", "t.py"), "--name 'Bad_Name' is not a DNS-1035 label"),
    (("pytorchjob", "--image", "i:1", "--cpu", "8Gi", "--memory", "1Gi", "--", "t.py"), "--cpu '8Gi' is not a CPU quantity"),
    (("pytorchjob", *JOB, "--python-version", "3.11", "--python", "/usr/bin/python3", "--", "t.py"), "not allowed with argument"),
])
def test_usage_errors_are_one_sentence_and_exit_2(args, message):
    done = run_compat("export", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


# --- pytorchjob / trainjob --------------------------------------------------------------------------------------------


def _job(*args):
    text = export("pytorchjob", *args).stdout
    assert text.startswith("# ")
    return text, yaml.safe_load(text)


def _containers(document):
    return [spec["template"]["spec"]["containers"][0] for spec in document["spec"]["pytorchReplicaSpecs"].values()]


def test_pytorchjob_for_the_ccl_set_validates_against_the_crd_and_translates_the_command():
    text, document = _job("--python-version", "3.11", "--nnodes", "3", "--nproc-per-node", "2", *JOB, "--threads-per-core", "2",
                          "--", "python", "run_qa.py", "--no_cuda", "--ddp_backend", "ccl", "--use_ipex", "--bf16")
    jsonschema.validate(document, strict(crd_schema("kubeflow.org_pytorchjobs.yaml", "v1")))
    assert document["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2 and document["spec"]["nprocPerNode"] == "2"
    for container in _containers(document):
        env = {e["name"]: e["value"] for e in container["env"]}
        # the set has oneccl_bind_pt: worker cores set aside, ofi for torchrun; 8 CPUs as hyperthreads = 4 cores
        assert env["CCL_WORKER_COUNT"] == "1" and env["CCL_ATL_TRANSPORT"] == "ofi" and env["OMP_NUM_THREADS"] == "1"
        # ddp-ccl on Python 3.11 is transformers 5.0.0: --no_cuda became --use_cpu, --use_ipex is gone; python dropped
        assert container["args"][2:] == ["compat-job", "run_qa.py", "--use_cpu", "--ddp_backend", "ccl", "--bf16"]
        assert 'exec torchrun --nproc_per_node "2" "$@"' in container["args"][1]
    assert "# training command: 'python' dropped: torchrun runs run_qa.py with the image's Python itself" in text
    assert "# training command for transformers 5.0.0: --no_cuda -> --use_cpu: " in text
    assert "# training command for transformers 5.0.0: --use_ipex -> (dropped): " in text
    assert "torch==2.7.0+cpu, intel-extension-for-pytorch==2.7.0, oneccl-bind-pt==2.7.0+cpu" in text


def test_pytorchjob_of_a_set_without_the_bindings_has_no_ccl_settings():
    _, document = _job("--python-version", "3.11", "--profile", "stock", *JOB, "--no-preflight", "--", "train.py", "--ddp_backend", "gloo")
    jsonschema.validate(document, strict(crd_schema("kubeflow.org_pytorchjobs.yaml", "v1")))
    (container,) = _containers(document)
    names = {e["name"] for e in container["env"]}
    assert not names & {"CCL_WORKER_COUNT", "CCL_ATL_TRANSPORT"} and "doctor --live" not in container["args"][1]
    assert container["args"][2:] == ["compat-job", "train.py", "--ddp_backend", "gloo"]


def test_a_program_that_is_not_a_script_runs_under_torchrun_no_python():
    text, document = _job("--python-version", "3.11", "--profile", "stock", *JOB, "--", "./train.sh", "--epochs", "1")
    assert _containers(document)[0]["args"][2:] == ["compat-job", "--no_python", "./train.sh", "--epochs", "1"]
    assert "is not a .py script, so torchrun runs it with --no_python" in text


def test_a_command_the_set_cannot_run_is_refused_with_the_fix():
    done = export("pytorchjob", "--python-version", "3.11", "--profile", "stock", *JOB, "--", "train.py", "--ddp_backend", "ccl", code=1)
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("compat: error: The training command cannot work with the resolved set (transformers 5.24.0 no longer accepts ccl")
    assert line.endswith("Resolve a set that still runs it (compat export pytorchjob --profile ddp-ccl ...), or change the command (--ddp_backend gloo).")


@pytest.mark.parametrize("version, tag, override", [("v2.0", "v2.0.1", "podSpecOverrides"), ("v2.1", "v2.1.0", "podTemplateOverrides"),
                                                    ("v2.2", "v2.2.1", "runtimePatches"), (None, "v2.3.0", "runtimePatches")])
def test_trainer_v2_writes_the_trainjob_of_the_release(version, tag, override, tmp_path):
    chosen = ("--trainer-version", version) if version else ()
    text, document = _job("--python-version", "3.11", "--profile", "stock", "--nnodes", "2", *JOB, "--trainer-v2", *chosen, "--", "train.py")
    jsonschema.validate(document, strict(crd_schema(f"trainer/{tag}/trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")))
    assert document["kind"] == "TrainJob" and document["spec"]["trainer"]["numNodes"] == 2
    assert set(document["spec"]) == {"runtimeRef", "trainer", override}
    job = tmp_path / "job.yaml"
    job.write_text(text)
    data = json.loads(export("--validate", str(job), "--python-version", "3.11", "--profile", "stock", *chosen, "--show-pods", "--json").stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["ok"] is True and data["summary"]["fail"] == data["summary"]["warn"] == 0 and data["trainer"]["tag"] == tag
    ((pod),) = data["pods"]
    assert pod["count"] == 2 and pod["pod"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"


def test_the_generated_pytorchjob_passes_validate(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(export("pytorchjob", "--python-version", "3.11", "--nnodes", "2", *JOB, "--", "train.py", "--ddp_backend", "ccl").stdout)
    done = export("--validate", str(job), "--python-version", "3.11", "--json")
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["ok"] is True and data["kind"] == "pytorchjob" and data["summary"]["fail"] == data["summary"]["warn"] == 0
    assert data["versions"] == {"transformers": "5.0.0", "accelerate": "1.12.0", "torch": "2.7.0"}


# --- --validate -------------------------------------------------------------------------------------------------------


def test_validate_names_the_problems_of_the_seed_guides_pytorchjob():
    seed = str(DATA / "seed_pytorchjob.yaml")
    text = export("--validate", seed, code=1).stdout
    assert "FAIL export.worker-threads: Worker: OMP_NUM_THREADS is listed with no value" in text
    assert "FAIL export.worker-image: Worker: image ':' is not an image reference" in text
    assert "FAIL export.worker-command: Worker: --no_cuda → --use_cpu, rejected by transformers 5.0.0" in text
    assert "WARN export.worker-restart" in text and "WARN export.nproc" in text
    assert "FAIL export.pod-worker-ranks: Worker (N = 0..3): PET_NPROC_PER_NODE is auto" in text  # the pod the operator runs
    assert text.rstrip().splitlines()[-1].startswith("FAIL: 5 failed")
    data = json.loads(export("--validate", seed, "--json", code=1).stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["ok"] is False and data["versions"]["transformers"] == "5.0.0"
    assert data["versions_from"].startswith("the set compat resolves for Python ") and data["versions_from"].endswith(", profile ddp-ccl")
    failed = {c["id"] for c in data["checks"] if c["status"] == "fail"}
    assert failed == {"export.worker-threads", "export.worker-image", "export.worker-command", "export.pod-worker-ranks"}


def test_validate_takes_the_versions_of_the_resolve_options():
    """With the versions the guide was written for, --no_cuda is only a rewrite (4.35 still takes it)."""
    data = json.loads(export("--validate", str(DATA / "seed_pytorchjob.yaml"), "--json", "--python-version", "3.10", "--profile", "stock",
                             "transformers==4.35.2", "accelerate==0.24.0", "torch==2.1.0", code=1).stdout)
    assert data["versions"] == {"transformers": "4.35.2", "accelerate": "0.24.0", "torch": "2.1.0"}
    commands = [c for c in data["checks"] if c["id"] == "export.worker-command"]
    assert commands and all(c["status"] == "warn" for c in commands)


def test_validate_reads_the_versions_installed_for_python(tmp_path):
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env").torch("2.1.0")
    env.dist("transformers", "4.35.2")
    env.dist("accelerate", "0.24.0")
    data = json.loads(export("--validate", str(DATA / "seed_pytorchjob.yaml"), "--json", "--python", str(env.python), code=1).stdout)
    assert data["versions"] == {"transformers": "4.35.2", "accelerate": "0.24.0", "torch": "2.1.0"}
    assert data["versions_from"].startswith("installed in ")


def test_validate_several_documents_names_each(tmp_path):
    one = export("pytorchjob", "--python-version", "3.11", "--profile", "stock", *JOB, "--name", "one", "--", "train.py").stdout
    seed = (DATA / "seed_pytorchjob.yaml").read_text()
    both = tmp_path / "jobs.yaml"
    both.write_text(one + "---\n" + seed)
    data = json.loads(export("--validate", str(both), "--json", code=1).stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["documents"] == 2 and data["kind"] == "pytorchjob"
    assert any(c["summary"].startswith("PyTorchJob transformers-pytorchjob: Worker: OMP_NUM_THREADS") for c in data["checks"])
    assert all(c["status"] != "fail" for c in data["checks"] if c["summary"].startswith("PyTorchJob one: "))


def test_validate_a_dockerfile_is_detected_by_its_from_line(tmp_path):
    good = export("--validate", str(ROOT / "examples" / "Dockerfile")).stdout
    assert "(dockerfile)" in good and "PASS export.dockerfile" in good
    bad = tmp_path / "Containerfile"
    bad.write_text("# a guide's image\nFROM python:3.10\nRUN pip install torch intel-extension-for-pytorch oneccl_bind_pt -f https://x\n")
    data = json.loads(export("--validate", str(bad), "--json", code=1).stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["kind"] == "dockerfile" and data["versions"] == {} and "export.dockerfile-pins" in {c["id"] for c in data["checks"]}


@pytest.mark.parametrize("content, message", [
    (None, "cannot be read (No such file or directory)"),
    ("folder", "is not a regular file"),
    ("kind: [\n", "is neither a Dockerfile (no FROM line) nor YAML"),
    ("# nothing\n", "holds no YAML document and no FROM line"),
    (b"\xff\xfe", "is not UTF-8 text"),
])
def test_validate_an_unreadable_file_is_exit_2(tmp_path, content, message):
    target = tmp_path / "job.yaml"
    if content == "folder":
        target.mkdir()
    elif isinstance(content, bytes):
        target.write_bytes(content)
    elif content is not None:
        target.write_text(content)
    done = run_compat("export", "--validate", str(target))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_validate_a_document_that_is_not_a_job(tmp_path):
    target = tmp_path / "pod.yaml"
    target.write_text("apiVersion: v1\nkind: Pod\n---\n- a list\n")
    data = json.loads(export("--validate", str(target), "--json", code=1).stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["kind"] == "manifest" and [c["id"] for c in data["checks"]] == ["export.kind", "export.kind"]


# --- dockerfile -------------------------------------------------------------------------------------------------------


def _install_line(text: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith("RUN /opt/compat/bin/compat install ")]
    return shlex.split(line[4:])


def test_dockerfile_installs_the_resolved_pins_which_compat_install_takes_back():
    planned = json.loads(run_compat("install", "--dry-run", "--json", "--python-version", "3.11").stdout)["packages"]
    text = export("dockerfile", "--python-version", "3.11").stdout
    words = _install_line(text)
    pins = [w for w in words if "==" in w]
    assert pins == list(planned.values())  # torch==2.7.0+cpu, ..., the host's local label kept
    assert words[words.index("--profile") + 1] == "ddp-ccl"
    # the pins round-trip: compat install (here --dry-run for the same Python) plans exactly them again
    again = json.loads(run_compat("install", "--dry-run", "--json", "--python-version", "3.11", "--profile", "ddp-ccl", *pins).stdout)
    assert again["packages"] == planned
    assert "ARG BASE=python:3.11-slim" in text
    assert "ARG COMPAT_INDEX_PYPI=" in text and "ARG COMPAT_INDEX_PYTORCH_CPU=" in text and "ARG COMPAT_INDEX_INTEL_CPU_US=" in text
    # ddp-ccl: the image's environment file holds what ccl needs under torchrun (the pods' launcher), as compat env --launcher prints it
    assert "compat env --python /opt/train/bin/python --ranks-per-node ${RANKS_PER_NODE} --launcher torchrun --defaults" in text
    assert text.index("ENV PATH=/opt/train/bin:${PATH}") < text.index("compat env")


def test_dockerfile_options_and_its_own_validation(tmp_path):
    text = export("dockerfile", "--python-version", "3.10", "--profile", "stock", "--ranks-per-node", "4", "--wheelhouse", "wheels").stdout
    assert "ARG BASE=python:3.10-slim" in text and "ARG RANKS_PER_NODE=4" in text
    assert "--launcher" not in text  # stock: no bindings, no ccl launcher settings
    assert "COPY wheels/ /opt/wheelhouse/" in text and " --offline --wheelhouse /opt/wheelhouse " in " ".join(_install_line(text)) + " "
    assert "the wheelhouse is not a folder here yet" in text
    assert "COMPAT_INDEX_" not in text  # offline: no mirrors
    written = tmp_path / "Dockerfile"
    written.write_text(export("dockerfile", "--python-version", "3.11", "--base", "registry.example/python:3.11").stdout)
    assert "ARG BASE=registry.example/python:3.11" in written.read_text()
    assert "PASS export.dockerfile" in export("--validate", str(written)).stdout


def test_dockerfile_without_a_profile_names_the_packages_by_their_pins():
    words = _install_line(export("dockerfile", "--python-version", "3.10", "torch==1.12.1", "ccl").stdout)
    assert "--profile" not in words and [w for w in words if "==" in w] == ["torch==1.12.1+cpu", "oneccl-bind-pt==1.12.100+cpu"]


# --- pylock -----------------------------------------------------------------------------------------------------------


def test_pylock_round_trips_through_resolve_check_and_install(tmp_path):
    lock = tmp_path / "pylock.toml"
    lock.write_text(export("pylock", "--python-version", "3.11").stdout)
    data = tomllib.loads(lock.read_text())
    assert data["lock-version"] == "1.0" and data["created-by"] == "compatmatrix" and data["requires-python"] == "==3.11.*"
    assert {p["name"]: p["version"] for p in data["packages"]} == {
        "torch": "2.7.0+cpu", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0+cpu", "transformers": "5.0.0", "accelerate": "1.12.0"}
    assert data["packages"][0]["index"] == "https://download.pytorch.org/whl/cpu"
    assert "dependencies are not included" in lock.read_text() and "compat download -d DIR writes the full hashed lock" in lock.read_text()
    original = json.loads(run_compat("resolve", "--json", "--python-version", "3.11").stdout)
    back = json.loads(run_compat("resolve", "--json", "--python-version", "3.11", "--profile", "ddp-ccl", "-r", str(lock)).stdout)
    assert back["ok"] and back["packages"] == original["packages"]
    assert {k: v["local_label"] for k, v in back["indexes"].items()} == {k: v["local_label"] for k, v in original["indexes"].items()}
    planned = json.loads(run_compat("install", "--dry-run", "--json", "--python-version", "3.11", "-r", str(lock)).stdout)
    assert planned["packages"] == {p["name"]: f"{p['name']}=={p['version']}" for p in data["packages"]}
    checked = run_compat("check", "-r", str(lock), "--python-version", "3.11", "--json")
    findings = {c["id"]: c for c in json.loads(checked.stdout)["checks"]}
    assert findings["input.files"]["summary"].startswith(f"read {lock}: 5 exact pins")
    assert findings["packages.ccl-torch"]["status"] in ("pass", "warn")


def test_pylock_carries_the_wheels_the_input_lock_names(tmp_path):
    """A pylock.toml given with -r names wheels with their hashes: compat knows them without the network and writes them
    again; a lock whose every package has a wheel is a valid PEP 751 file for packaging's own reader."""
    from packaging.pylock import Pylock

    url = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    given = tmp_path / "in" / "pylock.toml"
    given.parent.mkdir()
    given.write_text('lock-version = "1.0"\ncreated-by = "test"\n[[packages]]\nname = "torch"\nversion = "2.13.0+cpu"\n'
                     'index = "https://download.pytorch.org/whl/cpu"\n[[packages.wheels]]\n'
                     f'url = "{url}"\nhashes = {{sha256 = "{"ab" * 32}"}}\n')
    text = export("pylock", "--python-version", "3.11", "--profile", "stock", "--with", "", "torch==2.13.0", "-r", str(given)).stdout
    data = tomllib.loads(text)
    torch = next(p for p in data["packages"] if p["name"] == "torch")
    assert torch["wheels"] == [{"url": url, "hashes": {"sha256": "ab" * 32}}]
    only_torch = {**data, "packages": [torch]}
    Pylock.from_dict(only_torch).validate()  # packaging's PEP 751 validation
    # entries without a wheel are pins with their index: packaging's strict reader refuses them (said in the header)
    assert "entries without" in text and "[[packages.wheels]] are exact pins with their index" in text


def test_pylock_keeps_exact_pins_of_passthrough_packages(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.13.0\nnumpy==2.1.0\ndatasets>=2\n")
    text = export("pylock", "--python-version", "3.11", "--profile", "stock", "-r", str(requirements)).stdout
    data = tomllib.loads(text)
    numpy = next(p for p in data["packages"] if p["name"] == "numpy")
    assert numpy == {"name": "numpy", "version": "2.1.0", "index": "https://pypi.org/simple/"}
    assert "# left out (not exact pins): datasets>=2" in text


def test_examples_dockerfile_writes_compat_env_as_defaults():
    lines = [line for line in (ROOT / "examples" / "Dockerfile").read_text().splitlines() if "compat env" in line and line.startswith("RUN ")]
    assert len(lines) == 1 and " --defaults " in lines[0]
