"""The oneCCL environment the PyPI runtime layout needs (``oneccl-cpu`` + ``impi-rt`` in a venv), per launcher, and the
static checks that judge it (issue 25, items 1 and 2).

The table compat keeps (environment/oneccl_layouts.LAYOUTS) is checked against the REAL wheels' own activation scripts,
installed with pip into venvs cached by tests/real_envs.py. The integration tests source `compat env --launcher X` in a
bash and load the REAL libfabric impi-rt 2021.14.1 ships, asking it for its providers (fi_getinfo: -61, "no data",
without FI_PROVIDER_PATH). The unit tests of the static checks use FIXTURE layouts: tiny shared objects built with gcc
(every source says FIXTURE) laid out as impi-rt lays out its files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from compatmatrix.checks.oneccl_env import fi_provider, libfabric
from compatmatrix.environment.oneccl_layouts import ACTIVATION, LAYOUTS, read_activation
from compatmatrix.findings import Status
from compatmatrix.launchers import names
from compatmatrix.launchers.interface import ENV

from ..clean_env import base_env
from ..fixture_envs import FixtureEnv
from .test_system_oneccl import (
    _cc,
    context,
    fixture_bindings,
    fixture_extension_for,
    fixture_libccl,
    machine_libccl,
    needs_gcc,
)

# the PyPI runtime of the hand check in issue 25: oneccl-cpu 2021.14.1 with impi-rt 2021.14.1 (libfabric in lib/libfabric)
RUNTIME_ENV = "oneccl-cpu-2021.14.1"
RUNTIME_SPEC = (["oneccl-cpu==2021.14.1", "impi-rt==2021.14.1"], [])


def runtime_env(name: str = RUNTIME_ENV, spec=RUNTIME_SPEC) -> Path:
    from ..real_envs import SPECS, RealEnvUnavailable, real_env

    with mock.patch.dict(SPECS, {name: spec}):
        try:
            return real_env(name)
        except (RealEnvUnavailable, subprocess.CalledProcessError) as exc:
            pytest.skip(f"the PyPI oneCCL runtime ({' '.join(spec[0])}) cannot be had here: {exc}")


def compat(*args, env_extra=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout,
                          env=base_env(env_extra), check=False)


# --- the table, against the wheels' own files ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.network
@pytest.mark.parametrize("row", LAYOUTS, ids=lambda r: f"{r.distribution}-{r.release}")
def test_each_row_says_what_the_wheels_own_activation_script_says(row):
    """Every row is what its wheel's conda activation script (read as text) names: libfabric's folder on
    LD_LIBRARY_PATH, its providers on FI_PROVIDER_PATH, I_MPI_ROOT the prefix."""
    from ..real_envs import SPECS

    # the cached environments that already hold each release (no second copy of an 80 MB runtime is built)
    holding = {"2021.14.1": (RUNTIME_ENV, RUNTIME_SPEC), "2021.18.1": ("impi", SPECS["impi"])}
    if row.release not in holding:
        pytest.skip(f"no cached test environment holds {row.distribution} {row.release}")
    python = runtime_env(*holding[row.release])
    prefix = python.parent.parent
    script = prefix / ACTIVATION
    read = read_activation(script.read_text(), row.release, str(script))
    assert read is not None, script
    assert (read.libfabric, read.providers, read.mpi_root) == (row.libfabric, row.providers, row.mpi_root)
    assert (prefix / row.libfabric / "libfabric.so.1").is_file() and any((prefix / row.providers).glob("lib*-fi.so"))
    assert f"{row.distribution.replace('-', '_')}-{row.release}" in row.source and ACTIVATION in row.source


# --- compat env under each launcher, with the REAL PyPI runtime --------------------------------------------------------

FI_PROBE = """\
import ctypes, os
lib = ctypes.CDLL("libfabric.so")  # the name libccl dlopens
lib.fi_getinfo.restype = ctypes.c_int
lib.fi_getinfo.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
info = ctypes.c_void_p()
loaded = [line.split()[-1] for line in open("/proc/self/maps") if "/libfabric.so" in line]
print(os.path.realpath(loaded[0]))
print(lib.fi_getinfo((1 << 16) | 18, None, None, 0, None, ctypes.byref(info)))
"""


def expected_exports(launcher: str, prefix: Path) -> dict:
    """What the issue's table says compat env --launcher LAUNCHER sets for this layout (Intel MPI's mpirun: impi-rt's)."""
    wanted = {"FI_PROVIDER_PATH": str(prefix / "lib" / "libfabric" / "prov")}
    if launcher == "mpirun":
        wanted.update(I_MPI_ROOT=str(prefix), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    else:
        wanted["CCL_ATL_TRANSPORT"] = "ofi"
    if launcher == "spawn":
        wanted.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    return wanted


@pytest.mark.integration
@pytest.mark.network
@needs_gcc
@pytest.mark.parametrize("launcher", names(ENV))
def test_compat_env_under_each_launcher_makes_the_real_libfabric_loadable_with_its_providers(tmp_path, launcher):
    reason = machine_libccl()
    if reason:
        pytest.skip(f"{reason}: the loader would take that one first")
    python = runtime_env()
    prefix = python.parent.parent
    overlay = fixture_extension_for(tmp_path, prefix / "lib" / "libccl.so.1")  # FIXTURE bindings linked against the real libccl
    env = {"PYTHONPATH": str(overlay), "CCL_WORKER_COUNT": "0", "PATH": f"{python.parent}:{os.environ.get('PATH', '')}"}
    done = compat("env", "--json", "--python", str(python), "--launcher", launcher, env_extra=env)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    exports = document["exports"]
    for key, value in expected_exports(launcher, prefix).items():
        assert exports.get(key) == value, (key, exports)
    assert int(exports["CCL_WORKER_COUNT"]) >= 1  # CCL_WORKER_COUNT=0 here: accelerate would refuse ccl
    assert "CCL_ROOT" not in exports and "CCL_ROOT" not in " ".join(document["comments"])  # nothing needs it
    if launcher != "mpirun":
        assert "I_MPI_ROOT" not in exports
    assert str(prefix / "lib" / "libfabric") in document["additions"]["LD_LIBRARY_PATH"]["prepend"]
    assert any("impi_rt-2021.14.1" in c and ACTIVATION in c for c in document["comments"])
    # sourced in bash as printed: the real libfabric loads by the name libccl uses, and finds its providers
    probe = tmp_path / "fi_probe.py"
    probe.write_text(FI_PROBE)
    # first the failure those exports prevent, on the same real files: libfabric loaded from its folder but without
    # FI_PROVIDER_PATH answers -61 (no provider), as every rank of the hand check did
    bare = subprocess.run([str(python), str(probe)], capture_output=True, text=True, timeout=120, check=False,
                          env=base_env({"FI_PROVIDER": "tcp", "LD_LIBRARY_PATH": str(prefix / "lib" / "libfabric")}))
    assert bare.returncode == 0 and bare.stdout.split()[-1] == "-61", bare.stdout + bare.stderr
    script = (f'eval "$({sys.executable} -m compatmatrix env --python {python} --launcher {launcher})" || exit 9; '
              f'test -n "$FI_PROVIDER_PATH" && ls "$FI_PROVIDER_PATH" && {python} {probe}')
    run_env = base_env({**env, "FI_PROVIDER": "tcp", "LD_LIBRARY_PATH": ""})
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=180, env=run_env, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.split()
    assert "libtcp-fi.so" in lines  # FI_PROVIDER_PATH names a folder with the providers
    assert Path(lines[-2]).parent == (prefix / "lib" / "libfabric").resolve(), ran.stdout  # impi-rt's own libfabric
    assert lines[-1] == "0", ran.stdout  # fi_getinfo found a provider (-61 without FI_PROVIDER_PATH)


@pytest.mark.integration
@pytest.mark.network
def test_compat_env_for_mpirun_puts_the_real_impi_rt_mpirun_first_on_path(tmp_path):
    """Issue 36: compat env --launcher mpirun did not put VENV/bin on PATH: in a clean shell `mpirun` was then another
    MPI's (Debian's Open MPI), and VENV/bin/mpirun called by its path failed "mpiexec.hydra: not found". With the REAL
    impi-rt 2021.14.1 (cached venv) and the FIXTURE bindings linked against its real libccl (no rank is started)."""
    reason = machine_libccl()
    if reason:
        pytest.skip(f"{reason}: the loader would take that one first")
    python = runtime_env()
    prefix = python.parent.parent
    overlay = fixture_extension_for(tmp_path, prefix / "lib" / "libccl.so.1")
    clean = base_env({"PYTHONPATH": str(overlay)})
    assert str(python.parent) not in clean["PATH"].split(":")
    by_path = subprocess.run([str(python.parent / "mpirun"), "--version"], capture_output=True, text=True, timeout=60, env=clean, check=False)
    script = (f'eval "$({sys.executable} -m compatmatrix env --python {python} --launcher mpirun)" || exit 9; '
              'command -v mpirun && mpirun --version')
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=180, env=clean, check=False)
    assert ran.returncode == 0, (by_path.stdout + by_path.stderr, ran.stdout + ran.stderr)
    assert ran.stdout.splitlines()[0] == str(python.parent / "mpirun") and "Intel(R) MPI" in ran.stdout, ran.stdout
    if by_path.returncode != 0:  # the failure the issue saw, where this machine reproduces it
        assert "mpiexec.hydra" in by_path.stdout + by_path.stderr, by_path.stdout + by_path.stderr


