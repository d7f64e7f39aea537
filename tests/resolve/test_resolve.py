"""The resolver against the real matrix: the cases the matrix exists for."""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from compatmatrix.errors import UsageError
from compatmatrix.matrix.model import Component
from compatmatrix.resolve import build_request, resolve
from compatmatrix.rules import set_problems
from compatmatrix.search import Conflict, Resolution
from compatmatrix.target import Platform, PythonTarget

from ..conftest import make_request

T, IPEX, CCL, TF, ACC = Component.TORCH, Component.IPEX, Component.CCL, Component.TRANSFORMERS, Component.ACCELERATE


def versions(outcome):
    assert isinstance(outcome, Resolution), getattr(outcome, "reasons", outcome)
    return {c.distribution: str(p.version) for c, p in outcome.picks.items()}


@pytest.mark.parametrize("python", ["3.7", "3.8", "3.9", "3.10"])
def test_torch_1_12_1_with_ccl_gets_1_12_100(matrix, python):
    got = versions(resolve(matrix, make_request(matrix, python, "torch==1.12.1", "oneccl_bind_pt")))
    assert got == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}


@pytest.mark.parametrize("python", ["3.7", "3.10"])
def test_torch_1_12_0_with_ccl_gets_1_12_0(matrix, python):
    got = versions(resolve(matrix, make_request(matrix, python, "torch==1.12.0", "ccl")))
    assert got == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.0"}


def test_newest_ipex_set_for_python_3_11(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="ipex"))
    assert versions(outcome) == {"torch": "2.8.0", "intel-extension-for-pytorch": "2.8.0"}
    assert outcome.picks[IPEX].host.id == "pypi"  # IPEX 2.8.0 is on PyPI for 3.11, not yanked
    assert outcome.picks[T].host.id == "pytorch-cpu"
    assert any("archived" in note for note in outcome.notes)
    # why not torch 2.9: IPEX's import check
    assert any("2.9.0" in r and "import check accepts only torch==2.8.*" in r for r in outcome.reasons)


def test_newest_ccl_set_for_python_3_11_accepts_ddp_backend_ccl(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="ddp-ccl"))
    assert versions(outcome) == {
        "torch": "2.7.0",
        "intel-extension-for-pytorch": "2.7.0",
        "oneccl-bind-pt": "2.7.0",
        "transformers": "5.0.0",
        "accelerate": "1.12.0",
    }
    assert matrix.feature("transformers", "ddp_backend_ccl").present_in(outcome.picks[TF].version)
    assert not matrix.feature("transformers", "ddp_backend_ccl").present_in(Version("5.1.0"))
    assert matrix.feature("accelerate", "ddp_backend_ccl_works").present_in(outcome.picks[ACC].version)
    assert not matrix.feature("accelerate", "ddp_backend_ccl_works").present_in(Version("1.13.0"))
    text = " ".join(outcome.reasons)
    assert re.search(r"transformers 5\.0\.0: \d+ newer releases ruled out; the next, 5\.1\.0: only transformers>=4\.29\.0,<5\.1\.0 accepts --ddp_backend ccl", text)
    assert any("setvars.sh" in n for n in outcome.notes)


def test_the_default_profile_is_ddp_ccl(matrix):
    request = build_request(matrix, PythonTarget.parse("3.11"), Platform.from_tag("linux_x86_64"))
    assert request.profile == "ddp-ccl"


def test_pinned_release_without_a_wheel_for_this_python_is_explained(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "oneccl_bind_pt==1.12.0"))
    assert isinstance(outcome, Conflict)
    text = "\n".join(outcome.reasons)
    assert "oneccl_bind_pt 1.12.0 has no wheel for Python 3.11" in text
    assert "3.7, 3.8, 3.9, 3.10" in text
    changes = [a.change for a in outcome.alternatives]
    assert changes[0] == "change oneccl_bind_pt==1.12.0 to oneccl_bind_pt==2.0.0"  # the nearest release with a 3.11 wheel
    assert "drop the constraint oneccl_bind_pt==1.12.0" in changes
    assert "use Python 3.10" in changes
    python_310 = next(a for a in outcome.alternatives if a.change == "use Python 3.10")
    assert versions(python_310.resolution) == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.0"}


