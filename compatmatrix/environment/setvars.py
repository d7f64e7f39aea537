"""The oneCCL environment's facts (no verdicts): the bindings installed (``find_bindings``), what their setvars.sh sets
against the environment we run in (``setvars_result``: sourced and diffed), and for bindings built against a system
oneCCL (no env/setvars.sh of their own) the libccl their native code loads (environment/oneccl.py) with that oneCCL's own
env/vars.sh when it has one, else the exports it needs; path lists split into what a script added (``export_plan``), and
the fix text when none can be set up. checks/oneccl_env.py judges them; launchers/environment.py computes the launch
environment from them. Each fact is computed once per environment (environment/facts.Facts memo).

Side effects: sources setvars.sh in ``bash --noprofile --norc`` (environment/child.py: its own process group,
dies with compat, the whole group killed on timeout, Ctrl-C and SIGTERM; a watchdog in that group kills it
when compat is gone, even by SIGKILL); reads ELF files and runs ``ldconfig -p`` for a system oneCCL
(environment/linker.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Optional

from ..matrix.model import COMPONENTS, CclRelease, Component
from ..record import Record
from .facts import Facts
from .linker import LibrarySearch
from .oneccl import SystemOneccl, extra_places, locate

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
# Path lists a setvars.sh (oneCCL's, Intel MPI's, a oneAPI component's) prepends or appends to: `compat env` exports only
# the entries it added, joined to the value the shell has when it sources the file, never a copy of the value it had
# when compat ran (a Dockerfile's later `ENV PATH=...` must survive). FI_PROVIDER_PATH is not one: Intel MPI's vars.sh
# sets it outright (FI_PROVIDER_PATH=$I_MPI_ROOT/libfabric/lib/prov:/usr/lib64/libfabric), and so does compat env.
ADDITIVE = ("PATH", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH", "MANPATH", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "CLASSPATH")

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
    before, after = path_entries(old or ""), path_entries(new)
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


def find_bindings(ctx: Facts) -> Optional[Bindings]:
    for module in COMPONENTS[Component.CCL].modules:  # oneccl_bindings_for_pytorch, then torch_ccl
        directory = ctx.snapshot.modules.get(module)
        if directory:
            dist = ctx.snapshot.get(*COMPONENTS[Component.CCL].names)
            release = ctx.matrix.ccl_release(dist.public_version) if dist is not None and dist.public_version is not None else None
            return Bindings(module, Path(directory), release)
    return None


def setvars_timeout() -> float:
    """30 s, or $COMPAT_SETVARS_TIMEOUT when that is a finite number above 0."""
    from .child import env_timeout  # subprocess and the process-group machinery: where a child runs

    return env_timeout(TIMEOUT_ENV, SOURCE_TIMEOUT_S)


def source_setvars(path: Path, env: Mapping[str, str], timeout: Optional[float] = None) -> Sourced:
    """The environment after ``source path`` in a clean bash (no profile, no rc, no arguments); a script that
    fails, exits or hangs gives no environment, the reason and its last lines of output."""
    from .child import describe_exit, run_child

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
    lost = [e for e in path_entries(before.get("PATH", "")) if e not in path_entries(after.get("PATH", ""))]
    if lost:
        shown_lost = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        return f"sourcing {path} removes PATH entries the shell had ({shown_lost})"
    return ""


def _last_lines(data: bytes) -> tuple[str, ...]:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return tuple(line if len(line) <= 200 else line[:197] + "..." for line in lines[-OUTPUT_LINES:])


def path_entries(value: str) -> list[str]:
    """A path list's entries, empty ones left out."""
    return [e for e in value.split(":") if e]


def diff_environment(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(missing, exports): what ``before`` lacks of ``after``, and the values ``after`` changes."""
    from .child import MARK_VAR

    missing, exports = {}, {}
    for key in sorted(set(after) | set(before)):
        new, old = after.get(key), before.get(key)
        if new == old or new is None or key in ("_", "SHLVL", "PWD", "OLDPWD", MARK_VAR):  # MARK_VAR: run_child's own marker, not the script's
            continue
        exports[key] = new
        if key in PATH_LISTS:
            lacking = [e for e in path_entries(new) if e not in path_entries(old or "")]
            if lacking:
                missing[key] = ":".join(lacking)
        else:
            missing[key] = new
    return missing, exports


LIBRARY_SEARCH_KEY = "library-search"  # the Facts memo's key: a test may put its own LibrarySearch there
INTERFACES_KEY = "up-interfaces"  # the Facts memo's key: a test may put its own list of interfaces there


def library_search(ctx: Facts) -> LibrarySearch:
    """The loader's search for the target environment (its LD_LIBRARY_PATH, its interpreter's DT_RPATH, ldconfig's cache),
    plus where a system oneCCL is installed without the loader looking there."""
    def compute() -> LibrarySearch:
        env = ctx.snapshot.env
        data = (ctx.snapshot.raw.get("python") or {}).get("data") if ctx.snapshot.raw else None
        return LibrarySearch(env.get("LD_LIBRARY_PATH", ""), ctx.snapshot.executable, extra=extra_places(ctx.snapshot.prefix, data, env))

    return ctx.once(LIBRARY_SEARCH_KEY, compute)


def system_oneccl(ctx: Facts) -> Optional[SystemOneccl]:
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


def setvars_result(ctx: Facts) -> Optional[SetvarsResult]:
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
