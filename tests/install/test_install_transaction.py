"""The install transaction's own guarantees, in-process on small folders (no pip, no network): the manifest
catches a damaged snapshot, a restore interrupted anywhere can be run again, the commit point comes before
any deletion, and signals inside a held section wait for it.

The folders are a FAKE environment (prefix/lib/python3.11/site-packages and prefix/bin) made in tmp_path.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from compatmatrix.install import transaction
from compatmatrix.install.errors import InstallError, InstallInputError
from compatmatrix.install.transaction import EnvFolders, commit, interrupted_install, restore, take_snapshot
from compatmatrix.processes import Interruptions

from ..install_helpers import tree


class Stop(Exception):
    pass


@pytest.fixture
def env(tmp_path):
    site = tmp_path / "prefix" / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("old = 1\n")
    (site / "pkg" / "same-size.txt").write_text("AAAA")
    (site / "link").symlink_to("pkg")
    bin_ = tmp_path / "prefix" / "bin"
    bin_.mkdir()
    (bin_ / "python").symlink_to("/usr/bin/python3")
    (bin_ / "tool").write_text("#!/bin/sh\n")
    return EnvFolders.of(str(tmp_path / "prefix"), str(site), str(bin_))


def _install_something(env: EnvFolders) -> None:
    """What pip does: unlink, then write new files (one of the same size), add some, remove some."""
    (env.purelib / "pkg" / "__init__.py").unlink()
    (env.purelib / "pkg" / "__init__.py").write_text("new = 2\n")
    (env.purelib / "pkg" / "same-size.txt").unlink()
    (env.purelib / "pkg" / "same-size.txt").write_text("BBBB")
    (env.purelib / "new").mkdir()
    (env.purelib / "new" / "x.py").write_text("")
    (env.scripts / "tool").unlink()


def _state(env: EnvFolders) -> dict:
    return tree(env.purelib, env.scripts)


def _interrupt_at(monkeypatch, phase: str, n: int) -> None:
    seen = {"n": 0}

    def checkpoint(name: str) -> None:
        if name == phase:
            seen["n"] += 1
            if seen["n"] == n:
                raise Stop(f"{phase}:{n}")

    monkeypatch.setattr(transaction, "checkpoint", checkpoint)


@pytest.mark.parametrize("exchange_works", [True, False])
@pytest.mark.parametrize("stop_at", [1, 2, 3, 4])
def test_a_restore_stopped_anywhere_can_be_run_again(env, monkeypatch, exchange_works, stop_at):
    before = _state(env)
    snapshot = take_snapshot(env)
    _install_something(env)
    if not exchange_works:
        monkeypatch.setattr(transaction, "exchange", lambda a, b: False)
    _interrupt_at(monkeypatch, "restore", stop_at)
    try:
        restore(snapshot)
    except Stop:
        pass
    monkeypatch.setattr(transaction, "checkpoint", lambda name: None)
    if env.journal.exists():
        again = interrupted_install(env)
        assert again is not None
        restore(again)
    assert _state(env) == before
    assert not env.journal.exists()


def test_the_manifest_refuses_a_damaged_snapshot_before_touching_anything(env):
    snapshot = take_snapshot(env)
    _install_something(env)
    installed = _state(env)
    copy = next(c for live, c in snapshot.folders if live == env.purelib)
    (copy / "pkg" / "same-size.txt").unlink()  # what a half-finished deletion of the snapshot leaves
    with pytest.raises(InstallError, match="snapshot to restore is incomplete"):
        restore(snapshot)
    assert _state(env) == installed


def test_the_journal_goes_before_any_part_of_the_snapshot(env, monkeypatch):
    snapshot = take_snapshot(env)
    _install_something(env)
    installed = _state(env)
    _interrupt_at(monkeypatch, "commit", 3)  # in the middle of deleting the snapshot
    with pytest.raises(Stop):
        commit(snapshot)
    assert not env.journal.exists() and interrupted_install(env) is None
    assert snapshot.root.exists() and transaction.orphan_snapshots(env) == [snapshot.root]
    assert _state(env) == installed


def test_a_snapshot_interrupted_before_its_journal_leaves_nothing(env, monkeypatch):
    before = _state(env)
    _interrupt_at(monkeypatch, "snapshot", 2)
    with pytest.raises(Stop):
        take_snapshot(env)
    assert not env.journal.exists() and transaction.orphan_snapshots(env) == []
    assert _state(env) == before


def test_a_journal_that_is_not_json_is_refused(env):
    env.journal.write_text("{not json")
    with pytest.raises(InstallInputError, match="cannot be read") as caught:
        interrupted_install(env)
    assert caught.value.exit_code == 2


def test_a_journal_naming_a_folder_of_another_environment_is_refused(env, tmp_path):
    other = tmp_path / "other" / "site-packages"
    other.mkdir(parents=True)
    root = env.parent / ".compat-snapshot-x"
    env.journal.write_text(json.dumps({"pid": 1 << 22, "root": str(root), "folders": [[str(other), str(root / "0-site-packages")]]}))
    with pytest.raises(InstallInputError, match=str(other)):
        interrupted_install(env)


def test_signals_in_a_held_section_wait_for_its_end():
    with Interruptions() as signals:
        with pytest.raises(KeyboardInterrupt):
            with signals.held():
                os.kill(os.getpid(), signal.SIGINT)
                finished = True
        assert finished
        with signals.held(drop=True):
            os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # outside a held section: at once
