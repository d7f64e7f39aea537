"""srun: Slurm's launcher. Inside an allocation the ranks' layout is the allocation's, read from the SLURM_* variables
Slurm gives every task (typed here, at the edge) and from ``scontrol show hostnames``; nothing is computed by hand.

doctor --live: ``srun --ntasks-per-node=1 compat doctor --live`` runs one compat per node; each starts its node's
ranks itself (as spawn does) with RANK = node rank * ranks-per-node + local rank, the world from the step's node
count, and the master at the step's first host (``scontrol show hostnames``), on a port every node derives from the
job id (``master_port``). The node rank is the node's place in that list (SLURMD_NODENAME), not SLURM_NODEID, which
Slurm may number in another order: node rank 0, and the rendezvous rank 0 serves, is then always on the master (a
``--master-addr`` other than the list's first name keeps SLURM_NODEID: compat cannot tell which node that is).
compat launch: the srun line (``--ntasks-per-node``, ``--cpus-per-task``, ``--cpu-bind=mask_cpu:`` from the CPU plan),
each task mapping SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID to RANK / WORLD_SIZE / LOCAL_RANK in a small ``sh -c``
before it execs the command, by the same rule (``_MAP_RANKS``). Its failures: srun's
``srun: error: HOST: task N: Exited with exit code C`` / ``Killed`` lines.

Side effects: ``scontrol show hostnames`` (a child with a deadline), a PATH lookup of srun.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Optional

from ..errors import UsageError
from ..values import quoted
from .interface import (
    BOUND,
    ENV,
    LIVE,
    WRAPPER_NAME,
    BoundJob,
    CclEnv,
    Failures,
    Invocation,
    Launch,
    LaunchError,
    LiveJob,
    PathEntries,
    RankLayout,
    Tool,
    ToolRequest,
    compat_env_command,
    ofi_exports,
    one_program,
)
from .spawn import SPAWN

SCONTROL_DEADLINE_S = 15.0  # `scontrol show hostnames` asks nothing of slurmctld, but a broken install may hang
PORT_BASE = 20000  # master_port: PORT_BASE + SLURM_JOB_ID mod PORT_SPAN, the same on every node of the job
PORT_SPAN = 20000
SLURM_RANK = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")  # what srun gives each task it starts
_MAX_COUNT = 1 << 20  # no allocation has more nodes or tasks per node than this: a larger number is not one
# The SLURM_* counts are capped like the flags they stand for (cli.MAX_COUNT for --nnodes / --node-rank, cli.MAX_PER_NODE
# for --nproc-per-node): a value past them is no allocation, and 4294967295 nodes would be a tuple of that many counts.
MAX_NODES = 1_000_000
MAX_PER_NODE = 8192
SLURM_CAPS = {  # name -> (least, most): what each SLURM_* count the layout reads may be
    "SLURM_NODEID": (0, MAX_NODES - 1), "SLURM_PROCID": (0, MAX_NODES * MAX_PER_NODE - 1), "SLURM_LOCALID": (0, MAX_PER_NODE - 1),
    "SLURM_STEP_NUM_NODES": (1, MAX_NODES), "SLURM_NNODES": (1, MAX_NODES), "SLURM_NTASKS_PER_NODE": (1, MAX_PER_NODE),
    "SLURM_JOB_ID": (1, (1 << 32) - 1),
}
_TASKS_ITEM = re.compile(r"([0-9]{1,7})(?:\(x([0-9]{1,7})\))?")
_TASK_FAILED = re.compile(r"srun: error: (\S+): tasks? ([0-9]+)(?:-[0-9]+)?: (?:Exited with exit code ([0-9]+)|(Killed|Terminated|Segmentation fault|Aborted))")
_SIGNALS = {"Killed": -9, "Terminated": -15, "Segmentation fault": -11, "Aborted": -6}
_FIX = "Run compat inside the allocation as Slurm starts it (srun --ntasks-per-node=1 compat doctor --live), without setting SLURM_* yourself."


def in_step(environ: Mapping[str, str]) -> bool:
    """compat runs as a task of an srun step (auto-detection): Slurm set the step's node id and the task's rank."""
    return bool(environ.get("SLURM_JOB_ID") and environ.get("SLURM_NODEID") is not None and environ.get("SLURM_PROCID") is not None
                and (environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")))


def slurm_count(environ: Mapping[str, str], name: str) -> int:
    """The SLURM_* variable ``name`` as a whole number within SLURM_CAPS[name]; a missing, odd or out-of-range value is a
    usage error naming it and its range."""
    low, high = SLURM_CAPS[name]
    value = environ.get(name)
    if value is None:
        raise UsageError(f"{name} is not set, so compat cannot read the allocation's layout.", _FIX)
    text = value.strip()
    if not text.isascii() or not text.isdigit():
        raise UsageError(f"{name}='{quoted(value)}' is not a whole number of at least {low}, so compat cannot read the allocation's layout.", _FIX)
    number = text.lstrip("0") or "0"
    # past 10 digits it is past every cap: said as out of range without reading it (int() refuses 4300 digits and more)
    if len(number) > 10 or not low <= int(number) <= high:
        raise UsageError(f"{name}={quoted(number)} is outside {low}..{high:,}, so it is no allocation's layout.", _FIX)
    return int(number)


def tasks_per_node(text: str, name: str = "SLURM_TASKS_PER_NODE") -> tuple[int, ...]:
    """Slurm's compressed tasks-per-node list, one count per node: ``2(x3),1`` -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for item in text.strip().split(","):
        match = _TASKS_ITEM.fullmatch(item.strip())
        repeat = int(match.group(2)) if match and match.group(2) else 1
        if not match or not 0 < int(match.group(1)) <= MAX_PER_NODE or not 0 < repeat <= MAX_NODES or len(counts) + repeat > MAX_NODES:
            raise UsageError(f"{name}='{quoted(text)}' is not Slurm's tasks-per-node list (like 2(x3),1).", _FIX)
        counts.extend([int(match.group(1))] * repeat)
    return tuple(counts)


