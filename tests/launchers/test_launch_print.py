"""`compat launch --print` output works AS PRINTED (issue 25): the test runs the printed text itself (`bash -c`, in a
clean environment: no oneCCL, MPI or rendezvous variable set) and the ranks form their group.

* gloo for real (torch 2.13) under Intel MPI's real mpirun (impi-rt from PyPI): mpirun gives its ranks no rendezvous
  address, so the printed text must carry MASTER_ADDR;
* ccl through the FIXTURE backend (tests/fixture_ccl.py: gloo under the name ccl, NOT oneCCL) under torchrun and under
  Intel mpirun. The FIXTURE bindings' native extension is linked against the REAL libccl.so.1 of the PyPI runtime
  (oneccl-cpu + impi-rt 2021.14.1, with that lib folder as RPATH, as a build against it gets), and before it registers ccl it asks what real oneCCL asked for
  in the hand check of issue 25: the real libfabric.so loadable by that name ("could not open the library:
  libfabric.so"), a provider for it (fi_getinfo -61 without FI_PROVIDER_PATH), the OFI transport without an MPI
  launcher ("failed to initialize ATL"), I_MPI_ROOT under Intel MPI ("neither I_MPI_ROOT nor ONEAPI_ROOT is set"), and
  CCL_WORKER_COUNT > 0 (accelerate takes ccl only then).

The environments are the cached ones (tests/real_envs.py); the venv with the FIXTURE bindings is a `--without-pip`
venv whose .pth names the cached torch 2.13's site-packages. About 3 launches of 2 ranks each.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ..clean_env import base_env
from ..conftest import ROOT
from ..environment.test_oneccl_runtime_layout import fixture_layout
from ..environment.test_system_oneccl import EXT_SUFFIX, PACKAGE, _cc, fixture_extension_for, machine_libccl, needs_gcc
from ..fixture_ccl import SOURCE as FIXTURE_CCL_SOURCE

pytestmark = pytest.mark.integration

RANK_SCRIPT = """
import json, os, sys
for rank, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):  # as accelerate maps them
    if rank in os.environ and "RANK" not in os.environ:
        os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ[rank], os.environ[size]
backend = sys.argv[2]
if backend == "ccl":
    assert int(os.environ.get("CCL_WORKER_COUNT", "0")) > 0, "accelerate: Your assigned backend ccl is not available (CCL_WORKER_COUNT)"
    import oneccl_bindings_for_pytorch  # noqa: F401
import torch
import torch.distributed as dist
dist.init_process_group(backend)  # env://: MASTER_ADDR and MASTER_PORT
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
with open(os.path.join(sys.argv[1], "rank-%d.json" % dist.get_rank()), "w") as out:
    json.dump({"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": total.item(), "backend": dist.get_backend()}, out)
