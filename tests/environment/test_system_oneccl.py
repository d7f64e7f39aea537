"""Bindings built against a system oneCCL (USE_SYSTEM_ONECCL=1: the PyPI oneccl-cpu runtime, conda, a oneAPI install)
carry no env/setvars.sh. compat finds the libccl.so.* their native code names in DT_NEEDED, the way the loader would
(RPATH, LD_LIBRARY_PATH, RUNPATH with $ORIGIN, ldconfig's cache, the default folders), or where such a oneCCL is
installed without the loader looking there; FAIL only when there is none.

FIXTURE native files built here with gcc (every source says FIXTURE): a tiny libccl.so.1 (one function, not oneCCL),
a liboneccl_bindings_for_pytorch.so that needs it and a _C extension that needs that, linked the way intel/torch-ccl's
setup.py links them (_C with RUNPATH $ORIGIN/lib), in the RUNPATH variants below. Where the loader can be asked, it is:
`ldd` (the loader in trace mode: nothing of the libraries runs) must agree with compat.

The integration tests use the REAL libccl.so.1 of the PyPI oneccl-cpu wheel, installed with pip into a venv cached like
tests/real_envs.py's, named by a FIXTURE extension linked against it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from unittest import mock

import pytest

from compatmatrix.checks.oneccl_env import kvs_iface, kvs_iface_finding, setvars_sourced, stale_prefix
from compatmatrix.checks.registry import Context
from compatmatrix.environment.elf import ElfError, read_elf
from compatmatrix.environment.linker import LibrarySearch, expand_origin, parse_ldconfig
from compatmatrix.environment.oneccl import extra_places
from compatmatrix.environment.setvars import INTERFACES_KEY, LIBRARY_SEARCH_KEY
from compatmatrix.environment.snapshot import take_snapshot
from compatmatrix.errors import CompatError
from compatmatrix.findings import Status
from compatmatrix.shell import format_env
from compatmatrix.shell_env import plan_env

from ..clean_env import base_env
from ..fixture_envs import FixtureEnv

GCC = shutil.which("gcc") or shutil.which("cc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="needs gcc (or cc) to build the FIXTURE shared libraries")
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
PACKAGE = "oneccl_bindings_for_pytorch"


# --- FIXTURE native files -----------------------------------------------------------------------------------------


def _cc(*args: str) -> None:
    done = subprocess.run([GCC, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def fixture_libccl(folder: Path, needs: str = "") -> Path:
    """A FIXTURE libccl.so.1 (soname libccl.so.1, one function; not oneCCL); ``needs``: a library it is linked against."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "fixture_ccl.c"
    source.write_text('/* FIXTURE libccl.so.1 built by compatmatrix tests: not oneCCL */\nconst char *compat_fixture_ccl(void) { return "FIXTURE"; }\n')
    extra = ["-L", str(folder), "-Wl,--no-as-needed", f"-l:{needs}"] if needs else []
    _cc("-shared", "-fPIC", "-Wl,-soname,libccl.so.1", "-o", str(folder / "libccl.so.1"), str(source), *extra)
    return folder / "libccl.so.1"