# --- the static checks, on FIXTURE layouts --------------------------------------------------------------------------


def fixture_runtime(env: FixtureEnv, libfabric_so: bool = True, providers: bool = True, release: str = "2021.14.1") -> Path:
    """A FIXTURE PyPI runtime in ``env``: libccl.so.1 in <prefix>/lib, an impi_rt dist-info, and, as impi-rt 2021.14
    lays them out, a FIXTURE libfabric.so(.1) in lib/libfabric and a FIXTURE provider in lib/libfabric/prov."""
    prefix = Path(env.root)
    ccl = fixture_libccl(prefix / "lib")
    fixture_bindings(env, ccl.parent)
    env.dist("impi-rt", release)
    folder = prefix / "lib" / "libfabric"
    (folder / "prov").mkdir(parents=True)
    if libfabric_so:
        (folder / "fixture_fabric.c").write_text("/* FIXTURE libfabric.so.1: not libfabric */\nint compat_fixture_fabric(void) { return 0; }\n")
        _cc("-shared", "-fPIC", "-Wl,-soname,libfabric.so.1", "-o", str(folder / "libfabric.so.1"), str(folder / "fixture_fabric.c"))
        os.symlink("libfabric.so.1", folder / "libfabric.so")
    if providers:
        (folder / "prov" / "fixture_tcp.c").write_text("/* FIXTURE provider */\nint compat_fixture_tcp(void) { return 0; }\n")
        _cc("-shared", "-fPIC", "-o", str(folder / "prov" / "libtcp-fi.so"), str(folder / "prov" / "fixture_tcp.c"))
    return prefix


