"""The side effects of an install other than the transaction (transaction.py) and the planners (planners.py): fetch
each planned wheel from its own host, check every dependency's hash against its index (the index pages read side by
side, each under its own deadline), download the dependencies (pip: through pip's cache, by URL; uv: compat itself,
into its wheel store, store.py), run the installer.

Why fetch the wheels ourselves: pip and uv take every index for every name (``--extra-index-url``), so
an index could shadow a name it does not own (dependency confusion). compat downloads each planned
package from the one host the plan assigns to it, checks its sha256 against that host's page, and hands
the installer local files only.

Every child (pip, uv) runs in a process group of its own with PR_SET_PDEATHSIG and a deadline
(processes.run_bounded); every network read runs under an overall deadline and a size cap (limits.py);
pip and uv see no setting of the user's that changes where or what they install (installer_env, uv_env); every
pip and uv call is --only-binary :all: (no build backend ever runs).

Side effects: network (the hosts of the plan), files in the work folder and the wheel store, child processes, threads
reading index pages (daemon threads: one stuck past its deadline is left behind and ends with compat).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import requests
from packaging.version import InvalidVersion, Version

from ..names import canonical_name
from ..processes import die_with_parent, kill_group, run_bounded
from ..redact import has_credentials
from .checkpoints import checkpoint
from .errors import InstallError, InstallInputError
from .files import NotRegular, copy_hashing, disk_full, no_space, open_regular, read_chunks, refuse_not_regular, safe_write, sha256_of
from .indexes import CrossHostRedirect, IndexLocation, IndexRefused, IndexUnreachable, Link, get_following, project_links
from .limits import DeadlineExceeded, Limits, deadline, limits, mib
from .pipconfig import configured_transport
from .plan import InstallPlan, PlannedPackage, WheelTarget, pick_link
from .progress import Progress, silent
from .store import WheelStore
from .trust import give_pip, give_uv

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


def _links_failed(exc: IndexUnreachable, location: IndexLocation, whose: str) -> InstallError:
    """A page that could not be read, as one sentence naming the host and whose page it is."""
    if isinstance(exc, CrossHostRedirect):
        return InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) is refused: {exc.why}; nothing was changed.",
                            _redirect_fix(location.host_id, exc.target))
    if isinstance(exc, IndexRefused):
        return InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) is refused: {exc.why}; nothing was changed.",
                            "Check the index (that is not a package index page compat can use), or use a mirror: " + _host_fix(location))
    return InstallError(f"{exc.url} ({location.host_id}, the host of {whose}) cannot be reached ({exc.why}); nothing was changed.", _host_fix(location))


def links_of(session: requests.Session, location: IndexLocation, project: str, whose: str) -> list[Link]:
    """project_links with its failures as one sentence each."""
    try:
        return project_links(session, location, project)
    except IndexUnreachable as exc:
        raise _links_failed(exc, location, whose) from None


PAGE_WORKERS = 8


def links_of_many(session: requests.Session, wanted: Sequence[tuple[IndexLocation, str, str]], phase: str = "plan") -> list[list[Link]]:
    """links_of for many (location, project, whose) at once: the pages are read by up to PAGE_WORKERS threads, each
    page within its own deadline (limits().page_s, kept by this thread: only the main thread takes SIGALRM), and the
    first failure in the order given is raised as links_of raises it. A page left running past its deadline is
    abandoned (daemon threads: they end with compat)."""
    if len(wanted) <= 1:
        return [links_of(session, location, project, whose) for location, project, whose in wanted]
    for location, _, _ in wanted:
        prepare = getattr(session, "prepare_for", None)  # the TLS decision, made once here rather than in a thread
        if prepare is not None:
            prepare(location.url)
    seconds = limits().page_s
    pages = _PageWorkers(session, wanted)
    for _ in range(min(PAGE_WORKERS, len(wanted))):
        threading.Thread(target=pages.work, daemon=True, name="compat-index-page").start()
    done: set[int] = set()
    while len(done) < len(wanted):
        try:
            number: Optional[int] = pages.finished.get(timeout=POLL_S)
        except queue.Empty:
            number = None
        if number is None:
            pages.refuse_late(seconds)
            continue
        done.add(number)
        checkpoint(phase)
    return pages.answers()


class _PageWorkers:
    """links_of_many's threads: the numbers of the pages to read, each page's start and result (ok, links or the
    exception), the numbers of those finished."""

    def __init__(self, session: requests.Session, wanted: Sequence[tuple[IndexLocation, str, str]]) -> None:
        self.session = session
        self.wanted = wanted
        self.todo: "queue.SimpleQueue[int]" = queue.SimpleQueue()
        for number in range(len(wanted)):
            self.todo.put(number)
        self.finished: "queue.SimpleQueue[int]" = queue.SimpleQueue()
        self.results: dict[int, tuple[bool, Any]] = {}
        self.started: dict[int, float] = {}

    def work(self) -> None:
        while True:
            try:
                number = self.todo.get_nowait()
            except queue.Empty:
                return
            location, project, _ = self.wanted[number]
            self.started[number] = time.monotonic()
            try:
                self.results[number] = (True, project_links(self.session, location, project))
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it in words
                self.results[number] = (False, exc)
            self.finished.put(number)

    def refuse_late(self, seconds: float) -> None:
        """InstallError (links_of's words) for the first page, in the order given, still unanswered ``seconds`` after its start."""
        now = time.monotonic()
        late = sorted(n for n, begun in list(self.started.items()) if n not in self.results and now - begun > seconds)
        if late:
            location, project, whose = self.wanted[late[0]]
            url = location.url if location.is_local or location.style != "index" else location.url.rstrip("/") + f"/{canonical_name(project)}/"
            raise _links_failed(IndexUnreachable(url, f"no complete answer within {seconds:.0f} s"), location, whose)

    def answers(self) -> list[list[Link]]:
        """Each page's links, in the order given; the first failure in that order raised as links_of raises it."""
        answers = []
        for number, (location, _, whose) in enumerate(self.wanted):
            ok, value = self.results[number]
            if not ok:
                if isinstance(value, IndexUnreachable):
                    raise _links_failed(value, location, whose)
                raise value
            answers.append(value)
        return answers


def _redirect_fix(host_id: str, target: str) -> str:
    return f"If that host is the right one, point --index {host_id}=URL at the final location ({target}) instead."


def locate(session: requests.Session, plan: InstallPlan, target: WheelTarget) -> dict[PlannedPackage, Link]:
    """The wheel file of every planned package, on its own host only (the pages read side by side)."""
    found = {}
    pages = links_of_many(session, [(p.location, p.distribution, p.distribution) for p in plan.packages])
    for package, links in zip(plan.packages, pages):
        checkpoint("plan")
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
          allow_unverified: bool = False, say: Say = lambda line: None, store: Optional[WheelStore] = None,
          progress: Optional[Progress] = None) -> list[FetchedWheel]:
    """Download (or copy) each located wheel and check its sha256 before anything is installed. With a ``store``, a
    wheel the store holds under the published sha256 is taken from there, and a fetched one is kept there."""
    fetched = []
    for package, link in located.items():
        checkpoint("fetch")
        check_unverified(package, link, require_hashes, allow_unverified, say)
        path, actual = fetch_file(session, link, package.location, folder, store, progress or silent(), f"from {package.location.host_id}")
        fetched.append(FetchedWheel(package, link, path, actual, link.sha256 is not None))
    return fetched


