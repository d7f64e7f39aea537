"""The oneCCL checks (oneccl.*): the environment's oneCCL facts (environment/setvars.py: the bindings' setvars.sh
sourced and diffed, or the system oneCCL they load) judged against the shell compat runs in, and the needs of a launcher
(launchers/environment.py, what compat env --launcher exports).

Side effects: those of environment/setvars.py (a bash child sources setvars.sh; ELF files and ``ldconfig -p`` for a
system oneCCL); reads /sys/class/net for the key-value store's interface.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from ..environment.interfaces import InterfaceChoice, choose_interface, is_loopback, route_facts, up_interfaces
from ..environment.oneccl import SystemOneccl
from ..environment.setvars import (
    INTERFACES_KEY,
    SetvarsResult,
    find_bindings,
    library_search,
    path_entries,
    runtime_install,
    setvars_fix,
    setvars_result,
    system_oneccl,
)
from ..findings import Finding, Status
from .registry import Context, check

KEYS = ("CCL_ROOT", "I_MPI_ROOT", "FI_PROVIDER_PATH", "LD_LIBRARY_PATH", "PATH", "CCL_CONFIGURATION", "CPATH", "LIBRARY_PATH")  # what oneccl.setvars wants set

def _no_libfabric_note(ctx: Context) -> tuple[str, ...]:
    """Why the installed impi-rt gives no libfabric, when it is a release whose wheel ships none (2021.19)."""
    from ..environment.oneccl_layouts import LAYOUTS, NO_LIBFABRIC, installed_release

    release = installed_release(ctx.snapshot.prefix) if ctx.snapshot.prefix else None
    row = next((r for r in LAYOUTS if release is not None and r.applies_to(release)), None)
    if row is None or row.libfabric != NO_LIBFABRIC:
        return ()
    entry = next((r for r in ctx.matrix.runtime if r.distribution == "impi-rt" and r.version == release), None)
    declared = f": it declares {', '.join(entry.requires)}, which no configured index has" if entry is not None and entry.requires else ""
    return (f"impi-rt {release} is installed; its wheel ships no libfabric and its activation script names none{declared} ({row.source})",)


def _fix(ctx: Context, path: Optional[Path]) -> str:
    also = f"   (or: source {path})" if path is not None and path.is_file() else ""
    return f"{env_command(ctx)}{also}"


def fix_launcher(ctx: Context) -> Optional[str]:
    """The launcher a fix's compat env names: the one asked (compat check --launcher), else the live run's (doctor --live,
    given or detected), else none."""
    return ctx.options.launcher or ctx.options.env_launcher


def env_command(ctx: Context, launcher: Optional[str] = None, extra: str = "") -> str:
    """``eval "$(compat env ...)"`` as a fix names it, in full: ``--python`` when the environment judged is not the one
    compat runs in (compat env there would export another environment's settings), ``--launcher`` when one was asked or
    detected (``launcher`` names one outright; without it compat env under mpirun lacks MASTER_ADDR and I_MPI_ROOT), and
    ``extra`` (" --master-addr HOST")."""
    from ..launchers.interface import compat_env_command

    return compat_env_command(ctx.snapshot.executable, launcher or fix_launcher(ctx), extra)


@check("oneccl.setvars", "the oneCCL environment is set up: the bindings' setvars.sh sourced, or the system oneCCL they load found")
def setvars_sourced(ctx: Context) -> Finding:
    cid = "oneccl.setvars"
    result = setvars_result(ctx)
    if result is None:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed")
    if result.system is not None:
        return _system_finding(ctx, result, result.system)
    if not result.ok:
        evidence = tuple(f"setvars.sh said: {line}" for line in result.output)
        return Finding(cid, Status.FAIL, f"setvars.sh cannot be used: {result.error}", evidence, setvars_fix(result.path))
    wanted = [k for k in KEYS if k in result.missing]
    if not wanted:
        return Finding(cid, Status.PASS, f"{IN_SHELL}{result.path} has been sourced", tuple(f"{k} is set" for k in KEYS if k in result.after and k in os.environ)[:4])
    evidence = tuple(f"{key}: missing {result.missing[key]}" for key in wanted)
    return Finding(cid, Status.FAIL, f"{IN_SHELL}the oneCCL environment is not set up: {', '.join(wanted)} {'is' if len(wanted) == 1 else 'are'} missing",
                   evidence, _fix(ctx, result.path))


LOOKED_SHOWN = 10  # places searched, quoted in a finding's evidence
# What a oneCCL check judges, said at the head of its summary: the shell compat runs in (oneccl.setvars, a system
# oneCCL's environment), or the environment compat env would create on top of it (oneccl.fi-provider, oneccl.libfabric:
# they PASS in a clean shell because compat env's exports set FI_PROVIDER_PATH and LD_LIBRARY_PATH, which the shell lacks)
IN_SHELL = "in this shell: "
WITH_EXPORTS = "with compat env's exports: "


def _system_finding(ctx: Context, result: SetvarsResult, system: SystemOneccl) -> Finding:
    """Bindings without an env/setvars.sh (built against a system oneCCL): which libccl they load and how it was found.
    FAIL only when none is found; WARN when the loader would not find it, cannot load its own needs, or the environment
    compat env prints is not set; PASS otherwise."""
    cid = "oneccl.setvars"
    evidence = [system.named]
    if len(system.chain) > 1:
        evidence.append("loaded through: " + " -> ".join(system.chain))
    evidence += list(system.unreadable)
    shown = list(system.looked[:LOOKED_SHOWN]) + ([f"and {len(system.looked) - LOOKED_SHOWN} more places"] if len(system.looked) > LOOKED_SHOWN else [])
    located = system.located
    if located is None:
        return Finding(cid, Status.FAIL, f"the bindings carry no env/setvars.sh (built against a system oneCCL) and no {system.name} they load is found",
                       tuple(evidence + [f"looked in: {place}" for place in shown]), setvars_fix(result.path, result, env_command(ctx), ctx.matrix))
    evidence.append(f"found: {located.path} ({located.how})")
    if system.root:
        evidence.append(f"oneCCL root: {system.root}" + (f", with {system.script}" if system.script is not None else ""))
    if system.providers:
        evidence.append(f"libfabric providers: {system.providers}")
    evidence += list(result.notes)
    if not located.loader:
        return Finding(cid, Status.WARN, f"the bindings load {system.name} from a system oneCCL found at {located.path} ({located.how}), "
                       f"but the loader does not search there in this shell: LD_LIBRARY_PATH lacks {located.directory}", tuple(evidence), _fix(ctx, system.script))
    if system.unresolved:
        missing = ", ".join(system.unresolved)
        return Finding(cid, Status.WARN, f"the system oneCCL {located.path} is found ({located.how}), but the loader cannot load it: "
                       f"it needs {missing}, which {'is' if len(system.unresolved) == 1 else 'are'} not found",
                       tuple(evidence), f"Put the folder that holds {system.unresolved[0]} on LD_LIBRARY_PATH, or install a oneCCL build whose lib folder has it.")
    wanted = [k for k in KEYS if k in result.missing]
    if wanted:
        evidence += [f"{key}: missing {result.missing[key]}" for key in wanted]
        return Finding(cid, Status.WARN, f"the bindings load the system oneCCL {located.path}, but its environment is not set up in this shell: "
                       f"{', '.join(wanted)} {'is' if len(wanted) == 1 else 'are'} missing", tuple(evidence), _fix(ctx, system.script))
    return Finding(cid, Status.PASS, f"the bindings load the system oneCCL {located.path} ({located.how})", tuple(evidence))


@check("oneccl.fi-provider", "FI_PROVIDER_PATH holds libfabric providers, with compat env's exports")
def fi_provider(ctx: Context) -> Finding:
    """Judged with compat env's exports on top of this shell (the oneCCL environment: setvars.sh sourced, or a system
    oneCCL's exports), as the launch that runs eval "$(compat env)" first sees it; every summary says so (WITH_EXPORTS)."""
    finding = _fi_provider(ctx)
    return finding if finding.status is Status.SKIP else Finding(finding.id, finding.status, WITH_EXPORTS + finding.summary, finding.evidence, finding.fix)


def _fi_provider(ctx: Context) -> Finding:
    cid = "oneccl.fi-provider"
    result = setvars_result(ctx)
    if result is None or not result.ok:
        why = ("the oneCCL bindings are not installed" if result is None else "no libccl the bindings load is found" if result.system is not None
               else "setvars.sh cannot be used")
        return Finding(cid, Status.SKIP, why)
    value = result.after.get("FI_PROVIDER_PATH") or os.environ.get("FI_PROVIDER_PATH", "")
    if not value:
        # libfabric has no provider folder of its own to fall back on: without one every OFI rank stops with
        # "fi_getinfo error: ret -61" (no provider), and Intel MPI's own transport needs them as well
        if result.system is not None:
            return Finding(cid, Status.FAIL, "no libfabric provider folder found for the system oneCCL and FI_PROVIDER_PATH is not set: libfabric has "
                           "no default folder, so oneCCL's transport finds no provider (\"fi_getinfo error: ret -61\")", (),
                           f"pip install {runtime_install(ctx.matrix)} (its lib folder holds the providers), then {_fix(ctx, result.path)}")
        bundled = sorted(str(p) for p in find_bindings_dir(ctx).glob("**/libfabric/lib/prov") if p.is_dir())
        if bundled:
            return Finding(cid, Status.WARN, "setvars.sh does not set FI_PROVIDER_PATH: libfabric has no default folder, so oneCCL's OFI transport "
                           "finds no provider (\"fi_getinfo error: ret -61\")", (f"the bindings' providers: {bundled[0]}",),
                           f"{env_command(ctx, fix_launcher(ctx) or 'torchrun')}   (it sets FI_PROVIDER_PATH={bundled[0]})")
        return Finding(cid, Status.FAIL, "setvars.sh does not set FI_PROVIDER_PATH and the bindings hold no libfabric provider folder", (),
                       f"Reinstall oneccl_bind_pt (its opt/mpi/libfabric/lib/prov holds the providers), or pip install {runtime_install(ctx.matrix)}.")
    holding: list[str] = []
    empty: list[str] = []
    for entry in path_entries(value):
        directory = Path(entry)
        providers = sorted(p.name for p in directory.glob("lib*-fi.so")) if directory.is_dir() else []
        (holding if providers else empty).append(f"{entry}: {', '.join(providers) if providers else 'no providers' if directory.is_dir() else 'does not exist'}")
    if not holding:
        where = (f"pip install {runtime_install(ctx.matrix)} (its lib folder holds the providers)" if result.system is not None
                 else "Reinstall oneccl_bind_pt (its opt/mpi/libfabric/lib/prov holds the providers)")
        return Finding(cid, Status.FAIL, "no FI_PROVIDER_PATH entry holds a libfabric provider", tuple(empty) + _no_libfabric_note(ctx), f"{where}, then {_fix(ctx, result.path)}")
    return Finding(cid, Status.PASS, f"{len(holding)} FI_PROVIDER_PATH entr{'y holds' if len(holding) == 1 else 'ies hold'} providers", tuple(holding + empty))


def find_bindings_dir(ctx: Context) -> Path:
    bindings = find_bindings(ctx)
    assert bindings is not None
    return bindings.directory


LIBFABRIC = "libfabric.so"  # the name libccl dlopens ("could not open the library: libfabric.so" when the loader finds none)


@check("oneccl.libfabric", "libfabric, which oneCCL loads at run time, is found by the loader, with compat env's exports")
def libfabric(ctx: Context) -> Finding:
    """libccl dlopens libfabric (its OFI transport; Intel MPI's too): not a DT_NEEDED entry, so nothing else sees it
    missing until every rank stops "could not open the library: libfabric.so". Judged with LD_LIBRARY_PATH as the oneCCL
    environment (what compat env exports) leaves it; every summary says so (WITH_EXPORTS)."""
    finding = _libfabric(ctx)
    return finding if finding.status is Status.SKIP else Finding(finding.id, finding.status, WITH_EXPORTS + finding.summary, finding.evidence, finding.fix)


def _libfabric(ctx: Context) -> Finding:
    cid = "oneccl.libfabric"
    result = setvars_result(ctx)
    if result is None or not result.ok:
        why = ("the oneCCL bindings are not installed" if result is None else "no libccl the bindings load is found" if result.system is not None
               else "setvars.sh cannot be used")
        return Finding(cid, Status.SKIP, why)
    search = library_search(ctx).with_ld_library_path(path_entries(result.after.get("LD_LIBRARY_PATH", "")))
    located, looked = search.find(LIBFABRIC, None, loader_only=True)
    if located is None:
        shown = _no_libfabric_note(ctx) + tuple(f"looked in: {place}" for place in looked[:LOOKED_SHOWN])
        return Finding(cid, Status.FAIL, f"the loader finds no {LIBFABRIC}: oneCCL's transport cannot start "
                       f"(\"could not open the library: {LIBFABRIC}\")", shown,
                       f"pip install {runtime_install(ctx.matrix)} (its lib folder holds {LIBFABRIC}), then {_fix(ctx, result.path)}")
    layout = result.system.layout if result.system is not None else None
    evidence = (f"the PyPI runtime's libfabric folder, as {layout.source} sets it: {layout.libfabric}",) if layout is not None else ()
    return Finding(cid, Status.PASS, f"{LIBFABRIC} is found at {located.path} ({located.how})", evidence)


@check("oneccl.mpirun", "mpirun on PATH is the one bundled with the bindings")
def mpirun(ctx: Context) -> Finding:
    cid = "oneccl.mpirun"
    bindings = find_bindings(ctx)
    if bindings is None:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed")
    bundled = bindings.bundled_mpirun()
    current = ctx.snapshot.which.get("mpirun")
    if bundled is None:
        return Finding(cid, Status.SKIP, "these bindings bundle no mpirun", (f"mpirun on PATH: {current or 'none'}",))
    if current and os.path.realpath(current) == os.path.realpath(bundled):
        return Finding(cid, Status.PASS, f"mpirun is the bundled Intel MPI ({bundled})")
    summary = f"mpirun on PATH is {current}, not the bundled {bundled}" if current else f"no mpirun on PATH; the bindings bundle {bundled}"
    return Finding(cid, Status.WARN, summary, ("an MPI other than the bundled Intel MPI may not set up oneCCL's transport the same way",), _fix(ctx, bindings.setvars))


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    try:
        return os.path.commonpath([real, root]) == root
    except ValueError:
        return False


def _site_packages_of_other_env(entry: str, paths) -> bool:
    """A site-packages folder that is not on the target interpreter's sys.path."""
    real = os.path.realpath(entry)
    parts = real.split(os.sep)
    if "site-packages" not in parts:
        return False
    site = os.sep.join(parts[: parts.index("site-packages") + 1])
    return not any(os.path.realpath(p) == site for p in paths)


def _stale_roots(own: list[str], where: str) -> list[str]:
    """CCL_ROOT / I_MPI_ROOT naming a folder outside the bindings' (or the system oneCCL's) own."""
    problems = []
    for key in ("CCL_ROOT", "I_MPI_ROOT"):
        value = os.environ.get(key)
        if value and not any(_inside(value, folder) for folder in own):
            problems.append(f"{key}={value} is not inside {where}")
    return problems


def _stale_path_entries(ctx: Context, own: list[str]) -> list[str]:
    """LD_LIBRARY_PATH / FI_PROVIDER_PATH entries of another Python environment, or holding a libccl/libmpi of their own."""
    problems = []
    for key in ("LD_LIBRARY_PATH", "FI_PROVIDER_PATH"):
        for entry in path_entries(os.environ.get(key, "")):
            if any(_inside(entry, folder) for folder in own):
                continue  # the wheel's own folders (or the system oneCCL's) are never stale
            if _site_packages_of_other_env(entry, ctx.snapshot.paths):
                problems.append(f"{key} entry {entry} belongs to another Python environment")
            elif any(Path(entry).glob("libccl.so*")) or any(Path(entry).glob("libmpi.so.12*")):
                problems.append(f"{key} entry {entry} holds its own libccl/libmpi, which shadows the wheel's")
    return problems


@check("oneccl.stale-prefix", "no oneCCL/MPI paths from another environment or a oneAPI install shadow the wheel's")
def stale_prefix(ctx: Context) -> Finding:
    cid = "oneccl.stale-prefix"
    bindings = find_bindings(ctx)
    if bindings is None:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed")
    own = [str(bindings.directory)]
    system = system_oneccl(ctx)
    if system is not None and system.located is not None:  # a system oneCCL's own folders are the right ones for these bindings
        own += [f for f in (system.root, system.located.directory, system.providers) if f]
    where = bindings.directory if len(own) == 1 else f"{bindings.directory} or the system oneCCL they load ({', '.join(own[1:])})"
    problems = _stale_roots(own, where) + _stale_path_entries(ctx, own)
    if problems:
        return Finding(cid, Status.FAIL, problems[0], tuple(problems[1:]),
                       f"Start from a clean shell (or unset the variables above), then {_fix(ctx, bindings.setvars)}")
    return Finding(cid, Status.PASS, "no stale oneCCL/MPI prefixes in the environment")


def _plain_command(launcher: Optional[str], extra: str) -> str:
    return f'eval "$(compat env{" --launcher " + launcher if launcher else ""}{extra})"'


def kvs_iface_finding(installed: bool, interfaces: list[str], value: Optional[str], route: Optional[InterfaceChoice] = None,
                      master: str = "", command: Callable[[Optional[str], str], str] = _plain_command) -> Finding:
    """oneCCL's key-value store (how the ranks find each other) binds to an interface other than lo unless CCL_KVS_IFACE
    names one: where lo is the only interface up (a container without a network) it needs CCL_KVS_IFACE=lo. With
    MASTER_ADDR set (a job across hosts), ``route`` is the interface that reaches it (environment/interfaces, as compat
    env chooses it): with several interfaces up it must be named, and a CCL_KVS_IFACE naming another one is said.
    ``command(launcher, extra)``: the full compat env command a fix names (``env_command``; ``launcher`` the default when
    none was asked)."""
    cid = "oneccl.kvs-iface"
    if not installed:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed")
    if not interfaces:
        return Finding(cid, Status.SKIP, "no network interface was found up (/sys/class/net)")
    up = f"interfaces up: {', '.join(interfaces)}"
    chosen = route.interface if route is not None else None
    why = route.why if route is not None else ""
    if chosen and value and value != chosen and value in interfaces:
        return Finding(cid, Status.WARN, f"CCL_KVS_IFACE={value}, but the route to the master {master} leaves by {chosen}", (up, why),
                       f"export CCL_KVS_IFACE={chosen} FI_TCP_IFACE={chosen}   ({command(None, f' --master-addr {master}')} sets them)")
    if chosen and not value and len([i for i in interfaces if i != "lo"]) > 1:
        return Finding(cid, Status.WARN, f"CCL_KVS_IFACE is not set and several interfaces are up: oneCCL's key-value store may bind to another "
                       f"than {chosen}, the one that reaches the master {master}", (up, why),
                       f"export CCL_KVS_IFACE={chosen} FI_TCP_IFACE={chosen}   ({command(None, f' --master-addr {master}')} sets them)")
    if value:
        if value in interfaces:
            return Finding(cid, Status.PASS, f"CCL_KVS_IFACE={value}, an interface that is up", (up,))
        return Finding(cid, Status.WARN, f"CCL_KVS_IFACE={value} is not an interface that is up here", (up,),
                       f"export CCL_KVS_IFACE={next((i for i in interfaces if i != 'lo'), 'lo')}   (an interface that is up here)")
    if interfaces == ["lo"]:
        return Finding(cid, Status.WARN, "lo is the only network interface up and CCL_KVS_IFACE is not set: oneCCL's key-value store finds no interface",
                       (up,), f"export CCL_KVS_IFACE=lo   ({command('torchrun', '')} sets it)")
    return Finding(cid, Status.PASS, "CCL_KVS_IFACE is not set; oneCCL's key-value store has an interface other than lo", (up,))


@check("oneccl.kvs-iface", "oneCCL's key-value store has an interface to bind to (CCL_KVS_IFACE=lo where lo is the only one up)")
def kvs_iface(ctx: Context) -> Finding:
    interfaces = ctx.once(INTERFACES_KEY, up_interfaces)
    installed = find_bindings(ctx) is not None
    master = ctx.snapshot.env.get("MASTER_ADDR", "")
    route = None
    if installed and master and not is_loopback(master) and master != "localhost":  # a job across hosts: the route to its master
        route = choose_interface(master, True, route_facts(master))
    return kvs_iface_finding(installed, list(interfaces), ctx.snapshot.env.get("CCL_KVS_IFACE"), route, master,
                             lambda launcher, extra: env_command(ctx, fix_launcher(ctx) or launcher, extra))


MUST_MATCH = ("CCL_ATL_TRANSPORT",)  # needs only that value meets (the transport); any value meets the others


@check("oneccl.launcher", "what ccl (and, under mpirun, any backend) needs under the launcher named (compat check --launcher) is set: "
                          "its transport, I_MPI_ROOT, MASTER_ADDR/MASTER_PORT")
def launcher_needs(ctx: Context) -> Finding:
    """The same needs `compat env --launcher` exports (launchers/environment.oneccl_environment), judged against this environment:
    FAIL for each one it lacks (CCL_ATL_TRANSPORT: a value other than the one needed counts as lacking). Without the
    bindings, a launcher that gives its ranks no rendezvous address (mpirun) still needs MASTER_ADDR/MASTER_PORT:
    torch's env:// stops with "MASTER_ADDR expected, but not set" for gloo too, and accelerate sets only a port."""
    cid = "oneccl.launcher"
    launcher = ctx.options.launcher
    if launcher is None:
        return Finding(cid, Status.SKIP, "no launcher named (compat check or compat doctor --launcher spawn|torchrun|mpirun|srun judges what ccl needs under it)")
    bindings = find_bindings(ctx)
    result = setvars_result(ctx) if bindings is not None else None
    if result is not None and not result.ok:
        return Finding(cid, Status.SKIP, "the oneCCL environment cannot be set up (oneccl.setvars says why)")
    from ..launchers.environment import oneccl_environment  # the one computation compat env --launcher prints

    found = oneccl_environment(ctx, launcher)
    needed, said, env = found.launcher_exports, list(found.launcher_comments), ctx.snapshot.env
    from ..launchers import LAUNCHERS

    if bindings is None and LAUNCHERS[launcher].gives_rendezvous:
        return Finding(cid, Status.SKIP, f"the oneCCL bindings are not installed, and {launcher} gives its ranks their rendezvous")
    what = "ccl" if bindings is not None else "the ranks (any backend)"
    unmet = [key for key, value in needed.items() if not env.get(key) or (key in MUST_MATCH and env.get(key) != value)]
    if not unmet:
        return Finding(cid, Status.PASS, f"what {what} {'needs' if bindings is not None else 'need'} under {launcher} is set", tuple(said))
    evidence = [f"{key}: {('is ' + env[key]) if env.get(key) else 'not set'}; needs {needed[key]}" for key in unmet]
    return Finding(cid, Status.FAIL, f"under {launcher}, {what} {'needs' if bindings is not None else 'need'} {', '.join(unmet)}, "
                   f"which {'is' if len(unmet) == 1 else 'are'} not set as needed here",
                   tuple(evidence + said), env_command(ctx, launcher))
