"""compat doctor --live: plan the probe from the snapshot and the matrix, launch it, supervise it, report it."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..checks.packages import CCL_NAMES, IPEX_NAMES
from ..checks.registry import Context
from ..environment.snapshot import NATIVE_BF16_FLAGS
from ..findings import Finding, Status
from ..launchers import LAUNCHERS
from ..launchers.interface import Launch, LaunchError, RankLayout
from ..launchers.live import plan_launch
from ..processes import new_run_id
from ..record import replace
from ..scratch import claim, own_identity, release, sweep_stale
from ..translate import ipex_through_trainer, translate
from .oneccl_causes import CclRun
from .report import Expectation, fabric_rows, live_findings, pair_table, rank_outputs, read_ranks
from .supervise import supervise

WORKER = Path(__file__).with_name("worker.py")
FABRIC_MAX_BYTES = 16 << 20  # --fabric's default largest size (each rank further bounds it by its host's free memory)
SELF_DEADLINE_SLACK_S = 30.0  # a rank ends itself this long after the hard limit, should compat be gone (SIGKILL, OOM)


def init_timeout_for(timeout: float) -> float:
    """The ranks' own rendezvous/collective timeout: half the hard limit, at least 15 s, at most 60 s."""
    return min(60.0, max(15.0, timeout / 2))


def bf16_choice(cpu_flags, asked: Optional[bool]) -> tuple[bool, str]:
    """Whether the live Trainer step trains in bf16, and why: forced by --bf16 / --no-bf16, else native bf16 on this CPU."""
    native = sorted(set(cpu_flags) & NATIVE_BF16_FLAGS)
    if asked is False:
        return False, "off (--no-bf16)"
    if asked is True:
        return True, "on (--bf16)" + (f": native on this CPU ({', '.join(native)})" if native else ": this CPU has no native bf16, so it is emulated (slow)")
    if native:
        return True, f"on: this CPU has native bf16 ({', '.join(native)}); --no-bf16 trains in fp32"
    return False, "off: this CPU has no avx512_bf16 or amx_bf16; --bf16 forces it (emulated)"


@dataclass(frozen=True)
class LiveOptions:
    launcher: str = "spawn"
    topology: RankLayout = field(default_factory=RankLayout)
    backend: str = "auto"  # auto: ccl when the bindings import and register it, else gloo
    timeout: float = 120.0
    trainer: bool = True
    steps: int = 3
    per_device_batch: int = 4
    mpirun: Optional[str] = None
    rank_env: bool = True  # False reproduces the every-rank-trains-alone launch
    run_dir: Optional[str] = None  # multi-node mpirun: a folder every node sees at the same path
    bf16: Optional[bool] = None  # the Trainer step in bf16: None = when the CPU has native bf16, True/False forced
    rsh: Optional[str] = None  # mpirun across hosts: the remote shell (else the MPI's own variables, else ssh)
    layout_notes: tuple[str, ...] = ()  # where the layout came from (srun: the allocation), shown with the launch's evidence
    fabric: bool = False  # --fabric: the collectives swept over sizes, each result checked
    pairs: str = "all"  # --pairs: all | ring | sample:K (live/fabric.parse_pair_mode), for runs across hosts
    pair_deadline: float = 30.0  # --pair-deadline: seconds each pair may take before it is named as not answering
    fabric_sizes: tuple[int, ...] = ()  # bytes; () = 1 KiB up by powers of 4 to FABRIC_MAX_BYTES, bounded by memory on every host
    fabric_deadline: float = 0.0  # --fabric-deadline: seconds the pairs and the sweep may take in all (0: no bound)


@dataclass(frozen=True)
class TrainerPlan:
    flags: dict[str, Any]
    backend_flag: Optional[str]  # ddp_backend / xpu_backend: the worker fills in the backend it chose
    ipex_mode: str
    ccl_blocked: tuple[str, ...]
    skip_reason: str = ""
    ipex_note: str = ""
    bf16_why: str = ""


@dataclass(frozen=True)
class LiveResult:
    findings: list[Finding]
    details: dict[str, Any]


