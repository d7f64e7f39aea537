"""compat doctor: compat check's static checks, the import probes (children with a deadline), and with --live real
ranks (an allreduce, a Trainer step, with --fabric the collectives swept over sizes and host pairs); with --hostfile
compat check on every host and the differences. The options of --live are checked here, before any rank starts; the
run is cli/_checks.py's (the live service, live/service.py, starts the ranks).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Optional

from ..console import visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, UsageError
from . import _checks
from ._options import output_options, port_int, positive_float, positive_int, target_options, zero_or_more_int

if TYPE_CHECKING:
    from ..options import ChecksArgs, LiveArgs

DESCRIPTION = ("Inspect an environment and name the cause and the fix of every problem. Imports of the stack run in child "
               "processes with a timeout. Exit 0 no failure, 1 failures, 2 tool error.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target_options(parser, python="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)")
    _checks.common_arguments(parser)
    parser.add_argument("--import-timeout", type=positive_float, default=120.0, metavar="S", help="seconds each part of the import probe (torch, IPEX, the bindings) may take (default 120)")
    _live_arguments(parser)
    output_options(parser)


def _live_arguments(parser: argparse.ArgumentParser) -> None:
    """--live and the options of the live run (its launcher's choices read from the launchers registry: doctor's
    arguments are made on its first use only)."""
    from ..launchers import names
    from ..launchers.interface import LIVE

    live = parser.add_argument_group("live validation (--live)")
    live.add_argument("--live", action="store_true", help="start real ranks: a 2-rank allreduce (fp32, bf16, bandwidth) and a short Trainer step")
    live.add_argument("--launcher", choices=names(LIVE), default=None,
                      help="how the ranks start (default: srun inside an srun step, where the allocation gives the layout; else spawn: compat starts them; "
                      "ray: once per node as Ray's worker of that node, the layout from Ray's NODE_RANK, WORLD_SIZE and MASTER_ADDR); "
                      "without --live: the launcher oneccl.launcher judges and the fixes' compat env names, as compat check --launcher")
    live.add_argument("--backend", choices=["auto", "ccl", "gloo"], default="auto", help="auto (default): ccl when the oneCCL bindings register it, else gloo")
    live.add_argument("--live-timeout", type=positive_float, default=None, metavar="S",
                      help="hard limit for the whole live run (default 120 s; 300 s with --fabric)")
    live.add_argument("--no-trainer", action="store_true", help="only the allreduce, no Trainer step")
    live.add_argument("--steps", type=positive_int, default=3, metavar="K", help="Trainer steps (default 3)")
    live.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="nodes in the run (torchrun/spawn: run compat doctor --live on each)")
    live.add_argument("--node-rank", type=zero_or_more_int, default=0, metavar="R", help="this node's index, 0..N-1")
    live.add_argument("--master-addr", metavar="HOST", help="rendezvous address, node 0 (default 127.0.0.1, or the hostfile's first host)")
    live.add_argument("--master-port", type=port_int, metavar="PORT", help="rendezvous port (default: a free one; required with --nnodes > 1)")
    live.add_argument("--hostfile", metavar="FILE", help="the hosts: a hostfile or a Slurm node list, node[01-16]; with --live, mpirun starts --nproc-per-node ranks on each; without --live, the static preflight on every host")
    live.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
    live.add_argument("--run-dir", metavar="DIR", help="where the ranks write their results (mpirun --hostfile: a folder every node sees)")
    live.add_argument("--rsh", metavar="PROG", help="the remote shell that reaches the hostfile's hosts, called like ssh (default: "
                      "$I_MPI_HYDRA_BOOTSTRAP_EXEC, $OMPI_MCA_plm_rsh_agent, else ssh); also for doctor --hostfile without --live")
    live.add_argument("--fabric", action="store_true",
                      help="also sweep allreduce, allgather, reduce_scatter, broadcast and all_to_all over message sizes (fp32 and bf16), "
                      "every result checked exactly, bus bandwidth as nccl-tests defines it")
    live.add_argument("--sizes", metavar="LIST", help="--fabric's message sizes, e.g. 1K,64K,4M (default: 1 KiB up by powers of 4 to 16 MiB, bounded by memory)")
    live.add_argument("--pairs", metavar="MODE", help="--fabric across hosts: which pairs of hosts to measure: all (default; N-1 rounds "
                      "for N hosts), ring (N pairs, 2-3 rounds: finds a slow host) or sample:K (the ring plus K rounds drawn from all)")
    live.add_argument("--pair-deadline", type=positive_float, default=None, metavar="S",
                      help="--fabric across hosts: seconds each pair of hosts may take before it is named as not answering (default 30)")
    live.add_argument("--fabric-deadline", default=None, metavar="S",
                      help="--fabric: seconds the pairs and the sweep may take in all, 1 to 3600, e.g. 90 or 90.5 (default 60: 4 hosts in "
                      "under 2 minutes in all); the pairs "
                      "come first, the sweep is sized to the slowest link they found, and what did not fit is named")
    live.add_argument("--report", metavar="FILE.html", help="--fabric: also write one self-contained HTML page (no network needed to open it): "
                      "the pair heat-map, bus bandwidth against size, the memory-copy line and the findings (needs matplotlib: the report extra)")
    live.add_argument("--no-rank-env", action="store_true",
                      help="start the ranks without RANK/WORLD_SIZE (spawn, mpirun): reproduces the every-rank-trains-alone mistake")



def build(ns: argparse.Namespace) -> ChecksArgs:
    return _checks.build(ns, _live_args)


def _live_args(ns: argparse.Namespace) -> Optional[LiveArgs]:
    """--live's options, each checked on its own; without --live, any of them is refused."""
    from ..options import LiveArgs

    if ns.live:
        timeout = ns.live_timeout if ns.live_timeout is not None else FABRIC_LIVE_TIMEOUT_S if ns.fabric else LIVE_TIMEOUT_S
        return LiveArgs(ns.launcher, ns.backend, timeout, not ns.no_trainer, ns.steps, ns.nnodes, ns.node_rank, ns.master_addr,
                        ns.master_port, ns.mpirun, ns.run_dir, not ns.no_rank_env, ns.fabric, _sizes(ns.sizes, ns.fabric),
                        _pairs(ns.pairs, ns.fabric), _report(ns.report, ns.fabric), _pair_deadline(ns.pair_deadline, ns.fabric),
                        _fabric_deadline(ns.fabric_deadline, ns.fabric))
    if ns.fabric or ns.sizes or ns.pairs or ns.pair_deadline is not None or ns.fabric_deadline is not None:
        raise UsageError("--fabric, --sizes, --pairs, --pair-deadline and --fabric-deadline measure the ranks: they go with compat doctor --live.", "Add --live.")
    if ns.report:
        raise UsageError("--report draws what compat doctor --live --fabric measures: it goes with them.", "Add --live --fabric.")
    return None


