"""The loader: the real matrix loads; every kind of broken matrix fails naming the entry and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from compatmatrix.errors import MatrixError
from compatmatrix.matrix import load_matrix, parse_matrix
from compatmatrix.matrix.load import bundled_matrix_text
from compatmatrix.matrix.model import COMPONENT_ORDER, Component

from ..conftest import FIXTURES, ROOT, run_compat

MINI = (FIXTURES / "mini_matrix.toml").read_text()


def test_bundled_matrix_is_the_repo_matrix():
    assert bundled_matrix_text() == (ROOT / "data" / "matrix.toml").read_text()


def test_real_matrix_loads_and_covers_the_issue_scope(matrix):
    ipex = {str(r.version) for r in matrix.releases[Component.IPEX]}
    ccl = {str(r.version) for r in matrix.releases[Component.CCL]}
    assert {"1.8.0", "1.10.100", "1.11.200", "1.12.300", "1.13.100", "2.0.100", "2.1.100", "2.3.100", "2.8.0"} <= ipex
    assert {"1.10.0", "1.11.0", "1.12.0", "1.12.100", "1.13.0", "2.0.0", "2.7.0"} <= ccl
    assert matrix.ccl_release(Version("1.12.0")).torch == Version("1.12.0")
    assert matrix.ccl_release(Version("1.12.100")).torch == Version("1.12.1")
    assert matrix.ccl_release(Version("1.11.0")).module == "torch_ccl"
    assert matrix.ccl_release(Version("1.12.0")).module == "oneccl_bindings_for_pytorch"
    assert matrix.ipex_release(Version("2.8.0")).guard == "os_exit"
    assert {e.package for e in matrix.eol} == {"intel-extension-for-pytorch", "oneccl-bind-pt"}
    assert {"ddp-ccl", "ipex", "ccl", "stock"} <= set(matrix.profiles)


def test_every_fact_carries_a_source(matrix):
    releases = [r for c in COMPONENT_ORDER for r in matrix.releases[c]]
    entries = [*releases, *matrix.features, *matrix.eol]
    entries += [w for r in releases for w in r.wheels]
    entries += [p for r in releases for p in getattr(r, "pairings", ())]  # reported-working / documented-break pairings
    entries += [r.isa_min for r in releases if getattr(r, "isa_min", None) is not None]
    entries += [*matrix.known_bad, *matrix.device_builds, *matrix.hosts.values()]
    assert all(e.provenance.sources and all(s.strip() for s in e.provenance.sources) for e in entries)
    # unverified facts say why
    assert all(e.provenance.note for e in entries if not e.provenance.verified)


def test_pairings_point_at_real_releases(matrix):
    torch = {r.version for r in matrix.releases[Component.TORCH]}
    pinned = (Component.IPEX, Component.CCL, Component.TORCHVISION, Component.TORCHAUDIO)
    # a companion release whose METADATA declares no torch (torchaudio 2.11.0) has none: it pairs unverified with any
    assert all(r.torch in torch for c in pinned for r in matrix.releases[c] if r.torch is not None)
    assert all(r.torch is not None for c in (Component.IPEX, Component.CCL) for r in matrix.releases[c])


def _broken(old: str, new: str, count: int = 1) -> str:
    assert old in MINI, old
    return MINI.replace(old, new, count)


BROKEN = [
    pytest.param(_broken('guard = "exit127"', 'guard = "exit127"\ntorch_accept = "==1.12.*"'), r"\[\[ipex\]\] 1\.12\.100, field 'torch_accept': is not a known key", id="unknown-key"),
    pytest.param(_broken('version = "1.12.100"\ndistribution = "oneccl-bind-pt"', 'version = "1.12.x"\ndistribution = "oneccl-bind-pt"'), r"\[\[oneccl_bind_pt\]\] 1\.12\.x, field 'version': '1\.12\.x' is not a valid PEP 440 version", id="bad-version"),
    pytest.param(_broken('torch = "1.12.1"\nhas_cwd', 'torch = "1.12.9"\nhas_cwd'), r"\[\[oneccl_bind_pt\]\] 1\.12\.100, field 'torch': 1\.12\.9 is not a torch release in the matrix", id="pairing-to-missing-torch"),
    pytest.param(_broken('host = "intel"\npython = ["3.8", "3.9", "3.10"]\nlocal_label = "+cpu"', 'host = "intel-old"\npython = ["3.8", "3.9", "3.10"]\nlocal_label = "+cpu"'), r"field 'host': 'intel-old' is not a host defined under \[hosts\]", id="unknown-host"),
    pytest.param(_broken('[[torch]]\nversion = "1.12.0"', '[[torch]]\nversion = "1.12.1"'), r"\[\[torch\]\] 1\.12\.1, field 'version': appears twice", id="duplicate-release"),
    pytest.param(_broken('python = ["3.8", "3.9", "3.10"]\nsource = "fixture"', 'python = ["3.8", "3.9", "py3.10"]\nsource = "fixture"'), r"field 'python': 'py3\.10' is not a CPython version", id="bad-python"),
    pytest.param(_broken('torch_accepts = "==1.12.*"', 'torch_accepts = "=>1.12"'), r"field 'torch_accepts': '=>1\.12' is not a valid PEP 440 specifier", id="bad-specifier"),
    pytest.param(_broken('torch_accepts = "==1.12.*"', 'torch_accepts = "==1.13.*"'), r"field 'torch_accepts': ==1\.13\.\* does not accept torch 1\.12\.0", id="guard-rejects-own-torch"),
    pytest.param(_broken('yanked = ["4.30.2"]', 'yanked = ["4.30.9"]'), r"\[\[transformers\]\] 4\.30, field 'yanked': 4\.30\.9 is not listed", id="yanked-not-a-release"),
    pytest.param(_broken('versions = ["4.30.2", "4.30.1", "4.30.0"]', 'versions = ["4.31.0", "4.30.1"]'), r"field 'versions': 4\.31\.0 does not belong to the 4\.30 line", id="version-outside-line"),
    pytest.param(_broken('components = ["torch", "transformers", "accelerate"]', 'components = ["torch", "deepspeed"]'), r"\[profiles\.stock\], field 'components': 'deepspeed' is not a component", id="unknown-component"),
    pytest.param(_broken('features_with_ccl = ["transformers:ddp_backend_ccl", "accelerate:ccl_backend"]', 'features_with_ccl = ["transformers:ccl_magic"]'), r"\[policy\], field 'features_with_ccl': 'transformers:ccl_magic' names no \[\[feature\]\]", id="unknown-feature"),
    pytest.param(_broken('last_release = "1.12.100"', 'last_release = "1.12.200"'), r"\[\[eol\]\] oneccl-bind-pt, field 'last_release': 1\.12\.200 is not a oneccl-bind-pt release", id="eol-unknown-release"),
    pytest.param(_broken('[[accelerate]]\nline = "0.20"\nversions = ["0.20.3", "0.20.2", "0.20.1"]\nrequires_python = ">=3.8"\ntorch_min = "1.6"\nsource = "fixture"', '[[accelerate]]\nline = "0.20"\nversions = ["0.20.3", "0.20.2", "0.20.1"]\nrequires_python = ">=3.8"\ntorch_min = "1.6"\nsource = ""'), r"\[\[accelerate\]\] 0\.20, field 'source': is empty", id="missing-source"),
    pytest.param(_broken("schema_version = 1", "schema_version = 7"), r"field 'schema_version': is 7; this compatmatrix reads schema 1", id="schema-version"),
    pytest.param(_broken('[hosts.pypi]', '[hosts.pypi\n'), r"is not valid TOML", id="invalid-toml"),
    pytest.param(_broken('default_profile = "ddp-ccl"', 'default_profile = "turbo"'), r"field 'default_profile': 'turbo' is not a profile", id="unknown-default-profile"),
    pytest.param(_broken('style = "find-links"', 'style = "ftp"'), r"\[hosts\.intel\], field 'style': 'ftp' is not one of", id="bad-host-style"),
]


@pytest.mark.parametrize("text, message", BROKEN)
def test_broken_matrix_names_entry_and_field(text, message):
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, path="broken.toml")
    assert caught.value.message.startswith("broken.toml")
    assert re.search(message, caught.value.message), caught.value.message


def test_fixture_matrix_loads(mini_matrix):
    assert [str(r.version) for r in mini_matrix.releases[Component.CCL]] == ["1.12.100", "1.12.0"]


def test_broken_matrix_on_the_command_line_exits_2(tmp_path: Path):
    broken = tmp_path / "matrix.toml"
    broken.write_text(_broken('torch = "1.12.1"\nhas_cwd', 'torch = "1.12.9"\nhas_cwd'))
    done = run_compat("resolve", "--matrix", str(broken), "--python-version", "3.10")
    assert done.returncode == 2
    assert "field 'torch': 1.12.9 is not a torch release in the matrix" in done.stderr
    assert done.stderr.count("\n") == 1  # one sentence plus the fix, no traceback


def test_missing_matrix_file_exits_2(tmp_path: Path):
    done = run_compat("matrix", "--matrix", str(tmp_path / "nope.toml"))
    assert done.returncode == 2
    assert "cannot be read" in done.stderr


def test_load_matrix_from_path_equals_bundled(matrix):
    assert load_matrix(ROOT / "data" / "matrix.toml") == matrix


def test_parsed_matrix_cache(tmp_path, monkeypatch):
    from compatmatrix.matrix import load as loader

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("COMPAT_NO_CACHE", raising=False)
    source = tmp_path / "matrix.toml"
    source.write_text(MINI)
    first = load_matrix(source)
    (cached,) = (tmp_path / "compatmatrix").glob("matrix-*.json")
    assert load_matrix(source) == first
    cached.write_bytes(b"not a pickle")  # a damaged cache is ignored and rewritten
    assert load_matrix(source) == first
    assert cached.read_bytes() != b"not a pickle"
    source.write_text(MINI.replace('registry_checked = "fixture"', 'registry_checked = "changed"'))
    assert load_matrix(source).registry_checked == "changed"  # the key follows the text
    broken = tmp_path / "broken.toml"
    broken.write_text(_broken("schema_version = 1", "schema_version = 7"))
    with pytest.raises(MatrixError):
        load_matrix(broken)
    assert len(list((tmp_path / "compatmatrix").glob("matrix-*.json"))) == 2  # nothing cached for the broken one
    monkeypatch.setenv("COMPAT_NO_CACHE", "1")
    assert loader.cache_dir() is None


@pytest.mark.parametrize("name", ["Oneccl_Bind.PT", "intel_extension_for_pytorch", "torch", "A-_.b"])
def test_canonical_name_matches_packaging(name):
    from packaging.utils import canonicalize_name

    from compatmatrix.names import canonical_name

    assert canonical_name(name) == canonicalize_name(name)


VISION = '\n[[torchvision]]\nversion = "0.13.1"\ntorch = "1.12.1"\npython = ["3.8", "3.9"]\nsource = "fixture"\n'
VISION_PREFERENCE = ('accelerate = ["pypi"]\n', 'accelerate = ["pypi"]\ntorchvision = ["pypi"]\n')


def test_companion_short_form_is_its_pypi_wheels():
    matrix = parse_matrix(_broken(*VISION_PREFERENCE) + VISION, path="vision.toml")
    (release,) = matrix.releases[Component.TORCHVISION]
    (wheels,) = release.wheels
    assert (release.torch, release.distribution, wheels.host, wheels.local_label) == (Version("1.12.1"), "torchvision", "pypi", "")
    assert wheels.python == {Version("3.8"), Version("3.9")} and wheels.provenance == release.provenance
    assert matrix.releases[Component.TORCHAUDIO] == ()


@pytest.mark.parametrize(
    "text, message",
    [
        (MINI + VISION, r"\[policy\.host_preference\], field 'torchvision': is required but missing"),
        (_broken(*VISION_PREFERENCE) + VISION.replace('torch = "1.12.1"', 'torch = "1.12.9"'),
         r"\[\[torchvision\]\] 0\.13\.1, field 'torch': 1\.12\.9 is not a torch release in the matrix"),
        (_broken(*VISION_PREFERENCE) + VISION + '[[torchvision.wheels]]\nhost = "pypi"\npython = ["3.8"]\nsource = "fixture"\n',
         r"\[\[torchvision\]\] 0\.13\.1, field 'python': is given next to \[\[torchvision\.wheels\]\]"),
    ],
    ids=["missing-host-preference", "pairing-to-missing-torch", "python-and-wheels"],
)
def test_broken_companion_names_entry_and_field(text, message):
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, path="broken.toml")
    assert re.search(message, caught.value.message), caught.value.message
