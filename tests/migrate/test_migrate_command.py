"""compat migrate's command rewrite: the seed guides' commands (mpirun + --ddp_backend ccl --use_ipex --bf16, the
PyTorchJob's torchrun command, the blog's --xpu_backend ccl) for each transformers line a stock set can hold, and the
launcher rules (mpirun -> torchrun where the job relied on the bindings' MPI, thread settings from compat launch's plan)."""

from __future__ import annotations

import re
import shlex

import pytest
from packaging.version import Version

from compatmatrix.migrate.command import CommandFacts, migrate_command, split_command
from compatmatrix.placement.topology import Machine, Topology
from compatmatrix.translate import translate

from ..conftest import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"

# the guides' commands (../shared/seeds), as written there
QA_MPIRUN = ("mpirun -n 2 -genv OMP_NUM_THREADS=23 python3 run_qa.py --model_name_or_path google-bert/bert-large-uncased --dataset_name squad "
             "--do_train --do_eval --per_device_train_batch_size 12 --learning_rate 3e-5 --num_train_epochs 2 --max_seq_length 384 "
             "--doc_stride 128 --output_dir /tmp/debug_squad/ --no_cuda --ddp_backend ccl --use_ipex")
QA_HOSTFILE = ("mpirun -f hostfile -n 4 -ppn 2 -genv OMP_NUM_THREADS=23 python3 run_qa.py --model_name_or_path google-bert/bert-large-uncased "
               "--dataset_name squad --do_train --do_eval --per_device_train_batch_size 12 --learning_rate 3e-5 --num_train_epochs 2 "
               "--max_seq_length 384 --doc_stride 128 --output_dir /tmp/debug_squad/ --no_cuda --ddp_backend ccl --use_ipex --bf16")
PYTORCHJOB = ["torchrun", "/workspace/transformers/examples/pytorch/question-answering/run_qa.py", "--model_name_or_path", "google-bert/bert-large-uncased",
              "--dataset_name", "squad", "--do_train", "--do_eval", "--per_device_train_batch_size", "12", "--learning_rate", "3e-5",
              "--num_train_epochs", "2", "--max_seq_length", "384", "--doc_stride", "128", "--output_dir", "/tmp/pvc-mount/output", "--no_cuda",
              "--ddp_backend", "ccl", "--use_ipex", "--bf16"]
GLUE_BLOG = ("mpirun -f hostfile -np 2 -ppn 1 -genv I_MPI_PIN_DOMAIN=[0xfffffff0] -genv OMP_NUM_THREADS=28 python run_glue.py "
             "--model_name_or_path distilbert-base-uncased --task_name mrpc --do_train --do_eval --max_seq_length 128 --per_device_train_batch_size 32 "
             "--learning_rate 2e-5 --num_train_epochs 3 --output_dir /tmp/mrpc/ --overwrite_output_dir True --xpu_backend ccl --no_cuda True")

# every transformers line a stock set can hold, with the accelerate of that set (compat resolve --profile stock per Python)
LINES = {
    "3.6": ("4.18.0", "0.9.0", "1.10.1"),
    "3.7": ("4.30.2", "0.20.3", "1.13.1"),
    "3.8": ("4.46.3", "1.0.1", "2.4.1"),
    "3.9": ("4.57.6", "1.10.1", "2.8.0"),
    "3.10": ("5.20.2", "1.15.0", "2.10.0"),
    "3.11": ("5.24.0", "1.15.0", "2.15.0"),
}
XEON = Machine(Topology.smt(56, 2), frozenset(range(112)))  # one socket, 56 physical cores with their hyperthreads
BF16_CPU = frozenset({"avx512f", "avx512_bf16", "amx_bf16"})
OLD_CPU = frozenset({"avx2", "avx512f"})
BINDINGS = "/env/lib/python3.11/site-packages/oneccl_bindings_for_pytorch"


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\\n", " ").replace("\\ ", " "))