def fetch_file(session: requests.Session, link: Link, location: IndexLocation, folder: Path, store: Optional[WheelStore], progress: Progress,
               whose: str) -> tuple[Path, str]:
    """One wheel: from the store when it holds the published sha256, else downloaded (or copied) into ``folder`` while
    hashing, checked against the published sha256, and kept in the store. Returns (path, sha256)."""
    if store is not None and link.sha256 is not None:
        kept = store.get(link.sha256, link.filename, published_by=location.url)
        if kept is not None:
            return kept, link.sha256
    lim = limits()
    path = folder / link.filename
    part = folder / f".part-{link.filename}"
    try:
        if link.url.startswith("file:"):
            actual = _copy_local(link, whose, part, lim, progress)
        else:
            actual = _download(session, link, part, lim, location.host_id, progress)
        os.replace(part, path)
    except OSError as exc:
        part.unlink(missing_ok=True)
        if no_space(exc):
            raise disk_full(folder, f"downloading {link.filename}") from None
        raise InstallError(f"{link.filename} cannot be written to {folder} ({exc.strerror}); nothing was changed.", "Check that folder (or TMPDIR).") from None
    if link.sha256 is not None and actual != link.sha256:
        path.unlink(missing_ok=True)
        raise InstallError(
            f"{link.filename} from {location.url} does not match the sha256 its index publishes (expected {link.sha256[:16]}..., got {actual[:16]}...); refused, nothing was changed.",
            "The file was altered or the index is broken: do not install it. Report it to the index owner.",
        )
    if store is not None:
        path = store.put(path, actual, location.url if link.sha256 is not None else None) or path
    return path, actual


