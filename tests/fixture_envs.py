"""FIXTURE environments: real venvs holding fake distributions and small fake modules.

They stand in for what cannot be installed on this machine (oneccl_bind_pt is not on PyPI; crash
modes of broken builds). Every module written here says FIXTURE in its first line, every dist-info
has INSTALLER "compat-test-fixture". Nothing here is reported as the real thing: the tests that
use them assert on compat's classification, not on oneCCL behaviour.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

from .fixture_index import TORCH_DISTRIBUTED_SOURCE, TORCH_SOURCE

FIXTURE_HEADER = "# FIXTURE module written by tests/fixture_envs.py: not the real package.\n"

def running_libc() -> str:
    """The C library this interpreter has loaded (/proc/self/maps): an ELF shared object of this machine's class."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libc.so" in path or "/libc-" in path:
                return path
    raise RuntimeError("no C library among this interpreter's mappings (/proc/self/maps)")


SETVARS_SOURCE = """\
# FIXTURE setvars.sh written by compatmatrix's tests (shape of oneCCL 2021.x's)
CCL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CCL_ROOT
export I_MPI_ROOT="$CCL_ROOT/opt/mpi"
export FI_PROVIDER_PATH="$I_MPI_ROOT/libfabric/lib/prov:/usr/lib64/libfabric"
export LD_LIBRARY_PATH="$CCL_ROOT/lib:$I_MPI_ROOT/libfabric/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$I_MPI_ROOT/bin${PATH:+:$PATH}"
export CCL_CONFIGURATION=cpu
"""


class FixtureEnv:
    def __init__(self, root: Path, python: str = sys.executable) -> None:
        self.root = root
        subprocess.run([python, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
        self.python = root / "bin" / "python"
        done = subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True, timeout=60)
        self.site = Path(done.stdout.strip())

    def dist(self, name: str, version: str, site: Optional[Path] = None) -> Path:
        """A dist-info directory (METADATA + INSTALLER) for ``name`` ``version``."""
        directory = (site or self.site) / f"{name.replace('-', '_')}-{version}.dist-info"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
        (directory / "INSTALLER").write_text("compat-test-fixture\n")
        return directory

    def module(self, relative: str, source: str) -> Path:
        path = self.site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FIXTURE_HEADER + textwrap.dedent(source))
        return path

    # --- building blocks ------------------------------------------------------------------

    def torch(self, version: str = "2.7.0") -> "FixtureEnv":
        self.dist("torch", version)
        self.module("torch/__init__.py", f"__version__ = {version!r}\n" + TORCH_SOURCE)
        self.module("torch/distributed/__init__.py", TORCH_DISTRIBUTED_SOURCE)
        return self

    def ipex(self, version: str = "2.7.0", ending: str = "ok", series: str = "2.7.*") -> "FixtureEnv":
        """IPEX stand-in; ``ending``: ok, os_exit, exit127, exit127_v2_1 (the 2.1.x text), hard_exit, sigill."""
        self.dist("intel-extension-for-pytorch", version)
        message = f'print("ERROR! Intel(R) Extension for PyTorch* needs to work with PyTorch {series}, but PyTorch " + torch.__version__ + " is found. Please switch to the matching version and run again.")'
        body = {
            "ok": "",
            "os_exit": f"{message}\nos.exit(127)",
            "exit127": f"{message}\nexit(127)",
            # the real v2.1.0+cpu / v2.1.100+cpu text: backslash continuations keep the indentation (7 and 11 spaces), "Intel®"
            "exit127_v2_1": ('print("ERROR! Intel\\u00ae Extension for PyTorch* needs to work with PyTorch       ' + series
                             + ', but PyTorch " + torch.__version__ + " is found. Please switch to the matching version           and run again.")\nexit(127)'),
            "hard_exit": f"{message}\nos._exit(1)",
            "sigill": "import signal\nos.kill(os.getpid(), signal.SIGILL)",
        }[ending]
        self.module("intel_extension_for_pytorch/__init__.py", f"import os\nimport torch\n__version__ = \"{version}+cpu\"\n{body}\n")
        return self

    def bindings(self, version: str = "2.7.0", ending: str = "ok", module: str = "oneccl_bindings_for_pytorch", setvars: bool = True) -> "FixtureEnv":
        """oneccl_bind_pt stand-in; ``ending``: ok, no_register, undefined_symbol, abi_abort, missing_libccl, hang."""
        self.dist("oneccl-bind-pt", version)
        body = {
            "ok": 'torch.distributed.Backend.register_backend("ccl", None, devices=["cpu"])',
            "no_register": "",
            "undefined_symbol": 'raise ImportError(cwd + "/lib/liboneccl_bindings_for_pytorch.so: undefined symbol: _ZN3c1019UndefinedTensorImpl10_singletonE")',
            "abi_abort": 'import sys\nsys.stderr.write("terminate called after throwing an instance of \'c10::Error\'\\n  what():  Mismatch in kernel C++ signatures\\n")\nsys.stderr.flush()\nos.abort()',
            "missing_libccl": 'raise ImportError("libccl.so.1: cannot open shared object file: No such file or directory")',
            "hang": "import time\ntime.sleep(3600)",
        }[ending]
        self.module(f"{module}/__init__.py", f"import os\nimport torch\ncwd = os.path.dirname(os.path.abspath(__file__))\n{body}\n")
        if setvars:
            root = self.site / module
            (root / "opt" / "mpi" / "bin").mkdir(parents=True, exist_ok=True)
            (root / "opt" / "mpi" / "libfabric" / "lib" / "prov").mkdir(parents=True, exist_ok=True)
            (root / "opt" / "mpi" / "libfabric" / "lib" / "prov" / "libtcp-fi.so").write_bytes(b"\x7fELF fixture provider")
            # FIXTURE libfabric.so (the bindings bundle the real one there): a link to the C library this interpreter
            # loads, an ELF shared object of this machine's class that compat's loader search accepts; never loaded
            (root / "opt" / "mpi" / "libfabric" / "lib" / "libfabric.so").symlink_to(running_libc())
            (root / "lib").mkdir(exist_ok=True)
            mpirun = root / "opt" / "mpi" / "bin" / "mpirun"
            mpirun.write_text("#!/bin/sh\n# FIXTURE mpirun\nexit 0\n")
            mpirun.chmod(0o755)
            (root / "env").mkdir(exist_ok=True)
            (root / "env" / "setvars.sh").write_text(SETVARS_SOURCE)
        return self
