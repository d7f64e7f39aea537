"""The network of a job across hosts, without hosts: Slurm's node list syntax (doctor --hostfile node[01-16]), the
choice of the interface that reaches the master (environment/interfaces.choose_interface over given route facts),
the readers of /proc/net/route and /proc/net/if_inet6, what compat env exports for it per launcher (shell_env.
network_exports, the launchers' interface_exports with a FIXTURE mpirun that answers --version as each MPI does), and
the static preflight's own-name check (hosts.compare over hand-written answers). The real hosts are in
tests/live/test_hosts_netns.py."""

from __future__ import annotations

import socket
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.checks.oneccl_env import kvs_iface_finding
from compatmatrix.environment.interfaces import (
    RouteFacts,
    choose_interface,
    interface_with_address,
    ipv4_route_interface,
    ipv6_owner,
    is_loopback,
    route_facts,
)
from compatmatrix.findings import Status as S
from compatmatrix.hostlist import NODELIST_MAX_HOSTS, NodeListError, expand_nodelist, looks_like_nodelist, nodelist_size
from compatmatrix.hosts import HostAnswer, compare, own_addresses, parse_answer, routes_from_here
from compatmatrix.launchers.environment import network_exports
from compatmatrix.live.report import Expectation, RankRecord, network_finding

from ..conftest import run_compat

# --- Slurm's node list -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, hosts", [
    ("node[01-16]", [f"node{i:02d}" for i in range(1, 17)]),
    ("a[1-3,7],b5", ["a1", "a2", "a3", "a7", "b5"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
    ("node1,node2,node1", ["node1", "node2"]),
    ("x.cluster[1-2].org", ["x.cluster1.org", "x.cluster2.org"]),
    ("solo", ["solo"]),
])
def test_a_node_list_expands_as_scontrol_show_hostnames_does(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text, said", [
    ("n[0-99999999]", "the node list expands to more than 65,536 hosts, more than one job has."),
    ("n[0-999][0-999]", "the node list expands to more than 65,536 hosts, more than one job has."),
    ("n[1-3", "the node list opens a bracket it does not close."),
    ("n1-3]", "the node list closes a bracket it did not open at character 5."),
    ("n[1,[2]]", "the node list has a bracket inside a bracket at character 5."),
    ("n[3-1]", "the range 3-1 in the node list runs backwards."),
    ("n[]", "the node list has an empty bracket []."),
    ("a,,b", "the node list has an empty entry (two commas, or one at an end)."),
    ("n[1-2x]", "[1-2x] in the node list holds '1-2x', which is not a number or a range of numbers (at most 9 digits)."),
    ("n[1234567890]", "[1234567890] in the node list holds '1234567890', which is not a number or a range of numbers (at most 9 digits)."),
    ("-oProxyCommand[1]", "'-oProxyCommand1' of the node list is not a host name (it is not a host name, an IPv4 or an IPv6 address)."),
    ("n 1", "the node list holds ' ', which no node list holds."),
])
def test_a_node_list_that_cannot_be_used_is_refused_in_one_sentence(text, said):
    with pytest.raises(NodeListError) as caught:
        expand_nodelist(text)
    assert str(caught.value) == said and caught.value.fix