def machine_libfabric() -> str:
    from compatmatrix.environment.linker import default_dirs, ldconfig_cache

    if ldconfig_cache().get("libfabric.so"):
        return "this machine's ldconfig cache has libfabric.so"
    found = [f for f in default_dirs() if (Path(f) / "libfabric.so").exists()]
    return f"this machine has {found[0]}/libfabric.so" if found else ""


@needs_gcc
def test_fixture_runtime_layout_passes_libfabric_and_providers_and_env_names_them(tmp_path, matrix):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env)
    ctx = context(env, matrix, tmp_path, machine_free=True)
    found = libfabric(ctx)
    assert found.status is Status.PASS, found
    assert found.summary == f"with compat env's exports: libfabric.so is found at {prefix / 'lib' / 'libfabric' / 'libfabric.so'} (LD_LIBRARY_PATH)"
    providers = fi_provider(ctx)
    assert providers.status is Status.PASS and providers.evidence == (f"{prefix / 'lib' / 'libfabric' / 'prov'}: libtcp-fi.so",), providers


@needs_gcc
def test_each_oneccl_check_says_whether_it_judges_this_shell_or_compat_envs_exports(tmp_path, matrix, monkeypatch):
    """Issue 36: in a clean shell oneccl.fi-provider and oneccl.libfabric PASS because they judge the environment compat env
    would create (FI_PROVIDER_PATH and LD_LIBRARY_PATH are its exports, not this shell's); the line said nothing of it."""
    from compatmatrix.checks.oneccl_env import setvars_sourced

    for name in ("FI_PROVIDER_PATH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)  # a clean shell
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_runtime(env)
    ctx = context(env, matrix, tmp_path, machine_free=True)
    for finding in (libfabric(ctx), fi_provider(ctx)):
        assert finding.status is Status.PASS and finding.summary.startswith("with compat env's exports: "), finding
    system = setvars_sourced(ctx)
    assert system.status is Status.WARN and "in this shell" in system.summary, system
    bundled = FixtureEnv(tmp_path / "bundled").torch("2.7.0").bindings("2.7.0")
    sourced = setvars_sourced(context(bundled, matrix, tmp_path))
    assert sourced.status is Status.FAIL and sourced.summary.startswith("in this shell: the oneCCL environment is not set up"), sourced


@needs_gcc
def test_fixture_runtime_without_impi_rt_fails_libfabric_and_providers(tmp_path, matrix):
    """libccl without impi-rt (oneccl-cpu installed --no-deps): nothing for the loader or libfabric to find. The provider
    check said SKIP ("libfabric uses its own default"); libfabric has none."""
    if machine_libfabric():
        pytest.skip(f"{machine_libfabric()}: the loader would find that one")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    ccl = fixture_libccl(Path(env.root) / "lib")
    fixture_bindings(env, ccl.parent)
    ctx = context(env, matrix, tmp_path, machine_free=True)
    found = libfabric(ctx)
    assert found.status is Status.FAIL and "could not open the library: libfabric.so" in found.summary, found
    assert found.fix.startswith("pip install impi-rt")
    providers = fi_provider(ctx)
    assert providers.status is Status.FAIL and "fi_getinfo error: ret -61" in providers.summary, providers
    assert providers.fix.startswith("pip install impi-rt")


@needs_gcc
def test_fixture_impi_rt_2021_19_ships_no_libfabric_and_the_fix_names_2021_18_1(tmp_path, matrix):
    """impi-rt 2021.19.0 (as read from its PyPI wheel 2026-12-07): no libfabric in the wheel, an activation script that names
    none, `Requires-Dist: libfabric (>=2.6)`, which no index has. The finding says so; the fix names the newest release
    that installs (data/matrix.toml [[runtime]]), not a bare `pip install impi-rt` (which would give 2021.18.1 silently)."""
    if machine_libfabric():
        pytest.skip(f"{machine_libfabric()}: the loader would find that one")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    ccl = fixture_libccl(Path(env.root) / "lib")
    fixture_bindings(env, ccl.parent)
    env.dist("impi-rt", "2021.19.0")
    ctx = context(env, matrix, tmp_path, machine_free=True)
    found = libfabric(ctx)
    assert found.status is Status.FAIL, found
    assert found.evidence[0].startswith("impi-rt 2021.19.0 is installed; its wheel ships no libfabric and its activation script names none: "
                                        "it declares libfabric>=2.6, which no configured index has")
    assert found.fix.startswith("pip install impi-rt==2021.18.1 (its lib folder holds libfabric.so)")


@needs_gcc
def test_fixture_runtime_with_an_empty_provider_folder_fails(tmp_path, matrix):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env, providers=False)
    ctx = context(env, matrix, tmp_path, machine_free=True)
    providers = fi_provider(ctx)
    assert providers.status is Status.FAIL, providers
    assert providers.evidence == (f"{prefix / 'lib' / 'libfabric' / 'prov'}: no providers",)


