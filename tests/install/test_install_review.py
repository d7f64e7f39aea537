"""compat install against the defects of the hostile review (H3-H5, M1-M11 and the low ones): a platlib apart from
purelib, a planted symlink at the journal's temporary name, a journal or manifest that is a FIFO or huge, signals
during the installer, site-packages symlinked out of the prefix, a journal whose copies are crafted, data and header
files outside site-packages, odd index pages, cross-host redirects, a full stderr, a bin/ lost between two renames.

Real processes, real pip, real venvs (copied from one template per module), FIXTURE wheels from a local index and
FIXTURE redirect servers on 127.0.0.1. Every wait is bounded (the in-process reads by a SIGALRM guard).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from compatmatrix.install.errors import InstallError, InstallInputError
from compatmatrix.install.indexes import IndexLocation, project_links
from compatmatrix.install.runner import links_of
from compatmatrix.install.transaction import JOURNAL_NAME, EnvFolders, interrupted_install, restore, take_snapshot

from ..fixture_index import FixtureIndex, build_wheel
from ..install_helpers import (
    CP_HERE,
    IPEX_SOURCE,
    PLATFORM,
    STACK,
    clean_env,
    compat,
    diff,
    env_tree,
    served,
    site_packages,
    start_compat,
    torch_wheel,
    tree,
    wait_for,
)

# ---------------------------------------------------------------------------------------------------------------
# helpers


class Blocked(Exception):
    """Not an OSError: code that catches OSError cannot take it for a reason of its own."""


@contextmanager
def bounded(seconds: float):
    """The block fails with Blocked after ``seconds`` (a blocked open() or read() included)."""

    def expire(signum, frame):  # noqa: ARG001
        raise Blocked(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def env(tmp_path):
    """A FAKE environment: prefix/lib/python3.11/site-packages and prefix/bin."""
    site = tmp_path / "prefix" / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("old = 1\n")
    bin_ = tmp_path / "prefix" / "bin"
    bin_.mkdir()
    (bin_ / "python").symlink_to("/usr/bin/python3")
    (bin_ / "tool").write_text("#!/bin/sh\n")
    return EnvFolders.of(str(tmp_path / "prefix"), str(site), str(bin_))


def _install_something(env: EnvFolders) -> None:
    (env.purelib / "pkg" / "__init__.py").unlink()
    (env.purelib / "pkg" / "__init__.py").write_text("new = 2\n")
    (env.purelib / "new").mkdir()
    (env.scripts / "tool").unlink()


def _as_if_killed(env: EnvFolders) -> dict:
    """The journal rewritten as a killed compat leaves it (its pid gone)."""
    data = json.loads(env.journal.read_text())
    data.update(pid=1 << 22, pid_start="1")
    env.journal.write_text(json.dumps(data))
    return data


def _one_line(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-2000:]


class Routes:
    """A FIXTURE HTTP server on 127.0.0.1: path -> (status, headers, body)."""

    def __init__(self, routes: dict) -> None:
        self.routes = routes
        routes_ = routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                status, headers, body = routes_.get(self.path.split("?")[0], routes_.get("*", (404, {}, b"not found")))
                if callable(body):
                    status, headers, body = body(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def routes():
    started = []

    def start(table: dict) -> Routes:
        server = Routes(table)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def _kill_after_the_installer(venv: Path, stack, **env) -> subprocess.CompletedProcess:
    """An install SIGKILLed right after the installer ran (TEST-ONLY hook): a journal is left."""
    done = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(), env={"COMPAT_TEST_KILL_AT": "verify:1", **env})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return done


def _patched_compat(patch: str, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """compat run with ``patch`` (Python source) applied first: what a file system or a kill would do, made repeatable."""
    source = f"import os, sys\nfrom compatmatrix.install import transaction\n{patch}\nfrom compatmatrix.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", source, *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(**(env or {})), check=False, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------------------------
# H3: a platlib apart from purelib (RHEL/Fedora lib64 layout) is snapshotted and restored

FEDORA_LAYOUT = """
import os, sys, sysconfig
_lib64 = os.path.join(sys.prefix, "lib64", "python%d.%d" % sys.version_info[:2], "site-packages")
_get_paths = sysconfig.get_paths
def _fedora_paths(*args, **kwargs):
    paths = _get_paths(*args, **kwargs)
    if "platlib" in paths:
        paths["platlib"] = paths["platlib"].replace(os.sep + "lib" + os.sep, os.sep + "lib64" + os.sep, 1)
    return paths
