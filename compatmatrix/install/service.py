"""compat install / compat download / --print: the steps in order, each one able to stop with nothing changed.

install: refuse on a journal left by a killed install (or a journal that names foreign paths); clear orphan
snapshots; check the environment is writable; then the phases, each timed (progress.py): preflight (stage an offline
wheelhouse, locked files only; every host answers: checked in a thread beside the plan's page reads, and waited for
before anything is fetched); plan (fetch each planned wheel from its host, hash-checked; the
installer's plan of the dependencies, planners.py: uv pip compile or pip's dry-run; every dependency's hash checked
against its index); fetch (the dependencies); snapshot (transaction.py); install; verify; then commit. SIGINT, SIGTERM and SIGHUP
anywhere take the path of Ctrl-C: children killed, temp folders removed, the snapshot put back once it exists,
exit 130 (SIGINT) or 143 (SIGTERM, SIGHUP); the restore and the commit themselves hold signals until they are
done, and nothing untrusted (the journal, the manifest) is read while they are held.

The work folder (downloaded wheels) is ``compat-install-<pid>.<start>-*`` in the temp folder; one whose process
is gone (a SIGKILL) is deleted by the next install.

Side effects: network, temp folders, child processes, the target environment's folders (through the transaction).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import requests

from ..checks.registry import Context, Options, all_checks, run_checks, select
from ..console import plural
from ..environment.snapshot import EnvSnapshot, take_snapshot
from ..findings import Finding, Status
from ..matrix.model import Matrix
from ..names import canonical_name
from ..processes import Interruptions, Terminated, kill_children, run_bounded
from ..record import replace as replace_record
from .checkpoints import checkpoint
from .errors import InstallError, InstallInputError, InstallInterrupted
from .files import safe_write, sha256_of
from .indexes import IndexLocation, check_reachable, env_name
from .limits import limits
from .pipconfig import read_ahead
from .plan import InstallPlan, WheelTarget, glibc_of
from .planners import choose_planner, passthrough_args, pip_report, uv_report
from .progress import Progress, choose_display
from .runner import (
    ONLY_BINARY,
    Change,
    FetchedWheel,
    ReportItem,
    _index_args,
    changes,
    confirm_hashes,
    download_dependencies,
    fetch,
    fetch_dependencies,
    index_env,
    installer_command,
    installer_env,
    links_of,
    locate,
    pip_for,
    pip_starts,
    run_installer,
    same_version,
    uv_binary,
    uv_env,
    write_lock,
)
from .store import WheelStore
from .transaction import (
    EnvFolders,
    EnvironmentLock,
    Snapshot,
    already_restored,
    check_restorable,
    check_writable,
    commit,
    interrupted_install,
    orphan_snapshots,
    process_start,
    remove_tree,
    restore,
)
from .transaction import take_snapshot as snapshot_folders
from .trust import trusted_session
from .wheelhouse import stage
from .wheelhouse import write_lock as write_wheelhouse_lock

T = TypeVar("T")


def _stderr_line(line: str) -> None:
    from ..console import visible

    safe_write(sys.stderr, visible(line) + "\n")


@dataclass
class InstallOptions:
    yes: bool = False
    installer: str = "auto"  # pip, uv, auto (uv when on PATH, else pip)
    require_hashes: bool = False
    allow_unverified: bool = False  # install wheels whose index publishes no sha256 (never with require_hashes)
    offline_dir: Optional[Path] = None
    say: Callable[[str], None] = field(default=_stderr_line)
    planner: str = "auto"  # uv, pip, auto (the installer: uv when it can plan for the target, planners.choose_planner; else pip)
    display: str = "auto"  # progress.choose_display: auto (bars on a terminal, else lines through say), lines, bars, none
    remove: tuple[str, ...] = ()  # distributions uninstalled in the same transaction, after the installer (compat migrate)
    before_commit: Optional[Callable[[], Sequence[Finding]]] = None  # after the verification, before the commit: a FAIL restores
    # compat matrix verify's experiment: the planned wheels alone (pip --no-deps), and no verification (a pairing that
    # fails is what it records, so it must stay installed to be tried)
    dependencies: bool = True
    verify_installed: bool = True


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


def env_folders(snapshot: EnvSnapshot) -> EnvFolders:
    return EnvFolders.of_snapshot(snapshot)


WORK_PREFIX = "compat-install-"


def _work_prefix() -> str:
    """compat-install-<pid>.<start time>-: the next install can tell a work folder whose process is gone."""
    return f"{WORK_PREFIX}{os.getpid()}.{process_start(os.getpid()) or 0}-"


def clear_stale_work_folders(say: Callable[[str], None]) -> None:
    """Delete the work folders (downloaded wheels) of earlier installs that were killed: this user's, in the temp
    folder, named for a process that is gone (pid and start time)."""
    folder = Path(tempfile.gettempdir())
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(WORK_PREFIX):
            continue
        owner, _, _ = entry.name[len(WORK_PREFIX):].partition("-")
        pid, _, start = owner.partition(".")
        try:
            info = entry.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if not pid.isdigit():  # named by an older compat (no pid): only once it is a day old
            if time.time() - info.st_mtime < 24 * 3600:
                continue
        elif process_start(int(pid)) == start:
            continue  # that install is running
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            say(f"  removed {entry}: the work folder of an earlier install that was killed")


def _unreachable(host_id: str, location: IndexLocation, why: str) -> InstallError:
    """Preflight's sentence for a host that does not answer."""
    if why.startswith("it redirects"):
        return InstallError(f"{location.url} ({host_id}, from {location.origin}) is refused: {why}; nothing was changed.",
                            f"If that host is the right one, point --index {host_id}=URL at the final location instead.")
    fix = f"Pass --index {host_id}=URL (or set {env_name(host_id)}) to use a mirror or a local folder of wheels."
    if host_id == "pytorch-cpu":
        fix += " Or pass --torch-from-pypi to take PyPI's torch instead (the CUDA build: several GB more)."
    return InstallError(f"{location.url} ({host_id}, from {location.origin}) cannot be reached ({why}); nothing was changed.", fix)


