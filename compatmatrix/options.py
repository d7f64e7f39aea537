"""Typed command-line arguments: one record per command, built by the command modules of cli/ from argparse's
Namespace (pipdeptree's ``Options``), so a command reads named, typed fields and never a Namespace.

The groups several commands share are records of their own: ``Output`` (--json, --no-color, --matrix), ``Target``
(the target interpreter: --python with $COMPAT_PYTHON as its default, --python-version, --platform; one definition in
cli/_options.py's ``target_options``), ``Wanted`` (what to resolve: REQUIREMENTs, -r files, --profile, --with) and ``Sources``
(where wheels come from: --index, --torch-from-pypi, --require-hashes, --allow-unverified, --wheelhouse).

Records (compatmatrix.record), not dataclasses: they cost nothing to define, and ``compat resolve --json`` makes no
dataclass (tests/test_startup.py). Pure.
"""

from __future__ import annotations

from typing import Any, Optional

from .record import Record


class Output(Record):
    json: bool
    no_color: bool
    matrix: Optional[str]  # --matrix, else $COMPAT_MATRIX; None: the bundled matrix


class Target(Record):
    """The interpreter (or Python and platform) a command works for."""

    python: Optional[str]  # --python, else $COMPAT_PYTHON; None: the running interpreter
    python_given: bool  # --python was on the command line (a $COMPAT_PYTHON default yields to --python-version)
    python_version: Optional[str] = None
    platform: Optional[str] = None

    @property
    def interpreter(self) -> Optional[str]:
        """The interpreter to probe: --python; else $COMPAT_PYTHON, unless --python-version names the Python instead."""
        if self.python_given:
            return self.python
        return None if self.python_version else self.python


class Wanted(Record):
    """What to resolve, as for compat resolve."""

    requirements: tuple[str, ...]
    files: tuple[str, ...]  # -r FILE
    profile: Optional[str]
    with_: tuple[str, ...]  # --with, split at commas


class Sources(Record):
    """Where the planned wheels come from."""

    index: tuple[str, ...] = ()  # HOST=URL
    torch_from_pypi: bool = False
    require_hashes: bool = False
    allow_unverified: bool = False
    wheelhouse: Optional[str] = None  # the plan's hosts become this folder


class ResolveArgs(Record):
    output: Output
    target: Target
    wanted: Wanted


class MatrixArgs(Record):
    output: Output
    packages: tuple[str, ...]
    python_version: Optional[str]
    torch: Optional[str]
    sources: bool


class MatrixVerifyArgs(Record):
    """compat matrix verify."""

    output: Output
    pin: str
    with_torch: Optional[str]
    python: Optional[str]
    host: Optional[str]
    indexes: tuple[str, ...]
    timeout: Optional[float]


class MatrixUpdateArgs(Record):
    """compat matrix update."""

    output: Output
    indexes: tuple[str, ...]
    write: Optional[str]
    packages: tuple[str, ...]
    health: bool = False  # --health: report what the registries make impossible or surprising (nothing is written)


class LiveArgs(Record):
    """compat doctor --live."""

    launcher: Optional[str]  # None: not given (srun inside an srun step, else spawn)
    backend: str
    timeout: float
    trainer: bool
    steps: int
    nnodes: int
    node_rank: int
    master_addr: Optional[str]
    master_port: Optional[int]
    mpirun: Optional[str]
    run_dir: Optional[str]
    rank_env: bool
    fabric: bool = False  # --fabric: the collectives swept over sizes
    sizes: tuple[int, ...] = ()  # --sizes, bytes (default: 1 KiB up by powers of 4, bounded by memory)
    pairs: str = "all"  # --pairs: all | ring | sample:K (checked by live/fabric.parse_pair_mode)
    report: Optional[str] = None  # --report FILE.html: the fabric report (render/fabric_html.py), written after the run
    pair_deadline: float = 30.0  # --pair-deadline: seconds each pair of hosts may take (its own process group's timeout)
    fabric_deadline: Optional[float] = None  # --fabric-deadline: seconds the pairs and the sweep may take in all (None: the default)


class ChecksArgs(Record):
    """compat doctor / compat check."""

    command: str  # doctor | check
    output: Output
    target: Target
    files: tuple[str, ...]  # check -r FILE
    ranks_per_node: int
    bf16: Optional[bool]  # --bf16 / --no-bf16 / neither
    only: tuple[str, ...]
    skip: tuple[str, ...]
    list_checks: bool
    verbose: bool
    import_timeout: float
    live: Optional[LiveArgs]  # doctor --live
    hostfile: Optional[str]
    rsh: Optional[str]
    launcher: Optional[str] = None  # compat check --launcher (oneccl.launcher)


class InstallArgs(Record):
    output: Output
    target: Target
    wanted: Wanted
    sources: Sources
    yes: bool
    dry_run: bool
    installer: str
    print_: Optional[str]  # requirements | constraints | pip-command (the same text as compat export FORMAT)
    offline: bool
    restore: bool
    discard_snapshot: bool
    planner: str = "auto"  # auto | uv | pip: what plans the dependencies (install/service.py _planner)