def scontrol_hostnames(nodelist: str, timeout: float = SCONTROL_DEADLINE_S) -> list[str]:
    """``scontrol show hostnames NODELIST``: the node list expanded by Slurm itself, one host per line, in order."""
    from ..environment.child import run_child

    scontrol = shutil.which("scontrol")
    if not scontrol:
        raise UsageError("scontrol is not on PATH, so compat cannot expand the allocation's node list.", "Run compat where Slurm's client commands are on PATH.")
    try:
        result = run_child([scontrol, "show", "hostnames", nodelist], timeout)
    except OSError as exc:
        raise UsageError(f"scontrol could not be started ({exc.strerror}).", "Check Slurm's client installation.") from None
    if result.timed_out:
        raise UsageError(f"scontrol show hostnames did not answer within {timeout:.0f} s.", "Check that Slurm's client commands work on this node (scontrol ping).")
    if result.returncode != 0:
        said = quoted(result.stderr.decode("utf-8", "replace").strip().splitlines()[-1] if result.stderr.strip() else f"exit code {result.returncode}")
        raise UsageError(f"scontrol show hostnames failed: {said}.", _FIX)
    return result.stdout.decode("utf-8", "replace").split()


def allocation_layout(environ: Mapping[str, str], ranks_per_node: int, master_addr: Optional[str] = None, master_port: Optional[int] = None,
                      hostnames: Callable[[str], Sequence[str]] = scontrol_hostnames) -> tuple[RankLayout, tuple[str, ...]]:
    """doctor --live under srun: the layout from the step this task belongs to (one compat per node), and notes that
    say where each number came from. ``master_addr`` / ``master_port``: the user's, kept when given."""
    node_id = slurm_count(environ, "SLURM_NODEID")
    procid = slurm_count(environ, "SLURM_PROCID")
    localid = slurm_count(environ, "SLURM_LOCALID") if environ.get("SLURM_LOCALID") is not None else 0
    nodes_var = "SLURM_STEP_NUM_NODES" if environ.get("SLURM_STEP_NUM_NODES") is not None else "SLURM_NNODES"
    nnodes = slurm_count(environ, nodes_var)
    _one_task_here(environ, node_id, localid, nnodes, nodes_var)
    del procid  # typed above; with one task per node it need not equal SLURM_NODEID (--distribution=arbitrary places task 0 anywhere)
    notes = [f"srun: node {node_id} of {nnodes} ({nodes_var}, SLURM_NODEID), {ranks_per_node} ranks each (--ranks-per-node)"]
    list_var = "SLURM_STEP_NODELIST" if environ.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    # read with --master-addr too: whether the nodes rank by the list or by SLURM_NODEID must be decided alike on every
    # node, from what every node sees the same (the list and the master), never by one node alone
    hosts = _step_hosts(environ, list_var, nnodes, nodes_var, hostnames)
    addr = master_addr
    if addr is not None and addr != hosts[0]:
        # the user's master is not the list's first name: which node it is compat cannot tell, so the node rank stays
        # SLURM_NODEID, and the node Slurm numbers 0 must be the master's (or rank 0 serves a rendezvous no one reaches)
        notes[0] += (f"; --master-addr {quoted(addr, 64)} is not the first host of {list_var} ({quoted(hosts[0], 64)}), so the node rank is "
                     "SLURM_NODEID as Slurm numbers the nodes: the node it numbers 0 must be the master's")
        hosts = []
    else:
        addr = hosts[0]
        node_id, notes = _ranked_by_list(environ, hosts, node_id, f"{nnodes} ({nodes_var})", list_var, ranks_per_node)
    port = master_port
    if port is None:
        port = master_port_of(slurm_count(environ, "SLURM_JOB_ID"))
        notes.append(f"srun: master port {port} = {PORT_BASE} + SLURM_JOB_ID mod {PORT_SPAN} (--master-port to choose another)")
    return RankLayout(ranks_per_node, nnodes, node_id, addr, port, hosts=tuple(hosts)), tuple(notes)


