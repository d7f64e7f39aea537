"""srun (compatmatrix/launchers/srun.py): the allocation's layout read from SLURM_* (typed at the edge), the srun line
of compat launch, and srun's failure lines. The real two-node cluster is tests/launchers/test_slurm_real.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compatmatrix.errors import UsageError
from compatmatrix.launchers import LAUNCHERS
from compatmatrix.launchers.srun import _MAP_RANKS, allocation_layout, in_step, master_port_of, tasks_per_node

from ..cli.test_cli_fuzz import run_in_process
from ..conftest import ROOT
from ..hostile_strings import hostile
from .test_placement import XEON, launch_print, span, with_bindings  # noqa: F401 (a fixture)

SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "launch-v1.json").read_text())


@pytest.fixture
def fixture_hostnames():
    """FIXTURE stand-in for ``scontrol show hostnames``: expands only the lists the tests give, records each call."""
    asked = []
    known = {"node[1-2]": ["node1", "node2"], "n[01-03]": ["n01", "n02", "n03"], "bad": ["-oProxyCommand=x", "n2"]}

    def hostnames(nodelist):
        asked.append(nodelist)
        return known[nodelist]

    hostnames.asked = asked
    return hostnames


def step_env(**changes):
    """What srun -N2 --ntasks-per-node=1 gives the task on the second node (as seen on Slurm 22.05)."""
    env = {"SLURM_JOB_ID": "12345", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_NNODES": "2", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1",
           "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_STEP_NODELIST": "node[1-2]",
           "SLURMD_NODENAME": "node2"}
    env.update(changes)
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("text, counts", [("2(x3),1", (2, 2, 2, 1)), ("1(x2)", (1, 1)), ("4", (4,)), ("3,1(x2)", (3, 1, 1))])
def test_tasks_per_node_expands_slurms_compressed_list(text, counts):
    assert tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "0", "2(x0)", "2(3)", "x", "2(x3)1", "-1", "1(x99999999)", "1,,2", "٣"])
def test_a_tasks_per_node_list_that_is_not_one_is_a_usage_error(text):
    with pytest.raises(UsageError, match="SLURM_TASKS_PER_NODE"):
        tasks_per_node(text)


def test_the_layout_is_the_allocations(fixture_hostnames):
    layout, notes = allocation_layout(step_env(), 2, hostnames=fixture_hostnames)
    assert (layout.nnodes, layout.node_rank, layout.nproc_per_node, layout.world_size) == (2, 1, 2, 4)
    assert layout.master_addr == "node1" and fixture_hostnames.asked == ["node[1-2]"]
    assert layout.master_port == master_port_of(12345) == 20000 + 12345 % 20000
    assert notes[0].startswith("srun: node 1 of 2 (SLURM_STEP_NUM_NODES): node2 (SLURMD_NODENAME) is host 1 of SLURM_STEP_NODELIST, ")
    assert any("node1 (node 0), node2 (node 1)" in note for note in notes)  # a rank that never joins is on a host the report can name


@pytest.mark.parametrize("nodeid, name", [("0", "node2"), ("1", "node1")])
def test_node_rank_zero_is_on_the_master_whatever_order_slurm_numbers_the_nodes(fixture_hostnames, nodeid, name):
    """slurm.conf naming node2 before node1 (or a topology order): Slurm's SLURM_NODEID 0 is node2 while the list reads
    node[1-2]. The node rank is the host's place in the list, so node1, the master, holds node rank 0 and rank 0."""
    layout, notes = allocation_layout(step_env(SLURM_NODEID=nodeid, SLURM_PROCID=nodeid, SLURMD_NODENAME=name), 2, hostnames=fixture_hostnames)
    assert layout.master_addr == "node1" and layout.hosts == ("node1", "node2")
    assert layout.node_rank == layout.hosts.index(name)
    assert notes[0] == (f"srun: node {layout.node_rank} of 2 (SLURM_STEP_NUM_NODES): {name} (SLURMD_NODENAME) is host {layout.node_rank} of "
                        f"SLURM_STEP_NODELIST; Slurm numbers it {nodeid} (SLURM_NODEID), 2 ranks each (--ranks-per-node)")


