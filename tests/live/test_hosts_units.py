"""Several hosts without hosts: the remote shell on each MPI's command line, the user's own remote-shell variables,
the comparison of the hosts' answers (doctor --hostfile), the network finding and the known causes, over
hand-written inputs; the preflight's bounds (hostfile caps and host names, concurrent hosts under one deadline, ``--``
before the host, typed and escaped answers) with FIXTURE remote shells, small scripts that answer like compat check
--json, say something malformed, or never answer. The real runs are in tests/live/test_hosts_netns.py."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.findings import Status as S
from compatmatrix.hostlist import HOSTFILE_MAX_BYTES, HOSTFILE_MAX_LINES, HostfileError, parse_host, read_hosts
from compatmatrix.hosts import HostAnswer, collect, compare, escape_text, parse_answer
from compatmatrix.launchers.environment import launcher_exports
from compatmatrix.launchers.interface import LaunchError
from compatmatrix.launchers.interface import RankLayout as Topology
from compatmatrix.launchers.live import plan_launch
from compatmatrix.launchers.mpirun import read_hostfile, remote_shell, rsh_arguments
from compatmatrix.live.oneccl_causes import CclRun
from compatmatrix.live.report import Expectation, RankRecord, known_cause, network_finding

from ..conftest import run_compat

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
    # mpirun: what its MPI needs (a FIXTURE mpirun next to the interpreter answering as Intel MPI's), and the rendezvous
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "mpirun").write_text("#!/bin/sh\n# FIXTURE mpirun\necho 'Intel(R) MPI Library for Linux* OS, Version 2021.14'\n")
    (bin_dir / "mpirun").chmod(0o755)
    python = str(bin_dir / "python")
    intel, said = launcher_exports("mpirun", {}, {}, tmp_path, ["lo"], python, str(tmp_path / "env"))
    assert intel == {"I_MPI_ROOT": str(tmp_path / "env"), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, said
    given = {"I_MPI_ROOT": "/opt/intel/mpi", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}
    assert launcher_exports("mpirun", {}, given, tmp_path, ["lo"], python, str(tmp_path / "env"))[0] == {}


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
    torchrun = CclRun("torchrun", env_command='eval "$(compat env --launcher torchrun)"')
    for record in (printed, raised):
        summary, detail, fix = known_cause(record, torchrun)
        assert summary == "oneCCL's MPI transport needs an MPI launcher, and torchrun is not one"
        assert "failed to initialize ATL" in detail[0] and "compat env --launcher torchrun" in fix


# --- doctor --hostfile: the hostfile's bounds and host names ----------------------------------------------------------


def test_the_hostfile_forms_mpirun_takes_are_kept(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1\nnode2:4\nnode3 slots=8 max_slots=16\nalice@node4.example.org\n10.0.0.5:2\n"
                        "fe80::1\nbob@2001:db8::7\nfe80::2%eth0\nnode_6  # a comment\n\n")
    assert read_hosts(str(hostfile)) == [("node1", None), ("node2", 4), ("node3", 16), ("alice@node4.example.org", None), ("10.0.0.5", 2),
                                         ("fe80::1", None), ("bob@2001:db8::7", None), ("fe80::2%eth0", None), ("node_6", None)]
    assert read_hostfile(str(hostfile)) == read_hosts(str(hostfile))


@pytest.mark.parametrize("word", ["-oProxyCommand=touch${IFS}/tmp/x", "-x", "--", "node1;id", "$(id)", "`id`", "no..de", "node:abc", "node:1234567",
                                  "@node", "a;b@node", "-u@node", "alice@-oProxyCommand=x", "nöde", "node\x1b[2J", "fe80::g", "fe80::1%$(id)", "fe80::1%-x", "x" * 64, "a." * 130])
def test_a_word_that_is_not_a_host_is_refused_naming_the_line(tmp_path, word):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"node1\n{word}\n", encoding="utf-8")
    with pytest.raises(HostfileError, match="^line 2 of the hostfile .* names ") as caught:
        read_hosts(str(hostfile))
    assert "\x1b" not in str(caught.value)
    with pytest.raises(LaunchError):  # mpirun's launch reads hostfiles through the same rule
        read_hostfile(str(hostfile))


@pytest.mark.parametrize("line, words", [("node1:0", "it has 0 slots after ':'"), ("node1 slots=0", "gives 'node1' slots=0"),
                                          ("[::1]", "without brackets (::1, not [::1])"), ("[fe80::1]:2", "without brackets"),
                                          ("node1:00", "it has 0 slots after ':'"), ("node1 max_slots=0", "max_slots=0")])
def test_a_host_with_no_slot_or_a_bracketed_address_is_refused_with_its_line(tmp_path, line, words):
    """Zero slots is no rank on that host: mpirun refuses it or skips the host, and the plan's world size would be wrong.
    A bracketed IPv6 address is one, written as a URL writes it: the sentence says how a hostfile takes it."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"node0\n{line}\n")
    with pytest.raises(HostfileError, match="line 2 of the hostfile") as caught:
        read_hosts(str(hostfile))
    assert words in str(caught.value)


