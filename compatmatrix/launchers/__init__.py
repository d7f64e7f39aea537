"""The launchers compat knows, one module each behind the ``Launcher`` protocol (interface.py). ``LAUNCHERS`` is the
registry: the CLI's --launcher choices, the JSON schemas' launcher and flavour enums (a test holds them equal) and
every command that starts ranks read it. A launcher is added here by one line. The registry is filled on first use
(``LAUNCHERS`` read, or any function below): a command that names no launcher loads no launcher module, though the
oneCCL environment it prints is computed here (environment.py; compat env without --launcher, tests/test_startup.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .interface import Launcher

LAUNCHERS: dict[str, Launcher]  # filled by _registry() on first use (module __getattr__)


def _registry() -> dict[str, Launcher]:
    registry = globals().get("LAUNCHERS")
    if registry is None:
        from .mpirun import MPIRUN
        from .ray import RAY
        from .spawn import SPAWN
        from .srun import SRUN
        from .torchrun import TORCHRUN

        registry = {launcher.name: launcher for launcher in (SPAWN, TORCHRUN, MPIRUN, SRUN, RAY)}
        globals()["LAUNCHERS"] = registry
    return registry


def __getattr__(name: str) -> Any:
    if name == "LAUNCHERS":
        return _registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def names(capability: str) -> tuple[str, ...]:
    """The launchers that offer ``capability`` (interface.LIVE, BOUND, ENV, HOSTFILE, UNMAPPED), in registry order."""
    return tuple(name for name, launcher in _registry().items() if capability in launcher.capabilities)


def recognise(program: str = "", module: str = "") -> Optional[str]:
    """The launcher a user's command line runs: by its program's name (``mpiexec``: mpirun) or, after ``python -m``,
    by its module (``torch.distributed.run``: torchrun); None for neither."""
    for name, launcher in _registry().items():
        if (program and program in launcher.programs) or (module and module in launcher.modules):
            return name
    return None


def flavors(capability: str) -> tuple[str, ...]:
    """Every flavour of the launchers that offer ``capability`` (what a Launch or an Invocation names as its flavour)."""
    return tuple(dict.fromkeys(flavor for name in names(capability) for flavor in _registry()[name].flavors))
