"""What every launcher is to compat: the ``Launcher`` protocol, the records it hands back, and its error.

A launcher (spawn, torchrun, mpirun; one module each beside this one, listed in ``launchers/__init__.py``) answers
for every command that starts ranks:

* ``live(job)``: the processes ``compat doctor --live`` starts (argument lists and environments: a :class:`Launch`);
* ``tool(request)`` then ``bound(job)``: the command line ``compat launch`` runs (an :class:`Invocation`), given the
  CPU binding ``placement/`` planned as a ready wrapper (the wing knows nothing of CPU plans);
* ``processes(job, base)``: the processes ``compat tune`` starts and supervises itself for the same bound job (a
  :class:`Launch`): a launcher that is one program, its ``bound()`` command line (``one_program``); spawn, each rank;
* ``ccl_exports(env)``: what ``compat env --launcher`` adds for oneCCL under it (its transport, the interface);
* ``path_additions(python, path, mpirun)``: what its own program needs on PATH-like lists, whatever the backend (Intel
  MPI's and MPICH's hydra run their proxies from PATH: the mpirun's folder, VENV/bin for impi-rt's); every form of the
  environment (compat env, compat launch, the job scripts) carries the same;
* ``interface_exports(interface, env, python, path)``: its own variables that name the interface reaching the master
  (Intel MPI's I_MPI_HYDRA_IFACE, Open MPI's btl/oob_tcp_if_include); gloo's and oneCCL's are everyone's
  (environment/interfaces.py: GLOO_VARIABLES, CCL_VARIABLES);
* ``failures(log)``: the per-rank exit codes and the first failure its own output reports (the live report);
* ``rank_variables`` / ``local_rank_variable``: the rank, size and local-rank variables it gives each rank (the
  live worker maps them to RANK / WORLD_SIZE / LOCAL_RANK; compat launch's wrapper picks the rank's CPUs by them);
* ``programs`` / ``modules``: how a user's own command line that runs it begins (``launchers.recognise``: compat
  migrate and compat export read training commands by them).

Side effects: none here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional, Protocol

from ..errors import CompatError
from ..record import Record

LOOPBACK = "127.0.0.1"
WRAPPER_NAME = "compat-launch-rank"  # $0 of compat launch's binding wrapper: what `ps` shows before the exec

# capabilities: which commands offer a launcher (names(capability) in launchers/__init__.py feeds their --launcher choices)
LIVE = "live"  # compat doctor --live --launcher
BOUND = "bound"  # compat launch --launcher
ENV = "env"  # compat env --launcher
HOSTFILE = "hostfile"  # doctor --live --hostfile / --rsh: it reads a hostfile and reaches its hosts through a remote shell
EVERY_HOST = "every-host"  # one compat starts the ranks of every host (no --master-addr/--master-port to be told per node)
UNMAPPED = "unmapped"  # doctor --live --no-rank-env: it can start ranks without their rank variables
TUNE = "tune"  # compat tune --launcher: it runs tune's configurations (processes(), supervised by compat tune)


class LaunchError(CompatError):
    """The launcher cannot be used: one sentence (``message``, lower case: it also stands in a finding), and the fix."""

    def sentence(self) -> str:
        """The message as a sentence of its own (an error line rather than a finding)."""
        return self.message[:1].upper() + self.message[1:]


class RankLayout(Record):
    """Where the ranks go: per node, how many nodes, this node's number, the master, an mpirun hostfile."""

    nproc_per_node: int = 2
    nnodes: int = 1
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    hostfile: Optional[str] = None
    hosts: tuple[str, ...] = ()  # every node's host name in node order, where the launcher knows them without a hostfile (srun's allocation)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


class Launch(Record):
    """compat doctor --live: the processes to start."""

    launcher: str
    flavor: str  # spawn, torchrun, intel-mpi, open-mpi, mpich
    commands: tuple[tuple[str, ...], ...]  # one per process compat starts (spawn: one per rank)
    envs: tuple[Mapping[str, str], ...]
    master: str
    expected_local: int  # ranks whose records compat should find (this node's; every host's with an mpirun hostfile)
    world_size: int
    notes: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # the hostfile's hosts (mpirun across hosts); empty: this node only
    # what compat gave the ranks that the user's own command under this launcher will not have (name -> value), and what
    # it gave in place of the user's own value (a free port for the probe): plan_launch fills both, the live report says so
    added: Mapping[str, str] = {}
    replaced: Mapping[str, str] = {}