def _copy_local(link: Link, whose: str, part: Path, lim: Limits, progress: Progress) -> str:
    source = Path(urllib.parse.unquote(urllib.parse.urlparse(link.url).path))
    try:
        with open_regular(source) as handle, progress.transfer(link.filename, os.fstat(handle.fileno()).st_size) as transfer:
            actual, _ = copy_hashing(transfer.counted(read_chunks(handle)), part, lim.wheel_bytes, lambda: checkpoint("fetch"))
    except NotRegular as exc:
        raise refuse_not_regular(exc, whose) from None
    except OverflowError:
        raise InstallError(f"{source} is larger than {mib(lim.wheel_bytes)} (the wheel size cap); refused, nothing was changed.", "Check that folder.") from None
    return actual


def _download(session: requests.Session, link: Link, part: Path, lim: Limits, host_id: str = "HOST", progress: Optional[Progress] = None) -> str:
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
            with (progress or silent()).transfer(link.filename, int(length) if length.isdigit() else None) as transfer:
                actual, _ = copy_hashing(transfer.counted(response.iter_content(1 << 20)), part, cap, lambda: checkpoint("fetch"))
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


def _kept(name: str) -> bool:
    if name.startswith("PIP_"):
        return name in _KEEP_PIP
    if name.startswith("UV_"):
        return name in _KEEP_UV
    return name not in _DROP


def installer_env(python: str) -> dict[str, str]:
    """The environment pip/uv run with: the transport settings of the user's (CA bundle, proxy, timeouts, trusted
    hosts, cache), and nothing that changes where or what they install (PIP_USER, PIP_TARGET, PIP_PREFIX,
    PIP_ROOT, an extra index, PIP_CONFIG_FILE, PYTHONPATH, UV_LINK_MODE, ...): only an allowlist of PIP_* and
    UV_* variables passes, no configuration file is read, and the user site does not count as installed."""
    env = {k: v for k, v in os.environ.items() if _kept(k)}
    for variable, value in configured_transport():
        env.setdefault(variable, value)
    give_pip(env)  # the CA bundle compat's own requests use (trust.py): PIP_CERT, nothing that outranks it inside pip
    env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no configuration file at all (global, user, site)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    return env


def uv_env(python: str, network: bool = True) -> dict[str, str]:  # noqa: ARG001 - the same signature as installer_env
    """The environment uv runs with: installer_env's allowlist without the PIP_* variables (uv reads none of them,
    so pip's configuration is not asked unless compat's own TLS decision needs it), and the CA bundle compat uses
    (trust.give_uv; ``network`` False: a uv that reads no index, as ``uv --version``, needs none, and its start does
    not wait for pip's configuration). uv itself runs with --no-config: no uv.toml is read."""
    env = {k: v for k, v in os.environ.items() if _kept(k) and not k.startswith("PIP_")}
    if network:
        give_uv(env)
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


