"""The side effects of an install: fetch each planned wheel from its own host, ask pip what would change,
snapshot the environment, run the installer, restore on failure or interruption.

Why fetch the wheels ourselves: pip and uv take every index for every name (``--extra-index-url``), so
an index could shadow a name it does not own (dependency confusion). compat downloads each planned
package from the one host the plan assigns to it, checks its sha256 against that host's page, and
hands the installer local files plus the dependency index (PyPI or its mirror) for the rest.

Snapshot: before the installer runs, site-packages and the scripts folder are copied as hard links
(cheap even for a 7 GB environment). pip and uv never write into an existing file: they unlink it and
write a new one, so the hard-linked copy keeps the old contents. Restoring swaps the folders back.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TextIO

import requests
from packaging.version import InvalidVersion, Version

from ..errors import CompatError
from ..names import canonical_name
from ..processes import die_with_parent
from .indexes import IndexLocation, IndexUnreachable, Link, project_links
from .plan import InstallPlan, PlannedPackage, WheelTarget, pick_link

DOWNLOAD_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 3600.0
DRY_RUN_TIMEOUT_S = 900.0


class InstallError(CompatError):
    """The install was refused or failed; ``state`` says what the environment looks like now."""

    exit_code = 1

    def __init__(self, message: str, fix: str = "", state: str = "unchanged", findings: tuple = ()) -> None:
        super().__init__(message, fix)
        self.state = state
        self.findings = findings


@dataclass(frozen=True)
class FetchedWheel:
    package: PlannedPackage
    link: Link
    path: Path
    sha256: str
    hash_from_index: bool  # the host's page gave the hash we checked against


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate(session: requests.Session, plan: InstallPlan, target: WheelTarget) -> dict[PlannedPackage, Link]:
    """The wheel file of every planned package, on its own host only."""
    found = {}
    for package in plan.packages:
        try:
            links = project_links(session, package.location, package.distribution)
        except IndexUnreachable as exc:
            raise InstallError(
                f"{exc.url} ({package.location.host_id}, the host of {package.distribution}) cannot be reached ({exc.why}); nothing was changed.",
                f"Pass --index {package.location.host_id}=URL (or set COMPAT_INDEX_{package.location.host_id.upper().replace('-', '_')}) to use a mirror or a local folder of wheels.",
            ) from None
        link = pick_link(links, package.version, package.local_label, target, package.distribution)
        if link is None:
            offered = sorted({lk.filename for lk in links})[:6]
            raise InstallError(
                f"{package.location.url} has no wheel of {package.pin} for Python {target.python} on {target.platform.tag}; nothing was changed.",
                "Files there: " + (", ".join(offered) if offered else "none for this package") + ". Check the index, or the Python/platform you install for.",
            )
        found[package] = link
    return found


def fetch(session: requests.Session, located: Mapping[PlannedPackage, Link], folder: Path, require_hashes: bool) -> list[FetchedWheel]:
    """Download (or copy) each located wheel and check its sha256 before anything is installed."""
    fetched = []
    for package, link in located.items():
        if link.sha256 is None and require_hashes:
            raise InstallError(
                f"{package.location.url} gives no sha256 for {link.filename}; --require-hashes refuses it. Nothing was changed.",
                "Use an index that publishes hashes (PEP 503 #sha256= fragments), or drop --require-hashes.",
            )
        path = folder / link.filename
        if link.url.startswith("file://"):
            source = Path(requests.utils.unquote(link.url[len("file://"):]))
            shutil.copyfile(source, path)
        else:
            try:
                with session.get(link.url, stream=True, timeout=(10, DOWNLOAD_TIMEOUT_S)) as response:
                    if response.status_code != 200:
                        raise InstallError(f"Downloading {link.url} failed (HTTP {response.status_code}); nothing was changed.", "Check the index, or retry.")
                    with open(path, "wb") as out:
                        for chunk in response.iter_content(1 << 20):
                            out.write(chunk)
            except requests.RequestException as exc:
                raise InstallError(f"Downloading {link.url} failed ({exc.__class__.__name__}); nothing was changed.", "Check the network or the index, or retry.") from None
        actual = sha256_of(path)
        if link.sha256 is not None and actual != link.sha256:
            raise InstallError(
                f"{link.filename} from {package.location.url} does not match the sha256 its index publishes (expected {link.sha256[:16]}..., got {actual[:16]}...); refused, nothing was changed.",
                "The file was altered or the index is broken: do not install it. Report it to the index owner.",
            )
        fetched.append(FetchedWheel(package, link, path, actual, link.sha256 is not None))
    return fetched


_TRANSPORT_KEYS = ("cert", "client-cert", "proxy", "trusted-host", "timeout", "default-timeout", "retries")
_INDEX_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONFIG_FILE",
                    "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_NO_INDEX")


MIN_PIP = Version("22.2")  # install --dry-run --report


def _pip_version(argv: Sequence[str]) -> Optional[Version]:
    try:
        done = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    try:
        return Version(parts[1]) if done.returncode == 0 and len(parts) > 1 else None
    except InvalidVersion:
        return None


def pip_for(python: str) -> list[str]:
    """How to run a pip that can plan for ``python``: its own pip when new enough, else compat's own pip
    driving it (pip --python, pip >= 22.3). Checked before anything is downloaded."""
    own = _pip_version([python, "-m", "pip"])
    if own is not None and own >= MIN_PIP:
        return [python, "-m", "pip"]
    ours = _pip_version([sys.executable, "-m", "pip"])
    if ours is not None and ours >= Version("22.3"):
        probe = subprocess.run([sys.executable, "-m", "pip", "--python", python, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        if probe.returncode == 0:
            return [sys.executable, "-m", "pip", "--python", python]
    found = f"pip {own}" if own is not None else "no pip"
    raise InstallError(f"{python} has {found}, and compat needs pip >= {MIN_PIP} there to plan the install; nothing was changed.",
                       f"Run {python} -m ensurepip && {python} -m pip install -U pip, then run this again.")


def installer_env(python: str) -> dict[str, str]:
    """The environment pip/uv run with: no index from the user's configuration (an extra index there could
    shadow any name), but the transport settings kept (CA bundle, proxy, timeouts, trusted hosts)."""
    env = {k: v for k, v in os.environ.items() if k not in _INDEX_VARIABLES}
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        listing = done.stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1].strip()
        if name in _TRANSPORT_KEYS and value:
            variable = "PIP_" + name.upper().replace("-", "_")
            env.setdefault(variable, value.strip().strip("'\""))
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


@dataclass(frozen=True)
class ReportItem:
    name: str
    version: str
    url: str
    sha256: Optional[str]
    requested: bool


def pip_report(pip: Sequence[str], python: str, files: Sequence[Path], dependency_index: IndexLocation, offline_dir: Optional[Path]) -> list[ReportItem]:
    """What pip would install (the planned files and their missing dependencies), with hashes."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as out:
        report_path = out.name
    try:
        command = [*pip, "install", "--dry-run", "--quiet", "--disable-pip-version-check", "--report", report_path, *_index_args(dependency_index, offline_dir), *map(str, files)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S, stdin=subprocess.DEVNULL, env=installer_env(python), check=False)
        except subprocess.TimeoutExpired:
            raise InstallError(f"pip took longer than {DRY_RUN_TIMEOUT_S:.0f} s to resolve the dependencies; nothing was changed.", "Check the dependency index.") from None
        if done.returncode != 0:
            last = [line for line in done.stderr.strip().splitlines() if line.strip()][-3:]
            raise InstallError("pip cannot resolve the dependencies of the planned set, so nothing was changed (pip said: " + " | ".join(last) + ").",
                               "Check the dependency index (--index pypi=URL); compat resolve shows the planned set.")
        report = json.loads(Path(report_path).read_text() or "{}")
    finally:
        os.unlink(report_path)
    items = []
    for entry in report.get("install", []):
        metadata = entry.get("metadata", {})
        download = entry.get("download_info", {})
        hashes = (download.get("archive_info") or {}).get("hashes") or {}
        sha = hashes.get("sha256") or ((download.get("archive_info") or {}).get("hash", "").partition("sha256=")[2] or None)
        items.append(ReportItem(metadata.get("name", "?"), metadata.get("version", "?"), download.get("url", ""), sha, bool(entry.get("requested"))))
    return items


