"""compat under a REAL two-node Slurm cluster (tests/slurm_cluster.py: Debian's slurmctld/slurmd and munged, the nodes
network namespaces): the live preflight under srun with no rank or master argument, the exported sbatch script run by
sbatch, and what a failure looks like. One cluster per session (the ``slurm_cluster`` fixture); each test leaves the
nodes idle and no process of its job behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ..clean_env import base_env

pytestmark = pytest.mark.integration
COMPAT = (sys.executable, "-m", "compatmatrix")


def cluster_env(**extra):
    return base_env({"COMPAT_PYTHON": None, **extra})


def assert_nothing_left(cluster):
    cluster.wait_idle()
    deadline = time.monotonic() + 15
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.processes() == {}


def test_doctor_live_under_srun_takes_the_layout_from_the_allocation(slurm_cluster, stock_torch213, tmp_path):
    """srun -N2 --ntasks-per-node=1 compat doctor --live --fabric: no --nnodes, --node-rank or --master-addr; each node's
    compat reads them from the allocation, the 4 ranks of the two nodes join one group, sweep every collective (each
    value checked) and measure the one pair of hosts on its own group."""
    output = tmp_path / "doctor-%t.json"
    started = time.monotonic()
    done = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", f"--output={output}", *COMPAT, "doctor", "--live", "--python", str(stock_torch213),
                              "--only", "live", "--json", "--fabric", "--sizes", "1K,64K"], cluster_env(), timeout=300)
    seconds = time.monotonic() - started
    reports = [json.loads((tmp_path / f"doctor-{task}.json").read_text()) for task in (0, 1)]
    failed = [[(c["id"], c["summary"]) for c in r["checks"] if c["status"] == "fail"] for r in reports]
    link = reports[0]["live"]["pairs"]["links"][0]
    print(f"\nthe one (healthy) link: TCP retransmitted {link['retransmitted']} of {link['sent']} segments, {link['spurious']} of them D-SACKed")
    assert done.returncode == 0, (done.stderr[-2000:], failed)  # a healthy veth link is never called lossy (nor anything else failed)
    for report in reports:
        live = report["live"]
        assert (live["launcher"], live["world_size"], report["ok"]) == ("srun", 4, True), live.get("error")
        assert live["master"].startswith("node1:")
        statuses = {c["id"]: c["status"] for c in report["checks"]}
        assert statuses["live.trainer"] == statuses["live.fabric"] == statuses["live.pairs"] == "pass"
        assert live["fabric"]["errors"] == [] and {r["bytes"] for r in live["fabric"]["rows"]} >= {1024}
        assert [(link["a"], link["b"]) for link in live["pairs"]["links"]] == [("node1", "node2")] or \
            [(link["a"], link["b"]) for link in live["pairs"]["links"]] == [("node2", "node1")]
        assert live["pairs"]["links"][0]["allreduce"]["wrong"] == 0 and live["pairs"]["links"][0]["error"] is None
    print(f"\nlive preflight with --fabric under srun -N2: {seconds:.1f} s")
    assert_nothing_left(slurm_cluster)


TRAIN = """\
import os, signal, socket, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if os.environ.get("KILL_RANK") == str(rank):
    os.kill(os.getpid(), signal.SIGKILL)  # a rank killed on the second node
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
weights = [torch.zeros_like(model.module.weight) for _ in range(world)]
dist.all_gather(weights, model.module.weight.detach())
same = all(torch.equal(weights[0], w) for w in weights)
print(f"trained rank {rank} of {world} on {socket.gethostname()} local {os.environ['LOCAL_RANK']} same {same}", flush=True)
open(os.path.join(sys.argv[1], f"trained-{rank}"), "w").close()
dist.destroy_process_group()
"""


def exported_script(folder, python, *options):
    (folder / "train.py").write_text(TRAIN)
    done = subprocess.run([*COMPAT, "export", "sbatch", "torch==2.13.0", "--python", str(python), "--nnodes", "2", "--nproc-per-node", "2", *options,
                           "--", "train.py", str(folder)], capture_output=True, text=True, timeout=120, env=cluster_env(), cwd=folder)
    assert done.returncode == 0, done.stderr
    script = folder / "job.sh"
    script.write_text(done.stdout)
    return script


def submit(cluster, folder, script, env=None, timeout=400):
    """sbatch --wait: the job's exit code, its output, and the seconds it took."""
    started = time.monotonic()
    done = cluster.run(["sbatch", "--wait", f"--chdir={folder}", f"--output={folder}/job.out", str(script)], env or cluster_env(), timeout=timeout)
    return done.returncode, (folder / "job.out").read_text(errors="replace") if (folder / "job.out").exists() else done.stderr, time.monotonic() - started


