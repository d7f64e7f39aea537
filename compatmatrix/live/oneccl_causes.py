"""What a rank's own output says went wrong with oneCCL, libfabric, Intel MPI or the rendezvous, as a cause with the fix
for the launcher the run used. Pure.

The words matched are the libraries' own (oneCCL 2021.14: src/common/api_wrapper/api_wrapper.cpp "could not open the
library", src/atl/ofi/atl_ofi_helper.cpp "fi_getinfo error: ret", src/atl/mpi/atl_mpi_ctx.cpp check_impi_env, the key-value
store's internal_kvs.cpp "can't find interface"; torch's env:// rendezvous "MASTER_ADDR expected, but not set"; an MPI
abort, below, under another MPI's mpirun). They are read as a sequence, in the order the ranks said them, and the first
failure is the cause (issue 36): libfabric not loadable, then oneCCL's fallback to its MPI transport (api_wrapper.cpp:42),
then that transport's complaints (check_impi_env's I_MPI_ROOT, which atl_mpi_ctx.cpp:571 logs and then goes on to
MPI_Init: exporting I_MPI_ROOT there only turns the failure into a hang) is libfabric's failure, and a hang after such a
fallback is too. "failed to initialize ATL" is what every one of them ends in, so it is only read alone when nothing said
why, and then judged by the transport that said it (atl_mpi_* / atl_ofi_*) and the launcher the ranks ran under.

Every fix names what to export, with the value when the environment's oneCCL runtime layout is known, and the
``compat env --launcher`` command that exports it with the rest (the command a user runs before the same launcher).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple, Optional

from ..launchers.interface import LOOPBACK, MASTER_PORT

Cause = tuple[str, tuple[str, ...], str]  # (summary, detail lines, fix): what live/report's known_cause hands back


@dataclass(frozen=True)
class CclRun:
    """What the fixes depend on: the launcher the ranks ran under, whether it is Intel MPI's (oneCCL's MPI transport works
    there), the compat env command for it, and the runtime layout's folders when known ("" otherwise)."""

    launcher: str = "spawn"
    intel_mpi: bool = False
    mpi_launcher: bool = False  # any MPI's mpirun (Open MPI, MPICH too): "launch with mpirun" would be no fix there
    env_command: str = 'eval "$(compat env --launcher spawn)"'
    libfabric: str = ""  # the folder holding libfabric.so
    providers: str = ""  # libfabric's providers
    mpi_root: str = ""  # Intel MPI's root (I_MPI_ROOT)
    flavor: str = ""  # the launcher's flavour as the Launch names it (open-mpi, mpich, intel-mpi, torchrun, ...)
    transport: str = ""  # CCL_ATL_TRANSPORT as the ranks were given it ("": not set, oneCCL chooses)


