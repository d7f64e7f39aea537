"""Turn what the ranks wrote (proc-<pid>.json / .log) and how their processes ended into findings. Pure.

Every cross-rank comparison (identical parameters, disjoint samples, the world size each Trainer saw) is made
here, from the files, so it works even when the ranks never formed a group.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..checks.crash import classify
from ..environment.child import describe_exit
from ..findings import Finding, Status
from ..launchers.interface import MASTER_PORT, Launch
from ..launchers.live import launcher_exit_codes, launcher_first_failure
from .oneccl_causes import CclRun, ccl_cause, fallback_hang, foreign_mpirun_hang, with_arguments
from .protocol import (
    Allreduce,
    Gone,
    HostTcp,
    ImportEntry,
    NetworkFacts,
    PairLink,
    ProtocolError,
    RankError,
    RankStatus,
    Sweep,
    SweepDeadline,
    TrainerGroup,
    TrainerInfo,
    read_parts,
    read_record_text,
    read_status,
    read_tail_text,
)
from .supervise import Supervised

GB = 1e9


@dataclass(frozen=True)
class RankRecord:
    """One rank as compat saw it: what it wrote (``status``, the typed record of live/protocol; a mapping given here is
    read through the protocol, its parts not of the protocol's shape left out and named in ``refused``), its log, and
    how its process ended."""

    pid: int
    status: RankStatus
    log: str
    returncode: Optional[int] = None  # known under spawn (one process per rank)
    show_host: bool = False  # the run spans hosts: findings say on which one
    gone_at: Optional[float] = None  # when the rank's exit watcher saw it end (runs across hosts)
    launcher_first_failure: bool = False  # the launcher named this rank's process as the first to fail
    refused: Mapping[str, str] = field(default_factory=dict)  # the record's fields not of the protocol's shape, and why

    def __post_init__(self) -> None:
        if not isinstance(self.status, RankStatus):  # a mapping (a test's, or read by hand): the protocol's edge
            status, refused = read_parts(RankStatus, dict(self.status), "record")
            object.__setattr__(self, "status", status)
            object.__setattr__(self, "refused", {**refused, **self.refused})

    @property
    def rank(self) -> Optional[int]:
        return self.status.rank

    @property
    def host(self) -> str:
        return str(self.status.host or "?")

    @property
    def name(self) -> str:
        where = f" on {self.host}" if self.show_host else ""
        return (f"rank {self.rank}" if self.rank is not None else f"pid {self.pid} (no rank)") + where

    @property
    def stage(self) -> str:
        return str(self.status.stage or "not started")

    @property
    def done(self) -> bool:
        return self.stage == "done"

    @property
    def error(self) -> Optional[RankError]:
        return self.status.error

    @property
    def trainer(self) -> TrainerInfo:
        """The Trainer step's record, empty before the rank got there."""
        return self.status.trainer or NO_TRAINER


NO_TRAINER = TrainerInfo()
NO_GROUP = TrainerGroup()


def _message(record: RankRecord) -> str:
    """The message of the error a rank recorded ("" without one)."""
    return str(record.error.message) if record.error else ""


@dataclass(frozen=True)
class Expectation:
    world_size: int
    trainer: bool
    steps: int
    per_device_batch: int
    backend: str  # what was asked: auto, ccl, gloo
    ccl_installed: bool  # the environment has oneccl_bind_pt: gloo is then a fallback worth a warning
    ccl_trainer_blocked: tuple[str, ...] = ()  # why the installed transformers/accelerate cannot use ccl
    timeout: float = 90.0
    init_timeout: float = 30.0
    trainer_flags: Mapping[str, Any] = field(default_factory=dict)
    ipex_mode: str = "none"
    ipex_note: str = ""
    bf16_why: str = ""  # whether the Trainer step trained in bf16, and why (CPU flags or --bf16/--no-bf16)
    multi_host: bool = False  # --nnodes > 1 or a hostfile with several hosts: addresses must work between hosts
    reach: Mapping[str, Any] = field(default_factory=dict)  # compat's own look at MASTER_ADDR:PORT from this host (service.reach_master)
    ccl: CclRun = CclRun()  # the launcher and the oneCCL runtime's folders: what the fixes of oneCCL's failures name
    fabric: bool = False  # --fabric: the sweep was asked for (live.fabric)
    pairs: bool = False  # --fabric across hosts: every scheduled pair of hosts measured (live.pairs)
    interface_fix: str = ""  # across hosts: "export GLOO_SOCKET_IFNAME=eth0 ..." for the interface of this host's route to the master (service.interface_fix)


PEER_GONE = re.compile(r"[Cc]onnection (closed|reset) by peer|Broken pipe|peer closed|Socket closed|recv.*failed", re.IGNORECASE)
TIMED_OUT = re.compile(r"[Tt]imed? ?out|timeout|clients joined")


def read_ranks(run_dir: Path, ends_by_pid: Mapping[int, Optional[int]], launcher_log: str = "", show_host: bool = False) -> list[RankRecord]:
    from .supervise import status_files

    reported = launcher_exit_codes(launcher_log)
    first = launcher_first_failure(launcher_log)
    records = []
    for _host, pid, path in status_files(run_dir):
        refused: Mapping[str, str] = {}
        try:
            status, refused = read_status(read_record_text(path))
        except (OSError, ProtocolError) as exc:  # another compat's worker, a broken rank, a shared --run-dir: said, not read
            why = str(exc) if isinstance(exc, ProtocolError) else f"{exc.__class__.__name__}: {exc}"
            status, refused = RankStatus(stage="unreadable status", error=RankError("UnreadableRecord", f"{path.name}: {why}")), {"record": why}
        gone_path = path.with_suffix(".gone")  # the rank's own exit watcher (runs across hosts): when it ended
        gone_at = None
        if gone_path.exists():
            try:
                gone_at = Gone.from_json(json.loads(read_record_text(gone_path, 4096))).at
            except (OSError, ValueError, RecursionError):  # ProtocolError is a ValueError
                pass
        log_path = path.with_suffix(".log")
        log = read_tail_text(log_path, 50000) if log_path.exists() else ""  # what is shown of it
        code = ends_by_pid.get(pid)
        if code is None:
            code = reported.get(pid)
        if code is None and first is not None and first[0] == "rank" and status.rank == first[1]:
            code = first[2]
        named_first = first is not None and ((first[0] == "pid" and first[1] == pid) or (first[0] == "rank" and status.rank == first[1]))
        records.append(RankRecord(pid, status, log[-50000:], code, show_host, gone_at, named_first, refused))
    return sorted(records, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))


def where(ranks: Sequence[RankRecord]) -> str:
    """'here', or 'on N hosts (a, b)' when the records come from several hosts (a shared run folder under mpirun)."""
    hosts = sorted({r.host for r in ranks})
    return f"on {len(hosts)} hosts ({', '.join(hosts)})" if len(hosts) > 1 else "here"


def first_sentence(text: str, limit: int = 160) -> str:
    """One line of an exception message: its first sentence, capped."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    match = re.match(r"(.+?[.!?])(\s|$)", line)
    sentence = match.group(1) if match else line
    return sentence if len(sentence) <= limit else sentence[: limit - 3] + "..."


def _tail(text: str, lines: int = 4) -> str:
    """The last lines a rank printed itself, without the stack dump compat asked for."""
    dump = re.search(r"^(?:Current thread|Thread) 0x", text, re.MULTILINE)
    text = text[: dump.start()] if dump else text
    kept = [line.rstrip() for line in text.splitlines() if line.strip() and not line.startswith("compat-live: stage")]
    return " | ".join(kept[-lines:]) if kept else "no output"


def stuck_frames(log: str, count: int = 3) -> str:
    """The innermost frames of the main thread from the faulthandler dump compat asked for (SIGUSR1)."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", log)
    main = [b for b in blocks if b.startswith("Current thread 0x")]
    if not main:
        return ""
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main[-1])
    return " <- ".join(f"{fn} ({path.rsplit('/', 1)[-1]}:{line})" for path, line, fn in frames[:count])


def _gb(value: float) -> str:
    return f"{value / GB:.2f} GB/s"


# how checks/crash.classify names a failure by what the process printed (the same words as the static import probes)
NO_RUN = CclRun()  # no launcher known (a unit's default): the fixes name spawn's compat env
_SIGNATURE_KINDS = frozenset({"ipex-guard", "undefined-symbol", "abi-abort", "illegal-instruction", "missing-libccl", "missing-library"})
def known_cause(record: RankRecord, run: CclRun = NO_RUN) -> Optional[tuple[str, tuple[str, ...], str]]:
    """(summary, detail, fix) when what a rank printed names the cause: an import that ended the way checks/crash.classify
    recognises (the static probes' own words), or what oneCCL, libfabric, Intel MPI or torch's rendezvous said
    (live/oneccl_causes, with the fix for the launcher the ranks ran under)."""
    error = record.error
    text = record.log + (f"\n{error.type}: {error.message}" if error else "")
    if record.stage.startswith("import:"):
        code = record.returncode if record.returncode is not None else (1 if record.error else -6)
        verdict = classify(code, "", text, False, record.stage.split(":", 1)[1]).naming(run.env_command)
        if verdict.kind in _SIGNATURE_KINDS:
            return verdict.summary, verdict.detail, verdict.fix
    return ccl_cause(text, run)