def _one_task_here(environ: Mapping[str, str], node_id: int, localid: int, nnodes: int, nodes_var: str) -> None:
    """UsageError unless the step's tasks per node are known, cover its ``nnodes`` nodes, and this node runs one task
    (this one): compat doctor --live runs once per node and starts the ranks itself."""
    tasks_var = next((n for n in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if environ.get(n) is not None), "")
    if environ.get("SLURM_NTASKS_PER_NODE") is not None:
        per_node = (slurm_count(environ, "SLURM_NTASKS_PER_NODE"),) * nnodes
        tasks_var = "SLURM_NTASKS_PER_NODE"
    elif tasks_var:
        per_node = tasks_per_node(environ[tasks_var], tasks_var)
    else:
        raise UsageError("Neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set, so compat cannot tell how many tasks run per node.", _FIX)
    if node_id >= nnodes:
        raise UsageError(f"SLURM_NODEID={node_id} is not below {nodes_var}={nnodes}.", _FIX)
    if len(per_node) != nnodes:
        raise UsageError(f"{tasks_var} names {len(per_node)} nodes, {nodes_var} {nnodes}.", _FIX)
    if per_node[node_id] != 1 or localid != 0:
        raise UsageError(f"srun started {per_node[node_id]} tasks on this node ({tasks_var}); compat doctor --live runs once per node and "
                         f"starts --ranks-per-node ranks itself.", "Run srun --ntasks-per-node=1 compat doctor --live --ranks-per-node N.")