def _hosts(plan: InstallPlan) -> dict[str, IndexLocation]:
    locations = {p.location.host_id: p.location for p in plan.packages}
    locations[plan.dependency_index.host_id] = plan.dependency_index
    return locations


def preflight(session: requests.Session, plan: InstallPlan, options: InstallOptions, on_host: Optional[Callable[[str], None]] = None,
              stop: Optional[Callable[[], None]] = None) -> None:
    """Every host the plan uses answers, before anything is touched (``on_host``, ``stop``: check_reachable's)."""
    if options.offline_dir is not None:
        return
    locations = _hosts(plan)
    problems = check_reachable(session, locations, list(locations), on_host=on_host, stop=stop)
    if not problems:
        return
    host_id, why = next(iter(problems.items()))
    raise _unreachable(host_id, locations[host_id], why)


class _Cancelled(Exception):
    """The main thread gave up on the preflight thread: it asks no further host."""


class Preflight:
    """preflight in a thread (preflight_beside): ``wait`` raises what it found, ``cancel`` ends it."""

    def __init__(self, session: requests.Session, plan: InstallPlan, options: InstallOptions) -> None:
        from .severable import Severable

        self.locations = _hosts(plan)
        prepare = getattr(session, "prepare_for", None)  # the TLS decision, made once here rather than in two threads at once
        if prepare is not None:
            for location in self.locations.values():
                prepare(location.url)
        sibling = getattr(session, "sibling", None)
        own = sibling() if sibling is not None else requests.Session()  # its own connections: never the plan's session
        own_prepare = getattr(own, "prepare_for", None)
        if own_prepare is not None:
            for location in self.locations.values():
                own_prepare(location.url)  # mounts its TLS adapter before its connections are tracked
        self._own = own
        self._severable = Severable(own)
        self._cancelled = threading.Event()
        self._failed: list[BaseException] = []
        self._current: list[tuple[str, float]] = []  # the host being checked, and since when (monotonic)
        self._started = time.monotonic()
        self._budget = limits().preflight_s
        self._thread = threading.Thread(target=self._run, args=(plan, options), daemon=True, name="compat-preflight")
        self._thread.start()

    def _on_host(self, host_id: str) -> None:
        if self._cancelled.is_set():
            raise _Cancelled()
        self._current.append((host_id, time.monotonic()))

    def _run(self, plan: InstallPlan, options: InstallOptions) -> None:
        try:
            preflight(self._own, plan, options, self._on_host, self._severable.sever)
        except _Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            self._failed.append(exc)
        finally:
            self._own.close()

    def wait(self) -> None:
        """Wait for the checks (each host within the preflight limit, counted from when the thread began asking it)
        and raise preflight's sentence for a host that did not answer."""
        while self._thread.is_alive():
            host_id, since = self._current[-1] if self._current else ("", self._started)
            left = since + self._budget + 1.0 - time.monotonic()  # the thread's own deadline ends it first; 1 s of slack
            if left <= 0:
                self.cancel()
                if not host_id:
                    raise InstallError(f"The hosts of the plan gave no complete answer within {self._budget:.0f} s; nothing was changed.",
                                       "Check the network, or pass --index HOST=URL (or set COMPAT_INDEX_<HOST>) to use a mirror or a local folder of wheels.")
                raise _unreachable(host_id, self.locations[host_id], f"no complete answer within {self._budget:.0f} s")
            self._thread.join(min(left, 0.5))
        if self._failed:
            raise self._failed[0]

    def cancel(self) -> None:
        """The thread asks no further host and its connections are shut down (it never touched the plan's session)."""
        self._cancelled.set()
        self._severable.sever(forever=True)


class _Offline:
    def wait(self) -> None:
        return None

    def cancel(self) -> None:
        return None


def preflight_beside(session: requests.Session, plan: InstallPlan, options: InstallOptions) -> "Preflight | _Offline":
    """preflight in a thread, with a session of its own, while the plan's first steps (reading the planned packages'
    pages, which touches nothing) go on; ``wait`` waits for it and raises what preflight raised, so a host that does
    not answer is still said as preflight says it, before anything is fetched. Off the main thread SIGALRM cannot
    bound a read: each host's read is bounded by shutting the thread's connections down (severable.py) at the
    preflight limit, counted from when that host was asked; ``cancel`` ends it (any failure of the main thread)."""
    if options.offline_dir is not None:
        return _Offline()
    return Preflight(session, plan, options)


def choose_installer(requested: str) -> str:
    if requested == "auto":
        return "uv" if uv_binary() else "pip"
    return requested


