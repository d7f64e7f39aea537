"""compat launch's watch options and the watched run: its arguments (added to launch's parser), their checks, and
``launch_watched``, which runs the command's launch under watch/service.py and writes the findings (text to stderr,
or --json to stdout). Kept out of cli/launch.py: the launch command only hands over its run.

Side effects: ``launch_watched`` runs the job (through the callable it is given) and writes to stdout / stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional

from ..errors import CompatError, UsageError

WATCHED = ("torchrun", "spawn", "mpirun", "srun")  # the launchers --watch takes
MIN_STALL_AFTER_S = 3.0  # a few heartbeats and reads: a shorter bound names a healthy rank
LAUNCHERS = ("spawn",)  # added to compat launch's --launcher choices: compat starts the ranks itself (watch/spawn.py)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds above 0 and at most a week")
    return value


def watch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="store_true",
                        help="watch the running job: a small agent in each rank, a watcher beside it; a stalled rank (and the collective the others wait "
                        "in), a dead rank or a straggler is named, and on a stall or a death the job is ended")
    parser.add_argument("--watch-only", action="store_true", help="as --watch, but keep a stalled job running (to attach a debugger)")
    stall_after_argument(parser, "with --watch: " + STALL_AFTER_HELP)
    parser.add_argument("--watch-dir", metavar="DIR",
                        help="with --watch: the run folder the ranks' agents write their rings to (created if missing, kept after the job); across hosts it must be "
                        "one every host sees at the same path (a shared file system), and is required (default: a private temporary folder on this host)")
    parser.add_argument("--json-file", metavar="PATH",
                        help="with --watch: write the findings' JSON document (watch-v1.json) to this file, leaving stdout to the job (--json writes it to stdout after the job's own output)")
    parser.add_argument("--report", metavar="FILE.html",
                        help="with --watch: also write one self-contained HTML page when the job ends: a timeline per rank of the collectives it entered, "
                        "the stall, death or straggler marked, and the findings (needs matplotlib: the report extra)")


def watch_args_of(ns: argparse.Namespace) -> tuple[bool, bool, Optional[float], Optional[str], Optional[str]]:
    """(watch, watch_only, stall_after, watch_dir, json_file) of launch's namespace, checked."""
    watch = bool(ns.watch or ns.watch_only)
    for option, value in (("--watch-dir", ns.watch_dir), ("--json-file", ns.json_file)):
        if value is not None and not watch:
            raise UsageError(f"{option} goes with --watch.", f"Add --watch, or drop {option}.")
    several = ns.hostfile is not None or ns.nnodes > 1
    if watch and several and ns.watch_dir is None:
        raise UsageError("Across hosts the watcher reads every rank's ring from one folder, and none was named.",
                         "Add --watch-dir DIR, a folder every host sees at the same path (a shared file system), the same on every node.")
    if watch and ns.launcher == "srun" and ns.watch_dir is None:
        raise UsageError("Under srun each task runs on a node of the allocation, which need not be this host, and the watcher reads every "
                         "rank's ring from one folder: none was named.",
                         "Add --watch-dir DIR, a folder every node of the allocation sees at the same path (a shared file system).")
    if ns.watch_dir is not None and os.path.exists(ns.watch_dir) and not os.path.isdir(ns.watch_dir):
        raise UsageError(f"--watch-dir {ns.watch_dir} is not a folder.", "Pass a folder (it is created if missing).")
    if watch and ns.watch_dir is not None and os.path.isdir(ns.watch_dir):
        check_rings_left(ns.watch_dir, own_ranks(ns))
    if watch and ns.json_file is not None:
        check_json_file(ns.json_file)
    check_stall_after(ns.stall_after)
    if ns.stall_after is not None and not watch:
        raise UsageError("--stall-after goes with --watch.", "Add --watch, or drop --stall-after.")
    if ns.launcher == "spawn" and not watch:
        raise UsageError("compat launch starts ranks itself (--launcher spawn) only to watch them.", "Add --watch, or use --launcher torchrun.")
    if watch and ns.launcher not in WATCHED:
        raise UsageError(f"--watch works with --launcher {' or '.join(WATCHED)} so far, not {ns.launcher}.", "Use --launcher torchrun, or drop --watch.")
    if watch and ns.print_:
        raise UsageError("--watch runs the job; --print only shows it.", "Drop one of --watch and --print.")
    return watch, bool(ns.watch_only), ns.stall_after, ns.watch_dir, ns.json_file