def launch_finding(launch: Launch, supervised: Supervised, ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.launch"
    evidence = tuple(" ".join(end.command) for end in supervised.ends[:1]) + launch.notes
    if not ranks:
        logs = " | ".join(_tail(end.log, 3) for end in supervised.ends if end.log.strip())
        return Finding(cid, Status.FAIL, f"{launch.launcher} started no rank ({describe_exit(supervised.ends[0].returncode)})",
                       evidence + ((f"launcher output: {logs}",) if logs else ()),
                       "Run the command above by hand; for mpirun check that the MPI can start processes here (hostfile, ssh), for torchrun that torch is installed.")
    named = launch.launcher if launch.flavor in (None, launch.launcher) else f"{launch.launcher} ({launch.flavor})"
    summary = f"{named} started {len(ranks)} of {launch.expected_local} ranks {where(ranks)}, world size {launch.world_size}, master {launch.master}"
    if len(ranks) > launch.expected_local:
        return Finding(cid, Status.FAIL, summary, evidence,
                       "More processes ran than ranks were asked for: the launcher restarted them or started extra ones (torchrun: PET_MAX_RESTARTS; mpirun: -n / the hostfile).")
    if len(ranks) < launch.expected_local:
        seen = {r.host for r in ranks}
        if len(launch.hosts) > 1 and len(seen) == 1 and len(ranks) < launch.world_size:
            return Finding(cid, Status.FAIL, summary, evidence + (f"records came only from {', '.join(sorted(seen))}; hosts in the hostfile: {', '.join(launch.hosts)}",),
                           "The ranks on the other hosts wrote nothing into the run folder: pass --run-dir with a folder every host sees at the same path "
                           "(a shared file system), or they did not start (the launcher's output, --verbose).")
        return Finding(cid, Status.FAIL, summary, evidence, "The launcher started fewer ranks than asked: check --nproc-per-node, the hostfile and the launcher's output (--verbose).")
    return Finding(cid, Status.PASS, summary, evidence)


def environment_finding(launch: Launch, run: CclRun) -> Optional[Finding]:
    """Under a launcher that gives its ranks no rendezvous (mpirun), the probe's ranks ran with the user's environment plus
    MASTER_ADDR / MASTER_PORT where it had none: the user's own command under that launcher lacks them ("MASTER_ADDR
    expected, but not set"), so the report says so instead of passing silently. None under a launcher that gives them."""
    cid = "live.environment"
    if not launch.added and not launch.replaced:
        return None
    evidence = tuple(f"{key}: compat used {value} in place of yours for this probe (a free port: another job may hold yours)" for key, value in launch.replaced.items())
    if not launch.added:
        return Finding(cid, Status.PASS, f"the ranks ran with your environment and what {launch.launcher} gives them (MASTER_ADDR and MASTER_PORT are yours)", evidence)
    given = " ".join(f"{key}={value}" for key, value in launch.added.items())
    names = " and ".join(launch.added)
    export = " ".join(f"{key}={MASTER_PORT if key == 'MASTER_PORT' else value}" for key, value in launch.added.items())
    return Finding(cid, Status.WARN,
                   f"{launch.launcher} gives its ranks no {names} and your environment has none: compat gave them {given} for this run; "
                   f"your own command under {launch.launcher} needs {names} exported",
                   evidence + (f"without them torch's env:// rendezvous stops every rank: \"{names.split(' and ')[0]} expected, but not set\"",),
                   f"export {export} before launching (across hosts MASTER_ADDR is the first host's address); or {run.env_command}, which exports them.")


def imports_finding(ranks: Sequence[RankRecord], supervised: Supervised, run: CclRun = NO_RUN) -> Finding:
    for record in ranks:
        if record.stage.startswith("import:"):
            finding = _import_stage_finding(record, supervised, run)
        else:
            finding = _bindings_finding(record, run)
        if finding is not None:
            return finding
    first = ranks[0].status.imports
    if not first:
        return Finding("live.imports", Status.SKIP, "no rank got as far as importing torch")
    parts = [f"torch {first.torch.version if first.torch else None}"]
    if first.ipex:
        parts.append(f"{first.ipex.module} {first.ipex.version}")
    if first.ccl:
        parts.append(f"{first.ccl.module} {first.ccl.version or ''}".strip())
    return Finding("live.imports", Status.PASS, f"every rank imports {', '.join(parts)}")


def _import_stage_finding(record: RankRecord, supervised: Supervised, run: CclRun) -> Optional[Finding]:
    """Why a rank stopped while importing; None when it was stopped because another rank failed (see live.ranks)."""
    cid = "live.imports"
    what = record.stage.split(":", 1)[1]
    if record.error:  # a Python-level import error (e.g. torch missing, undefined symbol)
        error = record.error
        verdict = classify(1, "", f"{record.log}\n{error.type}: {error.message}", False, what).naming(run.env_command)
        return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", verdict.detail, verdict.fix)
    cause = known_cause(record, run)
    if cause is not None:  # its own output says why, whatever its exit status (unknown under a launcher)
        return Finding(cid, Status.FAIL, f"{record.name}: {cause[0]}", cause[1] + (f"last output: {_tail(record.log)}",), cause[2])
    if record.returncode is None and supervised.timed_out:  # still importing at the deadline
        verdict = classify(None, "", record.log, True, what, supervised.seconds).naming(run.env_command)
        return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", verdict.detail + (f"last output: {_tail(record.log)}",), verdict.fix)
    if record.returncode is None or record.returncode in (-15, -9) or record.pid in supervised.stopped:
        return None  # no exit status known, or stopped by the launcher or compat (another rank failed): see live.ranks
    verdict = classify(record.returncode, "", record.log, False, what).naming(run.env_command)
    return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", verdict.detail + (f"last output: {_tail(record.log)}",), verdict.fix)


def _bindings_finding(record: RankRecord, run: CclRun) -> Optional[Finding]:
    """The first of IPEX and the oneCCL bindings that a rank past its imports could not import, or None."""
    imports = record.status.imports
    for key, item in (("ipex", imports and imports.ipex), ("ccl", imports and imports.ccl)):
        if item and not item.ok:
            verdict = classify(1, "", f"{record.log}\n{item.error or ''}", False, item.module or key).naming(run.env_command)
            return Finding("live.imports", Status.FAIL, f"{record.name}: {verdict.summary}", (str(item.error or ""),), verdict.fix)
    return None


NO_IMPORT = ImportEntry(ok=False)


def _ccl_of(record: RankRecord) -> ImportEntry:
    """The oneCCL bindings' import as the rank recorded it (an empty entry when it did not)."""
    return (record.status.imports.ccl if record.status.imports else None) or NO_IMPORT


def backend_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.backend"
    chosen = [r for r in ranks if r.status.chose_backend]
    if not chosen:
        return Finding(cid, Status.SKIP, "no rank got as far as choosing a backend")
    backends = {r.status.backend for r in chosen}
    reason = str(chosen[0].status.backend_reason or "")
    ccl = _ccl_of(chosen[0])
    if None in backends:
        return Finding(cid, Status.FAIL, reason, (), f"Install the oneccl_bind_pt that compat resolve gives for this torch, then {expect.ccl.env_command}; "
                       "or run with --backend gloo.")
    if len(backends) > 1:
        return Finding(cid, Status.FAIL, f"the ranks chose different backends: {', '.join(sorted(str(b) for b in backends))}",
                       tuple(f"{r.name}: {r.status.backend} ({r.status.backend_reason})" for r in chosen),
                       "Every rank must see the same environment: install the same packages on every node and source the same setvars.sh.")
    backend = backends.pop()
    if backend == "ccl" and ccl.fixture:
        return Finding(cid, Status.PASS, f"ccl, FIXTURE: {reason}", (f"fixture marker: {ccl.fixture}",))
    if backend == "gloo" and expect.backend == "auto" and expect.ccl_installed:
        return Finding(cid, Status.WARN, f"gloo: {reason}", (), "oneccl_bind_pt is installed but did not give a ccl backend: compat doctor --only imports.ccl shows why.")
    return Finding(cid, Status.PASS, f"{backend}: {reason}")


def world_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.world"
    without = [r for r in ranks if r.status.rank is None]
    trainer_worlds = {r.trainer.world_size for r in ranks}
    if without and trainer_worlds == {expect.world_size}:  # accelerate maps PMI_*/OMPI_* itself: the Trainer is fine
        return Finding(cid, Status.WARN, f"{len(without)} of {len(ranks)} processes got no RANK/WORLD_SIZE: a plain torch.distributed script would be on its own; "
                       f"the Trainer (accelerate) mapped the launcher's variables itself and formed a group of {expect.world_size}",
                       tuple(f"pid {r.pid}: no RANK/WORLD_SIZE" for r in without),
                       "Map PMI_RANK/PMI_SIZE (or OMPI_COMM_WORLD_*) to RANK/WORLD_SIZE/LOCAL_RANK in the job script for code that calls init_process_group itself.")
    if without:
        return Finding(cid, Status.FAIL, f"{len(without)} of {len(ranks)} processes started without RANK/WORLD_SIZE: no process group can form, each rank is on its own",
                       tuple(f"pid {r.pid}: no RANK/WORLD_SIZE, no PMI_RANK/OMPI_COMM_WORLD_RANK mapped" for r in without),
                       "Launch with torchrun, or with mpirun and map PMI_RANK/PMI_SIZE (or OMPI_COMM_WORLD_*) to RANK/WORLD_SIZE/LOCAL_RANK, and set MASTER_ADDR/MASTER_PORT.")
    claimed: dict[int, int] = {}
    for record in ranks:
        if record.rank is not None:
            claimed[record.rank] = claimed.get(record.rank, 0) + 1
    twice = sorted(r for r, n in claimed.items() if n > 1)
    if twice:
        return Finding(cid, Status.FAIL, f"{claimed[twice[0]]} processes claim rank {twice[0]}: the rank variables are wrong",
                       tuple(f"pid {r.pid}: rank {r.rank} from {r.status.rank_source}" for r in ranks if r.rank in twice),
                       "Check what sets RANK in the job (an exported RANK/WORLD_SIZE overrides the launcher's); compat clears them for its own run.")
    joined = [r for r in ranks if r.status.world_size]
    if not joined:
        return Finding(cid, Status.SKIP, "no rank formed a process group (see live.hang / live.ranks)")
    sizes = {r.status.world_size or 0 for r in joined}  # joined: every one has a world size
    if sizes != {expect.world_size}:
        return Finding(cid, Status.FAIL, f"the group has world size {', '.join(str(s) for s in sorted(sizes))}, expected {expect.world_size}",
                       tuple(f"{r.name}: world size {r.status.world_size} (from {r.status.rank_source})" for r in joined),
                       "Every rank must get the same WORLD_SIZE: check --nproc-per-node / --nnodes / the hostfile.")
    return Finding(cid, Status.PASS, f"{len(joined)} ranks {where(joined)} joined a group of {expect.world_size} (rank variables from {joined[0].status.rank_source})")


def allreduce_finding(ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.allreduce"
    done = [r for r in ranks if r.status.allreduce]
    if not done:
        return Finding(cid, Status.SKIP, "no rank reached the allreduce")
    bad = []
    notes = []
    for record in done:
        results = record.status.allreduce or Allreduce()
        for dtype, item in (("fp32", results.fp32), ("bf16", results.bf16)):
            if item is None:
                continue
            if item.unsupported:
                notes.append(f"{dtype} allreduce is not supported by this backend: {item.error}")
            elif item.ok is False:
                bad.append(f"{record.name}: {dtype} allreduce gave {item.wrong} wrong of {item.elements} elements")
    backend = done[0].status.backend
    if bad:
        return Finding(cid, Status.FAIL, f"allreduce on {backend} returned wrong sums", tuple(bad),
                       "A reduction that completes with wrong values points at the backend build (oneCCL/torch-ccl) or a mixed installation across nodes: reinstall the matrix's pair.")
    checked = "fp32" + ("" if notes else " and bf16")
    summary = f"{checked} allreduce on {backend} is exact on all {len(done)} ranks {where(done)}"
    return Finding(cid, Status.PASS, summary + (" (bf16 unsupported, see evidence)" if notes else ""), tuple(sorted(set(notes))))


def bandwidth_finding(ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.bandwidth"
    source = next((r for r in ranks if r.status.bandwidth), None)
    if source is None or not source.status.bandwidth:
        return Finding(cid, Status.SKIP, "no bandwidth measured (the allreduce did not complete)")
    rows = source.status.bandwidth
    memcpy = source.status.memcpy
    copy = memcpy.all_ranks if memcpy else None
    evidence = [f"{row.mib} MiB: {row.seconds * 1000:.1f} ms, algorithm {_gb(row.algbw)}, bus {_gb(row.busbw)}" for row in rows]
    largest = max(rows, key=lambda row: row.mib)
    summary = f"bus bandwidth {_gb(largest.busbw)} at {largest.mib} MiB"
    if memcpy and copy:
        evidence.append(f"memory copy, every rank at once (one thread each): {_gb(copy)} in all, {_gb(memcpy.per_rank)} per rank")
        summary += f", {100 * largest.busbw / copy:.1f}% of the ranks' memory-copy bandwidth ({_gb(copy)})"
    return Finding(cid, Status.PASS, summary, tuple(evidence))


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _fabric_rows(ranks: Sequence[RankRecord]) -> Optional[dict[str, Any]]:
    """The --fabric sweep of the run (times are the slowest rank's, the same on every rank) with nccl-tests' algbw/busbw,
    and every wrong value any rank saw: the run's backend first, then each other backend swept on the same ranks for
    the comparison (rows and errors carry their backend); None when no rank swept."""
    from .fabric import bandwidths

    swept = [r for r in ranks if r.status.fabric or "fabric" in r.refused]
    if not swept:
        return None
    refused = next((r.refused[part] for r in ranks for part in ("fabric", "fabric_others", "imports") if part in r.refused), None)
    if refused is not None:  # a part of a rank's record not of the protocol's shape: the sweep cannot be read
        raise ProtocolError(refused)
    source = max(swept, key=lambda r: len(_sweep_of(r).rows))
    world = int(source.status.world_size or len(ranks))
    main = str(source.status.backend or "?")
    record = _sweep_of(source)
    others = dict(source.status.fabric_others or {})
    rows, errors, unsupported, cut, skipped = [], [], [], [], []
    for backend, part in [(main, record), *others.items()]:
        skipped += [{"backend": backend, "collective": item.collective, "dtype": item.dtype, "sizes": list(item.sizes), "why": item.why}
                    for item in part.skipped]
        for row in part.rows:
            algbw, busbw = bandwidths(row.collective, row.bytes, row.seconds, world) if row.seconds > 0 else (0.0, 0.0)
            rows.append({"backend": backend, "collective": row.collective, "dtype": row.dtype, "bytes": row.bytes,
                         "iterations": row.iterations, "seconds": row.seconds, "algbw": algbw, "busbw": busbw,
                         "ranks_wrong": row.ranks_wrong})
        unsupported += [{"backend": backend, **item.to_json()} for item in part.unsupported]
        cut += [{"backend": backend, **item.to_json()} for item in part.cut]
        for r in swept:
            own = _sweep_of(r) if backend == main else ((r.status.fabric_others or {}).get(backend) or NO_SWEEP)
            errors += [{"rank": r.rank, "host": r.host, "backend": backend, **error.to_json()} for error in own.errors]
    ccl = _ccl_of(source)
    return {"world_size": world, "backend": main, "backends": [main, *[n for n, o in others.items() if not o.error]],
            "backend_errors": {n: str(o.error) for n, o in others.items() if o.error},
            "fixture_backends": ["ccl"] if ccl.fixture and "ccl" in [main, *others] else [],
            "sizes": list(record.sizes), "bound": record.bound, "dropped": list(record.dropped),
            "rows": rows, "unsupported": unsupported, "errors": errors, "cut": cut, "ranks_swept": len(swept),
            **({"deadline": _deadline_of(record.deadline, others), "skipped": skipped} if record.deadline is not None else {})}


NO_SWEEP = Sweep()


def _sweep_of(record: RankRecord) -> Sweep:
    return record.status.fabric or NO_SWEEP


def _deadline_of(own: SweepDeadline, others: Mapping[str, Sweep]) -> dict[str, Any]:
    """--fabric-deadline as the sweep kept it: the seconds, what the sweep planned with (its budget, the slowest link
    it was sized to: [host, host, bytes/s], the timed seconds per case) and the seconds spent when the last sweep ended
    (from the clock every rank agreed on, started before the pairs)."""
    last = [part.deadline for part in others.values() if part.deadline is not None and part.deadline.spent is not None]
    spent = last[-1].spent if last else own.spent
    link = own.link
    return {"seconds": own.seconds, "budget": own.budget,
            "link": {"a": link.a, "b": link.b, "bandwidth": link.bandwidth} if link else None,
            "timed": own.timed, "estimate": own.estimate, "began": own.began, "spent": spent}


MALFORMED = (TypeError, KeyError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError)


def _unreadable(what: str, exc: BaseException) -> str:
    from ..console import visible_line

    return (f"a rank's record of the {what} could not be read ({exc.__class__.__name__}: {visible_line(str(exc))[:120]}): "
            "its status file was not written by this compat's worker (a shared --run-dir?)")


def fabric_rows(ranks: Sequence[RankRecord]) -> Optional[dict[str, Any]]:
    """_fabric_rows, or {"unreadable": why} when a rank's record is not the worker's shape (status files are outside
    input: a --run-dir may be shared)."""
    try:
        return _fabric_rows(ranks)
    except MALFORMED as exc:
        return {"unreadable": _unreadable("sweep", exc)}


def pair_table(ranks: Sequence[RankRecord], command: str = "") -> Optional[dict[str, Any]]:
    """_pair_table, or a table holding only the error when a rank's record is not the worker's shape. ``command``: the
    run's compat env command, which the interface causes name."""
    try:
        return _pair_table(ranks, command)
    except MALFORMED as exc:
        return {"hosts": [], "links": [], "slow_hosts": [], "slow_links": [], "verdicts": [], "error": _unreadable("pairs", exc)}


def backend_shown(name: str, sweep: Mapping[str, Any]) -> str:
    """A backend as the findings and the report name it: the FIXTURE ccl says what it is."""
    return f"{name} (TEST FIXTURE on gloo, not oneCCL)" if name in sweep.get("fixture_backends", ()) else name


def backend_comparison(sweep: Mapping[str, Any]) -> list[str]:
    """For each backend compared with the run's: its all_reduce fp32 bus bandwidth against the run's at the largest
    size both measured (the run's / the other's)."""
    lines = []
    main = sweep["backend"]

    def largest(backend: str) -> dict[int, float]:
        return {row["bytes"]: row["busbw"] for row in sweep["rows"] if row["backend"] == backend and row["collective"] == "all_reduce"
                and row["dtype"] == "fp32" and row["busbw"] > 0}

    ours = largest(main)
    for other in sweep["backends"][1:]:
        theirs = largest(other)
        common = sorted(set(ours) & set(theirs))
        if not common:
            continue
        size = common[-1]
        lines.append(f"all_reduce fp32 at {size_text(size)}: {backend_shown(main, sweep)} {_gb(ours[size])}, {backend_shown(other, sweep)} "
                     f"{_gb(theirs[size])} ({ours[size] / theirs[size]:.2f}x)")
    return lines


def fabric_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:

    cid = "live.fabric"
    sweep = fabric_rows(ranks)
    if sweep is None:
        return Finding(cid, Status.SKIP, "no rank reached the fabric sweep")
    if "unreadable" in sweep:
        return Finding(cid, Status.FAIL, sweep["unreadable"], (), "Run compat doctor --live --fabric again with a --run-dir of its own.")
    try:
        return _fabric_finding(ranks, sweep)
    except MALFORMED as exc:
        return Finding(cid, Status.FAIL, _unreadable("sweep", exc), (), "Run compat doctor --live --fabric again with a --run-dir of its own.")


def _fabric_finding(ranks: Sequence[RankRecord], sweep: Mapping[str, Any]) -> Finding:
    backend = backend_shown(sweep["backend"], sweep)
    wrong = _wrong_values_finding(ranks, sweep)
    if wrong is not None:
        return wrong
    lines = _sweep_lines(ranks, sweep)
    summary = _sweep_summary(sweep, backend, lines)
    return Finding("live.fabric", Status.PASS if summary.sizes else Status.WARN, summary.text, tuple(lines))


def _wrong_values_finding(ranks: Sequence[RankRecord], sweep: Mapping[str, Any]) -> Optional[Finding]:
    """FAIL when a collective completed with wrong values: on named ranks of this host, or on a rank of another host."""
    cid = "live.fabric"
    named: dict[str, list[dict[str, Any]]] = {}
    for error in sweep["errors"]:
        who = next(r.name for r in ranks if r.rank == error["rank"] and r.host == error["host"])
        named.setdefault(who, []).append(error)
    elsewhere = [row for row in sweep["rows"] if row["ranks_wrong"] > sum(1 for e in sweep["errors"] if (e["backend"], e["collective"], e["dtype"], e["bytes"]) ==
                                                                         (row["backend"], row["collective"], row["dtype"], row["bytes"]))]
    if named:
        evidence = tuple(f"{who}: {backend_shown(e['backend'], sweep)} {e['collective']} {e['dtype']} at {size_text(e['bytes'])}, {e['iterations_wrong']} of {e['iterations']} iterations wrong, "
                         f"the first (iteration {e['iteration']}) in {e['wrong']} of {e['elements']} elements (element {e['index']}: {e['got']:g}, "
                         f"expected {e['expected']:g})"
                         for who, errors in named.items() for e in errors)
        first = next(iter(named.items()))
        return Finding(cid, Status.FAIL, f"the sweep on {backend_shown(first[1][0]['backend'], sweep)} returned wrong values on {', '.join(named)} (first: {first[1][0]['collective']} "
                       f"{first[1][0]['dtype']} at {size_text(first[1][0]['bytes'])})", evidence,
                       "A collective that completes with wrong values on one rank points at that rank's host (memory errors, a mixed "
                       "installation: compare compat doctor there) or the backend build: reinstall the matrix's set on every node.")
    if not elsewhere:
        return None
    row = elsewhere[0]
    return Finding(cid, Status.FAIL, f"the sweep on {backend_shown(row['backend'], sweep)} returned wrong values on a rank of another host (first: {row['collective']} "
                   f"{row['dtype']} at {size_text(row['bytes'])}, {row['ranks_wrong']} rank(s))",
                   tuple(f"{r['collective']} {r['dtype']} at {size_text(r['bytes'])}: wrong on {r['ranks_wrong']} rank(s)" for r in elsewhere),
                   "That host's compat doctor --live --fabric names the rank; a collective that completes with wrong values points at "
                   "that host (memory errors, a mixed installation) or the backend build.")


def _bandwidth_lines(sweep: Mapping[str, Any]) -> list[str]:
    """One line per backend, collective and type: its bus bandwidth at every size, in the order measured."""
    from .fabric import gbps

    several = len(sweep["backends"]) > 1
    lines = []
    for each in sweep["backends"]:
        mine = [row for row in sweep["rows"] if row["backend"] == each]
        for name in dict.fromkeys(row["collective"] for row in mine):
            for dtype in dict.fromkeys(row["dtype"] for row in mine if row["collective"] == name):
                points = [row for row in mine if row["collective"] == name and row["dtype"] == dtype]
                lines.append((f"{backend_shown(each, sweep)}: " if several else "") + f"{name} {dtype} bus bandwidth: "
                             + ", ".join(f"{size_text(row['bytes'])} {gbps(row['busbw'])}" for row in points))
    return lines


def _sweep_lines(ranks: Sequence[RankRecord], sweep: Mapping[str, Any]) -> list[str]:
    """The evidence of a sweep that returned exact values: comparison, bandwidths, what was left out and why."""
    several = len(sweep["backends"]) > 1
    lines = backend_comparison(sweep) + _bandwidth_lines(sweep)
    lines += [f"{u['collective']} {u['dtype']} is not supported by {backend_shown(u['backend'], sweep)}: {u['error']}" for u in sweep["unsupported"]]
    lines += [f"{name}: not compared: {why}" for name, why in sweep["backend_errors"].items()]
    memcpy = next((r.status.memcpy for r in ranks if r.status.memcpy), None)
    if memcpy:
        lines.append(f"memory copy, every rank at once (one thread each): {_gb(memcpy.all_ranks)} in all, {_gb(memcpy.per_rank)} per rank")
    if sweep["dropped"]:
        lines.append(f"sizes above {size_text(int(sweep['bound']))} left out: more than 1/16 of a host's free memory per rank")
    deadline = sweep.get("deadline")
    if deadline:
        from .fabric import describe_skipped

        lines += _deadline_lines(deadline, sweep)
        lines += describe_skipped([{**item, "backend": item["backend"] if several else ""} for item in sweep["skipped"]], size_text)
    lines += [f"{backend_shown(cut['backend'], sweep) + ': ' if several else ''}{cut['collective']} {cut['dtype']}: sizes above {size_text(int(cut['after']))} not run: one call took {cut['seconds']:.2g} s "
              f"(more than {cut['limit']:g} s: a slow link; see live.pairs)" for cut in sweep["cut"]]
    return lines


@dataclass(frozen=True)
class _SweepSummary:
    text: str
    sizes: Sequence[int]  # the sizes measured (empty: none fits in the ranks' memory)


def _sweep_summary(sweep: Mapping[str, Any], backend: str, lines: Sequence[str]) -> _SweepSummary:
    """The one-line summary of an exact sweep: its range, backends, largest all_reduce and the deadline's clause."""
    from .fabric import gbps

    several = len(sweep["backends"]) > 1
    deadline = sweep.get("deadline")
    largest = max((row for row in sweep["rows"] if row["backend"] == sweep["backend"] and row["collective"] == "all_reduce" and row["dtype"] == "fp32"),
                  key=lambda row: row["bytes"], default=None)
    sizes = sweep["sizes"]
    if deadline and sweep["rows"]:  # the range measured, not the one asked for: the rest is in the evidence
        measured = {row["bytes"] for row in sweep["rows"] if row["collective"] in ("all_reduce", "broadcast")}
        sizes = sorted(measured) or sizes
    on = backend if not several else f"{backend} and, for comparison, {', '.join(backend_shown(b, sweep) for b in sweep['backends'][1:])}"
    summary = (f"{len(sweep['rows'])} collective/type/size cases from {size_text(sizes[0])} to {size_text(sizes[-1])} on {on}, "
               f"every iteration exact on all {sweep['world_size']} ranks" if sizes else "no size fits in the ranks' memory")
    if largest is not None:
        summary += f"; all_reduce fp32 bus bandwidth {gbps(largest['busbw'])} at {size_text(largest['bytes'])}"
    if several and lines and sizes:
        summary += f" ({lines[0].split(': ', 1)[1]})" if lines[0].startswith("all_reduce fp32 at") else ""
    if deadline:
        summary += "; " + deadline_summary(deadline, sweep)
    return _SweepSummary(summary, sizes)


def _skipped_cases(sweep: Mapping[str, Any]) -> int:
    return sum(len(item["sizes"]) for item in sweep.get("skipped", []))


def deadline_summary(deadline: Mapping[str, Any], sweep: Mapping[str, Any]) -> str:
    """One clause: the deadline, the seconds spent, the link the sweep was sized to and how many cases it left out."""
    from .fabric import gbps

    spent = f", {deadline['spent']:.0f} s spent" if deadline.get("spent") is not None else ""
    link = deadline.get("link")
    sized = f"sized to the slowest link, {link['a']} <-> {link['b']} ({gbps(link['bandwidth'])})" if link else "sized to this host's memory copy"
    left = _skipped_cases(sweep)
    run = sum(1 for _ in sweep["rows"])
    what = f"{left} of {left + run} cases not measured (--verbose lists them)" if left else "nothing left out"
    return f"under --fabric-deadline {deadline['seconds']:g} s{spent}: {sized}, {what}"


def _deadline_lines(deadline: Mapping[str, Any], sweep: Mapping[str, Any]) -> list[str]:
    budget = f"{deadline['budget']:.1f} s" if deadline.get("budget") is not None else "what was left"
    estimate = f", estimated {deadline['estimate']:.1f} s" if deadline.get("estimate") is not None else ""
    return [f"--fabric-deadline {deadline['seconds']:g} s from the pairs' start: the sweep began at {deadline['began']:.1f} s with {budget} planned{estimate}, "
            f"{deadline['timed']:g} s of timed calls per case" + (f", and ended at {deadline['spent']:.1f} s" if deadline.get("spent") is not None else "")]


def _pair_table(ranks: Sequence[RankRecord], command: str = "") -> Optional[dict[str, Any]]:
    """The pairs of hosts measured (the table every rank gathered), with each link's bandwidth (the slower direction;
    0 for a pair that did not answer within its deadline), its two-rank all_reduce, the TCP segments both ends sent and
    retransmitted meanwhile, and the judgements' verdicts by host name; None when no rank measured them."""
    from .fabric import describe, describe_loss, describe_silence, interface_causes, judge, judge_loss, judge_silence, one_cause

    refused = next((r.refused["pairs"] for r in ranks if "pairs" in r.refused), None)
    if refused is not None:  # a rank's pairs not of the protocol's shape: the table cannot be read
        raise ProtocolError(refused)
    record = next((r.status.pairs for r in ranks if r.status.pairs and (r.status.pairs.links or r.status.pairs.error)), None)
    if record is None:
        return None
    hosts = list(record.hosts)

    def rate(link: PairLink) -> float:
        return 0.0 if link.error or link.out is None or link.back is None else min(link.out, link.back)

    raw = list(record.links)
    links = [{"a": hosts[link.a], "b": hosts[link.b], "latency": link.latency, "out": link.out, "back": link.back,
              "bandwidth": rate(link), "seconds": link.seconds, "round": link.round, "error": link.error,
              "allreduce": link.allreduce.to_json() if link.allreduce else None, "allreduce_skipped": link.allreduce_skipped,
              "sent": link.sent, "retransmitted": link.retransmitted, "spurious": link.spurious, "tcp_source": link.tcp_source,
              **({"dsack_unknown": True} if link.dsack_unknown else {})} for link in raw]
    memcpy = {i: float(v) for i, v in enumerate(record.memcpy) if v}
    answered = [link for link in raw if not link.error]
    verdict = judge({(link.a, link.b): rate(link) for link in answered}, memcpy)
    silence = judge_silence([(link.a, link.b) for link in raw], [(link.a, link.b) for link in raw if link.error])
    # a pair that never answered retransmits into the void: named silent, not lossy. A slow host's links stay in: a host
    # that loses packets is slow too (its TCP waits), and a rate limiter that drops is losing packets; one_cause then
    # takes out the links that only show their host's fault (a host named both ways keeps both)
    explained = {(link.a, link.b) for link in raw if link.error}
    counts = {(link.a, link.b): (link.sent, link.retransmitted, link.spurious or 0) for link in raw if link.sent is not None and link.retransmitted is not None}
    loss = judge_loss(counts, explained)
    verdict, loss = one_cause(verdict, loss, {(link.a, link.b): rate(link) for link in answered}, counts)  # a link that only shows its host's fault, out
    wrong = [f"{hosts[link.a]} <-> {hosts[link.b]}: the two-rank all_reduce returned {link.allreduce.wrong} wrong values"
             for link in raw if link.allreduce and link.allreduce.wrong]
    return {"hosts": hosts, "mode": record.mode, "rounds": record.rounds, "seconds": record.seconds,
            "deadline": record.deadline, "error": record.error, "links": links, "memcpy": {hosts[i]: v for i, v in memcpy.items()},
            **({"asked_deadline": record.asked_deadline} if record.asked_deadline is not None else {}),
            "skipped": list(record.skipped),
            "median": verdict.median_link, "note": verdict.note,
            "slow_hosts": [hosts[h.host] for h in verdict.slow_hosts], "slow_links": [[hosts[x.a], hosts[x.b]] for x in verdict.slow_links],
            "slow_memory": [hosts[m.host] for m in verdict.slow_memory],
            "lossy_hosts": [hosts[h.host] for h in loss.lossy_hosts], "lossy_links": [[hosts[x.a], hosts[x.b]] for x in loss.lossy_links],
            "silent_hosts": [hosts[h] for h in silence.hosts], "silent_links": [[hosts[a], hosts[b]] for a, b in silence.links],
            "verdicts": describe_silence(silence, hosts, record.deadline) + describe(verdict, hosts)
                        + describe_loss(loss, hosts, [(link.a, link.b) for link in raw if link.dsack_unknown]) + wrong,
            "tcp": {hosts[i]: _host_tcp(counts) for i, counts in enumerate(record.tcp) if counts},
            "interfaces": {hosts[i]: facts.to_json() for i, facts in enumerate(record.interfaces) if facts is not None},
            "interface_causes": {hosts[i]: found for i, found in interface_causes(list(record.interfaces), _named(hosts, verdict, loss, silence), command).items()}}


def _host_tcp(counts: HostTcp) -> dict[str, Any]:
    """A host's TCP counters for the findings' JSON: dsack_unknown only where its kernel did not count D-SACKs."""
    row = counts.to_json()
    if not row.pop("dsack_unknown", None):
        return row
    return {**row, "dsack_unknown": True}


def _named(hosts: Sequence[str], verdict, loss, silence) -> set[int]:
    """The host indices the judgements name: slow, lossy or silent hosts, and both ends of each named link."""
    named = {h.host for h in verdict.slow_hosts} | {h.host for h in loss.lossy_hosts} | set(silence.hosts)
    named |= {end for link in verdict.slow_links for end in (link.a, link.b)} | {end for link in loss.lossy_links for end in (link.a, link.b)}
    return named | {end for pair in silence.links for end in pair}


def _link_evidence(link: Mapping[str, Any], deadline: Optional[float]) -> str:
    from .fabric import gbps

    head = f"{link['a']} <-> {link['b']}: "
    if link["error"]:
        return head + str(link["error"])
    text = (head + f"{gbps(link['bandwidth'])} ({gbps(link['out'])} {link['a']} -> {link['b']}, {gbps(link['back'])} back), "
            f"latency {link['latency'] * 1e6:.0f} us")
    if link["allreduce"]:
        text += f", two-rank all_reduce {gbps(link['allreduce']['busbw'])}"
    if link["sent"] is not None:
        text += f", TCP retransmitted {link['retransmitted']} of {link['sent']} segments" + (f", {link['spurious']} of them arrived after all (D-SACK)" if link.get("spurious") else "")
        text += ", D-SACKs not counted (this kernel does not count them, Linux 4.19+)" if link.get("dsack_unknown") else ""
        text += " (the host's counters)" if link.get("tcp_source") == "host" else ""
    return text


def pairs_finding(ranks: Sequence[RankRecord], command: str = "") -> Finding:
    cid = "live.pairs"
    table = pair_table(ranks, command)
    if table is None:
        return Finding(cid, Status.SKIP, "no rank reached the pair tests")
    try:
        return _pairs_finding(table)
    except MALFORMED as exc:
        return Finding(cid, Status.FAIL, _unreadable("pairs", exc), (), "Run compat doctor --live --fabric again with a --run-dir of its own.")


def _pairs_finding(table: Mapping[str, Any]) -> Finding:
    cid = "live.pairs"
    if table["error"]:
        return Finding(cid, Status.FAIL, table["error"], (), "Give --nnodes (or the hostfile) the number of hosts the ranks really run on.")
    from .fabric import PAIRS_SHARE, gbps, loss_cause

    evidence = tuple(_link_evidence(link, table["deadline"]) for link in table["links"])
    evidence += tuple(f"{host}: memcpy {gbps(value)}" for host, value in table["memcpy"].items())
    skipped = sorted({link["allreduce_skipped"] for link in table["links"] if link["allreduce_skipped"]})
    evidence += tuple(f"no two-rank all_reduce per pair: {why}" for why in skipped)
    cost = f"{len(table['links'])} pairs of {len(table['hosts'])} hosts in {table['rounds']} rounds ({table['mode']}), {table['seconds']:.1f} s"
    if table.get("asked_deadline") is not None:
        evidence += (f"each pair's deadline {table['deadline']:g} s, not --pair-deadline {table['asked_deadline']:g} s: the pairs may take "
                     f"at most {PAIRS_SHARE:.0%} of --fabric-deadline",)
    evidence += tuple(f"not measured: {item}" for item in table.get("skipped", []))
    named = set(table["slow_hosts"]) | {host for link in table["slow_links"] for host in link}
    lossy = set(table["lossy_hosts"]) | {host for link in table["lossy_links"] for host in link}
    causes = tuple(f"{host}: {cause}" for host, counts in table["tcp"].items()
                   if host in named and host not in lossy
                   and (cause := loss_cause(counts["out"], counts["retrans"], counts.get("spurious") or 0, bool(counts.get("dsack_unknown")))))
    causes += tuple(f"{host}: {cause}" for host, found in table["interface_causes"].items() for cause in found)
    evidence += tuple(f"{host}: toward the master over {facts.get('interface') or '?'} ({facts.get('address') or '?'}), MTU {facts.get('mtu') or '?'}, "
                      f"link speed {str(facts['speed']) + ' Mb/s' if facts.get('speed') else 'not reported (a virtual interface)'}"
                      + (f", GLOO_SOCKET_IFNAME={facts['gloo_ifname']}" if facts.get("gloo_ifname") else "")
                      for host, facts in table["interfaces"].items())
    if table["verdicts"]:
        return Finding(cid, Status.FAIL, "; ".join(table["verdicts"]), causes + evidence + (cost,),
                       "Check the named host's or link's interface (ip -s link: errors, drops; ethtool: speed, duplex; tc qdisc show: a rate "
                       "limit; nft list ruleset: a rule that drops) and its cable or switch port, then run compat doctor --live --fabric again.")
    median = f"median link {gbps(table['median'])}" if table["median"] else "no link"
    return Finding(cid, Status.PASS, f"{cost}: no link or host far below the others or losing packets ({median}{'; ' + table['note'] if table['note'] else ''})", evidence)


def trainer_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.trainer"
    if not expect.trainer:
        return Finding(cid, Status.SKIP, "the Trainer probe was not asked for (--no-trainer)")
    records = [r for r in ranks if r.status.trainer]
    if not records:
        if any(r.stage.startswith("trainer") for r in ranks):
            return Finding(cid, Status.SKIP, "the Trainer step did not start on every rank (see live.ranks / live.hang)")
        return Finding(cid, Status.SKIP, "no rank reached the Trainer step")
    info = records[0].trainer
    flags = " ".join(f"{k}={v}" for k, v in sorted((info.flags or {}).items()))
    evidence: list[str] = [f"transformers {info.transformers}, accelerate {info.accelerate}; TrainingArguments({flags})"]
    evidence += list(expect.ccl_trainer_blocked)
    failed = [r for r in records if r.error and str(r.stage).startswith("trainer")]
    if failed:
        return _trainer_failed(records, failed, evidence, expect)
    finished = [r for r in records if r.trainer.steps_done is not None]
    if len(finished) < len(records):
        return Finding(cid, Status.SKIP, "the Trainer step did not finish on every rank (see live.hang / live.ranks)")
    problems = _count_problems(finished, expect)
    batch_problems, batch_evidence = _batch_check(finished, expect)
    problems += batch_problems + _loss_problems(finished, expect)
    evidence += batch_evidence
    digests = {r.trainer.params_sha256 for r in finished}
    if len(digests) != 1:
        problems.append(f"the parameters differ between ranks after {expect.steps} steps ({len(digests)} different sha256): gradients were not averaged")
    evidence += group_evidence(finished, problems)
    if expect.ipex_mode != "none" and not all(r.trainer.ipex_optimized for r in finished):
        problems.append("IPEX is installed but the trained model was not optimized by it (no params_attr left by ipex.optimize)")
    evidence += _run_notes(info, expect)
    if problems:
        return Finding(cid, Status.FAIL, problems[0], tuple(problems[1:]) + tuple(evidence),
                       "Launch every rank with RANK/WORLD_SIZE/LOCAL_RANK (torchrun does; under mpirun map PMI_*), and the same --ddp_backend on every rank.")
    return _trainer_passed(info, expect, evidence)


def _trainer_failed(records: Sequence[RankRecord], failed: Sequence[RankRecord], evidence: Sequence[str], expect: Expectation) -> Finding:
    """A rank's Trainer step raised: SKIP when a rank died under it (see live.ranks), else FAIL with its error and the fix."""
    cid = "live.trainer"
    error = failed[0].error or RankError("")
    message = str(error.message).strip().splitlines()
    fix = "compat translate -- <your command> shows the flags this transformers takes; compat check lists version problems."
    if re.search(r"backend ccl is not ava", str(error.message)) and not expect.ccl_trainer_blocked:
        fix = f"accelerate picks ccl only when CCL_WORKER_COUNT is 1 or more: {expect.ccl.env_command} (or export CCL_WORKER_COUNT=1) and run again."
    crashed = [r for r in records if not r.done and not r.error and r.returncode not in (None, 0)]
    if crashed or all(PEER_GONE.search(_message(r)) for r in failed):
        return Finding(cid, Status.SKIP, "the Trainer step did not finish because a rank died (see live.ranks)")
    return Finding(cid, Status.FAIL, f"{failed[0].name}: the Trainer step failed: {error.type}: {first_sentence(message[0] if message else '')}",
                   tuple(evidence) + (f"at stage {failed[0].stage}",), fix)


def _count_problems(finished: Sequence[RankRecord], expect: Expectation) -> list[str]:
    """The world size each Trainer saw and the steps it took, against the run's."""
    problems = []
    worlds = {r.trainer.world_size for r in finished}
    if worlds != {expect.world_size}:
        problems.append(
            f"every rank trains alone: the Trainer saw world size {', '.join(str(w) for w in sorted(worlds, key=str))}, expected {expect.world_size}"
        )
    steps = {r.trainer.steps_done or 0 for r in finished}  # finished: every one has its steps
    if steps != {expect.steps}:
        problems.append(f"the Trainer took {sorted(steps)} steps, expected {expect.steps}")
    return problems


def _batch_check(finished: Sequence[RankRecord], expect: Expectation) -> tuple[list[str], list[str]]:
    """(problems, evidence) of the samples each step trained on: disjoint across ranks, the effective batch expected."""
    problems: list[str] = []
    evidence: list[str] = []
    per_step: dict[int, list[int]] = {}
    for record in finished:
        for index, seen in enumerate(record.trainer.rows_per_step):
            per_step.setdefault(index, []).extend(seen)
    want = expect.per_device_batch * expect.world_size
    local = len(finished)
    repeated = next(((index, rows) for index, rows in sorted(per_step.items()) if len(set(rows)) != len(rows)), None)
    if repeated is not None:
        index, rows = repeated
        problems.append(f"step {index + 1}: the ranks trained on the same samples ({len(rows) - len(set(rows))} repeated): the data is not sharded")
    sizes = {len(set(rows)) for rows in per_step.values()}
    if local == expect.world_size and sizes != {want}:
        problems.append(f"effective batch {sorted(sizes)} samples per step, expected {expect.per_device_batch} per device x {expect.world_size} ranks = {want}")
    elif sizes:
        evidence.append(f"effective batch: {expect.per_device_batch} per device x {expect.world_size} ranks = {want} samples per step; {local} ranks here trained on {max(sizes)} distinct samples per step")
    return problems, evidence


def _loss_problems(finished: Sequence[RankRecord], expect: Expectation) -> list[str]:
    """Losses that are not finite, and a first loss far from an untrained model's (a scaled loss)."""
    problems = []
    bad_losses = sorted({f"{x}" for r in finished for x in r.trainer.losses if not math.isfinite(x)})
    if bad_losses:
        precision = "bf16" if expect.trainer_flags.get("bf16") else "fp32"
        problems.append(f"the Trainer logged a loss of {', '.join(bad_losses)} in {precision}: training diverged or the kernels are broken on this CPU")
    first_losses = [r.trainer.losses[0] for r in finished if r.trainer.losses]
    if first_losses and math.isfinite(first_losses[0]):
        expected_loss = math.log(128)  # an untrained model over the probe's 128-token vocabulary
        if not 0.85 * expected_loss <= first_losses[0] <= 1.15 * expected_loss:
            problems.append(f"the first logged loss is {first_losses[0]:.3f}, expected about ln(128) = {expected_loss:.3f} for the untrained model "
                            f"({first_losses[0] / expected_loss:.2f}x): the loss is scaled (transformers 5.x: set average_tokens_across_devices=False)")
    return problems


def _run_notes(info: TrainerInfo, expect: Expectation) -> list[str]:
    """Evidence lines on how the Trainer ran: IPEX, why bf16, step times and losses."""
    notes = []
    if expect.ipex_mode != "none":
        notes.append(f"IPEX: {expect.ipex_note or info.ipex}")
    if expect.bf16_why:
        notes.append(f"bf16 {expect.bf16_why}")
    times = info.step_seconds
    if times:
        later = times[1:] or times
        notes.append(f"step time: first {times[0] * 1000:.0f} ms, then {1000 * sorted(later)[len(later) // 2]:.0f} ms median; losses {', '.join(f'{x:.3f}' for x in info.losses)}")
    return notes


def _trainer_passed(info: TrainerInfo, expect: Expectation, evidence: Sequence[str]) -> Finding:
    """Every check held: PASS, or FAIL when this transformers cannot use ccl (the Trainer adopted compat's ccl group)."""
    want = expect.per_device_batch * expect.world_size
    summary = f"{expect.steps} Trainer steps on {expect.world_size} ranks ({(info.parallel_mode or '').replace('ParallelMode.', '').lower() or 'distributed'}): "
    summary += f"world size {expect.world_size}, batch {want} per step, identical parameters on every rank"
    if expect.ipex_mode != "none":
        summary += ", IPEX applied"
    if expect.ccl_trainer_blocked:
        return Finding("live.trainer", Status.FAIL, f"the Trainer cannot use ccl with transformers {info.transformers} / accelerate {info.accelerate} "
                       f"(it was given gloo and adopted the ccl group compat had formed: {summary})",
                       tuple(evidence), "pip install the set compat resolve --profile ddp-ccl gives, or train with --ddp_backend gloo on stock PyTorch.")
    return Finding("live.trainer", Status.PASS, summary, tuple(evidence))


def group_evidence(finished: Sequence[RankRecord], problems: list[str]) -> list[str]:
    """One process group per process: who formed it, whether the Trainer adopted it, and whether a second one was made."""
    groups = [r.trainer.group or NO_GROUP for r in finished]
    if not any(g != NO_GROUP for g in groups):
        return []
    twice = [(r, g) for r, g in zip(finished, groups) if (g.created or 0) > 1]
    if twice:
        record, group = twice[0]
        problems.append(f"{record.name} formed {group.created} process groups in one process: the Trainer did not use the group that was there "
                        "(oneCCL's MPI transport does not survive a second initialisation)")
    group = groups[0]
    backend = finished[0].status.group_backend or finished[0].status.backend
    if group.made_by == "compat" and group.adopted:
        line = f"one process group per process: formed with init_process_group({backend!r}) before TrainingArguments, and the Trainer adopted it"
    elif group.made_by == "trainer":
        line = f"one process group per process: formed by the Trainer's own TrainingArguments ({backend}), the allreduce checks ran on it"
    else:
        line = f"process groups formed in this process: {group.created}"
    if all(g.ddp_on_it for g in groups if g.ddp_on_it is not None) and any(g.ddp_on_it is not None for g in groups):
        line += "; DDP reduced the gradients on it"
    return [line]


_HANG_CAUSES = {
    "init": ("a rank cannot reach MASTER_ADDR:MASTER_PORT (firewall, wrong address, port in use) or never started; "
             "several interfaces: set GLOO_SOCKET_IFNAME (gloo) or FI_TCP_IFACE / CCL_ATL_TRANSPORT=ofi with FI_PROVIDER=tcp (ccl)"),
    "collective": ("a collective never returned: a rank stalled or left, ranks on different interfaces (GLOO_SOCKET_IFNAME, FI_TCP_IFACE), "
                   "or the oneCCL provider cannot talk between the nodes (FI_PROVIDER=tcp to rule out the fabric)"),
    "import": "a rank hangs while importing the stack (a lock, a network call at import, an MPI/oneCCL init waiting for peers)",
    "launcher": "the launcher did not start every rank: for mpirun check that PMI_RANK/PMI_SIZE reach the ranks (hostfile, ssh), for torchrun --nnodes and --node-rank on every node",
}


STAGES = ("start", "import", "backend", "init", "joined", "allreduce", "bandwidth", "pairs", "fabric", "trainer", "trainer:arguments", "trainer:train", "shutdown", "done")


def _stage_index(stage: str) -> int:
    """How far a rank got (import:<module> stages count as one)."""
    name = "import" if stage.startswith("import:") else stage
    return STAGES.index(name) if name in STAGES else -1


def _phase(stage: str) -> str:
    if stage.startswith("import"):
        return "import"
    if stage == "start":
        return "launcher"
    if stage in ("backend", "init"):
        return "init"
    return "collective"


def hang_finding(ranks: Sequence[RankRecord], supervised: Supervised, expect: Expectation, expected_local: int) -> Finding:
    cid = "live.hang"
    waited = [r for r in ranks if r.error and TIMED_OUT.search(_message(r))]
    unfinished = [r for r in ranks if not r.done and not r.error]
    missing = max(0, expected_local - len(ranks))
    exited = [r for r in ranks if not r.done and not r.error and (r.returncode is not None or r.pid in supervised.died or _gone(r))]
    failed = [r for r in ranks if r.error and not TIMED_OUT.search(_message(r))]
    hung = supervised.timed_out or bool(waited) or (supervised.stopped_early and bool(unfinished) and not failed)
    if (exited or failed) and not supervised.timed_out and not waited:
        first = sorted(exited + failed, key=lambda r: _root_cause_order(r, supervised))[0]
        return Finding(cid, Status.SKIP, f"not a hang: {first.name} {'ended early' if first in exited else 'failed'} (see live.ranks); the ranks waiting for it were stopped",
                       tuple(f"{r.name}: stopped at stage {r.stage}" for r in unfinished if r not in exited))
    if not hung and ranks and all(r.done for r in ranks):
        return Finding(cid, Status.PASS, f"no hang: every rank ended by itself in {supervised.seconds:.1f} s (hard timeout {expect.timeout:g} s)")
    if not hung:
        return Finding(cid, Status.SKIP, "not a hang: the ranks ended before the deadline without finishing (see live.ranks)")
    evidence = [_hang_line(record) for record in ranks]
    phases = {_phase(record.stage) for record in ranks if not record.done}
    if missing:
        evidence.append(f"{missing} rank(s) never started (no status written)")
        phases.add("launcher")
    causes, fix = _hang_causes(ranks, expect, phases)
    evidence.append(f"likely causes: {causes}")
    return Finding(cid, Status.FAIL, _hang_summary(ranks, supervised, expect, waited, unfinished), tuple(evidence), fix)


def _hang_line(record: RankRecord) -> str:
    """One rank of a hang: its last stage and when, how it ended, where it is stuck and its last output."""
    frames = stuck_frames(record.log)
    when = (record.status.updated or 0) - (record.status.started or 0)
    line = f"{record.name}: last stage {record.stage} (at {when:.1f} s)"
    if record.error:
        line += f", ended with {record.error.type}: {first_sentence(record.error.message, 200)}"
    elif record.status.fixture_fault:
        line += f", FIXTURE fault: {record.status.fixture_fault}"
    if frames:
        line += f"; stuck in {frames}"
    return line + f"; last output: {_tail(record.log, 2)}"


def _hang_summary(ranks: Sequence[RankRecord], supervised: Supervised, expect: Expectation,
                  waited: Sequence[RankRecord], unfinished: Sequence[RankRecord]) -> str:
    """What hung (the deadline, a rank's own wait, or a failed rank's peers) and the ranks furthest behind."""
    behind = min((_stage_index(r.stage) for r in unfinished), default=0)
    laggards = [r for r in unfinished if _stage_index(r.stage) == behind]
    if supervised.timed_out:
        summary = f"hang: the run did not finish within the {expect.timeout:g} s timeout"
    elif waited:
        summary = f"hang: {waited[0].name} timed out waiting for the other ranks ({expect.init_timeout:g} s)"
    else:
        summary = "hang: a rank failed and the others waited for it"
    if laggards and len(laggards) < len(ranks):
        summary += f"; {', '.join(r.name for r in laggards)} stuck at stage {laggards[0].stage}"
    elif laggards:
        summary += f"; every rank stuck at stage {laggards[0].stage}"
    return summary


def _hang_causes(ranks: Sequence[RankRecord], expect: Expectation, phases: set[str]) -> tuple[str, str]:
    """(likely causes, fix) of a hang: the ranks' own words when oneCCL fell back, else the known causes of the
    phases the ranks stopped in, the ccl ones found in their environment first."""
    causes = "; ".join(_HANG_CAUSES[p] for p in ("launcher", "import", "init", "collective") if p in phases) or _HANG_CAUSES["collective"]
    fix = "Run with --verbose for each rank's output; fix the cause above and run compat doctor --live again."
    ccl = expect.backend == "ccl" or any(r.status.backend == "ccl" for r in ranks)
    fell_back = fallback_hang([r.log for r in ranks], expect.ccl) if ccl else None
    if fell_back is not None:  # the ranks' own words name the first failure: what a hang has in general comes after it
        return fell_back
    for known in (ccl_interface_unset(ranks, expect), foreign_mpirun_hang(expect.ccl) if ccl else None):
        if known is not None:
            cause, fix = known
            causes = f"{cause}; {causes}"
    return causes, fix


def ccl_interface_unset(ranks: Sequence[RankRecord], expect: Expectation) -> Optional[tuple[str, str]]:
    """(cause, fix) for a hang of the ccl backend across hosts where CCL_KVS_IFACE / FI_TCP_IFACE (environment/interfaces'
    CCL_VARIABLES) were not set on every host: oneCCL's key-value store and libfabric's tcp provider then pick an
    interface of their own, which the other hosts may not reach (the hang issue 25 saw with real oneCCL on two hosts).
    None on one host, under gloo, or when every host set both."""
    from ..environment.interfaces import CCL_VARIABLES

    ccl = expect.backend == "ccl" or any(r.status.backend == "ccl" for r in ranks)
    if not expect.multi_host or not ccl:
        return None
    missing: dict[str, list[str]] = {}  # variable -> the hosts where it was not set
    for record in ranks:
        facts = record.status.network
        if not facts:  # this rank did not get as far as reading them: nothing to say of its host
            continue
        variables = facts.iface_variables or {}
        for name in CCL_VARIABLES:
            if not variables.get(name) and record.host not in missing.setdefault(name, []):
                missing[name].append(record.host)
    missing = {name: hosts for name, hosts in missing.items() if hosts}
    if not missing and any(r.status.network for r in ranks):
        return None
    names = " and ".join(missing or CCL_VARIABLES)
    where = "; ".join(f"{name} not set on {', '.join(sorted(hosts))}" for name, hosts in missing.items()) or "no rank reported its variables"
    cause = (f"the ccl backend across hosts without {names} ({where}): oneCCL's key-value store and libfabric's tcp provider each pick an "
             "interface of their own (lo, a container bridge), which the other hosts cannot reach, so the ranks wait for each other")
    command = with_arguments(expect.ccl.env_command, " --master-addr MASTER --nnodes N")  # the same command told the master and the nodes
    fix = (f"On every host export {' and '.join(CCL_VARIABLES)} set to the interface that reaches the master (the same name on every host; "
           f"ip -br addr lists them): {command} sets both, with the rest of oneCCL's environment; then run compat doctor --live again.")
    return cause, fix


def _root_cause_order(record: RankRecord, supervised: Optional[Supervised] = None) -> tuple[int, float]:
    """Who to blame first: the rank the launcher saw fail first; a rank that died on its own (a crash, an exit, the
    OOM killer's SIGKILL); a Python error; a rank seen gone with no exit status (earliest first); a rank a launcher
    stopped (SIGTERM); one whose peer went away; last, a rank compat itself stopped."""
    died = list(supervised.died) if supervised else []
    # ranks that wrote when they ended (runs across hosts) are ordered by that time; the others in the order compat saw them go
    order = record.gone_at if record.gone_at is not None else 1e12 + (died.index(record.pid) if record.pid in died else len(died))
    if supervised is not None and record.pid in supervised.stopped and not record.error:
        return (9, order)
    if record.launcher_first_failure:
        return (0, order)
    if not record.done and not record.error:
        if record.returncode is None:
            return (3, order)
        return (4, order) if record.returncode == -15 else (1, order)
    if record.error and not PEER_GONE.search(_message(record)):
        return (2, order)
    return (5, order)


def _gone(record: RankRecord) -> bool:
    """The rank wrote that it ended (its exit watcher, runs across hosts) without finishing and without an error."""
    return record.gone_at is not None and not record.done and not record.error


def ranks_finding(ranks: Sequence[RankRecord], supervised: Supervised, run: CclRun = NO_RUN) -> Finding:
    """Did every rank finish, and end cleanly? A rank that failed on its own (not a hang) is reported here, the
    rank that died first named before the ones that only lost their peer."""
    cid = "live.ranks"
    errors = [r for r in ranks if r.error and not TIMED_OUT.search(_message(r))]
    early = [r for r in ranks if not r.done and not r.error and r.returncode is not None]
    died = [r for r in ranks if not r.done and not r.error and r.returncode is None and (r.pid in supervised.died or _gone(r))]
    culprits = sorted(early + errors + died, key=lambda r: _root_cause_order(r, supervised))
    launcher_failed = [end for end in supervised.ends if end.returncode not in (None, 0)]
    if culprits:
        return _culprit_finding(culprits, launcher_failed, run)
    vanished = [r for r in ranks if not r.done and not r.error and r.returncode is None and (r.pid in supervised.died or not supervised.stopped_early)]
    if vanished and not supervised.timed_out:
        record = vanished[0]
        how = f"; the launcher ended with {describe_exit(launcher_failed[0].returncode)}" if launcher_failed else ""
        return Finding(cid, Status.FAIL, f"{record.name} ended at stage {record.stage} without an error of its own (crashed, exited or was killed){how}",
                       tuple(f"{r.name}: last stage {r.stage}; last output: {_tail(r.log, 3)}" for r in vanished)
                       + tuple(f"launcher: {_tail(end.log, 4)}" for end in launcher_failed),
                       "Run with --verbose for each rank's output and the launcher's report.")
    if not ranks or not all(r.done for r in ranks):
        return Finding(cid, Status.SKIP, "not every rank finished (see live.hang)")
    aborted = [r for r in ranks if r.returncode not in (None, 0)]
    if aborted:  # finished every stage, then died in interpreter shutdown: real, but not a training failure
        return Finding(cid, Status.WARN, f"{aborted[0].name} finished every stage, then ended with {describe_exit(aborted[0].returncode)} at interpreter exit",
                       tuple(f"{r.name}: {_tail(r.log, 2)}" for r in aborted),
                       "A known gloo shutdown race: in your script drop the trainer and model, gc.collect(), barrier, then destroy_process_group().")
    if launcher_failed:
        code = launcher_failed[0].returncode
        return Finding(cid, Status.WARN, f"every rank finished, but the launcher ended with {describe_exit(code)}",
                       tuple(_tail(end.log, 3) for end in supervised.ends), "Run with --verbose to see the launcher's output.")
    return Finding(cid, Status.PASS, f"all {len(ranks)} ranks {where(ranks)} finished every stage and exited 0")


def _culprit_line(record: RankRecord) -> str:
    """One rank that failed or ended early: its error, or how it ended, at which stage."""
    if record.error:
        return f"{record.name}: {record.error.type}: {first_sentence(record.error.message)} at stage {record.stage}"
    if record.returncode is None:
        return f"{record.name}: gone at stage {record.stage}, exit status not reported; last output: {_tail(record.log, 3)}"
    return f"{record.name}: {describe_exit(record.returncode)} at stage {record.stage}; last output: {_tail(record.log, 3)}"


def _culprit_finding(culprits: Sequence[RankRecord], launcher_failed: Sequence[Any], run: CclRun) -> Finding:
    """FAIL naming the rank to blame first (culprits are in _root_cause_order): a cause its output names, else how it ended."""
    cid = "live.ranks"
    record = culprits[0]
    evidence = tuple(_culprit_line(other) for other in culprits) + tuple(f"launcher: {describe_exit(end.returncode)}" for end in launcher_failed)
    cause = known_cause(record, run)
    if cause is not None:
        how = f"{'failed' if record.error else 'ended'} at stage {record.stage}"
        return Finding(cid, Status.FAIL, f"{record.name} {how}: {cause[0]}", cause[1] + evidence, cause[2])
    if record.returncode is None and not record.error:
        how = f"; the launcher ended with {describe_exit(launcher_failed[0].returncode)}" if launcher_failed else ""
        return Finding(cid, Status.FAIL, f"{record.name} ended at stage {record.stage} without an error of its own (crashed, exited or was killed){how}",
                       evidence, "Run with --verbose for that rank's output.")
    if record.error:
        error = record.error
        return Finding(cid, Status.FAIL, f"{record.name} failed at stage {record.stage}: {error.type}: {first_sentence(error.message)}",
                       evidence, "Run with --verbose for that rank's full output and traceback.")
    if record.returncode == 0:
        return Finding(cid, Status.FAIL, f"{record.name} exited with status 0 at stage {record.stage} before finishing",
                       evidence, "Something in that rank called exit(0) early (a library, a sys.exit in a callback): run with --verbose for its output.")
    if record.returncode < 0:  # killed by a signal
        return Finding(cid, Status.FAIL, f"{record.name} was {describe_exit(record.returncode)} at stage {record.stage}",
                       evidence, "A crash in native code: run with --verbose for its output and check the installed set with compat check.")
    return Finding(cid, Status.FAIL, f"{record.name} exited early ({describe_exit(record.returncode)}) at stage {record.stage}",
                   evidence, "Run with --verbose to see that rank's output.")


LOOPBACK_PEER = re.compile(r"\[?(127\.\d+\.\d+\.\d+)\]?:\d+")


_Problem = tuple[str, str]  # (sentence, fix)


def network_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    """Where the ranks listen and whom they reach, per host: interface variables that name no interface there, a host
    name that resolves to loopback on its own host (gloo then gives the other hosts 127.x to connect to), MASTER_ADDR
    resolving differently or not at all, and compat's own attempt to reach MASTER_ADDR:PORT when the group did not form."""
    cid = "live.network"
    by_host: dict[str, tuple[RankRecord, NetworkFacts]] = {}
    for record in ranks:
        facts = record.status.network
        if facts:
            by_host.setdefault(str(facts.host), (record, facts))
    reach = expect.reach or {}
    if not by_host and not reach:
        return Finding(cid, Status.SKIP, "no rank got as far as reading its network settings")
    problems: list[_Problem] = []
    warnings: list[_Problem] = []
    evidence: list[str] = []
    for host, (_record, facts) in sorted(by_host.items()):
        evidence.append(_host_network_line(host, facts))
        problems += _host_name_problems(host, facts)
        loopback = _loopback_name(host, facts, ranks, expect)
        if loopback is not None:
            formed, problem = loopback
            if formed:
                warnings.append(problem)
            else:
                problems.append(problem)
    problems += [p for p in (_master_views_problem(by_host), _loopback_peer_problem(ranks, expect)) if p is not None]
    if reach:
        evidence.append(f"compat on {reach.get('from')}: {reach.get('what')}")
        if reach.get("problem"):
            problems.append((reach["problem"], reach.get("fix", "")))
    return _network_verdict(sorted(by_host), problems, warnings, evidence)


def _network_verdict(hosts: Sequence[str], problems: Sequence[_Problem], warnings: Sequence[_Problem], evidence: Sequence[str]) -> Finding:
    """FAIL on the first problem, else WARN on the first warning (the rest go to the evidence), else PASS."""
    cid = "live.network"
    if problems:
        return Finding(cid, Status.FAIL, problems[0][0], tuple(p for p, _ in [*problems[1:], *warnings]) + tuple(evidence), problems[0][1])
    if warnings:
        return Finding(cid, Status.WARN, warnings[0][0], tuple(p for p, _ in warnings[1:]) + tuple(evidence), warnings[0][1])
    return Finding(cid, Status.PASS, f"{len(hosts)} host(s) ({', '.join(hosts)}): the names resolve and the interface variables name interfaces that exist", tuple(evidence))


def _host_network_line(host: str, facts: NetworkFacts) -> str:
    """One host's network facts: what its name and MASTER_ADDR resolve to, its interfaces and interface variables."""
    own = ", ".join(item.address for item in facts.host_resolves) or f"nothing ({facts.host_error or 'no address'})"
    line = f"{host}: {host} -> {own}"
    master = facts.master_addr
    if master:
        there = ", ".join(item.address + (" (this host)" if item.local else "") for item in facts.master_resolves)
        line += f"; MASTER_ADDR {master} -> {there or 'nothing (' + (facts.master_error or 'no address') + ')'}"
    line += f"; interfaces {', '.join(facts.interfaces)}"
    variables = facts.iface_variables or {}
    if variables:
        line += "; " + " ".join(f"{k}={v}" for k, v in sorted(variables.items()))
    return line


def _host_name_problems(host: str, facts: NetworkFacts) -> list[_Problem]:
    """A MASTER_ADDR that does not resolve on this host, and interface variables that name no interface of it."""
    problems = []
    master = facts.master_addr
    if master and not facts.master_resolves:
        problems.append((f"MASTER_ADDR {master} does not resolve on {host}", f"Make {master} resolve on every host (/etc/hosts or DNS), or pass its address."))
    for name, value in sorted((facts.iface_variables or {}).items()):
        missing = [part for part in str(value).split(",") if part and part not in facts.interfaces]
        if missing:
            problems.append((f"{name}={value} names no interface on {host} (it has {', '.join(facts.interfaces)})",
                             f"Set {name} to the interface that reaches the other hosts (the same name must exist on every host), or unset it."))
    return problems


def _loopback_name(host: str, facts: NetworkFacts, ranks: Sequence[RankRecord], expect: Expectation) -> Optional[tuple[bool, _Problem]]:
    """(whether this host's ranks still formed their group, the problem) when, across hosts and with no
    GLOO_SOCKET_IFNAME, the host's own name resolves to loopback or to none of its addresses; else None."""
    resolves = facts.host_resolves
    loopback = [item.address for item in resolves if item.loopback]
    if expect.multi_host and not loopback and not any(item.local for item in resolves):
        # gloo listens on the first address of its host name that it can bind; none: it falls back to 127.0.0.1
        said = f"to {', '.join(item.address for item in resolves)}, no address of {host}" if resolves else "to nothing"
        loopback = ["127.0.0.1"]
        why = f"{host} resolves its own name {said}: gloo there falls back to 127.0.0.1 (loopback) and gives the other hosts that address to reach it"
    else:
        why = f"{host} resolves its own name to {loopback[0] if loopback else ''} (loopback): gloo there gives the other hosts that address to reach it (connectFullMesh failed ... remote=[{loopback[0] if loopback else ''}])"
    if not (expect.multi_host and loopback and not (facts.iface_variables or {}).get("GLOO_SOCKET_IFNAME")):
        return None
    fix = (f"Map {host} to its cluster address in /etc/hosts (or DNS) on {host} (Debian's '127.0.1.1 {host}' line is the usual culprit), "
           f"or {expect.interface_fix or 'set GLOO_SOCKET_IFNAME to the interface that reaches the other hosts'}.")
    on_host = [r for r in ranks if r.host == host]
    if on_host and all(r.status.world_size for r in on_host):
        return True, (why + " (this run's ranks still formed their group)", fix)  # torch 2.x's gloo copes; the name is still wrong
    return False, (why, fix)


def _master_views_problem(by_host: Mapping[str, tuple[RankRecord, NetworkFacts]]) -> Optional[_Problem]:
    """MASTER_ADDR resolving to different addresses on different hosts, or None."""
    views = {host: tuple(sorted(item.address for item in facts.master_resolves)) for host, (_r, facts) in by_host.items() if facts.master_addr}
    if len(set(views.values())) <= 1:
        return None
    master = next(facts.master_addr for _r, facts in by_host.values() if facts.master_addr)
    return (f"MASTER_ADDR {master} resolves differently on the hosts: " + "; ".join(f"{', '.join(v) or 'nothing'} on {h}" for h, v in sorted(views.items())),
            "Make every host resolve the master's name to the same address (/etc/hosts or DNS), or pass --master-addr as an address.")


def _loopback_peer_problem(ranks: Sequence[RankRecord], expect: Expectation) -> Optional[_Problem]:
    """A rank given a loopback address to reach a peer (another host advertised 127.x: its own name resolves to loopback there), or None."""
    for record in ranks:
        match = LOOPBACK_PEER.search(_message(record))
        if expect.multi_host and match and record.error:
            return (f"{record.name} was given {match.group(1)} to reach a peer: a loopback address, so some host resolves its own name to loopback",
                    f"On every host, map its own name to its cluster address (/etc/hosts or DNS), or {expect.interface_fix or 'set GLOO_SOCKET_IFNAME on every host'}.")
    return None


def cleanup_finding(supervised: Supervised) -> Finding:
    cid = "live.cleanup"
    if supervised.leftovers:
        return Finding(cid, Status.FAIL, f"{len(supervised.leftovers)} process(es) of the run survived SIGKILL", tuple(f"pid {p}" for p in supervised.leftovers),
                       "They are in uninterruptible sleep (D state) or another user's: kill them by hand (kill -9) or reboot the node.")
    how = "after stopping the run" if supervised.timed_out or supervised.stopped_early else "after the run"
    return Finding(cid, Status.PASS, f"no process of the run is left {how}")


def live_findings(launch: Launch, supervised: Supervised, ranks: Sequence[RankRecord], expect: Expectation) -> list[Finding]:
    findings = [launch_finding(launch, supervised, ranks)]
    environment = environment_finding(launch, expect.ccl)
    if environment is not None:
        findings.append(environment)
    if ranks:
        findings += [
            imports_finding(ranks, supervised, expect.ccl),
            backend_finding(ranks, expect),
            world_finding(ranks, expect),
            allreduce_finding(ranks),
            *([fabric_finding(ranks, expect)] if expect.fabric else [bandwidth_finding(ranks)]),  # the sweep measures all_reduce itself
            *([pairs_finding(ranks, expect.ccl.env_command)] if expect.pairs else []),
            trainer_finding(ranks, expect),
        ]
    findings.append(network_finding(ranks, expect))
    findings.append(hang_finding(ranks, supervised, expect, launch.expected_local))
    findings.append(ranks_finding(ranks, supervised, expect.ccl))
    findings.append(cleanup_finding(supervised))
    unfinished = [r for r in ranks if not r.done]
    if unfinished and not any(f.status is Status.FAIL for f in findings):  # a run where a rank did not finish never passes
        record = unfinished[0]
        findings = [f for f in findings if f.id != "live.ranks"] + [Finding(
            "live.ranks", Status.FAIL, f"{record.name} did not finish (last stage {record.stage}) and nothing else explains why",
            tuple(f"{r.name}: last stage {r.stage}, {describe_exit(r.returncode) if r.returncode is not None else 'exit status unknown'}; last output: {_tail(r.log, 3)}"
                  for r in unfinished), "Run with --verbose for each rank's output.")]
    return findings


def rank_outputs(ranks: Sequence[RankRecord], supervised: Supervised, limit: int = 4000) -> dict[str, Any]:
    """Per-rank output for --json and --verbose."""
    return {
        "hosts": sorted({r.host for r in ranks if r.status.host}),
        "ranks": [{"rank": r.rank, "pid": r.pid, "host": r.status.host, "stage": r.stage, "returncode": r.returncode, "stages": [m.to_json() for m in r.status.stages],
                   "error": r.error.to_json() if r.error else None, "params_sha256": r.trainer.params_sha256,
                   "losses": [x if math.isfinite(x) else str(x) for x in r.trainer.losses],
                   "step_seconds": list(r.trainer.step_seconds),
                   "output": r.log[-limit:]} for r in ranks],
        "launcher_processes": [{"command": list(e.command), "pid": e.pid, "returncode": e.returncode, "output": e.log[-limit:]} for e in supervised.ends],
    }
