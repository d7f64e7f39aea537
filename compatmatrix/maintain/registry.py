"""Reading the registries for `compat matrix update` (the edge: network; matrix/harvest.py makes the facts).

Every project page of every host a package is taken from (``[policy.host_preference]``, the ``index`` hosts; ``--index``,
COMPAT_INDEX_* and the config file move them as for every other command: install/indexes.py) is read as PEP 691 JSON
where the host offers it, else as PEP 503 HTML, through the one TLS-trusting session (install/trust.py), each request
under its own deadline and size cap, several at a time. The METADATA of the few wheels harvest needs comes from the
index's PEP 658 / 714 file where it serves one, else from the wheel itself, read by HTTP range requests (the zip's
directory and that one member), or whole (capped) from a server that does not take ranges. A host that cannot be reached
is named and left out; the others are still read. Progress goes to stderr, only on a terminal.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
import sys
import threading
import time
import urllib.parse
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from typing import Callable, Optional

from ..errors import shown
from ..install.indexes import IndexLocation, IndexRefused, IndexUnreachable, _Anchors, get_following
from ..matrix.harvest import BINARIES, PACKAGES, ProjectPage, RegistryFile, metadata_wanted
from ..matrix.model import Component, Matrix

JSON_PAGE = "application/vnd.pypi.simple.v1+json"
CONNECT_S = 10.0
PAGE_S = 60.0  # one page, whole
PAGE_BYTES = 64 << 20
METADATA_BYTES = 1 << 20  # a METADATA file
WHEEL_BYTES = 64 << 20  # a wheel read whole, where the server takes no ranges
WORKERS = 8


def page_seconds() -> float:
    """One page's deadline: PAGE_S, or less where COMPAT_TEST_LIMITS (install/limits.py) says so."""
    from ..install.limits import limits

    return min(PAGE_S, limits().page_s)


class ReadError(Exception):
    """A page or file that could not be read, in words."""


def _get(session, url: str, accept: str, cap: int, seconds: Optional[float] = None, headers: Optional[Mapping[str, str]] = None) -> tuple[int, str, bytes, Mapping[str, str], str]:
    """(status, media type, body, headers, final URL) of one GET, within ``seconds`` and ``cap`` bytes."""
    import requests

    seconds = page_seconds() if seconds is None else seconds
    end = time.monotonic() + seconds
    try:
        with get_following(session, url, (CONNECT_S, seconds), {"Accept": accept, **(headers or {})}) as response:
            kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            body = bytearray()
            if response.status_code in (200, 206):
                for chunk in response.iter_content(1 << 16):
                    body += chunk
                    if len(body) > cap:
                        raise ReadError(f"{shown(url, 160)} is larger than {cap >> 20 or 1} MiB")
                    if time.monotonic() > end:
                        raise ReadError(f"{shown(url, 160)} gave no complete answer within {seconds:.0f} s")
            return response.status_code, kind, bytes(body), response.headers, response.url or url
    except IndexUnreachable as exc:
        raise ReadError(f"{shown(url, 160)} cannot be read ({exc.why})") from None
    except requests.RequestException as exc:
        raise ReadError(f"{shown(url, 160)} cannot be reached ({exc.__class__.__name__})") from None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_json_page(body: bytes, base_url: str) -> list[RegistryFile]:
    """A PEP 691 JSON project page: its files, with yank reasons (PEP 592), upload times (PEP 700), metadata flags."""
    from ..values import json_text

    try:
        data = json_text(json.loads(body.decode("utf-8", errors="replace")))  # its strings as text (no lone surrogate)
    except (ValueError, RecursionError):
        raise ReadError(f"{shown(base_url, 160)} says it is JSON, but it is not") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise ReadError(f"{shown(base_url, 160)} is a JSON page without a list of files")
    out = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or not isinstance(entry.get("url"), str):
            continue
        yanked = entry.get("yanked", False)
        requires = entry.get("requires-python")
        upload = entry.get("upload-time")
        metadata = entry.get("core-metadata", entry.get("dist-info-metadata", False))
        try:
            url = urllib.parse.urljoin(base_url, entry["url"])
        except ValueError:
            continue
        out.append(RegistryFile(entry["filename"], url.split("#", 1)[0], bool(yanked), yanked if isinstance(yanked, str) else "",
                                requires if isinstance(requires, str) else None, upload if isinstance(upload, str) else "",
                                bool(metadata)))
    return out