dist.destroy_process_group()
"""

# FIXTURE: what real oneCCL 2021.14 with impi-rt asked of its environment in issue 25's hand check, asked before the
# FIXTURE ccl backend (gloo underneath) registers; each failure is the real one's message
NEEDS = '''"""TEST FIXTURE bindings (tests/launchers/test_launch_print.py): not oneccl_bind_pt."""
import ctypes, os
ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C{suffix}"))  # linked against the real libccl.so.1 by name
try:
    _fabric = ctypes.CDLL("libfabric.so")  # the name libccl dlopens
except OSError:
    raise RuntimeError("FIXTURE ccl: could not open the library: libfabric.so")
_fabric.fi_getinfo.restype = ctypes.c_int
_fabric.fi_getinfo.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
_info = ctypes.c_void_p()
_ret = _fabric.fi_getinfo((1 << 16) | 18, None, None, 0, None, ctypes.byref(_info))
if _ret != 0:
    raise RuntimeError("FIXTURE ccl: fi_getinfo error: ret %d" % _ret)
if "PMI_RANK" in os.environ and os.environ.get("CCL_ATL_TRANSPORT", "mpi") == "mpi" and not (os.environ.get("I_MPI_ROOT") or os.environ.get("ONEAPI_ROOT")):
    raise RuntimeError("FIXTURE ccl: check_impi_env: neither I_MPI_ROOT nor ONEAPI_ROOT is set")
'''


def runtime_prefix() -> Path:
    from ..environment.test_oneccl_runtime_layout import runtime_env

    return runtime_env().parent.parent


def intel_mpi_or_skip() -> None:
    from ..live.test_live_real import hostname_unresolvable

    why = hostname_unresolvable()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def torch_python(stock_torch213) -> Path:
    return Path(stock_torch213)


@pytest.fixture(scope="module")
def ccl_python(torch_python, tmp_path_factory) -> Path:
    """A venv with torch 2.13 (the cached environment's, through a .pth) and the FIXTURE bindings whose extension
    is linked against the REAL libccl.so.1 of the PyPI runtime."""
    if machine_libccl():
        pytest.skip(f"{machine_libccl()}: the loader would take that one first")
    prefix = runtime_prefix()
    root = tmp_path_factory.mktemp("ccl-venv")
    overlay = fixture_extension_for(root, prefix / "lib" / "libccl.so.1")
    package = overlay / PACKAGE  # its extension again, with the RPATH a build against the installed runtime gets
    _cc("-shared", "-fPIC", "-o", str(package / f"_C{EXT_SUFFIX}"), str(package / "fixture_ext.c"), "-L", str(prefix / "lib"),
        "-Wl,--no-as-needed", "-l:libccl.so.1", f"-Wl,-rpath,{prefix / 'lib'}", "-Wl,--disable-new-dtags")
    (overlay / PACKAGE / "__init__.py").write_text(NEEDS.format(suffix=EXT_SUFFIX) + FIXTURE_CCL_SOURCE)
    venv = root / "venv"
    subprocess.run([str(torch_python), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120, env=base_env())
    (site,) = venv.glob("lib/python3*/site-packages")
    (torch_site,) = torch_python.parent.parent.glob("lib/python3*/site-packages")
    (site / "compat_test_fixture.pth").write_text(f"{overlay}\n{torch_site}\n")
    return venv / "bin" / "python"


def printed(args, env) -> str:
    done = subprocess.run([sys.executable, "-m", "compatmatrix", "launch", "--print", *args], capture_output=True, text=True, timeout=180,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_as_printed(text: str, env, out: Path) -> list:
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", text], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert ran.returncode == 0, text + "\n---\n" + ran.stdout[-3000:] + ran.stderr[-3000:]
    return sorted((json.loads(p.read_text()) for p in out.glob("rank-*.json")), key=lambda r: r["rank"])


def launch_env(**extra) -> dict:
    from compatmatrix.processes import free_port

    # a port of the test's own (given, so kept: compat prints MASTER_ADDR only); nothing of oneCCL, MPI or the rendezvous
    return base_env({"MASTER_PORT": str(free_port()), **extra})


def test_gloo_under_intel_mpirun_forms_its_group_as_printed(torch_python, tmp_path):
    intel_mpi_or_skip()
    mpirun = runtime_prefix() / "bin" / "mpirun"
    out = tmp_path / "ranks"
    out.mkdir()
    env = launch_env()
    text = printed(["--python", str(torch_python), "--launcher", "mpirun", "--mpirun", str(mpirun), "--nproc-per-node", "2", "--ccl-workers", "0",
                    "--", "-c", RANK_SCRIPT, str(out), "gloo"], env)
    ranks = run_as_printed(text, env, out)
    assert "export MASTER_ADDR=127.0.0.1" in text.splitlines()  # mpirun gives its ranks none; torch's env:// needs it
    assert env["PATH"] not in text  # hydra's folder is put in front of PATH, the PATH itself is not written out
    assert [(r["rank"], r["world"], r["sum"], r["backend"]) for r in ranks] == [(0, 2, 3.0, "gloo"), (1, 2, 3.0, "gloo")]


def open_mpi_or_skip() -> str:
    import shutil

    mpirun = shutil.which("mpirun", path=base_env().get("PATH"))
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30, check=False) if mpirun else None
    if version is None or "Open MPI" not in version.stdout + version.stderr:
        pytest.skip("no Open MPI mpirun on PATH")
    return str(mpirun)


@needs_gcc
@pytest.mark.parametrize("launcher", ["torchrun", "intel-mpi", "open-mpi"])
def test_fixture_ccl_forms_its_group_as_printed_with_the_real_runtime(ccl_python, launcher, tmp_path):
    """Old code printed no oneCCL environment: the extension's libccl.so.1 was not found, libfabric neither, and
    (2 cores) no CCL_WORKER_COUNT. Under Open MPI's mpirun: the OFI transport, and every variable passed by -x."""
    args = ["--python", str(ccl_python), "--launcher", "torchrun" if launcher == "torchrun" else "mpirun"]
    if launcher == "intel-mpi":
        intel_mpi_or_skip()
        args += ["--mpirun", str(runtime_prefix() / "bin" / "mpirun")]
    elif launcher == "open-mpi":
        args += ["--mpirun", open_mpi_or_skip()]
    out = tmp_path / "ranks"
    out.mkdir()
    env = launch_env(COMPAT_FIXTURE_CCL_MODE="atl-mpi")  # the FIXTURE fails "failed to initialize ATL" without the OFI transport
    text = printed([*args, "--nproc-per-node", "2", "--ccl-workers", "0", "--", "-c", RANK_SCRIPT, str(out), "ccl"], env)
    ranks = run_as_printed(text, env, out)
    assert "export CCL_WORKER_COUNT=1" in text.splitlines()  # no core set aside, still at least 1
    if launcher != "intel-mpi":
        assert "export CCL_ATL_TRANSPORT=ofi" in text.splitlines()
    assert [(r["rank"], r["world"], r["sum"], r["backend"]) for r in ranks] == [(0, 2, 3.0, "ccl"), (1, 2, 3.0, "ccl")]


# --- one computation: compat launch, compat env and compat translate print the same oneCCL environment -------------------


def compat_json(*args):
    flags = ("--print", "--json") if args[0] == "launch" else ("--json",)
    done = subprocess.run([sys.executable, "-m", "compatmatrix", args[0], *flags, *args[1:]], capture_output=True, text=True, timeout=180,
                          env=base_env(), check=False)
    assert done.returncode in (0, 1), done.stderr
    document = json.loads(done.stdout)
    schema = {"env": "env-v2.json", "launch": "launch-v1.json", "translate": "translate-v1.json", "check": "findings-v1.json"}[args[0]]
    jsonschema.validate(document, json.loads((ROOT / "compatmatrix" / "schemas" / schema).read_text()))
    return document


THREADS = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY", "KMP_BLOCKTIME", "LD_PRELOAD", "MALLOC_CONF", "CCL_WORKER_COUNT",
           "CCL_WORKER_AFFINITY", "I_MPI_PIN", "I_MPI_PIN_DOMAIN")  # the launch plan's own (per-plan thread and binding settings)


