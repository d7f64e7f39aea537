"""A SkyPilot task for the job contract (jobspec.JobSpec), as plain data; render/manifest.py writes the YAML.

What the task carries, and why (SkyPilot 0.14: sky/utils/schemas.py get_task_schema and get_resources_schema;
docs/source/running-jobs/distributed-jobs.rst and environment-variables.rst of github.com/skypilot-org/skypilot):
- ``num_nodes`` the job's nodes; ``resources.cpus`` / ``resources.memory`` as given (SkyPilot's forms: ``8`` exactly,
  ``8+`` at least; memory in GB, ``32`` or ``32+``); ``workdir: .`` so the training script and compat's wheel
  (``compat-dist/compatmatrix-*.whl``, as for compat export dockerfile) reach every node (~/sky_workdir).
- ``envs`` the contract's exports: the thread plan of the CPUs asked (compat env on the node replaces it with the plan of
  the node's own CPUs).
- ``setup`` compat in its own venv from that wheel, then ``compat install`` of the set into the training venv.
- ``run`` ``compat env`` (the node's oneCCL and interface settings for the master's route), the live preflight
  (``compat doctor --live`` with SkyPilot's rendezvous: its findings stop the job), then torchrun with the CPU rank
  count of the plan. Never ``$SKYPILOT_NUM_GPUS_PER_NODE``: SkyPilot's own distributed recipe passes it as
  ``--nproc_per_node``, and it is 0 on a CPU node. The master is the first line of ``SKYPILOT_NODE_IPS``, the node
  rank ``SKYPILOT_NODE_RANK``.

Every word from the user is one bash word (``shlex.quote``; NUL and lone surrogates refused), so ``run`` and ``setup``
are correct bash scripts whatever the training command holds. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..values import UnwritableValue

if TYPE_CHECKING:
    from ..jobspec import JobSpec

CPUS = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?)\+?")  # sky/resources.py _set_cpus: a number, or "<number>+"
MEMORY = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?)(?:GB|TB)?\+?")  # resources_utils.parse_memory_resource, the units a node has
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
COMPAT = '"$HOME/compat/bin/compat"'  # compat's own venv on every node, made by setup
TRAIN_VENV = '"$HOME/compat-train"'  # the training venv setup makes on every node
WHEEL = "compat-dist/compatmatrix-*.whl"  # in the workdir: pip wheel --no-deps -w compat-dist <compatmatrix source>


class ResourceError(ValueError):
    """A value SkyPilot would not take (the message names the option)."""


def check_resources(cpu: str, memory: str) -> None:
    """--cpu and --memory in SkyPilot's forms, or ResourceError naming the option."""
    if not CPUS.fullmatch(cpu) or float(cpu.rstrip("+")) <= 0:
        raise ResourceError(f"--cpu {cpu!r} is not SkyPilot's CPU count (8 for exactly 8 vCPUs, 8+ for at least 8)")
    if not MEMORY.fullmatch(memory) or float(memory.rstrip("+").rstrip("BGT")) <= 0:
        raise ResourceError(f"--memory {memory!r} is not SkyPilot's memory (GB: 32 exactly, 32+ at least, or 32GB)")


def _word(word: str, what: str) -> str:
    from ..render.sbatch import word_ok

    why = word_ok(word)
    if why:
        raise UnwritableValue(what, word, "a SkyPilot task's bash script", why)
    return shlex.quote(word)


def _words(words: Sequence[str], what: str) -> str:
    return " ".join(_word(word, what) for word in words)


def _python(spec: JobSpec) -> str:
    return _word(spec.python, "interpreter (--python)") if spec.python else TRAIN_VENV[:-1] + '/bin/python"'


