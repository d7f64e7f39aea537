"""compat doctor --hostfile FILE [--rsh PROG]: the static checks on every host of a job, through the remote shell the
job's mpirun uses, and what differs between the hosts in ways that break a job.

On each host compat runs ``compat check --json`` (the same interpreter path as here, and the same --python: a cluster's
shared file system or identical images put them at the same path), reads its findings and the host's facts (installed
distributions, CPU flags, oneCCL variables) and compares them. Pure except ``collect`` (the remote shell, one host at a
time, each under a deadline, in its own process group).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from .checks.finding import Finding, Status
from .environment.snapshot import NATIVE_BF16_FLAGS

REMOTE_TIMEOUT_S = 120.0
# a different version of any of these on two hosts of one job breaks it (DDP and oneCCL need the same build everywhere)
STACK = ("torch", "intel-extension-for-pytorch", "oneccl-bind-pt", "torch-ccl", "transformers", "accelerate", "torchvision", "torchaudio", "impi-rt")
# oneCCL / libfabric / Intel MPI variables whose difference between hosts breaks the ranks' transport
TRANSPORT_VARIABLES = ("CCL_ATL_TRANSPORT", "CCL_ATL_SHM", "CCL_CONFIGURATION", "FI_PROVIDER", "I_MPI_FABRICS", "I_MPI_OFI_PROVIDER")
ENV_PREFIXES = ("CCL_", "FI_", "I_MPI_")


def host_facts(snapshot, hostname: str) -> dict[str, Any]:
    """What a host's `compat check --json` carries for the comparison ("host" in the document)."""
    return {
        "name": hostname,
        "packages": snapshot.versions(),
        "cpu_flags": sorted(snapshot.cpu.flags),
        "oneccl_env": {k: v for k, v in sorted(snapshot.env.items()) if k.startswith(ENV_PREFIXES)},
        "bindings": {m: snapshot.modules[m] for m in ("oneccl_bindings_for_pytorch", "torch_ccl") if snapshot.modules.get(m)},
    }


@dataclass(frozen=True)
class HostAnswer:
    host: str
    document: Optional[Mapping[str, Any]]  # the host's compat check --json, None when it could not be had
    error: str = ""


def remote_command(python: Optional[str], ranks_per_node: int) -> str:
    """The command line the remote shell runs on each host (one string, as ssh passes it to the remote shell)."""
    words = [sys.executable, "-m", "compatmatrix", "check", "--json", "--ranks-per-node", str(ranks_per_node)]
    if python:
        words += ["--python", python]
    return shlex.join(words)


def collect(hosts: Sequence[str], rsh: str, command: str, env: Mapping[str, str], timeout: float = REMOTE_TIMEOUT_S) -> list[HostAnswer]:
    """Run ``rsh HOST command`` for each host, one after the other, each within ``timeout`` seconds."""
    from .environment.child import run_child

    answers = []
    for host in hosts:
        argv = [*shlex.split(rsh), host, command]
        try:
            ended = run_child(argv, timeout, env=env)
        except OSError as exc:
            answers.append(HostAnswer(host, None, f"{rsh} cannot be run: {exc.strerror or exc}"))
            continue
        out = ended.stdout.decode(errors="replace")
        err = ended.stderr.decode(errors="replace").strip().splitlines()
        if ended.timed_out:
            answers.append(HostAnswer(host, None, f"no answer within {timeout:g} s"))
            continue
        try:
            document = json.loads(out)
        except ValueError:
            said = err[-1] if err else (out.strip().splitlines() or ["no output"])[-1]
            answers.append(HostAnswer(host, None, f"exit status {ended.returncode}: {said[:300]}"))
            continue
        answers.append(HostAnswer(host, document))
    return answers


def _listing(values: Mapping[str, Optional[str]], missing: str = "not installed") -> str:
    return "; ".join(f"{value if value is not None else missing} on {host}" for host, value in values.items())


def compare(answers: Sequence[HostAnswer], rsh: str, rsh_source: str) -> list[Finding]:
    """Findings from the hosts' answers: who could not be checked, each host's own failures, and every difference that
    breaks a job (one finding per difference, naming the hosts)."""
    findings: list[Finding] = []
    good = [a for a in answers if a.document is not None]
    bad = [a for a in answers if a.document is None]
    for answer in bad:
        findings.append(Finding("hosts.reach", Status.FAIL, f"{answer.host}: compat check could not run there through {rsh}: {answer.error}",
                                (f"remote shell: {rsh} ({rsh_source})",),
                                f"Check that `{rsh} {answer.host} true` works without a password, and that compat and --python exist at the same path there."))
    if good and not bad:
        findings.append(Finding("hosts.reach", Status.PASS, f"compat check ran on {len(good)} hosts ({', '.join(a.host for a in good)}) through {rsh}",
                                (f"remote shell: {rsh} ({rsh_source})",)))
    for answer in good:
        failed = [c for c in answer.document.get("checks", []) if c.get("status") == "fail"]
        if failed:
            first = failed[0]
            findings.append(Finding("hosts.checks", Status.FAIL, f"{answer.host}: {first['id']}: {first['summary']}",
                                    tuple(f"{answer.host}: {c['id']}: {c['summary']}" for c in failed[1:]), first.get("fix", "")))
    if len(good) >= 2:
        findings += _differences(good)
    elif len(good) == 1 and not bad:
        findings.append(Finding("hosts.packages", Status.SKIP, "one host: nothing to compare"))
    return findings


