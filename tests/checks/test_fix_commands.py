"""A fix names its full command (issue 36, item 3): every `compat env` a fix of the checks or of the live report tells the
user to run carries --python when the environment judged is not the one compat runs in (compat env there exports
nothing useful), and --launcher when one was asked (compat check --launcher) or is the live run's (doctor --live,
given or detected). On the old code the static oneCCL fixes said the plain `compat env` even under --launcher mpirun,
and the live report's CCL_WORKER_COUNT and backend fixes said `eval "$(compat env)"`.

The static states are FIXTURE environments (tests/fixture_envs.py, FIXTURE native files where gcc is here); the live
records are written by hand, with the rank outputs of tests/fixtures/oneccl (reconstructed, see that file)."""

from __future__ import annotations

import re

import pytest

from compatmatrix.checks.registry import Context, Options, all_checks, run_checks, select
from compatmatrix.environment.setvars import INTERFACES_KEY
from compatmatrix.environment.snapshot import take_snapshot

from ..fixture_envs import FixtureEnv

COMMAND = re.compile(r"\$\(compat env([^)]*)\)")


def commands(fix: str) -> list[str]:
    """The arguments of every `$(compat env ...)` in ``fix``; a `compat env` said any other way is a failure of its own."""
    found = COMMAND.findall(fix)
    assert fix.count("compat env") == len(found), f"a compat env that is not a command to run: {fix}"
    return found


def assert_full(fixes: list[tuple[str, str]], python: str, launcher) -> int:
    told = 0
    for cid, fix in fixes:
        for arguments in commands(fix):
            told += 1
            assert f"--python {python}" in arguments, (cid, fix)
            if launcher:
                assert f"--launcher {launcher}" in arguments, (cid, fix)
    return told


def static_fixes(env: FixtureEnv, matrix, monkeypatch, options: Options, variables=None) -> list[tuple[str, str]]:
    for key, value in (variables or {}).items():
        monkeypatch.setenv(key, value)
    ctx = Context(matrix, take_snapshot(str(env.python)), options)
    ctx.cache[INTERFACES_KEY] = ("lo",)  # lo only: oneccl.kvs-iface's fix
    chosen = select(all_checks(), ["oneccl", "runtime", "imports.ccl"])
    return [(f.id, f.fix) for f in run_checks(chosen, ctx) if f.fix]


# a shell that gets the bundled bindings' checks to fail: setvars.sh not sourced, a stale I_MPI_ROOT, no thread count
BROKEN_SHELL = {"I_MPI_ROOT": "/opt/elsewhere/mpi", "OMP_NUM_THREADS": "many"}


@pytest.mark.parametrize("asked, launcher", [({"launcher": "mpirun"}, "mpirun"), ({"env_launcher": "srun"}, "srun"), ({}, None)],
                         ids=["check --launcher mpirun", "doctor --live under srun", "no launcher"])
def test_every_static_fix_names_compat_env_with_python_and_the_launcher(tmp_path, matrix, monkeypatch, asked, launcher):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0", ending="missing_libccl")
    fixes = static_fixes(env, matrix, monkeypatch, Options(**asked), BROKEN_SHELL)
    ids = {cid for cid, fix in fixes if "compat env" in fix}
    assert {"oneccl.setvars", "oneccl.stale-prefix", "oneccl.kvs-iface", "runtime.threads", "imports.ccl"} <= ids, fixes
    assert assert_full(fixes, str(env.python), launcher) >= len(ids)


def test_the_system_oneccls_static_fixes_name_the_full_command(tmp_path, matrix, monkeypatch):
    """Bindings built against a system oneCCL: no libccl found (oneccl.setvars' install fix), and the PyPI runtime without
    impi-rt (oneccl.libfabric, oneccl.fi-provider: pip install impi-rt, then compat env)."""
    from ..environment.test_system_oneccl import GCC, fixture_bindings, fixture_libccl, machine_libccl

    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one")
    if GCC is None:
        pytest.skip("needs gcc (or cc) to build the FIXTURE shared libraries")
    lost = FixtureEnv(tmp_path / "lost").torch("2.7.0")
    fixture_bindings(lost, fixture_libccl(tmp_path / "gone").parent)
    (tmp_path / "gone" / "libccl.so.1").unlink()
    fixes = static_fixes(lost, matrix, monkeypatch, Options(launcher="torchrun"))
    assert any(cid == "oneccl.setvars" and "then eval" in fix for cid, fix in fixes), fixes
    assert_full(fixes, str(lost.python), "torchrun")
    bare = FixtureEnv(tmp_path / "bare").torch("2.7.0")
    fixture_bindings(bare, fixture_libccl(tmp_path / "bare" / "lib").parent)  # the PyPI runtime's libccl, no impi-rt beside it
    fixes = static_fixes(bare, matrix, monkeypatch, Options(launcher="mpirun"))
    assert assert_full(fixes, str(bare.python), "mpirun") >= 1, fixes