# the path bounded (PATH_MAX): an unbounded \S* backtracked over every "libfabric" of a long word, quadratic in a rank's output
LIBRARY = re.compile(r"could not open the library: (\S{0,4096}?libfabric\S{0,4096}?),? error: ([^\n]*)")
NO_PROVIDER = re.compile(r"fi_getinfo error: ret (-?\d+)")
IMPI_ROOT = re.compile(r"neither I_MPI_ROOT nor ONEAPI_ROOT is set")
KVS_IFACE = re.compile(r"can't find interface (\S*?)\s*to get host IP")
MASTER_ADDR = re.compile(r"MASTER_ADDR expected, but not set")
MASTER_PORT_MISSING = re.compile(r"MASTER_PORT expected, but not set")
ATL = re.compile(r"(atl_mpi|atl_ofi)\w*\.cpp\S*[^\n]*|failed to initialize ATL")
# An MPI under another MPI's mpirun. oneCCL 2021.14 takes its MPI transport whenever an MPI launcher's variables are set,
# PMIX_RANK among them (src/common/env/env_parser.cpp:24 is_run_with_mpi: MPI_LOCALRANKID, MPI_LOCALNRANKS, PMI_RANK,
# PMI_SIZE, PMIX_RANK; uxlfoundation/oneCCL tag 2021.14, commit 3afa1bb7936f57683a2503c34b29c0daca6a9ccb), and Open MPI's
# mpirun sets PMIX_RANK; the transport then loads the libmpi the loader finds (atl_mpi.cpp:57 MPI_Init_thread), Intel
# MPI's from impi-rt, which does not speak Open MPI's launcher. What follows is in these texts:
# * Intel MPI (MPICH's ch4 device) aborting: "Abort(<code>) on node <rank> (rank <rank> in comm <id>): Fatal error in
#   PMPI_Init_thread: ..." (pmodels/mpich src/mpid/ch4/src/ch4_globals.c:110 MPID_Abort, commit 6a79bf6575c3b5b41cabbd3d59340634d6f9412d);
# * Open MPI's mpirun about a rank that ended without its MPI's init or finalize, or that aborted (open-mpi/ompi tag
#   v4.1.4, commit ffb0adcdd677a02ab396145c40352f8189132b86, orte/tools/orterun/help-orterun.txt:92-122
#   [orterun:proc-ordered-abort] "... calling \"abort\"", [orterun:proc-exit-no-sync] "... exiting improperly. There are
#   three reasons this could occur", and :634 [orterun:non-zero-exit] "detected that one or more processes exited with
#   non-zero status").
MPI_ABORT = re.compile(r"Abort\(-?\d+\)(?: on node \d+)?(?: \(rank \d+ in comm \d+\))?: Fatal error in P?MPI_\w+[^\n]*")
OPEN_MPI_ENDED = re.compile(r"exiting improperly\. There are three reasons|on\s+node \S+ calling \"abort\"|"
                            r"detected that one or more processes exited with non-zero status")
FALLBACK_TO_MPI = "fallback to MPI transport"


def with_arguments(command: str, extra: str) -> str:
    """``eval "$(compat env ...)"`` with ``extra`` arguments added inside the command substitution."""
    return f'{command[:-2]}{extra})"' if command.endswith(')"') else f"{command}{extra}"


def _line(text: str, pattern: "re.Pattern[str]") -> str:
    return next((part.strip() for part in text.splitlines() if pattern.search(part)), "")


def _or_env(run: CclRun, first: str) -> str:
    return f"{first}; or {run.env_command} before launching, which exports it with the rest of the oneCCL environment for {run.launcher}."


def _ofi_exports(run: CclRun) -> str:
    """The exports that take oneCCL off its MPI transport onto OFI, with the layout's folders when known."""
    providers = f"FI_PROVIDER_PATH={run.providers}" if run.providers else "FI_PROVIDER_PATH=<the folder holding libfabric's lib*-fi.so providers>"
    library = (f' LD_LIBRARY_PATH="{run.libfabric}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' if run.libfabric
               else " and the folder holding libfabric.so on LD_LIBRARY_PATH")
    return f"export CCL_ATL_TRANSPORT=ofi {providers}{library}"