def plan_trainer(ctx: Context, options: LiveOptions) -> TrainerPlan:
    """TrainingArguments flags for the installed transformers/accelerate, from the matrix (via compat translate)."""
    if not options.trainer:
        return TrainerPlan({}, None, "none", (), "the Trainer probe was not asked for (--no-trainer)")
    transformers = ctx.snapshot.get("transformers")
    if transformers is None or transformers.public_version is None:
        return TrainerPlan({}, None, "none", (), "transformers is not installed")
    accelerate = ctx.snapshot.get("accelerate")
    version = transformers.public_version
    has_ipex = ctx.snapshot.get(*IPEX_NAMES) is not None
    torch = ctx.snapshot.get("torch")
    use_ipex_in_trainer, ipex_note = ipex_through_trainer(ctx.matrix, version, accelerate.public_version if accelerate else None,
                                                          torch.public_version if torch else None) if has_ipex else (False, "")
    if has_ipex and not use_ipex_in_trainer:
        ipex_note += ": ipex.optimize(model, optimizer) applied directly, as your script must"
    argv = ["--use_cpu", "--ddp_backend", "ccl"]
    if use_ipex_in_trainer:
        argv.append("--use_ipex")
    bf16, bf16_why = bf16_choice(ctx.snapshot.cpu.flags, options.bf16)
    if bf16:
        argv.append("--bf16")
    translation = translate(ctx.matrix, argv, version, accelerate.public_version if accelerate else None, torch.public_version if torch else None)
    flags: dict[str, Any] = {}
    backend_flag = None
    tokens = list(translation.argv)
    while tokens:
        token = tokens.pop(0)
        if token in ("--ddp_backend", "--xpu_backend"):
            backend_flag = token[2:]
            tokens.pop(0)
        elif token.startswith("--"):
            flags[token[2:]] = True
    ipex_mode = "trainer" if use_ipex_in_trainer else "direct" if has_ipex else "none"
    return TrainerPlan(flags, backend_flag, ipex_mode, translation.blocking, ipex_note=ipex_note, bf16_why=bf16_why)


def _worker_args(run_dir: Path, options: LiveOptions, init_timeout: float, plan: TrainerPlan, ipex: bool, deadline: float) -> list[str]:
    args = [str(run_dir / "worker.py"), "--run-dir", str(run_dir), "--expect-world", str(options.topology.world_size),
            "--backend", options.backend, "--init-timeout", f"{init_timeout:g}", "--steps", str(options.steps), "--batch", str(options.per_device_batch),
            "--deadline", f"{deadline:.0f}", "--watch", own_identity()]
    launcher = LAUNCHERS.get(options.launcher)
    if launcher is not None and launcher.rank_variables:  # what --map-mpi maps from: the worker keeps no launcher table of its own
        args += ["--rank-variables", json.dumps(launcher.rank_variables)]
    if ipex:
        args.append("--ipex")
    if options.fabric:
        args += ["--fabric", "--fabric-max", str(FABRIC_MAX_BYTES)]
        if options.fabric_deadline:
            args += ["--fabric-deadline", f"{options.fabric_deadline:g}"]
        if options.fabric_sizes:
            args += ["--fabric-sizes", ",".join(str(s) for s in options.fabric_sizes)]
        if _host_count(options) > 1:
            args += ["--fabric-pairs", str(run_dir / "fabric-pairs.json")]
    if _across_hosts(options):
        args.append("--watch-exit")  # compat cannot see the other hosts' processes: each rank says when it ended
    if not plan.skip_reason:
        flags = dict(plan.flags)
        if plan.backend_flag:
            flags["__backend_flag__"] = plan.backend_flag
            flags["__ccl_blocked__"] = bool(plan.ccl_blocked)
        args += ["--trainer", "--trainer-flags", json.dumps(flags), "--ipex-mode", plan.ipex_mode]
    return args


def _across_hosts(options: LiveOptions) -> bool:
    return _host_count(options) > 1