# --- the live report -----------------------------------------------------------------------------------------------


def live_fixes(run) -> list[tuple[str, str]]:
    """Every live finding with a fix, from records that make each of them fail (and each rank output of the table)."""
    import json
    from pathlib import Path

    from compatmatrix.launchers.interface import Launch
    from compatmatrix.live.report import (
        Expectation,
        RankRecord,
        backend_finding,
        environment_finding,
        hang_finding,
        imports_finding,
        known_cause,
        ranks_finding,
        trainer_finding,
    )
    from compatmatrix.live.supervise import Supervised

    stopped = Supervised("x", (), True, False, 60.0, True, ())
    ended = Supervised("x", (), False, False, 5.0, False, ())
    expect = Expectation(world_size=2, trainer=True, steps=1, per_device_batch=2, backend="ccl", ccl_installed=True, timeout=60, ccl=run,
                         multi_host=True)
    found = []
    trainer = RankRecord(1, {"rank": 0, "stage": "trainer:arguments", "trainer": {"flags": {}},
                             "error": {"type": "ValueError", "message": "Your assigned backend ccl is not available, please use gloo"}}, "")
    found.append(trainer_finding([trainer], expect))
    found.append(backend_finding([RankRecord(1, {"rank": 0, "stage": "backend", "backend": None, "backend_reason": "ccl is not registered"}, "")], expect))
    no_libccl = RankRecord(1, {"rank": 0, "stage": "import:oneccl_bindings_for_pytorch",
                               "error": {"type": "ImportError", "message": "libccl.so.1: cannot open shared object file: No such file or directory"}}, "")
    found.append(imports_finding([no_libccl], ended, run))
    waiting = [RankRecord(i, {"rank": i, "stage": "init", "backend": "ccl", "started": 0, "updated": 2, "host": f"node{i}"}, "") for i in (1, 2)]
    found.append(hang_finding(waiting, stopped, expect, 2))
    found.append(environment_finding(Launch("mpirun", "intel-mpi", (("mpirun",),), ({},), "127.0.0.1:1", 2, 2, added={"MASTER_ADDR": "127.0.0.1"}), run))
    table = json.loads((Path(__file__).parents[1] / "fixtures" / "oneccl" /
                        "rank-outputs-oneccl_bind_pt-2.7.0+cpu-oneccl-cpu-2021.14.1-torch-2.7.0.json").read_text())
    for case in table["cases"]:
        log = "\n".join(case["output"]) + "\n"
        record = RankRecord(1, {"rank": 0, "stage": "init", "error": {"type": "RuntimeError", "message": "failed to initialize ATL"}}, log, 1)
        found.append(ranks_finding([record], ended, run))
        cause = known_cause(record, run)
        if cause is not None:
            found.append(type(found[0])("live.cause", found[0].status, cause[0], cause[1], cause[2]))
        found.append(hang_finding([RankRecord(i, {"rank": i, "stage": "init", "backend": "ccl", "started": 0, "updated": 2}, log) for i in (1, 2)],
                                  stopped, expect, 2))
    return [(f.id, f.fix) for f in found if f is not None and f.fix]


@pytest.mark.parametrize("launcher, flavor", [("spawn", "spawn"), ("torchrun", "torchrun"), ("mpirun", "intel-mpi"), ("mpirun", "open-mpi"), ("srun", "srun")])
def test_every_live_fix_names_compat_env_with_python_and_the_launcher(launcher, flavor):
    from compatmatrix.launchers.interface import Launch
    from compatmatrix.live.service import ccl_run

    class Snapshot:  # FIXTURE snapshot: only what ccl_run reads
        prefix = ""
        executable = "/train/venv/bin/python"

    command = ("/usr/bin/mpirun" if flavor == "open-mpi" else "/train/venv/bin/mpirun", "-n", "2") if launcher == "mpirun" else ("python",)
    run = ccl_run(Launch(launcher, flavor, (command,), ({},), "127.0.0.1:1", 2, 2), Snapshot())
    fixes = live_fixes(run)
    ids = {cid for cid, fix in fixes if "compat env" in fix}
    assert {"live.trainer", "live.backend", "live.imports", "live.hang", "live.ranks"} <= ids, fixes
    assert assert_full(fixes, Snapshot.executable, launcher) >= len(ids)


# --- the commands themselves: compat check and compat doctor (static) pass their --launcher to the checks ------------