class LiveJob(Record):
    """What compat doctor --live asks of a launcher. ``worker``: the worker script and its arguments. ``rank_env=False``
    starts the ranks without their rank variables (and, under mpirun, without mapping PMI_*): the mistake that makes
    every rank train alone, to see that the probe catches it."""

    python: str
    worker: tuple[str, ...]
    layout: RankLayout
    env: Mapping[str, str]  # the ranks' environment: rank variables inherited from compat's caller already dropped
    addr: str  # the master's address, and its port: the same on every node
    port: int
    hosts: tuple[tuple[str, Optional[int]], ...] = ()  # the hostfile's (host, slots), read once
    mpirun: Optional[str] = None
    rank_env: bool = True
    rsh: Optional[str] = None


class Tools(Record):
    """The binding tools on this machine (paths, or None)."""

    numactl: Optional[str] = None
    taskset: Optional[str] = None


class ToolRequest(Record):
    """compat launch: what is known before the launcher's own program is looked for."""

    python: str
    has_torch: bool
    program: Optional[str] = None  # --mpirun PATH
    flavor: Optional[str] = None  # --mpi-flavor
    print_only: bool = False


class Tool(Record):
    """The launcher's program and its flavour on this machine; notes for the user (a missing torch under --print)."""

    program: str
    flavor: str
    notes: tuple[str, ...] = ()


class PathEntries(Record):
    """Entries added to a path list (PATH, LD_LIBRARY_PATH): in front of the value the launching shell has, or after it."""

    prepend: tuple[str, ...] = ()
    append: tuple[str, ...] = ()


def joined(value: Optional[str], added: PathEntries) -> str:
    """``value`` with the entries added, each run of them once (a value that already holds the run is kept as it is)."""
    entries = [e for e in (value or "").split(":") if e]
    for run, front in ((added.prepend, True), (added.append, False)):
        text = ":".join(run)
        if run and f":{text}:" not in f":{':'.join(entries)}:":
            entries = [*run, *entries] if front else [*entries, *run]
    return ":".join(entries)


class BoundJob(Record):
    """compat launch: the ranks and their CPU binding, ready. ``wrapper(variable)`` gives (sh script, tool) that execs
    the rank's command bound to its CPUs, choosing them by the local-rank ``variable``; ``masks`` holds each local
    rank's compute CPUs as a bit mask, for a launcher that binds by itself (Intel MPI's I_MPI_PIN_DOMAIN). Both are
    placement/'s (binding.py); a launcher uses the one it can carry out."""

    ranks: int
    rank_env: Mapping[str, str]
    command: tuple[str, ...]  # what each rank runs, the interpreter already in front of a script
    python: str
    tool: Tool
    wrapper: Callable[[str], tuple[str, str]]
    masks: tuple[int, ...]
    path: str = ""  # PATH as the launcher will see it
    as_root: bool = False  # compat runs as root (Open MPI refuses that without --allow-run-as-root)
    additions: Mapping[str, PathEntries] = {}  # path lists the ranks need added to (the oneCCL environment's LD_LIBRARY_PATH)
    across: Optional["Across"] = None  # several hosts (compat launch --nnodes / --hostfile); None: this host only
    passed: tuple[str, ...] = ()  # more variables the ranks get by name from the launching environment (the watch's)


