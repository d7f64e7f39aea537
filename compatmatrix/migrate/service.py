"""``compat migrate``: the steps in order, the side effects at the edges.

1. Read what is there: the target environment (the environment probe) or the pins of ``-r`` files (no machine).
2. Plan (pure): the newest stock set for that Python (plan.py), the command rewritten (command.py), the IPEX / oneCCL
   calls in the scripts named with ``--source`` (source.py; the files are read here, never imported), the shell
   environment (environment.py, with ``compat env``'s answer for the stock set).
3. ``--dry-run`` (and ``-r``) end here. Otherwise, with ``--yes``: ``--compare`` runs the live doctor on the old set;
   then ONE transaction of the installer (install/service.py: snapshot, journal, restore on failure or Ctrl-C)
   installs the new set, uninstalls IPEX and the bindings, verifies, and runs the live doctor on the new set before it
   commits: a failed validation puts the old set back.

Exit codes: 0 planned / migrated and validated / nothing to change; 1 no stock set, a command that cannot work on it,
refused without --yes, or the install / validation failed (``state``: failed = nothing was changed, restored = the old
set was put back, unknown = a restore failed half-way); 2 unusable input (CompatError, raised); 130 / 143 interrupted
(after the restore).

Side effects: the environment probe (a child), reading --source files, the live doctor's ranks, the installer (network,
children, the environment's folders).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from ..checks.registry import Context, Options
from ..environment.snapshot import EnvSnapshot
from ..errors import EXIT_OK, EXIT_PROBLEMS, CompatError, UsageError, shown
from ..findings import Finding
from ..matrix.model import Matrix
from ..record import replace
from .command import CommandFacts, MigratedCommand, migrate_command, split_command
from .document import build_document, compare_json, measure, validation_json
from .environment import EnvironmentPlan, plan_environment
from .plan import INTEL_MPI_DISTRIBUTIONS, LEFTOVER_MODULES, MigrationPlan, plan_migration, python_target, torch_spec
from .source import SourceFinding, scan_sources

MAX_SOURCE_BYTES = 4 * 1024 * 1024  # a training script larger than this is not one
MAX_SOURCE_FILES = 2000


def _stderr_line(line: str) -> None:
    from ..install.files import safe_write

    safe_write(sys.stderr, line + "\n")


@dataclass(frozen=True)
class MigrateOptions:
    """``compat migrate [--python PATH | -r FILE [--python-version X.Y]] [--dry-run] [--yes] [--to-torch SPEC] [--source PATH ...]
    [--compare] [--ranks-per-node N] [--index HOST=URL ...] [-- TRAINING COMMAND ...]``"""

    python: Optional[str] = None  # the environment to migrate (None: the running interpreter)
    requirement_files: tuple[str, ...] = ()  # plan from these pins instead (no environment, no machine: plan only)
    python_version: Optional[str] = None  # with requirement_files: the Python they are for (default: the running one)
    platform: Optional[str] = None  # with requirement_files: a PEP 425 platform tag
    dry_run: bool = False
    yes: bool = False
    to_torch: Optional[str] = None  # limit torch: "2.13.0", "2.13", ">=2.10,<2.14"
    command: tuple[str, ...] = ()  # the training command (after --)
    sources: tuple[str, ...] = ()  # training scripts (or folders of them) to scan for IPEX / oneCCL calls
    compare: bool = False  # live doctor before and after, side by side
    ranks_per_node: int = 2  # the live doctor's ranks; the thread settings' ranks when the command does not say
    indexes: tuple[str, ...] = ()  # --index HOST=URL for the install
    installer: str = "auto"  # pip, uv, auto
    live_launcher: str = "spawn"
    live_timeout: float = 300.0
    matrix: Optional[str] = None  # --matrix PATH
    say: Callable[[str], None] = field(default=_stderr_line)


@dataclass(frozen=True)
class LiveRun:
    findings: tuple[Finding, ...]
    details: dict[str, Any]


class LiveRunner(Protocol):
    """Runs the live doctor on an environment (live/service.run_live by default; tests pass their own)."""

    def __call__(self, matrix: Matrix, snapshot: EnvSnapshot, ranks: int, launcher: str, timeout: float) -> LiveRun: ...


class StackInstaller(Protocol):
    """One transaction: install ``plan``, uninstall ``remove``, verify, call ``before_commit`` (a FAIL restores), commit.
    Raises install.errors.InstallError (``state``: unchanged / restored) or InstallInterrupted."""

    def __call__(self, matrix: Matrix, plan: Any, snapshot: EnvSnapshot, remove: Sequence[str],
                 before_commit: Callable[[], Sequence[Finding]]) -> Any: ...


def default_live(matrix: Matrix, snapshot: EnvSnapshot, ranks: int, launcher: str, timeout: float) -> LiveRun:
    from ..launchers.interface import RankLayout
    from ..live.service import LiveOptions, run_live

    result = run_live(Context(matrix, snapshot, Options(ranks_per_node=ranks)),
                      LiveOptions(launcher=launcher, topology=RankLayout(nproc_per_node=ranks), timeout=timeout))
    return LiveRun(tuple(result.findings), dict(result.details))


@dataclass(frozen=True)
class ServiceInstaller:
    """install/service.py's transactional install, with the removal and the validation inside its transaction."""

    installer: str = "auto"
    say: Callable[[str], None] = field(default=_stderr_line)

    def __call__(self, matrix: Matrix, plan: Any, snapshot: EnvSnapshot, remove: Sequence[str], before_commit: Callable[[], Sequence[Finding]]) -> Any:
        import dataclasses

        from ..install.service import InstallOptions, install

        fields = {f.name for f in dataclasses.fields(InstallOptions)}
        if not {"remove", "before_commit"} <= fields:
            raise CompatError("This compat's installer cannot uninstall packages or validate inside its transaction (install.service.InstallOptions "
                              "has no remove / before_commit), so compat migrate cannot apply a plan yet; nothing was changed.",
                              "Use --dry-run for the plan; apply it with compat install once the installer has them.")
        options = InstallOptions(yes=True, installer=self.installer, say=self.say, remove=tuple(remove), before_commit=before_commit)  # type: ignore[call-arg]
        return install(matrix, plan, snapshot, options)