def _host_count(options: LiveOptions) -> int:
    """The hosts the ranks run on: --nnodes, else the hostfile's distinct hosts (1 when it cannot be read: the launch says why)."""
    if options.topology.nnodes > 1:
        return options.topology.nnodes
    if options.topology.hostfile:
        from ..launchers.mpirun import read_hostfile

        try:
            return max(1, len({name for name, _ in read_hostfile(options.topology.hostfile)}))
        except LaunchError:
            return 1
    return 1


def write_pair_plan(run_dir: Path, options: LiveOptions) -> None:
    """The rounds of host pairs the ranks measure (--fabric across hosts); the same on every node (a fixed seed)."""
    from .fabric import PAIRS_SHARE, pair_deadline_under, parse_pair_mode, schedule

    hosts = _host_count(options)
    mode = parse_pair_mode(options.pairs)
    rounds = [[list(pair) for pair in pairs] for pairs in schedule(hosts, mode, seed=0)]
    plan: dict[str, Any] = {"hosts": hosts, "mode": options.pairs, "deadline": options.pair_deadline, "rounds": rounds}
    if options.fabric_deadline:  # the pairs get at most PAIRS_SHARE of the deadline: each pair's own deadline lowered to fit
        plan["deadline"] = pair_deadline_under(options.fabric_deadline, len(rounds), options.pair_deadline)
        plan["budget"] = PAIRS_SHARE * options.fabric_deadline
        if plan["deadline"] < options.pair_deadline:
            plan["asked_deadline"] = options.pair_deadline
    (run_dir / "fabric-pairs.json").write_text(json.dumps(plan))


RUN_DIR_PREFIX = "compat-live-"  # a fresh folder per run, owned by this compat (scratch.py: swept at the next start once it is gone)