def _step_hosts(environ: Mapping[str, str], list_var: str, nnodes: int, nodes_var: str, hostnames: Callable[[str], Sequence[str]]) -> list[str]:
    """The step's hosts in its node list's order (scontrol show hostnames); UsageError when the list is no Slurm node
    list or names another number of nodes."""
    nodelist = environ.get(list_var, "")
    if not nodelist.strip() or len(nodelist) > 65536 or nodelist.lstrip().startswith("-") or any(not ch.isprintable() for ch in nodelist):
        raise UsageError(f"{list_var}='{quoted(nodelist)}' is not a Slurm node list.", _FIX)
    hosts = list(hostnames(nodelist.strip()))
    if len(hosts) != nnodes:
        raise UsageError(f"scontrol show hostnames gave {len(hosts)} hosts for {list_var}, {nodes_var} says {nnodes}.", _FIX)
    return hosts


def _ranked_by_list(environ: Mapping[str, str], hosts: Sequence[str], slurm_node_id: int, of_nodes: str, list_var: str,
                    ranks_per_node: int) -> tuple[int, list[str]]:
    """(this node's rank: its place in the step's host list, whose first host is the master; the notes that say so).
    UsageError when that first host is no host name."""
    from ..hostlist import parse_host

    parsed, why = parse_host(hosts[0])
    if parsed is None or "@" in hosts[0] or ":" in hosts[0]:
        raise UsageError(f"The step's first host '{quoted(hosts[0])}' is not a host name ({why or 'it is not one'}).", _FIX)
    # the node rank is this node's place in that list, not SLURM_NODEID: Slurm numbers a step's nodes in its own
    # order (slurm.conf's NodeName order, or the topology's), which need not be the list's; ranked by the list, node
    # rank 0 (and so rank 0, which holds the rendezvous) is on the first host, the master, whatever Slurm's numbering
    me, how = this_node(environ, hosts)
    node_id = hosts.index(me)
    shown_hosts = ", ".join(f"{quoted(host, 64)} (node {i})" for i, host in enumerate(hosts[:16])) + (", ..." if len(hosts) > 16 else "")
    return node_id, [
        f"srun: node {node_id} of {of_nodes}: {quoted(me, 64)} ({how}) is host {node_id} of {list_var}"
        + (f"; Slurm numbers it {slurm_node_id} (SLURM_NODEID)" if slurm_node_id != node_id else "")
        + f", {ranks_per_node} ranks each (--ranks-per-node)",
        f"srun: master {hosts[0]}, the first host of {list_var} (scontrol show hostnames), which holds node rank 0: {shown_hosts}; "
        f"node k runs ranks {ranks_per_node}k to {ranks_per_node}k+{ranks_per_node - 1}",
    ]


def this_node(environ: Mapping[str, str], hosts: Sequence[str]) -> tuple[str, str]:
    """(this node's name as ``hosts`` writes it, where it came from): SLURMD_NODENAME, which slurmd sets in every task
    (srun(1), OUTPUT ENVIRONMENT VARIABLES), else the kernel's host name; each as written, then up to its first dot (a
    fully qualified name, a list of short ones). UsageError when none of them is in ``hosts``. The srun line's task
    script (``_MAP_RANKS``) matches the same way."""
    import socket

    named = (environ.get("SLURMD_NODENAME") or "").strip()
    how = "SLURMD_NODENAME" if named else "the host name; SLURMD_NODENAME is not set"
    name = named or socket.gethostname()
    for candidate in (name, name.split(".", 1)[0]):
        if candidate in hosts:
            return candidate, how + (", up to its first dot" if candidate != name else "")
    listed = quoted(", ".join(hosts[:8]) + (", ..." if len(hosts) > 8 else ""), 200)
    said = f"SLURMD_NODENAME='{quoted(named, 64)}' is not" if named else f"Neither SLURMD_NODENAME nor this host's name ('{quoted(name, 64)}') is"
    raise UsageError(f"{said} among the step's hosts ({listed}), so compat cannot tell this node's place in that list, its node rank.",
                     f"Run it on the hosts scontrol show hostnames names ({listed}), where slurmd sets SLURMD_NODENAME to one of them; or pass "
                     f"--master-addr with the address of the node Slurm numbers 0 (SLURM_NODEID=0), not {quoted(hosts[0], 64)}, so that "
                     "every node takes SLURM_NODEID as its node rank.")