def _planner(requested: str, installer: str, target: WheelTarget) -> str:
    """Who plans the dependencies: by default the installer itself (uv when it can plan for the target, else pip)."""
    if requested == "auto":
        return choose_planner(target.python) if installer == "uv" else "pip"
    if requested == "uv" and uv_binary() is None:
        raise InstallError("uv is not installed, so it cannot plan the install; nothing was changed.", "pip install uv, or plan with pip (--planner pip).")
    return requested


def install(matrix: Matrix, plan: InstallPlan, snapshot: EnvSnapshot, options: InstallOptions) -> InstallResult:
    """Install ``plan`` into the environment of ``snapshot``: all of it, or (on any failure or interruption) none of it."""
    env = env_folders(snapshot)
    with Interruptions() as signals, EnvironmentLock(env):
        return _install(matrix, plan, snapshot, env, options, signals)


def _refuse_interrupted(env: EnvFolders, snapshot: EnvSnapshot) -> None:
    left = interrupted_install(env)
    if left is not None:
        raise InstallError(
            f"An earlier compat install into {snapshot.prefix} was stopped before it finished (process {left.pid} is gone); "
            "the environment may be half-installed. Nothing was changed.",
            f"Run compat install --restore --python {snapshot.executable} to put back the state from before it, "
            "or --discard-snapshot to keep the environment as it is now.",
        )


def _clear_orphans(env: EnvFolders, say: Callable[[str], None]) -> None:
    """Snapshots no journal refers to: a kill before the journal was written or after the commit point."""
    for orphan in orphan_snapshots(env):
        remove_tree(orphan, "cleanup")
        say(f"  removed {orphan.name}: a snapshot left by an earlier install that was killed (no journal refers to it)")


def _relocated(plan: InstallPlan, folder: Path) -> InstallPlan:
    """The plan with every host replaced by ``folder`` (the staged wheelhouse)."""
    def moved(location: IndexLocation) -> IndexLocation:
        return IndexLocation(location.host_id, str(folder), "find-links", "--wheelhouse")

    packages = tuple(dataclasses.replace(p, location=moved(p.location)) for p in plan.packages)
    return dataclasses.replace(plan, packages=packages, dependency_index=moved(plan.dependency_index))


def check_dependency_hashes(items: Sequence[ReportItem], fetched: Sequence[FetchedWheel], where: IndexLocation, options: InstallOptions) -> None:
    """Dependencies whose index publishes no sha256: refused with --require-hashes, or unless --allow-unverified."""
    planned = {canonical_name(f.package.distribution) for f in fetched}
    unverified = [i for i in items if not i.verified and canonical_name(i.name) not in planned]
    if not unverified:
        return
    names = ", ".join(f"{i.name} {i.version}" for i in unverified)
    if options.require_hashes:
        raise InstallError(f"No verified hash is known for {names} ({where.url} publishes no sha256 for them); --require-hashes refuses. Nothing was changed.",
                           "Use an index that publishes hashes, or drop --require-hashes.")
    if not options.allow_unverified:
        raise InstallError(f"{where.url} publishes no sha256 for {names}, so they cannot be checked; refused, nothing was changed.",
                           "Use a dependency index that publishes sha256 hashes (--index pypi=URL), or pass --allow-unverified to install them unchecked.")
    options.say(f"  unverified: {names} (no sha256 from {where.host_id}; --allow-unverified)")


def _install(matrix: Matrix, plan: InstallPlan, snapshot: EnvSnapshot, env: EnvFolders, options: InstallOptions, signals: Interruptions) -> InstallResult:
    say = options.say
    _refuse_interrupted(env, snapshot)
    _clear_orphans(env, say)
    check_writable(env)
    installer = choose_installer(options.installer)
    if installer == "pip" or not os.environ.get("PIP_CERT"):
        read_ahead()  # pip's configuration (pip's environment, the TLS decision): a pip start, read while the steps begin
    clear_stale_work_folders(say)
    progress = Progress(choose_display(options.display, say))
    with progress, trusted_session(say) as session, tempfile.TemporaryDirectory(prefix=_work_prefix()) as work:
        try:
            return _steps(matrix, plan, snapshot, env, options, signals, session, Path(work), installer, progress)
        finally:
            progress.finish()


def _own_pip(snapshot: EnvSnapshot, env: EnvFolders) -> Optional[str]:
    """The version of the pip an import finds in the environment, as its probe read it, when that pip is in the
    environment's own site-packages (pip runs without PYTHONPATH and the user site: installer_env); else None."""
    found = snapshot.get("pip")
    if found is None or not found.site or os.path.realpath(found.site) not in {str(env.purelib), str(env.platlib or env.purelib)}:
        return None
    return found.raw_version


def with_pip(pip: list[str], shortcut: bool, python: str, step: Callable[[list[str]], T], say: Callable[[str], None]) -> tuple[T, list[str]]:
    """``step(pip)``, and the pip it ran with. A pip taken on the probe's word (``shortcut``: pip_for's ``installed``)
    whose step fails and which does not start (intact metadata, broken modules) is replaced by the one pip_for finds by
    starting it (compat's own pip driving the environment, when the environment's is broken), and the step is run again."""
    try:
        return step(pip), pip
    except InstallError:
        if not shortcut or pip_starts(pip):
            raise
    replaced = pip_for(python)
    say(f"  the pip of {python} does not start; using {' '.join(replaced[:3])}{' ...' if len(replaced) > 3 else ''} instead")
    return step(replaced), replaced


