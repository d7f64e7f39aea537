"""What compat trusts for TLS (compatmatrix/install/trust.py), over REAL TLS: a throwaway CA made with the openssl
command, the FIXTURE index (tests/fixture_index.py) served over https on 127.0.0.1, no mock of ssl anywhere.

The machine these tests run on may sit behind a TLS-intercepting proxy and name its CA in PIP_CERT, SSL_CERT_FILE,
REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, SSL_CERT_DIR and pip's configuration: every test here starts from the scrubbed
base environment (tests/clean_env.py) without those, with PIP_CONFIG_FILE=/dev/null (no pip.conf), and sets only
what it tests.

Side effects: openssl (bounded) in a temp folder, an https server on 127.0.0.1 (port 0) in a thread, compat and pip
as child processes, a venv.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from compatmatrix.install import trust
from compatmatrix.install.trust import CERTIFI, PIP_CONFIG, SYSTEM, Trust, TrustedSession, TrustError, TrustInputError

from ..clean_env import base_env
from ..fixture_index import FixtureIndex, build_wheel, serve
from ..install_helpers import PLATFORM, make_venv, stack_index

TRUST_VARIABLES = ("PIP_CERT", "PIP_CONFIG_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
FIX = "set PIP_CERT or SSL_CERT_FILE to your proxy's CA bundle"

# ---------------------------------------------------------------- a throwaway CA and an https FIXTURE index

_SERVER_EXTENSIONS = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """(ca.pem, ca.key) of a new self-signed CA."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=compatmatrix tests {name} (throwaway)",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.key"


def make_server_cert(folder: Path, ca: Path, ca_key: Path) -> tuple[Path, Path]:
    """(cert.pem, key.pem) for 127.0.0.1, signed by ``ca``."""
    (folder / "server.ext").write_text(_SERVER_EXTENSIONS)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=folder)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", str(ca), "-CAkey", str(ca_key), "-set_serial", "4242", "-days", "2",
             "-extfile", "server.ext", "-out", "server.pem", cwd=folder)
    return folder / "server.pem", folder / "server.key"


class TLSServer(ThreadingHTTPServer):
    """The FIXTURE index's own request handler behind TLS; the handshake happens in the request's thread, and one
    the client refuses (an unknown CA: what some tests expect) ends that connection quietly."""

    daemon_threads = True

    def __init__(self, handler, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.context = context

    def finish_request(self, request, client_address) -> None:
        request.settimeout(30)
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(wrapped, client_address, self)
        finally:
            wrapped.close()


def serve_tls(index: FixtureIndex, cert: Path, key: Path) -> TLSServer:
    # the handler class is fixture_index.serve's; its plain-HTTP server is stopped at once
    plain, _ = serve(index)
    handler = plain.RequestHandlerClass
    plain.shutdown()
    plain.server_close()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = TLSServer(handler, context)
    index.url = f"https://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The test CA (which signs the server), another CA (which does not), and the server's certificate."""
    if not shutil.which("openssl"):
        pytest.skip("the openssl command is not installed (Debian: apt-get install openssl)")
    folder = tmp_path_factory.mktemp("pki")
    ca, ca_key = make_ca(folder, "ca")
    other, _ = make_ca(folder, "other-ca")
    cert, key = make_server_cert(folder, ca, ca_key)
    # the folder as OpenSSL reads one (SSL_CERT_DIR, a CA path): the test CA under its subject hash, as c_rehash links it
    subject_hash = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(ca)], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    (folder / f"{subject_hash}.0").symlink_to(ca.name)
    return {"ca": ca, "other": other, "cert": cert, "key": key, "folder": folder}


@pytest.fixture(scope="module")
def https_index(pki, tmp_path_factory):
    """The FIXTURE stack (torch 2.7.0 + filelock on pytorch-cpu/pypi) served over https."""
    index = stack_index(tmp_path_factory.mktemp("tls-index"))
    server = serve_tls(index, pki["cert"], pki["key"])
    yield index
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def small_https_index(pki, tmp_path_factory):
    """One FIXTURE wheel on one host, over https: for the in-process session tests (no compat run)."""
    root = tmp_path_factory.mktemp("tls-small")
    index = FixtureIndex(root / "index")
    index.add("pypi", build_wheel(root / "wheels", "filelock", "3.0.0"))
    server = serve_tls(index, pki["cert"], pki["key"])
    yield index
    server.shutdown()
    server.server_close()


