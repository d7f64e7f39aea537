"""The oneCCL launch environment, the one computation: what a launch of the ccl backend under a launcher needs, which
compat env, compat launch (--print or not), compat translate's notes and compat check's oneccl.launcher all take from
here. The oneCCL environment's own exports come from its facts (environment/setvars.py: the bindings' setvars.sh sourced
and diffed, or a system oneCCL's layout), what the launcher adds from its ``ccl_exports`` (its transport, I_MPI_ROOT,
the key-value store's interface) and ``interface_exports`` (the interface that reaches the master), MASTER_ADDR/PORT
where it gives none (``master_exports``), and its own program's folder (``path_additions``). Fed by an environment's
facts (environment/facts.Facts; the checks' Context is one); the thread settings are each form's own.

Side effects: those of environment/setvars.py (a bash child sources setvars.sh; ELF files for a system oneCCL); the
interfaces read from /sys/class/net, the kernel's route to the master asked (environment/interfaces.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Optional

from ..environment.facts import Facts
from ..environment.interfaces import (
    CCL_VARIABLES,
    GLOO_VARIABLES,
    RouteFacts,
    choose_interface,
    interface_variables,
    is_loopback,
    route_facts,
    up_interfaces,
)
from ..environment.setvars import INTERFACES_KEY, PathAddition, export_plan, find_bindings, setvars_fix, setvars_result, system_error
from ..errors import CompatError
from ..record import Record
from .interface import CclEnv, compat_env_command, master_exports


class OnecclEnv(Record):
    """The oneCCL environment a launch of the ccl backend under a launcher needs: what sourcing the bindings' setvars.sh
    (or a system oneCCL's layout) exports, then what the launcher adds (its transport, I_MPI_ROOT, MASTER_ADDR/PORT
    where it gives none), each with why. ``bindings``: the environment has the oneCCL bindings (ccl can be the backend)."""

    exports: Mapping[str, str]  # set outright: the oneCCL environment's own values
    # joined to the value the shell has: the oneCCL runtime's (LD_LIBRARY_PATH gains libfabric, ...) and the launcher's own
    # program's (PATH gains a hydra mpirun's folder: launchers' path_additions), with or without the bindings
    additions: Mapping[str, PathAddition]
    comments: tuple[str, ...]
    launcher_exports: Mapping[str, str] = MappingProxyType({})  # the launcher's needs (after the thread settings)
    launcher_comments: tuple[str, ...] = ()
    bindings: bool = False
    path: Optional[str] = None  # PATH as the oneCCL environment leaves it (where its mpirun is found)


def oneccl_environment(facts: Facts, launcher: Optional[str] = None, mpirun: Optional[str] = None, master_addr: Optional[str] = None) -> OnecclEnv:
    """The one computation of the oneCCL environment: compat env, compat launch (--print or not), compat check's
    oneccl.launcher and the exports all take it from here. ``mpirun``: the mpirun the launch will run (compat launch
    --mpirun), looked at first for its MPI. Without the bindings only a launcher that gives its ranks no rendezvous
    address (mpirun) adds MASTER_ADDR/MASTER_PORT: torch's env:// needs them for gloo as well. ``master_addr`` (compat
    env --master-addr) stands for MASTER_ADDR in the environment the launcher's needs are judged against."""
    env = {**facts.snapshot.env, "MASTER_ADDR": master_addr} if master_addr else facts.snapshot.env
    bindings = find_bindings(facts)
    exports: dict[str, str] = {}
    additions: dict[str, PathAddition] = {}
    comments: list[str] = []
    extra: dict[str, str] = {}
    reasons: list[str] = []
    if bindings is None:
        comments.append(f"no oneCCL bindings (oneccl_bindings_for_pytorch / torch_ccl) are installed for {facts.snapshot.executable}: "
                        "no oneCCL environment exported")
        if launcher:
            from . import LAUNCHERS

            if LAUNCHERS[launcher].gives_rendezvous:
                reasons.append(f"launcher {launcher}: nothing added (no oneCCL bindings: the gloo backend needs no oneCCL settings)")
            else:
                extra, reasons = master_exports(launcher, env)
            reasons += _launcher_path(launcher, additions, facts.snapshot.executable, env.get("PATH"), mpirun)
        return OnecclEnv(exports, additions, tuple(comments), extra, tuple(reasons), False)
    result = setvars_result(facts)
    assert result is not None
    if not result.ok:  # no half environment to eval: exit 2 with the reason and the script's last words
        if result.system is not None and not result.system.found:
            raise CompatError(f"{system_error(bindings.directory, result.system)}.", setvars_fix(result.path, result, compat_env_command(facts.snapshot.executable, launcher), facts.matrix))
        said = f" (it said: {' | '.join(result.output[-2:])})" if result.output else ""
        raise CompatError(f"The bindings' setvars.sh cannot be used: {result.error}{said}.", setvars_fix(result.path))
    exports, additions = export_plan(result.before, result.exports)
    comments.append(f"oneCCL environment {result.origin} ({bindings.module})")
    comments += list(result.notes)
    layout = result.system.layout if result.system is not None else None
    if layout is not None:
        comments.append(f"the PyPI runtime's folders (libfabric {layout.libfabric}, its providers {layout.providers}, Intel MPI {layout.mpi_root}), "
                        f"as {layout.source} sets them")
    for key, added in additions.items():
        if added.reordered:
            comments.append(f"{key}: the script also moved or removed entries; only the entries it added are exported")
    if launcher:
        mpi_root = layout.mpi_root if layout is not None else ""
        path = result.after.get("PATH")
        interfaces = list(facts.once(INTERFACES_KEY, up_interfaces))
        extra, reasons = launcher_exports(launcher, exports, env, bindings.directory, interfaces, facts.snapshot.executable,
                                          mpi_root, path, mpirun)
        reasons += _launcher_path(launcher, additions, facts.snapshot.executable, path, mpirun)
    return OnecclEnv(exports, additions, tuple(comments), extra, tuple(reasons), True, result.after.get("PATH"))


