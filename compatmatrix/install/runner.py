"""The side effects of an install other than the transaction (transaction.py): fetch each planned wheel from
its own host, ask pip what would change, check every dependency's hash against its index, download the
dependencies, run the installer.

Why fetch the wheels ourselves: pip and uv take every index for every name (``--extra-index-url``), so
an index could shadow a name it does not own (dependency confusion). compat downloads each planned
package from the one host the plan assigns to it, checks its sha256 against that host's page, and hands
the installer local files only.

Every child (pip, uv) runs in a process group of its own with PR_SET_PDEATHSIG and a deadline
(processes.run_bounded); every network read runs under an overall deadline and a size cap (limits.py);
pip and uv see no setting of the user's that changes where or what they install (installer_env); every
pip call is --only-binary :all: (no build backend ever runs).

Side effects: network (the hosts of the plan), files in the work folder, child processes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import requests
from packaging.version import InvalidVersion, Version

from ..names import canonical_name
from ..processes import die_with_parent, kill_group, run_bounded
from .checkpoints import checkpoint
from .errors import InstallError, InstallInputError
from .files import NotRegular, copy_hashing, disk_full, no_space, open_regular, read_chunks, refuse_not_regular, safe_write, sha256_of
from .indexes import CrossHostRedirect, IndexLocation, IndexRefused, IndexUnreachable, Link, get_following, project_links
from .limits import DeadlineExceeded, Limits, deadline, limits, mib
from .plan import InstallPlan, PlannedPackage, WheelTarget, pick_link
from .trust import give_pip

__all__ = ["InstallError", "InstallInputError", "sha256_of"]  # re-exported for callers of the old module

ONLY_BINARY = ["--only-binary", ":all:"]
POLL_S = 0.05
Say = Callable[[str], None]


@dataclass(frozen=True)
class FetchedWheel:
    package: PlannedPackage
    link: Link
    path: Path
    sha256: str
    hash_from_index: bool  # the host's page (or the folder's lock) gave the hash we checked against


def _host_fix(location: IndexLocation) -> str:
    return f"Pass --index {location.host_id}=URL (or set COMPAT_INDEX_{location.host_id.upper().replace('-', '_')}) to use a mirror or a local folder of wheels."


def links_of(session: requests.Session, location: IndexLocation, project: str, whose: str) -> list[Link]:
    """project_links with its failures as one sentence each."""
    try:
        return project_links(session, location, project)
    except CrossHostRedirect as exc:
        raise InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) is refused: {exc.why}; nothing was changed.",
                           _redirect_fix(location.host_id, exc.target)) from None
    except IndexRefused as exc:
        raise InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) is refused: {exc.why}; nothing was changed.",
                           "Check the index (that is not a package index page compat can use), or use a mirror: " + _host_fix(location)) from None
    except IndexUnreachable as exc:
        raise InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) cannot be reached ({exc.why}); nothing was changed.", _host_fix(location)) from None


def _redirect_fix(host_id: str, target: str) -> str:
    return f"If that host is the right one, point --index {host_id}=URL at the final location ({target}) instead."


def locate(session: requests.Session, plan: InstallPlan, target: WheelTarget) -> dict[PlannedPackage, Link]:
    """The wheel file of every planned package, on its own host only."""
    found = {}
    for package in plan.packages:
        checkpoint("plan")
        links = links_of(session, package.location, package.distribution, package.distribution)
        link = pick_link(links, package.version, package.local_label, target, package.distribution)
        if link is None:
            offered = sorted({lk.filename for lk in links})[:6]
            raise InstallError(
                f"{package.location.url} has no wheel of {package.pin} for Python {target.python} on {target.platform.tag}; nothing was changed.",
                "Files there: " + (", ".join(offered) if offered else "none for this package") + ". Check the index, or the Python/platform you install for.",
            )
        found[package] = link
    return found


def _unhashed(package: PlannedPackage, link: Link) -> str:
    where = package.location.url
    if package.location.is_local:
        return f"{where} gives no sha256 for {link.filename} (it has no compat-wheelhouse.lock)"
    if link.other_hash:
        return f"{where} publishes only an {link.other_hash} for {link.filename}, no sha256"
    return f"{where} publishes no sha256 for {link.filename}"


def check_unverified(package: PlannedPackage, link: Link, require_hashes: bool, allow_unverified: bool, say: Say) -> None:
    """A wheel without a published sha256: refused with --require-hashes, or unless --allow-unverified."""
    if link.sha256 is not None:
        return
    what = _unhashed(package, link)
    if require_hashes:
        raise InstallError(f"{what}; --require-hashes refuses it. Nothing was changed.", "Use an index that publishes sha256 hashes (PEP 503 #sha256= fragments).")
    if not allow_unverified:
        raise InstallError(f"{what}, so it cannot be checked; refused, nothing was changed.",
                           "Use an index that publishes sha256 hashes (PEP 503 #sha256= fragments), or pass --allow-unverified to install it unchecked.")
    say(f"  unverified: {link.filename} (no sha256 from {package.location.host_id}; --allow-unverified)")


def fetch(session: requests.Session, located: Mapping[PlannedPackage, Link], folder: Path, require_hashes: bool,
          allow_unverified: bool = False, say: Say = lambda line: None) -> list[FetchedWheel]:
    """Download (or copy) each located wheel and check its sha256 before anything is installed."""
    fetched = []
    lim = limits()
    for package, link in located.items():
        checkpoint("fetch")
        check_unverified(package, link, require_hashes, allow_unverified, say)
        path = folder / link.filename
        part = folder / f".part-{link.filename}"
        try:
            if link.url.startswith("file:"):
                actual = _copy_local(link, package, part, lim)
            else:
                actual = _download(session, link, part, lim, package.location.host_id)
            os.replace(part, path)
        except OSError as exc:
            part.unlink(missing_ok=True)
            if no_space(exc):
                raise disk_full(folder, f"downloading {link.filename}") from None
            raise InstallError(f"{link.filename} cannot be written to {folder} ({exc.strerror}); nothing was changed.", "Check that folder (or TMPDIR).") from None
        if link.sha256 is not None and actual != link.sha256:
            path.unlink(missing_ok=True)
            raise InstallError(
                f"{link.filename} from {package.location.url} does not match the sha256 its index publishes (expected {link.sha256[:16]}..., got {actual[:16]}...); refused, nothing was changed.",
                "The file was altered or the index is broken: do not install it. Report it to the index owner.",
            )
        fetched.append(FetchedWheel(package, link, path, actual, link.sha256 is not None))
    return fetched


def _copy_local(link: Link, package: PlannedPackage, part: Path, lim: Limits) -> str:
    source = Path(urllib.parse.unquote(urllib.parse.urlparse(link.url).path))
    try:
        with open_regular(source) as handle:
            actual, _ = copy_hashing(read_chunks(handle), part, lim.wheel_bytes, lambda: checkpoint("fetch"))
    except NotRegular as exc:
        raise refuse_not_regular(exc, f"from {package.location.host_id}") from None
    except OverflowError:
        raise InstallError(f"{source} is larger than {mib(lim.wheel_bytes)} (the wheel size cap); refused, nothing was changed.", "Check that folder.") from None
    return actual


def _download(session: requests.Session, link: Link, part: Path, lim: Limits, host_id: str = "HOST") -> str:
    """One wheel over HTTP: an overall deadline, the size cap, never more than its Content-Length; redirects
    followed on the same host only."""
    try:
        with deadline(lim.download_s), get_following(session, link.url, (10, lim.read_s)) as response:
            if response.status_code != 200:
                raise InstallError(f"Downloading {link.url} failed (HTTP {response.status_code}); nothing was changed.", "Check the index, or retry.")
            cap = lim.wheel_bytes
            length = response.headers.get("Content-Length", "")
            if length.isdigit():
                if int(length) > cap:
                    raise OverflowError(int(length))
                cap = int(length)
            actual, _ = copy_hashing(response.iter_content(1 << 20), part, cap, lambda: checkpoint("fetch"))
            return actual
    except OverflowError:
        raise InstallError(f"{link.url} is larger than {mib(lim.wheel_bytes)} (the wheel size cap) or than the size it announced; refused, nothing was changed.",
                           "Check the index: a wheel that size is not what the plan expects.") from None
    except DeadlineExceeded as exc:
        raise InstallError(f"Downloading {link.url} did not finish within {exc.seconds:.0f} s (the server is too slow); nothing was changed.",
                           "Check the network or the index (--index HOST=URL for a mirror), or retry.") from None
    except CrossHostRedirect as exc:
        raise InstallError(f"Downloading {link.url} is refused: {exc.why}; nothing was changed.", _redirect_fix(host_id, exc.target)) from None
    except IndexRefused as exc:
        raise InstallError(f"Downloading {link.url} is refused: {exc.why}; nothing was changed.", "Check the index, or use a mirror (--index HOST=URL).") from None
    except requests.RequestException as exc:
        raise InstallError(f"Downloading {link.url} failed ({exc.__class__.__name__}); nothing was changed.", "Check the network or the index, or retry.") from None


# the environment pip and uv run with

_KEEP_PIP = frozenset({"PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_TRUSTED_HOST", "PIP_TIMEOUT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES",
                       "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"})
_KEEP_UV = frozenset({"UV_CACHE_DIR", "UV_NO_CACHE", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_REQUEST_TIMEOUT", "UV_HTTP_RETRIES",
                      "UV_CONCURRENT_DOWNLOADS", "UV_CONCURRENT_INSTALLS", "UV_INSECURE_HOST", "UV_NO_PROGRESS"})
_DROP = frozenset({"PYTHONPATH", "PYTHONUSERBASE", "PYTHONSTARTUP"})
_TRANSPORT_KEYS = ("cert", "client-cert", "proxy", "trusted-host", "timeout", "default-timeout", "retries")


def _kept(name: str) -> bool:
    if name.startswith("PIP_"):
        return name in _KEEP_PIP
    if name.startswith("UV_"):
        return name in _KEEP_UV
    return name not in _DROP


@functools.lru_cache(maxsize=1)
def _configured_transport() -> tuple[tuple[str, str], ...]:
    """The transport settings of the user's pip configuration (CA bundle, proxy, timeouts, trusted hosts)."""
    try:
        listing = run_bounded([sys.executable, "-m", "pip", "config", "list"], timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    found = []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1].strip()
        if name in _TRANSPORT_KEYS and value:
            found.append(("PIP_" + name.upper().replace("-", "_"), value.strip().strip("'\"")))
    return tuple(found)


