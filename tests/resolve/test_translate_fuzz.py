"""compat translate never reaches the internal-error guard: a property test over the flags it knows, their values
(odd ones too), the transformers/accelerate versions, and a matrix without the [[feature]] entries it reads.

Before the fix, a matrix that lacks transformers:use_cpu_arg (the FIXTURE mini matrix, or any trimmed --matrix file)
turned `--no_cuda`, `--use_cpu`, `--ddp_backend`, `--xpu_backend` and `--use_ipex` into `KeyError: 'use_cpu_arg'`
in the guard; now it is one sentence naming the missing entry (exit 2).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..cli.test_cli_fuzz import run_in_process
from ..conftest import FIXTURES

KNOWN_FLAGS = ["--xpu_backend", "--ddp_backend", "--no_cuda", "--use_cpu", "--use_ipex", "--bf16"]
VALUES = ["ccl", "gloo", "mpi", "nccl", "true", "false", "True", "FALSE", "1", "0", "yes", "no", "", "x", "-", "--", "=", "ccl\n", "\x00",
          "é", "1" * 300]
WORDS = ["python", "run_qa.py", "-m", "torch.distributed.run", "--nproc_per_node", "2", "--output_dir", "/tmp/out", "--", "-"]
TRANSFORMERS = ["4.9.0", "4.20.0", "4.28.1", "4.29.0", "4.30.2", "4.31.0", "4.32.0", "4.51.3", "4.52.0", "4.56.2", "4.57.0", "4.57.6",
                "5.0.0", "5.1.0", "5.23.0", "3.0.0", "99.0", "0", "4.30.2.post1", "5.0.0rc1"]
ACCELERATE = ["0.1.0", "0.20.3", "0.30.0", "1.7.0", "1.8.0", "1.12.0", "1.13.0", "1.15.0", "99.0"]
MATRICES = ["", str(FIXTURES / "mini_matrix.toml")]  # "": the bundled matrix


@st.composite
def flag(draw):
    name = draw(st.sampled_from(KNOWN_FLAGS))
    form = draw(st.sampled_from(["bare", "spaced", "equals"]))
    if form == "bare":
        return [name]
    value = draw(st.one_of(st.sampled_from(VALUES), st.text(max_size=8)))
    return [f"{name}={value}"] if form == "equals" else [name, value]


@st.composite
def translate_lines(draw):
    argv = ["translate", "--transformers", draw(st.sampled_from(TRANSFORMERS)), "--accelerate", draw(st.sampled_from(ACCELERATE))]
    matrix = draw(st.sampled_from(MATRICES))
    if matrix:
        argv += ["--matrix", matrix]
    argv += draw(st.lists(st.sampled_from(["--json", "--no-color"]), max_size=2, unique=True))
    command = list(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
    for part in draw(st.lists(st.one_of(flag(), st.sampled_from(WORDS).map(lambda w: [w])), max_size=6)):
        command += part
    return [*argv, "--", *command]


def _run(argv, capsys) -> tuple[int, str, str]:
    return run_in_process(argv, capsys)


@settings(max_examples=int(os.environ.get("COMPAT_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=translate_lines())
def test_translate_of_any_known_flag_ends_in_an_exit_code_never_the_guard(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    monkeypatch.delenv("COMPAT_PYTHON", raising=False)
    code, out, err = _run(argv, capsys)
    assert code in (0, 1, 2), (argv, code, err[-2000:])
    assert "Traceback" not in out + err, (argv, err[-2000:])
    assert "internal error" not in err, (argv, err[-1000:])
    if code == 2:
        assert err.strip(), argv


@pytest.mark.parametrize("flag_words", [["--no_cuda"], ["--use_cpu"], ["--ddp_backend", "ccl"], ["--xpu_backend", "gloo"], ["--use_ipex"]])
def test_a_matrix_without_the_feature_translate_reads_is_named(flag_words, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    argv = ["translate", "--matrix", str(FIXTURES / "mini_matrix.toml"), "--transformers", "4.40.0", "--accelerate", "0.30.0", "--",
            "python", "run.py", *flag_words]
    code, out, err = _run(argv, capsys)
    assert code == 2, (code, err)
    assert "internal error" not in err and "Traceback" not in err
    assert "[[feature]] transformers:" in err and "mini_matrix.toml" in err  # which entry, in which file
    assert not list(tmp_path.glob("compat-crash-*"))
