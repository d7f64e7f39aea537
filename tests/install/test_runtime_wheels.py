"""The runtime wheels (oneccl-cpu, impi-rt) in the bundled matrix: each release's Requires-Dist and layout as read from
PyPI on 2026-12-07 (data/matrix.toml [[runtime]], [[unavailable]]), what pip ends up with for a requirement on them
(matrix/runtime.py), and how resolve / check -r / install say it. No network: the facts are the matrix's."""

from __future__ import annotations

import json

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from compatmatrix.environment.oneccl_layouts import LAYOUTS, NO_LIBFABRIC, runtime_layout
from compatmatrix.errors import MatrixError
from compatmatrix.matrix.load import parse_matrix
from compatmatrix.matrix.runtime import choice_sentence, install_words, pip_choice

from ..conftest import ROOT, run_compat


def _release(matrix, name, version):
    return next(r for r in matrix.runtime if r.distribution == name and r.version == Version(version))


def test_the_matrix_holds_each_release_with_its_declared_dependencies(matrix):
    assert _release(matrix, "impi-rt", "2021.19.0").requires == ("libfabric>=2.6",)
    assert _release(matrix, "oneccl-cpu", "2022.2.0").requires == ("libfabric>=2.6",)
    assert _release(matrix, "oneccl-cpu", "2022.1.2").requires == ("impi-rt>=2021.18",)
    assert _release(matrix, "oneccl-cpu", "2021.14.1").requires == ("impi-rt==2021.14.*",)
    assert _release(matrix, "impi-rt", "2021.18.1").requires == ()
    gone = {u.project: u for u in matrix.unavailable}
    assert gone["libfabric"].checked == "2026-12-07" and gone["libfabric"].provenance.sources == ("https://pypi.org/simple/libfabric/",)


def test_the_layout_table_agrees_with_the_matrix_per_release(matrix):
    """environment/oneccl_layouts.LAYOUTS (what the checks read without a matrix) says what [[runtime]] says, 2021.19 too."""
    for row in LAYOUTS:
        entry = _release(matrix, "impi-rt", row.release)
        assert (row.libfabric, row.providers, row.mpi_root) == (entry.libfabric, entry.providers, entry.mpi_root), row
    assert _release(matrix, "impi-rt", "2021.19.0").libfabric == NO_LIBFABRIC


@pytest.mark.parametrize("asked, picked, passed", [
    ("oneccl-cpu", ["oneccl-cpu 2022.1.2", "impi-rt 2021.18.1"], ["oneccl-cpu 2022.2.0", "impi-rt 2021.19.0"]),
    ("impi-rt", ["impi-rt 2021.18.1"], ["impi-rt 2021.19.0"]),
    ("oneccl-cpu==2022.1.2", ["oneccl-cpu 2022.1.2", "impi-rt 2021.18.1"], ["impi-rt 2021.19.0"]),
    ("oneccl-cpu==2021.14.1", ["oneccl-cpu 2021.14.1", "impi-rt 2021.14.2"], []),
    ("impi-rt==2021.19.0", [], ["impi-rt 2021.19.0"]),
    ("oneccl-cpu==2022.2.0", [], ["oneccl-cpu 2022.2.0"]),
])
def test_pip_passes_over_the_releases_whose_dependencies_no_index_has(matrix, asked, picked, passed):
    choice = pip_choice(matrix, Requirement(asked))
    assert [f"{r.distribution} {r.version}" for r in choice.picked] == picked
    assert [f"{p.release.distribution} {p.release.version}" for p in choice.passed] == passed


def test_the_sentences_name_the_fallback_and_the_refusal(matrix):
    said = choice_sentence(matrix, pip_choice(matrix, Requirement("oneccl-cpu")))
    assert said == ("oneccl-cpu: pip installs oneccl-cpu 2022.1.2 and impi-rt 2021.18.1, quietly passing over the newer oneccl-cpu 2022.2.0 and impi-rt 2021.19.0: "
                    "each declares libfabric>=2.6, which no configured index has (https://pypi.org/simple/libfabric/: no such project on pypi, checked 2026-12-07)")
    refused = choice_sentence(matrix, pip_choice(matrix, Requirement("impi-rt==2021.19.0")))
    assert refused.startswith("impi-rt==2021.19.0 cannot be installed: impi-rt 2021.19.0 declares libfabric>=2.6") and refused.endswith("impi-rt==2021.18.1")
    assert choice_sentence(matrix, pip_choice(matrix, Requirement("impi-rt==2021.18.1"))) is None
    assert install_words(matrix, "impi-rt") == "impi-rt==2021.18.1" and install_words(matrix, "oneccl-cpu") == "oneccl-cpu==2022.1.2"


