"""``compat launch``: the steps in order. Read the machine (the environment probe, or a recorded sysfs), plan the
ranks, find the libraries and tools this machine has, compose the launcher command.

Side effects: the environment probe (a child for --python), reading sysfs, the launcher's own look for its program
(``mpirun --version``), PATH lookups.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..errors import UsageError
from ..launchers import LAUNCHERS
from ..launchers.interface import Across, Invocation, PathEntries, ToolRequest, Tools
from .binding import compose
from .environment import choose_preload, environment_notes, launch_environment
from .plan import PlacementError, Plan, plan_ranks

if TYPE_CHECKING:
    from ..matrix.model import Matrix


@dataclass(frozen=True)
class LaunchOptions:
    launcher: str  # a launcher of launchers.names(BOUND)
    nproc_per_node: int
    command: tuple[str, ...]
    # the matrix the oneCCL environment is judged against (the bindings' release: where its setvars.sh is), loaded by the
    # command as compat env loads it (--matrix / $COMPAT_MATRIX, else the bundled one with the overlay)
    matrix: "Matrix"
    ccl_workers: Optional[int] = None  # None: 1 per rank where the cores allow it, else 0
    python: Optional[str] = None
    sysfs_root: Optional[str] = None
    mpirun: Optional[str] = None
    mpi_flavor: Optional[str] = None
    print_only: bool = False
    across: Optional[Across] = None  # several hosts: torchrun's --nnodes/--node-rank/master, mpirun's --hostfile/--rsh
    passed: tuple[str, ...] = ()  # more variables the ranks get by name (the watch's: mpirun passes them to every host)


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    invocation: Invocation
    rank_env: Mapping[str, str]
    notes: tuple[str, ...]


def prepare(options: LaunchOptions, environ: Mapping[str, str]) -> Prepared:
    from ..environment.libraries import preload_candidates, preload_entries
    from ..environment.snapshot import take_snapshot
    from .topology import machine_from_snapshot

    if not options.command:
        raise UsageError("No command to launch.", "Write it after --, e.g. compat launch --launcher torchrun --nproc-per-node 2 -- train.py --bf16")
    if options.sysfs_root and not options.print_only:
        raise UsageError("--sysfs-root plans for a recorded machine, so it only goes with --print.", "Add --print, or drop --sysfs-root to run on this machine.")
    snapshot = take_snapshot(options.python)
    if options.sysfs_root:
        from .sysfs import read_machine

        machine = read_machine(options.sysfs_root)
    else:
        machine = machine_from_snapshot(snapshot)
    bindings = oneccl_bindings_installed(snapshot)
    plan, auto_note = _plan_with_workers(machine, options.nproc_per_node, options.ccl_workers if bindings or options.ccl_workers is not None else 0)
    if not bindings and options.ccl_workers is None:
        auto_note = "the oneCCL bindings are not installed in this environment, so no core is set aside for oneCCL workers"
    preload = choose_preload(preload_candidates(snapshot.prefix), preload_entries(environ.get("LD_PRELOAD", "")))
    rank_env = launch_environment(plan, preload, bindings)
    notes = ([auto_note] if auto_note else []) + list(plan.notes) + list(environment_notes(plan, preload, environ, options.ccl_workers is not None, bindings))
    if options.sysfs_root:
        notes.append(f"planned for the machine recorded in {options.sysfs_root}; LD_PRELOAD, numactl/taskset and mpirun are this machine's")
    tools = Tools(shutil.which("numactl", path=environ.get("PATH")), shutil.which("taskset", path=environ.get("PATH")))
    python = snapshot.executable
    # the launcher's own program on this machine (mpirun and its MPI; torchrun needs torch), then the command line
    tool = LAUNCHERS[options.launcher].tool(ToolRequest(python, snapshot.get("torch") is not None, options.mpirun, options.mpi_flavor, options.print_only))
    notes += list(tool.notes)
    master, nnodes, said = job_hosts(options.launcher, environ, python=python)
    across = options.across
    if across is not None and across.hostfile:  # mpirun's hosts: the master is the first (rank 0's), unless named
        master, nnodes = across.master_addr or across.hosts[0][0], len(dict.fromkeys(name for name, _ in across.hosts))
    elif across is not None and across.nnodes > 1:
        master, nnodes = across.master_addr, across.nnodes
    notes += said
    oneccl, additions, said = launch_oneccl(snapshot, options.matrix, options.launcher, tool.program if options.launcher == "mpirun" else None, master, nnodes)
    rank_env = {**rank_env, **{k: v for k, v in oneccl.items() if k not in rank_env}}  # the plan's thread settings stay
    if across is not None and across.master_port and options.launcher == "mpirun":
        rank_env["MASTER_PORT"] = str(across.master_port)
    notes += said
    invocation = compose(plan, rank_env, options.launcher, options.command, python, tools, flavor=tool.flavor, mpirun=tool.program,
                         path=environ.get("PATH", ""), as_root=os.geteuid() == 0, additions=additions, across=across, passed=options.passed)
    return Prepared(plan, invocation, rank_env, tuple(notes) + invocation.notes)


def launch_oneccl(snapshot, matrix: "Matrix", launcher: str, mpirun: Optional[str], master: Optional[str] = None, nnodes: int = 1,  # noqa: ANN001
                  route=None) -> tuple[dict[str, str], dict[str, PathEntries], list[str]]:  # noqa: ANN001
    """What ``compat env --launcher LAUNCHER`` exports for this environment (launchers/environment.launcher_env, the one plan), as the
    launch's exports, path-list additions and notes; the thread settings are the plan's own. ``matrix``: the one the
    command loaded (compat env judges against the same). ``master``/``nnodes``: the
    job's hosts where the launch spans several (srun in an allocation: ``job_hosts``), for the interface variables. An
    oneCCL environment that cannot be set up is a note (the launch may run gloo), not an error."""
    from ..environment.facts import Facts
    from ..errors import CompatError
    from ..launchers.environment import launcher_env

    try:
        found = launcher_env(Facts(matrix, snapshot), launcher, mpirun if mpirun and os.path.isfile(mpirun) else None,
                             master, nnodes, route, master_from_env=False)
    except CompatError as exc:
        return {}, {}, [f"no oneCCL environment exported: {exc.message} {exc.fix}".strip()]
    additions = {key: PathEntries(added.prepend, added.append) for key, added in found.oneccl.additions.items()}
    notes = list(found.oneccl.comments) if found.oneccl.bindings else []
    return found.all_exports(), additions, notes + list(found.comments)


def job_hosts(launcher: str, environ: Mapping[str, str], hostnames=None, python: str = "") -> tuple[Optional[str], int, list[str]]:  # noqa: ANN001
    """(master, node count, notes) of a launch across hosts: under srun inside an allocation of several nodes, its first
    host (``scontrol show hostnames``, as each task's MASTER_ADDR is taken) and its node count; (None, 1, []) elsewhere
    (torchrun --standalone and mpirun without a hostfile stay on this host)."""
    if launcher != "srun":
        return None, 1, []
    from ..launchers.srun import allocation_master

    return allocation_master(environ, hostnames, python)


def oneccl_bindings_installed(snapshot) -> bool:  # noqa: ANN001 - an EnvSnapshot
    """Whether the environment has the oneCCL bindings (the only reason to set cores aside for oneCCL workers)."""
    from ..matrix.model import COMPONENTS, Component

    return snapshot.get(*COMPONENTS[Component.CCL].names) is not None


def _plan_with_workers(machine, ranks: int, ccl_workers: Optional[int]) -> tuple[Plan, str]:
    """``ccl_workers`` None (the default): one oneCCL worker core per rank where the cores allow it, else none
    (said in a note); a number given by the user is kept, and a plan that cannot hold it is an error."""
    if ccl_workers is not None:
        return plan_ranks(machine, ranks, ccl_workers), ""
    try:
        return plan_ranks(machine, ranks, 1), ""
    except PlacementError:
        plan = plan_ranks(machine, ranks, 0)
        return plan, f"{ranks} ranks leave no core for a oneCCL worker each on this machine, so none is set aside (--ccl-workers 1 to insist)"


def command_words(words: Sequence[str]) -> tuple[str, ...]:
    """argparse's REMAINDER with the leading -- dropped."""
    return tuple(words[1:] if words[:1] == ["--"] else words)
