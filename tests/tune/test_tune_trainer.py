"""compat tune -- COMMAND: the protocol of tune/trainer.py (pure) on real recorded Trainer output
(tests/data/tune/transformers-*.log: tests/data/tune/tiny_trainer.py run for 4 steps under transformers 4.56.2 and 5.23.0),
and the proof with the printed losses' rounding."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.tune.proof import Run, prove, tolerance
from compatmatrix.tune.trainer import global_batch, is_trainer_command, printed_precision, read_log, script_words, trainer_argv

DATA = Path(__file__).resolve().parents[1] / "data" / "tune"


@pytest.mark.parametrize("version,losses,rate,precision", [
    ("4.56.2", (3.8022, 2.4269, 7.6412, 1.3548), 26.715, 5e-5),  # round(loss, 4), numbers
    ("5.23.0", (3.802, 2.427, 7.641, 1.355), 240.4, 5e-4),  # 4 significant digits, quoted
])
def test_the_losses_and_speed_are_read_from_recorded_trainer_output(version, losses, rate, precision):
    found = read_log((DATA / f"transformers-{version}.log").read_text())
    assert found.losses == losses  # train_loss of the final line is not a step's loss
    assert found.steps_per_second == rate
    assert found.precision == pytest.approx(precision)


def test_output_without_loss_lines_or_speed_reads_as_nothing():
    found = read_log("Traceback (most recent call last):\n  ...\n{'eval_loss': 1.0}\n")
    assert found.losses == () and found.steps_per_second is None
    assert read_log("{'train_steps_per_second': '0'}").steps_per_second is None
    assert read_log("100%|###| 4/4\r{'loss': 1.5, 'epoch': 1}\r\n").losses == (1.5,)  # a progress bar's carriage return


def test_the_printing_precision_is_taken_from_the_whole_log_not_a_short_value():
    from compatmatrix.tune.trainer import log_precision

    assert log_precision(["3.802", "1.1", "0.5"]) == pytest.approx(5e-4)  # 4 significant digits: '1.1' is 1.100
    assert log_precision(["3.8022", "1.1"]) == pytest.approx(5e-5)  # 4 decimals: '1.1' is 1.1000
    assert log_precision(["12.5", "3.802"]) == pytest.approx(5e-4)  # never coarser than the finest place seen
    assert log_precision([]) == 0.0 and log_precision(["nan"]) == 0.0


def test_printed_precision():
    assert printed_precision("3.802") == pytest.approx(5e-4)
    assert printed_precision("5e-05") == pytest.approx(5e-6)
    assert printed_precision("12") == 0.5
    assert printed_precision("nan") == 0.0


def test_a_trainer_command_gets_the_bounded_run_and_the_same_global_batch():
    argv = ["train.py", "--output_dir", "o", "--max_steps=1000", "--bf16", "true", "--per_device_train_batch_size", "16", "--seed", "3"]
    assert is_trainer_command(argv) and not is_trainer_command(["bench.py", "--steps", "3"])
    assert global_batch(argv) == 16 and global_batch(["t.py"]) == 8
    words = trainer_argv(argv, 20, 4, "gloo", "fp32", False)
    assert words is not None
    assert words[:5] == ["train.py", "--output_dir", "o", "--seed", "3"]  # the user's --max_steps and --bf16 (and its value) replaced
    pairs = dict(zip(words[5::2], words[6::2]))
    assert pairs["--max_steps"] == "20" and pairs["--logging_steps"] == "1" and pairs["--per_device_train_batch_size"] == "4"
    assert pairs["--ddp_backend"] == "gloo" and "--bf16" not in words
    assert trainer_argv(argv, 20, 3, "gloo", "fp32", False) is None  # 16 does not divide over 3 ranks
    reference = trainer_argv(argv, 20, 1, None, "bf16", True)
    assert reference is not None and "--ddp_backend" not in reference and reference[-2:] == ["--bf16", "--torch_compile"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["--max_steps", "--bf16", "true", "--ddp_backend", "ccl", "--output_dir", "x", "--fp16", "--per_device_train_batch_size", "4", "--seed=1"]), max_size=12))
def test_the_run_flags_appear_once_whatever_the_command_had(argv):
    words = trainer_argv(["t.py", *argv], 7, 1, None, "fp32", False)
    if words is None:
        return
    for flag in ("--max_steps", "--logging_steps", "--per_device_train_batch_size"):
        assert sum(word.partition("=")[0] == flag for word in words) == 1
    assert "--bf16" not in words and "--fp16" not in words


def test_a_leading_interpreter_is_dropped():
    assert script_words(["python3", "train.py", "--x"])[0] == ["train.py", "--x"]
    assert script_words(["/usr/bin/python3.11", "-m", "pkg"])[0] == ["-m", "pkg"]
    assert script_words(["train.py"]) == (["train.py"], None)


def test_the_printed_rounding_is_part_of_the_bound_and_only_that():
    reference = Run((3.802, 2.427, 7.641, 1.355), (), "", 5e-4)
    tol = tolerance("fp32", 8 + 4096 + 2, 4, 1e-3)
    same = Run((3.802, 2.428, 7.641, 1.355), (), "", 5e-4)  # one rounding step apart
    assert prove(same, reference, tol).accepted
    wrong = Run((3.802, 2.5, 7.641, 1.355), (), "", 5e-4)
    verdict = prove(wrong, reference, tol)
    assert not verdict.accepted and "step 2's loss" in verdict.reason and "plus 0.001 absolute" in verdict.reason
    few = 8 + 16 + 2  # a model whose fan-in is 16: the rounding error bound alone is far below a printed digit
    assert prove(same, reference, tolerance("fp32", few, 4, 1e-3)).accepted
    assert not prove(same, reference, tolerance("fp32", few, 4)).accepted  # without the printed rounding, one step apart is too much


def test_bf16_of_a_user_model_is_unprovable_not_accepted():
    reference = Run((3.802, 2.427), (), "", 5e-4)
    verdict = prove(Run((3.803, 2.427), (), "", 5e-4), reference, tolerance("bf16", 8 + 4096 + 2, 2, 1e-3))
    assert not verdict.accepted and "cannot be proven" in verdict.reason


class FakeSupervised:
    """A FIXTURE standing in for live/supervise's answer: the launcher's exit codes, its output's tail and the wall-clock."""

    def __init__(self, *codes, log=""):
        self.ends = [type("End", (), {"returncode": code, "log": log})() for code in codes]
        self.seconds = 1.5