def test_an_option_in_the_hostfile_never_reaches_the_remote_shell(tmp_path):
    ran = tmp_path / "ran"
    rsh = write_exe(tmp_path / "rsh", f"#!/bin/sh\n# FIXTURE remote shell: records that it ran\necho \"$@\" > {ran}\nexit 255\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"-oProxyCommand=touch${{IFS}}{tmp_path}/pwned\n")
    done = run_compat("doctor", "--hostfile", str(hostfile), "--rsh", rsh)
    assert done.returncode == 2 and "line 1 of the hostfile" in done.stderr and "not a host name" in done.stderr
    assert not ran.exists()  # before: the remote shell got -oProxyCommand=... as its first argument


def test_the_hostfile_is_capped_in_bytes_and_lines_and_must_be_a_regular_file(tmp_path):
    big = tmp_path / "big"
    big.write_text(("n" * 63 + "\n") * (HOSTFILE_MAX_BYTES // 64 + 1))
    with pytest.raises(HostfileError, match="larger than"):
        read_hosts(str(big))
    long = tmp_path / "long"
    long.write_text("\n" * HOSTFILE_MAX_LINES + "node1\n")
    with pytest.raises(HostfileError, match="lines, more than"):
        read_hosts(str(long))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(HostfileError, match="not a regular file"):
        read_hosts(str(fifo))  # before: blocked in open() for ever
    assert time.monotonic() - started < 5
    with pytest.raises(HostfileError, match="missing"):
        read_hosts(str(tmp_path / "missing"))


# --- doctor --hostfile: hosts asked concurrently, under one deadline ------------------------------------------------------


def silent_rsh(tmp_path: Path) -> str:
    return write_exe(tmp_path / "silent-rsh", "#!/bin/sh\n# FIXTURE remote shell: a host that never answers\nexec sleep 600\n")


def test_silent_hosts_cost_the_deadline_once_not_once_each(tmp_path):
    hosts = ["node1", "node2", "node3", "node4"]
    started = time.monotonic()
    answers = collect(hosts, silent_rsh(tmp_path), "true", dict(os.environ), deadline_s=3)
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed  # one after the other, 3 s each: 12 s and more
    assert [a.host for a in answers] == hosts
    assert all(a.document is None and a.error == "no answer within the 3 s for all hosts" for a in answers)


def test_hosts_beyond_the_pool_wait_and_are_not_asked_after_the_deadline(tmp_path):
    answers = collect(["node1", "node2", "node3"], silent_rsh(tmp_path), "true", dict(os.environ), deadline_s=1.5, workers=1)
    assert answers[0].error == "no answer within the 1.5 s for all hosts"
    assert [a.error for a in answers[1:]] == ["not asked: the 1.5 s for all hosts had passed"] * 2


def test_at_most_the_pool_size_of_hosts_is_asked_at_once(tmp_path):
    log = tmp_path / "log"
    answer = json.dumps({"checks": [], "host": {"name": "h", "packages": {}, "cpu_flags": [], "oneccl_env": {}, "bindings": {}}})
    rsh = write_exe(tmp_path / "rsh", "#!/bin/sh\n# FIXTURE remote shell: logs when each host starts and ends, answers after 0.5 s\n"
                    f"echo \"start $(date +%s.%N)\" >> {log}\nsleep 0.5\necho \"end $(date +%s.%N)\" >> {log}\necho '{answer}'\n")
    answers = collect([f"node{i}" for i in range(6)], rsh, "true", dict(os.environ), deadline_s=60, workers=2)
    assert all(a.document is not None for a in answers)
    events = sorted((float(t), 1 if kind == "start" else -1) for kind, t in (line.split() for line in log.read_text().splitlines()))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 2  # concurrency itself: test_silent_hosts_cost_the_deadline_once_not_once_each


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_preflight_leaves_no_remote_shell_running(tmp_path, signal_name):
    import signal
    import subprocess
    import sys

    from ..clean_env import base_env

    pids = tmp_path / "pids"
    rsh = write_exe(tmp_path / "rsh", f"#!/bin/sh\n# FIXTURE remote shell: a host that never answers, its pid noted\necho $$ >> {pids}\nexec sleep 600\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\nnode3\n")
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--hostfile", str(hostfile), "--rsh", rsh], env=base_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (not pids.exists() or len(pids.read_text().split()) < 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(getattr(signal, signal_name))
    _, err = process.communicate(timeout=30)
    assert process.returncode == (130 if signal_name == "SIGINT" else 143), err
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_remote_shell_gets_double_dash_before_the_host(tmp_path):
    seen = tmp_path / "argv"
    rsh = write_exe(tmp_path / "rsh", f"#!/bin/sh\n# FIXTURE remote shell: records its arguments, one per line\nprintf '%s\\n' \"$@\" > {seen}\nexit 255\n")
    collect(["node1"], rsh, "compat check --json", dict(os.environ), deadline_s=30)
    assert seen.read_text().splitlines() == ["--", "node1", "compat check --json"]


# --- doctor --hostfile: a host's answer is typed, and what it says is escaped -------------------------------------------


GOOD_FACTS = {"name": "node1", "packages": {"torch": "2.7.0+cpu"}, "cpu_flags": ["avx2"], "oneccl_env": {"CCL_WORKER_COUNT": "1"}, "bindings": {}}


@pytest.mark.parametrize("document, problem", [
    ([], "a JSON list, not an object"),
    ("text", "a JSON str, not an object"),
    ({"checks": 5}, "no list of checks"),
    ({"checks": [5]}, "check 1 is not an object"),
    ({"checks": [{"id": "x", "status": "fail", "summary": "s"}]}, "check 1 has no id of compat's form (area.name)"),
    ({"checks": [{"id": "a.b", "status": "boom", "summary": "s"}]}, "check a.b has no status pass, warn, fail or skip"),
    ({"checks": [{"id": "a.b", "status": "fail", "summary": ["s"]}]}, "check a.b has a summary, fix or evidence that is not text"),
    ({"checks": [], "host": []}, "its host facts are not an object"),
    ({"checks": [], "host": {**GOOD_FACTS, "packages": ["torch"]}}, "its packages are not distribution names with versions"),
    ({"checks": [], "host": {**GOOD_FACTS, "packages": {"torch": "2.7\x1b[2J"}}}, "its packages are not distribution names with versions"),
    ({"checks": [], "host": {**GOOD_FACTS, "cpu_flags": "avx2"}}, "its CPU flags are not flag names"),
    ({"checks": [], "host": {**GOOD_FACTS, "oneccl_env": {"CCL_X": 1}}}, "its oneCCL variables are not names with text values"),
    ({"checks": [], "host": {**GOOD_FACTS, "bindings": {"a b": "/x"}}}, "its bindings are not module names with paths"),
])
def test_a_malformed_answer_is_said_not_trusted(document, problem):
    assert parse_answer(document) == (None, problem)


@pytest.mark.parametrize("answer", ["[]", '{"checks": 5}', '{"checks": [{"id": "a.b", "status": "fail"}]}', '{"checks": [], "host": {"packages": ["x"]}}'])
def test_a_malformed_answer_is_a_finding_naming_the_host(tmp_path, answer):
    rsh = write_exe(tmp_path / "rsh", f"#!/bin/sh\n# FIXTURE remote shell: answers malformed JSON\necho '{answer}'\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\n")
    done = run_compat("doctor", "--json", "--hostfile", str(hostfile), "--rsh", rsh)
    assert done.returncode == 1, done.stderr  # before: the internal-error guard (AttributeError / TypeError), or a PASS
    reach = [c for c in json.loads(done.stdout)["checks"] if c["id"] == "hosts.reach"]
    assert reach[0]["status"] == "fail" and reach[0]["summary"].startswith("node1: compat check could not run there through")
    assert "its answer is not compat check --json's: " in reach[0]["summary"]


def test_escape_sequences_from_a_host_never_reach_the_terminal(tmp_path):
    evil = "\x1b]0;owned\x07\x1b[2J\u202e\u2028\x85"
    facts = {**GOOD_FACTS, "oneccl_env": {"CCL_ATL_TRANSPORT": "ofi" + evil}}
    document = {"checks": [{"id": "packages.x", "status": "fail", "summary": "bad" + evil, "fix": "fix" + evil, "evidence": [evil]}], "host": facts}
    rsh = write_exe(tmp_path / "rsh", "#!/bin/sh\n# FIXTURE remote shell: answers with escape sequences in its text\n"
                    f"cat <<'EOF'\n{json.dumps(document)}\nEOF\n")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    done = run_compat("doctor", "--hostfile", str(hostfile), "--rsh", rsh, "--verbose")
    assert done.returncode == 1, done.stderr
    assert "node1: packages.x: bad\\x1b]0;owned\\x07\\x1b[2J\\u202e\\u2028\\x85" in done.stdout
    for raw in ("\x1b", "\x07", "\u202e", "\u2028", "\x85"):
        assert raw not in done.stdout + done.stderr  # before: the sequences went to the terminal as they came


def test_escape_text_writes_controls_as_escapes_and_keeps_the_rest():
    assert escape_text("a\tb\nc\x1b[0m\x7f\x9b") == "a\\x09b\\x0ac\\x1b[0m\\x7f\\x9b"
    assert escape_text("torch 2.7.0+cpu on nöde — ok") == "torch 2.7.0+cpu on nöde — ok"


def test_answers_that_differ_are_compared_after_typing():
    one = parse_answer({"checks": [], "host": {**GOOD_FACTS, "oneccl_env": {"CCL_ATL_TRANSPORT": "ofi\x1b[31m"}}})[0]
    two = parse_answer({"checks": [], "host": {**GOOD_FACTS, "name": "node2", "oneccl_env": {"CCL_ATL_TRANSPORT": "mpi"}}})[0]
    findings = compare([HostAnswer("node1", one), HostAnswer("node2", two)], "ssh", "the default")
    assert ("hosts.oneccl", S.FAIL, "CCL_ATL_TRANSPORT differs between the hosts: ofi\\x1b[31m on node1; mpi on node2") in \
        {(f.id, f.status, f.summary) for f in findings}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_no_word_accepted_as_a_host_can_be_read_as_an_option_or_a_shell_word(word):
    entry, problem = parse_host(word)
    if word.startswith("-") or not word.isascii():
        assert entry is None and problem
    if entry is not None:
        name = entry[0]
        assert not name.startswith("-") and name.split("@")[-1][:1] != "-"
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:@")
