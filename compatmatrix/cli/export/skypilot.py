"""compat export skypilot: a SkyPilot task (num_nodes, resources, setup = compat install of the set, run = compat env,
the live preflight, then torchrun with the CPU ranks and SkyPilot's rendezvous; export/skypilot.py builds it,
render/manifest.py writes the YAML). Writes to stdout."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .interface import ExportFormat
from .pytorchjob import JOB_OPTIONS

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class SkyPilot(ExportFormat):
    name = "skypilot"
    # --cpu / --memory / --threads-per-core are pytorchjob's options (its group defines them), in SkyPilot's forms here
    options = (*JOB_OPTIONS, "cpu", "memory", "threads_per_core")
    takes_command = True

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...environment.snapshot import take_snapshot  # --python given: the set is what that environment holds
        from ...export import service
        from ...render.manifest import manifest_text

        snapshot = take_snapshot(args.target.interpreter) if args.target.interpreter else None
        document, notes = service.skypilot(planned, args.job, snapshot)
        sys.stdout.write(manifest_text(document, ("written by compat export skypilot (sky launch FILE; never SKYPILOT_NUM_GPUS_PER_NODE)", *notes)))
        return EXIT_OK


FORMAT = SkyPilot()
