"""The oneCCL environment: what the bindings' setvars.sh sets, against the environment we run in.

Side effects: sources setvars.sh in ``bash --noprofile --norc`` (environment/child.py: its own process group,
dies with compat, the whole group killed on timeout, Ctrl-C and SIGTERM; a watchdog in that group kills it
when compat is gone, even by SIGKILL).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..environment.child import env_timeout, run_child
from ..matrix.model import CclRelease
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
BINDING_MODULES = ("oneccl_bindings_for_pytorch", "torch_ccl")


@dataclass(frozen=True)
class Bindings:
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


@dataclass(frozen=True)
class Sourced:
    """How sourcing setvars.sh went: the environment afterwards, or why there is none."""

    after: Optional[dict[str, str]]
    error: str = ""  # a clause: "sourcing PATH failed (exit status 3)"
    output: tuple[str, ...] = ()  # the script's last lines of output (stdout and stderr)


@dataclass(frozen=True)
class SetvarsResult:
    path: Path
    ok: bool
    error: str = ""
    output: tuple[str, ...] = ()  # when it failed: the script's last lines of output
    after: Mapping[str, str] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)  # key -> what is missing (entries or value)
    exports: Mapping[str, str] = field(default_factory=dict)  # key -> value after sourcing, for every key it changes


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
    return env_timeout(TIMEOUT_ENV, SOURCE_TIMEOUT_S)


def source_setvars(path: Path, env: Mapping[str, str], timeout: Optional[float] = None) -> Sourced:
    """The environment after ``source path`` in a clean bash (no profile, no rc, no arguments); a script that
    fails, exits or hangs gives no environment, the reason and its last lines of output."""
    limit = setvars_timeout() if timeout is None else timeout
    done_word = f"COMPAT-SETVARS-DONE-{secrets.token_hex(8)}"
    lifeline_read, lifeline_write = os.pipe()
    try:
        ended = run_child(["bash", "--noprofile", "--norc", "-c", WRAPPER, "compat-setvars", str(path), done_word, str(lifeline_read)],
                          limit, env=env, pass_fds=(lifeline_read,))
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
    missing, exports = {}, {}
    for key in sorted(set(after) | set(before)):
        new, old = after.get(key), before.get(key)
        if new == old or new is None or key in ("_", "SHLVL", "PWD", "OLDPWD"):
            continue
        exports[key] = new
        if key in PATH_LISTS:
            lacking = [e for e in _entries(new) if e not in _entries(old or "")]
            if lacking:
                missing[key] = ":".join(lacking)
        else:
            missing[key] = new
    return missing, exports


def setvars_result(ctx: Context) -> Optional[SetvarsResult]:
    def compute() -> Optional[SetvarsResult]:
        bindings = find_bindings(ctx)
        if bindings is None:
            return None
        path = bindings.setvars
        if not path.is_file():
            return SetvarsResult(path, ok=False, error=f"{path} does not exist")
        before = dict(os.environ)
        sourced = source_setvars(path, before)
        if sourced.after is None:
            return SetvarsResult(path, ok=False, error=sourced.error, output=sourced.output)
        missing, exports = diff_environment(before, sourced.after)
        after = sourced.after
        return SetvarsResult(path, ok=True, after=after, missing=missing, exports=exports)

    return ctx.once("setvars", compute)


def setvars_fix(path: Path) -> str:
    if not path.is_file():
        return "Reinstall oneccl_bind_pt: its env/setvars.sh is part of the wheel."
    return f"Run bash -x {path} to see where it stops; if the script is damaged, reinstall oneccl_bind_pt (env/setvars.sh is part of the wheel)."


def _fix(ctx: Context, path: Path) -> str:
    return f'eval "$(compat env{_python_arg(ctx)})"   (or: source {path})'


def _python_arg(ctx: Context) -> str:
    import sys

    return "" if os.path.abspath(ctx.snapshot.executable) == os.path.abspath(sys.executable) else f" --python {ctx.snapshot.executable}"


@check("oneccl.setvars", "the bindings' setvars.sh has been sourced in this environment")
def setvars_sourced(ctx: Context) -> Finding:
    cid = "oneccl.setvars"
    result = setvars_result(ctx)
    if result is None:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed")
    if not result.ok:
        evidence = tuple(f"setvars.sh said: {line}" for line in result.output)
        return Finding(cid, Status.FAIL, f"setvars.sh cannot be used: {result.error}", evidence, setvars_fix(result.path))
    wanted = [k for k in KEYS if k in result.missing]
    if not wanted:
        return Finding(cid, Status.PASS, f"{result.path} has been sourced", tuple(f"{k} is set" for k in KEYS if k in result.after and k in os.environ)[:4])
    evidence = tuple(f"{key}: missing {result.missing[key]}" for key in wanted)
    return Finding(cid, Status.FAIL, f"the oneCCL environment is not set up: {', '.join(wanted)} {'is' if len(wanted) == 1 else 'are'} missing", evidence, _fix(ctx, result.path))


@check("oneccl.fi-provider", "FI_PROVIDER_PATH holds libfabric providers")
def fi_provider(ctx: Context) -> Finding:
    cid = "oneccl.fi-provider"
    result = setvars_result(ctx)
    if result is None or not result.ok:
        return Finding(cid, Status.SKIP, "the oneCCL bindings are not installed" if result is None else "setvars.sh cannot be used")
    value = result.after.get("FI_PROVIDER_PATH") or os.environ.get("FI_PROVIDER_PATH", "")
    if not value:
        return Finding(cid, Status.SKIP, "setvars.sh does not set FI_PROVIDER_PATH (this bindings release uses its own default)")
    holding: list[str] = []
    empty: list[str] = []
    for entry in _entries(value):
        directory = Path(entry)
        providers = sorted(p.name for p in directory.glob("lib*-fi.so")) if directory.is_dir() else []
        (holding if providers else empty).append(f"{entry}: {', '.join(providers) if providers else 'no providers' if directory.is_dir() else 'does not exist'}")
    if not holding:
        return Finding(cid, Status.FAIL, "no FI_PROVIDER_PATH entry holds a libfabric provider", tuple(empty),
                       "Reinstall oneccl_bind_pt (its opt/mpi/libfabric/lib/prov holds the providers), then " + _fix(ctx, result.path))
    return Finding(cid, Status.PASS, f"{len(holding)} FI_PROVIDER_PATH entr{'y holds' if len(holding) == 1 else 'ies hold'} providers", tuple(holding + empty))


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
    own = str(bindings.directory)
    problems = []
    for key in ("CCL_ROOT", "I_MPI_ROOT"):
        value = os.environ.get(key)
        if value and not _inside(value, own):
            problems.append(f"{key}={value} is not inside {bindings.directory}")
    for key in ("LD_LIBRARY_PATH", "FI_PROVIDER_PATH"):
        for entry in _entries(os.environ.get(key, "")):
            inside = _inside(entry, own)
            if inside:
                continue  # the wheel's own folders are never stale
            if _site_packages_of_other_env(entry, ctx.snapshot.paths):
                problems.append(f"{key} entry {entry} belongs to another Python environment")
            elif not inside and (any(Path(entry).glob("libccl.so*")) or any(Path(entry).glob("libmpi.so.12*"))):
                problems.append(f"{key} entry {entry} holds its own libccl/libmpi, which shadows the wheel's")
    if problems:
        return Finding(cid, Status.FAIL, problems[0], tuple(problems[1:]),
                       f"Start from a clean shell (or unset the variables above), then {_fix(ctx, bindings.setvars)}")
    return Finding(cid, Status.PASS, "no stale oneCCL/MPI prefixes in the environment")