def pip_starts(pip: Sequence[str]) -> bool:
    """Whether ``pip --version`` runs: a pip whose metadata the probe read may still have broken modules."""
    return _pip_version(pip) is not None


def pip_for(python: str, installed: Optional[str] = None) -> list[str]:
    """How to run a pip that can plan for ``python``: its own pip when new enough, else compat's own pip
    driving it (pip --python, pip >= 22.3). Checked before anything is downloaded. ``installed``: the version of
    the pip an import finds there, as the environment probe read it (its metadata is not read again by a pip start;
    a caller whose pip then fails checks pip_starts and asks again without it: service.with_pip)."""
    checkpoint("plan")
    try:
        if installed is not None and Version(installed) >= MIN_PIP:
            return [python, "-m", "pip"]
    except InvalidVersion:
        pass
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
    """One package of the planned closure, as the planner (pip or uv) gave it, then as compat checked and fetched it."""

    name: str
    version: str
    url: str  # pip: the file it chose; uv: "" for a package of the index, the URL of a direct reference
    sha256: Optional[str]  # pip: as it reports it (it computes one when the index gives none); uv: the index's, once confirmed
    requested: bool
    verified: bool = False  # the index (or the folder's lock) publishes this sha256
    hashes: frozenset = frozenset()  # uv: the sha256 of every file of this version its index listed (or uv computed)
    link: Optional[Link] = None  # the file compat takes, from the dependency index (confirm_hashes)
    path: Optional[Path] = None  # where compat put it (fetch_dependencies)
    direct: bool = False  # a direct reference (a pass-through URL), on no index


def _last_lines(text: str, count: int) -> str:
    return " | ".join([line for line in text.strip().splitlines() if line.strip()][-count:])


def _index_args(dependency_index: IndexLocation) -> list[str]:
    """The index options of a pip/uv command line; an index URL with credentials is not one of them (index_env)."""
    if dependency_index.is_local:
        return ["--no-index", "--find-links", str(dependency_index.local_path)]
    if has_credentials(dependency_index.url):
        return []
    return ["--index-url", dependency_index.url]


def index_env(dependency_index: IndexLocation, tool: str = "pip") -> dict[str, str]:
    """What the pip/uv environment adds for an index URL with credentials: PIP_INDEX_URL / UV_INDEX_URL, the same
    as --index-url, but not on a command line any user of the machine can read (ps, /proc/PID/cmdline)."""
    if dependency_index.is_local or not has_credentials(dependency_index.url):
        return {}
    return {"UV_INDEX_URL" if tool == "uv" else "PIP_INDEX_URL": dependency_index.url}


def _filename(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])


def confirm_hashes(session: requests.Session, items: Sequence[ReportItem], planned: Iterable[str], dependency_index: IndexLocation,
                   target: Optional[WheelTarget] = None, planner: str = "pip", store: Optional[WheelStore] = None) -> list[ReportItem]:
    """Find each dependency's file on its index and mark the ones whose sha256 the index publishes (pip's report computes
    one when the index gives none, and so does uv, so the planner's hash alone proves nothing). pip names the file it
    chose; for uv, compat picks the file of that version that fits the target. A published hash that differs from the
    planner's is refused. The index pages are read side by side. A direct reference (a pass-through URL) is on no index:
    it stays unverified. With uv and a ``store``: a dependency the store holds under a sha256 uv lists for it again,
    and which this index published when compat fetched it, is taken from the store without reading the page."""
    planned_names = set(planned)
    kept = _kept_in_store(items, planned_names, dependency_index, target, planner, store)
    wanted = [i for i in items if canonical_name(i.name) not in planned_names and not i.direct and canonical_name(i.name) not in kept]
    projects = list(dict.fromkeys(canonical_name(i.name) for i in wanted))
    pages = dict(zip(projects, links_of_many(session, [(dependency_index, p, p) for p in projects])))
    confirmed = []
    for item in items:
        name = canonical_name(item.name)
        if name in planned_names:
            confirmed.append(item)
            continue
        if item.direct:
            link = Link(_filename(item.url), item.url, None, None, False)
            confirmed.append(dataclasses.replace(item, link=link))
            continue
        checkpoint("plan")
        if name in kept:
            confirmed.append(kept[name])
            continue
        confirmed.append(_confirmed(item, pages[name], dependency_index, target, planner))
    return confirmed


