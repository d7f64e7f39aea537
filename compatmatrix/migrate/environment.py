"""The shell environment after the move: what to unset (setvars.sh leftovers and the guides' exports), which entries
to take out of PATH-like lists, and what ``compat env`` prints for the stock set.

* unset: ``CCL_*``, ``ATL_*`` (oneCCL), ``IPEX_*``; ``I_MPI_*`` and ``FI_*`` (Intel MPI and its libfabric) unless the
  job still starts under that mpirun; ``KMP_*`` (read by Intel OpenMP only) when no libiomp5 stays preloaded.
* drop: PATH / LD_LIBRARY_PATH / CPATH / LIBRARY_PATH entries inside the folders that go (the bindings' bundled MPI
  and libfabric) or under CCL_ROOT / I_MPI_ROOT (which are unset).
* set: ``compat env`` for the stock set (OMP_NUM_THREADS from compat launch's plan, LD_PRELOAD of allocator / OpenMP
  libraries that exist), less any preload entry inside a folder that goes, plus what the rewritten command exports.

Pure: the current variables, the folders that go and the stock set's EnvPlan in; an EnvironmentPlan out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH")
_UNSET = (
    ("CCL_", "a oneCCL setting (the bindings' setvars.sh, or the guides' export); gloo does not read it"),
    ("ATL_", "a setting of oneCCL's transport layer; gloo does not read it"),
    ("IPEX_", "an IPEX setting; IPEX is gone"),
)
_MPI_UNSET = (
    ("I_MPI_", "an Intel MPI setting (from the bindings' setvars.sh); the job starts under torchrun now"),
    ("FI_", "a libfabric setting (oneCCL's and Intel MPI's transport); gloo talks TCP itself"),
)


@dataclass(frozen=True)
class EnvironmentPlan:
    unset: tuple[tuple[str, str], ...]  # (name, why)
    set: Mapping[str, str]
    set_why: Mapping[str, str]
    drop: Mapping[str, tuple[str, ...]]  # path list -> entries to take out of it
    notes: tuple[str, ...] = ()
    known: bool = True  # False: no environment was inspected (pins from -r files)

    def to_json(self) -> dict[str, object]:
        return {"unset": [name for name, _ in self.unset], "set": dict(self.set), "drop": {k: list(v) for k, v in self.drop.items()},
                "why": {**{name: why for name, why in self.unset}, **dict(self.set_why)}, "inspected": self.known}


def plan_environment(env: Optional[Mapping[str, str]], removed_folders: Sequence[str], stock_exports: Mapping[str, str], keeps_mpi: bool,
                     command_env: Optional[Mapping[str, str]] = None, command_why: Optional[Mapping[str, str]] = None) -> EnvironmentPlan:
    """``env``: the variables where the job is launched (None: not known); ``stock_exports``: shell_env.plan_env's exports for the
    stock set; ``keeps_mpi``: the rewritten command still starts under mpirun; ``command_env``: what the command exports."""
    notes: list[str] = []
    command_env = command_env or {}
    command_why = command_why or {}
    if env is None:
        notes.append("no environment was inspected (pins from -r files): where you train, unset CCL_*, I_MPI_*, FI_*, ATL_* "
                     "and take the oneCCL bindings' folders out of PATH and LD_LIBRARY_PATH; compat env there prints the rest")
        return EnvironmentPlan((), dict(command_env), dict(command_why), {}, tuple(notes), known=False)
    folders = [os.path.realpath(f) for f in removed_folders]
    rules = list(_UNSET) + ([] if keeps_mpi else list(_MPI_UNSET))
    if keeps_mpi and any(name.startswith(("I_MPI_", "FI_")) for name in env):
        notes.append("I_MPI_* and FI_* stay: the job still starts under that mpirun")
    roots = [env[name] for name in ("CCL_ROOT",) + (() if keeps_mpi else ("I_MPI_ROOT",)) if env.get(name)]
    preload = _preload(stock_exports.get("LD_PRELOAD", ""), folders, notes)
    setting, why = _settings(preload, stock_exports, command_env, command_why)
    iomp5 = any(os.path.basename(p).startswith("libiomp5") for p in preload.split(":") if p)
    unset: list[tuple[str, str]] = []
    for name in sorted(env):
        reason = None if name in setting else _unset_reason(name, rules, iomp5, preload)
        if reason is not None:
            unset.append((name, reason))
    drop = _drops(env, folders, roots)
    if drop:
        notes.append("the dropped path entries belong to the removed bindings' bundled oneCCL / MPI (added by their setvars.sh): "
                     "start a new shell without sourcing it, or take them out as listed")
    return EnvironmentPlan(tuple(unset), setting, why, drop, tuple(notes))


def _settings(preload: str, stock_exports: Mapping[str, str], command_env: Mapping[str, str],
              command_why: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """What to set, and why: the kept preload, compat env's other exports for the stock set (no oneCCL worker count),
    then what the rewritten command exports."""
    setting: dict[str, str] = {}
    why: dict[str, str] = {}
    if preload:
        setting["LD_PRELOAD"] = preload
        why["LD_PRELOAD"] = ("compat env for the stock set: allocator / OpenMP libraries that exist on this machine (stock PyTorch's own "
                             "launcher, torch.backends.xeon.run_cpu, preloads the same ones)")
    for name, value in stock_exports.items():
        if name not in ("LD_PRELOAD", "CCL_WORKER_COUNT"):
            setting[name] = value
            why[name] = "compat env for the stock set" + (": compat launch's plan, no oneCCL worker cores" if name == "OMP_NUM_THREADS" else "")
    for name, value in command_env.items():
        setting[name] = value
        why[name] = command_why.get(name, "the rewritten command exports it")
    return setting, why


def _unset_reason(name: str, rules: Sequence[tuple[str, str]], iomp5: bool, preload: str) -> Optional[str]:
    """Why a variable goes (a prefix rule, KMP_* without libiomp5, an LD_PRELOAD with nothing left); None when it stays."""
    reason = next((text for prefix, text in rules if name.startswith(prefix)), None)
    if reason is None and name.startswith("KMP_") and not iomp5:
        reason = "read by Intel OpenMP (libiomp5) only, which is not preloaded for the stock set"
    if reason is None and name == "LD_PRELOAD" and not preload:
        reason = "nothing to preload for the stock set (its entries go with the removed packages or do not exist)"
    return reason


def _drops(env: Mapping[str, str], folders: Sequence[str], roots: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Per PATH-like list, its entries inside the folders that go or under the oneCCL / Intel MPI roots that are unset."""
    drop: dict[str, tuple[str, ...]] = {}
    for name in PATH_LISTS:
        entries = [e for e in env.get(name, "").split(":") if e]
        gone = tuple(dict.fromkeys(e for e in entries if _inside(e, folders) or _inside(e, roots)))
        if gone:
            drop[name] = gone
    return drop


def _inside(path: str, folders: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == f or real.startswith(f.rstrip("/") + "/") for f in (os.path.realpath(x) for x in folders))


def _preload(value: str, folders: Sequence[str], notes: list[str]) -> str:
    kept = []
    for entry in (e for e in value.split(":") if e):
        if _inside(entry, folders):
            notes.append(f"LD_PRELOAD: {entry} goes with the package it belongs to, which is removed")
            continue
        kept.append(entry)
    return ":".join(kept)


__all__ = ["EnvironmentPlan", "PATH_LISTS", "plan_environment"]
