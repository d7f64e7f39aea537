"""A training command from the guides, rewritten for the stock set: every change with its reason.

* The Trainer's flags go through translate (``stock=True``: the one ccl -> gloo rewrite compat translate has too):
  ``--ddp_backend ccl`` -> ``gloo``, ``--use_ipex`` dropped, ``--no_cuda`` -> ``--use_cpu`` where the transformers
  wants it, ``--use_cpu`` added where accelerate needs it to form one job.
* ``--bf16`` stays where the CPU has native bf16 (avx512_bf16 / AMX); elsewhere stock PyTorch emulates it (slow), and
  the flag goes, said why. Where the CPU is not known (pins from -r files) it stays, with a warning.
* srun stays with its own options (launchers/srun.split_line reads them), the program it starts rewritten as any is.
* mpirun -> torchrun where the job's mpirun goes with the removed packages (the bindings' bundled MPI, impi-rt's): the rank counts
  from ``-n``/``-ppn`` (a hostfile: one torchrun per node, rendezvous at MASTER_ADDR), ``-genv`` settings kept as the
  ranks' environment, oneCCL / Intel MPI settings dropped. An mpirun of another MPI stays (gloo runs under it).
* Thread settings from compat launch's plan (placement/plan.thread_advice) for the ranks per node, with no oneCCL
  worker cores: OMP_NUM_THREADS replaces the guides' hand-picked value.
* ``accelerate launch``: ``--ipex`` and ``--mpirun_ccl`` go where the target accelerate has them no more.

Pure: the command and the facts about the target in, a MigratedCommand out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from packaging.version import Version

from ..environment.snapshot import NATIVE_BF16_FLAGS
from ..launchers import recognise
from ..matrix.model import Matrix
from ..placement.plan import thread_advice
from ..placement.topology import Machine, plural
from ..translate import Edit, translate

# mpirun options (Intel MPI / MPICH hydra, Open MPI) that take a value; -genv / -env take NAME VALUE or NAME=VALUE
_MPI_VALUE = {"-n", "-np", "-c", "--n", "-ppn", "-perhost", "--npernode", "-npernode", "-N", "-f", "-hostfile", "--hostfile", "-machinefile",
              "--machinefile", "-machine", "-hosts", "-host", "--host", "-H", "-genvlist", "-envlist", "-x", "--map-by", "--bind-to", "-wdir",
              "--wdir", "-iface", "-bootstrap", "-bootstrap-exec", "-launcher", "-launcher-exec", "--mca", "-mca", "-rankfile"}
_MPI_PAIR = {"-genv", "-env"}
_MPI_TWO_VALUES = {"--mca", "-mca"}
_TORCHRUN_VALUE = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank", "--master-addr", "--master_addr",
                   "--master-port", "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id",
                   "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval",
                   "--start-method", "--start_method", "--role", "--log-dir", "--log_dir", "-r", "--redirects", "-t", "--tee", "--local-addr",
                   "--local_addr", "--logs-specs", "--logs_specs", "--local-ranks-filter", "--local_ranks_filter"}
_ACCELERATE_VALUE = {"--config_file", "--num_processes", "--num_machines", "--machine_rank", "--main_process_ip", "--main_process_port",
                     "--mixed_precision", "--num_cpu_threads_per_process", "--mpirun_ccl", "--mpirun_hostfile", "--dynamo_backend", "--gpu_ids",
                     "--same_network", "--rdzv_backend", "--rdzv_conf", "--max_restarts", "--monitor_interval", "-m"}
_PYTHON_VALUE = {"-W", "-X", "-c", "-m"}
DEFAULT_PORT = "29500"


@dataclass(frozen=True)
class CommandFacts:
    """What the rewrite needs to know about the new set and this machine."""

    transformers: Optional[Version]
    accelerate: Optional[Version]
    torch: Optional[Version]
    cpu_flags: Optional[frozenset[str]] = None  # None: the CPU is not known (pins only)
    machine: Optional[Machine] = None  # for the thread settings; None: not known
    mpirun: Optional[str] = None  # the mpirun on PATH where the command was planned
    mpi_flavor: Optional[str] = None  # its MPI (intel-mpi, mpich, open-mpi), from its --version; None: not known
    removed_folders: tuple[str, ...] = ()  # the package folders that go (the bindings' bundled MPI is in there)
    mpirun_owner: str = ""  # the removed distribution whose files hold the mpirun (impi-rt), "" when none does
    env: Mapping[str, str] = field(default_factory=dict)  # for MASTER_ADDR


@dataclass(frozen=True)
class MigratedCommand:
    argv: tuple[str, ...]
    edits: tuple[Edit, ...]
    warnings: tuple[str, ...]
    blocking: tuple[str, ...]  # why the command cannot work on the new set at all
    env: Mapping[str, str]  # to export for the ranks (thread settings, -genv values that stay)
    env_why: Mapping[str, str]
    launcher: str  # launcher of the rewritten command: torchrun | mpirun | srun | accelerate | python | other
    keeps_mpi: bool  # the rewritten command still starts under mpirun (its MPI's variables must stay)
    ranks_per_node: Optional[int]


@dataclass
class _Launch:
    """A command split into the launcher part and the program it starts."""

    kind: str  # mpirun | torchrun | srun | accelerate | python | other
    launcher: list[str]
    program: list[str]  # interpreter (+ its options) and script, or -m module, or a plain executable
    args: list[str]  # the program's own arguments (the Trainer flags)
    options: dict[str, str] = field(default_factory=dict)  # launcher options of interest, by canonical name
    genv: list["_Setting"] = field(default_factory=list)  # -genv / -env / -x NAME=VALUE in the launcher part


@dataclass(frozen=True)
class _Setting:
    name: str
    value: str
    start: int  # index of its first token in the launcher part
    tokens: tuple[str, ...]

    @property
    def written(self) -> str:
        return " ".join(self.tokens)


@dataclass
class _Said:
    """What a rewrite says as it goes: the edits, warnings and blockers, and the ranks' environment with the reasons."""

    edits: list[Edit] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_why: dict[str, str] = field(default_factory=dict)