def compat(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """compat as a child process: the scrubbed base environment, none of the trust variables, no pip.conf, then ``env``."""
    full = base_env({"NO_COLOR": "1", "PIP_CONFIG_FILE": os.devnull, **env}, drop=TRUST_VARIABLES)
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout,
                          env=full, check=False, stdin=subprocess.DEVNULL)


def download(index: FixtureIndex, dest: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """torch from pytorch-cpu by compat's own requests, its dependency filelock from pypi by pip: both over https."""
    return compat("download", "-d", str(dest), *PLATFORM, "torch==2.7.0", *index.index_args(), env=env)


# ---------------------------------------------------------------- the decision (no network)


def no_config() -> None:
    return None


def test_precedence_is_pip_cert_then_pip_config_then_the_requests_and_openssl_variables():
    everything = {"PIP_CERT": "/a.pem", "REQUESTS_CA_BUNDLE": "/c.pem", "CURL_CA_BUNDLE": "/d.pem", "SSL_CERT_FILE": "/e.pem", "SSL_CERT_DIR": "/f"}
    assert trust.choose(everything, lambda: "/b.pem") == Trust("PIP_CERT", "/a.pem")
    asked = []
    trust.choose(everything, lambda: asked.append(1))
    assert asked == []  # pip's configuration is not read when PIP_CERT decides
    rest = dict(everything)
    del rest["PIP_CERT"]
    assert trust.choose(rest, lambda: "/b.pem") == Trust(PIP_CONFIG, "/b.pem")
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        assert trust.choose(rest, no_config) == Trust(variable, rest[variable])
        del rest[variable]
    assert trust.choose(rest, no_config) is None
    assert trust.choose({"PIP_CERT": "", "SSL_CERT_FILE": "/e.pem"}, lambda: "") == Trust("SSL_CERT_FILE", "/e.pem")  # empty is unset
    assert trust.choose({"PIP_CERT": "~/ca.pem"}, no_config).path == os.path.expanduser("~/ca.pem")  # as pip's --cert


@pytest.mark.skipif(sys.version_info < (3, 10), reason="truststore needs Python 3.10: compat (like pip) uses certifi there")
def test_with_nothing_named_the_default_is_the_system_trust_store():
    pytest.importorskip("truststore")
    assert trust.decide({}, no_config) == Trust(SYSTEM, None)


def test_a_named_bundle_compat_cannot_use_is_refused_by_name(tmp_path, pki):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "empty").mkdir()
    cases = {
        ("SSL_CERT_DIR", str(tmp_path / "empty")): "SSL_CERT_DIR names {path}, which holds no hashed CA certificate",
        ("REQUESTS_CA_BUNDLE", str(tmp_path / "empty")): "REQUESTS_CA_BUNDLE names {path}, which holds no hashed CA certificate",
        ("PIP_CERT", str(tmp_path / "missing.pem")): "PIP_CERT names {path}, which does not exist",
        ("SSL_CERT_FILE", str(tmp_path)): "SSL_CERT_FILE names {path}, which is a folder",
        ("SSL_CERT_DIR", str(pki["ca"])): "SSL_CERT_DIR names {path}, which is not a folder",
        ("REQUESTS_CA_BUNDLE", str(tmp_path / "junk.pem")): "REQUESTS_CA_BUNDLE names {path}, which holds no PEM certificate",
        ("CURL_CA_BUNDLE", str(tmp_path / "fifo")): "CURL_CA_BUNDLE names {path}, which is not a regular file",  # never opened: no block
    }
    for (variable, path), expected in cases.items():
        with pytest.raises(TrustInputError) as caught:
            trust.decide({variable: path}, no_config)
        assert caught.value.exit_code == 2
        assert expected.format(path=path) in caught.value.message, caught.value.message
        assert "does not fall back" in caught.value.message and variable in caught.value.fix
    with pytest.raises(TrustInputError) as caught:
        trust.decide({"SSL_CERT_FILE": str(pki["ca"])}, lambda: str(tmp_path / "gone.pem"))  # pip's cert outranks SSL_CERT_FILE
    assert f"pip's configuration names cert = {tmp_path / 'gone.pem'}, which does not exist" in caught.value.message
    assert "pip config list" in caught.value.fix
    for usable in ({"PIP_CERT": str(pki["ca"])}, {"PIP_CERT": str(pki["folder"])}, {"SSL_CERT_DIR": str(pki["folder"])}):
        assert trust.decide(usable, no_config).path == next(iter(usable.values()))


