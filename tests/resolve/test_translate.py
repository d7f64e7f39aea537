"""compat translate: the command lines of the guides in ../shared/seeds/, for an old and the newest transformers."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from ..conftest import ROOT, run_compat

SEEDS = ROOT.parent / "shared" / "seeds"

QA = ("python3 run_qa.py --model_name_or_path google-bert/bert-large-uncased --dataset_name squad --do_train --do_eval "
      "--per_device_train_batch_size 12 --learning_rate 3e-5 --num_train_epochs 2 --max_seq_length 384 --doc_stride 128 "
      "--output_dir /tmp/debug_squad/ --no_cuda --ddp_backend ccl --use_ipex")
QA_BF16 = QA + " --bf16"
GLUE = ("python run_glue.py --model_name_or_path distilbert-base-uncased --task_name mrpc --do_train --do_eval --max_seq_length 128 "
        "--per_device_train_batch_size 32 --learning_rate 2e-5 --num_train_epochs 3 --output_dir /tmp/mrpc/ --overwrite_output_dir True "
        "--xpu_backend ccl --no_cuda True")
COMMANDS = {"run_qa": QA, "run_qa_bf16": QA_BF16, "run_glue_blog": GLUE}
OLD = ("4.30.2", "0.20.3")  # old enough to accept ccl
NEW = ("5.23.0", "1.15.0")  # the newest


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\\n", " ").replace("\\ ", " "))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_commands_are_the_guides_own(name):
    if not SEEDS.is_dir():
        pytest.skip("../shared/seeds is not beside this checkout")
    command = COMMANDS[name]
    seeds = " ".join(_normal(p.read_text(errors="replace")) for p in SEEDS.iterdir())
    # the guides also print the model as bert-large-uncased in some languages; either spelling counts
    pattern = re.escape(command).replace(re.escape("google-bert/bert-large-uncased"), r"(?:google-bert/)?bert-large-uncased")
    assert re.search(pattern.replace(r"\ ", r"\s+"), seeds), f"{name} is not in the seeds any more"


def translate(command, versions):
    done = run_compat("translate", "--json", "--transformers", versions[0], "--accelerate", versions[1], "--", *shlex.split(command))
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("name", ["run_qa", "run_qa_bf16"])
def test_qa_command_on_old_transformers_is_kept(name):
    code, data = translate(COMMANDS[name], OLD)
    assert code == 0
    assert data["argv"] == shlex.split(COMMANDS[name])  # 4.30 takes --no_cuda, --ddp_backend ccl and --use_ipex as written
    assert data["edits"] == [] and data["blocking"] == []


def test_qa_command_on_the_newest_transformers():
    code, data = translate(QA_BF16, NEW)
    assert code == 1
    argv = data["argv"]
    assert "--use_cpu" in argv and "--no_cuda" not in argv and "--use_ipex" not in argv and "--bf16" in argv
    assert argv[argv.index("--ddp_backend") + 1] == "ccl"  # kept, but it cannot work:
    assert any("no longer accepts ccl" in b and "compat resolve --profile ddp-ccl" in b for b in data["blocking"])
    assert any("accelerate 1.15.0 cannot run ccl" in b for b in data["blocking"])
    whys = " ".join(e["why"] for e in data["edits"])
    assert "--no_cuda was replaced by --use_cpu" in whys and "--use_ipex was removed" in whys


def test_blog_command_with_xpu_backend():
    code, data = translate(GLUE, OLD)
    assert code == 0
    argv = data["argv"]
    assert argv[-3:] == ["--ddp_backend", "ccl", "--no_cuda"]
    assert {e["before"] for e in data["edits"]} == {"--xpu_backend ccl", "--no_cuda True"}
    code, data = translate(GLUE, NEW)
    assert code == 1 and data["argv"][-3:] == ["--ddp_backend", "ccl", "--use_cpu"]


def test_ddp_backend_on_transformers_older_than_4_29():
    code, data = translate("python run_qa.py --ddp_backend ccl --use_cpu", ("4.24.0", "0.15.0"))
    assert code == 0
    assert data["argv"] == ["python", "run_qa.py", "--xpu_backend", "ccl", "--no_cuda"]


def test_bf16_on_cpu_needs_use_cpu_from_4_52():
    code, data = translate("python train.py --bf16 --ddp_backend gloo", ("4.52.0", "1.7.0"))
    assert code == 0 and data["argv"] == ["python", "train.py", "--bf16", "--use_cpu", "--ddp_backend", "gloo"]
    code, data = translate("python train.py --bf16 --ddp_backend gloo", ("4.51.3", "1.7.0"))
    assert data["argv"] == ["python", "train.py", "--bf16", "--ddp_backend", "gloo"]


def test_translate_needs_a_command_and_transformers():
    assert run_compat("translate", "--transformers", "4.30.2").returncode == 2
    assert run_compat("translate", "--transformers", "four", "--", "python", "x.py").returncode == 2


@pytest.mark.integration
def test_translate_reads_the_installed_versions_from_a_real_environment():
    from ..real_envs import SPECS, real_env

    python = real_env("torch213-stock")
    pinned = dict(r.split("==") for r in SPECS["torch213-stock"][0])  # what the environment was built with
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "translate", "--json", "--python", str(python), "--", *shlex.split(QA)],
                          capture_output=True, text=True, timeout=300, check=False)
    data = json.loads(done.stdout)
    assert data["transformers"] == pinned["transformers"] and data["accelerate"] == pinned["accelerate"]
    assert done.returncode == 1