def _compressed(prefix: str, numbers: list[int], width: int) -> str:
    """Numbers written as Slurm compresses them: runs of consecutive numbers as ranges, joined by commas."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs]
    return f"{prefix}[{','.join(parts)}]"


prefixes = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z]", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(prefixes, st.lists(st.integers(0, 300), min_size=1, max_size=12), st.integers(1, 4)), min_size=1, max_size=4))
def test_compressed_names_expand_back_to_the_names_with_their_padding(groups):
    text = ",".join(_compressed(prefix, numbers, width) for prefix, numbers, width in groups)
    wanted = list(dict.fromkeys(f"{prefix}{n:0{width}d}" for prefix, numbers, width in groups for n in sorted(set(numbers))))
    assert expand_nodelist(text) == wanted
    assert nodelist_size(text) == sum(len(set(numbers)) for _, numbers, _ in groups)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="n0123456789[],-x.", max_size=40) | st.text(max_size=30))
def test_any_text_expands_within_the_cap_or_is_refused_in_one_sentence(text):
    try:
        names = expand_nodelist(text)
    except NodeListError as exc:
        assert str(exc).endswith(".") and "\n" not in str(exc) and exc.fix
        return
    assert 0 < len(names) <= NODELIST_MAX_HOSTS and len(set(names)) == len(names)
    assert all(name and not name.startswith("-") for name in names)


def test_only_a_text_with_a_bracket_or_a_comma_is_taken_for_a_node_list():
    assert looks_like_nodelist("node[01-02]") and looks_like_nodelist("a,b")
    assert not looks_like_nodelist("hosts.txt") and not looks_like_nodelist("/tmp/x[1]/hosts")


def test_doctor_hostfile_refuses_a_huge_node_list_at_once():
    done = run_compat("doctor", "--hostfile", "n[0-99999999]", timeout=60)
    assert done.returncode == 2
    assert "--hostfile n[0-99999999]: the node list expands to more than 65,536 hosts" in done.stderr and "Traceback" not in done.stderr


# --- the interface that reaches the master --------------------------------------------------------------------------


def facts(master="node1", addresses=("10.0.0.1",), routes=None, errors=None, up=("eth0", "lo"), error=""):
    return RouteFacts(master, tuple(addresses), error, routes if routes is not None else {a: "eth0" for a in addresses if not is_loopback(a)},
                      errors or {}, tuple(up))


@pytest.mark.parametrize("master, multi, given, interface, why", [
    ("node1", True, facts(), "eth0", "eth0 is the interface of the kernel's route to the master node1 (10.0.0.1)"),
    ("10.0.0.1", False, facts("10.0.0.1"), "eth0", "eth0 is the interface of the kernel's route to the master 10.0.0.1"),
    ("node1", True, facts(addresses=("127.0.1.1", "10.0.0.1"), routes={"10.0.0.1": "ib0"}), "ib0",
     "ib0 is the interface of the kernel's route to the master node1 (10.0.0.1)"),
    (None, True, None, None, "no master address is known (pass --master-addr, or set MASTER_ADDR), so no interface is chosen; the ranks of one host need none"),
    ("node9", True, facts("node9", (), error="Name or service not known"), None,
     "the master node9 does not resolve here (Name or service not known), so no interface that reaches it can be chosen"),
    ("node1", True, facts(routes={"10.0.0.1": None}, errors={"10.0.0.1": "Network is unreachable"}), None,
     "there is no route from here to the master node1 (10.0.0.1: Network is unreachable), so no interface reaches it"),
    ("localhost", False, facts("localhost", ("127.0.0.1",)), None,
     "the master localhost is this host's loopback (127.0.0.1): the ranks meet on this host, no interface variable is needed"),
    ("127.0.0.1", True, facts("127.0.0.1", ("127.0.0.1",)), None,
     "the master 127.0.0.1 is loopback on every host, so on a job across hosts each host's ranks would look for the master on themselves; "
     "pass the first host's name or cluster address (--master-addr node01)"),
    ("127.1", True, facts("127.1", ("127.0.0.1",)), None,
     "the master 127.1 is loopback on every host, so on a job across hosts each host's ranks would look for the master on themselves; "
     "pass the first host's name or cluster address (--master-addr node01)"),
    ("0.0.0.0", True, facts("0.0.0.0", ("0.0.0.0",), routes={"0.0.0.0": "lo"}), None,
     "the master 0.0.0.0 is the unspecified address (0.0.0.0), which names no host: pass the first host's name or cluster address (--master-addr node01)"),
    ("localhost", True, facts("localhost", ("127.0.0.1", "::1")), None,
     "the master localhost is loopback on every host, so on a job across hosts each host's ranks would look for the master on themselves; "
     "pass the first host's name or cluster address (--master-addr node01)"),
    ("node1", True, facts(addresses=("127.0.1.1",)), "eth0",
     "the master node1 resolves to 127.0.1.1 (loopback) here, so this is likely the master and its own name is mapped to loopback (/etc/hosts); "
     "eth0 is the only interface up besides lo"),
    ("node1", True, facts(addresses=("127.0.1.1",), up=("eth0", "ib0", "lo")), None,
     "the master node1 resolves to 127.0.1.1 (loopback) here on a job across hosts, which the other hosts cannot reach, and several interfaces "
     "(eth0, ib0) besides lo could stand for it; map it to its cluster address in /etc/hosts or DNS"),
    ("node1", True, facts(addresses=("127.0.1.1",), up=("lo",)), None,
     "the master node1 resolves to 127.0.1.1 (loopback) here on a job across hosts, which the other hosts cannot reach, and no interface "
     "besides lo could stand for it; map it to its cluster address in /etc/hosts or DNS"),
])
def test_the_interface_is_the_one_of_the_route_to_the_master_or_the_sentence_says_why_none(master, multi, given, interface, why):
    choice = choose_interface(master, multi, given)
    assert (choice.interface, choice.why) == (interface, why)


def test_the_loopback_addresses_are_told_apart():
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"))
    assert not any(is_loopback(a) for a in ("10.0.0.1", "fd00::2", "node1", ""))


ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ib0\t0000A8C0\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""


@pytest.mark.parametrize("address, interface", [("10.0.2.7", "eth0"), ("192.168.4.1", "ib0"), ("8.8.8.8", "eth0"), ("not an address", None)])
def test_the_most_specific_route_of_proc_net_route_holds_the_address(address, interface):
    assert ipv4_route_interface(ROUTE, address) == interface


def test_an_ipv6_address_is_found_in_proc_net_if_inet6():
    text = ("00000000000000000000000000000001 01 80 10 80       lo\n"
            "fd000000000000000000000000000002 02 40 00 80     eth0\n")
    assert ipv6_owner(text, "fd00::2") == "eth0" and ipv6_owner(text, "::1") == "lo" and ipv6_owner(text, "fd00::3") is None


def test_the_route_to_this_machines_loopback_and_an_unroutable_address_are_read_from_the_kernel():
    """The real readers, on whatever this machine has: the loopback owner is lo; an address in TEST-NET with no
    route either has none (said) or leaves by an interface that exists here."""
    assert interface_with_address("127.0.0.1") == "lo"
    found = route_facts("127.0.0.1")
    assert found.addresses == ("127.0.0.1",) and found.routes == {} and "lo" in found.up
    outside = route_facts("198.51.100.7")
    interface = outside.routes.get("198.51.100.7")
    assert interface in {name for _, name in socket.if_nameindex()} or (interface is None and outside.errors["198.51.100.7"])


# --- what compat env exports for it ---------------------------------------------------------------------------------


def routed(interface="eth0"):
    return lambda master: RouteFacts(master, ("10.0.0.1",), "", {"10.0.0.1": interface}, {}, (interface, "lo"))


def fixture_mpirun(folder, banner):
    """A FIXTURE mpirun next to a fake interpreter: answers --version as the named MPI does."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "mpirun"
    program.write_text(f"#!/bin/sh\necho '{banner}'\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return str(folder / "python")


@pytest.mark.parametrize("launcher, banner, ccl, wanted", [
    ("torchrun", "", False, {"GLOO_SOCKET_IFNAME": "eth1"}),
    ("spawn", "", True, {"GLOO_SOCKET_IFNAME": "eth1", "CCL_KVS_IFACE": "eth1", "FI_TCP_IFACE": "eth1"}),
    ("mpirun", "Intel(R) MPI Library for Linux* OS, Version 2021.14", True,
     {"GLOO_SOCKET_IFNAME": "eth1", "CCL_KVS_IFACE": "eth1", "FI_TCP_IFACE": "eth1", "I_MPI_HYDRA_IFACE": "eth1"}),
    ("mpirun", "mpirun (Open MPI) 4.1.6", False,
     {"GLOO_SOCKET_IFNAME": "eth1", "OMPI_MCA_btl_tcp_if_include": "eth1", "OMPI_MCA_oob_tcp_if_include": "eth1"}),
    ("mpirun", "HYDRA build details:\n    Version: 4.1.2 MPICH", False, {"GLOO_SOCKET_IFNAME": "eth1", "HYDRA_IFACE": "eth1"}),
])
def test_each_launcher_exports_the_interface_under_the_names_its_ranks_read(tmp_path, launcher, banner, ccl, wanted):
    python = fixture_mpirun(tmp_path / "bin", banner) if banner else "/nonexistent/python"
    exported, said = network_exports("node1", 2, launcher, ccl, {}, python, "/nonexistent", routed("eth1"))
    assert exported == wanted
    assert said[0] == "interface: eth1 is the interface of the kernel's route to the master node1 (10.0.0.1)"


def test_a_variable_the_user_set_is_kept_and_said():
    exported, said = network_exports("node1", 2, "torchrun", True, {"GLOO_SOCKET_IFNAME": "ib0"}, route=routed("eth0"))
    assert exported == {"CCL_KVS_IFACE": "eth0", "FI_TCP_IFACE": "eth0"}
    assert "interface: GLOO_SOCKET_IFNAME=ib0 already set here; kept" in said


def test_without_a_master_nothing_is_exported_and_one_sentence_says_why():
    exported, said = network_exports(None, 1, "torchrun", True, {}, route=routed())
    assert exported == {} and said == ["interface: no master address is known (pass --master-addr, or set MASTER_ADDR), so no interface is chosen; "
                                       "the ranks of one host need none"]


def test_compat_env_on_one_host_exports_no_interface_variable():
    """Single-host runs stay as they were: no master, or a loopback master, exports no interface variable."""
    for extra in ([], ["--master-addr", "127.0.0.1"]):
        done = run_compat("env", "--launcher", "torchrun", *extra, drop=("MASTER_ADDR", "GLOO_SOCKET_IFNAME"), timeout=120)
        assert done.returncode == 0, done.stderr
        assert "IFNAME" not in "".join(line for line in done.stdout.splitlines() if not line.startswith("#"))


def test_compat_env_refuses_a_master_that_is_not_a_host():
    done = run_compat("env", "--master-addr=-oProxyCommand=x", timeout=60)
    assert done.returncode == 2 and "is not a host name or an address" in done.stderr


# --- the static preflight: each host's own name ------------------------------------------------------------------------


def answer(host, resolves, interfaces=("eth0", "lo"), own=None):
    network = {"resolves": list(resolves), "interfaces": list(interfaces), "own": list(resolves) if own is None else list(own)}
    document = {"checks": [], "host": {"name": host, "packages": {}, "cpu_flags": [], "oneccl_env": {}, "bindings": {}, "network": network}}
    parsed, problem = parse_answer(document)
    assert parsed is not None, problem
    return HostAnswer(host, parsed)


def test_a_host_whose_own_name_resolves_to_loopback_is_named_with_the_fix():
    findings = compare([answer("node1", ["10.0.0.1"]), answer("node2", ["127.0.1.1"])], "ssh", "the default")
    network = [f for f in findings if f.id == "hosts.network"]
    assert [f.status for f in network] == [S.FAIL]
    assert network[0].summary == ("node2 resolves its own name to 127.0.1.1 (loopback) only: gloo there listens on loopback and the other "
                                  "hosts are told 127.0.1.1 to reach it (connectFullMesh failed ... remote=[127.0.1.1])")
    assert network[0].fix.startswith("On node2, map node2 to its cluster address in /etc/hosts or DNS")
    assert "export GLOO_SOCKET_IFNAME=" in network[0].fix and "compat env --master-addr node1" in network[0].fix


def test_a_host_whose_own_name_resolves_to_an_address_it_does_not_hold_is_named():
    findings = compare([answer("node1", ["10.0.0.1"]), answer("node2", ["10.0.0.99"], own=[])], "ssh", "the default")
    network = [f for f in findings if f.id == "hosts.network"]
    assert [(f.status, f.summary) for f in network] == [(S.FAIL, "node2 resolves its own name to 10.0.0.99, no address of node2: gloo there falls "
                                                                 "back to 127.0.0.1 (loopback) and the other hosts are told that address to reach it")]


def test_hosts_whose_names_resolve_to_their_own_addresses_pass_and_an_older_answer_is_skipped():
    findings = compare([answer("node1", ["10.0.0.1"]), answer("node2", ["10.0.0.2"])], "ssh", "the default")
    assert [(f.id, f.status) for f in findings if f.id == "hosts.network"] == [("hosts.network", S.PASS)]
    old = {"checks": [], "host": {"name": "node3", "packages": {}, "cpu_flags": [], "oneccl_env": {}, "bindings": {}}}
    parsed, _ = parse_answer(old)
    findings = compare([answer("node1", ["10.0.0.1"]), HostAnswer("node3", parsed)], "ssh", "the default")
    assert [f.status for f in findings if f.id == "hosts.network"] == [S.SKIP]


@pytest.mark.parametrize("network", [{"resolves": "10.0.0.1"}, {"resolves": ["x" * 50]}, {"resolves": [], "interfaces": [1]}, [],
                                     {"resolves": ["10.0.0.1"], "own": ["10.0.0.2"]}])
def test_a_malformed_network_answer_is_refused(network):
    document = {"checks": [], "host": {"name": "n", "packages": {}, "cpu_flags": [], "oneccl_env": {}, "bindings": {}, "network": network}}
    parsed, problem = parse_answer(document)
    assert parsed is None and "network" in problem


# --- the live doctor: a host's own name that gives the other hosts loopback ------------------------------------------------


def _rank(rank, host, resolves, joined=True, **variables):
    network = {"host": host, "interfaces": ["eth0", "lo"], "iface_variables": variables,
               "host_resolves": [{"address": a, "loopback": a.startswith("127."), "local": local} for a, local in resolves],
               "master_addr": "node1", "master_resolves": [{"address": "10.0.0.1", "local": host == "node1"}]}
    status = {"rank": rank, "stage": "done" if joined else "init", "host": host, "network": network, "world_size": 2 if joined else None}
    return RankRecord(100 + rank, status, "", 0 if joined else 1, True)


EXPECT = Expectation(world_size=2, trainer=False, steps=3, per_device_batch=2, backend="auto", ccl_installed=False, multi_host=True,
                     interface_fix="export GLOO_SOCKET_IFNAME=eth0 on every host (...)")


@pytest.mark.parametrize("resolves, summary", [
    ([("127.0.1.1", True)], "node2 resolves its own name to 127.0.1.1 (loopback): gloo there gives the other hosts that address to reach it "
                            "(connectFullMesh failed ... remote=[127.0.1.1])"),
    ([("10.0.0.99", False)], "node2 resolves its own name to 10.0.0.99, no address of node2: gloo there falls back to 127.0.0.1 (loopback) and gives "
                             "the other hosts that address to reach it"),
    ([], "node2 resolves its own name to nothing: gloo there falls back to 127.0.0.1 (loopback) and gives the other hosts that address to reach it"),
])
def test_a_host_name_that_leaves_gloo_on_loopback_is_named_with_the_interface_fix(resolves, summary):
    ranks = [_rank(0, "node1", [("10.0.0.1", True)], joined=False), _rank(1, "node2", resolves, joined=False)]
    finding = network_finding(ranks, EXPECT)
    assert (finding.status, finding.summary) == (S.FAIL, summary)
    assert finding.fix.startswith("Map node2 to its cluster address in /etc/hosts (or DNS) on node2") and finding.fix.endswith(
        "or export GLOO_SOCKET_IFNAME=eth0 on every host (...).")
    with_variable = [ranks[0], _rank(1, "node2", resolves, joined=False, GLOO_SOCKET_IFNAME="eth0")]
    assert network_finding(with_variable, EXPECT).status is S.PASS


# --- oneccl.kvs-iface: the static check judges the same need -----------------------------------------------------------------


def test_kvs_iface_with_a_master_across_hosts_wants_the_interface_of_its_route():
    route = choose_interface("node1", True, facts(routes={"10.0.0.1": "ib0"}))
    unset = kvs_iface_finding(True, ["eth0", "ib0", "lo"], None, route, "node1")
    assert unset.status is S.WARN and unset.fix.startswith("export CCL_KVS_IFACE=ib0 FI_TCP_IFACE=ib0")
    other = kvs_iface_finding(True, ["eth0", "ib0", "lo"], "eth0", route, "node1")
    assert other.status is S.WARN and other.summary == "CCL_KVS_IFACE=eth0, but the route to the master node1 leaves by ib0"
    assert kvs_iface_finding(True, ["eth0", "ib0", "lo"], "ib0", route, "node1").status is S.PASS
    assert kvs_iface_finding(True, ["ib0", "lo"], None, route, "node1").status is S.PASS  # one interface: the store takes it
    assert kvs_iface_finding(True, ["eth0", "ib0", "lo"], None).status is S.PASS  # no master: one host, as before


def test_every_registered_launcher_answers_for_its_interface_variables():
    """The registry's launchers all carry interface_exports (compat env --launcher L --master-addr calls it): each
    names only the interface it is given, under variable names."""
    from compatmatrix.launchers import LAUNCHERS

    for name, launcher in LAUNCHERS.items():
        exported, said = launcher.interface_exports("eth9", {}, "/nonexistent/python", "/nonexistent")
        assert set(exported.values()) <= {"eth9"} and all(key.isidentifier() for key in exported), name
        assert all(isinstance(line, str) for line in said), name


def test_a_host_whose_own_address_this_host_has_no_route_to_is_named():
    answers = [answer("node1", ["10.0.0.1"]), answer("node2", ["172.31.9.9"])]
    assert own_addresses(answers) == ["10.0.0.1", "172.31.9.9"]
    findings = compare(answers, "ssh", "the default", {"172.31.9.9": "Network is unreachable"})
    network = [f for f in findings if f.id == "hosts.network"]
    assert [(f.status, f.summary) for f in network] == [(S.FAIL, "there is no route from this host to node2's own address 172.31.9.9 (Network is "
                                                                 "unreachable): gloo there listens on it, and the ranks here cannot reach it")]
    assert routes_from_here(["127.0.0.1"]) == {}  # the kernel's own answer: loopback is always routed


@pytest.mark.integration
def test_compat_env_exports_the_interface_of_the_kernels_route_in_a_namespace_with_two_links(tmp_path):
    """A network namespace of its own with two links (veth pairs) on two subnets: compat env --master-addr picks, for gloo and
    for the FIXTURE bindings' oneCCL, the link whose subnet holds the master, and says why."""
    import os
    import shutil
    import subprocess
    import sys
    import uuid

    from ..clean_env import base_env
    from ..fixture_envs import FixtureEnv

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace")
    env = FixtureEnv(tmp_path / "venv").torch("2.7.0").bindings("2.7.0")
    namespace = f"cmt{os.getpid()}x{uuid.uuid4().hex[:6]}-two"
    made = subprocess.run(["ip", "netns", "add", namespace], capture_output=True, text=True, timeout=20, check=False)
    if made.returncode != 0:
        pytest.skip(f"a network namespace cannot be made here: {made.stderr.strip()}")
    try:
        for name, subnet in (("data0", "10.231.1"), ("fast0", "10.231.2")):
            for argv in (["link", "add", name, "type", "veth", "peer", "name", f"{name}p"], ["addr", "add", f"{subnet}.1/24", "dev", name],
                         ["link", "set", f"{name}p", "up"], ["link", "set", name, "up"]):
                subprocess.run(["ip", "-n", namespace, *argv], check=True, timeout=20, capture_output=True)
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True, timeout=20)
        done = {master: subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "compatmatrix", "env", "--json", "--launcher", "torchrun",
                                        "--python", str(env.python), "--master-addr", master, "--nnodes", "2"],
                                       capture_output=True, text=True, timeout=120, env=base_env(), check=False)
                for master in ("10.231.2.7", "10.231.1.7", "10.99.0.1")}
    finally:
        subprocess.run(["ip", "netns", "del", namespace], timeout=20, check=False)
    import json

    for master, interface in (("10.231.2.7", "fast0"), ("10.231.1.7", "data0")):
        assert done[master].returncode == 0, done[master].stderr
        document = json.loads(done[master].stdout)
        assert {k: document["exports"].get(k) for k in ("GLOO_SOCKET_IFNAME", "CCL_KVS_IFACE", "FI_TCP_IFACE", "MASTER_ADDR")} == {
            "GLOO_SOCKET_IFNAME": interface, "CCL_KVS_IFACE": interface, "FI_TCP_IFACE": interface, "MASTER_ADDR": master}
        assert f"interface: {interface} is the interface of the kernel's route to the master {master}" in document["comments"]
    unrouted = json.loads(done["10.99.0.1"].stdout)  # no default route in the namespace: said, nothing exported
    assert "GLOO_SOCKET_IFNAME" not in unrouted["exports"]
    assert any(c.startswith("interface: there is no route from here to the master 10.99.0.1 (10.99.0.1: ") for c in unrouted["comments"])


