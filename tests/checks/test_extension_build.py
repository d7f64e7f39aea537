"""packages.extension-build and packages.cuda-build on FIXTURE site folders: synthetic ELF files (tests/test_system_oneccl's
builder) whose DT_NEEDED copy what the real wheels link, with dist-info RECORD files listing them. The DT_NEEDED lists
are those `readelf -d` shows for the real files (read 2026-12-07): PyPI's torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl
(uploaded 2026-10-28): torchaudio/lib/_torchaudio.so links libc10.so libtorch.so libtorch_cpu.so libcudart.so.13
libc10_cuda.so libtorch_cuda.so. The real environment is in tests/checks/test_doctor_real.py. No process, no network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from compatmatrix.checks.builds import extension_build
from compatmatrix.checks.packages import cuda_build
from compatmatrix.checks.registry import Context
from compatmatrix.environment.extensions import installed_extensions, torch_build
from compatmatrix.environment.from_pins import snapshot_from_pins
from compatmatrix.environment.snapshot import Distribution
from compatmatrix.findings import Status
from compatmatrix.record import replace

from ..environment.test_system_oneccl import _synthetic_elf

CPU_TORCH_LIBS = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so")
CUDA_AUDIO = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so", "libstdc++.so.6", "libc.so.6")
CPU_AUDIO = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libstdc++.so.6", "libc.so.6")


def _elf(path: Path, needed) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_synthetic_elf(64, True, needed=tuple(needed), soname=path.name))


class Site:
    """A FIXTURE site-packages folder: dist-info folders (METADATA, RECORD) and synthetic ELF extensions."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.dists: list[Distribution] = []

    def dist(self, name: str, version: str, files: dict[str, tuple[str, ...]], record: bool = True) -> "Site":
        for relative, needed in files.items():
            _elf(self.root / relative, needed)
        info = self.root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
        if record:
            (info / "RECORD").write_text("".join(f"{r},sha256=x,{(self.root / r).stat().st_size}\n" for r in files) + f"{info.name}/RECORD,,\n")
        self.dists.append(Distribution(name=name, canonical=name.lower().replace("_", "-"), raw_version=version, path=str(info), site=str(self.root)))
        return self

    def torch(self, version: str = "2.13.0+cpu", cuda_major: str = "") -> "Site":
        libs = {f"torch/lib/{n}": ("libc.so.6",) for n in CPU_TORCH_LIBS}
        if cuda_major:
            libs.update({"torch/lib/libc10_cuda.so": (f"libcudart.so.{cuda_major}", "libc10.so"),
                         "torch/lib/libtorch_cuda.so": (f"libcudart.so.{cuda_major}", "libc10_cuda.so", "libc10.so")})
        return self.dist("torch", version, libs)

    def context(self, matrix) -> Context:
        base = snapshot_from_pins({}, Version("3.11"), _platform(), "fixture")
        return Context(matrix, replace(base, executable="/env/bin/python", purelib=str(self.root), distributions=tuple(self.dists)))


def _platform():
    from compatmatrix.target import probed_platform

    return probed_platform("linux_x86_64", "glibc", "2.35")


def test_pypi_torchaudio_next_to_a_cpu_torch_fails_naming_file_library_and_fix(tmp_path, matrix):
    site = Site(tmp_path / "site").torch("2.13.0+cpu").dist("torchaudio", "2.11.1", {
        "torchaudio/lib/_torchaudio.so": CUDA_AUDIO, "torchaudio/lib/libtorchaudio.so": CUDA_AUDIO})
    finding = extension_build(site.context(matrix))
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("torchaudio 2.11.1 is a CUDA build (its _torchaudio.so links libc10_cuda.so), but torch 2.13.0+cpu is a CPU build: "
                                      "import torchaudio fails (OSError: Could not load this library: ")
    assert f"{tmp_path}/site/torchaudio/lib/_torchaudio.so links libc10_cuda.so, libtorch_cuda.so, libcudart.so.13 (DT_NEEDED)" in finding.evidence[0]
    assert finding.fix.startswith("/env/bin/python -m pip install torchaudio==2.11.1+cpu --index-url https://download.pytorch.org/whl/cpu")


def test_a_matching_cpu_build_passes(tmp_path, matrix):
    site = Site(tmp_path / "site").torch("2.13.0+cpu").dist("torchaudio", "2.11.1+cpu", {"torchaudio/lib/_torchaudio.so": CPU_AUDIO})
    finding = extension_build(site.context(matrix))
    assert finding.status is Status.PASS, finding
    assert "torchaudio 2.11.1+cpu: 1 native file(s) (listed by RECORD)" in finding.evidence


def test_a_cuda_extension_of_another_cuda_major_fails(tmp_path, matrix):
    site = Site(tmp_path / "site").torch("2.13.0+cu130", cuda_major="13").dist("torchvision", "0.28.0+cu126", {
        "torchvision/_C.so": ("libc10.so", "libtorch.so", "libcudart.so.12", "libc10_cuda.so")})
    finding = extension_build(site.context(matrix))
    assert finding.status is Status.FAIL
    assert finding.summary == "torchvision 0.28.0+cu126 is built for CUDA 12, torch 2.13.0+cu130 for CUDA 13: import torchvision fails"