def _store(installer: str, options: InstallOptions) -> Optional[WheelStore]:
    """The wheel store, for uv (which keeps a local wheel unpacked in its cache by the file's path); pip has no such
    cache, and gets every wheel fetched afresh into the work folder, as do offline installs."""
    if installer != "uv" or options.offline_dir is not None:
        return None
    store = WheelStore.open()
    if store is not None:
        store.prune()
    return store


def _steps(matrix: Matrix, plan: InstallPlan, snapshot: EnvSnapshot, env: EnvFolders, options: InstallOptions, signals: Interruptions,
           session: requests.Session, folder: Path, installer: str, progress: Progress) -> InstallResult:
    """The phases, each timed (progress): preflight (the planner and pip chosen, a wheelhouse staged, every host
    answers: preflight_beside, waited for in plan once the planned wheels are located), plan (the planned wheels
    located and fetched from their own hosts, the dependencies planned and their hashes checked against their index),
    fetch (the dependencies; each wheel's archive listed once, store wheels once for all installs), snapshot, install,
    verify (the environment probe and the import probe side by side: _verify_installed)."""
    say = options.say
    target = target_of(snapshot)
    folders = [folder]
    unlocked = False
    with progress.phase("preflight"):
        planner = _planner(options.planner, installer, target)
        own_pip = _own_pip(snapshot, env) if "pip" in (installer, planner) else None
        pip = pip_for(snapshot.executable, own_pip) if "pip" in (installer, planner) else []  # before anything is downloaded
        shortcut = own_pip is not None and pip[:1] == [snapshot.executable]  # the probe's word, not a pip start: with_pip
        store = _store(installer, options)
        if options.offline_dir is not None:
            staged = folder / "wheelhouse"
            hashes = stage(options.offline_dir, staged, options.allow_unverified, options.require_hashes, say)
            unlocked = not any(hashes.values())
            plan = _relocated(plan, staged)
            folders.append(staged)
        preflight_done = preflight_beside(session, plan, options)
    installed = snapshot.versions()
    with progress.phase("plan"):
        located = _locate(session, plan, target, preflight_done, say)
        fetched = fetch(session, located, folder, options.require_hashes, options.allow_unverified, say, store, progress)
        items, pip, shortcut = _report(planner, pip, shortcut, snapshot, fetched, plan, installed, folder, options)
        items = confirm_hashes(session, items, [canonical_name(f.package.distribution) for f in fetched], plan.dependency_index, target, planner, store)
        check_dependency_hashes(items, fetched, plan.dependency_index, options)
        if unlocked:
            say(f"  unverified: {options.offline_dir} has no lock; the {plural(len(items), 'wheel')} used from it {'is' if len(items) == 1 else 'are'} installed unchecked (--allow-unverified)")
        planned = _changes_said(items, installed, options)
    remove = tuple(n for n in options.remove if canonical_name(n) in installed)
    if not planned and not remove:
        say("  nothing to change: the planned set is installed")
        with progress.phase("verify"):
            findings = _verify_installed(matrix, snapshot.executable)
        return InstallResult((), tuple(findings), installer)
    with progress.phase("fetch"):
        if options.offline_dir is None:
            if installer == "uv":
                items = fetch_dependencies(session, items, fetched, plan.dependency_index, folder, store, progress)
            else:
                _, pip = with_pip(pip, shortcut, snapshot.executable,
                                  lambda p: download_dependencies(p, snapshot.executable, items, fetched, folder, plan.dependency_index), say)
        lock = folder / "compat-lock.txt"
        write_lock(lock, fetched, items)
        wanted = {canonical_name(i.name) for i in items}
        wheels = [f.path for f in fetched if canonical_name(f.package.distribution) in wanted] + [i.path for i in items if i.path is not None]
        folders = list(dict.fromkeys([*folders, *(p.parent for p in wheels)]))
        command = installer_command(installer, pip, snapshot.executable, lock, folders, options.require_hashes) if planned else None
        listed: dict[Path, Sequence[str]] = {}  # each wheel's .data names, its archive read once for both steps (or kept in the store)
        refuse_unsafe_wheels(env, snapshot, sorted({p for f in folders for p in f.glob("*.whl") if p.is_file()}), planned, remove, listed, store)
    uninstall = uninstall_command(installer, pip, snapshot.executable, remove) if remove else None
    with progress.phase("snapshot"):
        data = _data_folders(env, snapshot, folders, planned, say, remove, listed)
        saved = snapshot_folders(env, data)
    findings = _apply(saved, command, installer, matrix, snapshot, signals, say, progress, uninstall, options.before_commit, options.verify_installed,
                      expected_after(snapshot, planned, remove))
    return InstallResult(tuple(planned), tuple(findings), installer)


def _locate(session: requests.Session, plan: InstallPlan, target: Any, preflight_done: Any, say: Callable[[str], None]) -> dict:
    """The planned wheels located on their own hosts (each said), once preflight has answered: a host that does not
    answer is preflight's sentence, rather than locate's."""
    try:
        located = locate(session, plan, target)
    except InstallError:
        preflight_done.wait()  # a host that does not answer: preflight's sentence, rather than locate's
        raise
    except BaseException:
        preflight_done.cancel()
        raise
    preflight_done.wait()

    for package, link in located.items():
        say(f"  {package.pin:<45} from {package.location.host_id} ({link.filename})")
    return located


