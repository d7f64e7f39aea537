"""Several hosts without hosts: the remote shell on each MPI's command line, the user's own remote-shell variables,
the comparison of the hosts' answers (doctor --hostfile), the network finding and the known causes, over
hand-written inputs. The real runs are in tests/test_hosts_netns.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from compatmatrix.checks.finding import Status as S
from compatmatrix.hosts import HostAnswer, compare
from compatmatrix.launchers.interface import RankLayout as Topology
from compatmatrix.launchers.live import plan_launch
from compatmatrix.launchers.mpirun import remote_shell, rsh_arguments
from compatmatrix.live.report import ATL_SENTENCE, Expectation, RankRecord, known_cause, network_finding
from compatmatrix.shell_env import launcher_exports

WORKER = ["worker.py", "--run-dir", "/tmp/x"]


def write_exe(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize("version, expected", [
    ("Intel(R) MPI Library for Linux* OS, Version 2021.18", ["-bootstrap", "ssh", "-bootstrap-exec", "/opt/rsh"]),
    ("mpirun (Open MPI) 4.1.4", ["--mca", "plm_rsh_agent", "/opt/rsh"]),
    ("HYDRA build details:\n    Version: 4.0.2", ["-launcher", "ssh", "-launcher-exec", "/opt/rsh"]),
])
def test_rsh_goes_on_each_mpis_command_line(tmp_path, version, expected):
    mpirun = write_exe(tmp_path / "mpirun", f"#!/bin/sh\necho '{version}'\n")  # FIXTURE: answers --version only
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    launch = plan_launch("mpirun", "/py", WORKER, Topology(nproc_per_node=1, hostfile=str(hostfile)), {}, 1, mpirun=mpirun, rsh="/opt/rsh")
    command = list(launch.commands[0])
    start = command.index(expected[0])
    assert command[start:start + len(expected)] == expected
    assert launch.hosts == ("node1", "node2") and launch.expected_local == 2  # every host's records, from the shared run folder
    assert "remote shell: /opt/rsh (--rsh), called like ssh: PROG [options] HOST COMMAND" in launch.notes


def test_the_users_own_remote_shell_variables_are_honoured_and_named():
    assert remote_shell({"I_MPI_HYDRA_BOOTSTRAP_EXEC": "/usr/bin/pdsh-rsh"}) == ("/usr/bin/pdsh-rsh", "$I_MPI_HYDRA_BOOTSTRAP_EXEC")
    assert remote_shell({"OMPI_MCA_plm_rsh_agent": "oarsh"}) == ("oarsh", "$OMPI_MCA_plm_rsh_agent")
    assert remote_shell({"OMPI_MCA_plm_rsh_agent": "oarsh"}, "/opt/rsh") == ("/opt/rsh", "--rsh")
    assert remote_shell({}) == ("ssh", "the default")
    assert rsh_arguments("open-mpi", "oarsh") == ["--mca", "plm_rsh_agent", "oarsh"]


def test_the_variables_reach_mpirun_untouched(tmp_path):
    mpirun = write_exe(tmp_path / "mpirun", "#!/bin/sh\necho 'Intel(R) MPI Library for Linux* OS, Version 2021.18'\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    base = {"I_MPI_HYDRA_BOOTSTRAP": "ssh", "I_MPI_HYDRA_BOOTSTRAP_EXEC": "/opt/rsh", "PATH": "/usr/bin"}
    launch = plan_launch("mpirun", "/py", WORKER, Topology(nproc_per_node=1, hostfile=str(hostfile)), base, 1, mpirun=mpirun)
    assert launch.envs[0]["I_MPI_HYDRA_BOOTSTRAP_EXEC"] == "/opt/rsh" and "-bootstrap-exec" not in launch.commands[0]
    assert "remote shell: /opt/rsh ($I_MPI_HYDRA_BOOTSTRAP_EXEC), called like ssh: PROG [options] HOST COMMAND" in launch.notes


def _answer(host, packages=None, flags=("avx2", "avx512f", "avx512_bf16"), env=None, bindings=None, checks=()):
    facts = {"name": host, "packages": {"torch": "2.7.0+cpu", "numpy": "1.26.4", **(packages or {})}, "cpu_flags": list(flags),
             "oneccl_env": env or {}, "bindings": bindings or {}}
    return HostAnswer(host, {"checks": list(checks), "host": facts})


def test_identical_hosts_pass():
    findings = compare([_answer("a"), _answer("b")], "ssh", "the default")
    assert {(f.id, f.status) for f in findings} == {("hosts.reach", S.PASS), ("hosts.packages", S.PASS), ("hosts.oneccl", S.PASS), ("hosts.cpu", S.PASS)}


def test_one_finding_per_difference_naming_the_hosts():
    a = _answer("a", {"oneccl-bind-pt": "2.7.0"}, env={"CCL_ATL_TRANSPORT": "ofi", "CCL_WORKER_COUNT": "1"}, bindings={"oneccl_bindings_for_pytorch": "/x"})
    b = _answer("b", {"torch": "2.8.0", "numpy": "2.0.0"}, flags=("avx2", "avx512f"), env={"CCL_WORKER_COUNT": "2"})
    findings = compare([a, b], "ssh", "the default")
    text = {(f.id, f.status.value, f.summary) for f in findings}
    assert ("hosts.packages", "fail", "torch differs between the hosts: 2.7.0+cpu on a; 2.8.0 on b") in text
    assert ("hosts.packages", "fail", "oneccl-bind-pt is installed on a only, not on b (2.7.0 on a; not installed on b)") in text
    assert ("hosts.packages", "warn", "1 other package(s) differ between the hosts: numpy") in text
    assert ("hosts.oneccl", "fail", "the oneCCL bindings import on some hosts only: oneccl_bindings_for_pytorch on a; none on b") in text
    assert ("hosts.oneccl", "fail", "CCL_ATL_TRANSPORT differs between the hosts: ofi on a; unset on b") in text
    assert ("hosts.cpu", "fail", "bf16 is native on a only (avx512_bf16), not on b") in text


def test_a_host_that_cannot_be_reached_or_fails_its_own_checks_is_named():
    down = HostAnswer("c", None, "exit status 255: ssh: connect to host c port 22: Connection refused")
    failing = _answer("a", checks=[{"id": "packages.ccl-torch", "status": "fail", "summary": "oneccl_bind_pt 2.6.0 needs torch 2.6", "fix": "x"}])
    findings = compare([failing, _answer("b"), down], "ssh", "the default")
    summaries = [f.summary for f in findings if f.status is S.FAIL]
    assert summaries[0] == "c: compat check could not run there through ssh: exit status 255: ssh: connect to host c port 22: Connection refused"
    assert "a: packages.ccl-torch: oneccl_bind_pt 2.6.0 needs torch 2.6" in summaries


def test_launcher_exports_for_torchrun_spawn_and_mpirun(tmp_path):
    exports, said = launcher_exports("torchrun", {"FI_PROVIDER_PATH": "/b/opt/mpi/libfabric/lib/prov"}, {}, tmp_path, ["eth0", "lo"])
    assert exports == {"CCL_ATL_TRANSPORT": "ofi", "FI_PROVIDER_PATH": "/b/opt/mpi/libfabric/lib/prov"}
    only_lo, _ = launcher_exports("spawn", {}, {}, tmp_path, ["lo"])
    assert only_lo["CCL_KVS_IFACE"] == "lo" and "FI_PROVIDER_PATH" not in only_lo
    (tmp_path / "opt" / "mpi" / "libfabric" / "lib" / "prov").mkdir(parents=True)
    found, _ = launcher_exports("torchrun", {}, {}, tmp_path, ["eth0", "lo"])
    assert found["FI_PROVIDER_PATH"] == str(tmp_path / "opt" / "mpi" / "libfabric" / "lib" / "prov")
    assert launcher_exports("mpirun", {}, {}, tmp_path, ["lo"])[0] == {}


def _rank(rank, host, network, **status):
    return RankRecord(100 + rank, {"rank": rank, "stage": "done", "host": host, "network": network, "world_size": 2, **status}, "", 0, True)


def _facts(host, own, master, interfaces=("eth0", "lo"), **variables):
    return {"host": host, "interfaces": list(interfaces), "iface_variables": variables,
            "host_resolves": [{"address": own, "loopback": own.startswith("127."), "local": True}],
            "master_addr": "node1", "master_resolves": [{"address": master, "local": host == "node1"}]}


EXPECT = Expectation(world_size=2, trainer=False, steps=3, per_device_batch=2, backend="auto", ccl_installed=False, multi_host=True)


def test_network_finding_names_the_host_and_the_cause():
    good = [_rank(0, "node1", _facts("node1", "10.0.0.1", "10.0.0.1")), _rank(1, "node2", _facts("node2", "10.0.0.2", "10.0.0.1"))]
    assert network_finding(good, EXPECT).status is S.PASS
    iface = [_rank(1, "node2", _facts("node2", "10.0.0.2", "10.0.0.1", GLOO_SOCKET_IFNAME="ib0"))]
    assert network_finding(iface, EXPECT).summary == "GLOO_SOCKET_IFNAME=ib0 names no interface on node2 (it has eth0, lo)"
    split = [good[0], _rank(1, "node2", _facts("node2", "10.0.0.2", "10.0.0.9"))]
    assert network_finding(split, EXPECT).summary == "MASTER_ADDR node1 resolves differently on the hosts: 10.0.0.1 on node1; 10.0.0.9 on node2"
    loop_joined = [good[0], _rank(1, "node2", _facts("node2", "127.0.1.1", "10.0.0.1"))]
    assert network_finding(loop_joined, EXPECT).status is S.WARN  # the group formed anyway (torch 2.x's gloo copes)
    loop_failed = [good[0], _rank(1, "node2", _facts("node2", "127.0.1.1", "10.0.0.1"), world_size=None, stage="init")]
    finding = network_finding(loop_failed, EXPECT)
    assert finding.status is S.FAIL and finding.summary.startswith("node2 resolves its own name to 127.0.1.1 (loopback)")


def test_the_atl_message_is_recognised_wherever_the_rank_put_it():
    printed = RankRecord(1, {"rank": 0, "stage": "init"}, "2026:... |CCL_ERROR| atl_mpi_comm.cpp:62 init: failed to initialize ATL\n", -6)
    raised = RankRecord(2, {"rank": 1, "stage": "init", "error": {"type": "RuntimeError", "message": "atl_mpi_comm.cpp: failed to initialize ATL"}}, "", 1)
    for record in (printed, raised):
        summary, detail, fix = known_cause(record)
        assert summary == ATL_SENTENCE and "failed to initialize ATL" in detail[0] and "compat env --launcher torchrun" in fix
