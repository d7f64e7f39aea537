"""One environment, every form (issue 36, item 2): one launcher plan (launchers/environment.LauncherEnv: the oneCCL exports, the
launcher's needs, the interface variables, the path additions) rendered through every form a user runs it in, each
form's result read back from a real bash, and compared:

* ``compat env`` (its bash text, sourced; its --json document, applied);
* ``compat launch --print`` (its text, whose export lines a shell runs; its --json);
* ``compat launch`` without --print (the Invocation's environment, as launchers/run.py starts the launcher with it);
* the sbatch script (compat env's text sourced, then compat launch --launcher srun over it);
* the PyTorchJob (the pod's env, then the image's compat-env.sh written with --defaults, through BASH_ENV).

The plan is a FIXTURE (folders under /venv, which need not exist: nothing is loaded). On the old code srun's line
dropped the plan's path additions (its LD_LIBRARY_PATH lacked libfabric's folder)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from compatmatrix.environment.setvars import PathAddition
from compatmatrix.launchers import LAUNCHERS, names
from compatmatrix.launchers.interface import BOUND, ENV, PathEntries, Tools
from compatmatrix.placement.binding import compose
from compatmatrix.placement.plan import plan_ranks
from compatmatrix.placement.render import launch_json, launch_text
from compatmatrix.placement.topology import Machine, Topology
from compatmatrix.shell import EnvPlan, format_env

from ..clean_env import base_env

# FIXTURE: one plan, as launcher_env gives it for the PyPI runtime under /venv across two hosts
EXPORTS = {"CCL_ATL_TRANSPORT": "ofi", "FI_PROVIDER_PATH": "/venv/lib/libfabric/prov", "CCL_KVS_IFACE": "eth1", "FI_TCP_IFACE": "eth1",
           "GLOO_SOCKET_IFNAME": "eth1", "CCL_WORKER_COUNT": "1"}
ADDITIONS = {"LD_LIBRARY_PATH": PathAddition(("/venv/lib", "/venv/lib/libfabric")), "PATH": PathAddition(("/venv/bin",))}
BASE = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/other/lib"}
# compat launch's forms, one per launcher and MPI
LAUNCH_FORMS = [("torchrun", None), ("srun", None), ("mpirun", "intel-mpi"), ("mpirun", "open-mpi"), ("mpirun", "mpich")]


def expected(base=BASE) -> dict:
    env = {**base, **EXPORTS}
    for key, added in ADDITIONS.items():
        entries = [e for e in env.get(key, "").split(":") if e]
        env[key] = ":".join([*added.prepend, *(e for e in entries if e not in added.prepend), *added.append])
    return {k: env[k] for k in (*EXPORTS, *ADDITIONS)}


def in_bash(script: str, env: dict) -> dict:
    """The environment after ``script`` in a clean bash whose environment is ``env``."""
    printer = f"{shlex.quote(sys.executable)} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", f"{script}\n{printer}"], capture_output=True, text=True, timeout=60,
                          env={**base_env(), **env}, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def picked(env: dict) -> dict:
    return {k: env.get(k) for k in (*EXPORTS, *ADDITIONS)}


def invocation(launcher: str, flavor):
    plan = plan_ranks(Machine(Topology.flat(4), frozenset(range(4))), 2, 0)
    additions = {k: PathEntries(a.prepend, a.append) for k, a in ADDITIONS.items()}
    mpirun = "/usr/bin/mpirun" if flavor == "open-mpi" else "/venv/bin/mpirun"
    return plan, compose(plan, dict(EXPORTS), launcher, ["train.py"], "/venv/bin/python", Tools("/usr/bin/numactl", None), flavor=flavor,
                         mpirun=mpirun, path=BASE["PATH"], additions=additions)


def test_compat_env_text_and_json_render_the_plan():
    plan = EnvPlan(EXPORTS, (), ADDITIONS)
    assert picked(in_bash(format_env(plan, "bash"), BASE)) == expected()
    document = plan.to_json("/venv/bin/python")
    applied = {**BASE, **document["exports"]}
    for key, added in document["additions"].items():
        applied[key] = ":".join([*added["prepend"], *(e for e in applied.get(key, "").split(":") if e), *added["append"]])
    assert picked(applied) == expected()


@pytest.mark.parametrize("launcher, flavor", LAUNCH_FORMS, ids=lambda v: str(v))
def test_compat_launch_with_and_without_print_renders_the_same_plan(launcher, flavor):
    plan, invoked = invocation(launcher, flavor)
    # without --print: the environment launchers/run.py starts the launcher with
    assert picked(invoked.environment(BASE)) == expected(), launcher
    # --print: the text's export lines, as a shell runs them (the last line is the launcher's command)
    text = launch_text(plan, invoked, ())
    assert picked(in_bash("\n".join(text.splitlines()[:-1]), BASE)) == expected(), text
    # --print --json
    document = launch_json(plan, invoked, dict(EXPORTS), ())
    assert {k: document["env"][k] for k in EXPORTS} == EXPORTS
    assert {k: tuple(v["prepend"]) for k, v in document["additions"].items()} == {k: a.prepend for k, a in ADDITIONS.items()}


def test_every_launcher_of_compat_env_and_compat_launch_is_rendered_here():
    assert {name for name, _ in LAUNCH_FORMS} == set(names(BOUND))
    assert {flavor for name, flavor in LAUNCH_FORMS if name == "mpirun"} == set(LAUNCHERS["mpirun"].flavors)
    assert set(names(BOUND)) <= set(names(ENV))


def test_the_sbatch_script_renders_compat_env_then_compat_launch_over_it():
    from compatmatrix.render.sbatch import BatchShape, sbatch_text

    script = sbatch_text(BatchShape("j", 2, 2, "/venv/bin/python", ("compat",), ("train.py",)))
    assert "--launcher srun --master-addr \"$master\" --nnodes \"$SLURM_JOB_NUM_NODES\"" in script and "launch --launcher srun" in script
    sourced = in_bash(format_env(EnvPlan(EXPORTS, (), ADDITIONS), "bash"), BASE)
    _, invoked = invocation("srun", None)
    after = invoked.environment({k: v for k, v in sourced.items() if k in (*BASE, *EXPORTS, *ADDITIONS)})
    assert picked(after) == expected()  # the launch's additions over the sourced ones: each entry once


def test_the_pytorchjob_renders_the_pods_env_then_the_images_compat_env_with_defaults():
    from pathlib import Path

    from compatmatrix.export.service import POD_CCL_ENV
    from compatmatrix.launchers.interface import CclEnv

    torchrun, _ = LAUNCHERS["torchrun"].ccl_exports(CclEnv({}, {}, Path("/nonexistent"), ("eth0", "lo")))
    assert all(torchrun[k] == v == EXPORTS[k] for k, v in POD_CCL_ENV)  # the pod's own values are torchrun's plan's
    pod = {**BASE, **dict(POD_CCL_ENV)}
    sourced = in_bash(format_env(EnvPlan(EXPORTS, (), ADDITIONS), "bash", defaults=True), pod)
    assert picked(sourced) == expected()



# --- each command computes its own plan: the same exports and path additions from one environment ---------------------
# The tests above render ONE hand-written plan through every form, so they cannot see two commands computing different
# plans. Here each form's plan is computed by the command itself, from the same FIXTURE environment (torch 2.7.0, the
# FIXTURE PyPI runtime layout, a FIXTURE mpirun answering as Intel MPI's: tests/test_oneccl_runtime_layout.fixture_layout),
# in-process: compat env --launcher X --json, compat launch --launcher X --print --json, and the sbatch script's own
# lines run in bash (its compat env, then its compat launch --launcher srun with --print --json). The CPU plan's own
# variables (threads, pinning) are compat launch's and differ by design; every other export and every path addition
# must be the same.

CPU_PLAN = frozenset({"OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "CCL_WORKER_AFFINITY", "I_MPI_PIN", "I_MPI_PIN_DOMAIN"})


@pytest.fixture(scope="module")
def layout_python(tmp_path_factory) -> str:
    from ..environment.test_oneccl_runtime_layout import fixture_layout
    from ..environment.test_system_oneccl import GCC

    if GCC is None:
        pytest.skip("needs gcc (or cc) to build the FIXTURE shared libraries")
    env, _ = fixture_layout(tmp_path_factory.mktemp("one-plan"))
    return str(env.python)


def _document(*args: str) -> dict:
    import contextlib
    import io

    from compatmatrix.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0, args
    return json.loads(out.getvalue())


def _oneccl(exports: dict) -> dict:
    return {k: v for k, v in exports.items() if k not in CPU_PLAN}


def _additions(document: dict) -> dict:
    return {k: (tuple(v["prepend"]), tuple(v["append"])) for k, v in document["additions"].items()}


@pytest.mark.parametrize("launcher", sorted(names(BOUND)))
def test_compat_env_and_compat_launch_compute_the_same_plan(layout_python, monkeypatch, launcher):
    for key in ("MASTER_ADDR", "MASTER_PORT", "CCL_ATL_TRANSPORT", "FI_PROVIDER_PATH", "I_MPI_ROOT", "CCL_WORKER_COUNT", "LD_PRELOAD",
                *(k for k in list(os.environ) if k.startswith("SLURM_"))):
        monkeypatch.delenv(key, raising=False)
    env = _document("env", "--python", layout_python, "--launcher", launcher, "--json")
    launch = _document("launch", "--python", layout_python, "--launcher", launcher, "--print", "--json", "--nproc-per-node", "1", "--", "train.py")
    assert _oneccl(launch["env"]) == _oneccl(env["exports"]), launcher
    assert _additions(launch) == _additions(env), launcher
    assert any("libfabric" in entry for entry in _additions(env)["LD_LIBRARY_PATH"][0])  # the plan holds what the issue named


def test_the_sbatch_scripts_own_lines_compute_compat_envs_plan(layout_python, tmp_path):
    """The script as compat export sbatch writes it, its compat env and compat launch lines run in bash inside a FIXTURE
    one-node allocation (a FIXTURE scontrol naming 127.0.0.1): the ranks' oneCCL exports and path lists are compat env
    --launcher srun's, each added entry once."""
    from compatmatrix.render.sbatch import BatchShape, sbatch_text

    compat = (sys.executable, "-m", "compatmatrix")
    script = sbatch_text(BatchShape("j", 1, 1, layout_python, compat, ("train.py",), preflight=False))
    launch_line = next(line for line in script.splitlines() if line.startswith("exec ") and " launch --launcher srun " in line)
    printer = f"{shlex.quote(sys.executable)} -c 'import json, os; print(json.dumps(dict(os.environ)))' > {shlex.quote(str(tmp_path / 'env.json'))}"
    ran = script.replace(launch_line, f"{printer}\n" + launch_line[len("exec "):].replace(" launch --launcher srun ", " launch --print --json --launcher srun ", 1))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 127.0.0.1\n")  # FIXTURE scontrol: the allocation's one host
    (bin_dir / "scontrol").chmod(0o755)
    allocation = {"SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}:{BASE['PATH']}"}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", ran], capture_output=True, text=True, timeout=180,
                          env={**base_env(), **allocation}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    sourced, launch = json.loads((tmp_path / "env.json").read_text()), json.loads(done.stdout)
    planned = _document("env", "--python", layout_python, "--ranks-per-node", "1", "--launcher", "srun", "--master-addr", "127.0.0.1",
                        "--nnodes", "1", "--json")
    ranks = {**sourced, **launch["env"]}
    for key, (prepend, append) in _additions(launch).items():
        entries = [e for e in ranks.get(key, "").split(":") if e]
        ranks[key] = ":".join([*prepend, *(e for e in entries if e not in prepend), *append])
    assert {k: ranks.get(k) for k in _oneccl(planned["exports"])} == _oneccl(planned["exports"])
    for key, (prepend, append) in _additions(planned).items():
        entries = ranks[key].split(":")
        assert entries[: len(prepend)] == list(prepend), (key, ranks[key])
        assert all(entries.count(e) == 1 for e in (*prepend, *append)), (key, ranks[key])