def _kept_in_store(items: Sequence[ReportItem], planned_names: set[str], dependency_index: IndexLocation, target: Optional[WheelTarget],
                   planner: str, store: Optional[WheelStore]) -> dict[str, ReportItem]:
    """With uv and a store: each dependency the store holds as this index published it, by name (see confirm_hashes)."""
    kept: dict[str, ReportItem] = {}
    if planner != "uv" or store is None or target is None:
        return kept
    for item in items:
        if canonical_name(item.name) not in planned_names and not item.direct:
            found = _from_store(store, item, dependency_index, target)
            if found is not None:
                kept[canonical_name(item.name)] = found
    return kept


def _confirmed(item: ReportItem, links: Sequence[Link], dependency_index: IndexLocation, target: Optional[WheelTarget], planner: str) -> ReportItem:
    """A dependency with the file its index lists for it and whether the index publishes its sha256; InstallError for a
    published hash that differs from the planner's, or (uv) a planned version the index has no fitting file of."""
    if planner == "uv":
        link = _uv_pick(links, item, target)
        if link is None:
            shown_target = f" for Python {target.python} on {target.platform.tag}" if target is not None else ""
            raise InstallError(f"{dependency_index.url} has no wheel of {item.name}=={item.version}{shown_target}, which uv planned from it; nothing was changed.",
                               "Check the dependency index (--index pypi=URL), or retry (the index may have changed meanwhile).")
    else:
        link = next((lk for lk in links if lk.filename == _filename(item.url)), None)
    published = link.sha256 if link is not None else None
    filename = link.filename if link is not None else _filename(item.url)
    differs = published is not None and (published not in item.hashes if planner == "uv" and item.hashes else item.sha256 is not None and published != item.sha256)
    if differs:
        raise InstallError(f"{filename} as {planner} got it does not match the sha256 {dependency_index.url} publishes; refused, nothing was changed.",
                           "The file was altered or the index is broken: do not install it. Report it to the index owner.")
    sha256 = published if planner == "uv" else item.sha256
    return dataclasses.replace(item, verified=published is not None, link=link, sha256=sha256)


def _from_store(store: WheelStore, item: ReportItem, dependency_index: IndexLocation, target: WheelTarget) -> Optional[ReportItem]:
    for sha256 in sorted(item.hashes):
        path = store.published(sha256, dependency_index.url)
        if path is None:
            continue
        link = Link(path.name, path.as_uri(), sha256, None, False)
        if _uv_pick([link], item, target) is not None:
            return dataclasses.replace(item, verified=True, sha256=sha256, link=link, path=path)
    return None