LIVE_TIMEOUT_S = 120.0  # compat doctor --live's default --live-timeout
FABRIC_LIVE_TIMEOUT_S = 300.0  # with --fabric: the sweep to 16 MiB and the pair rounds (91 s in all on 4 namespace hosts here)


def _fabric_only(option: str, purpose: str, fabric: bool) -> None:
    """An option of the --fabric test given without --fabric: one sentence, exit 2."""
    if not fabric:
        raise UsageError(f"{option} {purpose}.", f"Add --fabric, or drop {option}.")


def _sizes(text: Optional[str], fabric: bool) -> tuple[int, ...]:
    if text is None:
        return ()
    _fabric_only("--sizes", "sets the sizes of the --fabric sweep", fabric)
    from ..live.fabric import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass sizes like --sizes 1K,64K,4M (bytes, K = 1024, M = 1024 K, G = 1024 M).") from None


def _report(path: Optional[str], fabric: bool) -> Optional[str]:
    """--report FILE.html, checked before any rank starts: it goes with --fabric, its folder exists, and matplotlib (the
    report extra, imported on this path only) is installed."""
    if path is None:
        return None
    _fabric_only("--report", "draws the --fabric measurements", fabric)
    return report_file(path, "fabric.html")


def report_file(path: str, example: str) -> str:
    """A --report FILE.html checked before anything runs (doctor's fabric page, launch --watch's timeline): a file in an
    existing folder that takes a new file, and matplotlib (the report extra, imported on this path only) installed."""
    folder = os.path.dirname(os.path.abspath(path))
    if not path or not os.path.isdir(folder) or os.path.isdir(path):
        raise UsageError(f"--report {visible(path[:200])} is not a file in an existing folder.", f"Pass a file name such as --report {example}.")
    _probe_folder(folder, path)
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise UsageError("--report draws its charts with matplotlib, which is not installed in compat's environment.",
                         "Install it (pip install 'compatmatrix[report]', or pip install matplotlib), then run again.")
    return path