class DownloadArgs(Record):
    output: Output
    target: Target
    wanted: Wanted
    sources: Sources
    dest: str


class TranslateArgs(Record):
    output: Output
    python: Optional[str]
    transformers: Optional[str]
    accelerate: Optional[str]
    command: tuple[str, ...]


class EnvArgs(Record):
    output: Output
    python: Optional[str]
    shell: str
    ranks_per_node: int
    launcher: Optional[str]
    defaults: bool  # --defaults: settings written as defaults a value set at sourcing time overrides
    master_addr: Optional[str] = None  # --master-addr: the interface that reaches it is exported (launchers/environment.network_exports)
    nnodes: int = 1
    mpirun: Optional[str] = None  # --mpirun: the mpirun the job runs (with --launcher mpirun its MPI decides oneCCL's transport)


class LaunchArgs(Record):
    json: bool
    launcher: str
    nproc_per_node: int
    ccl_workers: Optional[int]
    print_: bool
    python: Optional[str]
    sysfs_root: Optional[str]
    mpirun: Optional[str]
    mpi_flavor: Optional[str]
    command: tuple[str, ...]
    matrix: Optional[str] = None  # --matrix, else $COMPAT_MATRIX; None: the bundled matrix with the overlay (as Output.matrix)
    watch: bool = False  # --watch / --watch-only: the job runs with compat's rank agent and watcher (compatmatrix/watch/)
    watch_only: bool = False
    stall_after: Optional[float] = None
    watch_dir: Optional[str] = None  # --watch-dir: the run folder the ranks' agents write to (across hosts: one every host sees)
    json_file: Optional[str] = None  # --json-file: the watch's JSON document goes there, not to stdout
    across: Optional[Any] = None  # launchers.interface.Across: torchrun --nnodes/--node-rank/master, mpirun --hostfile/--rsh
    report: Optional[str] = None  # --report FILE.html: with --watch, the timeline page written when the job ends


class WatchArgs(Record):
    json: bool
    run_dir: str  # the run folder a compat launch --watch --watch-dir wrote its ranks' rings to
    stall_after: Optional[float] = None


class TuneArgs(Record):
    json: bool
    launcher: str
    budget: float
    python: Optional[str]
    bf16: bool
    compile: bool
    command: tuple[str, ...] = ()  # the training command after -- (empty: compat's own workload)
    reads: tuple[str, ...] = ()  # --reads NAME: the command's path arguments its runs only read
    matrix: Optional[str] = None  # --matrix, else $COMPAT_MATRIX; None: the bundled matrix with the overlay (as Output.matrix)


class JobArgs(Record):
    """compat export pytorchjob."""

    nnodes: int
    nproc_per_node: int
    image: Optional[str]
    cpu: Optional[str]
    memory: Optional[str]
    name: str
    namespace: Optional[str]
    shm_size: str
    threads_per_core: int
    preflight: bool
    trainer_v2: bool
    command: tuple[str, ...]  # after --
    watch: bool = False  # --watch: the nodes run the training under compat launch --watch (pytorchjob, trainjob, sbatch)
    watch_claim: Optional[str] = None  # --watch-claim: a ReadWriteMany PersistentVolumeClaim every pod mounts for the watch's run folder


class DockerArgs(Record):
    """compat export dockerfile."""

    base: Optional[str]
    ranks_per_node: int
    wheelhouse: Optional[str]


class SlurmArgs(Record):
    """compat export sbatch's own options (the nodes, ranks, name and preflight are JobArgs')."""

    time: Optional[str] = None
    partition: Optional[str] = None


class RayArgs(Record):
    """compat export ray's own options (the nodes, ranks, name and preflight are JobArgs')."""

    cpus_per_node: Optional[int] = None  # None: this machine's (the CPUs compat may use here)
    gloo_timeout: int = 300
    runtime_pip: bool = True
    preflight_timeout: int = 120  # runtime_env pip: Ray installs the set on every node


class ExportArgs(Record):
    output: Output
    target: Target
    wanted: Wanted
    sources: Sources
    format: Optional[str]  # None with --validate
    validate: Optional[str]  # --validate FILE
    job: JobArgs
    docker: DockerArgs
    trainer_version: Optional[str]  # --trainer-version (TrainJob export and --validate); None: the newest known
    crd: Optional[str]  # --crd FILE: the cluster's TrainJob CRD instead of a known release
    show_pods: bool  # --validate --show-pods
    slurm: SlurmArgs = SlurmArgs()
    ray: RayArgs = RayArgs()


class MigrateArgs(Record):
    """compat migrate: the output options and migrate's own options (migrate/service.MigrateOptions, built in the
    command so that the parser needs nothing of migrate/)."""

    output: Output
    target: Target
    requirement_files: tuple[str, ...]
    dry_run: bool
    yes: bool
    to_torch: Optional[str]
    command: tuple[str, ...]
    sources: tuple[str, ...]
    compare: bool
    ranks_per_node: int
    indexes: tuple[str, ...]
    installer: str
    live_timeout: float