def worker_environment() -> dict[str, str]:
    """compat's environment for the ranks, offline; rank variables inherited from the caller are dropped by plan_launch."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def run_live(ctx: Context, options: LiveOptions) -> LiveResult:
    snapshot = ctx.snapshot
    plan = plan_trainer(ctx, options)
    ipex = snapshot.get(*IPEX_NAMES) is not None
    init_timeout = init_timeout_for(options.timeout)
    deadline = time.time() + options.timeout + SELF_DEADLINE_SLACK_S
    threads = max(1, snapshot.allowed_cpus // max(1, options.topology.nproc_per_node))
    sweep_stale(RUN_DIR_PREFIX, options.run_dir)  # what a killed doctor --live of this host left behind (its lock free, its process gone)
    if snapshot.get("torch") is None:
        finding = Finding("live.launch", Status.FAIL, f"torch is not installed in {snapshot.prefix}: there is nothing to launch",
                          (), "Install the set compat resolve gives (compat install), or point --python at the environment you train in.")
        return LiveResult([finding], {"launcher": options.launcher, "error": finding.summary})
    if options.run_dir:
        Path(options.run_dir).mkdir(parents=True, exist_ok=True)
    # a fresh folder per run, inside --run-dir when given (multi-node mpirun: a path every node sees)
    owned = claim(RUN_DIR_PREFIX, options.run_dir)
    run_dir = owned.folder
    try:
        shutil.copyfile(WORKER, run_dir / "worker.py")  # run from its own folder: nothing of compat shadows the target's modules
        shutil.copyfile(WORKER.with_name("protocol.py"), run_dir / "compat_live_protocol.py")  # the records it writes, loaded by path
        if options.fabric:  # the deadline's pure planning (live/fabric.py), imported by the worker under a name of its own
            shutil.copyfile(WORKER.with_name("fabric.py"), run_dir / "compat_fabric_plan.py")
        if options.fabric and _across_hosts(options):
            write_pair_plan(run_dir, options)
        try:
            launch = plan_launch(options.launcher, snapshot.executable, _worker_args(run_dir, options, init_timeout, plan, ipex, deadline),
                                 options.topology, worker_environment(), threads, options.mpirun, options.rank_env, options.rsh)
            launch = replace(launch, notes=launch.notes + options.layout_notes)
        except LaunchError as exc:
            finding = Finding("live.launch", Status.FAIL, exc.message, (), exc.fix)
            return LiveResult([finding], {"launcher": options.launcher, "error": exc.message})
        from .progress import terminal_progress

        progress = terminal_progress(sys.stderr, run_dir)
        try:
            supervised = supervise(launch.commands, launch.envs, run_dir, options.timeout, new_run_id(),
                                   on_look=progress.look if progress else None)
        finally:
            if progress:
                progress.close()
        ends_by_pid = {end.pid: end.returncode for end in supervised.ends} if LAUNCHERS[launch.launcher].starts_ranks_itself else {}
        multi_host = options.topology.nnodes > 1 or len(launch.hosts) > 1
        ranks = read_ranks(run_dir, ends_by_pid, "\n".join(end.log for end in supervised.ends), show_host=multi_host)
        ccl = ccl_run(launch, snapshot)  # the launcher and the compat env command every fix names
        expect = Expectation(
            world_size=launch.world_size, trainer=not plan.skip_reason, steps=options.steps, per_device_batch=options.per_device_batch,
            backend=options.backend, ccl_installed=snapshot.get(*CCL_NAMES) is not None, ccl_trainer_blocked=plan.ccl_blocked if _chose_ccl(ranks) else (),
            timeout=options.timeout, init_timeout=init_timeout, trainer_flags=plan.flags, ipex_mode=plan.ipex_mode if ipex else "none",
            ipex_note=plan.ipex_note, bf16_why=plan.bf16_why, multi_host=multi_host,
            reach=reach_master(launch.master, supervised, ranks, launch.hosts or options.topology.hosts, bool(launch.hosts),
                               options.topology.nnodes, options.topology.node_rank) if multi_host else {},
            ccl=ccl, fabric=options.fabric, pairs=options.fabric and _across_hosts(options),
            interface_fix=interface_fix(launch.master, options.topology.nnodes if not launch.hosts else len(launch.hosts), ccl.env_command) if multi_host else "",
        )
        findings = live_findings(launch, supervised, ranks, expect)
        if plan.skip_reason:
            findings = [Finding("live.trainer", Status.SKIP, plan.skip_reason) if f.id == "live.trainer" else f for f in findings]
        details = _details(launch, supervised, ranks, plan)
        if options.fabric:
            sweep = fabric_rows(ranks)
            details["fabric"] = None if sweep is not None and "unreadable" in sweep else sweep  # said by live.fabric
            if _across_hosts(options):
                details["pairs"] = pair_table(ranks, ccl.env_command)
        return LiveResult(findings, details)
    finally:
        release(owned)


def ccl_run(launch: Launch, snapshot) -> CclRun:
    """What the fixes of oneCCL's failures name: the launcher, its compat env command for this interpreter, and the PyPI
    runtime's folders (environment/oneccl_layouts) when the environment has one."""
    import shlex

    from ..environment.oneccl_layouts import runtime_layout

    launcher = LAUNCHERS[launch.launcher]
    layout = runtime_layout(snapshot.prefix) if snapshot.prefix else None
    # under mpirun the command names the mpirun that ran: its MPI decides the transport (impi-rt's next to the interpreter is not it under Open MPI)
    program = f" --mpirun {shlex.quote(launch.commands[0][0])}" if launch.launcher == "mpirun" and launch.commands and launch.commands[0] else ""
    command = f'eval "$(compat env --launcher {launch.launcher}{program} --python {shlex.quote(snapshot.executable)})"'
    transport = launch.envs[0].get("CCL_ATL_TRANSPORT", "") if launch.envs else ""
    return CclRun(launch.launcher, launch.flavor == "intel-mpi", launcher.mpi_transport, command,
                  layout.libfabric if layout else "", layout.providers if layout else "", layout.mpi_root if layout else "",
                  flavor=launch.flavor, transport=transport)


REACH_TIMEOUT_S = 3.0


def _addresses(name: str) -> list[str]:
    import socket

    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})
    except (OSError, UnicodeError):
        return []


def _own(address: str) -> bool:
    from ..environment.interfaces import owns

    return owns(address)