def test_pip_is_given_the_bundle_compat_chose_and_nothing_that_outranks_it():
    env = {"SSL_CERT_FILE": "/e.pem", "UNRELATED": "1"}
    trust.give_pip(env, env, no_config)
    assert env == {"SSL_CERT_FILE": "/e.pem", "UNRELATED": "1", "PIP_CERT": "/e.pem"}
    env = {"PIP_CERT": "/a.pem", "REQUESTS_CA_BUNDLE": "/c.pem", "CURL_CA_BUNDLE": "/d.pem"}
    trust.give_pip(env, dict(env), no_config)
    assert env == {"PIP_CERT": "/a.pem"}  # inside pip, REQUESTS_CA_BUNDLE would win over PIP_CERT
    env = {}
    trust.give_pip(env, {}, lambda: "/b.pem")
    assert env == {"PIP_CERT": "/b.pem"}
    env = {}
    trust.give_pip(env, {}, no_config, lambda: Trust(CERTIFI, "/certifi.pem"))
    assert env == {}  # nothing named, certifi compat's default (Python 3.9): pip's default is certifi too
    env = {"REQUESTS_CA_BUNDLE": ""}
    trust.give_pip(env, {}, no_config, lambda: Trust(SYSTEM, None))
    system = trust.system_bundle()
    assert env == ({"PIP_CERT": system} if system else {"REQUESTS_CA_BUNDLE": ""})  # the system store's file, where it has one


# ---------------------------------------------------------------- compat's session over real TLS (in-process)


def test_the_session_verifies_with_the_decision_whatever_requests_ca_bundle_says(small_https_index, pki, monkeypatch):
    url = small_https_index.host_url("pypi") + "/filelock/"
    said = []
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki["other"]))  # plain requests would verify with this one and fail
    with TrustedSession(said.append, lambda: trust.decide({"PIP_CERT": str(pki["ca"])}, no_config)) as session:
        assert session.get(url, timeout=30).status_code == 200
        assert session.get(url, timeout=30).status_code == 200
    assert said == [f"  TLS: certificates checked against the CA bundle in PIP_CERT ({pki['ca']})"]  # said once
    with requests.Session() as plain, pytest.raises(requests.exceptions.SSLError):
        plain.get(url, timeout=30)


def test_a_certificate_that_does_not_verify_is_one_sentence_naming_the_host_and_the_fix(small_https_index, pki):
    url = small_https_index.host_url("pypi") + "/filelock/"
    host = url.split("/")[2]
    for decision in (lambda: trust.decide({}, no_config), lambda: trust.decide({"SSL_CERT_FILE": str(pki["other"])}, no_config)):
        with TrustedSession(None, decision) as session, pytest.raises(TrustError) as caught:
            session.get(url, timeout=30)
        message = caught.value.message
        assert message.startswith(f"The TLS certificate of {host} cannot be verified (") and message.endswith("; nothing was changed."), message
        assert FIX in caught.value.fix and caught.value.exit_code == 1
    assert f"with the CA bundle in SSL_CERT_FILE ({pki['other']})" in message


# ---------------------------------------------------------------- compat and the pip it runs, as a user runs them


@pytest.mark.integration
def test_no_ca_given_fails_in_one_sentence_naming_the_host(https_index, tmp_path):
    done = download(https_index, tmp_path / "house", {})
    assert done.returncode == 1, done.stdout + done.stderr
    host = https_index.url.split("/")[2]
    assert f"compat: The TLS certificate of {host} cannot be verified (" in done.stderr, done.stderr
    assert FIX in done.stderr and "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("compat:")]) == 1


