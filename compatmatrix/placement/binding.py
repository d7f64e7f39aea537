"""A plan's CPU binding, made ready for a launcher: the wrapper that binds each rank, Intel MPI's mask list, and
``compose``, which hands both to the launcher's ``bound()`` (launchers/) for the command line and its environment.

How each launcher binds rank i to its CPUs:
* Intel MPI: ``I_MPI_PIN_DOMAIN=[mask0,mask1,...]``, one hexadecimal mask of OS CPU numbers per local rank, in
  local-rank order (checked on Intel MPI 2021.18 here: rank i lands on mask i, also under a narrower affinity).
* torchrun, Open MPI, MPICH: none of them can give each rank its own CPU list (torchrun's ``--numa-binding`` binds
  to the CPUs near a GPU), so every rank starts through a small ``sh -c`` wrapper that reads the launcher's local
  rank variable (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID) and execs ``numactl --physcpubind=CPUS
  --membind=NODES`` (memory on the rank's NUMA node too) or, without numactl, ``taskset -c CPUS``. Open MPI gets
  ``--bind-to none`` so its own default binding does not fight the wrapper. The wrapper is inline: nothing to
  write, and the printed command runs as it is.

The environment is the same for every rank (OMP_NUM_THREADS, binding style, oneCCL workers, LD_PRELOAD): it is
exported for the launcher, which passes it on. torchrun keeps an OMP_NUM_THREADS it finds (it sets 1 only when
the variable is missing).

Side effects: none (which tools exist and which MPI this is are found by the caller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from ..errors import CompatError
from ..launchers import LAUNCHERS
from ..launchers.interface import Across, BoundJob, Invocation, Launcher, LaunchError, PathEntries, Tool, Tools
from ..processes import rank_command
from ..record import replace
from .plan import Plan
from .topology import cpu_list_text


def cpu_masks(plan: Plan) -> tuple[int, ...]:
    """Each local rank's compute CPUs as a bit mask (bit N: OS CPU N), in local-rank order."""
    return tuple(sum(1 << cpu for cpu in rank.cpus) for rank in plan.ranks)


def pin_domain(plan: Plan) -> str:
    """Intel MPI's explicit mask list: one hexadecimal mask of each local rank's compute CPUs."""
    from ..launchers.mpirun import i_mpi_pin_domain

    return i_mpi_pin_domain(cpu_masks(plan))


def binder_script(plan: Plan, variable: str, tools: Tools) -> tuple[str, str]:
    """(sh script, tool): exec the rank's command under numactl (CPUs + memory node) or taskset (CPUs)."""
    tool = "numactl" if tools.numactl else "taskset" if tools.taskset else ""
    if not tool:
        raise CompatError("Neither numactl nor taskset is on PATH: the ranks cannot be bound to their CPUs.",
                          "Install one (apt-get install numactl, or util-linux for taskset), or use Intel MPI's mpirun (--launcher mpirun), which binds by itself.")
    arms = []
    for rank in plan.ranks:
        cpus = cpu_list_text(rank.cpus)
        if tool == "numactl":
            words = ["numactl", f"--physcpubind={cpus}"] + ([f"--membind={','.join(map(str, rank.nodes))}"] if rank.nodes else [])
        else:
            words = ["taskset", "-c", cpus]
        arms.append(f'{rank.local_rank}) set -- {" ".join(words)} "$@";;')  # no "--": taskset would run it as the command
    fallback = (f'*) echo "compat launch: no CPUs were planned for local rank ${{{variable}:-(unset)}}; the plan has {len(plan.ranks)}" >&2; exit 2;;')
    return f'case "${{{variable}:-}}" in {" ".join(arms)} {fallback} esac; exec "$@"', tool


def compose(plan: Plan, rank_env: Mapping[str, str], launcher: str, command: Sequence[str], python: str, tools: Tools,
            flavor: Optional[str] = None, mpirun: str = "mpirun", path: str = "", as_root: bool = False,
            additions: Optional[Mapping[str, PathEntries]] = None, across: Optional[Across] = None, passed: Sequence[str] = ()) -> Invocation:
    """The launcher command for ``plan``: the plan's binding handed to the launcher's ``bound()``. ``flavor``: the MPI
    (mpirun only); ``path``: PATH as the launcher will see it; ``as_root``: compat runs as root (Open MPI refuses that
    without --allow-run-as-root); ``additions``: path lists the ranks need added to (the oneCCL environment's);
    ``across``: the hosts of a launch across several; ``passed``: more variables the ranks get by name."""
    chosen, job = bound_job(plan, rank_env, launcher, command, python, tools, flavor, mpirun, path, as_root, additions)
    if across is not None or passed:
        job = replace(job, across=across, passed=tuple(passed))
    return chosen.bound(job)


def bound_job(plan: Plan, rank_env: Mapping[str, str], launcher: str, command: Sequence[str], python: str, tools: Tools,
              flavor: Optional[str] = None, mpirun: str = "mpirun", path: str = "", as_root: bool = False,
              additions: Optional[Mapping[str, PathEntries]] = None) -> tuple[Launcher, BoundJob]:
    """The launcher of the registry named ``launcher`` and the job ``plan`` hands it (compose's arguments): for its
    ``bound()`` (compat launch) or its ``processes()`` (compat tune)."""
    chosen = LAUNCHERS.get(launcher)
    if chosen is None:
        raise LaunchError(f"Unknown launcher {launcher} ({flavor or 'no MPI flavour'}).", "Use --launcher torchrun or --launcher mpirun (Intel MPI, Open MPI or MPICH).")
    only = chosen.flavors[0] if len(chosen.flavors) == 1 else ""
    tool = Tool(python if only else mpirun, flavor or only)
    return chosen, BoundJob(len(plan.ranks), dict(rank_env), tuple(rank_command(command, python)), python, tool,
                            lambda variable: binder_script(plan, variable, tools), cpu_masks(plan), path, as_root, dict(additions or {}))
