"""compat matrix update --health against a LOCAL PEP 691 index on 127.0.0.1 (tests/fixture_index.py) serving FIXTURE wheels
whose METADATA, Requires-Python, yank reasons and upload times are the ones RECORDED FROM PyPI ON 2026-12-07
(https://pypi.org/simple/<project>/ and each wheel's METADATA): impi-rt 2021.19.0 and oneccl-cpu 2022.2.0 declare
`Requires-Dist: libfabric (>=2.6)`, PyPI has no libfabric (404); oneccl-cpu 2022.1.2 declares `impi-rt (>=2021.18)`;
torchvision 0.29.2 declares Requires-Python `>=3.10,!=3.14.1` (0.26.0: `!=3.14.1,>=3.10`); torchaudio 2.0.0 is yanked
("Contains an incorrect torch dependency"). The same command against PyPI itself is in docs/MATRIX.md (run by hand)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from compatmatrix.matrix.health import hole_versions, requires_dist
from compatmatrix.render import schema_path

from ..conftest import run_compat
from ..fixture_index import FixtureIndex, build_wheel, serve

RUNTIME_TAG = "py2.py3-none-manylinux_2_28_x86_64"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recorded")
    index = FixtureIndex(folder)
    pypi = folder / "pypi"
    wheels = {
        "impi-rt-19": build_wheel(pypi, "impi_rt", "2021.19.0", tag=RUNTIME_TAG, requires=("libfabric (>=2.6)",)),
        "impi-rt-18": build_wheel(pypi, "impi_rt", "2021.18.1", tag=RUNTIME_TAG),
        "ccl-22": build_wheel(pypi, "oneccl_cpu", "2022.2.0", tag=RUNTIME_TAG, requires=("libfabric (>=2.6)",)),
        "ccl-21": build_wheel(pypi, "oneccl_cpu", "2022.1.2", tag=RUNTIME_TAG, requires=("impi-rt (>=2021.18)",)),
        "vision-2": build_wheel(pypi, "torchvision", "0.29.2", tag="py3-none-manylinux_2_28_x86_64", requires=("torch>=2.14.0",)),
        "vision-0": build_wheel(pypi, "torchvision", "0.26.0", tag="cp311-cp311-manylinux_2_28_x86_64", requires=("torch==2.11.0",)),
        "audio": build_wheel(pypi, "torchaudio", "2.0.0", tag="cp311-cp311-manylinux2014_x86_64", requires=("torch (==2.0.0)",)),
        "torch": build_wheel(pypi, "torch", "2.15.0", tag="cp311-cp311-manylinux_2_28_x86_64",
                             requires=('nvidia-cudnn-cu13==9.13.0.50; platform_system == "Linux"', "filelock")),
        "cudnn": build_wheel(pypi, "nvidia_cudnn_cu13", "9.13.0.50", tag="py3-none-manylinux_2_27_x86_64"),
        "filelock": build_wheel(pypi, "filelock", "3.20.0"),
    }
    for wheel in wheels.values():
        index.add("pypi", wheel)
    index.add("pytorch-cpu", build_wheel(folder / "cpu", "torch", "2.15.0+cpu", tag="cp311-cp311-manylinux_2_28_x86_64"))
    index.json_hosts.add("pypi")
    index.metadata_hosts.add("pypi")
    index.requires_python.update({wheels["vision-2"].name: ">=3.10,!=3.14.1", wheels["vision-0"].name: "!=3.14.1,>=3.10"})
    index.yanked[wheels["audio"].name] = "Contains an incorrect torch dependency"
    index.upload_times.update({wheels["impi-rt-19"].name: "2026-10-16T12:36:40Z", wheels["ccl-22"].name: "2026-10-16T12:36:50Z"})
    server, _ = serve(index)
    yield index
    server.shutdown()


def _health(index: FixtureIndex, *extra):
    hosts = ("pypi", "pytorch-cpu", "intel-cpu-us")
    args = [arg for host in hosts for arg in ("--index", f"{host}={index.url}/{host if host in index.hosts else 'none'}/simple")]
    done = run_compat("matrix", "update", "--health", *args, "--package", "torch", "--package", "torchvision", "--package", "torchaudio", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


def test_health_names_the_unsatisfiable_libfabric_the_hole_the_yank_and_pips_fallback(recorded, tmp_path):
    done = _health(recorded, "--json")
    document = json.loads(done.stdout)
    jsonschema.Draft202012Validator(json.loads(schema_path("matrix update --health").read_text())).validate(document)
    by_kind: dict[str, list[dict]] = {}
    for item in document["items"]:
        by_kind.setdefault(item["kind"], []).append(item)
    unsatisfiable = {(i["package"], i["versions"][0]): i for i in by_kind["unsatisfiable"]}
    assert set(unsatisfiable) == {("impi-rt", "2021.19.0"), ("oneccl-cpu", "2022.2.0")}
    assert "declares Requires-Dist: libfabric>=2.6, which none of the indexes read (pypi) can satisfy" in unsatisfiable[("impi-rt", "2021.19.0")]["summary"]
    assert any("/pypi/simple/libfabric/ (404: no such project" in s for s in unsatisfiable[("impi-rt", "2021.19.0")]["sources"])
    hole = by_kind["requires-python-hole"]
    assert [(i["package"], i["versions"]) for i in hole] == [("torchvision", ["0.26.0", "0.29.2"])]
    assert "pip refuses them on Python 3.14.1 only" in hole[0]["summary"]
    assert [(i["package"], i["versions"], "Contains an incorrect torch dependency" in i["summary"]) for i in by_kind["yanked"]] == [("torchaudio", ["2.0.0"], True)]
    fallbacks = {i["package"]: i for i in by_kind["pip-backtracks"]}
    assert fallbacks["oneccl-cpu"]["versions"] == ["2022.1.2", "2021.18.1"]
    assert fallbacks["oneccl-cpu"]["summary"].startswith("oneccl-cpu: pip installs oneccl-cpu 2022.1.2 and impi-rt 2021.18.1, quietly passing over the newer "
                                                         "oneccl-cpu 2022.2.0 and impi-rt 2021.19.0")
    builds = by_kind["host-builds-differ"]
    assert any(i["package"] == "torch" and "on pypi is a CUDA build: its METADATA requires 1 nvidia-* packages" in i["summary"] for i in builds)
    assert any(i["package"] == "torch" and "pypi: (unlabelled)" in i["summary"] and "pytorch-cpu: +cpu" in i["summary"] for i in builds)
    assert "filelock" in document["dependencies_checked"] and "libfabric" in document["dependencies_checked"]
    assert all(item["sources"] for item in document["items"])
    text = _health(recorded).stdout
    assert "unsatisfiable dependency: impi-rt 2021.19.0 declares Requires-Dist: libfabric>=2.6" in text and "source: " in text


def test_hole_versions_are_exclusions_inside_a_minor_only():
    from packaging.version import Version

    python_range = (Version("3.6"), Version("3.15"))
    assert hole_versions(">=3.10,!=3.14.1", python_range) == ["3.14.1"]
    assert hole_versions(">=2.7, !=3.0.*, !=3.1.*, !=3.4.*", python_range) == []  # whole minors, outside the range: no holes
    assert hole_versions(">=3.10,!=3.9.1", python_range) == []  # a minor the specifier excludes anyway
    assert [str(r) for r in requires_dist("Name: x\nRequires-Dist: libfabric (>=2.6)\n\nRequires-Dist: not-a-header\n")] == ["libfabric>=2.6"]


@pytest.mark.network
def test_live_pypi_names_libfabric_and_the_torchvision_hole():
    """The same against PyPI itself (about 3 s: torchvision's page, the two runtime pages, a few METADATA files by range
    requests, libfabric's 404). As of 2026-12-07; it fails the day PyPI serves a libfabric >= 2.6, which is then news."""
    done = run_compat("matrix", "update", "--health", "--json", "--package", "torchvision", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    items = json.loads(done.stdout)["items"]
    unsatisfiable = {(i["package"], i["versions"][0]) for i in items if i["kind"] == "unsatisfiable" and "libfabric>=2.6" in i["summary"]}
    assert {("impi-rt", "2021.19.0"), ("oneccl-cpu", "2022.2.0")} <= unsatisfiable
    assert any(i["kind"] == "requires-python-hole" and i["package"] == "torchvision" and "3.14.1" in i["summary"] for i in items)


def test_an_unsatisfiable_dependency_names_the_indexes_read_and_those_not_reached(matrix):
    """Review of issue 30: with pytorch-cpu and intel-cpu-us unreachable (ConnectionError), --health said "no configured
    index can satisfy libfabric" although only pypi was read. Pure: judge() on a RECORDED page set (2026-12-07)."""
    from compatmatrix.matrix.harvest import ProjectPage, RegistryFile
    from compatmatrix.matrix.health import judge

    wheel = RegistryFile("impi_rt-2021.19.0-py2.py3-none-manylinux_2_28_x86_64.whl", "https://pypi.org/files/impi_rt-2021.19.0.whl",
                         False, "", None, "2026-10-16T12:36:40Z", True)
    page = ProjectPage("pypi", "impi-rt", "https://pypi.org/simple/impi-rt/", "PEP 691 JSON", "2026-12-07T10:00:00Z", (wheel,))
    libfabric = ProjectPage("pypi", "libfabric", "https://pypi.org/simple/libfabric/", "404", "2026-12-07T10:00:00Z", ())
    metadata = {wheel.url: "Metadata-Version: 2.1\nName: impi_rt\nVersion: 2021.19.0\nRequires-Dist: libfabric (>=2.6)\n\n"}
    unread = {"pytorch-cpu": "https://download.pytorch.org/whl/cpu cannot be reached (ConnectionError)",
              "intel-cpu-us": "https://pytorch-extension.intel.com/release-whl/stable/cpu/us/ cannot be reached (ConnectionError)"}
    report = judge(matrix, [page], metadata, {"libfabric": libfabric}, unread, "2026-12-07T10:00:00Z")
    [item] = [i for i in report.items if i.kind == "unsatisfiable"]
    assert ("which none of the indexes read (pypi) can satisfy (intel-cpu-us and pytorch-cpu could not be reached): "
            "https://pypi.org/simple/libfabric/ answered 404") in item.summary, item.summary
    assert "no configured index" not in item.summary