def test_sbatch_of_the_exported_script_runs_its_preflight_then_trains_on_both_nodes(slurm_cluster, stock_torch213, tmp_path):
    script = exported_script(tmp_path, stock_torch213)
    code, log, seconds = submit(slurm_cluster, tmp_path, script)
    assert code == 0, log[-4000:]
    assert log.count("OK: 0 failed") == 2 and log.index("OK: 0 failed") < log.index("trained rank")  # the preflight passed on both nodes, first
    trained = sorted(line for line in log.splitlines() if line.startswith("trained rank"))
    assert [line.split()[2:8] for line in trained] == [["0", "of", "4", "on", "node1", "local"], ["1", "of", "4", "on", "node1", "local"],
                                                        ["2", "of", "4", "on", "node2", "local"], ["3", "of", "4", "on", "node2", "local"]]
    assert all(line.endswith("same True") for line in trained)
    print(f"\nsbatch (preflight + training) on 2 nodes: {seconds:.1f} s")
    assert_nothing_left(slurm_cluster)


def test_a_failed_preflight_stops_the_batch_job_before_training(slurm_cluster, stock_torch213, tmp_path):
    """GLOO_SOCKET_IFNAME names no interface on the nodes: the preflight fails with its findings, nothing trains."""
    script = exported_script(tmp_path, stock_torch213)
    code, log, _ = submit(slurm_cluster, tmp_path, script, cluster_env(GLOO_SOCKET_IFNAME="nosuch0"))
    assert code != 0 and "compat preflight failed" in log and "nosuch0" in log, log[-4000:]
    assert "trained rank" not in log and not list(tmp_path.glob("trained-*"))
    assert_nothing_left(slurm_cluster)


def test_a_rank_killed_on_the_second_node_ends_the_job_and_is_named(slurm_cluster, stock_torch213, tmp_path):
    script = exported_script(tmp_path, stock_torch213, "--no-preflight")
    code, log, seconds = submit(slurm_cluster, tmp_path, script, cluster_env(KILL_RANK="3"), timeout=200)
    assert code != 0, log[-4000:]
    assert "node2: task 3: Killed" in log, log[-4000:]
    assert_nothing_left(slurm_cluster)


def test_a_node_whose_compat_never_starts_fails_node1s_preflight_within_its_deadline(slurm_cluster, stock_torch213, tmp_path):
    """node2's task ends before compat starts there (a node lost to the step): node1's compat does not wait past its
    own deadline; the group that did not form is a failure, and its evidence names the step's hosts, node2 included."""
    output = tmp_path / "doctor-%t.json"
    started = time.monotonic()
    done = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", f"--output={output}", "sh", "-c",
                              'if [ "$SLURM_NODEID" = 1 ]; then exit 3; fi; exec "$@"', "lost-node",
                              *COMPAT, "doctor", "--live", "--python", str(stock_torch213), "--only", "live", "--live-timeout", "30", "--no-trainer", "--json"],
                             cluster_env(), timeout=120)
    seconds = time.monotonic() - started
    assert done.returncode != 0 and "node2: task 1: Exited with exit code 3" in done.stderr, done.stderr[-2000:]
    report = json.loads((tmp_path / "doctor-0.json").read_text())
    status = {c["id"]: c for c in report["checks"]}
    assert not report["ok"] and status["live.network"]["status"] == "fail" and status["live.hang"]["status"] == "fail"
    assert any("node2 (node 1)" in line for line in status["live.launch"]["evidence"])
    assert seconds < 30 + 30, seconds  # its --live-timeout, and the start of compat and torch
    assert_nothing_left(slurm_cluster)