def check_stall_after(seconds: Optional[float]) -> None:
    """Refuse a --stall-after shorter than a heartbeat may take to be seen (compat launch --watch, compat watch)."""
    if seconds is not None and seconds < MIN_STALL_AFTER_S:
        raise UsageError(f"--stall-after {seconds:g} is shorter than the {MIN_STALL_AFTER_S:g} s a heartbeat may take to be seen.",
                         f"Give --stall-after {MIN_STALL_AFTER_S:g} or more.")


def stall_after_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--stall-after", type=_seconds, metavar="SECONDS", help=help_text)


STALL_AFTER_HELP = ("a stall is no progress for this long while a rank waits in a collective another has not entered "
                    "(default: 5 times the longest gap between the job's collectives, at least 10 s for a stopped rank, 60 s for an idle one; "
                    "at least 300 s for a rank still using CPU or doing I/O)")


def own_ranks(ns: argparse.Namespace) -> Optional[range]:
    """The ranks this compat starts: torchrun across nodes, this node's (its --node-rank's block of --nproc-per-node);
    None (every rank) when one compat starts them all (one host, mpirun)."""
    if ns.launcher == "torchrun" and ns.nnodes > 1:
        return range(ns.node_rank * ns.nproc_per_node, (ns.node_rank + 1) * ns.nproc_per_node)
    return None


def check_rings_left(folder: str, ranks: Optional[range]) -> None:
    """Refuse a run folder whose ring files would leave the watch blind: a rank's agent writes only a regular file of
    its own that no other process holds (watch/site/sitecustomize.py), and skips any other without a word. A ring that
    is a link, a device or a hard link (``planted_rings``), or that a running process of another job holds (for the
    ranks this compat starts; across torchrun nodes the other nodes' ranks hold theirs), is named before the job starts."""
    from .ring import RING_NAME, lock_held

    listed = planted_rings(folder, "--watch-dir", "that rank's agent would not write it, and the watch would not see the rank",
                           "Remove it, or pass an empty --watch-dir.")
    for entry in listed:
        match = RING_NAME.fullmatch(entry.name)
        if (ranks is None or int(match.group(1)) in ranks) and lock_held(Path(entry.path)):
            raise UsageError(f"--watch-dir {folder} holds {entry.name}, which a running process holds (another job writing to this folder?): "
                             "this job's rank would not write it, and the watch would not see the rank.",
                             "Give each job its own --watch-dir.")


def planted_rings(folder: str, what: str, why: str, fix: str) -> list[os.DirEntry]:
    """The ring files of a run folder (``rank-N.ring``), each a regular file of its own; UsageError naming the first
    that is a link, a device or a hard link (``what``: how the folder was given; ``why``: what that would do; ``fix``)
    and a folder that cannot be read. Bounded: the folder's first 65,536 entries."""
    import itertools
    import stat

    from .ring import RING_NAME

    try:
        with os.scandir(folder) as entries:
            listed = list(itertools.islice(entries, 65_536))
    except OSError as exc:
        raise UsageError(f"Cannot read {what} {folder}: {exc.strerror or exc}.", "Pass a folder you may read and write.") from None
    rings = []
    for entry in listed:
        if RING_NAME.fullmatch(entry.name) is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise UsageError(f"{what} {folder} holds {entry.name}, which is not a file of its own (a link, a device or a hard link): {why}.", fix)
        rings.append(entry)
    return rings


def check_json_file(path: str) -> None:
    """Refuse, before the job runs, a --json-file that could not be written after it: a folder, or a path whose folder
    is missing or not writable."""
    if os.path.isdir(path):
        raise UsageError(f"--json-file {path} is a folder.", "Pass a file's path (it is written when the job ends).")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--json-file {path}: its folder {folder} is missing or not writable.", "Pass a path in a folder you may write to.")