def _uv_pick(links: Sequence[Link], item: ReportItem, target: Optional[WheelTarget]) -> Optional[Link]:
    """The file of the version uv planned that fits the target; among several, one whose sha256 uv listed."""
    try:
        version = Version(item.version)
    except InvalidVersion:
        return None
    label = f"+{version.local}" if version.local else ""
    public = Version(version.public)
    if target is None:
        return None
    versions: dict[str, bool] = {}  # a page lists thousands of files: the version part of the name is compared first, each spelling once

    def this_version(filename: str) -> bool:
        spelled = filename.split("-")[1] if filename.count("-") >= 4 else ""
        if spelled not in versions:
            try:
                versions[spelled] = Version(spelled) == version
            except InvalidVersion:
                versions[spelled] = False
        return versions[spelled]

    fitting = [lk for lk in links if this_version(lk.filename) and pick_link([lk], public, label, target, item.name) is not None]
    listed = [lk for lk in fitting if lk.sha256 is not None and lk.sha256 in item.hashes]
    if listed:
        return pick_link(listed, public, label, target, item.name)
    return pick_link(fitting, public, label, target, item.name)


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


def same_version(before: Optional[str], after: str) -> bool:
    if before is None:
        return False
    try:
        return Version(before) == Version(after)
    except InvalidVersion:
        return before == after


def download_dependencies(pip: Sequence[str], python: str, items: Sequence[ReportItem], planned: Sequence[FetchedWheel], folder: Path, dependency_index: IndexLocation) -> None:
    """Put every dependency pip reported into ``folder`` (pinned to the hashes of the plan when all are known), through
    pip's own cache: each by the URL of the very file confirm_hashes found on the dependency index (pip then reads no
    index page again, and its cache answers by URL)."""
    names = {canonical_name(f.package.distribution) for f in planned}
    wanted = [i for i in items if canonical_name(i.name) not in names]
    if not wanted:
        return
    checkpoint("fetch")
    requirements = folder / "compat-dependencies.txt"
    hashed = all(i.sha256 for i in wanted)

    def line(item: ReportItem) -> str:
        url = item.link.url if item.link is not None else item.url
        return (f"{item.name} @ {url}" if url else f"{item.name}=={item.version}") + (f" --hash=sha256:{item.sha256}" if hashed else "")

    requirements.write_text("".join(line(i) + "\n" for i in wanted))
    seconds = limits().pip_s
    command = [*pip, "download", "--no-deps", "--quiet", "--disable-pip-version-check", "--no-input", *ONLY_BINARY, "--dest", str(folder),
               *_index_args(dependency_index), "-r", str(requirements)]
    try:
        done = run_bounded(command, timeout=seconds, env={**installer_env(python), **index_env(dependency_index)})
    except subprocess.TimeoutExpired:
        raise InstallError(f"Downloading the dependencies did not finish within {seconds:.0f} s; nothing was changed.", "Check the dependency index, or retry.") from None
    checkpoint("fetch")
    if done.returncode != 0:
        said = _last_lines(done.stderr, 2)
        if "No space left on device" in said:
            raise disk_full(folder, "downloading the dependencies")
        raise InstallError("Downloading the dependencies failed; nothing was changed: " + said, "Check the dependency index (--index pypi=URL).")


def fetch_dependencies(session: requests.Session, items: Sequence[ReportItem], planned: Sequence[FetchedWheel], dependency_index: IndexLocation,
                       folder: Path, store: Optional[WheelStore], progress: Progress) -> list[ReportItem]:
    """compat's own download of every dependency (for uv): the file confirm_hashes took from the dependency index,
    checked against the sha256 the index publishes, from the store when it holds it, kept there otherwise. The items
    come back with the file's path and sha256."""
    names = {canonical_name(f.package.distribution) for f in planned}
    done = []
    for item in items:
        if canonical_name(item.name) in names or item.path is not None:  # planned, or taken from the store already
            done.append(item)
            continue
        checkpoint("fetch")
        direct = item.direct or item.link is None  # pip planned a file its index does not list (a pass-through URL)
        link = item.link if item.link is not None else Link(_filename(item.url), item.url, None, None, False)
        where = IndexLocation("url", item.url, "find-links", "a requirement") if direct else dependency_index
        path, actual = fetch_file(session, link, where, folder, store, progress, f"a dependency from {where.host_id}")
        done.append(dataclasses.replace(item, path=path, sha256=actual))
    return done


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