def test_rank_zero_is_on_the_master_when_slurm_places_task_zero_elsewhere(slurm_cluster, stock_torch213, tmp_path):
    """--distribution=arbitrary with SLURM_HOSTFILE listing node2 first: srun's task 0 (SLURM_PROCID 0) runs on node2
    while the node list, and so the master, starts with node1. compat doctor --live (one task per node) and compat
    launch's task mapping (two per node, the training script of the sbatch test) take each rank from the node's place
    in the list, so rank 0 is on node1 and the group forms (with SLURM_PROCID, rank 0 was on node2: no rendezvous)."""
    from compatmatrix.launchers.srun import _MAP_RANKS

    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node2\nnode1\n")
    arbitrary = cluster_env(SLURM_HOSTFILE=str(hostfile))
    placed = slurm_cluster.run(["srun", "-N2", "-n2", "--distribution=arbitrary", "sh", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_NODEID"'],
                               arbitrary, timeout=60)
    print("\nSLURM_PROCID, host, SLURM_NODEID:", sorted(placed.stdout.splitlines()))
    assert sorted(line.split()[:2] for line in placed.stdout.splitlines()) == [["0", "node2"], ["1", "node1"]], (placed.stdout, placed.stderr)
    output = tmp_path / "doctor-%t.json"
    done = slurm_cluster.run(["srun", "-N2", "-n2", "--distribution=arbitrary", f"--output={output}", *COMPAT, "doctor", "--live", "--python",
                              str(stock_torch213), "--only", "live", "--json", "--no-trainer"], arbitrary, timeout=300)
    reports = [json.loads((tmp_path / f"doctor-{task}.json").read_text()) for task in (0, 1)]
    assert done.returncode == 0, (done.stderr[-2000:], [[(c["id"], c["summary"]) for c in r["checks"] if c["status"] == "fail"] for r in reports])
    for report in reports:
        assert (report["live"]["world_size"], report["ok"]) == (4, True) and report["live"]["master"].startswith("node1:")
    (tmp_path / "train.py").write_text(TRAIN)
    hostfile.write_text("node2\nnode2\nnode1\nnode1\n")
    trained = slurm_cluster.run(["srun", "-N2", "-n4", "--ntasks-per-node=2", "--distribution=arbitrary", f"--chdir={tmp_path}", "sh", "-c", _MAP_RANKS,
                                 "compat-launch-rank", str(stock_torch213), "train.py", str(tmp_path)], arbitrary, timeout=300)
    lines = sorted(line for line in trained.stdout.splitlines() if line.startswith("trained rank"))
    assert trained.returncode == 0 and [line.split()[2:7] for line in lines] == [["0", "of", "4", "on", "node1"], ["1", "of", "4", "on", "node1"],
                                                                                ["2", "of", "4", "on", "node2"], ["3", "of", "4", "on", "node2"]], \
        (trained.stdout[-2000:], trained.stderr[-2000:])
    assert all(line.endswith("same True") for line in lines)
    assert_nothing_left(slurm_cluster)


def test_a_rank_stopped_under_srun_is_named_with_its_node_and_the_job_ended(slurm_cluster, stock_torch213, tmp_path):
    """compat launch --watch --launcher srun in a two-node allocation (salloc -N2), one task per node; rank 1 (node2)
    stops itself with SIGSTOP at step 15 (tests/data/watch_train.py). The watcher reads both ranks' rings from the
    --watch-dir every node sees, names rank 1 on node2 and rank 0 on node1 waiting in the collective, ends the job
    (exit 1); then the nodes are idle and nothing of the job is left."""
    from ..conftest import ROOT

    train = ROOT / "tests" / "data" / "watch_train.py"
    schema = json.loads((ROOT / "compatmatrix" / "schemas" / "watch-v1.json").read_text())
    started = time.monotonic()
    # --exclusive: the allocation holds each node's CPUs, which compat's srun line asks for (--cpus-per-task = the planned cores)
    done = slurm_cluster.run(["salloc", "-N2", "--ntasks-per-node=1", "--exclusive", *COMPAT, "launch", "--launcher", "srun", "--nproc-per-node", "1", "--watch", "--json",
                              "--watch-dir", str(tmp_path / "run"), "--python", str(stock_torch213), "--", str(train)],
                             cluster_env(WATCH_FAULT="stop@15", WATCH_STEPS="400"), timeout=240, cwd=str(ROOT))
    seconds = time.monotonic() - started
    text = done.stdout
    assert "{\n" in text, (done.returncode, done.stderr[-4000:])
    document = json.loads(text[text.index("{\n"):])
    import jsonschema

    jsonschema.validate(document, schema)
    assert done.returncode == 1 and document["ended_by_watch"], (document, done.stderr[-4000:])
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert (stall["rank"], stall["host"]) == (1, "node2") and stall["process_state"] in ("silent", "T"), stall
    assert "all_reduce" in stall["collective"]["op"].replace("allreduce", "all_reduce") and stall["last_entered"] < stall["seq"], stall
    assert [(w["rank"], w.get("host"), w["seq"]) for w in stall["waiting"]] == [(0, "node1", stall["seq"])], stall
    assert "compat launch --watch: stall: rank 1 on node2" in done.stderr and "rank 1: stop at step 15" in done.stderr
    print(f"\nsrun --watch, rank 1 stopped on node2: named ({stall['process_state']}, bound {stall['bound']} s), the job ended; {seconds:.1f} s in all")
    assert_nothing_left(slurm_cluster)