def _index_args(dependency_index: IndexLocation, offline_dir: Optional[Path]) -> list[str]:
    if offline_dir is not None:
        return ["--no-index", "--find-links", str(offline_dir)]
    if dependency_index.is_local:
        return ["--no-index", "--find-links", str(dependency_index.local_path)]
    return ["--index-url", dependency_index.url]


@dataclass(frozen=True)
class Change:
    name: str
    before: Optional[str]
    after: str

    @property
    def kind(self) -> str:
        if self.before is None:
            return "install"
        try:
            return "upgrade" if Version(self.after) > Version(self.before) else "downgrade" if Version(self.after) < Version(self.before) else "reinstall"
        except InvalidVersion:
            return "replace"


def changes(items: Sequence[ReportItem], installed: Mapping[str, str]) -> list[Change]:
    return [Change(item.name, installed.get(canonical_name(item.name)), item.version) for item in items]


def download_dependencies(pip: Sequence[str], python: str, items: Sequence[ReportItem], planned: Sequence[FetchedWheel], folder: Path, dependency_index: IndexLocation) -> None:
    """Put every dependency pip reported into ``folder`` (pip's own cache and hash checks apply)."""
    names = {canonical_name(f.package.distribution) for f in planned}
    wanted = [i for i in items if canonical_name(i.name) not in names]
    if not wanted:
        return
    requirements = folder / "compat-dependencies.txt"
    hashed = all(i.sha256 for i in wanted)
    requirements.write_text("".join(f"{i.name}=={i.version}" + (f" --hash=sha256:{i.sha256}" if hashed else "") + "\n" for i in wanted))
    command = [*pip, "download", "--no-deps", "--quiet", "--disable-pip-version-check", "--dest", str(folder), *_index_args(dependency_index, None), "-r", str(requirements)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S * 4, stdin=subprocess.DEVNULL, env=installer_env(python), check=False)
    except subprocess.TimeoutExpired:
        raise InstallError("Downloading the dependencies took too long; nothing was changed.", "Check the dependency index, or retry.") from None
    if done.returncode != 0:
        last = [line for line in done.stderr.strip().splitlines() if line.strip()][-2:]
        raise InstallError("Downloading the dependencies failed; nothing was changed: " + " | ".join(last), "Check the dependency index (--index pypi=URL).")


