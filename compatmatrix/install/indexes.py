"""Where each host's wheels really are (configurable), and reading their PEP 503 / find-links pages.

URLs from the command line, the environment and the config file are checked here (a control character, an
unknown scheme or a malformed host is a usage error naming the flag). Pages are read under an overall
deadline and a size cap (limits.py); an index that offers PEP 691's JSON pages is read through them (else PEP 503's
HTML); sha256 fragments are normalised to lowercase; a remote page cannot
point at local files (file:// links on an http(s) page are ignored). Redirects are followed on the same host
only (get_following): a page or a wheel redirected to another host, to a file:// URL, or in a loop is refused
in words. A page whose charset is unknown is read as UTF-8; one the HTML parser cannot read is refused.

Side effects: network (index pages), reading local folders.
"""

from __future__ import annotations

import html.parser
import os
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # requests is imported where a page is fetched: planning and export need only the locations
    import requests

from ..errors import CompatError, shown
from ..matrix.model import Matrix
from ..names import canonical_name
from ..values import odd_character, quoted
from .limits import DeadlineExceeded, Limits, deadline, limits, mib

TIMEOUT_S = 10.0
CONFIG_ENV = "COMPAT_CONFIG"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Link:
    filename: str
    url: str
    sha256: Optional[str]  # lowercase hex, from the page's #sha256= fragment (or the folder's lock)
    requires_python: Optional[str]
    yanked: bool
    other_hash: Optional[str] = None  # the algorithm of a fragment that is not sha256 (md5 on old indexes)


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


def checked_url(url: str, host_id: str, origin: str) -> str:
    """``url`` if compat can use it as a host's location; a usage error naming where it came from otherwise."""
    example = f"Write it like --index {host_id}=https://mirror.example/simple (or a local folder)."
    if odd_character(url):  # a line break of any kind (pip splits a requirements file at U+2028 too), a control character
        raise CompatError(f"The URL given for {host_id} ({origin}) contains a control character (a newline?): '{quoted(url)}'; refused.", example)
    try:
        parsed = urllib.parse.urlparse(url)
        port = parsed.port  # ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        raise CompatError(f"'{shown(url)}' given for {host_id} ({origin}) is not a valid URL ({exc}).", example) from None
    if parsed.scheme in ("http", "https"):
        if not parsed.hostname or any(c.isspace() for c in url) or port == 0:
            raise CompatError(f"'{shown(url)}' given for {host_id} ({origin}) has no valid host name or port.", example)
    elif parsed.scheme not in ("", "file"):
        raise CompatError(f"'{shown(url)}' given for {host_id} ({origin}) uses {parsed.scheme}://, which compat does not read.", example)
    return url


def _config_file() -> Optional[Path]:
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    candidate = Path(base) / "compatmatrix" / "config.toml"
    return candidate if candidate.exists() or candidate.is_symlink() else None  # a loop or a dangling link is said, not skipped


_HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONFIG_EXAMPLE = 'Write it like this, on two lines: [indexes] then pytorch-cpu = "https://mirror.example/whl/cpu".'


def _read_config(path: Path) -> dict[str, str]:
    """The [indexes] table of the config file; every problem is one CompatError naming the file (exit 2)."""
    from ..matrix.load import TomlProblem, read_toml_file

    try:
        data = read_toml_file(path)
    except OSError as exc:
        raise CompatError(f"The config file {path} cannot be read ({exc.strerror or exc}).", "Fix it or point COMPAT_CONFIG elsewhere.") from None
    except TomlProblem as exc:
        raise CompatError(f"The config file {path} {exc}.", "Fix it or point COMPAT_CONFIG elsewhere.") from None
    indexes = data.get("indexes", {})
    if not isinstance(indexes, dict):
        raise CompatError(f"{path}: [indexes] must map host ids to URLs, but it is {'an array' if isinstance(indexes, list) else type(indexes).__name__}.", _CONFIG_EXAMPLE)
    for host_id, url in indexes.items():
        if not _HOST_ID.fullmatch(host_id):
            raise CompatError(f"{path}: [indexes] key '{shown(host_id)}' is not a host id.", "Use a host id of the matrix, such as pypi or pytorch-cpu.")
        if not isinstance(url, str) or not url.strip() or any(c in url for c in "\0\r\n"):
            raise CompatError(f"{path}: [indexes] {host_id} must be a URL or a folder, in quotes on one line.", _CONFIG_EXAMPLE)
    return dict(indexes)