@pytest.mark.parametrize("command", ["check", "doctor"])
def test_the_commands_pass_their_launcher_to_the_static_checks(tmp_path, monkeypatch, capsys, command):
    """`compat doctor --python P --launcher mpirun` without --live: oneccl.launcher judges mpirun and every fix's compat
    env names --python P --launcher mpirun, as compat check --launcher does (on the old code doctor's --launcher was
    read only by --live: oneccl.launcher SKIPped "no launcher named" and the oneCCL fixes said compat env without it)."""
    import json

    from compatmatrix.cli import main

    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0", ending="missing_libccl")
    for key, value in BROKEN_SHELL.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("COMPAT_PYTHON", raising=False)
    main([command, "--python", str(env.python), "--launcher", "mpirun", "--only", "oneccl", "--only", "runtime", "--json"])
    document = json.loads(capsys.readouterr().out)
    findings = document["checks"]
    launcher = next(f for f in findings if f["id"] == "oneccl.launcher")
    assert "no launcher named" not in launcher["summary"], launcher
    fixes = [(f["id"], f["fix"]) for f in findings if f["fix"]]
    assert assert_full(fixes, str(env.python), "mpirun") >= 2, fixes


# --- the notes: every compat env a note of compat env, compat launch, a job script or doctor --hostfile names ----------


@pytest.mark.parametrize("launcher", ["spawn", "torchrun", "mpirun", "srun"])
def test_every_note_of_compat_env_names_compat_env_in_full(tmp_path, matrix, launcher):
    """compat env --launcher X --master-addr ADDR --nnodes 2 on a host with two interfaces: its comments (the ofi
    launchers' CCL_KVS_IFACE note, the interface note) name compat env with --python and --launcher (on the old code:
    "compat env --master-addr ADDR sets them" and "run compat env on each host")."""
    from compatmatrix.environment.interfaces import RouteFacts
    from compatmatrix.shell_env import plan_env

    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    ctx = Context(matrix, take_snapshot(str(env.python)), Options(launcher=launcher))
    ctx.cache[INTERFACES_KEY] = ("lo", "eth0", "ib0")
    route = lambda master: RouteFacts(master, (master,), routes={master: "eth0"}, up=("lo", "eth0", "ib0"))  # noqa: E731 - a FIXTURE route
    plan = plan_env(ctx, 2, launcher, "10.0.0.1", 2, route)
    notes = [("note", comment) for comment in plan.comments if "compat env" in comment]
    assert notes, plan.comments
    assert assert_full(notes, str(env.python), launcher) == len(notes)


def test_srun_and_hostfile_notes_name_compat_env_in_full():
    """The srun note when the allocation's first host cannot be read, and doctor --hostfile's fixes (hosts.oneccl,
    hosts.network): on the old code `eval "$(compat env --launcher srun --master-addr FIRST_HOST --nnodes N)"` without
    --python, and `compat env --master-addr` / `eval "$(compat env)"` without either."""
    from compatmatrix.errors import UsageError
    from compatmatrix.hosts import HostAnswer, compare
    from compatmatrix.placement.service import job_hosts

    python = "/train/venv/bin/python"

    def unreadable(nodelist):
        raise UsageError("scontrol is not installed.", "")

    _, _, notes = job_hosts("srun", {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]"}, unreadable, python=python)
    assert assert_full([("srun", note) for note in notes], python, "srun") == 1, notes

    def answer(host, env, resolves):
        facts = {"name": host, "packages": {"torch": "2.7.0+cpu"}, "cpu_flags": [], "oneccl_env": env, "bindings": {},
                 "network": {"resolves": resolves, "interfaces": ["lo", "eth0"], "own": []}}
        return HostAnswer(host, {"checks": [], "host": facts})

    answers = [answer("node1", {"CCL_ATL_TRANSPORT": "ofi", "FI_TCP_IFACE": "eth0"}, ["127.0.1.1"]), answer("node2", {}, ["127.0.1.1"])]
    fixes = [(f.id, f.fix) for f in compare(answers, "ssh", "the default", {}, python, "mpirun") if f.fix]
    told = {cid for cid, fix in fixes if "compat env" in fix}
    assert {"hosts.oneccl", "hosts.network"} <= told, fixes
    assert assert_full(fixes, python, "mpirun") >= 3


def test_the_fabric_interface_cause_names_the_runs_compat_env():
    """live.pairs' GLOO_SOCKET_IFNAME cause names the run's compat env (on the old code: "compat env --master-addr MASTER")."""
    from compatmatrix.live.fabric import interface_causes
    from compatmatrix.live.protocol import InterfaceFacts

    facts = [InterfaceFacts(interface="eth0", gloo_ifname="eth1"), InterfaceFacts(interface="eth0")]
    command = 'eval "$(compat env --launcher mpirun --python /train/venv/bin/python)"'
    causes = [("live.pairs", cause) for cause in interface_causes(facts, [0], command)[0]]
    assert assert_full(causes, "/train/venv/bin/python", "mpirun") == 1, causes