def test_a_run_is_read_from_rank_0s_log_and_one_without_losses_is_unproven():
    from compatmatrix.tune.service import _command_result

    run, times, problem, _ = _command_result(read_log((DATA / "transformers-5.23.0.log").read_text()), FakeSupervised(0))
    assert problem == "" and run.losses == (3.802, 2.427, 7.641, 1.355) and times == [1 / 240.4]
    run, times, problem, _ = _command_result(read_log("{'train_runtime': '1.0', 'train_steps_per_second': '20.5'}\n"), FakeSupervised(0))
    assert run is not None and run.losses == ()  # measured, but tune() judges it "unproven" (never accepted)
    text = "Traceback ...\nValueError: no --output_dir\n"
    run, _, problem, _ = _command_result(read_log(text), FakeSupervised(1, log=text))
    assert run is None and "exit 1" in problem and "no --output_dir" in problem


# The FIXTURE gradient perturbation for a training command (compatmatrix/tune/fixture_site/sitecustomize.py): only the
# tests set COMPAT_TUNE_FIXTURE_PERTURB; without it, no rank ever has the fixture's folder on its path.

import importlib.util  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from compatmatrix.tune.service import FIXTURE_SITE, FIXTURE_VAR, fixture_pythonpath  # noqa: E402


def fixture_site_module():
    spec = importlib.util.spec_from_file_location("fixture_sitecustomize", FIXTURE_SITE / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # under another name: no start-up side effects
    return module


def test_the_fixture_site_reaches_a_commands_ranks_only_with_the_fixture_variable():
    assert fixture_pythonpath({}) == {} and fixture_pythonpath({FIXTURE_VAR: "", "PYTHONPATH": "/x"}) == {}
    assert fixture_pythonpath({FIXTURE_VAR: "-100@5"}) == {"PYTHONPATH": str(FIXTURE_SITE)}
    assert fixture_pythonpath({FIXTURE_VAR: "2", "PYTHONPATH": "/a:/b"}) == {"PYTHONPATH": f"{FIXTURE_SITE}:/a:/b"}  # first: its sitecustomize wins


@pytest.mark.parametrize("text,parsed", [
    ("-100@5", (-100.0, 5)), ("1.5", (1.5, None)), (" 2@1 ", (2.0, 1)),
    ("2@0", None), ("2@-1", None), ("x@3", None), ("2@x", None), ("", None), ("@3", None),
])
def test_the_fixture_value_is_factor_at_step(text, parsed):
    assert fixture_site_module().parse(text) == parsed


@pytest.mark.parametrize("variable,rank,world,installed", [
    ("-100@5", "1", "2", True),
    ("-100@5", "0", "2", False),  # rank 1 only
    ("-100@5", "1", "1", False),  # a single process has no allreduce to perturb
    ("-100@5", None, None, False),  # the launcher itself (torchrun's agent has no RANK)
    (None, "1", "2", False),  # without the FIXTURE variable nothing happens
    ("nonsense", "1", "2", False),
])
def test_the_fixture_site_hooks_only_rank_1_of_a_multi_rank_run(variable, rank, world, installed):
    """A real interpreter started with the fixture's folder on PYTHONPATH: is the import finder in place?"""
    env = {k: v for k, v in os.environ.items() if k not in (FIXTURE_VAR, "RANK", "WORLD_SIZE")}
    env.update({k: v for k, v in ((FIXTURE_VAR, variable), ("RANK", rank), ("WORLD_SIZE", world)) if v is not None})
    env["PYTHONPATH"] = str(FIXTURE_SITE)
    done = subprocess.run([sys.executable, "-c", "import sys, sitecustomize; print(sitecustomize.__file__); "
                           "print(any(type(f).__name__ == '_Finder' for f in sys.meta_path))"],
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    path, found = done.stdout.split()
    assert Path(path).parent == FIXTURE_SITE
    assert found == str(installed)
