"""compat export sbatch: a Slurm batch script (compat env, the live preflight under srun, then the training command
after -- under srun; export/service.py). Writes to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .interface import ExportFormat
from .pytorchjob import JOB_OPTIONS

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class Sbatch(ExportFormat):
    name = "sbatch"
    options = (*JOB_OPTIONS, "time", "partition", "watch")
    takes_command = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        slurm = parser.add_argument_group("sbatch (also --nnodes, --nproc-per-node, --name, --no-preflight, --watch)")
        slurm.add_argument("--time", metavar="T", help="the job's time limit, as Slurm takes it (MINUTES, HH:MM:SS, DAYS-HH:MM:SS)")
        slurm.add_argument("--partition", metavar="P", help="the partition to submit to (default: the cluster's)")

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...environment.snapshot import take_snapshot  # --python given: the set is what that environment holds
        from ...export import service

        snapshot = take_snapshot(args.target.interpreter) if args.target.interpreter else None
        sys.stdout.write(service.sbatch(planned, args.job, args.slurm, args.target.interpreter, (sys.executable, "-m", "compatmatrix"), snapshot))
        return EXIT_OK


FORMAT = Sbatch()
