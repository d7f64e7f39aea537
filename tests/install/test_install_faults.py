"""compat install under interruption: the commit point, the snapshot's manifest, a journal nobody may trust,
signals during the verification, and children that die with compat.

Real processes, real pip, real venvs (copied from one template per module), FIXTURE wheels from a local
index on 127.0.0.1 (tests/fixture_index.py, tests/install_helpers.py). Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from ..install_helpers import (
    MARK_VARIABLE,
    PLATFORM,
    STACK,
    cmdline,
    compat,
    diff,
    env_tree,
    kill_marked,
    marked,
    new_mark,
    served,
    site_packages,
    stack_index,
    start_compat,
    survivors,
    wait_for,
)

pytestmark = pytest.mark.integration

JOURNAL = ".compat-install-journal.json"


def _leftovers(python: Path) -> list[str]:
    parent = site_packages(python).parent
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((".compat-snapshot-", JOURNAL)) or ".compat-trash-" in p.name)


def _kill_during_verification(stack, venv: Path, tmp_path: Path) -> None:
    """Start an install whose FIXTURE IPEX import sleeps, and SIGKILL compat while the verification waits on it."""
    marker, mark = tmp_path / "importing", new_mark()
    process = start_compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(),
                           env={"FIXTURE_IPEX_MARKER": str(marker), "FIXTURE_IPEX_SLEEP": "60", MARK_VARIABLE: mark})
    try:
        started = wait_for(lambda: marker.exists() or process.poll() is not None, 180) and marker.exists()
        process.kill()
        _, err = process.communicate(timeout=60)
    finally:
        kill_marked(mark)
    assert started, "the verification never started: " + err[-2000:]


# 1. the commit point and the snapshot's manifest


def test_restore_refuses_a_half_deleted_snapshot(stack, venv, tmp_path):
    """What an interrupted cleanup used to leave (journal + part of the snapshot): --restore must not swap it in."""
    _kill_during_verification(stack, venv, tmp_path)
    journal = site_packages(venv).parent / JOURNAL
    assert journal.exists()
    copy = next(Path(c) for live, c in json.loads(journal.read_text())["folders"] if live.endswith("site-packages"))
    entries = sorted(copy.iterdir())
    for entry in entries[: len(entries) // 2]:  # as shutil.rmtree leaves it when killed half-way
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    installed = env_tree(venv)
    done = compat("install", "--restore", "--python", str(venv))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "snapshot" in done.stderr and "incomplete" in done.stderr and "--discard-snapshot" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert env_tree(venv) == installed, "the live environment was touched"
    assert journal.exists()


def test_a_kill_during_cleanup_keeps_the_complete_new_state(stack, venv, tmp_path):
    """COMPAT_TEST_KILL_AT (test-only hook) kills compat while it deletes the snapshot after a good install."""
    done = compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(), env={"COMPAT_TEST_KILL_AT": "commit:2"})
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not (site_packages(venv).parent / JOURNAL).exists(), "the journal must be gone before the snapshot is deleted"
    refused = compat("install", "--restore", "--python", str(venv))
    assert refused.returncode == 1 and "No interrupted compat install" in refused.stderr, refused.stderr
    again = compat("install", "--python", str(venv), "--yes", "--json", *STACK, *stack.index_args())
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changes"] == []  # the new set was complete
    assert _leftovers(venv) == []  # the half-deleted snapshot was cleared by the next install


# 2. the journal is not trusted


def _journal_cases(site: Path, scripts: Path, victim: Path) -> dict[str, tuple[dict, str]]:
    parent = site.parent
    fake = parent / ".compat-snapshot-crafted"
    base = {"version": 2, "pid": 999999, "pid_start": "1", "started": 0, "prefix": str(site.parents[2])}
    return {
        "root outside the environment": ({**base, "root": str(victim), "folders": [[str(site), str(victim / "0-site-packages")]]}, str(victim)),
        "root a symlink out": ({**base, "root": str(fake), "folders": [[str(site), str(fake / "0-site-packages")]]}, str(fake)),
        "live folder outside": ({**base, "root": str(fake), "folders": [[str(victim), str(fake / "0-victim")]]}, str(victim)),
        "copy escapes the root": ({**base, "root": str(fake), "folders": [[str(site), str(fake / ".." / ".." / ".." / ".." / victim.name)]]}, victim.name),
        "root not next to site-packages": ({**base, "root": str(site.parents[2] / ".compat-snapshot-x"), "folders": [[str(scripts), str(site.parents[2] / ".compat-snapshot-x" / "0-bin")]]},
                                           ".compat-snapshot-x"),
    }


@pytest.mark.parametrize("case", ["root outside the environment", "root a symlink out", "live folder outside", "copy escapes the root", "root not next to site-packages"])
@pytest.mark.parametrize("action", ["--restore", "--discard-snapshot"])
def test_a_crafted_journal_moves_and_deletes_nothing(venv, tmp_path, case, action):
    site = site_packages(venv)
    victim = tmp_path / "victim"
    (victim / "0-site-packages").mkdir(parents=True)
    (victim / "0-site-packages" / "precious.txt").write_text("keep me")
    (victim / "0-victim").mkdir()
    (victim / "data.txt").write_text("keep me too")
    journal, bad = _journal_cases(site, venv.parent, victim)[case]
    fake = site.parent / ".compat-snapshot-crafted"
    if case == "root a symlink out":
        fake.symlink_to(victim, target_is_directory=True)
    elif case == "live folder outside":
        (fake / "0-victim").mkdir(parents=True)
    elif case == "root not next to site-packages":
        (site.parents[2] / ".compat-snapshot-x" / "0-bin").mkdir(parents=True)
    (site.parent / JOURNAL).write_text(json.dumps(journal))
    before, victim_before = env_tree(venv), sorted(str(p) for p in victim.rglob("*"))
    done = compat("install", action, "--python", str(venv))
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    assert bad in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert sorted(str(p) for p in victim.rglob("*")) == victim_before, "a crafted journal moved or deleted files outside the snapshot"
    assert (victim / "0-site-packages" / "precious.txt").read_text() == "keep me"
    assert env_tree(venv) == before
    refused = compat("install", "--python", str(venv), "torch==2.7.0", "--index", "pypi=http://127.0.0.1:9/simple")
    assert refused.returncode == 2 and bad in refused.stderr, refused.stderr  # the next install does not trust it either


# 5. a signal during the verification restores like any other interruption


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_verification_restores(stack, venv, tmp_path, signum):
    before = env_tree(venv)
    marker, mark = tmp_path / "importing", new_mark()
    process = start_compat("install", "--python", str(venv), "--yes", *STACK, *stack.index_args(),
                           env={"FIXTURE_IPEX_MARKER": str(marker), "FIXTURE_IPEX_SLEEP": "60", MARK_VARIABLE: mark})
    try:
        started = wait_for(lambda: marker.exists() or process.poll() is not None, 180) and marker.exists()
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
        left = survivors(mark, grace=5.0)
    finally:
        process.kill()
        kill_marked(mark)
    assert started, "the verification never started"
    assert process.returncode == (130 if signum == signal.SIGINT else 143), (process.returncode, err[-2000:])
    assert "restored" in err and "Traceback" not in err, err[-2000:]
    after = env_tree(venv)
    assert after == before, diff(before, after)
    assert _leftovers(venv) == []
    assert left == [], f"children outlived the interrupted install: {left}"


# 8. no child outlives compat


@pytest.mark.parametrize("command", ["install", "download"])
def test_no_child_outlives_a_killed_compat(venv, tmp_path, command):
    index = stack_index(tmp_path / "slow-index")
    index.slow["filelock-3.0.0-py3-none-any.whl"] = 60  # pip waits for it: planning (install) or pip download (download)
    with served(index):
        if command == "install":
            args = ["install", "--python", str(venv), "--yes", *STACK, *index.index_args()]
        else:
            args = ["download", "-d", str(tmp_path / "house"), *PLATFORM, *STACK, *index.index_args()]
        mark = new_mark()
        process = start_compat(*args, env={MARK_VARIABLE: mark})
        try:
            def pip_waits() -> bool:
                return any("pip" in cmdline(p) and ("--dry-run" in cmdline(p) or " download " in cmdline(p)) for p in marked(mark))

            caught = wait_for(pip_waits, 180)
            process.kill()
            process.communicate(timeout=60)
            left = survivors(mark, grace=3.0)
        finally:
            process.kill()
            kill_marked(mark)
    assert caught, "pip never started"
    assert left == [], f"children outlived compat's SIGKILL: {left}"
    assert not os.path.exists(f"/proc/{process.pid}") or process.returncode is not None