@given(order=st.permutations(["n01", "n02", "n03"]))
def test_every_node_takes_its_place_in_the_list_and_exactly_one_is_node_rank_zero_on_the_master(order):
    """Whatever SLURM_NODEID each node gets, the node ranks the three tasks compute are 0, 1, 2, and 0 is the master's."""
    known = {"n[01-03]": ["n01", "n02", "n03"]}
    ranks = {}
    for nodeid, name in enumerate(order):
        env = step_env(SLURM_NTASKS_PER_NODE="1", SLURM_STEP_TASKS_PER_NODE="1(x3)", SLURM_STEP_NUM_NODES="3", SLURM_NODEID=str(nodeid),
                       SLURM_PROCID=str(nodeid), SLURM_STEP_NODELIST="n[01-03]", SLURMD_NODENAME=name)
        layout, _ = allocation_layout(env, 2, hostnames=known.__getitem__)
        ranks[name] = layout.node_rank
        assert layout.master_addr == "n01"
    assert sorted(ranks.values()) == [0, 1, 2] and ranks["n01"] == 0


def test_a_node_compat_cannot_find_in_the_list_is_one_sentence_naming_the_list_and_the_escape(fixture_hostnames):
    with pytest.raises(UsageError) as caught:
        allocation_layout(step_env(SLURMD_NODENAME="node7"), 2, hostnames=fixture_hostnames)
    assert caught.value.message.startswith("SLURMD_NODENAME='node7' is not among the step's hosts (node1, node2)")
    assert "(node1, node2)" in caught.value.fix and "--master-addr" in caught.value.fix and "not node1" in caught.value.fix


@pytest.mark.parametrize("name", ["node2.cluster.example", " node2.ib "])
def test_a_fully_qualified_slurmd_nodename_is_found_by_its_short_name(fixture_hostnames, name):
    layout, notes = allocation_layout(step_env(SLURMD_NODENAME=name, SLURM_NODEID="0"), 2, hostnames=fixture_hostnames)
    assert layout.node_rank == 1 and "node2 (SLURMD_NODENAME, up to its first dot) is host 1" in notes[0]


def test_the_users_master_other_than_the_first_host_keeps_slurm_nodeid_and_says_so(fixture_hostnames):
    """--master-addr names a host compat cannot place in the list: every node keeps SLURM_NODEID (the same rule on every
    node, never a node alone), and the note says the node Slurm numbers 0 must be the master's."""
    layout, notes = allocation_layout(step_env(SLURMD_NODENAME="node7"), 3, master_addr="10.0.0.1", master_port=29500, hostnames=fixture_hostnames)
    assert (layout.master_addr, layout.master_port, layout.world_size, layout.node_rank, layout.hosts) == ("10.0.0.1", 29500, 6, 1, ())
    assert "--master-addr 10.0.0.1 is not the first host of SLURM_STEP_NODELIST (node1), so the node rank is SLURM_NODEID" in notes[0]


@pytest.mark.parametrize("nodeid, name", [("0", "node2"), ("1", "node1")])
def test_the_users_master_that_is_the_first_host_still_ranks_the_nodes_by_the_list(fixture_hostnames, nodeid, name):
    """--master-addr node1 with Slurm numbering node2 first: SLURM_NODEID would put node rank 0 on node2 while the
    master is node1 (no rendezvous); the list's order puts it on node1."""
    layout, _ = allocation_layout(step_env(SLURM_NODEID=nodeid, SLURM_PROCID=nodeid, SLURMD_NODENAME=name), 2, master_addr="node1",
                                  hostnames=fixture_hostnames)
    assert (layout.master_addr, layout.node_rank, layout.hosts) == ("node1", ("node1", "node2").index(name), ("node1", "node2"))