def _facts(answer: HostAnswer) -> Mapping[str, Any]:
    return (answer.document or {}).get("host") or {}


def _differences(good: Sequence[HostAnswer]) -> list[Finding]:
    findings: list[Finding] = []
    names = [a.host for a in good]
    packages = {a.host: _facts(a).get("packages") or {} for a in good}
    stack_differs = False
    for name in STACK:
        values = {host: packages[host].get(name) for host in names}
        if len(set(values.values())) > 1:
            stack_differs = True
            missing = [h for h, v in values.items() if v is None]
            if missing:
                having = [h for h, v in values.items() if v is not None]
                summary = f"{name} is installed on {', '.join(having)} only, not on {', '.join(missing)} ({_listing(values)})"
            else:
                summary = f"{name} differs between the hosts: {_listing(values)}"
            findings.append(Finding("hosts.packages", Status.FAIL, summary, (),
                                    "Install the same set on every host (compat install with the same requirements, or one image); every rank must run the same build."))
    others = sorted(n for n in set().union(*packages.values()) if n not in STACK and len({packages[h].get(n) for h in names}) > 1)
    if others:
        findings.append(Finding("hosts.packages", Status.WARN, f"{len(others)} other package(s) differ between the hosts: {', '.join(others[:8])}{' ...' if len(others) > 8 else ''}",
                                tuple(f"{n}: {_listing({h: packages[h].get(n) for h in names})}" for n in others[:20]),
                                "Usually harmless for the collectives, but a data or tokenizer package that differs changes what each rank trains on."))
    elif not stack_differs:
        findings.append(Finding("hosts.packages", Status.PASS, f"the same {len(packages[names[0]])} distributions on {', '.join(names)}"))
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
                                f"Set {variable} the same on every host (the job script or `compat env` on each): the ranks must use one transport."))
    drift = [v for v in variables if v not in breaking and len({env[h].get(v) for h in names}) > 1]
    if drift:
        findings.append(Finding("hosts.oneccl", Status.WARN, f"{len(drift)} oneCCL/libfabric/Intel MPI variable(s) differ between the hosts: {', '.join(drift[:8])}",
                                tuple(f"{v}: {_listing({h: env[h].get(v) for h in names}, 'unset')}" for v in drift[:20]),
                                "Export the same environment on every host (eval \"$(compat env)\" in the job script)."))
    if not breaking and not drift and len({tuple(v) for v in bindings.values()}) == 1:
        findings.append(Finding("hosts.oneccl", Status.PASS, f"the same oneCCL bindings and variables on {', '.join(names)}"))
    flags = {a.host: set(_facts(a).get("cpu_flags") or ()) for a in good}
    native = {h: sorted(f & NATIVE_BF16_FLAGS) for h, f in flags.items()}
    if len({bool(v) for v in native.values()}) > 1:
        with_bf16 = [h for h, v in native.items() if v]
        without = [h for h, v in native.items() if not v]
        findings.append(Finding("hosts.cpu", Status.FAIL, f"bf16 is native on {', '.join(with_bf16)} only ({', '.join(native[with_bf16[0]])}), not on {', '.join(without)}",
                                tuple(f"{h}: {', '.join(sorted(f & {'avx2', 'avx512f', 'avx512_core', *NATIVE_BF16_FLAGS})) or 'no avx2'}" for h, f in flags.items()),
                                f"A bf16 job runs emulated on {', '.join(without)} and every step waits for it: train in fp32 (--no-bf16) or on hosts of one kind."))
    elif len({frozenset(f) for f in flags.values()}) > 1:
        findings.append(Finding("hosts.cpu", Status.WARN, "the hosts' CPUs differ (" + "; ".join(f"{h}: {len(f)} relevant flags" for h, f in flags.items()) + ")",
                                tuple(f"only on {h}: {', '.join(sorted(f - set.intersection(*flags.values())))}" for h, f in flags.items() if f - set.intersection(*flags.values())),
                                "Mixed CPUs work, at the pace of the slowest host; kernels that need a flag run only where it exists."))
    else:
        findings.append(Finding("hosts.cpu", Status.PASS, f"the same CPU flags on {', '.join(names)}" + (" (native bf16)" if any(native.values()) else "")))
    return findings
