"""The job contract: one typed record of what every engine needs to run a CPU-DDP training job with a resolved set.

``compat export pytorchjob | sbatch | skypilot | ray`` build ONE ``JobSpec`` from the
resolve, placement and launcher facts (export/contract.py ``build_job``) and hand it to the engine's renderer, which
only writes it in the engine's words (export/k8s.py: PyTorchJob and TrainJob; render/sbatch.py: a Slurm batch script;
export/skypilot.py: a SkyPilot task; render/ray.py: a Ray Train driver, through ray_shape's small adapter). A renderer decides nothing about the set, the command or the threads.

The fields, for a renderer's author (every value is already checked for its own rules by the builder; the renderer
escapes it for its format):

``JobSpec``
  ``engine``          the export format that asked ("pytorchjob", "trainjob", "sbatch", "skypilot", "ray")
  ``name``            the job's name as the user gave it (--name); the renderer checks it against its engine's rule
  ``nodes``           nodes (pods, Slurm nodes, SkyPilot nodes), >= 1
  ``ranks_per_node``  ranks (processes) per node, >= 1: torchrun's --nproc_per_node, srun's tasks per node; never a
                      GPU count
  ``backend``         "ccl" when the set holds the oneCCL bindings, else "gloo": what the ranks' process group can use
  ``threads``         ``Threads`` per rank, planned at export time from the node's CPUs (None: planned on the node
                      itself by compat env / compat launch, as the Slurm script does)
  ``master``          ``Master``: how every node finds rank 0's host and port (bash expressions the engine fills; for Ray,
                      whose driver finds them in Python, the fields are empty and ``found_by`` says how)
  ``exports``         (NAME, value) pairs every rank's environment gets, fixed at export time (the thread plan, and
                      CCL_ATL_TRANSPORT=ofi under torchrun with the bindings), in order
  ``env_step``        True when a node runs ``compat env`` for its own exports before training (interfaces, oneCCL's
                      places: facts of the node, unknown here)
  ``preflight``       True when every node runs ``compat doctor --live`` before training (its findings stop the job)
  ``command``         the training command as the launcher on the node runs it, translated for the set (transformers /
                      accelerate); for torchrun engines the words after torchrun's own options (``--no_python`` in
                      front of a program that is not a .py script)
  ``launcher``        what starts the ranks on a node: "torchrun", "srun" (compat launch --launcher srun) or "ray" (Ray
                      Train's workers)
  ``set``             ``HeldSet``: the set the ranks' environment holds, read from --python's environment when given
                      and filled, resolved otherwise
  ``python``          the ranks' interpreter on the nodes (--python), or None where the image or the setup makes it
  ``compat``          how a node runs compat (argv prefix)
  ``resources``       ``Resources`` per node: CPUs and memory as given (quantities), threads per core, /dev/shm
  ``notes``           what the user should know, in order (comments on top of the output)
  ``watch``           ``WatchSpec`` (None: no watch): the nodes run the training under ``compat launch --watch``, its
                      run folder as a node sees it and whether every node's ranks write there
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Threads:
    """The thread plan of one rank (compat launch's, for the node's CPUs): OpenMP threads, oneCCL worker threads
    (0 without the bindings) and the binding of the OpenMP threads."""

    omp_threads: int
    ccl_workers: int = 0
    binding: tuple[tuple[str, str], ...] = (("KMP_BLOCKTIME", "1"), ("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores"))
    problem: str = field(default="", compare=False)  # why the plan does not fit the node, as thread_advice says ('' when it does)

    def variables(self) -> tuple[tuple[str, str], ...]:
        """The plan as environment variables, in the order every export writes them."""
        ccl = (("CCL_WORKER_COUNT", str(max(1, self.ccl_workers))),) if self.ccl_workers else ()
        return (("OMP_NUM_THREADS", str(self.omp_threads)), *ccl, *self.binding)


@dataclass(frozen=True)
class Master:
    """How every node learns rank 0's host: bash expressions that evaluate, on a node of the running job, to the
    master's address and port, the node count and this node's rank; ``found_by`` says where the engine keeps them."""

    addr: str
    port: str
    nnodes: str
    node_rank: str
    found_by: str


#: the engines' rendezvous facts (each engine's own documents name them; the renderers cite them)
KUBEFLOW_MASTER = Master("$PET_MASTER_ADDR", "$PET_MASTER_PORT", "$PET_NNODES", "$PET_NODE_RANK",
                         "the operator's PET_* variables (a job with a Master; the Trainer's torch plugin)")
SLURM_MASTER = Master('$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', "", "$SLURM_JOB_NUM_NODES", "$SLURM_NODEID",
                      "the allocation's first host (scontrol show hostnames), as srun's tasks take it")
SKYPILOT_PORT = 29500  # torchrun's default master port
SKYPILOT_MASTER = Master('$(printf "%s\\n" "$SKYPILOT_NODE_IPS" | head -n 1)', str(SKYPILOT_PORT), "$SKYPILOT_NUM_NODES", "$SKYPILOT_NODE_RANK",
                         "the first line of SKYPILOT_NODE_IPS, the node rank from SKYPILOT_NODE_RANK")

# Ray's driver finds the master itself (render/ray.py): no shell expression names it
RAY_MASTER = Master("", "", "", "", "the driver: the node IP of bundle 0's node of a STRICT_SPREAD placement group (one bundle per node) "
                    "and a free port there, given to every rank over Ray's own group")


@dataclass(frozen=True)
class HeldSet:
    """The set the ranks' environment holds: pins ('torch==2.13.0+cpu', and 'no NAME' for a package of the resolved
    set it lacks), the Python they are for, and whether they were read from an environment (--python) or resolved."""

    pins: tuple[str, ...]
    python: str  # "3.11"
    read_from: Optional[str] = None  # the interpreter whose environment was read; None: the resolved set
    profile: Optional[str] = None  # the profile it was resolved for (compat install --profile)

    @property
    def installable(self) -> tuple[str, ...]:
        """The pins compat install takes (without the 'no NAME' entries)."""
        return tuple(pin for pin in self.pins if "==" in pin)


@dataclass(frozen=True)
class Resources:
    """Per node, as the user gave them: CPUs and memory (Kubernetes / SkyPilot quantities; None where the engine
    takes whole nodes), threads per core of the CPU units, the size of /dev/shm."""

    cpu: Optional[str] = None
    memory: Optional[str] = None
    threads_per_core: int = 1
    shm_size: str = "2Gi"


@dataclass(frozen=True)
class WatchSpec:
    """compat launch --watch on the nodes: ``folder`` the run folder as a node's shell sees it (a bash word or
    expression; "" for compat's private temporary folder, one node), ``shared`` whether every node's ranks write their
    rings there (each node's watcher then sees every rank) or each node its own (it sees its own ranks only), ``claim``
    the Kubernetes PersistentVolumeClaim mounted at ``mount`` that holds a shared folder (None: an emptyDir per pod)."""

    folder: str
    shared: bool
    claim: Optional[str] = None
    mount: str = ""


#: sbatch: a folder of the submit directory (the file system the job is submitted from, which every node of a cluster
#: normally sees), one per job
SLURM_WATCH = WatchSpec('"$SLURM_SUBMIT_DIR/compat-watch-$SLURM_JOB_ID"', True)
POD_WATCH_MOUNT = "/compat-watch"  # where a pod mounts the watch's run folder


@dataclass(frozen=True)
class JobSpec:
    engine: str
    name: str
    nodes: int
    ranks_per_node: int
    backend: str
    threads: Optional[Threads]
    master: Master
    exports: tuple[tuple[str, str], ...]
    env_step: bool
    preflight: bool
    command: tuple[str, ...]
    launcher: str
    set: HeldSet
    python: Optional[str]
    compat: tuple[str, ...]
    resources: Resources = field(default_factory=Resources)
    notes: tuple[str, ...] = ()
    watch: Optional[WatchSpec] = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node