def _short(name: str) -> str:
    """A host as the ranks name themselves: no user@, and a name's first label (an address stays whole)."""
    host = name.rsplit("@", 1)[-1]
    return host if ":" in host or host.replace(".", "").isdigit() else host.split(".")[0]


def missing_hosts(hosts: Sequence[str], ranks, here: str, addr: str, records_from_every_host: bool) -> str:
    """Who the other hosts of a group that did not form are, in words: the job's hosts (a hostfile's, the allocation's)
    other than this one and the master's; with records from every host (mpirun's shared run folder), split into those
    whose ranks never wrote one (did not start) and those whose ranks started but did not join. "" when the hosts are
    not known here (one compat per node told only --nnodes)."""
    mine = {_short(here), _short(addr)}
    others = [h for h in dict.fromkeys(hosts) if _short(h) not in mine]
    if not others:
        return ""

    def shown(names: Sequence[str]) -> str:
        return ", ".join(names[:16]) + (f" and {len(names) - 16} more" if len(names) > 16 else "")

    if not records_from_every_host:
        return f"a rank on {shown(others)} (the {'host' if len(others) == 1 else 'hosts'} of the job other than this one) did not join"
    seen = {_short(r.host) for r in ranks}
    silent = [h for h in others if _short(h) not in seen]
    late = [h for h in others if _short(h) in seen and not any(_short(r.host) == _short(h) and r.status.world_size for r in ranks)]
    parts = ([f"no rank on {shown(silent)} wrote a record into the run folder (it did not start there, or the folder is not one every host sees)"]
             if silent else []) + ([f"the ranks on {shown(late)} started but did not join"] if late else [])
    return "; ".join(parts) or f"a rank on {shown(others)} did not join"


def reach_master(master: str, supervised, ranks, hosts: Sequence[str] = (), records_from_every_host: bool = False,
                 nnodes: int = 1, node_rank: int = 0) -> dict[str, str]:
    """When a run across hosts did not form its group in time (the deadline, a rank's rendezvous timeout, no rank at
    all), compat itself tries MASTER_ADDR:PORT from this host, for the one fact the ranks cannot report: whether the
    rendezvous can be reached from here, and if not, how it fails (refused, dropped, no route). On the master's host,
    the hosts that did not join are named where the job's hosts are known (``hosts``: a hostfile's, the allocation's),
    else the other nodes by their rank."""
    import errno
    import socket

    from .report import TIMED_OUT

    waited = any(r.error and TIMED_OUT.search(str(r.error.message)) for r in ranks)
    joined = ranks and all(r.status.world_size for r in ranks)
    if joined or not (supervised.timed_out or waited or not ranks):
        return {}
    here = os.uname()[1]
    addr, _, port_text = master.rpartition(":")
    addresses = _addresses(addr)
    if not addresses:
        return {"from": here, "what": f"{addr} does not resolve here", "problem": f"MASTER_ADDR {addr} does not resolve on {here}",
                "fix": f"Make {addr} resolve on every host (/etc/hosts or DNS), or pass --master-addr as an address."}
    shown = f"{addr} ({', '.join(addresses)})"
    if any(_own(a) for a in addresses):
        named = missing_hosts(hosts, ranks, here, addr, records_from_every_host)
        others = [str(n) for n in range(nnodes) if n != node_rank]
        if named:
            problem = (f"the group did not form at the rendezvous {addr}:{port_text} on this host ({here}): {named}: "
                       f"{'they' if records_from_every_host else 'it'} could not reach it, or failed; "
                       + ("their records and the launcher's output say which" if records_from_every_host else "that host's compat doctor --live names which"))
        else:
            which = (f" (node rank {', '.join(others[:16])}{', ...' if len(others) > 16 else ''} of {nnodes}: each host runs its own compat, so its name "
                     "is not known here)") if others else ""
            problem = (f"the group did not form: a rank on another host did not join at the rendezvous {addr}:{port_text} on this host ({here}){which}: "
                       "it could not reach it, or it failed; that host's compat doctor --live names which")
        return {"from": here, "what": f"{shown} is this host: the rendezvous was here, and not every host reached it",
                "problem": problem,
                "fix": f"On each other host: {addr} must resolve to {', '.join(addresses)}, port {port_text} must be open here (a firewall drops "
                       "or refuses it otherwise), and compat doctor --live must run there with the same --master-addr/--master-port; "
                       "its own live.network says what it saw."}
    try:
        with socket.create_connection((addresses[0], int(port_text)), timeout=REACH_TIMEOUT_S):
            pass
    except socket.timeout:
        return {"from": here, "what": f"{shown} port {port_text}: no answer within {REACH_TIMEOUT_S:g} s",
                "problem": f"from {here}, the rendezvous {addr}:{port_text} does not answer: a firewall on the way drops the packets (or {addr} resolves here to a wrong address)",
                "fix": f"Open port {port_text} (and {port_text}+1 for a second job) on {addr} for the other hosts, and check that {addr} resolves to the same address on every host."}
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            what = "connection refused: nothing listens there (a wrong --master-port, or node 0's compat is not running yet or has ended)"
            fix = "Start compat doctor --live on node 0 with the same --master-port, and the others within its timeout."
        elif exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            what = f"no route to host: {addresses[0]} is not {addr}'s address on this network (a stale /etc/hosts line or DNS entry on {here}?)"
            fix = f"Make {addr} resolve on {here} to the address it has on the network the hosts share (/etc/hosts or DNS)."
        else:
            what = f"{exc.strerror or exc}"
            fix = f"Check that {addr}:{port_text} can be reached from {here}."
        return {"from": here, "what": f"{shown} port {port_text}: {what}", "problem": f"from {here}, the rendezvous {addr}:{port_text} cannot be reached: {what}", "fix": fix}
    return {"from": here, "what": f"{shown} port {port_text} answers from here: the rendezvous is reachable"}


