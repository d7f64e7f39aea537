"""What compat trusts for TLS: one decision, used by every HTTP session compat makes and given to the pip it runs.

The first of these that is set wins (an empty value counts as unset):

1. ``PIP_CERT``
2. ``cert`` in pip's configuration (read once, with the rest of pip's transport settings: pipconfig.py, which runner.installer_env reads too)
3. ``REQUESTS_CA_BUNDLE``, 4. ``CURL_CA_BUNDLE``, 5. ``SSL_CERT_FILE``, 6. ``SSL_CERT_DIR``
7. the system trust store, through ``truststore`` (what pip >= 24.2 uses; Python >= 3.10 with truststore installed)
8. certifi's bundle (requests' default; what pip uses on Python 3.9)

A bundle named by 1-6 that is missing, unreadable, of the wrong kind (a folder for SSL_CERT_FILE) or holds no PEM
certificate is refused in one sentence naming where it was set (TrustInputError, exit 2): never a quiet fallback to
the next. The pip compat runs gets ``PIP_CERT`` = the bundle chosen (and uv ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``: give_uv), and no ``REQUESTS_CA_BUNDLE`` /
``CURL_CA_BUNDLE`` (inside pip those would outrank PIP_CERT), so both sides check certificates against the same file
(``give_pip``); with none named, on Linux, pip gets the system store's file (what truststore reads there), so a pip
older than 24.2 does not fall back to certifi where compat uses the system store. A certificate that does not verify is one sentence naming the host, the trust used and the fix
(TrustError, exit 1), not "cannot be reached".

The decision is made at a session's first https request (an offline install or a local index never needs one), so
the static commands (check, resolve) never read pip's configuration or import truststore.

Side effects: none at import. At a session's first https request: pip's configuration (a child process, once per
compat run, pipconfig.py, shared with runner.installer_env) unless PIP_CERT is set, a stat and a read of the bundle, the import of
truststore.
"""

from __future__ import annotations

import errno
import os
import ssl
import stat
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Optional

import requests

from ..errors import shown
from .errors import InstallError, InstallInputError
from .pipconfig import config_cert

Say = Callable[[str], None]
PIP_CONFIG = "cert in pip's configuration"
BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
# inside pip (requests' Session.merge_environment_settings), these outrank --cert / PIP_CERT
_OUTRANK_PIP_CERT = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
SYSTEM = "the system trust store"
CERTIFI = "certifi"
PROXY_FIX = "If a proxy intercepts TLS here, set PIP_CERT or SSL_CERT_FILE to your proxy's CA bundle (compat gives pip the same file)."


class TrustInputError(InstallInputError):
    """A CA bundle was named that compat cannot use (exit 2); nothing was done."""


class TrustError(InstallError):
    """A host's certificate does not verify with the trust compat uses (exit 1); nothing was changed."""


@dataclass(frozen=True)
class Trust:
    """Where the trust comes from (``source``: a variable name, PIP_CONFIG, SYSTEM or CERTIFI) and the bundle (a
    file or a folder; None for the system trust store)."""

    source: str
    path: Optional[str]

    @property
    def words(self) -> str:
        if self.source == SYSTEM:
            return "the system trust store (truststore)"
        if self.source == CERTIFI:
            return f"certifi's CA bundle ({self.path}; the system trust store needs truststore and Python >= 3.10)"
        kind = "CA folder" if self.source == "SSL_CERT_DIR" else "CA bundle"
        where = f"pip's configuration names (cert = {shown(self.path or '', 200)})" if self.source == PIP_CONFIG else f"in {self.source} ({shown(self.path or '', 200)})"
        return f"the {kind} {where}"


def choose(environ: Mapping[str, str], config_cert: Callable[[], Optional[str]]) -> Optional[Trust]:
    """The bundle the user named (1-6 above), or None; ``config_cert`` (pip's configuration) is asked only when
    PIP_CERT is unset. Reads no file."""
    value = environ.get("PIP_CERT", "")
    if value:
        return Trust("PIP_CERT", os.path.expanduser(value))  # pip's --cert is a "path" option: ~ is expanded
    value = config_cert() or ""
    if value:
        return Trust(PIP_CONFIG, os.path.expanduser(value))
    for variable in BUNDLE_VARIABLES:
        value = environ.get(variable, "")
        if value:
            return Trust(variable, value)
    return None


def _fix(trust: Trust) -> str:
    if trust.source == PIP_CONFIG:
        return "Correct or remove cert in pip's configuration (pip config list shows it): it should name your CA bundle, a PEM file."
    if trust.source == "SSL_CERT_DIR":
        return "Point SSL_CERT_DIR at a folder of CA certificates, or unset it."
    return f"Point {trust.source} at your CA bundle (a PEM file), or unset it."


