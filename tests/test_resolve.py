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
    assert alternatives["drop the constraint torch==1.12.1"] == {"torch": "1.12.0", "oneccl-bind-pt": "1.12.0"}
    assert alternatives["drop the constraint oneccl_bind_pt==1.12.0"] == {"torch": "1.12.1", "oneccl-bind-pt": "1.12.100"}


def test_ipex_and_ccl_that_need_different_torch(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.10", "ipex==2.1.100", "ccl==2.0.0"))
    assert isinstance(outcome, Conflict)
    text = "\n".join(outcome.reasons)
    assert text == (
        "No allowed torch release fits every package: intel-extension-for-pytorch 2.1.100 fits torch 2.1.2, 2.1.1, 2.1.0; "
        "oneccl_bind_pt 2.0.0 fits torch 2.0.0."
    )
    changes = [a.change for a in outcome.alternatives]
    assert changes[:2] == ["drop the constraint intel-extension-for-pytorch==2.1.100", "drop the constraint oneccl_bind_pt==2.0.0"]


@pytest.mark.parametrize(
    "tag",
    ["macosx_14_0_arm64", "win_amd64", "manylinux_2_28_aarch64", "musllinux_1_2_x86_64"],
)
def test_non_linux_x86_64_platforms_are_not_supported(matrix, tag):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="stock", platform=Platform.from_tag(tag)))
    assert isinstance(outcome, Conflict) and outcome.unsupported
    assert "x86_64" in outcome.reasons[0] or "glibc" in outcome.reasons[0]


def test_yanked_release_only_when_pinned(matrix):
    # Every PyPI file of IPEX 2.5.0 is yanked; the Intel index still serves it.
    unpinned = resolve(matrix, make_request(matrix, "3.11", "ipex>=2.5,<2.6"))
    assert versions(unpinned)["intel-extension-for-pytorch"] == "2.5.0"
    assert unpinned.picks[IPEX].host.id == "intel-cpu-us"
    pinned = resolve(matrix, make_request(matrix, "3.11", "ipex==2.5.0"))
    assert pinned.picks[IPEX].host.id == "pypi"
    yanked_tf = next(line for line in matrix.transformers if line.yanked)
    version = sorted(yanked_tf.yanked)[0]
    outcome = resolve(matrix, make_request(matrix, "3.11", f"transformers=={version}", profile="stock"))
    if isinstance(outcome, Resolution):
        assert outcome.picks[TF].version == version
    unpinned_line = resolve(matrix, make_request(matrix, "3.11", f"transformers>={version},<={version}", profile="stock"))
    assert isinstance(unpinned_line, Conflict)
    assert "yanked" in "\n".join(unpinned_line.reasons)


def test_ipex_prefers_the_build_for_the_exact_torch(matrix):
    got = versions(resolve(matrix, make_request(matrix, "3.7", "torch==1.13.0", profile="ipex")))
    assert got["intel-extension-for-pytorch"] == "1.13.0"  # 1.13.100 is built for torch 1.13.1
    got = versions(resolve(matrix, make_request(matrix, "3.7", "torch==1.13.1", profile="ipex")))
    assert got["intel-extension-for-pytorch"] == "1.13.100"


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
    else:
        assert outcome.reasons and all(r.strip() for r in outcome.reasons)


@pytest.mark.parametrize(
    "python, profile, expected",
    [
        ("3.6", "ddp-ccl-legacy", {"torch": "1.10.0", "oneccl-bind-pt": "1.10.0"}),
        ("3.7", "ddp-ccl", {"torch": "1.13.0", "oneccl-bind-pt": "1.13.0", "transformers": "4.30.2"}),
        ("3.8", "ddp-ccl", {"torch": "2.4.0", "oneccl-bind-pt": "2.4.0"}),
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
    assert [a.change for a in outcome.alternatives][0] == "use Python 3.7"


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