def fixture_libccl_2(folder: Path) -> Path:
    """A FIXTURE libccl.so.2 for a libccl.so.1 to need."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "fixture_ccl2.c"
    source.write_text("/* FIXTURE libccl.so.2 built by compatmatrix tests */\nint compat_fixture_ccl2(void) { return 2; }\n")
    _cc("-shared", "-fPIC", "-Wl,-soname,libccl.so.2", "-o", str(folder / "libccl.so.2"), str(source))
    return folder / "libccl.so.2"


def fixture_bindings(env: FixtureEnv, ccl_dir: Path, runpath: str = "", extension_rpath: str = "", soname: str = "libccl.so.1") -> Path:
    """FIXTURE bindings without env/setvars.sh: lib/liboneccl_bindings_for_pytorch.so needs ``soname`` (found in ``ccl_dir``
    at link time) with ``runpath`` as its DT_RUNPATH (none when empty); the _C extension needs it, with DT_RUNPATH
    $ORIGIN/lib as setup.py links it, or DT_RPATH $ORIGIN/lib:``extension_rpath`` (old dtags) when that is given."""
    env.bindings("2.7.0", setvars=False)
    package = env.site / PACKAGE
    lib = package / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (package / "fixture_bindings.c").write_text("/* FIXTURE bindings library */\nextern const char *compat_fixture_ccl(void);\n"
                                                 "const char *compat_fixture_bindings(void) { return compat_fixture_ccl(); }\n")
    (package / "fixture_ext.c").write_text("/* FIXTURE _C extension */\nextern const char *compat_fixture_bindings(void);\n"
                                           "const char *compat_fixture_ext(void) { return compat_fixture_bindings(); }\n")
    rpath = [f"-Wl,-rpath,{runpath}"] if runpath else []
    _cc("-shared", "-fPIC", "-o", str(lib / "liboneccl_bindings_for_pytorch.so"), str(package / "fixture_bindings.c"),
        "-L", str(ccl_dir), "-Wl,--no-as-needed", f"-l:{soname}", *rpath)
    ext_rpath = ["-Wl,--disable-new-dtags", f"-Wl,-rpath,$ORIGIN/lib:{extension_rpath}"] if extension_rpath else ["-Wl,-rpath,$ORIGIN/lib"]
    _cc("-shared", "-fPIC", "-o", str(package / f"_C{EXT_SUFFIX}"), str(package / "fixture_ext.c"), "-L", str(lib),
        "-Wl,--no-as-needed", "-loneccl_bindings_for_pytorch", f"-Wl,-rpath-link,{ccl_dir}", *ext_rpath)
    return package


def extension(env: FixtureEnv) -> Path:
    return env.site / PACKAGE / f"_C{EXT_SUFFIX}"


def ldd(path: Path, env_extra=None) -> dict:
    """What the loader itself resolves (ldd: trace mode, nothing runs): name -> path, or None when not found."""
    if shutil.which("ldd") is None:
        pytest.skip("ldd is not installed here: the loader cannot be asked")
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=60, env=base_env(env_extra), check=False)
    found = {}
    for line in done.stdout.splitlines():
        name, sep, rest = line.strip().partition(" => ")
        if sep:
            found[name] = None if rest.startswith("not found") else rest.rsplit(" (", 1)[0]
    return found


def machine_libccl() -> str:
    """Why the loader of this machine would find a libccl.so.1 of its own (ldconfig's cache, the default folders), or ""."""
    from compatmatrix.environment.linker import default_dirs, ldconfig_cache

    cached = ldconfig_cache().get("libccl.so.1")
    if cached:
        return f"this machine's ldconfig cache has libccl.so.1 ({cached[0]})"
    for folder in (*default_dirs(), "/opt/intel/oneapi/ccl/latest/lib"):
        if (Path(folder) / "libccl.so.1").exists():
            return f"this machine has {folder}/libccl.so.1"
    return ""


def context(env: FixtureEnv, matrix, tmp_path: Path, machine_free: bool = False) -> Context:
    """The Context the doctor builds for ``env`` (the real probe), with the library search compat makes, except that
    oneAPI's install folder is one that does not exist. ``machine_free``: the test needs this machine to have no
    libccl.so.1 of its own where the loader looks (ldconfig's cache, the default folders); it skips, saying so, if it has."""
    if machine_free:
        reason = machine_libccl()
        if reason:
            pytest.skip(f"{reason}: the loader would take that one")
    snapshot = take_snapshot(str(env.python))
    ctx = Context(matrix, snapshot)
    data = snapshot.raw["python"].get("data")
    places = extra_places(snapshot.prefix, data, {**snapshot.env, "ONEAPI_ROOT": str(tmp_path / "no-oneapi")})
    ctx.cache[LIBRARY_SEARCH_KEY] = LibrarySearch(os.environ.get("LD_LIBRARY_PATH", ""), snapshot.executable, extra=places)
    return ctx


def compat(*args, env_extra=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "compatmatrix", *args], capture_output=True, text=True, timeout=timeout, env=base_env(env_extra), check=False)


# --- where the libccl is: each RUNPATH variant ------------------------------------------------------------------------


@needs_gcc
def test_runpath_relative_to_origin(tmp_path, matrix, monkeypatch):
    """The oneccl-cpu layout: libccl.so.1 in <prefix>/lib, the bindings' library pointing there with $ORIGIN/../../../..;
    CCL_ROOT set as the wheel's own conda activation script sets it."""
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    ccl = fixture_libccl(Path(env.root) / "lib")
    relative = os.path.relpath(ccl.parent, env.site / PACKAGE / "lib")
    fixture_bindings(env, ccl.parent, runpath=f"$ORIGIN/{relative}")
    monkeypatch.setenv("CCL_ROOT", str(env.root))
    finding = setvars_sourced(context(env, matrix, tmp_path))
    assert finding.status is Status.PASS, finding
    library = env.site / PACKAGE / "lib" / "liboneccl_bindings_for_pytorch.so"
    expected = os.path.normpath(str(library.parent / relative / "libccl.so.1"))
    assert finding.summary == f"the bindings load the system oneCCL {expected} (RUNPATH $ORIGIN/{relative} of {library})"
    assert f"{library} names libccl.so.1 (DT_NEEDED)" in finding.evidence
    assert f"loaded through: {extension(env)} -> {library}" in finding.evidence
    assert os.path.realpath(ldd(extension(env))["libccl.so.1"]) == os.path.realpath(expected)  # the loader agrees


