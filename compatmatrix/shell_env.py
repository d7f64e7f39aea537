"""`compat env`: the exports that replace `python -c '... import cwd'` + `source setvars.sh`, plus runtime settings.

Path lists (PATH, LD_LIBRARY_PATH, ...: oneccl_env.ADDITIVE) are written as additions joined to the value the shell has
when it sources the file (`export PATH="/added${PATH:+:$PATH}"`), never as the value they had when compat ran: a file
written during `docker build` must not undo the image's later `ENV PATH=...`. Each addition is skipped when the value
already holds it, so a file sourced twice (BASH_ENV and an entrypoint) adds its entries once; MANPATH keeps man's
default search path (an empty entry) when it was unset. With `--defaults` the other settings
(thread counts, LD_PRELOAD, the oneCCL variables) are written as defaults a value set at sourcing time overrides
(`export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"`), so that file gives way to a pod's env or `docker run -e`.
Without the oneCCL bindings (the stock profile, gloo) only LD_PRELOAD and the thread count are printed.

Side effects: none of its own; the setvars.sh it reads is sourced by checks/oneccl_env.py (a bash child), a system
oneCCL's libccl is found by reading ELF files (environment/linker.py), the interfaces read from /sys/class/net.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional

from .checks.finding import Context
from .checks.oneccl_env import (
    INTERFACES_KEY,
    PathAddition,
    env_command,
    export_plan,
    find_bindings,
    setvars_fix,
    setvars_result,
    system_error,
)
from .environment.interfaces import (
    CCL_VARIABLES,
    GLOO_VARIABLES,
    RouteFacts,
    choose_interface,
    interface_variables,
    is_loopback,
    route_facts,
    up_interfaces,
)
from .environment.libraries import preload_candidates, preload_entries
from .errors import CompatError
from .placement.environment import choose_preload
from .placement.plan import thread_advice
from .placement.topology import machine_from_snapshot
from .record import Record
from .values import UnwritableValue, comment_text, env_name_ok

SHELLS = ("bash", "zsh", "fish")
__all__ = ["EnvPlan", "LauncherEnv", "OnecclEnv", "SHELLS", "ccl_launch_env", "ccl_worker_count", "format_env", "launcher_env", "launcher_exports", "network_exports", "oneccl_environment", "plan_env", "up_interfaces"]


class EnvPlan(Record):
    exports: Mapping[str, str]  # set outright
    comments: tuple[str, ...]
    additions: Mapping[str, PathAddition] = MappingProxyType({})  # joined to the value the sourcing shell has

    def to_json(self, python: str) -> dict[str, Any]:
        """The `compat env --json` document (schema_version 2: path lists moved from "exports" to "additions")."""
        return {"schema_version": 2, "command": "env", "python": python, "exports": dict(self.exports),
                "additions": {k: {"prepend": list(a.prepend), "append": list(a.append)} for k, a in self.additions.items()},
                "comments": list(self.comments)}


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


def oneccl_environment(ctx: Context, launcher: Optional[str] = None, mpirun: Optional[str] = None, master_addr: Optional[str] = None) -> OnecclEnv:
    """The one computation of the oneCCL environment: compat env, compat launch (--print or not), compat check's
    oneccl.launcher and the exports all take it from here. ``mpirun``: the mpirun the launch will run (compat launch
    --mpirun), looked at first for its MPI. Without the bindings only a launcher that gives its ranks no rendezvous
    address (mpirun) adds MASTER_ADDR/MASTER_PORT: torch's env:// needs them for gloo as well. ``master_addr`` (compat
    env --master-addr) stands for MASTER_ADDR in the environment the launcher's needs are judged against."""
    env = {**ctx.snapshot.env, "MASTER_ADDR": master_addr} if master_addr else ctx.snapshot.env
    bindings = find_bindings(ctx)
    exports: dict[str, str] = {}
    additions: dict[str, PathAddition] = {}
    comments: list[str] = []
    extra: dict[str, str] = {}
    reasons: list[str] = []
    if bindings is None:
        comments.append(f"no oneCCL bindings (oneccl_bindings_for_pytorch / torch_ccl) are installed for {ctx.snapshot.executable}: "
                        "no oneCCL environment exported")
        if launcher:
            from .launchers import LAUNCHERS
            from .launchers.interface import master_exports

            if LAUNCHERS[launcher].gives_rendezvous:
                reasons.append(f"launcher {launcher}: nothing added (no oneCCL bindings: the gloo backend needs no oneCCL settings)")
            else:
                extra, reasons = master_exports(launcher, env)
            reasons += _launcher_path(launcher, additions, ctx.snapshot.executable, env.get("PATH"), mpirun)
        return OnecclEnv(exports, additions, tuple(comments), extra, tuple(reasons), False)
    result = setvars_result(ctx)
    assert result is not None
    if not result.ok:  # no half environment to eval: exit 2 with the reason and the script's last words
        if result.system is not None and not result.system.found:
            raise CompatError(f"{system_error(bindings.directory, result.system)}.", setvars_fix(result.path, result, env_command(ctx, launcher), ctx.matrix))
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
        interfaces = list(ctx.once(INTERFACES_KEY, up_interfaces))
        extra, reasons = launcher_exports(launcher, exports, env, bindings.directory, interfaces, ctx.snapshot.executable,
                                          mpi_root, path, mpirun)
        reasons += _launcher_path(launcher, additions, ctx.snapshot.executable, path, mpirun)
    return OnecclEnv(exports, additions, tuple(comments), extra, tuple(reasons), True, result.after.get("PATH"))