def test_the_tasks_per_node_list_is_read_when_ntasks_per_node_is_not_set(fixture_hostnames):
    env = step_env(SLURM_NTASKS_PER_NODE=None, SLURM_STEP_TASKS_PER_NODE="1(x3)", SLURM_STEP_NUM_NODES="3", SLURM_NODEID="2", SLURM_PROCID="2",
                   SLURM_STEP_NODELIST="n[01-03]", SLURMD_NODENAME="n03")
    layout, _ = allocation_layout(env, 1, hostnames=fixture_hostnames)
    assert (layout.nnodes, layout.node_rank, layout.master_addr) == (3, 2, "n01")


@pytest.mark.parametrize("changes, said", [
    ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}, "srun started 2 tasks on this node"),
    ({"SLURM_NTASKS_PER_NODE": None, "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_NODEID": "0", "SLURM_PROCID": "0"}, "srun started 2 tasks"),
    ({"SLURM_NODEID": "2"}, "SLURM_NODEID=2 is not below"),
    ({"SLURM_NODEID": None}, "SLURM_NODEID is not set"),
    ({"SLURM_NODEID": "1\n"}, None),
    ({"SLURM_NODEID": "one"}, "SLURM_NODEID='one' is not a whole number"),
    ({"SLURM_NODEID": "-1"}, "is not a whole number"),
    # a whole number past the cap is out of range, however many digits (was "not a whole number" past 10 digits)
    ({"SLURM_NODEID": "99999999999999999999"}, "SLURM_NODEID=99999999999999999999 is outside 0..999,999"),
    ({"SLURM_LOCALID": "99999999999999999999"}, "SLURM_LOCALID=99999999999999999999 is outside 0..8,191"),
    ({"SLURM_LOCALID": "9" * 5000}, "is outside 0..8,191"),  # past int()'s 4300 digits: no ValueError, no traceback
    ({"SLURM_STEP_NUM_NODES": "0"}, "SLURM_STEP_NUM_NODES=0 is outside 1..1,000,000"),
    ({"SLURM_PROCID": "0"}, None),  # --distribution=arbitrary: task 0 on the second node; the node rank is the list's, not PROCID's
    ({"SLURM_STEP_NODELIST": "-oProxyCommand=x"}, "is not a Slurm node list"),
    ({"SLURM_STEP_NODELIST": "n[01-03]"}, "gave 3 hosts"),
    ({"SLURM_STEP_NODELIST": "bad"}, "is not a host name"),
    ({"SLURM_JOB_ID": "0"}, "SLURM_JOB_ID=0 is outside 1..4,294,967,295"),
])
def test_an_allocation_compat_cannot_read_is_one_sentence(fixture_hostnames, changes, said):
    if said is None:  # Slurm never writes one, but a stray newline around a number is still the number
        assert allocation_layout(step_env(**changes), 2, hostnames=fixture_hostnames)[0].node_rank == 1
        return
    with pytest.raises(UsageError) as caught:
        allocation_layout(step_env(**changes), 2, hostnames=fixture_hostnames)
    assert said in caught.value.message and caught.value.fix


@pytest.mark.parametrize("name", ["SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID",
                                  "SLURM_JOB_ID", "SLURM_STEP_TASKS_PER_NODE"])