@needs_gcc
def test_runpath_absolute_and_what_compat_env_exports(tmp_path, matrix):
    root = tmp_path / "oneccl"
    ccl = fixture_libccl(root / "lib")
    (root / "lib" / "prov").mkdir()
    (root / "lib" / "prov" / "libtcp-fi.so").write_bytes(b"\x7fELF FIXTURE provider")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent, runpath=str(ccl.parent))
    ctx = context(env, matrix, tmp_path)
    finding = setvars_sourced(ctx)
    assert finding.status is Status.WARN, finding  # found by the loader, but FI_PROVIDER_PATH is not set
    # only what a run needs: CCL_ROOT, which oneCCL on CPUs runs without (issue 25's hand check), is neither asked for nor exported
    assert finding.summary == f"the bindings load the system oneCCL {ccl}, but its environment is not set up in this shell: FI_PROVIDER_PATH is missing"
    assert f"found: {ccl} (RUNPATH {ccl.parent} of {env.site / PACKAGE / 'lib' / 'liboneccl_bindings_for_pytorch.so'})" in finding.evidence
    plan = plan_env(ctx, 1)
    assert "CCL_ROOT" not in plan.exports and plan.exports["FI_PROVIDER_PATH"] == str(root / "lib" / "prov")
    assert "LD_LIBRARY_PATH" not in plan.additions  # the RUNPATH finds it: nothing to add in front of every other library
    assert plan.comments[0].startswith(f"oneCCL environment for the system oneCCL the bindings load ({ccl}, found through RUNPATH")
    assert ldd(extension(env))["libccl.so.1"] == str(ccl)


@needs_gcc
def test_no_runpath_but_ld_library_path(tmp_path, matrix, monkeypatch):
    ccl = fixture_libccl(tmp_path / "elsewhere" / "lib")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(ccl.parent))
    monkeypatch.setenv("CCL_ROOT", str(ccl.parent.parent))
    finding = setvars_sourced(context(env, matrix, tmp_path))
    assert finding.status is Status.PASS, finding
    assert finding.summary == f"the bindings load the system oneCCL {ccl} (LD_LIBRARY_PATH)"
    assert ldd(extension(env), {"LD_LIBRARY_PATH": str(ccl.parent)})["libccl.so.1"] == str(ccl)


@needs_gcc
def test_no_runpath_and_nothing_else_fails_with_the_ways_to_install_one(tmp_path, matrix):
    hidden = fixture_libccl(tmp_path / "hidden")  # only to link against: nowhere the loader or compat looks
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, hidden.parent)
    ctx = context(env, matrix, tmp_path, machine_free=True)
    finding = setvars_sourced(ctx)
    assert finding.status is Status.FAIL, finding
    assert finding.summary == "the bindings carry no env/setvars.sh (built against a system oneCCL) and no libccl.so.1 they load is found"
    assert "pip install oneccl-cpu" in finding.fix and "setvars.sh" in finding.fix and "CCL_ROOT" in finding.fix
    assert any(e.startswith("looked in: ") and "LD_LIBRARY_PATH" not in e for e in finding.evidence)
    assert f"looked in: {Path(env.root) / 'lib'} (the environment's own lib folder, where the oneccl-cpu wheel installs)" in finding.evidence
    with pytest.raises(CompatError) as raised:
        plan_env(ctx, 1)
    assert str(raised.value).startswith(f"The oneCCL bindings at {env.site / PACKAGE} carry no env/setvars.sh (a build against a system oneCCL), "
                                        "and no libccl.so.1 they load is found where the loader or compat looked. Install the oneCCL runtime")
    assert ldd(extension(env))["libccl.so.1"] is None  # the loader agrees: not found


@needs_gcc
def test_no_runpath_and_nothing_else_from_the_command_line(tmp_path):
    reason = machine_libccl()
    if reason:
        pytest.skip(f"{reason}: the command line would find that one")
    hidden = fixture_libccl(tmp_path / "hidden")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, hidden.parent)
    done = compat("env", "--python", str(env.python))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no libccl.so.1 they load is found" in done.stderr and "pip install oneccl-cpu" in done.stderr
    checked = compat("check", "--json", "--only", "oneccl.setvars", "--python", str(env.python))
    assert checked.returncode == 1
    (finding,) = json.loads(checked.stdout)["checks"]
    assert finding["status"] == "fail" and "reinstall" not in finding["fix"].lower()