def migrate_command(matrix: Matrix, argv: Sequence[str], facts: CommandFacts) -> MigratedCommand:
    launch = split_command(argv)
    said = _Said()
    args = _bf16(_trainer_args(matrix, launch.args, facts, said), facts, said.edits, said.warnings)
    kind, launcher, ranks, keeps_mpi = _rewrite_launcher(matrix, launch, facts, said)
    launcher = _thread_settings(launcher, kind, keeps_mpi, ranks, facts, said)
    said.warnings += _launcher_notes(kind, ranks, launch.program + args)
    new = tuple(launcher + launch.program + args)
    return MigratedCommand(new, tuple(said.edits), tuple(dict.fromkeys(said.warnings)), tuple(dict.fromkeys(said.blocking)), said.env, said.env_why,
                           kind, keeps_mpi, ranks)


def _trainer_args(matrix: Matrix, args: Sequence[str], facts: CommandFacts, said: _Said) -> list[str]:
    """The program's arguments through translate (stock=True) for the new transformers / accelerate; as written without transformers."""
    if facts.transformers is None:
        if args:
            said.warnings.append("transformers is not in the new set: the script's flags were left as written")
        return list(args)
    translation = translate(matrix, list(args), facts.transformers, facts.accelerate, facts.torch, stock=True)
    said.edits += translation.edits
    said.warnings += translation.warnings
    said.blocking += translation.blocking
    return list(translation.argv)


