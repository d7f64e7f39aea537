"""compat doctor --hostfile FILE [--rsh PROG]: the static checks on every host of a job, through the remote shell the
job's mpirun uses, and what differs between the hosts in ways that break a job.

On each host compat runs ``compat check --json`` (the same interpreter path as here, and the same --python: a cluster's
shared file system or identical images put them at the same path), reads its findings and the host's facts (installed
distributions, CPU flags, oneCCL variables) and compares them.

Bounds: the hosts are read by hostlist.py (a hostfile's size and lines, every host a host name, an IPv4 or an IPv6
address, never an option such as ``-oProxyCommand=...``); the remote shell gets ``--`` before the host. The hosts are asked concurrently (at most PREFLIGHT_WORKERS at a time) under one overall deadline,
PREFLIGHT_DEADLINE_S for all of them. A host's answer is typed here (``parse_answer``): only the fields and values
compat check --json writes pass, and free text from it (summaries, fixes, variable values, the remote shell's
error) has its control characters escaped before it goes into a finding.

Pure except ``collect`` (the remote shell, each host's in its own process
group).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .console import plural
from .environment.snapshot import NATIVE_BF16_FLAGS
from .findings import Finding, Status
from .matrix.model import COMPONENTS, Component, distributions_where
from .record import Record

PREFLIGHT_DEADLINE_S = 120.0  # every host together: silent hosts cost this once, not once each
PREFLIGHT_WORKERS = 16  # hosts asked at the same time (each one remote shell, one process group)
# a different version of any of these on two hosts of one job breaks it (DDP and oneCCL need the same build everywhere)
STACK = distributions_where(host_compared=True)
# oneCCL / libfabric / Intel MPI variables whose difference between hosts breaks the ranks' transport
TRANSPORT_VARIABLES = ("CCL_ATL_TRANSPORT", "CCL_ATL_SHM", "CCL_CONFIGURATION", "FI_PROVIDER", "I_MPI_FABRICS", "I_MPI_OFI_PROVIDER")
ENV_PREFIXES = ("CCL_", "FI_", "I_MPI_")


def host_facts(snapshot, hostname: str) -> dict[str, Any]:
    """What a host's `compat check --json` carries for the comparison ("host" in the document); "network": what its
    own name resolves to there (gloo listens on that address and tells the other hosts to reach it there) and its
    interfaces that are up."""
    from .environment.interfaces import owns, resolve, up_interfaces

    addresses, _error = resolve(hostname)
    addresses = addresses[:MAX_ADDRESSES]
    return {
        "name": hostname,
        "packages": snapshot.versions(),
        "cpu_flags": sorted(snapshot.cpu.flags),
        "oneccl_env": {k: v for k, v in sorted(snapshot.env.items()) if k.startswith(ENV_PREFIXES)},
        "bindings": {m: snapshot.modules[m] for m in COMPONENTS[Component.CCL].modules if snapshot.modules.get(m)},
        "network": {"resolves": addresses, "own": [a for a in addresses if owns(a)], "interfaces": up_interfaces()[:MAX_INTERFACES]},
    }


class HostAnswer(Record):
    host: str
    document: Optional[Mapping[str, Any]]  # the host's compat check --json, None when it could not be had
    error: str = ""


def remote_command(python: Optional[str], ranks_per_node: int, launcher: Optional[str] = None) -> str:
    """The command line the remote shell runs on each host (one string, as ssh passes it to the remote shell);
    ``launcher``: doctor's --launcher, which each host's oneccl.launcher judges and its fixes name."""
    words = [sys.executable, "-m", "compatmatrix", "check", "--json", "--ranks-per-node", str(ranks_per_node)]
    if python:
        words += ["--python", python]
    if launcher:
        words += ["--launcher", launcher]
    return shlex.join(words)


def collect(hosts: Sequence[str], rsh: str, command: str, env: Mapping[str, str], deadline_s: float = PREFLIGHT_DEADLINE_S,
            workers: int = PREFLIGHT_WORKERS) -> list[HostAnswer]:
    """Run ``rsh -- HOST command`` on every host, at most ``workers`` at a time, all within ``deadline_s`` seconds
    together; the answers in the hosts' order. A host not started before the deadline is an answer saying so.
    Ctrl-C (or SIGTERM) ends every remote shell still running before it goes on."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from .processes import Interruptions

    try:
        prefix = shlex.split(rsh)
    except ValueError as exc:
        return [HostAnswer(host, None, f"{escape_text(rsh)} cannot be split into words ({exc})") for host in hosts]
    end = time.monotonic() + deadline_s
    stop = threading.Event()  # set on Ctrl-C: every running remote shell is killed within its poll interval

    def ask(host: str) -> HostAnswer:
        left = end - time.monotonic()
        if left <= 0 or stop.is_set():
            return HostAnswer(host, None, f"not asked: the {deadline_s:g} s for all hosts had passed")
        return _ask(host, [*prefix, "--", host, command], rsh, env, left, deadline_s, stop)

    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts))), thread_name_prefix="compat-host")
    try:
        with Interruptions():  # SIGTERM / SIGHUP as Ctrl-C: the running remote shells are ended, not orphaned
            futures = [pool.submit(ask, host) for host in hosts]
            return [future.result() for future in futures]
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ask(host: str, argv: list[str], rsh: str, env: Mapping[str, str], left: float, deadline_s: float, stop: Any) -> HostAnswer:
    """One host's remote shell, ended at ``left`` seconds or when ``stop`` is set; its answer typed."""
    from .environment.child import run_child

    try:
        ended = run_child(argv, left, env=env, overdue=stop.is_set)
    except OSError as exc:
        return HostAnswer(host, None, f"{escape_text(rsh)} cannot be run: {escape_text(str(exc.strerror or exc))}")
    if ended.timed_out:
        return HostAnswer(host, None, f"no answer within the {deadline_s:g} s for all hosts" if not stop.is_set() else "interrupted")
    out = ended.stdout.decode(errors="replace")
    try:
        document = json.loads(out)
    except (ValueError, RecursionError):
        err = ended.stderr.decode(errors="replace").strip().splitlines()
        said = err[-1] if err else (out.strip().splitlines() or ["no output"])[-1]
        return HostAnswer(host, None, f"exit status {ended.returncode}: {escape_text(said[:300])}")
    parsed, problem = parse_answer(document)
    if parsed is None:
        return HostAnswer(host, None, f"its answer is not compat check --json's: {problem}")
    return HostAnswer(host, parsed)


