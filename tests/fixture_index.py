"""FIXTURE wheels and a FIXTURE package index served on 127.0.0.1.

The wheels are tiny, made-up packages NAMED like the real ones (torch, intel-extension-for-pytorch,
oneccl_bind_pt, transformers, accelerate) in versions that mirror real pairs, so compat's plan,
host assignment and installer can be tested without the real (unreachable or multi-GB) files.
Each wheel installs one module whose __init__ says FIXTURE. The server speaks PEP 503 (per-host
/simple/<project>/ pages with #sha256 fragments) and serves find-links pages, and can be told to
slow down, fail, or serve a file that does not match its published hash. For the fault tests it can
also trickle a response one byte a second (bounded: it gives up by itself after ``trickle_for``
seconds), publish no hash / an md5 only / an uppercase sha256, pad its pages, and send a wheel with
no Content-Length followed by junk.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional, Union


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


TORCH_SOURCE = """
class version:
    cuda = None
    debug = False
from . import distributed
"""
TORCH_DISTRIBUTED_SOURCE = """# FIXTURE torch.distributed
def is_available():
    return True
class Backend:
    backend_list = ["gloo"]
    @classmethod
    def register_backend(cls, name, func, devices=None):
        cls.backend_list.append(name)
def is_backend_available(name):
    return name in Backend.backend_list
"""
CCL_SOURCE = """
import os
import torch
cwd = os.path.dirname(os.path.abspath(__file__))
torch.distributed.Backend.register_backend("ccl", None, devices=["cpu"])
"""


def build_wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = (),
                module: Optional[str] = None, extra_files: int = 0, init_source: str = "", files_extra: Optional[dict[str, Union[str, bytes]]] = None) -> Path:
    """A valid wheel: METADATA, WHEEL, RECORD and a FIXTURE module (``extra_files`` pads it out)."""
    dist = name.replace("-", "_")
    module = module or dist.lower()
    wheel_name = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {
        f"{module}/__init__.py": (f"# FIXTURE package built by tests/fixture_index.py, not the real {name}\n__version__ = {version!r}\n" + init_source).encode(),
        **{path: (text if isinstance(text, bytes) else text.encode()) for path, text in (files_extra or {}).items()},
        f"{info}/METADATA": ("Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires) + "\n").encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: compatmatrix-tests\nRoot-Is-Purelib: {'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n".encode(),
    }
    for i in range(extra_files):
        files[f"{module}/data/f{i:05d}.txt"] = b"x" * 512
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / wheel_name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file_path, data in files.items():
            archive.writestr(file_path, data)
        archive.writestr(f"{info}/RECORD", record)
    return path


def corrupt_deflate(wheel: Path, member_suffix: str = ".dist-info/METADATA") -> Path:
    """FIXTURE damage: the wheel with its METADATA's compressed bytes overwritten (its directory, sizes and CRC intact): zlib.error."""
    import struct

    with zipfile.ZipFile(wheel) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(member_suffix))
    data = bytearray(wheel.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start:start + info.compress_size] = b"\xff" * info.compress_size
    wheel.write_bytes(bytes(data))
    return wheel


@dataclass
class FixtureIndex:
    """hosts: host id -> list of wheel paths; 'find-links' hosts get one flat page."""

    root: Path
    hosts: dict[str, list[Path]] = field(default_factory=dict)
    styles: dict[str, str] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)  # filename -> seconds to sleep before serving
    corrupt: set[str] = field(default_factory=set)  # filenames served with altered bytes
    down: set[str] = field(default_factory=set)  # host ids answering 503
    trickle: set[str] = field(default_factory=set)  # "root:<host>", "page:<host>", "file:<filename>": one byte a second
    trickle_for: float = 40.0  # a trickled response stops after this many seconds, finished or not
    hashes: dict[str, str] = field(default_factory=dict)  # host -> "sha256" (default), "none", "md5", "upper"
    pad_pages: dict[str, int] = field(default_factory=dict)  # host -> bytes of padding in its project pages
    unsized: dict[str, int] = field(default_factory=dict)  # filename -> junk bytes appended; sent with no Content-Length
    url: str = ""
    auth: str = ""  # "user:password": every request must carry it as HTTP Basic auth (else 401), as a private index asks
    authorized: list = field(default_factory=list)  # the paths answered with the right credentials
    # PEP 691 / 592 / 700 / 658 (compat matrix update): hosts answering JSON pages to a client that asks for them, yanks
    # with their reason, upload times and Requires-Python per file name, hosts serving each wheel's METADATA beside it
    json_hosts: set[str] = field(default_factory=set)
    yanked: dict[str, str] = field(default_factory=dict)
    upload_times: dict[str, str] = field(default_factory=dict)
    requires_python: dict[str, str] = field(default_factory=dict)
    metadata_hosts: set[str] = field(default_factory=set)
    requests: list = field(default_factory=list)  # (method, path, Range header) of every request

    def add(self, host: str, wheel: Path, style: str = "index") -> None:
        self.hosts.setdefault(host, []).append(wheel)
        self.styles[host] = style

    def host_url(self, host: str) -> str:
        return f"{self.url}/{host}/" if self.styles.get(host) == "find-links" else f"{self.url}/{host}/simple"

    def index_args(self) -> list[str]:
        return [arg for host in self.hosts for arg in ("--index", f"{host}={self.host_url(host)}")]


def _page(links: list[tuple[str, str]], attributes: Optional[dict[str, str]] = None) -> bytes:
    attributes = attributes or {}
    body = "".join(f'<a href="{href}"{attributes.get(text, "")}>{text}</a><br/>\n' for href, text in links)
    return f"<!DOCTYPE html><html><body>\n{body}</body></html>\n".encode()