def _report(planner: str, pip: Sequence[str], shortcut: bool, snapshot: EnvSnapshot, fetched: Sequence[Any], plan: InstallPlan,
            installed: Mapping[str, str], folder: Path, options: InstallOptions) -> tuple[list[Any], Sequence[str], bool]:
    """The planner's report of what to install besides the planned wheels: (its items, the pip command, whether pip's
    start may still be skipped)."""
    if planner == "uv":
        uv = uv_binary() or "uv"
        items = uv_report(uv, snapshot.executable, fetched, plan.dependency_index, plan.passthrough, installed, folder, options.offline_dir is not None)
        return [i for i in items if not same_version(installed.get(canonical_name(i.name)), i.version)], pip, shortcut  # uv planned the whole closure
    items, pip = with_pip(pip, shortcut, snapshot.executable,
                          lambda p: pip_report(p, snapshot.executable, [f.path for f in fetched], plan.dependency_index, plan.passthrough, options.dependencies),
                          options.say)
    return items, pip, False  # it ran


def _changes_said(items: Sequence[Any], installed: Mapping[str, str], options: InstallOptions) -> list[Change]:
    """The changes the install makes, each said; InstallError if one replaces an installed version without --yes."""
    planned = changes(items, installed)
    replaced = [c for c in planned if c.before is not None and c.before != c.after]
    for change in planned:
        options.say(f"  {change.kind:<10} {change.name} {change.before + ' -> ' if change.before else ''}{change.after}")
    if replaced and not options.yes:
        listed = ", ".join(f"{c.name} {c.before} -> {c.after}" for c in replaced)
        raise InstallError(f"The install would replace {listed}; refused without --yes. Nothing was changed.", "Re-run with --yes to replace them.")
    return planned


def uninstall_command(installer: str, pip: Sequence[str], python: str, names: Sequence[str]) -> list[str]:
    if installer == "uv":
        return [uv_binary() or "uv", "pip", "uninstall", "--no-config", "--python", python, *names]
    return [*(pip or pip_for(python)), "uninstall", "--yes", "--disable-pip-version-check", *names]


def _replaced(snapshot: EnvSnapshot, planned: Sequence[Change], removed: Sequence[str]) -> list[tuple[Path, Path]]:
    """(dist-info, site) of the installed distributions the install replaces or removes."""
    names = {canonical_name(c.name) for c in planned if c.before is not None} | {canonical_name(n) for n in removed}
    return [(Path(d.path), Path(d.site)) for d in snapshot.distributions if d.canonical in names and d.path and d.site]


def refuse_unsafe_wheels(env: EnvFolders, snapshot: EnvSnapshot, wheels: Sequence[Path], planned: Sequence[Change], removed: Sequence[str] = (),
                         listed: Optional[dict[Path, Sequence[str]]] = None, store: Optional[WheelStore] = None) -> None:
    """Refuse, before anything is installed, a wheel that would write outside the install scheme or replace the
    interpreter or a file of the scripts folder that no distribution being replaced owns (install/wheelfiles.py).
    ``listed`` receives each wheel's .data names (for _data_folders: each archive is read once); a wheel of the
    ``store`` is read once for all installs (store.listing)."""
    from .datafiles import record_targets
    from .wheelfiles import read_listing, script_names_taken

    try:
        existing = [entry.name for entry in os.scandir(env.scripts)]
    except OSError:
        existing = []
    # a wheel of a distribution that is installed already (kept at its version, or reinstalled) replaces that
    # distribution's own scripts: they count as owned, as those of every distribution replaced or removed
    same = {canonical_name(wheel_name_of(w)) for w in wheels}
    installed = [(Path(d.path), Path(d.site)) for d in snapshot.distributions if d.canonical in same and d.path and d.site]
    owned = [t.name for dist_info, site in [*_replaced(snapshot, planned, removed), *installed] for t in record_targets(dist_info, site)
             if os.path.realpath(t.parent) == str(env.scripts)]
    interpreter = Path(snapshot.executable)
    taken = script_names_taken(existing, owned, {interpreter.name} | {e for e in existing if _same_file(env.scripts / e, interpreter)})
    for wheel in wheels:
        listing = (store.listing(wheel) if store is not None else None) or read_listing(wheel)
        if listing is None:
            continue  # no readable archive: the installer says what is wrong with it
        if listed is not None:
            listed[wheel] = listing.data
        refusals = listing.refusals(taken)
        if refusals:
            more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
            raise InstallError(f"The wheel {wheel.name} would write where no wheel may: {refusals[0]}{more}; refused before installing. Nothing was changed.",
                               "Do not install this wheel: pin another version of that package, or take it from an index you trust (--index HOST=URL).")


def wheel_name_of(wheel: Path) -> str:
    """The project name a wheel file's name gives (PEP 427: the part before the first '-')."""
    return wheel.name.split("-", 1)[0]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _data_folders(env: EnvFolders, snapshot: EnvSnapshot, folders: Sequence[Path], planned: Sequence[Change], say: Callable[[str], None],
                  removed: Sequence[str] = (), listed: Optional[dict[Path, Sequence[str]]] = None) -> tuple[Path, ...]:
    """The prefix's folders the wheels write data or header files into (or the replaced versions had files in):
    snapshotted with site-packages, so a restore puts them back too. What no snapshot can hold is said."""
    from .datafiles import install_targets

    wheels = sorted({p for f in folders for p in f.glob("*.whl") if p.is_file()})
    replaced = _replaced(snapshot, planned, removed)
    headers = (snapshot.raw.get("python") or {}).get("headers")
    found = install_targets(env, wheels, Path(headers) if headers else None, replaced, listed)
    for path in found.uncovered[:10]:
        say(f"  note: {path} is written or removed outside the folders compat snapshots; a restore would not put it back")
    return found.folders


