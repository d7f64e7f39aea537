"""The oneCCL environment: what the bindings' setvars.sh sets, against the environment we run in. Bindings built against a
system oneCCL (no env/setvars.sh of their own) are judged by the libccl their native code loads
(environment/oneccl.py): that oneCCL's own env/vars.sh when it has one, else the exports it needs.

Side effects: sources setvars.sh in ``bash --noprofile --norc`` (environment/child.py: its own process group,
dies with compat, the whole group killed on timeout, Ctrl-C and SIGTERM; a watchdog in that group kills it
when compat is gone, even by SIGKILL); reads ELF files and runs ``ldconfig -p`` for a system oneCCL
(environment/linker.py); reads /sys/class/net for the key-value store's interface.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Optional

from ..environment.interfaces import InterfaceChoice, choose_interface, is_loopback, route_facts, up_interfaces
from ..environment.linker import LibrarySearch
from ..environment.oneccl import SystemOneccl, extra_places, locate
from ..matrix.model import CclRelease
from ..record import Record
from .crash import describe_exit
from .finding import Context, Finding, Status, check

SOURCE_TIMEOUT_S = 30.0
TIMEOUT_ENV = "COMPAT_SETVARS_TIMEOUT"  # lowers (or raises) the limit, for tests and slow file systems
OUTPUT_LINES = 5
# $1 the script, $2 the word printed once sourcing has returned, $3 the lifeline: a pipe whose other end only
# compat holds. The watchdog (started twice removed, so a `wait` in setvars.sh does not wait for it) kills the
# whole process group when the pipe closes (compat ended, even by SIGKILL): nothing setvars.sh started outlives
# compat. The script's own output goes to stderr, to be quoted when it fails. The environment afterwards is
# written with bash builtins only (`builtin` skips functions the script defined): a script that empties or
# replaces PATH cannot hide it (`env` would no longer be found). The same word with " end" closes the list, so a
# list cut short is seen as such.
WRAPPER = """\
__compat_setvars="$1"; __compat_done="$2"; __compat_lifeline="$3"; set --
( ( read -r -u "$__compat_lifeline" __compat_line; kill -KILL 0 ) </dev/null >/dev/null 2>&1 & )
eval "exec $__compat_lifeline<&-"
source "$__compat_setvars" </dev/null 1>&2
__compat_status=$?
builtin printf '%s %s\\0' "$__compat_done" "$__compat_status"
while IFS= builtin read -r __compat_name; do
  builtin printf '%s=%s\\0' "$__compat_name" "${!__compat_name}"