def run_migrate(options: MigrateOptions, *, matrix: Optional[Matrix] = None, installer: Optional[StackInstaller] = None,
                live: Optional[LiveRunner] = None) -> tuple[int, dict[str, Any]]:
    """Plan (and unless --dry-run, apply and validate) the move to stock PyTorch; the exit code and the migrate-v1 document."""
    _check_options(options)
    if matrix is None:
        from ..planning import load  # the bundled matrix with the user's overlay, as every command reads it

        matrix = load(options.matrix)
    spec = torch_spec(options.to_torch)
    pins_only = bool(options.requirement_files)
    snapshot = _pins_snapshot(matrix, options) if pins_only else _environment_snapshot(options)
    origin = f"pins of {', '.join(options.requirement_files)}" if pins_only else f"--python {snapshot.executable}"
    python = python_target(snapshot, origin)
    plan = plan_migration(matrix, snapshot, python, snapshot.platform, spec)
    command = _command(matrix, plan, snapshot, options, pins_only)
    sources = scan_sources(read_sources(options.sources))
    environment = _environment(matrix, plan, snapshot, command, options, pins_only)
    dry_run = options.dry_run or pins_only
    notes = []
    if pins_only and not options.dry_run:
        notes.append("planned from pins (-r): nothing is installed for pins; compat migrate --python PATH applies the plan to an environment")
    if options.compare and dry_run:
        notes.append("--compare measures a real migration: it runs only without --dry-run")
    if not plan.ok:
        return EXIT_PROBLEMS, build_document(plan, command, environment, sources, state="no-set", dry_run=dry_run, notes=notes)
    blocked = command is not None and bool(command.blocking)
    if dry_run:
        return (EXIT_PROBLEMS if blocked else EXIT_OK), build_document(plan, command, environment, sources, state="planned", dry_run=True, notes=notes)
    if not plan.changes_anything:
        notes.append(f"{snapshot.prefix} already holds the stock set: nothing to change")
        return (EXIT_PROBLEMS if blocked else EXIT_OK), build_document(plan, command, environment, sources, state="unchanged", dry_run=False, notes=notes)
    if not options.yes:
        document = build_document(plan, command, environment, sources, state="refused", dry_run=False, notes=notes)
        document["error"] = {"message": "compat migrate replaces and removes installed packages; refused without --yes. Nothing was changed.",
                             "fix": "Check the plan (--dry-run), then re-run with --yes."}
        return EXIT_PROBLEMS, document
    return _apply(matrix, plan, snapshot, command, environment, sources, options, notes, installer or ServiceInstaller(options.installer, options.say),
                  live or default_live)


def _check_options(options: MigrateOptions) -> None:
    if options.requirement_files and options.python:
        raise UsageError("-r plans from pins, --python from an environment: give one of them.", "Drop --python to plan from the files' pins.")
    if (options.python_version or options.platform) and not options.requirement_files:
        raise UsageError("--python-version and --platform go with -r (an environment has its own).", "Pass -r FILE, or drop them.")
    if options.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be at least 1.", "Pass the number of ranks you start on each node.")
    if not options.live_timeout > 0:
        raise UsageError("--live-timeout must be positive.", "Pass e.g. --live-timeout 300.")


def _environment_snapshot(options: MigrateOptions) -> EnvSnapshot:
    from ..environment.snapshot import take_snapshot

    return take_snapshot(options.python, cached=options.dry_run)  # an install must see the environment afresh