def _launcher_path(launcher: str, additions: dict[str, PathAddition], python: str, path: Optional[str], mpirun: Optional[str]) -> list[str]:
    """The launcher's own path additions (launchers' ``path_additions``: the mpirun's folder for hydra) merged into
    ``additions`` in front of the oneCCL environment's own entries of the same list; what was added, in words."""
    from .launchers import LAUNCHERS

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


def ccl_launch_env(ctx: Context, launcher: Optional[str]) -> Optional[EnvPlan]:
    """What a launch of the ccl backend under ``launcher`` needs beyond the thread settings, as compat env --launcher
    prints it: the oneCCL environment, CCL_WORKER_COUNT (at least 1) and the launcher's needs; None without the bindings.
    compat translate's notes print it."""
    oneccl = oneccl_environment(ctx, launcher)
    if not oneccl.bindings:
        return None
    exports = {**oneccl.exports, "CCL_WORKER_COUNT": str(ccl_worker_count(ctx.snapshot.env)), **oneccl.launcher_exports}
    return EnvPlan(exports, oneccl.comments + oneccl.launcher_comments, dict(oneccl.additions))


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


def launcher_env(ctx: Context, launcher: Optional[str], mpirun: Optional[str] = None, master_addr: Optional[str] = None, nnodes: int = 1,
                 route: Optional[Callable[[str], RouteFacts]] = None, master_from_env: bool = True) -> LauncherEnv:
    """The plan of ``launcher``'s environment (``LauncherEnv``). ``master_addr`` and ``nnodes``: the job's master and its
    host count (compat env --master-addr/--nnodes; compat launch under srun: the allocation's first host and its node
    count); ``master_from_env``: $MASTER_ADDR stands for an unnamed master (compat env; compat launch names its own)."""
    oneccl = oneccl_environment(ctx, launcher, mpirun=mpirun, master_addr=master_addr)
    exports = dict(oneccl.launcher_exports)
    comments = list(oneccl.launcher_comments)
    master = master_addr or (_master_from_env(ctx.snapshot.env, comments) if master_from_env else None)
    if master_addr:
        exports["MASTER_ADDR"] = master_addr
        comments.append(f"MASTER_ADDR={master_addr}: " + ("--master-addr" if master_from_env else "the job's first host"))
    if master or nnodes > 1 or (launcher and master_from_env):
        extra, reasons = network_exports(master, nnodes, launcher, oneccl.bindings, ctx.snapshot.env, ctx.snapshot.executable, oneccl.path, route)
        exports.update(extra)
        comments += reasons
    return LauncherEnv(oneccl, exports, tuple(comments))


