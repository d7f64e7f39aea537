"""The kept environment-probe answer (environment/probe_cache.py) is reused only while the environment is as it was.

A scratch venv (python -m venv --without-pip) is the environment. Every change the probe's answer depends on --
a dist-info added, edited in place or removed, a .pth file, a variable such as PYTHONPATH, the interpreter --
makes compat ask the interpreter again, and the answer then shows the change. The machine's facts (CPUs,
/dev/shm) are never taken from the cache. End to end, a sitecustomize.py in the venv counts the interpreter's
starts: a reused answer starts nothing, and `compat check` prints the same bytes either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compatmatrix.environment import snapshot

from ..conftest import run_compat

AGE_S = 3600


def _venv(root: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    return root / "bin" / "python"


def _site(python: Path) -> Path:
    (site,) = (python.parent.parent / "lib").glob("python*/site-packages")
    return site


def _age(root: Path) -> None:
    """Every file and folder of the venv last changed an hour ago: older than the race margin."""
    then = time.time() - AGE_S
    for folder, names, files in os.walk(root):
        for name in files + names:
            os.utime(os.path.join(folder, name), (then, then), follow_symlinks=False)
        os.utime(folder, (then, then))


def _dist(site: Path, name: str, version: str) -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n", encoding="utf-8")
    return info


@pytest.fixture
def venv(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    python = _venv(tmp_path / "venv")
    _age(tmp_path / "venv")
    return python


@pytest.fixture
def probes(monkeypatch):
    """How many times the environment probe ran another interpreter."""
    runs = []
    real = snapshot.run_probe

    def counting(*args, **kwargs):
        runs.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot, "run_probe", counting)
    return runs


def _names(snap) -> dict[str, str]:
    return {d.canonical: d.raw_version for d in snap.distributions}


def test_a_kept_answer_is_reused_and_equal(venv, probes):
    first = snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 1
    again = snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 1  # nothing changed: the interpreter was not asked
    assert again == first
    assert again.raw == first.raw
    uncached = snapshot.take_snapshot(str(venv))
    assert uncached == first and uncached.raw == first.raw


def test_each_change_to_the_environment_is_seen(venv, probes, monkeypatch):
    root = venv.parent.parent.parent
    site = _site(venv)

    def after_change() -> dict[str, str]:
        """The change is seen (the interpreter is asked), and once settled the new answer is kept and reused."""
        before = len(probes)
        seen = _names(snapshot.take_snapshot(str(venv), cached=True))
        assert len(probes) == before + 1
        _age(root)
        assert _names(snapshot.take_snapshot(str(venv), cached=True)) == seen
        assert len(probes) == before + 2  # kept now ...
        assert _names(snapshot.take_snapshot(str(venv), cached=True)) == seen
        assert len(probes) == before + 2  # ... and reused
        return seen

    assert "fakepkg" not in after_change()
    info = _dist(site, "fakepkg", "1.0")  # installed
    assert after_change().get("fakepkg") == "1.0"

    metadata = info / "METADATA"  # edited in place: the folder listing is unchanged
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 1.1"))
    assert after_change().get("fakepkg") == "1.1"

    for child in info.iterdir():  # removed
        child.unlink()
    info.rmdir()
    assert "fakepkg" not in after_change()

    extra = root / "extra"
    extra.mkdir()
    _dist(extra, "frompath", "3.0")
    _age(root)
    assert "frompath" not in _names(snapshot.take_snapshot(str(venv), cached=True))
    monkeypatch.setenv("PYTHONPATH", str(extra))  # a variable the interpreter reads at start-up
    assert after_change().get("frompath") == "3.0"
    monkeypatch.delenv("PYTHONPATH")
    assert "frompath" not in after_change()

    (site / "extra.pth").write_text(str(extra) + "\n")  # a .pth file adds a folder to sys.path
    assert after_change().get("frompath") == "3.0"


def test_a_folder_a_pth_file_names_counts_once_it_exists(venv, probes):
    site = _site(venv)
    later = site.parent / "later"
    (site / "later.pth").write_text(str(later) + "\n")
    _age(venv.parent.parent)
    assert "late" not in _names(snapshot.take_snapshot(str(venv), cached=True))
    snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 1  # kept and reused
    later.mkdir()  # site adds it now: nothing in site-packages changed
    _dist(later, "late", "1.0")
    assert _names(snapshot.take_snapshot(str(venv), cached=True)).get("late") == "1.0"
    assert len(probes) == 2


def test_a_change_racing_the_probe_is_not_kept(venv, probes):
    site = _site(venv)
    _dist(site, "fresh", "1.0")  # changed just now: within the race margin of the next probe
    snapshot.take_snapshot(str(venv), cached=True)
    snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 2  # not kept: asked again


def test_the_machine_facts_are_read_afresh(venv, probes, monkeypatch):
    snapshot.take_snapshot(str(venv), cached=True)
    from compatmatrix.environment import env_probe

    monkeypatch.setattr(env_probe, "allowed_cpus", lambda: {"affinity": [0], "count": 1, "cgroup_quota": None})
    reused = snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 1
    assert reused.allowed_cpus == 1


def test_no_cache_means_no_cache(venv, probes, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_NO_CACHE", "1")
    snapshot.take_snapshot(str(venv), cached=True)
    snapshot.take_snapshot(str(venv), cached=True)
    assert len(probes) == 2
    assert not (tmp_path / "cache").exists()


def test_only_the_static_commands_ask_for_it(venv, probes):
    snapshot.take_snapshot(str(venv), cached=True)
    snapshot.take_snapshot(str(venv))  # the default (compat install, env, translate): always asks the interpreter
    assert len(probes) == 2


def test_a_planted_entry_is_ignored(venv, probes, tmp_path):
    snapshot.take_snapshot(str(venv), cached=True)
    (entry,) = (tmp_path / "cache" / "compatmatrix").glob("probe-*.json")
    data = json.loads(entry.read_text())
    data["answer"]["distributions"] = "not a list"
    entry.write_text(json.dumps(data))
    assert snapshot.take_snapshot(str(venv), cached=True).distributions == ()
    assert len(probes) == 2  # the kept answer did not parse: the interpreter was asked


def test_check_end_to_end(tmp_path):
    """compat check: the same bytes from a kept answer as from the interpreter; a new torch is seen at once."""
    python = _venv(tmp_path / "venv")
    starts = tmp_path / "starts.log"
    (_site(python) / "sitecustomize.py").write_text(f"with open({str(starts)!r}, 'a') as log:\n    log.write('start\\n')\n")
    _age(tmp_path / "venv")
    # PATH: only the venv's own folder (aged), so nothing else on this machine changing a PATH folder just then
    # (which would rightly keep the answer from being kept) makes the test depend on it
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "COMPAT_NO_CACHE": None, "NO_COLOR": "1", "PATH": str(python.parent)}

    def check(*extra, **more):
        done = run_compat("check", "--python", str(python), *extra, env_extra={**env, **more})
        assert done.returncode in (0, 1), done.stderr
        return done.stdout

    def started() -> int:
        return len(starts.read_text().splitlines()) if starts.exists() else 0

    uncached = check("--json", COMPAT_NO_CACHE="1")
    assert started() == 1
    _age(tmp_path / "venv")  # that start may have written site-packages/__pycache__: a change to the folder, settled now
    assert check("--json") == uncached and started() == 2  # probed, kept
    assert check("--json") == uncached and started() == 2  # reused: the interpreter did not start
    text = check()
    assert started() == 2 and text == check(COMPAT_NO_CACHE="1")
    assert "torch 2.13.0" not in text
    _dist(_site(python), "torch", "2.13.0")
    assert "torch 2.13.0" in check() and started() == 4
