"""The job contract (jobspec.JobSpec, export/contract.build_job) and compat export skypilot (export/skypilot.py): the
builder's facts for every engine; the task YAML parses back to the document; its setup and run are correct bash
(bash -n) that carry every word of a hostile training command back as given, with the CPU rank count and SkyPilot's
rendezvous (never SKYPILOT_NUM_GPUS_PER_NODE); and, marked integration, the YAML validates against SkyPilot's OWN task
and resources schemas (the skypilot package from PyPI in a cached test venv, tests/real_envs.py) for 1 and 4 nodes.
Nothing here talks to a cloud."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compatmatrix.errors import UsageError
from compatmatrix.jobspec import KUBEFLOW_MASTER, SKYPILOT_MASTER, SLURM_MASTER, HeldSet, JobSpec, Resources, Threads
from compatmatrix.options import JobArgs
from compatmatrix.values import UnwritableValue

from ..hostile_strings import hostile

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")

CCL_SET = ("torch==2.7.1", "intel-extension-for-pytorch==2.7.0", "oneccl-bind-pt==2.7.0", "transformers==4.56.2", "accelerate==1.10.1")
STOCK_SET = ("torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0")


def planned_set(requirements, profile):
    from compatmatrix.options import Sources, Wanted
    from compatmatrix.planning import load, plan_for
    from compatmatrix.target import Platform, PythonTarget

    return plan_for(load(None), Wanted(tuple(requirements), (), profile, ()), Sources(), PythonTarget.parse("3.11"),
                    Platform.from_tag("manylinux_2_28_x86_64"))


@pytest.fixture(scope="module")
def ccl_planned():
    return planned_set(CCL_SET, "ddp-ccl")


@pytest.fixture(scope="module")
def stock_planned():
    return planned_set(STOCK_SET, "stock")


def job(command=("train.py", "--ddp_backend", "gloo"), nnodes=2, ranks=3, cpu="8", memory="32", preflight=True, name="compat-train"):
    return JobArgs(nnodes, ranks, None, cpu, memory, name, None, "2Gi", 1, preflight, False, tuple(command))


# --- the contract ------------------------------------------------------------------------------------------------------


def test_the_contract_holds_every_fact_an_engine_needs(ccl_planned):
    from compatmatrix.export.contract import build_job

    spec = build_job(ccl_planned, job(("python", "train.py", "--bf16")), "skypilot", "/venv/bin/python")
    assert (spec.nodes, spec.ranks_per_node, spec.world_size, spec.backend, spec.launcher) == (2, 3, 6, "ccl", "torchrun")
    assert spec.master == SKYPILOT_MASTER and spec.env_step and spec.preflight
    assert spec.command[:2] == ("train.py", "--bf16")  # torchrun runs the script with the venv's Python
    if spec.command[2:]:  # translated for the set's transformers, each change in a note
        assert any(note.startswith("training command for transformers 4.56.2") for note in spec.notes)
    assert spec.threads is not None and spec.threads.ccl_workers >= 1
    names = [name for name, _ in spec.exports]
    assert names == ["OMP_NUM_THREADS", "CCL_WORKER_COUNT", "KMP_BLOCKTIME", "OMP_PROC_BIND", "OMP_PLACES", "CCL_ATL_TRANSPORT"]
    assert spec.set.read_from is None and spec.set.profile == "ddp-ccl" and "torch==2.7.1+cpu" in spec.set.pins
    assert spec.resources == Resources("8", "32", 1, "2Gi")


@pytest.mark.parametrize("engine, master, launcher, env_step", [
    ("pytorchjob", KUBEFLOW_MASTER, "torchrun", False), ("trainjob", KUBEFLOW_MASTER, "torchrun", False),
    ("sbatch", SLURM_MASTER, "srun", True), ("skypilot", SKYPILOT_MASTER, "torchrun", True)])
def test_each_engine_gets_its_master_and_launcher(stock_planned, engine, master, launcher, env_step):
    from compatmatrix.export.contract import build_job

    spec = build_job(stock_planned, job(("python", "train.py")), engine, "/venv/bin/python")
    assert (spec.master, spec.launcher, spec.env_step, spec.backend) == (master, launcher, env_step, "gloo")
    # torchrun runs the script itself ('python' dropped); srun runs what each rank runs, as given
    assert spec.command == (("python", "train.py") if launcher == "srun" else ("train.py",))
    assert (spec.threads is None) == (launcher == "srun")  # Slurm plans on the node (compat env, compat launch)
    assert "CCL_ATL_TRANSPORT" not in dict(spec.exports)


def test_the_set_is_read_from_the_environment_when_python_holds_it(stock_planned):
    """The issue's defect: --python ENV named a set ENV does not hold. FIXTURE snapshot: ENV holds torch 2.13.0+cpu and
    transformers, no accelerate."""
    from compatmatrix.environment.from_pins import snapshot_from_pins
    from compatmatrix.export.contract import build_job
    from compatmatrix.target import Platform, PythonTarget

    env = snapshot_from_pins({"torch": "2.13.0+cpu", "transformers": "5.24.0"}, PythonTarget.parse("3.11").version,
                             Platform.from_tag("manylinux_2_28_x86_64"), "/env/bin/python")
    spec = build_job(stock_planned, job(), "sbatch", "/env/bin/python", (), env)
    assert spec.set == HeldSet(("torch==2.13.0+cpu", "transformers==5.24.0", "no accelerate"), "3.11", "/env/bin/python", "stock")
    assert spec.set.installable == ("torch==2.13.0+cpu", "transformers==5.24.0")
    assert any("/env/bin/python holds this set" in note for note in spec.notes)
    sky = build_job(stock_planned, job(), "skypilot", None, (), env)  # the nodes get the set it holds, in their own venv
    assert sky.set == spec.set and any("read from /env/bin/python) into ~/compat-train" in note for note in sky.notes)
    empty = snapshot_from_pins({}, PythonTarget.parse("3.11").version, Platform.from_tag("manylinux_2_28_x86_64"), "/env/bin/python")
    assert build_job(stock_planned, job(), "skypilot", "/env/bin/python", (), empty).set.read_from is None  # not filled yet: resolved


def test_export_skypilot_with_python_installs_the_set_that_environment_holds(monkeypatch, capsys):
    """The issue's defect, for SkyPilot: --python ENV holding torch 2.13.0+cpu gives a setup that installs 2.13.0+cpu,
    not the newest torch the matrix resolves. FIXTURE: ENV's probe answers Python 3.11 and those pins (no such
    interpreter here)."""
    from compatmatrix import planning
    from compatmatrix.cli import main
    from compatmatrix.environment import snapshot as snapshots
    from compatmatrix.environment.from_pins import snapshot_from_pins
    from compatmatrix.target import Platform, PythonTarget

    linux = Platform.from_tag("manylinux_2_28_x86_64")
    held = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "accelerate": "1.15.0"}
    monkeypatch.setattr(planning, "target_of", lambda target, snapshot=None: (PythonTarget.parse("3.11"), linux))
    monkeypatch.setattr(snapshots, "take_snapshot", lambda interpreter: snapshot_from_pins(held, PythonTarget.parse("3.11").version, linux, interpreter))
    code = main(["export", "skypilot", "--profile", "stock", "--python", "/env/bin/python", "--cpu", "8", "--memory", "32", "--", "train.py"])
    out = capsys.readouterr().out
    assert code == 0
    setup = yaml.safe_load(out)["setup"]
    install = next(line for line in setup.splitlines() if " install --python " in line)
    assert install.endswith("--profile stock --yes torch==2.13.0+cpu transformers==5.24.0 accelerate==1.15.0"), install
    assert "/env/bin/python" not in setup  # this machine's path means nothing on a node


def test_a_launcher_as_the_training_command_is_refused_by_engine(stock_planned):
    from compatmatrix.export.contract import build_job

    with pytest.raises(UsageError, match="not torchrun"):
        build_job(stock_planned, job(("torchrun", "train.py")), "skypilot")
    with pytest.raises(UsageError, match="not accelerate launch"):
        build_job(stock_planned, job(("accelerate", "launch", "train.py")), "sbatch", "/venv/bin/python")


def test_threads_write_the_plan_in_the_order_every_export_has():
    assert Threads(4, 2).variables() == (("OMP_NUM_THREADS", "4"), ("CCL_WORKER_COUNT", "2"), ("KMP_BLOCKTIME", "1"),
                                          ("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores"))
    assert [name for name, _ in Threads(4).variables()] == ["OMP_NUM_THREADS", "KMP_BLOCKTIME", "OMP_PROC_BIND", "OMP_PLACES"]


# --- the SkyPilot task ------------------------------------------------------------------------------------------------


def spec_of(command, python="/venv/bin/python", exports=(("OMP_NUM_THREADS", "2"),), nodes=2, ranks=3, preflight=True, profile="stock"):
    return JobSpec(engine="skypilot", name="job", nodes=nodes, ranks_per_node=ranks, backend="gloo", threads=Threads(2), master=SKYPILOT_MASTER,
                   exports=tuple(exports), env_step=True, preflight=preflight, command=tuple(command), launcher="torchrun",
                   set=HeldSet(("torch==2.13.0+cpu", "no accelerate"), "3.11", None, profile), python=python, compat=(),
                   resources=Resources("8+", "32+"))


def written(spec):
    from compatmatrix.export.skypilot import task
    from compatmatrix.render.manifest import manifest_text

    document, notes = task(spec)
    return document, manifest_text(document, notes)


def run_task_script(script, tmp_path, rank=1):
    """The run: script under bash as SkyPilot runs it on node ``rank`` of two (SKYPILOT_NODE_IPS, one address a line),
    with a FIXTURE compat in $HOME/compat/bin (prints its arguments as JSON on stderr, exports nothing) and the FIXTURE
    python the spec names (prints its arguments as JSON on stdout)."""
    path = tmp_path / "run.sh"
    path.write_text(script, encoding="utf-8")
    parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert parsed.returncode == 0, parsed.stderr
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.8\n", "SKYPILOT_NODE_RANK": str(rank),
           "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "0"}
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=60, env=env)


def fixture_programs(tmp_path):
    (tmp_path / "compat" / "bin").mkdir(parents=True, exist_ok=True)
    compat = tmp_path / "compat" / "bin" / "compat"
    compat.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]), file=sys.stderr)\n")
    compat.chmod(0o755)
    python = tmp_path / "fixture python"  # a space in the path: one quoted word
    python.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    python.chmod(0o755)
    return str(python)


def test_the_task_parses_back_and_runs_torchrun_with_the_cpu_ranks(tmp_path):
    python = fixture_programs(tmp_path)
    document, text = written(spec_of(["train.py", "--lr", "1e-4"], python=python))
    assert yaml.safe_load(text) == document  # SkyPilot reads it with PyYAML
    from compatmatrix.render.manifest import load_documents

    assert load_documents(text) == [document]
    assert document["num_nodes"] == 2 and document["resources"] == {"cpus": "8+", "memory": "32+"}
    assert document["envs"] == {"OMP_NUM_THREADS": "2"}
    code = [line for line in document["run"].splitlines() if not line.lstrip().startswith("#")]
    assert not any("SKYPILOT_NUM_GPUS_PER_NODE" in line for line in code)  # the trap of SkyPilot's own recipe
    done = run_task_script(document["run"], tmp_path)
    assert done.returncode == 0, done.stderr
    env_call, preflight = (json.loads(line) for line in done.stderr.splitlines() if line.startswith("["))
    assert env_call[:2] == ["env", "--python"] and env_call[env_call.index("--master-addr") + 1] == "10.0.0.7"
    assert preflight[:2] == ["doctor", "--live"] and preflight[preflight.index("--node-rank") + 1] == "1"
    assert json.loads(done.stdout) == ["-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "3", "--node_rank", "1",
                                       "--master_addr", "10.0.0.7", "--master_port", "29500", "train.py", "--lr", "1e-4"]


def test_a_failing_preflight_ends_the_job_before_training(tmp_path):
    python = fixture_programs(tmp_path)
    compat = tmp_path / "compat" / "bin" / "compat"
    compat.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(1 if sys.argv[1] == 'doctor' else 0)\n")
    document, _ = written(spec_of(["train.py"], python=python))
    done = run_task_script(document["run"], tmp_path)
    assert done.returncode == 1 and "compat preflight failed" in done.stderr and done.stdout == ""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(hostile(surrogates=False), min_size=1, max_size=4))
def test_a_hostile_training_command_comes_back_as_given(tmp_path, words):
    python = fixture_programs(tmp_path)
    spec = spec_of(["train.py", *words], python=python)
    if any("\0" in w for w in words):
        with pytest.raises(UnwritableValue, match="NUL"):
            written(spec)
        return
    document, text = written(spec)
    assert yaml.safe_load(text) == document  # the block scalar holds the script exactly
    for script in (document["setup"], document["run"]):
        (tmp_path / "s.sh").write_text(script, encoding="utf-8")
        parsed = subprocess.run(["bash", "-n", str(tmp_path / "s.sh")], capture_output=True, text=True, timeout=30)
        assert parsed.returncode == 0, parsed.stderr
    done = run_task_script(document["run"], tmp_path, rank=0)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[12:] == ["train.py", *words]


def test_setup_installs_the_set_with_compat_into_the_training_venv(tmp_path):
    """setup under bash with FIXTURE compat (prints its arguments) and a training venv that exists: compat install
    gets the installable pins and the profile, each one word."""
    python = fixture_programs(tmp_path)
    document, _ = written(spec_of(["train.py"], python=python, profile="stock"))
    path = tmp_path / "setup.sh"
    path.write_text(document["setup"], encoding="utf-8")
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.splitlines()[-1]) == ["install", "--python", python, "--profile", "stock", "--yes", "torch==2.13.0+cpu"]


@pytest.mark.parametrize("cpu, memory, word", [("7500m", "32", "--cpu"), ("0", "32", "--cpu"), ("8", "16Gi", "--memory"), ("8", "x", "--memory")])
def test_resources_skypilot_would_not_take_are_refused_by_option(cpu, memory, word):
    from compatmatrix.export.skypilot import ResourceError, check_resources

    with pytest.raises(ResourceError, match=word):
        check_resources(cpu, memory)


def test_export_skypilot_refuses_a_bad_memory_with_exit_2(capsys):
    from compatmatrix.cli import main

    code = main(["export", "skypilot", *STOCK_SET, "--profile", "stock", "--python-version", "3.11", "--cpu", "8", "--memory", "16Gi", "--", "train.py"])
    assert code == 2 and "--memory '16Gi'" in capsys.readouterr().err


# --- SkyPilot's own schema (integration) ------------------------------------------------------------------------------

VALIDATE = """
import json, sys
import yaml
from sky.utils import common_utils, schemas
import sky

config = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")
common_utils.validate_schema(config["resources"], schemas.get_resources_schema(), "Invalid resources YAML: ")
task = sky.Task.from_yaml_config(config)  # SkyPilot's own reading (envs, resources, num_nodes), no cloud
(resources,) = task.resources
print(json.dumps({"num_nodes": task.num_nodes, "cpus": resources.cpus, "memory": resources.memory, "run": task.run, "envs": task.envs}))
"""


@pytest.mark.parametrize("command, starter", [(("accelerate", "launch", "train.py"), "accelerate launch"), (("mpirun", "-n", "2", "train.py"), "mpirun"),
                                             (("python", "-m", "deepspeed.launcher.runner", "train.py"), "deepspeed")])
def test_a_rank_starter_under_the_nodes_torchrun_is_refused(stock_planned, command, starter):
    """Hostile review: skypilot wrote torchrun ... --no_python accelerate launch train.py (launchers nested on every rank)."""
    from compatmatrix.export.service import skypilot

    with pytest.raises(UsageError, match=f"torchrun starts every rank itself: the training command is what each rank runs, not {starter}"):
        skypilot(stock_planned, job(command))


def test_more_ranks_than_vcpus_are_refused(stock_planned):
    """Hostile review: --nproc-per-node 100 on --cpu 8 wrote 100 ranks with OMP_NUM_THREADS=1 and no note."""
    from compatmatrix.export.service import skypilot

    with pytest.raises(UsageError, match=r"100 ranks per node do not fit in --cpu 8\+"):
        skypilot(stock_planned, job(ranks=100, cpu="8+"))
    document, _notes = skypilot(stock_planned, job(ranks=8, cpu="8"))
    assert document["num_nodes"] == 2


@pytest.fixture(scope="module")
def skypilot_python():
    """SkyPilot 0.14.1 from PyPI (no cloud extra) in the cached test venv (tests/real_envs.py, built once under its lock)."""
    from ..conftest import real_env_or_skip

    return real_env_or_skip("skypilot")


@pytest.mark.integration
@pytest.mark.parametrize("nodes", [1, 4])
def test_the_task_validates_against_skypilots_own_schema(skypilot_python, tmp_path, capsys, nodes):
    from compatmatrix.cli import main

    code = main(["export", "skypilot", *CCL_SET, "--profile", "ddp-ccl", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                 "--nnodes", str(nodes), "--nproc-per-node", "2", "--cpu", "16+", "--memory", "64", "--", "train.py", "--msg", "it's \"$HOME\"\n"])
    text = capsys.readouterr().out
    assert code == 0
    path = tmp_path / "task.yaml"
    path.write_text(text, encoding="utf-8")
    done = subprocess.run([str(skypilot_python), "-c", VALIDATE, str(path)], capture_output=True, text=True, timeout=600,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})  # SkyPilot keeps its state under $HOME/.sky
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.splitlines()[-1])
    assert (read["num_nodes"], read["cpus"], read["memory"]) == (nodes, "16+", "64")
    assert read["run"] == yaml.safe_load(text)["run"] and read["envs"]["CCL_ATL_TRANSPORT"] == "ofi"
    bad = text.replace(f"num_nodes: {nodes}", "num_nodes: two")
    path.write_text(bad, encoding="utf-8")
    refused = subprocess.run([str(skypilot_python), "-c", VALIDATE, str(path)], capture_output=True, text=True, timeout=600,
                             env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert refused.returncode != 0 and "num_nodes" in refused.stderr  # the schema does judge: a wrong type is refused
