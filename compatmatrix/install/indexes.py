"""Where each host's wheels really are (configurable), and reading their PEP 503 / find-links pages."""

from __future__ import annotations

import html.parser
import os
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import requests

from ..errors import CompatError
from ..matrix.model import Matrix
from ..names import canonical_name

TIMEOUT_S = 10.0
CONFIG_ENV = "COMPAT_CONFIG"


@dataclass(frozen=True)
class Link:
    filename: str
    url: str
    sha256: Optional[str]
    requires_python: Optional[str]
    yanked: bool


@dataclass(frozen=True)
class IndexLocation:
    """A host as configured: its URL (http(s), file:// or a local folder) and how it is laid out."""

    host_id: str
    url: str
    style: str  # "index" (PEP 503: <url>/<project>/), "find-links" (one page or folder listing files)
    origin: str  # "matrix", "--index", "COMPAT_INDEX_...", "config file ..."

    @property
    def is_local(self) -> bool:
        return self.url.startswith("file://") or not urllib.parse.urlparse(self.url).scheme

    @property
    def local_path(self) -> Path:
        parsed = urllib.parse.urlparse(self.url)
        return Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else Path(self.url)


def env_name(host_id: str) -> str:
    return "COMPAT_INDEX_" + host_id.upper().replace("-", "_")


def _config_file() -> Optional[Path]:
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    candidate = Path(base) / "compatmatrix" / "config.toml"
    return candidate if candidate.exists() else None


def _read_config(path: Path) -> dict[str, str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CompatError(f"The config file {path} cannot be read ({exc}).", "Fix it or point COMPAT_CONFIG elsewhere.") from None
    indexes = data.get("indexes", {})
    if not isinstance(indexes, dict) or not all(isinstance(v, str) for v in indexes.values()):
        raise CompatError(f"{path}: [indexes] must map host ids to URLs.", 'Write it like: [indexes]\\npytorch-cpu = "https://mirror.example/whl/cpu"')
    return dict(indexes)


def configure_indexes(matrix: Matrix, overrides: Sequence[str] = ()) -> dict[str, IndexLocation]:
    """The URL of every host: matrix default < config file < COMPAT_INDEX_<HOST> < --index HOST=URL.

    A local folder (or file:// URL) is read as a find-links folder of wheel files."""
    locations = {h.id: IndexLocation(h.id, h.url, h.style, "matrix") for h in matrix.hosts.values()}

    def put(host_id: str, url: str, origin: str) -> None:
        if host_id not in matrix.hosts:
            raise CompatError(f"'{host_id}' is not a host in the matrix ({origin}).", f"Use one of: {', '.join(sorted(matrix.hosts))}.")
        url = url.strip()
        style = matrix.hosts[host_id].style
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme in ("", "file"):
            folder = Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else Path(url)
            if folder.is_dir() and not (folder / "index.html").exists() and not any(p.is_dir() for p in folder.iterdir()):
                style = "find-links"  # a plain folder of wheels
        locations[host_id] = IndexLocation(host_id, url, style, origin)

    config = _config_file()
    if config is not None:
        for host_id, url in _read_config(config).items():
            put(host_id, url, f"config file {config}")
    for host_id in matrix.hosts:
        value = os.environ.get(env_name(host_id))
        if value:
            put(host_id, value, env_name(host_id))
    for item in overrides:
        host_id, sep, url = item.partition("=")
        if not sep or not url:
            raise CompatError(f"'--index {item}' is not HOST=URL.", "Write it like --index pytorch-cpu=https://mirror.example/whl/cpu")
        put(host_id.strip(), url, "--index")
    return locations


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, Optional[str]]] = []
        self._current: Optional[dict[str, Optional[str]]] = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "a":
            self._current = dict(attrs)
            self._current["_text"] = ""

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["_text"] = (self._current.get("_text") or "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._current is not None:
            self.links.append(self._current)
            self._current = None


def parse_links(page: str, base_url: str) -> list[Link]:
    """Wheel links of a PEP 503 project page or a find-links page (sha256 from the URL fragment)."""
    parser = _Anchors()
    parser.feed(page)
    links = []
    for anchor in parser.links:
        href = anchor.get("href")
        if not href:
            continue
        url = urllib.parse.urljoin(base_url, href)
        parsed = urllib.parse.urlparse(url)
        filename = urllib.parse.unquote(parsed.path.rsplit("/", 1)[-1])
        if not filename.endswith(".whl"):
            continue
        sha256 = None
        fragment = urllib.parse.parse_qs(parsed.fragment)
        if "sha256" in fragment:
            sha256 = fragment["sha256"][0]
        links.append(Link(filename, urllib.parse.urlunparse(parsed._replace(fragment="")), sha256,
                          anchor.get("data-requires-python"), "data-yanked" in anchor))
    return links


def _get(session: requests.Session, url: str, timeout: float) -> str:
    try:
        response = session.get(url, timeout=timeout, headers={"Accept": "text/html"})
    except requests.RequestException as exc:
        raise IndexUnreachable(url, f"{exc.__class__.__name__}") from None
    if response.status_code == 404:
        return ""
    if response.status_code != 200:
        raise IndexUnreachable(url, f"HTTP {response.status_code}")
    return response.text


class IndexUnreachable(CompatError):
    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"{url} cannot be reached ({why}).", "")
        self.url = url
        self.why = why