class Across(Record):
    """compat launch across hosts: torchrun's static rendezvous (one compat per node: --nnodes, --node-rank, the
    master), or mpirun's hostfile (one compat starts every host's ranks through the remote shell)."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    hostfile: Optional[str] = None
    hosts: tuple[tuple[str, Optional[int]], ...] = ()  # the hostfile's (host, slots), read once
    rsh: Optional[str] = None


class Invocation(Record):
    """compat launch: the command line and the environment that carry the plan out."""

    launcher: str
    flavor: str  # torchrun | intel-mpi | open-mpi | mpich
    argv: tuple[str, ...]
    env: Mapping[str, str]  # exported for the launcher: the ranks' environment plus the launcher's binding settings
    binding: str  # I_MPI_PIN_DOMAIN | numactl | taskset
    notes: tuple[str, ...]
    additions: Mapping[str, PathEntries] = {}  # joined to the launching shell's value (never its whole PATH written out)

    def shell_line(self) -> str:
        import shlex

        return shlex.join(self.argv)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The launcher's environment when started from ``base``: base, the exports, and the path lists with their additions."""
        env = {**base, **self.env}
        for key, added in self.additions.items():
            env[key] = joined(env.get(key), added)
        return env


class CclEnv(Record):
    """compat env --launcher with the oneCCL bindings: the exports so far, the environment, the bindings' folder and
    the network interfaces that are up."""

    exports: Mapping[str, str]
    env: Mapping[str, str]
    bindings_dir: Path
    interfaces: tuple[str, ...]
    python: str = ""  # the target interpreter (mpirun: the environment's own mpirun is found next to it)
    mpi_root: str = ""  # the PyPI runtime's Intel MPI root (impi-rt's activation script: I_MPI_ROOT), "" when none
    path: Optional[str] = None  # PATH as the oneCCL environment leaves it (a bindings' setvars.sh puts its mpirun there)
    mpirun: Optional[str] = None  # the mpirun the launch runs (compat launch --mpirun): its MPI decides the transport


class Failures(Record):
    """What a launcher's own output says of failed ranks: pid -> exit code (negative: a signal), and the rank it saw
    fail first, ("pid", n, code) or ("rank", n, code)."""

    exit_codes: Mapping[int, int]
    first: Optional[tuple[str, int, Optional[int]]] = None


class Launcher(Protocol):
    name: str  # its --launcher value
    flavors: tuple[str, ...]  # what it can be (mpirun: intel-mpi, open-mpi, mpich); the Launch and Invocation say which
    capabilities: frozenset[str]  # LIVE, BOUND, ENV, HOSTFILE, EVERY_HOST, UNMAPPED: which commands and options offer it
    mpi_transport: bool  # oneCCL's default ATL (MPI) works under it
    gives_rendezvous: bool  # it gives its ranks MASTER_ADDR/MASTER_PORT (torchrun); mpirun and a script that spawns do not
    starts_ranks_itself: bool  # compat starts each rank (their exit codes are its own children's)
    rank_variables: tuple[tuple[str, str, str], ...]  # (rank, world size, local rank) as it sets them, when not RANK/WORLD_SIZE
    inherited: tuple[str, ...]  # what it sets for its ranks or its job (names, PREFIX*): dropped from what compat's ranks inherit
    programs: tuple[str, ...]  # what a user's command line that runs it starts with (migrate, export read those)
    modules: tuple[str, ...]  # or, after python -m

    def local_rank_variable(self, flavor: str) -> str: ...

    def live(self, job: LiveJob) -> Launch: ...

    def tool(self, request: ToolRequest) -> Tool: ...

    def bound(self, job: BoundJob) -> Invocation: ...

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch: ...

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]: ...

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]: ...

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]: ...

    def failures(self, log: str) -> Failures: ...


def one_program(invocation: Invocation, ranks: int, base: Mapping[str, str]) -> Launch:
    """``processes()`` of a launcher that is one program (torchrun, mpirun, srun): its ``bound()`` command line, in the
    environment it gets when started from ``base`` (Invocation.environment), as compat launch would run it."""
    return Launch(invocation.launcher, invocation.flavor, (invocation.argv,), (invocation.environment(base),), "", ranks, ranks, invocation.notes)


# Set by every launcher for its ranks (each launcher names its own in ``inherited``): inherited from compat's caller
# (a SLURM job, a torchrun, a shell that exported them) they would override what this run's launcher gives each rank.
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def inherited_rank_variable(name: str, inherited: Sequence[str]) -> bool:
    """``name`` is one of RANK_VARIABLES or of ``inherited`` (names, and prefixes written ``PREFIX*``)."""
    return name in RANK_VARIABLES or any(name.startswith(entry[:-1]) if entry.endswith("*") else name == entry for entry in inherited)


