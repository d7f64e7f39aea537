"""ray: Ray Train's workers. Ray Train starts each rank as an actor and, for the torch backend, gives it the variables
torchrun gives its ranks (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, and MASTER_ADDR / MASTER_PORT at
the node IP of world rank 0: ray/train/torch/config.py, ``_set_torch_distributed_env_vars`` and ``_TorchBackend.on_start``
in ray-project/ray). compat reads the same names.

doctor --live: ``compat doctor --live --launcher ray`` runs once per node, as Ray's worker of that node (one worker per
node: LOCAL_WORLD_SIZE 1, so WORLD_SIZE is the node count and NODE_RANK this node's number), and starts the node's
``--ranks-per-node`` ranks itself (as spawn does) with RANK = NODE_RANK * ranks-per-node + local rank, meeting at
MASTER_ADDR (Ray's node IP of node 0). MASTER_PORT must be a port no one holds there: inside a Ray Train worker of the
torch backend Ray's own group holds it, so pass ``--master-port``; the driver ``compat export ray`` writes starts plain
Ray tasks, one per node, and gives them a free port of node 0. compat env --launcher ray: oneCCL's libfabric transport
(Ray starts the ranks, no MPI launcher). compat launch does not offer it (Ray places and starts the ranks).

Side effects: none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ..errors import UsageError
from ..values import quoted
from .interface import (
    ENV,
    LIVE,
    BoundJob,
    CclEnv,
    Failures,
    Invocation,
    Launch,
    LaunchError,
    LiveJob,
    PathEntries,
    RankLayout,
    Tool,
    ToolRequest,
    ofi_exports,
)
from .spawn import SPAWN

#: what Ray Train's torch backend sets in each worker (ray/train/torch/config.py), read by ``ray_layout``
RAY_VARIABLES = ("NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "RANK", "MASTER_ADDR", "MASTER_PORT")
MAX_NODES = 1_000_000  # as srun's: a larger count is no cluster
_FIX = ("Run compat doctor --live --launcher ray once per node as Ray's worker of that node (the driver compat export ray writes "
        "does), where NODE_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and MASTER_ADDR are set; or pass --launcher spawn or torchrun with "
        "--nnodes, --node-rank and --master-addr.")


def _count(environ: Mapping[str, str], name: str, low: int, high: int) -> int:
    value = environ.get(name)
    if value is None:
        raise UsageError(f"{name} is not set, so compat cannot read Ray's layout of the nodes.", _FIX)
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10 or not low <= int(text) <= high:
        raise UsageError(f"{name}='{quoted(value, 64)}' is not a whole number from {low} to {high:,}, so it is no layout of Ray's.", _FIX)
    return int(text)


def ray_layout(environ: Mapping[str, str], ranks_per_node: int, master_addr: Optional[str] = None,
               master_port: Optional[int] = None) -> tuple[RankLayout, tuple[str, ...]]:
    """doctor --live under Ray: the layout from the variables Ray Train gives its worker (one worker per node), and
    notes that say where each number came from. ``master_addr`` / ``master_port``: the user's, kept when given. Pure."""
    local_world = _count(environ, "LOCAL_WORLD_SIZE", 1, MAX_NODES) if environ.get("LOCAL_WORLD_SIZE") is not None else 1
    if local_world != 1:
        raise UsageError(f"Ray started {local_world} workers on this node (LOCAL_WORLD_SIZE); compat doctor --live runs once per node and "
                         "starts --ranks-per-node ranks itself.", "Start one worker per node (STRICT_SPREAD, as compat export ray's preflight does).")
    nnodes = _count(environ, "WORLD_SIZE", 1, MAX_NODES)
    node_var = "NODE_RANK" if environ.get("NODE_RANK") is not None else "RANK"
    node = _count(environ, node_var, 0, MAX_NODES - 1)
    if node >= nnodes:
        raise UsageError(f"{node_var}={node} is not below WORLD_SIZE={nnodes}.", _FIX)
    notes = [f"ray: node {node} of {nnodes} ({node_var}, WORLD_SIZE with one worker per node), {ranks_per_node} ranks each (--ranks-per-node); "
             f"node k runs ranks {ranks_per_node}k to {ranks_per_node}k+{ranks_per_node - 1}"]
    addr = master_addr
    if addr is None:
        addr = (environ.get("MASTER_ADDR") or "").strip()
        if not addr or len(addr) > 255 or any(not ch.isprintable() or ch.isspace() for ch in addr):
            raise UsageError(f"MASTER_ADDR='{quoted(addr, 64)}' is not an address, so compat cannot tell where node 0 is.", _FIX)
        notes.append(f"ray: master {addr} (MASTER_ADDR: Ray's address of node 0)")
    port = master_port
    if port is None:
        port = _count(environ, "MASTER_PORT", 1, 65535)
        notes.append(f"ray: master port {port} (MASTER_PORT; inside a Ray Train worker Ray's own group holds it: pass --master-port)")
    return RankLayout(ranks_per_node, nnodes, node, addr, port), tuple(notes)


class Ray:
    name = "ray"
    flavors: tuple[str, ...] = ("ray",)
    capabilities = frozenset({LIVE, ENV})
    mpi_transport = False
    gives_rendezvous = True  # Ray Train gives its workers MASTER_ADDR/MASTER_PORT (doctor --live: from Ray's variables)
    starts_ranks_itself = True  # doctor --live: one compat per node starts that node's ranks
    rank_variables: tuple[tuple[str, str, str], ...] = ()  # RANK / WORLD_SIZE / LOCAL_RANK themselves
    # Ray Train's other variables: a rank that inherited them would take the node's layout for its own
    inherited: tuple[str, ...] = ("NODE_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_TORCH_DEVICE")
    programs: tuple[str, ...] = ()  # Ray starts ranks from a driver's Python, not from a command line
    modules: tuple[str, ...] = ()

    def local_rank_variable(self, flavor: str) -> str:
        return "LOCAL_RANK"

    def live(self, job: LiveJob) -> Launch:
        launch = SPAWN.live(job)  # the layout is Ray's (ray_layout); this node's ranks start as spawn's do
        return Launch("ray", "ray", launch.commands, launch.envs, launch.master, launch.expected_local, launch.world_size, launch.notes)

    def tool(self, request: ToolRequest) -> Tool:
        raise LaunchError("Ray places and starts the ranks itself, so compat launch cannot run them under ray.",
                          "Write a Ray Train driver with compat export ray -- TRAINING COMMAND.")

    def bound(self, job: BoundJob) -> Invocation:
        return self.tool(ToolRequest(job.python))  # type: ignore[return-value]

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch:
        return self.tool(ToolRequest(job.python))  # type: ignore[return-value]

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]:
        return ofi_exports(self.name, env, why="Ray starts the ranks as actors, without Intel MPI's launcher, which oneCCL's MPI transport needs "
                           "(\"failed to initialize ATL\" otherwise)")

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
        return {}, []  # Ray's own traffic is its own (ray start --node-ip-address); the ranks read gloo's and oneCCL's variables only

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]:
        return {}, []

    def failures(self, log: str) -> Failures:
        return Failures({})  # doctor --live: compat's own children; their exit codes are known without a log


RAY = Ray()