def write_lock(path: Path, fetched: Sequence[FetchedWheel], items: Sequence[ReportItem]) -> bool:
    """A requirements file naming exactly what will be installed, by name and version (so pip freeze
    reads as usual). Hashes on every line, or on none (pip checks all or nothing). Returns whether it
    carries hashes."""
    by_name = {canonical_name(f.package.distribution): f for f in fetched}
    entries: list[tuple[str, Optional[str]]] = []
    for item in items:
        wheel = by_name.get(canonical_name(item.name))
        entries.append((f"{item.name}=={item.version}", wheel.sha256 if wheel is not None else item.sha256))
    hashed = all(sha for _, sha in entries)
    path.write_text("".join((f"{req} --hash=sha256:{sha}" if hashed else req) + "\n" for req, sha in entries))
    return hashed


def uv_binary() -> Optional[str]:
    """uv on PATH, next to this interpreter, or the one the `uv` Python package ships."""
    found = shutil.which("uv")
    if found:
        return found
    beside = Path(sys.executable).parent / "uv"
    if beside.exists():
        return str(beside)
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


def installer_command(installer: str, pip: Sequence[str], python: str, lock: Path, folders: Sequence[Path], require_hashes: bool) -> list[str]:
    """Install exactly the lock, from local folders only (no index can step in at this point)."""
    links = [arg for folder in folders for arg in ("--find-links", str(folder))]
    if installer == "uv":
        uv = uv_binary()
        if uv is None:
            raise InstallError("uv is not installed; nothing was changed.", "pip install uv, or use --installer pip.")
        command = [uv, "pip", "install", "--no-config", "--python", python, "--no-deps", "--no-index", *links, "-r", str(lock)]
    else:
        command = [*pip, "install", "--no-deps", "--no-index", *links, "--disable-pip-version-check", "--no-input", "-r", str(lock)]
    return command + (["--require-hashes"] if require_hashes else [])


JOURNAL_NAME = ".compat-install-journal.json"


@dataclass(frozen=True)
class Snapshot:
    folders: tuple[tuple[Path, Path], ...]  # (live folder, hard-linked copy)
    root: Path
    journal: Path  # says an install is under way; outlives a compat that was killed
    pid: int = 0


def journal_path(purelib: Path) -> Path:
    return Path(purelib).resolve().parent / JOURNAL_NAME


