"""FIXTURE oneCCL bindings: a package named oneccl_bindings_for_pytorch that registers a torch.distributed
backend called "ccl" which is gloo underneath. It is NOT oneCCL and proves nothing about oneCCL; it exists so
the tests can drive compat doctor --live's ccl selection path (bindings import -> "ccl" registered -> chosen)
on a machine where oneccl_bind_pt cannot be installed. It marks itself with COMPAT_TEST_FIXTURE, and compat
labels any backend that carries that mark "TEST FIXTURE, not oneCCL" in every output.

Used by putting the returned folder on PYTHONPATH of the compat run (the ranks inherit it).
"""

from __future__ import annotations

from pathlib import Path

SOURCE = '''"""TEST FIXTURE from compatmatrix tests/fixture_ccl.py: a backend named ccl on top of gloo. Not oneCCL."""
import os

import torch.distributed as dist

COMPAT_TEST_FIXTURE = "tests/fixture_ccl.py: a backend named ccl on top of gloo, not oneCCL"
__version__ = "0.0.0+fixture"
cwd = os.path.dirname(os.path.abspath(__file__))


def _create(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)


dist.Backend.register_backend("ccl", _create, devices=["cpu"])
'''


def fixture_ccl_path(root: Path) -> Path:
    """A folder holding the FIXTURE oneccl_bindings_for_pytorch package; put it on PYTHONPATH."""
    package = root / "fixture-ccl" / "oneccl_bindings_for_pytorch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(SOURCE)
    return package.parent
