"""Nothing unknown passes silently (issue 20, item 2): a release the matrix does not list -- pinned, or in a -r file --
is answered with the facts it lacks named, as an ``unverified`` pairing with the nearest verified one, and the command
that settles it; a companion that declares no torch requirement (torchaudio 2.11.0) pairs ``unverified`` with any torch.

The versions used are beyond any matrix (torchvision 0.99.0, transformers 9.0.0, ...) or a patch no line will reach
(torchvision 0.29.99), so these tests stay true as `compat matrix update` adds releases to the bundled matrix."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from compatmatrix.matrix.model import MISSING_FACTS, UNLISTED_COMPONENTS, Component, UnlistedRelease, absent_release, unlisted_release
from compatmatrix.reasons import UnlistedNote
from compatmatrix.resolve import resolve
from compatmatrix.rules import candidates, pairing_evidence
from compatmatrix.search import Conflict, Resolution

from ..cli.test_cli_fuzz import run_in_process
from ..conftest import ROOT, make_request

T, TV, TA, TF, ACC = Component.TORCH, Component.TORCHVISION, Component.TORCHAUDIO, Component.TRANSFORMERS, Component.ACCELERATE
RESOLVE_SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "resolve-v1.json").read_text())
BUNDLED = (ROOT / "compatmatrix" / "data" / "matrix.toml").read_text()


def line_series(matrix, component, line):
    """The torch major.minor the listed releases of ``line`` pin (the facts the unlisted patch is taken within)."""
    return {r.torch.release[:2] for r in matrix.releases[component] if r.version.release[:2] == line and r.torch is not None}


# --- resolve ------------------------------------------------------------------------------------------------------


def test_a_pin_beyond_the_matrix_answers_a_set_and_names_what_is_missing(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torchvision==0.99.0", profile="stock"))
    assert isinstance(outcome, Resolution), outcome.reasons  # the old code: NO SET ("the matrix knows torchvision 0.9.0 to ...")
    pick = outcome.picks[TV]
    assert pick.version == Version("0.99.0") and isinstance(pick.release, UnlistedRelease)
    notes = [n for n in outcome.remarks if isinstance(n, UnlistedNote)]
    assert len(notes) == 1 and notes[0].torch == outcome.picks[T].version
    text = " ".join(outcome.notes)
    for fact in ("pairing with torch", "Python coverage", "glibc floor", "unverified", "compat matrix update",
                 f"compat matrix verify torchvision==0.99.0 --with torch=={outcome.picks[T].version}"):
        assert fact in text, (fact, text)
    nearest = max(v for v in matrix.versions(TV) if matrix.release(TV, v).torch is not None)  # a floor is no verified pairing
    assert f"the nearest verified pairing: torch {matrix.release(TV, nearest).torch} with torchvision {nearest}" in text
    assert not any("newest torchvision in the matrix" in r for r in outcome.reasons)


def test_an_unlisted_patch_of_a_known_line_pairs_within_the_torch_series_its_line_pins(matrix):
    series = line_series(matrix, TV, (0, 29))
    assert len(series) == 1
    outcome = resolve(matrix, make_request(matrix, "3.11", "torchvision==0.29.99", profile="stock"))
    assert isinstance(outcome, Resolution), outcome.reasons
    torch = outcome.picks[T].version
    assert torch.release[:2] in series
    assert torch == max(v for v in matrix.versions(T) if v.release[:2] in series and resolve(matrix, make_request(matrix, "3.11", f"torch=={v}")).ok)
    assert pairing_evidence(outcome.picks[TV].release, torch).evidence == "unverified"
    newer = [v for v in matrix.versions(T) if v.release[:2] > max(series)]
    if newer:  # a torch of another series is refused by the same rule, which says why
        clash = resolve(matrix, make_request(matrix, "3.11", "torchvision==0.29.99", f"torch=={newer[0]}"))
        assert isinstance(clash, Conflict)
        assert any("torchvision 0.29.99 is not in the matrix, and its line's listed releases pin torch" in r for r in clash.reasons), clash.reasons


def test_a_release_older_than_the_matrix_is_out_of_its_scope(matrix):
    oldest = min(matrix.versions(T))
    older = Version(f"{oldest.major}.{oldest.minor - 1}.0") if oldest.minor else Version(f"{oldest.major - 1}.99.0")
    assert unlisted_release(matrix, T, older) is None
    outcome = resolve(matrix, make_request(matrix, "3.11", f"torch=={older}"))
    assert isinstance(outcome, Conflict) and any(f"the matrix knows torch {oldest} to" in r for r in outcome.reasons)


def test_frozen_intel_packages_keep_their_no_match(matrix):
    """IPEX and the bindings are archived: their tables are complete, a pin outside them is a typo, not a new release."""
    assert unlisted_release(matrix, Component.IPEX, Version("9.9.9")) is None
    outcome = resolve(matrix, make_request(matrix, "3.11", "intel-extension-for-pytorch==9.9.9"))
    assert isinstance(outcome, Conflict)


def test_resolve_json_carries_the_unlisted_facts_and_validates(capsys):
    code, out, err = run_in_process(["resolve", "--json", "--python-version", "3.11", "--profile", "stock", "torchvision==0.99.0", "transformers==9.0.0"], capsys)
    assert code == 0, err
    data = json.loads(out)
    jsonschema.validate(data, RESOLVE_SCHEMA)
    assert data["packages"]["torchvision"] == "0.99.0" and data["packages"]["transformers"] == "9.0.0"
    assert data["unlisted"]["torchvision"]["missing"] == list(MISSING_FACTS[TV])
    assert data["unlisted"]["transformers"]["settle"].startswith("compat matrix update")
    assert data["pairings"]["torchvision"]["evidence"] == "unverified"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(component=st.sampled_from(sorted(UNLISTED_COMPONENTS, key=lambda c: c.value)),
       release=st.tuples(st.integers(0, 12), st.integers(0, 120), st.integers(0, 120)))
def test_any_exact_pin_the_matrix_lacks_is_kept_as_unlisted_never_silently(matrix, component, release):
    version = Version(".".join(map(str, release)))
    if matrix.release(component, version) is not None or version <= min(matrix.versions(component)):
        return  # listed, or older than the matrix's span (out of its scope: "the matrix knows X to Y")
    request = make_request(matrix, "3.11", f"{component.distribution}=={version}", profile="stock")
    kept, _ = candidates(matrix, component, request.python, request.spec(component), request.features, request.platform)
    if version < max(matrix.versions(component)):  # inside the span the matrix lists from the registries: no such release
        assert unlisted_release(matrix, component, version) is None and kept == []
        outcome = resolve(matrix, request)
        assert isinstance(outcome, Conflict) and any(f"There is no {component.label} {version}" in r for r in outcome.reasons), outcome.reasons
        return
    assert [(c.version, type(c.release)) for c in kept] == [(version, UnlistedRelease)]
    outcome = resolve(matrix, request)
    if isinstance(outcome, Resolution):  # an answer always says what it rests on
        assert outcome.picks[component].version == version
        assert any(isinstance(n, UnlistedNote) and n.candidate.component is component for n in outcome.remarks)
        assert any("is not in the matrix" in n and "Settle it: compat matrix update" in n for n in outcome.notes)
    else:
        assert outcome.reasons


# --- check -r (and check, doctor: the same findings) ---------------------------------------------------------------


def _check(tmp_path, capsys, pins, *extra):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")
    code, out, err = run_in_process(["check", "-r", str(requirements), "--json", *extra], capsys)
    assert code in (0, 1), err
    findings = {f["id"]: f for f in json.loads(out)["checks"]}
    return code, findings


def _warned(findings):
    return {cid: f for cid, f in findings.items() if f["status"] in ("warn", "fail")}


def test_check_r_an_unlisted_companion_warns_unverified_and_exits_0(tmp_path, capsys):
    code, findings = _check(tmp_path, capsys, ["torch==2.14.0", "torchaudio==9.0.0", "accelerate==1.15.0"])
    warned = _warned(findings)
    assert code == 0 and set(warned) == {"packages.torchaudio-torch"}, warned
    found = warned["packages.torchaudio-torch"]
    assert found["status"] == "warn" and "unverified" in found["summary"]  # the old code: a bare "not in the matrix"
    assert any("pairing with torch, Python coverage and glibc floor are not known" in e for e in found["evidence"])
    assert any(e.startswith("the nearest verified pairing: torch ") for e in found["evidence"])
    assert "compat matrix verify torchaudio==9.0.0 --with torch==2.14.0" in found["fix"]


def test_check_r_an_unlisted_library_is_not_a_silent_pass(tmp_path, capsys):
    code, findings = _check(tmp_path, capsys, ["torch==2.14.0", "transformers==9.0.0", "accelerate==1.15.0"])
    found = findings["packages.transformers-torch"]
    assert found["status"] == "warn", found  # the old code: PASS, "support the installed torch"
    assert "transformers 9.0.0 with torch 2.14.0: unverified" in found["summary"] and code == 0


def test_check_r_an_unlisted_torch_warns(tmp_path, capsys):
    code, findings = _check(tmp_path, capsys, ["torch==9.0.0"])
    found = findings["packages.torch-installed"]
    assert found["status"] == "warn" and "not in the matrix" in found["summary"] and "compat matrix update" in found["fix"]


def test_check_r_an_unlisted_patch_next_to_another_series_fails_by_the_resolvers_rule(tmp_path, capsys, matrix):
    series = line_series(matrix, TV, (0, 29))
    other = next((v for v in matrix.versions(T) if v.release[:2] not in series and v.release[:2] > max(series)), None)
    if other is None:
        pytest.skip("the matrix lists no torch newer than the 0.29 line's series")
    code, findings = _check(tmp_path, capsys, [f"torch=={other}", "torchvision==0.29.99"])
    found = findings["packages.torchvision-torch"]
    assert code == 1 and found["status"] == "fail" and "listed releases pin torch" in found["summary"], found


# --- a companion that declares no torch requirement ----------------------------------------------------------------


@pytest.fixture(scope="module")
def no_torch_matrix(tmp_path_factory):
    """The bundled matrix plus a [[torchaudio]] 9.0.0 entry without `torch`: its METADATA declares none (as torchaudio
    2.11.0's does)."""
    entry = ('[[torchaudio]]\nversion = "9.0.0"\nsource = "registry:pypi/torchaudio/9.0.0"\n\n[[torchaudio.wheels]]\nhost = "pypi"\n'
             'python = ["3.10", "3.11", "3.12", "3.13", "3.14"]\nglibc_min = "2.28"\nsource = "registry:pypi/torchaudio/9.0.0"\n\n')
    at = BUNDLED.index("[[torchaudio]]\n")
    path = tmp_path_factory.mktemp("matrix") / "matrix.toml"
    path.write_text(BUNDLED[:at] + entry + BUNDLED[at:])
    return path


def test_a_companion_declaring_no_torch_pairs_unverified_with_any_torch(no_torch_matrix, tmp_path, capsys):
    from compatmatrix.matrix import load_matrix

    matrix = load_matrix(no_torch_matrix)
    release = matrix.release(TA, Version("9.0.0"))
    assert release is not None and release.torch is None
    assert {pairing_evidence(release, t).evidence for t in matrix.versions(T)[:5]} == {"unverified"}
    code, findings = _check(tmp_path, capsys, ["torch==2.14.0", "torchaudio==9.0.0", "accelerate==1.15.0"], "--matrix", str(no_torch_matrix))
    warned = _warned(findings)
    assert code == 0 and set(warned) == {"packages.torchaudio-torch"}, warned
    found = warned["packages.torchaudio-torch"]
    assert found["status"] == "warn" and "unverified" in found["summary"]
    assert any("declares no torch requirement" in e for e in found["evidence"])
    assert any(e.startswith("the nearest verified (pinned) pairing: torch ") for e in found["evidence"])
    outcome = resolve(matrix, make_request(matrix, "3.11", "torchaudio==9.0.0", profile="stock"))
    assert isinstance(outcome, Resolution)
    assert any("torchaudio 9.0.0 with torch" in n and "unverified" in n and "nearest verified" in n for n in outcome.notes), outcome.notes


def test_the_matrix_command_shows_a_companion_declaring_no_torch(no_torch_matrix, capsys):
    schema = json.loads((ROOT / "compatmatrix" / "schemas" / "matrix-v1.json").read_text())
    code, out, err = run_in_process(["matrix", "--matrix", str(no_torch_matrix), "--json"], capsys)
    assert code == 0, err
    jsonschema.validate(json.loads(out), schema)
    code, out, err = run_in_process(["matrix", "--matrix", str(no_torch_matrix), "--package", "torchaudio"], capsys)
    assert code == 0 and "none declared" in out, err  # the old loader refused the entry; a torch-less row crashed the table


# --- a pin inside the listed span that the registries never had (issue 30 item 6) -----------------------------------


def test_a_release_that_never_existed_inside_the_span_is_no_such_release(matrix, tmp_path, capsys):
    """torchaudio 1.13.1: PyPI goes 0.13.1 -> 2.0.0. The old code answered it as a release newer than the matrix, with a set."""
    absent = absent_release(matrix, TA, Version("1.13.1"))
    assert absent is not None and (absent.below, absent.above) == (Version("0.13.1"), Version("2.0.0"))
    assert unlisted_release(matrix, TA, Version("1.13.1")) is None
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==1.13.1", "torchaudio==1.13.1"))
    assert isinstance(outcome, Conflict), outcome
    (reason,) = outcome.reasons
    assert reason.startswith("There is no torchaudio 1.13.1: the registries go from torchaudio 0.13.1 to 2.0.0")
    assert "the nearest real releases: torchaudio 0.13.1 (pins torch 1.13.1) and torchaudio 2.0.0 (pins torch 2.0.0)" in reason
    code, findings = _check(tmp_path, capsys, ["torch==1.13.1", "torchaudio==1.13.1"], "--python-version", "3.10")
    found = findings["packages.torchaudio-torch"]
    assert code == 1 and found["status"] == "fail" and "there is no torchaudio 1.13.1" in found["summary"], found
    assert found["fix"] == "Pin a real release: torchaudio==2.0.0 or torchaudio==0.13.1."
    # beyond the span and pre-releases stay unlisted (the registries may have them by now)
    assert absent_release(matrix, TA, Version("99.0.0")) is None and absent_release(matrix, TA, Version("1.13.1rc1")) is None
