"""compat under a REAL two-node Slurm cluster (tests/slurm_cluster.py: Debian's slurmctld/slurmd and munged, the nodes
network namespaces): the live preflight under srun with no rank or master argument, the exported sbatch script run by
sbatch, and what a failure looks like. One cluster per session (the ``slurm_cluster`` fixture); each test leaves the
nodes idle and no process of its job behind."""

from __future__ import annotations

import json
import sys
import time

import pytest

from .clean_env import base_env

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
    """srun -N2 --ntasks-per-node=1 compat doctor --live: no --nnodes, --node-rank or --master-addr; each node's compat
    reads them from the allocation and the 4 ranks of the two nodes join one group."""
    output = tmp_path / "doctor-%t.json"
    started = time.monotonic()
    done = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", f"--output={output}", *COMPAT, "doctor", "--live", "--python", str(stock_torch213),
                              "--only", "live", "--json"], cluster_env(), timeout=300)
    seconds = time.monotonic() - started
    reports = [json.loads((tmp_path / f"doctor-{task}.json").read_text()) for task in (0, 1)]
    assert done.returncode == 0, (done.stderr[-2000:], [r["summary"] for r in reports])
    for report in reports:
        live = report["live"]
        assert (live["launcher"], live["world_size"], report["ok"]) == ("srun", 4, True), live.get("error")
        assert live["master"].startswith("node1:")
        assert {c["id"]: c["status"] for c in report["checks"]}["live.trainer"] == "pass"
    print(f"\nlive preflight under srun -N2: {seconds:.1f} s")
    assert_nothing_left(slurm_cluster)
