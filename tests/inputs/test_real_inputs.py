"""Real inputs, read as written: 32 requirement sets from 11 public repositories (tests/data/real_inputs, each with the
repository, path and commit it came from and the primary source of its verdict in MANIFEST.toml).

Per file the test says what the truth is (MANIFEST's `truth` and `why`) and checks that compat
* reads exactly the pins, ranges, URLs and index lines the source has (`compat resolve -r` / the reader);
* reaches the verdict the primary source settles: a consistent CPU set passes, a documented mismatch fails, an
  XPU/GPU build is refused as out of scope, an unverified or reported-working pairing passes with a warning that
  says so;
* `compat check -r FILE` agrees, check by check, with `compat check` on a metadata-only environment of the same pins.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix.inputs import read_inputs
from compatmatrix.inputs.model import InputError
from compatmatrix.names import canonical_name

from ..conftest import run_compat

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).resolve().parents[1] / "data" / "real_inputs"
MANIFEST = tomllib.loads((DATA / "MANIFEST.toml").read_text())["file"]
IDS = [entry["name"].split("_", 1)[0] for entry in MANIFEST]
FLAGS = {"find-links": "-f", "index-url": "--index-url", "extra-index-url": "--extra-index-url", "no-index": "--no-index"}


def test_the_collection_is_what_the_issue_asks_for():
    assert len(MANIFEST) >= 20 and len({entry["repo"] for entry in MANIFEST}) >= 8
    assert all(len(entry["commit"]) == 40 and entry["path"] and entry["why"] for entry in MANIFEST)
    assert {entry["name"] for entry in MANIFEST} == {p.name for p in DATA.glob("*.txt")}


@pytest.mark.parametrize("entry", MANIFEST, ids=IDS)
def test_the_file_is_read_as_written(entry):
    inputs = read_inputs([str(DATA / entry["name"])], Version(entry["python"]))
    got = {canonical_name(r.name): r for r in inputs.requirements}
    for name, version in entry["expect_packages"].items():
        assert got[name].pinned == Version(version), (name, got[name])
        if "+" in version:
            assert got[name].local_label == "+" + version.split("+", 1)[1]
    for name, spec in entry.get("expect_ranges", {}).items():
        assert got[name].specifier == SpecifierSet(spec)
    for name in entry.get("expect_unpinned", []):
        assert not got[name].specifier, got[name]
    for name, url in entry.get("expect_urls", {}).items():
        assert got[name].url == url
    assert [f"{FLAGS[i.kind]} {i.url}".strip() for i in inputs.indexes] == entry["expect_indexes"]


def _check_r(entry, python=None):
    done = run_compat("check", "-r", str(DATA / entry["name"]), "--python-version", python or entry["python"], "--json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, {c["id"]: c for c in json.loads(done.stdout)["checks"]}


def _text(check) -> str:
    return " ".join([check["summary"], *check.get("evidence", [])])


@pytest.mark.parametrize("entry", MANIFEST, ids=IDS)
def test_check_r_reaches_the_verdict_of_the_primary_source(entry):
    code, checks = _check_r(entry)
    failed = {cid: c for cid, c in checks.items() if c["status"] == "fail"}
    warned = {cid: c for cid, c in checks.items() if c["status"] == "warn"}
    truth = entry["truth"]
    if truth == "ok":
        assert code == 0 and not failed, (entry["why"], failed)
    elif truth == "mismatch":  # a documented break or an import guard that refuses
        assert code == 1 and any(cid.startswith("packages.") for cid in failed), (entry["why"], checks)
    elif truth == "xpu":  # an Intel GPU build: out of scope, said as such, never judged as the CPU release of that number
        assert code == 1 and any("XPU build" in _text(c) or "GPU build" in _text(c) for c in failed.values()), (entry["why"], checks)
    elif truth == "unverified":  # allowed, with a warning that says why it cannot be vouched for
        assert code == 0 and not failed, (entry["why"], failed)
        assert any(word in _text(c) for c in warned.values() for word in ("unverified", "not an exact pin", "known to fail", "reported")), (entry["why"], warned)
    elif truth == "reported-working":  # allowed; where compat knows it only from the report, it says so
        assert code == 0 and not failed, (entry["why"], failed)
    else:  # pragma: no cover - the manifest's own vocabulary
        raise AssertionError(truth)


@pytest.mark.parametrize("entry", MANIFEST, ids=IDS)
def test_resolve_r_reads_the_file_as_written(entry):
    done = run_compat("resolve", "-r", str(DATA / entry["name"]), "--python-version", entry["python"], "--json")
    assert "Traceback" not in done.stderr
    if entry["truth"] == "xpu":
        assert done.returncode == 2 and ("XPU build" in done.stderr or "GPU build" in done.stderr), done.stderr
        return
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["files"] == [str(DATA / entry["name"])]
    unmodelled = [name for name in list(entry["expect_packages"]) + list(entry.get("expect_unpinned", [])) + list(entry.get("expect_urls", {}))
                  if _unmodelled(name)]
    assert sorted(canonical_name(line.split("@")[0].split("=")[0].split("[")[0].strip()) for line in data["passthrough"]) == sorted(unmodelled)
    if entry["truth"] == "mismatch":
        assert done.returncode == 1 and data["alternatives"], data
    if entry["truth"] == "ok" and "security_yanked_pin" in entry:  # the working set needs a release yanked for security
        assert done.returncode == 1 and any(f"pin {entry['security_yanked_pin']}" in a["change"] for a in data["alternatives"]), data
    elif entry["truth"] == "ok":
        assert done.returncode == 0, data


def _unmodelled(name: str) -> bool:
    from compatmatrix.inputs.request import component_of

    return component_of(name) is None


@pytest.mark.integration
def test_check_r_agrees_with_check_on_a_metadata_only_environment_of_the_same_pins(tmp_path):
    """The CI gate without an environment and the check of an environment holding just those pins say the same,
    check by check, for every file (the environment: a real venv with FIXTURE dist-info entries, nothing importable)."""
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    compared = 0
    not_for_this_python: list[str] = []
    for entry in MANIFEST:
        for old in env.site.glob("*.dist-info"):
            shutil.rmtree(old)
        try:
            read = read_inputs([str(DATA / entry["name"])], Version(python))
        except InputError as exc:  # a wheel URL built for the file's own Python, not this one: pip refuses it here too
            assert "pip refuses it" in str(exc) and entry.get("expect_urls"), (entry["name"], str(exc))
            not_for_this_python.append(entry["name"])
            continue
        pins = {r.name: str(r.pinned) for r in read.requirements if r.pinned is not None}
        for name, version in pins.items():
            env.dist(name, version)
        _, from_file = _check_r(entry, python)
        done = run_compat("check", "--only", "packages", "--python", str(env.python), "--json")
        assert done.returncode in (0, 1), done.stderr
        from_env = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
        # one deliberate difference: an environment without torch is broken (FAIL), a file without a torch pin is
        # incomplete (SKIP here, and input.files says torch is not pinned)
        differs = set() if "torch" in {canonical_name(n) for n in pins} else {"packages.torch-installed"}
        # and one more: a file that names the PyTorch CPU index gets an unlabelled torch/torchvision/torchaudio pin's +cpu
        # build there (checks/builds.py), while these dist-info entries carry the pins' versions without a label
        if any(line.kind in ("index-url", "extra-index-url") and line.url.rstrip("/") == "https://download.pytorch.org/whl/cpu" for line in read.indexes):
            differs.add("packages.extension-build")
        if "packages.torch-installed" in differs:
            assert from_file["packages.torch-installed"]["status"] == "skip" and from_env["packages.torch-installed"]["status"] == "fail"
            assert "torch is not pinned" in _text(from_file["input.files"])
        file_packages = {cid: c["status"] for cid, c in from_file.items() if cid.startswith("packages.") and cid not in differs}
        env_packages = {cid: c["status"] for cid, c in from_env.items() if cid.startswith("packages.") and cid not in differs}
        assert file_packages == env_packages, (entry["name"], file_packages, env_packages)
        for cid in file_packages:
            assert from_file[cid]["summary"] == from_env[cid]["summary"], (entry["name"], cid, from_file[cid]["summary"], from_env[cid]["summary"])
        compared += 1
    assert compared == len(MANIFEST) - len(not_for_this_python) and compared > len(MANIFEST) // 2, not_for_this_python


def test_check_r_is_not_refused_because_compat_python_is_exported(tmp_path):
    """The pre-commit setup exports COMPAT_PYTHON; `compat check -r FILE` still checks the file (an explicit
    --python of another interpreter is still refused)."""
    entry = MANIFEST[0]
    done = run_compat("check", "-r", str(DATA / entry["name"]), "--python-version", entry["python"], "--json",
                      env_extra={"COMPAT_PYTHON": sys.executable})
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["checks"][0]["id"] == "input.files"
    other = run_compat("check", "-r", str(DATA / entry["name"]), "--python", str(tmp_path / "python"), env_extra={"COMPAT_PYTHON": sys.executable})
    assert other.returncode == 2 and "-r checks files, --python an environment" in other.stderr