def configure_indexes(matrix: Matrix, overrides: Sequence[str] = ()) -> dict[str, IndexLocation]:
    """The URL of every host: matrix default < config file < COMPAT_INDEX_<HOST> < --index HOST=URL.

    A local folder (or file:// URL) is read as a find-links folder of wheel files."""
    locations = {h.id: IndexLocation(h.id, h.url, h.style, "matrix") for h in matrix.hosts.values()}
    config = _config_file()
    if config is not None:
        for host_id, url in _read_config(config).items():
            locations[host_id] = _location(matrix, host_id, url, f"config file {config}")
    for host_id in matrix.hosts:
        value = os.environ.get(env_name(host_id))
        if value:
            locations[host_id] = _location(matrix, host_id, value, env_name(host_id))
    for item in overrides:
        host_id, sep, url = item.partition("=")
        if not sep or not url:
            raise CompatError(f"'--index {shown(item)}' is not HOST=URL.", "Write it like --index pytorch-cpu=https://mirror.example/whl/cpu")
        locations[host_id.strip()] = _location(matrix, host_id.strip(), url, "--index")
    return locations


def _location(matrix: Matrix, host_id: str, url: str, origin: str) -> IndexLocation:
    """A matrix host at the URL (or folder) ``origin`` gives it."""
    if host_id not in matrix.hosts:
        raise CompatError(f"'{shown(host_id)}' is not a host in the matrix ({origin}).", f"Use one of: {', '.join(sorted(matrix.hosts))}.")
    url = checked_url(url.strip(), host_id, origin)
    return IndexLocation(host_id, url, _local_style(url, matrix.hosts[host_id].style), origin)


