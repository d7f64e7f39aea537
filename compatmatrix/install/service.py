"""compat install / compat download / --print: the steps in order, each one able to stop with nothing changed."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import requests

from ..checks.finding import Context, Finding, Options, Status, all_checks, run_checks, select
from ..environment.snapshot import EnvSnapshot, take_snapshot
from ..matrix.model import Matrix
from ..names import canonical_name
from .indexes import IndexLocation, check_reachable, env_name
from .plan import InstallPlan, WheelTarget, glibc_of
from .runner import (
    Change,
    EnvironmentLock,
    InstallError,
    changes,
    discard,
    download_dependencies,
    fetch,
    installer_command,
    installer_env,
    interrupted_install,
    locate,
    pip_for,
    pip_report,
    restore,
    run_installer,
    uv_binary,
    write_lock,
)
from .runner import take_snapshot as snapshot_folders


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")


@dataclass
class InstallOptions:
    yes: bool = False
    installer: str = "auto"  # pip, uv, auto (uv when on PATH, else pip)
    require_hashes: bool = False
    offline_dir: Optional[Path] = None
    say: Callable[[str], None] = field(default=_stderr_line)


@dataclass(frozen=True)
class InstallResult:
    changes: tuple[Change, ...]
    findings: tuple[Finding, ...]
    installer: str

    @property
    def ok(self) -> bool:
        return not any(f.status is Status.FAIL for f in self.findings)


def target_of(snapshot: EnvSnapshot) -> WheelTarget:
    return WheelTarget(snapshot.python_minor, snapshot.platform, glibc_of(snapshot.libc_version))


def preflight(session: requests.Session, plan: InstallPlan, options: InstallOptions) -> None:
    """Every host the plan uses answers, before anything is touched."""
    if options.offline_dir is not None:
        return
    locations = {p.location.host_id: p.location for p in plan.packages}
    locations[plan.dependency_index.host_id] = plan.dependency_index
    problems = check_reachable(session, locations, list(locations))
    if not problems:
        return
    host_id, why = next(iter(problems.items()))
    location = locations[host_id]
    fix = f"Pass --index {host_id}=URL (or set {env_name(host_id)}) to use a mirror or a local folder of wheels."
    if host_id == "pytorch-cpu":
        fix += " Or pass --torch-from-pypi to take PyPI's torch instead (the CUDA build: several GB more)."
    raise InstallError(f"{location.url} ({host_id}, from {location.origin}) cannot be reached ({why}); nothing was changed.", fix)


def choose_installer(requested: str) -> str:
    if requested == "auto":
        return "uv" if uv_binary() else "pip"
    return requested


def install(matrix: Matrix, plan: InstallPlan, snapshot: EnvSnapshot, options: InstallOptions) -> InstallResult:
    """Install ``plan`` into the environment of ``snapshot``: all of it, or (on any failure) none of it."""
    with EnvironmentLock(Path(snapshot.purelib)):
        return _install(matrix, plan, snapshot, options)


def _install(matrix: Matrix, plan: InstallPlan, snapshot: EnvSnapshot, options: InstallOptions) -> InstallResult:
    say = options.say
    left = interrupted_install(Path(snapshot.purelib))
    if left is not None:
        raise InstallError(
            f"An earlier compat install into {snapshot.prefix} was stopped before it finished (process {left.pid} is gone); "
            "the environment may be half-installed. Nothing was changed.",
            f"Run compat install --restore --python {snapshot.executable} to put back the state from before it, "
            "or --discard-snapshot to keep the environment as it is now.",
        )
    target = target_of(snapshot)
    installer = choose_installer(options.installer)
    pip = pip_for(snapshot.executable)  # before anything is downloaded
    if options.offline_dir is not None:
        check_wheelhouse(options.offline_dir, options.require_hashes)
    with requests.Session() as session, tempfile.TemporaryDirectory(prefix="compat-install-") as work:
        folder = Path(work)
        preflight(session, plan, options)
        located = locate(session, plan, target)
        for package, link in located.items():
            say(f"  {package.pin:<45} from {package.location.host_id} ({link.filename})")
        fetched = fetch(session, located, folder, options.require_hashes)
        items = pip_report(pip, snapshot.executable, [f.path for f in fetched], plan.dependency_index, options.offline_dir)
        planned = changes(items, snapshot.versions())
        replaced = [c for c in planned if c.before is not None and c.before != c.after]
        for change in planned:
            say(f"  {change.kind:<10} {change.name} {change.before + ' -> ' if change.before else ''}{change.after}")
        if replaced and not options.yes:
            listed = ", ".join(f"{c.name} {c.before} -> {c.after}" for c in replaced)
            raise InstallError(f"The install would replace {listed}; refused without --yes. Nothing was changed.", "Re-run with --yes to replace them.")
        if not planned:
            say("  nothing to change: the planned set is installed")
        lock = folder / "compat-lock.txt"
        hashed = write_lock(lock, fetched, items)
        if options.require_hashes and not hashed:
            planned_names = {canonical_name(f.package.distribution) for f in fetched}
            missing = [i.name for i in items if not i.sha256 and canonical_name(i.name) not in planned_names]
            raise InstallError(f"No verified hash is known for {', '.join(missing)}; --require-hashes refuses. Nothing was changed.", "Use an index that publishes hashes, or drop --require-hashes.")
        folders = [folder]
        if options.offline_dir is not None:
            folders.append(options.offline_dir)
        elif planned:
            download_dependencies(pip, snapshot.executable, items, fetched, folder, plan.dependency_index)
        command = installer_command(installer, pip, snapshot.executable, lock, folders, options.require_hashes)
        if not planned:
            after = take_snapshot(snapshot.executable)
            return InstallResult((), tuple(verify(matrix, after)), installer)
        saved = snapshot_folders([Path(snapshot.purelib), Path(snapshot.scripts)])
        with _signals_interrupt():
            try:
                code, output = run_installer(command, installer_env(snapshot.executable))
            except KeyboardInterrupt:
                restore(saved)
                raise InstallError("Interrupted: the installer was stopped and the environment was restored to what it was before.", "Run compat install again when ready.", state="restored") from None
            except InstallError:
                raise
            except Exception as exc:
                restore(saved)
                raise InstallError(f"The installer failed ({exc.__class__.__name__}); the environment was restored to what it was before.", "See the output above.", state="restored") from None
        if code != 0:
            restore(saved)
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise InstallError(f"{installer} {how}; the environment was restored to what it was before.", "See the installer's output above.", state="restored")
        after = take_snapshot(snapshot.executable)
        findings = verify(matrix, after)
        failed = [f for f in findings if f.status is Status.FAIL]
        if failed:
            restore(saved)
            raise InstallError(
                f"The installed set failed verification ({failed[0].id}: {failed[0].summary}); the environment was restored to what it was before.",
                failed[0].fix or "compat doctor shows the details.", state="restored", findings=tuple(findings))
        discard(saved)
    return InstallResult(tuple(planned), tuple(findings), installer)


class _signals_interrupt:
    """SIGTERM / SIGHUP (a cancelled CI job, docker stop, a closed terminal) take the same path as Ctrl-C."""

    def __enter__(self):
        import signal

        self.saved = {}
        for number in (signal.SIGTERM, signal.SIGHUP):
            self.saved[number] = signal.signal(number, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        import signal

        for number, handler in self.saved.items():
            signal.signal(number, handler)


def verify(matrix: Matrix, snapshot: EnvSnapshot) -> list[Finding]:
    """The static package checks and an isolated import of each installed part of the stack."""
    context = Context(matrix, snapshot, Options())
    return run_checks(select(all_checks(), only=["packages", "imports"]), context)


def download(plan: InstallPlan, target: WheelTarget, folder: Path, python_for_pip: str, options: InstallOptions) -> list[Path]:
    """A wheelhouse: the planned wheels from their own hosts plus every dependency, for ``target``."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    with requests.Session() as session:
        preflight(session, plan, options)
        located = locate(session, plan, target)
        fetched = fetch(session, located, folder, options.require_hashes)
    platforms = [target.platform.tag] if not target.platform.tag.startswith(("linux_", "manylinux")) else [
        "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"]
    command = [python_for_pip, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(folder), "--only-binary", ":all:",
               "--python-version", f"{target.python.major}.{target.python.minor}", "--implementation", "cp",
               *[arg for p in platforms for arg in ("--platform", p)], "--index-url", plan.dependency_index.url,
               *[str(f.path) for f in fetched]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL, env=installer_env(python_for_pip), check=False)
    if done.returncode != 0:
        last = [line for line in done.stderr.strip().splitlines() if line.strip()][-3:]
        raise InstallError("pip could not download the dependencies: " + " | ".join(last), "Check the dependency index (--index pypi=URL).")
    files = sorted(folder.glob("*.whl"))
    write_wheelhouse_lock(folder, files)
    return files


