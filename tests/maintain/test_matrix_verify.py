"""compat matrix verify (issue 20 item 3): a pairing tried on this machine, recorded in the overlay as tested-here evidence.

Pure tests: the record (typed, round trip, hostile records ignoring the overlay in one sentence), its precedence in the
rules (tested-here above unverified, below built-for; a tested break refuses a pairing the release is not built for),
the smoke verdict (the import-probe classifier), and the CLI's usage errors.

Two real verifies (integration): REAL wheels served by a local PEP 503 index on 127.0.0.1 -- this machine's CPU torch
2.13.0 (pip's find-links) as the pytorch-cpu host, PyPI's torchvision 0.29.1 (the local indexes pip is configured with)
and accelerate 1.15.0 with its dependencies as the pypi host, downloaded once into the tests' cache
(tests/local_pypi.py) -- through compat's own install path: one pairing that breaks, one that works.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from compatmatrix.maintain.verify import judge, parse_pin, requirements_to_add, smoke_program
from compatmatrix.matrix import load_matrix
from compatmatrix.matrix import overlay as overlay_mod
from compatmatrix.matrix import tested as tested_mod
from compatmatrix.matrix.model import PAIRING_RANK, Component
from compatmatrix.render import schema_path
from compatmatrix.rules import fits, problem_with

from ..clean_env import base_env
from ..conftest import run_compat
from ..fixture_index import FixtureIndex
from ..hostile_strings import hostile_requirement
from ..install_helpers import served
from ..local_pypi import local_pypi_index
from ..real_envs import CACHE

MACHINE = tested_mod.Machine("FIXTURE CPU", "2.35", "3.11.7")
T2130, T2141 = Version("2.13.0"), Version("2.14.1")
DEAD_INDEXES = [arg for host in ("pypi", "pytorch-cpu", "intel-cpu-us") for arg in ("--index", f"{host}=http://127.0.0.1:9/simple")]


def record_of(component=Component.TORCHAUDIO, version="2.11.0", torch="2.14.1", works=True, **changes) -> tested_mod.Tested:
    base = tested_mod.Tested(component, Version(version), "pypi", "", Version(torch), "pytorch-cpu", "+cpu", works, "" if works else "missing-library",
                  "" if works else "importing torchaudio failed: libc10_cuda.so cannot be found", "FIXTURE smoke", 12.5, "2026-11-26T21:00:00Z", MACHINE)
    from compatmatrix.record import replace

    return replace(base, **changes)


def with_records(*records: tested_mod.Tested):
    return overlay_mod.with_tested(load_matrix(), records)


# --- precedence (pure) ---------------------------------------------------------------------------------------------


def test_tested_here_ranks_between_built_for_and_unverified():
    assert PAIRING_RANK["built-for"] < PAIRING_RANK["reported-working"] < PAIRING_RANK["tested-here"] < PAIRING_RANK["unverified"]


def test_a_working_test_raises_an_unverified_pairing_to_tested_here():
    """torchaudio 2.11.0 declares no torch: unverified with every torch until it is tried."""
    before = load_matrix().release(Component.TORCHAUDIO, Version("2.11.0"))
    assert before.pairing_with(T2141).evidence == "unverified"
    after = with_records(record_of()).release(Component.TORCHAUDIO, Version("2.11.0"))
    pairing = after.pairing_with(T2141)
    assert pairing.evidence == "tested-here" and pairing.tested
    assert "FIXTURE CPU" in pairing.provenance.note and "2026-11-26T21:00:00Z" in pairing.provenance.sources[0]
    assert after.pairing_with(T2130).evidence == "unverified"  # another torch: still unknown


def test_a_tested_break_refuses_the_pairing_and_cites_the_test():
    matrix = with_records(record_of(works=False))
    release = matrix.release(Component.TORCHAUDIO, Version("2.11.0"))
    assert fits(Component.TORCHAUDIO, load_matrix().release(Component.TORCHAUDIO, Version("2.11.0")), Version("2.11.0"), Component.TORCH, T2141)
    rejected = problem_with(Component.TORCHAUDIO, release, Version("2.11.0"), Component.TORCH, T2141)
    assert rejected is not None and rejected.source[0].startswith("tested-here:")


def test_a_working_test_admits_a_torch_the_release_does_not_pin():
    """torchvision 0.28.0 pins torch 2.13.0: tried with 2.14.1 and working, the rules admit it (torchvision 0.29.1's floor
    torch>=2.14.0 admits 2.14.1 without any test: a floor is not a pin)."""
    assert fits(Component.TORCHVISION, load_matrix().release(Component.TORCHVISION, Version("0.29.1")), Version("0.29.1"), Component.TORCH, T2141)
    release = load_matrix().release(Component.TORCHVISION, Version("0.28.0"))
    assert not fits(Component.TORCHVISION, release, Version("0.28.0"), Component.TORCH, T2141)
    matrix = with_records(record_of(Component.TORCHVISION, "0.28.0", "2.14.1"))
    assert fits(Component.TORCHVISION, matrix.release(Component.TORCHVISION, Version("0.28.0")), Version("0.28.0"), Component.TORCH, T2141)


def test_a_tested_break_never_overrides_the_torch_a_release_is_built_for():
    """PyPI's torchvision 0.28.0 next to the +cpu torch 2.13.0 fails (another build): the pin to 2.13.0 stays."""
    matrix = with_records(record_of(Component.TORCHVISION, "0.28.0", "2.13.0", works=False))
    release = matrix.release(Component.TORCHVISION, Version("0.28.0"))
    assert release.pairing_with(T2130).evidence == "pinned"  # its METADATA pins it: the pin decides
    assert fits(Component.TORCHVISION, release, Version("0.28.0"), Component.TORCH, T2130)