@needs_gcc
def test_in_the_environments_lib_folder_the_loader_does_not_search(tmp_path):
    """libccl.so.1 in <prefix>/lib (where pip puts oneccl-cpu's), no RUNPATH: a warning; compat env adds the folder to
    LD_LIBRARY_PATH (as an addition), after which the check passes and the loader finds it."""
    reason = machine_libccl()
    if reason:
        pytest.skip(f"{reason}: the loader would take that one first")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    ccl = fixture_libccl(Path(env.root) / "lib")
    fixture_bindings(env, ccl.parent)
    checked = compat("check", "--json", "--only", "oneccl", "--python", str(env.python))
    findings = {c["id"]: c for c in json.loads(checked.stdout)["checks"]}
    setvars = findings["oneccl.setvars"]
    assert setvars["status"] == "warn", setvars
    assert setvars["summary"] == (f"the bindings load libccl.so.1 from a system oneCCL found at {ccl} (the environment's own lib folder, where the "
                                  f"oneccl-cpu wheel installs), but the loader does not search there in this shell: LD_LIBRARY_PATH lacks {ccl.parent}")
    # no impi-rt here: libfabric has no provider folder to fall back on (it was "skip": "libfabric uses its own default")
    assert findings["oneccl.fi-provider"]["status"] == "fail" and findings["oneccl.mpirun"]["status"] == "skip"
    assert ldd(extension(env))["libccl.so.1"] is None
    text = compat("env", "--python", str(env.python)).stdout
    assert f'export LD_LIBRARY_PATH="{ccl.parent}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' in text.splitlines()
    assert "CCL_ROOT" not in text  # nothing needs it (oneccl.setvars passes below without it)
    script = (f'eval "$({sys.executable} -m compatmatrix env --python {env.python})" && {{ {sys.executable} -m compatmatrix check --json --only oneccl '
              f'--python {env.python}; test $? -le 1; }} && ldd {extension(env)}')  # 1: no libfabric or providers without impi-rt
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=120, env=base_env(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    document, _, traced = done.stdout.partition("\n}\n")
    after = {c["id"]: c for c in json.loads(document + "\n}")["checks"]}
    assert after["oneccl.setvars"]["status"] == "pass", after["oneccl.setvars"]
    assert after["oneccl.stale-prefix"]["status"] == "pass", after["oneccl.stale-prefix"]
    assert f"libccl.so.1 => {ccl} (" in traced  # the loader, in the environment compat env made, finds that file


@needs_gcc
def test_rpath_of_the_extension_is_inherited(tmp_path, matrix):
    """DT_RPATH (old dtags) on _C reaches the libraries it loads, when they have no DT_RUNPATH of their own."""
    ccl = fixture_libccl(tmp_path / "by-rpath" / "lib")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent, extension_rpath=str(ccl.parent))
    finding = setvars_sourced(context(env, matrix, tmp_path))
    assert finding.status in (Status.PASS, Status.WARN), finding
    assert f"found: {ccl} (RPATH {ccl.parent} of {extension(env)})" in finding.evidence
    assert ldd(extension(env))["libccl.so.1"] == str(ccl)


@needs_gcc
def test_a_oneccl_with_its_own_vars_sh_is_sourced(tmp_path, matrix, monkeypatch):
    root = tmp_path / "oneapi" / "ccl" / "2021.14"
    ccl = fixture_libccl(root / "lib")
    (root / "env").mkdir()
    (root / "env" / "vars.sh").write_text(textwrap.dedent("""\
        # FIXTURE vars.sh (the shape of a oneAPI component's env/vars.sh), written by compatmatrix's tests
        CCL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; export CCL_ROOT
        export LD_LIBRARY_PATH="$CCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export CPATH="$CCL_ROOT/include${CPATH:+:$CPATH}"
        """))
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent)
    monkeypatch.setenv("CCL_ROOT", str(root))
    ctx = context(env, matrix, tmp_path, machine_free=True)
    finding = setvars_sourced(ctx)
    assert finding.status is Status.WARN and finding.summary.endswith(f"LD_LIBRARY_PATH lacks {ccl.parent}"), finding
    assert f"found: {ccl} (CCL_ROOT/lib)" in finding.evidence and f"oneCCL root: {root}, with {root / 'env' / 'vars.sh'}" in finding.evidence
    plan = plan_env(ctx, 1)
    assert plan.comments[0] == (f"oneCCL environment from {root / 'env' / 'vars.sh'}, the script of the system oneCCL the bindings load "
                                f"({ccl}, found in CCL_ROOT/lib) ({PACKAGE})")
    assert plan.additions["LD_LIBRARY_PATH"].prepend == (str(ccl.parent),)
    assert plan.additions["CPATH"].prepend == (str(root / "include"),)
    assert f'export LD_LIBRARY_PATH="{ccl.parent}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' in format_env(plan, "bash").splitlines()