def foreign_mpirun_cause(text: str, run: CclRun) -> Optional[Cause]:
    """Under an mpirun that is not Intel MPI's (Open MPI's, MPICH's), oneCCL's MPI transport ran Intel MPI's libmpi: the
    ranks' Intel MPI aborted (MPI_ABORT), or said it wanted I_MPI_ROOT, or the transport failed (atl_mpi), or the
    launcher reported a rank that ended without its MPI's init (Open MPI's words) while the transport was MPI. The fix is
    OFI (compat env --launcher mpirun --mpirun <that mpirun> exports it with libfabric's places), never I_MPI_ROOT."""
    if not run.mpi_launcher or run.intel_mpi:
        return None
    aborted = MPI_ABORT.search(text)
    transport_mpi = bool(aborted or IMPI_ROOT.search(text) or re.search(r"atl_mpi\w*\.cpp", text))
    ended = OPEN_MPI_ENDED.search(text)
    if not transport_mpi or (not aborted and not ended and not IMPI_ROOT.search(text)):
        return None
    where = f"{run.launcher} ({run.flavor})" if run.flavor and run.flavor != run.launcher else f"{run.launcher} (not Intel MPI's)"
    said = aborted.group(0).strip() if aborted else _line(text, IMPI_ROOT if IMPI_ROOT.search(text) else OPEN_MPI_ENDED)
    detail = tuple(dict.fromkeys(line for line in (said, _line(text, OPEN_MPI_ENDED) if ended else "") if line))
    return (f"MPI abort under a foreign mpirun: oneCCL's MPI transport (its default under any MPI launcher) loaded Intel MPI's libmpi, "
            f"which cannot run under {where}", detail,
            _or_env(run, _ofi_exports(run)) + " Intel MPI's settings (I_MPI_ROOT) are no fix here: the launcher is another MPI's.")


class Said(NamedTuple):
    """One thing the ranks said, where they said it: ``at`` the offset in their output (the order they met it)."""

    at: int
    kind: str  # libfabric, fallback, impi-root, no-provider, kvs-iface, master-addr, master-port, mpi-abort, mpi-ended, atl-mpi, atl-ofi, atl
    line: str


_SAID: tuple[tuple[str, "re.Pattern[str]"], ...] = (
    ("libfabric", LIBRARY), ("fallback", re.compile(re.escape(FALLBACK_TO_MPI))), ("impi-root", IMPI_ROOT), ("no-provider", NO_PROVIDER),
    ("kvs-iface", KVS_IFACE), ("master-addr", MASTER_ADDR), ("master-port", MASTER_PORT_MISSING), ("mpi-abort", MPI_ABORT),
    ("mpi-ended", OPEN_MPI_ENDED), ("atl-mpi", re.compile(r"atl_mpi\w*\.cpp")), ("atl-ofi", re.compile(r"atl_ofi\w*\.cpp")),
    ("atl", re.compile(r"failed to initialize ATL")),
)
MAX_SAID = 64  # what the ranks said, at most this many things read (a rank repeating one warning in a loop is bounded)


def sequence(text: str) -> list[Said]:
    """What the ranks said, in the order they said it: each line matched against the libraries' own words (the first kind a
    line matches names it; a line can say one thing). Linear in the text: every pattern is bounded."""
    said: list[Said] = []
    at = 0
    for line in text.splitlines(keepends=True):
        for kind, pattern in _SAID:
            if pattern.search(line):
                said.append(Said(at, kind, line.strip()))
                break
        at += len(line)
        if len(said) >= MAX_SAID:
            break
    return said


def _fallback_index(said: list[Said]) -> Optional[int]:
    """Where the ranks met the first failure of the OFI transport's start: libfabric not loadable, when oneCCL then fell
    back to its MPI transport (api_wrapper.cpp:42 "OFI transport was not initialized, fallback to MPI transport") or its
    OFI transport failed (atl_ofi); the fallback line itself when no libfabric line came before it. None otherwise: under
    Intel MPI's mpirun the MPI transport is chosen from the start (env_parser.cpp:47), and the libfabric warning alone
    stops nothing."""
    for i, item in enumerate(said):
        if item.kind == "libfabric" and any(later.kind in ("fallback", "atl-ofi") for later in said[i + 1:]):
            return i
        if item.kind == "fallback":
            return i
    return None


def _consequences(said: list[Said], first: int) -> tuple[str, ...]:
    """The lines after the first failure, each marked as what followed it (never a cause of its own)."""
    return tuple(f"then: {item.line}" for item in said[first + 1:] if item.kind not in ("libfabric",))[:4]


