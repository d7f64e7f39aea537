"""scripts/crosscheck_registry.py against a FIXTURE PyPI JSON API served on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import FIXTURES, ROOT

SCRIPT = ROOT / "scripts" / "crosscheck_registry.py"


def wheel(name, version, minor, yanked=False):
    return {"filename": f"{name}-{version}-cp3{minor}-cp3{minor}-manylinux2014_x86_64.whl", "yanked": yanked, "requires_python": ">=3.8"}


def fixture_registry():
    """FIXTURE listing that agrees with tests/fixtures/mini_matrix.toml."""
    return {
        "torch": {"releases": {v: [wheel("torch", v, m) for m in (8, 9, 10)] for v in ("1.12.0", "1.12.1")}},
        "intel-extension-for-pytorch": {"releases": {v: [wheel("intel_extension_for_pytorch", v, m) for m in (8, 9, 10)] for v in ("1.12.100", "1.12.300")}},
        "transformers": {"releases": {
            "4.30.0": [{"filename": "transformers-4.30.0-py3-none-any.whl", "yanked": False, "requires_python": ">=3.8"}],
            "4.30.1": [{"filename": "transformers-4.30.1-py3-none-any.whl", "yanked": False, "requires_python": ">=3.8"}],
            "4.30.2": [{"filename": "transformers-4.30.2-py3-none-any.whl", "yanked": True, "requires_python": ">=3.8"}],
        }},
        "accelerate": {"releases": {v: [{"filename": f"accelerate-{v}-py3-none-any.whl", "yanked": False, "requires_python": ">=3.8"}] for v in ("0.20.1", "0.20.2", "0.20.3")}},
        "torchvision": {"releases": {}},
        "torchaudio": {"releases": {}},
    }


@pytest.fixture
def pypi_server():
    state = {"data": fixture_registry(), "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            name = self.path.strip("/").split("/")[-2]
            body = json.dumps(state["data"].get(name, {"releases": {}})).encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/pypi"
    server.shutdown()
    server.server_close()


def run(matrix, url, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--matrix", str(matrix), "--pypi-url", url, "--timeout", "10", *extra],
                          capture_output=True, text=True, timeout=60, check=False)


def test_agreeing_registry_passes_and_records(tmp_path, pypi_server):
    state, url = pypi_server
    matrix = tmp_path / "matrix.toml"
    shutil.copy(FIXTURES / "mini_matrix.toml", matrix)
    done = run(matrix, url, "--record")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 disagreements" in done.stdout
    assert 'registry_checked = "fixture"' not in matrix.read_text()
    assert "recorded registry_checked" in done.stdout


def test_every_disagreement_is_reported(tmp_path, pypi_server):
    state, url = pypi_server
    data = state["data"]
    data["torch"]["releases"]["1.12.1"].append(wheel("torch", "1.12.1", 11))  # a Python the matrix does not list
    data["transformers"]["releases"]["4.30.3"] = [{"filename": "transformers-4.30.3-py3-none-any.whl", "yanked": False}]
    data["accelerate"]["releases"]["0.20.3"][0]["yanked"] = True
    data["torch"]["releases"]["1.13.0"] = [wheel("torch", "1.13.0", 10)]
    matrix = tmp_path / "matrix.toml"
    shutil.copy(FIXTURES / "mini_matrix.toml", matrix)
    done = run(matrix, url, "--record")
    assert done.returncode == 1
    out = done.stdout
    assert "DISAGREE torch 1.12.1: PyPI wheels are for Python 3.8, 3.9, 3.10, 3.11, the matrix says 3.8, 3.9, 3.10" in out
    assert "DISAGREE transformers 4.30.*: releases differ (on PyPI only: 4.30.3" in out
    assert "DISAGREE accelerate 0.20.*: yanked on PyPI: 0.20.3; the matrix says none" in out
    assert "NEW      torch 1.13.0" in out
    assert "3 disagreements" in out
    assert 'registry_checked = "fixture"' in matrix.read_text()  # not recorded


def test_unreadable_registry_exits_2(tmp_path, pypi_server):
    state, url = pypi_server
    state["status"] = 503
    done = run(FIXTURES / "mini_matrix.toml", url)
    assert done.returncode == 2
    assert "answered HTTP 503" in done.stderr