@needs_gcc
def test_a_libccl_whose_own_needs_are_missing_is_a_warning(tmp_path, matrix):
    """As oneccl-cpu 2021.17 and 2022.x on PyPI: libccl.so.1 needs libccl.so.2, which the wheel does not ship."""
    build = tmp_path / "build"
    fixture_libccl_2(build)
    fixture_libccl(build, needs="libccl.so.2")
    shipped = tmp_path / "shipped" / "lib"
    shipped.mkdir(parents=True)
    shutil.copy(build / "libccl.so.1", shipped / "libccl.so.1")  # without libccl.so.2
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, shipped, runpath=str(shipped))
    finding = setvars_sourced(context(env, matrix, tmp_path))
    assert finding.status is Status.WARN, finding
    assert finding.summary == (f"the system oneCCL {shipped / 'libccl.so.1'} is found (RUNPATH {shipped} of "
                               f"{env.site / PACKAGE / 'lib' / 'liboneccl_bindings_for_pytorch.so'}), but the loader cannot load it: it needs libccl.so.2, which is not found")
    assert finding.fix.startswith("Put the folder that holds libccl.so.2 on LD_LIBRARY_PATH")
    assert ldd(extension(env))["libccl.so.2"] is None  # the loader agrees


@needs_gcc
def test_the_system_oneccls_folders_are_not_stale(tmp_path, matrix, monkeypatch):
    """LD_LIBRARY_PATH naming the system oneCCL the bindings load is right, not a prefix shadowing the wheel's."""
    ccl = fixture_libccl(tmp_path / "oneccl" / "lib")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(ccl.parent))
    monkeypatch.setenv("CCL_ROOT", str(ccl.parent.parent))
    finding = stale_prefix(context(env, matrix, tmp_path))
    assert finding.status is Status.PASS, finding


# --- the ELF reader and the loader's rules (pure) --------------------------------------------------------------------


@needs_gcc
def test_elf_reader_agrees_with_readelf(tmp_path):
    ccl = fixture_libccl(tmp_path / "oneccl" / "lib")
    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    fixture_bindings(env, ccl.parent, runpath="$ORIGIN/x:/abs/y")
    info = read_elf(str(env.site / PACKAGE / "lib" / "liboneccl_bindings_for_pytorch.so"))
    assert "libccl.so.1" in info.needed and info.runpath == ("$ORIGIN/x", "/abs/y") and info.has_runpath and info.rpath == ()
    assert read_elf(str(ccl)).soname == "libccl.so.1"
    assert read_elf(str(extension(env))).runpath == ("$ORIGIN/lib",)
    if shutil.which("readelf"):
        shown = subprocess.run(["readelf", "-d", str(ccl)], capture_output=True, text=True, timeout=60, check=True).stdout
        assert all(f"[{name}]" in shown for name in read_elf(str(ccl)).needed)


def _synthetic_elf(bits: int, little: bool, needed=("libccl.so.1",), runpath="$ORIGIN/lib", soname="libfixture.so") -> bytes:
    """A minimal FIXTURE ELF shared object (header, PT_LOAD, PT_DYNAMIC, string table) in any class and byte order."""
    order = "<" if little else ">"
    names = b"\0"
    offsets = {}
    for text in (*needed, runpath, soname):
        offsets[text] = len(names)
        names += text.encode() + b"\0"
    dyn_entries = [(1, offsets[n]) for n in needed] + [(29, offsets[runpath]), (14, offsets[soname]), (5, 0x1000), (10, len(names)), (0, 0)]
    header_size, phdr_size, dyn_size = (64, 56, 16) if bits == 64 else (52, 32, 8)
    phoff = header_size
    dyn_off = phoff + 2 * phdr_size
    str_off = dyn_off + len(dyn_entries) * dyn_size
    total = str_off + len(names)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1 if little else 2, 1]) + bytes(9)
    if bits == 64:
        header = struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, header_size, phdr_size, 2, 0, 0, 0)
        load = struct.pack(order + "IIQQQQQQ", 1, 5, 0, 0x1000 - str_off, 0, total, total, 0x1000)
        dynamic = struct.pack(order + "IIQQQQQQ", 2, 6, dyn_off, 0, 0, len(dyn_entries) * dyn_size, 0, 8)
        dyn = b"".join(struct.pack(order + "qQ", t, v) for t, v in dyn_entries)
    else:
        header = struct.pack(order + "HHIIIIIHHHHHH", 3, 3, 1, 0, phoff, 0, 0, header_size, phdr_size, 2, 0, 0, 0)
        load = struct.pack(order + "IIIIIIII", 1, 0, 0x1000 - str_off, 0, total, total, 5, 0x1000)
        dynamic = struct.pack(order + "IIIIIIII", 2, dyn_off, 0, 0, len(dyn_entries) * dyn_size, 0, 6, 4)
        dyn = b"".join(struct.pack(order + "iI", t, v) for t, v in dyn_entries)
    data = ident + header + load + dynamic + dyn + names
    assert len(data) == total
    return data


@pytest.mark.parametrize("bits, little", [(64, True), (64, False), (32, True), (32, False)])
def test_elf_reader_reads_every_class_and_byte_order(tmp_path, bits, little):
    path = tmp_path / "libfixture.so"
    path.write_bytes(_synthetic_elf(bits, little, needed=("libccl.so.1", "libc.so.6")))
    info = read_elf(str(path))
    assert (info.bits, info.needed, info.runpath, info.soname) == (bits, ("libccl.so.1", "libc.so.6"), ("$ORIGIN/lib",), "libfixture.so")