@needs_gcc
def test_fixture_runtime_env_exports_per_launcher(tmp_path):
    """compat env --launcher X on the FIXTURE layout (no MPI asked: mpirun is a FIXTURE script answering as Intel MPI)."""
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env)
    mpirun = Path(env.python).parent / "mpirun"
    mpirun.write_text("#!/bin/sh\n# FIXTURE mpirun answering as Intel MPI's\necho 'Intel(R) MPI Library for Linux* OS, Version 2021.14'\n")
    mpirun.chmod(0o755)
    for launcher in names(ENV):
        done = compat("env", "--json", "--python", str(env.python), "--launcher", launcher, env_extra={"CCL_WORKER_COUNT": "0"})
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        exports = document["exports"]
        for key, value in expected_exports(launcher, prefix).items():
            assert exports.get(key) == value, (launcher, key, exports)
        assert exports["CCL_WORKER_COUNT"] == "1" and "CCL_ROOT" not in exports
        assert document["additions"]["LD_LIBRARY_PATH"]["prepend"] == [str(prefix / "lib"), str(prefix / "lib" / "libfabric")]


@needs_gcc
def test_mpirun_of_open_mpi_takes_the_ofi_transport(tmp_path):
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env)
    mpirun = Path(env.python).parent / "mpirun"
    mpirun.write_text("#!/bin/sh\n# FIXTURE mpirun answering as Open MPI's\necho 'mpirun (Open MPI) 4.1.6'\n")
    mpirun.chmod(0o755)
    done = compat("env", "--json", "--python", str(env.python), "--launcher", "mpirun")
    exports = json.loads(done.stdout)["exports"]
    assert exports["CCL_ATL_TRANSPORT"] == "ofi" and "I_MPI_ROOT" not in exports, exports
    assert exports["FI_PROVIDER_PATH"] == str(prefix / "lib" / "libfabric" / "prov") and exports["MASTER_ADDR"] == "127.0.0.1"


