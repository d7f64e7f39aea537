"""The data of compat launch --watch --report's timeline (render/watch_html.py draws it): per rank the collectives it
entered, each as a mark from the time it entered to the time it could leave, with the findings' moments. Pure:
views in, a document of plain values (JSON's kinds) out.

What a mark says: ``entered`` is the rank's own time of entering (the Flight Recorder's or the hook's); the Flight
Recorder keeps no time of leaving that the agent reads, so ``left`` is the time the LAST rank entered that collective
(no rank can leave it before then: the wait the straggler judgement measures), given only once the rank's heartbeats
say it completed; a collective it had not completed when the watch ended is open (``left`` None: drawn to the end).

Bounded: at most MAX_RANKS ranks (those the findings name first, then the lowest) and MAX_MARKS marks per rank (the
last TAIL_MARKS, and an even sample of the ones before them); the document says what was left out. The watcher keeps
the last service.KEEP_COLLECTIVES collectives of each rank: older ones are not in it either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from .judge import Death, RankView, Stall, Straggler

MAX_RANKS = 32
MAX_MARKS = 240
TAIL_MARKS = 80  # the newest marks of a rank are all drawn: the finding is at the end
MAX_OPS = 8  # ops drawn each in a colour of their own; the others share "other"
OTHER = "other"


def _sample(count: int) -> tuple[list[int], int]:
    """The indexes of ``count`` marks drawn (all of the last TAIL_MARKS, every step-th before them) and the step (1: all)."""
    if count <= MAX_MARKS:
        return list(range(count)), 1
    head = count - TAIL_MARKS
    step = -(-head // (MAX_MARKS - TAIL_MARKS))
    return list(range(0, head, step)) + list(range(head, count)), step


def _named(findings: Sequence[Any]) -> list[int]:
    """The ranks the findings name, in their order (the stopped rank, those waiting, the dead, the straggler)."""
    named: list[int] = []
    for finding in findings:
        named.append(finding.rank)
        if isinstance(finding, Stall):
            named.extend(w.rank for w in finding.waiting)
    return list(dict.fromkeys(named))


def timeline_of(views: Sequence[RankView], end: float, findings: Sequence[Any] = (), finding_at: Optional[float] = None) -> dict[str, Any]:
    """The timeline document of ``views`` up to ``end`` (time.time()): times in seconds from the first collective any
    rank entered (``start``, seconds since the epoch)."""
    views = [view for view in views if view.beats]
    entered_by: dict[tuple[str, int], float] = {}
    for view in views:
        for collective in view.collectives:
            key = (collective.pg, collective.seq)
            entered_by[key] = max(entered_by.get(key, collective.entered), collective.entered)
    firsts = [view.collectives[0].entered for view in views if view.collectives] or [min((view.beats[0].t for view in views), default=end)]
    start = min(firsts)
    ops: dict[str, int] = {}
    order = _named(findings)
    chosen = sorted(views, key=lambda view: (order.index(view.rank) if view.rank in order else len(order), view.rank))[:MAX_RANKS]
    ranks = []
    for view in sorted(chosen, key=lambda view: view.rank):
        completed = {pg: done for pg, (_entered, done) in view.last.progress.items()}
        indexes, step = _sample(len(view.collectives))
        marks = []
        for index in indexes:
            collective = view.collectives[index]
            op = collective.op if collective.op in ops or len(ops) < MAX_OPS else OTHER
            number = ops.setdefault(op, len(ops))
            done = collective.seq <= completed.get(collective.pg, -1)
            left = max(entered_by[(collective.pg, collective.seq)], collective.entered) if done else None
            marks.append([round(collective.entered - start, 6), None if left is None else round(left - start, 6), number, collective.seq, collective.pg])
        gone = view.process.gone_at if not view.process.alive else None
        ranks.append({"rank": view.rank, "host": view.last.host, "known": len(view.collectives), "drawn": len(marks), "step": step,
                      "marks": marks, "gone": None if gone is None else round(gone - start, 6),
                      "last_progress": round(view.last_change() - start, 6)})
    stall = next((f for f in findings if isinstance(f, Stall)), None)
    deaths = [f for f in findings if isinstance(f, Death)]
    straggler = next((f for f in findings if isinstance(f, Straggler)), None)
    return {"start": start, "end": round(end - start, 6), "ops": list(ops), "ranks": ranks, "ranks_known": len(views),
            "max_ranks": MAX_RANKS, "max_marks": MAX_MARKS, "tail_marks": TAIL_MARKS,
            "finding_at": None if finding_at is None else round(finding_at - start, 6),
            "stall": None if stall is None else {"rank": stall.rank, "seq": stall.seq, "pg": stall.pg, "stopped_at": round(stall.stopped_at - start, 6),
                                                  "waiting": [w.rank for w in stall.waiting]},
            "deaths": [{"rank": d.rank, "at": round(d.at - start, 6)} for d in deaths],
            "straggler": None if straggler is None else straggler.rank}