def _probe_folder(folder: str, path: str) -> None:
    """The report's folder takes a file (created, written, removed: what _write_report does at the end), before any rank
    starts: a folder that cannot be written would otherwise fail after the whole run, with its findings lost."""
    import tempfile

    try:
        handle, probe = tempfile.mkstemp(prefix=".compat-report-probe-", suffix=".html", dir=folder)
        try:
            os.write(handle, b"<!-- compat probe -->")
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--report {visible(path[:200])} cannot be written: its folder {visible(folder[:200])} refuses a new file "
                         f"({exc.strerror or exc.__class__.__name__}).",
                         "Pass --report a file in a folder you can write to (e.g. --report ./fabric.html), then run again.") from None


PAIR_DEADLINE_S = 30.0  # --pair-deadline's default: a pair test takes ~0.3 s on a healthy link, ~1 s through 10 Mbit/s


def _pair_deadline(seconds: Optional[float], fabric: bool) -> float:
    if seconds is None:
        return PAIR_DEADLINE_S
    _fabric_only("--pair-deadline", "bounds each pair of hosts of the --fabric test", fabric)
    if seconds > 3600:
        raise UsageError(f"--pair-deadline {seconds:g} is more than an hour.", "Pass a number of seconds up to 3600, e.g. --pair-deadline 60.")
    return seconds


FABRIC_DEADLINE_RESERVE_S = 30.0  # of --live-timeout, kept beside --fabric-deadline: the ranks' start and the Trainer step