def _pins_snapshot(matrix: Matrix, options: MigrateOptions) -> EnvSnapshot:
    from ..environment.from_pins import snapshot_from_pins
    from ..inputs import read_inputs
    from ..inputs.request import file_request
    from ..target import Platform, PythonTarget

    python = PythonTarget.parse(options.python_version) if options.python_version else PythonTarget.running()
    platform = Platform.from_tag(options.platform) if options.platform else Platform.current()
    files = file_request(matrix, read_inputs(list(options.requirement_files), python, platform=platform))
    return snapshot_from_pins(files.pinned, python.version, platform, ", ".join(options.requirement_files))


def without_removed(plan: MigrationPlan, snapshot: EnvSnapshot) -> EnvSnapshot:
    """The snapshot as it will be once the removals are gone (what compat env is asked about for the stock set); a package
    folder no distribution owns is left out too (the plan's notes say to delete it)."""
    gone = {r.canonical for r in plan.removals}
    modules = {k: v for k, v in snapshot.modules.items() if k not in LEFTOVER_MODULES}
    return replace(snapshot, distributions=tuple(d for d in snapshot.distributions if d.canonical not in gone), modules=modules)


def _command(matrix: Matrix, plan: MigrationPlan, snapshot: EnvSnapshot, options: MigrateOptions, pins_only: bool) -> Optional[MigratedCommand]:
    from ..matrix.model import Component
    from ..placement.topology import machine_from_snapshot

    argv = list(options.command[1:] if options.command[:1] == ("--",) else options.command)
    if not argv:
        return None
    # the environment's own mpirun when a removed package installed it (impi-rt, next to the interpreter: first on an activated
    # venv's PATH), else the one on PATH, else the environment's own, else the bindings' bundled one (their setvars.sh's)
    own = None if pins_only else _beside(snapshot.executable, "mpirun")
    mpirun = None if pins_only else ((own if own and _owner(plan, own) else None) or snapshot.which.get("mpirun") or own
                                      or next((m for m in (os.path.join(f, "opt", "mpi", "bin", "mpirun") for f in plan.removed_folders) if os.path.isfile(m)), None))
    facts = CommandFacts(
        transformers=plan.version_of(Component.TRANSFORMERS), accelerate=plan.version_of(Component.ACCELERATE), torch=plan.version_of(Component.TORCH),
        cpu_flags=None if pins_only else snapshot.cpu.flags, machine=None if pins_only else machine_from_snapshot(snapshot),
        mpirun=mpirun, mpi_flavor=_flavor(mpirun) if mpirun and split_command(argv).kind == "mpirun" else None,
        removed_folders=plan.removed_folders, env={} if pins_only else dict(snapshot.env),
        mpirun_owner=_owner(plan, mpirun) if mpirun else next((r.name for r in plan.removals if r.canonical in INTEL_MPI_DISTRIBUTIONS), ""))
    return migrate_command(matrix, argv, facts)


def _beside(python: str, program: str) -> Optional[str]:
    """``program`` in the interpreter's own bin folder (impi-rt installs its mpirun there; PATH may not name it)."""
    path = os.path.join(os.path.dirname(python), program)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _owner(plan: MigrationPlan, program: str) -> str:
    """The removed Intel MPI distribution whose RECORD lists ``program`` (its mpirun), or ""."""
    real = os.path.realpath(program)
    for removal in plan.removals:
        if removal.canonical not in INTEL_MPI_DISTRIBUTIONS:
            continue
        record = Path(removal.location) / "RECORD"
        try:
            lines = record.read_text(errors="replace").splitlines()[:100000]
        except OSError:
            continue
        site = Path(removal.location).parent
        if any(os.path.realpath(site / line.split(",", 1)[0]) == real for line in lines if line.strip()):
            return removal.name
    return ""


def _flavor(mpirun: str) -> Optional[str]:
    """The MPI of the mpirun on PATH (its --version: one short child), or None when it does not say."""
    from ..launchers.interface import LaunchError
    from ..launchers.mpirun import mpi_flavor

    try:
        return mpi_flavor(mpirun, timeout=10.0)
    except LaunchError:
        return None


def _environment(matrix: Matrix, plan: MigrationPlan, snapshot: EnvSnapshot, command: Optional[MigratedCommand], options: MigrateOptions,
                 pins_only: bool) -> EnvironmentPlan:
    command_env = dict(command.env) if command is not None else {}
    command_why = dict(command.env_why) if command is not None else {}
    if pins_only:
        return plan_environment(None, (), {}, False, command_env, command_why)
    from ..shell_env import plan_env

    ranks = (command.ranks_per_node if command is not None and command.ranks_per_node else None) or options.ranks_per_node
    stock = without_removed(plan, snapshot)
    exports = plan_env(Context(matrix, stock, Options(ranks_per_node=ranks)), ranks).exports
    keeps_mpi = command.keeps_mpi if command is not None else False
    return plan_environment(snapshot.env, plan.removed_folders, exports, keeps_mpi, command_env, command_why)


