"""The one scrubbed base environment for every process the tests start (and for the in-process tests).

CI runs on machines that differ from the one the tests were written on, from a shell whose variables would
otherwise reach compat: colour and width (FORCE_COLOR, NO_COLOR, COLUMNS), compat's own settings (COMPAT_*,
COMPAT_INDEX_*, a ~/.config/compatmatrix/config.toml), thread and MPI settings (OMP_*, KMP_*, CCL_*, I_MPI_*,
HYDRA_*, PMI_*, OMPI_*, FI_*), a batch scheduler's job (SLURM_*, PBS_*: hydra then launches through it), a
distributed job's rank variables, another package tree or library (PYTHONPATH, LD_PRELOAD, LD_LIBRARY_PATH), and
an http_proxy without no_proxy (which would send the requests to the FIXTURE index on 127.0.0.1 to the proxy).

``base_env()`` is what every subprocess helper starts from; the autouse fixture in conftest.py removes the same
variables from os.environ for the duration of each test. A variable is removed when it still has the value the
session inherited: a value a test sets itself (monkeypatch.setenv, or ``extra``) is kept. pip's configuration
(PIP_*, pip.conf) and HOME are never touched: the real environments are built with this machine's pip setup, and
the per-session XDG_CONFIG_HOME links every folder of the real one (pip, git, uv, ...) except compatmatrix's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Optional

SCRUBBED_PREFIXES = ("COMPAT_", "OMP_", "KMP_", "CCL_", "I_MPI_", "HYDRA_", "SLURM_", "PBS_", "PMI_", "OMPI_", "FI_", "PET_")
SCRUBBED_NAMES = frozenset({
    "FORCE_COLOR", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES",
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH",
    # a distributed job's rank variables (a CI runner inside a PyTorchJob / torchrun)
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
})
# the test suite's own configuration, kept when inherited: where the real environments are cached (tests/real_envs.py)
KEPT = frozenset({"COMPAT_TEST_CACHE"})
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def scrubbed(name: str) -> bool:
    return name not in KEPT and (name in SCRUBBED_NAMES or name.startswith(SCRUBBED_PREFIXES))


# what the session inherited, read once when the test suite is imported
INHERITED = {name: value for name, value in os.environ.items() if scrubbed(name)}
INHERITED_CONFIG_HOME = os.environ.get("XDG_CONFIG_HOME")
INHERITED_DATA_HOME = os.environ.get("XDG_DATA_HOME")
_config_home: Optional[str] = None
_data_home: Optional[str] = None


def data_home() -> str:
    """This session's XDG_DATA_HOME: an empty temporary folder, so that no overlay of the user's (compat matrix update,
    ~/.local/share/compatmatrix/overlay.json) reaches the tests; a test that wants one sets its own."""
    global _data_home
    if _data_home is None:
        _data_home = tempfile.mkdtemp(prefix="compat-tests-data-")
        atexit.register(shutil.rmtree, _data_home, True)
    return _data_home


def config_home() -> str:
    """This session's XDG_CONFIG_HOME: a temporary folder with links to every entry of the real one except compatmatrix/."""
    global _config_home
    if _config_home is None:
        home = tempfile.mkdtemp(prefix="compat-tests-config-")
        atexit.register(shutil.rmtree, home, True)  # removes the links, never what they point to
        original = Path(INHERITED_CONFIG_HOME or Path.home() / ".config")
        if original.is_dir():
            for entry in original.iterdir():
                if entry.name != "compatmatrix":
                    (Path(home) / entry.name).symlink_to(entry)
        _config_home = home
    return _config_home


def with_loopback(value: str) -> str:
    """A no_proxy value that also names 127.0.0.1, localhost and ::1."""
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    return ",".join(entries + [host for host in LOOPBACK if host not in entries])


def base_env(extra: Optional[Mapping[str, Optional[str]]] = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """os.environ without what the session inherited of the variables above; then ``drop`` removed and ``extra``
    applied (a value of None removes that variable)."""
    env = {name: value for name, value in os.environ.items() if not (scrubbed(name) and INHERITED.get(name) == value)}
    if env.get("XDG_CONFIG_HOME") == INHERITED_CONFIG_HOME:
        env["XDG_CONFIG_HOME"] = config_home()
    if env.get("XDG_DATA_HOME") == INHERITED_DATA_HOME:
        env["XDG_DATA_HOME"] = data_home()
    for name in ("no_proxy", "NO_PROXY"):
        env[name] = with_loopback(env.get(name, ""))
    for name in drop:
        env.pop(name, None)
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
