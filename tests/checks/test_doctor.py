"""compat doctor / check / env against FIXTURE environments (tests/fixture_envs.py).

Real venvs made with real interpreters; the distributions and modules in them are fixtures that
reproduce pairings and crash modes which cannot be installed on this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT, pyenv_python, run_compat
from ..fixture_envs import FixtureEnv

SCHEMA = json.loads((ROOT / "compatmatrix" / "schemas" / "findings-v1.json").read_text())
RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def clean_environ(extra=None):
    """The scrubbed base environment (tests/clean_env.py: no LD_PRELOAD, CCL_*, I_MPI_*, FI_*, OMP_*, ... of the CI shell)."""
    return base_env(extra)


def allowed_cpus() -> int:
    """The physical cores compat counts for this process (hyperthreads not counted): affinity capped by the cgroup quota,
    read by compat's own probe and counted by the plan compat launch binds by."""
    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.placement.topology import machine_from_snapshot

    return machine_from_snapshot(take_snapshot(None)).core_budget


def allowed_threads() -> int:
    """The CPUs, hyperthreads included, compat counts for this process (affinity capped by the cgroup quota)."""
    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.placement.topology import machine_from_snapshot

    return machine_from_snapshot(take_snapshot(None)).thread_budget


def cores_text(count: int) -> str:
    return f"{count} physical core" + ("" if count == 1 else "s")


def compat_json(command, python, *args, env=None, code=None, timeout=180):
    done = subprocess.run(
        [sys.executable, "-m", "compatmatrix", command, "--json", "--python", str(python), *args],
        capture_output=True, text=True, timeout=timeout, env=clean_environ(env), check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    if code is not None:
        assert done.returncode == code, json.dumps(data, indent=1)
    return {c["id"]: c for c in data["checks"]}, data


def python_or_skip(minor):
    python = pyenv_python(minor)
    if python is None:
        pytest.skip(f"no pyenv CPython 3.{minor} on this machine")
    return python


# --- the probe on old and new interpreters -------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("minor, torch, ccl, module", [
    ("6", "1.10.0", "1.10.0", "torch_ccl"),  # the oldest Python the probe supports: pyenv's 3.6, the point of this case
    (None, "2.7.0", "2.7.0", "oneccl_bindings_for_pytorch"),  # the running interpreter, whichever it is
])
def test_probe_runs_under_old_and_new_python(tmp_path, matrix, minor, torch, ccl, module):
    from packaging.version import Version

    python = python_or_skip(minor) if minor else sys.executable
    env = FixtureEnv(tmp_path / "env", python).torch(torch).bindings(ccl, module=module)
    checks, data = compat_json("check", env.python)
    assert data["python_version"].startswith(f"3.{minor}." if minor else f"{RUNNING_PYTHON}.")
    assert checks["packages.torch-installed"]["status"] == "pass"
    assert checks["packages.ccl-torch"]["status"] == "pass"
    published = any(w.has_python(Version(f"3.{minor}" if minor else RUNNING_PYTHON)) for w in matrix.ccl_release(Version(ccl)).wheels)
    assert checks["packages.python-support"]["status"] == ("pass" if published else "warn")
    assert checks["oneccl.setvars"]["status"] == "fail"  # the fixture bindings ship env/setvars.sh, not sourced


