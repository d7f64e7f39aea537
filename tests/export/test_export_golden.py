"""The job exports byte for byte: compat export pytorchjob (PyTorchJob, TrainJob), sbatch and ray for fixed inputs (every
component of the set pinned, a fixed Python and platform), run in-process through the command line,
against the files in tests/data/export/golden/ written by the code before the job contract (compatmatrix/job/) took
over building them. A changed byte is a changed export: rewrite the files only for a change meant to be made
(COMPAT_WRITE_GOLDEN=1 writes them), and say so in the commit."""

from __future__ import annotations

import os
import sys

import pytest

from ..conftest import ROOT

GOLDEN = ROOT / "tests" / "data" / "export" / "golden"
TARGET = ("--platform", "manylinux_2_28_x86_64")
# every component pinned: the bundled matrix gives these sets as long as it holds these releases
CCL_SET = ("torch==2.7.1", "intel-extension-for-pytorch==2.7.0", "oneccl-bind-pt==2.7.0", "transformers==4.56.2", "accelerate==1.10.1", "--profile", "ddp-ccl")
STOCK_SET = ("torch==2.13.0", "transformers==5.24.0", "accelerate==1.15.0", "--profile", "stock")
JOB = ("--image", "registry.example/train:1", "--cpu", "8", "--memory", "16Gi")
ENV_PYTHON = "/shared/venv/bin/python"
# FIXTURE: what --python's environment holds for the sbatch cases (its probe is replaced: no such interpreter here)
WRITE = os.environ.get("COMPAT_WRITE_GOLDEN") == "1"  # read at import: the tests run with a scrubbed environment
HELD = {"torch": "2.13.0+cpu", "Transformers": "5.24.0", "accelerate": "1.15.0"}

CASES = {
    "pytorchjob-one-node": ("pytorchjob", *CCL_SET, *JOB, "--python-version", "3.11", "--", "python", "train.py", "--ddp_backend", "ccl"),
    "pytorchjob-three-nodes": ("pytorchjob", "--image", "registry.example/train:1", "--cpu", "7500m", "--memory", "16Gi", *STOCK_SET,
                               "--python-version", "3.11", "--nnodes", "3", "--nproc-per-node", "2", "--namespace", "ml", "--name", "j1",
                               "--shm-size", "4Gi", "--threads-per-core", "2", "--no-preflight", "--", "run.sh", "--x", "a 'b' $c\nd"),
    "trainjob-newest": ("pytorchjob", "--trainer-v2", *CCL_SET, *JOB, "--python-version", "3.11", "--nnodes", "2", "--nproc-per-node", "3", "--",
                        "train.py", "--ddp_backend", "gloo"),
    "trainjob-v2.0": ("pytorchjob", "--trainer-v2", "--trainer-version", "v2.0", *JOB, "--python-version", "3.11", *STOCK_SET, "--",
                      "-m", "trainer.main", "--lr", "1e-4"),
    "sbatch-resolved": ("sbatch", *CCL_SET, "--python", ENV_PYTHON, "--nnodes", "2", "--nproc-per-node", "4", "--time", "1:00:00", "--partition", "cpu",
                        "--", "python", "train.py", "--ddp_backend", "ccl"),
    "sbatch-held": ("sbatch", *STOCK_SET, "--python", ENV_PYTHON, "--name", "held", "--no-preflight", "--", "train.py", "--ddp_backend",
                    "gloo", "it's \"$HOME\""),
    # --watch (written by the code that added it; without --watch every case above is as before): the pods or the batch
    # script run the training under compat launch --watch (docs/commands/export.md, "Watching the job")
    "pytorchjob-watch-per-pod": ("pytorchjob", "--image", "registry.example/train:1", "--cpu", "8", "--memory", "16Gi", *STOCK_SET, "--python-version", "3.11",
                                 "--nnodes", "3", "--nproc-per-node", "2", "--watch", "--", "run.sh", "--x", "a 'b' $c\nd"),
    "pytorchjob-watch-one-pod": ("pytorchjob", *CCL_SET, *JOB, "--python-version", "3.11", "--watch", "--", "python", "train.py", "--ddp_backend", "ccl"),
    "trainjob-watch-claim": ("pytorchjob", "--trainer-v2", *STOCK_SET, *JOB, "--python-version", "3.11", "--nnodes", "2", "--nproc-per-node", "3",
                             "--watch", "--watch-claim", "train-watch", "--", "-m", "trainer.main", "--lr", "1e-4"),
    "trainjob-v2.0-watch-claim": ("pytorchjob", "--trainer-v2", "--trainer-version", "v2.0", *JOB, "--python-version", "3.11", *STOCK_SET, "--nnodes", "2",
                                  "--watch", "--watch-claim", "train-watch", "--", "train.py"),
    "sbatch-watch": ("sbatch", *STOCK_SET, "--python", ENV_PYTHON, "--nnodes", "2", "--nproc-per-node", "4", "--watch", "--", "train.py", "--ddp_backend", "gloo"),
    # compat export ray (written before Ray moved onto the job contract): --cpus-per-node fixed (its default is this machine's)
    "ray-resolved": ("ray", *CCL_SET, "--python-version", "3.11", "--nnodes", "2", "--nproc-per-node", "2", "--cpus-per-node", "8", "--",
                     "python", "train.py", "--ddp_backend", "ccl"),
    "ray-held": ("ray", *STOCK_SET, "--python", ENV_PYTHON, "--name", "held", "--cpus-per-node", "6", "--nproc-per-node", "3",
                 "--gloo-timeout", "90", "--", "train.py", "--ddp_backend", "gloo", "it's \"$HOME\""),
}


@pytest.fixture
def fixture_target(monkeypatch, request):
    """FIXTURE --python: the interpreter's probe answers Python 3.11 on the fixed platform; its environment holds HELD
    for the -held case and nothing for the others (a new environment: the resolved set is what it must hold)."""
    from compatmatrix import planning
    from compatmatrix.environment import snapshot as snapshots
    from compatmatrix.environment.from_pins import snapshot_from_pins
    from compatmatrix.target import Platform, PythonTarget

    real = planning.target_of

    def target_of(target, snapshot=None):
        if target.interpreter:
            return PythonTarget.parse("3.11"), Platform.from_tag(target.platform)
        return real(target, snapshot)

    pins = HELD if request.node.callspec.id.endswith("held") else {}
    monkeypatch.setattr(planning, "target_of", target_of)
    monkeypatch.setattr(snapshots, "take_snapshot", lambda interpreter: snapshot_from_pins(
        pins, PythonTarget.parse("3.11").version, Platform.from_tag("manylinux_2_28_x86_64"), interpreter))


def exported(args, capsys) -> str:
    from compatmatrix.cli import main

    code = main(["export", args[0], *TARGET, *args[1:]])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the compat the batch script runs is this interpreter's -m compatmatrix: the one machine-dependent word
    return out.replace(sys.executable, "PYTHON")


@pytest.mark.parametrize("name", list(CASES))
def test_the_job_exports_are_byte_for_byte_as_before(name, fixture_target, capsys):
    text = exported(CASES[name], capsys)
    golden = GOLDEN / f"{name}.txt"
    if WRITE:
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