def _seeds() -> str:
    if not SEEDS.is_dir():
        pytest.skip("../shared/seeds is not beside this checkout")
    return " ".join(_normal(p.read_text(errors="replace")) for p in SEEDS.iterdir())


@pytest.mark.parametrize("command", [QA_MPIRUN, QA_HOSTFILE, GLUE_BLOG])
def test_the_shell_commands_are_the_guides_own(command):
    pattern = r"\s+".join(re.escape(t) for t in command.split()).replace(re.escape("google-bert/"), "(?:google-bert/)?")
    assert re.search(pattern, _seeds()), "the command is not in the seeds any more"


def test_the_pytorchjob_command_is_the_guides_own():
    pattern = r"\s+".join(r'-\s+"?' + re.escape(token) + '"?' for token in PYTORCHJOB)
    assert re.search(pattern, _seeds()), "the PyTorchJob's command is not in the seeds any more"


def facts(python: str, cpu=BF16_CPU, mpirun=None, env=None, machine=XEON, flavor=None) -> CommandFacts:
    transformers, accelerate, torch = LINES[python]
    return CommandFacts(Version(transformers), Version(accelerate), Version(torch), cpu_flags=cpu, machine=machine, mpirun=mpirun, mpi_flavor=flavor,
                        removed_folders=(BINDINGS,), env=env or {})


def migrate(matrix, command, python="3.11", **kw):
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return migrate_command(matrix, argv, facts(python, **kw))


def whys(result) -> str:
    return " | ".join(f"{e.before} -> {e.after}: {e.why}" for e in result.edits)


@pytest.mark.parametrize("python", sorted(LINES, key=lambda v: Version(v)))
def test_single_node_mpirun_guide_command_for_each_line(matrix, python):
    transformers = Version(LINES[python][0])
    result = migrate(matrix, QA_MPIRUN, python, env={"MASTER_ADDR": "127.0.0.1"})
    argv = list(result.argv)
    assert "--use_ipex" not in argv and "ccl" not in argv
    if transformers < Version("4.24"):  # no gloo for the Trainer's CPU DDP: said, and the flag goes
        assert result.blocking and "mpi or ccl" in result.blocking[0]
        assert "--ddp_backend" not in argv and "--xpu_backend" not in argv
    else:
        assert not result.blocking
        assert argv[argv.index("--ddp_backend") + 1] == "gloo"
    cpu_flag = "--use_cpu" if transformers >= Version("4.32") else "--no_cuda"
    assert cpu_flag in argv and argv.count("--use_cpu") + argv.count("--no_cuda") == 1
    # the bundled MPI goes with the bindings: torchrun, one node, 2 ranks, the script without its interpreter
    assert argv[:4] == ["torchrun", "--standalone", "--nproc_per_node", "2"] and argv[4] == "run_qa.py"
    assert result.launcher == "torchrun" and result.ranks_per_node == 2 and not result.keeps_mpi
    # thread settings: compat launch's plan for 2 ranks on 56 physical cores, no oneCCL worker cores
    assert result.env["OMP_NUM_THREADS"] == "28"
    text = whys(result)
    assert "OMP_NUM_THREADS=23 -> OMP_NUM_THREADS=28" in text and "compat launch's plan" in text
    assert "no mpirun is found here (PATH, next to the interpreter)" in text and "IPEX is not part of stock PyTorch" in text
    assert "bundled" not in text  # nothing here says these bindings bundle an MPI