@pytest.mark.parametrize("value", ["4294967295", "4294967296", "9999999999", "1000001", "8193(x2)"])
def test_every_slurm_count_is_capped_like_its_flag_in_one_sentence(fixture_hostnames, name, value):
    """SLURM_STEP_NUM_NODES=4294967295 was a MemoryError (a tuple of that many counts): every SLURM_* count the layout
    reads has the range of the flag it stands for (--nnodes, --node-rank: cli.MAX_COUNT; --nproc-per-node: cli.MAX_PER_NODE)."""
    from compatmatrix import cli
    from compatmatrix.launchers import srun

    assert (srun.MAX_NODES, srun.MAX_PER_NODE) == (cli.MAX_COUNT, cli.MAX_PER_NODE)
    changes = {name: value}
    if name == "SLURM_NNODES":
        changes["SLURM_STEP_NUM_NODES"] = None
    if name == "SLURM_STEP_TASKS_PER_NODE":
        changes["SLURM_NTASKS_PER_NODE"] = None
    in_range = name == "SLURM_JOB_ID" and value.isdigit() and int(value) < 1 << 32
    in_range |= name == "SLURM_PROCID" and value.isdigit() and int(value) < srun.MAX_NODES * srun.MAX_PER_NODE  # any task number, any node
    if in_range:  # a job id is not a count: any 32-bit job number is one
        assert allocation_layout(step_env(**changes), 2, hostnames=fixture_hostnames)[0].nnodes == 2
        return
    with pytest.raises(UsageError) as caught:
        allocation_layout(step_env(**changes), 2, hostnames=fixture_hostnames)
    message = caught.value.message
    assert message.startswith(name) and message.endswith(".") and "\n" not in message and caught.value.fix
    said = ("outside", "is not a whole number", "tasks-per-node list")
    assert any(words in message for words in said), message


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["SLURM_NODEID", "SLURM_PROCID", "SLURM_STEP_NUM_NODES", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
                             "SLURM_STEP_NODELIST", "SLURM_JOB_ID", "SLURM_LOCALID"]),
       value=hostile())
def test_hostile_slurm_values_end_in_a_sentence_never_an_error_of_python(name, value):
    known = {"node[1-2]": ["node1", "node2"]}
    try:
        layout, _ = allocation_layout(step_env(**{name: value}), 2, hostnames=lambda nodelist: known.get(nodelist, []))
    except UsageError as exc:
        assert "\n" not in exc.message and all(ch.isprintable() or ch == "\t" for ch in exc.message)  # values.quoted keeps a tab
    else:
        assert 0 <= layout.node_rank < layout.nnodes and layout.master_addr == "node1"


def test_in_step_needs_a_step_not_only_a_job():
    assert in_step(step_env())
    batch = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "0", "SLURM_PROCID": "0"}  # the batch script itself: no step id
    assert not in_step(batch) and not in_step({})


def test_doctor_live_under_a_hostile_allocation_exits_2_with_one_sentence(capsys, monkeypatch):
    for key in list(os.environ):
        if key.startswith("SLURM_"):
            monkeypatch.delenv(key)
    for key, value in step_env(SLURM_NODEID="1; rm -rf /", SLURM_PROCID="1").items():
        monkeypatch.setenv(key, value)
    code, out, err = run_in_process(["doctor", "--live"], capsys)  # auto-detected: no --launcher
    assert code == 2 and "SLURM_NODEID='1; rm -rf /' is not a whole number" in err and "Traceback" not in err


def test_doctor_live_srun_outside_an_allocation_says_so(capsys, monkeypatch):
    for key in list(os.environ):
        if key.startswith("SLURM_"):
            monkeypatch.delenv(key)
    code, out, err = run_in_process(["doctor", "--live", "--launcher", "srun"], capsys)
    assert code == 2 and "SLURM_NODEID is not set" in err


def test_doctor_live_under_srun_refuses_hand_computed_ranks(capsys, monkeypatch):
    for key, value in step_env().items():
        monkeypatch.setenv(key, value)
    code, out, err = run_in_process(["doctor", "--live", "--nnodes", "2", "--node-rank", "1"], capsys)
    assert code == 2 and "come from the allocation" in err


def test_launch_prints_the_srun_line_from_the_plan(with_bindings):  # noqa: F811
    done = launch_print("--json", *with_bindings, "--sysfs-root", str(XEON), "--launcher", "srun", "--nproc-per-node", "2", "--", "train.py", "--lr", "1e-4")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    command = data["command"]
    assert command[0] == "srun"  # by name, the one on PATH in the allocation (not the interpreter compose hands it)
    assert (data["launcher"], data["flavor"], data["binding"]) == ("srun", "srun", "srun --cpu-bind")
    assert "--ntasks-per-node=2" in command and "--cpus-per-task=27" in command
    assert f"--cpu-bind=mask_cpu:{hex(sum(1 << c for c in span(1, 27)))},{hex(sum(1 << c for c in span(29, 55)))}" in command
    assert command[-3:] == [command[-3], "--lr", "1e-4"] and command[-3].endswith("train.py")
    assert data["env"]["OMP_NUM_THREADS"] == "27"