def parse_html_page(body: bytes, base_url: str) -> list[RegistryFile]:
    """A PEP 503 project page: its links, with data-yanked (its value: the reason), data-requires-python and
    data-dist-info-metadata / data-core-metadata (PEP 658 / 714)."""
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
    except Exception:  # noqa: BLE001 - html.parser raises AssertionError (and others) on markup it cannot take
        raise ReadError(f"{shown(base_url, 160)} cannot be read as an index page") from None
    out = []
    for anchor in parser.links:
        href = anchor.get("href")
        if not href:
            continue
        try:
            url = urllib.parse.urljoin(base_url, href).split("#", 1)[0]
        except ValueError:
            continue
        filename = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        yanked = "data-yanked" in anchor
        metadata = anchor.get("data-core-metadata", anchor.get("data-dist-info-metadata"))
        out.append(RegistryFile(filename, url, yanked, (anchor.get("data-yanked") or "") if yanked else "", anchor.get("data-requires-python"),
                                "", metadata is not None and metadata != "false"))
    return out


def read_page(session, location: IndexLocation, project: str) -> ProjectPage:
    url = location.url.rstrip("/") + f"/{project}/"
    from ..redact import strip_credentials

    status, kind, body, _, files_base = _get(session, url, f"{JSON_PAGE}, text/html;q=0.1", PAGE_BYTES)
    final = strip_credentials(files_base)  # where a fact was read (notes, the overlay); the files' URLs keep them, for the reads
    if status == 404:
        return ProjectPage(location.host_id, project, strip_credentials(url), "404: no such project", _now(), ())
    if status != 200:
        raise ReadError(f"{shown(url, 160)} answered HTTP {status}")
    if kind == JSON_PAGE:
        return ProjectPage(location.host_id, project, final, "PEP 691 JSON", _now(), tuple(parse_json_page(body, files_base)))
    return ProjectPage(location.host_id, project, final, "PEP 503 HTML", _now(), tuple(parse_html_page(body, files_base)))


class _RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests, in blocks (what zipfile needs of a wheel: its directory, one member)."""

    BLOCK = 256 << 10

    def __init__(self, session, url: str, size: int, tail: bytes) -> None:
        self.session, self.url, self.size, self.pos = session, url, size, 0
        self.blocks: dict[int, bytes] = {}
        self.tail_start = size - len(tail)
        self.tail = tail
        self.requests = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def _block(self, index: int) -> bytes:
        if index not in self.blocks:
            self.requests += 1
            if self.requests > 12:
                raise ReadError(f"{shown(self.url, 160)}: too many range requests for one METADATA")
            start = index * self.BLOCK
            status, _, body, _, _ = _get(self.session, self.url, "*/*", self.BLOCK + 1, PAGE_S, headers={"Range": f"bytes={start}-{min(self.size, start + self.BLOCK) - 1}"})
            if status != 206:
                raise ReadError(f"{shown(self.url, 160)} stopped answering range requests (HTTP {status})")
            self.blocks[index] = body
        return self.blocks[index]

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        out = bytearray()
        while self.pos < end:
            if self.pos >= self.tail_start:
                chunk = self.tail[self.pos - self.tail_start:end - self.tail_start]
            else:
                block = self._block(self.pos // self.BLOCK)
                offset = self.pos % self.BLOCK
                chunk = block[offset:offset + (end - self.pos)]
                if not chunk:
                    break
            out += chunk
            self.pos += len(chunk)
        return bytes(out)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _metadata_member(archive: zipfile.ZipFile) -> str:
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not names:
        raise ReadError("the wheel has no .dist-info/METADATA")
    info = archive.getinfo(names[0])
    if info.file_size > METADATA_BYTES:
        raise ReadError("its METADATA is larger than 1 MiB")
    return names[0]


def read_metadata_text(session, file: RegistryFile) -> str:
    """A wheel's METADATA: the index's PEP 658 file, else the wheel's own member (range requests, or the whole wheel)."""
    if file.metadata:
        status, _, body, _, _ = _get(session, file.url + ".metadata", "*/*", METADATA_BYTES)
        if status == 200:
            return body.decode("utf-8", errors="replace")
    status, _, body, headers, _ = _get(session, file.url, "*/*", WHEEL_BYTES, headers={"Range": "bytes=-65536"})
    try:
        if status == 206:
            total = headers.get("Content-Range", "").rpartition("/")[2]
            if not total.isdigit():
                raise ReadError(f"{shown(file.url, 160)} answered a range without the file's size")
            archive = zipfile.ZipFile(_RangeFile(session, file.url, int(total), body))  # type: ignore[arg-type]
        elif status == 200:
            archive = zipfile.ZipFile(io.BytesIO(body))
        else:
            raise ReadError(f"{shown(file.url, 160)} answered HTTP {status}")
        with archive:
            return archive.read(_metadata_member(archive)).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError, struct.error) as exc:
        # zlib.error: a corrupt deflate stream; RuntimeError: an encrypted member; struct.error: a cut header
        raise ReadError(f"{shown(file.url, 160)} is not a readable wheel ({exc.__class__.__name__}: {shown(str(exc), 80)})") from None


