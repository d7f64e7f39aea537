"""The `compat` command as users run it: real subprocesses, exit codes, JSON schema, rendering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ..conftest import ROOT, pyenv_python, run_compat

SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "resolve-v1.json").read_text())


def resolve_json(*args, code=None):
    done = run_compat("resolve", "--json", *args)
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    if code is not None:
        assert done.returncode == code, done.stderr
    return data


def test_resolve_json_for_the_ccl_stack():
    data = resolve_json("--python-version", "3.11", "--profile", "ddp-ccl", code=0)
    assert data["ok"] is True and data["python"] == "3.11"
    assert data["packages"] == {
        "torch": "2.7.0",
        "intel-extension-for-pytorch": "2.7.0",
        "oneccl-bind-pt": "2.7.0",
        "transformers": "5.0.0",
        "accelerate": "1.12.0",
    }
    assert data["indexes"]["oneccl-bind-pt"]["url"] == "https://pytorch-extension.intel.com/release-whl/stable/cpu/us/"
    assert data["indexes"]["oneccl-bind-pt"]["local_label"] == "+cpu"
    assert data["indexes"]["torch"]["host"] == "pytorch-cpu"
    assert all(data["sources"][name] for name in data["packages"])
    assert len(data["explanation"]) == 5


def test_resolve_json_conflict_exits_1_with_alternatives():
    data = resolve_json("--python-version", "3.10", "torch==1.12.1", "oneccl_bind_pt==1.12.0", code=1)
    assert data["ok"] is False and data["packages"] == {}
    assert data["constraints"] == {"torch": "==1.12.1", "oneccl-bind-pt": "==1.12.0"}
    assert ("oneccl_bind_pt 1.12.0 is built for torch 1.12.0 and pairs only with torch 1.12.* "
            "(documented not to work with torch 1.12.1: intel/torch-ccl@v1.12.0:README.md); you asked for torch==1.12.1.") in data["explanation"]
    change = next(a for a in data["alternatives"] if a["change"] == "change oneccl_bind_pt==1.12.0 to oneccl_bind_pt==1.12.100")
    assert change["packages"] == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}
    assert change["constraints"] == {"torch": "==1.12.1", "oneccl-bind-pt": "==1.12.100"}
    assert change["indexes"]["oneccl-bind-pt"]["url"] == "https://developer.intel.com/ipex-whl-stable"


def test_unsupported_platform_exits_1():
    data = resolve_json("--platform", "macosx_14_0_arm64", code=1)
    assert data["unsupported"] is True
    assert "not Linux" in data["explanation"][0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--python-version", "eleven"], "is not a Python version"),
        (["--platform", "amiga"], "is not a platform tag"),
        (["numpy"], "is not a package compatmatrix resolves"),
        (["--profile", "fast"], "is not a profile"),
        (["--python", "/nonexistent/python3"], "does not exist"),
        (["--python-version", "3.11", "--python", "/usr/bin/python3"], "not allowed with argument"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    done = run_compat("resolve", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_human_output_has_words_not_only_colour():
    done = run_compat("resolve", "--python-version", "3.10", "torch==1.12.1", "ccl==1.12.0", env_extra={"NO_COLOR": "1"})
    assert done.returncode == 1
    assert "NO SET" in done.stdout and "What would work" in done.stdout
    assert "\x1b[" not in done.stdout  # NO_COLOR (and a pipe) means no escape codes
    done = run_compat("resolve", "--python-version", "3.11", "--profile", "ipex", env_extra={"COLUMNS": "200"})
    assert done.returncode == 0
    assert "OK" in done.stdout and "Why these versions" in done.stdout
    assert "\x1b[" not in done.stdout


def test_forced_colour_terminal_gets_colour_unless_no_color():
    coloured = run_compat("resolve", "--profile", "ipex", "--python-version", "3.11", env_extra={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert "\x1b[" in coloured.stdout
    plain = run_compat("resolve", "--profile", "ipex", "--python-version", "3.11", "--no-color", env_extra={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert "\x1b[3" not in plain.stdout  # no colour codes (bold may remain)


@pytest.mark.integration
def test_python_path_probes_the_real_interpreter(tmp_path):
    """--python runs the probe with that interpreter (a fresh venv of the running one) and answers as --python-version does."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    data = resolve_json("--python", str(venv / "bin" / "python"))
    assert data["python"] == running
    assert data["python_origin"].startswith("--python ")
    assert data["platform"] == "linux_x86_64"
    by_version = resolve_json("--python-version", running)
    assert data["ok"] is by_version["ok"] and data["packages"] == by_version["packages"]


@pytest.mark.integration
def test_python_path_probes_an_old_interpreter():
    """The probe is stdlib-only Python 3.6 code: pyenv's CPython 3.6 (the oldest it supports) is the point here."""
    python = pyenv_python("6")
    if python is None:
        pytest.skip("no pyenv CPython 3.6 on this machine (the oldest Python the probe supports is what this test runs)")
    data = resolve_json("--python", python)
    assert data["python"] == "3.6"
    assert data["python_origin"].startswith("--python ")
    assert data["ok"] is False
    assert "use Python 3.7" in [a["change"] for a in data["alternatives"]]


