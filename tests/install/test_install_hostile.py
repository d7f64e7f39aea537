"""compat install / download against hostile or broken input: wheelhouses with files outside their lock,
pip settings in the environment, slow and oversized indexes, missing hashes, a full disk, bad URLs,
read-only environments and local "wheels" that are FIFOs.

Real pip, real venvs (copied from one template per module), FIXTURE wheels from a local index on
127.0.0.1. Every wait is bounded: the trickling server gives up by itself (FixtureIndex.trickle_for).
``COMPAT_TEST_LIMITS`` (test-only, inert unless set) shortens compat's deadlines and size caps so a
test does not wait for the real ones (minutes, tens of MiB).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ..install_helpers import (
    PLATFORM,
    STACK,
    TORCH_270,
    compat,
    copy_venv,
    diff,
    env_tree,
    make_venv,
    served,
    site_packages,
    stack_index,
    torch_wheel,
)

pytestmark = pytest.mark.integration

FILELOCK = "filelock-3.0.0-py3-none-any.whl"


@pytest.fixture(scope="module")
def house(stack, tmp_path_factory):
    """A wheelhouse made by compat download for the FIXTURE stack."""
    folder = tmp_path_factory.mktemp("house") / "wheels"
    done = compat("download", "-d", str(folder), *PLATFORM, *STACK, *stack.index_args())
    assert done.returncode == 0, done.stderr
    return folder


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr and "internal error" not in done.stderr, done.stderr[-2000:]


# 3. an offline wheelhouse runs nothing outside its lock


def _evil_sdist(folder: Path, marker: Path) -> Path:
    """An sdist (filelock 99.0, newer than the locked wheel) whose in-tree build backend writes ``marker`` when imported."""
    files = {
        "filelock-99.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n',
        "filelock-99.0/evil_backend.py": f"open({str(marker)!r}, 'w').write('the build backend ran')\n",
        "filelock-99.0/PKG-INFO": "Metadata-Version: 2.1\nName: filelock\nVersion: 99.0\n",
    }
    path = folder / "filelock-99.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_next_to_the_locked_wheels_is_refused_and_never_built(house, venv, tmp_path):
    folder = _copy(house, tmp_path / "house")
    marker = tmp_path / "backend-ran"
    sdist = _evil_sdist(folder, marker)
    before = env_tree(venv)
    done = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(folder), "--require-hashes", *STACK)
    _no_traceback(done)
    assert not marker.exists(), "the sdist's build backend ran during the install"
    assert done.returncode == 1 and sdist.name in done.stderr, done.stderr
    assert env_tree(venv) == before


def test_a_fifo_in_place_of_a_locked_wheel_is_refused_without_blocking(house, venv, tmp_path):
    folder = _copy(house, tmp_path / "house")
    (folder / FILELOCK).unlink()
    os.mkfifo(folder / FILELOCK)  # a reader that opens it blocks until a writer comes: never
    start = time.monotonic()
    done = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(folder), *STACK, timeout=90)
    assert time.monotonic() - start < 60
    _no_traceback(done)
    assert done.returncode == 2 and FILELOCK in done.stderr and "not a regular file" in done.stderr, done.stderr


def test_a_wheelhouse_without_a_lock_needs_allow_unverified(house, venv, tmp_path):
    folder = _copy(house, tmp_path / "house")
    (folder / "compat-wheelhouse.lock").unlink()
    before = env_tree(venv)
    done = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(folder), *STACK)
    _no_traceback(done)
    assert done.returncode == 1 and "compat-wheelhouse.lock" in done.stderr and "--allow-unverified" in done.stderr, done.stderr
    assert env_tree(venv) == before
    strict = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(folder), "--allow-unverified", "--require-hashes", *STACK)
    assert strict.returncode == 1 and env_tree(venv) == before, strict.stderr
    allowed = compat("install", "--python", str(venv), "--yes", "--offline", "--wheelhouse", str(folder), "--allow-unverified", *STACK)
    assert allowed.returncode == 0, allowed.stderr
    assert "unverified" in allowed.stderr


# 4. pip's environment does not leak into the install


@pytest.mark.parametrize("case", ["PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_CONFIG_FILE", "PIP_USER"])
def test_pip_settings_in_the_environment_cannot_move_the_install(stack, template, tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    if case == "PIP_USER":  # pip refuses --user in a plain venv; a venv that sees the system site-packages takes it
        python = make_venv(tmp_path / "venv", "--system-site-packages")
        env = {"PIP_USER": "1", "PYTHONUSERBASE": str(outside)}
    else:
        python = copy_venv(template, tmp_path / "venv")
        config = tmp_path / "pip.conf"
        config.write_text(f"[global]\ntarget = {outside}\n[install]\ntarget = {outside}\nuser = false\n")
        env = {"PIP_CONFIG_FILE": str(config)} if case == "PIP_CONFIG_FILE" else {case: str(outside)}
    before = env_tree(python)
    env["FIXTURE_IPEX_BROKEN"] = "1"  # the verification fails: compat must put back exactly what was there
    done = compat("install", "--python", str(python), "--yes", *STACK, *stack.index_args(), env=env)
    _no_traceback(done)
    assert done.returncode == 1 and "restored" in done.stderr, done.stderr[-2000:]
    after = env_tree(python)
    assert after == before, diff(before, after)
    written = [p for p in outside.rglob("*") if p.is_file()]
    assert written == [], f"pip wrote outside the environment: {written[:5]}"


def test_installer_env_keeps_transport_and_drops_placement(monkeypatch):
    from compatmatrix.install.runner import installer_env

    for name, value in {"PIP_USER": "1", "PIP_TARGET": "/x", "PIP_PREFIX": "/x", "PIP_ROOT": "/x", "PIP_REQUIRE_VIRTUALENV": "1",
                        "PIP_CONFIG_FILE": "/x/pip.conf", "PIP_INDEX_URL": "http://evil", "PIP_NO_BINARY": ":all:", "PYTHONUSERBASE": "/x",
                        "PYTHONPATH": "/x", "UV_LINK_MODE": "symlink", "UV_NO_VERIFY_HASHES": "1", "UV_CONSTRAINT": "/x", "UV_SYSTEM_PYTHON": "1",
                        "PIP_PROXY": "http://proxy:3128", "PIP_CERT": "/ca.pem", "PIP_TIMEOUT": "30", "PIP_RETRIES": "2",
                        "UV_NATIVE_TLS": "1", "UV_HTTP_TIMEOUT": "30", "HTTPS_PROXY": "http://proxy:3128"}.items():
        monkeypatch.setenv(name, value)
    env = installer_env(sys.executable)
    for dropped in ("PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_REQUIRE_VIRTUALENV", "PIP_INDEX_URL", "PIP_NO_BINARY",
                    "PYTHONUSERBASE", "PYTHONPATH", "UV_LINK_MODE", "UV_NO_VERIFY_HASHES", "UV_CONSTRAINT", "UV_SYSTEM_PYTHON"):
        assert dropped not in env, dropped
    assert env["PIP_CONFIG_FILE"] == os.devnull and env["PYTHONNOUSERSITE"] == "1"
    for kept in ("PIP_PROXY", "PIP_CERT", "PIP_TIMEOUT", "PIP_RETRIES", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "HTTPS_PROXY"):
        assert env[kept] == os.environ[kept], kept


def test_pip_configuration_read_once_is_the_files_not_the_variables_of_that_moment(monkeypatch, tmp_path):
    """`pip config list` also prints the PIP_* variables (":env:" lines); taken as configuration they outlived the
    moment they were read (a test's PIP_PROXY=http://proxy:3128 reached a later install's pip: CI failed on it)."""
    from compatmatrix.install import pipconfig

    config = tmp_path / "pip.conf"
    config.write_text("[global]\ntimeout = 42\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_PROXY", "http://proxy:3128")
    pipconfig.forget()
    try:
        found = dict(pipconfig.configured_transport())
        assert found.get("PIP_TIMEOUT") == "42" and "PIP_PROXY" not in found, found  # the file's setting; not the variable
    finally:
        pipconfig.forget()


# 6. deadlines and size caps on every network phase; a full disk


LIMITS = "preflight_s=3,page_s=3,download_s=3,pip_s=8"


@pytest.mark.parametrize("phase, trickled", [("preflight", "root:pytorch-cpu"), ("index page", "page:pytorch-cpu"),
                                             ("wheel download", f"file:{TORCH_270}"), ("pip planning", f"file:{FILELOCK}")])
def test_a_trickling_host_is_given_up_at_its_deadline(venv, tmp_path, phase, trickled):
    index = stack_index(tmp_path / "index")
    index.trickle.add(trickled)
    before = env_tree(venv)
    with served(index):
        start = time.monotonic()
        done = compat("install", "--python", str(venv), "--yes", *STACK, *index.index_args(), env={"COMPAT_TEST_LIMITS": LIMITS}, timeout=180)
        took = time.monotonic() - start
    _no_traceback(done)
    assert done.returncode == 1, (phase, done.stderr[-2000:])
    assert re.search(r"within \d+ s", done.stderr) and "nothing was changed" in done.stderr, done.stderr[-2000:]
    assert took < 35, f"{phase}: compat took {took:.0f} s against a one-byte-a-second host"
    assert env_tree(venv) == before


def test_an_oversized_index_page_is_refused(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.pad_pages["pytorch-cpu"] = 2 << 20
    before = env_tree(venv)
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", *STACK, *index.index_args(), env={"COMPAT_TEST_LIMITS": "page_bytes=1048576"})
    _no_traceback(done)
    assert done.returncode == 1 and "larger than 1 MiB" in done.stderr, done.stderr[-2000:]
    assert env_tree(venv) == before


def test_a_wheel_over_the_size_cap_is_refused(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.unsized[TORCH_270] = 3 << 20  # no Content-Length, and 3 MiB of junk after the wheel
    before = env_tree(venv)
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", *STACK, *index.index_args(), env={"COMPAT_TEST_LIMITS": "wheel_bytes=1048576"})
    _no_traceback(done)
    assert done.returncode == 1 and "larger than 1 MiB" in done.stderr, done.stderr[-2000:]
    assert env_tree(venv) == before


@pytest.fixture
def small_disk(tmp_path):
    """Two small tmpfs mounts (4 MiB for the environment, 2 MiB for compat's temp folder), or a skip."""
    mounts = []
    for name, size in (("env-disk", "4m"), ("tmp-disk", "2m")):
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            for mounted in mounts:
                subprocess.run(["umount", "-l", str(mounted)], timeout=30, check=False)
            pytest.skip(f"cannot mount a small tmpfs here (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
        mounts.append(point)
    yield mounts
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], timeout=30, check=False)