def bounded_map(fn: Callable, items: Sequence, seconds: float, late: Callable, workers: int = WORKERS) -> list:
    """``[fn(item) for item in items]``, several at a time, each call given ``seconds`` from its start: a call still
    running then (a server trickling its headers a byte at a time) is answered by ``late(item, seconds)`` and left
    behind in its daemon thread (it ends with compat), and a fresh worker takes its place. Results in ``items``' order."""
    pool = _Pool(fn, items)
    for _ in range(min(workers, len(items))):
        pool.spawn()
    with pool.cond:
        while len(pool.results) < len(items):
            pool.answer_late(seconds, late)
            pool.cond.wait(0.2)
    raised = next((r for r in pool.results.values() if isinstance(r, _Raised)), None)
    if raised is not None:
        raise raised.exc
    return [pool.results[i] for i in range(len(items))]


class _Pool:
    """bounded_map's workers: a queue of (index, item), each call's start and each item's result (the first one given:
    a late call's own result is dropped), under one condition."""

    def __init__(self, fn: Callable, items: Sequence) -> None:
        import queue

        self.fn = fn
        self.items = items
        self.pending: "queue.Queue" = queue.Queue()
        for index, item in enumerate(items):
            self.pending.put((index, item))
        self.results: dict[int, object] = {}
        self.started: dict[int, float] = {}
        self.cond = threading.Condition()

    def work(self) -> None:
        import queue

        while True:
            try:
                index, item = self.pending.get_nowait()
            except queue.Empty:
                return
            with self.cond:
                self.started[index] = time.monotonic()
            try:
                value = self.fn(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread (a TLS refusal is a CompatError)
                value = _Raised(exc)
            with self.cond:
                if index not in self.results:
                    self.results[index] = value
                self.cond.notify_all()

    def spawn(self) -> None:
        threading.Thread(target=self.work, daemon=True, name="compat-registry").start()

    def answer_late(self, seconds: float, late: Callable) -> None:
        """Each call running longer than ``seconds`` answered by ``late``, and a fresh worker in its place (``cond`` held)."""
        now = time.monotonic()
        for index, began in list(self.started.items()):
            if index not in self.results and now - began > seconds:
                self.results[index] = late(self.items[index], seconds)
                self.spawn()  # the stuck thread keeps its slot; the queue gets a new worker


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class RegistryRead:
    """The pages and METADATA one `compat matrix update` read, and the hosts it could not read (host -> why)."""

    def __init__(self) -> None:
        self.pages: dict[Component, list[ProjectPage]] = {}
        self.metadata: dict[str, Optional[str]] = {}
        self.unread: dict[str, str] = {}
        self.metadata_problems: list[str] = []
        self.seconds = 0.0


def hosts_for(matrix: Matrix, locations: Mapping[str, IndexLocation], component: Component) -> list[IndexLocation]:
    """The hosts a package is read from: its ``host_preference`` hosts laid out as indexes (find-links pages carry no
    yanks, dates or Requires-Python; a local folder neither)."""
    out = []
    for host_id in matrix.policy.host_preference.get(component, ()):
        location = locations.get(host_id)
        if location is not None and location.style == "index" and not location.is_local and host_id not in {o.host_id for o in out}:
            out.append(location)
    return out


def read_registries(matrix: Matrix, locations: Mapping[str, IndexLocation], packages: Sequence[Component] = PACKAGES,
                    progress: Optional[Callable[[str], None]] = None, session=None, metadata: bool = True,
                    every_package_from: Optional[str] = None) -> RegistryRead:
    """Read every page, then (``metadata``) the METADATA harvest needs; several requests at a time, each under its own
    deadline. ``every_package_from``: read every package from that one host (the cross-check reads PyPI for all six)."""
    from ..install.trust import trusted_session

    started = time.monotonic()
    read = RegistryRead()
    session = session or trusted_session()
    if every_package_from is not None:
        jobs = [(component, locations[every_package_from]) for component in packages]
    else:
        jobs = [(component, location) for component in packages for location in hosts_for(matrix, locations, component)]
    for _, location in jobs:
        session.prepare_for(location.url) if hasattr(session, "prepare_for") else None
    reader = _Reader(session, read, progress, len(jobs))
    budget = page_seconds() + 2  # each request's own deadline, headers included (a body is bounded inside _get)
    for (component, location), result, why in bounded_map(reader.page, jobs, budget, reader.page_late):
        if result is None:
            read.unread.setdefault(location.host_id, why)
            continue
        read.pages.setdefault(component, []).append(result)
    wanted = [f for component, pages in read.pages.items() for p in pages for f in metadata_wanted(component, p, matrix)] if metadata else []
    reader.total += len(wanted)
    for file, text, why in bounded_map(reader.read_one, wanted, budget * 3, lambda file, seconds: (file, None, f"no complete answer within {seconds:.0f} s")):
        read.metadata[file.url] = text
        if why:
            read.metadata_problems.append(f"{file.filename}: {why}")
    for component in packages:
        read.pages.setdefault(component, [])
    read.seconds = time.monotonic() - started
    return read


class _Reader:
    """The calls read_registries runs in bounded_map's workers: one page, one METADATA; ``down``: the hosts that failed
    (their other pages are not asked for); progress counted under a lock."""

    def __init__(self, session, read: RegistryRead, progress: Optional[Callable[[str], None]], total: int) -> None:
        self.session = session
        self.read = read
        self.progress = progress
        self.lock = threading.Lock()
        self.done = 0
        self.total = total
        self.down: set[str] = set()

    def tick(self, what: str) -> None:
        with self.lock:
            self.done += 1
            if self.progress is not None:
                self.progress(f"{self.done}/{self.total} {what}")

    def page(self, job):
        component, location = job
        if location.host_id in self.down:
            self.tick(f"{location.host_id}/{component.distribution} skipped")
            return job, None, self.read.unread.get(location.host_id, "")
        try:
            result = read_page(self.session, location, component.distribution)
            self.tick(f"{location.host_id}/{component.distribution}")
            return job, result, ""
        except ReadError as exc:
            with self.lock:
                self.down.add(location.host_id)
            self.tick(f"{location.host_id}/{component.distribution} failed")
            return job, None, str(exc)

    def page_late(self, job, seconds):
        component, location = job
        with self.lock:
            self.down.add(location.host_id)
        return job, None, f"{shown(location.url, 160)} gave no complete answer within {seconds:.0f} s"

    def read_one(self, file: RegistryFile):
        try:
            text = read_metadata_text(self.session, file)
            self.tick(f"METADATA of {file.filename}")
            return file, text, ""
        except ReadError as exc:
            self.tick(f"METADATA of {file.filename} failed")
            return file, None, str(exc)


def terminal_progress(stream=None) -> Optional[Callable[[str], None]]:
    """Progress lines on stderr, rewritten in place, only when stderr is a terminal."""
    stream = stream or sys.stderr
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None

    from ..console import visible_line
    from ..redact import redact_text

    def say(text: str) -> None:  # text holds a file name from the index's page: its escapes are shown, never sent
        stream.write(f"\r\x1b[2Kcompat matrix update: reading {visible_line(redact_text(text))}")
        stream.flush()

    return say


__all__ = ["BINARIES", "RegistryRead", "read_registries", "terminal_progress", "IndexRefused"]