def _libfabric_cause(said: list[Said], first: int, run: CclRun) -> Cause:
    item = said[first]
    library = LIBRARY.search(item.line)
    fell_back = any(s.kind == "fallback" for s in said[first:])
    export = (f'export LD_LIBRARY_PATH="{run.libfabric}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' if run.libfabric
              else "put the folder holding libfabric.so on LD_LIBRARY_PATH")
    after = ""
    if fell_back and not run.mpi_launcher:
        after = (f"; oneCCL then fell back to its MPI transport, which needs an MPI launcher ({run.launcher} is not one), hence \"failed to initialize ATL\"")
    elif fell_back:
        after = "; oneCCL then fell back to its MPI transport"
    later = [s for s in said[first + 1:] if s.kind in ("impi-root", "mpi-abort", "mpi-ended", "atl-mpi")]
    if later:
        after += (": what the ranks said after that (" + ", ".join(dict.fromkeys(_LATER_WORDS[s.kind] for s in later))
                  + ") follows from the fallback and is no cause of its own (exporting I_MPI_ROOT there turns the failure into a hang)")
    what = f"{library.group(1)}: {library.group(2).strip()}" if library else "its OFI transport was not initialized"
    detail = (item.line,) + _consequences(said, first)
    return (f"oneCCL could not load libfabric ({what}): its folder is not on the loader's path{after}", detail, _or_env(run, export))


_LATER_WORDS = {"impi-root": "neither I_MPI_ROOT nor ONEAPI_ROOT is set", "mpi-abort": "Intel MPI's abort", "mpi-ended": "the MPI launcher's report",
                "atl-mpi": "the MPI transport's failure"}


def ccl_cause(text: str, run: CclRun) -> Optional[Cause]:
    """The cause ``text`` (a rank's output and error) names, or None when it names none of these. The ranks' words are read
    in the order they said them, and the first failure among them is the cause: libfabric not loadable, then oneCCL's
    fallback to its MPI transport, then what that transport says (I_MPI_ROOT, an MPI abort, "failed to initialize ATL")
    is one cause, libfabric's, never a later step's. A bare "failed to initialize ATL" is read only when nothing said why."""
    said = sequence(text)
    fallback = _fallback_index(said)
    for i, item in enumerate(said):
        if i == fallback:
            return _libfabric_cause(said, i, run)
        if item.kind in ("mpi-abort", "impi-root", "atl-mpi", "mpi-ended"):
            foreign = foreign_mpirun_cause(text, run)  # Intel MPI's libmpi under another MPI's mpirun, before Intel MPI's own words
            if foreign is not None:
                return foreign
        if item.kind == "impi-root":
            export = f"export I_MPI_ROOT={run.mpi_root}" if run.mpi_root else "export I_MPI_ROOT=<the Intel MPI root, the folder above its bin/mpirun>"
            return ("oneCCL's MPI transport refuses Intel MPI without I_MPI_ROOT (check_impi_env: neither I_MPI_ROOT nor ONEAPI_ROOT is set)",
                    (item.line,), _or_env(run, export))
        if item.kind == "no-provider":
            provider = NO_PROVIDER.search(item.line)
            assert provider is not None
            export = f"export FI_PROVIDER_PATH={run.providers}" if run.providers else "export FI_PROVIDER_PATH=<the folder holding libfabric's lib*-fi.so providers>"
            return (f"libfabric found no provider (fi_getinfo error: ret {provider.group(1)}): FI_PROVIDER_PATH does not name the folder of its "
                    "providers, and it has no default of its own", (item.line,), _or_env(run, export))
        if item.kind == "kvs-iface":
            kvs = KVS_IFACE.search(item.line)
            name = kvs.group(1) if kvs else ""
            if name:
                return (f"CCL_KVS_IFACE={name} names no interface here: oneCCL's key-value store has no address to listen on", (item.line,),
                        "Set CCL_KVS_IFACE (and FI_TCP_IFACE) to the interface that reaches the master, one that exists on every host (ip -br addr lists them), or unset it.")
            return ("oneCCL's key-value store found no interface but lo (it skips lo unless CCL_KVS_IFACE names it)", (item.line,),
                    _or_env(run, "export CCL_KVS_IFACE=lo on a single host (across hosts: the interface that reaches the master)"))
        if item.kind in ("master-addr", "master-port"):
            missing = "MASTER_ADDR" if item.kind == "master-addr" else "MASTER_PORT"
            return (f"{missing} is not set: {run.launcher} gives its ranks no rendezvous address, and torch's env:// rendezvous needs MASTER_ADDR and MASTER_PORT",
                    (item.line,),
                    _or_env(run, f"export MASTER_ADDR={LOOPBACK} MASTER_PORT={MASTER_PORT} on one host (across hosts MASTER_ADDR is the first host's address)"))
    return _bare_atl(text, run)