@pytest.mark.parametrize("python", ["3.7", "3.8", "3.9", "3.11"])
def test_two_node_bf16_command(matrix, python):
    result = migrate(matrix, QA_HOSTFILE, python, env={"MASTER_ADDR": "10.0.0.1"})
    argv = list(result.argv)
    assert argv[:9] == ["torchrun", "--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "10.0.0.1:29500"]
    assert "--bf16" in argv  # this CPU has native bf16
    assert any("each of the 2 hosts in hostfile" in w for w in result.warnings)
    assert result.env["OMP_NUM_THREADS"] == "28"


def test_bf16_goes_where_the_cpu_has_no_native_bf16_and_stays_where_unknown(matrix):
    result = migrate(matrix, QA_HOSTFILE, cpu=OLD_CPU)
    assert "--bf16" not in result.argv and "no avx512_bf16 or AMX" in whys(result)
    unknown = migrate(matrix, QA_HOSTFILE, cpu=None)
    assert "--bf16" in unknown.argv and any("--bf16 kept: the CPU is not known" in w for w in unknown.warnings)


def test_without_master_addr_the_rendezvous_is_a_placeholder_said_so(matrix):
    result = migrate(matrix, QA_HOSTFILE)
    assert "MASTER_ADDR:29500" in result.argv
    assert any("replace MASTER_ADDR" in w for w in result.warnings)


@pytest.mark.parametrize("python", sorted(LINES, key=lambda v: Version(v)))
def test_pytorchjob_torchrun_command_for_each_line(matrix, python):
    result = migrate(matrix, PYTORCHJOB, python)
    argv = list(result.argv)
    assert argv[:2] == PYTORCHJOB[:2]  # torchrun stays, one rank per pod as written
    assert "--use_ipex" not in argv and "ccl" not in argv
    assert result.launcher == "torchrun" and result.ranks_per_node == 1
    assert "--bf16" in argv
    if Version(LINES[python][0]) >= Version("4.24"):
        assert not result.blocking


def test_blog_command_with_xpu_backend_and_intel_mpi_pinning(matrix):
    result = migrate(matrix, GLUE_BLOG, "3.11", env={"MASTER_ADDR": "ip-172-31-28-17.ec2.internal"})
    argv = list(result.argv)
    assert argv[:5] == ["torchrun", "--nnodes", "2", "--nproc_per_node", "1"]
    assert argv[argv.index("--ddp_backend") + 1] == "gloo" and "--xpu_backend" not in argv
    assert "--use_cpu" in argv and "True" not in argv[argv.index("--use_cpu"):]
    text = whys(result)
    assert "-genv I_MPI_PIN_DOMAIN=[0xfffffff0] -> : I_MPI_PIN_DOMAIN is a oneCCL / Intel MPI setting" in text
    assert "--xpu_backend was renamed --ddp_backend" in text
    assert result.env["OMP_NUM_THREADS"] == "56"  # one rank per node takes every physical core


def test_blog_command_on_transformers_4_24_to_4_28_keeps_xpu_backend_gloo(matrix):
    line = CommandFacts(Version("4.26.1"), Version("0.15.0"), Version("1.13.1"), cpu_flags=BF16_CPU, machine=XEON, removed_folders=(BINDINGS,))
    result = migrate_command(matrix, shlex.split(GLUE_BLOG), line)
    argv = list(result.argv)
    assert argv[argv.index("--xpu_backend") + 1] == "gloo" and "--no_cuda" in argv


def test_an_mpirun_of_another_mpi_stays(matrix):
    result = migrate(matrix, QA_MPIRUN, mpirun="/opt/intel/oneapi/mpi/latest/bin/mpirun")
    argv = list(result.argv)
    assert argv[:5] == ["mpirun", "-n", "2", "-genv", "OMP_NUM_THREADS=28"] and argv[5] == "python3"
    assert result.keeps_mpi and result.launcher == "mpirun" and "OMP_NUM_THREADS" not in result.env
    assert any("gloo runs under it" in w for w in result.warnings)


def test_the_bundled_mpirun_is_recognised_by_its_folder(matrix):
    result = migrate(matrix, QA_MPIRUN, mpirun=f"{BINDINGS}/opt/mpi/bin/mpirun")
    assert result.argv[0] == "torchrun"


def test_the_mpirun_of_impi_rt_is_named_as_impi_rts_not_the_bindings(matrix):
    """Bindings built against the PyPI runtime bundle no MPI: the job's mpirun was impi-rt's, which goes with it (issue 25)."""
    import dataclasses

    argv = shlex.split(QA_MPIRUN)
    result = migrate_command(matrix, argv, dataclasses.replace(facts("3.11", mpirun="/venv/bin/mpirun", flavor="intel-mpi"), mpirun_owner="impi-rt"))
    assert result.argv[0] == "torchrun"
    text = whys(result)
    assert "the job's mpirun (/venv/bin/mpirun) is impi-rt's, Intel MPI's runtime from PyPI" in text and "impi-rt is removed" in text
    assert "bundled with the oneCCL bindings" not in text
    kept = migrate_command(matrix, argv, facts("3.11", mpirun="/venv/bin/mpirun", flavor="intel-mpi"))  # an MPI no removed package owns
    assert kept.argv[0] == "mpirun"


def test_oneccl_settings_go_from_a_kept_mpirun(matrix):
    result = migrate(matrix, "mpirun -n 2 -genv CCL_WORKER_COUNT 1 -genv FOO=bar python train.py --ddp_backend ccl", mpirun="/usr/bin/mpirun")
    assert list(result.argv)[:8] == ["mpirun", "-n", "2", "-genv", "FOO=bar", "-genv", "OMP_NUM_THREADS=28", "python"]
    assert "-genv CCL_WORKER_COUNT 1 -> : CCL_WORKER_COUNT is a oneCCL setting" in whys(result)


def test_a_plain_python_command_gets_use_cpu_where_accelerate_needs_it(matrix):
    result = migrate(matrix, "python train.py --ddp_backend ccl --output_dir out")
    assert list(result.argv) == ["python", "train.py", "--ddp_backend", "gloo", "--output_dir", "out", "--use_cpu"]
    assert "each rank trains alone" in whys(result)
    older = migrate(matrix, "python train.py --ddp_backend ccl", "3.9")  # accelerate 1.10: forms the job without it
    assert list(older.argv) == ["python", "train.py", "--ddp_backend", "gloo"]


def test_accelerate_launch_loses_ipex_and_mpirun_ccl(matrix):
    result = migrate(matrix, "accelerate launch --cpu --ipex --mpirun_ccl 1 --num_processes 4 --num_machines 2 train.py --lr 1")
    assert list(result.argv) == ["accelerate", "launch", "--cpu", "--num_processes", "4", "--num_machines", "2", "train.py", "--lr", "1"]
    text = whys(result)
    assert "accelerate 1.15.0 has no such option (accelerate>=0.20.0,<1.10.0 had it)" in text
    assert "accelerate>=0.28.0,<1.13.0 had it" in text
    assert result.ranks_per_node == 2


def test_python_m_torch_distributed_run_is_a_torchrun(matrix):
    launch = split_command(["python3", "-u", "-m", "torch.distributed.run", "--nproc_per_node=4", "train.py", "--bf16"])
    assert launch.kind == "torchrun" and launch.options["nproc_per_node"] == "4" and launch.program == ["train.py"] and launch.args == ["--bf16"]


def test_a_non_python_program_under_torchrun_gets_no_python(matrix):
    result = migrate(matrix, "mpirun -n 2 ./train.sh --ddp_backend ccl")
    assert list(result.argv)[:5] == ["torchrun", "--standalone", "--nproc_per_node", "2", "--no_python"]


def test_no_machine_no_thread_settings(matrix):
    result = migrate(matrix, QA_MPIRUN, machine=None)
    assert result.env["OMP_NUM_THREADS"] == "23"  # the command's own value, passed on: there is no plan to replace it
    assert any("machine is not known" in w for w in result.warnings)
    assert "OMP_NUM_THREADS" not in migrate(matrix, PYTORCHJOB, machine=None).env


def test_translate_stock_mode_is_the_same_rewrite(matrix):
    # compat translate's own code path: what migrate does to the Trainer flags is translate(stock=True)
    argv = shlex.split(QA_MPIRUN)[5:]
    direct = translate(matrix, argv, Version("5.23.0"), Version("1.15.0"), Version("2.15.0"), stock=True)
    assert list(migrate(matrix, QA_MPIRUN).argv)[4:] == list(direct.argv)[1:]  # torchrun drops the interpreter, nothing else differs
    plain = translate(matrix, argv, Version("5.23.0"), Version("1.15.0"), Version("2.15.0"))
    assert "ccl" in plain.argv and plain.blocking  # without stock=True, translate keeps ccl and says it cannot work


def test_a_kept_open_mpi_gets_its_own_export_option(matrix):
    result = migrate(matrix, "mpirun -np 2 --bind-to none python train.py --ddp_backend ccl", mpirun="/usr/bin/mpirun")
    assert list(result.argv)[:7] == ["mpirun", "-np", "2", "--bind-to", "none", "-x", "OMP_NUM_THREADS=28"]
    told = migrate(matrix, "mpirun -np 2 python train.py --ddp_backend ccl", mpirun="/usr/bin/mpirun", flavor="open-mpi")
    assert list(told.argv)[:5] == ["mpirun", "-np", "2", "-x", "OMP_NUM_THREADS=28"] and told.keeps_mpi


def test_an_open_mpi_on_path_cannot_have_run_intel_mpi_options(matrix):
    # the guide's -genv / -ppn are Intel MPI's (hydra): Open MPI refuses them, so the job ran under the bindings' Intel MPI
    result = migrate(matrix, QA_MPIRUN, mpirun="/usr/bin/mpirun", flavor="open-mpi")
    assert result.argv[0] == "torchrun"
    assert "Intel MPI's -genv, which the Open MPI on PATH (/usr/bin/mpirun) refuses" in whys(result)
    kept = migrate(matrix, QA_MPIRUN, mpirun="/opt/intel/oneapi/mpi/latest/bin/mpirun", flavor="intel-mpi")
    assert kept.argv[0] == "mpirun" and kept.keeps_mpi


def test_srun_stays_with_its_options_and_its_program_is_rewritten(matrix):
    result = migrate(matrix, "srun -N 2 --ntasks-per-node 2 --cpu-bind=cores -l python3 train.py --ddp_backend ccl --use_ipex --output_dir out")
    argv = list(result.argv)
    assert argv[:7] == ["srun", "-N", "2", "--ntasks-per-node", "2", "--cpu-bind=cores", "-l"] and argv[7:9] == ["python3", "train.py"]
    assert argv[argv.index("--ddp_backend") + 1] == "gloo" and "--use_ipex" not in argv and "ccl" not in argv
    assert result.launcher == "srun" and result.ranks_per_node == 2 and not result.keeps_mpi
    assert result.env["OMP_NUM_THREADS"] == "28"  # 2 tasks per node on 56 physical cores
    assert any(w.startswith("srun stays with its options") for w in result.warnings)


@pytest.mark.parametrize(("line", "per_node"), [("srun -n4 -N2", 2), ("srun --ntasks=4 --nodes=2", 2), ("srun -n 3", None),
                                                ("srun --ntasks-per-node=4 -c 7", 4), ("srun -J job -p cpu", None)])
def test_srun_tasks_per_node_from_its_options(per_node, line):
    launch = split_command([*shlex.split(line), "python", "train.py", "--ddp_backend", "ccl"])
    assert launch.kind == "srun" and launch.launcher == shlex.split(line)
    assert launch.program == ["python", "train.py"] and launch.args == ["--ddp_backend", "ccl"]
    from compatmatrix.migrate.command import _ranks_per_node

    assert _ranks_per_node(launch) == per_node


def test_torchrun_under_srun_stays_a_torchrun_behind_srun(matrix):
    result = migrate(matrix, "srun --ntasks-per-node=1 torchrun --nproc_per_node 2 train.py --ddp_backend ccl")
    assert list(result.argv)[:5] == ["srun", "--ntasks-per-node=1", "torchrun", "--nproc_per_node", "2"]
    assert result.launcher == "torchrun" and result.ranks_per_node == 2 and "gloo" in result.argv