def plan_env(ctx: Context, ranks_per_node: int, launcher: Optional[str] = None, master_addr: Optional[str] = None, nnodes: int = 1,
             route: Optional[Callable[[str], RouteFacts]] = None, mpirun: Optional[str] = None) -> EnvPlan:
    """compat env's plan. ``master_addr`` (--master-addr, else $MASTER_ADDR) and ``nnodes``: the interface that reaches
    the master is exported for gloo, oneCCL and the launcher (``network_exports``); ``route``: how the master's way is
    asked (environment/interfaces.route_facts; a test passes its own facts); ``mpirun`` (--mpirun): the mpirun the job
    runs, whose MPI decides oneCCL's transport under --launcher mpirun."""
    shared = launcher_env(ctx, launcher, mpirun, master_addr, nnodes, route)  # the plan compat launch renders too
    oneccl = shared.oneccl
    exports = dict(oneccl.exports)
    additions = dict(oneccl.additions)
    comments = list(oneccl.comments)
    preload = choose_preload(preload_candidates(ctx.snapshot.prefix), preload_entries(ctx.snapshot.env.get("LD_PRELOAD", "")))
    if preload.paths:
        exports["LD_PRELOAD"] = ":".join(preload.paths)
        comments.append("LD_PRELOAD: allocator / OpenMP libraries found on this machine (only paths that exist)")
    else:
        comments.append("LD_PRELOAD: no tcmalloc, jemalloc or libiomp5 found on this machine; none set")
    worker_count = ccl_worker_count(ctx.snapshot.env) if oneccl.bindings else 0
    # the same plan compat launch binds by and runtime.threads checks against: physical cores, not hyperthreads
    advice = thread_advice(machine_from_snapshot(ctx.snapshot), ranks_per_node, worker_count)
    if advice.problem and oneccl.bindings and "CCL_WORKER_COUNT" not in ctx.snapshot.env:  # compat launch's automatic choice
        advice = thread_advice(machine_from_snapshot(ctx.snapshot), ranks_per_node, 0)
        comments.append(f"threads: no core is set aside for oneCCL workers: {ranks_per_node} ranks leave none on {advice.cores} physical cores "
                        "(as compat launch chooses); each rank's worker shares its cores")
    if oneccl.bindings:
        exports["CCL_WORKER_COUNT"] = str(worker_count)  # at least 1, with or without a core set aside (ccl_worker_count)
    exports["OMP_NUM_THREADS"] = str(advice.omp_threads)
    hyper = f" ({advice.cpus} CPUs with hyperthreads)" if advice.cpus != advice.cores else ""
    workers = f", {worker_count} oneCCL worker(s) per rank" if oneccl.bindings else ""
    comments.append(f"threads: {advice.cores} physical cores{hyper} allowed, {ranks_per_node} ranks per node{workers}")
    if advice.problem:
        comments.append(f"threads: {advice.problem} The ranks will share cores; compat launch says what fits.")
    comments.append("no per-rank binding here (the same values for every rank): compat launch binds each rank to its own cores")
    exports.update(shared.exports)
    comments += shared.comments
    return EnvPlan(exports, tuple(comments), additions)


def _master_from_env(env: Mapping[str, str], comments: list[str]) -> Optional[str]:
    """$MASTER_ADDR as --master-addr is taken: a host name or an address (no user@, no port), else None and a comment
    saying it is not used (its value shown escaped)."""
    value = env.get("MASTER_ADDR") or None
    if value is None:
        return None
    from .hosts import parse_host

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
        from .launchers import LAUNCHERS

        own, words = LAUNCHERS[launcher].interface_exports(choice.interface, env, python, path)
        extra.update(own)
        said += words
    if nnodes > 1 or not is_loopback(master or ""):
        from .launchers.interface import compat_env_command

        command = compat_env_command(python, launcher, f" --master-addr {shlex.quote(master or 'MASTER')} --nnodes {nnodes}")
        said.append(f"interface: the same name must exist on every host (run {command} on each host, or check that it does)")
    return extra, said


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _safe(text: str) -> bool:
    return shlex.quote(text) == text  # nothing the shell would expand or split: it may stand inside double quotes


# MANPATH: an empty entry (a leading or trailing ':') stands for man's default search path, so an addition to an unset
# MANPATH keeps that entry ("/added:"), as oneAPI's own setvars.sh does; without it man would find only the added pages
KEEPS_EMPTY = frozenset({"MANPATH"})


def _sh_guard(key: str, text: str) -> str:
    """The `case` line that skips an addition already in KEY as one block, so sourcing the file twice (BASH_ENV and an
    entrypoint, a nested shell) does not add the entries twice."""
    block = f'":{text}:"' if _safe(text) else ":" + shlex.quote(text) + ":"
    return f'case ":${{{key}-}}:" in *{block}*) ;; *)'


def sh_addition(key: str, added: PathAddition) -> list[str]:
    """`export KEY="/a:/b${KEY:+:$KEY}"`: the added entries in front of (or after) the value KEY has when this runs, inside
    a `case` that leaves KEY alone when it already holds them; entries with spaces, quotes or $ are single-quoted (shlex)
    next to the double-quoted expansion."""
    lines = []
    keeps_empty = key in KEEPS_EMPTY
    live_after = f":${{{key}-}}" if keeps_empty else f"${{{key}:+:${key}}}"  # `-`: a `set -u` shell with KEY unset does not stop
    live_before = f"${{{key}:-:}}${{{key}:+:}}" if keeps_empty else f"${{{key}:+${key}:}}"
    if added.prepend:
        text = ":".join(added.prepend)
        lines += [_sh_guard(key, text),
                  f'export {key}="{text}{live_after}"' if _safe(text) else f'export {key}={shlex.quote(text)}"{live_after}"', "esac"]
    if added.append:
        text = ":".join(added.append)
        lines += [_sh_guard(key, text),
                  f'export {key}="{live_before}{text}"' if _safe(text) else f'export {key}="{live_before}"{shlex.quote(text)}', "esac"]
    return lines