def check(trust: Trust) -> None:
    """A bundle the user named must be usable: a regular file holding at least one PEM certificate (a folder for
    SSL_CERT_DIR; either for the others, as requests takes both, except SSL_CERT_FILE). TrustInputError otherwise."""
    path = trust.path or ""
    said = f"{trust.source} names {shown(path, 200)}" if trust.source != PIP_CONFIG else f"pip's configuration names cert = {shown(path, 200)}"

    def refuse(why: str) -> TrustInputError:
        return TrustInputError(f"{said}, which {why}; compat does not fall back to another CA bundle, so nothing was changed.", _fix(trust))

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise refuse("does not exist" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})") from None
    why = _folder_problem(trust, path) if stat.S_ISDIR(mode) else _file_problem(trust, path, mode)
    if why:
        raise refuse(why) from None


def _folder_problem(trust: Trust, path: str) -> str:
    """What makes a folder unusable as ``trust``'s bundle ("" if nothing)."""
    if trust.source == "SSL_CERT_FILE":
        return "is a folder, not a file (SSL_CERT_DIR takes a folder)"
    if not os.access(path, os.R_OK | os.X_OK):
        return "is a folder compat cannot read"
    if not _hashed_folder(path):  # OpenSSL looks certificates up by their hashed names only
        return "holds no hashed CA certificate (OpenSSL finds a folder's certificates only by hashed names: run c_rehash or openssl rehash on it)"
    return ""


def _file_problem(trust: Trust, path: str, mode: int) -> str:
    """What makes a file unusable as ``trust``'s bundle ("" if nothing)."""
    if trust.source == "SSL_CERT_DIR":
        return "is not a folder (SSL_CERT_FILE takes a file)"
    if not stat.S_ISREG(mode):
        return "is not a regular file"  # a FIFO is never opened: it could block
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError:
        return "holds no PEM certificate"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return ""


def default_trust() -> Trust:
    """The system trust store when truststore can be used (Python >= 3.10, installed), else certifi's bundle."""
    try:
        import truststore  # noqa: F401 - lazily: only a session's first https request needs it

        return Trust(SYSTEM, None)
    except ImportError:  # Python 3.9 (truststore needs 3.10), or compat installed without its dependencies
        return Trust(CERTIFI, requests.certs.where())


def pip_config_cert() -> Optional[str]:
    """``cert`` from pip's configuration, as runner.installer_env gives it to pip (the first one pip config list shows)."""
    return config_cert()


def decide(environ: Mapping[str, str] = os.environ, config_cert: Callable[[], Optional[str]] = pip_config_cert) -> Trust:
    """The trust of this run: the bundle the user named (checked), else the default."""
    named = choose(environ, config_cert)
    if named is None:
        return default_trust()
    check(named)
    return named


def system_bundle() -> Optional[str]:
    """The file (or folder) that is the system trust store on Linux: OpenSSL's own default, which truststore uses
    there. None elsewhere (macOS and Windows keep theirs in no file) or when it is missing."""
    if not sys.platform.startswith("linux"):
        return None
    paths = ssl.get_default_verify_paths()  # openssl_*: the built-in defaults, not what SSL_CERT_FILE/DIR say
    for candidate in (paths.openssl_cafile, *_CA_FILES):
        if candidate and _holds_a_certificate(candidate):
            return candidate
    if paths.openssl_capath and _hashed_folder(paths.openssl_capath):
        return paths.openssl_capath
    return None  # no usable system store (an image without ca-certificates): pip and uv keep their own defaults


# where Linux distributions keep the system CA bundle when OpenSSL's compiled-in default is elsewhere (truststore's list)
_CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem",
             "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem")


def _holds_a_certificate(path: str) -> bool:
    if not os.path.isfile(path):  # before opening: a FIFO would block
        return False
    try:
        with open(path, "rb") as handle:
            return b"-----BEGIN CERTIFICATE-----" in handle.read(1 << 20)
    except OSError:
        return False


def _hashed_folder(path: str) -> bool:
    """A folder OpenSSL can use as a CA path: it holds at least one hashed link (8 hex digits, '.', a digit)."""
    try:
        with os.scandir(path) as entries:
            return any(len(e.name) >= 10 and e.name[8] == "." and e.name[9:].isdigit() and all(c in "0123456789abcdef" for c in e.name[:8])
                       for e in entries)
    except OSError:
        return False