def installer_env(python: str) -> dict[str, str]:
    """The environment pip/uv run with: the transport settings of the user's (CA bundle, proxy, timeouts, trusted
    hosts, cache), and nothing that changes where or what they install (PIP_USER, PIP_TARGET, PIP_PREFIX,
    PIP_ROOT, an extra index, PIP_CONFIG_FILE, PYTHONPATH, UV_LINK_MODE, ...): only an allowlist of PIP_* and
    UV_* variables passes, no configuration file is read, and the user site does not count as installed."""
    env = {k: v for k, v in os.environ.items() if _kept(k)}
    for variable, value in _configured_transport():
        env.setdefault(variable, value)
    give_pip(env)  # the CA bundle compat's own requests use (trust.py): PIP_CERT, nothing that outranks it inside pip
    env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no configuration file at all (global, user, site)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    return env


MIN_PIP = Version("22.2")  # install --dry-run --report


def _pip_version(argv: Sequence[str]) -> Optional[Version]:
    try:
        done = run_bounded([*argv, "--version"], timeout=60, env=installer_env(""))
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
    checkpoint("plan")
    own = _pip_version([python, "-m", "pip"])
    if own is not None and own >= MIN_PIP:
        return [python, "-m", "pip"]
    ours = _pip_version([sys.executable, "-m", "pip"])
    if ours is not None and ours >= Version("22.3"):
        try:
            probe = run_bounded([sys.executable, "-m", "pip", "--python", python, "--version"], timeout=60, env=installer_env(python))
        except subprocess.TimeoutExpired:
            probe = None
        if probe is not None and probe.returncode == 0:
            return [sys.executable, "-m", "pip", "--python", python]
    found = f"pip {own}" if own is not None else "no pip"
    raise InstallError(f"{python} has {found}, and compat needs pip >= {MIN_PIP} there to plan the install; nothing was changed.",
                       f"Run {python} -m ensurepip && {python} -m pip install -U pip, then run this again.")