done < <(builtin compgen -e)
builtin printf '%s end\\0' "$__compat_done"
"""
PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "FI_PROVIDER_PATH", "CPATH", "LIBRARY_PATH", "MANPATH", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH")
KEYS = ("CCL_ROOT", "I_MPI_ROOT", "FI_PROVIDER_PATH", "LD_LIBRARY_PATH", "PATH", "CCL_CONFIGURATION", "CPATH", "LIBRARY_PATH")
# Path lists a setvars.sh (oneCCL's, Intel MPI's, a oneAPI component's) prepends or appends to: `compat env` exports only
# the entries it added, joined to the value the shell has when it sources the file, never a copy of the value it had
# when compat ran (a Dockerfile's later `ENV PATH=...` must survive). FI_PROVIDER_PATH is not one: Intel MPI's vars.sh
# sets it outright (FI_PROVIDER_PATH=$I_MPI_ROOT/libfabric/lib/prov:/usr/lib64/libfabric), and so does compat env.
ADDITIVE = ("PATH", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH", "MANPATH", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "CLASSPATH")
BINDING_MODULES = ("oneccl_bindings_for_pytorch", "torch_ccl")

_EMPTY: Mapping[str, str] = MappingProxyType({})  # one shared, read-only default


class Bindings(Record):
    module: str
    directory: Path
    release: Optional[CclRelease]

    @property
    def setvars(self) -> Path:
        relative = self.release.setvars if self.release is not None else "env/setvars.sh"
        return self.directory / relative

    def bundled_mpirun(self) -> Optional[Path]:
        for candidate in (self.directory / "opt" / "mpi" / "bin" / "mpirun", self.directory / "bin" / "mpirun"):
            if candidate.exists():
                return candidate
        return None


class Sourced(Record):
    """How sourcing setvars.sh went: the environment afterwards, or why there is none."""

    after: Optional[dict[str, str]]
    error: str = ""  # a clause: "sourcing PATH failed (exit status 3)"
    output: tuple[str, ...] = ()  # the script's last lines of output (stdout and stderr)


class SetvarsResult(Record):
    path: Path  # the script sourced (the bindings' setvars.sh, a system oneCCL's vars.sh), or the bindings' setvars.sh they lack
    ok: bool
    error: str = ""
    output: tuple[str, ...] = ()  # when it failed: the script's last lines of output
    after: Mapping[str, str] = _EMPTY
    missing: Mapping[str, str] = _EMPTY  # key -> what is missing (entries or value)
    exports: Mapping[str, str] = _EMPTY  # key -> value after sourcing, for every key it changes
    before: Mapping[str, str] = _EMPTY  # the environment it was compared with
    system: Optional[SystemOneccl] = None  # bindings without a setvars.sh of their own: the oneCCL they load
    sourced: bool = True  # False: no script; compat's own exports for a system oneCCL (SystemOneccl.after)
    notes: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        """Where the environment comes from, in words ("from <script>", "for the system oneCCL ...")."""
        if self.system is None:
            return f"from {self.path}"
        located = self.system.located
        library = "no libccl found" if located is None else f"{located.path}, found {'through' if located.loader else 'in'} {located.how}"
        if self.sourced:
            return f"from {self.path}, the script of the system oneCCL the bindings load ({library})"
        return f"for the system oneCCL the bindings load ({library}): compat's own exports, as it has no env/vars.sh"


class PathAddition(Record):
    """Entries a script added to a path list: ``prepend`` in front of the value the shell has, ``append`` after it."""

    prepend: tuple[str, ...] = ()
    append: tuple[str, ...] = ()
    reordered: bool = False  # the script also moved or removed entries the shell had: only its new entries are kept


def split_addition(old: Optional[str], new: str) -> Optional[PathAddition]:
    """What a script added to a path list that was ``old`` (None: unset) and is ``new`` afterwards, in order: the value
    before is found as one run of entries in the value after (the last such run: scripts prepend), what is in front of
    it is prepended, what follows it appended. None when nothing was added."""
    before, after = _entries(old or ""), _entries(new)
    if not before:
        return PathAddition(tuple(after)) if after else None
    for start in range(len(after) - len(before), -1, -1):
        if after[start:start + len(before)] == before:
            prepend, append = tuple(after[:start]), tuple(after[start + len(before):])
            return PathAddition(prepend, append) if prepend or append else None
    kept = set(before)
    first = next((i for i, e in enumerate(after) if e in kept), len(after))
    prepend = tuple(e for e in after[:first] if e not in kept)
    append = tuple(e for e in after[first:] if e not in kept)
    return PathAddition(prepend, append, reordered=True) if prepend or append else None


def export_plan(before: Mapping[str, str], exports: Mapping[str, str]) -> tuple[dict[str, str], dict[str, PathAddition]]:
    """(values to set outright, additions to path lists) for the keys a script changed (``exports``: their values after)."""
    plain: dict[str, str] = {}
    additions: dict[str, PathAddition] = {}
    for key, value in exports.items():
        if key in ADDITIVE:
            added = split_addition(before.get(key), value)
            if added is not None:
                additions[key] = added
        else:
            plain[key] = value
    return plain, additions


def find_bindings(ctx: Context) -> Optional[Bindings]:
    from .packages import CCL_NAMES

    for module in BINDING_MODULES:
        directory = ctx.snapshot.modules.get(module)
        if directory:
            dist = ctx.snapshot.get(*CCL_NAMES)
            release = ctx.matrix.ccl_release(dist.public_version) if dist is not None and dist.public_version is not None else None
            return Bindings(module, Path(directory), release)
    return None


def setvars_timeout() -> float:
    """30 s, or $COMPAT_SETVARS_TIMEOUT when that is a finite number above 0."""
    from ..environment.child import env_timeout  # subprocess and the process-group machinery: where a child runs

    return env_timeout(TIMEOUT_ENV, SOURCE_TIMEOUT_S)


def source_setvars(path: Path, env: Mapping[str, str], timeout: Optional[float] = None) -> Sourced:
    """The environment after ``source path`` in a clean bash (no profile, no rc, no arguments); a script that
    fails, exits or hangs gives no environment, the reason and its last lines of output."""
    from ..environment.child import run_child

    limit = setvars_timeout() if timeout is None else timeout
    done_word = f"COMPAT-SETVARS-DONE-{os.urandom(8).hex()}"  # os.urandom: secrets would pull hashlib into every start
    lifeline_read, lifeline_write = os.pipe()
    try:
        # a non-interactive bash sources $BASH_ENV (and sh-mode $ENV) even with --noprofile --norc: in an image whose
        # BASH_ENV is compat env's own file, its exports would be taken for the script's
        clean = {k: v for k, v in env.items() if k not in ("BASH_ENV", "ENV")}
        ended = run_child(["bash", "--noprofile", "--norc", "-c", WRAPPER, "compat-setvars", str(path), done_word, str(lifeline_read)],
                          limit, env=clean, pass_fds=(lifeline_read,))
    except OSError as exc:
        return Sourced(None, f"bash cannot be run ({exc.strerror})")
    finally:
        os.close(lifeline_read)
        os.close(lifeline_write)
    output = _last_lines(ended.stderr)
    if ended.timed_out:
        return Sourced(None, f"sourcing {path} did not finish within {limit:g} s", output)
    items = ended.stdout.split(b"\0")
    marker = done_word.encode() + b" "
    position = next((i for i, item in enumerate(items) if item.startswith(marker)), None)
    if position is None:
        return Sourced(None, f"sourcing {path} exited ({describe_exit(ended.returncode)}) before it finished", output)
    status = items[position][len(marker):].decode(errors="replace")
    if status != "0":
        return Sourced(None, f"sourcing {path} failed (exit status {status})", output)
    end = done_word.encode() + b" end"
    if end not in items[position + 1:]:
        return Sourced(None, f"the environment after sourcing {path} could not be read (the shell {describe_exit(ended.returncode)} while listing it)", output)
    after = {}
    for item in items[position + 1:items.index(end, position + 1)]:
        key, sep, value = item.partition(b"=")
        if sep:
            after[key.decode(errors="replace")] = value.decode(errors="replace")
    broken = _broken_environment(path, env, after)
    if broken:
        return Sourced(None, broken, output)
    return Sourced(after, "", output)


def _broken_environment(path: Path, before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """Why the environment ``path`` leaves behind would break the shell it is sourced in (no variables at all, PATH
    unset, PATH entries removed: a setvars.sh only adds to PATH), or ""."""
    if not after:
        return f"sourcing {path} leaves no environment variables at all"
    if "PATH" in before and "PATH" not in after:
        return f"sourcing {path} unsets PATH"
    lost = [e for e in _entries(before.get("PATH", "")) if e not in _entries(after.get("PATH", ""))]
    if lost:
        shown_lost = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        return f"sourcing {path} removes PATH entries the shell had ({shown_lost})"
    return ""


def _last_lines(data: bytes) -> tuple[str, ...]:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return tuple(line if len(line) <= 200 else line[:197] + "..." for line in lines[-OUTPUT_LINES:])


def _entries(value: str) -> list[str]:
    return [e for e in value.split(":") if e]


def diff_environment(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(missing, exports): what ``before`` lacks of ``after``, and the values ``after`` changes."""
    from ..environment.child import MARK_VAR

    missing, exports = {}, {}
    for key in sorted(set(after) | set(before)):
        new, old = after.get(key), before.get(key)
        if new == old or new is None or key in ("_", "SHLVL", "PWD", "OLDPWD", MARK_VAR):  # MARK_VAR: run_child's own marker, not the script's
            continue
        exports[key] = new
        if key in PATH_LISTS:
            lacking = [e for e in _entries(new) if e not in _entries(old or "")]
            if lacking:
                missing[key] = ":".join(lacking)
        else:
            missing[key] = new
    return missing, exports


