"""A wheel may not replace the interpreter or write outside what its RECORD and the install scheme allow (issue 19).

compat reads each fetched wheel's file list, RECORD and entry points BEFORE installing, and refuses (exit 1, nothing
changed) a path that is absolute or holds '..', a .data folder the install scheme does not have, and a script named
like the environment's interpreter (python, python3, python3.X) or like a file of its scripts folder that no
distribution being replaced owns (activate, ...). The integration tests use FIXTURE wheels on a FIXTURE index
(tests/fixture_index.py) and a real `compat install`, with pip and, when it is installed, uv; one venv is made by uv.

Side effects: FIXTURE index servers on 127.0.0.1, venvs and caches under tmp_path, compat/pip/uv child processes.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from compatmatrix.install.runner import uv_binary
from compatmatrix.install.wheelfiles import script_names_taken, wheel_refusals

from ..fixture_index import build_wheel
from ..install_helpers import CP_HERE, STACK, compat, copy_venv, diff, env_tree, served, stack_index

HOSTILE = "#!/bin/sh\necho FIXTURE: not the interpreter\n"


def _ipex(folder: Path, files: dict[str, str]) -> Path:
    return build_wheel(folder, "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch", files_extra=files)


def _hostile_index(root: Path, files: dict[str, str]):
    index = stack_index(root)
    index.hosts["pypi"] = [w for w in index.hosts["pypi"] if not w.name.startswith("intel_extension")]
    index.add("pypi", _ipex(root / "hostile", files))
    return index


def _uv_venv(path: Path) -> Path:
    uv = uv_binary()
    if uv is None:
        pytest.skip("uv is not installed here: pip install uv")
    import sys

    subprocess.run([uv, "venv", "--no-config", "--python", sys.executable, str(path)], check=True, timeout=300, capture_output=True,
                   env={**os.environ, "UV_NO_CONFIG": "1"})
    return path / "bin" / "python"


def _interpreter(python: Path) -> tuple:
    """What bin/ holds for the interpreter names: their link targets or contents."""
    found = {}
    for entry in sorted(python.parent.iterdir()):
        if entry.name.startswith("python"):
            found[entry.name] = os.readlink(entry) if entry.is_symlink() else entry.read_bytes()
    return tuple(found.items())


@pytest.mark.parametrize(("installer", "made_by"), [("pip", "uv"), ("uv", "uv"), ("pip", "venv")])
def test_a_wheel_shipping_scripts_python3_is_refused_before_anything_is_installed(installer, made_by, tmp_path):
    """The defect: the .data/scripts/python3 of a wheel replaced the interpreter of a uv-made venv (compat's pip
    driving it), and compat said "installed and verified"."""
    if made_by == "uv":
        python = _uv_venv(tmp_path / "venv")
    else:
        import sys

        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=300)
        python = tmp_path / "venv" / "bin" / "python"
    index = _hostile_index(tmp_path, {"intel_extension_for_pytorch-2.7.0.data/scripts/python3": HOSTILE})
    before, interpreter = env_tree(python), _interpreter(python)
    with served(index):
        done = compat("install", "--python", str(python), "--yes", "--installer", installer, *STACK, *index.index_args(),
                      env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 1, done.stderr[-3000:]
    assert "python3" in done.stderr and "interpreter" in done.stderr and "Nothing was changed" in done.stderr, done.stderr[-3000:]
    assert "installed and verified" not in done.stdout + done.stderr
    assert _interpreter(python) == interpreter
    assert env_tree(python) == before, diff(before, env_tree(python))


def test_a_wheel_overwriting_a_file_of_the_scripts_folder_is_refused(tmp_path, template):
    """bin/activate belongs to the venv, not to a distribution being replaced: a wheel may not write it."""
    python = copy_venv(template, tmp_path / "venv")
    index = _hostile_index(tmp_path, {"intel_extension_for_pytorch-2.7.0.data/scripts/activate": HOSTILE})
    before = env_tree(python)
    with served(index):
        done = compat("install", "--python", str(python), "--yes", "--installer", "pip", *STACK, *index.index_args())
    assert done.returncode == 1 and "activate" in done.stderr and "Nothing was changed" in done.stderr, done.stderr[-3000:]
    assert env_tree(python) == before, diff(before, env_tree(python))


def test_a_clean_stack_still_installs_with_stderr_closed(tmp_path, template):
    """The check refuses only what it must: the FIXTURE stack installs (also with descriptor 2 closed, docs/guarantees.md)."""
    python = copy_venv(template, tmp_path / "venv")
    index = stack_index(tmp_path)
    with served(index):
        import sys

        done = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--python", str(python), "--yes", "--installer", "pip", *STACK,
                               *index.index_args()], capture_output=False, stdout=subprocess.PIPE, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(2))
    assert done.returncode == 0, done.stdout[-2000:]


# ---------------------------------------------------------------- the inspection itself, on wheels built here


def _zip(path: Path, entries: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return path


INFO = "demo-1.0.dist-info"
GOOD = {"demo/__init__.py": "", f"{INFO}/METADATA": "Name: demo\nVersion: 1.0\n", f"{INFO}/WHEEL": "Wheel-Version: 1.0\n"}


@pytest.mark.parametrize(("entries", "said"), [
    ({"/etc/cron.d/demo": "x"}, "absolute"),
    ({"demo/../../../../etc/demo": "x"}, "'..'"),
    ({"demo-1.0.data/scripts/../../../bin/python3": "x"}, "'..'"),
    ({"demo-1.0.data/lib/thing": "x"}, "install scheme"),
    ({"demo-1.0.data/scripts/python": "x"}, "interpreter"),
    ({"demo-1.0.data/scripts/python3.11": "x"}, "interpreter"),
    ({f"{INFO}/RECORD": "../../../bin/python3,,\n"}, "'..'"),
    ({f"{INFO}/RECORD": "/usr/bin/python3,,\n"}, "absolute"),
    ({f"{INFO}/entry_points.txt": "[console_scripts]\npython3 = demo:main\n"}, "interpreter"),
    ({f"{INFO}/entry_points.txt": "[gui_scripts]\nactivate = demo:main\n"}, "already in"),
    ({"demo-1.0.data/scripts/activate": "x"}, "already in"),
])
def test_what_a_wheel_may_not_write_is_named(tmp_path, entries, said):
    wheel = _zip(tmp_path / "demo-1.0-py3-none-any.whl", {**GOOD, **entries})
    taken = script_names_taken(["python", "python3", "python3.11", "activate", "pip"], owned=["pip"])
    refusals = wheel_refusals(wheel, taken)
    assert refusals and said in refusals[0], refusals


def test_a_wheel_that_stays_in_the_scheme_passes(tmp_path):
    wheel = _zip(tmp_path / "demo-1.0-py3-none-any.whl", {
        **GOOD, "demo-1.0.data/scripts/demo-tool": "x", "demo-1.0.data/data/share/demo/x": "x", "demo-1.0.data/headers/demo.h": "x",
        "demo-1.0.data/purelib/demo2/__init__.py": "", f"{INFO}/entry_points.txt": "[console_scripts]\ndemo = demo:main\npip = demo:main\n",
        f"{INFO}/RECORD": "demo/__init__.py,,\ndemo-1.0.data/scripts/demo-tool,,\n"})
    assert wheel_refusals(wheel, script_names_taken(["python3", "activate", "pip"], owned=["pip"])) == []


def test_a_store_wheel_is_listed_once_and_again_when_it_changes(tmp_path, monkeypatch):
    """The store keeps a wheel's Listing beside it: the next install judges the same refusals, against its own
    scripts folder, without reading the archive; a wheel whose stat changed is read again."""
    import hashlib

    from compatmatrix.install import wheelfiles
    from compatmatrix.install.store import WheelStore

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    wheel = _zip(tmp_path / "demo-1.0-py3-none-any.whl", {**GOOD, "demo-1.0.data/scripts/activate": "x", "demo-1.0.data/data/share/demo/x": "x",
                                                          f"{INFO}/RECORD": "/usr/bin/python3,,\n"})
    store = WheelStore.open()
    assert store is not None
    kept = store.put(wheel, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert kept is not None
    reads = []
    read_members = wheelfiles.read_members
    monkeypatch.setattr(wheelfiles, "read_members", lambda path: reads.append(path) or read_members(path))
    first = store.listing(kept)
    again = store.listing(kept)
    assert reads == [kept] and first == again
    assert again.data == ("demo-1.0.data/scripts/activate", "demo-1.0.data/data/share/demo/x")
    occupied = script_names_taken(["activate"])
    assert again.refusals(occupied) == wheelfiles.judge(read_members(kept)).refusals(occupied) and len(again.refusals(occupied)) == 2
    assert again.refusals(script_names_taken([])) == [r for r in again.refusals(occupied) if "absolute" in r]  # the script judged here, each time
    os.utime(kept, ns=(0, 0))
    assert store.listing(kept) == first and reads == [kept, kept]  # the stat changed: read again
    assert store.listing(wheel) is None  # a file outside the store


def test_a_stale_or_hostile_store_listing_cannot_make_a_refused_wheel_pass(tmp_path, monkeypatch):
    """The store's .listing keeps the archive's member names only, never a verdict: the path rules run on them at
    every install, so a record written by an older compat (format 1, with "verdicts": []) or forged with this
    format but without the bad member is not believed: the former is ignored (the archive is read again), and
    names the record claims cannot hide a member of the archive once the stat changes."""
    import hashlib
    import json

    from compatmatrix import cachefiles
    from compatmatrix.install import store as store_module
    from compatmatrix.install.store import LISTING, LISTING_FORMAT, WheelStore, _fingerprint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    evil = "../../../../etc/evil.conf"
    wheel = _zip(tmp_path / "demo-1.0-py3-none-any.whl", {**GOOD, evil: "x"})
    store = WheelStore.open()
    assert store is not None
    kept = store.put(wheel, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert kept is not None
    fingerprint = _fingerprint(os.lstat(kept))
    # an older compat's record: the wheel's verdicts, empty, with a matching stat and name
    cachefiles.write_json(str(kept.parent), LISTING, {"stat": fingerprint, "name": kept.name, "verdicts": [], "data": []})
    refusals = store.listing(kept).refusals(script_names_taken([]))
    assert any(evil in r and "climbs out" in r for r in refusals)
    written = json.loads((kept.parent / LISTING).read_text())
    assert written["format"] == LISTING_FORMAT and "verdicts" not in written and evil in written["names"]
    # a record of this format: its names are judged by the rules in force, whatever it says of them
    written["verdicts"] = []
    cachefiles.write_json(str(kept.parent), LISTING, written)
    assert any(evil in r for r in store.listing(kept).refusals(script_names_taken([])))
    # a record of another (future or past) format is ignored
    cachefiles.write_json(str(kept.parent), LISTING, {**written, "format": LISTING_FORMAT + 1, "names": list(GOOD)})
    assert any(evil in r for r in store.listing(kept).refusals(script_names_taken([])))
    assert store_module.LISTING_FORMAT == json.loads((kept.parent / LISTING).read_text())["format"]


# ---------------------------------------------------------------- after a killed install, doctor and check say so


@pytest.mark.parametrize("command", ["check", "doctor"])
def test_doctor_and_check_name_an_interrupted_install_and_its_restore(command, venv, stack, tmp_path):
    """The defect: after a SIGKILLed install (journal left), doctor and check never mentioned --restore."""
    import json
    import signal

    killed = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(), env={"COMPAT_TEST_KILL_AT": "install:1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    extra = ["--skip", "imports"] if command == "doctor" else []
    done = compat(command, "--python", str(venv), "--json", *extra)
    assert done.returncode == 1, done.stderr[-2000:]
    finding = next(f for f in json.loads(done.stdout)["checks"] if f["id"] == "packages.interrupted-install")
    assert finding["status"] == "fail" and "stopped before it finished" in finding["summary"]
    assert f"compat install --restore --python {venv}" in finding["fix"]
    text = compat(command, "--python", str(venv), *extra)
    assert f"compat install --restore --python {venv}" in text.stdout + text.stderr
    restored = compat("install", "--restore", "--python", str(venv))
    assert restored.returncode == 0, restored.stderr[-2000:]
    after = compat(command, "--python", str(venv), "--json", *extra)
    assert next(f for f in json.loads(after.stdout)["checks"] if f["id"] == "packages.interrupted-install")["status"] == "pass"


def test_a_wheel_of_an_installed_distribution_may_rewrite_its_own_scripts(tmp_path, template):
    """The defect the real migrate test found: torch kept at its version (its wheel still handed to the installer) was
    refused because its own `torchfrtrace` was "in the scripts folder and belongs to no package being replaced". A
    distribution's own scripts are its own to rewrite; another project's wheel still may not take them over."""
    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.install.errors import InstallError
    from compatmatrix.install.service import refuse_unsafe_wheels
    from compatmatrix.install.transaction import EnvFolders

    from ..install_helpers import pip_install_fixture

    python = copy_venv(template, tmp_path / "venv")
    tool = {"intel_extension_for_pytorch-2.7.0.data/scripts/ipex-fixture-tool": HOSTILE}
    own = _ipex(tmp_path / "own", tool)
    pip_install_fixture(python, own)
    assert (python.parent / "ipex-fixture-tool").exists()
    snapshot = take_snapshot(str(python))
    env = EnvFolders.of_snapshot(snapshot)
    refuse_unsafe_wheels(env, snapshot, [own], planned=[])  # its own script: allowed (kept or reinstalled)
    other = build_wheel(tmp_path / "other", "filelock", "3.0.0", files_extra={"filelock-3.0.0.data/scripts/ipex-fixture-tool": HOSTILE})
    with pytest.raises(InstallError, match="ipex-fixture-tool"):
        refuse_unsafe_wheels(env, snapshot, [other], planned=[])