# --- pairings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "torch, ccl, status, text",
    [
        # a documented break: FAIL, with its source
        ("1.12.1", "1.12.0", "fail", "pip install oneccl_bind_pt==1.12.100"),
        ("1.12.1", "1.12.0", "fail", "does not work with torch 1.12.1: documented not to work (intel/torch-ccl@v1.12.0:README.md)"),
        ("1.12.0", "1.12.0", "pass", "oneccl_bind_pt 1.12.0 is built for torch 1.12.0"),
        ("1.12.1", "1.12.100", "pass", "oneccl_bind_pt 1.12.100 is built for torch 1.12.1"),
        # the same series without a source either way: WARN "unverified", naming the nearest verified pairing
        ("1.12.0", "1.12.100", "warn", "pip install oneccl_bind_pt==1.12.0"),
        ("1.12.0", "1.12.100", "warn", "oneccl_bind_pt 1.12.100 with torch 1.12.0: unverified"),
        ("1.13.1", "1.13.0", "warn", "oneccl_bind_pt 1.13.0 with torch 1.13.1: unverified: no source says whether this pair works"),
        ("1.13.1", "1.13.0", "warn", "pip install torch==1.13.0"),
        # reported working: WARN with its source
        ("2.0.1", "2.0.0", "warn", "oneccl_bind_pt 2.0.0 with torch 2.0.1: reported working by https://github.com/intel/torch-ccl/issues/53"),
        ("2.5.1", "2.5.0", "warn", "reported working by intel/neural-compressor@2bb04d0d1c258aa589e2594684bc04d0b5687a3d"),
        # another major.minor: FAIL (the C++ ABI differs)
        ("2.8.0", "2.7.0", "fail", "another major.minor series, whose C++ ABI differs (rule ccl-torch-series)"),
    ],
)
def test_oneccl_pairing_rules(tmp_path, torch, ccl, status, text):
    # the pairing rule reads the installed versions only: any interpreter will do (the fixture venv is the running one's);
    # the index the fix names depends on the Python (test_pairing_fix_names_the_find_links_page_of_the_1_12_era)
    env = FixtureEnv(tmp_path / "env").torch(torch).bindings(ccl)
    checks, _ = compat_json("check", env.python, "--only", "packages.ccl-torch")
    finding = checks["packages.ccl-torch"]
    assert finding["status"] == status
    assert text in " ".join([finding["summary"], finding["fix"], *finding["evidence"]])
    if status == "warn":
        assert "the nearest verified (built-for) pairing: torch " in " ".join(finding["evidence"])


def python_with_wheels_of(release):
    """An interpreter the release has published wheels for: the running one when it is, else pyenv's; None if neither."""
    from packaging.version import Version

    if any(w.has_python(Version(RUNNING_PYTHON)) for w in release.wheels):
        return sys.executable
    for minor in ("10", "9", "8", "7"):
        if any(w.has_python(Version(f"3.{minor}")) for w in release.wheels) and pyenv_python(minor):
            return pyenv_python(minor)
    return None


@pytest.mark.integration
@pytest.mark.parametrize("torch, ccl, partner", [("1.12.1", "1.12.0", "1.12.100"), ("1.12.0", "1.12.100", "1.12.0")])
def test_pairing_fix_names_the_find_links_page_of_the_1_12_era(tmp_path, matrix, torch, ccl, partner):
    """The fix names the host of the partner's wheel, which exists only for Python 3.7-3.10: a Python of that range is the point."""
    from packaging.version import Version

    python = python_with_wheels_of(matrix.ccl_release(Version(partner)))
    if python is None:
        pytest.skip(f"oneccl_bind_pt {partner} has wheels for Python 3.7-3.10 only; neither the running Python {RUNNING_PYTHON} nor a pyenv one is in that range")
    env = FixtureEnv(tmp_path / "env", python).torch(torch).bindings(ccl)
    checks, _ = compat_json("check", env.python, "--only", "packages.ccl-torch")
    assert f"pip install oneccl_bind_pt=={partner} -f https://developer.intel.com/ipex-whl-stable" in checks["packages.ccl-torch"]["fix"]


