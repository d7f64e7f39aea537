"""compat install / download against a FIXTURE package index on 127.0.0.1 (tests/fixture_index.py).

Real pip, real venvs, real HTTP; FIXTURE wheels named like the real packages, in versions that
mirror real pairs (torch 1.12.0/1.12.1 with oneccl_bind_pt 1.12.0/1.12.100 on a find-links page of
the 1.12 era; the 2.7 stack on the index hosts of its era).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..clean_env import base_env
from ..conftest import pyenv_python
from ..fixture_envs import SETVARS_SOURCE
from ..fixture_index import CCL_SOURCE, TORCH_DISTRIBUTED_SOURCE, TORCH_SOURCE, FixtureIndex, build_wheel, serve

pytestmark = pytest.mark.integration

RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the venvs the tests install into are the running Python's


def cpython_tag(minor_version: str, platform: str) -> str:
    cp = "cp" + minor_version.replace(".", "")
    return f"{cp}-{cp}-{platform}"


@functools.lru_cache(maxsize=None)
def legacy_python():
    """(interpreter, X.Y) of a Python that torch 1.12.1 and oneccl_bind_pt 1.12.100 were published for (the matrix: 3.7-3.10):
    the running one when it is, else pyenv's; (None, None) when this machine has none."""
    from packaging.version import Version

    from compatmatrix.matrix import load_matrix

    matrix = load_matrix()
    releases = (matrix.torch_release(Version("1.12.1")), matrix.ccl_release(Version("1.12.100")))

    def published(python: str) -> bool:
        return all(any(w.has_python(Version(python)) for w in release.wheels) for release in releases)

    if published(RUNNING_PYTHON):
        return sys.executable, RUNNING_PYTHON
    for minor in ("10", "9", "8"):
        if published(f"3.{minor}") and pyenv_python(minor):
            return pyenv_python(minor), f"3.{minor}"
    return None, None


CP_HERE = cpython_tag(RUNNING_PYTHON, "manylinux_2_28_x86_64")
OTHER_PYTHON = "3.10" if RUNNING_PYTHON != "3.10" else "3.11"
CP_OTHER = cpython_tag(OTHER_PYTHON, "manylinux2014_x86_64")  # a wheel for a Python that is not the running one
CCL_FILES = {  # FIXTURE: the layout of the real bindings' wheel, without oneCCL itself
    "oneccl_bindings_for_pytorch/env/setvars.sh": SETVARS_SOURCE,
    "oneccl_bindings_for_pytorch/opt/mpi/libfabric/lib/prov/libtcp-fi.so": "FIXTURE provider",
    # FIXTURE libfabric.so where the real wheel bundles libfabric: the first bytes of this interpreter's ELF file, so the
    # loader search (compat reads an ELF's class and machine) takes it for this machine's kind; never loaded
    "oneccl_bindings_for_pytorch/opt/mpi/libfabric/lib/libfabric.so": Path(os.path.realpath(sys.executable)).read_bytes()[:64],
    "oneccl_bindings_for_pytorch/lib/.keep": "",
}


def torch_wheel(folder, version, tag):
    return build_wheel(folder, "torch", version, tag, requires=("filelock",), init_source=TORCH_SOURCE,
                       files_extra={"torch/distributed/__init__.py": TORCH_DISTRIBUTED_SOURCE})


