"""compat launch --watch across two REAL hosts made on this machine (tests/netns_hosts.py: network namespaces, each with
its own host name and PID space, sharing the file system as a cluster shares one): real torch 2.13 CPU ranks on gloo
(tests/data/watch_train.py), real torchrun with --nnodes 2 (one compat launch per host) and Intel MPI's real mpirun
(impi-rt) starting the other host's rank through the hosts' remote shell. The rings of both hosts' ranks go to one
--watch-dir every host sees; the watcher reads a rank of the other host by its heartbeats and its ring's lock.

Rank 1 (on node2) stops itself with SIGSTOP at step 15; the finding must name rank 1 on node2, the collective it never
entered and rank 0 on node1 waiting in it, within 60 s of the line rank 1 prints just before it stops; then nothing may be
left running on either host (their own PID spaces, read from outside) nor anywhere carrying the test's mark.
"""

from __future__ import annotations

import json
import sys
import uuid

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..live.test_hosts_netns import assert_nothing_left, hosts, port  # noqa: F401 (hosts: the two-host fixture)
from ..netns_hosts import HostSpec
from .test_watch_real import Streamed

pytestmark = pytest.mark.integration
SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "watch-v1.json").read_text())
TRAIN = ROOT / "tests" / "data" / "watch_train.py"
DEADLINE_S = 240


@pytest.fixture(scope="module")
def stock(stock_torch213):
    return stock_torch213


@pytest.fixture(scope="module")
def impi():
    from ..real_envs import real_env

    return str(real_env("impi").parent / "mpirun")


class Watched(Streamed):
    """compat launch --watch started on a test host; its stderr lines with the time each was read."""

    def __init__(self, cluster, host, args, mark, env_extra):
        env = base_env({"COMPAT_TEST_TREE_MARK": mark, "WATCH_STEPS": "400", **env_extra},
                       drop=("COMPAT_LIVE_FIXTURE_FAULT", "CCL_WORKER_COUNT", "PYTHONPATH"))
        self.host = host
        super().__init__(cluster.popen(host, [sys.executable, "-m", "compatmatrix", "launch", *args], env, cwd=str(ROOT)))

    def finish(self, timeout=DEADLINE_S):
        return super().finish(timeout)

    def text(self):
        return "\n".join(line for _, line in self.seen)[-6000:]


def check_stall(document, waiting_host):
    jsonschema.validate(document, SCHEMA)
    assert document["ended_by_watch"] and document["interrupted"] is None, document
    (stall,) = [f for f in document["findings"] if f["kind"] == "stall"]
    assert stall["rank"] == 1 and stall["host"] == "node2", stall
    assert stall["last_entered"] < stall["seq"] and "all_reduce" in stall["collective"]["op"].replace("allreduce", "all_reduce"), stall
    assert [(w["rank"], w.get("host")) for w in stall["waiting"]] == [(0, waiting_host)] and stall["waiting"][0]["seq"] == stall["seq"], stall
    return stall


def test_torchrun_on_two_hosts_names_the_rank_stopped_on_the_other_host_on_both(hosts, stock, tmp_path):  # noqa: F811
    cluster = hosts()
    mark = uuid.uuid4().hex
    shared = cluster.folder / "watch"
    p = port()
    runs = []
    for node_rank, host in enumerate(("node1", "node2")):
        args = ["--watch", "--launcher", "torchrun", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node_rank), "--master-addr", "node1",
                "--master-port", str(p), "--ccl-workers", "0", "--python", str(stock), "--watch-dir", str(shared),
                "--json-file", str(cluster.folder / f"{host}.json"), "--", str(TRAIN)]
        runs.append(Watched(cluster, host, args, mark, {"WATCH_FAULT": "stop@15"}))
    codes = [run.finish() for run in runs]
    node1, node2 = runs
    stopped = node2.first("rank 1: stop at step")
    assert stopped is not None, node2.text()
    for run, code in zip(runs, codes):
        assert code == 1, run.text()
        document = json.loads((cluster.folder / f"{run.host}.json").read_text())
        stall = check_stall(document, "node1")
        assert stall["process_state"] == ("T" if run.host == "node2" else "silent"), stall
        named = run.first("compat launch --watch: stall: rank 1 on node2")
        assert named is not None, run.text()
        print(f"torchrun, 2 hosts, seen from {run.host}: SIGSTOP to finding {named - stopped:.1f} s (bound {stall['bound']} s)")
        assert named - stopped < 60
        assert run.out == [""], run.out  # --json-file: stdout is the job's alone
    assert_nothing_left(cluster, mark)


def test_intel_mpirun_across_two_hosts_names_the_rank_stopped_on_the_other_host(hosts, stock, impi):  # noqa: F811
    # mpirun passes the ranks of other hosts compat's variables by name (-genvlist), not the caller's whole environment:
    # the fault reaches node2's rank through its login environment, as a cluster's profile would set it
    cluster = hosts({"node2": HostSpec(login_env={"WATCH_FAULT": "stop@15", "WATCH_STEPS": "400"})})
    mark = uuid.uuid4().hex
    hostfile = cluster.folder / "hostfile"
    hostfile.write_text("node1\nnode2\n")
    args = ["--watch", "--json", "--launcher", "mpirun", "--mpirun", impi, "--hostfile", str(hostfile), "--rsh", cluster.rsh, "--nproc-per-node", "1",
            "--master-port", str(port()), "--ccl-workers", "0", "--python", str(stock), "--watch-dir", str(cluster.folder / "watch"), "--", str(TRAIN)]
    run = Watched(cluster, "node1", args, mark, {"WATCH_FAULT": "stop@15"})
    code = run.finish()
    assert code == 1, run.text()
    text = "".join(run.out)
    document = json.loads(text[text.index("{\n"):])
    stall = check_stall(document, "node1")
    assert stall["process_state"] == "silent", stall
    stopped, named = run.first("rank 1: stop at step"), run.first("compat launch --watch: stall: rank 1 on node2")
    assert stopped is not None and named is not None, run.text()
    print(f"Intel mpirun, 2 hosts: SIGSTOP to finding {named - stopped:.1f} s (bound {stall['bound']} s)")
    assert named - stopped < 60
    stacks = {s["rank"]: s for s in document["stacks"]}
    assert "another host (node2)" in (stacks[1]["error"] or ""), stacks
    assert_nothing_left(cluster, mark)
