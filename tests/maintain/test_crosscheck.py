"""scripts/crosscheck_registry.py against a FIXTURE PyPI simple index (PEP 691 JSON pages) served on 127.0.0.1: the script
reads it with compat matrix update's own reader (compatmatrix/maintain/registry.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ..conftest import FIXTURES, ROOT

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
            name = self.path.strip("/").split("/")[-1]
            releases = state["data"].get(name, {"releases": {}})["releases"]
            files = [{"filename": f["filename"], "url": f"../../files/{f['filename']}", "hashes": {},
                      "yanked": (f.get("yanked_reason") or True) if f.get("yanked") else False, "requires-python": f.get("requires_python")}
                     for entries in releases.values() for f in entries]
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": name, "files": files}).encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/simple"
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


# --- local labels, yank reasons, glibc floors; torchvision/torchaudio like torch ---------------------------------

AUDIO = ('\n[[torchaudio]]\nversion = "0.12.1"\ntorch = "1.12.1"\nsource = "fixture"\n'
         '[[torchaudio.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\nsource = "fixture"\n')


def edited_matrix(tmp_path, *edits, extra=""):
    text = (FIXTURES / "mini_matrix.toml").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "matrix.toml"
    path.write_text(text + extra)
    return path


def test_labels_yank_reasons_and_glibc_floors_are_compared(tmp_path, pypi_server):
    state, url = pypi_server
    data = state["data"]
    # torch 1.12.0: yanked on PyPI with a reason; the matrix says yanked with another reason
    for entry in data["torch"]["releases"]["1.12.0"]:
        entry.update(yanked=True, yanked_reason="broken build")
    # torch 1.12.1: manylinux_2_28 only on PyPI, the matrix records no floor: news, not a failure
    data["torch"]["releases"]["1.12.1"] = [
        {"filename": f"torch-1.12.1-cp3{m}-cp3{m}-manylinux_2_28_x86_64.whl", "yanked": False, "requires_python": ">=3.8"} for m in (8, 9, 10)
    ]
    # torchaudio: yanked on PyPI, not in the matrix
    data["torchaudio"]["releases"]["0.12.1"] = [dict(wheel("torchaudio", "0.12.1", m, yanked=True), yanked_reason="Contains an incorrect torch dependency")
                                                for m in (8, 9, 10)]
    matrix = edited_matrix(
        tmp_path,
        ('[[torch]]\nversion = "1.12.0"\nsource = "fixture"\n[[torch.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n',
         '[[torch]]\nversion = "1.12.0"\nsource = "fixture"\n[[torch.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n'
         'yanked = true\nyanked_reason = "bad build"\n'),
        # IPEX 1.12.100's PyPI wheels: a '+cpu' label PyPI cannot have, and a glibc floor the files do not state
        ('torch = "1.12.0"\ntorch_accepts = "==1.12.*"\nguard = "exit127"\nsource = "fixture"\n[[ipex.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n',
         'torch = "1.12.0"\ntorch_accepts = "==1.12.*"\nguard = "exit127"\nsource = "fixture"\n[[ipex.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n'
         'local_label = "+cpu"\nglibc_min = "2.28"\n'),
        ('accelerate = ["pypi"]\n', 'accelerate = ["pypi"]\ntorchaudio = ["pypi"]\n'),
        extra=AUDIO,
    )
    done = run(matrix, url)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "DISAGREE torch 1.12.0: PyPI's yank reason is 'broken build', the matrix says 'bad build'" in out
    assert "DISAGREE intel-extension-for-pytorch 1.12.100: PyPI file labels: none (PyPI refuses local versions); the matrix says local_label='+cpu'" in out
    assert "DISAGREE intel-extension-for-pytorch 1.12.100: PyPI's Linux x86_64 wheels need glibc >= 2.17, the matrix says glibc_min=2.28" in out
    assert "DISAGREE torchaudio 0.12.1: PyPI yanked=True, the matrix says yanked=False" in out
    assert "FLOOR    torch 1.12.1: PyPI's Linux x86_64 wheels need glibc >= 2.28; the matrix records no glibc_min" in out
    assert "4 disagreements" in out and "1 glibc floors not recorded" in out


def test_recorded_floors_and_reasons_that_agree_pass(tmp_path, pypi_server):
    state, url = pypi_server
    for entry in state["data"]["torch"]["releases"]["1.12.0"]:
        entry.update(yanked=True, yanked_reason="bad build")
    matrix = edited_matrix(
        tmp_path,
        ('[[torch]]\nversion = "1.12.0"\nsource = "fixture"\n[[torch.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n',
         '[[torch]]\nversion = "1.12.0"\nsource = "fixture"\n[[torch.wheels]]\nhost = "pypi"\npython = ["3.8", "3.9", "3.10"]\n'
         'yanked = true\nyanked_reason = "bad build"\nglibc_min = "2.17"\n'),
    )
    done = run(matrix, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 disagreements" in done.stdout and "0 glibc floors not recorded" in done.stdout