LIBRARY_SEARCH_KEY = "library-search"  # Context.cache key: a test may put its own LibrarySearch there
INTERFACES_KEY = "up-interfaces"  # Context.cache key: a test may put its own list of interfaces there


def library_search(ctx: Context) -> LibrarySearch:
    """The loader's search for the target environment (its LD_LIBRARY_PATH, its interpreter's DT_RPATH, ldconfig's cache),
    plus where a system oneCCL is installed without the loader looking there."""
    def compute() -> LibrarySearch:
        env = ctx.snapshot.env
        data = (ctx.snapshot.raw.get("python") or {}).get("data") if ctx.snapshot.raw else None
        return LibrarySearch(env.get("LD_LIBRARY_PATH", ""), ctx.snapshot.executable, extra=extra_places(ctx.snapshot.prefix, data, env))

    return ctx.once(LIBRARY_SEARCH_KEY, compute)


def system_oneccl(ctx: Context) -> Optional[SystemOneccl]:
    """For bindings without an env/setvars.sh of their own: the oneCCL they load (None: no bindings, or they bundle one)."""
    def compute() -> Optional[SystemOneccl]:
        bindings = find_bindings(ctx)
        if bindings is None or bindings.setvars.is_file():
            return None
        return locate(bindings.directory, library_search(ctx), ctx.snapshot.env)

    return ctx.once("system-oneccl", compute)


