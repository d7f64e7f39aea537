"""The job contract built once (jobspec.JobSpec): from the resolved set (planning.Planned), the typed job options and,
with --python, that environment probed, every fact an engine's renderer needs -- the training command translated for
the set (export/service's rules: torchrun's words, a rank starter refused under srun), the set the ranks' environment
holds (read from the environment, else resolved), the thread plan of a node's CPUs (placement/plan.thread_advice),
the exports, how the master is found. The renderers (export/k8s.py, render/sbatch.py, export/skypilot.py,
render/ray.py through its ray_shape adapter) only write it.

Adding an engine: its renderer, one line in ENGINES, its tests (Ray's line: its workers start the ranks, its driver
finds the master, the nodes run no compat env of their own -- the driver's runtime_env carries the exports).

Pure: no I/O (the caller probes --python)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..jobspec import (
    KUBEFLOW_MASTER,
    POD_WATCH_MOUNT,
    RAY_MASTER,
    SKYPILOT_MASTER,
    SLURM_MASTER,
    SLURM_WATCH,
    HeldSet,
    JobSpec,
    Master,
    Resources,
    Threads,
    WatchSpec,
)
from ..values import quantity_ok
from .command import _for_the_set, held_set, refuse_rank_starters, training_command

if TYPE_CHECKING:
    from ..options import JobArgs
    from ..planning import Planned

# what the pods' env sets for ccl under torchrun: torchrun's own ccl_exports outright (its transport); the rest of
# the plan (libfabric's places, the providers) is the node's compat env (tests/launchers/test_one_plan_every_form.py)
TORCHRUN_CCL_ENV = (("CCL_ATL_TRANSPORT", "ofi"),)

#: engine -> (what starts the ranks on a node, how the master is found, whether a node runs compat env itself)
ENGINES: dict[str, tuple[str, Master, bool]] = {
    "pytorchjob": ("torchrun", KUBEFLOW_MASTER, False),  # the image's compat-env.sh (BASH_ENV) holds the node's part
    "trainjob": ("torchrun", KUBEFLOW_MASTER, False),
    "sbatch": ("srun", SLURM_MASTER, True),
    "skypilot": ("torchrun", SKYPILOT_MASTER, True),
    "ray": ("ray", RAY_MASTER, False),  # --cpus-per-node is the node's CPUs (--cpu), on a flat topology; runtime_env carries the exports
}
# the launchers whose rank each runs the training command as given (no torchrun words), with a starter of ranks refused:
# (who starts the ranks, the export form the fix names)
RANK_STARTERS_REFUSED = {"srun": ("srun", "sbatch"), "ray": ("Ray Train", "ray")}


class ShapeError(ValueError):
    """A shape that cannot give a valid job (the message says which option and why)."""


def cpu_count(quantity: str) -> float:
    """CPUs of a Kubernetes CPU quantity ("8" -> 8.0, "7500m" -> 7.5)."""
    if not quantity_ok(quantity) or quantity.endswith(("k", "Ki", "M", "Mi", "G", "Gi", "T", "Ti", "P", "Pi", "E", "Ei")):
        raise ShapeError(f"--cpu {quantity!r} is not a CPU quantity (such as 8 or 7500m)")
    value = float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    if value <= 0:
        raise ShapeError(f"--cpu {quantity!r} must be more than 0")
    return value


def plan_threads(cpu: str, threads_per_core: int, ranks: int, ccl: bool, ccl_workers: Optional[int] = None) -> Threads:
    """compat launch's thread plan for ``ranks`` ranks on a node of ``cpu`` CPUs (its cgroup quota): the node as a flat
    or SMT topology of its whole CPUs; a oneCCL worker core set aside only where one fits (compat launch's default)."""
    from ..placement.plan import thread_advice
    from ..placement.topology import Machine, Topology

    cpus = cpu_count(cpu)
    whole = max(1, int(cpus))
    per_core = max(1, threads_per_core)
    cores = max(1, whole // per_core)
    topology = Topology.flat(cores * per_core) if per_core == 1 else Topology.smt(cores, per_core)
    machine = Machine(topology, frozenset(topology.cpus), cpus)
    workers = (1 if ccl_workers is None else ccl_workers) if ccl else 0
    advice = thread_advice(machine, ranks, workers)
    if advice.plan is None and ccl_workers is None and workers:
        advice = thread_advice(machine, ranks, 0)
    return Threads(advice.omp_threads, max(1, advice.ccl_workers) if ccl else 0, problem=advice.problem or "")


def held_or_resolved(planned: Planned, snapshot: Any) -> tuple[HeldSet, Optional[dict]]:
    """The set the ranks' environment holds -- --python's (``snapshot``) when it holds any of the set's packages,
    else the resolved one -- and the versions the training command is translated for (None: the resolved set's)."""

    request = planned.plan.resolution.request
    held = held_set(planned, snapshot) if snapshot is not None else None
    if held is not None:
        return HeldSet(tuple(held[0]), snapshot.python_target().label, snapshot.executable, request.profile), held[1]
    return HeldSet(tuple(p.pin for p in planned.plan.packages), request.python.label, None, request.profile), None


def set_note(engine: str, held: HeldSet, python: Optional[str]) -> str:
    """The note that names the set, in the engine's words."""
    pins = ", ".join(held.pins)
    if engine in ("pytorchjob", "trainjob"):
        return f"the image must hold this set (Python {held.python}): {pins}; compat export dockerfile writes its Dockerfile"
    if engine == "ray":  # the resolved set's note ends with how Ray gets it (render/ray.py ray_shape: runtime_env pip or not)
        if held.read_from is not None:
            return f"{python} holds this set (Python {held.python}, read from the environment): {pins}; the runtime_env installs nothing"
        return f"the set (Python {held.python}): {pins}"
    if engine == "skypilot":
        source = f", read from {held.read_from}" if held.read_from else ""
        return f"setup installs this set (Python {held.python}{source}) into {python or '~/compat-train'} on every node with compat install: {pins}"
    if held.read_from is not None:
        return f"{python} holds this set (Python {held.python}, read from the environment): {pins}"
    return f"{python} must hold this set (Python {held.python}): {pins}"


#: the engines whose nodes can run the training under compat launch --watch
WATCHED_ENGINES = ("pytorchjob", "trainjob", "sbatch")


def watch_of(engine: str, job: JobArgs) -> tuple[Optional[WatchSpec], list[str]]:
    """The watch of the job's nodes (None without --watch) and what the user should know of it: where the run folder
    is, and what each node's watcher sees (docs/commands/export.md, "Watching the job")."""
    if not job.watch:
        return None, []
    if engine not in WATCHED_ENGINES:
        from ..errors import UsageError

        raise UsageError(f"--watch goes with compat export {', '.join(WATCHED_ENGINES)}, not {engine}.", "Drop --watch.")
    if engine == "sbatch":
        return SLURM_WATCH, ["--watch: the training step runs compat launch --launcher srun --watch; every rank writes its ring into "
                             "$SLURM_SUBMIT_DIR/compat-watch-$SLURM_JOB_ID, which the batch host's watcher reads, so the submit directory must be on a "
                             "file system every node sees whose flock reaches every client (home and project file systems usually are: NFSv4, Lustre "
                             "with flock, GPFS, BeeGFS); the findings go to the job's stderr"]
    if job.nnodes == 1:
        return WatchSpec("", True), ["--watch: the pod runs compat launch --watch --launcher torchrun, which watches its ranks (a private run "
                                     "folder in the pod) and plans the pod's CPUs itself (its affinity and cgroup quota); the findings go to the pod's log"]
    if job.watch_claim is not None:
        folder = f"{POD_WATCH_MOUNT}/{job.name}"
        return WatchSpec(folder, True, job.watch_claim, POD_WATCH_MOUNT), [
            f"--watch --watch-claim {job.watch_claim}: every pod mounts that PersistentVolumeClaim at {POD_WATCH_MOUNT} and runs compat launch "
            f"--watch --launcher torchrun with the run folder {folder}, so every pod's watcher reads every rank's ring: the claim must exist, be "
            "ReadWriteMany, and its file system's flock must reach every pod (NFSv4, CephFS); each pod plans its CPUs itself (its affinity and cgroup quota)"]
    return WatchSpec(POD_WATCH_MOUNT, False, None, POD_WATCH_MOUNT), [
        "--watch: each pod runs compat launch --watch --launcher torchrun with its own run folder (an emptyDir at "
        f"{POD_WATCH_MOUNT}): each pod's watcher sees its own ranks only, so it names a death of one of them (with its last lines) and a straggler "
        "among them, but no stall (the rank that stopped first may be in another pod) and no rank of another pod; --watch-claim CLAIM (a "
        "ReadWriteMany PersistentVolumeClaim) gives every pod one shared run folder and the whole watch; each pod plans its CPUs itself (its "
        "affinity and cgroup quota)"]


def build_job(planned: Planned, job: JobArgs, engine: str, python: Optional[str] = None, compat: Sequence[str] = (),
              snapshot: Any = None) -> JobSpec:
    """The one JobSpec of an export (the module's docstring); UsageError / CannotWork as the exports refuse."""
    from ..matrix.model import Component

    launcher, master, env_step = ENGINES[engine]
    ccl = Component.CCL in planned.outcome.picks
    held, versions = held_or_resolved(planned, snapshot)
    if launcher == "torchrun":  # the pods' or nodes' torchrun starts every rank: a rank starter under it would start several
        form = engine if engine != "trainjob" else "pytorchjob"
        command, notes = training_command(refuse_rank_starters(job.command, "torchrun", form, leave="torchrun") if job.command else job.command)
    else:
        who, form = RANK_STARTERS_REFUSED[launcher]
        command, notes = refuse_rank_starters(job.command, who, form), []
    translated, said = _for_the_set(planned, command, engine if engine != "trainjob" else "pytorchjob", versions)
    notes += said
    threads = plan_threads(job.cpu.rstrip("+"), job.threads_per_core, job.nproc_per_node, ccl) if job.cpu and launcher != "srun" else None
    if launcher == "ray":  # Ray's env_vars: oneCCL's transport and workers, the threads, KMP_BLOCKTIME (no binding: Ray places the workers)
        ccl_env = (*TORCHRUN_CCL_ENV, ("CCL_WORKER_COUNT", str(max(1, threads.ccl_workers)))) if ccl and threads else ()
        exports = (*ccl_env, *(threads.variables()[:1] if threads else ()), ("KMP_BLOCKTIME", "1"))
    else:
        exports = (*(threads.variables() if threads else ()), *(TORCHRUN_CCL_ENV if ccl and launcher == "torchrun" else ()))
    if ccl and launcher == "torchrun":
        notes.append("CCL_ATL_TRANSPORT=ofi: oneCCL's default MPI transport needs an MPI launcher, and the pods run torchrun"
                     if engine != "skypilot" else "CCL_ATL_TRANSPORT=ofi: oneCCL's default MPI transport needs an MPI launcher, and the nodes run torchrun")
        if not env_step:
            notes.append("the oneCCL environment comes from the image's compat-env.sh, which bash -c reads through BASH_ENV (compat export "
                         "dockerfile writes it with compat env --defaults, so the values of this manifest win)")
    notes.append(set_note(engine, held, python))
    watch, said = watch_of(engine, job)
    return JobSpec(engine=engine, name=job.name, nodes=job.nnodes, ranks_per_node=job.nproc_per_node, backend="ccl" if ccl else "gloo",
                   threads=threads, master=master, exports=exports, env_step=env_step, preflight=job.preflight, command=tuple(translated),
                   launcher=launcher, set=held, python=python, compat=tuple(compat),
                   resources=Resources(job.cpu, job.memory, job.threads_per_core, job.shm_size), notes=tuple(notes + said), watch=watch)