def _bare_atl(text: str, run: CclRun) -> Optional[Cause]:
    """"failed to initialize ATL" with nothing before it saying why: judged by the transport that said it and the launcher."""
    atl = ATL.search(text)
    if not atl:
        return None
    line = _line(text, ATL)
    if "atl_ofi" in text:
        return ("oneCCL's OFI transport failed to start (libfabric or its key-value store) and its output does not say why",
                (line,), _or_env(run, "re-run with CCL_LOG_LEVEL=info for oneCCL's own reason"))
    if not run.mpi_launcher:
        return (f"oneCCL's MPI transport needs an MPI launcher, and {run.launcher} is not one", (line,),
                f"{run.env_command} before launching (it exports CCL_ATL_TRANSPORT=ofi and libfabric's places for {run.launcher}).")
    if not run.intel_mpi:
        return (f"oneCCL's MPI transport is built for Intel MPI and failed under {run.launcher}'s other MPI", (line,),
                f"{run.env_command} before launching (it exports CCL_ATL_TRANSPORT=ofi and libfabric's places under this MPI).")
    return (f"oneCCL's MPI transport failed to start under {run.launcher} (Intel MPI) and its output does not say why", (line,),
            _or_env(run, "re-run with CCL_LOG_LEVEL=info for oneCCL's own reason (I_MPI_ROOT, libfabric, its providers)"))


def fallback_hang(texts: "list[str]", run: CclRun) -> Optional[tuple[str, str]]:
    """(cause, fix) for a hang of the ccl backend whose ranks said, before they stopped, that libfabric could not be
    loaded and oneCCL fell back to its MPI transport: that transport's MPI_Init then waits (under no MPI launcher, or with
    I_MPI_ROOT exported after the error below asked for it). The first failure is libfabric's: the generic causes of a hang
    (interfaces, providers) come later. None when no rank said so."""
    for text in texts:
        said = sequence(text)
        first = _fallback_index(said)
        if first is not None:
            summary, _detail, fix = _libfabric_cause(said, first, run)
            return (f"{summary}; the ranks then waited in that MPI transport's start ({said[first].line})", fix)
    return None


def foreign_mpirun_hang(run: CclRun) -> Optional[tuple[str, str]]:
    """(cause, fix) for a hang of the ccl backend under an mpirun that is not Intel MPI's, where the ranks were not told
    CCL_ATL_TRANSPORT=ofi: oneCCL then takes its MPI transport (PMIX_RANK is set there: env_parser.cpp:24) and Intel MPI's
    libmpi waits for a process manager that is not there (the hang issue 25 saw under Open MPI). None elsewhere."""
    if not run.mpi_launcher or run.intel_mpi or run.transport == "ofi":
        return None
    where = f"{run.launcher} ({run.flavor})" if run.flavor and run.flavor != run.launcher else run.launcher
    cause = (f"MPI abort under a foreign mpirun: under {where} oneCCL takes its MPI transport (CCL_ATL_TRANSPORT "
             f"{'=' + run.transport if run.transport else 'not set'}), which loads Intel MPI's libmpi; it waits for Intel MPI's own launcher")
    return cause, _or_env(run, _ofi_exports(run))