sysconfig.get_paths = _fedora_paths
if _lib64 not in sys.path:
    sys.path.append(_lib64)
"""


@pytest.mark.integration
def test_a_platlib_apart_from_purelib_is_restored_too(stack, venv):
    """FIXTURE lib64 layout: lib64/ is a real folder and sysconfig's platlib points there (as on RHEL/Fedora, where
    sys.platlibdir is lib64), patched in by a .pth file the way the reviewer did; pip puts the platform wheels there."""
    prefix = venv.parent.parent
    site = site_packages(venv)
    (prefix / "lib64").unlink()
    platlib = prefix / "lib64" / site.parent.name / "site-packages"
    platlib.mkdir(parents=True)
    (site / "_fixture_fedora_layout.py").write_text(FEDORA_LAYOUT)
    (site / "_fixture_fedora_layout.pth").write_text("import _fixture_fedora_layout\n")
    reported = subprocess.run([str(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], capture_output=True, text=True, check=True, timeout=60)
    assert Path(reported.stdout.strip()) == platlib
    before = tree(site, platlib, venv.parent)
    done = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(), env={"FIXTURE_IPEX_BROKEN": "1"})
    _one_line(done)
    assert done.returncode == 1 and "restored" in done.stderr, done.stderr[-2000:]
    after = tree(site, platlib, venv.parent)
    assert after == before, diff(before, after)


def test_env_folders_dedupe_a_platlib_that_is_purelib(tmp_path):
    site = tmp_path / "prefix" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "prefix" / "lib64").symlink_to("lib")
    (tmp_path / "prefix" / "bin").mkdir()
    env = EnvFolders.of(str(tmp_path / "prefix"), str(site), str(tmp_path / "prefix" / "bin"), platlib=str(tmp_path / "prefix" / "lib64" / "python3.11" / "site-packages"))
    assert env.live() == [site, tmp_path / "prefix" / "bin"]


# ---------------------------------------------------------------------------------------------------------------
# H4: the journal's temporary file never follows a planted symlink


def test_the_journal_is_not_written_through_a_symlink_planted_at_its_temporary_name(env, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (env.parent / f".{JOURNAL_NAME}.tmp-{os.getpid()}").symlink_to(victim)
    take_snapshot(env)
    assert victim.read_text() == "keep me"
    assert not env.journal.is_symlink() and json.loads(env.journal.read_text())["folders"]


# ---------------------------------------------------------------------------------------------------------------
# M1 / M2: a journal or a manifest that is a FIFO or huge is refused at once


def test_a_journal_that_is_a_fifo_is_refused_without_blocking(env):
    os.mkfifo(env.journal)
    with bounded(10), pytest.raises(InstallInputError, match="FIFO") as caught:
        interrupted_install(env)
    assert caught.value.exit_code == 2


def test_a_huge_journal_is_refused_without_reading_it(env):
    with open(env.journal, "wb") as out:
        out.truncate(256 << 20)  # sparse
    start = time.monotonic()
    with bounded(20), pytest.raises(InstallInputError, match="larger than"):
        interrupted_install(env)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_a_manifest_that_is_a_fifo_or_huge_is_refused_before_anything_moves(env, kind):
    snapshot = take_snapshot(env)
    _install_something(env)
    installed = tree(env.purelib, env.scripts)
    manifest = snapshot.root / "manifest.json"
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    else:
        with open(manifest, "wb") as out:
            out.truncate(256 << 20)
    with bounded(10), pytest.raises(InstallError, match="FIFO" if kind == "fifo" else "larger than"):
        restore(snapshot)
    assert tree(env.purelib, env.scripts) == installed


@pytest.mark.integration
def test_restore_with_a_fifo_manifest_ends_and_hears_signals(stack, venv):
    _kill_after_the_installer(venv, stack)
    journal = site_packages(venv).parent / JOURNAL_NAME
    root = Path(json.loads(journal.read_text())["root"])
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    process = start_compat("install", "--restore", "--python", str(venv))
    try:
        ended = wait_for(lambda: process.poll() is not None, 30)
        if not ended:
            process.send_signal(signal.SIGINT)
            heard = wait_for(lambda: process.poll() is not None, 10)
            assert heard, "--restore blocked on the FIFO and did not hear SIGINT"
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert ended, "--restore blocked on a FIFO manifest"
    assert process.returncode == 1 and "FIFO" in err and "Traceback" not in err, err[-2000:]


# ---------------------------------------------------------------------------------------------------------------
# M6 (a signal during the installer or the verification restores, then exits 130 / 143): test_install_faults.py



# ---------------------------------------------------------------------------------------------------------------
# M7: site-packages symlinked out of the prefix: compat trusts the journal it wrote itself


@pytest.mark.integration
def test_site_packages_symlinked_out_of_the_prefix_restores(stack, venv, tmp_path):
    site = site_packages(venv)
    elsewhere = tmp_path / "elsewhere" / "site-packages"
    elsewhere.parent.mkdir()
    shutil.move(str(site), str(elsewhere))
    site.symlink_to(elsewhere, target_is_directory=True)
    before = env_tree(venv)
    _kill_after_the_installer(venv, stack)
    assert (elsewhere.parent / JOURNAL_NAME).exists()
    done = compat("install", "--restore", "--python", str(venv))
    _one_line(done)
    assert done.returncode == 0, done.stderr[-2000:]
    after = env_tree(venv)
    assert after == before, diff(before, after)


# ---------------------------------------------------------------------------------------------------------------
# M8: each live folder maps to its own copy, named as compat names it


@pytest.mark.parametrize("case", ["one copy for both folders", "a copy named after another folder", "the same folder twice"])
def test_a_journal_with_crafted_copies_is_refused(env, case):
    snapshot = take_snapshot(env)
    _install_something(env)
    installed = tree(env.purelib, env.scripts)
    data = _as_if_killed(env)
    root = snapshot.root
    site_copy = str(root / "0-site-packages")
    folders = {
        "one copy for both folders": [[str(env.purelib), site_copy], [str(env.scripts), site_copy]],
        "a copy named after another folder": [[str(env.scripts), str(root / "0-site-packages")]],
        "the same folder twice": [[str(env.purelib), site_copy], [str(env.purelib), str(root / "1-bin")]],
    }[case]
    data["folders"] = folders
    env.journal.write_text(json.dumps(data))
    manifest = json.loads((root / "manifest.json").read_text())
    site_entry = next(f for f in manifest["folders"] if f["live"] == str(env.purelib))
    manifest["folders"].append({**site_entry, "live": str(env.scripts)})
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InstallInputError):
        left = interrupted_install(env)
        restore(left)
    assert tree(env.purelib, env.scripts) == installed
    assert (env.scripts / "python").is_symlink()


# ---------------------------------------------------------------------------------------------------------------
# M9: data and header files the wheels write outside site-packages are restored too


@pytest.mark.integration
def test_data_and_header_files_are_restored(venv, tmp_path):
    wheels = tmp_path / "wheels"
    index = FixtureIndex(tmp_path / "index")
    index.add("pytorch-cpu", torch_wheel(wheels / "t270", "2.7.0+cpu"))
    index.add("pypi", build_wheel(wheels, "filelock", "3.0.0"))
    data = "intel_extension_for_pytorch-2.7.0.data"
    index.add("pypi", build_wheel(wheels / "ipex", "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch",
                                  init_source=IPEX_SOURCE, files_extra={f"{data}/data/share/ipex-fixture/notes.txt": "FIXTURE data file\n",
                                                                        f"{data}/headers/ipex_fixture.h": "/* FIXTURE header */\n"}))
    prefix = venv.parent.parent
    watched = [prefix / "share", prefix / "include"]
    before = {**env_tree(venv), **tree(*watched)}
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", *STACK, *index.index_args(), env={"FIXTURE_IPEX_BROKEN": "1"})
    _one_line(done)
    assert done.returncode == 1 and "restored" in done.stderr, done.stderr[-2000:]
    after = {**env_tree(venv), **tree(*watched)}
    assert after == before, diff(before, after)
    assert not list(prefix.rglob("notes.txt")) and not list(prefix.rglob("ipex_fixture.h"))


# ---------------------------------------------------------------------------------------------------------------
# M4: odd input is one sentence, never an internal error

PAGE = b'<html><body><a href="filelock-3.0.0-py3-none-any.whl#sha256=' + b"a" * 64 + b'">filelock</a></body></html>'


def test_an_index_page_with_an_unknown_charset_is_read_as_utf8(routes):
    server = routes({"/simple/filelock/": (200, {"Content-Type": "text/html; charset=bogus-enc"}, PAGE)})
    with requests.Session() as session:
        links = project_links(session, IndexLocation("pypi", server.url + "/simple", "index", "--index"), "filelock")
    assert [link.filename for link in links] == ["filelock-3.0.0-py3-none-any.whl"]


def test_an_index_page_html_parser_chokes_on_is_one_sentence(routes):
    server = routes({"/simple/filelock/": (200, {"Content-Type": "text/html"}, b"<html><![bogus[ x ]]>" + PAGE)})
    with requests.Session() as session, pytest.raises(InstallError) as caught:
        links_of(session, IndexLocation("pypi", server.url + "/simple", "index", "--index"), "filelock", "filelock")
    assert "cannot be read" in caught.value.message and "nothing was changed" in caught.value.message


def test_a_wheelhouse_lock_line_with_a_nul_byte_is_refused_by_line(tmp_path):
    from compatmatrix.install.wheelhouse import LockError, stage

    folder = tmp_path / "house"
    folder.mkdir()
    (folder / "compat-wheelhouse.lock").write_text(f"{'0' * 64}  evil\0name.whl\n")
    with pytest.raises(LockError, match="Line 1"):
        stage(folder, tmp_path / "staged", False, False, lambda line: None)


@pytest.mark.integration
def test_a_full_stderr_does_not_fail_the_install(stack, venv):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(venv), "--yes", *STACK, *stack.index_args()],
                              stdout=subprocess.PIPE, stderr=full, text=True, timeout=300, env=clean_env(), check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0
    listed = subprocess.run([str(venv), "-m", "pip", "list", "--format", "freeze"], capture_output=True, text=True, timeout=120, check=True)
    assert "torch==2.7.0+cpu" in listed.stdout


def test_download_into_a_name_too_long_is_one_sentence(tmp_path):
    done = compat("download", "-d", str(tmp_path / ("x" * 300)), *PLATFORM, "torch==2.7.0", "--index", "pytorch-cpu=http://127.0.0.1:9/simple",
                  "--index", "pypi=http://127.0.0.1:9/simple")
    _one_line(done)
    assert done.returncode == 2 and "too long" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ---------------------------------------------------------------------------------------------------------------
# M11: redirects


@pytest.mark.integration
def test_a_redirect_to_another_host_is_refused(stack, venv, routes):
    target = stack.url.replace("127.0.0.1", "localhost")

    def redirect(path):
        return 302, {"Location": target + path}, b""

    server = routes({"*": (0, {}, redirect)})
    before = env_tree(venv)
    args = [a if not a.startswith("pytorch-cpu=") else f"pytorch-cpu={server.url}/pytorch-cpu/simple" for a in stack.index_args()]
    done = compat("install", "--python", str(venv), "--yes", *STACK, *args)
    _one_line(done)
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "another host" in last and server.url in last and target in last and "--index pytorch-cpu=" in last, last
    assert env_tree(venv) == before


@pytest.mark.parametrize("where, said", [("/loop/simple/filelock/", "loop"), ("/file/simple/filelock/", "file://")])
def test_redirect_loops_and_file_urls_are_said_in_words(routes, where, said):
    server = routes({"/loop/simple/filelock/": (302, {"Location": "/loop/simple/filelock/"}, b""),
                     "/file/simple/filelock/": (302, {"Location": "file:///etc/passwd"}, b"")})
    location = IndexLocation("pypi", server.url + where.rsplit("/simple/", 1)[0] + "/simple", "index", "--index")
    with requests.Session() as session, pytest.raises(InstallError) as caught:
        links_of(session, location, "filelock", "filelock")
    assert said in caught.value.message and "Redirects" not in caught.value.message and "InvalidSchema" not in caught.value.message, caught.value.message


# ---------------------------------------------------------------------------------------------------------------
# H5: a bin/ lost between the two renames of a restore is recoverable without the interpreter

NO_EXCHANGE = "transaction.exchange = lambda a, b: False"


@pytest.mark.integration
def test_restore_works_when_the_interpreter_is_gone(stack, venv):
    before = env_tree(venv)
    _kill_after_the_installer(venv, stack)
    half = _patched_compat(NO_EXCHANGE, "install", "--restore", "--python", str(venv), env={"COMPAT_TEST_KILL_AT": "restore:4"})
    assert half.returncode == -signal.SIGKILL, half.stderr[-2000:]
    assert not venv.parent.exists(), "the kill was meant to fall between the two renames of bin/"
    done = compat("install", "--restore", "--python", str(venv))
    _one_line(done)
    assert done.returncode == 0, done.stderr[-2000:]
    after = env_tree(venv)
    assert after == before, diff(before, after)


# ---------------------------------------------------------------------------------------------------------------
# LOW


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["missing", "fifo"])
def test_an_unusable_wheelhouse_is_exit_2(venv, tmp_path, kind):
    house = tmp_path / "house"
    if kind == "fifo":
        os.mkfifo(house)
    done = compat("install", "--python", str(venv), "--offline", "--wheelhouse", str(house), "torch==2.7.0", timeout=120)
    _one_line(done)
    assert done.returncode == 2 and str(house) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.integration
def test_a_restore_killed_at_its_very_end_is_already_restored(stack, venv):
    before = env_tree(venv)
    _kill_after_the_installer(venv, stack)
    half = _patched_compat("transaction.remove_tree = lambda root, phase: os.kill(os.getpid(), 9)", "install", "--restore", "--python", str(venv))
    assert half.returncode == -signal.SIGKILL, half.stderr[-2000:]
    assert env_tree(venv) == before
    done = compat("install", "--restore", "--python", str(venv))
    _one_line(done)
    assert done.returncode == 0 and "already restored" in done.stdout + done.stderr, (done.stdout, done.stderr)
    parent = site_packages(venv).parent
    assert not [p for p in parent.iterdir() if p.name.startswith(".compat-snapshot-")]


@pytest.mark.integration
def test_a_killed_install_leaves_no_work_folder_for_ever(stack, venv, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    killed = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(), env={"TMPDIR": str(temp), "COMPAT_TEST_KILL_AT": "fetch:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [p for p in temp.iterdir() if p.name.startswith("compat-install-")], "the kill was meant to leave the work folder"
    again = compat("install", "--python", str(venv), "--yes", *STACK, "--index", "pypi=http://127.0.0.1:9/simple", env={"TMPDIR": str(temp)})
    assert again.returncode == 1, again.stderr[-2000:]
    assert [p.name for p in temp.iterdir() if p.name.startswith("compat-install-")] == []


@pytest.mark.integration
def test_an_unlocked_wheelhouse_counts_the_wheels_it_installs(stack, venv, tmp_path):
    house = tmp_path / "house"
    done = compat("download", "-d", str(house), *PLATFORM, *STACK, *stack.index_args())
    assert done.returncode == 0, done.stderr
    (house / "compat-wheelhouse.lock").unlink()
    build_wheel(house, "stray", "1.0")
    done = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(house), "--allow-unverified", *STACK)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 wheels" in done.stderr and "4 wheels" not in done.stderr, done.stderr[-3000:]