@dataclass(frozen=True)
class ReportItem:
    name: str
    version: str
    url: str
    sha256: Optional[str]  # as pip reports it (pip computes one when the index gives none)
    requested: bool
    verified: bool = False  # the index (or the folder's lock) publishes this sha256


def _last_lines(text: str, count: int) -> str:
    return " | ".join([line for line in text.strip().splitlines() if line.strip()][-count:])


def pip_report(pip: Sequence[str], python: str, files: Sequence[Path], dependency_index: IndexLocation, passthrough: Sequence[str] = ()) -> list[ReportItem]:
    """What pip would install (the planned files, the pass-through requirements and their missing dependencies), with hashes."""
    checkpoint("plan")
    seconds = limits().pip_s
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as out:
        report_path = out.name
    try:
        command = [*pip, "install", "--dry-run", "--quiet", "--disable-pip-version-check", *ONLY_BINARY, "--report", report_path,
                   *_index_args(dependency_index), *map(str, files), *passthrough]
        try:
            done = run_bounded(command, timeout=seconds, env=installer_env(python))
        except subprocess.TimeoutExpired:
            raise InstallError(f"pip did not finish planning the dependencies within {seconds:.0f} s (a slow or stuck index); nothing was changed.",
                               "Check the dependency index (--index pypi=URL), or retry.") from None
        if done.returncode != 0:
            raise InstallError("pip cannot resolve the dependencies of the planned set, so nothing was changed (pip said: " + _last_lines(done.stderr, 3) + ").",
                               "Check the dependency index (--index pypi=URL); compat resolve shows the planned set.")
        report = json.loads(Path(report_path).read_text() or "{}")
    finally:
        os.unlink(report_path)
    checkpoint("plan")
    items = []
    for entry in report.get("install", []):
        metadata = entry.get("metadata", {})
        download = entry.get("download_info", {})
        archive = download.get("archive_info") or {}
        sha = (archive.get("hashes") or {}).get("sha256") or (archive.get("hash", "").partition("sha256=")[2] or None)
        items.append(ReportItem(metadata.get("name", "?"), metadata.get("version", "?"), download.get("url", ""), sha.lower() if sha else None,
                                bool(entry.get("requested"))))
    return items