# what the FIXTURE index below serves: compat's ddp-ccl answer for Python 3.10-3.13
FIXTURE_SET = {"torch": "2.7.0", "intel-extension-for-pytorch": "2.7.0", "oneccl-bind-pt": "2.7.0", "transformers": "5.0.0", "accelerate": "1.12.0"}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    resolved = json.loads(compat("resolve", "--json", "--python-version", RUNNING_PYTHON).stdout)
    if resolved.get("packages") != FIXTURE_SET:
        pytest.skip(f"the FIXTURE index holds the ddp-ccl set of Python 3.10-3.13; for Python {RUNNING_PYTHON} compat resolves {resolved.get('packages')}")
    wheels = tmp_path_factory.mktemp("wheels")
    fixture = FixtureIndex(tmp_path_factory.mktemp("index"))
    cp_legacy = cpython_tag(legacy_python()[1] or "3.10", "manylinux2014_x86_64")  # the 1.12 era's wheels, for the Python they were published for
    for version, tag in (("1.12.0+cpu", cp_legacy), ("1.12.1+cpu", cp_legacy), ("2.7.0+cpu", CP_HERE), ("2.8.0+cpu", CP_OTHER)):
        fixture.add("pytorch-cpu", torch_wheel(wheels / "torch" / version, version, tag))
    fixture.add("pypi", build_wheel(wheels, "filelock", "3.0.0"))
    fixture.add("pypi", build_wheel(wheels, "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch"))
    fixture.add("pypi", build_wheel(wheels, "intel-extension-for-pytorch", "2.8.0", CP_HERE, module="intel_extension_for_pytorch"))
    fixture.add("pypi", build_wheel(wheels, "transformers", "5.0.0", requires=("filelock",)))
    fixture.add("pypi", build_wheel(wheels, "accelerate", "1.12.0", requires=("torch>=2.0.0",), extra_files=3000))
    fixture.add("intel-cpu-us", build_wheel(wheels / "ccl27", "oneccl_bind_pt", "2.7.0+cpu", CP_HERE, module="oneccl_bindings_for_pytorch", init_source=CCL_SOURCE, files_extra=CCL_FILES))
    for version in ("1.12.0+cpu", "1.12.100+cpu"):
        fixture.add("intel-whl-stable", build_wheel(wheels / f"ccl{version}", "oneccl_bind_pt", version, cp_legacy, module="oneccl_bindings_for_pytorch", init_source=CCL_SOURCE, files_extra=CCL_FILES), style="find-links")
    server, _ = serve(fixture)
    yield fixture
    server.shutdown()
    server.server_close()


def make_venv(path: Path, python: str = sys.executable) -> Path:
    subprocess.run([python, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin" / "python"


@pytest.fixture
def venv_here(tmp_path):
    return make_venv(tmp_path / "venv")


def freeze(python: Path) -> list[str]:
    """pip freeze --all, names in PEP 503 form."""
    from compatmatrix.names import canonical_name

    done = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, timeout=120, check=True)
    return sorted(canonical_name(line.split("==")[0]) + "==" + line.split("==")[1] if "==" in line else line for line in done.stdout.split())


def compat(*args, env=None, timeout=600):
    full_env = base_env({"NO_COLOR": "1", **(env or {})})  # tests/clean_env.py: no COMPAT_PYTHON, COMPAT_INDEX_* ... of the CI shell
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout, env=full_env, check=False)


def test_install_the_ddp_ccl_set_from_the_hosts_of_its_era(index, venv_here):
    done = compat("install", "--python", str(venv_here), "--json", *index.index_args())
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["state"] == "installed" and data["ok"] is True
    installed = freeze(venv_here)
    for pin in ("torch==2.7.0+cpu", "intel-extension-for-pytorch==2.7.0", "oneccl-bind-pt==2.7.0+cpu", "transformers==5.0.0", "accelerate==1.12.0", "filelock==3.0.0"):
        assert pin in installed, installed
    assert not any("@ file" in line for line in installed)  # installed by name, not as direct URLs
    checks = {c["id"]: c for c in data["checks"]}
    assert checks["packages.ccl-torch"]["status"] == "pass"
    assert checks["imports.ccl"]["summary"] == "oneccl_bindings_for_pytorch imports and registers the ccl backend"
    # a second run changes nothing
    again = compat("install", "--python", str(venv_here), "--json", *index.index_args())
    assert again.returncode == 0 and json.loads(again.stdout)["changes"] == []


