"""What the matrix's sources say, and only that: pairing evidence, device builds, glibc/ISA floors, known-bad sets,
the IPEX guard's real text, and the loader's checks of the keys that carry them (docs/MATRIX.md).

Facts asserted here are the real matrix's (data/matrix.toml, sourced from /tmp/matrix_audit.md at curation); the
broken matrices are the FIXTURE mini matrix with one edit each."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from packaging.version import Version

from compatmatrix.checks.crash import classify
from compatmatrix.devices import device_build
from compatmatrix.errors import MatrixError, UsageError
from compatmatrix.matrix import parse_matrix
from compatmatrix.matrix.model import EVIDENCE, PAIRING_LEVELS, PAIRING_RANK, Component
from compatmatrix.resolve import resolve
from compatmatrix.search import Conflict, Resolution
from compatmatrix.target import Platform

from ..conftest import FIXTURES, ROOT, make_request, run_compat

T, IPEX, CCL, TV, TA = Component.TORCH, Component.IPEX, Component.CCL, Component.TORCHVISION, Component.TORCHAUDIO
MINI = (FIXTURES / "mini_matrix.toml").read_text()
RESOLVE_SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "resolve-v1.json").read_text())


def versions(outcome):
    assert isinstance(outcome, Resolution), getattr(outcome, "reasons", outcome)
    return {c.distribution: str(p.version) for c, p in outcome.picks.items()}


# --- pairings: the data -----------------------------------------------------------------------------------------


def test_every_oneccl_release_pairs_built_for_with_its_torch_and_cites_every_other_level(matrix):
    counts = {level: 0 for level in ("built-for", *PAIRING_LEVELS)}
    for release in matrix.releases[CCL]:
        assert release.pairing_with(release.torch).evidence == "built-for"
        counts["built-for"] += 1
        for pairing in release.pairings:
            assert pairing.evidence in PAIRING_LEVELS and pairing.provenance.sources and pairing.provenance.note
            assert pairing.torch.release[:2] == release.torch.release[:2] != ()
            assert release.pairing_with(pairing.torch) == pairing
            counts[pairing.evidence] += 1
    assert counts == {"built-for": 13, "reported-working": 4, "documented-break": 1}
    assert set(PAIRING_RANK) | set(PAIRING_LEVELS) <= set(EVIDENCE)


@pytest.mark.parametrize(
    "ccl, torch, evidence, source",
    [
        ("2.5.0", "2.5.1", "reported-working", "intel/neural-compressor@2bb04d0d1c258aa589e2594684bc04d0b5687a3d:.azure-pipelines/scripts/install_nc.sh"),
        ("2.0.0", "2.0.1", "reported-working", "https://github.com/intel/torch-ccl/issues/53"),
        ("2.7.0", "2.7.1", "reported-working", "intel/neural-compressor@8b36ccb698c0a332ae6413843865dd4d331a5569:.azure-pipelines/scripts/install_nc.sh"),
        ("2.1.0", "2.1.1", "reported-working", "intel/intel-extension-for-pytorch@v2.1.100+cpu:dependency_version.yml"),
        ("1.12.0", "1.12.1", "documented-break", "intel/torch-ccl@v1.12.0:README.md"),
        ("1.13.0", "1.13.1", "unverified", None),  # cloudtik/llm-on-ray pins, not reports: not recorded
        ("1.12.100", "1.12.0", "unverified", None),
        ("2.7.0", "2.7.0", "built-for", "intel/torch-ccl@v2.7.0+cpu:README.md"),
    ],
)
def test_pairing_levels_and_their_sources(matrix, ccl, torch, evidence, source):
    pairing = matrix.ccl_release(Version(ccl)).pairing_with(Version(torch))
    assert pairing.evidence == evidence
    assert (source in pairing.provenance.sources) if source else pairing.provenance.sources == ()


def test_the_inferred_report_is_marked_unverified(matrix):
    pairing = matrix.ccl_release(Version("2.7.0")).pairing_with(Version("2.7.1"))
    assert not pairing.provenance.verified and "oneccl version inferred" in pairing.provenance.note


def test_another_major_minor_is_no_pairing_at_all(matrix):
    assert matrix.ccl_release(Version("2.7.0")).pairing_with(Version("2.8.0")) is None
    outcome = resolve(matrix, make_request(matrix, "3.11", "torch==2.8.0", "oneccl_bind_pt==2.7.0"))
    assert isinstance(outcome, Conflict)
    assert outcome.reasons[0].startswith("oneccl_bind_pt 2.7.0 is built for torch 2.7.0 and pairs only with torch 2.7.*")


def test_resolve_json_carries_the_evidence_of_each_pairing(matrix):
    done = run_compat("resolve", "--json", "--python-version", "3.10", "torch==2.5.1", "ccl")
    data = json.loads(done.stdout)
    jsonschema.validate(data, RESOLVE_SCHEMA)
    assert data["pairings"]["oneccl-bind-pt"] == {
        "torch": "2.5.1", "evidence": "reported-working", "verified": True,
        "sources": ["intel/neural-compressor@2bb04d0d1c258aa589e2594684bc04d0b5687a3d:.azure-pipelines/scripts/install_nc.sh",
                    "intel/neural-compressor@2b4c824964d2f4bf542f0a5f77d472ae2df94ff0:.azure-pipelines/scripts/install_nc.sh"],
    }
    assert data["known_bad"] == []
    assert any("reported working by" in n and "nearest verified (built-for) pairing: torch 2.5.0 with oneccl_bind_pt 2.5.0" in n for n in data["notes"])
    bad = json.loads(run_compat("resolve", "--json", "--python-version", "3.10", "torch==2.1.0", "ccl").stdout)
    jsonschema.validate(bad, RESOLVE_SCHEMA)
    assert [(k["torch"], k["package"], k["version"], k["status"]) for k in bad["known_bad"]] == [("2.1.0", "oneccl-bind-pt", "2.1.0", "open")]
    assert "https://github.com/intel/torch-ccl/issues/53" in bad["known_bad"][0]["sources"]


# --- device builds ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "component, version, device, cpu",
    [
        (CCL, "2.5.0+xpu", "XPU", "2.5.0"),  # the same number exists as a CPU build: only the label tells them apart
        (CCL, "2.7.0+xpu", "XPU", "2.7.0"),
        (CCL, "2.0.100", "GPU", None),  # GPU by number: there is no CPU 2.0.100
        (CCL, "2.1.400+xpu", "XPU", None),
        (IPEX, "2.1.10", "XPU", None),
        (IPEX, "2.3.110.post0+xpu", "XPU", None),
        (IPEX, "1.10.200", "GPU", None),
        (IPEX, "2.7.10+xpu", "XPU", None),
        (T, "2.3.1+cxx11.abi", "XPU", "2.3.1"),
        (T, "2.1.0.post3", "XPU", None),
        (T, "1.13.0a0", "XPU", None),
        (T, "2.7.0+xpu", "XPU", "2.7.0"),
        (TV, "0.16.0a0", "XPU", None),
        (TA, "2.3.1+cxx11.abi", "XPU", "2.3.1"),
    ],
)
def test_device_builds(matrix, component, version, device, cpu):
    build = device_build(matrix, component, Version(version))
    assert build is not None and build.device == device and build.sources
    assert build.cpu_release == (Version(cpu) if cpu else None)


@pytest.mark.parametrize(
    "component, version",
    [(CCL, "2.5.0"), (CCL, "2.5.0+cpu"), (IPEX, "1.12.200"), (IPEX, "2.1.100+cpu"), (T, "2.3.1+cpu"), (T, "2.3.1+cpu.cxx11.abi"), (T, "2.7.0")],
)
def test_cpu_builds_are_not_device_builds(matrix, component, version):
    assert device_build(matrix, component, Version(version)) is None


def test_a_pinned_device_build_is_refused_in_one_sentence(matrix):
    with pytest.raises(UsageError) as caught:
        make_request(matrix, "3.10", "oneccl_bind_pt==2.5.0+xpu")
    assert caught.value.message == "oneccl_bind_pt 2.5.0+xpu is an XPU build; compatmatrix covers the CPU stack."
    assert caught.value.fix.startswith("The CPU release of that number is oneccl_bind_pt 2.5.0: pin oneccl_bind_pt==2.5.0")
    with pytest.raises(UsageError) as caught:
        make_request(matrix, "3.10", "intel-extension-for-pytorch==2.1.10")
    assert caught.value.message == "intel-extension-for-pytorch 2.1.10 is an XPU build; compatmatrix covers the CPU stack."
    assert "the CPU releases of the 2.1 series are 2.1.100, 2.1.0" in caught.value.fix
    assert make_request(matrix, "3.10", "oneccl_bind_pt==2.5.0+cpu").specifiers  # the CPU build is fine
    assert make_request(matrix, "3.10", "oneccl_bind_pt!=2.5.0+xpu") is not None  # only a pin names one build


def test_a_pinned_device_build_exits_2_on_the_command_line():
    done = run_compat("resolve", "--python-version", "3.10", "oneccl_bind_pt==2.5.0+xpu")
    assert done.returncode == 2
    assert "oneccl_bind_pt 2.5.0+xpu is an XPU build; compatmatrix covers the CPU stack" in done.stderr
    assert "Traceback" not in done.stderr


def test_device_builds_are_never_in_the_matrix_as_cpu_releases(matrix):
    for entry in matrix.device_builds:
        assert entry.provenance.sources and (entry.labels or entry.versions)
        assert not entry.versions & set(matrix.versions(entry.component))
        assert "+cpu" not in entry.labels


# --- compat check: device builds, evidence, known-bad sets ------------------------------------------------------


def _check(tmp_path, build, *only):
    from ..checks.test_doctor import compat_json
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env")
    build(env)
    checks, _ = compat_json("check", env.python, *(arg for check_id in only for arg in ("--only", check_id)))
    return checks


def test_an_installed_xpu_set_fails_and_is_not_judged_as_the_cpu_release(tmp_path):
    def xpu_set(env):
        env.torch("2.7.0+xpu")
        env.dist("intel-extension-for-pytorch", "2.7.10+xpu")
        env.dist("oneccl-bind-pt", "2.7.0+xpu")

    checks = _check(tmp_path, xpu_set, "packages")
    assert checks["packages.torch-installed"]["status"] == "fail"
    assert checks["packages.torch-installed"]["summary"] == "torch 2.7.0+xpu is an XPU build; compatmatrix covers the CPU stack"
    assert checks["packages.ipex-torch"]["status"] == "fail"
    assert checks["packages.ipex-torch"]["summary"] == "intel-extension-for-pytorch 2.7.10+xpu is an XPU build; compatmatrix covers the CPU stack"
    assert checks["packages.ccl-torch"]["status"] == "fail"
    assert checks["packages.ccl-torch"]["summary"] == "oneccl_bind_pt 2.7.0+xpu is an XPU build; compatmatrix covers the CPU stack"
    assert "pin oneccl_bind_pt==2.7.0" in checks["packages.ccl-torch"]["fix"]


def test_xpu_bindings_next_to_a_cpu_torch_fail(tmp_path):
    checks = _check(tmp_path, lambda env: env.torch("2.5.0+cpu").dist("oneccl-bind-pt", "2.5.0+xpu"), "packages.ccl-torch", "packages.python-support")
    assert checks["packages.ccl-torch"]["status"] == "fail"
    assert checks["packages.ccl-torch"]["summary"] == "oneccl_bind_pt 2.5.0+xpu is an XPU build; compatmatrix covers the CPU stack"
    assert checks["packages.python-support"]["status"] == "skip"


@pytest.mark.parametrize(
    "torch, status, text",
    [
        ("2.1.0+cpu", "warn", "torch 2.1.0 with oneccl_bind_pt 2.1.0 is a known-bad set, reported failing: DDP with the ccl backend fails"),
        ("2.1.1+cpu", "pass", "no known-bad set"),
    ],
)
def test_known_bad_sets_warn_with_their_source(tmp_path, torch, status, text):
    checks = _check(tmp_path, lambda env: env.torch(torch).bindings("2.1.0"), "packages.known-bad", "packages.ccl-torch")
    finding = checks["packages.known-bad"]
    assert finding["status"] == status and finding["summary"].startswith(text)
    if status == "warn":
        assert "https://github.com/intel/torch-ccl/issues/53" in finding["summary"]
        assert checks["packages.ccl-torch"]["status"] == "pass"  # built for it: the pairing itself is fine
    else:
        assert checks["packages.ccl-torch"]["status"] == "warn" and "reported working by" in checks["packages.ccl-torch"]["summary"]


@pytest.mark.parametrize("torch, status", [("1.12.0", "warn"), ("1.12.0+cpu", "pass")])
def test_known_bad_set_of_one_torch_build(tmp_path, torch, status):
    checks = _check(tmp_path, lambda env: env.torch(torch).bindings("1.12.0"), "packages.known-bad")
    assert checks["packages.known-bad"]["status"] == status
    if status == "warn":
        assert "torch 1.12.0 (its unlabelled PyPI build) with oneccl_bind_pt 1.12.0 is a known-bad set" in checks["packages.known-bad"]["summary"]
        assert "https://github.com/intel/torch-ccl/issues/37" in checks["packages.known-bad"]["summary"]


# --- floors: glibc ----------------------------------------------------------------------------------------------


def test_glibc_floor_comes_from_the_platform_tag():
    assert Platform.from_tag("manylinux2014_x86_64").glibc == Version("2.17")
    assert Platform.from_tag("manylinux_2_28_x86_64").glibc == Version("2.28")
    assert Platform.from_tag("manylinux1_x86_64").glibc == Version("2.5")
    assert Platform.from_tag("linux_x86_64").glibc is None
    assert Platform.from_tag("linux_x86_64").with_glibc("2.31").glibc == Version("2.31")
    assert Platform.from_tag("musllinux_1_2_x86_64").with_glibc("2.31").glibc is None


def test_ipex_2_6_and_later_are_manylinux_2_28_only(matrix):
    for release in matrix.releases[IPEX]:
        pypi = next((w for w in release.wheels if w.host == "pypi"), None)
        if pypi is not None:
            assert pypi.glibc_min == (Version("2.28") if release.version >= Version("2.6") else Version("2.17")), release.version


@pytest.mark.parametrize("python", ["3.9", "3.11", "3.13"])
def test_manylinux2014_never_gets_ipex_2_6_or_later(matrix, python):
    old = Platform.from_tag("manylinux2014_x86_64")
    outcome = resolve(matrix, make_request(matrix, python, profile="ipex", platform=old))
    if isinstance(outcome, Resolution):
        assert outcome.picks[IPEX].version < Version("2.6")
    else:
        assert any("need a newer glibc than manylinux2014_x86_64 has (glibc 2.17; pypi: glibc >= 2.28" in r for r in outcome.reasons)
    new = resolve(matrix, make_request(matrix, python, profile="ipex", platform=Platform.from_tag("manylinux_2_28_x86_64")))
    assert versions(new)["intel-extension-for-pytorch"] == "2.8.0"


def test_manylinux2014_on_the_command_line():
    done = run_compat("resolve", "--json", "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--profile", "ipex")
    data = json.loads(done.stdout)
    jsonschema.validate(data, RESOLVE_SCHEMA)
    # not 2.6-2.8 (manylinux_2_28 only); 2.0.0-2.5.0 run on glibc 2.17 but PyPI yanked them for security (yanked on
    # every host for compat): no set for 3.11, the pin that would work named
    assert done.returncode == 1 and not data["ok"]
    text = "\n".join(data["explanation"])
    assert ("intel-extension-for-pytorch 2.6.0's wheels for this Python need a newer glibc than manylinux2014_x86_64 has "
            "(glibc 2.17; pypi: glibc >= 2.28; intel-cpu-us: glibc >= 2.28)") in text
    assert "intel-extension-for-pytorch 2.5.0 is yanked on pypi (for security.)" in text


def test_an_unknown_glibc_is_named_not_held_against_the_wheel(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11", profile="ipex", platform=Platform.from_tag("linux_x86_64")))
    assert versions(outcome)["intel-extension-for-pytorch"] == "2.8.0"
    assert any(n.startswith("intel-extension-for-pytorch 2.8.0 from pypi needs glibc >= 2.28; the platform linux_x86_64 does not say which glibc") for n in outcome.notes)


# --- floors: ISA ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, level",
    [("1.10.0", "avx512"), ("1.10.100", "avx512"), ("1.11.0", "avx2"), ("1.11.200", "avx2"), ("1.12.0", "avx512"), ("1.12.100", "avx2"), ("2.8.0", "avx2")],
)
def test_isa_floor_per_release(matrix, version, level):
    floor = matrix.ipex_release(Version(version)).isa_min
    assert floor.level == level and floor.provenance.sources and floor.provenance.note


@pytest.mark.parametrize(
    "python, expected",
    [("3.7", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0"}),
     ("3.8", {"torch": "1.10.0", "intel-extension-for-pytorch": "1.10.0", "oneccl-bind-pt": "1.10.0"})],
)
def test_the_old_pythons_never_get_a_build_yanked_for_security(matrix, python, expected):
    """Python 3.7/3.8: every IPEX newer than 1.10.0 is yanked on PyPI "for security."; Intel's hosts serve the same
    builds unmarked, but a security yank holds on every host: the default is the 1.10.0 stack (AVX-512 only, said so),
    and the answer names the yanked releases and the pin that takes one anyway."""
    outcome = resolve(matrix, make_request(matrix, python))
    assert {k: v for k, v in versions(outcome).items() if k in expected} == expected
    assert any(n.startswith("newer intel-extension-for-pytorch releases (1.10.100 to ") and "(for security.)" in n for n in outcome.notes)
    assert any("intel-extension-for-pytorch 1.10.0 needs a CPU with AVX-512" in n for n in outcome.notes)


def test_an_avx512_only_pick_says_so(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.6", profile="ddp-ccl-legacy"))
    assert versions(outcome)["intel-extension-for-pytorch"] == "1.10.0"  # 1.10.100: yanked on PyPI for security
    assert any(n.startswith("intel-extension-for-pytorch 1.10.0 needs a CPU with AVX-512 (avx512f, avx512bw, avx512vl, avx512dq): "
                            "it does not run on CPUs without them (source: intel/intel-extension-for-pytorch@v1.10.0:docs/tutorials/installation.md")
               for n in outcome.notes)


def test_no_isa_note_for_avx2_releases(matrix):
    outcome = resolve(matrix, make_request(matrix, "3.11"))
    assert not any("needs a CPU with" in n for n in outcome.notes)


# --- labels and hosts -------------------------------------------------------------------------------------------


def test_labels_and_hosts_per_the_sources(matrix):
    for release in matrix.releases[IPEX]:
        for wheels in release.wheels:
            if wheels.host in ("intel-whl-stable-software", "intel-whl-stable", "intel-whl-stable-cpu") and release.version >= Version("1.10"):
                assert wheels.local_label == "+cpu", (release.version, wheels.host)
            if wheels.host == "pypi":
                assert wheels.local_label == ""
    hosts = lambda v: {w.host for w in matrix.ipex_release(Version(v)).wheels}  # noqa: E731
    assert hosts("1.11.100") == {"pypi"} and hosts("1.12.200") == {"pypi"}  # no document lists them on an Intel host
    assert hosts("1.12.300") == {"pypi", "intel-whl-stable-cpu"}
    assert "intel-whl-stable-cpu" in hosts("2.3.0")
    for version in ("1.10.0", "1.11.0"):
        (wheels,) = matrix.ccl_release(Version(version)).wheels
        assert wheels.local_label == "" and not wheels.provenance.verified
    cn = matrix.hosts["intel-cpu-cn"]
    assert cn.mirror_of == "intel-cpu-us" and set(cn.documented_for) == {IPEX, CCL} and not cn.provenance.verified
    assert all("intel-cpu-cn" not in order for order in matrix.policy.host_preference.values())
    audio = next(w for w in matrix.release(TA, Version("2.0.0")).wheels if w.host == "pypi")
    assert (audio.yanked, audio.yanked_reason) == (True, "Contains an incorrect torch dependency")
    assert all("Intel(R) Extension" not in r.provenance.note for r in matrix.releases[IPEX] if r.version >= Version("2.6"))


# --- the IPEX import guard's real text (audit §7) ---------------------------------------------------------------

GUARD_2_1 = ("ERROR! Intel\u00ae Extension for PyTorch* needs to work with PyTorch       2.1.*, but PyTorch 2.2.0+cpu is found. "
             "Please switch to the matching version           and run again.")
GUARD_ONE_SPACE = "ERROR! Intel\u00ae Extension for PyTorch* needs to work with PyTorch 2.1.*, but PyTorch 2.2.0+cpu is found. Please switch to the matching version and run again."
GUARD_CPP = ("ERROR! Intel\u00ae Extension for PyTorch* needs to work with PyTorch/libtorch 2.1.*, but PyTorch/libtorch 2.2.0 is found. "
             "Please switch to the matching version and run again.")
GUARD_R = "ERROR! Intel(R) Extension for PyTorch* needs to work with PyTorch 2.8.*, but PyTorch 2.9.0+cpu is found. Please switch to the matching version and run again."


@pytest.mark.parametrize(
    "text, series, found",
    [(GUARD_2_1, "2.1.*", "2.2.0+cpu"), (GUARD_ONE_SPACE, "2.1.*", "2.2.0+cpu"), (GUARD_CPP, "2.1.*", "2.2.0"), (GUARD_R, "2.8.*", "2.9.0+cpu")],
    ids=["2.1.x-spacing", "one-space", "cpp-libtorch", "intel-r"],
)
def test_guard_message_in_every_spelling(text, series, found):
    verdict = classify(127, text + "\n", "", False, "intel_extension_for_pytorch")
    assert verdict.kind == "ipex-guard"
    assert verdict.summary == f"IPEX's version check refused torch {found}: it needs PyTorch {series}"
    assert verdict.detail == (f"IPEX printed its 'needs to work with PyTorch {series}' message and exited with status 127",)
    wrapped = classify(127, "", text.replace(" 2.1.*", "\n2.1.*"), False, "intel_extension_for_pytorch")  # split across lines
    assert wrapped.kind == "ipex-guard"


# --- the loader: every new key is checked, and errors name file, entry and field --------------------------------


def _broken(old: str, new: str) -> str:
    assert old in MINI, old
    return MINI.replace(old, new, 1)


CCL_1_12_0 = 'version = "1.12.0"\ndistribution = "oneccl-bind-pt"'
PAIRING = '\n[[oneccl_bind_pt.pairing]]\ntorch = "{torch}"\nevidence = "{evidence}"\nsource = "fixture"\n'


def _with_pairing(torch: str, evidence: str) -> str:
    return MINI + PAIRING.format(torch=torch, evidence=evidence)  # attaches to the last [[oneccl_bind_pt]] (1.12.0)


@pytest.mark.parametrize(
    "text, message",
    [
        (_with_pairing("1.12.1", "works-for-me"), r"\[\[oneccl_bind_pt\]\] 1\.12\.0 > pairing #1, field 'evidence': 'works-for-me' is not one of reported-working, documented-break"),
        (_with_pairing("1.12.0", "reported-working"), r"pairing #1, field 'torch': 1\.12\.0 is the torch this release is built for"),
        (_with_pairing("1.12.7", "reported-working"), r"pairing #1, field 'torch': 1\.12\.7 is not a torch release in the matrix"),
        (_with_pairing("1.12.1", "unverified"), r"field 'evidence': 'unverified' is not one of"),
        (_broken('host = "pypi"\npython = ["3.8", "3.9", "3.10"]\nsource = "fixture"', 'host = "pypi"\npython = ["3.8", "3.9", "3.10"]\nglibc_min = "2_28"\nsource = "fixture"'),
         r"\[\[torch\]\] 1\.12\.1 > wheels #1, field 'glibc_min': '2_28' is not a glibc version of the form 2\.X"),
        (_broken('guard = "exit127"', 'guard = "exit127"\nisa_min = { level = "sse4", source = "fixture" }'),
         r"\[\[ipex\]\] 1\.12\.100 > isa_min, field 'level': 'sse4' is not one of avx2, avx512"),
        (_broken('guard = "exit127"', 'guard = "exit127"\nisa_min = { level = "avx2" }'), r"\[\[ipex\]\] 1\.12\.100 > isa_min, field 'source': is required"),
        (MINI + '\n[[known_bad]]\ntorch = "1.12.0"\npackage = "oneccl-bind-pt"\nversion = "1.12.9"\nfailure = "x"\nstatus = "open"\nsource = "fixture"\n',
         r"\[\[known_bad\]\] torch 1\.12\.0 \+ oneccl-bind-pt 1\.12\.9, field 'version': 1\.12\.9 is not a oneccl-bind-pt release"),
        (MINI + '\n[[known_bad]]\ntorch = "1.12.0"\npackage = "oneccl-bind-pt"\nversion = "1.12.0"\nfailure = "x"\nstatus = "fixed?"\nsource = "fixture"\n',
         r"field 'status': 'fixed\?' is not one of open, closed, unresolved"),
        (MINI + '\n[[known_bad]]\ntorch = "1.12.0"\npackage = "transformers"\nversion = "4.30.2"\nfailure = "x"\nstatus = "open"\nsource = "fixture"\n',
         r"field 'package': 'transformers' is not a binary package that pairs with torch"),
        (MINI + '\n[[device_build]]\npackage = "oneccl-bind-pt"\ndevice = "XPU"\nversions = ["1.12.100"]\nsource = "fixture"\n',
         r"\[\[device_build\]\] oneccl-bind-pt, field 'versions': 1\.12\.100 is a CPU release of oneccl-bind-pt in the matrix"),
        (MINI + '\n[[device_build]]\npackage = "oneccl-bind-pt"\ndevice = "XPU"\nlabels = ["xpu"]\nsource = "fixture"\n',
         r"field 'labels': 'xpu' is not a local label like \"\+xpu\""),
        (MINI + '\n[[device_build]]\npackage = "oneccl-bind-pt"\ndevice = "NPU"\nlabels = ["+xpu"]\nsource = "fixture"\n', r"field 'device': 'NPU' is not one of XPU, GPU"),
        (MINI + '\n[[device_build]]\npackage = "oneccl-bind-pt"\ndevice = "XPU"\nsource = "fixture"\n', r"field 'labels': is empty, and so is 'versions'"),
        (_broken('style = "find-links"', 'style = "find-links"\nmirror_of = "intel-cn"'), r"\[hosts\.intel\], field 'mirror_of': 'intel-cn' is not another host"),
        (_broken(CCL_1_12_0, CCL_1_12_0 + '\ntorch_also = ["1.12.1"]'), r"\[\[oneccl_bind_pt\]\] 1\.12\.0, field 'torch_also': is not a known key"),
    ],
    ids=["bad-evidence", "built-for-as-pairing", "unknown-torch", "unverified-is-the-default", "bad-glibc", "bad-isa", "isa-without-source",
         "known-bad-unknown-version", "known-bad-status", "known-bad-library", "device-build-is-cpu-release", "device-label", "device-kind",
         "device-build-empty", "mirror-of-unknown", "torch-also-is-gone"],
)
def test_new_keys_are_checked_naming_entry_and_field(text, message):
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, path="broken.toml")
    assert caught.value.message.startswith("broken.toml")
    assert re.search(message, caught.value.message), caught.value.message


def test_a_pairing_across_series_is_refused_with_the_rule():
    text = MINI + '\n[[torch]]\nversion = "1.13.0"\nsource = "fixture"\n[[torch.wheels]]\nhost = "pypi"\npython = ["3.10"]\nsource = "fixture"\n'
    # a pairing belongs to the [[oneccl_bind_pt]] entry before it: a fresh entry, built for 1.12.0, that claims 1.13.0
    text += ('\n[[oneccl_bind_pt]]\nversion = "1.11.0"\ndistribution = "oneccl-bind-pt"\nmodule = "torch_ccl"\ntorch = "1.12.0"\nhas_cwd = true\n'
             'setvars = "env/setvars.sh"\nsource = "fixture"\n[[oneccl_bind_pt.wheels]]\nhost = "intel"\npython = ["3.10"]\nsource = "fixture"\n'
             + PAIRING.format(torch="1.13.0", evidence="reported-working"))
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, path="broken.toml")
    assert "field 'torch': 1.13.0 is not of the 1.12 series this release is built for" in caught.value.message
    assert "rule ccl-torch-series" in caught.value.fix