@pytest.mark.parametrize("damage, words", [
    (lambda d: d[:40], "its header lies outside the file"),
    (lambda d: b"#!/bin/sh\n" + d, "is not an ELF file"),
    (lambda d: d[:4] + b"\x07" + d[5:], "unknown ELF class"),
    (lambda d: d[:16] + struct.pack("<H", 1) + d[18:], "not a shared library or program"),
    (lambda d: d[:56] + struct.pack("<H", 60000) + d[58:], "program headers, more than compat reads"),
    (lambda d: d[:32] + struct.pack("<Q", 1 << 40) + d[40:], "program header table lies outside the file"),
    (lambda d: d[:180], "its dynamic section lies outside the file"),
    (lambda d: d[:-1] + b"X", "not terminated"),  # the last name of the string table loses its NUL
    (lambda d: d.replace(b"libfixture.so", b"x" * 13), None),  # still a valid file
])
def test_elf_reader_refuses_damaged_files_with_a_sentence(tmp_path, damage, words):
    path = tmp_path / "damaged.so"
    path.write_bytes(damage(_synthetic_elf(64, True)))
    if words is None:
        assert read_elf(str(path)).soname == "x" * 13
        return
    with pytest.raises(ElfError) as raised:
        read_elf(str(path))
    assert words in str(raised.value) and str(path) in str(raised.value)


def test_elf_reader_bounds_each_name(tmp_path):
    path = tmp_path / "long.so"
    path.write_bytes(_synthetic_elf(64, True, soname="x" * 5000))
    with pytest.raises(ElfError, match="longer than 4096 bytes"):
        read_elf(str(path))


def test_origin_and_ldconfig_parsing():
    assert expand_origin("$ORIGIN/../lib", "/a/b") == "/a/lib"
    assert expand_origin("${ORIGIN}/x", "/a") == "/a/x"
    assert expand_origin("lib", "/a") is None and expand_origin("$LIB/x", "/a") is None  # the working directory, or a token compat cannot know
    text = ("3 libs found in cache `/etc/ld.so.cache'\n\tlibccl.so.1 (libc6,x86-64) => /opt/x/libccl.so.1\n"
            "\tlibccl.so.1 (libc6) => /opt/x32/libccl.so.1\n\tlibz.so.1 (libc6,x86-64, hwcap: 0x0000000000000002) => /lib/libz.so.1\n")
    assert parse_ldconfig(text) == {"libccl.so.1": ["/opt/x/libccl.so.1", "/opt/x32/libccl.so.1"], "libz.so.1": ["/lib/libz.so.1"]}


def test_a_library_of_another_class_is_passed_over(tmp_path):
    """The loader skips a file of the wrong ELF class; so does compat."""
    requester = tmp_path / "requester.so"
    requester.write_bytes(_synthetic_elf(64, True, runpath=str(tmp_path / "a") + ":" + str(tmp_path / "b")))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "libccl.so.1").write_bytes(_synthetic_elf(32, True))
    (tmp_path / "b" / "libccl.so.1").write_bytes(_synthetic_elf(64, True))
    located, _ = LibrarySearch(ldconfig={}, system_dirs=()).find("libccl.so.1", read_elf(str(requester)))
    assert located is not None and located.path == str(tmp_path / "b" / "libccl.so.1")


def _as_another_user(work):
    """``work()`` as a user who is not root (root reads every file): a forked child that drops to nobody when this
    runs as root; the value comes back through a pipe."""
    if os.geteuid() != 0:
        return work()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, run, write the answer, leave without running pytest's cleanup
        code = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(writer, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the child running as nobody failed"
    return json.loads(data)


def test_a_libccl_this_user_cannot_read_is_named_not_passed_over_in_silence():
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="compat-unreadable-"))  # in /tmp, open to every user: nobody must reach the file
    try:
        folder.chmod(0o755)
        (folder / "lib").mkdir(mode=0o755)
        requester = folder / "requester.so"
        requester.write_bytes(_synthetic_elf(64, True, runpath=str(folder / "lib")))
        requester.chmod(0o644)
        hidden = folder / "lib" / "libccl.so.1"
        hidden.write_bytes(_synthetic_elf(64, True))
        hidden.chmod(0o000)

        def find():
            located, looked = LibrarySearch(ldconfig={}, system_dirs=()).find("libccl.so.1", read_elf(str(requester)))
            return [located is not None, list(looked)]

        found, looked = _as_another_user(find)
        assert not found
        assert f"{hidden} (there, but this user cannot read it: permission denied; the loader cannot open it either)" in looked
        # a folder this user may not search (a root install with umask 077): the file cannot even be seen
        hidden.chmod(0o644)
        (folder / "lib").chmod(0o700)
        found, looked = _as_another_user(find)
        assert not found
        assert f"{folder / 'lib'} (this user cannot look inside it: permission denied; the loader cannot either)" in looked
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- oneCCL's key-value store on a host whose only interface is lo -------------------------------------------------