def _fish_addition(key: str, added: PathAddition) -> list[str]:
    """fish (3.0 and later) keeps every variable whose name ends in PATH as a list, split and joined on ':'; its empty
    entries (an empty value) are left out, as bash's ${KEY:+...} leaves out an empty value (MANPATH keeps them, and gets
    one when it was unset). An addition whose entries KEY already holds is skipped."""
    lines = []
    if key in KEEPS_EMPTY:
        live = f"(if set -q {key}; printf '%s\\n' ${key}; else; echo ''; end)"
    else:
        live = f"(string match -v -- '' ${key})"
    for entries, line in ((added.prepend, f"set -gx {key} {' '.join(_fish_quote(e) for e in added.prepend)} {live}"),
                          (added.append, f"set -gx {key} {live} {' '.join(_fish_quote(e) for e in added.append)}")):
        if entries:
            missing = "; or ".join(f"not contains -- {_fish_quote(e)} ${key}" for e in entries)
            lines.append(f"if {missing}; {line}; end")
    return lines


def _sh_default(key: str, value: str) -> str:
    """`export KEY="${KEY:-value}"`: the value only where KEY is unset or empty when this runs; a value with spaces,
    quotes or $ is set in a second step, single-quoted (shlex), so nothing in it is expanded."""
    if _safe(value):
        return f'export {key}="${{{key}:-{value}}}"'
    return f'[ -n "${{{key}:-}}" ] || {key}={shlex.quote(value)}; export {key}'


def _comment(text: str) -> str:
    """One comment line: a path with a newline in it (an interpreter, a bindings folder) must not end the comment and
    put the rest of it on a line the shell runs when the file is eval'd or sourced."""
    return comment_text(text)


def _checked(plan: EnvPlan) -> None:
    """Names every shell takes as a variable name; values a shell variable can hold (no NUL) and a UTF-8 file can (no
    lone surrogate); anything else is refused (the quoting of each shell carries every other character)."""
    values = [*plan.exports.items(), *[(k, e) for k, a in plan.additions.items() for e in (*a.prepend, *a.append)]]
    for key, value in values:
        if not env_name_ok(key):
            raise UnwritableValue("variable name", key, "a shell's exports", "a name is letters, digits and '_', not starting with a digit")
        if "\0" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
            raise UnwritableValue(f"value of {key}", value, "a shell's exports", "it holds a NUL or an undecodable byte, which no shell variable holds")


def format_env(plan: EnvPlan, shell: str, defaults: bool = False) -> str:
    """The plan as bash/zsh or fish lines. ``defaults`` (compat env --defaults): the settings set outright (thread counts,
    LD_PRELOAD, the oneCCL variables) are written as defaults that a value the sourcing shell already has overrides, so a
    file written during docker build gives way to a pod's env or docker run -e; path lists are additions either way."""
    _checked(plan)
    lines = [f"# {_comment(c)}" for c in plan.comments]
    if defaults and plan.exports:
        lines.append("# --defaults: a value already set when this file is sourced is kept (docker run -e, a pod's env)")
    for key, added in plan.additions.items():
        lines += _fish_addition(key, added) if shell == "fish" else sh_addition(key, added)
    for key, value in plan.exports.items():
        if shell == "fish":
            # `if`, not `set -q KEY; or set ...`: fish's set keeps the status before it, so that line would end the file with 1
            lines.append(f'if test -z "${key}"; set -gx {key} {_fish_quote(value)}; end' if defaults else f"set -gx {key} {_fish_quote(value)}")
        else:
            lines.append(_sh_default(key, value) if defaults else f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def launcher_exports(launcher: str, exports: Mapping[str, str], env: Mapping[str, str], bindings_dir: Path,
                     interfaces: list[str], python: str = "", mpi_root: str = "", path: Optional[str] = None,
                     mpirun: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
    """What a launch of the ccl backend under ``launcher`` needs on top of setvars.sh: that launcher's ccl_exports()
    (oneCCL's transport, its providers, the key-value store's interface), with what was chosen and why."""
    from .launchers import LAUNCHERS
    from .launchers.interface import CclEnv

    return LAUNCHERS[launcher].ccl_exports(CclEnv(exports, env, bindings_dir, tuple(interfaces), python, mpi_root, path, mpirun))