def test_matrix_json_lists_everything_with_sources():
    done = run_compat("matrix", "--json")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data["schema_version"] == 1 and data["command"] == "matrix"
    ccl = {r["version"]: r for r in data["releases"]["oneccl-bind-pt"]}
    assert ccl["1.12.100"]["torch"] == "1.12.1" and ccl["1.12.0"]["torch"] == "1.12.0"
    assert all(r["sources"] for rows in data["releases"].values() for r in rows)
    assert {e["package"] for e in data["end_of_life"]} == {"intel-extension-for-pytorch", "oneccl-bind-pt"}


def test_matrix_filters():
    done = run_compat("matrix", "--json", "--package", "ccl", "--python-version", "3.11")
    rows = json.loads(done.stdout)["releases"]
    assert list(rows) == ["oneccl-bind-pt"]
    assert all("3.11" in w["python"] for r in rows["oneccl-bind-pt"] for w in r["wheels"][:1])
    assert "1.12.0" not in {r["version"] for r in rows["oneccl-bind-pt"]}
    done = run_compat("matrix", "--json", "--package", "ipex", "--torch", "==2.3.0")
    versions = {r["version"] for r in json.loads(done.stdout)["releases"]["intel-extension-for-pytorch"]}
    assert versions == {"2.3.0", "2.3.100"}


def test_matrix_table_marks_unverified_and_shows_sources():
    done = run_compat("matrix", "--package", "ccl", "--sources", env_extra={"COLUMNS": "250"})
    assert done.returncode == 0
    assert "intel/torch-ccl@v1.12.100:README.md" in done.stdout
    assert "?" in done.stdout and "not verified" in done.stdout
    assert "Registry facts last cross-checked" in done.stdout


def test_matrix_bad_filter_is_a_usage_error():
    assert run_compat("matrix", "--package", "deepspeed").returncode == 2
    assert run_compat("matrix", "--torch", "=>2").returncode == 2


def test_alternative_matrix_via_environment(tmp_path: Path):
    fixture = ROOT / "tests" / "fixtures" / "mini_matrix.toml"
    done = run_compat("resolve", "--json", "--python-version", "3.9", "--with", "ccl", "torch==1.12.1", env_extra={"COMPAT_MATRIX": str(fixture)})
    assert json.loads(done.stdout)["packages"] == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}


def test_closed_pipe_is_not_reported_as_problems_found():
    for args in (["matrix"], ["matrix", "--json"]):
        writer = subprocess.Popen([sys.executable, "-m", "compatmatrix", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reader = subprocess.Popen(["head", "-c", "10"], stdin=writer.stdout, stdout=subprocess.DEVNULL)
        writer.stdout.close()  # only the reader holds the pipe now
        reader.wait(timeout=60)
        assert writer.wait(timeout=60) == 141, writer.stderr.read()
        writer.stderr.close()


def test_not_a_python_interpreter():
    done = run_compat("resolve", "--python", "/usr/bin/true")
    assert done.returncode == 2
    assert "'/usr/bin/true' is not a Python interpreter" in done.stderr


def test_matrix_marks_features_that_hold_for_part_of_a_line():
    rows = json.loads(run_compat("matrix", "--json", "--package", "accelerate").stdout)["releases"]["accelerate"]
    line = next(r for r in rows if r["line"] == "0.29")
    assert "ddp_backend_ccl_works (>=0.20.0,!=0.29.0,!=0.29.1,!=0.29.2,<1.13.0)" in line["features"]  # 0.29.0-0.29.2 are broken
    assert "ddp_backend_ccl_works" in next(r for r in rows if r["line"] == "1.12")["features"]


def test_resolve_and_install_plan_torchvision_and_torchaudio():
    data = resolve_json("--python-version", "3.11", "torch==2.7.0", "torchvision", "--with", "torchaudio", code=0)
    assert data["components"] == ["torch", "torchvision", "torchaudio"]
    assert data["packages"] == {"torch": "2.7.0", "torchvision": "0.22.0", "torchaudio": "2.7.0"}
    assert {name: (i["host"], i["local_label"]) for name, i in data["indexes"].items()} == {name: ("pytorch-cpu", "+cpu") for name in data["packages"]}
    assert data["sources"]["torchvision"][0] == "registry:pypi/torchvision/0.22.0"
    done = run_compat("install", "--print", "requirements", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                      "torch==2.7.0", "torchvision", "torchaudio")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["torch==2.7.0+cpu", "torchvision==0.22.0+cpu", "torchaudio==2.7.0+cpu"]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in done.stdout
    pypi = run_compat("install", "--print", "requirements", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                      "torch==2.7.0", "torchvision", "--torch-from-pypi")
    assert pypi.stdout.splitlines()[-2:] == ["torch==2.7.0", "torchvision==0.22.0"]  # one build: both from PyPI
    rows = json.loads(run_compat("matrix", "--json", "--package", "torchvision", "--torch", "==2.7.0").stdout)["releases"]
    assert [(r["version"], r["torch"]) for r in rows["torchvision"]] == [("0.22.0", "2.7.0")]