# --- resolve's note on CCL_WORKER_COUNT, against accelerate's own source ------------------------------------------------


def test_the_ccl_worker_count_note_quotes_the_error_accelerate_raises(matrix):
    """accelerate (state.py, _prepare_backend) takes ccl only when CCL_WORKER_COUNT > 0, and a backend asked for that
    it did not take raises ValueError(f"Your assigned backend {original_backend} is not available, ..."): no quiet gloo."""
    from compatmatrix.reasons import CclWorkerCountNote
    from compatmatrix.sentences import sentence

    text = sentence(CclWorkerCountNote())
    assert "quietly" not in text and "gloo instead" not in text
    from ..real_envs import CACHE

    for state in sorted(CACHE.glob("*/lib/python3*/site-packages/accelerate/state.py")):  # a real accelerate, where one is cached
        source = state.read_text()
        if '"CCL_WORKER_COUNT"' in source:  # accelerate < 1.13 (later releases take no ccl at all)
            assert 'get_int_from_env(["CCL_WORKER_COUNT"], 0) > 0' in source, state
            assert re.search(r"raise ValueError\(f\"Your assigned backend \{original_backend\} is not ava\w+able", source), state  # 1.10: "avaliable"
    assert '"ValueError: Your assigned backend ccl is not available"' in text and "CCL_WORKER_COUNT > 0" in text


# --- oneccl.launcher: the same needs, judged in the shell that launches -----------------------------------------------


def fixture_intel_mpirun(env: FixtureEnv) -> None:
    mpirun = Path(env.python).parent / "mpirun"
    mpirun.write_text("#!/bin/sh\n# FIXTURE mpirun answering as Intel MPI's\necho 'Intel(R) MPI Library for Linux* OS, Version 2021.14'\n")
    mpirun.chmod(0o755)