def _rewrite_launcher(matrix: Matrix, launch: _Launch, facts: CommandFacts, said: _Said) -> tuple[str, list[str], Optional[int], bool]:
    """The launcher for the new set: (its kind, its tokens, the ranks per node, whether it still starts under mpirun).
    An mpirun that goes with the removed packages becomes torchrun; another MPI's mpirun stays; accelerate launch loses
    the options the new accelerate lacks."""
    ranks = _ranks_per_node(launch)
    if launch.kind == "accelerate":
        return "accelerate", _accelerate_launch(matrix, launch, facts, said.edits), ranks, False
    if launch.kind != "mpirun":
        return launch.kind, list(launch.launcher), ranks, False
    bundled, why_bundled = _relies_on_bundled_mpi(facts, launch)
    if bundled:
        launcher, ranks = _to_torchrun(launch, facts, said.edits, said.warnings, said.env, said.env_why, why_bundled)
        return "torchrun", launcher, ranks, False
    launcher = _kept_mpirun(launch, said.edits)
    said.warnings.append(f"mpirun stays ({facts.mpirun}{f', {facts.mpi_flavor}' if facts.mpi_flavor else ''}: not the MPI bundled with the oneCCL "
                         "bindings): gloo runs under it, accelerate reads PMI_RANK / PMI_SIZE as the ranks; export MASTER_ADDR (and MASTER_PORT) "
                         "for gloo's rendezvous")
    return "mpirun", launcher, ranks, True


def _thread_settings(launcher: list[str], kind: str, keeps_mpi: bool, ranks: Optional[int], facts: CommandFacts, said: _Said) -> list[str]:
    """OMP_NUM_THREADS from compat launch's plan: in mpirun's -genv list when mpirun stays, else in the ranks' environment."""
    threads = _threads(facts, ranks)
    if threads is None:
        if facts.machine is None:
            said.warnings.append("threads: the machine is not known here (pins only); compat env on the training machine prints OMP_NUM_THREADS")
        return launcher
    value, why = threads
    if kind == "mpirun" and keeps_mpi:
        return _set_genv(launcher, "OMP_NUM_THREADS", value, why, said.edits, facts.mpi_flavor)
    before = said.env.get("OMP_NUM_THREADS")
    if before is not None and before != value:
        said.edits.append(Edit(f"OMP_NUM_THREADS={before}", f"OMP_NUM_THREADS={value}", why))
    said.env["OMP_NUM_THREADS"] = value
    said.env_why["OMP_NUM_THREADS"] = why
    return launcher


def _launcher_notes(kind: str, ranks: Optional[int], program: Sequence[str]) -> list[str]:
    """What to know about the launcher: srun's rank variables, and compat launch for the core binding."""
    notes = []
    if kind == "srun":
        notes.append("srun stays with its options: it starts the tasks, and gloo needs no MPI; each task maps SLURM_PROCID / SLURM_NTASKS / "
                     "SLURM_LOCALID to RANK / WORLD_SIZE / LOCAL_RANK only if the script or a wrapper does (compat launch --launcher srun writes one)")
    if kind in ("torchrun", "mpirun", "srun") and ranks:
        notes.append(f"compat launch --launcher {kind} --nproc-per-node {ranks} -- {' '.join(program) or '...'} binds each rank to its "
                     "own physical cores (the plan these thread counts come from)")
    return notes


# --- splitting a command line ---------------------------------------------------------------


def split_command(argv: Sequence[str]) -> _Launch:
    tokens = list(argv)
    if not tokens:
        return _Launch("other", [], [], [])
    head = os.path.basename(tokens[0])
    launcher = recognise(program=head)  # the launchers' own programs (mpirun, mpiexec, torchrun, ...)
    if launcher == "mpirun":
        return _split_mpirun(tokens)
    if launcher == "torchrun":
        return _split_torchrun(tokens, 1)
    if launcher == "srun":
        return _split_srun(tokens)
    if head == "accelerate" and tokens[1:2] == ["launch"]:
        return _split_accelerate(tokens)
    if _is_python(head):
        options, rest = _python_options(tokens[1:])
        if rest[:2] and rest[0] == "-m" and len(rest) > 1 and recognise(module=rest[1]) == "torchrun":
            return _split_torchrun(tokens, 1 + len(options) + 2)
        return _program([], tokens, "python")
    return _program([], tokens, "other")


def _is_python(name: str) -> bool:
    return name == "python" or name.startswith("python3") or name.startswith("python2") or name == "pypy3"