def test_ipex_pairing_names_the_guard_and_the_fix(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0").ipex("2.7.0")
    checks, _ = compat_json("check", env.python, code=1)
    finding = checks["packages.ipex-torch"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "intel-extension-for-pytorch 2.7.0 does not work with torch 2.8.0"
    assert any("module 'os' has no attribute 'exit'" in e for e in finding["evidence"])
    assert "intel-extension-for-pytorch==2.8.0" in finding["fix"]


def test_companion_pin(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0")
    env.dist("torchvision", "0.22.0")
    checks, _ = compat_json("check", env.python, "--only", "packages")
    assert checks["packages.torchvision-torch"]["status"] == "fail"
    assert checks["packages.torchvision-torch"]["fix"] == "pip install torchvision==0.23.0"


@pytest.mark.parametrize(
    "transformers, accelerate, status, text",
    [
        ("5.23.0", "1.15.0", "fail", "transformers 5.23.0 does not accept --ddp_backend ccl"),
        ("5.0.0", "1.15.0", "fail", "accelerate 1.15.0 cannot run --ddp_backend ccl"),
        ("5.0.0", "1.12.0", "pass", "transformers 5.0.0 accepts --ddp_backend ccl and accelerate 1.12.0 honours it"),
        ("4.28.1", "0.18.0", "pass", "older --xpu_backend ccl"),
        ("4.30.2", "0.29.1", "fail", "accelerate 0.29.1 cannot run --ddp_backend ccl"),
    ],
)
def test_transformers_and_accelerate_gates_for_ccl(tmp_path, transformers, accelerate, status, text):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    env.dist("transformers", transformers)
    env.dist("accelerate", accelerate)
    checks, _ = compat_json("check", env.python, "--only", "packages.ccl-trainer")
    assert checks["packages.ccl-trainer"]["status"] == status
    assert text in checks["packages.ccl-trainer"]["summary"]


def test_transformers_needs_newer_torch_and_accelerate(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.1.0")
    env.dist("transformers", "5.23.0")
    env.dist("accelerate", "0.30.0")
    checks, _ = compat_json("check", env.python, "--only", "packages.transformers-torch")
    finding = checks["packages.transformers-torch"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "transformers 5.23.0 needs torch >= 2.6, torch 2.1.0 is installed"
    assert "accelerate >= 1.1.0" in " ".join(finding["evidence"])


def test_cuda_build_next_to_intel_packages(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0").ipex("2.8.0")
    env.dist("nvidia-cublas-cu12", "12.8.4.1")
    checks, _ = compat_json("check", env.python, "--only", "packages.cuda-build")
    assert checks["packages.cuda-build"]["status"] == "warn"
    assert "compat install --yes" in checks["packages.cuda-build"]["fix"] and "pip uninstall -y nvidia-cublas-cu12" in checks["packages.cuda-build"]["fix"]


def test_duplicate_installs(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    other = tmp_path / "other-site"
    env.dist("torch", "2.6.0", site=other)
    (env.site / "zz-other.pth").write_text(str(other) + "\n")
    checks, _ = compat_json("check", env.python, "--only", "packages.duplicates", code=1)
    finding = checks["packages.duplicates"]
    assert finding["summary"].endswith(": torch")
    assert "2.7.0 at" in finding["evidence"][0] and "2.6.0 at" in finding["evidence"][0]


def test_python_without_wheels_for_the_installed_release(tmp_path, matrix):
    from packaging.version import Version

    from compatmatrix.matrix.model import Component

    # a release with no published wheel for the running Python (1.12.0, 3.7-3.10 only, where it applies)
    unpublished = [r for r in matrix.releases[Component.CCL] if not any(w.has_python(Version(RUNNING_PYTHON)) for w in r.wheels)]
    if not unpublished:
        pytest.skip(f"every oneccl_bind_pt release in the matrix has a wheel for Python {RUNNING_PYTHON}")
    release = next((r for r in unpublished if str(r.version) == "1.12.0"), unpublished[0])
    env = FixtureEnv(tmp_path / "env").torch(str(release.torch)).bindings(str(release.version))
    checks, _ = compat_json("check", env.python, "--only", "packages.python-support")
    assert checks["packages.python-support"]["status"] == "warn"
    assert f"oneccl-bind-pt {release.version} has no published wheel for Python {RUNNING_PYTHON}" in checks["packages.python-support"]["summary"]


def test_end_of_life_advice(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").ipex("2.7.0").bindings("2.7.0")
    checks, _ = compat_json("check", env.python, "--only", "packages.eol")
    assert checks["packages.eol"]["status"] == "warn"
    assert "compat resolve --profile stock" in checks["packages.eol"]["fix"]


# --- crash modes of the import probes -------------------------------------------------------------


def test_the_real_2_1_guard_text_is_recognised(tmp_path):
    """IPEX 2.1.0/2.1.100 print the guard with 7 spaces before the series and 11 before 'and run again.' (audit §7)."""
    env = FixtureEnv(tmp_path / "env").torch("2.2.0+cpu").ipex("2.1.100", ending="exit127_v2_1", series="2.1.*")
    checks, _ = compat_json("doctor", env.python, "--only", "imports", code=1)
    finding = checks["imports.ipex"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "IPEX's version check refused torch 2.2.0+cpu: it needs PyTorch 2.1.*"
    assert "exited with status 127" in " ".join(finding["evidence"])


@pytest.mark.parametrize(
    "ending, kind_text",
    [
        ("os_exit", "module 'os' has no attribute 'exit'"),
        ("exit127", "exited with status 127"),
        ("hard_exit", "ended hard (exit status 1)"),
    ],
)
def test_ipex_guard_endings(tmp_path, ending, kind_text):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0").ipex("2.7.0", ending=ending)
    checks, data = compat_json("doctor", env.python, "--only", "imports", code=1)
    finding = checks["imports.ipex"]
    assert finding["status"] == "fail"
    assert finding["summary"] == "IPEX's version check refused torch 2.8.0: it needs PyTorch 2.7.*"
    assert kind_text in " ".join(finding["evidence"])
    assert checks["imports.torch"]["status"] == "pass"


def test_illegal_instruction(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").ipex("2.7.0", ending="sigill")
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ipex", code=1)
    assert checks["imports.ipex"]["summary"] == "importing intel_extension_for_pytorch hit an illegal instruction (SIGILL)"


@pytest.mark.parametrize(
    "ending, summary",
    [
        ("undefined_symbol", "importing oneccl_bindings_for_pytorch failed: undefined symbol _ZN3c1019UndefinedTensorImpl10_singletonE"),
        ("abi_abort", "importing oneccl_bindings_for_pytorch aborted: 'Mismatch in kernel C++ signatures' (killed by signal SIGABRT)"),
        ("missing_libccl", "importing oneccl_bindings_for_pytorch failed: libccl.so.1 cannot be found"),
        ("no_register", "oneccl_bindings_for_pytorch imports but the ccl backend is not registered"),
        ("ok", "oneccl_bindings_for_pytorch imports and registers the ccl backend"),
    ],
)
def test_binding_crash_modes(tmp_path, ending, summary):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0", ending=ending)
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ccl")
    assert checks["imports.ccl"]["summary"] == summary
    assert checks["imports.ccl"]["status"] == ("pass" if ending == "ok" else "fail")


def test_hanging_import_is_killed_and_reported(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0", ending="hang")
    checks, _ = compat_json("doctor", env.python, "--only", "imports.ccl", "--import-timeout", "3", code=1)
    assert checks["imports.ccl"]["summary"] == "importing oneccl_bindings_for_pytorch did not finish within 3 s"
    left = subprocess.run(["pgrep", "-f", str(env.python)], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "the hanging child must be gone"


def test_doctor_survives_when_torch_itself_cannot_import(tmp_path):
    env = FixtureEnv(tmp_path / "env")
    env.dist("torch", "2.7.0")
    env.module("torch/__init__.py", "raise ImportError('libtorch_cpu.so: cannot open shared object file: No such file or directory')\n")
    env.ipex("2.7.0")
    checks, data = compat_json("doctor", env.python, code=1)
    assert checks["imports.torch"]["summary"] == "importing torch failed: libtorch_cpu.so cannot be found"
    assert checks["imports.ipex"]["status"] == "fail"
    assert checks["packages.ipex-torch"]["status"] == "pass"  # the static part still ran


def test_static_paths_never_import_the_stack_in_compat_itself(tmp_path):
    log = tmp_path / "imports.log"
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").ipex("2.7.0").bindings("2.7.0")
    env.module("torch/__init__.py", f"""
        import os
        with open({str(log)!r}, "a") as handle:
            handle.write(str(os.getpid()) + "\\n")
        __version__ = "2.7.0"
        class version:
            cuda = None
        from . import distributed
    """)
    process = subprocess.Popen([sys.executable, "-m", "compatmatrix", "doctor", "--json", "--python", str(env.python)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_environ())
    process.communicate(timeout=180)
    pids = set(log.read_text().split())
    assert pids, "the import probes ran torch in child processes"
    assert str(process.pid) not in pids
    log.unlink()
    subprocess.run([sys.executable, "-m", "compatmatrix", "check", "--python", str(env.python)], capture_output=True, timeout=120, env=clean_environ(), check=False)
    assert not log.exists(), "compat check imports nothing of the stack, not even in a child"


# --- the oneCCL environment and compat env --------------------------------------------------------


def test_setvars_missing_then_compat_env_fixes_it(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    checks, _ = compat_json("check", env.python, "--only", "oneccl", code=1)
    finding = checks["oneccl.setvars"]
    assert finding["status"] == "fail"
    assert "CCL_ROOT" in finding["summary"] and "I_MPI_ROOT" in finding["summary"] and "FI_PROVIDER_PATH" in finding["summary"]
    assert finding["fix"].startswith('eval "$(compat env --python ')
    assert checks["oneccl.mpirun"]["status"] == "warn"
    # eval "$(compat env)" in bash, then check again in that environment
    script = f'eval "$({sys.executable} -m compatmatrix env --python {env.python})" && {sys.executable} -m compatmatrix check --json --only oneccl --python {env.python}'
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=120, env=clean_environ(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    after = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert after["oneccl.setvars"]["status"] == "pass"
    assert after["oneccl.fi-provider"]["status"] == "pass" and "libtcp-fi.so" in " ".join(after["oneccl.fi-provider"]["evidence"])
    assert after["oneccl.mpirun"]["status"] == "pass"
    assert after["oneccl.stale-prefix"]["status"] == "pass"


def test_compat_env_output_for_each_shell(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    site = env.site / "oneccl_bindings_for_pytorch"
    bash = run_compat("env", "--python", str(env.python), "--ranks-per-node", "1")
    assert bash.returncode == 0, bash.stderr
    assert f"export CCL_ROOT={site}" in bash.stdout
    assert "export CCL_WORKER_COUNT=1" in bash.stdout
    cpus = allowed_cpus()  # affinity and cgroup quota, as compat counts them
    assert f"export OMP_NUM_THREADS={max(1, cpus - 1)}" in bash.stdout
    fish = run_compat("env", "--shell", "fish", "--python", str(env.python))
    assert f"set -gx CCL_ROOT '{site}'" in fish.stdout
    assert "set -gx PATH " in fish.stdout and "export" not in fish.stdout


@pytest.mark.parametrize("launcher", [None, "torchrun", "spawn", "mpirun"])
def test_compat_env_without_bindings_prints_the_runtime_settings_only(tmp_path, launcher):
    """The stock profile (torch without IPEX/oneCCL, gloo): no oneCCL environment to export, and no error (the old
    compat env exited 2 here, which broke `docker build --build-arg PROFILE=stock`)."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    done = run_compat("env", "--python", str(env.python), *(["--launcher", launcher] if launcher else []))
    assert done.returncode == 0, done.stderr
    assert f"# no oneCCL bindings (oneccl_bindings_for_pytorch / torch_ccl) are installed for {env.python}: no oneCCL environment exported" in done.stdout
    assert "export OMP_NUM_THREADS=" in done.stdout and "LD_PRELOAD" in done.stdout
    exported = [line for line in done.stdout.splitlines() if not line.startswith("#")]
    assert not [line for line in exported if "CCL" in line or "FI_" in line or "PATH" in line], exported


def test_stale_prefix_from_another_environment(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    other = FixtureEnv(tmp_path / "old").torch("2.6.0").bindings("2.6.0")
    stale = str(other.site / "oneccl_bindings_for_pytorch" / "lib")
    checks, _ = compat_json("check", env.python, "--only", "oneccl.stale-prefix", env={"LD_LIBRARY_PATH": stale, "CCL_ROOT": str(other.site / "oneccl_bindings_for_pytorch")}, code=1)
    finding = checks["oneccl.stale-prefix"]
    assert "CCL_ROOT=" in finding["summary"] and "is not inside" in finding["summary"]
    assert any("belongs to another Python environment" in e for e in finding["evidence"])


# --- runtime -----------------------------------------------------------------------------------


def test_ld_preload_entries(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    text_file = tmp_path / "libfake.so"
    text_file.write_text("not a library")
    missing = tmp_path / "gone" / "libtcmalloc.so.4.5.9"  # under tmp_path: missing on every machine
    checks, _ = compat_json("check", env.python, "--only", "runtime.ld-preload", env={"LD_PRELOAD": f"{missing}:{text_file}"}, code=1)
    finding = checks["runtime.ld-preload"]
    assert finding["summary"] == f"{missing} does not exist"
    assert f"{text_file} is not an ELF shared library" in finding["evidence"]


def test_thread_oversubscription(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    cpus = allowed_cpus()  # affinity and cgroup quota, as compat counts them; the values below fit 1 CPU as well as 64
    omp = allowed_threads() + 1  # one thread more than there are CPUs (hyperthreads included), with one rank: oversubscribed on any machine
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", "--ranks-per-node", "1", env={"OMP_NUM_THREADS": str(omp), "CCL_WORKER_COUNT": "1"}, code=1)
    assert checks["runtime.threads"]["status"] == "fail"
    assert checks["runtime.threads"]["summary"] == f"1 ranks x (OMP_NUM_THREADS={omp} + CCL_WORKER_COUNT=1) = {omp + 1} threads on {cores_text(cpus)}"
    # more ranks than CPUs even at one thread each: no OMP_NUM_THREADS fits, a warning that says so
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", "--ranks-per-node", str(cpus + 1), env={"OMP_NUM_THREADS": "1", "CCL_WORKER_COUNT": "0"})
    assert checks["runtime.threads"]["status"] == "warn"
    assert checks["runtime.threads"]["summary"].endswith("more ranks than physical cores can carry even at one thread each")
    checks, _ = compat_json("check", env.python, "--only", "runtime.threads", "--ranks-per-node", "1", env={"OMP_NUM_THREADS": "1", "CCL_WORKER_COUNT": "0"}, code=0)
    assert checks["runtime.threads"]["status"] == "pass"


# --- the command line ----------------------------------------------------------------------------


def test_list_only_skip_and_unknown_ids(tmp_path):
    listed = run_compat("check", "--list", env_extra={"COLUMNS": "200"})
    assert listed.returncode == 0 and "packages.ccl-torch" in listed.stdout and "imports.ccl" not in listed.stdout
    assert "imports.ccl" in run_compat("doctor", "--list", env_extra={"COLUMNS": "200"}).stdout
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    checks, _ = compat_json("check", env.python, "--only", "runtime", "--skip", "runtime.shm")
    assert set(checks) == {"runtime.ld-preload", "runtime.threads", "runtime.isa"}
    bad = run_compat("check", "--only", "packages.nope")
    assert bad.returncode == 2 and "'packages.nope' is not a check id or area" in bad.stderr


def test_human_output_groups_by_area_with_words(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("1.12.1").bindings("1.12.0")
    done = run_compat("check", "--python", str(env.python), env_extra={"NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode == 1
    out = done.stdout
    assert "\npackages\n" in out and "\noneccl\n" in out and "\nruntime\n" in out
    assert "FAIL packages.ccl-torch: oneccl_bind_pt 1.12.0 does not work with torch 1.12.1" in out
    assert "fix: pip install oneccl_bind_pt==1.12.100" in out
    assert "FAIL:" in out.splitlines()[-1]
    assert "\x1b[" not in out


def test_shadowed_copies_are_normal_but_two_in_one_folder_are_not(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    other = tmp_path / "base-site"
    env.dist("filelock", "3.0.0")
    env.dist("filelock", "3.0.0", site=other)  # like a venv over its base interpreter
    (env.site / "zz-base.pth").write_text(str(other) + "\n")
    checks, _ = compat_json("check", env.python, "--only", "packages.duplicates", code=0)
    assert "filelock: 3.0.0 at" in " ".join(checks["packages.duplicates"]["evidence"])
    (env.site / "filelock-3.1.0.dist-info").mkdir()  # a half-done upgrade: two dist-infos side by side
    (env.site / "filelock-3.1.0.dist-info" / "METADATA").write_text("Name: filelock\nVersion: 3.1.0\n\n")
    checks, _ = compat_json("check", env.python, "--only", "packages.duplicates", code=1)
    assert checks["packages.duplicates"]["summary"].endswith(": filelock")


@pytest.mark.parametrize("ranks", [1, 2])
def test_compat_env_settings_pass_compat_check(tmp_path, ranks):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    script = (f'eval "$({sys.executable} -m compatmatrix env --python {env.python} --ranks-per-node {ranks})" && '
              f"{sys.executable} -m compatmatrix check --json --python {env.python} --ranks-per-node {ranks} --only runtime.threads --only oneccl")
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=120, env=clean_environ(), check=False)
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["runtime.threads"]["status"] != "fail", checks["runtime.threads"]
    assert checks["oneccl.setvars"]["status"] == "pass"


def test_bindings_in_the_user_site_are_not_stale(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    user_site = tmp_path / "user-site"
    # the user site holds the bindings; the venv reaches it through a .pth (as site does for --user)
    env.dist("oneccl-bind-pt", "2.7.0", site=user_site)
    (env.site / "zz-user.pth").write_text(str(user_site) + "\n")
    module = user_site / "oneccl_bindings_for_pytorch"
    (module / "lib").mkdir(parents=True)
    (module / "__init__.py").write_text("# FIXTURE\n")
    checks, _ = compat_json("check", env.python, "--only", "oneccl.stale-prefix", env={"LD_LIBRARY_PATH": str(module / "lib"), "CCL_ROOT": str(module)})
    assert checks["oneccl.stale-prefix"]["status"] == "pass"


def test_cgroup_quota_caps_the_cpus():
    from compatmatrix.environment.snapshot import _effective_cpus

    assert _effective_cpus(64, 4.0) == 4  # docker run --cpus=4 on a 64-core node
    assert _effective_cpus(64, 2.5) == 3
    assert _effective_cpus(2, 8.0) == 2
    assert _effective_cpus(16, None) == 16


def test_unreadable_torch_version_is_a_warning(tmp_path):
    env = FixtureEnv(tmp_path / "env")
    env.dist("torch", "not.a.version!!")
    checks, _ = compat_json("check", env.python, "--only", "packages.torch-installed")
    assert checks["packages.torch-installed"]["status"] == "warn"
    assert "unreadable version" in checks["packages.torch-installed"]["summary"]


def test_install_dry_run_shows_what_would_change(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.8.0")
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "install", "--dry-run", "--python", str(env.python), "--profile", "ccl"],
                          capture_output=True, text=True, timeout=120, env=clean_environ(), check=False)
    assert done.returncode == 0, done.stderr
    assert "would replace torch 2.8.0 -> 2.7.0+cpu (needs --yes)" in done.stderr
    assert "would install oneccl-bind-pt 2.7.0+cpu" in done.stderr