def write_wheelhouse_lock(folder: Path, files: Sequence[Path]) -> None:
    """sha256 of every wheel, in `sha256sum` format: `compat install --offline` checks the folder against it
    (and `sha256sum -c compat-wheelhouse.lock` works too)."""
    from .indexes import WHEELHOUSE_LOCK
    from .runner import sha256_of

    lines = ["# written by compat download: the sha256 of every wheel in this folder"]
    lines += [f"{sha256_of(path)}  {path.name}" for path in files]
    (folder / WHEELHOUSE_LOCK).write_text("\n".join(lines) + "\n")


def check_wheelhouse(folder: Path, require: bool) -> None:
    """Every wheel in an offline wheelhouse matches the lock compat download wrote."""
    from .indexes import WHEELHOUSE_LOCK, read_wheelhouse_lock
    from .runner import sha256_of

    hashes = read_wheelhouse_lock(folder)
    if not hashes:
        if require:
            raise InstallError(f"{folder} has no {WHEELHOUSE_LOCK}; --require-hashes refuses an unverified wheelhouse. Nothing was changed.",
                               "Make the wheelhouse with compat download, which writes the lock.")
        return
    for path in sorted(folder.glob("*.whl")):
        expected = hashes.get(path.name)
        if expected is None or sha256_of(path) != expected:
            why = "is not in" if expected is None else "does not match"
            raise InstallError(f"{path.name} {why} the wheelhouse's {WHEELHOUSE_LOCK}; refused, nothing was changed.",
                               "The folder was changed after compat download: make it again.")