def _python_options(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The interpreter's own options before the script / -m (``-u``, ``-W x``)."""
    options = []
    i = 0
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] not in ("-m", "-c"):
        options.append(tokens[i])
        if tokens[i] in _PYTHON_VALUE and i + 1 < len(tokens):
            options.append(tokens[i + 1])
            i += 1
        i += 1
    return options, tokens[i:]


def _program(launcher: list[str], tokens: list[str], kind: str) -> _Launch:
    """``tokens`` = the program and its arguments: interpreter (+options) + script | -m module | -c code, or an executable."""
    if tokens and _is_python(os.path.basename(tokens[0])):
        options, rest = _python_options(tokens[1:])
        if rest[:1] in (["-m"], ["-c"]):
            return _Launch(kind, launcher, tokens[:1] + options + rest[:2], rest[2:])
        return _Launch(kind, launcher, tokens[:1] + options + rest[:1], rest[1:])
    if tokens[:1] in (["-m"], ["-c"]):  # torchrun -m module
        return _Launch(kind, launcher, tokens[:2], tokens[2:])
    return _Launch(kind, launcher, tokens[:1], tokens[1:])


def _split_mpirun(tokens: list[str]) -> _Launch:
    options: dict[str, str] = {}
    genv: list[_Setting] = []
    i = 1
    while i < len(tokens) and tokens[i].startswith("-"):
        token = tokens[i]
        name, eq, inline = token.partition("=")
        if token in _MPI_PAIR:
            if i + 1 < len(tokens) and "=" in tokens[i + 1]:  # -genv NAME=VALUE (hydra takes both forms)
                key, _, value = tokens[i + 1].partition("=")
                genv.append(_Setting(key, value, i, tuple(tokens[i:i + 2])))
                i += 2
            else:
                if i + 2 < len(tokens):
                    genv.append(_Setting(tokens[i + 1], tokens[i + 2], i, tuple(tokens[i:i + 3])))
                i += 3
            continue
        if token in _MPI_TWO_VALUES:
            i += 3
            continue
        if name in _MPI_VALUE:
            value = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if name == "-x" and "=" in value:
                key, _, val = value.partition("=")
                genv.append(_Setting(key, val, i, tuple(tokens[i:i + (1 if eq else 2)])))
            else:
                options[_mpi_option(name)] = value
            i += 1 if eq else 2
            continue
        i += 1  # a flag without a value (-genvall, --oversubscribe, -l, ...)
    launch = _program(tokens[:i], tokens[i:], "mpirun")
    launch.options, launch.genv = options, genv
    return launch


def _mpi_option(name: str) -> str:
    if name in ("-n", "-np", "-c", "--n"):
        return "n"
    if name in ("-ppn", "-perhost", "--npernode", "-npernode", "-N"):
        return "ppn"
    if name in ("-f", "-hostfile", "--hostfile", "-machinefile", "--machinefile", "-machine"):
        return "hostfile"
    if name in ("-hosts", "-host", "--host", "-H"):
        return "hosts"
    return name.lstrip("-")


def _split_srun(tokens: list[str]) -> _Launch:
    """srun [its options] PROGRAM: srun's own words kept as they are (launchers/srun.split_line reads them); the program
    each task runs is read as any command is (a torchrun under srun stays a torchrun, with srun in front)."""
    from ..launchers.srun import split_line

    end, options = split_line(tokens)
    inner = split_command(tokens[end:]) if end < len(tokens) else _Launch("other", [], [], [])
    if inner.kind == "torchrun":
        inner.launcher = tokens[:end] + inner.launcher
        return inner
    launch = _program(tokens[:end], tokens[end:], "srun") if end < len(tokens) else _Launch("srun", tokens, [], [])
    launch.options = options
    return launch