def read_sources(paths: Sequence[str]) -> list[tuple[str, str]]:
    """(name, text) of every file named, and of every *.py under a folder named; regular files only (a FIFO is never
    opened), at most 4 MiB each, decoded as Python decodes source (its coding line, else UTF-8)."""
    found: list[tuple[str, str]] = []
    for given in paths:
        path = Path(given)
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise UsageError(f"--source {shown(given, 200)} cannot be read ({exc.strerror}).", "Pass the training script (or a folder of scripts).") from None
        if stat.S_ISDIR(mode):
            files = sorted(p for p in path.rglob("*.py") if p.is_file() and not p.is_symlink())
            if len(files) > MAX_SOURCE_FILES:
                raise UsageError(f"--source {shown(given, 200)} holds {len(files)} Python files, more than {MAX_SOURCE_FILES}.", "Name the training scripts themselves.")
        elif stat.S_ISREG(mode):
            files = [path]
        else:
            raise UsageError(f"--source {shown(given, 200)} is not a file or a folder.", "Pass the training script (or a folder of scripts).")
        for file in files:
            found.append((str(file), _read_source(file)))
    return found


def _read_source(path: Path) -> str:
    import io
    import tokenize

    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise UsageError(f"--source {shown(str(path), 200)} is larger than {MAX_SOURCE_BYTES // (1024 * 1024)} MiB, which no training script is.",
                             "Name the training scripts themselves.")
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--source {shown(str(path), 200)} cannot be read ({exc.strerror}).", "Check the path and its permissions.") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", errors="replace")  # the scan then says the file does not parse, if it does not


def _apply(matrix: Matrix, plan: MigrationPlan, snapshot: EnvSnapshot, command: Optional[MigratedCommand], environment: EnvironmentPlan,
           sources: Sequence[SourceFinding], options: MigrateOptions, notes: list[str], installer: StackInstaller,
           live: LiveRunner) -> tuple[int, dict[str, Any]]:
    from ..install.errors import InstallError
    from ..install.indexes import configure_indexes
    from ..install.plan import make_plan

    say = options.say
    ranks = options.ranks_per_node
    before = None
    if options.compare:
        say(f"compat migrate: the live doctor on the old set ({ranks} ranks, {options.live_launcher})")
        before = live(matrix, snapshot, ranks, options.live_launcher, options.live_timeout)
    install_plan = make_plan(plan.resolution, configure_indexes(matrix, list(options.indexes)))
    validation: list[LiveRun] = []

    def validate() -> Sequence[Finding]:
        from ..environment.snapshot import take_snapshot

        say(f"compat migrate: the live doctor on the new set ({ranks} ranks, {options.live_launcher}) before it is kept")
        run = live(matrix, take_snapshot(snapshot.executable), ranks, options.live_launcher, options.live_timeout)
        validation.append(run)
        return run.findings

    removals = [r.name for r in plan.removals]
    say(f"compat migrate: installing {', '.join(f'{t.name} {t.pin}' for t in plan.targets)}" + (f"; removing {', '.join(removals)}" if removals else ""))
    try:
        installer(matrix, install_plan, snapshot, removals, validate)
    except InstallError as exc:
        state = {"restored": "restored", "unchanged": "failed"}.get(exc.state, "unknown")  # unknown: a restore failed half-way (the message says where)
        document = build_document(plan, command, environment, sources, state=state, dry_run=False, notes=notes)
        document["error"] = {"message": exc.message, "fix": exc.fix}
        _measured(document, before, validation[-1] if validation else None, exc.findings)
        return exc.exit_code, document
    document = build_document(plan, command, environment, sources, state="migrated", dry_run=False, notes=notes)
    _measured(document, before, validation[-1] if validation else None)
    ok = document["ok"] and (document["validation"] is None or document["validation"]["ok"])
    return (EXIT_OK if ok else EXIT_PROBLEMS), document


def _measured(document: dict[str, Any], before: Optional[LiveRun], after: Optional[LiveRun], findings: Sequence[Finding] = ()) -> None:
    """The validation (the live doctor on the new set, else the installer's own verification findings) and --compare."""
    if after is not None:
        document["validation"] = validation_json(after.findings)
        if before is not None:
            document["compare"] = compare_json(measure(before.findings, before.details), measure(after.findings, after.details))
    elif findings:
        document["validation"] = validation_json(findings)


__all__ = ["LiveRun", "LiveRunner", "MigrateOptions", "ServiceInstaller", "StackInstaller", "default_live", "read_sources", "run_migrate", "without_removed"]