def test_a_full_disk_is_one_sentence_and_the_environment_is_restored(tmp_path, small_disk):
    """A real ENOSPC from a 4 MiB tmpfs (pip writing a 6 MiB FIXTURE torch), and one from a 2 MiB TMPDIR (compat's own download)."""
    env_disk, tmp_disk = small_disk
    index = stack_index(tmp_path / "index")
    big = torch_wheel(tmp_path / "big", "2.7.0+cpu", payload_bytes=6 << 20)
    index.hosts["pytorch-cpu"] = [big]
    python = make_venv(env_disk / "venv", "--without-pip")  # a few KiB: compat drives it with its own pip
    before = env_tree(python)
    with served(index):
        done = compat("install", "--python", str(python), "torch==2.7.0", *index.index_args())
        _no_traceback(done)
        assert done.returncode == 1, done.stderr[-2000:]
        assert "No space left on device" in done.stderr and "restored" in done.stderr, done.stderr[-2000:]
        after = env_tree(python)
        assert after == before, diff(before, after)
        other = make_venv(tmp_path / "venv2", "--without-pip")
        done = compat("install", "--python", str(other), "torch==2.7.0", *index.index_args(), env={"TMPDIR": str(tmp_disk)})
        _no_traceback(done)
        assert done.returncode == 1 and "No space left on device" in done.stderr and "nothing was changed" in done.stderr, done.stderr[-2000:]
        assert len(done.stderr.strip().splitlines()[-1]) < 400
    assert list(tmp_disk.iterdir()) == [], "compat left its temp folder on the full disk"