def allocation_master(environ: Mapping[str, str], hostnames: Optional[Callable[[str], Sequence[str]]] = None,
                      python: str = "") -> tuple[Optional[str], int, list[str]]:
    """compat launch --launcher srun: (master, nodes, notes) of the allocation it runs in, when it has several nodes: its
    first host as each task takes MASTER_ADDR (``scontrol show hostnames``), so that the interface reaching it is exported
    (CCL_KVS_IFACE, FI_TCP_IFACE, GLOO_SOCKET_IFNAME) as compat env --master-addr does; (None, 1, ...) in one node's
    allocation or outside one, with a note when the nodes cannot be read (``python``: the training environment's
    interpreter, which the note's compat env names)."""
    text = (environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "").strip()
    if not text:
        return None, 1, []
    if not text.isascii() or not text.isdigit() or len(text) > 10 or not 0 < int(text) <= _MAX_COUNT:  # int() refuses 4300 digits
        return None, 1, [f"srun: SLURM_JOB_NUM_NODES='{quoted(text)}' is not a node count: no interface variable is exported"]
    nnodes = int(text)
    if nnodes == 1:
        return None, 1, []
    nodelist = (environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "").strip()
    why = ""
    hosts: Sequence[str] = ()
    if not nodelist or len(nodelist) > 65536 or nodelist.startswith("-") or any(not ch.isprintable() for ch in nodelist):
        why = "SLURM_JOB_NODELIST is not a Slurm node list"
    else:
        try:
            hosts = (hostnames or scontrol_hostnames)(nodelist)
        except UsageError as exc:
            why = exc.message[:-1] if exc.message.endswith(".") else exc.message
    if not hosts:
        command = compat_env_command(python, "srun", f" --master-addr FIRST_HOST --nnodes {nnodes}")
        return None, nnodes, [f"srun: {nnodes} nodes, but the first host is not known ({why or 'scontrol named none'}): CCL_KVS_IFACE and FI_TCP_IFACE "
                              f"are not exported; {command} before launching sets them"]
    return hosts[0], nnodes, [f"srun: {nnodes} nodes; the master is the allocation's first host {quoted(hosts[0], 64)} (scontrol show hostnames), "
                              "as each task's MASTER_ADDR is taken: the interface that reaches it is exported"]


def master_port_of(job_id: int) -> int:
    """The rendezvous port of a job: the same on every node, computed from the job id alone (the sh form is in
    ``_MAP_RANKS``)."""
    return PORT_BASE + job_id % PORT_SPAN