def test_a_cpu_companion_next_to_a_cuda_torch_warns_and_a_cpu_ipex_does_not(tmp_path, matrix):
    site = Site(tmp_path / "site").torch("2.8.0", cuda_major="12").dist("torchvision", "0.23.0+cpu", {"torchvision/_C.so": CPU_AUDIO})
    finding = extension_build(site.context(matrix))
    assert finding.status is Status.WARN and "is a CPU build next to torch 2.8.0, a CUDA build: it imports" in finding.summary
    site = Site(tmp_path / "site2").torch("2.8.0", cuda_major="12").dist("intel_extension_for_pytorch", "2.8.0", {
        "intel_extension_for_pytorch/lib/libintel-ext-pt-cpu.so": CPU_AUDIO})
    assert extension_build(site.context(matrix)).status is Status.PASS


def test_an_environment_of_metadata_only_is_judged_by_labels_as_its_pins_are(tmp_path, matrix):
    """No torch/lib folder (dist-info entries only, as compat check -r's twin environment in test_real_inputs): the labels decide."""
    site = Site(tmp_path / "site").dist("torch", "2.13.0+cpu", {}).dist("torchaudio", "2.11.1+cu130", {})
    finding = extension_build(site.context(matrix))
    assert finding.status is Status.FAIL and finding.summary.startswith("torchaudio 2.11.1+cu130 is a CUDA build, torch 2.13.0+cpu a CPU build")
    assert finding.evidence[-1].endswith("torch/lib is not there: judged by the versions' local labels")


def test_without_record_the_package_folder_is_read(tmp_path):
    site = Site(tmp_path / "site").dist("torchaudio", "2.11.1", {"torchaudio/lib/_torchaudio.so": CUDA_AUDIO}, record=False)
    found = installed_extensions(site.dists[0].path, str(site.root), "torchaudio")
    assert found.listed_by == "the package folder" and [e.devices for e in found.files] == [{"cuda": "libcudart.so.13"}]
    assert torch_build(str(site.root)) is None  # no torch/lib: not a build compat can name


def test_a_record_entry_outside_the_site_folder_is_not_read(tmp_path):
    site = Site(tmp_path / "site").dist("torchaudio", "2.11.1", {"torchaudio/lib/_torchaudio.so": CUDA_AUDIO})
    _elf(tmp_path / "elsewhere.so", CUDA_AUDIO)
    record = Path(site.dists[0].path) / "RECORD"
    record.write_text(record.read_text() + "../elsewhere.so,,\n")
    assert [Path(e.path).name for e in installed_extensions(site.dists[0].path, str(site.root), "torchaudio").files] == ["_torchaudio.so"]


@pytest.mark.parametrize("pins, status, text", [
    ({"torch": "2.13.0+cpu", "torchaudio": "2.11.1+cu130"}, Status.FAIL, "torchaudio 2.11.1+cu130 is a CUDA build, torch 2.13.0+cpu a CPU build"),
    ({"torch": "2.13.0+cpu", "torchaudio": "2.11.1+cpu"}, Status.PASS, "the same build as torch 2.13.0+cpu"),
    # issue 30 review: labels compared as builds (one rule with the environment path: checks/builds.judge_build)
    ({"torch": "2.13.0+cu130", "torchvision": "0.28.0+cpu"}, Status.WARN, "torchvision 0.28.0+cpu is a CPU build next to torch 2.13.0+cu130, a CUDA 13.0 build"),
    ({"torch": "2.13.0+cu130", "torchvision": "0.28.0+cu126"}, Status.FAIL, "torchvision 0.28.0+cu126 is built for CUDA 12, torch 2.13.0+cu130 for CUDA 13"),
    ({"torch": "2.13.0+cu126", "torchvision": "0.28.0+cu130"}, Status.FAIL, "torchvision 0.28.0+cu130 is built for CUDA 13, torch 2.13.0+cu126 for CUDA 12"),
    ({"torch": "2.13.0+cu128", "torchvision": "0.28.0+cu126"}, Status.PASS, "the same build as torch 2.13.0+cu128"),
    ({"torch": "2.13.0+cu130", "torchvision": "0.28.0+cu130"}, Status.PASS, "the same build as torch 2.13.0+cu130"),
    ({"torch": "2.13.0+xpu", "torchvision": "0.28.0+cu130"}, Status.FAIL, "torchvision 0.28.0+cu130 is a CUDA build, torch 2.13.0+xpu another build"),
    # no label: the matrix records PyPI's torchaudio 2.11.1 as the CUDA build (data/matrix.toml, build = "cuda")
    ({"torch": "2.13.0+cpu", "torchaudio": "2.11.1"}, Status.FAIL, "torchaudio 2.11.1 (no local label: PyPI's build, which links CUDA) is a CUDA build, torch 2.13.0+cpu a CPU build"),
    # no label and no recorded build: a WARN that says nothing was compared, never a PASS
    ({"torch": "2.13.0+cpu", "torchaudio": "2.10.0"}, Status.WARN, "torchaudio 2.10.0: no local label to compare with torch 2.13.0+cpu: PyPI's build of torchaudio 2.10.0 may be CUDA"),
])
def test_pins_are_judged_by_their_labels(matrix, pins, status, text):
    snapshot = snapshot_from_pins(pins, Version("3.11"), _platform(), "requirements.txt")
    finding = extension_build(Context(matrix, snapshot))
    assert finding.status is status and text in finding.summary