def test_the_1_12_trap_takes_1_12_100_from_the_find_links_page(index, tmp_path):
    # torch 1.12.1 has wheels for Python 3.7-3.10 only: an interpreter of that range is the point of this test
    python, _ = legacy_python()
    if python is None:
        pytest.skip(f"torch 1.12.1 has wheels for Python 3.7-3.10 only: the running Python is {RUNNING_PYTHON} and there is no pyenv 3.8-3.10 here")
    target = make_venv(tmp_path / "venv-legacy", python)
    done = compat("install", "--python", str(target), "torch==1.12.1", "ccl", *index.index_args())
    assert done.returncode == 0, done.stdout + done.stderr
    installed = freeze(target)
    assert "torch==1.12.1+cpu" in installed and "oneccl-bind-pt==1.12.100+cpu" in installed


def test_unreachable_index_changes_nothing(index, venv_here):
    before = freeze(venv_here)
    done = compat("install", "--python", str(venv_here), *index.index_args(), "--index", "pytorch-cpu=http://127.0.0.1:9/simple")
    assert done.returncode == 1
    assert "http://127.0.0.1:9/simple (pytorch-cpu, from --index) cannot be reached" in done.stderr
    assert "--torch-from-pypi" in done.stderr and "COMPAT_INDEX_PYTORCH_CPU" in done.stderr
    assert freeze(venv_here) == before


def test_version_without_a_wheel_for_this_python_is_refused_before_any_change(index, venv_here):
    before = freeze(venv_here)
    done = compat("install", "--python", str(venv_here), "--profile", "ipex", *index.index_args())  # torch 2.8.0: only a wheel for another Python here
    assert done.returncode == 1
    assert f"has no wheel of torch==2.8.0+cpu for Python {RUNNING_PYTHON}" in done.stderr
    assert freeze(venv_here) == before
    if legacy_python()[1] != RUNNING_PYTHON:  # the matrix knows: torch 1.12.1 has no wheels for this Python
        done = compat("install", "--python", str(venv_here), "torch==1.12.1", "ccl", *index.index_args())
        assert done.returncode == 1 and f"has no wheel for Python {RUNNING_PYTHON}" in done.stderr
        assert freeze(venv_here) == before


def test_hash_mismatch_is_refused(index, venv_here):
    before = freeze(venv_here)
    name = next(w.name for w in index.hosts["pytorch-cpu"] if "2.7.0" in w.name)
    index.corrupt.add(name)
    try:
        done = compat("install", "--python", str(venv_here), *index.index_args())
    finally:
        index.corrupt.discard(name)
    assert done.returncode == 1
    assert "does not match the sha256 its index publishes" in done.stderr
    assert freeze(venv_here) == before