# each task: RANK / WORLD_SIZE / LOCAL_RANK from srun's, the master from the allocation unless exported, then the command.
# Rank 0 must run on the master. When the master is the first host of the step's list (scontrol show hostnames) - as
# compat launch exports it in an allocation of several nodes (allocation_master), as compat export's sbatch script
# does, or unset and taken here - a task's rank is its node's place in that list times the tasks per node plus its
# local id, not SLURM_PROCID, which follows Slurm's own node numbering (slurm.conf's order, the topology's), not the
# list's. The node is found as this_node finds it: SLURMD_NODENAME, else the host name (uname -n), each as written, then
# up to its first dot; a node found in neither way ends its tasks with one sentence (exit 2), since its keeping
# SLURM_PROCID while the other nodes take the list's ranks would hand out one rank twice. A MASTER_ADDR the user
# exported that is not the list's first name keeps SLURM_PROCID on every node (the host of SLURM_PROCID 0 must be that
# master: which host it names the task cannot tell), as does a SLURM_NTASKS_PER_NODE that is not a count (the same on
# every node of the step). Globbing is off (set -f): the host list is split into words, never expanded as patterns.
# SLURM_JOB_ID, SLURM_NTASKS_PER_NODE and SLURM_LOCALID are checked to be numbers (no leading zero) before the arithmetic
# reads them: bash (the sh of many clusters) evaluates a variable's value in $((...)) as an expression, so a value like
# x[$(cmd)] would run cmd. Under compat launch --watch (COMPAT_WATCH_DIR set) the task marks its rank for the watch's
# agent (COMPAT_WATCH_RANK, compatmatrix/watch/site/sitecustomize.py): the process that carries RANK equal to it is the
# rank, and no other Python process of the task (nor a srun or hydra of another launch) takes the rank's ring
_MAP_RANKS = ('set -f; export WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" LOCAL_WORLD_SIZE="${SLURM_NTASKS_PER_NODE:-1}"; RANK="$SLURM_PROCID"; '
              'list="${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}}"; hosts=""; first=""; '
              'case "$list" in ""|-*) ;; *) hosts="$(scontrol show hostnames "$list")";; esac; '
              'for host in $hosts; do first="$host"; break; done; MASTER_ADDR="${MASTER_ADDR:-$first}"; '
              'if [ -n "$first" ] && [ "$MASTER_ADDR" = "$first" ]; then '
              'case "${SLURM_NTASKS_PER_NODE:-}" in ""|0*|*[!0-9]*|??????????*) ;; *) '
              'case "${SLURM_LOCALID:-}" in ""|0?*|*[!0-9]*|??????????*) '
              'echo "compat: SLURM_LOCALID is not a task number, so this task cannot take its rank from its node; run it as a task srun starts" >&2; exit 2;; esac; '
              'name="${SLURMD_NODENAME:-}"; from=SLURMD_NODENAME; '
              'if [ -z "$name" ]; then name="$(uname -n 2>/dev/null)"; from="the host name, SLURMD_NODENAME is not set"; fi; node=""; '
              'for want in "$name" "${name%%.*}"; do i=0; for host in $hosts; do '
              'if [ -n "$want" ] && [ "$host" = "$want" ]; then node=$i; break 2; fi; i=$((i + 1)); done; done; '
              'if [ -z "$node" ]; then shown=""; for host in $hosts; do shown="$shown${shown:+, }$host"; done; '
              'printf "compat: this node, %s (%s), is not in the node list of the step (%.200s), so its tasks cannot take their ranks from '
              'its place there; run them where slurmd sets SLURMD_NODENAME to a name of that list, or run the srun line with MASTER_ADDR '
              'exported as the host of SLURM_PROCID 0 (by any name but %.64s) to keep SLURM_PROCID\\n" '
              '"$(printf %.64s "$name" | tr -c "[:alnum:]._-" "?")" "$from" "$shown" "$first" >&2; exit 2; fi; '
              'RANK=$((node * SLURM_NTASKS_PER_NODE + SLURM_LOCALID));; esac; fi; export RANK; '
              'if [ -n "${COMPAT_WATCH_DIR:-}" ]; then export COMPAT_WATCH_RANK="$RANK"; fi; '
              'if [ -z "${MASTER_PORT:-}" ]; then case "${SLURM_JOB_ID:-}" in ""|0*|*[!0-9]*|???????????*) '
              'echo "compat: SLURM_JOB_ID is not a job number, so the master port cannot be computed; export MASTER_PORT" >&2; exit 2;; esac; '
              f'MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN})); fi; export MASTER_ADDR MASTER_PORT; exec "$@"')


