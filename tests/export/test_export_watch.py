"""compat export pytorchjob | sbatch --watch: what the rendered job does (the golden files are in
test_export_golden.py's cases *-watch*): the pods' or the batch script's last line runs compat launch --watch, the
run folder is where the nodes can reach it (one pod: compat's own; several: an emptyDir each, or the claim every pod
mounts; Slurm: the submit directory), the manifests read back under go-yaml's rules and pass --validate, the scripts
are bash, and what cannot be watched is refused."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from compatmatrix.export.command import launch_words
from compatmatrix.render.manifest import load_documents

from .test_export_golden import GOLDEN


def _manifest(name: str) -> dict:
    (document,) = load_documents((GOLDEN / f"{name}.txt").read_text())  # go-yaml's typing (render/goyaml.py), as the API server reads it
    return document


def _pod(document: dict) -> tuple[list[str], list[dict], list[dict]]:
    """(the container's command and args, its volumes, its mounts) of a PyTorchJob's Master or a TrainJob's trainer (the
    volumes and mounts of the release's override, read as the cluster's API server reads them: export/releases.override_parts)."""
    from compatmatrix.export.releases import override_parts

    if document["kind"] == "PyTorchJob":
        spec = document["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        container = spec["containers"][0]
        return [*container["command"], *container["args"]], spec["volumes"], container["volumeMounts"]
    trainer = document["spec"]["trainer"]
    field = next(name for name in ("podTemplateOverrides", "podSpecOverrides", "runtimePatches") if name in document["spec"])
    ((_job, pod, _path),) = override_parts(field, document["spec"])
    return [*trainer["command"], *trainer["args"]], pod["volumes"], pod["containers"][0]["volumeMounts"]


def _last_line(argv: list[str]) -> list[str]:
    assert argv[:2] == ["bash", "-c"]
    subprocess.run(["bash", "-n", "-c", argv[2]], check=True, timeout=30)  # the script is bash
    return shlex.split(argv[2].splitlines()[-1])


def test_several_pods_each_watch_their_own_ranks_in_an_emptydir():
    argv, volumes, mounts = _pod(_manifest("pytorchjob-watch-per-pod"))
    line = _last_line(argv)
    assert line[:6] == ["exec", "/opt/compat/bin/compat", "launch", "--watch", "--launcher", "torchrun"]
    assert line[line.index("--nnodes") + 1] == "3" and line[line.index("--watch-dir") + 1] == "/compat-watch" and line[-2:] == ["--", "$@"]
    assert {"name": "compat-watch", "emptyDir": {}} in volumes and {"name": "compat-watch", "mountPath": "/compat-watch"} in mounts
    assert argv[argv.index("compat-job") + 1:] == ["run.sh", "--x", "a 'b' $c\nd"]  # compat launch's words: no --no_python
    notes = (GOLDEN / "pytorchjob-watch-per-pod.txt").read_text()
    assert "each pod's watcher sees its own ranks only" in notes and "no stall" in notes


def test_one_pod_is_watched_in_compats_own_folder():
    argv, volumes, _mounts = _pod(_manifest("pytorchjob-watch-one-pod"))
    line = _last_line(argv)
    assert "--watch" in line and "--nnodes" not in line and "--watch-dir" not in line
    assert [v["name"] for v in volumes] == ["dshm"]


@pytest.mark.parametrize("name", ["trainjob-watch-claim", "trainjob-v2.0-watch-claim"])
def test_a_claim_gives_every_pod_one_run_folder(name):
    argv, volumes, mounts = _pod(_manifest(name))
    line = _last_line(argv)
    assert line[line.index("--watch-dir") + 1] == "/compat-watch/compat-train" and "--nnodes" in line
    assert {"name": "compat-watch", "persistentVolumeClaim": {"claimName": "train-watch"}} in volumes
    assert {"name": "compat-watch", "mountPath": "/compat-watch"} in mounts
    assert [v["name"] for v in volumes] == ["dshm", "compat-watch"]  # /dev/shm's volume is still there, beside it


def test_the_batch_script_watches_under_the_submit_directory():
    text = (GOLDEN / "sbatch-watch.txt").read_text().replace("PYTHON", sys.executable)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True, timeout=30)
    assert 'watch_dir="$SLURM_SUBMIT_DIR/compat-watch-$SLURM_JOB_ID"' in text
    assert ' launch --launcher srun --watch --watch-dir "$watch_dir" --python "$python" --nproc-per-node 4 -- train.py --ddp_backend gloo' in text


@pytest.mark.parametrize("name", ["pytorchjob-watch-per-pod", "pytorchjob-watch-one-pod", "trainjob-watch-claim"])
def test_the_watched_manifests_pass_validate(name, tmp_path, capsys):
    from compatmatrix.cli import main

    path = tmp_path / "job.yaml"
    path.write_text((GOLDEN / f"{name}.txt").read_text())
    assert main(["export", "--validate", str(path)]) == 0, capsys.readouterr()


def test_the_training_command_in_compat_launchs_words():
    assert launch_words(["--no_python", "run.sh", "--x"]) == ("run.sh", "--x")
    assert launch_words(["--module", "trainer.main"]) == ("-m", "trainer.main")
    assert launch_words(["train.py", "--no_python"]) == ("train.py", "--no_python")
    assert launch_words(["-m", "m"]) == ("-m", "m")


@pytest.mark.parametrize("argv, message", [
    (["ray", "--watch", "--", "train.py"], "--watch goes with compat export pytorchjob, not ray"),
    (["skypilot", "--watch", "--", "train.py"], "--watch goes with compat export pytorchjob, not skypilot"),
    (["sbatch", "--watch", "--watch-claim", "c", "--", "train.py"], "--watch-claim goes with compat export pytorchjob, not sbatch"),
    (["pytorchjob", "--nnodes", "2", "--watch-claim", "c", "--", "train.py"], "--watch-claim holds the run folder of --watch"),
    (["pytorchjob", "--watch", "--watch-claim", "c", "--", "train.py"], "the job has one (--nnodes 1)"),
    (["pytorchjob", "--nnodes", "2", "--watch", "--watch-claim", "Bad_Claim", "--", "train.py"], "is not a claim's name"),
])
def test_what_cannot_be_watched_is_refused(argv, message, capsys):
    from compatmatrix.cli import main

    assert main(["export", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