def launch_watched(run: Optional[Callable[[Mapping[str, str]], int]], base_env: Mapping[str, str], args: Any, say: Callable[[str], None],
                   report: Optional[Callable[[Mapping[str, Any], Mapping[str, Any]], None]] = None) -> int:
    """Run ``run`` watched (None: --launcher spawn, compat starts the ranks); write the findings; the exit status (the
    job's own when nothing is wrong). ``report``: --report's writer, given the JSON document and the timeline
    (watch/timeline.py) once the job has ended (the command's: the page is render/'s)."""
    from .render import finding_said, text_lines, watch_json
    from .service import WatchOptions, watch_launch

    exits: Optional[Mapping[int, int]] = None
    tails = None
    if run is None:
        from .spawn import SpawnRun

        if not args.command:
            raise UsageError("compat launch needs the training command after --.", "Add -- train.py (and its arguments).")
        python = args.python or base_env.get("COMPAT_PYTHON") or sys.executable
        spawn = SpawnRun(args.command, python, args.nproc_per_node, say)
        run, exits, tails = spawn, spawn.exits, spawn.tails
        say(f"compat launch: spawn: {args.nproc_per_node} rank{'' if args.nproc_per_node == 1 else 's'} of {' '.join(args.command)} on this host, started by compat (no CPU binding)")
    pythons = tuple(p for p in (args.python, base_env.get("COMPAT_PYTHON")) if p)
    options = WatchOptions(watch_only=args.watch_only, stall_after=args.stall_after, world=world_of(args), pythons=pythons, folder=args.watch_dir,
                           timeline=report is not None)
    outcome = watch_launch(run, base_env, options, say=say, render=finding_said, exits=exits, tails=tails)

    if outcome.left:
        say(f"compat launch --watch: {len(outcome.left)} process(es) of the job could not be stopped: {', '.join(map(str, outcome.left))}")
    report_failed = False
    if report is not None:
        try:
            report(watch_json(outcome), outcome.timeline or {})
        except CompatError as exc:  # the findings still follow, on stdout / stderr as asked
            say(f"compat launch --watch: {exc}")
            report_failed = True
    if args.json_file:
        try:
            write_json_file(args.json_file, watch_json(outcome))
        except CompatError as exc:  # its folder went away while the job ran: the findings go to stdout, never lost
            from ..console import dump_json

            say(f"compat launch --watch: {exc}; the JSON document follows on stdout")
            print(dump_json(watch_json(outcome)))
            return 2
    if args.json and not args.json_file:
        from ..console import dump_json

        sys.stdout.flush()  # after the job's own output: every process of the job is gone by now
        print(dump_json(watch_json(outcome)))
    else:
        for line in text_lines(outcome):
            say(line)
        if outcome.interrupted is not None:
            import signal

            say(f"compat launch --watch: compat received {signal.Signals(outcome.interrupted).name}: the job was stopped, nothing judged after it")
        elif outcome.resolved and not outcome.findings:
            say(f"compat launch --watch: {len(outcome.resolved)} stall{'' if len(outcome.resolved) == 1 else 's'} resolved while the job ran; "
                f"the job's exit status {outcome.job_status}")
        elif not outcome.findings:
            say(f"compat launch --watch: no finding (progress from: {', '.join(outcome.sources) or 'no rank reported'}); the job's exit status {outcome.job_status}")
    if report_failed:
        return 2
    return outcome.exit_status


def world_of(args: Any) -> Optional[int]:
    """The ranks of the whole job: per node times the nodes (torchrun --nnodes) or the hostfile's hosts (mpirun); None
    under srun, whose nodes are the allocation's (the watcher takes the WORLD_SIZE the ranks' heartbeats say)."""
    if getattr(args, "launcher", None) == "srun":
        return None
    across = getattr(args, "across", None)
    if across is None:
        return args.nproc_per_node
    if across.hostfile:
        return args.nproc_per_node * len(dict.fromkeys(name for name, _ in across.hosts))
    return args.nproc_per_node * across.nnodes


def write_json_file(path: str, document: Mapping[str, Any]) -> None:
    """The document written whole (a temporary file beside it, then renamed over it): a reader never sees half of it."""
    from ..console import dump_json
    from ..errors import CompatError

    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(dump_json(document) + "\n")
        os.replace(temporary, path)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise CompatError(f"Cannot write --json-file {path}: {exc.strerror or exc}.", "Pass a path in a folder you may write to.") from None