# 7. integrity gaps


@pytest.mark.parametrize("style, said", [("none", "publishes no sha256"), ("md5", "publishes only an md5")])
def test_a_wheel_without_a_published_sha256_needs_allow_unverified(venv, tmp_path, style, said):
    index = stack_index(tmp_path / "index")
    index.hashes["pytorch-cpu"] = style
    before = env_tree(venv)
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", *STACK, *index.index_args())
        _no_traceback(done)
        assert done.returncode == 1 and said in done.stderr and "--allow-unverified" in done.stderr, done.stderr[-2000:]
        assert env_tree(venv) == before
        strict = compat("install", "--python", str(venv), "--yes", "--allow-unverified", "--require-hashes", *STACK, *index.index_args())
        assert strict.returncode == 1 and env_tree(venv) == before, strict.stderr[-2000:]
        if style == "none":
            allowed = compat("install", "--python", str(venv), "--yes", "--allow-unverified", *STACK, *index.index_args())
            assert allowed.returncode == 0, allowed.stderr[-2000:]
            assert f"unverified: {TORCH_270}" in allowed.stderr


def test_a_dependency_without_a_published_sha256_needs_allow_unverified(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.hashes["pypi"] = "none"  # filelock, torch's dependency, comes from there
    before = env_tree(venv)
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", "torch==2.7.0", *index.index_args())
    _no_traceback(done)
    assert done.returncode == 1 and "filelock" in done.stderr and "--allow-unverified" in done.stderr, done.stderr[-2000:]
    assert env_tree(venv) == before


def test_an_uppercase_sha256_is_the_same_sha256(venv, tmp_path):
    index = stack_index(tmp_path / "index")
    index.hashes["pytorch-cpu"] = "upper"
    with served(index):
        done = compat("install", "--python", str(venv), "--yes", "--require-hashes", *STACK, *index.index_args())
    assert done.returncode == 0, done.stderr[-2000:]


# 9. bad input: one sentence and exit 2, never a traceback


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1/simple\n--extra-index-url http://evil.example/simple", "http://127.0.0.1:99999/simple",
                                 "ftp://mirror.example/simple", "http://mirror.example/sim\rple"])
