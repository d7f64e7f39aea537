"""compat export ray's driver on a REAL two-node Ray cluster (ray 2.60, Ray Train, torch 2.13 CPU): the head on test
host node1, a worker node on node2 (tests/netns_hosts.py: network namespaces joined by a veth pair, each with its own
host name, /etc/hosts and PID space; the file system is shared). Each node is `ray start` run inside its host, with its
own --temp-dir, --num-cpus 2 and a small object store; the GCS port is one the head's namespace says is free.

The driver compat exports (--python: the cached Ray environment holds the set) runs on the head: the live preflight
(compat doctor --live --launcher ray, one Ray task per node) first, then a tiny DDP model trains on one rank per node
(gloo across the two hosts, the same weights on both). With node2's own name mapped to 127.0.1.1 in its /etc/hosts
(Debian's line), the preflight names node2 and the fix, and the driver exits 1 before training. At the end: `ray stop
--force` on both hosts, the hosts torn down, nothing of the test left running. One cluster for the module.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from ..clean_env import base_env
from ..conftest import ROOT, real_env_or_skip
from ..live.test_live_real import marked_processes
from ..netns_hosts import Cluster, NetnsUnavailable

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 120.0  # ray start on a node, and both nodes seen alive
DRIVER_TIMEOUT_S = 420.0  # the driver: preflight (its 60 s live timeout, bounded) and training

# FIXTURE training command: a tiny model trained with DDP over gloo; each rank writes what it saw
TRAIN = '''
import hashlib, json, os, socket, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(32, 8, generator=generator)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
record = {"rank": rank, "world": world, "host": socket.gethostname(), "node_rank": os.environ.get("NODE_RANK"),
          "threads": torch.get_num_threads(), "params": digest, "loss": float(loss)}
with open(os.path.join(sys.argv[1], "rank-%d.json" % rank), "w") as out:
    json.dump(record, out)
dist.destroy_process_group()
'''


class RayOnHosts:
    """A Ray cluster: the head on node1, a worker node on node2, each started by `ray start` inside its host."""

    def __init__(self, hosts: Cluster, python: Path, folder: Path, mark: str) -> None:
        self.hosts, self.folder, self.mark = hosts, folder, mark
        self.ray = str(python.parent / "ray")
        self.python = str(python)
        self.env = base_env({"COMPAT_TEST_TREE_MARK": mark, "RAY_USAGE_STATS_ENABLED": "0"})
        self.address = ""
        self.started_in = 0.0

    def run(self, host: str, argv, timeout: float = START_TIMEOUT_S, env_extra=None):
        return self.hosts.run(host, list(argv), {**self.env, **(env_extra or {})}, timeout=timeout)

    def free_port(self, host: str) -> int:
        done = self.run(host, [self.python, "-c", "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"], 30)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    def start(self) -> None:
        head = self.hosts.address("node1")
        port = self.free_port("node1")
        self.address = f"{head}:{port}"
        common = ["--num-cpus", "2", "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"]
        began = time.monotonic()
        for host, role in (("node1", ["--head", "--port", str(port), "--include-dashboard", "false"]), ("node2", ["--address", self.address])):
            temp = self.folder / f"ray-{host}"
            log = self.folder / f"ray-start-{host}.log"
            argv = [self.ray, "start", *role, "--node-ip-address", self.hosts.address(host), "--temp-dir", str(temp), *common]
            # the daemons keep the log file, never the client's pipes
            done = self.run(host, ["sh", "-c", 'exec "$@" >"$0" 2>&1 </dev/null', str(log), *argv])
            assert done.returncode == 0, f"ray start on {host}: {log.read_text(errors='replace')[-3000:]}"
        probe = ("import ray, sys, time\nray.init(address=sys.argv[1], log_to_driver=False)\ndeadline = time.monotonic() + 60\n"
                 "while len([n for n in ray.nodes() if n['Alive']]) < 2 and time.monotonic() < deadline:\n    time.sleep(0.2)\n"
                 "print(len([n for n in ray.nodes() if n['Alive']]))\n")
        done = self.run("node1", [self.python, "-c", probe, self.address])
        assert done.returncode == 0 and done.stdout.strip().endswith("2"), done.stderr[-3000:]
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        for host in ("node2", "node1"):
            try:
                self.run(host, [self.ray, "stop", "--force"], 60)
            except AssertionError:
                pass  # the hosts' teardown kills what is left


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One REAL Ray cluster on two test hosts for the module; ray stop --force on both and the hosts removed at its end,
    whatever happened."""
    python = real_env_or_skip("torch213-ray")
    try:
        hosts = Cluster(("node1", "node2"))
    except NetnsUnavailable as exc:
        pytest.skip(f"test hosts cannot be made here: {exc}")
    mark = uuid.uuid4().hex
    # Ray's sockets live under --temp-dir, and an AF_UNIX path holds at most 107 bytes: pytest's folders under xdist
    # (/tmp/pytest-of-root/pytest-N/popen-gw0/ray0/...) are too deep for Ray's session names, so a short folder of /tmp
    short = Path(tempfile.mkdtemp(prefix="cmray-", dir="/tmp"))
    cluster = RayOnHosts(hosts, python, short, mark)
    try:
        cluster.start()
        sys.stderr.write(f"ray cluster: 2 nodes alive {cluster.started_in:.1f} s after the first ray start\n")
        yield cluster
    finally:
        cluster.stop()
        left = hosts.wait_idle(30)
        hosts.close()
        shutil.rmtree(short, ignore_errors=True)
        assert left == {}, f"processes left on a host after ray stop: {left}"
        assert marked_processes(mark) == [], "processes of the Ray cluster outlived it"