def setup_script(spec: JobSpec) -> str:
    """compat in its own venv (from the workdir's wheel), the training venv, compat install of the set."""
    profile = f"--profile {_word(spec.set.profile, 'profile')} " if spec.set.profile else ""
    pins = _words(spec.set.installable, "pin")
    lines = [
        "set -eu",
        "# compat in its own venv, never mixed with the training stack, from its wheel in the workdir (never by name from an index)",
        f"if [ ! -x {COMPAT} ]; then",
        '    python3 -m venv "$HOME/compat"',
        f'    "$HOME/compat/bin/pip" install --quiet {WHEEL}',
        "fi",
        f"python={_python(spec)}",
        "# the training venv (the set's Python must be the node's python3 when compat makes it)",
        '[ -x "$python" ] || python3 -m venv "$(dirname "$(dirname "$python")")"',
        f'{COMPAT} install --python "$python" {profile}--yes {pins}',
    ]
    return "\n".join(lines) + "\n"


def run_script(spec: JobSpec) -> str:
    """compat env, the live preflight, then torchrun with the plan's CPU ranks and SkyPilot's rendezvous."""
    ranks = spec.ranks_per_node
    master = spec.master
    command = _words(spec.command, "training command word")
    lines = [
        "set -eu",
        f"python={_python(spec)}",
        "# SkyPilot's rendezvous: the master is the first node of SKYPILOT_NODE_IPS; the ranks per node are the CPU plan's",
        "# (never SKYPILOT_NUM_GPUS_PER_NODE: 0 on a CPU node)",
        f'master="{master.addr}"',
        f'nnodes="{master.nnodes}"',
        f'node_rank="{master.node_rank}"',
        f"port={master.port}",
    ]
    if spec.env_step:
        lines += [
            "# the environment: compat env's thread and oneCCL settings for this node's CPUs, and the interface of its route to the master",
            f'compat_env="$({COMPAT} env --python "$python" --ranks-per-node {ranks} --launcher torchrun '
            '--master-addr "$master" --nnodes "$nnodes")" || { echo "compat env failed: see its error above; not training" >&2; exit 2; }',
            'eval "$compat_env"',
        ]
    if spec.preflight:
        lines += [
            "# the live preflight on every node with the job's rendezvous; its findings end the job",
            'echo "compat preflight: node $node_rank of $nnodes, master $master:$port" >&2',
            f'{COMPAT} doctor --live --json --only live --python "$python" --launcher torchrun --nproc-per-node {ranks} '
            '--nnodes "$nnodes" --node-rank "$node_rank" --master-addr "$master" --master-port "$port" '
            '|| { echo "compat preflight failed: see the JSON above; not training" >&2; exit 1; }',
        ]
    lines += [
        "# the training: torchrun (the training venv's) with the plan's ranks per node",
        f'exec "$python" -m torch.distributed.run --nnodes "$nnodes" --nproc_per_node {ranks} --node_rank "$node_rank" '
        f'--master_addr "$master" --master_port "$port" {command}',
    ]
    return "\n".join(lines) + "\n"


def task(spec: JobSpec) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the task document, the notes above it)."""
    if not NAME.fullmatch(spec.name):
        raise UnwritableValue("job name (--name)", spec.name, "a SkyPilot task", "a task name is letters, digits, '.', '_' and '-', at most 64")
    res = spec.resources
    check_resources(res.cpu or "", res.memory or "")
    document: dict[str, Any] = {
        "name": spec.name,
        "num_nodes": spec.nodes,
        "resources": {"cpus": res.cpu, "memory": res.memory},
        "workdir": ".",
        "envs": dict(spec.exports),
        "setup": setup_script(spec),
        "run": run_script(spec),
    }
    threads = f"OMP_NUM_THREADS={spec.threads.omp_threads} for {res.cpu} vCPUs per node" if spec.threads else "planned on each node"
    said = (
        f"{spec.nodes} nodes x {spec.ranks_per_node} ranks (torchrun, CPU ranks; never SKYPILOT_NUM_GPUS_PER_NODE, 0 on a CPU node): "
        f"world size {spec.world_size}",
        f"threads per rank: {threads}; compat env on each node replaces them with the plan of the node's own CPUs",
        f"master: {spec.master.found_by}, port {spec.master.port}",
        f"workdir . must hold the training script and compat's wheel ({WHEEL}: pip wheel --no-deps -w compat-dist <compatmatrix source>)",
    ) + (("every node runs compat doctor --live first (its findings stop the job)",) if spec.preflight else ())
    return document, said + spec.notes
