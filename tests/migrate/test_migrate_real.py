"""compat migrate for real: a copy of the real torch 2.8 + IPEX 2.8 environment (tests/real_envs.py, hard-linked: pip and
uv unlink a file before writing it, and the install's own snapshot is hard links too, so the cached environment is
never written through) moved to stock PyTorch -- torch 2.13.0+cpu from a local index serving this machine's CPU wheel
as the PyTorch CPU host, transformers / accelerate and their dependencies as the real PyPI wheels, downloaded once into the
tests' cache and served on 127.0.0.1 too (tests/local_pypi.py) -- with the live doctor before and
after (--compare); and a copy of torch 2.13 + IPEX 2.8 whose validation is made to fail (a rank killed by SIGSEGV in
the Trainer step, the live worker's test hook), which must come back file for file.

Slow (a real install: minutes); needs PyPI once, to fill the wheel cache: skipped, with the reason, where PyPI cannot be
reached for that and nothing is cached, or the local torch wheel is missing, and while install/service.py cannot uninstall and validate inside its transaction.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from compatmatrix.migrate import MigrateOptions, run_migrate
from compatmatrix.migrate.text import compare_lines, format_text

from ..clean_env import base_env
from ..fixture_index import FixtureIndex
from ..install_helpers import env_tree, loose
from ..local_pypi import local_pypi_index
from ..local_torch import local_torch_index
from ..procs import MARK_VARIABLE, marked, new_mark

pytestmark = [pytest.mark.integration, pytest.mark.network]

TORCH = "torch==2.13.0"
TARGET = (TORCH, "transformers==5.24.0", "accelerate==1.15.0")  # the set compat migrate plans (the matrix's newest)
QA = ("mpirun", "-n", "2", "-genv", "OMP_NUM_THREADS=23", "python3", "run_qa.py", "--model_name_or_path", "google-bert/bert-large-uncased",
      "--output_dir", "/tmp/debug_squad/", "--no_cuda", "--ddp_backend", "ccl", "--use_ipex", "--bf16")
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "compatmatrix" / "schemas" / "migrate-v1.json").read_text())
MIGRATE_TIMEOUT_S = 1800  # the whole migration, install included, must end within this (a hung step is a failure, not a stuck CI)


def skip_unless_the_installer_can() -> None:
    from compatmatrix.install.service import InstallOptions

    if not {"remove", "before_commit"} <= {f.name for f in dataclasses.fields(InstallOptions)}:
        pytest.skip("install/service.py cannot uninstall and validate inside its transaction yet (InstallOptions.remove / before_commit: "
                    "the change compat migrate needs there)")


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory):
    """A local PEP 503 index on 127.0.0.1 serving this machine's real CPU torch wheel as the pytorch-cpu host and the
    real PyPI wheels of the target set (downloaded once, tests/local_pypi.py) as the pypi host: the migration itself
    talks only to 127.0.0.1."""
    skip_unless_the_installer_can()
    with local_torch_index(tmp_path_factory.mktemp("torch-wheel"), tmp_path_factory.mktemp("torch-index"), TORCH) as index, \
            local_pypi_index(TARGET, index.root, index=index, leave_out=("torch",)):
        yield index


def copy_env(python: Path, dest: Path) -> Path:
    """A hard-linked copy of a cached real environment (cp -al: seconds, even for 7 GB)."""
    source = python.parent.parent
    started = time.monotonic()
    subprocess.run(["cp", "-al", str(source), str(dest)], check=True, timeout=600)
    print(f"cp -al {source.name}: {time.monotonic() - started:.1f} s")
    return dest / "bin" / "python"


def freeze(python: Path) -> dict[str, str]:
    done = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"], capture_output=True, text=True,
                          timeout=300, check=True, env=base_env())
    from compatmatrix.names import canonical_name

    return {canonical_name(line.split("==")[0]): line.split("==")[1] for line in done.stdout.split() if "==" in line}


def options(python: Path, index: FixtureIndex, **changes) -> MigrateOptions:
    lines: list[str] = []
    base = MigrateOptions(python=str(python), yes=True, to_torch="2.13.0", command=QA, indexes=(f"pytorch-cpu={index.host_url('pytorch-cpu')}", f"pypi={index.host_url('pypi')}"),
                          live_timeout=600.0, say=lines.append)
    return dataclasses.replace(base, **changes)


def test_torch_2_8_with_ipex_2_8_migrated_to_stock_and_compared(ipex280_torch280, torch_index, tmp_path, monkeypatch):
    original = freeze(ipex280_torch280)
    python = copy_env(ipex280_torch280, tmp_path / "torch280-ipex280")
    mark = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, mark)  # every process of the run carries it: none may be left afterwards
    started = time.monotonic()
    code, doc = run_migrate(options(python, torch_index, compare=True))
    seconds = time.monotonic() - started
    print(format_text(doc))
    print(f"compat migrate --compare: {seconds:.0f} s")
    jsonschema.validate(doc, SCHEMA)
    assert code == 0, (doc["error"], doc["validation"])
    assert seconds < MIGRATE_TIMEOUT_S
    assert doc["state"] == "migrated" and doc["remove"] == ["intel-extension-for-pytorch"]
    assert doc["install"] == {"torch": "2.13.0+cpu", "transformers": "5.24.0", "accelerate": "1.15.0"}
    after = freeze(python)
    assert after["torch"] == "2.13.0+cpu" and after["transformers"] == "5.24.0" and after["accelerate"] == "1.15.0"
    assert "intel-extension-for-pytorch" not in after
    # the validation: the live doctor on the new set passed before the install was kept
    checks = {c["id"]: c for c in doc["validation"]["checks"]}
    assert doc["validation"]["ok"] and checks["live.trainer"]["status"] == "pass" and checks["live.backend"]["status"] == "pass"
    compare = doc["compare"]
    assert compare["before"]["ok"] and compare["after"]["ok"]
    assert compare["before"]["backend"] == "gloo" and compare["after"]["backend"] == "gloo"  # no bindings in the old set: it ran gloo too
    assert compare["before"]["ipex_mode"] in ("trainer", "direct") and compare["after"]["ipex_mode"] == "none"
    assert compare["before"]["bus_bandwidth_gbps"] and compare["after"]["bus_bandwidth_gbps"]
    assert compare["loss_parity"]["steps"] == 3
    print("\n".join(compare_lines(compare)))
    # the command the job now runs, for the new set
    assert doc["command"][:4] in (["torchrun", "--standalone", "--nproc_per_node", "2"], ["mpirun", "-n", "2", "-genv"])
    assert "gloo" in doc["command"] and "--use_ipex" not in doc["command"] and "--use_cpu" in doc["command"]
    # the cached environment the copy was made from is untouched
    assert freeze(ipex280_torch280) == original
    assert not marked(mark)


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_failed_validation_puts_the_old_set_back(ipex280_torch213, torch_index, tmp_path, monkeypatch, installer):
    from compatmatrix.install.runner import uv_binary

    if installer == "uv" and uv_binary() is None:
        pytest.skip("uv is not installed here")
    python = copy_env(ipex280_torch213, tmp_path / "torch213-ipex280")
    before, listing = freeze(python), loose(env_tree(python))
    monkeypatch.setenv("COMPAT_LIVE_FIXTURE_FAULT", "segv:1")  # the live worker's test hook: rank 1 dies with SIGSEGV in the Trainer step
    started = time.monotonic()
    code, doc = run_migrate(options(python, torch_index, installer=installer))
    print(format_text(doc))
    print(f"compat migrate ({installer}), validation made to fail: {time.monotonic() - started:.0f} s")
    jsonschema.validate(doc, SCHEMA)
    assert code == 1 and doc["state"] == "restored"
    assert "failed its validation" in doc["error"]["message"] and "restored" in doc["error"]["message"]
    assert doc["validation"]["ok"] is False
    assert any(c["status"] == "fail" and c["id"].startswith("live.") for c in doc["validation"]["checks"])
    assert freeze(python) == before and freeze(python)["intel-extension-for-pytorch"] == "2.8.0"
    assert loose(env_tree(python)) == listing  # file for file (site-packages and bin)
    leftovers = [p.name for p in python.parent.parent.glob("lib/python3*/.compat-*") if not p.name.endswith(".lock")]
    assert leftovers == []  # no journal, no snapshot left behind


def test_the_stock_environment_is_left_alone(stock_torch213, tmp_path):
    python = copy_env(stock_torch213, tmp_path / "stock")
    code, doc = run_migrate(MigrateOptions(python=str(python), yes=True, to_torch="2.13.0", say=lambda line: None))
    assert code == 0 and doc["state"] == "unchanged" and doc["remove"] == []
    shutil.rmtree(tmp_path / "stock")