def test_replacing_a_pinned_torch_needs_yes(index, venv_here, tmp_path):
    # the user installed torch 2.8.0 by hand; the ddp-ccl set needs torch 2.7.0
    mine = torch_wheel(tmp_path / "mine", "2.8.0+cpu", CP_HERE)
    subprocess.run([str(venv_here), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--find-links", str(mine.parent), "torch==2.8.0+cpu"],
                   check=True, timeout=120, capture_output=True)
    before = freeze(venv_here)
    assert "torch==2.8.0+cpu" in before
    done = compat("install", "--python", str(venv_here), *index.index_args())
    assert done.returncode == 1
    assert "would replace torch 2.8.0+cpu -> 2.7.0+cpu; refused without --yes. Nothing was changed." in done.stderr
    assert freeze(venv_here) == before
    done = compat("install", "--python", str(venv_here), "--yes", *index.index_args())
    assert done.returncode == 0, done.stderr
    assert "torch==2.7.0+cpu" in freeze(venv_here)


def test_installer_killed_midway_is_restored(index, venv_here):
    before, site, process, children = _start_and_catch_pip_writing(index, venv_here)
    for child in children:
        os.kill(child, signal.SIGKILL)
    killed = bool(children)
    out, err = process.communicate(timeout=300)
    assert killed, "pip finished before it could be killed: " + err[-500:]
    assert process.returncode == 1
    assert "killed by signal 9; the environment was restored to what it was before" in err
    assert freeze(venv_here) == before
    assert not (site / "accelerate").exists()
    assert not list(site.parent.glob(".compat-snapshot-*"))


def _start_and_catch_pip_writing(index, venv_here):
    """torch installed first; then a ddp-ccl install, caught while pip writes accelerate's 3000 files.
    Returns (freeze before, site-packages, the compat process, its child processes at that moment)."""
    base = compat("install", "--python", str(venv_here), "torch==2.7.0", *index.index_args())
    assert base.returncode == 0, base.stderr
    before = freeze(venv_here)
    site = Path(subprocess.run([str(venv_here), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "install", "--python", str(venv_here), "--profile", "ddp-ccl", *index.index_args()],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env({"NO_COLOR": "1"}))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if (site / "accelerate" / "data").is_dir():
            return before, site, process, _children(process.pid)
        time.sleep(0.005)
    return before, site, process, []


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("python", ["3.8", "3.10", "3.11", "3.12"])
def test_dry_run_and_print_match_the_resolver(python):
    resolved = json.loads(compat("resolve", "--json", "--python-version", python).stdout)
    dry = compat("install", "--dry-run", "--json", "--python-version", python)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["packages"]
    assert {name: pin.split("==")[1].split("+")[0] for name, pin in plan.items()} == resolved["packages"]
    constraints = compat("install", "--print", "constraints", "--python-version", python).stdout.splitlines()
    assert [line.split("==")[1].split("+")[0] for line in constraints[1:]] == list(resolved["packages"].values())
    command = compat("install", "--print", "pip-command", "--python-version", python).stdout
    args = shlex.split(command)
    assert args[:4] == ["pip", "install", "--index-url", "https://pypi.org/simple/"]
    for index_info in resolved["indexes"].values():
        if index_info["host"] != "pypi":
            assert index_info["url"] in args


def test_printed_requirements_install_with_plain_pip(index, venv_here):
    done = compat("install", "--print", "requirements", "--python-version", RUNNING_PYTHON, *index.index_args())
    assert done.returncode == 0, done.stderr
    assert "--hash=" not in done.stdout  # pip would then demand hashes for every dependency
    requirements = venv_here.parent.parent / "requirements.txt"
    requirements.write_text(done.stdout)
    env = {k: v for k, v in base_env().items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # only the indexes the file names
    installed = subprocess.run([str(venv_here), "-m", "pip", "install", "--quiet", "-r", str(requirements)], capture_output=True, text=True, timeout=600, env=env, check=False)
    assert installed.returncode == 0, installed.stderr
    assert {"torch==2.7.0+cpu", "oneccl-bind-pt==2.7.0+cpu", "transformers==5.0.0"} <= set(freeze(venv_here))
    refused = compat("install", "--print", "requirements", "--require-hashes", "--python-version", RUNNING_PYTHON)
    assert refused.returncode == 2 and "compat download" in refused.stderr


def test_require_hashes_refuses_a_folder_without_hashes(index, venv_here, tmp_path):
    folder = tmp_path / "ccl-folder"
    folder.mkdir()
    ccl = next(w for w in index.hosts["intel-cpu-us"])
    (folder / ccl.name).write_bytes(ccl.read_bytes())
    before = freeze(venv_here)
    done = compat("install", "--python", str(venv_here), "--require-hashes", *index.index_args(), "--index", f"intel-cpu-us={folder}")
    assert done.returncode == 1
    assert "gives no sha256 for oneccl_bind_pt-2.7.0+cpu" in done.stderr
    assert freeze(venv_here) == before


def test_download_then_install_offline(index, tmp_path):
    house = tmp_path / "wheelhouse"
    done = compat("download", "-d", str(house), "--python-version", RUNNING_PYTHON, "--platform", "manylinux_2_28_x86_64", *index.index_args())
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name.split("-")[0] for p in house.glob("*.whl"))
    assert names == ["accelerate", "filelock", "intel_extension_for_pytorch", "oneccl_bind_pt", "torch", "transformers"]
    target = make_venv(tmp_path / "offline")
    saved = dict(index.hosts)
    index.down.update(saved)  # every host now answers 503: the install must not need them
    try:
        done = compat("install", "--python", str(target), "--offline", "--wheelhouse", str(house))
    finally:
        index.down.clear()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "oneccl-bind-pt==2.7.0+cpu" in freeze(target)


def test_uv_installer_gives_the_same_result(index, venv_here):
    from compatmatrix.install.runner import uv_binary

    if uv_binary() is None:
        pytest.skip("uv is not installed (pip install uv)")
    done = compat("install", "--python", str(venv_here), "--installer", "uv", "--json", *index.index_args())
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["installer"] == "uv"
    installed = freeze(venv_here)
    assert "torch==2.7.0+cpu" in installed and "oneccl-bind-pt==2.7.0+cpu" in installed


def test_indexes_from_environment_and_config_file(index, venv_here, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[indexes]\n" + "\n".join(f'{host} = "{index.host_url(host)}"' for host in index.hosts if host != "pytorch-cpu") + "\n")
    env = {"COMPAT_CONFIG": str(config), "COMPAT_INDEX_PYTORCH_CPU": index.host_url("pytorch-cpu")}
    done = compat("install", "--python", str(venv_here), "torch==2.7.0", "--with", "ipex", env=env)
    assert done.returncode == 0, done.stderr
    assert "intel-extension-for-pytorch==2.7.0" in freeze(venv_here)


def test_compat_itself_killed_midway_leaves_a_journal_and_restore_puts_things_back(index, venv_here):
    before, site, process, installer = _start_and_catch_pip_writing(index, venv_here)
    process.kill()  # compat itself, SIGKILL: no chance to clean up
    process.communicate(timeout=60)
    assert installer, "compat finished before it could be killed"
    for pid in installer:  # the installer dies with compat (PR_SET_PDEATHSIG), it does not finish on its own
        for _ in range(200):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists(), "the installer outlived compat"
    refused = compat("install", "--python", str(venv_here), *index.index_args())
    assert refused.returncode == 1
    assert "was stopped before it finished" in refused.stderr and "--restore" in refused.stderr
    restored = compat("install", "--restore", "--python", str(venv_here))
    assert restored.returncode == 0, restored.stderr
    assert freeze(venv_here) == before
    assert not (site / "accelerate").exists()
    assert not list(site.parent.glob(".compat-snapshot-*")) and not list(site.parent.glob(".compat-install-journal.json"))
    assert compat("install", "--restore", "--python", str(venv_here)).returncode == 1  # nothing left to restore


def test_failed_verification_is_exit_1(tmp_path, venv_here):
    # FIXTURE index whose IPEX 2.7.0 dies at import the way a real version-check failure does
    wheels = tmp_path / "wheels"
    broken = FixtureIndex(tmp_path / "broken-index")
    broken.add("pytorch-cpu", torch_wheel(wheels / "torch", "2.7.0+cpu", CP_HERE))
    broken.add("pypi", build_wheel(wheels, "filelock", "3.0.0"))
    guard = "import os\nprint('ERROR! Intel(R) Extension for PyTorch* needs to work with PyTorch 2.6.*, but PyTorch 2.7.0 is found.')\nos.exit(127)\n"
    broken.add("pypi", build_wheel(wheels, "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch", init_source=guard))
    server, _ = serve(broken)
    before = freeze(venv_here)
    try:
        done = compat("install", "--python", str(venv_here), "--json", "torch==2.7.0", "--with", "ipex", *broken.index_args())
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["state"] == "restored" and data["ok"] is False  # a set that does not work is not left behind
    assert freeze(venv_here) == before
    checks = {c["id"]: c for c in data["checks"]}
    assert checks["imports.ipex"]["status"] == "fail"
    assert "module 'os' has no attribute 'exit'" in " ".join(checks["imports.ipex"]["evidence"])


def test_verification_imports_torch_once(tmp_path, venv_here):
    """The check after the install imports torch, then IPEX, in ONE child (checks/imports.py), not once per part."""
    wheels, log = tmp_path / "wheels", tmp_path / "imports.log"
    note = ("import os\nif os.environ.get('COMPAT_TEST_IMPORT_LOG'):\n"
            "    open(os.environ['COMPAT_TEST_IMPORT_LOG'], 'a').write('{part} ' + str(os.getpid()) + '\\n')\n")
    logging = FixtureIndex(tmp_path / "logging-index")
    logging.add("pytorch-cpu", build_wheel(wheels / "torch", "torch", "2.7.0+cpu", CP_HERE, requires=("filelock",), init_source=note.format(part="torch") + TORCH_SOURCE,
                                           files_extra={"torch/distributed/__init__.py": TORCH_DISTRIBUTED_SOURCE}))
    logging.add("pypi", build_wheel(wheels, "filelock", "3.0.0"))
    logging.add("pypi", build_wheel(wheels, "intel-extension-for-pytorch", "2.7.0", CP_HERE, module="intel_extension_for_pytorch",
                                    init_source=note.format(part="ipex") + "import torch\n"))
    server, _ = serve(logging)
    try:
        done = compat("install", "--python", str(venv_here), "--json", "torch==2.7.0", "--with", "ipex", *logging.index_args(),
                      env={"COMPAT_TEST_IMPORT_LOG": str(log)})
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["imports.torch"]["status"] == "pass" and checks["imports.ipex"]["status"] == "pass", checks
    seen = [line.split() for line in log.read_text().splitlines()]
    assert [part for part, _ in seen] == ["torch", "ipex"] and len({pid for _, pid in seen}) == 1, seen


def test_target_without_pip_is_planned_with_compats_own_pip(index, tmp_path):
    target = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=300)
    python = target / "bin" / "python"
    done = compat("install", "--python", str(python), "torch==2.7.0", "--installer", "uv", *index.index_args())
    assert done.returncode == 0, done.stdout + done.stderr
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "list", "--format", "freeze"], capture_output=True, text=True, timeout=120, check=True)
    assert "torch==2.7.0+cpu" in listed.stdout


