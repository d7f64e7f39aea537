"""compat doctor --live's side of the launchers: the processes to start for a launcher choice (``plan_launch``: what
every launcher shares, then its own ``live()``), and what the launcher's output says of failed ranks, read from
whichever launcher wrote it.

Side effects: ``mpirun --version`` (under mpirun), a socket bind (to pick a free port), reading a hostfile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from ..processes import free_port
from ..record import replace
from . import LAUNCHERS
from .interface import EVERY_HOST, LOOPBACK, Launch, LaunchError, LiveJob, RankLayout, inherited_rank_variable


def plan_launch(
    launcher: str,
    python: str,
    worker: Sequence[str],
    topology: RankLayout,
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
    chosen = LAUNCHERS.get(launcher)
    if chosen is None:
        raise LaunchError(f"unknown launcher {launcher}.", f"Use one of {', '.join(LAUNCHERS)}.")
    from .mpirun import read_hostfile

    hosts = read_hostfile(topology.hostfile) if topology.hostfile else None
    addr = topology.master_addr or (hosts[0][0] if hosts else LOOPBACK)
    own_master = EVERY_HOST not in chosen.capabilities  # one compat per node: every node must be told where node 0 is
    if topology.nnodes > 1 and not topology.master_addr and own_master:
        raise LaunchError("--nnodes > 1 needs --master-addr (the address of node 0 that every node can reach).",
                          "Pass --master-addr HOST --master-port PORT, the same on every node.")
    if topology.nnodes > 1 and not topology.master_port and own_master:
        raise LaunchError("--nnodes > 1 needs --master-port (the same free port on every node).", "Pass --master-port PORT, e.g. 29500.")
    port = topology.master_port or free_port(addr)
    # what any launcher sets for its ranks or its job: compat's launcher starts from a clean slate
    inherited = tuple(entry for known in LAUNCHERS.values() for entry in known.inherited)
    env = {k: v for k, v in base_env.items() if not inherited_rank_variable(k, inherited)}
    env.setdefault("OMP_NUM_THREADS", str(threads_per_rank))
    env["MASTER_ADDR"] = addr
    env["MASTER_PORT"] = str(port)
    launch = chosen.live(LiveJob(python, tuple(worker), topology, env, addr, port, tuple(hosts or ()), mpirun, rank_env, rsh))
    if chosen.gives_rendezvous or chosen.starts_ranks_itself:
        # the launcher gives it, or compat starts each rank itself (spawn, srun): there the rendezvous is the one a
        # spawning script gives its own ranks, or the allocation's; nothing the user's launcher would lack
        return launch
    # the launcher gives no rendezvous: what the ranks have of it here, the user's command has only if the user's environment does
    added = {key: env[key] for key in ("MASTER_ADDR", "MASTER_PORT") if not base_env.get(key)}
    replaced = {key: env[key] for key in ("MASTER_ADDR", "MASTER_PORT") if base_env.get(key) and base_env[key] != env[key]}
    return replace(launch, added=added, replaced=replaced)


def launcher_exit_codes(log: str) -> dict[int, int]:
    """Per-rank exit codes (pid -> code, negative for a signal) that a launcher (torchrun, Intel MPI) printed when a rank failed."""
    codes: dict[int, int] = {}
    for launcher in LAUNCHERS.values():
        codes.update(launcher.failures(log).exit_codes)
    return codes


def launcher_first_failure(log: str) -> Optional[tuple[str, int, Optional[int]]]:
    """The rank the launcher saw fail first: ("pid", n, code) from torchrun's "Root Cause" block, or ("rank", n, code)
    from Open MPI, which names ranks, not pids."""
    return next((first for first in (launcher.failures(log).first for launcher in LAUNCHERS.values()) if first is not None), None)