# srun's options that take a value as the next word when not written --option=VALUE (srun(1), Slurm 22.05); options
# whose value is optional (--kill-on-bad-exit, --nice, --propagate, ...) take it only as --option=VALUE and are flags here
_SHORT_VALUE = frozenset("-A -B -C -D -G -J -L -M -N -S -T -W -b -c -d -e -i -m -n -o -p -q -r -t -w -x".split())
_LONG_VALUE = frozenset(
    "--account --acctg-freq --begin --bcast-exclude --chdir --cluster-constraint --clusters --comment --constraint --container --core-spec "
    "--cores-per-socket --cpu-bind --cpu-freq --cpus-per-gpu --cpus-per-task --deadline --delay-boot --dependency --distribution --epilog --error "
    "--exclude --export --extra-node-info --gid --gpu-bind --gpu-freq --gpus --gpus-per-node --gpus-per-socket --gpus-per-task --gres --gres-flags "
    "--het-group --hint --input --io-timeout --job-name --jobid --licenses --mail-type --mail-user --mcs-label --mem --mem-bind --mem-per-cpu "
    "--mem-per-gpu --mincpus --mpi --network --nodefile --nodelist --nodes --ntasks --ntasks-per-core --ntasks-per-gpu --ntasks-per-node "
    "--ntasks-per-socket --open-mode --output --partition --power --prolog --qos --relative --reservation --signal --slurmd-debug "
    "--sockets-per-node --switches --task-epilog --task-prolog --thread-spec --threads --threads-per-core --time --time-min --tmp --tres-bind "
    "--tres-per-task --uid --wait --wckey".split())
_OPTION_NAMES = {"-n": "ntasks", "--ntasks": "ntasks", "-N": "nodes", "--nodes": "nodes", "--ntasks-per-node": "ntasks_per_node",
                 "-c": "cpus_per_task", "--cpus-per-task": "cpus_per_task", "--export": "export"}


def split_line(tokens: Sequence[str]) -> tuple[int, dict[str, str]]:
    """A user's command line that starts with srun (compat migrate, export): how many of its words are srun and its
    own options (the rest is the program each task runs), and the options compat reads (ntasks, nodes,
    ntasks_per_node, cpus_per_task, export) by those names. ``-n4`` and ``--ntasks=4`` are read as ``-n 4``. Pure."""
    options: dict[str, str] = {}
    i = 1
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "--":
        token = tokens[i]
        name, eq, inline = token.partition("=")
        if not token.startswith("--") and len(token) > 2 and token[:2] in _SHORT_VALUE:  # -n4, -N2
            name, eq, inline = token[:2], "=", token[2:]
        if (name in _SHORT_VALUE or name in _LONG_VALUE) and not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
            i += 2
        else:
            value = inline
            i += 1
        if name in _OPTION_NAMES:
            options[_OPTION_NAMES[name]] = value
    if i < len(tokens) and tokens[i] == "--":
        i += 1
    return i, options


def ranks_per_node(options: Mapping[str, str]) -> Optional[int]:
    """The tasks per node a srun line asks for (split_line's options): --ntasks-per-node, else --ntasks over --nodes
    when they divide; None when the line does not say (-n alone: the allocation spreads the tasks over its nodes)."""
    def whole(name: str) -> Optional[int]:
        text = options.get(name, "").split("-")[0]  # --nodes=2-4: the minimum
        return int(text) if text.isascii() and text.isdigit() and len(text) <= 7 and 0 < int(text) <= _MAX_COUNT else None

    per_node, ntasks, nodes = whole("ntasks_per_node"), whole("ntasks"), whole("nodes")
    if per_node:
        return per_node
    if ntasks and nodes and ntasks % nodes == 0:
        return ntasks // nodes
    return None


def cpu_mask_list(masks: Sequence[int]) -> str:
    """srun's --cpu-bind=mask_cpu: list, one hexadecimal mask per local task."""
    return "mask_cpu:" + ",".join(hex(mask) for mask in masks)