def test_mismatched_pins_explain_the_1_12_trap(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==1.12.1", "oneccl_bind_pt==1.12.0"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons == (
        "oneccl_bind_pt 1.12.0 is built for torch 1.12.0 and pairs only with torch 1.12.* "
        "(documented not to work with torch 1.12.1: intel/torch-ccl@v1.12.0:README.md); you asked for torch==1.12.1.",
        "torch 1.12.1 pairs with oneccl_bind_pt 1.12.100, but you asked for oneccl_bind_pt==1.12.0.",
    )
    alternatives = {a.change: versions(a.resolution) for a in outcome.alternatives}
    assert alternatives["change torch==1.12.1 to torch==1.12.0"] == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.0"}
    assert alternatives["change oneccl_bind_pt==1.12.0 to oneccl_bind_pt==1.12.100"] == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}


def test_ipex_and_ccl_that_need_different_torch(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.10", "ipex==2.1.100", "ccl==2.0.0"))
    assert isinstance(outcome, Conflict)
    text = "\n".join(outcome.reasons)
    assert text == (
        "No allowed torch release fits every package: intel-extension-for-pytorch 2.1.100 fits torch 2.1.2, 2.1.1, 2.1.0; "
        "oneccl_bind_pt 2.0.0 fits torch 2.0.1, 2.0.0."
    )
    changes = [a.change for a in outcome.alternatives]
    assert changes[0] == "change intel-extension-for-pytorch==2.1.100 to intel-extension-for-pytorch==2.0.100"
    assert "change oneccl_bind_pt==2.0.0 to oneccl_bind_pt==2.1.0" in changes


@pytest.mark.parametrize(
    "tag",
    ["macosx_14_0_arm64", "win_amd64", "manylinux_2_28_aarch64", "musllinux_1_2_x86_64"],
)
def test_non_linux_x86_64_platforms_are_not_supported(matrix, tag):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="stock", platform=Platform.from_tag(tag)))
    assert isinstance(outcome, Conflict) and outcome.unsupported
    assert "x86_64" in outcome.reasons[0] or "glibc" in outcome.reasons[0]


def test_yanked_release_only_when_pinned(matrix):
    # Every PyPI file of IPEX 1.11.100 is yanked ("functional issues"), and no other host has it.
    unpinned = resolve(matrix, make_request(matrix, "3.9", "ipex>=1.11.100,<1.11.200"))
    assert isinstance(unpinned, Conflict)
    assert "intel-extension-for-pytorch 1.11.100 is yanked on pypi (functional issues)" in "\n".join(unpinned.reasons)
    assert unpinned.alternatives[0].change.startswith("pin intel-extension-for-pytorch==1.11.100")
    pinned = resolve(matrix, make_request(matrix, "3.9", "ipex==1.11.100"))
    assert versions(pinned)["intel-extension-for-pytorch"] == "1.11.100"
    assert pinned.picks[IPEX].host.id == "pypi"
    assert "intel-extension-for-pytorch 1.11.100 is yanked on pypi: functional issues (used because you pinned it)." in pinned.notes


def test_a_release_yanked_for_security_on_pypi_is_yanked_on_every_host(matrix):
    # IPEX 2.5.0: every PyPI file yanked "for security."; intel-cpu-us serves the same build unmarked. The build is the
    # same, so the default never picks it; an exact pin takes it (from the host pip would take it from), reason named.
    ranged = resolve(matrix, make_request(matrix, "3.11", "ipex>=2.5,<2.6"))
    assert isinstance(ranged, Conflict)
    assert "intel-extension-for-pytorch 2.5.0 is yanked on pypi (for security.)" in "\n".join(ranged.reasons)
    pinned = resolve(matrix, make_request(matrix, "3.11", "ipex==2.5.0"))
    assert (pinned.picks[IPEX].host.id, pinned.picks[IPEX].local_label) == ("intel-cpu-us", "+cpu")
    assert ("intel-extension-for-pytorch 2.5.0 is yanked on pypi: for security; a security yank holds for the same build on intel-cpu-us too "
            "(used because you pinned it).") in pinned.notes


