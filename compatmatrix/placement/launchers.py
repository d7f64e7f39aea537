"""A plan + a launcher -> the command line and the environment that carry it out.

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

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ..errors import CompatError
from .plan import Plan
from .topology import cpu_list_text

LAUNCHERS = ("torchrun", "mpirun")
MPI_FLAVORS = ("intel-mpi", "open-mpi", "mpich")
LOCAL_RANK_VARIABLE = {"torchrun": "LOCAL_RANK", "open-mpi": "OMPI_COMM_WORLD_LOCAL_RANK", "mpich": "MPI_LOCALRANKID"}
WRAPPER_NAME = "compat-launch-rank"  # $0 of the wrapper: what `ps` shows before the exec


@dataclass(frozen=True)
class Tools:
    """The binding tools on this machine (paths, or None)."""

    numactl: Optional[str] = None
    taskset: Optional[str] = None


@dataclass(frozen=True)
class Invocation:
    launcher: str  # torchrun | mpirun
    flavor: str  # torchrun | intel-mpi | open-mpi | mpich
    argv: tuple[str, ...]
    env: Mapping[str, str]  # exported for the launcher: the ranks' environment plus the launcher's binding settings
    binding: str  # I_MPI_PIN_DOMAIN | numactl | taskset
    notes: tuple[str, ...]

    def shell_line(self) -> str:
        return shlex.join(self.argv)


def rank_command(command: Sequence[str], python: str) -> list[str]:
    """What each rank runs: COMMAND as given, with the interpreter put in front of a script, ``-m MODULE`` or ``-c CODE``."""
    if command and (command[0].endswith(".py") or command[0] in ("-m", "-c")):
        return [python, *command]
    return list(command)


def pin_domain(plan: Plan) -> str:
    """Intel MPI's explicit mask list: one hexadecimal mask of each local rank's compute CPUs."""
    return "[" + ",".join(hex(sum(1 << cpu for cpu in rank.cpus)) for rank in plan.ranks) + "]"


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
            flavor: Optional[str] = None, mpirun: str = "mpirun", path: str = "", as_root: bool = False) -> Invocation:
    """The launcher command for ``plan``. ``flavor``: the MPI (mpirun only); ``path``: PATH as the launcher will see it;
    ``as_root``: compat runs as root (Open MPI refuses that without --allow-run-as-root)."""
    ranks = str(len(plan.ranks))
    user = rank_command(command, python)
    env = dict(rank_env)
    notes = []
    if launcher == "torchrun":
        script, tool = binder_script(plan, LOCAL_RANK_VARIABLE["torchrun"], tools)
        # the underscore spellings: torch < 2.0 knows only those
        argv = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", ranks, "--no_python", "sh", "-c", script, WRAPPER_NAME, *user]
        notes.append(f"torchrun starts each rank as sh -c '...' which execs {tool} with the rank's CPUs (chosen by LOCAL_RANK), then the command")
        notes.append("OMP_NUM_THREADS is exported, so torchrun keeps it instead of setting 1")
        return Invocation("torchrun", "torchrun", tuple(argv), env, tool, tuple(notes))
    if launcher != "mpirun" or flavor not in MPI_FLAVORS:
        raise CompatError(f"Unknown launcher {launcher} ({flavor or 'no MPI flavour'}).", "Use --launcher torchrun or --launcher mpirun (Intel MPI, Open MPI or MPICH).")
    folder = os.path.dirname(mpirun)
    if flavor in ("intel-mpi", "mpich") and folder and folder not in path.split(os.pathsep):
        env["PATH"] = os.pathsep.join([folder] + [p for p in path.split(os.pathsep) if p])  # hydra runs its proxies from PATH
    if flavor == "intel-mpi":
        env["I_MPI_PIN"] = "1"
        env["I_MPI_PIN_DOMAIN"] = pin_domain(plan)
        argv = [mpirun, "-n", ranks, "-ppn", ranks, *user]
        notes.append("Intel MPI pins local rank i to the i-th mask of I_MPI_PIN_DOMAIN (its compute CPUs)")
        return Invocation("mpirun", flavor, tuple(argv), env, "I_MPI_PIN_DOMAIN", tuple(notes))
    script, tool = binder_script(plan, LOCAL_RANK_VARIABLE[flavor], tools)
    if flavor == "open-mpi":
        argv = [mpirun, "-np", ranks, "--bind-to", "none"]
        if as_root:
            argv.append("--allow-run-as-root")
        for name in env:
            argv += ["-x", name]
    else:
        argv = [mpirun, "-n", ranks, "-ppn", ranks]
    argv += ["sh", "-c", script, WRAPPER_NAME, *user]
    notes.append(f"{flavor}: each rank starts as sh -c '...' which execs {tool} with the rank's CPUs (chosen by {LOCAL_RANK_VARIABLE[flavor]}), then the command")
    return Invocation("mpirun", flavor, tuple(argv), env, tool, tuple(notes))