def give_pip(env: dict[str, str], environ: Mapping[str, str] = os.environ, config_cert: Callable[[], Optional[str]] = pip_config_cert,
             default: Callable[[], Trust] = default_trust) -> None:
    """The pip compat runs checks certificates against the bundle compat chose: PIP_CERT set to it, and the variables
    that would outrank PIP_CERT inside pip taken out. With none named and the system trust store as compat's default,
    on Linux pip is given that store's file too (a pip older than 24.2 would use certifi); elsewhere, or with certifi
    as the default, pip keeps its own default. A named bundle is checked by the session, whose first https request
    comes before pip's."""
    named = choose(environ, config_cert)
    path = named.path if named is not None else system_bundle() if default().source == SYSTEM else None
    if path is None:
        return
    env["PIP_CERT"] = path
    for variable in _OUTRANK_PIP_CERT:
        env.pop(variable, None)


def give_uv(env: dict[str, str], environ: Mapping[str, str] = os.environ, config_cert: Callable[[], Optional[str]] = pip_config_cert,
            default: Callable[[], Trust] = default_trust) -> None:
    """The uv compat runs checks certificates against the same bundle as compat: SSL_CERT_FILE (a file) or SSL_CERT_DIR
    (a folder) set to it, which uv reads instead of its built-in roots. With none named and the system trust store as
    compat's default, on Linux uv is given that store's file; with certifi as compat's default uv keeps its own roots
    (the same Mozilla list)."""
    named = choose(environ, config_cert)
    path = named.path if named is not None else system_bundle() if default().source == SYSTEM else None
    if path is None:
        return
    if os.path.isdir(path):
        env["SSL_CERT_DIR"] = path
        env.pop("SSL_CERT_FILE", None)
    else:
        env["SSL_CERT_FILE"] = path
        env.pop("SSL_CERT_DIR", None)


class _ContextAdapter(requests.adapters.HTTPAdapter):
    """An HTTPAdapter whose connections (direct or through a proxy) verify with ``context`` (truststore's)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context  # before super().__init__, which calls init_poolmanager
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        proxy_kwargs["ssl_context"] = self._context
        return super().proxy_manager_for(proxy, **proxy_kwargs)

    def cert_verify(self, conn, url, verify, cert):
        super().cert_verify(conn, url, verify, cert)
        if verify is True:  # the system store alone: requests would load certifi's bundle into the context on top of it
            conn.ca_certs = None
            conn.ca_cert_dir = None


def _verify_failure(exc: BaseException) -> Optional[str]:
    """The reason of the certificate verification failure inside ``exc`` (requests wraps urllib3's error, which wraps
    ssl's), or None when the TLS error is of another kind (a protocol mismatch, a reset)."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ssl.SSLCertVerificationError):
            return shown(item.verify_message or str(item), 160)
        todo += [*item.args, getattr(item, "reason", None), item.__cause__, item.__context__]
    return None


def _host(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    return (parsed.hostname or "?") + (f":{parsed.port}" if parsed.port else "")


class TrustedSession(requests.Session):
    """A requests.Session that verifies https with the decision above (made at its first https request, said once
    through ``say``), whatever REQUESTS_CA_BUNDLE says (requests would let it outrank the session's ``verify``), and
    turns a certificate that does not verify into TrustError. Proxies and the rest of the environment still apply."""

    def __init__(self, say: Optional[Say] = None, decision: Callable[[], Trust] = decide) -> None:
        super().__init__()
        self._say = say or (lambda line: None)
        self._decision = decision
        self.trust: Optional[Trust] = None

    def _decided(self) -> Trust:
        if self.trust is None:
            trust = self._decision()
            if trust.source == SYSTEM:
                import truststore

                self.mount("https://", _ContextAdapter(truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)))
            self.verify = trust.path or True
            self.trust = trust
            self._say(f"  TLS: certificates checked against {trust.words}")
        return self.trust

    def sibling(self) -> "TrustedSession":
        """A new session (its own connections) with this one's TLS decision (or the same way of making it), which it
        does not say again."""
        trust = self.trust
        return TrustedSession(None, (lambda: trust) if trust is not None else self._decision)

    def prepare_for(self, url: str) -> None:
        """Make the TLS decision now if ``url`` is https (before pages are read from several threads at once)."""
        if url.lower().startswith("https:"):
            self._decided()

    def merge_environment_settings(self, url, proxies, stream, verify, cert):
        merged = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if url.lower().startswith("https:") and verify in (None, True):
            merged["verify"] = self._decided().path or True
        return merged

    def send(self, request, **kwargs):
        try:
            return super().send(request, **kwargs)
        except requests.exceptions.SSLError as exc:
            why = _verify_failure(exc)
            if why is None:
                raise
            trust = self.trust or Trust(CERTIFI, requests.certs.where())
            raise TrustError(f"The TLS certificate of {_host(request.url or '')} cannot be verified ({why}) with {trust.words}; nothing was changed.",
                             PROXY_FIX) from None


def trusted_session(say: Optional[Say] = None) -> TrustedSession:
    """The session every network step of compat uses (install, download, preflight)."""
    return TrustedSession(say)
