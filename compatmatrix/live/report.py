"""Turn what the ranks wrote (proc-<pid>.json / .log) and how their processes ended into findings. Pure.

Every cross-rank comparison (identical parameters, disjoint samples, the world size each Trainer saw) is made
here, from the files, so it works even when the ranks never formed a group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..checks.crash import classify, describe_exit
from ..checks.finding import Finding, Status
from .launch import Launch
from .supervise import Supervised

GB = 1e9


@dataclass(frozen=True)
class RankRecord:
    pid: int
    status: Mapping[str, Any]
    log: str
    returncode: Optional[int] = None  # known under spawn (one process per rank)

    @property
    def rank(self) -> Optional[int]:
        return self.status.get("rank")

    @property
    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid} (no rank)"

    @property
    def stage(self) -> str:
        return str(self.status.get("stage", "not started"))

    @property
    def done(self) -> bool:
        return self.stage == "done"

    @property
    def error(self) -> Optional[Mapping[str, Any]]:
        return self.status.get("error")


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


def read_ranks(run_dir: Path, ends_by_pid: Mapping[int, Optional[int]]) -> list[RankRecord]:
    records = []
    for path in sorted(run_dir.glob("proc-*.json")):
        pid_text = path.stem.split("-", 1)[1]
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            status = {"stage": "unreadable status"}
        log_path = run_dir / f"proc-{pid}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        records.append(RankRecord(pid, status, log[-50000:], ends_by_pid.get(pid)))
    return sorted(records, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))


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


def launch_finding(launch: Launch, supervised: Supervised, ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.launch"
    evidence = tuple(" ".join(end.command) for end in supervised.ends[:1]) + launch.notes
    if not ranks:
        logs = " | ".join(_tail(end.log, 3) for end in supervised.ends if end.log.strip())
        return Finding(cid, Status.FAIL, f"{launch.launcher} started no rank ({describe_exit(supervised.ends[0].returncode)})",
                       evidence + ((f"launcher output: {logs}",) if logs else ()),
                       "Run the command above by hand; for mpirun check that the MPI can start processes here (hostfile, ssh), for torchrun that torch is installed.")
    summary = f"{launch.launcher} ({launch.flavor}) started {len(ranks)} of {launch.expected_local} ranks here, world size {launch.world_size}, master {launch.master}"
    if len(ranks) < launch.expected_local:
        return Finding(cid, Status.FAIL, summary, evidence, "The launcher started fewer ranks than asked: check --nproc-per-node, the hostfile and the launcher's output (--verbose).")
    return Finding(cid, Status.PASS, summary, evidence)


def imports_finding(ranks: Sequence[RankRecord], supervised: Supervised) -> Finding:
    cid = "live.imports"
    for record in ranks:
        stage = record.stage
        if stage.startswith("import:") and record.error:  # a Python-level import error (e.g. torch missing, undefined symbol)
            what = stage.split(":", 1)[1]
            error = record.error
            verdict = classify(1, "", f"{record.log}\n{error.get('type')}: {error.get('message')}", False, what)
            return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", verdict.detail, verdict.fix)
        if stage.startswith("import:") and not record.error:
            what = stage.split(":", 1)[1]
            timed_out = supervised.timed_out or supervised.stopped_early
            verdict = classify(record.returncode if record.returncode is not None else (None if timed_out else 1), "", record.log, timed_out and record.returncode is None, what)
            return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", verdict.detail + (f"last output: {_tail(record.log)}",), verdict.fix)
        imports = record.status.get("imports") or {}
        for key in ("ipex", "ccl"):
            item = imports.get(key)
            if item and not item.get("ok"):
                verdict = classify(1, "", f"{record.log}\n{item.get('error', '')}", False, item.get("module", key))
                return Finding(cid, Status.FAIL, f"{record.name}: {verdict.summary}", (str(item.get("error", "")),), verdict.fix)
    first = ranks[0].status.get("imports") or {}
    parts = [f"torch {first.get('torch', {}).get('version')}"]
    if first.get("ipex"):
        parts.append(f"{first['ipex']['module']} {first['ipex'].get('version')}")
    if first.get("ccl"):
        parts.append(f"{first['ccl']['module']} {first['ccl'].get('version') or ''}".strip())
    if not first:
        return Finding(cid, Status.SKIP, "no rank got as far as importing torch")
    return Finding(cid, Status.PASS, f"every rank imports {', '.join(parts)}")


def backend_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.backend"
    chosen = [r for r in ranks if "backend" in r.status]
    if not chosen:
        return Finding(cid, Status.SKIP, "no rank got as far as choosing a backend")
    backends = {r.status.get("backend") for r in chosen}
    reason = str(chosen[0].status.get("backend_reason", ""))
    ccl = (chosen[0].status.get("imports") or {}).get("ccl") or {}
    if None in backends:
        return Finding(cid, Status.FAIL, reason, (), "Install the oneccl_bind_pt that compat resolve gives for this torch, then eval \"$(compat env)\"; or run with --backend gloo.")
    if len(backends) > 1:
        return Finding(cid, Status.FAIL, f"the ranks chose different backends: {', '.join(sorted(str(b) for b in backends))}",
                       tuple(f"{r.name}: {r.status.get('backend')} ({r.status.get('backend_reason')})" for r in chosen),
                       "Every rank must see the same environment: install the same packages on every node and source the same setvars.sh.")
    backend = backends.pop()
    if backend == "ccl" and ccl.get("fixture"):
        return Finding(cid, Status.PASS, f"ccl, FIXTURE: {reason}", (f"fixture marker: {ccl.get('fixture')}",))
    if backend == "gloo" and expect.backend == "auto" and expect.ccl_installed:
        return Finding(cid, Status.WARN, f"gloo: {reason}", (), "oneccl_bind_pt is installed but did not give a ccl backend: compat doctor --only imports.ccl shows why.")
    return Finding(cid, Status.PASS, f"{backend}: {reason}")


def world_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.world"
    without = [r for r in ranks if r.status.get("rank") is None]
    if without:
        return Finding(cid, Status.FAIL, f"{len(without)} of {len(ranks)} processes started without RANK/WORLD_SIZE: no process group can form, each rank is on its own",
                       tuple(f"pid {r.pid}: no RANK/WORLD_SIZE, no PMI_RANK/OMPI_COMM_WORLD_RANK mapped" for r in without),
                       "Launch with torchrun, or with mpirun and map PMI_RANK/PMI_SIZE (or OMPI_COMM_WORLD_*) to RANK/WORLD_SIZE/LOCAL_RANK, and set MASTER_ADDR/MASTER_PORT.")
    joined = [r for r in ranks if r.status.get("world_size")]
    if not joined:
        return Finding(cid, Status.SKIP, "no rank formed a process group (see live.hang / live.ranks)")
    sizes = {r.status["world_size"] for r in joined}
    if sizes != {expect.world_size}:
        return Finding(cid, Status.FAIL, f"the group has world size {', '.join(str(s) for s in sorted(sizes))}, expected {expect.world_size}",
                       tuple(f"{r.name}: world size {r.status['world_size']} (from {r.status.get('rank_source')})" for r in joined),
                       "Every rank must get the same WORLD_SIZE: check --nproc-per-node / --nnodes / the hostfile.")
    return Finding(cid, Status.PASS, f"{len(joined)} ranks here joined a group of {expect.world_size} (rank variables from {joined[0].status.get('rank_source')})")


def allreduce_finding(ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.allreduce"
    done = [r for r in ranks if r.status.get("allreduce")]
    if not done:
        return Finding(cid, Status.SKIP, "no rank reached the allreduce")
    bad = []
    notes = []
    for record in done:
        results = record.status["allreduce"]
        for dtype in ("fp32", "bf16"):
            item = results.get(dtype) or {}
            if item.get("unsupported"):
                notes.append(f"{dtype} allreduce is not supported by this backend: {item.get('error')}")
            elif item.get("ok") is False:
                bad.append(f"{record.name}: {dtype} allreduce gave {item['wrong']} wrong of {item['elements']} elements")
    backend = done[0].status.get("backend")
    if bad:
        return Finding(cid, Status.FAIL, f"allreduce on {backend} returned wrong sums", tuple(bad),
                       "A reduction that completes with wrong values points at the backend build (oneCCL/torch-ccl) or a mixed installation across nodes: reinstall the matrix's pair.")
    checked = "fp32" + ("" if notes else " and bf16")
    summary = f"{checked} allreduce on {backend} is exact on all {len(done)} ranks here"
    return Finding(cid, Status.PASS, summary + (" (bf16 unsupported, see evidence)" if notes else ""), tuple(sorted(set(notes))))


def bandwidth_finding(ranks: Sequence[RankRecord]) -> Finding:
    cid = "live.bandwidth"
    source = next((r for r in ranks if r.status.get("bandwidth")), None)
    if source is None:
        return Finding(cid, Status.SKIP, "no bandwidth measured (the allreduce did not complete)")
    rows = source.status["bandwidth"]
    memcpy = source.status.get("memcpy") or {}
    copy = memcpy.get("all_ranks")
    evidence = [f"{row['mib']} MiB: {row['seconds'] * 1000:.1f} ms, algorithm {_gb(row['algbw'])}, bus {_gb(row['busbw'])}" for row in rows]
    largest = max(rows, key=lambda row: row["mib"])
    summary = f"bus bandwidth {_gb(largest['busbw'])} at {largest['mib']} MiB"
    if copy:
        evidence.append(f"memory copy, every rank at once (one thread each): {_gb(copy)} in all, {_gb(memcpy['per_rank'])} per rank")
        summary += f", {100 * largest['busbw'] / copy:.1f}% of the ranks' memory-copy bandwidth ({_gb(copy)})"
    return Finding(cid, Status.PASS, summary, tuple(evidence))


def trainer_finding(ranks: Sequence[RankRecord], expect: Expectation) -> Finding:
    cid = "live.trainer"
    if not expect.trainer:
        return Finding(cid, Status.SKIP, "the Trainer probe was not asked for (--no-trainer)")
    records = [r for r in ranks if r.status.get("trainer")]
    if not records:
        return Finding(cid, Status.SKIP, "no rank reached the Trainer step")
    info = records[0].status["trainer"]
    flags = " ".join(f"{k}={v}" for k, v in sorted((info.get("flags") or {}).items()))
    problems: list[str] = []
    evidence: list[str] = [f"transformers {info.get('transformers')}, accelerate {info.get('accelerate')}; TrainingArguments({flags})"]
    evidence += list(expect.ccl_trainer_blocked)
    failed = [r for r in records if r.error and str(r.stage).startswith("trainer")]
    if failed:
        error = failed[0].error or {}
        message = str(error.get("message", "")).strip().splitlines()
        fix = "compat translate -- <your command> shows the flags this transformers takes; compat check lists version problems."
        if re.search(r"backend ccl is not ava", str(error.get("message", ""))) and not expect.ccl_trainer_blocked:
            fix = "accelerate picks ccl only when CCL_WORKER_COUNT is 1 or more: eval \"$(compat env)\" (or export CCL_WORKER_COUNT=1) and run again."
        return Finding(cid, Status.FAIL, f"{failed[0].name}: the Trainer step failed: {error.get('type')}: {message[0] if message else ''}",
                       tuple(evidence) + (f"at stage {failed[0].stage}",), fix)
    finished = [r for r in records if "steps_done" in r.status["trainer"]]
    if len(finished) < len(records):
        return Finding(cid, Status.SKIP, "the Trainer step did not finish on every rank (see live.hang / live.ranks)")
    worlds = {r.status["trainer"].get("world_size") for r in finished}
    if worlds != {expect.world_size}:
        problems.append(
            f"every rank trains alone: the Trainer saw world size {', '.join(str(w) for w in sorted(worlds, key=str))}, expected {expect.world_size}"
        )
    steps = {r.status["trainer"].get("steps_done") for r in finished}
    if steps != {expect.steps}:
        problems.append(f"the Trainer took {sorted(steps)} steps, expected {expect.steps}")
    per_step: dict[int, list[int]] = {}
    for record in finished:
        for index, rows in enumerate(record.status["trainer"].get("rows_per_step") or []):
            per_step.setdefault(index, []).extend(rows)
    want = expect.per_device_batch * expect.world_size
    local = len(finished)
    for index, rows in sorted(per_step.items()):
        if len(set(rows)) != len(rows):
            problems.append(f"step {index + 1}: the ranks trained on the same samples ({len(rows) - len(set(rows))} repeated): the data is not sharded")
            break
    sizes = {len(set(rows)) for rows in per_step.values()}
    if local == expect.world_size and sizes != {want}:
        problems.append(f"effective batch {sorted(sizes)} samples per step, expected {expect.per_device_batch} per device x {expect.world_size} ranks = {want}")
    elif sizes:
        evidence.append(f"effective batch: {expect.per_device_batch} per device x {expect.world_size} ranks = {want} samples per step; {local} ranks here trained on {max(sizes)} distinct samples per step")
    digests = {r.status["trainer"].get("params_sha256") for r in finished}
    if len(digests) != 1:
        problems.append(f"the parameters differ between ranks after {expect.steps} steps ({len(digests)} different sha256): gradients were not averaged")
    if expect.ipex_mode != "none":
        evidence.append(f"IPEX: {expect.ipex_note or info.get('ipex')}")
        if not all(r.status["trainer"].get("ipex_optimized") for r in finished):
            problems.append("IPEX is installed but the trained model was not optimized by it (no params_attr left by ipex.optimize)")
    times = info.get("step_seconds") or []
    if times:
        later = times[1:] or times
        evidence.append(f"step time: first {times[0] * 1000:.0f} ms, then {1000 * sorted(later)[len(later) // 2]:.0f} ms median; losses {', '.join(f'{x:.3f}' for x in info.get('losses', []))}")
    if problems:
        return Finding(cid, Status.FAIL, problems[0], tuple(problems[1:]) + tuple(evidence),
                       "Launch every rank with RANK/WORLD_SIZE/LOCAL_RANK (torchrun does; under mpirun map PMI_*), and the same --ddp_backend on every rank.")
    summary = f"{expect.steps} Trainer steps on {expect.world_size} ranks ({info.get('parallel_mode', '').replace('ParallelMode.', '').lower() or 'distributed'}): "
    summary += f"world size {expect.world_size}, batch {want} per step, identical parameters on every rank"
    if expect.ipex_mode != "none":
        summary += ", IPEX applied"
    if expect.ccl_trainer_blocked:
        return Finding(cid, Status.FAIL, f"the Trainer cannot use ccl with transformers {info.get('transformers')} / accelerate {info.get('accelerate')} (the step ran on gloo instead: {summary})",
                       tuple(evidence), "pip install the set compat resolve --profile ddp-ccl gives, or train with --ddp_backend gloo on stock PyTorch.")
    return Finding(cid, Status.PASS, summary, tuple(evidence))


_HANG_CAUSES = {
    "init": ("a rank cannot reach MASTER_ADDR:MASTER_PORT (firewall, wrong address, port in use) or never started; "
             "several interfaces: set GLOO_SOCKET_IFNAME (gloo) or FI_TCP_IFACE / CCL_ATL_TRANSPORT=ofi with FI_PROVIDER=tcp (ccl)"),
    "collective": ("a collective never returned: a rank stalled or left, ranks on different interfaces (GLOO_SOCKET_IFNAME, FI_TCP_IFACE), "
                   "or the oneCCL provider cannot talk between the nodes (FI_PROVIDER=tcp to rule out the fabric)"),
    "import": "a rank hangs while importing the stack (a lock, a network call at import, an MPI/oneCCL init waiting for peers)",
    "launcher": "the launcher did not start every rank: for mpirun check that PMI_RANK/PMI_SIZE reach the ranks (hostfile, ssh), for torchrun --nnodes and --node-rank on every node",
}


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
    waited = [r for r in ranks if r.error and re.search(r"[Tt]imed? ?out|timeout|clients joined", str(r.error.get("message", "")))]
    unfinished = [r for r in ranks if not r.done and not r.error]
    missing = max(0, expected_local - len(ranks))
    exited = [r for r in ranks if not r.done and not r.error and r.returncode not in (None, 0)]
    hung = supervised.timed_out or bool(waited) or (supervised.stopped_early and bool(unfinished)) or (supervised.timed_out and missing)
    if exited and not supervised.timed_out and not waited:
        return Finding(cid, Status.SKIP, f"not a hang: {exited[0].name} exited early (see live.ranks); compat stopped the ranks waiting for it",
                       tuple(f"{r.name}: stopped at stage {r.stage}" for r in unfinished if r not in exited))
    if not hung:
        return Finding(cid, Status.PASS, f"no hang: every rank ended by itself in {supervised.seconds:.1f} s (hard timeout {expect.timeout:g} s)")
    evidence = []
    phases = set()
    for record in ranks:
        frames = stuck_frames(record.log)
        when = record.status.get("updated", 0) - record.status.get("started", 0)
        line = f"{record.name}: last stage {record.stage} (at {when:.1f} s)"
        if record.error:
            line += f", ended with {record.error.get('type')}: {str(record.error.get('message', '')).splitlines()[0][:200] if record.error.get('message') else ''}"
        elif record.status.get("fixture_fault"):
            line += f", FIXTURE fault: {record.status['fixture_fault']}"
        if frames:
            line += f"; stuck in {frames}"
        line += f"; last output: {_tail(record.log, 2)}"
        evidence.append(line)
        if not record.done:
            phases.add(_phase(record.stage))
    if missing:
        evidence.append(f"{missing} rank(s) never started (no status written)")
        phases.add("launcher")
    laggards = [r for r in unfinished if _phase(r.stage) in ("launcher", "import")] or unfinished
    if supervised.timed_out:
        summary = f"hang: the run did not finish within the {expect.timeout:g} s timeout"
    elif waited:
        summary = f"hang: {waited[0].name} timed out waiting for the other ranks ({expect.init_timeout:g} s)"
    else:
        summary = "hang: a rank failed and the others waited for it"
    if laggards:
        summary += f"; {', '.join(r.name for r in laggards)} stuck at stage {laggards[0].stage}"
    causes = "; ".join(_HANG_CAUSES[p] for p in ("launcher", "import", "init", "collective") if p in phases) or _HANG_CAUSES["collective"]
    evidence.append(f"likely causes: {causes}")
    return Finding(cid, Status.FAIL, summary, tuple(evidence), "Run with --verbose for each rank's output; fix the cause above and run compat doctor --live again.")


def ranks_finding(ranks: Sequence[RankRecord], supervised: Supervised) -> Finding:
    """Did every rank finish, and end cleanly? A rank that failed on its own (not a hang) is reported here."""
    cid = "live.ranks"
    errors = [r for r in ranks if r.error and not re.search(r"[Tt]imed? ?out|timeout|clients joined", str(r.error.get("message", "")))]
    early = [r for r in ranks if not r.done and not r.error and r.returncode not in (None, 0)]
    if errors:
        record = errors[0]
        error = record.error or {}
        message = str(error.get("message", "")).strip().splitlines()
        return Finding(cid, Status.FAIL, f"{record.name} failed at stage {record.stage}: {error.get('type')}: {message[0] if message else ''}",
                       tuple(f"{r.name}: {str((r.error or {}).get('traceback', '')).strip().splitlines()[-1:] or ''}" for r in errors),
                       "Read the error above (--verbose shows each rank's output).")
    if early:
        record = early[0]
        return Finding(cid, Status.FAIL, f"{record.name} exited early ({describe_exit(record.returncode)}) at stage {record.stage}",
                       tuple(f"{r.name}: {describe_exit(r.returncode)} at stage {r.stage}; last output: {_tail(r.log, 3)}" for r in early),
                       "Run with --verbose to see that rank's output.")
    if not ranks or not all(r.done for r in ranks):
        return Finding(cid, Status.SKIP, "not every rank finished (see live.hang)")
    aborted = [r for r in ranks if r.returncode not in (None, 0)]
    if aborted:  # finished every stage, then died in interpreter shutdown: real, but not a training failure
        return Finding(cid, Status.WARN, f"{aborted[0].name} finished every stage, then ended with {describe_exit(aborted[0].returncode)} at interpreter exit",
                       tuple(f"{r.name}: {_tail(r.log, 2)}" for r in aborted),
                       "A known gloo shutdown race: in your script drop the trainer and model, gc.collect(), barrier, then destroy_process_group().")
    launcher_codes = {end.returncode for end in supervised.ends}
    if launcher_codes - {0}:
        code = next(c for c in launcher_codes if c != 0)
        return Finding(cid, Status.WARN, f"every rank finished, but the launcher ended with {describe_exit(code)}",
                       tuple(_tail(end.log, 3) for end in supervised.ends), "Run with --verbose to see the launcher's output.")
    return Finding(cid, Status.PASS, f"all {len(ranks)} ranks here finished every stage and exited 0")


def cleanup_finding(supervised: Supervised) -> Finding:
    cid = "live.cleanup"
    if supervised.leftovers:
        return Finding(cid, Status.FAIL, f"{len(supervised.leftovers)} process(es) of the run survived SIGKILL", tuple(f"pid {p}" for p in supervised.leftovers),
                       "They are in uninterruptible sleep (D state) or another user's: kill them by hand (kill -9) or reboot the node.")
    how = "after stopping the run" if supervised.timed_out or supervised.stopped_early else "after the run"
    return Finding(cid, Status.PASS, f"no process of the run is left {how}")


def live_findings(launch: Launch, supervised: Supervised, ranks: Sequence[RankRecord], expect: Expectation) -> list[Finding]:
    findings = [launch_finding(launch, supervised, ranks)]
    if ranks:
        findings += [
            imports_finding(ranks, supervised),
            backend_finding(ranks, expect),
            world_finding(ranks, expect),
            allreduce_finding(ranks),
            bandwidth_finding(ranks),
            trainer_finding(ranks, expect),
        ]
    findings.append(hang_finding(ranks, supervised, expect, launch.expected_local))
    findings.append(ranks_finding(ranks, supervised))
    findings.append(cleanup_finding(supervised))
    return findings


def rank_outputs(ranks: Sequence[RankRecord], supervised: Supervised, limit: int = 4000) -> dict[str, Any]:
    """Per-rank output for --json and --verbose."""
    return {
        "ranks": [{"rank": r.rank, "pid": r.pid, "stage": r.stage, "returncode": r.returncode, "stages": r.status.get("stages", []),
                   "error": r.error, "params_sha256": (r.status.get("trainer") or {}).get("params_sha256"),
                   "output": r.log[-limit:]} for r in ranks],
        "launcher_processes": [{"command": list(e.command), "pid": e.pid, "returncode": e.returncode, "output": e.log[-limit:]} for e in supervised.ends],
    }