def test_each_task_maps_srun_variables_to_torchs(tmp_path):
    """The sh -c of the srun line, run as srun runs it: RANK/WORLD_SIZE/LOCAL_RANK from srun's, the port by the formula
    the live preflight uses (master_port_of), an exported master kept."""
    env = {"PATH": os.environ["PATH"], "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4",
           "SLURM_JOB_ID": "54321", "MASTER_ADDR": "node7"}
    code = "import os; print(' '.join(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')))"
    done = subprocess.run(["sh", "-c", _MAP_RANKS, "compat-launch-rank", "python3", "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "8", "1", "4", "node7", str(master_port_of(54321))]


@pytest.mark.parametrize("log, first", [
    ("srun: error: node2: task 1: Exited with exit code 3\nsrun: error: node1: task 0: Exited with exit code 1\n", ("rank", 1, 3)),
    ("srun: error: node2: task 1: Killed\n", ("rank", 1, -9)),
    ("srun: error: node2: tasks 2-3: Terminated\n", ("rank", 2, -15)),
    ("all good\n", None),
])
def test_srun_failure_lines_name_the_first_failed_task(log, first):
    assert LAUNCHERS["srun"].failures(log).first == first


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("job_id", ["x[$(echo INJECTED >&2)]", "a[`echo INJECTED >&2`]", "0123", "99999999999999999999", ""])
def test_a_hostile_slurm_job_id_is_never_evaluated_by_the_tasks_shell(shell, job_id):
    """bash (the sh of many clusters) evaluates a variable's value in $((...)) as an expression: the srun line's sh -c
    reads SLURM_JOB_ID only once it is a job number, and otherwise stops with one sentence (exit 2), running nothing."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    env = {"PATH": os.environ["PATH"], "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_JOB_ID": job_id,
           "MASTER_ADDR": "node7"}
    done = subprocess.run([shell, "-c", _MAP_RANKS, "compat-launch-rank", "sh", "-c", "echo RAN $MASTER_PORT"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert "INJECTED" not in done.stdout + done.stderr
    assert done.returncode == 2 and "RAN" not in done.stdout and "SLURM_JOB_ID is not a job number" in done.stderr, done.stderr
    env["MASTER_PORT"] = "29500"  # an exported port: the job id is not read at all
    done = subprocess.run([shell, "-c", _MAP_RANKS, "compat-launch-rank", "sh", "-c", "echo RAN $MASTER_PORT"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.split() == ["RAN", "29500"] and "INJECTED" not in done.stderr


def test_a_node_count_of_thousands_of_digits_is_a_note_not_a_traceback():
    """compat launch --launcher srun reads SLURM_JOB_NUM_NODES: past int()'s 4300 digits it was a ValueError."""
    from compatmatrix.launchers.srun import allocation_master

    master, nnodes, notes = allocation_master({"SLURM_JOB_NUM_NODES": "9" * 5000})
    assert (master, nnodes) == (None, 1) and "is not a node count" in notes[0]


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("procid, localid, name, rank", [("0", "0", "node2", 2), ("1", "1", "node2", 3), ("2", "0", "node1", 0), ("3", "1", "node1", 1)])
def test_each_task_of_compat_launch_takes_its_rank_from_its_nodes_place_in_the_list(tmp_path, shell, procid, localid, name, rank):
    """slurm.conf numbering node2 first: SLURM_PROCID 0 and 1 run on node2 while the list (and so MASTER_ADDR) starts
    with node1. The tasks rank by the node's place in the list, so rank 0 runs on node1, the master."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    tools = tmp_path / "fixture-bin"
    tools.mkdir()
    (tools / "scontrol").write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames node[1-2]" ] && printf "node1\\nnode2\\n"\n')  # FIXTURE scontrol
    (tools / "scontrol").chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "SLURM_PROCID": procid, "SLURM_NTASKS": "4", "SLURM_LOCALID": localid, "SLURM_NTASKS_PER_NODE": "2",
           "SLURM_JOB_ID": "54321", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": name}
    code = "import os; print(' '.join(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR')))"
    done = subprocess.run([shell, "-c", _MAP_RANKS, "compat-launch-rank", "python3", "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(rank), "4", localid, "node1"]
    for hostile_count in ("x[$(echo INJECTED >&2)]", "02", ""):  # never evaluated: SLURM_PROCID as Slurm gives it
        done = subprocess.run([shell, "-c", _MAP_RANKS, "compat-launch-rank", "python3", "-c", code], env={**env, "SLURM_NTASKS_PER_NODE": hostile_count},
                              capture_output=True, text=True, timeout=30)
        assert "INJECTED" not in done.stdout + done.stderr and done.returncode == 0 and done.stdout.split()[0] == procid, done.stderr


def _fixture_bin(tmp_path, hosts, uname="elsewhere"):
    """FIXTURE scontrol (expands node[...] to ``hosts``) and FIXTURE uname (-n prints ``uname``), first on PATH."""
    tools = tmp_path / "fixture-bin"
    tools.mkdir(exist_ok=True)
    listed = "\\n".join(hosts)
    (tools / "scontrol").write_text(f'#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && [ "$3" = "node[1-{len(hosts)}]" ] && printf "{listed}\\n"\n')
    (tools / "uname").write_text(f'#!/bin/sh\n[ "$1" = "-n" ] && echo {uname}\n')
    for tool in ("scontrol", "uname"):
        (tools / tool).chmod(0o755)
    return f"{tools}:{os.environ['PATH']}"


def _run_task(shell, path, **env):
    """One task of compat launch's srun line, as srun starts it: its shell runs _MAP_RANKS, which execs the command."""
    code = "import os; print(' '.join(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR')))"
    return subprocess.run([shell, "-c", _MAP_RANKS, "compat-launch-rank", "python3", "-c", code], env={"PATH": path, **env},
                          capture_output=True, text=True, timeout=30)


def _slurm_task(hosts, numbered, procid, per_node, **changes):
    """What srun gives task ``procid`` when Slurm numbers the nodes ``numbered`` (node names, SLURM_NODEID order)."""
    env = {"SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid % per_node), "SLURM_NODEID": str(procid // per_node),
           "SLURMD_NODENAME": numbered[procid // per_node], "SLURM_NTASKS": str(len(hosts) * per_node),
           "SLURM_NTASKS_PER_NODE": str(per_node), "SLURM_JOB_ID": "54321", "SLURM_JOB_NUM_NODES": str(len(hosts)),
           "SLURM_STEP_NODELIST": f"node[1-{len(hosts)}]", "SLURM_JOB_NODELIST": f"node[1-{len(hosts)}]"}
    env.update(changes)
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("numbered", [("node2", "node1"), ("node3", "node1", "node2"), ("node2", "node3", "node1")])
def test_with_the_master_compat_launch_exports_ranks_zero_to_n_land_on_the_first_listed_host(tmp_path, shell, numbered):
    """compat launch --launcher srun in an allocation of 2+ nodes exports MASTER_ADDR as the allocation's first host
    (allocation_master) before it calls srun. Slurm numbering another node first (SLURM_PROCID 0 there), each task still
    takes its rank from its node's place in the list: ranks 0..n-1 run on node1, the master, every rank once."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    from compatmatrix.placement.service import job_hosts

    hosts = sorted(numbered)
    path = _fixture_bin(tmp_path, hosts)
    per_node = 2
    master, nnodes, _ = job_hosts("srun", _slurm_task(hosts, numbered, 0, per_node), hostnames=lambda nodelist: hosts)  # FIXTURE scontrol
    assert (master, nnodes) == ("node1", len(hosts))
    ranks = {}
    for procid in range(len(hosts) * per_node):
        done = _run_task(shell, path, **_slurm_task(hosts, numbered, procid, per_node, MASTER_ADDR=master))
        assert done.returncode == 0, done.stderr
        rank, world, local, addr = done.stdout.split()
        assert (world, local, addr) == (str(len(hosts) * per_node), str(procid % per_node), "node1")
        ranks[int(rank)] = numbered[procid // per_node]
    assert sorted(ranks) == list(range(len(hosts) * per_node))
    assert [ranks[rank] for rank in range(len(hosts) * per_node)] == [host for host in hosts for _ in range(per_node)]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_master_the_user_exported_that_is_not_the_first_host_keeps_slurm_procid_on_every_node(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    hosts, numbered = ["node1", "node2"], ("node2", "node1")
    path = _fixture_bin(tmp_path, hosts)
    for procid in range(4):
        done = _run_task(shell, path, **_slurm_task(hosts, numbered, procid, 2, MASTER_ADDR="10.0.0.2"))
        assert done.returncode == 0 and done.stdout.split() == [str(procid), "4", str(procid % 2), "10.0.0.2"], done.stderr


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("seen, uname", [({"SLURMD_NODENAME": "node2.cluster.example"}, "elsewhere"),  # an FQDN: its short name
                                         ({"SLURMD_NODENAME": None}, "node2"),  # unset: the host name
                                         ({"SLURMD_NODENAME": None}, "node2.cluster.example")])  # unset: the host name's short name
def test_a_node_named_otherwise_is_found_as_this_node_finds_it(tmp_path, shell, seen, uname):
    """Slurm numbering node2 first, and node2's task sees its name only in another form: it still takes ranks 2 and 3
    (not SLURM_PROCID's 0 and 1, which node1's tasks take from the list: rank 0 twice)."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    hosts, numbered = ["node1", "node2"], ("node2", "node1")
    path = _fixture_bin(tmp_path, hosts, uname=uname)
    ranks = []
    for procid in range(4):
        changes = {"MASTER_ADDR": "node1", **(seen if numbered[procid // 2] == "node2" else {})}
        done = _run_task(shell, path, **_slurm_task(hosts, numbered, procid, 2, **changes))
        assert done.returncode == 0, done.stderr
        ranks.append(int(done.stdout.split()[0]))
    assert ranks == [2, 3, 0, 1]


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("seen, said", [({"SLURMD_NODENAME": "cn02.other"}, "cn02.other (SLURMD_NODENAME)"),
                                        ({"SLURMD_NODENAME": None}, "elsewhere (the host name, SLURMD_NODENAME is not set)"),
                                        ({"SLURMD_NODENAME": "x$(echo INJECTED)\n`echo INJECTED`"}, "x??echo?INJECTED???echo?INJECTED? (SLURMD_NODENAME)")])
def test_a_node_not_in_the_list_ends_its_tasks_with_one_sentence_never_keeps_slurm_procid_alone(tmp_path, shell, seen, said):
    """Its tasks keeping SLURM_PROCID 0 and 1 while node1's take ranks 0 and 1 from the list: two ranks 0. The task
    stops (exit 2) before the command runs, with one sentence naming the node, the list and the way out."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    hosts, numbered = ["node1", "node2"], ("node2", "node1")
    path = _fixture_bin(tmp_path, hosts)
    for procid in (0, 1):
        done = _run_task(shell, path, **_slurm_task(hosts, numbered, procid, 2, MASTER_ADDR="node1", **seen))
        assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"compat: this node, {said}, is not in the node list of the step (node1, node2)"), done.stderr
        assert "INJECTED\n" not in done.stderr and "MASTER_ADDR" in lines[0] and lines[0].count(". ") == 0


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("localid", ["x[$(echo INJECTED >&2)]", "01", ""])
def test_a_task_number_that_is_not_one_ends_the_task_rather_than_keep_slurm_procid_alone(tmp_path, shell, localid):
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    path = _fixture_bin(tmp_path, ["node1", "node2"])
    done = _run_task(shell, path, **_slurm_task(["node1", "node2"], ("node2", "node1"), 0, 2, MASTER_ADDR="node1", SLURM_LOCALID=localid))
    assert "INJECTED" not in done.stdout + done.stderr
    assert done.returncode == 2 and done.stdout == "" and "SLURM_LOCALID is not a task number" in done.stderr, done.stderr
