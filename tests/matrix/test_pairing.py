"""The pairing model (issue 30): a torchvision/torchaudio release pairs with torch as its METADATA declares it.

An exact pin stays a pin (``pinned``: every other torch excluded); a floor or a range admits every torch inside it
(``declared``, ``verified`` at or below the newest torch a source verified it with); a release that declares nothing is
``unverified``. Requires-Python is judged per release by packaging, with the full version when known. Pure, except the
last test (the CLI as a subprocess: a static path, no environment built).

The METADATA read here is RECORDED: tests/data/pypi-metadata-2026-12-07/ (read from PyPI on 2026-12-07, see its README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix.matrix import harvest as harvest_mod
from compatmatrix.matrix.model import PAIRING_RANK, CompanionRelease, Component, Provenance, WheelSet
from compatmatrix.resolve import resolve
from compatmatrix.rules import candidates, fits, pairing_evidence, python_admits, standing
from compatmatrix.search import Conflict, Resolution
from compatmatrix.sentences import declaration_phrase, rejected_sentence
from compatmatrix.target import PythonTarget

from ..conftest import make_request, run_compat

RECORDED = Path(__file__).parents[1] / "data" / "pypi-metadata-2026-12-07"
TV, TA, T = Component.TORCHVISION, Component.TORCHAUDIO, Component.TORCH
SOURCE = Provenance(("registry:pypi/torchvision/9.9.9",), True, "")

versions = st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 12)).map(lambda t: Version(".".join(map(str, t))))


def companion(torch=None, requires=None, verified_with=None) -> CompanionRelease:
    wheels = (WheelSet("pypi", frozenset({Version("3.11")}), "", False, "", SOURCE),)
    return CompanionRelease("torchvision", Version("9.9.9"), torch, wheels, SOURCE,
                            torch_requires=SpecifierSet(requires) if requires else None, verified_with=verified_with)


# --- the model (hypothesis) ------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(floor=versions, above=versions)
def test_a_floor_never_excludes_a_torch_above_it(floor, above):
    torch = max(floor, above)
    release = companion(requires=f">={floor}")
    pairing = release.pairing_with(torch)
    assert pairing is not None and pairing.evidence == "declared"
    assert fits(TV, release, release.version, T, torch)
    below = min(floor, above)
    if below < floor:  # and what is below it stays out
        assert not fits(TV, release, release.version, T, below)


@settings(max_examples=200, deadline=None)
@given(pin=versions, other=versions)
def test_a_pin_always_excludes_every_other_torch(pin, other):
    release = companion(torch=pin)
    assert release.pairing_with(pin).evidence == "pinned"
    assert fits(TV, release, release.version, T, pin)
    if other != pin:
        assert release.pairing_with(other) is None
        assert not fits(TV, release, release.version, T, other)


@settings(max_examples=100, deadline=None)
@given(floor=versions, verified=versions, torch=versions)
def test_a_floor_is_verified_up_to_the_newest_torch_verified_and_declared_above(floor, verified, torch):
    verified, torch = max(floor, verified), max(floor, torch)
    pairing = companion(requires=f">={floor}", verified_with=verified).pairing_with(torch)
    assert pairing.evidence == ("verified" if torch <= verified else "declared")
    if pairing.evidence == "declared":
        assert f"torch {torch} is above torch {verified}" in pairing.provenance.note


def test_a_range_and_no_declaration():
    ranged = companion(requires=">=2.11,<2.14")
    assert [fits(TV, ranged, ranged.version, T, Version(v)) for v in ("2.10.0", "2.11.0", "2.13.9", "2.14.0")] == [False, True, True, False]
    nothing = companion()
    assert nothing.pairing_with(Version("2.15.0")).evidence == "unverified" and nothing.requirement is None


def test_declared_pairings_never_hold_torch_back(matrix):
    """standing() ranks a pairing inside a release's own declaration like a pin: the newest torch pip would take wins."""
    table, _ = candidates(matrix, TV, PythonTarget.parse("3.11"), None)
    newest_torch = candidates(matrix, T, PythonTarget.parse("3.11"), None)[0][0]
    floor = next(c for c in table if c.version == Version("0.29.2"))
    assert pairing_evidence(floor.release, newest_torch.version).evidence == "declared"
    assert standing(floor, newest_torch) == (0, 0)
    assert PAIRING_RANK["pinned"] < PAIRING_RANK["verified"] <= PAIRING_RANK["tested-here"] < PAIRING_RANK["declared"] < PAIRING_RANK["unverified"]


def test_no_sentence_calls_a_floor_a_pin(matrix):
    release = matrix.release(TV, Version("0.29.2"))
    assert declaration_phrase(release) == "declares torch>=2.14.0"
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.13.0", "torchvision==0.29.2"))
    assert isinstance(outcome, Conflict)
    text = " ".join(outcome.reasons)
    assert "declares torch>=2.14.0" in text and "0.29.2 pins" not in text
    from compatmatrix.rules import pair_problem

    torch = candidates(matrix, T, PythonTarget.parse("3.11"), SpecifierSet("==2.13.0"))[0][0]
    vision = candidates(matrix, TV, PythonTarget.parse("3.11"), SpecifierSet("==0.29.2"))[0][0]
    rejected = pair_problem(vision, torch)
    assert rejected.evidence == "declared" and rejected_sentence(rejected) == "torchvision 0.29.2 declares torch>=2.14.0, not torch 2.13.0"