def _fabric_deadline(text: Optional[str], fabric: bool) -> Optional[float]:
    if text is None:
        return None
    _fabric_only("--fabric-deadline", "bounds the --fabric measurements", fabric)
    from ..live.fabric import parse_deadline

    try:
        return parse_deadline(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass whole or decimal seconds from 1 to 3600, e.g. --fabric-deadline 120.") from None


def fabric_deadline_for(asked: Optional[float], live_timeout: float) -> float:
    """--fabric-deadline as the run uses it: the one asked (it must fit in --live-timeout beside the ranks' start and the
    Trainer step), else live/fabric.FABRIC_DEADLINE_S, shortened to fit a shorter --live-timeout."""
    from ..live.fabric import FABRIC_DEADLINE_S

    room = live_timeout - FABRIC_DEADLINE_RESERVE_S
    if asked is None:
        return max(5.0, min(FABRIC_DEADLINE_S, room))
    if asked > room:
        raise UsageError(f"--fabric-deadline {asked:g} does not fit in --live-timeout {live_timeout:g} beside the {FABRIC_DEADLINE_RESERVE_S:g} s "
                         "the ranks' start and the Trainer step take.",
                         f"Pass --fabric-deadline {max(1, int(room))} or less, or --live-timeout {int(asked + FABRIC_DEADLINE_RESERVE_S) + 1} or more.")
    return asked


def _pairs(text: Optional[str], fabric: bool) -> str:
    if text is None:
        return "all"
    if not fabric:
        raise UsageError("--pairs chooses the host pairs of the --fabric test.", "Add --fabric, or drop --pairs.")
    from ..live.fabric import parse_pair_mode

    try:
        mode = parse_pair_mode(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass --pairs all, --pairs ring or --pairs sample:4.") from None
    return mode.kind if mode.kind != "sample" else f"sample:{mode.rounds_drawn}"


def _preflight_hosts(given: str) -> list[str]:
    """--hostfile's hosts (doctor --hostfile, doctor --live --hostfile): a hostfile, or (no such file) a Slurm node list
    such as node[01-16], read by the one route both take (hosts.read_host_list)."""
    from ..hostlist import HostfileError, read_host_list

    try:
        return list(dict.fromkeys(name for name, _ in read_host_list(given)))
    except HostfileError as exc:
        raise UsageError(visible(str(exc)), exc.fix) from None


def _run_hosts(args: ChecksArgs) -> int:
    """compat doctor --hostfile FILE [--rsh PROG]: compat check on every host through the remote shell, and the differences."""
    from ..environment.snapshot import take_snapshot
    from ..hosts import collect, compare, own_addresses, remote_command, routes_from_here
    from ..launchers.mpirun import remote_shell
    from ..render import emit
    from ..render.json import findings_json
    from ..render.text import findings_header, render_findings

    assert args.hostfile is not None
    hosts = _preflight_hosts(args.hostfile)
    rsh, source = remote_shell(os.environ, args.rsh)
    answers = collect(hosts, rsh, remote_command(args.target.python, args.ranks_per_node, args.launcher), os.environ)
    findings = compare(answers, rsh, source, routes_from_here(own_addresses(answers)), args.target.python, args.launcher)
    snapshot = take_snapshot(args.target.python)

    def document() -> dict:
        data = findings_json("doctor", snapshot, findings)
        data["hosts"] = {a.host: (a.document or {}).get("host") for a in answers}
        return data

    emit(args.output.json, args.output.no_color, document,
         lambda console: render_findings(console, findings_header("doctor", snapshot), findings, args.verbose))
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def run(args: ChecksArgs) -> int:
    if args.hostfile and args.live is None and not args.list_checks:
        return _run_hosts(args)
    return _checks.run(args, lambda: _live_options(args))


def _live_options(args: ChecksArgs):
    """doctor --live's options for the live service: the launcher (srun inside an srun step, else spawn, unless given)
    and the layout of the ranks, every combination that cannot run refused before any rank starts."""
    from ..launchers.interface import RankLayout
    from ..live.service import LiveOptions

    assert args.live is not None
    live, layout_notes, layout_hosts = _layout(args, args.live)
    _refuse_impossible_counts(live)
    _refuse_impossible_hosts(args, live)
    topology = RankLayout(args.ranks_per_node, live.nnodes, live.node_rank, live.master_addr, live.master_port, args.hostfile, layout_hosts)
    return LiveOptions(launcher=live.launcher, topology=topology, backend=live.backend, timeout=live.timeout, trainer=live.trainer,
                       steps=live.steps, mpirun=live.mpirun, rank_env=live.rank_env, run_dir=live.run_dir, bf16=args.bf16, rsh=args.rsh,
                       layout_notes=layout_notes, fabric=live.fabric, fabric_sizes=live.sizes, pairs=live.pairs,
                       pair_deadline=live.pair_deadline, fabric_deadline=fabric_deadline_for(live.fabric_deadline, live.timeout) if live.fabric else 0.0)


def _layout(args: ChecksArgs, live: LiveArgs) -> tuple[LiveArgs, tuple[str, ...], tuple[str, ...]]:
    """(live with its launcher chosen and, under srun, the allocation's nodes; the notes on that choice; srun: the
    allocation's hosts, node by node, which the live report names)."""
    from ..record import replace

    layout_notes: tuple[str, ...] = ()
    if live.launcher is None:  # inside an srun step the allocation says where the ranks go; elsewhere compat starts them
        from ..launchers.srun import in_step

        live = replace(live, launcher="srun" if in_step(os.environ) else "spawn")
        if live.launcher == "srun":
            layout_notes = ("srun: chosen because compat runs as a task of an srun step (--launcher spawn to start only this node's ranks)",)
    if live.launcher == "ray":  # Ray's worker of this node: the layout from the variables Ray Train gives it
        from ..launchers.ray import ray_layout

        if live.nnodes != 1 or live.node_rank != 0 or args.hostfile:
            raise UsageError("Under ray the nodes and this node's rank come from Ray's variables, not from --nnodes/--node-rank/--hostfile.",
                             "Drop them: compat doctor --live --launcher ray reads NODE_RANK, WORLD_SIZE and MASTER_ADDR itself.")
        placed, notes = ray_layout(os.environ, args.ranks_per_node, live.master_addr, live.master_port)
        return replace(live, nnodes=placed.nnodes, node_rank=placed.node_rank, master_addr=placed.master_addr,
                       master_port=placed.master_port), notes, ()
    if live.launcher != "srun":
        return live, layout_notes, ()
    from ..launchers.srun import allocation_layout

    if live.nnodes != 1 or live.node_rank != 0 or args.hostfile:
        raise UsageError("Under srun the nodes and this node's rank come from the allocation, not from --nnodes/--node-rank/--hostfile.",
                         "Drop them: srun --ntasks-per-node=1 compat doctor --live reads SLURM_NODEID and the node list itself.")
    allocated, notes = allocation_layout(os.environ, args.ranks_per_node, live.master_addr, live.master_port)
    live = replace(live, nnodes=allocated.nnodes, node_rank=allocated.node_rank, master_addr=allocated.master_addr, master_port=allocated.master_port)
    return live, layout_notes + notes, allocated.hosts


def _refuse_impossible_counts(live: LiveArgs) -> None:
    if live.nnodes < 1 or not 0 <= live.node_rank < live.nnodes:
        raise UsageError("--node-rank must be between 0 and --nnodes - 1.", "Pass --nnodes N and a --node-rank below N.")
    if live.timeout <= 0 or live.steps < 1:
        raise UsageError("--live-timeout and --steps must be positive.", "Pass e.g. --live-timeout 120 --steps 3.")
    if live.fabric:
        from ..live.service import init_timeout_for

        group_timeout = init_timeout_for(live.timeout)  # the ranks wait for a round's pairs on their own group's timeout
        if live.pair_deadline > group_timeout - 5:
            raise UsageError(f"--pair-deadline {live.pair_deadline:g} does not fit in the ranks' own timeout of {group_timeout:g} s "
                             f"(half of --live-timeout, at most 60 s), which the other ranks wait on while a pair runs.",
                             f"Pass --pair-deadline {max(1, int(group_timeout - 5))} or less, or a longer --live-timeout.")


def _refuse_impossible_hosts(args: ChecksArgs, live: LiveArgs) -> None:
    from ..launchers import LAUNCHERS
    from ..launchers import names as launcher_names
    from ..launchers.interface import HOSTFILE, LIVE, UNMAPPED

    across = launcher_names(HOSTFILE)  # the launchers that start other hosts' ranks themselves
    if args.hostfile and live.launcher not in across:
        raise UsageError(f"--hostfile goes with --launcher {' or '.join(across)}.",
                         f"Add --launcher {across[0]}, or use --nnodes/--node-rank/--master-addr with {' or '.join(n for n in launcher_names(LIVE) if n not in across)}.")
    if not live.rank_env and UNMAPPED not in LAUNCHERS[live.launcher].capabilities:
        raise UsageError(f"--no-rank-env cannot apply to {live.launcher}: {live.launcher} always sets RANK/WORLD_SIZE.",
                         f"Use --launcher {' or '.join(launcher_names(UNMAPPED))}.")
    if live.master_port is not None and not 0 < live.master_port < 65536:
        raise UsageError("--master-port must be between 1 and 65535.", "Pass a free TCP port, e.g. 29500.")
    if live.run_dir and os.path.exists(live.run_dir) and not os.path.isdir(live.run_dir):
        raise UsageError(f"--run-dir {live.run_dir} is not a folder.", "Pass a folder (it is created if missing) that every node sees at the same path.")
    if args.hostfile:
        from ..hostlist import NODELIST_OR_FILE, is_node_list

        if is_node_list(args.hostfile):  # node[01-16]: expanded as doctor --hostfile expands it (hosts.read_host_list), refused here if it is none
            _preflight_hosts(args.hostfile)
        elif not os.path.isfile(args.hostfile):
            raise UsageError(f"--hostfile {visible(args.hostfile[:200])} is not a readable file.", NODELIST_OR_FILE)
    if args.rsh and live.launcher not in across:
        one_per_node = " and ".join(n for n in launcher_names(LIVE) if n not in across)
        raise UsageError(f"--rsh with --live goes with --launcher {' or '.join(across)} ({one_per_node} run one compat per node).",
                         f"Add --launcher {across[0]} --hostfile FILE.")