class _Undo(Exception):
    """The installed set must not stay: put the snapshot back and say why."""

    def __init__(self, message: str, fix: str, findings: tuple = ()) -> None:
        super().__init__(message)
        self.message, self.fix, self.findings = message, fix, findings


def _installer_failed(installer: str, code: int, output: str, where: Path) -> _Undo:
    if "No space left on device" in output or "[Errno 28]" in output:
        return _Undo(f"{installer} ran out of disk space in {where} (No space left on device)", f"Free space on the disk of {where} (df -h {where}), then run this again.")
    return _Undo(f"{installer} " + (f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"), "See the installer's output above.")


def _apply(saved: Snapshot, command: Optional[Sequence[str]], installer: str, matrix: Matrix, snapshot: EnvSnapshot, signals: Interruptions,
           say: Callable[[str], None], progress: Progress, uninstall: Optional[Sequence[str]] = None,
           before_commit: Optional[Callable[[], Sequence[Finding]]] = None, verify_installed: bool = True,
           expected: Optional[EnvSnapshot] = None) -> list[Finding]:
    """Run the installer (and the uninstall), verify, validate; on failure or interruption put the snapshot back; else commit."""
    try:
        findings = _install_and_check(command, uninstall, installer, matrix, snapshot, say, progress, before_commit, verify_installed, expected)
    except _Undo as undo:
        _rollback(saved, signals)
        raise InstallError(f"{undo.message}; the environment was restored to what it was before.", undo.fix, state="restored", findings=undo.findings) from None
    except KeyboardInterrupt as exc:
        kill_children()  # what the verification started (its import probes run in sessions of their own)
        _rollback(saved, signals)
        terminated = isinstance(exc, Terminated)
        how = "terminated (SIGTERM/SIGHUP)" if terminated else "interrupted (SIGINT)"
        raise InstallInterrupted(f"The install was {how}: the installer and the verification were stopped and the environment was restored to what it was before.",
                                 "Run compat install again when ready.", terminated) from None
    except subprocess.TimeoutExpired as exc:
        _rollback(saved, signals)
        raise InstallError(f"{installer} did not finish within {exc.timeout:.0f} s and was stopped; the environment was restored to what it was before.",
                           "See the installer's output above.", state="restored") from None
    except Exception as exc:  # noqa: BLE001 - whatever failed, the half-installed set must not stay
        _rollback(saved, signals)
        raise InstallError(f"The install failed ({exc.__class__.__name__}: {str(exc)[:200]}); the environment was restored to what it was before.",
                           "See the output above.", state="restored") from None
    with signals.held(drop=True):
        gone = commit(saved)
    if not gone:
        say(f"  note: {saved.root} could not be deleted completely; the next compat install removes it")
    return findings


def _install_and_check(command: Optional[Sequence[str]], uninstall: Optional[Sequence[str]], installer: str, matrix: Matrix, snapshot: EnvSnapshot,
                       say: Callable[[str], None], progress: Progress, before_commit: Optional[Callable[[], Sequence[Finding]]],
                       verify_installed: bool, expected: Optional[EnvSnapshot]) -> list[Finding]:
    """_apply's steps before the commit: the installer (and the uninstall) run, the installed set verified and validated;
    _Undo for a step that failed (the caller puts the snapshot back)."""
    with progress.phase("install"):
        for step in (command, uninstall):
            if step is None:
                continue
            code, output = run_installer(step, (uv_env if installer == "uv" else installer_env)(snapshot.executable))
            if code != 0:
                raise _installer_failed(installer, code, output, Path(snapshot.purelib))
    findings = []
    if verify_installed:
        say("  verifying the installed set (the package checks and an isolated import of each part)")
        with progress.phase("verify"):
            findings = _verify_installed(matrix, snapshot.executable, expected)
    failed = [f for f in findings if f.status is Status.FAIL]
    if failed:
        raise _Undo(f"The installed set failed verification ({failed[0].id}: {failed[0].summary})", failed[0].fix or "compat doctor shows the details.", tuple(findings))
    if before_commit is not None:
        with progress.phase("validate"):
            validation = list(before_commit())
        findings = findings + validation
        failed = [f for f in validation if f.status is Status.FAIL]
        if failed:
            raise _Undo(f"The installed set failed its validation ({failed[0].id}: {failed[0].summary})", failed[0].fix or "compat doctor --live shows the details.",
                        tuple(findings))
    return findings


def _rollback(saved: Snapshot, signals: Interruptions) -> None:
    """Put the snapshot back, a second Ctrl-C notwithstanding. The manifest it checks first was written by this
    process moments ago and is read with files.read_small, which cannot block (no FIFO, at most 16 MiB)."""
    with signals.held(drop=True):
        restore(saved)


def _verify_installed(matrix: Matrix, executable: str, expected: Optional[EnvSnapshot] = None) -> list[Finding]:
    """The installed set read again (the environment probe) and judged (verify). With ``expected`` (the set the plan
    makes), the import probe of the parts that set has runs beside the environment probe, two children at once;
    its results count only when the set read back asks for exactly those parts, else the checks probe as ever."""
    checkpoint("verify")
    if expected is None or expected.get("torch") is None:
        after = take_snapshot(executable)
        checkpoint("verify")
        findings = verify(matrix, after)
        checkpoint("verify")
        return findings
    from ..checks.imports import COMBINED, probe_stack, shared_parts

    checks = select(all_checks(), only=["packages", "imports"])
    selected = frozenset(c.id for c in checks)
    parts = shared_parts(Context(matrix, expected, Options(), selected=selected))
    read: list[EnvSnapshot] = []
    failed: list[BaseException] = []

    def read_back() -> None:
        try:
            read.append(take_snapshot(executable))
        except BaseException as exc:  # noqa: BLE001 - raised in the main thread
            failed.append(exc)

    reader = threading.Thread(target=read_back, daemon=True, name="compat-verify-probe")
    reader.start()
    results = probe_stack(executable, parts, Options().import_timeout)
    reader.join()
    if failed:
        raise failed[0]
    checkpoint("verify")
    context = Context(matrix, read[0], Options())
    if shared_parts(replace_record(context, selected=selected)) == parts:
        context.cache[COMBINED] = results
    findings = run_checks(checks, context)
    checkpoint("verify")
    return findings


def expected_after(snapshot: EnvSnapshot, planned: Sequence[Change], removed: Sequence[str]) -> EnvSnapshot:
    """The environment as the plan leaves it, by name and version only (which parts verify's import probe takes)."""
    from ..environment.snapshot import Distribution

    gone = {canonical_name(n) for n in removed}
    new = {canonical_name(c.name): c for c in planned}
    kept = [replace_record(d, raw_version=new[d.canonical].after) if d.canonical in new else d for d in snapshot.distributions if d.canonical not in gone]
    present = {d.canonical for d in kept}
    added = [Distribution(c.name, name, c.after, "", "") for name, c in new.items() if name not in present]
    return replace_record(snapshot, distributions=tuple(kept + added))


def verify(matrix: Matrix, snapshot: EnvSnapshot) -> list[Finding]:
    """The static package checks and the import probe: one child imports the installed parts of the stack in turn,
    torch once (checks/imports.py; a part after one that fails is tried in a child of its own)."""
    context = Context(matrix, snapshot, Options())
    return run_checks(select(all_checks(), only=["packages", "imports"]), context)


def _prepare_dest(folder: Path) -> None:
    from ..errors import shown

    name = shown(str(folder), 120)
    try:
        if folder.exists() and not folder.is_dir():
            raise InstallInputError(f"{name} is a file, not a folder; nothing was downloaded.", "Pass -d a folder (it is created if missing).")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InstallInputError(f"The folder {name} cannot be created ({exc.strerror}); nothing was downloaded.", "Pass -d a folder you can write to (with a shorter name, if it is too long).") from None


def download(plan: InstallPlan, target: WheelTarget, folder: Path, python_for_pip: str, options: InstallOptions) -> list[Path]:
    """A wheelhouse: the planned wheels from their own hosts plus every dependency, for ``target``, and its lock."""
    _prepare_dest(folder)
    with Interruptions(), trusted_session(options.say) as session:
        preflight(session, plan, options)
        located = locate(session, plan, target)
        fetched = fetch(session, located, folder, options.require_hashes, options.allow_unverified, options.say, None, Progress(choose_display("lines", options.say)))
        platforms = [target.platform.tag] if not target.platform.tag.startswith(("linux_", "manylinux")) else [
            "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"]
        index_args = _index_args(plan.dependency_index)  # an index URL with credentials goes by index_env, not on the command line
        seconds = limits().pip_s
        try:
            with passthrough_args(plan.passthrough) as requirements:  # a pass-through line may hold a token: a file, not argv
                command = [python_for_pip, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-input", "--dest", str(folder), *ONLY_BINARY,
                           "--python-version", f"{target.python.major}.{target.python.minor}", "--implementation", "cp",
                           *[arg for p in platforms for arg in ("--platform", p)], *index_args, *[str(f.path) for f in fetched], *requirements]
                done = run_bounded(command, timeout=seconds, env={**installer_env(python_for_pip), **index_env(plan.dependency_index)})
        except subprocess.TimeoutExpired:
            raise InstallError(f"pip did not finish downloading the dependencies within {seconds:.0f} s; no lock was written.", "Check the dependency index (--index pypi=URL), or retry.") from None
        if done.returncode != 0:
            last = [line for line in done.stderr.strip().splitlines() if line.strip()][-3:]
            raise InstallError("pip could not download the dependencies: " + " | ".join(last), "Check the dependency index (--index pypi=URL).")
        files = sorted(p for p in folder.glob("*.whl") if p.is_file())
        _confirm_wheelhouse(session, plan, files, fetched, options)
    write_wheelhouse_lock(folder, files, {f.path.name: f.sha256 for f in fetched})
    return files


def _confirm_wheelhouse(session: requests.Session, plan: InstallPlan, files: Sequence[Path], fetched: Sequence[FetchedWheel], options: InstallOptions) -> None:
    """Each dependency pip downloaded matches the sha256 its index publishes (unpublished: the same policy as install)."""
    ours = {f.path.name for f in fetched}
    index = plan.dependency_index
    pages: dict[str, dict[str, str]] = {}
    unverified = []
    for path in files:
        if path.name in ours:
            continue
        project = canonical_name(path.name.split("-", 1)[0])
        if project not in pages:
            pages[project] = {link.filename: link.sha256 or "" for link in links_of(session, index, project, project)}
        published = pages[project].get(path.name) or None
        if published is None:
            unverified.append(path.name)
        elif sha256_of(path) != published:
            raise InstallError(f"{path.name} does not match the sha256 {index.url} publishes; refused, no lock was written.",
                               "The file was altered or the index is broken: delete it and download again.")
    if not unverified:
        return
    listed = ", ".join(unverified)
    if options.require_hashes or not options.allow_unverified:
        raise InstallError(f"{index.url} publishes no sha256 for {listed}; refused, no lock was written.",
                           "Use a dependency index that publishes sha256 hashes (--index pypi=URL)" + ("." if options.require_hashes else ", or pass --allow-unverified."))
    options.say(f"  unverified: {listed} (no sha256 from {index.host_id}; --allow-unverified)")


def pip_command_text(plan: InstallPlan) -> str:
    """The one-line pip command of the plan: render/requirements.py writes it (kept here for callers of this module)."""
    from ..render.requirements import pip_command_text as text

    return text(plan)


def requirements_text(plan: InstallPlan, kind: str) -> str:
    """The plan as a requirements or constraints file: render/requirements.py writes it (kept here for callers of this module)."""
    from ..render.requirements import requirements_text as text

    return text(plan, kind)


def offline_locations(locations: dict[str, IndexLocation], wheelhouse: Path) -> dict[str, IndexLocation]:
    url = str(wheelhouse.resolve())
    return {host_id: IndexLocation(host_id, url, "find-links", "--wheelhouse") for host_id in locations}


def describe_findings(findings: Sequence[Finding]) -> list[str]:
    return [f"{f.status.word} {f.id}: {f.summary}" for f in findings if f.status is not Status.SKIP]


def recover(snapshot: EnvSnapshot, restore_it: bool) -> str:
    """--restore / --discard-snapshot: deal with what an interrupted install left behind."""
    return recover_env(env_folders(snapshot), snapshot.prefix, restore_it)


def recover_env(env: EnvFolders, prefix: str, restore_it: bool) -> str:
    """--restore / --discard-snapshot for ``env``. The journal and the manifest (untrusted) are read and checked
    before any signal is held; then the restore or the deletion holds signals until it is done (it resumes if it
    was killed), and a signal that came meanwhile ends compat with 130 / 143 once it is."""
    with Interruptions() as signals, EnvironmentLock(env):
        left = interrupted_install(env)
        if left is None:
            orphans = orphan_snapshots(env)
            done = restore_it and bool(orphans) and all(already_restored(env, orphan) for orphan in orphans)
            for orphan in orphans:
                remove_tree(orphan, "cleanup")
            if done:
                return f"{prefix} is already restored to the state before the interrupted install (an earlier --restore was stopped while deleting its snapshot, which is now removed)"
            raise InstallError(f"No interrupted compat install was found for {prefix}; nothing to do.", "")
        listings = check_restorable(left) if restore_it else None
        try:
            with signals.held():
                if restore_it:
                    restore(left, listings)
                else:
                    commit(left, "discard")
        except KeyboardInterrupt as exc:
            what = "restored to the state before the interrupted install" if restore_it else "kept as it is (the interrupted install's snapshot was removed)"
            raise InstallInterrupted(f"compat was {'terminated' if isinstance(exc, Terminated) else 'interrupted'} during --{'restore' if restore_it else 'discard-snapshot'}, "
                                     f"which it finished first: {prefix} was {what}.", "", isinstance(exc, Terminated)) from None
        if restore_it:
            return f"restored {prefix} to the state before the interrupted install"
        return f"kept {prefix} as it is and removed the interrupted install's snapshot"


def recover_without_interpreter(python: str, restore_it: bool) -> str:
    """--restore / --discard-snapshot when ``python`` is gone (a kill between the two renames of a restore, on a
    file system without RENAME_EXCHANGE, leaves the scripts folder missing): the environment is found from the
    path (PREFIX/bin/python -> PREFIX) and the journal next to its site-packages, without running anything.
    The folders come from the journal, each checked to be of that layout (PREFIX/lib*/pythonX.Y/site-packages,
    the folder of ``python``, folders directly in PREFIX)."""
    from .transaction import JOURNAL_NAME, read_journal

    given = Path(os.path.abspath(python))
    scripts, prefix = given.parent, given.parent.parent
    fix = f"Pass --python the interpreter of the environment (it is missing: {given})."
    journals = sorted({Path(os.path.realpath(p)) for p in prefix.glob(f"lib*/python*/{JOURNAL_NAME}")})  # lib64 is often a link to lib
    if len(journals) != 1:
        raise InstallInputError(f"{given} does not exist, and no interrupted compat install was found in {prefix} (no journal next to its site-packages); nothing was changed.", fix)
    journal = journals[0]
    data = read_journal(journal)
    recorded = (data.get("env") or {}) if isinstance(data, dict) else {}
    purelib = journal.parent / "site-packages"
    platlib = None
    if isinstance(recorded, dict) and isinstance(recorded.get("platlib"), str) and recorded["platlib"]:
        candidate = Path(recorded["platlib"])
        if candidate.name == "site-packages" and candidate.parent.parent.parent == Path(os.path.realpath(prefix)) and candidate.parent.parent.name.startswith("lib"):
            platlib = str(candidate)
    data_root = str(prefix) if isinstance(recorded, dict) and recorded.get("data") == os.path.realpath(prefix) else None
    env = EnvFolders.of(str(prefix), str(purelib), str(scripts), platlib, data_root)
    return recover_env(env, str(prefix), restore_it)