# --- the bundled matrix says what the recorded METADATA declares ------------------------------------------------------


@pytest.mark.parametrize("path", sorted(RECORDED.glob("*.METADATA")), ids=lambda p: p.name.split("-cp")[0].split("-py3")[0])
def test_the_matrix_records_what_each_release_declares(matrix, path):
    """RECORDED 2026-12-07: Requires-Dist: torch and Requires-Python of each release, as the matrix keeps them."""
    project, version = path.name.split("-")[:2]
    declared = harvest_mod.read_metadata(path.read_text())
    release = matrix.release(Component.from_name(project), Version(version))
    assert release is not None, path.name
    assert release.requirement == (declared.torch or None), path.name
    assert release.requires_python == (SpecifierSet(declared.requires_python) if declared.requires_python else None), path.name
    pin = harvest_mod._exact(declared.torch)
    assert release.torch == (Version(pin.public) if pin is not None else None)


def test_harvest_reads_the_recorded_torchaudio_floor_as_a_floor():
    """The old harvest recorded torchaudio 2.11.1's `torch>=2.11` as "torch 2.11" (a pin)."""
    text = (RECORDED / "torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl.METADATA").read_text()
    fields, _, note = harvest_mod._companion_torch(TA, Version("2.11.1"), harvest_mod.read_metadata(text), {Version("2.11.0")}, "src")
    assert fields == {"torch_requires": ">=2.11", "requires_python": ">=3.10"} and "floor" in note


# --- Requires-Python, exactly -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("python, admitted", [("3.14.1", False), ("3.14.0", True), ("3.14.2", True), ("3.14", None), ("3.13", True),
                                              ("3.9", False), ("3.10", True)])
def test_requires_python_with_the_full_version_and_undecided_for_the_line(python, admitted):
    assert python_admits(SpecifierSet(">=3.10,!=3.14.1"), PythonTarget.parse(python)) is admitted


_ITEMS = st.tuples(st.sampled_from([">=", ">", "<", "<=", "==", "!=", "~="]),
                   st.sampled_from(["3.9", "3.10", "3.10.0", "3.10.2", "3.11", "3.11.0", "3.11.4", "3.9.5", "3.12.1"]), st.booleans())


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEMS, min_size=1, max_size=3), line=st.sampled_from(["3.9", "3.10", "3.11", "3.12"]))
def test_a_line_verdict_is_what_its_micro_releases_say(items, line):
    """For X.Y alone: True when every X.Y.z is admitted, False when none is, None (undecided) otherwise."""
    spec = SpecifierSet(",".join(f"{op}{v}{'.*' if star and op in ('==', '!=') else ''}" for op, v, star in items))
    said = [spec.contains(Version(f"{line}.{z}")) for z in range(0, 30)]
    expected = True if all(said) else False if not any(said) else None
    assert python_admits(spec, PythonTarget.parse(line)) is expected


def test_python_3_14_1_never_gets_a_torchvision_that_excludes_it(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.14.1", with_=("torchvision",)))
    assert isinstance(outcome, Resolution), outcome.reasons
    pick = outcome.picks[TV]
    assert pick.release.requires_python is None or pick.release.requires_python.contains("3.14.1")
    assert pick.version == Version("0.25.0")  # pip answers the same (pip install --dry-run --python-version 3.14.1, 2026-12-07)
    assert any("excludes Python 3.14.1" in r for r in outcome.reasons)


def test_python_3_14_alone_is_undecided_and_said(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.14", with_=("torchvision",)))
    assert outcome.picks[TV].version == Version("0.29.2")
    assert any("undecided for Python 3.14" in n and "--python-version 3.14.N" in n for n in outcome.notes)


# --- the CLI --------------------------------------------------------------------------------------------------------


def test_resolve_json_pairs_torch_2_15_with_torchvision_0_29_2_and_marks_it_declared():
    done = run_compat("resolve", "--profile", "stock", "--python-version", "3.11", "torch==2.15.0", "torchvision==0.29.2", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["packages"]["torch"] == "2.15.0" and document["packages"]["torchvision"] == "0.29.2"
    pairing = document["pairings"]["torchvision"]
    assert (pairing["evidence"], pairing["declares"], pairing["declared_only"]) == ("declared", ">=2.14.0", True)
    assert "_C_stable.so" in pairing["stable_abi"]


def test_an_old_overlay_that_read_a_floor_as_a_pin_is_overruled_and_said(matrix):
    """What compat matrix update wrote before issue 30 (torchaudio 2.11.1 as `torch = "2.11.0"`, a floor read as a pin):
    the curated floor is used, and the disagreement names both declarations."""
    from compatmatrix.matrix import overlay as overlay_mod

    document = {"format": "compatmatrix-overlay", "schema_version": 1, "entries": {"torchaudio": [
        {"version": "2.11.1", "torch": "2.11.0", "verified": False, "source": "registry:pypi/torchaudio/2.11.1",
         "wheels": [{"host": "pypi", "python": ["3.11"], "source": "registry:pypi/torchaudio/2.11.1"}]}]}}
    merged, state = overlay_mod.merge(matrix, overlay_mod.parse_entries(document, matrix, "overlay.json"))
    assert merged.release(TA, Version("2.11.1")).torch_requires == SpecifierSet(">=2.11")
    assert any("declares torch==2.11.0" in d and "curated matrix says torch>=2.11" in d for d in state.disagreements)

