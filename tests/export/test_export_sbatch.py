"""compat export sbatch (render/sbatch.py, export/service.sbatch): the script parses (bash -n), carries every word of
the training command back as given, hostile values are refused with one sentence. The script run by a real sbatch is
tests/launchers/test_slurm_real.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compatmatrix.render.sbatch import BatchShape, sbatch_text
from compatmatrix.values import UnwritableValue

from ..conftest import run_compat
from ..hostile_strings import hostile

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")

# FIXTURE compat: prints its arguments as JSON for `launch` (stdout), and for `env` on stderr, printing nothing the
# script evals
ECHO_COMPAT = (sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]), file=sys.stdout if sys.argv[1] == 'launch' else sys.stderr)")


def run_script(text, tmp_path):
    """The script under bash as a batch job sees it: SLURM_JOB_NODELIST / SLURM_JOB_NUM_NODES set and a FIXTURE
    scontrol that expands the node list as Slurm's does (node1, node2)."""
    script = tmp_path / "job.sh"
    script.write_text(text, encoding="utf-8")
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert parsed.returncode == 0, parsed.stderr
    tools = tmp_path / "fixture-bin"
    tools.mkdir(exist_ok=True)
    scontrol = tools / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "node1\\nnode2\\n"\n')
    scontrol.chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, env=env)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(hostile(surrogates=False), min_size=1, max_size=4), python=hostile(surrogates=False))
def test_the_training_command_and_the_interpreter_come_back_as_given(tmp_path, words, python):
    shape = BatchShape("job", 2, 3, python, ECHO_COMPAT, tuple(words), preflight=False)
    if any("\0" in w for w in [*words, python]):
        with pytest.raises(UnwritableValue, match="NUL"):
            sbatch_text(shape, notes=words)
        return
    done = run_script(sbatch_text(shape, notes=words), tmp_path)  # notes hostile too: comments that must stay comments
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["launch", "--launcher", "srun", "--python", python, "--nproc-per-node", "3", "--", *words]


def test_the_preflight_is_a_step_of_its_own_before_training(tmp_path):
    text = sbatch_text(BatchShape("job", 2, 4, "/shared/venv/bin/python", ("compat",), ("train.py", "--bf16"), time="1:00:00", partition="cpu"))
    sbatch_lines = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert sbatch_lines == ["#SBATCH --job-name=job", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --exclusive",
                            "#SBATCH --time=1:00:00", "#SBATCH --partition=cpu"]
    preflight = next(i for i, line in enumerate(text.splitlines()) if "doctor --live" in line)
    training = next(i for i, line in enumerate(text.splitlines()) if "launch --launcher srun" in line)
    assert preflight < training and "--ntasks-per-node=1" in text.splitlines()[preflight]
    steps = [text.splitlines()[preflight], text.splitlines()[training]]
    assert not any(flag in step for step in steps for flag in ("--nnodes", "--node-rank", "--master-addr"))  # the allocation gives them


def test_the_environment_step_exports_the_interface_of_the_route_to_the_allocations_first_host(tmp_path):
    """compat env in the batch script is told the master (the allocation's first host, as srun's tasks take it) and the
    node count, so it exports the interface that reaches it (GLOO_SOCKET_IFNAME, CCL_KVS_IFACE, ...): the loopback-name
    fault is prevented by the export itself."""
    done = run_script(sbatch_text(BatchShape("job", 2, 2, "/venv/bin/python", ECHO_COMPAT, ("train.py",), preflight=False)), tmp_path)
    assert done.returncode == 0, done.stderr
    env_call = json.loads(done.stderr.splitlines()[0])
    assert env_call[0] == "env" and env_call[env_call.index("--master-addr") + 1] == "node1"
    assert env_call[env_call.index("--nnodes") + 1] == "2" and env_call[env_call.index("--launcher") + 1] == "srun"


@pytest.mark.parametrize("field, value", [("name", "job\n#SBATCH --uid=0"), ("name", "-x"), ("name", "a b"), ("time", "1h"), ("time", "10\n"),
                                          ("partition", "cpu --uid=0"), ("partition", ""), ("partition", "cpu,"), ("partition", ",cpu"),
                                          ("partition", "cpu,,gpu")])
def test_a_value_an_sbatch_line_cannot_carry_is_refused(field, value):
    shape = BatchShape("job", 1, 1, "/p", ("compat",), ("train.py",))
    with pytest.raises(UnwritableValue) as caught:
        sbatch_text(BatchShape(**{**shape.__dict__, field: value}))
    assert "\n" not in caught.value.message