@needs_gcc
@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "srun"])
def test_launch_print_carries_exactly_what_compat_env_launcher_exports(tmp_path, launcher):
    """One plan, every form (issue 36): the old srun line dropped the libfabric entry of LD_LIBRARY_PATH the torchrun
    and mpirun lines carry ("failed to initialize ATL" as printed), and compat env --launcher mpirun lacked VENV/bin on
    PATH, where hydra's programs are (a clean shell's mpirun was then Debian's Open MPI)."""
    env, prefix = fixture_layout(tmp_path)
    exported = compat_json("env", "--python", str(env.python), "--launcher", launcher)
    printed = compat_json("launch", "--python", str(env.python), "--launcher", launcher, "--nproc-per-node", "2", "--ccl-workers", "0", "--", "train.py")
    oneccl = {k: v for k, v in printed["env"].items() if k not in THREADS}
    assert oneccl == {k: v for k, v in exported["exports"].items() if k not in THREADS}
    assert oneccl["FI_PROVIDER_PATH"] == str(prefix / "lib" / "libfabric" / "prov")
    assert printed["env"]["CCL_WORKER_COUNT"] == "1"  # no worker core set aside, at least 1 all the same
    assert printed["additions"] == exported["additions"] and str(prefix / "lib" / "libfabric") in printed["additions"]["LD_LIBRARY_PATH"]["prepend"]
    if launcher == "mpirun":
        assert (oneccl["I_MPI_ROOT"], oneccl["MASTER_ADDR"], oneccl["MASTER_PORT"]) == (str(prefix), "127.0.0.1", "29500")
        command = printed["command"]
        passed = command[command.index("-genvlist") + 1].split(",")  # by name: hydra's remote ranks get them too
        assert set(oneccl) | {"LD_LIBRARY_PATH", "CCL_WORKER_COUNT"} <= set(passed) and "PATH" not in passed
        assert exported["additions"]["PATH"] == {"prepend": [str(Path(env.python).parent)], "append": []}
    else:
        assert oneccl["CCL_ATL_TRANSPORT"] == "ofi" and "MASTER_ADDR" not in oneccl  # torchrun and srun give their ranks a rendezvous
        assert "PATH" not in exported["additions"]


