"""Turn a launcher choice into the processes to start: argument lists and environments, nothing run here but
``mpirun --version`` (to tell Intel MPI from Open MPI) and a socket bind (to pick a free port).

spawn    compat starts the ranks itself with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT
torchrun ``python -m torch.distributed.run`` of the target interpreter (static rendezvous at MASTER_ADDR:PORT)
mpirun   Intel MPI (hydra) or Open MPI; the worker maps PMI_* / OMPI_COMM_WORLD_* to RANK / WORLD_SIZE / LOCAL_RANK
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

LAUNCHERS = ("spawn", "torchrun", "mpirun")
LOOPBACK = "127.0.0.1"


class LaunchError(Exception):
    """The launcher cannot be used: one sentence, and the fix."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Topology:
    nproc_per_node: int = 2
    nnodes: int = 1
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    hostfile: Optional[str] = None

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


@dataclass(frozen=True)
class Launch:
    launcher: str
    flavor: str  # spawn, torchrun, intel-mpi, open-mpi, mpich
    commands: tuple[tuple[str, ...], ...]  # one per process compat starts (spawn: one per rank)
    envs: tuple[Mapping[str, str], ...]
    master: str
    expected_local: int  # ranks whose records compat should find (this node's; every host's with an mpirun hostfile)
    world_size: int
    notes: tuple[str, ...] = field(default=())
    hosts: tuple[str, ...] = field(default=())  # the hostfile's hosts (mpirun across hosts); empty: this node only


# Set by a launcher for its own children: inherited from compat's caller (a SLURM job, a torchrun, a shell that
# exported them) they would override what this run's launcher gives each rank.
# Also a surrounding MPI job's wiring (PMI_FD/PORT/ID, PMIx, Open MPI's ess/orte) and torchrun's PET_* option
# defaults (Kubeflow sets PET_MAX_RESTARTS, PET_RDZV_*): compat's launcher must start from a clean slate.
_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
                   "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_UNIVERSE_SIZE")
_RANK_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "MV2_COMM_WORLD_", "PMI_", "PMIX_", "PET_", "OMPI_MCA_ess", "OMPI_MCA_orte_", "OMPI_MCA_pmix")


def inherited_rank_variable(name: str) -> bool:
    return name in _RANK_VARIABLES or name.startswith(_RANK_PREFIXES)


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host in (LOOPBACK, "localhost") else "", 0))
        return int(sock.getsockname()[1])


def read_hostfile(path: str) -> list[tuple[str, Optional[int]]]:
    """Hosts in an mpirun hostfile: 'host', 'host:N', 'user@host', 'host slots=N' (Open MPI); comments and blanks
    skipped. The size and line caps and what a host may be are hosts.read_hosts's."""
    from ..hosts import HostfileError, read_hosts

    try:
        return read_hosts(path)
    except HostfileError as exc:
        raise LaunchError(str(exc), exc.fix) from None


def find_mpirun(python: str, explicit: Optional[str] = None) -> str:
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise LaunchError(f"--mpirun {explicit} is not an executable.", "Pass the path of mpirun.")
        return found
    beside = Path(python).parent / "mpirun"  # impi-rt puts it next to the interpreter of the environment
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpirun")
    if found:
        return found
    raise LaunchError(
        "no mpirun found (not next to the interpreter, not on PATH).",
        "pip install impi-rt into the environment (Intel MPI), or install Open MPI, or pass --mpirun PATH.",
    )


def mpi_path(mpirun: str, path: str) -> str:
    """PATH with mpirun's own folder first: Intel MPI's mpirun script runs mpiexec.hydra and hydra_pmi_proxy from PATH."""
    folder = str(Path(mpirun).parent)
    return os.pathsep.join([folder] + [p for p in path.split(os.pathsep) if p and p != folder])


def mpi_flavor(mpirun: str, timeout: float = 20.0) -> str:
    try:
        env = dict(os.environ, PATH=mpi_path(mpirun, os.environ.get("PATH", "")))
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"{mpirun} --version did not answer ({exc.__class__.__name__}).", "Check the MPI installation, or pass --mpirun PATH.") from None
    text = done.stdout + done.stderr
    if "Intel(R) MPI" in text or "Intel MPI" in text:
        return "intel-mpi"
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text:
        return "open-mpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    raise LaunchError(f"{mpirun} is neither Intel MPI, MPICH nor Open MPI.", "Pass --mpirun with the path of one of those.")


# where a user's remote shell for mpirun is set (honoured as they are: compat passes them to mpirun untouched)
RSH_VARIABLES = ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "HYDRA_LAUNCHER_EXEC", "OMPI_MCA_plm_rsh_agent")


def remote_shell(env: Mapping[str, str], given: Optional[str] = None) -> tuple[str, str]:
    """(program, where it comes from) of the remote shell that reaches other hosts: --rsh, then the MPI's own variables, then ssh."""
    if given:
        return given, "--rsh"
    for name in RSH_VARIABLES:
        if env.get(name):
            return env[name], f"${name}"
    return "ssh", "the default"


