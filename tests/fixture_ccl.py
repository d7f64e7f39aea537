"""FIXTURE oneCCL bindings: a package named oneccl_bindings_for_pytorch that registers a torch.distributed
backend called "ccl" which is gloo underneath. It is NOT oneCCL and proves nothing about oneCCL; it exists so
the tests can drive compat doctor --live's ccl selection path (bindings import -> "ccl" registered -> chosen)
on a machine where oneccl_bind_pt cannot be installed. It marks itself with COMPAT_TEST_FIXTURE, and compat
labels any backend that carries that mark "TEST FIXTURE, not oneCCL" in every output.

Used by putting the returned folder on PYTHONPATH of the compat run (the ranks inherit it). COMPAT_FIXTURE_CCL_MODE
(comma-separated) makes it fail the way a real oneCCL was reported to: mpi-reinit-segv, import-abort (see SOURCE), and
oneccl-2021.14: the group's creation does what oneCCL 2021.14 under intel/torch-ccl v2.7.0+cpu does with the environment
the rank is really given (which transport, whether the REAL libfabric.so loads through the loader, whether it finds a
provider, I_MPI_ROOT under an MPI launcher, the key-value store's interface), and fails with oneCCL's own words when one
is missing. Nothing tells it which failure to show: the test sets (or leaves out) the variables a user would.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = '''"""TEST FIXTURE from compatmatrix tests/fixture_ccl.py: a backend named ccl on top of gloo. Not oneCCL."""
import os

import torch.distributed as dist

COMPAT_TEST_FIXTURE = "tests/fixture_ccl.py: a backend named ccl on top of gloo, not oneCCL"
__version__ = "0.0.0+fixture"
cwd = os.path.dirname(os.path.abspath(__file__))


# FIXTURE modes (COMPAT_FIXTURE_CCL_MODE, comma-separated), each imitating what a real oneCCL did:
#   mpi-reinit-segv  a second ccl group in one process under an MPI launcher (PMI_RANK set) dies with SIGSEGV, as real
#                    oneCCL's MPI transport did when the probe destroyed its group and the Trainer formed another
#   import-abort     importing aborts with "Mismatch in kernel C++ signatures" (bindings built for another torch)
#   oneccl-2021.14   the group's creation follows oneCCL 2021.14 with the environment it is given (_oneccl_2021_14)
#   impi-under-foreign-mpirun  with oneccl-2021.14: where the MPI transport is taken under a launcher that is not Intel
#                    MPI's (Open MPI's mpirun: OMPI_COMM_WORLD_SIZE, no PMI_RANK), the Intel MPI libmpi it loads aborts
#                    its MPI_Init as MPICH's ch4 device prints an abort (_foreign_mpirun_abort)
MODES = set(filter(None, os.environ.get("COMPAT_FIXTURE_CCL_MODE", "").split(",")))
CREATED = [0]

if "import-abort" in MODES:
    import sys

    sys.stderr.write("terminate called after throwing an instance of 'c10::Error'\\n  what():  Mismatch in kernel C++ signatures (FIXTURE)\\n")
    sys.stderr.flush()
    os.abort()

# The texts below are oneCCL's own, from github.com/uxlfoundation/oneCCL tag 2021.14 (commit
# 3afa1bb7936f57683a2503c34b29c0daca6a9ccb), and intel/torch-ccl tag v2.7.0+cpu (commit 3ac64dbfcf30b67d1b47b17848d9c71080e5283f):
#   src/common/log/log.hpp:254        LOG_ERROR prints "|CCL_ERROR| <file>:<line> <function>: ..."; LOG_WARN "|CCL_WARN| ..."
#   src/common/log/log.hpp:388        CCL_THROW_IF_NOT logs "condition <cond> failed" and throws with the message
#   src/common/api_wrapper/ofi_api_wrapper.cpp:30-60   libfabric is CCL_OFI_LIBRARY_PATH, else I_MPI_OFI_LIBRARY, else
#                                     $I_MPI_ROOT/opt/mpi/libfabric/lib/libfabric.so when it exists, else "libfabric.so"
#   src/common/api_wrapper/api_wrapper.cpp:97   "could not open the library: <path>, error: <dlerror>"
#   src/common/api_wrapper/api_wrapper.cpp:41   "OFI transport was not initialized, fallback to MPI transport"
#   src/atl/ofi/atl_ofi_helper.cpp:867          "fi_getinfo error: ret <ret>, providers <ptr>"
#   src/atl/ofi/atl_ofi_comm.cpp:278, src/atl/mpi/atl_mpi_comm.cpp:102   "failed to initialize ATL"
#   src/atl/mpi/atl_mpi_ctx.cpp:671  check_impi_env: "CCL/MPI uses Intel(R) MPI Library but neither I_MPI_ROOT nor ONEAPI_ROOT
#                                     is set. Please source release version of Intel(R) MPI Library (2019 or higher version)."
#   src/atl/util/pm/pmi_resizable_rt/pmi_resizable/kvs/internal_kvs.cpp:284-325  fill_local_host_ip: an interface whose
#                                     name contains CCL_KVS_IFACE, else any but "lo"; none: "can't find interface <CCL_KVS_IFACE>
#                                     to get host IP", then "init main server address error" (:535)
#   torch-ccl src/ProcessGroupCCL.cpp:591 with_mpirun(): MPI_LOCALRANKID, MPI_LOCALNRANKS, PMI_RANK, PMI_SIZE or PMIX_RANK;
#                                     without one it sets CCL_PROCESS_LAUNCHER=none (:708): oneCCL's own key-value store
# oneCCL's default transport is MPI (src/common/env/env.cpp:94); without an MPI launcher 2021.14 ran over OFI by itself in
# the hand check of issue 25, which is what this FIXTURE does (its mpi side is not modelled beyond check_impi_env).
_LOG = "2026:00:00:00.000000000000000 <fixture>:<pid>"


def _log(level, where, text):
    import sys

    prefix = "|CCL_%s| " % level + (where + ": " if where else "")
    sys.stderr.write("%s %s%s\\n" % (_LOG, prefix, text))
    sys.stderr.flush()


def _atl_failure(where, condition):
    _log("ERROR", where, "condition %s failed\\nfailed to initialize ATL" % condition)
    raise RuntimeError("oneCCL: %s: EXCEPTION: failed to initialize ATL" % where)


def _with_mpirun():
    return any(os.environ.get(name) for name in ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_RANK", "PMI_SIZE", "PMIX_RANK"))


def _foreign_mpirun():
    """Open MPI's mpirun started this rank (its own variables, none of Intel MPI's hydra)."""
    return bool(os.environ.get("OMPI_COMM_WORLD_SIZE")) and not os.environ.get("PMI_RANK")


def _foreign_mpirun_abort():
    """FIXTURE of what issue 25 saw under Open MPI (oneCCL's MPI transport loading Intel MPI's libmpi), in its abort form:
    the line MPICH's ch4 device prints from MPID_Abort (github.com/pmodels/mpich src/mpid/ch4/src/ch4_globals.c:110,
    commit 6a79bf6575c3b5b41cabbd3d59340634d6f9412d: "Abort(%d)%s%s: %s%s" with " on node %d", " (rank %d in comm %d)"),
    then the process ends with the code's low byte as MPL_exit does. The error stack's wording is an example."""
    import sys

    code = 1091215
    sys.stderr.write("Abort(%d) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error stack:\\n"
                     "MPIR_Init_thread(176)........:\\nMPID_Init(1548)..............:\\n"
                     "MPIR_pmi_init(168)...........: PMI2_Job_GetId returned 14\\n" % code)
    sys.stderr.flush()
    os._exit(code & 0xFF)


def _ofi_library_path():
    for name in ("CCL_OFI_LIBRARY_PATH", "I_MPI_OFI_LIBRARY"):
        if os.environ.get(name):
            return os.environ[name]
    root = os.environ.get("I_MPI_ROOT")
    if root and os.path.exists(root + "/opt/mpi/libfabric/lib/libfabric.so"):
        return root + "/opt/mpi/libfabric/lib/libfabric.so"
    return "libfabric.so"


def _load_libfabric():
    """The REAL dlopen of what oneCCL would load (ctypes: the loader, LD_LIBRARY_PATH as this process started with it)."""
    import ctypes

    path = _ofi_library_path()
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        _log("WARN", "", "could not open the library: %s, error: %s" % (path, exc))
        return None


def _providers(lib):
    """fi_getinfo of the REAL libfabric loaded: 0 when it finds a provider (FI_PROVIDER_PATH), -61 (no data) when none."""
    import ctypes

    lib.fi_getinfo.restype = ctypes.c_int
    lib.fi_getinfo.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    info = ctypes.c_void_p()
    ret = lib.fi_getinfo((1 << 16) | 10, None, None, 0, None, ctypes.byref(info))
    if ret == 0 and info.value:
        lib.fi_freeinfo.argtypes = [ctypes.c_void_p]
        lib.fi_freeinfo(info)
    return ret


def _kvs_interface_found():
    import socket

    wanted = os.environ.get("CCL_KVS_IFACE")
    names = [name for _index, name in socket.if_nameindex()]
    found = any(wanted in name for name in names) if wanted else any("lo" not in name for name in names)
    if not found:
        _log("ERROR", "internal_kvs.cpp:325 fill_local_host_ip", "can't find interface %s to get host IP" % (wanted or ""))
        _log("ERROR", "internal_kvs.cpp:535 kvs_init", "init main server address error")
        raise RuntimeError("oneCCL: internal_kvs.cpp:535 kvs_init: init main server address error")


def _oneccl_2021_14():
    lib = _load_libfabric()
    transport = os.environ.get("CCL_ATL_TRANSPORT", "mpi")
    under_mpi = _with_mpirun()
    if transport == "mpi" and not under_mpi:
        transport = "ofi"  # issue 25's hand check: 2021.14 took OFI by itself without an MPI launcher
    if transport == "ofi" and lib is None:
        _log("WARN", "", "OFI transport was not initialized, fallback to MPI transport")
        transport = "mpi"
    if transport == "mpi":
        if "impi-under-foreign-mpirun" in MODES and _foreign_mpirun():
            _foreign_mpirun_abort()
        # atl_mpi_ctx.cpp:570-571 set_env: check_impi_env logs its error and its result is not looked at, so it is said
        # before MPI_Init whatever the launcher (issue 36: under spawn/torchrun it came after the fallback)
        no_root = not os.environ.get("I_MPI_ROOT") and not os.environ.get("ONEAPI_ROOT")
        if no_root:
            _log("ERROR", "atl_mpi_ctx.cpp:671 check_impi_env", "CCL/MPI uses Intel(R) MPI Library but neither I_MPI_ROOT nor ONEAPI_ROOT is set. "
                 "Please source release version of Intel(R) MPI Library (2019 or higher version).")
        if not under_mpi or no_root:  # without an MPI launcher the real one hangs in MPI_Init once I_MPI_ROOT is set: not modelled
            _atl_failure("atl_mpi_comm.cpp:102 init_transport", "transport->init(nullptr, nullptr, &attr, nullptr, pmi) == ATL_STATUS_SUCCESS")
        return
    if not under_mpi:
        _kvs_interface_found()
    ret = _providers(lib)
    if ret != 0:
        _log("ERROR", "atl_ofi_helper.cpp:867 atl_ofi_get_prov_list", "fi_getinfo error: ret %d, providers (nil)" % ret)
        _atl_failure("atl_ofi_comm.cpp:278 init_transport", "transport->init(nullptr, nullptr, &attr, nullptr, pmi) == ATL_STATUS_SUCCESS")


def _create(store, rank, size, timeout):
    CREATED[0] += 1
    under_mpi = "PMI_RANK" in os.environ
    if "mpi-reinit-segv" in MODES and CREATED[0] > 1 and under_mpi:
        import signal
        import sys

        sys.stderr.write("FIXTURE ccl: a second ccl process group in this process under an MPI launcher: SIGSEGV\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if "oneccl-2021.14" in MODES and CREATED[0] == 1:
        _oneccl_2021_14()
    return dist.ProcessGroupGloo(store, rank, size, timeout)


dist.Backend.register_backend("ccl", _create, devices=["cpu"])
'''


def fixture_ccl_path(root: Path) -> Path:
    """A folder holding the FIXTURE oneccl_bindings_for_pytorch package; put it on PYTHONPATH."""
    package = root / "fixture-ccl" / "oneccl_bindings_for_pytorch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(SOURCE)
    return package.parent