@pytest.mark.parametrize("interfaces, value, status, words", [
    (["lo"], None, Status.WARN, "lo is the only network interface up and CCL_KVS_IFACE is not set"),
    (["lo"], "lo", Status.PASS, "CCL_KVS_IFACE=lo, an interface that is up"),
    (["eth0", "lo"], None, Status.PASS, "CCL_KVS_IFACE is not set"),
    (["eth0", "lo"], "ib0", Status.WARN, "CCL_KVS_IFACE=ib0 is not an interface that is up here"),
    ([], None, Status.SKIP, "no network interface was found up"),
])
def test_kvs_iface_finding(interfaces, value, status, words):
    finding = kvs_iface_finding(True, interfaces, value)
    assert finding.status is status and words in finding.summary, finding
    if interfaces == ["lo"] and value is None:
        assert finding.fix.startswith("export CCL_KVS_IFACE=lo")
    assert kvs_iface_finding(False, interfaces, value).status is Status.SKIP


def test_kvs_iface_check_reads_the_interfaces_it_is_given(tmp_path, matrix, monkeypatch):
    env = FixtureEnv(tmp_path / "env").torch("2.7.0").bindings("2.7.0")
    ctx = Context(matrix, take_snapshot(str(env.python)))
    ctx.cache[INTERFACES_KEY] = ["lo"]  # a container without a network; not this machine's interfaces
    finding = kvs_iface(ctx)
    assert finding.status is Status.WARN and finding.fix.startswith("export CCL_KVS_IFACE=lo"), finding
    monkeypatch.setenv("CCL_KVS_IFACE", "lo")
    ctx = Context(matrix, take_snapshot(str(env.python)))
    ctx.cache[INTERFACES_KEY] = ["lo"]
    assert kvs_iface(ctx).status is Status.PASS
    listed = compat("check", "--list", env_extra={"COLUMNS": "200"})
    assert "oneccl.kvs-iface" in listed.stdout


