"""Pure parts of the install plan: which wheel file fits which target."""

from __future__ import annotations

import pytest
from packaging.version import Version

from compatmatrix.install.indexes import Link
from compatmatrix.install.plan import WheelTarget, pick_link, wheel_fits
from compatmatrix.target import Platform

LINUX = Platform.from_tag("linux_x86_64")


@pytest.mark.parametrize(
    "filename, python, glibc, fits",
    [
        ("torch-1.10.0+cpu-cp37-cp37m-linux_x86_64.whl", "3.7", None, True),  # CPython <= 3.7 ABI tag
        ("torch-1.10.0+cpu-cp36-cp36m-linux_x86_64.whl", "3.6", None, True),
        ("torch-1.10.0+cpu-cp37-cp37m-linux_x86_64.whl", "3.8", None, False),
        ("torch-2.7.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "3.11", (2, 28), True),
        ("torch-2.7.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "3.11", (2, 17), False),  # glibc too old
        ("torch-2.7.0-cp311-cp311-manylinux2014_x86_64.whl", "3.11", (2, 17), True),
        ("x-1.0-cp38-abi3-manylinux2014_x86_64.whl", "3.11", None, True),
        ("x-1.0-cp312-abi3-manylinux2014_x86_64.whl", "3.11", None, False),
        ("transformers-5.0.0-py3-none-any.whl", "3.10", None, True),
        ("torch-2.7.0-cp311-cp311-macosx_11_0_arm64.whl", "3.11", None, False),
        ("torch-2.7.0-cp311-cp311-manylinux_2_28_aarch64.whl", "3.11", None, False),
        # packaging.tags (issue 30): a py3-none platform wheel (torchvision 0.29.2, torchaudio 2.11.1), a free-threaded build
        ("torchvision-0.29.2-py3-none-manylinux_2_28_x86_64.whl", "3.13", (2, 28), True),
        ("torchvision-0.29.2-py3-none-manylinux_2_28_x86_64.whl", "3.13", (2, 17), False),
        ("torch-2.15.0-cp313-cp313t-manylinux_2_28_x86_64.whl", "3.13", (2, 28), False),
        ("x-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.11", (2, 17), True),
    ],
)
def test_wheel_fits(filename, python, glibc, fits):
    assert wheel_fits(filename, WheelTarget(Version(python), LINUX, glibc)) is fits


def test_pick_link_takes_exactly_the_version_label_and_project():
    target = WheelTarget(Version("3.11"), LINUX)
    links = [Link(name, f"https://h/{name}", None, None, False) for name in (
        "torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl",       # no +cpu label
        "torch-2.7.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",   # another version
        "evil-2.7.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",    # another project on torch's page
        "torch-2.7.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    )]
    chosen = pick_link(links, Version("2.7.0"), "+cpu", target, "torch")
    assert chosen is not None and chosen.filename == "torch-2.7.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert pick_link(links[2:3], Version("2.7.0"), "+cpu", target, "torch") is None


def test_plan_takes_torchvision_and_torchaudio_from_torchs_host(matrix):
    from compatmatrix.install.indexes import IndexLocation
    from compatmatrix.install.plan import make_plan
    from compatmatrix.matrix.model import Component
    from compatmatrix.resolve import resolve

    from ..conftest import make_request

    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.7.0", "torchvision", "torchaudio"), explain=False)
    locations = {h.id: IndexLocation(h.id, h.url, h.style, "matrix") for h in matrix.hosts.values()}
    plan = make_plan(outcome, locations)
    assert [p.pin for p in plan.packages] == ["torch==2.7.0+cpu", "torchvision==0.22.0+cpu", "torchaudio==2.7.0+cpu"]
    assert {p.location.host_id for p in plan.packages} == {"pytorch-cpu"}
    assert plan.package(Component.TORCHVISION).distribution == "torchvision"