def test_resolve_says_the_fallback_and_install_refuses_the_unsatisfiable_pin(tmp_path):
    open_file = tmp_path / "open.txt"
    open_file.write_text("torch==2.13.0\noneccl-cpu\n")
    done = run_compat("resolve", "--profile", "stock", "--python-version", "3.11", "-r", str(open_file))
    assert done.returncode == 0, done.stderr
    assert "oneccl-cpu: pip installs oneccl-cpu 2022.1.2 and impi-rt 2021.18.1, quietly passing over the newer" in done.stdout
    pinned = tmp_path / "pinned.txt"
    pinned.write_text("torch==2.13.0\nimpi-rt==2021.19.0\n")
    done = run_compat("install", "--dry-run", "--profile", "stock", "--python-version", "3.11", "-r", str(pinned))
    assert done.returncode == 2 and "impi-rt==2021.19.0 cannot be installed: impi-rt 2021.19.0 declares libfabric>=2.6" in done.stderr
    assert "Pin impi-rt==2021.18.1 in its place" in done.stderr
    done = run_compat("check", "--json", "--python-version", "3.11", "-r", str(pinned))
    head = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "input.files")
    assert done.returncode == 1 and head["status"] == "fail" and "impi-rt==2021.19.0 cannot be installed" in head["summary"]


def test_an_installed_impi_rt_2021_19_has_no_layout(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "lib" / "python3.11" / "site-packages" / "impi_rt-2021.19.0.dist-info").mkdir(parents=True)
    (prefix / "lib" / "libfabric.so.1").write_bytes(b"not the wheel's")  # even a stray file at the old place is not taken for it
    assert runtime_layout(str(prefix)) is None


@pytest.mark.parametrize("entry, problem", [
    ('distribution = "impi-rt"\nversion = "1.0"\nrequires = ["libfabric >=>2"]\nreleased = "2026-10-16"\nsource = "x"', "is not a PEP 508 requirement"),
    ('distribution = "impi-rt"\nversion = "1.0"\nreleased = "16.10.2026"\nsource = "x"', "is not a date"),
    ('distribution = "impi-rt"\nversion = "1.0"\nreleased = "2026-10-16"\nlibfabric = "../x"\nsource = "x"', "is not a folder inside the environment"),
])
def test_a_bad_runtime_entry_is_named(entry, problem):
    text = (ROOT / "data" / "matrix.toml").read_text() + f"\n[[runtime]]\n{entry}\n"
    with pytest.raises(MatrixError) as raised:
        parse_matrix(text, "m.toml")
    assert problem in str(raised.value)


def test_intel_openmp_is_a_runtime_wheel_with_its_declared_dependency(matrix, tmp_path):
    """intel-openmp (libiomp5), added as a runtime component: each release from 2024.2.0 pins the same intel-cmplr-lib-ur (read from its
    wheel's METADATA), which PyPI has, so pip takes the newest; -r files pass it on without a word; migrate keeps it."""
    from compatmatrix.matrix.model import RUNTIME_COMPONENTS
    from compatmatrix.migrate.plan import REMOVED

    assert _release(matrix, "intel-openmp", "2026.2.0").requires == ("intel-cmplr-lib-ur==2026.2.0",)
    assert _release(matrix, "intel-openmp", "2025.3.3").provenance.sources[0] == "https://pypi.org/simple/intel-openmp/"
    choice = pip_choice(matrix, Requirement("intel-openmp"))
    # the intel-cmplr-lib-ur it pins is a runtime component too (below): pip installs the pair
    assert [f"{r.distribution} {r.version}" for r in choice.picked] == ["intel-openmp 2026.2.0", "intel-cmplr-lib-ur 2026.2.0"] and choice.passed == ()
    assert choice_sentence(matrix, choice) is None and install_words(matrix, "intel-openmp") == "intel-openmp==2026.2.0"
    assert len([r for r in matrix.runtime if r.distribution == "intel-openmp"]) == 49  # every Linux x86_64 release: a pin of any installs
    assert [f"{r.distribution} {r.version}" for r in pip_choice(matrix, Requirement("intel-openmp==2018.0.0")).picked] == ["intel-openmp 2018.0.0"]
    assert RUNTIME_COMPONENTS["intel-openmp"].migrate == "keep" and "intel-openmp" not in REMOVED
    pins = tmp_path / "pins.txt"
    pins.write_text("torch==2.13.0\nintel-openmp==2026.1.2\n")
    done = run_compat("check", "--json", "--python-version", "3.11", "-r", str(pins))
    head = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "input.files")
    assert head["status"] != "fail" and "intel-openmp" not in head["summary"], head


