"""torchrun: ``python -m torch.distributed.run`` of the target interpreter, which sets RANK / WORLD_SIZE / LOCAL_RANK.

doctor --live: a static rendezvous at MASTER_ADDR:PORT (--nnodes, --node-rank: one compat per node). compat launch:
``--standalone`` on this node, each rank started through placement/'s binding wrapper (``sh -c``, chosen by LOCAL_RANK).
Its failures: the per-rank ``exitcode : N (pid: P)`` lines of its error summary and its "Root Cause" block.

Side effects: none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional

from .interface import (
    BOUND,
    ENV,
    LIVE,
    TUNE,
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
    ofi_exports,
    one_program,
)


class Torchrun:
    name = "torchrun"
    flavors: tuple[str, ...] = ("torchrun",)
    capabilities = frozenset({LIVE, BOUND, ENV, TUNE})
    mpi_transport = False
    gives_rendezvous = True
    starts_ranks_itself = False
    rank_variables: tuple[tuple[str, str, str], ...] = ()  # RANK / WORLD_SIZE / LOCAL_RANK themselves
    # its ranks' variables, and its PET_* option defaults (Kubeflow sets PET_MAX_RESTARTS, PET_RDZV_*)
    inherited: tuple[str, ...] = ("LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_*", "PET_*")
    programs: tuple[str, ...] = ("torchrun",)
    modules: tuple[str, ...] = ("torch.distributed.run", "torch.distributed.launch")

    def local_rank_variable(self, flavor: str) -> str:
        return "LOCAL_RANK"

    def live(self, job: LiveJob) -> Launch:
        layout = job.layout
        # the underscore spellings: torch < 2.0 knows only those, later versions take both
        torchrun = (job.python, "-m", "torch.distributed.run", "--max_restarts", "0", "--nnodes", str(layout.nnodes), "--nproc_per_node", str(layout.nproc_per_node),
                    "--node_rank", str(layout.node_rank), "--master_addr", job.addr, "--master_port", str(job.port), *job.worker)
        return Launch("torchrun", "torchrun", (torchrun,), (job.env,), f"{job.addr}:{job.port}", layout.nproc_per_node, layout.world_size)

    def tool(self, request: ToolRequest) -> Tool:
        if request.has_torch:
            return Tool(request.python, "torchrun")
        message = f"torch is not installed for {request.python}, and torchrun comes with it."
        if not request.print_only:
            raise LaunchError(message, "Pass --python PATH of the environment you train in (or set COMPAT_PYTHON).")
        return Tool(request.python, "torchrun", (message,))

    def bound(self, job: BoundJob) -> Invocation:
        script, tool = job.wrapper(self.local_rank_variable("torchrun"))
        # the underscore spellings: torch < 2.0 knows only those
        across = job.across
        if across is not None and across.nnodes > 1:  # a static rendezvous at the master: one compat launch per node
            meet = ["--nnodes", str(across.nnodes), "--node_rank", str(across.node_rank), "--master_addr", str(across.master_addr),
                    "--master_port", str(across.master_port)]
            where = (f"--nnodes {across.nnodes} --node_rank {across.node_rank}: the ranks of {across.nnodes} nodes meet at "
                     f"{across.master_addr}:{across.master_port} (run compat launch on each node with its own --node-rank)")
        else:
            meet = ["--standalone"]
            where = "--standalone: the ranks meet on this host, so no interface variable (GLOO_SOCKET_IFNAME, CCL_KVS_IFACE) is needed"
        argv = [job.python, "-m", "torch.distributed.run", *meet, "--nproc_per_node", str(job.ranks), "--no_python", "sh", "-c", script, WRAPPER_NAME, *job.command]
        notes = (f"torchrun starts each rank as sh -c '...' which execs {tool} with the rank's CPUs (chosen by LOCAL_RANK), then the command",
                 "OMP_NUM_THREADS is exported, so torchrun keeps it instead of setting 1", where)
        return Invocation("torchrun", "torchrun", tuple(argv), dict(job.rank_env), tool, notes, dict(job.additions))

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch:
        return one_program(self.bound(job), job.ranks, base)

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]:
        return ofi_exports(self.name, env)

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
        return {}, []  # its rendezvous is the master's TCP store; its ranks read gloo's and oneCCL's variables only

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]:
        return {}, []  # its program needs nothing on PATH beyond what starts it

    def failures(self, log: str) -> Failures:
        codes = {int(pid): int(code) for code, pid in re.findall(r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", log)}  # its error summary
        root = re.search(r"Root Cause \(first observed failure\):.*?exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", log, re.DOTALL)
        return Failures(codes, ("pid", int(root.group(2)), int(root.group(1))) if root else None)


TORCHRUN = Torchrun()