def test_kvs_iface_in_a_network_namespace_with_only_lo(tmp_path):
    """The real /sys/class/net of a namespace whose only interface is lo: compat check says what compat env --launcher torchrun sets."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace with only lo")
    import uuid

    env = FixtureEnv(tmp_path / "venv").torch("2.7.0").bindings("2.7.0")
    namespace = f"cmt{os.getpid()}x{uuid.uuid4().hex[:6]}-kvs"
    made = subprocess.run(["ip", "netns", "add", namespace], capture_output=True, text=True, timeout=20, check=False)
    if made.returncode != 0:
        pytest.skip(f"a network namespace cannot be made here: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True, timeout=20)
        done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "compatmatrix", "check", "--json", "--only", "oneccl.kvs-iface",
                               "--python", str(env.python)], capture_output=True, text=True, timeout=120, env=base_env(), check=False)
    finally:
        subprocess.run(["ip", "netns", "del", namespace], timeout=20, check=False)
    (finding,) = json.loads(done.stdout)["checks"]
    assert finding["status"] == "warn" and finding["fix"].startswith("export CCL_KVS_IFACE=lo"), finding
    assert finding["evidence"] == ["interfaces up: lo"]


# --- the REAL libccl of the PyPI oneccl-cpu wheel (integration) ------------------------------------------------------

# name -> (requirements, extra pip arguments), built and cached by tests/real_envs.py's builder
ONECCL_ENVS = {
    # a oneccl-cpu whose libccl.so.1 needs nothing the wheel lacks; impi-rt (its dependency) pinned to the release the
    # "impi" environment already uses. (`pip install oneccl-cpu` of the newest, 2022.2.0, needs libfabric>=2.6, which
    # this registry does not serve.)
    "oneccl-cpu-2021.16.1": (["oneccl-cpu==2021.16.1", "impi-rt==2021.18.1"], []),
    # its libccl.so.1 names libccl.so.2 in DT_NEEDED, and the wheel ships no libccl.so.2 (neither does 2022.2.0)
    "oneccl-cpu-2021.17.2-alone": (["oneccl-cpu==2021.17.2"], ["--no-deps"]),
}


def real_oneccl_env(name: str) -> Path:
    from ..real_envs import SPECS, RealEnvUnavailable, real_env

    with mock.patch.dict(SPECS, {name: ONECCL_ENVS[name]}):
        try:
            return real_env(name)
        except RealEnvUnavailable as exc:
            pytest.skip(f"real environment {name}: {exc}")


def fixture_extension_for(tmp_path: Path, libccl: Path) -> Path:
    """A folder for PYTHONPATH with FIXTURE bindings (dist-info, __init__.py, _C extension) linked by name against
    ``libccl`` (-l:libccl.so.1, no RUNPATH): the cached real environment itself is left as pip made it."""
    overlay = tmp_path / "overlay"
    package = overlay / PACKAGE
    package.mkdir(parents=True)
    dist = overlay / "oneccl_bind_pt-2.7.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: oneccl-bind-pt\nVersion: 2.7.0\n\n")
    (dist / "INSTALLER").write_text("compat-test-fixture\n")
    (package / "__init__.py").write_text("# FIXTURE module written by tests/environment/test_system_oneccl.py: not the real package.\n")
    (package / "fixture_ext.c").write_text("/* FIXTURE _C extension linked against a real libccl by name */\nint compat_fixture_ext(void) { return 0; }\n")
    _cc("-shared", "-fPIC", "-o", str(package / f"_C{EXT_SUFFIX}"), str(package / "fixture_ext.c"), "-L", str(libccl.parent),
        "-Wl,--no-as-needed", "-l:libccl.so.1")
    return overlay


@pytest.mark.integration
@pytest.mark.network
@needs_gcc
def test_the_real_libccl_of_the_pypi_oneccl_cpu_wheel_is_found(tmp_path):
    reason = machine_libccl()
    if reason:
        pytest.skip(f"{reason}: the loader would take that one first")
    python = real_oneccl_env("oneccl-cpu-2021.16.1")
    prefix = python.parent.parent
    libccl = prefix / "lib" / "libccl.so.1"
    assert libccl.is_file() and read_elf(str(libccl)).soname == "libccl.so.1"  # pip put the real one there
    overlay = fixture_extension_for(tmp_path, libccl)
    env = {"PYTHONPATH": str(overlay)}
    checked = compat("check", "--json", "--only", "oneccl", "--python", str(python), env_extra=env)
    findings = {c["id"]: c for c in json.loads(checked.stdout)["checks"]}
    setvars = findings["oneccl.setvars"]
    assert setvars["status"] == "warn", setvars
    assert f"found at {libccl} (the environment's own lib folder, where the oneccl-cpu wheel installs)" in setvars["summary"]
    assert f"libfabric providers: {prefix / 'lib'}" in setvars["evidence"]  # impi-rt's real providers, next to libccl
    assert ldd(overlay / PACKAGE / f"_C{EXT_SUFFIX}")["libccl.so.1"] is None  # the loader does not look there either
    text = compat("env", "--python", str(python), env_extra=env).stdout
    assert f'export LD_LIBRARY_PATH="{prefix / "lib"}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' in text.splitlines()
    # impi-rt 2021.18's layout (its activation script: libfabric and its providers in lib); CCL_ROOT, which no run needs, is not set
    assert "CCL_ROOT" not in text and f"export FI_PROVIDER_PATH={prefix / 'lib'}" in text.splitlines()
    script = (f'eval "$({sys.executable} -m compatmatrix env --python {python})" && {sys.executable} -m compatmatrix check --json --only oneccl '
              f'--python {python} && ldd {overlay / PACKAGE / f"_C{EXT_SUFFIX}"}')
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=120, env=base_env(env), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    document, _, traced = done.stdout.partition("\n}\n")
    after = {c["id"]: c for c in json.loads(document + "\n}")["checks"]}
    assert after["oneccl.setvars"]["status"] == "pass", after["oneccl.setvars"]
    assert after["oneccl.setvars"]["summary"] == f"the bindings load the system oneCCL {libccl} (LD_LIBRARY_PATH)"
    assert after["oneccl.fi-provider"]["status"] == "pass" and after["oneccl.stale-prefix"]["status"] == "pass", after
    assert f"libccl.so.1 => {libccl} (" in traced  # the real loader finds the same real file


@pytest.mark.integration
@pytest.mark.network
@needs_gcc
def test_the_real_oneccl_cpu_2021_17_libccl_needs_a_libccl_so_2_it_does_not_ship(tmp_path):
    python = real_oneccl_env("oneccl-cpu-2021.17.2-alone")
    prefix = python.parent.parent
    libccl = prefix / "lib" / "libccl.so.1"
    overlay = fixture_extension_for(tmp_path, libccl)
    env = {"PYTHONPATH": str(overlay), "LD_LIBRARY_PATH": str(prefix / "lib")}
    checked = compat("check", "--json", "--only", "oneccl.setvars", "--python", str(python), env_extra=env)
    (finding,) = json.loads(checked.stdout)["checks"]
    assert finding["status"] == "warn", finding
    assert finding["summary"] == f"the system oneCCL {libccl} is found (LD_LIBRARY_PATH), but the loader cannot load it: it needs libccl.so.2, which is not found"
    assert ldd(libccl, {"LD_LIBRARY_PATH": str(prefix / "lib")})["libccl.so.2"] is None  # the real loader agrees
