"""The launchers compat knows, one module each behind the ``Launcher`` protocol (interface.py). ``LAUNCHERS`` is the
registry: the CLI's --launcher choices, the JSON schemas' launcher and flavour enums (a test holds them equal) and
every command that starts ranks read it. A launcher is added here by one line."""

from __future__ import annotations

from typing import Optional

from .interface import Launcher
from .mpirun import MPIRUN
from .spawn import SPAWN
from .srun import SRUN
from .torchrun import TORCHRUN

LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in (SPAWN, TORCHRUN, MPIRUN, SRUN)}


def names(capability: str) -> tuple[str, ...]:
    """The launchers that offer ``capability`` (interface.LIVE, BOUND, ENV, HOSTFILE, UNMAPPED), in registry order."""
    return tuple(name for name, launcher in LAUNCHERS.items() if capability in launcher.capabilities)


def recognise(program: str = "", module: str = "") -> Optional[str]:
    """The launcher a user's command line runs: by its program's name (``mpiexec``: mpirun) or, after ``python -m``,
    by its module (``torch.distributed.run``: torchrun); None for neither."""
    for name, launcher in LAUNCHERS.items():
        if (program and program in launcher.programs) or (module and module in launcher.modules):
            return name
    return None


def flavors(capability: str) -> tuple[str, ...]:
    """Every flavour of the launchers that offer ``capability`` (what a Launch or an Invocation names as its flavour)."""
    return tuple(dict.fromkeys(flavor for name in names(capability) for flavor in LAUNCHERS[name].flavors))