def _launcher_path(launcher: str, additions: dict[str, PathAddition], python: str, path: Optional[str], mpirun: Optional[str]) -> list[str]:
    """The launcher's own path additions (launchers' ``path_additions``: the mpirun's folder for hydra) merged into
    ``additions`` in front of the oneCCL environment's own entries of the same list; what was added, in words."""
    from . import LAUNCHERS

    own, said = LAUNCHERS[launcher].path_additions(python, path, mpirun)
    for key, entries in own.items():
        given = additions.get(key, PathAddition())
        front = tuple(entries.prepend) + tuple(e for e in given.prepend if e not in entries.prepend)
        back = tuple(e for e in given.append if e not in front) + tuple(e for e in entries.append if e not in given.append and e not in front)
        additions[key] = PathAddition(front, back, given.reordered)
    return said


def ccl_worker_count(env: Mapping[str, str]) -> int:
    """CCL_WORKER_COUNT for ranks that may run ccl: the one set, but at least 1 (accelerate/state.py _prepare_backend takes
    ccl only when CCL_WORKER_COUNT > 0, and raises "ValueError: Your assigned backend ccl is not available" otherwise)."""
    try:
        return max(1, int(env.get("CCL_WORKER_COUNT", "1")))
    except ValueError:
        return 1


class LauncherEnv(Record):
    """The one plan of a launcher's environment, which every form renders: compat env (its text, --json, the sbatch and
    Dockerfile lines that run it), compat launch with and without --print. ``oneccl``: the oneCCL environment, with the
    path additions of the oneCCL runtime and of the launcher's own program (``oneccl.additions``); ``exports``: what the
    launcher needs on top (its transport, I_MPI_ROOT, MASTER_ADDR/PORT), the master given, and the interface that reaches
    it when there is one (GLOO_SOCKET_IFNAME, CCL_KVS_IFACE, FI_TCP_IFACE, the MPI's own). Each form adds its own thread
    settings (compat env's for the node, compat launch's plan per rank)."""

    oneccl: OnecclEnv
    exports: Mapping[str, str]
    comments: tuple[str, ...]

    def all_exports(self) -> dict[str, str]:
        return {**self.oneccl.exports, **self.exports}


