"""compat's owned temporary folders and the sweep of those a killed compat left (compatmatrix/scratch.py): the one rule
compat tune, doctor --live and matrix verify share, tested once here. Unit tests: real folders in tmp_path, real flocks,
this process and a short-lived child as the owners."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import time

import pytest

from compatmatrix import scratch
from compatmatrix.scratch import OWNER_LOCK, claim, own_identity, parse_identity, release, scratch_folder, sweep_stale

PREFIX = "compat-test-"


def left_by(folder, identity: str, held: bool = False):
    """A folder of PREFIX with an owner lock naming ``identity``; its lock held by this test (a live owner) when ``held``."""
    folder.mkdir()
    fd = os.open(folder / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, identity.encode())
    if held:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    os.close(fd)
    return None


def gone_identity() -> str:
    """HOST:PID:STARTTIME of a process that has ended (a child, reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=60)
    return f"{os.uname().nodename}:{int(child.stdout)}:1"


def test_a_claimed_folder_is_private_locked_and_names_its_owner(tmp_path):
    owned = claim(PREFIX, tmp_path)
    try:
        assert owned.folder.parent == tmp_path and owned.folder.name.startswith(PREFIX) and owned.locked
        assert stat.S_IMODE(owned.folder.stat().st_mode) == 0o700
        assert (owned.folder / OWNER_LOCK).read_text() == own_identity()
        assert sorted(p.name for p in owned.folder.iterdir()) == [OWNER_LOCK]
        other = os.open(owned.folder / OWNER_LOCK, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):  # held for the owner's life
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
        host, pid, start = parse_identity(own_identity())
        assert (host, pid) == (os.uname().nodename, os.getpid()) and start == scratch.process_start(os.getpid())
    finally:
        release(owned)
    assert not owned.folder.exists()


def test_the_context_manager_sweeps_first_and_removes_its_folder_at_the_end(tmp_path):
    stale = tmp_path / f"{PREFIX}stale"
    left_by(stale, gone_identity())
    (stale / "run-1" / "tmp").mkdir(parents=True)
    with scratch_folder(PREFIX, tmp_path) as folder:
        assert not stale.exists() and folder.is_dir()
        assert sweep_stale(PREFIX, tmp_path) == []  # its own folder: locked, and this process lives
    assert list(tmp_path.iterdir()) == []


