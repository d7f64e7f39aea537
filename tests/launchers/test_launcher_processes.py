"""What compat tune starts is its launcher's: ``processes(job, base)`` of the registry's launchers that offer TUNE,
handed the job compat launch hands ``bound()`` (placement/binding.bound_job). torchrun's is compat launch's own command
line in the environment it would run in; spawn's is one process per rank through the same binding wrapper, with the
rank variables and one free port on loopback. The real runs of both are tests/tune/test_tune_real.py's.

FIXTURE: the two-socket Xeon of tests/launchers/test_placement.py (a recorded topology), no libraries to preload.
"""

from __future__ import annotations

from compatmatrix.launchers import LAUNCHERS, names
from compatmatrix.launchers.interface import LOOPBACK, TUNE, WRAPPER_NAME, PathEntries, Tools
from compatmatrix.placement.binding import binder_script, bound_job, compose
from compatmatrix.placement.environment import launch_environment
from compatmatrix.placement.plan import plan_ranks

from .test_placement import NO_LIBS, xeon

PYTHON = "/env/bin/python"
TOOLS = Tools(numactl="/usr/bin/numactl", taskset="/usr/bin/taskset")
BASE = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/base/lib", "HOME": "/home/u"}


def test_every_launcher_answers_processes_and_tune_offers_spawn_and_torchrun():
    assert all(callable(getattr(launcher, "processes", None)) for launcher in LAUNCHERS.values())
    # mpirun and srun are not offered: their ranks see their own rank variables, which compat's workload does not map
    assert {"spawn", "torchrun"} <= set(names(TUNE)) and not {"mpirun", "srun"} & set(names(TUNE))


def test_torchrun_processes_are_compat_launchs_command_line_in_its_environment():
    plan = plan_ranks(xeon(), 2)
    env = launch_environment(plan, NO_LIBS)
    additions = {"LD_LIBRARY_PATH": PathEntries(("/b/lib",))}
    launcher, job = bound_job(plan, env, "torchrun", [PYTHON, "train.py"], PYTHON, TOOLS, additions=additions)
    launch = launcher.processes(job, BASE)
    invocation = compose(plan, env, "torchrun", [PYTHON, "train.py"], PYTHON, TOOLS, additions=additions)
    assert launch.commands == (invocation.argv,) and launch.envs == (invocation.environment(BASE),)
    assert launch.envs[0]["LD_LIBRARY_PATH"] == "/b/lib:/base/lib" and launch.envs[0]["HOME"] == "/home/u"
    assert (launch.launcher, launch.flavor, launch.expected_local, launch.world_size) == ("torchrun", "torchrun", 2, 2)


def test_spawn_starts_each_rank_through_the_binding_wrapper_with_its_rank_variables():
    plan = plan_ranks(xeon(), 2)
    env = launch_environment(plan, NO_LIBS)
    launcher, job = bound_job(plan, env, "spawn", [PYTHON, "train.py", "--steps", "3"], PYTHON, TOOLS,
                              additions={"LD_LIBRARY_PATH": PathEntries(("/b/lib",))})
    launch = launcher.processes(job, BASE)
    script, tool = binder_script(plan, "LOCAL_RANK", TOOLS)
    assert tool == "numactl"
    assert launch.commands == (("sh", "-c", script, WRAPPER_NAME, PYTHON, "train.py", "--steps", "3"),) * 2
    port = launch.envs[0]["MASTER_PORT"]
    assert port.isdigit() and launch.master == f"{LOOPBACK}:{port}"
    for local, rank_env in enumerate(launch.envs):
        assert {k: rank_env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")} == {
            "RANK": str(local), "WORLD_SIZE": "2", "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": LOOPBACK, "MASTER_PORT": port}
        assert {k: rank_env[k] for k in env} == env and rank_env["HOME"] == "/home/u"  # the plan's settings over the caller's environment
        assert rank_env["LD_LIBRARY_PATH"] == "/b/lib:/base/lib"
    assert (launch.launcher, launch.flavor, launch.expected_local, launch.world_size) == ("spawn", "spawn", 2, 2)


def test_a_script_without_the_interpreter_in_front_gets_it_as_compat_launch_gives_it():
    plan = plan_ranks(xeon(), 1)
    launcher, job = bound_job(plan, {}, "spawn", ["train.py"], PYTHON, TOOLS)
    assert launcher.processes(job, {}).commands[0][-2:] == (PYTHON, "train.py")