MASTER_PORT = "29500"  # torch.distributed's and accelerate's default port


def master_exports(name: str, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """MASTER_ADDR / MASTER_PORT for a launcher that does not give its ranks a rendezvous address (mpirun, a script
    that spawns its ranks), unless ``env`` (the launching shell's) has them: accelerate sets a default port but no
    address ("MASTER_ADDR expected, but not set"), and torch's env:// needs both, for gloo as for ccl."""
    extra = {key: value for key, value in (("MASTER_ADDR", LOOPBACK), ("MASTER_PORT", MASTER_PORT)) if not env.get(key)}
    if not extra:
        return {}, [f"launcher {name}: MASTER_ADDR and MASTER_PORT are already set here; kept"]
    said = [f"launcher {name}: {', '.join(f'{k}={v}' for k, v in extra.items())}, because {name} gives its ranks no rendezvous address "
            "(accelerate sets a default port, not an address); on several hosts set MASTER_ADDR to the first host's address"]
    return extra, said


def compat_env_command(python: str = "", launcher: Optional[str] = None, extra: str = "") -> str:
    """``eval "$(compat env ...)"`` as advice names it, in full: ``--python PYTHON`` when that environment is not the one
    compat runs in (compat env there would export this environment's settings instead), ``--launcher`` when one is known,
    then ``extra`` (" --master-addr HOST"). Every fix and note that tells the user to run compat env is written here
    (checks/oneccl_env.env_command for the checks)."""
    import os
    import shlex
    import sys

    target = "" if not python or os.path.abspath(python) == os.path.abspath(sys.executable) else f" --python {shlex.quote(python)}"
    return f'eval "$(compat env{target}{" --launcher " + launcher if launcher else ""}{extra})"'


def ofi_exports(name: str, env: CclEnv, why: str = "oneCCL's MPI transport needs an MPI launcher (\"failed to initialize ATL\" otherwise)"
                ) -> tuple[dict[str, str], list[str]]:
    """What a launch of the ccl backend needs on top of setvars.sh under a launcher that is not Intel MPI's. oneCCL's
    default transport is MPI (CCL_ATL_TRANSPORT=mpi), which needs Intel MPI's launcher: without one (torchrun, a script
    that spawns its ranks) every rank fails "failed to initialize ATL", and under Open MPI it loads Intel MPI's libmpi and
    hangs, so such launches take the libfabric transport (ofi), which loads its providers from FI_PROVIDER_PATH and finds
    the other ranks through oneCCL's key-value store on an interface it picks (CCL_KVS_IFACE)."""
    extra = {"CCL_ATL_TRANSPORT": "ofi"}
    said = [f"launcher {name}: CCL_ATL_TRANSPORT=ofi, because {why}"]
    provider = env.exports.get("FI_PROVIDER_PATH") or env.env.get("FI_PROVIDER_PATH")
    if not provider:
        found = sorted(str(p) for p in env.bindings_dir.glob("**/libfabric/lib/prov") if p.is_dir())
        provider = found[0] if found else ""
    if provider:
        extra["FI_PROVIDER_PATH"] = provider
        said.append("FI_PROVIDER_PATH: the libfabric providers of the oneCCL environment (ofi loads them from there)")
    else:
        said.append("FI_PROVIDER_PATH: no libfabric provider folder found for these bindings; ofi finds no provider (pip install impi-rt ships them)")
    others = [interface for interface in env.interfaces if interface != "lo"]
    if not others:
        extra["CCL_KVS_IFACE"] = "lo"
        said.append("CCL_KVS_IFACE=lo: lo is the only interface that is up here (oneCCL's key-value store finds no other)")
    else:
        command = compat_env_command(env.python, name.split(" ", 1)[0], " --master-addr ADDR")  # mpirun's name says its flavor after a space
        said.append(f"CCL_KVS_IFACE, FI_TCP_IFACE: on several hosts both must name the interface that reaches the master ({', '.join(others)} here): "
                    f"{command} sets them")
    return extra, said