def test_without_flock_the_folder_is_made_and_removed_but_never_swept(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    owned = claim(PREFIX, tmp_path)
    assert not owned.locked and (owned.folder / OWNER_LOCK).read_text() == own_identity()
    (owned.folder / OWNER_LOCK).write_text(gone_identity())  # even once its owner looks gone: a lock that cannot be taken
    assert sweep_stale(PREFIX, tmp_path) == [] and owned.folder.is_dir()
    release(owned)
    assert not owned.folder.exists()


def test_the_sweep_removes_a_folder_whose_owner_is_gone(tmp_path):
    dead = tmp_path / f"{PREFIX}dead"
    left_by(dead, gone_identity())
    (dead / "venv" / "bin").mkdir(parents=True)
    assert sweep_stale(PREFIX, tmp_path) == [dead] and not dead.exists()


def test_a_reused_pid_with_another_start_time_is_gone_and_this_process_is_not(tmp_path):
    reused = tmp_path / f"{PREFIX}reused"
    left_by(reused, f"{os.uname().nodename}:{os.getpid()}:1")  # this pid, another start time: another process
    running = tmp_path / f"{PREFIX}running"
    left_by(running, own_identity())  # lock free (a file system that lost it), but its process lives
    assert sweep_stale(PREFIX, tmp_path) == [reused] and running.is_dir()


def test_a_folder_whose_lock_a_live_process_holds_stays_whatever_it_names(tmp_path):
    fd = left_by(tmp_path / f"{PREFIX}held", gone_identity(), held=True)
    try:
        assert sweep_stale(PREFIX, tmp_path) == [] and (tmp_path / f"{PREFIX}held").is_dir()
    finally:
        os.close(fd)
    assert sweep_stale(PREFIX, tmp_path) == [tmp_path / f"{PREFIX}held"]


def test_another_host_s_folder_stays(tmp_path):
    """A --run-dir several hosts see: another host's pids mean nothing here."""
    left_by(tmp_path / f"{PREFIX}other", f"not-{os.uname().nodename}:999999999:1")
    assert sweep_stale(PREFIX, tmp_path) == []


def test_symbolic_links_are_never_followed_or_removed(tmp_path):
    target = tmp_path / "victim"
    left_by(target, gone_identity())
    (tmp_path / f"{PREFIX}link").symlink_to(target)  # a link in place of a folder
    linked_lock = tmp_path / f"{PREFIX}lock-link"
    linked_lock.mkdir()
    (linked_lock / OWNER_LOCK).symlink_to(target / OWNER_LOCK)  # a link in place of the owner lock
    assert sweep_stale(PREFIX, tmp_path) == []
    assert target.is_dir() and (tmp_path / f"{PREFIX}link").is_symlink() and linked_lock.is_dir()


def test_a_folder_without_owner_stays_unless_the_orphan_age_is_asked_and_passed(tmp_path):
    young, old = tmp_path / f"{PREFIX}young", tmp_path / f"{PREFIX}old"
    young.mkdir()
    old.mkdir()
    day = scratch.ORPHAN_AGE_S
    os.utime(old, (time.time() - day - 60, time.time() - day - 60))
    assert sweep_stale(PREFIX, tmp_path) == []  # no age asked (tune, doctor --live): an older compat's may still run
    assert sweep_stale(PREFIX, tmp_path, orphan_age=day) == [old] and young.is_dir()  # matrix verify's rule


def test_an_unreadable_owner_is_no_owner(tmp_path):
    garbage = tmp_path / f"{PREFIX}garbage"
    left_by(garbage, "not an owner")
    assert sweep_stale(PREFIX, tmp_path) == []
    assert sweep_stale(PREFIX, tmp_path, orphan_age=0.0, now=time.time() + 10) == [garbage]


def test_only_folders_of_the_prefix_are_looked_at(tmp_path):
    left_by(tmp_path / "compat-other-x", gone_identity())
    (tmp_path / f"{PREFIX}file").write_text("")  # a file of the prefix
    assert sweep_stale(PREFIX, tmp_path) == [] and (tmp_path / "compat-other-x").is_dir()


def test_the_sweep_looks_at_no_more_entries_than_its_bound(tmp_path):
    identity = gone_identity()
    for n in range(5):
        left_by(tmp_path / f"{PREFIX}{n}", identity)
    assert len(sweep_stale(PREFIX, tmp_path, limit=2)) <= 2 and len(list(tmp_path.iterdir())) >= 3
    assert len(sweep_stale(PREFIX, tmp_path)) >= 1 and list(tmp_path.iterdir()) == []


def test_a_missing_parent_sweeps_nothing(tmp_path):
    assert sweep_stale(PREFIX, tmp_path / "absent") == []


@pytest.mark.parametrize("text", ["", "host", "host:12", "host:x:1", ":12:1", "host:0:1", "host:12:abc"])
def test_identities_that_are_not_one(text):
    assert parse_identity(text) is None


def test_identity_with_a_colon_in_the_host_and_no_start_time():
    assert parse_identity("a:b:12:") == ("a:b", 12, "")


def test_another_user_s_folder_stays(tmp_path, monkeypatch):
    """Another user's folder cannot be made without root: this user's is made to look another's (getuid differs)."""
    left_by(tmp_path / f"{PREFIX}theirs", gone_identity())
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 1)
    assert sweep_stale(PREFIX, tmp_path) == [] and (tmp_path / f"{PREFIX}theirs").is_dir()
