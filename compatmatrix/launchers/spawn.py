"""spawn: compat starts the ranks itself, one process each, with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT in its environment (compat doctor --live, and compat tune: each rank through compat launch's binding
wrapper; compat launch leaves starting ranks to a launcher).

Side effects: none (``processes`` binds a socket for a moment, to pick a free port).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ..processes import free_port
from .interface import (
    ENV,
    LIVE,
    LOOPBACK,
    TUNE,
    UNMAPPED,
    WRAPPER_NAME,
    BoundJob,
    CclEnv,
    Failures,
    Invocation,
    Launch,
    LaunchError,
    LiveJob,
    PathEntries,
    Tool,
    ToolRequest,
    joined,
    master_exports,
    ofi_exports,
)


class Spawn:
    name = "spawn"
    flavors: tuple[str, ...] = ("spawn",)
    capabilities = frozenset({LIVE, ENV, UNMAPPED, TUNE})
    mpi_transport = False
    # a script that spawns its ranks (mp.spawn) gives them the rendezvous in its own code or from its environment, so
    # compat env --launcher spawn exports MASTER_ADDR/PORT; doctor --live's own spawn gives each rank one (starts_ranks_itself)
    gives_rendezvous = False
    starts_ranks_itself = True
    rank_variables: tuple[tuple[str, str, str], ...] = ()  # RANK / WORLD_SIZE / LOCAL_RANK themselves
    inherited: tuple[str, ...] = ("LOCAL_WORLD_SIZE", "GROUP_RANK")
    programs: tuple[str, ...] = ()  # compat's own: no user's command line starts with it
    modules: tuple[str, ...] = ()

    def local_rank_variable(self, flavor: str) -> str:
        return "LOCAL_RANK"

    def live(self, job: LiveJob) -> Launch:
        layout = job.layout
        n = layout.nproc_per_node
        world = layout.world_size
        commands, envs = [], []
        for local in range(n):
            rank_vars = {}
            if job.rank_env:
                rank = layout.node_rank * n + local
                rank_vars = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(n),
                             "GROUP_RANK": str(layout.node_rank)}
            commands.append((job.python, *job.worker))
            envs.append({**job.env, **rank_vars})
        return Launch("spawn", "spawn", tuple(commands), tuple(envs), f"{job.addr}:{job.port}", n, world)

    def tool(self, request: ToolRequest) -> Tool:
        raise LaunchError("spawn starts the ranks of compat doctor --live only.", "Use --launcher torchrun or --launcher mpirun.")

    def bound(self, job: BoundJob) -> Invocation:
        raise LaunchError("spawn starts the ranks of compat doctor --live only.", "Use --launcher torchrun or --launcher mpirun.")

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch:
        """compat tune: each local rank started by compat through the binding wrapper (``sh -c``, which picks the rank's
        CPUs by LOCAL_RANK, then execs the command), in ``base`` with the job's environment, the rank variables and a
        free port on loopback for the rendezvous."""
        script, _ = job.wrapper(self.local_rank_variable("spawn"))
        port = str(free_port())
        n = job.ranks
        shared = {**base, **job.rank_env}
        for key, added in job.additions.items():
            shared[key] = joined(shared.get(key), added)
        commands, envs = [], []
        for local in range(n):
            commands.append(("sh", "-c", script, WRAPPER_NAME, *job.command))
            envs.append({**shared, "RANK": str(local), "WORLD_SIZE": str(n), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(n),
                         "MASTER_ADDR": LOOPBACK, "MASTER_PORT": port})
        return Launch("spawn", "spawn", tuple(commands), tuple(envs), f"{LOOPBACK}:{port}", n, n)

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]:
        extra, said = ofi_exports(self.name, env)
        master, words = master_exports(self.name, env.env)  # a script that spawns its ranks gives them no rendezvous of its own
        return {**extra, **master}, said + words

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
        return {}, []  # its ranks read gloo's and oneCCL's variables only

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]:
        return {}, []  # its program needs nothing on PATH beyond what starts it

    def failures(self, log: str) -> Failures:
        return Failures({})  # compat's own children: their exit codes are known without a log


SPAWN = Spawn()
