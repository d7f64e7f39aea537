"""compat migrate's steps around the installer and the live doctor, with both replaced by recorders (the real ones run in
tests/migrate/test_migrate_real.py): what is asked of the transaction, when it is asked, what the document says afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from compatmatrix.errors import UsageError
from compatmatrix.findings import Finding, Status
from compatmatrix.install.errors import InstallError, InstallInterrupted
from compatmatrix.migrate import MigrateOptions, run_migrate
from compatmatrix.migrate.document import loss_parity, measure
from compatmatrix.migrate.service import LiveRun, ServiceInstaller
from compatmatrix.migrate.text import format_text

from ..fixture_envs import FixtureEnv

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "migrate-v1.json").read_text())
COMMAND = ("mpirun", "-n", "2", "-genv", "OMP_NUM_THREADS=23", "python3", "run_qa.py", "--no_cuda", "--ddp_backend", "ccl", "--use_ipex")


def details(backend: str, busbw: float, steps: list, losses: list, ipex: str = "none") -> dict:
    return {"launcher": "spawn", "world_size": 2, "backend": backend, "backend_is_fixture": False, "seconds": 9.5, "ipex_mode": ipex,
            "bf16": {"on": True, "why": "native"}, "bandwidth": [{"mib": 1, "busbw": busbw / 2}, {"mib": 64, "busbw": busbw}],
            "memcpy": {"all_ranks": 14.2e9}, "ranks": [{"rank": 0, "losses": losses, "step_seconds": steps}, {"rank": 1, "losses": losses}]}


class Live:
    """The live doctor, recorded: the old set first (when --compare), then the new set inside the transaction."""

    def __init__(self, fail_after: bool = False) -> None:
        self.runs: list[str] = []
        self.fail_after = fail_after

    def __call__(self, matrix, snapshot, ranks, launcher, timeout):
        old = snapshot.get("intel-extension-for-pytorch") is not None
        self.runs.append("before" if old else "after")
        if old:
            return LiveRun((Finding("live.trainer", Status.PASS, "3 Trainer steps"),), details("gloo", 0.94e9, [0.30, 0.20, 0.22], [4.85, 4.80, 4.71], "direct"))
        status = Status.FAIL if self.fail_after else Status.PASS
        return LiveRun((Finding("live.allreduce", status, "allreduce wrong" if self.fail_after else "allreduce right"),),
                       details("gloo", 1.02e9, [0.25, 0.15, 0.17], [4.85, 4.79, 4.70]))


class Installer:
    """The transaction, recorded: it removes the packages from the fixture env (so the validation sees the new set) and
    raises as install/service.py does when the validation fails."""

    def __init__(self, env: FixtureEnv) -> None:
        self.env = env
        self.calls: list[tuple] = []

    def __call__(self, matrix, plan, snapshot, remove, before_commit):
        self.calls.append(([p.pin for p in plan.packages], list(remove)))
        moved = []
        for name in remove:
            for info in self.env.site.glob(f"{name.replace('-', '_')}-*.dist-info"):
                moved.append((info, info.with_suffix(".gone")))
                info.rename(info.with_suffix(".gone"))
        findings = list(before_commit())
        failed = [f for f in findings if f.status is Status.FAIL]
        if failed:
            for info, gone in moved:
                gone.rename(info)
            raise InstallError(f"The installed set failed its validation ({failed[0].id}: {failed[0].summary}); the environment was restored to what it was before.",
                               "compat doctor --live shows the details.", state="restored", findings=tuple(findings))
        return findings


@pytest.fixture
def old_env(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0").ipex("2.8.0")
    env.dist("transformers", "4.56.2")
    env.dist("accelerate", "1.10.1")
    return env


def test_refused_without_yes_and_nothing_asked_of_the_installer(old_env):
    installer, live = Installer(old_env), Live()
    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), command=COMMAND), installer=installer, live=live)
    jsonschema.validate(doc, SCHEMA)
    assert code == 1 and doc["state"] == "refused" and "refused without --yes" in doc["error"]["message"]
    assert installer.calls == [] and live.runs == []


def test_dry_run_touches_nothing(old_env):
    installer, live = Installer(old_env), Live()
    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), dry_run=True, yes=True, compare=True), installer=installer, live=live)
    assert code == 0 and doc["state"] == "planned" and installer.calls == [] and live.runs == []
    assert any("--compare measures a real migration" in n for n in doc["notes"])


def test_migrated_with_one_transaction_validated_before_its_commit(old_env):
    installer, live = Installer(old_env), Live()
    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), yes=True, to_torch="2.13.0", command=COMMAND), installer=installer, live=live)
    jsonschema.validate(doc, SCHEMA)
    assert code == 0 and doc["state"] == "migrated" and doc["ok"] is True
    assert installer.calls == [(["torch==2.13.0+cpu", "transformers==5.24.0", "accelerate==1.15.0"], ["intel-extension-for-pytorch"])]
    assert live.runs == ["after"]  # inside the transaction, on the new set (no --compare: no run on the old set)
    assert doc["validation"]["ok"] is True and doc["compare"] is None


def test_a_failed_validation_is_a_restore_and_exit_1(old_env):
    installer, live = Installer(old_env), Live(fail_after=True)
    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), yes=True, compare=True), installer=installer, live=live)
    jsonschema.validate(doc, SCHEMA)
    assert code == 1 and doc["state"] == "restored" and doc["ok"] is False
    assert "failed its validation (live.allreduce: allreduce wrong)" in doc["error"]["message"]
    assert doc["validation"]["ok"] is False and doc["compare"]["after"]["failed"] == ["live.allreduce"]
    assert list(old_env.site.glob("intel_extension_for_pytorch-*.dist-info"))  # the recorder put it back, as the transaction does
    text = format_text(doc)
    assert "FAILED: the old set was put back" in text and "FAIL live.allreduce: allreduce wrong" in text


def test_compare_runs_the_old_set_first_and_puts_both_side_by_side(old_env):
    installer, live = Installer(old_env), Live()
    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), yes=True, compare=True), installer=installer, live=live)
    assert code == 0 and live.runs == ["before", "after"]
    compare = doc["compare"]
    assert compare["before"]["bus_bandwidth_gbps"] == 0.94 and compare["after"]["bus_bandwidth_gbps"] == 1.02
    assert compare["before"]["step_ms_median"] == 220.0 and compare["after"]["step_ms_median"] == 170.0
    assert compare["loss_parity"]["within"] is True and compare["loss_parity"]["steps"] == 3
    text = format_text(doc)
    assert "bus bandwidth (64 MiB allreduce)" in text and "0.94 GB/s" in text and "1.02 GB/s" in text
    assert "gloo, IPEX direct, bf16" in text and "loss parity: 3 steps" in text


def test_interrupted_install_keeps_its_exit_code(old_env):
    def interrupted(matrix, plan, snapshot, remove, before_commit):
        raise InstallInterrupted("The install was interrupted (SIGINT): ... restored.", "Run it again.", terminated=False)

    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), yes=True), installer=interrupted, live=Live())
    assert code == 130 and doc["state"] == "restored" and doc["validation"] is None


def test_an_install_refused_before_any_change_is_failed_not_restored(old_env):
    def refused(matrix, plan, snapshot, remove, before_commit):
        raise InstallError("https://download.pytorch.org/whl/cpu (pytorch-cpu) cannot be reached; nothing was changed.", "Pass --index ...")

    code, doc = run_migrate(MigrateOptions(python=str(old_env.python), yes=True), installer=refused, live=Live())
    assert code == 1 and doc["state"] == "failed" and "nothing was changed" in doc["error"]["message"]


def test_options_that_contradict_each_other(tmp_path):
    with pytest.raises(UsageError, match="-r plans from pins"):
        run_migrate(MigrateOptions(python="/x/bin/python", requirement_files=("r.txt",)))
    with pytest.raises(UsageError, match="go with -r"):
        run_migrate(MigrateOptions(python_version="3.8"))
    with pytest.raises(UsageError, match="at least 1"):
        run_migrate(MigrateOptions(ranks_per_node=0))


def test_the_service_installer_says_when_the_transaction_lacks_removal(old_env, monkeypatch):
    import dataclasses

    from compatmatrix.errors import CompatError
    from compatmatrix.install import service

    @dataclasses.dataclass
    class OldOptions:  # an installer without remove / before_commit
        yes: bool = False

    monkeypatch.setattr(service, "InstallOptions", OldOptions)
    with pytest.raises(CompatError, match="cannot uninstall packages or validate inside its transaction"):
        ServiceInstaller()(None, None, None, ["intel-extension-for-pytorch"], lambda: [])


def test_measure_without_step_times_or_bandwidth():
    empty = measure((Finding("live.launch", Status.FAIL, "no ranks"),), {})
    assert empty["ok"] is False and empty["bus_bandwidth_gbps"] is None and empty["step_ms_median"] is None and empty["losses"] == []
    assert loss_parity([], [1.0])["within"] is None
    assert loss_parity([0.0], [0.1])["within"] is False and loss_parity([2.0], [2.05])["within"] is True