addresses = st.sampled_from(["10.0.0.1", "10.0.0.2", "127.0.0.1", "127.0.1.1", "fd00::2", "::1"])
names = st.sampled_from(["eth0", "ib0", "bond0", "lo"])


@settings(max_examples=200, deadline=None)
@given(st.none() | st.sampled_from(["node1", "10.0.0.1"]), st.booleans(), st.lists(addresses, max_size=4, unique=True),
       st.dictionaries(addresses, st.none() | names), st.lists(names, max_size=4, unique=True))
def test_an_interface_is_chosen_only_from_the_route_or_as_the_one_link_besides_lo(master, multi, found, routes, up):
    given_facts = RouteFacts(master or "", tuple(found), "", routes, {}, tuple(up))
    choice = choose_interface(master, multi, given_facts)
    assert choice.why and "\n" not in choice.why
    if choice.interface is None:
        return
    reachable = [a for a in found if not is_loopback(a)]
    if reachable:  # the route of the first reachable address that has one
        assert choice.interface == next(routes[a] for a in reachable if routes.get(a))
    else:  # every address is loopback here: only across hosts, only the one interface up besides lo
        assert multi and [n for n in up if n != "lo"] == [choice.interface]


def test_one_host_whose_name_resolves_to_loopback_is_no_fault():
    findings = compare([answer("node1", ["127.0.1.1"])], "ssh", "the default")
    assert not [f for f in findings if f.id == "hosts.network"]