def launcher_finding(env: FixtureEnv, launcher: str, env_extra=None) -> dict:
    done = compat("check", "--json", "--only", "oneccl.launcher", "--python", str(env.python), "--launcher", launcher, env_extra=env_extra)
    assert done.returncode in (0, 1), done.stderr
    (finding,) = json.loads(done.stdout)["checks"]
    return finding


def fixture_layout(tmp_path: Path) -> tuple[FixtureEnv, Path]:
    """A FIXTURE environment with torch 2.7.0, the FIXTURE PyPI runtime layout and a FIXTURE mpirun answering as Intel
    MPI's (skips where the machine's own libccl would be found first)."""
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env)
    fixture_intel_mpirun(env)
    return env, prefix


@needs_gcc
def test_oneccl_launcher_names_what_each_launcher_lacks_and_compat_envs_fix_makes_it_pass(tmp_path):
    env, prefix = fixture_layout(tmp_path)
    mpirun = launcher_finding(env, "mpirun")
    assert mpirun["status"] == "fail", mpirun
    assert mpirun["summary"] == "under mpirun, ccl needs I_MPI_ROOT, MASTER_ADDR, MASTER_PORT, which are not set as needed here"
    assert f"I_MPI_ROOT: not set; needs {prefix}" in mpirun["evidence"]
    torchrun = launcher_finding(env, "torchrun", {"CCL_ATL_TRANSPORT": "mpi"})
    assert torchrun["status"] == "fail" and "CCL_ATL_TRANSPORT: is mpi; needs ofi" in torchrun["evidence"], torchrun
    spawn = launcher_finding(env, "spawn", {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"})
    assert spawn["status"] == "fail" and "MASTER_ADDR" not in spawn["summary"], spawn  # given: kept
    for launcher in names(ENV):
        finding = launcher_finding(env, launcher)
        assert finding["fix"] == f'eval "$(compat env --python {env.python} --launcher {launcher})"'
        script = (f'eval "$({sys.executable} -m compatmatrix env --python {env.python} --launcher {launcher})" && '
                  f'{sys.executable} -m compatmatrix check --json --only oneccl --python {env.python} --launcher {launcher}')
        done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=180, env=base_env(), check=False)
        assert done.returncode == 0, (launcher, done.stdout + done.stderr)
        after = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
        assert after["oneccl.launcher"]["status"] == "pass" and after["oneccl.libfabric"]["status"] == "pass", (launcher, after)
        assert after["oneccl.fi-provider"]["status"] == "pass" and after["oneccl.setvars"]["status"] == "pass", (launcher, after)


def test_oneccl_launcher_skips_without_a_launcher_named(tmp_path):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    done = compat("check", "--json", "--only", "oneccl.launcher", "--python", str(env.python))
    (finding,) = json.loads(done.stdout)["checks"]
    assert finding["status"] == "skip" and "--launcher" in finding["summary"]


def test_an_installed_activation_script_is_read_as_text_and_kept_inside_the_environment(tmp_path):
    """A release not in the table: its installed script names the folders (read, never run); folders that would leave
    the environment are not taken."""
    from compatmatrix.environment.oneccl_layouts import runtime_layout

    prefix = tmp_path / "env"
    (prefix / "lib" / "python3.11" / "site-packages" / "impi_rt-2021.99.0.dist-info").mkdir(parents=True)
    (prefix / "lib" / "fabric").mkdir(parents=True)
    (prefix / "lib" / "fabric" / "libfabric.so.1").write_bytes(b"\x7fELF FIXTURE")
    script = prefix / ACTIVATION
    script.parent.mkdir(parents=True)
    ran = tmp_path / "ran"
    script.write_text(f'touch {ran}\nexport I_MPI_ROOT="${{CONDA_PREFIX}}"\n'
                      'export LD_LIBRARY_PATH="${I_MPI_ROOT}/lib/fabric:${LD_LIBRARY_PATH}"\n'
                      'export FI_PROVIDER_PATH="${I_MPI_ROOT}/lib/fabric/providers:/usr/lib64/libfabric"\n')
    layout = runtime_layout(str(prefix))
    assert layout is not None and not ran.exists()
    assert (layout.libfabric, layout.providers, layout.mpi_root) == (str(prefix / "lib" / "fabric"), str(prefix / "lib" / "fabric" / "providers"), str(prefix))
    assert layout.source == f"the installed {script}"
    script.write_text('export I_MPI_ROOT="${CONDA_PREFIX}"\nexport LD_LIBRARY_PATH="${I_MPI_ROOT}/../../etc:${LD_LIBRARY_PATH}"\n'
                      'export FI_PROVIDER_PATH="${I_MPI_ROOT}/lib/fabric"\n')
    assert runtime_layout(str(prefix)) is None


def test_check_refuses_a_launcher_it_does_not_know_in_one_sentence():
    done = compat("check", "--launcher", "pbsdsh", "--only", "oneccl")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--launcher 'pbsdsh' is not a launcher compat knows" in done.stderr and "spawn, torchrun, mpirun, srun" in done.stderr


@needs_gcc
def test_the_layouts_exports_stay_safe_to_eval_from_a_hostile_prefix(tmp_path):
    """The folders come from the file system: a prefix with a space, quotes and a command substitution is exported as
    itself by the shell writers, and nothing in it runs."""
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env $(touch PWNED) 'q' \"d\"").torch("2.7.0")
    prefix = fixture_runtime(env)
    fixture_intel_mpirun(env)
    script = (f'cd {tmp_path} && eval "$({sys.executable} -m compatmatrix env --python {shlex.quote(str(env.python))} --launcher mpirun)" && '
              'printf "%s\\n" "$I_MPI_ROOT" "$FI_PROVIDER_PATH" "$LD_LIBRARY_PATH"')
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=180, env=base_env(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    root, providers, library_path = done.stdout.splitlines()
    assert (root, providers) == (str(prefix), str(prefix / "lib" / "libfabric" / "prov"))
    assert library_path.split(":")[:2] == [str(prefix / "lib"), str(prefix / "lib" / "libfabric")]
    assert not (tmp_path / "PWNED").exists()


@needs_gcc
def test_env_mpirun_names_the_open_mpi_the_job_runs_beside_impi_rts_own(tmp_path):
    """impi-rt puts Intel MPI's mpirun next to the interpreter; a job run by Open MPI's mpirun needs OFI, which
    compat env --launcher mpirun --mpirun PATH exports (the fix live.ranks prints for an MPI abort under a foreign mpirun)."""
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    prefix = fixture_runtime(env)
    fixture_intel_mpirun(env)
    open_mpi = tmp_path / "openmpi" / "bin" / "mpirun"
    open_mpi.parent.mkdir(parents=True)
    open_mpi.write_text("#!/bin/sh\n# FIXTURE mpirun answering as Open MPI's\necho 'mpirun (Open MPI) 4.1.4'\n")
    open_mpi.chmod(0o755)
    beside = json.loads(compat("env", "--json", "--python", str(env.python), "--launcher", "mpirun").stdout)["exports"]
    assert "I_MPI_ROOT" in beside and "CCL_ATL_TRANSPORT" not in beside  # impi-rt's own mpirun: the MPI transport
    done = compat("env", "--json", "--python", str(env.python), "--launcher", "mpirun", "--mpirun", str(open_mpi))
    exports = json.loads(done.stdout)["exports"]
    assert exports["CCL_ATL_TRANSPORT"] == "ofi" and "I_MPI_ROOT" not in exports, exports
    assert exports["FI_PROVIDER_PATH"] == str(prefix / "lib" / "libfabric" / "prov")
    refused = compat("env", "--python", str(env.python), "--mpirun", str(open_mpi))
    assert refused.returncode == 2 and "--mpirun goes with --launcher mpirun" in refused.stderr