def export_driver(tmp_path: Path, python: str, *extra: str) -> tuple[Path, Path]:
    out = tmp_path / "ranks"
    out.mkdir()
    script = tmp_path / "train_tiny.py"
    script.write_text(TRAIN)
    done = __import__("subprocess").run(
        [sys.executable, "-m", "compatmatrix", "export", "ray", "--profile", "stock", "--python", python, "--nnodes", "2",
         "--nproc-per-node", "1", "--cpus-per-node", "2", "--gloo-timeout", "60", "--preflight-timeout", "60", *extra, "--",
         str(script), str(out)], capture_output=True, text=True, timeout=180, env=base_env(), cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    driver = tmp_path / "driver.py"
    driver.write_text(done.stdout)
    return driver, out


def run_driver(cluster: RayOnHosts, driver: Path):
    """The driver on the head, from the repository (its preflight runs this tree's compat); its (exit, stdout, stderr, seconds)."""
    began = time.monotonic()
    process = cluster.hosts.popen("node1", [cluster.python, str(driver)], {**cluster.env, "RAY_ADDRESS": cluster.address}, cwd=str(ROOT))
    try:
        out, err = process.communicate(timeout=DRIVER_TIMEOUT_S)
    except Exception:
        process.kill()
        out, err = process.communicate(timeout=10)
        raise AssertionError(f"the driver did not end within {DRIVER_TIMEOUT_S:g} s: {err[-4000:]}") from None
    return process.returncode, out, err, time.monotonic() - began


def test_the_exported_driver_runs_the_preflight_then_trains_on_both_nodes(ray_cluster, tmp_path):
    driver, out = export_driver(tmp_path, ray_cluster.python)
    code, stdout, stderr, seconds = run_driver(ray_cluster, driver)
    assert code == 0, f"{stdout[-4000:]}\n{stderr[-4000:]}"
    # the preflight first: compat doctor --live on each node, node 0 and node 1, then training
    # (Ray numbers the nodes by its placement group's bundles: node 0, the master, may be either host)
    said = {line for line in stdout.splitlines() if line.startswith("--- compat preflight, node ")}
    assert said in ({"--- compat preflight, node 0 (node1): exit 0", "--- compat preflight, node 1 (node2): exit 0"},
                    {"--- compat preflight, node 0 (node2): exit 0", "--- compat preflight, node 1 (node1): exit 0"}), stdout[-4000:]
    assert stdout.count("PASS live.world: 1 ranks here joined a group of 2") == 2, stdout[-4000:]
    assert "compat preflight: 2 nodes, 1 ranks each, master " in stderr and "trained on 2 nodes, 1 ranks each" in stderr, stderr[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and {r["world"] for r in ranks} == {2}
    assert {r["host"] for r in ranks} == {"node1", "node2"}  # one rank on each node
    assert len({r["params"] for r in ranks}) == 1  # DDP kept the weights equal across the hosts
    assert {r["threads"] for r in ranks} == {2}  # OMP_NUM_THREADS of the plan, from the runtime_env
    sys.stderr.write(f"driver: preflight and training in {seconds:.1f} s\n")


def test_hosts_whose_names_resolve_to_loopback_are_named_by_the_preflight_and_nothing_trains(ray_cluster, tmp_path):
    """Debian's '127.0.1.1 <own name>' line on both hosts: gloo ranks advertise loopback and cannot form their group
    (with the line on one host only, torch 2.13's gloo still forms it, and the preflight names that host with a WARN).
    Ray itself is unaffected (each node was started with --node-ip-address)."""
    files = {host: Path("/etc/netns") / ray_cluster.hosts.hosts[host].namespace / "hosts" for host in ("node1", "node2")}
    originals = {host: path.read_text() for host, path in files.items()}

    def write(host: str, text: str) -> None:  # in place: the host's /etc/hosts is a bind mount of this file
        with open(files[host], "r+") as handle:
            handle.seek(0)
            handle.write(text)
            handle.truncate()

    try:
        for host in files:
            write(host, originals[host].replace(f"{ray_cluster.hosts.address(host)} {host}\n", f"127.0.1.1 {host}\n"))
        driver, out = export_driver(tmp_path, ray_cluster.python)
        code, stdout, stderr, seconds = run_driver(ray_cluster, driver)
    finally:
        for host in files:
            write(host, originals[host])
    assert code == 1, f"{stdout[-4000:]}\n{stderr[-4000:]}"
    assert "the preflight failed on node 0" in stderr and "not training" in stderr, stderr[-3000:]
    named = [line for line in stdout.splitlines() if "FAIL live.network" in line and "resolves its own name to 127.0.1.1 (loopback)" in line]
    assert named, stdout[-6000:]
    assert "GLOO_SOCKET_IFNAME" in stdout and "/etc/hosts" in stdout  # the fix
    assert not list(out.glob("rank-*.json"))  # nothing trained
    assert "compat ray driver: trained" not in stderr
    sys.stderr.write(f"driver with the loopback fault: stopped by the preflight in {seconds:.1f} s: {named[0].strip()}\n")