def test_python_3_8_ipex_default_is_the_newest_release_no_host_yanked_for_security(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.8", profile="ipex"))
    ipex = outcome.picks[IPEX]
    assert not any(w.yanked_for_security for w in ipex.release.wheels)
    skipped = [r.version for r in matrix.releases[IPEX] if r.version > ipex.version and any(w.has_python(Version("3.8")) for w in r.wheels)]
    assert skipped and all(any(w.yanked for w in matrix.release(IPEX, v).wheels) for v in skipped)
    assert any(note.startswith(f"newer intel-extension-for-pytorch releases ({min(skipped)} to {max(skipped)}) are yanked on pypi (for security.)")
               for note in outcome.notes)


def test_another_yank_reason_keeps_the_per_host_rule(matrix):
    # torchaudio 2.0.0: PyPI yanked it for "Contains an incorrect torch dependency"; the CPU index's copy is unmarked
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==2.0.0", "torchaudio<2.0.1", profile="stock", with_=("torchaudio",)))
    assert versions(outcome)["torchaudio"] == "2.0.0"
    assert outcome.picks[Component.TORCHAUDIO].host.id == "pytorch-cpu"
    assert any("torchaudio 2.0.0 is yanked on pypi (Contains an incorrect torch dependency)" in note for note in outcome.notes)


def test_yanked_transformers_release_only_when_pinned(matrix):
    line = next(line for line in matrix.releases[TF] if line.yanked and line.requires_python.contains(Version("3.11.0")))
    version = sorted(line.yanked)[0]
    pinned = resolve(matrix, make_request(matrix, "3.11", f"transformers=={version}", profile="stock"))
    assert versions(pinned)["transformers"] == str(version)
    ranged = resolve(matrix, make_request(matrix, "3.11", f"transformers>={version},<={version}", profile="stock"))
    assert isinstance(ranged, Conflict)
    assert f"transformers {version} is yanked on PyPI" in "\n".join(ranged.reasons)


def test_newer_yanked_releases_are_named_with_the_pin_to_use(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.9", "intel-extension-for-pytorch<1.12.300"))
    assert versions(outcome)["intel-extension-for-pytorch"] == "1.10.0"  # 1.10.100-1.12.100 yanked for security, 1.12.200 yanked
    assert "newer intel-extension-for-pytorch releases (1.10.100 to 1.12.200) are yanked on pypi: they were skipped; to use one anyway, pin it: " \
           "compat resolve intel-extension-for-pytorch==1.12.200 ..." in outcome.notes
    pinned = resolve(matrix, make_request(matrix, "3.9", "intel-extension-for-pytorch==1.12.200"))
    assert versions(pinned)["intel-extension-for-pytorch"] == "1.12.200"


def test_ipex_prefers_the_build_for_the_exact_torch(mini_matrix):
    # FIXTURE matrix: IPEX 1.12.100 is built for torch 1.12.0, 1.12.300 for 1.12.1; both accept 1.12.*
    got = versions(resolve(mini_matrix, make_request(mini_matrix, "3.9", "torch==1.12.0", profile=None, with_=("ipex",))))
    assert got["intel-extension-for-pytorch"] == "1.12.100"
    got = versions(resolve(mini_matrix, make_request(mini_matrix, "3.9", "torch==1.12.1", with_=("ipex",))))
    assert got["intel-extension-for-pytorch"] == "1.12.300"


def test_pinned_ipex_with_a_newer_torch_patch_says_so(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "ipex==2.3.0"))
    assert versions(outcome)["torch"] == "2.3.1"
    assert any("was built against torch 2.3.0; its import check accepts torch 2.3.1. Pin torch==2.3.0" in n for n in outcome.notes)


def test_local_version_labels_are_read_as_builds(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.9", "torch==1.12.1+cpu", "ccl"))
    assert versions(outcome) == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}
    assert any("torch==1.12.1+cpu is read as torch==1.12.1" in n for n in outcome.request.notes)


def test_nearest_change_for_a_pin_that_has_no_partner(matrix):
    # no oneccl_bind_pt of the 2.8 series: another major.minor is refused (its C++ ABI differs)
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.8.0", "ccl"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0] == (
        "oneccl_bind_pt 2.7.0 is built for torch 2.7.0 and pairs only with torch 2.7.* (reported working with torch 2.7.1); you asked for torch==2.8.0."
    )
    # the nearest pin, 2.7.1, rests on a reported (and inferred) pairing: the built-for 2.7.0 is offered instead
    assert outcome.alternatives[0].change == "change torch==2.8.0 to torch==2.7.0"
    assert versions(outcome.alternatives[0].resolution) == {"torch": "2.7.0", "oneccl-bind-pt": "2.7.0"}