def test_resolve_answers_with_the_tested_pairing(tmp_path):
    """The resolver prefers and names the tested-here pairing over an unverified one (via the overlay every command reads)."""
    record = record_of()
    overlay_mod.record_tested(record, load_matrix(), {"XDG_DATA_HOME": str(tmp_path)})
    done = run_compat("resolve", "--profile", "stock", "--python-version", "3.11", "torch==2.14.1", "torchaudio==2.11.0", "--json",
                      env_extra={"XDG_DATA_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "tested here" in done.stdout and "unverified: no source" not in done.stdout
    document = json.loads(done.stdout)
    jsonschema.validate(document, json.loads(Path(schema_path("resolve")).read_text()))
    assert document["pairings"]["torchaudio"]["evidence"] == "tested-here"


# --- the record and the overlay (pure) -----------------------------------------------------------------------------


def test_record_round_trips_and_a_pair_tried_again_keeps_the_newest(tmp_path):
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    matrix = load_matrix()
    overlay_mod.record_tested(record_of(works=False), matrix, environ)
    path = overlay_mod.record_tested(record_of(date="2026-11-27T08:00:00Z"), matrix, environ)
    document = json.loads(Path(path).read_text())
    assert [t["result"] for t in document["tested"]] == ["works"]
    merged, state = overlay_mod.apply(matrix, environ)
    assert state.ignored == "" and state.tested == (record_of(date="2026-11-27T08:00:00Z"),)
    assert merged.release(Component.TORCHAUDIO, Version("2.11.0")).pairing_with(T2141).evidence == "tested-here"


def test_matrix_update_keeps_the_tested_records(tmp_path):
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    path = overlay_mod.record_tested(record_of(), load_matrix(), environ)
    assert overlay_mod.kept_tested(path, load_matrix()) == [record_of().to_json()]


@pytest.mark.parametrize("change", [
    {"result": "maybe"},
    {"error_class": "missing-library"},  # a working pair with an error class
    {"host": "evil.example"},
    {"package": "torch"},
    {"version": "not a version"},
    {"seconds": float("inf")},
    {"summary": "line\nbreak \x1b[31m"},
    {"machine": {"cpu": "x"}},
    {"extra": 1},
])
def test_a_hostile_tested_record_is_skipped_alone_in_one_sentence(tmp_path, change):
    """Issue 31: one bad tested record cost the whole overlay. Now that record is skipped alone, named in one note; the
    good record next to it (another pair) is used."""
    item = {**record_of().to_json(), **change}
    with pytest.raises(tested_mod.TestedProblem):
        tested_mod.parse([item], list(load_matrix().hosts))
    good = record_of(version="2.10.0").to_json()
    folder = tmp_path / "compatmatrix"
    folder.mkdir()
    (folder / "overlay.json").write_text(json.dumps({"format": "compatmatrix-overlay", "schema_version": 1, "read_at": "", "hosts_unread": [],
                                                      "entries": {}, "tested": [item, good]}))
    _, state = overlay_mod.apply(load_matrix(), {"XDG_DATA_HOME": str(tmp_path)})
    assert not state.ignored and [t.to_json() for t in state.tested] == [good] and len(state.skipped) == 1
    assert state.skipped[0].startswith("tested #1") and state.skipped[0].isprintable()
    done = run_compat("matrix", "--package", "torchaudio", env_extra={"XDG_DATA_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "skipped" in notes[0] and "tested #1" in notes[0] and "Traceback" not in done.stderr
    assert "TESTED torchaudio 2.10.0" in done.stdout


def test_a_verify_error_with_a_tab_or_an_escape_is_stored_escaped_and_read_back(tmp_path):
    """Issue 31 (high): a failed verify whose error text held a TAB or a terminal escape was stored raw; from then on every
    command ignored the whole overlay. Now the record is escaped when written and read back as written."""
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    summary = "importing torchaudio failed:\tOSError \x1b[31mred\x1b[0m \x9b2J \u2028 \ud800"
    path = overlay_mod.record_tested(record_of(works=False, summary=summary), load_matrix(), environ)
    text = Path(path).read_text(encoding="utf-8")
    assert "\t" not in json.loads(text)["tested"][0]["summary"] and "\x1b" not in text
    merged, state = overlay_mod.apply(load_matrix(), environ)
    assert not state.ignored and not state.skipped and len(state.tested) == 1
    assert state.tested[0].summary.startswith("importing torchaudio failed:\\tOSError \\x1b[31mred")
    assert merged.release(Component.TORCHAUDIO, Version("2.11.0")).pairing_with(T2141).evidence == "documented-break"


def test_a_raw_tab_record_of_an_older_compat_survives_the_next_write_escaped(tmp_path):
    """An overlay an older compat wrote (a raw TAB in a summary): read, that record alone is skipped; the next write
    (matrix update, verify) keeps it, escaped, instead of dropping it."""
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    raw = {**record_of(works=False).to_json(), "summary": "failed:\there"}
    folder = tmp_path / "compatmatrix"
    folder.mkdir()
    (folder / "overlay.json").write_text(json.dumps({"format": "compatmatrix-overlay", "schema_version": 1, "read_at": "", "hosts_unread": [],
                                                      "entries": {}, "tested": [raw]}))
    _, state = overlay_mod.apply(load_matrix(), environ)
    assert not state.ignored and state.tested == () and len(state.skipped) == 1
    kept = overlay_mod.kept_tested(str(folder / "overlay.json"), load_matrix())
    assert [k["summary"] for k in kept] == ["failed:\\there"]
    overlay_mod.record_tested(record_of(version="2.10.0"), load_matrix(), environ)
    _, state = overlay_mod.apply(load_matrix(), environ)
    assert not state.skipped and sorted(str(t.version) for t in state.tested) == ["2.10.0", "2.11.0"]


def test_the_tested_records_stay_within_their_bound_keeping_the_newest(tmp_path, monkeypatch):
    """The reader takes at most MAX_RECORDS tested records (10,000; 5 here, to stay cheap); a write past it drops the
    oldest, never the whole list."""
    for module in (tested_mod, overlay_mod):
        monkeypatch.setattr(module, "MAX_RECORDS", 5)
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    records = [record_of(version=f"2.11.{i}").to_json() for i in range(tested_mod.MAX_RECORDS)]
    folder = tmp_path / "compatmatrix"
    folder.mkdir()
    (folder / "overlay.json").write_text(json.dumps({"format": "compatmatrix-overlay", "schema_version": 1, "read_at": "", "hosts_unread": [],
                                                      "entries": {}, "tested": records}))
    overlay_mod.record_tested(record_of(version="2.10.0"), load_matrix(), environ)
    _, state = overlay_mod.apply(load_matrix(), environ)
    assert len(state.tested) == tested_mod.MAX_RECORDS and not state.skipped
    assert str(state.tested[-1].version) == "2.10.0" and "2.11.0" not in {str(t.version) for t in state.tested}


def test_compat_matrix_shows_the_tested_records(tmp_path):
    overlay_mod.record_tested(record_of(works=False), load_matrix(), {"XDG_DATA_HOME": str(tmp_path)})
    done = run_compat("matrix", "--package", "torchaudio", env_extra={"XDG_DATA_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "TESTED" in done.stdout and "torchaudio 2.11.0" in done.stdout and "missing-library" in done.stdout
    as_json = run_compat("matrix", "--package", "torchaudio", "--json", env_extra={"XDG_DATA_HOME": str(tmp_path)})
    document = json.loads(as_json.stdout)
    jsonschema.validate(document, json.loads(Path(schema_path("matrix")).read_text()))
    assert document["overlay"]["tested"] == [record_of(works=False).to_json()]


# --- the smoke verdict and the inputs (pure) -----------------------------------------------------------------------


def test_judge_uses_the_import_probe_classifier():
    assert judge(0, "COMPAT-VERIFY-SMOKE-OK\n", "", False, "torchvision", 60)[0] == ""
    assert judge(0, "", "", False, "torchvision", 60)[0] == "error"  # exit 0 before the smoke finished is not a success
    assert judge(1, "", "ImportError: x.so: undefined symbol: _ZN3c10foo\n", False, "torchvision", 60)[0] == "undefined-symbol"
    assert judge(None, "", "", True, "torchvision", 60)[0] == "hang"
    after = judge(1, "COMPAT-VERIFY-IMPORTED\n", "RuntimeError: operator torchvision::nms does not exist\n", False, "torchvision", 60, "nms")
    assert after[0] == "error" and after[1].startswith("torchvision imported, then nms failed (exit status 1): RuntimeError")


def test_requirements_to_add_drop_torch_extras_and_other_pythons():
    requires = ["numpy", "torch (>=2.14.0)", "pillow (!=8.3.*,>=5.3.0)", "scipy ; extra == 'scipy'", "tomli ; python_version < '3.11'"]
    assert requirements_to_add(requires, Version("3.11")) == ["numpy", "pillow!=8.3.*,>=5.3.0"]


def test_every_smoke_program_compiles():
    for component in (Component.TORCHVISION, Component.TORCHAUDIO, Component.IPEX, Component.CCL, Component.TRANSFORMERS, Component.ACCELERATE):
        compile(smoke_program(component, "pkg_module"), component.distribution, "exec")


@pytest.mark.parametrize("args,said", [
    (["torchvision>=0.29"], "exact pin"),
    (["nosuchpackage==1.0"], "not a package"),
    (["torch==2.13.0"], "not one"),
    (["torchvision==0.29.1", "--with", "torchaudio==2.11.0"], "not a torch pin"),
    (["torchvision==0.29.1", "--timeout", "nan"], "--timeout"),
    (["torchvision==0.29.1", "--host", "nowhere"], "not a host"),
    (["torchvision==0.99.0", "--with", "torch==2.13.0", *DEAD_INDEXES], "compat matrix update"),
    (["torchaudio==2.11.0"], "--with torch=="),
])
def test_usage_errors_say_one_sentence_and_the_fix(tmp_path, args, said):
    done = run_compat("matrix", "verify", *args, env_extra={"XDG_DATA_HOME": str(tmp_path)})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "compatmatrix" / "overlay.json").exists()


@pytest.mark.parametrize("args", [[], ["--with", "torch==2.13.0"]])
def test_an_unlisted_release_gets_the_registry_s_answer_before_any_venv(tmp_path, args):
    """Issue 31 (low): verify of a release the matrix lacks said "pins no torch, pass --with", and with --with built a venv
    before saying the matrix lacks it. Now the real answer comes first -- what the registry says, read now -- and no
    throw-away folder is made (FIXTURE index on 127.0.0.1 listing torchvision 0.99.0)."""
    from ..fixture_index import build_wheel, serve

    index = FixtureIndex(tmp_path / "index")
    index.add("pypi", build_wheel(tmp_path / "wheels", "torchvision", "0.99.0", tag="cp311-cp311-manylinux_2_28_x86_64"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    server, _ = serve(index)
    try:
        indexes = ["--index", f"pypi={index.host_url('pypi')}", "--index", "pytorch-cpu=http://127.0.0.1:9/simple",
                   "--index", "intel-cpu-us=http://127.0.0.1:9/simple"]
        listed = run_compat("matrix", "verify", "torchvision==0.99.0", *args, *indexes, env_extra={"XDG_DATA_HOME": str(tmp_path), "TMPDIR": str(temp)})
        unknown = run_compat("matrix", "verify", "torchvision==0.98.7", *args, *indexes, env_extra={"XDG_DATA_HOME": str(tmp_path), "TMPDIR": str(temp)})
    finally:
        server.shutdown()
    assert listed.returncode == 2 and "Traceback" not in listed.stderr, listed.stderr
    assert "does not list torchvision 0.99.0" in listed.stderr and "pypi lists it (1 files, 1 Linux x86_64 wheels)" in listed.stderr, listed.stderr
    assert "compat matrix update --package torchvision" in listed.stderr and "pins no torch" not in listed.stderr
    assert unknown.returncode == 2 and "torchvision 0.98.7" in unknown.stderr and "pins no torch" not in unknown.stderr, unknown.stderr
    assert not list(temp.glob("compat-verify-*")) and "making a throw-away venv" not in listed.stderr + unknown.stderr


def test_a_killed_verify_s_venv_is_swept_at_the_next_start(tmp_path):
    """Issue 31: SIGKILL of verify left its throw-away venv in the temp folder for good. Its child dies with it
    (PR_SET_PDEATHSIG), and the next verify removes the folder: its owner lock is free and names a process that is gone (the rule's
    other cases: tests/test_scratch.py). The FIXTURE
    --python is a script that records its pid and sleeps, standing in for a slow 'python -m venv'."""
    import signal

    from compatmatrix.processes import alive

    temp = tmp_path / "tmp"
    temp.mkdir()
    pids = tmp_path / "pids"
    slow = tmp_path / "slow-python"
    slow.write_text(f"#!/bin/sh\n# FIXTURE: a python whose venv step never ends\necho $$ >> {pids}\nexec sleep 120\n")
    slow.chmod(0o755)
    env = base_env({"XDG_DATA_HOME": str(tmp_path), "TMPDIR": str(temp)})
    run = subprocess.Popen([sys.executable, "-m", "compatmatrix", "matrix", "verify", "torchvision==0.29.1", "--with", "torch==2.13.0",
                            "--python", str(slow), *DEAD_INDEXES], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    assert pids.exists(), "the verify never reached its venv step"
    child = int(pids.read_text().split()[0])
    left = list(temp.glob("compat-verify-*"))
    assert len(left) == 1
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 15
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the venv step outlived the killed verify"
    assert left[0].is_dir()  # SIGKILL: nothing cleaned up
    done = run_compat("matrix", "verify", "torchvision==0.98.7", *DEAD_INDEXES, env_extra={"XDG_DATA_HOME": str(tmp_path), "TMPDIR": str(temp)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert not left[0].exists(), "the next verify left the killed one's venv in place"
    assert f"removed {left[0]}" in done.stderr


def test_parse_pin():
    assert parse_pin("TorchVision==0.29.1") == (Component.TORCHVISION, Version("0.29.1"))


# --- two real verifies (integration) -------------------------------------------------------------------------------

DEPENDENCIES = ("torch==2.13.0", "numpy", "pillow")  # resolved with the CPU torch of pip's find-links


def torchvision_wheel() -> Path:
    """PyPI's torchvision 0.29.1 (the local indexes pip is configured with here), downloaded once into the tests' cache."""
    folder = CACHE / "verify-torchvision-0.29.1"
    wheels = sorted(folder.glob("torchvision-0.29.1-*.whl"))
    if not wheels:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet", "-d", str(folder),
                               "torchvision==0.29.1"], capture_output=True, text=True, timeout=900, env=base_env(), check=False)
        wheels = sorted(folder.glob("torchvision-0.29.1-*.whl"))
        if not wheels:
            pytest.skip(f"torchvision 0.29.1 cannot be downloaded here: {(done.stderr or done.stdout).strip()[-300:]}")
    return wheels[0]


@pytest.fixture(scope="module")
def real_index(tmp_path_factory):
    """REAL wheels on 127.0.0.1: the CPU torch 2.13.0 as pytorch-cpu; PyPI's torchvision 0.29.1, accelerate 1.15.0 and the
    dependencies as pypi (all sha256-published, so compat's hash checks run)."""
    from ..local_pypi import pypi_wheels

    folder = pypi_wheels(DEPENDENCIES)
    torch = sorted(folder.glob("torch-2.13.0*.whl"))
    if not torch:
        pytest.skip("pip did not resolve torch==2.13.0 to a wheel here")
    index = FixtureIndex(tmp_path_factory.mktemp("verify-index"))
    index.add("pytorch-cpu", torch[0])
    index.add("pypi", torchvision_wheel())
    with served(index), local_pypi_index(DEPENDENCIES, index.root, index=index, leave_out=("torch",)):
        yield index


def verify_real(index: FixtureIndex, data: Path, *args: str):
    started = time.monotonic()
    done = run_compat("matrix", "verify", *args, "--json", "--python", sys.executable, *index.index_args(),
                      env_extra={"XDG_DATA_HOME": str(data), "TMPDIR": str(data / "tmp")}, timeout=1800)
    seconds = time.monotonic() - started
    print(f"compat matrix verify {' '.join(args)}: exit {done.returncode}, {seconds:.1f} s")
    return done, seconds


@pytest.mark.integration
@pytest.mark.network
def test_a_real_pairing_that_breaks_is_recorded(real_index, tmp_path):
    """One real verify in CI (each builds a venv and installs the CPU torch: 100-180 s here). The working pairing that
    was recorded for real (accelerate 1.15.0 with torch 2.13.0+cpu) is in docs/commands/matrix.md's verify paragraph with its seconds;
    recording a "works" result is covered with the FIXTURE judge in the tests above."""
    (tmp_path / "tmp").mkdir()
    schema = json.loads(Path(schema_path("matrix verify")).read_text())
    # PyPI's torchvision 0.29.1 (its operators built for torch >= 2.14 and CUDA) next to the CPU torch 2.13.0: nms fails
    broke, _ = verify_real(real_index, tmp_path, "torchvision==0.29.1", "--with", "torch==2.13.0", "--host", "pypi")
    assert broke.returncode == 1, broke.stderr[-3000:]
    document = json.loads(broke.stdout)
    jsonschema.validate(document, schema)
    record = document["record"]
    assert document["result"] == "breaks" and record["error_class"] and record["torch_label"] == "+cpu" and record["host"] == "pypi"
    assert record["ran"] == "torchvision.ops.nms on 3 boxes" and record["seconds"] > 0
    kept = json.loads((tmp_path / "compatmatrix" / "overlay.json").read_text())["tested"]
    assert [(t["package"], t["result"]) for t in kept] == [("torchvision", "breaks")]
    assert list((tmp_path / "tmp").iterdir()) == []  # the throw-away venv (and the install's work folders) are gone
    shown = run_compat("matrix", "--package", "torchvision", env_extra={"XDG_DATA_HOME": str(tmp_path)})
    assert "BREAKS" in shown.stdout or "breaks" in shown.stdout


@pytest.mark.parametrize("works,code,said", [(None, 0, "unverified"), (True, 0, "tested here, it works"), (False, 1, "tested here, it breaks")])
def test_check_r_grades_the_pairing_by_the_tested_record(tmp_path, works, code, said):
    """torch 2.14.1 + torchaudio 2.11.0 (which declares no torch): WARN unverified until tried; then PASS or FAIL by the record."""
    environ = {"XDG_DATA_HOME": str(tmp_path)}
    if works is not None:
        overlay_mod.record_tested(record_of(works=works), load_matrix(), environ)
    pins = tmp_path / "requirements.txt"
    pins.write_text("torch==2.14.1\ntorchaudio==2.11.0\n")
    done = run_compat("check", "-r", str(pins), "--python-version", "3.11", "--json", env_extra=environ)
    assert done.returncode == code, (done.stdout, done.stderr)
    finding = next(f for f in json.loads(done.stdout)["checks"] if f["id"] == "packages.torchaudio-torch")
    assert said in finding["summary"]


@settings(max_examples=60, deadline=None)
@given(text=st.one_of(hostile_requirement(surrogates=False), st.text(max_size=40)))
def test_any_pin_is_parsed_or_refused_in_one_sentence(text):
    from compatmatrix.errors import UsageError

    try:
        component, version = parse_pin(text)
    except UsageError as exc:
        assert exc.fix and "\n" not in exc.message
    else:
        assert isinstance(version, Version) and component.distribution


def test_compat_matrix_update_keeps_what_verify_recorded(tmp_path):
    """The update writes the overlay whole: the tested records stay (FIXTURE index on 127.0.0.1 with a newer accelerate)."""
    from ..fixture_index import build_wheel, serve

    environ = {"XDG_DATA_HOME": str(tmp_path / "data")}
    overlay_mod.record_tested(record_of(), load_matrix(), environ)
    index = FixtureIndex(tmp_path / "index")
    index.add("pypi", build_wheel(tmp_path / "wheels", "accelerate", "1.99.0", requires=("torch>=2.0.0",)))
    server, _ = serve(index)
    try:
        done = run_compat("matrix", "update", "--package", "accelerate", "--index", f"pypi={index.host_url('pypi')}", env_extra=environ)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((tmp_path / "data" / "compatmatrix" / "overlay.json").read_text())
    assert document["entries"]["accelerate"] and document["tested"] == [record_of().to_json()]
