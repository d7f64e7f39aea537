"""FIXTURE oneCCL bindings: a package named oneccl_bindings_for_pytorch that registers a torch.distributed
backend called "ccl" which is gloo underneath. It is NOT oneCCL and proves nothing about oneCCL; it exists so
the tests can drive compat doctor --live's ccl selection path (bindings import -> "ccl" registered -> chosen)
on a machine where oneccl_bind_pt cannot be installed. It marks itself with COMPAT_TEST_FIXTURE, and compat
labels any backend that carries that mark "TEST FIXTURE, not oneCCL" in every output.

Used by putting the returned folder on PYTHONPATH of the compat run (the ranks inherit it). COMPAT_FIXTURE_CCL_MODE
(comma-separated) makes it fail the way a real oneCCL was reported to: mpi-reinit-segv, atl-mpi, import-abort (see SOURCE).
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
#   atl-mpi          the default (MPI) transport without an MPI launcher fails "atl_mpi_comm.cpp: failed to initialize ATL"
#                    unless CCL_ATL_TRANSPORT=ofi, as real oneCCL ranks did under spawn and torchrun
#   import-abort     importing aborts with "Mismatch in kernel C++ signatures" (bindings built for another torch)
MODES = set(filter(None, os.environ.get("COMPAT_FIXTURE_CCL_MODE", "").split(",")))
CREATED = [0]

if "import-abort" in MODES:
    import sys

    sys.stderr.write("terminate called after throwing an instance of 'c10::Error'\\n  what():  Mismatch in kernel C++ signatures (FIXTURE)\\n")
    sys.stderr.flush()
    os.abort()


def _create(store, rank, size, timeout):
    CREATED[0] += 1
    under_mpi = "PMI_RANK" in os.environ
    if "mpi-reinit-segv" in MODES and CREATED[0] > 1 and under_mpi:
        import signal
        import sys

        sys.stderr.write("FIXTURE ccl: a second ccl process group in this process under an MPI launcher: SIGSEGV\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if "atl-mpi" in MODES and os.environ.get("CCL_ATL_TRANSPORT", "mpi") != "ofi" and not under_mpi:
        import sys

        sys.stderr.write("atl_mpi_comm.cpp: failed to initialize ATL\\n")
        sys.stderr.flush()
        raise RuntimeError("atl_mpi_comm.cpp: failed to initialize ATL")
    return dist.ProcessGroupGloo(store, rank, size, timeout)


dist.Backend.register_backend("ccl", _create, devices=["cpu"])
'''


def fixture_ccl_path(root: Path) -> Path:
    """A folder holding the FIXTURE oneccl_bindings_for_pytorch package; put it on PYTHONPATH."""
    package = root / "fixture-ccl" / "oneccl_bindings_for_pytorch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(SOURCE)
    return package.parent