def process_start(pid: int) -> Optional[str]:
    """The start time of a process (field 22 of /proc/PID/stat): a PID with another start time is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class EnvironmentLock:
    """One compat install at a time per environment (fcntl lock next to site-packages)."""

    def __init__(self, purelib: Path) -> None:
        self.path = Path(purelib).resolve().parent / ".compat-install.lock"
        self.handle: Optional[TextIO] = None

    def __enter__(self) -> "EnvironmentLock":
        import fcntl

        handle = open(self.path, "w")
        self.handle = handle
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise InstallError(f"Another compat install into {self.path.parent} is running; nothing was changed.", "Wait for it to finish, then run this again.") from None
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.close()


def take_snapshot(folders: Sequence[Path]) -> Snapshot:
    """Hard-link copies of ``folders`` next to them (same file system, so links work), and a journal."""
    pairs = []
    live = [Path(f) for f in dict.fromkeys(str(Path(f).resolve()) for f in folders) if Path(f).is_dir()]
    root = Path(tempfile.mkdtemp(prefix=".compat-snapshot-", dir=live[0].parent if live else None))
    try:
        for index, folder in enumerate(live):
            copy = root / f"{index}-{folder.name}"
            shutil.copytree(folder, copy, symlinks=True, copy_function=os.link)
            pairs.append((folder, copy))
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise InstallError(f"The environment cannot be snapshotted before installing ({exc}); nothing was changed.",
                           "compat needs site-packages and the scripts folder on one file system it can write to.") from None
    journal = journal_path(live[0]) if live else root / JOURNAL_NAME
    snapshot = Snapshot(tuple(pairs), root, journal, os.getpid())
    journal.write_text(json.dumps({"pid": snapshot.pid, "pid_start": process_start(snapshot.pid), "started": time.time(),
                                   "root": str(root), "folders": [[str(a), str(b)] for a, b in pairs]}))
    return snapshot


def interrupted_install(purelib: Path) -> Optional[Snapshot]:
    """The snapshot of an earlier install whose compat process is gone, if one was left behind."""
    path = journal_path(purelib)
    try:
        data = json.loads(path.read_text())
        pid = int(data["pid"])
        snapshot = Snapshot(tuple((Path(a), Path(b)) for a, b in data["folders"]), Path(data["root"]), path, pid)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    recorded = data.get("pid_start")
    alive = process_start(pid)
    if alive is not None and (recorded is None or alive == recorded) and pid != os.getpid():
        return None  # that install is still running
    return snapshot


def restore(snapshot: Snapshot) -> None:
    """Put the copies back in place of the live folders: every copy is checked first, trash is deleted
    last, and a failure half-way says exactly where each folder is."""
    missing = [str(copy) for _, copy in snapshot.folders if not copy.is_dir()]
    if missing:
        raise InstallError(f"The snapshot to restore is incomplete ({', '.join(missing)} is gone); the environment was left as it is.",
                           "Reinstall the environment, or run compat install --discard-snapshot to clear the journal.", state="unknown")
    trash = []
    for live, copy in snapshot.folders:
        moved = live.with_name(live.name + f".compat-trash-{os.getpid()}")
        try:
            os.rename(live, moved)
            try:
                os.rename(copy, live)
            except OSError:
                os.rename(moved, live)  # put the current one back
                raise
        except OSError as exc:
            raise InstallError(f"Restoring {live} failed ({exc.strerror}); the saved copy is at {copy}.",
                               f"Move it back by hand: rm -rf {live} && mv {copy} {live}", state="unknown") from None
        trash.append(moved)
    snapshot.journal.unlink(missing_ok=True)
    for moved in trash:
        shutil.rmtree(moved, ignore_errors=True)
    shutil.rmtree(snapshot.root, ignore_errors=True)


def discard(snapshot: Snapshot) -> None:
    shutil.rmtree(snapshot.root, ignore_errors=True)
    snapshot.journal.unlink(missing_ok=True)


def run_installer(command: Sequence[str], env: Mapping[str, str], timeout: float = INSTALL_TIMEOUT_S) -> tuple[int, str]:
    """Run the installer in its own process group, echoing its output; on timeout or Ctrl-C the whole
    group is killed. The deadline holds even when the installer prints nothing (a thread reads)."""
    import threading

    process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, env=dict(env), preexec_fn=die_with_parent)
    output: list[str] = []

    def forward() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            output.append(line)
            sys.stderr.write(line)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _kill_group(process)
        raise
    reader.join(timeout=30)
    return code, "".join(output)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=60)
