"""The planners' failure wording: an index that cannot be reached (network, proxy, DNS) is told apart from a
requirement no release satisfies -- from what real pip and real uv print, not from made-up text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compatmatrix.install.planners import unreachable
from compatmatrix.install.runner import uv_binary

from ..fixture_index import FixtureIndex, build_wheel, serve
from ..install.test_install_real import closed_port

# pip's last lines in a CI run whose proxy's name stopped resolving for a few seconds (2026-11-23)
CI_PIP = ("WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by "
          "'ProxyError('Cannot connect to proxy.', NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f25e474f850>: "
          "Failed to establish a new connection: [Errno -2] Name or service not known'))': /simple/huggingface-hub/\n"
          "ERROR: Could not find a version that satisfies the requirement huggingface-hub<3.0,>=1.31.0 (from transformers) (from versions: none)\n"
          "ERROR: No matching distribution found for huggingface-hub<3.0,>=1.31.0\n")


def _quiet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NO_PROXY": "*"}


# one retry: pip reports a connection failure only as the warning before a retry (the last failure is logged at debug
# level); compat leaves pip's retries at their default (5) or the user's PIP_RETRIES
def _pip(index_url: str, requirement: str, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "1", "--timeout", "5", "-d", str(dest),
                           "--index-url", index_url, requirement], capture_output=True, text=True, timeout=120, env=_quiet_env(), check=False)


def _uv(index_url: str, requirement: str) -> subprocess.CompletedProcess:
    return subprocess.run([uv_binary(), "pip", "compile", "--no-config", "--quiet", "--index-url", index_url, "-"], input=requirement + "\n",
                          capture_output=True, text=True, timeout=120, env={**_quiet_env(), "UV_HTTP_RETRIES": "1"}, check=False)


def test_the_ci_failure_is_an_unreachable_index():
    assert unreachable(CI_PIP)


@pytest.mark.integration
def test_real_pip_and_uv_at_a_closed_port_are_unreachable_and_a_missing_version_is_not(tmp_path):
    closed = f"http://127.0.0.1:{closed_port()}/simple"
    index = FixtureIndex(tmp_path / "index")
    index.add("pypi", build_wheel(tmp_path / "wheels", "filelock", "3.0.0"))
    server, _ = serve(index)
    try:
        served = index.host_url("pypi")
        done = _pip(closed, "filelock", tmp_path / "a")
        assert done.returncode != 0 and unreachable(done.stderr), done.stderr[-1500:]
        done = _pip(served, "filelock==9.9.9", tmp_path / "b")
        assert done.returncode != 0 and not unreachable(done.stderr), done.stderr[-1500:]
        if uv_binary() is None:
            return
        done = _uv(closed, "filelock")
        assert done.returncode != 0 and unreachable(done.stderr), done.stderr[-1500:]
        done = _uv(served, "filelock==9.9.9")
        assert done.returncode != 0 and not unreachable(done.stderr), done.stderr[-1500:]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_a_connection_pip_retried_and_then_read_is_not_an_unreachable_index(tmp_path):
    """A blip pip recovered from (the first connection dropped, the page then read) must not hide the real answer:
    no release satisfies the requirement."""
    import http.server
    import socket
    import threading

    requests_seen = {"n": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            requests_seen["n"] += 1
            if requests_seen["n"] == 1:  # the blip: the first connection is dropped without an answer
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            body = b'<html><body><a href="/files/filelock-3.0.0-py3-none-any.whl">filelock-3.0.0-py3-none-any.whl</a></body></html>'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = _pip(f"http://127.0.0.1:{server.server_address[1]}/simple", "filelock==9.9.9", tmp_path / "d")
    finally:
        server.shutdown()
        server.server_close()
    assert requests_seen["n"] >= 2 and "Retrying" in done.stderr, done.stderr[-1500:]
    assert done.returncode != 0 and "(from versions: 3.0.0)" in done.stderr, done.stderr[-1500:]
    assert not unreachable(done.stderr)