def project_links(session: requests.Session, location: IndexLocation, project: str, timeout: float = TIMEOUT_S) -> list[Link]:
    """Every wheel the location offers for ``project`` (names compared as PEP 503 names)."""
    wanted = canonical_name(project)
    if location.is_local:
        folder = location.local_path
        if location.style == "index":
            folder = folder / wanted
        if not folder.is_dir():
            if location.local_path.is_dir():
                return []
            raise IndexUnreachable(location.url, "no such folder")
        hashes = read_wheelhouse_lock(folder)
        return [Link(p.name, p.resolve().as_uri(), hashes.get(p.name), None, False) for p in sorted(folder.glob("*.whl")) if _project_of(p.name) == wanted]
    if location.style == "index":
        url = location.url.rstrip("/") + f"/{wanted}/"
        page = _get(session, url, timeout)
        return parse_links(page, url)
    page = _get(session, location.url, timeout)
    return [link for link in parse_links(page, location.url) if _project_of(link.filename) == wanted]


WHEELHOUSE_LOCK = "compat-wheelhouse.lock"


def read_wheelhouse_lock(folder: Path) -> dict[str, str]:
    """filename -> sha256 from a wheelhouse's lock (the `sha256sum` format compat download writes)."""
    try:
        text = (folder / WHEELHOUSE_LOCK).read_text()
    except OSError:
        return {}
    hashes = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            hashes[parts[1]] = parts[0]
    return hashes


def _project_of(filename: str) -> str:
    return canonical_name(filename.split("-", 1)[0])


def check_reachable(session: requests.Session, locations: Mapping[str, IndexLocation], host_ids: Sequence[str], timeout: float = TIMEOUT_S) -> dict[str, str]:
    """host id -> why it cannot be reached, for every host in ``host_ids`` that does not answer."""
    problems = {}
    for host_id in dict.fromkeys(host_ids):
        location = locations[host_id]
        if location.is_local:
            if not location.local_path.is_dir():
                problems[host_id] = f"{location.local_path} is not a folder"
            continue
        try:
            # headers only: PyPI's root page alone is ~40 MB
            with session.get(location.url, timeout=timeout, headers={"Accept": "text/html"}, stream=True) as response:
                if response.status_code >= 500:
                    problems[host_id] = f"HTTP {response.status_code}"
                elif response.status_code in (401, 403):
                    problems[host_id] = f"HTTP {response.status_code}: the index wants credentials"
        except requests.RequestException as exc:
            problems[host_id] = exc.__class__.__name__
    return problems