def pip_command_text(plan: InstallPlan) -> str:
    """The conventional one-line pip command for the plan (for Dockerfiles that do not run compat).

    It lists every host with --extra-index-url / -f, so pip may take a name from any of them: compat
    install avoids that by fetching each package from its own host."""
    args = ["pip", "install", "--index-url", plan.dependency_index.url]
    for location in dict.fromkeys(p.location for p in plan.packages if p.location.host_id != plan.dependency_index.host_id):
        args += ["-f", location.url] if location.style == "find-links" else ["--extra-index-url", location.url]
    args += [p.pin for p in plan.packages]
    return " ".join(_quote(a) for a in args)


def requirements_text(plan: InstallPlan, kind: str) -> str:
    """Pins for pip. No hashes: one hash line makes pip demand hashes for every dependency too, and the
    full closure is known only to an install or a download (compat download writes a hashed lock)."""
    lines = [f"# compat install plan: Python {plan.resolution.request.python.label}, {plan.resolution.request.platform.tag}"]
    if kind == "requirements":
        lines.append("# no --hash lines: pip would then need hashes for every dependency; compat download -d DIR writes them all")
    if kind == "requirements":
        lines.append(f"--index-url {plan.dependency_index.url}")
        for location in dict.fromkeys(p.location for p in plan.packages if p.location.host_id != plan.dependency_index.host_id):
            lines.append(f"{'--find-links' if location.style == 'find-links' else '--extra-index-url'} {location.url}")
    for package in plan.packages:
        lines.append(package.pin)
    return "\n".join(lines) + "\n"


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def offline_locations(locations: dict[str, IndexLocation], wheelhouse: Path) -> dict[str, IndexLocation]:
    url = str(wheelhouse.resolve())
    return {host_id: IndexLocation(host_id, url, "find-links", "--wheelhouse") for host_id in locations}


def describe_findings(findings: Sequence[Finding]) -> list[str]:
    return [f"{f.status.word} {f.id}: {f.summary}" for f in findings if f.status is not Status.SKIP]


def recover(snapshot: EnvSnapshot, restore_it: bool) -> str:
    """--restore / --discard-snapshot: deal with what an interrupted install left behind."""
    left = interrupted_install(Path(snapshot.purelib))
    if left is None:
        raise InstallError(f"No interrupted compat install was found for {snapshot.prefix}; nothing to do.", "")
    if restore_it:
        restore(left)
        return f"restored {snapshot.prefix} to the state before the interrupted install"
    discard(left)
    return f"kept {snapshot.prefix} as it is and removed the interrupted install's snapshot"