# --- evidence levels: built-for, reported-working (cited), unverified (allowed, with a warning), documented-break -----


def test_reported_working_pairing_is_allowed_with_its_source_and_the_nearest_verified_pairing(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.0.1", "ccl"))
    assert versions(outcome) == {"torch": "2.0.1", "oneccl-bind-pt": "2.0.0"}
    (note,) = [n for n in outcome.notes if "reported working" in n]
    assert note == (
        "oneccl_bind_pt 2.0.0 with torch 2.0.1: reported working by https://github.com/intel/torch-ccl/issues/53 (it is built for torch 2.0.0); "
        "the nearest verified (built-for) pairing: torch 2.0.0 with oneccl_bind_pt 2.0.0."
    )
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==2.5.1", "ccl"))
    assert versions(outcome) == {"torch": "2.5.1", "oneccl-bind-pt": "2.5.0"}
    assert any("reported working by intel/neural-compressor@2bb04d0d1c258aa589e2594684bc04d0b5687a3d:.azure-pipelines/scripts/install_nc.sh" in n for n in outcome.notes)


def test_inferred_report_says_so(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.7.1", "ccl"))
    assert versions(outcome) == {"torch": "2.7.1", "oneccl-bind-pt": "2.7.0"}
    (note,) = [n for n in outcome.notes if "reported working" in n]
    assert "not verified: oneccl version inferred" in note and "torch 2.7.0 with oneccl_bind_pt 2.7.0" in note


def test_unverified_pairing_of_the_same_series_is_allowed_with_a_warning(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.9", "torch==1.13.1", "ccl"))
    assert versions(outcome) == {"torch": "1.13.1", "oneccl-bind-pt": "1.13.0"}
    (note,) = [n for n in outcome.notes if "unverified" in n]
    assert note == (
        "oneccl_bind_pt 1.13.0 with torch 1.13.1: unverified: no source says whether this pair works (it is built for torch 1.13.0); "
        "the nearest verified (built-for) pairing: torch 1.13.0 with oneccl_bind_pt 1.13.0."
    )


@pytest.mark.parametrize("python", ["3.7", "3.9", "3.10"])
def test_within_a_series_built_for_beats_a_newer_torch(matrix, python):
    """torch 1.13.1 / 2.5.1 / 2.7.1 are newer, but their oneccl_bind_pt pairing is unverified or only reported:
    the set built for its torch is the answer, and the explanation says why the newer patch was not taken."""
    outcome = resolve(matrix, make_request(matrix, python, "torch<1.14", profile="ccl"))
    assert versions(outcome) == {"torch": "1.13.0", "oneccl-bind-pt": "1.13.0"}
    assert re.fullmatch(
        r"torch 1\.13\.0: \d+ newer releases ruled out; the next, 1\.13\.1: its set pairs oneccl_bind_pt 1\.13\.0 with it only as "
        r"unverified: no source says whether this pair works; within the 1\.13 series a set that is better known is preferred \(torch 1\.13\.0\) "
        r"\(newest in the matrix: 2\.15\.0\)\.", outcome.reasons[0],
    ), outcome.reasons[0]
    assert not any("unverified: no source" in n for n in outcome.notes)


def test_the_exact_build_beats_a_newer_unverified_one_for_the_same_torch(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==1.12.0", "ccl"))
    assert versions(outcome) == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.0"}
    assert outcome.reasons[1] == (
        "oneccl_bind_pt 1.12.0: 10 newer releases ruled out; the next, 1.12.100: with torch 1.12.0 it is unverified: no source says whether this pair works, "
        "while 1.12.0 is built for it (the better-known pairing is preferred) (newest in the matrix: 2.7.0)."
    )
    pinned = resolve(matrix, make_request(matrix, "3.10", "torch==1.12.0", "ccl==1.12.100"))
    assert versions(pinned) == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.100"}
    assert any(n.startswith("oneccl_bind_pt 1.12.100 with torch 1.12.0: unverified: no source says whether this pair works") for n in pinned.notes)
    assert any("the nearest verified (built-for) pairing: torch 1.12.1 with oneccl_bind_pt 1.12.100, or oneccl_bind_pt 1.12.0 (built for this torch)." in n
               for n in pinned.notes)


def test_known_bad_set_is_taken_only_when_nothing_else_of_its_series_works(matrix):
    # torch 2.1: 2.1.0 + oneccl_bind_pt 2.1.0 is built for, but known bad (intel/torch-ccl#53); 2.1.1 is reported working
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch>=2.1,<2.2", profile="ccl"))
    assert versions(outcome) == {"torch": "2.1.1", "oneccl-bind-pt": "2.1.0"}
    assert re.match(r"torch 2\.1\.1: \d+ newer releases ruled out; the next, 2\.1\.2: its set pairs oneccl_bind_pt 2\.1\.0 with it only as unverified", outcome.reasons[0])
    pinned = resolve(matrix, make_request(matrix, "3.10", "torch==2.1.0", "ccl"))
    assert versions(pinned) == {"torch": "2.1.0", "oneccl-bind-pt": "2.1.0"}
    (note,) = [n for n in pinned.notes if "known-bad" in n]
    assert note == (
        "oneccl_bind_pt 2.1.0: torch 2.1.0 with oneccl_bind_pt 2.1.0 is a known-bad set, reported failing: DDP with the ccl backend fails when fine-tuning through the "
        "transformers Trainer on two nodes (mpirun), where torch 2.0.1 with oneccl_bind_pt 2.0.0 works "
        "(open: https://github.com/intel/torch-ccl/issues/53, https://github.com/uxlfoundation/oneCCL/issues/100)."
    )


def test_known_bad_set_of_one_build_only(matrix):
    # intel/torch-ccl#37: the segfault is with PyPI's unlabelled torch 1.12.0; compat takes the +cpu build from the CPU index
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==1.12.0", "ccl==1.12.0"))
    assert outcome.picks[T].local_label == "+cpu"
    assert not any("known-bad" in n for n in outcome.notes)


def test_oneccl_2_1_0_also_pairs_with_torch_2_1_1(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.10", "torch==2.1.1", "ipex==2.1.100", "ccl"))
    assert versions(outcome) == {"torch": "2.1.1", "intel-extension-for-pytorch": "2.1.100", "oneccl-bind-pt": "2.1.0"}


def test_legacy_profile_only_takes_transformers_that_set_up_ccl_themselves(matrix):
    for python in ("3.6", "3.9", "3.11"):
        outcome = resolve(matrix, make_request(matrix, python, profile="ddp-ccl-legacy"))
        if isinstance(outcome, Resolution):
            assert outcome.picks[TF].version < Version("4.29")


def test_ccl_sets_name_the_ccl_worker_count_step(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="ddp-ccl"))
    assert any(n.startswith("export CCL_WORKER_COUNT=1") for n in outcome.notes)


def test_requirements_without_a_profile_say_so(matrix):
    request = make_request(matrix, "3.11", "transformers<4.40")
    assert request.profile is None
    assert request.notes[0].startswith("no profile: resolving only the packages named")


def test_stock_profile_has_no_intel_packages(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="stock"))
    got = versions(outcome)
    assert set(got) == {"torch", "transformers", "accelerate"}
    assert Version(got["torch"]) >= Version("2.13")


@pytest.mark.parametrize("python", ["3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13"])
@pytest.mark.parametrize("profile", ["ddp-ccl", "ddp-ccl-legacy", "ipex", "ccl", "stock"])
def test_every_python_and_profile_gets_a_consistent_set_or_reasons(matrix, python, profile):
    outcome = resolve(matrix, make_request(matrix, python, profile=profile))
    if isinstance(outcome, Resolution):
        assert set_problems(outcome.picks) == []
        assert all(p.wheels is None or p.wheels.has_python(Version(python)) for p in outcome.picks.values())
        assert len(outcome.reasons) == len(outcome.picks)
        for package, feature in matrix.profiles[profile].features:  # the profile's features hold for the picks
            assert matrix.feature(package, feature).present_in(outcome.picks[Component.from_name(package)].version)
    else:
        assert outcome.reasons and all(r.strip() for r in outcome.reasons)


@pytest.mark.parametrize(
    "python, profile, expected",
    [
        ("3.6", "ddp-ccl-legacy", {"torch": "1.10.0", "oneccl-bind-pt": "1.10.0", "transformers": "4.18.0"}),
        # 3.6-3.8: every IPEX from 1.10.100 to 2.5.0 is yanked on PyPI for security (yanked on every host for compat,
        # though Intel's hosts serve the same builds unmarked): the newest release no host yanked for security is 1.10.0
        ("3.7", "ddp-ccl", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0", "transformers": "4.30.2"}),
        ("3.8", "ddp-ccl", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0", "transformers": "4.36.2"}),
        ("3.6", "ddp-ccl-legacy", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0"}),
        ("3.9", "ddp-ccl", {"torch": "2.7.0", "transformers": "4.57.6", "accelerate": "1.10.1"}),
        ("3.12", "ipex", {"torch": "2.8.0", "intel-extension-for-pytorch": "2.8.0"}),
        ("3.13", "ccl", {"torch": "2.7.0", "oneccl-bind-pt": "2.7.0"}),
    ],
)
def test_known_answers_across_pythons(matrix, python, profile, expected):
    got = versions(resolve(matrix, make_request(matrix, python, profile=profile)))
    assert {k: got[k] for k in expected} == expected


def test_python_3_6_ddp_ccl_is_explained(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.6", profile="ddp-ccl"))
    assert isinstance(outcome, Conflict)
    text = "\n".join(outcome.reasons)
    assert "only transformers>=4.29.0,<5.1.0 accepts --ddp_backend ccl" in text
    assert "requires Python >=3.7" in text
    assert [a.change for a in outcome.alternatives][:2] == ["use --profile ddp-ccl-legacy (the older guides' stack)", "use Python 3.7"]


def test_resolution_is_deterministic(matrix):
    first = resolve(matrix, make_request(matrix, "3.10", profile="ddp-ccl"))
    second = resolve(matrix, make_request(matrix, "3.10", profile="ddp-ccl"))
    assert first == second


@pytest.mark.parametrize(
    "requirement, message",
    [("numpy", "is not a package compatmatrix resolves"), ("torch>>1", "is not a valid requirement"), ("torch @ https://x/y.whl", "URL, marker or extras")],
)
def test_bad_requirements_are_usage_errors(matrix, requirement, message):
    with pytest.raises(UsageError, match=message):
        make_request(matrix, "3.11", requirement)


def test_unknown_profile_is_a_usage_error(matrix):
    with pytest.raises(UsageError, match="is not a profile"):
        make_request(matrix, "3.11", profile="fast")


def test_requirement_that_matches_no_release(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "oneccl_bind_pt==2.8.0"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0].startswith("No oneccl_bind_pt release in the matrix matches oneccl_bind_pt==2.8.0; the matrix knows oneccl_bind_pt 1.10.0 to 2.7.0.")


# --- torchvision / torchaudio: each release pins exactly one torch; the +cpu build from torch's host ---------------


@pytest.mark.parametrize(
    "python, requirements, expected",
    [
        ("3.11", ("torch==2.7.0", "torchvision"), {"torch": "2.7.0", "torchvision": "0.22.0"}),
        ("3.11", ("torch==2.7.0", "torchvision", "torchaudio"), {"torch": "2.7.0", "torchvision": "0.22.0", "torchaudio": "2.7.0"}),
        ("3.10", ("torch==2.0.0", "torchaudio"), {"torch": "2.0.0", "torchaudio": "2.0.1"}),  # two torchaudio releases pin 2.0.0
        ("3.10", ("torchvision==0.13.1",), {"torch": "1.12.1", "torchvision": "0.13.1"}),  # the pin decides torch
    ],
)
def test_companions_pin_exactly_one_torch(matrix, python, requirements, expected):
    outcome = resolve(matrix, make_request(matrix, python, *requirements))
    assert versions(outcome) == expected
    for component in (Component.TORCHVISION, Component.TORCHAUDIO):
        if component in outcome.picks:
            pick = outcome.picks[component]
            assert (pick.host.id, pick.local_label) == (outcome.picks[T].host.id, outcome.picks[T].local_label) == ("pytorch-cpu", "+cpu")


def test_with_torchvision_and_torchaudio_takes_the_newest_torch_the_declarations_allow(matrix):
    """Issue 30: torchvision 0.29.2 declares torch>=2.14.0 and torchaudio 2.11.1 torch>=2.11 (floors, not pins): the newest
    torch they allow is taken, as pip and uv take it (the old code read each floor as a pin and answered torch 2.10.0)."""
    outcome = resolve(matrix, make_request(matrix, "3.11", with_=("torchvision", "torchaudio")))
    assert versions(outcome) == {"torch": "2.15.0", "torchvision": "0.29.2", "torchaudio": "2.11.1"}
    declared = [n for n in outcome.notes if "declared only" in n]
    assert len(declared) == 2 and all("Requires-Dist: torch>=" in n for n in declared)
    assert not any("pins torch" in line for line in outcome.reasons + outcome.notes)


def test_old_torchaudio_comes_from_pypi_next_to_the_cpu_torch(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.9", "torch==1.9.0", "torchvision", "torchaudio"))
    assert versions(outcome) == {"torch": "1.9.0", "torchvision": "0.10.0", "torchaudio": "0.9.0"}
    assert outcome.picks[Component.TORCHVISION].local_label == "+cpu"
    assert (outcome.picks[Component.TORCHAUDIO].host.id, outcome.picks[Component.TORCHAUDIO].local_label) == ("pypi", "")


def test_a_torch_without_torchvision_is_explained(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.12", "torch==2.13.0", "torchvision==0.29.2"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0] == "torchvision 0.29.2 declares torch>=2.14.0; you asked for torch==2.13.0."
    assert outcome.alternatives[0].change == "change torch==2.13.0 to torch==2.14.0"  # the nearest torch it declares
    assert versions(outcome.alternatives[0].resolution) == {"torch": "2.14.0", "torchvision": "0.29.2"}


def test_a_torch_above_a_floor_pairs_as_declared(matrix):
    """torch 2.15.0 with torchvision 0.29.2 (torch>=2.14.0) is a set, its pairing marked as resting on the declaration."""
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.15.0", "torchvision==0.29.2", profile="stock"))
    assert isinstance(outcome, Resolution), outcome.reasons
    assert versions(outcome)["torchvision"] == "0.29.2"
    from compatmatrix.rules import pairing_evidence

    assert pairing_evidence(outcome.picks[Component.TORCHVISION].release, Version("2.15.0")).evidence == "declared"


def test_companions_with_the_full_stack(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torchvision", "torchaudio", profile="ddp-ccl"))
    assert versions(outcome) == {
        "torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0", "torchvision": "0.22.0",
        "torchaudio": "2.7.0", "transformers": "5.0.0", "accelerate": "1.12.0",
    }
    assert set_problems(outcome.picks) == []


def test_a_declared_only_pairing_is_said_as_a_declaration_not_a_build(matrix):
    """Review of issue 30: "What would work" said a set resting on torchvision 0.29.2's floor (Requires-Dist:
    torch>=2.14.0) was "built for their torch". A declaration is said as one; a pin still reads as built for its torch."""
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.13.0", "torchvision==0.29.2", profile="stock"))
    reasons = {a.change: a.reason for a in outcome.alternatives}
    moved_torch = reasons["change torch==2.13.0 to torch==2.14.0"]
    assert "built for" not in moved_torch and "torchvision 0.29.2 declares torch>=2.14.0" in moved_torch, moved_torch
    assert reasons["change torchvision==0.29.2 to torchvision==0.28.0"].endswith("whose pairings are all built for their torch")