def test_offline_wheelhouse_is_checked_against_its_lock(index, tmp_path):
    house = tmp_path / "house"
    assert compat("download", "-d", str(house), "--python-version", RUNNING_PYTHON, "--platform", "manylinux_2_28_x86_64", "torch==2.7.0", *index.index_args()).returncode == 0
    assert (house / "compat-wheelhouse.lock").exists()
    target = make_venv(tmp_path / "v")
    done = compat("install", "--python", str(target), "--offline", "--wheelhouse", str(house), "--require-hashes", "torch==2.7.0")
    assert done.returncode == 0, done.stdout + done.stderr
    other = make_venv(tmp_path / "v2")
    wheel = next(house.glob("filelock-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    done = compat("install", "--python", str(other), "--offline", "--wheelhouse", str(house), "torch==2.7.0")
    assert done.returncode == 1 and "does not match the wheelhouse's compat-wheelhouse.lock" in done.stderr
    assert freeze(other) == freeze(make_venv(tmp_path / "v3"))


def test_one_install_at_a_time_per_environment(index, venv_here):
    import fcntl

    site = Path(subprocess.run([str(venv_here), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    with open(site.parent / ".compat-install.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = compat("install", "--python", str(venv_here), "torch==2.7.0", *index.index_args())
    assert done.returncode == 1 and "Another compat install into" in done.stderr


def test_restore_with_a_missing_snapshot_touches_nothing(venv_here):
    site = Path(subprocess.run([str(venv_here), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    gone = site.parent / ".compat-snapshot-gone"
    (site.parent / ".compat-install-journal.json").write_text(json.dumps({"pid": 999999, "pid_start": "1", "started": 0, "root": str(gone), "folders": [[str(site), str(gone / "0-site-packages")]]}))
    before = freeze(venv_here)
    done = compat("install", "--restore", "--python", str(venv_here))
    assert done.returncode == 1 and "The snapshot to restore is incomplete" in done.stderr
    assert site.is_dir() and freeze(venv_here) == before
    assert compat("install", "--discard-snapshot", "--python", str(venv_here)).returncode == 0