def rsh_arguments(flavor: str, rsh: str) -> list[str]:
    """mpirun's own options for the remote shell: hydra (Intel MPI) -bootstrap-exec, MPICH's hydra -launcher-exec, Open MPI's
    plm_rsh_agent. Each calls it like ssh: PROG [options] HOST COMMAND..."""
    if flavor == "open-mpi":
        return ["--mca", "plm_rsh_agent", rsh]
    if flavor == "intel-mpi":
        return ["-bootstrap", "ssh", "-bootstrap-exec", rsh]
    return ["-launcher", "ssh", "-launcher-exec", rsh]


def plan_launch(
    launcher: str,
    python: str,
    worker: Sequence[str],
    topology: Topology,
    base_env: Mapping[str, str],
    threads_per_rank: int,
    mpirun: Optional[str] = None,
    rank_env: bool = True,
    rsh: Optional[str] = None,
) -> Launch:
    """The processes to start for ``launcher``. ``worker`` is the worker script and its arguments.

    ``rank_env=False`` starts the ranks without RANK / WORLD_SIZE / LOCAL_RANK (and, under mpirun, without
    mapping PMI_*): the mistake that makes every rank train alone, to see that the probe catches it.
    """
    if launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {launcher}.", f"Use one of {', '.join(LAUNCHERS)}.")
    hosts = read_hostfile(topology.hostfile) if topology.hostfile else None
    addr = topology.master_addr or (hosts[0][0] if hosts else LOOPBACK)
    if topology.nnodes > 1 and not topology.master_addr and launcher != "mpirun":
        raise LaunchError("--nnodes > 1 needs --master-addr (the address of node 0 that every node can reach).",
                          "Pass --master-addr HOST --master-port PORT, the same on every node.")
    if topology.nnodes > 1 and not topology.master_port and launcher != "mpirun":
        raise LaunchError("--nnodes > 1 needs --master-port (the same free port on every node).", "Pass --master-port PORT, e.g. 29500.")
    port = topology.master_port or free_port(addr)
    env = {k: v for k, v in base_env.items() if not inherited_rank_variable(k)}
    env.setdefault("OMP_NUM_THREADS", str(threads_per_rank))
    env["MASTER_ADDR"] = addr
    env["MASTER_PORT"] = str(port)
    master = f"{addr}:{port}"
    n = topology.nproc_per_node
    world = topology.world_size
    if launcher == "spawn":
        commands, envs = [], []
        for local in range(n):
            rank_vars = {}
            if rank_env:
                rank = topology.node_rank * n + local
                rank_vars = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(n),
                             "GROUP_RANK": str(topology.node_rank)}
            commands.append((python, *worker))
            envs.append({**env, **rank_vars})
        return Launch("spawn", "spawn", tuple(commands), tuple(envs), master, n, world)
    if launcher == "torchrun":
        # the underscore spellings: torch < 2.0 knows only those, later versions take both
        torchrun = (python, "-m", "torch.distributed.run", "--max_restarts", "0", "--nnodes", str(topology.nnodes), "--nproc_per_node", str(n),
                    "--node_rank", str(topology.node_rank), "--master_addr", addr, "--master_port", str(port), *worker)
        return Launch("torchrun", "torchrun", (torchrun,), (env,), master, n, world)
    binary = find_mpirun(python, mpirun)
    flavor = mpi_flavor(binary)
    env["PATH"] = mpi_path(binary, env.get("PATH", ""))
    worker_args = list(worker) + (["--map-mpi"] if rank_env else [])
    if topology.hostfile and hosts is not None:
        world = n * len(hosts)
    names = ["MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"]
    command: list[str]
    if flavor == "open-mpi":
        command = [binary, "-np", str(world), "--oversubscribe"]
        if os.geteuid() == 0:
            command.append("--allow-run-as-root")
        if topology.hostfile:
            command += ["--hostfile", topology.hostfile, "--map-by", f"ppr:{n}:node"]
        if rsh:
            command += rsh_arguments(flavor, rsh)
        for name in names:
            command += ["-x", name]
        command += ["-x", "PYTHONPATH"] if "PYTHONPATH" in env else []
    else:  # hydra: Intel MPI and MPICH pass the whole environment to local ranks; -genv reaches the remote ones too
        command = [binary, "-n", str(world), "-ppn", str(n)]
        if topology.hostfile:
            command += ["-f", topology.hostfile]
        if rsh:
            command += rsh_arguments(flavor, rsh)
        for name in names:
            command += ["-genv", name, env[name]]
    command += [python, *worker_args]
    notes: tuple[str, ...] = (f"{flavor}: the worker maps PMI_RANK/PMI_SIZE/MPI_LOCALRANKID or OMPI_COMM_WORLD_* to RANK/WORLD_SIZE/LOCAL_RANK",) if rank_env else ()
    if hosts and not topology.master_port and addr not in (LOOPBACK, "localhost", socket.gethostname()):
        notes += (f"MASTER_PORT {port} was free on this node, not necessarily on {addr}: pass --master-port to choose one",)
    names_of_hosts = tuple(dict.fromkeys(name for name, _ in hosts)) if hosts else ()
    if len(names_of_hosts) > 1 or rsh:
        program, source = remote_shell(env, rsh)
        notes += (f"remote shell: {program} ({source}), called like ssh: PROG [options] HOST COMMAND",)
    # every rank writes its record into the run folder: with a hostfile, one that every host sees, so all of them are read here
    return Launch("mpirun", flavor, (tuple(command),), (env,), master, world, world, notes, names_of_hosts)