def _fragment(style: str, path: Path) -> str:
    data = path.read_bytes()
    if style == "none":
        return ""
    if style == "md5":
        return "#md5=" + hashlib.md5(data).hexdigest()  # noqa: S324 - what an old index publishes
    digest = hashlib.sha256(data).hexdigest()
    return "#sha256=" + (digest.upper() if style == "upper" else digest)


def _project(filename: str) -> str:
    return filename.split("-")[0].lower().replace("_", "-")


def serve(index: FixtureIndex):
    """Start the server; returns (server, thread). Stop with server.shutdown()."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, kind: str = "text/html", trickle: bool = False, sized: bool = True) -> None:
            head = f"HTTP/1.0 {status} X\r\nContent-Type: {kind}\r\n" + (f"Content-Length: {len(body)}\r\n" if sized else "") + "\r\n"
            length = len(body)
            if self.command == "HEAD":  # what a GET would answer, without the body (uv asks before reading a wheel)
                body = b""
            if trickle:
                return self._trickle(head.encode() + body)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if sized:
                self.send_header("Content-Length", str(length))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (a size cap): fine

        def _trickle(self, raw: bytes) -> None:
            """One byte a second, status line and headers included; bounded by index.trickle_for."""
            end = time.monotonic() + index.trickle_for
            for i in range(len(raw)):
                if time.monotonic() > end:
                    break
                try:
                    self.wfile.write(raw[i:i + 1])
                    self.wfile.flush()
                except OSError:
                    break  # the client gave up
                time.sleep(1.0)
            self.close_connection = True

        def _metadata_of(self, wheel: Path) -> bytes:
            with zipfile.ZipFile(wheel) as archive:
                name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
                return archive.read(name)

        def _attributes(self, host: str, name: str) -> str:
            import html

            out = ""
            if name in index.yanked:
                out += f' data-yanked="{html.escape(index.yanked[name])}"'
            if name in index.requires_python:
                out += f' data-requires-python="{html.escape(index.requires_python[name])}"'
            if host in index.metadata_hosts:
                out += ' data-core-metadata="true"'
            return out

        def _json_page(self, host: str, project: str, wheels: dict[str, Path]) -> bytes:
            import json

            files = []
            for name, wheel in sorted(wheels.items()):
                if _project(name) != project:
                    continue
                entry = {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
                         "requires-python": index.requires_python.get(name), "yanked": index.yanked.get(name, False)}
                if name in index.upload_times:
                    entry["upload-time"] = index.upload_times[name]
                if host in index.metadata_hosts:
                    entry["core-metadata"] = True
                files.append(entry)
            return json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files}).encode()

        def do_GET(self):  # noqa: N802
            index.requests.append((self.command, self.path, self.headers.get("Range")))
            if index.auth:
                if self.headers.get("Authorization", "") != "Basic " + base64.b64encode(index.auth.encode()).decode():
                    return self._send(401, b"credentials needed")
                index.authorized.append(self.path)
            parts = [urllib.parse.unquote(p) for p in self.path.split("?")[0].split("/") if p]
            if not parts or parts[0] not in index.hosts:
                return self._send(404, b"not found")
            host = parts[0]
            if host in index.down:
                return self._send(503, b"down")
            wheels = {w.name: w for w in index.hosts[host]}
            style = index.hashes.get(host, "sha256")
            if parts[-2:-1] == ["files"] or (len(parts) >= 2 and parts[1] == "files"):
                name = parts[-1]
                if name.endswith(".metadata") and host in index.metadata_hosts and name[:-len(".metadata")] in wheels:
                    try:
                        metadata = self._metadata_of(wheels[name[:-len(".metadata")]])
                    except (zipfile.BadZipFile, zlib.error):  # a wheel corrupt_deflate damaged: the index cannot serve it either
                        return self._send(500, b"the wheel's METADATA cannot be read")
                    return self._send(200, metadata, "text/plain")
                if name not in wheels:
                    return self._send(404, b"no such file")
                time.sleep(index.slow.get(name, 0))
                data = wheels[name].read_bytes()
                if name in index.corrupt:
                    data = data[:-10] + b"0123456789"
                if name in index.unsized:
                    return self._send(200, data + b"\0" * index.unsized[name], "application/octet-stream", sized=False)
                return self._send(200, data, "application/octet-stream", trickle=f"file:{name}" in index.trickle)
            root = f"root:{host}" in index.trickle
            if index.styles.get(host) == "find-links":
                return self._send(200, _page([(f"files/{n}{_fragment(style, w)}", n) for n, w in sorted(wheels.items())]), trickle=root)
            if len(parts) == 2 and parts[1] == "simple":
                projects = sorted({_project(n) for n in wheels})
                return self._send(200, _page([(f"{p}/", p) for p in projects]), trickle=root)
            if len(parts) == 3 and parts[1] == "simple":
                project = parts[2].lower().replace("_", "-")
                mine = [(f"../../files/{n}{_fragment(style, w)}", n) for n, w in sorted(wheels.items()) if _project(n) == project]
                if not mine:
                    return self._send(404, b"no such project")
                if host in index.json_hosts and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                    return self._send(200, self._json_page(host, project, wheels), "application/vnd.pypi.simple.v1+json")
                pad = index.pad_pages.get(host, 0)
                body = _page(mine, {n: self._attributes(host, n) for _, n in mine}) + (b"<!--" + b"p" * pad + b"-->" if pad else b"")
                return self._send(200, body, trickle=f"page:{host}" in index.trickle)
            return self._send(404, b"not found")

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    index.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