def _index_args(dependency_index: IndexLocation) -> list[str]:
    if dependency_index.is_local:
        return ["--no-index", "--find-links", str(dependency_index.local_path)]
    return ["--index-url", dependency_index.url]


def confirm_hashes(session: requests.Session, items: Sequence[ReportItem], planned: Iterable[str], dependency_index: IndexLocation) -> list[ReportItem]:
    """Mark each dependency whose sha256 its index publishes (pip's report computes one when the index gives none,
    so pip's hash alone proves nothing); a published hash that differs from pip's is refused."""
    planned_names = set(planned)
    pages: dict[str, dict[str, Link]] = {}
    confirmed = []
    for item in items:
        if canonical_name(item.name) in planned_names:
            confirmed.append(item)
            continue
        checkpoint("plan")
        name = canonical_name(item.name)
        if name not in pages:
            pages[name] = {link.filename: link for link in links_of(session, dependency_index, item.name, item.name)}
        filename = urllib.parse.unquote(urllib.parse.urlparse(item.url).path.rsplit("/", 1)[-1])
        link = pages[name].get(filename)
        published = link.sha256 if link is not None else None
        if published is not None and item.sha256 is not None and published != item.sha256:
            raise InstallError(f"{filename} as pip got it does not match the sha256 {dependency_index.url} publishes; refused, nothing was changed.",
                               "The file was altered or the index is broken: do not install it. Report it to the index owner.")
        confirmed.append(dataclasses.replace(item, verified=published is not None))
    return confirmed


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
    """Put every dependency pip reported into ``folder`` (pinned to the hashes of the plan when all are known)."""
    names = {canonical_name(f.package.distribution) for f in planned}
    wanted = [i for i in items if canonical_name(i.name) not in names]
    if not wanted:
        return
    checkpoint("fetch")
    requirements = folder / "compat-dependencies.txt"
    hashed = all(i.sha256 for i in wanted)
    requirements.write_text("".join(f"{i.name}=={i.version}" + (f" --hash=sha256:{i.sha256}" if hashed else "") + "\n" for i in wanted))
    seconds = limits().pip_s
    command = [*pip, "download", "--no-deps", "--quiet", "--disable-pip-version-check", *ONLY_BINARY, "--dest", str(folder),
               *_index_args(dependency_index), "-r", str(requirements)]
    try:
        done = run_bounded(command, timeout=seconds, env=installer_env(python))
    except subprocess.TimeoutExpired:
        raise InstallError(f"Downloading the dependencies did not finish within {seconds:.0f} s; nothing was changed.", "Check the dependency index, or retry.") from None
    checkpoint("fetch")
    if done.returncode != 0:
        said = _last_lines(done.stderr, 2)
        if "No space left on device" in said:
            raise disk_full(folder, "downloading the dependencies")
        raise InstallError("Downloading the dependencies failed; nothing was changed: " + said, "Check the dependency index (--index pypi=URL).")


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
    """Install exactly the lock, from local folders only (no index can step in at this point), wheels only."""
    links = [arg for folder in folders for arg in ("--find-links", str(folder))]
    if installer == "uv":
        uv = uv_binary()
        if uv is None:
            raise InstallError("uv is not installed; nothing was changed.", "pip install uv, or use --installer pip.")
        command = [uv, "pip", "install", "--no-config", "--python", python, "--no-deps", "--no-index", *ONLY_BINARY, *links, "-r", str(lock)]
    else:
        command = [*pip, "install", "--no-deps", "--no-index", *ONLY_BINARY, *links, "--disable-pip-version-check", "--no-input", "-r", str(lock)]
    return command + (["--require-hashes"] if require_hashes else [])


def run_installer(command: Sequence[str], env: Mapping[str, str], timeout: Optional[float] = None) -> tuple[int, str]:
    """Run the installer in its own process group (PR_SET_PDEATHSIG), echoing its output; on timeout or Ctrl-C the
    whole group is killed. The deadline holds even when the installer prints nothing (a thread reads)."""
    seconds = limits().install_s if timeout is None else timeout
    process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, env=dict(env), preexec_fn=die_with_parent)
    output: list[str] = []

    def forward() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            output.append(line)
            safe_write(sys.stderr, line)  # a full or closed stderr must not stop the reading (pip would block)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()
    end = time.monotonic() + seconds
    try:
        while True:
            checkpoint("install")
            try:
                code = process.wait(timeout=max(0.0, min(POLL_S, end - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= end:
                    raise
    except BaseException:
        kill_group(process)
        raise
    reader.join(timeout=30)
    return code, "".join(output)
