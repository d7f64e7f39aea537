"""compat launch --watch's and compat watch's findings in words (one line each, then the fix) and as the --json
document (schemas/watch-v1.json; compat watch's says ``"attached": true``). Side effects: none.
"""

from __future__ import annotations

import signal
from typing import Any, Optional

from .judge import Collective, Death, Finding, Stall, Straggler

SCHEMA_VERSION = 1

FIX = {
    "stall": "Look at what rank {rank} does after its last collective (a data loader that blocks, a branch only some ranks take, "
             "a collective called on some ranks only); compat launch --watch-only keeps such a job running so you can attach py-spy dump --pid PID.",
    "death": "Read rank {rank}'s own output above: {how}.",
    "straggler": "Give rank {rank} the same CPUs and data as the others (a process sharing its cores or an uneven data shard slows one rank and "
                 "every rank waits for it; compat launch --launcher torchrun binds each rank to cores of its own, --launcher spawn binds none).",
}


def _signal_name(number: Optional[int]) -> str:
    if number is None:
        return ""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def collective_words(collective: Optional[Collective], pg: str, seq: int) -> str:
    group = f"process group {pg}" + (f" ({collective.pg_name})" if collective is not None and collective.pg_name else "")
    if collective is None:
        return f"collective #{seq} of {group}"
    return f"{collective.op} #{seq} of {group}, {collective.numel} elements"


def how_it_ended(death: Death) -> str:
    if death.exception:
        return f"ended on an exception: {death.exception}"
    if death.signal is not None:
        return f"was killed by {_signal_name(death.signal)}"
    if death.exit_code is not None:
        return f"exited with status {death.exit_code}"
    return "ended without a word (no exit status was seen: a signal such as SIGKILL, or os._exit)"


def _on(host: str) -> str:
    return f" on {host}" if host else ""


def finding_text(finding: Finding) -> str:
    if isinstance(finding, Death):
        return f"rank {finding.rank}{_on(finding.host)} (pid {finding.pid}) {how_it_ended(finding)}."
    if isinstance(finding, Stall):
        state = {"T": ", its process is stopped (SIGSTOP or a debugger)", "D": ", its process waits on a device or file (state D)",
                 "silent": ", its agent stopped writing (the process is stopped, or frozen holding the interpreter)"}.get(finding.process_state, "")
        if finding.busy:
            state = ", its process still uses CPU or does I/O"
        waiting = "; ".join(f"rank {w.rank}{_on(w.host)} waits in {collective_words(w.collective, w.pg, w.seq)}" for w in finding.waiting)
        verb = "is behind" if finding.busy else "stopped first"
        return (f"stall: rank {finding.rank}{_on(finding.host)} {verb}: it never entered {collective_words(finding.collective, finding.pg, finding.seq)} "
                f"(its last entered #{finding.last_entered}, completed #{finding.last_completed}; no heartbeat for {finding.heartbeat_age:.1f} s{state}); "
                f"{waiting}. No progress for {finding.stalled_for:.1f} s, bound {finding.bound:.1f} s ({finding.bound_source}).")
    shares = ", ".join(f"rank {rank} {share:.0%}" for rank, share in sorted(finding.wait_share.items()))
    return (f"straggler: rank {finding.rank} holds the others back: it came in last in {finding.last_share:.0%} of {finding.collectives} collectives; "
            f"share of time waiting in collectives: {shares}.")


def lines_text(death: Death) -> list[str]:
    """A dead rank's last lines as text lines: a heading that says where they came from, then each line indented, its
    control characters written as visible escapes (a line from the rank cannot drive the terminal or fake a line of
    compat's)."""
    from ..console import visible_line
    from .lines import FROM_WORDS

    if not death.lines:
        return []
    count = len(death.lines)
    heading = (f"rank {death.rank}'s last {count} line{'' if count == 1 else 's'} "
               f"(from {FROM_WORDS.get(death.lines_from, death.lines_from or 'the rank')}):")
    return [heading, *(f"    | {visible_line(line)}" for line in death.lines)]


def finding_said(finding: Finding, prefix: str = "compat launch --watch") -> str:
    """What the watcher says the moment it finds ``finding``: its line and, for a death, the rank's last lines (one
    per line of the text, each behind ``prefix``, the words the first line starts with)."""
    text = finding_text(finding)
    if isinstance(finding, Death):
        text = "\n".join([text, *(f"{prefix}: {line}" for line in lines_text(finding))])
    return text


def kind_of(finding: Finding) -> str:
    return "death" if isinstance(finding, Death) else "stall" if isinstance(finding, Stall) else "straggler"


def death_fix(death: Death) -> str:
    """What to look at for this death: the OOM killer only for a SIGKILL with no message of the rank's own."""
    if death.exception:
        return "it ended on its own exception, the first line of its traceback says where"
    if death.signal == signal.SIGKILL:
        return ("a SIGKILL with no message of its own is most often the kernel's OOM killer (dmesg says so): fewer ranks per node or a smaller "
                "batch; else find what sent it (a scheduler's time or memory limit)")
    if death.signal is not None:
        return f"{_signal_name(death.signal)} came from outside the job or from the rank's own code (a crash: its output shows the fault)"
    if death.exit_code is not None:
        return f"it exited with status {death.exit_code}: its last lines say why"
    return "no exit status was seen: its last lines, and dmesg for the OOM killer"