@pytest.mark.integration
@pytest.mark.parametrize("variable", ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "pip.conf"])
def test_the_ca_named_in_one_place_is_trusted_by_compat_and_by_its_pip(https_index, pki, tmp_path, variable):
    if variable == "pip.conf":
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\ncert = {pki['ca']}\n")
        env, named = {"PIP_CONFIG_FILE": str(conf)}, f"the CA bundle pip's configuration names (cert = {pki['ca']})"
    else:
        env, named = {variable: str(pki["ca"])}, f"the CA bundle in {variable} ({pki['ca']})"
    house = tmp_path / "house"
    done = download(https_index, house, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"TLS: certificates checked against {named}" in done.stderr
    wheels = sorted(p.name for p in house.glob("*.whl"))
    assert any(n.startswith("torch-2.7.0") for n in wheels) and "filelock-3.0.0-py3-none-any.whl" in wheels, wheels  # filelock: pip's download
    assert "filelock-3.0.0-py3-none-any.whl" in (house / "compat-wheelhouse.lock").read_text()


@pytest.mark.integration
def test_compat_and_its_pip_agree_when_requests_ca_bundle_names_another_ca(https_index, pki, tmp_path):
    # PIP_CERT decides for compat; pip must not take REQUESTS_CA_BUNDLE instead (inside pip it outranks PIP_CERT)
    done = download(https_index, tmp_path / "house", {"PIP_CERT": str(pki["ca"]), "REQUESTS_CA_BUNDLE": str(pki["other"])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "house" / "filelock-3.0.0-py3-none-any.whl").is_file()


@pytest.mark.integration
def test_install_behind_the_proxy_with_pip_cert_only(https_index, pki, tmp_path):
    python = make_venv(tmp_path / "venv")
    done = compat("install", "--python", str(python), "--installer", "pip", "torch==2.7.0", *https_index.index_args(),
                  env={"PIP_CERT": str(pki["ca"])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: installed and verified" in done.stderr
    frozen = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "torch==2.7.0+cpu" in frozen and "filelock==3.0.0" in frozen, frozen


@pytest.mark.integration
def test_pip_cert_naming_a_missing_file_is_an_error_naming_pip_cert(https_index, pki, tmp_path):
    missing = tmp_path / "no-such-ca.pem"
    done = download(https_index, tmp_path / "house", {"PIP_CERT": str(missing), "SSL_CERT_FILE": str(pki["ca"])})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"compat: PIP_CERT names {missing}, which does not exist; compat does not fall back to another CA bundle" in done.stderr
    assert "Point PIP_CERT at your CA bundle" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- the system store alone, and where it is

def test_the_system_store_is_not_widened_by_certifi(small_https_index, pki, monkeypatch):
    """requests loads its default bundle (certifi) into any SSL context it is given; with the system store compat
    trusts that store alone. The check: certifi's place is made to hold the test CA -- the request must still fail."""
    pytest.importorskip("truststore")
    import requests.adapters

    url = small_https_index.host_url("pypi") + "/filelock/"
    monkeypatch.setattr(requests.adapters, "DEFAULT_CA_BUNDLE_PATH", str(pki["ca"]))
    with TrustedSession(None, lambda: Trust(SYSTEM, None)) as session, pytest.raises(TrustError):
        session.get(url, timeout=30)
    with TrustedSession(None, lambda: Trust(CERTIFI, str(pki["ca"]))) as session:  # the same file, named: trusted
        assert session.get(url, timeout=30).status_code == 200


def _paths(cafile, capath):
    return ssl.DefaultVerifyPaths(cafile, capath, "SSL_CERT_FILE", cafile, "SSL_CERT_DIR", capath)


def test_the_system_bundle_is_a_file_with_certificates_or_a_hashed_folder_else_none(tmp_path, pki, monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("the system store is a file only on Linux")
    empty = tmp_path / "certs"
    empty.mkdir()
    (tmp_path / "blank.pem").write_text("")
    monkeypatch.setattr(trust, "_CA_FILES", ())
    # an image without ca-certificates: OpenSSL's default file is missing or blank and its folder empty -> nothing
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: _paths(str(tmp_path / "missing.pem"), str(empty)))
    assert trust.system_bundle() is None
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: _paths(str(tmp_path / "blank.pem"), str(empty)))
    assert trust.system_bundle() is None
    env: dict[str, str] = {}
    trust.give_pip(env, {}, no_config, lambda: Trust(SYSTEM, None))
    assert "PIP_CERT" not in env  # pip keeps its own default rather than an empty store
    # a folder with a hashed link (what c_rehash / update-ca-certificates make) is a store
    (empty / "0123abcd.0").symlink_to(pki["ca"])
    assert trust.system_bundle() == str(empty)
    # the distribution's bundle where OpenSSL's default is missing
    os.mkfifo(tmp_path / "fifo.pem")  # never opened: it would block
    monkeypatch.setattr(trust, "_CA_FILES", (str(tmp_path / "fifo.pem"), str(tmp_path / "blank.pem"), str(pki["ca"])))
    assert trust.system_bundle() == str(pki["ca"])