def launcher_env(facts: Facts, launcher: Optional[str], mpirun: Optional[str] = None, master_addr: Optional[str] = None, nnodes: int = 1,
                 route: Optional[Callable[[str], RouteFacts]] = None, master_from_env: bool = True) -> LauncherEnv:
    """The plan of ``launcher``'s environment (``LauncherEnv``). ``master_addr`` and ``nnodes``: the job's master and its
    host count (compat env --master-addr/--nnodes; compat launch under srun: the allocation's first host and its node
    count); ``master_from_env``: $MASTER_ADDR stands for an unnamed master (compat env; compat launch names its own)."""
    oneccl = oneccl_environment(facts, launcher, mpirun=mpirun, master_addr=master_addr)
    exports = dict(oneccl.launcher_exports)
    comments = list(oneccl.launcher_comments)
    master = master_addr or (_master_from_env(facts.snapshot.env, comments) if master_from_env else None)
    if master_addr:
        exports["MASTER_ADDR"] = master_addr
        comments.append(f"MASTER_ADDR={master_addr}: " + ("--master-addr" if master_from_env else "the job's first host"))
    if master or nnodes > 1 or (launcher and master_from_env):
        extra, reasons = network_exports(master, nnodes, launcher, oneccl.bindings, facts.snapshot.env, facts.snapshot.executable, oneccl.path, route)
        exports.update(extra)
        comments += reasons
    return LauncherEnv(oneccl, exports, tuple(comments))


def _master_from_env(env: Mapping[str, str], comments: list[str]) -> Optional[str]:
    """$MASTER_ADDR as --master-addr is taken: a host name or an address (no user@, no port), else None and a comment
    saying it is not used (its value shown escaped)."""
    value = env.get("MASTER_ADDR") or None
    if value is None:
        return None
    from ..hostlist import parse_host

    entry, _problem = parse_host(value)
    if entry is None or "@" in value or entry[1] is not None:
        comments.append(f"MASTER_ADDR={value[:80]!r} in the environment is not a host name or an address: not used to choose an interface "
                        "(pass --master-addr HOST)")
        return None
    return value


def network_exports(master: Optional[str], nnodes: int, launcher: Optional[str], ccl: bool, env: Mapping[str, str], python: str = "",
                    path: Optional[str] = None, route: Optional[Callable[[str], RouteFacts]] = None) -> tuple[dict[str, str], list[str]]:
    """The interface that reaches ``master`` (environment/interfaces.choose_interface over the kernel's route), exported
    for gloo (GLOO_SOCKET_IFNAME), for oneCCL when ``ccl`` (CCL_KVS_IFACE, FI_TCP_IFACE) and for the launcher's own
    traffic (its ``interface_exports``: I_MPI_HYDRA_IFACE, OMPI_MCA_*_tcp_if_include); variables ``env`` already sets are
    kept. Without a master, a route, or on a job across hosts whose master is loopback here: nothing, and the one
    sentence why. compat env's, and what a job script gets through it (compat export's, an sbatch script's)."""
    facts = (route or route_facts)(master) if master else None
    choice = choose_interface(master, nnodes > 1, facts)
    said = [f"interface: {choice.why}"]
    if choice.interface is None:
        return {}, said
    extra, words = interface_variables(choice, GLOO_VARIABLES + (CCL_VARIABLES if ccl else ()), env, "interface")
    said += words
    if launcher:
        from . import LAUNCHERS

        own, words = LAUNCHERS[launcher].interface_exports(choice.interface, env, python, path)
        extra.update(own)
        said += words
    if nnodes > 1 or not is_loopback(master or ""):
        command = compat_env_command(python, launcher, f" --master-addr {shlex.quote(master or 'MASTER')} --nnodes {nnodes}")
        said.append(f"interface: the same name must exist on every host (run {command} on each host, or check that it does)")
    return extra, said


def launcher_exports(launcher: str, exports: Mapping[str, str], env: Mapping[str, str], bindings_dir: Path,
                     interfaces: list[str], python: str = "", mpi_root: str = "", path: Optional[str] = None,
                     mpirun: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
    """What a launch of the ccl backend under ``launcher`` needs on top of setvars.sh: that launcher's ccl_exports()
    (oneCCL's transport, its providers, the key-value store's interface), with what was chosen and why."""
    from . import LAUNCHERS

    return LAUNCHERS[launcher].ccl_exports(CclEnv(exports, env, bindings_dir, tuple(interfaces), python, mpi_root, path, mpirun))