def _sourced(path: Path, before: Mapping[str, str], system: Optional[SystemOneccl] = None) -> SetvarsResult:
    sourced = source_setvars(path, before)
    if sourced.after is None:
        return SetvarsResult(path, ok=False, error=sourced.error, output=sourced.output, before=before, system=system)
    missing, exports = diff_environment(before, sourced.after)
    return SetvarsResult(path, ok=True, after=sourced.after, missing=missing, exports=exports, before=before, system=system)


def setvars_result(ctx: Context) -> Optional[SetvarsResult]:
    def compute() -> Optional[SetvarsResult]:
        bindings = find_bindings(ctx)
        if bindings is None:
            return None
        path = bindings.setvars
        before = dict(os.environ)
        if path.is_file():
            return _sourced(path, before)
        system = system_oneccl(ctx)
        assert system is not None
        if not system.found:
            return SetvarsResult(path, ok=False, error=f"{path} does not exist and no libccl the bindings load is found", before=before, system=system)
        notes: tuple[str, ...] = ()
        if system.script is not None:
            result = _sourced(system.script, before, system)
            if result.ok:
                return result
            notes = (f"{system.script} cannot be used ({result.error}): compat's own exports for that oneCCL instead",)
        after = system.after(before)
        missing, exports = diff_environment(before, after)
        return SetvarsResult(path, ok=True, after=after, missing=missing, exports=exports, before=before, system=system, sourced=False, notes=notes)

    return ctx.once("setvars", compute)


SYSTEM_FIX = ("Install the oneCCL runtime the bindings were built against: pip install {runtime} (the PyPI runtime, into this "
              "environment's lib folder), or source <oneAPI>/setvars.sh (a oneAPI install), or export CCL_ROOT=<your oneCCL> "
              "(its lib/ holds {name}); then {command}.")


def runtime_install(matrix, name: str = "impi-rt") -> str:
    """``impi-rt==2021.18.1``: the newest release of a runtime wheel whose declared dependencies an index has (matrix/runtime.py;
    impi-rt 2021.19.0 ships no libfabric and declares libfabric>=2.6, which none has), or the bare name."""
    from ..matrix.runtime import install_words

    return install_words(matrix, name) if matrix is not None else name


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


def setvars_fix(path: Path, result: Optional[SetvarsResult] = None, command: str = 'eval "$(compat env)"', matrix=None) -> str:
    """``command``: the full compat env command for the environment judged (``env_command``)."""
    if result is not None and result.system is not None and not result.system.found:
        runtime = f"{runtime_install(matrix, 'oneccl-cpu')} {runtime_install(matrix, 'impi-rt')}" if matrix is not None and matrix.runtime else "oneccl-cpu"
        return SYSTEM_FIX.format(name=result.system.name, command=command, runtime=runtime)
    if not path.is_file():
        return "Reinstall oneccl_bind_pt: its env/setvars.sh is part of the wheel."
    return f"Run bash -x {path} to see where it stops; if the script is damaged, reinstall oneccl_bind_pt (env/setvars.sh is part of the wheel)."


def system_error(bindings_dir: Path, system: SystemOneccl) -> str:
    """One sentence: the bindings carry no setvars.sh and no libccl they load is found."""
    return (f"The oneCCL bindings at {bindings_dir} carry no env/setvars.sh (a build against a system oneCCL), and no "
            f"{system.name} they load is found where the loader or compat looked")


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
    for entry in _entries(value):
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
    search = library_search(ctx).with_ld_library_path(_entries(result.after.get("LD_LIBRARY_PATH", "")))
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
    problems = []
    for key in ("CCL_ROOT", "I_MPI_ROOT"):
        value = os.environ.get(key)
        if value and not any(_inside(value, folder) for folder in own):
            problems.append(f"{key}={value} is not inside {where}")
    for key in ("LD_LIBRARY_PATH", "FI_PROVIDER_PATH"):
        for entry in _entries(os.environ.get(key, "")):
            inside = any(_inside(entry, folder) for folder in own)
            if inside:
                continue  # the wheel's own folders (or the system oneCCL's) are never stale
            if _site_packages_of_other_env(entry, ctx.snapshot.paths):
                problems.append(f"{key} entry {entry} belongs to another Python environment")
            elif not inside and (any(Path(entry).glob("libccl.so*")) or any(Path(entry).glob("libmpi.so.12*"))):
                problems.append(f"{key} entry {entry} holds its own libccl/libmpi, which shadows the wheel's")
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
    """The same needs `compat env --launcher` exports (shell_env.oneccl_environment), judged against this environment:
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
    from ..shell_env import oneccl_environment  # the one computation compat env --launcher prints

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