def test_compat_env_keeps_a_gloo_interface_the_shell_already_sets():
    """The promise of docs/commands/env.md, end to end: a GLOO_SOCKET_IFNAME set in the shell is kept and said, not overwritten by the
    route's interface (the probe of the environment read no GLOO_* variable; HYDRA_* for MPICH's HYDRA_IFACE likewise)."""
    from compatmatrix.environment.interfaces import route_source

    master = "192.0.2.1"  # TEST-NET-1: only the kernel's route to it is asked, nothing is sent
    if route_source(master)[0] is None:
        pytest.skip("no route from this machine to an outside address")
    done = run_compat("env", "--master-addr", master, "--nnodes", "2", env_extra={"GLOO_SOCKET_IFNAME": "fixture0"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "GLOO_SOCKET_IFNAME=fixture0 already set here; kept" in done.stdout, done.stdout
    assert not any(line.startswith("export GLOO_SOCKET_IFNAME=") for line in done.stdout.splitlines()), done.stdout


@pytest.mark.parametrize("value", ["x y$(id)", "user@node1", "node1:29500", "node1\nexport EVIL=1"])
def test_a_master_addr_from_the_environment_that_is_no_host_is_not_used(value):
    """$MASTER_ADDR is taken as --master-addr is: a host name or an address, else not used (said, escaped), never looked up."""
    from ..conftest import run_compat

    done = run_compat("env", "--nnodes", "2", env_extra={"MASTER_ADDR": value})
    assert done.returncode == 0, done.stderr
    assert "is not a host name or an address: not used" in done.stdout and "GLOO_SOCKET_IFNAME" not in done.stdout
    assert "\nexport EVIL" not in done.stdout