def _local_style(url: str, style: str) -> str:
    """"find-links" for a local folder (or file:// URL) of wheels with no index.html and no subfolder, else ``style``."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("", "file"):
        return style
    folder = Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else Path(url)
    try:
        if folder.is_dir() and not (folder / "index.html").exists() and not any(p.is_dir() for p in folder.iterdir()):
            return "find-links"  # a plain folder of wheels
    except OSError:
        pass  # unreadable: the preflight says so
    return style


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


def _hash_of(fragment: str) -> tuple[Optional[str], Optional[str]]:
    """(sha256 in lowercase, or None; the algorithm of another hash given instead, or None)."""
    values = urllib.parse.parse_qs(fragment)
    sha = (values.get("sha256") or [""])[0].strip().lower()
    if _SHA256.match(sha):
        return sha, None
    other = next((name for name in values if name in ("md5", "sha1", "sha224", "sha384", "sha512")), None)
    return None, other


def parse_links(page: str, base_url: str) -> list[Link]:
    """Wheel links of a PEP 503 project page or a find-links page (sha256 from the URL fragment). A remote page
    cannot point at local files: links to another scheme than http(s) are dropped."""
    parser = _Anchors()
    try:
        parser.feed(page)
        parser.close()
    except Exception as exc:  # noqa: BLE001 - html.parser raises AssertionError (and others) on markup it cannot take
        raise IndexRefused(base_url, f"the page cannot be read as an index page (the HTML parser stopped: {shown(str(exc), 80) or exc.__class__.__name__})") from None
    remote = urllib.parse.urlparse(base_url).scheme in ("http", "https")
    links = []
    for anchor in parser.links:
        href = anchor.get("href")
        if not href:
            continue
        try:
            url = urllib.parse.urljoin(base_url, href)
            parsed = urllib.parse.urlparse(url)
        except ValueError:
            continue  # a malformed link is not a wheel compat can take
        if remote and parsed.scheme not in ("http", "https"):
            continue
        filename = urllib.parse.unquote(parsed.path.rsplit("/", 1)[-1])
        if not filename.endswith(".whl") or "/" in filename or any(ord(c) < 32 for c in filename):
            continue  # not a wheel, or a name that could not be a file in the work folder
        sha256, other = _hash_of(parsed.fragment)
        links.append(Link(filename, urllib.parse.urlunparse(parsed._replace(fragment="")), sha256,
                          anchor.get("data-requires-python"), "data-yanked" in anchor, other))
    return links


def parse_json_links(page: str, base_url: str) -> list[Link]:
    """Wheel links of a PEP 691 JSON project page, with the same rules as parse_links (a remote page cannot point at
    local files; a file name must be a wheel's, with no folder in it)."""
    import json

    try:
        data = json.loads(page) if page else {"files": []}
    except (ValueError, RecursionError):
        raise IndexRefused(base_url, "the page cannot be read as an index page (it says it is JSON, but it is not)") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise IndexRefused(base_url, "the page cannot be read as an index page (a JSON page without a list of files)")
    remote = urllib.parse.urlparse(base_url).scheme in ("http", "https")
    links = []
    for entry in files:
        if not isinstance(entry, dict):
            continue
        filename, href = entry.get("filename"), entry.get("url")
        if not isinstance(filename, str) or not isinstance(href, str) or not filename.endswith(".whl"):
            continue
        if "/" in filename or any(ord(c) < 32 for c in filename):
            continue
        try:
            parsed = urllib.parse.urlparse(urllib.parse.urljoin(base_url, href))
        except ValueError:
            continue
        if remote and parsed.scheme not in ("http", "https"):
            continue
        hashes = entry.get("hashes") if isinstance(entry.get("hashes"), dict) else {}
        sha = hashes.get("sha256")
        sha = sha.strip().lower() if isinstance(sha, str) and _SHA256.match(sha.strip().lower()) else None
        other = None if sha else next((name for name in hashes if name in ("md5", "sha1", "sha224", "sha384", "sha512")), None)
        requires = entry.get("requires-python")
        links.append(Link(filename, urllib.parse.urlunparse(parsed._replace(fragment="")), sha, requires if isinstance(requires, str) else None,
                          bool(entry.get("yanked")), other))
    return links


REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 10


def _host(url: str) -> tuple[str, Optional[int]]:
    parsed = urllib.parse.urlparse(url)
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    port = parsed.port or default
    return (parsed.hostname or "").lower(), None if port == default else port


@contextmanager
def get_following(session: requests.Session, url: str, timeout: tuple[float, float], headers: Optional[Mapping[str, str]] = None) -> Iterator[requests.Response]:
    """``session.get(url, stream=True)``, following redirects on the same host only: a redirect to another host
    (CrossHostRedirect), to another scheme than http(s), in a loop or more than MAX_REDIRECTS times is
    refused (IndexRefused, in words). The response's ``url`` is the final one."""
    seen = [url]
    current = url
    while True:
        response = session.get(current, timeout=timeout, headers=dict(headers or {}), stream=True, allow_redirects=False)
        location = response.headers.get("Location")
        if response.status_code not in REDIRECTS or not location:
            break
        response.close()
        try:
            target = urllib.parse.urljoin(current, location)
            scheme = urllib.parse.urlparse(target).scheme
            _host(target)
        except ValueError:
            raise IndexRefused(url, f"it redirects to '{shown(location)}', which is not a URL") from None
        if scheme not in ("http", "https"):
            raise IndexRefused(url, f"it redirects to {shown(target, 120)}, and compat never follows a redirect to a {scheme or 'relative'}:// URL")
        if _host(target) != _host(url):
            raise CrossHostRedirect(url, target)
        if target in seen:
            raise IndexRefused(url, f"it redirects in a loop ({' -> '.join(shown(u, 120) for u in [*seen[seen.index(target):], target])})")
        if len(seen) > MAX_REDIRECTS:
            raise IndexRefused(url, f"it redirects more than {MAX_REDIRECTS} times")
        seen.append(target)
        current = target
    try:
        yield response
    finally:
        response.close()


def _decode(body: bytes, encoding: Optional[str]) -> str:
    """The page as text: in the charset it announces, or UTF-8 where that charset is unknown (charset=bogus-enc)."""
    try:
        return body.decode(encoding or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


JSON_PAGE = "application/vnd.pypi.simple.v1+json"
HTML_PAGE = "text/html"


def _get(session: requests.Session, url: str, lim: Limits, accept: str = HTML_PAGE) -> tuple[str, str]:
    """A page, whole, within the page deadline and under the page size cap ("" for a 404), and its final URL
    (after same-host redirects: relative links are taken from there)."""
    page, final, _ = _get_typed(session, url, lim, accept)
    return page, final


def _get_typed(session: requests.Session, url: str, lim: Limits, accept: str) -> tuple[str, str, str]:
    """_get, and the media type the server answered with."""
    import requests

    try:
        with deadline(lim.page_s), get_following(session, url, (TIMEOUT_S, lim.read_s), {"Accept": accept}) as response:
            kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if response.status_code == 404:
                return "", url, kind
            if response.status_code != 200:
                raise IndexUnreachable(url, f"HTTP {response.status_code}")
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > lim.page_bytes:
                raise IndexRefused(url, f"the page is larger than {mib(lim.page_bytes)}")
            body = bytearray()
            for chunk in response.iter_content(1 << 16):
                body += chunk
                if len(body) > lim.page_bytes:
                    raise IndexRefused(url, f"the page is larger than {mib(lim.page_bytes)}")
            encoding = "utf-8" if kind == JSON_PAGE else response.encoding  # JSON is UTF-8 (RFC 8259)
            return _decode(bytes(body), encoding), response.url or url, kind
    except DeadlineExceeded as exc:
        raise IndexUnreachable(url, f"no complete answer within {exc.seconds:.0f} s") from None
    except requests.RequestException as exc:
        raise IndexUnreachable(url, f"{exc.__class__.__name__}") from None


class IndexUnreachable(CompatError):
    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"{url} cannot be reached ({why}).", "")
        self.url = url
        self.why = why


class IndexRefused(IndexUnreachable):
    """The host answered with something compat does not read (a page over the size cap, markup the HTML parser
    cannot take, a redirect to a file:// URL or in a loop)."""


class CrossHostRedirect(IndexRefused):
    """A page or a wheel redirected to another host: compat takes each package from its configured host only."""

    def __init__(self, url: str, target: str) -> None:
        super().__init__(url, f"it redirects to {shown(target, 200)}, on another host, which compat does not follow "
                              "(each package comes only from the host configured for it)")
        self.target = target


def project_links(session: requests.Session, location: IndexLocation, project: str, timeout: float = TIMEOUT_S) -> list[Link]:
    """Every wheel the location offers for ``project`` (names compared as PEP 503 names). A local folder's hashes
    come from its compat-wheelhouse.lock, if it has one."""
    wanted = canonical_name(project)
    if location.is_local:
        from .wheelhouse import read_lock

        folder = location.local_path
        if location.style == "index":
            folder = folder / wanted
        if not folder.is_dir():
            if location.local_path.is_dir():
                return []
            raise IndexUnreachable(location.url, "no such folder")
        hashes = read_lock(folder) or {}
        return [Link(p.name, p.absolute().as_uri(), hashes.get(p.name), None, False) for p in sorted(folder.glob("*.whl")) if _project_of(p.name) == wanted]
    lim = limits()
    if location.style == "index":  # PEP 691's JSON when the index has it (read ~20x faster than the HTML), else PEP 503's HTML
        page, final, kind = _get_typed(session, location.url.rstrip("/") + f"/{wanted}/", lim, f"{JSON_PAGE}, {HTML_PAGE};q=0.1")
        return parse_json_links(page, final) if kind == JSON_PAGE else parse_links(page, final)
    page, final = _get(session, location.url, lim)
    return [link for link in parse_links(page, final) if _project_of(link.filename) == wanted]


def _project_of(filename: str) -> str:
    return canonical_name(filename.split("-", 1)[0])


def check_reachable(session: requests.Session, locations: Mapping[str, IndexLocation], host_ids: Sequence[str], timeout: float = TIMEOUT_S,
                    on_host: Optional[Callable[[str], None]] = None, stop: Optional[Callable[[], None]] = None) -> dict[str, str]:
    """host id -> why it cannot be reached, for every host in ``host_ids`` that does not answer (each within
    the preflight deadline, headers only). ``on_host`` is told each host before it is asked (it may raise to end
    the checks); ``stop`` bounds each host off the main thread (limits.deadline)."""
    import requests

    from .checkpoints import checkpoint

    problems = {}
    lim = limits()
    for host_id in dict.fromkeys(host_ids):
        checkpoint("preflight")
        if on_host is not None:
            on_host(host_id)
        location = locations[host_id]
        if location.is_local:
            if not location.local_path.is_dir():
                problems[host_id] = f"{location.local_path} is not a folder"
            continue
        try:
            # headers only: PyPI's root page alone is ~40 MB
            with deadline(lim.preflight_s, stop), get_following(session, location.url, (min(timeout, lim.preflight_s), lim.read_s),
                                                                {"Accept": "text/html"}) as response:
                if response.status_code >= 500:
                    problems[host_id] = f"HTTP {response.status_code}"
                elif response.status_code in (401, 403):
                    problems[host_id] = f"HTTP {response.status_code}: the index wants credentials"
        except DeadlineExceeded as exc:
            problems[host_id] = f"no complete answer within {exc.seconds:.0f} s"
        except IndexRefused as exc:
            problems[host_id] = exc.why
        except requests.RequestException as exc:
            problems[host_id] = exc.__class__.__name__
    return problems