def test_export_sbatch_through_the_cli(tmp_path):
    done = run_compat("export", "sbatch", "torch==2.13.0", "--python", sys.executable, "--nnodes", "2", "--nproc-per-node", "2", "--time", "30",
                      "--", "train.py", "--lr", "1e-4 $(id)")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=2" in done.stdout and "'1e-4 $(id)'" in done.stdout
    bad = run_compat("export", "sbatch", "--python", sys.executable, "--name", "x\n#SBATCH --uid=0", "--", "train.py")
    assert bad.returncode == 2 and "cannot be written" in bad.stderr and "Traceback" not in bad.stderr
    unowned = run_compat("export", "dockerfile", "--time", "30")
    assert unowned.returncode == 2 and "--time goes with compat export sbatch" in unowned.stderr
    no_python = run_compat("export", "sbatch", "--", "train.py", env_extra={"COMPAT_PYTHON": None})
    assert no_python.returncode == 2 and "needs --python" in no_python.stderr


@pytest.mark.parametrize("launcher", [["srun", "python", "train.py"], ["torchrun", "train.py"], ["python3", "-m", "torch.distributed.run", "t.py"],
                                      ["/usr/bin/mpirun", "-n", "2", "t.py"]])
def test_a_training_command_that_starts_its_own_launcher_is_refused(launcher):
    done = run_compat("export", "sbatch", "torch==2.13.0", "--python", sys.executable, "--", *launcher)
    assert done.returncode == 2 and "the training command is what each rank runs" in done.stderr


def test_a_failing_compat_env_stops_the_job_before_any_step(tmp_path):
    """compat env exits 2 (the set is not at --python on this node, say): the job ends there, naming it, and neither the
    preflight nor the training runs (eval "$(compat env ...)" went on without the environment)."""
    failing = (sys.executable, "-c", "import sys; sys.argv[1] == 'env' and sys.exit(2); print('RAN', sys.argv[1])")
    done = run_script(sbatch_text(BatchShape("job", 1, 2, "/shared/venv/bin/python", failing, ("train.py",), preflight=False)), tmp_path)
    assert done.returncode == 2 and "RAN" not in done.stdout and "compat env failed" in done.stderr, (done.stdout, done.stderr)


def test_a_list_of_partitions_is_written_as_sbatch_takes_it():
    """sbatch --partition takes a comma-separated list (the first with free nodes runs the job): it was refused."""
    text = sbatch_text(BatchShape("job", 1, 1, "/p", ("compat",), ("train.py",), partition="cpu,debug"))
    assert "#SBATCH --partition=cpu,debug" in text.splitlines()


@pytest.mark.parametrize("command", [["accelerate", "launch", "train.py"], ["deepspeed", "train.py"], ["python3", "-m", "accelerate.commands.launch", "t.py"],
                                     ["/opt/venv/bin/deepspeed", "--num_gpus", "0", "t.py"], ["torchrun", "t.py"]])
def test_a_training_command_that_starts_ranks_of_its_own_is_refused(command):
    """Each srun task is one rank: a command that starts its own ranks (accelerate launch, deepspeed, torchrun) would start
    several per task."""
    done = run_compat("export", "sbatch", "--python", sys.executable, "--nnodes", "2", "--", *command)
    assert done.returncode == 2 and "The job starts every rank under srun itself" in done.stderr and "Traceback" not in done.stderr


def test_the_set_is_read_from_the_environment_given_by_python(tmp_path):
    """--python ENV: the script runs that environment as it is, so the set it names is ENV's (a FIXTURE env holding
    torch 2.13.0+cpu, transformers and accelerate), not the newest the matrix resolves; a requirement it does not meet
    is refused with one sentence; an environment holding none of the set is told the resolved set it must hold."""
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env").torch("2.13.0+cpu")
    env.dist("transformers", "5.24.0")
    env.dist("accelerate", "1.15.0")
    done = run_compat("export", "sbatch", "--python", str(env.python), "--", "train.py")
    assert done.returncode == 0, done.stderr
    held = next(line for line in done.stdout.splitlines() if "holds this set" in line)
    assert f"# {env.python} holds this set" in held and "read from the environment" in held, held
    assert "torch==2.13.0+cpu" in held and "transformers==5.24.0" in held and "accelerate==1.15.0" in held, held
    assert "must hold" not in done.stdout and "2.15.0" not in held
    pinned = run_compat("export", "sbatch", "torch==2.13.0", "--python", str(env.python), "--", "train.py")
    assert pinned.returncode == 0 and "torch==2.13.0+cpu" in pinned.stdout, pinned.stderr
    other = run_compat("export", "sbatch", "torch==2.12.0", "--python", str(env.python), "--", "train.py")
    assert other.returncode == 2 and f"{env.python} holds torch 2.13.0+cpu, not the torch==2.12.0 asked for." in other.stderr, other.stderr
    assert "Traceback" not in other.stderr
    empty = FixtureEnv(tmp_path / "empty")
    fresh = run_compat("export", "sbatch", "torch==2.13.0", "--python", str(empty.python), "--", "train.py")
    assert fresh.returncode == 0 and f"# {empty.python} must hold this set" in fresh.stdout, fresh.stderr