class Srun:
    name = "srun"
    flavors: tuple[str, ...] = ("srun",)
    capabilities = frozenset({LIVE, BOUND, ENV})
    mpi_transport = False
    # compat launch's srun line sets MASTER_ADDR/MASTER_PORT in each task (the allocation's first host, a port from the
    # job id) and doctor --live takes them from the allocation: nothing for the user's environment to carry
    gives_rendezvous = True
    starts_ranks_itself = True  # doctor --live: one compat per node starts that node's ranks
    rank_variables: tuple[tuple[str, str, str], ...] = (SLURM_RANK,)
    # the job's and the step's wiring: a rank that inherits them takes srun's layout for its own (Intel MPI's hydra
    # even launches through Slurm when it sees them)
    inherited: tuple[str, ...] = ("SLURM_*",)
    programs: tuple[str, ...] = ("srun",)
    modules: tuple[str, ...] = ()

    def local_rank_variable(self, flavor: str) -> str:
        return "SLURM_LOCALID"

    def interface_exports(self, interface: str, env: Mapping[str, str], python: str = "", path: Optional[str] = None) -> tuple[dict[str, str], list[str]]:
        return {}, []  # srun's own traffic is slurmd's (slurm.conf); its ranks read gloo's and oneCCL's variables only

    def live(self, job: LiveJob) -> Launch:
        launch = SPAWN.live(job)  # the layout is the allocation's (allocation_layout); this node's ranks start as spawn's do
        return Launch("srun", "srun", launch.commands, launch.envs, launch.master, launch.expected_local, launch.world_size, launch.notes)

    def tool(self, request: ToolRequest) -> Tool:
        found = shutil.which("srun")
        if found:
            return Tool(found, "srun")
        message = "srun is not on PATH (Slurm's client commands), so the line cannot run here."
        if not request.print_only:
            raise LaunchError(message, "Run compat launch inside a Slurm allocation (sbatch, salloc), or add --print.")
        return Tool("srun", "srun", (message,))

    def processes(self, job: BoundJob, base: Mapping[str, str]) -> Launch:
        return one_program(self.bound(job), job.ranks, base)  # not offered to compat tune (no TUNE): its ranks' variables differ

    def bound(self, job: BoundJob) -> Invocation:
        cpus_per_task = max((bin(mask).count("1") for mask in job.masks), default=1)
        argv = ["srun", f"--ntasks-per-node={job.ranks}", f"--cpus-per-task={cpus_per_task}",
                f"--cpu-bind={cpu_mask_list(job.masks)}", "--kill-on-bad-exit=1", "sh", "-c", _MAP_RANKS, WRAPPER_NAME, *job.command]
        notes = ("srun binds each task to its planned CPUs (--cpu-bind=mask_cpu, local task i gets mask i; the cluster's TaskPlugin must be "
                 "task/affinity or task/cgroup) and every node is planned as this one",
                 "each task maps SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID to RANK/WORLD_SIZE/LOCAL_RANK, MASTER_ADDR to the allocation's first "
                 f"host and MASTER_PORT to {PORT_BASE} + SLURM_JOB_ID mod {PORT_SPAN} unless exported; with the master at that first host, "
                 "RANK is its node's place in the node list times the tasks per node plus SLURM_LOCALID, so rank 0 runs there whatever "
                 "order Slurm numbers the nodes in")
        return Invocation("srun", "srun", tuple(argv), dict(job.rank_env), "srun --cpu-bind", notes, dict(job.additions))

    def ccl_exports(self, env: CclEnv) -> tuple[dict[str, str], list[str]]:
        return ofi_exports(self.name, env, why="srun starts the ranks without Intel MPI's launcher, which oneCCL's MPI transport needs "
                           "(\"failed to initialize ATL\" otherwise)")

    def path_additions(self, python: str, path: Optional[str] = None, mpirun: Optional[str] = None) -> tuple[dict[str, PathEntries], list[str]]:
        return {}, []  # its program needs nothing on PATH beyond what starts it

    def failures(self, log: str) -> Failures:
        first = None
        for match in _TASK_FAILED.finditer(log):
            code = int(match.group(3)) if match.group(3) is not None else _SIGNALS[match.group(4)]
            first = first or ("rank", int(match.group(2)), code)
        return Failures({}, first)


SRUN = Srun()
