"""The resolver against the real matrix: the cases the matrix exists for."""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from compatmatrix.errors import UsageError
from compatmatrix.matrix.model import Component
from compatmatrix.resolve import Conflict, Resolution, build_request, resolve
from compatmatrix.rules import set_problems
from compatmatrix.target import Platform, PythonTarget

from .conftest import make_request

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
        "oneccl_bind_pt 1.12.0 is built for torch 1.12.0 only; you asked for torch==1.12.1.",
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
        "oneccl_bind_pt 2.0.0 fits torch 2.0.0."
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
    # Every PyPI file of IPEX 2.5.0 is yanked "for security."; the same build on Intel's index is no better.
    unpinned = resolve(matrix, make_request(matrix, "3.11", "ipex>=2.5,<2.6"))
    assert isinstance(unpinned, Conflict)
    assert "intel-extension-for-pytorch 2.5.0 is yanked on pypi (for security.)" in "\n".join(unpinned.reasons)
    assert unpinned.alternatives[0].change.startswith("pin intel-extension-for-pytorch==2.5.0")
    pinned = resolve(matrix, make_request(matrix, "3.11", "ipex==2.5.0"))
    assert versions(pinned)["intel-extension-for-pytorch"] == "2.5.0"
    assert pinned.picks[IPEX].host.id == "pypi"
    assert "intel-extension-for-pytorch 2.5.0 is yanked on pypi: for security. (used because you pinned it)." in pinned.notes


def test_yanked_transformers_release_only_when_pinned(matrix):
    line = next(line for line in matrix.releases[TF] if line.yanked and line.requires_python.contains(Version("3.11.0")))
    version = sorted(line.yanked)[0]
    pinned = resolve(matrix, make_request(matrix, "3.11", f"transformers=={version}", profile="stock"))
    assert versions(pinned)["transformers"] == str(version)
    ranged = resolve(matrix, make_request(matrix, "3.11", f"transformers>={version},<={version}", profile="stock"))
    assert isinstance(ranged, Conflict)
    assert f"transformers {version} is yanked on PyPI" in "\n".join(ranged.reasons)


def test_newer_yanked_releases_are_named_with_the_pin_to_use(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.8", profile="ddp-ccl"))
    assert versions(outcome)["intel-extension-for-pytorch"] == "1.10.0"  # never on PyPI, so never yanked there
    assert any(n.startswith("newer intel-extension-for-pytorch releases (1.10.100 to 2.4.0) are yanked on pypi (for security.)") for n in outcome.notes)
    pinned = resolve(matrix, make_request(matrix, "3.8", "intel-extension-for-pytorch==2.4.0", profile="ddp-ccl"))
    assert versions(pinned)["torch"] == "2.4.0" and versions(pinned)["oneccl-bind-pt"] == "2.4.0"


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
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.0.1", "ccl"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0] == "oneccl_bind_pt 2.0.0 is built for torch 2.0.0 only; you asked for torch==2.0.1."
    assert outcome.alternatives[0].change == "change torch==2.0.1 to torch==2.0.0"
    assert versions(outcome.alternatives[0].resolution) == {"torch": "2.0.0", "oneccl-bind-pt": "2.0.0"}
    outcome = resolve(matrix, make_request(matrix, "3.9", "torch==1.13.1", "ccl"))
    assert outcome.alternatives[0].change == "change torch==1.13.1 to torch==1.13.0"


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
        ("3.7", "ddp-ccl", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0", "transformers": "4.30.2"}),
        ("3.8", "ddp-ccl", {"torch": "1.10.0", "oneccl-bind-pt": "1.10.0", "transformers": "4.36.2"}),
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


def test_with_torchvision_and_torchaudio_takes_the_newest_torch_both_pin(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", with_=("torchvision", "torchaudio")))
    assert versions(outcome) == {"torch": "2.10.0", "torchvision": "0.25.0", "torchaudio": "2.10.0"}
    assert outcome.reasons[0].startswith(
        "torch 2.10.0: 7 newer releases ruled out; the next, 2.11.0: no allowed torchaudio release pairs with it "
        "(torchaudio 2.10.0 pins torch 2.10.0, not torch 2.11.0)"
    )


def test_old_torchaudio_comes_from_pypi_next_to_the_cpu_torch(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.9", "torch==1.9.0", "torchvision", "torchaudio"))
    assert versions(outcome) == {"torch": "1.9.0", "torchvision": "0.10.0", "torchaudio": "0.9.0"}
    assert outcome.picks[Component.TORCHVISION].local_label == "+cpu"
    assert (outcome.picks[Component.TORCHAUDIO].host.id, outcome.picks[Component.TORCHAUDIO].local_label) == ("pypi", "")


def test_a_torch_without_torchvision_is_explained(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.12", "torch==2.14.1", "torchvision"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0] == "torchvision 0.29.0 pins torch 2.14.0; you asked for torch==2.14.1."
    assert "No torchvision release in the matrix pairs with torch 2.14.1." in outcome.reasons
    assert outcome.alternatives[0].change == "change torch==2.14.1 to torch==2.14.0"
    assert versions(outcome.alternatives[0].resolution) == {"torch": "2.14.0", "torchvision": "0.29.0"}


def test_companions_with_the_full_stack(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", "torchvision", "torchaudio", profile="ddp-ccl"))
    assert versions(outcome) == {
        "torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0", "torchvision": "0.22.0",
        "torchaudio": "2.7.0", "transformers": "5.0.0", "accelerate": "1.12.0",
    }
    assert set_problems(outcome.picks) == []
