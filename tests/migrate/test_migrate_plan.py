"""compat migrate's plan on metadata-only environments of the old lines (the 1.10, 1.12, 2.0, 2.4 and 2.7 stacks, each
in a real venv of the Python it ran on, holding dist-info entries only) and on pins: what goes, what comes, and the
resolver's reasons; a Python that cannot have the newest torch is told what it can have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from packaging.specifiers import SpecifierSet

from compatmatrix.environment.from_pins import snapshot_from_pins
from compatmatrix.errors import UsageError
from compatmatrix.migrate import MigrateOptions, run_migrate
from compatmatrix.migrate.plan import plan_migration, python_target, torch_spec
from compatmatrix.target import Platform

from ..clean_env import base_env
from ..conftest import ROOT, pyenv_python
from ..fixture_envs import FixtureEnv

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "migrate-v1.json").read_text())
LINUX = Platform.from_tag("manylinux_2_28_x86_64")
QA = ["mpirun", "-n", "2", "-genv", "OMP_NUM_THREADS=23", "python3", "run_qa.py", "--output_dir", "/tmp/qa", "--no_cuda", "--ddp_backend", "ccl",
      "--use_ipex", "--bf16"]

# (Python, the stack as it was installed, the stock set compat must plan for that Python)
OLD_LINES = {
    "1.10 on 3.6": ("6", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "torch-ccl": "1.10.0", "transformers": "4.18.0"},
                    {"torch": "1.10.2+cpu", "transformers": "4.18.0", "accelerate": "0.9.0"}),
    "1.12 on 3.7": ("7", {"torch": "1.12.1", "intel-extension-for-pytorch": "1.12.300", "oneccl-bind-pt": "1.12.100", "transformers": "4.28.1",
                          "accelerate": "0.18.0"},
                    {"torch": "1.13.1+cpu", "transformers": "4.30.2", "accelerate": "0.20.3"}),
    "2.0 on 3.8": ("8", {"torch": "2.0.1", "intel-extension-for-pytorch": "2.0.100", "oneccl-bind-pt": "2.0.0", "transformers": "4.31.0",
                         "accelerate": "0.21.0", "torchvision": "0.15.2"},
                   {"torch": "2.4.1+cpu", "torchvision": "0.19.1+cpu", "transformers": "4.46.3", "accelerate": "1.0.1"}),
    "2.4 on 3.8": ("8", {"torch": "2.4.0", "intel-extension-for-pytorch": "2.4.0", "oneccl-bind-pt": "2.4.0", "transformers": "4.46.3",
                         "accelerate": "1.0.1"},
                   {"torch": "2.4.1+cpu", "transformers": "4.46.3", "accelerate": "1.0.1"}),
    "2.4 on 3.9": ("9", {"torch": "2.4.0", "intel-extension-for-pytorch": "2.4.0", "oneccl-bind-pt": "2.4.0", "transformers": "4.46.3",
                         "accelerate": "1.0.1"},
                   {"torch": "2.8.0+cpu", "transformers": "4.57.6", "accelerate": "1.10.1"}),
    "2.7 on 3.10": ("10", {"torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0", "transformers": "5.0.0",
                           "accelerate": "1.12.0"},
                    {"torch": "2.14.1+cpu", "transformers": "5.20.2", "accelerate": "1.15.0"}),
    "2.7 on 3.11": ("11", {"torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0", "transformers": "5.0.0",
                           "accelerate": "1.12.0", "torchaudio": "2.7.0"},
                    # torchaudio 2.11.1 declares torch>=2.11 (a floor): the newest torch, as pip takes it (issue 30; was 2.10.0)
                    {"torch": "2.15.0+cpu", "torchaudio": "2.11.1+cpu", "transformers": "5.24.0", "accelerate": "1.15.0"}),
}


def metadata_env(root: Path, minor: str, pins: dict[str, str]) -> Path:
    python = pyenv_python(minor) if minor != f"{sys.version_info.minor}" else sys.executable
    if python is None:
        pytest.skip(f"no CPython 3.{minor} on this machine (pyenv)")
    env = FixtureEnv(root, python)
    for name, version in pins.items():
        env.dist(name, version)
    return env.python


@pytest.mark.parametrize("line", sorted(OLD_LINES))
def test_old_line_metadata_environment_gets_the_stock_set_of_its_python(tmp_path, line):
    minor, pins, expected = OLD_LINES[line]
    python = metadata_env(tmp_path / "env", minor, pins)
    code, doc = run_migrate(MigrateOptions(python=str(python), dry_run=True, command=tuple(QA)))
    jsonschema.validate(doc, SCHEMA)
    assert doc["state"] == "planned" and doc["python"] == f"3.{minor}"
    assert doc["install"] == expected
    assert sorted(doc["remove"]) == sorted(n for n in pins if n in ("intel-extension-for-pytorch", "oneccl-bind-pt", "torch-ccl"))
    for change in doc["changes"]:
        assert change["why"].startswith(f"{change['name']} {change['after'].split('+')[0]}:")  # the resolver's own sentence for that version
        assert change["before"] == pins.get(change["name"])
    if line == "1.10 on 3.6":  # transformers 4.18 sets up CPU DDP with mpi or ccl only: the command cannot move to gloo
        assert code == 1 and doc["ok"] is False and "mpi or ccl" in doc["command_blocking"][0]
    else:
        assert code == 0 and doc["ok"] is True, doc["command_blocking"]
        assert "gloo" in doc["command"] and "--use_ipex" not in doc["command"]


def test_python_3_8_is_told_what_it_can_get(tmp_path):
    minor, pins, _ = OLD_LINES["2.4 on 3.8"]
    python = metadata_env(tmp_path / "env", minor, pins)
    _, doc = run_migrate(MigrateOptions(python=str(python), dry_run=True))
    torch = next(c for c in doc["changes"] if c["name"] == "torch")
    assert torch["before"] == "2.4.0" and torch["after"] == "2.4.1+cpu" and torch["kind"] == "upgrade"
    assert "torch 2.5.0 has no wheel for Python 3.8" in torch["why"]
    assert any(n.startswith("the stock set for Python 3.8 has torch 2.4.1, not 2.15.0 (the newest torch)") for n in doc["notes"])
    assert {c["name"]: c["kind"] for c in doc["changes"]} == {"torch": "upgrade", "transformers": "keep", "accelerate": "keep"}


def test_dry_run_answers_in_a_new_process_on_a_metadata_environment(tmp_path):
    """A new process each time (start-up, probe, plan), as the command runs. How fast it answers is a benchmark's
    question (bench/), not a test's: a wall-clock assertion fails on a loaded machine and proves nothing."""
    _, pins, _ = OLD_LINES["2.7 on 3.11"]
    python = metadata_env(tmp_path / "env", f"{sys.version_info.minor}", pins)
    code = ("import json, sys; from compatmatrix.migrate import MigrateOptions, run_migrate; "
            f"c, d = run_migrate(MigrateOptions(python={str(python)!r}, dry_run=True, command=tuple(sys.argv[1:]))); print(json.dumps(d))")
    done = subprocess.run([sys.executable, "-c", code, *QA], capture_output=True, text=True, timeout=120, env=base_env(), cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["install"]["torch"] == "2.15.0+cpu"


def test_pins_from_a_requirements_file(tmp_path):
    pins = tmp_path / "requirements.txt"
    pins.write_text("-f https://developer.intel.com/ipex-whl-stable-cpu\ntorch==2.0.1+cpu\nintel_extension_for_pytorch==2.0.100\noneccl_bind_pt==2.0.0\n"
                    "transformers==4.31.0\naccelerate==0.21.0\ndatasets==2.14.0\n")
    code, doc = run_migrate(MigrateOptions(requirement_files=(str(pins),), python_version="3.8", platform="manylinux_2_28_x86_64", command=tuple(QA)))
    jsonschema.validate(doc, SCHEMA)
    assert code == 0 and doc["state"] == "planned" and doc["dry_run"] is True
    assert doc["install"] == {"torch": "2.4.1+cpu", "transformers": "4.46.3", "accelerate": "1.0.1"}
    assert sorted(doc["remove"]) == ["intel-extension-for-pytorch", "oneccl-bind-pt"]
    assert doc["env"]["inspected"] is False and doc["env"]["unset"] == []
    assert doc["command"][0] == "torchrun"  # nothing says the job had another MPI: the guides' bundled one goes
    assert "--bf16" in doc["command"] and any("CPU is not known" in w for w in doc["command_warnings"])
    assert any("nothing is installed for pins" in n for n in doc["notes"])


def test_to_torch_limits_the_set_and_a_torch_no_stock_set_has_is_no_set(matrix):
    snapshot = snapshot_from_pins({"torch": "2.8.0", "intel-extension-for-pytorch": "2.8.0", "transformers": "4.56.2", "accelerate": "1.10.1"},
                                  python_target_version("3.11"), LINUX, "pins")
    plan = plan_migration(matrix, snapshot, python_target(snapshot, "pins"), LINUX, torch_spec("2.13.0"))
    assert plan.ok and plan.target_pin("torch") == "2.13.0+cpu"
    assert not any("newest torch" in n for n in plan.notes)  # asked for: not worth a note
    none = plan_migration(matrix, snapshot, python_target(snapshot, "pins"), LINUX, torch_spec("==1.5.0"))
    assert not none.ok and none.targets == () and none.conflict_reasons
    assert plan_migration(matrix, snapshot, python_target(snapshot, "pins"), LINUX).target_pin("torch") == "2.15.0+cpu"


def python_target_version(text: str):
    from packaging.version import Version

    return Version(text)


@pytest.mark.parametrize("given, spec", [("2.13.0", "==2.13.0"), ("2.13", "==2.13.*"), ("torch==2.13.0+cpu", "==2.13.0"), (">=2.10,<2.14", ">=2.10,<2.14"),
                                         ("", None)])
def test_to_torch_spellings(given, spec):
    assert torch_spec(given) == (SpecifierSet(spec) if spec else None)


def test_to_torch_nonsense_is_a_usage_error():
    with pytest.raises(UsageError, match="not a torch version or specifier"):
        torch_spec("two point thirteen")


def test_cuda_wheels_of_a_pypi_torch_are_named_not_removed(matrix):
    pins = {"torch": "2.8.0", "intel-extension-for-pytorch": "2.8.0", "nvidia-cublas-cu12": "12.8.4.1", "nvidia-nccl-cu12": "2.27.3", "triton": "3.4.0"}
    snapshot = snapshot_from_pins(pins, python_target_version("3.11"), LINUX, "pins")
    plan = plan_migration(matrix, snapshot, python_target(snapshot, "pins"), LINUX)
    assert [r.canonical for r in plan.removals] == ["intel-extension-for-pytorch"]
    assert any("its 3 CUDA wheels (nvidia-cublas-cu12, nvidia-nccl-cu12, triton) stay installed" in n for n in plan.notes)


def test_a_package_folder_nobody_owns_is_named(tmp_path):
    env = FixtureEnv(tmp_path / "env")
    env.dist("torch", "2.7.0")
    env.module("oneccl_bindings_for_pytorch/__init__.py", "")  # the bindings' folder, left without its dist-info
    _, doc = run_migrate(MigrateOptions(python=str(env.python), dry_run=True))
    assert doc["remove"] == []
    assert any("imports as oneccl_bindings_for_pytorch but no installed distribution owns it" in n for n in doc["notes"])


def test_the_stock_set_installed_already_changes_nothing(tmp_path):
    env = FixtureEnv(tmp_path / "env")
    for name, version in {"torch": "2.15.0+cpu", "transformers": "5.24.0", "accelerate": "1.15.0"}.items():
        env.dist(name, version)
    if sys.version_info[:2] != (3, 11) and sys.version_info[:2] != (3, 12):
        pytest.skip("the expected set is the one of Python 3.11/3.12")
    code, doc = run_migrate(MigrateOptions(python=str(env.python), yes=True))
    assert code == 0 and doc["state"] == "unchanged" and {c["kind"] for c in doc["changes"]} == {"keep"}


def test_the_whole_oneccl_stack_is_named_in_the_removals_impi_rt_included(tmp_path):
    """Bindings built against the PyPI runtime: oneccl-cpu and impi-rt (whose mpirun the job ran under) go too, each named
    with why (issue 25, item 5); the job's mpirun, impi-rt's, next to the interpreter, is named as impi-rt's."""
    _, pins, _ = OLD_LINES["2.7 on 3.11"]
    env = FixtureEnv(tmp_path / "env")
    for name, version in {**pins, "oneccl-cpu": "2021.14.1", "impi-rt": "2021.14.1"}.items():
        env.dist(name, version)
    mpirun = env.python.parent / "mpirun"
    mpirun.write_text("#!/bin/sh\n# FIXTURE mpirun written by tests/migrate/test_migrate_plan.py\nexit 0\n")
    mpirun.chmod(0o755)
    record = next(env.site.glob("impi_rt-*.dist-info")) / "RECORD"
    record.write_text(f"{os.path.relpath(mpirun, env.site)},,\n")
    _, doc = run_migrate(MigrateOptions(python=str(env.python), dry_run=True, command=("mpirun", "-n", "2", "python", "train.py", "--ddp_backend", "ccl")))
    jsonschema.validate(doc, SCHEMA)
    assert {"oneccl-cpu", "impi-rt", "oneccl-bind-pt"} <= set(doc["remove"])
    why = {r["name"]: r["why"] for r in doc["removals"]}
    assert why["impi-rt"].startswith("Intel MPI's runtime from PyPI (its mpirun, libmpi and libfabric)")
    assert doc["command"][0] == "torchrun"
    edits = " ".join(e["why"] for e in doc["command_edits"])
    assert f"the job's mpirun ({mpirun}) is impi-rt's" in edits and "bundled with the oneCCL bindings" not in edits