#: compat watch attached to a job it did not start: it cannot end it, and says how to (after the fix of a stall or death)
NOT_ENDED = ("compat watch did not start this job and does not end it: end it where it was started (Ctrl-C, or kill -TERM, to its "
             "compat launch, which stops every rank), or leave it running to look at it (py-spy dump --pid PID on the rank's host).")


def fix_of(finding: Finding, attached: bool = False) -> str:
    if isinstance(finding, Death):
        fix = FIX["death"].format(rank=finding.rank, how=death_fix(finding))
    else:
        fix = FIX[kind_of(finding)].format(rank=finding.rank)
    return f"{fix} {NOT_ENDED}" if attached and not isinstance(finding, Straggler) else fix


HOOK_SOURCE = "hook"
LAUNCH_PREFIX = "compat launch --watch"
HOOK_WORDS = ("progress from: hook (the Flight Recorder recorded nothing for this backend: compat's own record "
              "of the collectives called through torch.distributed's functions; DDP's gradient all-reduces, called from C++, are not in it)")
HOOK_NOTE = f"{LAUNCH_PREFIX}: {HOOK_WORDS}"


def text_lines(outcome: Any, prefix: str = LAUNCH_PREFIX) -> list[str]:
    """The findings, their fixes and the stacks, one line each, every line starting with ``prefix``."""
    lines = []
    attached = getattr(outcome, "attached", False)
    for finding in outcome.findings:
        lines.append(f"{prefix}: {finding_text(finding)}")
        if isinstance(finding, Death):
            lines.extend(f"{prefix}: {line}" for line in lines_text(finding))
        lines.append(f"{prefix}: fix: {fix_of(finding, attached)}")
    if outcome.findings and HOOK_SOURCE in outcome.sources:
        lines.append(f"{prefix}: {HOOK_WORDS}")
    for stack in outcome.stacks:
        if stack.text:
            lines.append(f"{prefix}: rank {stack.rank}'s Python stack (py-spy dump --pid {stack.pid}):")
            lines.extend(f"    {line}" for line in stack.text.rstrip().splitlines())
        else:
            lines.append(f"{prefix}: rank {stack.rank}'s stack: {stack.error}")
    return lines


def _collective_json(collective: Optional[Collective]) -> Optional[dict[str, Any]]:
    if collective is None:
        return None
    return {"pg": collective.pg, "pg_name": collective.pg_name, "seq": collective.seq, "op": collective.op, "numel": collective.numel,
            "entered": collective.entered}


def finding_json(finding: Finding, attached: bool = False) -> dict[str, Any]:
    base: dict[str, Any] = {"kind": kind_of(finding), "rank": finding.rank, "message": finding_text(finding), "fix": fix_of(finding, attached)}
    if getattr(finding, "host", ""):
        base["host"] = finding.host
    if isinstance(finding, Death):
        base.update(pid=finding.pid, at=finding.at, signal=_signal_name(finding.signal) or None, exit_code=finding.exit_code,
                    exception=finding.exception or None, last_lines=list(finding.lines), lines_from=finding.lines_from or None)
    elif isinstance(finding, Stall):
        base.update(pg=finding.pg, seq=finding.seq, collective=_collective_json(finding.collective), last_entered=finding.last_entered,
                    last_completed=finding.last_completed, heartbeat_age=round(finding.heartbeat_age, 3), process_state=finding.process_state,
                    stalled_for=round(finding.stalled_for, 3), bound=finding.bound, bound_source=finding.bound_source,
                    waiting=[{"rank": w.rank, "pg": w.pg, "seq": w.seq, "collective": _collective_json(w.collective), **({"host": w.host} if w.host else {})}
                             for w in finding.waiting])
    elif isinstance(finding, Straggler):
        base.update(wait_share={str(rank): share for rank, share in sorted(finding.wait_share.items())}, last_share=finding.last_share,
                    collectives=finding.collectives)
    return base


def watch_json(outcome: Any) -> dict[str, Any]:
    """The watch-v1 document; compat watch's (attached) also says ``"attached": true`` and its job_status is null."""
    attached = getattr(outcome, "attached", False)
    document = {"schema_version": SCHEMA_VERSION, "job_status": outcome.job_status, "exit_status": outcome.exit_status,
                "ended_by_watch": outcome.ended_by_watch, "sources": list(outcome.sources), "left_running": list(outcome.left),
                "findings": [finding_json(f, attached) for f in outcome.findings],
                "resolved": [finding_json(f, attached) for f in getattr(outcome, "resolved", ())],
                "stacks": [{"rank": s.rank, "pid": s.pid, "text": s.text or None, "error": s.error or None} for s in outcome.stacks],
                "interrupted": _signal_name(outcome.interrupted) or None}
    if attached:
        document["attached"] = True
    return document
