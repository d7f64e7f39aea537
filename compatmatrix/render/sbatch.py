"""``compat export sbatch``: a Slurm batch script for a resolved set, as text.

The script, in order: ``#SBATCH`` resources (whole nodes: ``--exclusive``, so that compat launch's CPU plan of the node
holds; ``--nodes``, ``--ntasks-per-node`` = ranks per node); the environment of ``compat env --launcher srun`` (its
thread and oneCCL settings, for the ranks' interpreter); the live preflight as a step of its own, one compat per node
(``srun --ntasks-per-node=1 compat doctor --live``: world, node rank and master from the allocation), which ends the
job with its findings before training when it fails; then the training step: ``compat launch --launcher srun``, which
plans the node's CPUs and runs the srun line (each task a rank, bound to its CPUs); with --watch, ``compat launch
--launcher srun --watch --watch-dir`` a folder of the submit directory (jobspec.SLURM_WATCH).

Every value is checked before it is written: the ``#SBATCH`` values by whole-string rules (sbatch reads those lines
itself, without a shell), the words of the commands quoted for bash (``shlex.quote``: any character but NUL and a lone
surrogate, which no file or argument can hold), comments by ``values.comment_text``. Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..values import UnwritableValue, comment_text

if TYPE_CHECKING:
    from ..jobspec import JobSpec

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TIME = re.compile(r"(?:[0-9]{1,4}-)?[0-9]{1,5}(?::[0-9]{1,2}){0,2}")  # Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_PARTITION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}(?:,[A-Za-z0-9_][A-Za-z0-9._-]{0,63}){0,15}")  # sbatch takes a list: cpu,debug


@dataclass(frozen=True)
class BatchShape:
    name: str
    nnodes: int
    nproc_per_node: int
    python: str  # the ranks' interpreter: the environment that holds the set, at the same path on every node
    compat: tuple[str, ...]  # how the nodes run compat (an interpreter -m compatmatrix, or a compat script)
    command: tuple[str, ...]  # what each rank runs
    time: Optional[str] = None
    partition: Optional[str] = None
    preflight: bool = True
    watch_dir: Optional[str] = None  # with --watch: the run folder, a bash expression (jobspec.SLURM_WATCH); None: no watch


def word_ok(word: str) -> str:
    """Why ``word`` cannot be one quoted bash word ('' when it can): NUL (no argument holds one), a lone surrogate."""
    if "\0" in word:
        return "it holds a NUL character, which no command-line argument can"
    if any("\ud800" <= ch <= "\udfff" for ch in word):
        return "it holds a lone surrogate, which is not a character"
    return ""


def _words(words: Sequence[str], what: str) -> str:
    for word in words:
        why = word_ok(word)
        if why:
            raise UnwritableValue(what, word, "an sbatch script", why)
    return " ".join(shlex.quote(word) for word in words)


def check_shape(shape: BatchShape) -> None:
    """Every #SBATCH value by its whole-string rule, or UnwritableValue naming it."""
    if not _JOB_NAME.fullmatch(shape.name):
        raise UnwritableValue("job name (--name)", shape.name, "an #SBATCH line", "a job name is letters, digits, '.', '_' and '-', at most 64")
    if shape.time is not None and not _TIME.fullmatch(shape.time):
        raise UnwritableValue("time limit (--time)", shape.time, "an #SBATCH line", "Slurm takes MINUTES, HH:MM:SS or DAYS-HH:MM:SS")
    if shape.partition is not None and not _PARTITION.fullmatch(shape.partition):
        raise UnwritableValue("partition (--partition)", shape.partition, "an #SBATCH line", "a partition name is letters, digits, '.', '_' and '-' (several joined by commas)")
    if shape.nnodes < 1 or shape.nproc_per_node < 1:
        raise UnwritableValue("node or rank count", f"{shape.nnodes}x{shape.nproc_per_node}", "an #SBATCH line", "both must be at least 1")


def sbatch_text(shape: BatchShape, notes: Sequence[str] = ()) -> str:
    check_shape(shape)
    compat = _words(shape.compat, "compat command")
    python = _words([shape.python], "interpreter (--python)")
    command = _words(shape.command, "training command word")
    ranks = shape.nproc_per_node
    lines = ["#!/bin/bash", f"#SBATCH --job-name={shape.name}", f"#SBATCH --nodes={shape.nnodes}", f"#SBATCH --ntasks-per-node={ranks}",
             "#SBATCH --exclusive"]
    if shape.time is not None:
        lines.append(f"#SBATCH --time={shape.time}")
    if shape.partition is not None:
        lines.append(f"#SBATCH --partition={shape.partition}")
    lines += [f"# {comment_text(note)}" for note in ("written by compat export sbatch", *notes)]
    lines += [
        "set -eu",
        f"python={python}",
        "",
        "# the environment: compat env's thread and oneCCL settings for srun-started ranks, and the interface of this",
        "# (the batch) host's route to the master, the allocation's first host (as srun's tasks take it), for gloo and oneCCL",
        'master="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        # its own assignment, so that set -e sees compat env fail (eval "$(...)" would run what it printed and go on)
        f'compat_env="$({compat} env --python "$python" --ranks-per-node {ranks} --launcher srun '
        '--master-addr "$master" --nnodes "$SLURM_JOB_NUM_NODES")" || '
        '{ echo "compat env failed: see its error above; not training" >&2; exit 2; }',
        'eval "$compat_env"',
    ]
    if shape.preflight:
        lines += [
            "",
            "# the live preflight, one compat per node: world, node rank and master from the allocation; its findings end the job",
            'echo "compat preflight: ${SLURM_JOB_NUM_NODES} nodes, ' + str(ranks) + ' ranks each" >&2',
            'if ! srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 '
            f'{compat} doctor --live --only live --python "$python" --ranks-per-node {ranks}; then',
            '    echo "compat preflight failed: see its findings above; not training" >&2',
            "    exit 1",
            "fi",
        ]
    if shape.watch_dir is None:
        lines += [
            "",
            "# the training step: compat launch plans this node's CPUs and runs srun, each task a rank bound to its CPUs",
            f'exec {compat} launch --launcher srun --python "$python" --nproc-per-node {ranks} -- {command}',
            "",
        ]
    else:
        lines += [
            "",
            "# the training step: compat launch plans this node's CPUs and runs srun, each task a rank bound to its CPUs, and watches",
            "# the ranks (--watch): each rank's agent writes its ring into the run folder, on the file system every node sees",
            f"watch_dir={shape.watch_dir}",
            f'exec {compat} launch --launcher srun --watch --watch-dir "$watch_dir" --python "$python" --nproc-per-node {ranks} -- {command}',
            "",
        ]
    return "\n".join(lines)


def sbatch_for(spec: JobSpec, time: Optional[str] = None, partition: Optional[str] = None) -> str:
    """The batch script that runs the job contract (jobspec.JobSpec, launcher srun); ``time`` and ``partition`` are
    Slurm's own options."""
    shape = BatchShape(spec.name, spec.nodes, spec.ranks_per_node, spec.python or "", spec.compat, spec.command, time, partition, spec.preflight,
                       spec.watch.folder if spec.watch is not None else None)
    return sbatch_text(shape, spec.notes)