@needs_gcc
def test_translate_notes_print_the_environment_compat_env_exports(tmp_path):
    env, prefix = fixture_layout(tmp_path)
    command = ["mpirun", "-n", "2", "python3", "run_qa.py", "--ddp_backend", "ccl"]
    versions = ("--transformers", "4.56.2", "--accelerate", "1.10.1")
    exported = compat_json("env", "--python", str(env.python), "--launcher", "mpirun")
    document = compat_json("translate", "--python", str(env.python), *versions, "--", *command)
    environment = document["environment"]
    assert environment["launcher"] == "mpirun" and environment["command"] == f'eval "$(compat env --python {env.python} --launcher mpirun)"'
    assert environment["exports"] == {k: v for k, v in exported["exports"].items() if k not in ("OMP_NUM_THREADS", "LD_PRELOAD")}
    assert environment["additions"] == exported["additions"]
    text = subprocess.run([sys.executable, "-m", "compatmatrix", "translate", "--python", str(env.python), *versions, "--", *command],
                          capture_output=True, text=True, timeout=180, env=base_env(), check=False).stdout
    lines = text.splitlines()
    assert f"#   export I_MPI_ROOT={prefix}" in lines and "#   export MASTER_ADDR=127.0.0.1" in lines and "#   export CCL_WORKER_COUNT=1" in lines
    assert any(line.startswith("#   export LD_LIBRARY_PATH=") and str(prefix / "lib" / "libfabric") in line for line in lines)
    torchrun = compat_json("translate", "--python", str(env.python), *versions, "--", "torchrun", "--nproc_per_node", "2", "run_qa.py", "--ddp_backend", "ccl")
    assert torchrun["environment"]["launcher"] == "torchrun" and torchrun["environment"]["exports"]["CCL_ATL_TRANSPORT"] == "ofi"
    gloo = compat_json("translate", "--python", str(env.python), *versions, "--", *command[:-1], "gloo")
    assert "environment" not in gloo  # nothing of oneCCL for gloo


def test_mpirun_needs_master_addr_without_the_bindings_too(tmp_path):
    """gloo under mpirun: torch's env:// stops with "MASTER_ADDR expected, but not set" (the real run above shows the
    printed form carries it); compat check --launcher mpirun says so, and compat env --launcher mpirun's eval fixes it."""
    from ..fixture_envs import FixtureEnv

    env = FixtureEnv(tmp_path / "env").torch("2.7.0")
    checked = compat_json("check", "--only", "oneccl.launcher", "--python", str(env.python), "--launcher", "mpirun")
    (finding,) = checked["checks"]
    assert finding["status"] == "fail", finding
    assert finding["summary"] == "under mpirun, the ranks (any backend) need MASTER_ADDR, MASTER_PORT, which are not set as needed here"
    assert finding["fix"] == f'eval "$(compat env --python {env.python} --launcher mpirun)"'
    exported = compat_json("env", "--python", str(env.python), "--launcher", "mpirun")["exports"]
    assert (exported["MASTER_ADDR"], exported["MASTER_PORT"]) == ("127.0.0.1", "29500")
    given = subprocess.run([sys.executable, "-m", "compatmatrix", "check", "--json", "--only", "oneccl.launcher", "--python", str(env.python),
                            "--launcher", "mpirun"], capture_output=True, text=True, timeout=180, check=False,
                           env=base_env({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}))
    assert json.loads(given.stdout)["checks"][0]["status"] == "pass", given.stdout
    torchrun = compat_json("check", "--only", "oneccl.launcher", "--python", str(env.python), "--launcher", "torchrun")["checks"][0]
    assert torchrun["status"] == "skip"  # torchrun gives its ranks their rendezvous; gloo needs nothing of oneCCL


@pytest.mark.network
def test_the_worker_count_note_against_accelerate_1_12_own_source(tmp_path):
    """The release of issue 25's hand check: accelerate 1.12.0's state.py takes ccl only when CCL_WORKER_COUNT > 0 and
    raises for a backend asked for and not taken (no quiet gloo), as resolve's note, compat env and compat launch say."""
    import re
    import zipfile

    from compatmatrix.reasons import CclWorkerCountNote
    from compatmatrix.sentences import sentence

    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check", "--only-binary", ":all:",
                           "accelerate==1.12.0", "-d", str(tmp_path)], capture_output=True, text=True, timeout=300, env=base_env(), check=False)
    if done.returncode != 0:
        pytest.skip(f"accelerate 1.12.0 cannot be downloaded here: {done.stderr.strip().splitlines()[-1:]}")
    (wheel,) = tmp_path.glob("accelerate-1.12.0-*.whl")
    source = zipfile.ZipFile(wheel).read("accelerate/state.py").decode()
    assert 'get_int_from_env(["CCL_WORKER_COUNT"], 0) > 0' in source
    assert re.search(r'raise ValueError\(f"Your assigned backend \{original_backend\} is not available, please use \{backend\}"\)', source)
    text = sentence(CclWorkerCountNote())
    assert '"ValueError: Your assigned backend ccl is not available"' in text and "quietly" not in text