def _split_torchrun(tokens: list[str], start: int) -> _Launch:
    options: dict[str, str] = {}
    i = start
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] not in ("-m",):
        name, eq, inline = tokens[i].partition("=")
        if name in _TORCHRUN_VALUE:
            options[name.lstrip("-").replace("-", "_")] = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            i += 1 if eq else 2
            continue
        if name in ("--module",):
            tokens = tokens[:i] + ["-m"] + tokens[i + 1:]
            break
        i += 1  # --standalone, --no-python, --run-path
    launch = _program(tokens[:i], tokens[i:], "torchrun")
    launch.options = options
    return launch


def _split_accelerate(tokens: list[str]) -> _Launch:
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
        name, eq, inline = tokens[i].partition("=")
        if name in _ACCELERATE_VALUE:
            options[name.lstrip("-")] = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            i += 1 if eq else 2
            continue
        i += 1
    launch = _program(tokens[:i], tokens[i:], "accelerate")
    launch.options = options
    return launch


# --- the rewrites -----------------------------------------------------------------------------


def _bf16(args: list[str], facts: CommandFacts, edits: list[Edit], warnings: list[str]) -> list[str]:
    """--bf16 stays where the CPU has native bf16; elsewhere it goes (stock PyTorch would emulate it)."""
    if "--bf16" not in args and not any(a.startswith("--bf16=") for a in args):
        return args
    if facts.cpu_flags is None:
        warnings.append("--bf16 kept: the CPU is not known here; it is fast only with avx512_bf16 or AMX (compat doctor says whether this CPU has them)")
        return args
    native = sorted(facts.cpu_flags & NATIVE_BF16_FLAGS)
    if native:
        return args
    out = []
    skip = False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        if token == "--bf16" or token.startswith("--bf16="):
            written = token
            if token == "--bf16" and i + 1 < len(args) and args[i + 1].lower() in ("true", "false", "1", "0", "yes", "no"):
                written = f"{token} {args[i + 1]}"
                skip = True
            edits.append(Edit(written, "", "this CPU has no avx512_bf16 or AMX: stock PyTorch would emulate bf16 (slower than fp32); "
                                           "IPEX's bf16 path is gone with IPEX"))
            continue
        out.append(token)
    return out


_HYDRA_ONLY = ("-genv", "-env", "-ppn", "-perhost", "-f", "-machinefile", "-genvlist", "-genvall")  # Intel MPI / MPICH; Open MPI refuses them


def _relies_on_bundled_mpi(facts: CommandFacts, launch: _Launch) -> tuple[bool, str]:
    """Whether the job's mpirun goes with the removed packages, and why, naming where it came from as it is: a removed
    distribution's own file (impi-rt's mpirun), the bindings' opt/mpi, or none found here (the guides' setup); or the
    one on PATH is an Open MPI that could not have run this command (Intel MPI's options)."""
    bundled = "the job relied on the MPI bundled with the oneCCL bindings (mpirun from their opt/mpi), which goes with them"
    if facts.mpirun and facts.mpirun_owner:
        return True, (f"the job's mpirun ({facts.mpirun}) is {facts.mpirun_owner}'s, Intel MPI's runtime from PyPI that came with the oneCCL runtime; "
                      f"{facts.mpirun_owner} is removed, and its mpirun with it")
    if not facts.mpirun:
        return True, ("no mpirun is found here (PATH, next to the interpreter): the MPI the job ran under is not one this environment keeps"
                      + (f" ({facts.mpirun_owner} is removed)" if facts.mpirun_owner else ""))
    real = os.path.realpath(facts.mpirun)
    if any(real == folder or real.startswith(folder.rstrip("/") + "/") for folder in (os.path.realpath(f) for f in facts.removed_folders)):
        return True, bundled
    hydra = sorted({t for t in launch.launcher if t in _HYDRA_ONLY})
    if facts.mpi_flavor == "open-mpi" and hydra:
        return True, (f"the command uses Intel MPI's {', '.join(hydra)}, which the Open MPI on PATH ({facts.mpirun}) refuses: the job ran under an "
                      "Intel MPI this environment does not keep")
    return False, ""