# --- the hostfile ---------------------------------------------------------------------------------------------------


# --- a host's answer, typed -----------------------------------------------------------------------------------------

# C0 and C1 controls, DEL, and the characters that move the cursor or the reading order (line/paragraph separators,
# bidi controls): shown as \xNN / \uNNNN, so nothing a host says reaches the operator's terminal as a control sequence
def escape_text(text: str) -> str:
    """``text`` with every control character (and the line/bidi separators) written as an escape: the console's one
    rule (console.visible_line), kept on one line."""
    from .console import visible_line

    return visible_line(text)


_CHECK_ID = re.compile(r"[a-z]+\.[a-z0-9-]+")
_STATUSES = frozenset(s.value for s in Status)
_PACKAGE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9!+._-]{1,128}")
_FLAG = re.compile(r"[a-z0-9_.-]{1,64}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_TEXT = 2000  # characters kept of one free-text value from a host


def parse_answer(document: Any) -> tuple[Optional[dict[str, Any]], str]:
    """(the answer reduced to what compare reads, with free text escaped, "") for a host's ``compat check --json``,
    or (None, what is wrong with it): a malformed answer is said, never trusted."""
    if not isinstance(document, dict):
        return None, f"a JSON {type(document).__name__}, not an object"
    checks = document.get("checks")
    if not isinstance(checks, list):
        return None, "no list of checks"
    typed_checks = []
    for number, check in enumerate(checks, start=1):
        if not isinstance(check, dict):
            return None, f"check {number} is not an object"
        cid, status, summary, fix = check.get("id"), check.get("status"), check.get("summary"), check.get("fix", "")
        evidence = check.get("evidence", [])
        if not isinstance(cid, str) or not _CHECK_ID.fullmatch(cid):
            return None, f"check {number} has no id of compat's form (area.name)"
        if status not in _STATUSES:
            return None, f"check {cid} has no status pass, warn, fail or skip"
        if not isinstance(summary, str) or not isinstance(fix, str) or not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
            return None, f"check {cid} has a summary, fix or evidence that is not text"
        typed_checks.append({"id": cid, "status": status, "summary": _free(summary), "fix": _free(fix), "evidence": [_free(e) for e in evidence]})
    facts = document.get("host")
    if facts is None:
        return {"checks": typed_checks, "host": None}, ""
    typed_facts, problem = _parse_facts(facts)
    if typed_facts is None:
        return None, problem
    return {"checks": typed_checks, "host": typed_facts}, ""


def _parse_facts(facts: Any) -> tuple[Optional[dict[str, Any]], str]:
    if not isinstance(facts, dict):
        return None, "its host facts are not an object"
    name, packages, flags = facts.get("name", ""), facts.get("packages", {}), facts.get("cpu_flags", [])
    variables, bindings = facts.get("oneccl_env", {}), facts.get("bindings", {})
    if not isinstance(name, str):
        return None, "its host name is not text"
    if not isinstance(packages, dict) or not all(isinstance(k, str) and _PACKAGE.fullmatch(k) and isinstance(v, str) and _VERSION.fullmatch(v)
                                                 for k, v in packages.items()):
        return None, "its packages are not distribution names with versions"
    if not isinstance(flags, list) or not all(isinstance(f, str) and _FLAG.fullmatch(f) for f in flags):
        return None, "its CPU flags are not flag names"
    if not isinstance(variables, dict) or not all(isinstance(k, str) and _VARIABLE.fullmatch(k) and isinstance(v, str) for k, v in variables.items()):
        return None, "its oneCCL variables are not names with text values"
    if not isinstance(bindings, dict) or not all(isinstance(k, str) and _VARIABLE.fullmatch(k) and isinstance(v, str) for k, v in bindings.items()):
        return None, "its bindings are not module names with paths"
    typed: dict[str, Any] = {"name": _free(name), "packages": dict(packages), "cpu_flags": list(flags),
                             "oneccl_env": {k: _free(v) for k, v in variables.items()}, "bindings": {k: _free(v) for k, v in bindings.items()}}
    if "network" in facts:  # compat check before this field has none: the own-name check then skips that host
        network, problem = _parse_network(facts["network"])
        if network is None:
            return None, problem
        typed["network"] = network
    return typed, ""


MAX_ADDRESSES = 64
MAX_INTERFACES = 256
_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # the kernel's IFNAMSIZ


def _parse_network(network: Any) -> tuple[Optional[dict[str, Any]], str]:
    """A host's "network": the addresses its own name resolves to there (IP addresses) and its interfaces (names)."""
    import ipaddress

    if not isinstance(network, dict):
        return None, "its network facts are not an object"
    resolves, interfaces = network.get("resolves", []), network.get("interfaces", [])
    if not isinstance(resolves, list) or len(resolves) > MAX_ADDRESSES or not all(isinstance(a, str) and len(a) <= 64 for a in resolves):
        return None, "its network facts' addresses are not a list of addresses"
    try:
        typed = [str(ipaddress.ip_address(a.split("%", 1)[0])) for a in resolves]
    except ValueError:
        return None, "its network facts' addresses are not a list of addresses"
    if not isinstance(interfaces, list) or len(interfaces) > MAX_INTERFACES or not all(isinstance(i, str) and _INTERFACE.fullmatch(i) for i in interfaces):
        return None, "its network facts' interfaces are not interface names"
    own = network.get("own")
    if own is not None and (not isinstance(own, list) or not all(isinstance(a, str) and a in resolves for a in own)):
        return None, "its network facts' own addresses are not among the addresses its name resolves to"
    typed_network: dict[str, Any] = {"resolves": typed, "interfaces": list(interfaces)}
    if own is not None:
        typed_network["own"] = [typed[resolves.index(a)] for a in own]
    return typed_network, ""


def _free(text: str) -> str:
    """Free text from a host, cut to MAX_TEXT and escaped."""
    return escape_text(text[:MAX_TEXT] + ("..." if len(text) > MAX_TEXT else ""))


def _listing(values: Mapping[str, Optional[str]], missing: str = "not installed") -> str:
    return "; ".join(f"{value if value is not None else missing} on {host}" for host, value in values.items())


def compare(answers: Sequence[HostAnswer], rsh: str, rsh_source: str, unroutable: Optional[Mapping[str, str]] = None,
            python: Optional[str] = None, launcher: Optional[str] = None) -> list[Finding]:
    """Findings from the hosts' answers: who could not be checked, each host's own failures, and every difference that
    breaks a job (one finding per difference, naming the hosts). ``unroutable``: the hosts' own addresses to which the
    collecting host has no route, with the kernel's error (``routes_from_here``). ``python``/``launcher``: the environment
    checked and doctor's --launcher, which every compat env a fix names carries (launchers.interface.compat_env_command)."""
    from functools import partial

    from .launchers.interface import compat_env_command

    command = partial(compat_env_command, python or "", launcher)
    findings: list[Finding] = []
    good = [a for a in answers if a.document is not None]
    bad = [a for a in answers if a.document is None]
    for answer in bad:
        findings.append(Finding("hosts.reach", Status.FAIL, f"{answer.host}: compat check could not run there through {escape_text(rsh)}: {answer.error}",
                                (f"remote shell: {escape_text(rsh)} ({rsh_source})",),
                                f"Check that `{escape_text(rsh)} {answer.host} true` works without a password, and that compat and --python exist at the same path there."))
    if good and not bad:
        findings.append(Finding("hosts.reach", Status.PASS, f"compat check ran on {plural(len(good), 'host')} ({', '.join(a.host for a in good)}) through {escape_text(rsh)}",
                                (f"remote shell: {escape_text(rsh)} ({rsh_source})",)))
    for answer in good:
        failed = [c for c in answer.document.get("checks", []) if c.get("status") == "fail"]
        if failed:
            first = failed[0]
            findings.append(Finding("hosts.checks", Status.FAIL, f"{answer.host}: {first['id']}: {first['summary']}",
                                    tuple(f"{answer.host}: {c['id']}: {c['summary']}" for c in failed[1:]), first.get("fix", "")))
    if len(good) >= 2:
        findings += _differences(good, command)
    elif len(good) == 1 and not bad:
        findings.append(Finding("hosts.packages", Status.SKIP, "one host: nothing to compare"))
    if len(answers) > 1:  # one host: its ranks meet on it, a loopback name does no harm
        findings += _own_names(good, unroutable or {}, command)
    return findings


def compat_env_command_default(extra: str = "") -> str:
    """The compat env command of a fix when no environment or launcher is known (compare's own is told both)."""
    from .launchers.interface import compat_env_command

    return compat_env_command("", None, extra)


def _facts(answer: HostAnswer) -> Mapping[str, Any]:
    return (answer.document or {}).get("host") or {}


def _differences(good: Sequence[HostAnswer], command=compat_env_command_default) -> list[Finding]:  # noqa: ANN001
    names = [a.host for a in good]
    return _package_differences(good, names) + _oneccl_differences(good, names, command) + [_cpu_difference(good, names)]


def _package_differences(good: Sequence[HostAnswer], names: Sequence[str]) -> list[Finding]:
    """hosts.packages: a stack package that differs or is missing somewhere (FAIL), other packages that differ (WARN)."""
    findings: list[Finding] = []
    packages = {a.host: _facts(a).get("packages") or {} for a in good}
    for name in STACK:
        values = {host: packages[host].get(name) for host in names}
        if len(set(values.values())) > 1:
            missing = [h for h, v in values.items() if v is None]
            having = [h for h, v in values.items() if v is not None]
            summary = (f"{name} is installed on {', '.join(having)} only, not on {', '.join(missing)} ({_listing(values)})" if missing
                       else f"{name} differs between the hosts: {_listing(values)}")
            findings.append(Finding("hosts.packages", Status.FAIL, summary, (),
                                    "Install the same set on every host (compat install with the same requirements, or one image); every rank must run the same build."))
    others = sorted(n for n in set().union(*packages.values()) if n not in STACK and len({packages[h].get(n) for h in names}) > 1)
    if others:
        findings.append(Finding("hosts.packages", Status.WARN, f"{len(others)} other package(s) differ between the hosts: {', '.join(others[:8])}{' ...' if len(others) > 8 else ''}",
                                tuple(f"{n}: {_listing({h: packages[h].get(n) for h in names})}" for n in others[:20]),
                                "Usually harmless for the collectives, but a data or tokenizer package that differs changes what each rank trains on."))
    elif not findings:  # no stack package differs either
        findings.append(Finding("hosts.packages", Status.PASS, f"the same {len(packages[names[0]])} distributions on {', '.join(names)}"))
    return findings


def _oneccl_differences(good: Sequence[HostAnswer], names: Sequence[str], command) -> list[Finding]:  # noqa: ANN001
    """hosts.oneccl: bindings on some hosts only and transport variables that differ (FAIL), other oneCCL/libfabric/
    Intel MPI variables that differ (WARN)."""
    findings: list[Finding] = []
    bindings = {a.host: sorted((_facts(a).get("bindings") or {}).keys()) for a in good}
    if len({tuple(v) for v in bindings.values()}) > 1:
        findings.append(Finding("hosts.oneccl", Status.FAIL, "the oneCCL bindings import on some hosts only: " +
                                "; ".join(f"{', '.join(v) or 'none'} on {h}" for h, v in bindings.items()), (),
                                "Install oneccl_bind_pt on every host: a rank without it falls back to gloo (or fails with --ddp_backend ccl) while the others use ccl."))
    env = {a.host: _facts(a).get("oneccl_env") or {} for a in good}
    variables = sorted(set().union(*env.values()))
    breaking = [v for v in variables if v in TRANSPORT_VARIABLES and len({env[h].get(v) for h in names}) > 1]
    for variable in breaking:
        findings.append(Finding("hosts.oneccl", Status.FAIL, f"{variable} differs between the hosts: {_listing({h: env[h].get(variable) for h in names}, 'unset')}", (),
                                f"Set {variable} the same on every host (the job script, or {command()} on each): the ranks must use one transport."))
    drift = [v for v in variables if v not in breaking and len({env[h].get(v) for h in names}) > 1]
    if drift:
        findings.append(Finding("hosts.oneccl", Status.WARN, f"{len(drift)} oneCCL/libfabric/Intel MPI variable(s) differ between the hosts: {', '.join(drift[:8])}",
                                tuple(f"{v}: {_listing({h: env[h].get(v) for h in names}, 'unset')}" for v in drift[:20]),
                                f"Export the same environment on every host ({command()} in the job script)."))
    if not findings:
        findings.append(Finding("hosts.oneccl", Status.PASS, f"the same oneCCL bindings and variables on {', '.join(names)}"))
    return findings


def _cpu_difference(good: Sequence[HostAnswer], names: Sequence[str]) -> Finding:
    """hosts.cpu: bf16 native on some hosts only (FAIL), other CPU flags that differ (WARN), or the same flags (PASS)."""
    flags = {a.host: set(_facts(a).get("cpu_flags") or ()) for a in good}
    native = {h: sorted(f & NATIVE_BF16_FLAGS) for h, f in flags.items()}
    if len({bool(v) for v in native.values()}) > 1:
        with_bf16 = [h for h, v in native.items() if v]
        without = [h for h, v in native.items() if not v]
        return Finding("hosts.cpu", Status.FAIL, f"bf16 is native on {', '.join(with_bf16)} only ({', '.join(native[with_bf16[0]])}), not on {', '.join(without)}",
                       tuple(f"{h}: {', '.join(sorted(f & {'avx2', 'avx512f', 'avx512_core', *NATIVE_BF16_FLAGS})) or 'no avx2'}" for h, f in flags.items()),
                       f"A bf16 job runs emulated on {', '.join(without)} and every step waits for it: train in fp32 (--no-bf16) or on hosts of one kind.")
    if len({frozenset(f) for f in flags.values()}) > 1:
        return Finding("hosts.cpu", Status.WARN, "the hosts' CPUs differ (" + "; ".join(f"{h}: {len(f)} relevant flags" for h, f in flags.items()) + ")",
                       tuple(f"only on {h}: {', '.join(sorted(f - set.intersection(*flags.values())))}" for h, f in flags.items() if f - set.intersection(*flags.values())),
                       "Mixed CPUs work, at the pace of the slowest host; kernels that need a flag run only where it exists.")
    return Finding("hosts.cpu", Status.PASS, f"the same CPU flags on {', '.join(names)}" + (" (native bf16)" if any(native.values()) else ""))


def own_addresses(answers: Sequence[HostAnswer]) -> list[str]:
    """The addresses other than loopback that the hosts' own names resolve to and that they hold (gloo listens there)."""
    from .environment.interfaces import is_loopback

    found: dict[str, None] = {}
    for answer in answers:
        network = _facts(answer).get("network") or {}
        for address in network.get("own", network.get("resolves", [])):
            if not is_loopback(address):
                found.setdefault(address, None)
    return list(found)


def routes_from_here(addresses: Sequence[str]) -> dict[str, str]:
    """The addresses this host has no route to, with the kernel's error (a UDP socket connected to each: nothing is sent)."""
    from .environment.interfaces import route_source

    return {address: problem for address in addresses for source, problem in [route_source(address)] if source is None}


def _own_names(good: Sequence[HostAnswer], unroutable: Mapping[str, str], command=compat_env_command_default) -> list[Finding]:  # noqa: ANN001
    """hosts.network: each host's own name must resolve there to an address other than loopback. gloo listens on the
    address its host name resolves to and gives the other hosts that address: a name mapped to 127.0.1.1 (Debian's
    /etc/hosts line) or 127.0.0.1 makes them connect to their own loopback ("connectFullMesh failed ... remote=[127.0.1.1]").
    No finding when no host answered with its network facts (a compat before them)."""
    from .environment.interfaces import is_loopback

    told = [(a, _facts(a).get("network")) for a in good]
    if not any(network for _, network in told):
        return []
    master = good[0].host
    evidence = tuple(f"{a.host}: {_facts(a).get('name') or a.host} -> {', '.join(n['resolves']) or 'nothing'}" if n else f"{a.host}: not told (an older compat)"
                     for a, n in told)

    def usable(network: Mapping[str, Any]) -> list[str]:  # what gloo can listen on there: its own addresses, not loopback
        held = network["own"] if network.get("own") is not None else network["resolves"]  # an answer without "own": every address
        return [r for r in held if not is_loopback(r)]

    bad = [(a, n) for a, n in told if n and not usable(n)]
    if bad:
        answer, network = bad[0]
        own = _facts(answer).get("name") or answer.host
        named = own if own == answer.host else f"{own} ({answer.host})"
        foreign = [r for r in network["resolves"] if not is_loopback(r)]
        if foreign:
            summary = (f"{named} resolves its own name to {', '.join(foreign)}, no address of {answer.host}: gloo there falls back to 127.0.0.1 "
                       "(loopback) and the other hosts are told that address to reach it")
        elif network["resolves"]:
            summary = (f"{named} resolves its own name to {network['resolves'][0]} (loopback) only: gloo there listens on loopback and the other "
                       f"hosts are told {network['resolves'][0]} to reach it (connectFullMesh failed ... remote=[{network['resolves'][0]}])")
        else:
            summary = f"{named} cannot resolve its own name: gloo there falls back to loopback, which the other hosts cannot reach"
        others = [i for i in network["interfaces"] if i != "lo"]
        interface = others[0] if len(others) == 1 else "IFACE"
        fix = (f"On {answer.host}, map {own} to its cluster address in /etc/hosts or DNS (Debian's '127.0.1.1 {own}' line is the usual culprit), "
               f"or export the interface that reaches the master on every host: export GLOO_SOCKET_IFNAME={interface} "
               f"({command(f' --master-addr {master} --nnodes {len(good)}')} sets it, and oneCCL's and the MPI's with --launcher).")
        more = tuple(f"also {a.host}: its own name resolves to no address of its own other than loopback there" for a, _ in bad[1:])
        return [Finding("hosts.network", Status.FAIL, summary, more + evidence, fix)]
    cut_off = [(a, usable(n)) for a, n in told if n and all(address in unroutable for address in usable(n))]
    if cut_off:
        answer, addresses = cut_off[0]
        return [Finding("hosts.network", Status.FAIL, f"there is no route from this host to {answer.host}'s own address {addresses[0]} "
                        f"({unroutable[addresses[0]]}): gloo there listens on it, and the ranks here cannot reach it",
                        tuple(f"also {a.host} ({', '.join(x)})" for a, x in cut_off[1:]) + evidence,
                        f"Map {answer.host}'s name there to the address the other hosts reach it by (/etc/hosts or DNS on {answer.host}), "
                        f"or export GLOO_SOCKET_IFNAME on every host ({command(' --master-addr MASTER')} prints it).")]
    if not all(network for _, network in told):
        return [Finding("hosts.network", Status.SKIP, "some hosts did not tell what their own name resolves to (an older compat there)", evidence)]
    return [Finding("hosts.network", Status.PASS, f"every host's own name resolves there to an address of its own other than loopback ({', '.join(a.host for a in good)})", evidence)]