@needs_gcc
def test_srun_across_an_allocations_nodes_prints_the_interface_compat_env_exports(tmp_path, monkeypatch):
    """Issue 36: under salloc -N2 the srun line with the libfabric entry hung across the two nodes without CCL_KVS_IFACE
    and FI_TCP_IFACE; compat launch --launcher srun now takes the allocation's first host as the master (as each task
    does) and exports the interface that reaches it, the same compat env --launcher srun --master-addr --nnodes gives.
    FIXTURE: scontrol's answer and the kernel's route (no Slurm, no second host here)."""
    from compatmatrix.checks.registry import Context, Options
    from compatmatrix.environment.interfaces import RouteFacts
    from compatmatrix.environment.snapshot import take_snapshot
    from compatmatrix.placement.service import LaunchOptions, prepare
    from compatmatrix.planning import load
    from compatmatrix.shell_env import plan_env

    env, prefix = fixture_layout(tmp_path)
    asked = []
    monkeypatch.setattr("compatmatrix.launchers.srun.scontrol_hostnames", lambda nodelist: asked.append(nodelist) or ["node1", "node2"])
    route = lambda master: RouteFacts(master, ("10.0.0.1",), "", {"10.0.0.1": "eth1"}, {}, ("eth1", "lo"))  # noqa: E731
    monkeypatch.setattr("compatmatrix.launchers.environment.route_facts", route)
    allocation = {**base_env(), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]"}
    options = LaunchOptions("srun", 2, ("train.py",), load(None), ccl_workers=0, python=str(env.python), print_only=True)
    launched = prepare(options, allocation).invocation
    assert asked == ["node[1-2]"]
    assert {k: launched.env.get(k) for k in ("CCL_KVS_IFACE", "FI_TCP_IFACE", "GLOO_SOCKET_IFNAME")} == dict.fromkeys(
        ("CCL_KVS_IFACE", "FI_TCP_IFACE", "GLOO_SOCKET_IFNAME"), "eth1")
    assert str(prefix / "lib" / "libfabric") in launched.additions["LD_LIBRARY_PATH"].prepend
    exported = plan_env(Context(load(None), take_snapshot(str(env.python)), Options()), 2, "srun", "node1", 2, route=route)
    assert {k: v for k, v in launched.env.items() if k not in THREADS} == {k: v for k, v in exported.exports.items() if k not in THREADS}
    # one node's allocation, or none: nothing to choose, as before
    single = prepare(options, {**base_env(), "SLURM_JOB_NUM_NODES": "1"}).invocation
    assert "CCL_KVS_IFACE" not in single.env and "GLOO_SOCKET_IFNAME" not in single.env


@needs_gcc
def test_srun_as_printed_loads_the_real_libfabric_and_finds_its_providers(ccl_python, tmp_path):
    """Issue 36: `compat launch --launcher srun --print` as printed under salloc -N2 failed "failed to initialize ATL": its
    lines lacked the libfabric entry of LD_LIBRARY_PATH the torchrun and mpirun lines carry. Here the printed lines (all
    but the srun command itself: no Slurm is needed for what they set) run in a clean bash with the REAL PyPI runtime,
    and the real libfabric loads by the name libccl dlopens and finds a provider; no rank is started."""
    from ..environment.test_oneccl_runtime_layout import FI_PROBE

    text = printed(["--python", str(ccl_python), "--launcher", "srun", "--nproc-per-node", "2", "--ccl-workers", "0", "--", "train.py"], launch_env())
    assert text.splitlines()[-1].startswith("srun ")
    probe = tmp_path / "fi_probe.py"
    probe.write_text(FI_PROBE)
    script = "\n".join(text.splitlines()[:-1]) + f"\n{shlex.quote(str(ccl_python))} {shlex.quote(str(probe))}\n"
    ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True, timeout=120,
                         env=base_env({"FI_PROVIDER": "tcp"}), check=False)
    assert ran.returncode == 0, text + "\n---\n" + ran.stdout + ran.stderr
    lines = ran.stdout.split()
    assert Path(lines[-2]).parent == (runtime_prefix() / "lib" / "libfabric").resolve(), ran.stdout  # impi-rt's own libfabric
    assert lines[-1] == "0", ran.stdout  # fi_getinfo found a provider