def _ranks_per_node(launch: _Launch) -> Optional[int]:
    if launch.kind == "mpirun":
        n, ppn = _int(launch.options.get("n")), _int(launch.options.get("ppn"))
        if ppn:
            return ppn
        if n and not launch.options.get("hostfile") and not launch.options.get("hosts"):
            return n
        return None
    if launch.kind == "srun":
        from ..launchers.srun import ranks_per_node

        return ranks_per_node(launch.options)
    if launch.kind == "torchrun":
        return _int(launch.options.get("nproc_per_node")) or (1 if "nproc_per_node" not in launch.options else None)
    if launch.kind == "accelerate":
        total, machines = _int(launch.options.get("num_processes")), _int(launch.options.get("num_machines")) or 1
        return total // machines if total and total % machines == 0 else None
    return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value and value > 0 else None


def _to_torchrun(launch: _Launch, facts: CommandFacts, edits: list[Edit], warnings: list[str], env: dict[str, str],
                 env_why: dict[str, str], why_bundled: str) -> tuple[list[str], Optional[int]]:
    """mpirun [-f hostfile] -n N [-ppn P] -genv K=V ... -> torchrun --nproc_per_node P [--nnodes N/P rendezvous] (the -genv values exported)."""
    n, ppn = _int(launch.options.get("n")), _int(launch.options.get("ppn"))
    hostfile = launch.options.get("hostfile") or launch.options.get("hosts")
    per_node = ppn or (n if not hostfile else None)
    nodes = n // per_node if n and per_node and n % per_node == 0 else None
    # torchrun's underscore spellings: every torch since torchrun exists (1.10) takes them
    new = ["torchrun"]
    if nodes and nodes > 1 or hostfile:
        master = facts.env.get("MASTER_ADDR") or next((g.value for g in launch.genv if g.name == "MASTER_ADDR"), "") or "MASTER_ADDR"
        new += ["--nnodes", str(nodes) if nodes else "NNODES", "--nproc_per_node", str(per_node) if per_node else "NPROC_PER_NODE",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{master}:{DEFAULT_PORT}"]
        where = f"each of the {plural(nodes, 'host')} in {hostfile}" if nodes and hostfile else f"each host{f' in {hostfile}' if hostfile else ''}"
        warnings.append(f"torchrun starts the ranks of one host: run this same command on {where} (mpirun started them all from the first one); "
                        f"they meet at {master}:{DEFAULT_PORT} (c10d rendezvous)")
        if master == "MASTER_ADDR":
            warnings.append("replace MASTER_ADDR in --rdzv_endpoint with the first host's address (no MASTER_ADDR was exported here)")
        if not nodes or not per_node:
            warnings.append("the ranks per host are not in the mpirun command (no -ppn): replace NNODES / NPROC_PER_NODE")
    else:
        new += ["--standalone", "--nproc_per_node", str(per_node or 1)]
    if launch.program and not _is_python(os.path.basename(launch.program[0])) and launch.program[0] not in ("-m", "-c"):
        new.append("--no_python")
    program = launch.program
    before = " ".join(launch.launcher)
    why = f"{why_bundled}; torchrun, part of torch, starts the ranks and sets RANK / WORLD_SIZE / LOCAL_RANK for gloo"
    for setting in launch.genv:
        if setting.name.startswith(("CCL_", "I_MPI_", "FI_", "ATL_")):
            edits.append(Edit(setting.written, "", f"{setting.name} is a oneCCL / Intel MPI setting; gloo under torchrun does not read it"))
            continue
        env[setting.name] = setting.value
        env_why[setting.name] = f"from {setting.written}: exported for torchrun, which passes it to the ranks"
    edits.append(Edit(before, " ".join(new), why))
    if program and _is_python(os.path.basename(program[0])):
        # torchrun runs the script with its own interpreter: python3 run_qa.py -> run_qa.py
        stripped = program[1:]
        launch.program = stripped
        edits.append(Edit(" ".join(program), " ".join(stripped), "torchrun runs the script with the interpreter it belongs to"))
    return new, per_node


def _kept_mpirun(launch: _Launch, edits: list[Edit]) -> list[str]:
    """An mpirun of another MPI stays; its oneCCL settings go."""
    dropped = [g for g in launch.genv if g.name.startswith(("CCL_", "ATL_"))]
    skip = {g.start + k for g in dropped for k in range(len(g.tokens))}
    for setting in dropped:
        edits.append(Edit(setting.written, "", f"{setting.name} is a oneCCL setting; gloo does not read it"))
    return [token for i, token in enumerate(launch.launcher) if i not in skip]


def _set_genv(launcher: list[str], name: str, value: str, why: str, edits: list[Edit], flavor: Optional[str] = None) -> list[str]:
    """Set NAME=VALUE in mpirun's -genv list (replacing a value given there); Open MPI's -x NAME=VALUE the same way."""
    out = list(launcher)
    for i, token in enumerate(out):
        if token in _MPI_PAIR | {"-x"} and i + 1 < len(out):
            if out[i + 1].startswith(f"{name}="):
                before = f"{token} {out[i + 1]}"
                out[i + 1] = f"{name}={value}"
                if before != f"{token} {out[i + 1]}":
                    edits.append(Edit(before, f"{token} {out[i + 1]}", why))
                return out
            if out[i + 1] == name and token in _MPI_PAIR and i + 2 < len(out):
                before = f"{token} {name} {out[i + 2]}"
                out[i + 2] = value
                if before != f"{token} {name} {value}":
                    edits.append(Edit(before, f"{token} {name} {value}", why))
                return out
    open_mpi = flavor == "open-mpi" or (flavor is None and any(t in ("-x", "--mca", "-mca", "--bind-to", "--map-by", "--npernode", "--oversubscribe",
                                                                     "--allow-run-as-root") for t in out))
    option = "-x" if open_mpi else "-genv"  # Open MPI exports with -x; Intel MPI and MPICH (hydra) with -genv
    out += [option, f"{name}={value}"]  # after the launcher's own options, before the program
    edits.append(Edit("", f"{option} {name}={value}", why))
    return out


def _accelerate_launch(matrix: Matrix, launch: _Launch, facts: CommandFacts, edits: list[Edit]) -> list[str]:
    """``accelerate launch``: --ipex and --mpirun_ccl go where the new accelerate has them no more (or IPEX is gone anyway)."""
    out: list[str] = []
    tokens = launch.launcher
    i = 0
    while i < len(tokens):
        name, eq, _ = tokens[i].partition("=")
        if name == "--ipex":
            edits.append(Edit(tokens[i], "", "IPEX is not in the stock set" + _gone(matrix, "ipex_launch_flag", facts.accelerate)))
            i += 1
            continue
        if name == "--mpirun_ccl":
            width = 1 if eq else 2
            edits.append(Edit(" ".join(tokens[i:i + width]), "", "oneCCL is not in the stock set" + _gone(matrix, "mpirun_ccl_launch_option", facts.accelerate)))
            i += width
            continue
        out.append(tokens[i])
        i += 1
    return out


def _gone(matrix: Matrix, feature: str, accelerate: Optional[Version]) -> str:
    from ..sentences import range_text

    found = {f.name: f for f in matrix.features_of("accelerate")}.get(feature)
    if found is None or accelerate is None or found.present_in(accelerate):
        return ""
    return f", and accelerate {accelerate} has no such option (accelerate{range_text(found.versions)} had it)"


def _threads(facts: CommandFacts, ranks: Optional[int]) -> Optional[tuple[str, str]]:
    """OMP_NUM_THREADS from compat launch's plan: the ranks per node on this machine's physical cores, no oneCCL worker cores."""
    if facts.machine is None:
        return None
    per_node = ranks or 1
    advice = thread_advice(facts.machine, per_node, 0)
    why = (f"compat launch's plan for {plural(per_node, 'rank')} per node on this machine's {plural(advice.cores, 'physical core')} "
           "(hyperthreads not counted; no cores set aside for oneCCL workers: gloo has none)")
    if advice.problem:
        why += f"; {advice.problem}"
    return str(advice.omp_threads), why