def test_bad_index_urls_are_usage_errors(url):
    done = compat("install", "--print", "requirements", "--python-version", "3.11", "--index", f"pytorch-cpu={url}")
    _no_traceback(done)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "evil.example" not in done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "--index" in done.stderr, done.stderr


def test_download_into_a_regular_file_is_a_usage_error(stack, tmp_path):
    target = tmp_path / "not-a-folder"
    target.write_text("x")
    done = compat("download", "-d", str(target), *PLATFORM, "torch==2.7.0", *stack.index_args())
    _no_traceback(done)
    assert done.returncode == 2 and str(target) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert target.read_text() == "x"


def _immutable(path: Path, on: bool) -> bool:
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def test_a_read_only_site_packages_is_refused_before_anything(stack, venv):
    site = site_packages(venv)
    if shutil.which("chattr") is None or not _immutable(site, True):
        pytest.skip("chattr +i is not available on this file system (root ignores chmod, so that is the only way to make it read-only here)")
    try:
        before = env_tree(venv)
        done = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args())
        after = env_tree(venv)
        leftovers = [p.name for p in site.parent.iterdir() if p.name.startswith(".compat-snapshot-")]
    finally:
        _immutable(site, False)
    _no_traceback(done)
    assert done.returncode == 2 and str(site) in done.stderr and "not writable" in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()[-1]) < 400
    assert after == before and leftovers == []


@pytest.mark.parametrize("kind", ["fifo", "dangling symlink"])
def test_local_index_entries_that_are_not_regular_files_are_refused(stack, venv, tmp_path, kind):
    folder = tmp_path / "local"
    folder.mkdir()
    entry = folder / TORCH_270
    if kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to(tmp_path / "gone.whl")
    (folder / "compat-wheelhouse.lock").write_text(f"{'0' * 64}  {TORCH_270}\n")
    before = env_tree(venv)
    start = time.monotonic()
    done = compat("install", "--python", str(venv), "--yes", "torch==2.7.0", *stack.index_args(), "--index", f"pytorch-cpu={folder}", timeout=120)
    assert time.monotonic() - start < 60
    _no_traceback(done)
    assert done.returncode == 2 and TORCH_270 in done.stderr, done.stderr[-2000:]
    assert ("not a regular file" if kind == "fifo" else "missing") in done.stderr
    assert env_tree(venv) == before