def interface_fix(master: str, nnodes: int, command: str = 'eval "$(compat env)"') -> str:
    """The fix's words for a job across hosts whose ranks advertise loopback: the interface of this host's route to the
    master (environment/interfaces, as compat env chooses it), exported on every host; "" when none can be chosen.
    ``command``: the run's compat env command (CclRun.env_command: --launcher, --python), told the master and the nodes."""
    from ..environment.interfaces import choose_interface, route_facts
    from .oneccl_causes import with_arguments

    addr = master.rpartition(":")[0] or master
    choice = choose_interface(addr, True, route_facts(addr))
    if choice.interface is None:
        return ""
    return (f"export GLOO_SOCKET_IFNAME={choice.interface} on every host ({choice.why} on {os.uname()[1]}; "
            f"{with_arguments(command, f' --master-addr {addr} --nnodes {nnodes}')} sets it, with oneCCL's and the launcher's)")


def _chose_ccl(ranks) -> bool:
    return any(r.status.backend == "ccl" for r in ranks)


def _details(launch: Launch, supervised, ranks, plan: TrainerPlan) -> dict[str, Any]:
    backends = sorted({str(r.status.backend) for r in ranks if r.status.chose_backend})
    fixture = any(r.status.imports and r.status.imports.ccl and r.status.imports.ccl.fixture for r in ranks)
    return {
        "launcher": launch.launcher,
        "flavor": launch.flavor,
        "world_size": launch.world_size,
        "master": launch.master,
        "backend": backends[0] if len(backends) == 1 else None,
        "backend_is_fixture": bool(fixture),
        "seconds": round(supervised.seconds, 3),
        "timed_out": supervised.timed_out,
        "trainer_flags": plan.flags,
        "bf16": {"on": bool(plan.flags.get("bf16")), "why": plan.bf16_why} if plan.bf16_why else None,
        "ipex_mode": plan.ipex_mode,
        "ipex_note": plan.ipex_note,
        "bandwidth": next(([row.to_json() for row in r.status.bandwidth] for r in ranks if r.status.bandwidth), None),
        "memcpy": next((r.status.memcpy.to_json() for r in ranks if r.status.memcpy), None),
        **rank_outputs(ranks, supervised),
    }