def test_intel_cmplr_lib_ur_is_the_runtime_wheel_intel_openmp_pins(matrix, tmp_path):
    """intel-cmplr-lib-ur (the Unified Runtime loader), added as a runtime component by its record and its data alone: every
    Linux x86_64 release PyPI's JSON API lists (24, none yanked; read 2026-12-07), each with the Requires-Dist its wheel's
    METADATA writes (a umf series from 2025.0.0, which is not followed). Every intel-openmp pin from 2024.2.0 now pulls in
    the release it pins, and an -r file with the pair passes; migrate keeps it as it keeps intel-openmp."""
    from compatmatrix.matrix.model import RUNTIME_COMPONENTS
    from compatmatrix.migrate.plan import REMOVED

    releases = [r for r in matrix.runtime if r.distribution == "intel-cmplr-lib-ur"]
    assert len(releases) == 24 and str(releases[0].version) == "2026.2.0" and str(releases[-1].version) == "2024.2.0"
    assert _release(matrix, "intel-cmplr-lib-ur", "2026.2.0").requires == ("umf==1.2.*",)
    assert _release(matrix, "intel-cmplr-lib-ur", "2025.0.0").requires == ("umf==0.9",)
    assert _release(matrix, "intel-cmplr-lib-ur", "2024.2.3").requires == ()
    assert _release(matrix, "intel-cmplr-lib-ur", "2025.3.3").provenance.sources[0] == "https://pypi.org/pypi/intel-cmplr-lib-ur/json"
    for openmp in (r for r in matrix.runtime if r.distribution == "intel-openmp" and r.requires):  # 2024.2.0 and later
        picked = pip_choice(matrix, Requirement(f"intel-openmp=={openmp.version}")).picked
        assert [f"{r.distribution} {r.version}" for r in picked] == [f"intel-openmp {openmp.version}", f"intel-cmplr-lib-ur {openmp.version}"]
    choice = pip_choice(matrix, Requirement("intel-cmplr-lib-ur"))  # umf is no runtime component: passed on, not followed
    assert [f"{r.distribution} {r.version}" for r in choice.picked] == ["intel-cmplr-lib-ur 2026.2.0"] and choice.passed == ()
    assert install_words(matrix, "intel-cmplr-lib-ur") == "intel-cmplr-lib-ur==2026.2.0"
    assert RUNTIME_COMPONENTS["intel-cmplr-lib-ur"].migrate == "keep" and "intel-cmplr-lib-ur" not in REMOVED
    pins = tmp_path / "pins.txt"
    pins.write_text("torch==2.13.0\nintel-openmp==2026.1.2\nintel-cmplr-lib-ur==2026.1.2\n")
    done = run_compat("check", "--json", "--python-version", "3.11", "-r", str(pins))
    head = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "input.files")
    assert head["status"] != "fail" and "intel-cmplr-lib-ur" not in head["summary"], head
    pins.write_text("torch==2.13.0\nintel-openmp==2026.1.2\nintel-cmplr-lib-ur==2026.1.3\n")  # a release PyPI never had
    done = run_compat("check", "--json", "--python-version", "3.11", "-r", str(pins))
    head = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "input.files")
    assert head["status"] == "fail" and "intel-cmplr-lib-ur" in head["summary"], head