def test_an_unlabelled_pin_under_the_files_cpu_index_is_its_cpu_build(matrix, tmp_path):
    """A file that names the PyTorch CPU index: pip takes torchaudio 2.11.1+cpu there (a local version sorts above PyPI's
    2.11.1), so PyPI's recorded CUDA build does not apply; the same pin without the index still fails."""
    from compatmatrix.checks.registry import Options

    snapshot = snapshot_from_pins({"torch": "2.13.0+cpu", "torchaudio": "2.11.1"}, Version("3.11"), _platform(), "requirements.txt")
    finding = extension_build(Context(matrix, snapshot, Options(cpu_index=True)))
    assert finding.status is Status.PASS, finding
    assert "the files name the PyTorch CPU index, where pip takes torchaudio 2.11.1+cpu" in finding.summary + " ".join(finding.evidence)
    wanted = tmp_path / "requirements.txt"
    for index, code in (("--extra-index-url https://download.pytorch.org/whl/cpu\n", 0), ("", 1)):
        wanted.write_text(f"{index}torch==2.13.0+cpu\ntorchaudio==2.11.1\n")
        done = subprocess.run([sys.executable, "-m", "compatmatrix", "check", "-r", str(wanted), "--python-version", "3.11", "--only",
                               "packages.extension-build", "--json"], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == code, (index, done.stdout[-2000:], done.stderr[-2000:])


def test_a_cuda_torch_pin_is_never_passed_silently(matrix):
    """compat check -r with torch==2.13.0+cu130 (no Intel package): a WARN with the +cpu fix, not a PASS."""
    snapshot = snapshot_from_pins({"torch": "2.13.0+cu130"}, Version("3.11"), _platform(), "requirements.txt")
    finding = cuda_build(Context(matrix, snapshot))
    assert finding.status is Status.WARN and finding.summary.startswith("torch 2.13.0+cu130 is a CUDA build")
    assert "pip install torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu" in finding.fix


def test_a_cuda_torch_in_an_environment_warns_with_the_nvidia_packages_size(tmp_path, matrix):
    site = Site(tmp_path / "site").torch("2.8.0", cuda_major="12").dist("nvidia_cudnn_cu12", "9.10.2.21", {"nvidia/cudnn/lib/libcudnn.so.9": ("libc.so.6",)})
    finding = cuda_build(site.context(matrix))
    assert finding.status is Status.WARN and "in 1 nvidia-* package(s) that a CPU node does not use" in finding.summary
    assert "sizes: the size column of each package's RECORD" in finding.evidence
    bare = Site(tmp_path / "bare").torch("2.8.0", cuda_major="12")  # no nvidia-* package left: torch's own libtorch_cuda.so says it
    assert cuda_build(bare.context(matrix)).summary == "torch 2.8.0 is a CUDA build: torch's own CUDA libraries that a CPU node does not use"


def test_a_record_s_sizes_are_summed_and_a_size_that_is_not_ascii_digits_is_passed_over(tmp_path):
    """distribution_bytes reads the size column of a RECORD it shares with the extension listing (_record_rows): a
    hostile size ('²' is a digit to str.isdigit, not to int) is passed over, never a traceback."""
    from compatmatrix.environment.extensions import _record_paths, distribution_bytes

    dist = tmp_path / "x-1.dist-info"
    dist.mkdir()
    assert distribution_bytes(str(dist)) is None and _record_paths(str(dist)) is None
    (dist / "RECORD").write_text("x/_C.so,sha256=a,100\nx/__init__.py,sha256=b,\u00b2\nx/y.py,,20\nx-1.dist-info/RECORD,,\n", encoding="utf-8")
    assert distribution_bytes(str(dist)) == 120
    assert _record_paths(str(dist)) == ["x/_C.so"]


def test_a_label_of_no_known_build_is_not_taken_for_a_cpu_build(matrix):
    from compatmatrix.checks.builds import label_build

    assert label_build("cpu") == (frozenset(), None, None)
    assert label_build("cu130") == (frozenset({"cuda"}), "13", "0")
    assert label_build("cu92") == (frozenset({"cuda"}), "9", "2")
    assert label_build("rocm6.4") == (frozenset({"rocm"}), None, None)
    assert label_build("gitabc123") is None and label_build(None) is None


def test_the_cpu_fix_for_an_unlabelled_cuda_pin_names_the_cpu_index(matrix):
    snapshot = snapshot_from_pins({"torch": "2.13.0+cpu", "torchaudio": "2.11.1"}, Version("3.11"), _platform(), "requirements.txt")
    finding = extension_build(Context(matrix, snapshot))
    assert finding.fix.startswith("pip install torchaudio==2.11.1+cpu --index-url https://download.pytorch.org/whl/cpu"), finding
