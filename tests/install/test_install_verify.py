"""compat install's verification: the import probe runs beside the environment probe, and its answer is used only
when the set read back asks for exactly the parts it imported (else the checks probe again, as they always did).

The two children are replaced by named fixtures (a recorded environment as the probe would read it back, and an
import probe that records which parts it was asked for): what is tested is which answer the checks judge.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from compatmatrix.checks import imports
from compatmatrix.checks.crash import Verdict
from compatmatrix.environment.snapshot import CpuInfo, Distribution, EnvSnapshot
from compatmatrix.install import service
from compatmatrix.install.runner import Change
from compatmatrix.target import Platform


def dist(name: str, version: str) -> Distribution:
    return Distribution(name, name, version, f"/env/site/{name}-{version}.dist-info", "/env/site")


def recorded_env(*distributions: Distribution) -> EnvSnapshot:
    return EnvSnapshot(
        executable="/env/bin/python", python=Version("3.11.7"), prefix="/env", purelib="/env/site", scripts="/env/bin", paths=("/env/site",),
        platform=Platform.from_tag("manylinux_2_28_x86_64"), libc_version="2.36",
        cpu=CpuInfo(model="recorded", flags=frozenset({"avx2"}), sockets=1, cores=2, logical=2, numa_nodes=1),
        allowed_cpus=2, cgroup_quota=None, shm_bytes=1 << 30, env={}, distributions=tuple(distributions), modules={}, which={},
    )


@pytest.fixture
def recording_probe(monkeypatch):
    """The import probe, recorded: each call's parts, and every part imports."""
    calls: list[tuple[str, ...]] = []

    def probe(python, parts, timeout):
        calls.append(tuple(p.name for p in parts))
        return {p.name: imports.ImportResult(Verdict("ok", f"{p.module} imports"), {"version": "2.13.0+cpu", "torch": "2.13.0+cpu"}, "", 0) for p in parts}

    monkeypatch.setattr(imports, "probe_stack", probe)
    return calls


def read_back_as(monkeypatch, env: EnvSnapshot) -> None:
    """The environment probe after the install reads ``env``."""
    monkeypatch.setattr(service, "take_snapshot", lambda executable: env)


def test_the_expected_set_is_the_snapshot_with_the_plan_applied():
    before = recorded_env(dist("torch", "2.12.0"), dist("numpy", "2.0.0"), dist("accelerate", "1.0.0"))
    after = service.expected_after(before, [Change("torch", "2.12.0", "2.13.0+cpu"), Change("transformers", None, "5.24.0")], ["accelerate"])
    assert after.versions() == {"torch": "2.13.0+cpu", "numpy": "2.0.0", "transformers": "5.24.0"}


def test_the_probe_beside_the_read_back_is_judged_when_the_parts_match(matrix, monkeypatch, recording_probe):
    installed = recorded_env(dist("torch", "2.13.0+cpu"), dist("transformers", "5.24.0"))
    read_back_as(monkeypatch, installed)
    findings = service._verify_installed(matrix, installed.executable, installed)
    assert recording_probe == [("torch",)]  # one import probe: the one started beside the read-back
    assert {f.id: f.status.name for f in findings}["imports.torch"] == "PASS"


def test_a_read_back_that_asks_for_other_parts_is_probed_again(matrix, monkeypatch, recording_probe):
    expected = recorded_env(dist("torch", "2.13.0+cpu"))
    read_back_as(monkeypatch, recorded_env(dist("torch", "2.13.0+cpu"), dist("torchvision", "0.28.0+cpu")))  # not what the plan said
    findings = service._verify_installed(matrix, expected.executable, expected)
    assert recording_probe == [("torch",), ("torch", "torchvision")]  # the early answer is not used: the checks probe the set read back
    judged = {f.id: f.status.name for f in findings}
    assert judged["imports.torch"] == "PASS" and judged["imports.torchvision"] == "PASS"


def test_without_an_expected_set_the_read_back_comes_first_as_before(matrix, monkeypatch, recording_probe):
    installed = recorded_env(dist("torch", "2.13.0+cpu"))
    read_back_as(monkeypatch, installed)
    service._verify_installed(matrix, installed.executable)
    assert recording_probe == [("torch",)]
