"""compat export ray: a Ray Train driver (render/ray.py) that runs the live preflight as one Ray task per node, then the
training command after -- on every Ray Train worker (export/service.py decides the shape). Ray itself is not imported:
the driver imports it where it runs. Writes to stdout; with --python, that environment is probed (its set, and compat
env's exports for it)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .._options import per_node_int, positive_int
from .interface import ExportFormat
from .pytorchjob import JOB_OPTIONS

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class RayDriver(ExportFormat):
    name = "ray"
    options = (*JOB_OPTIONS, "cpus_per_node", "gloo_timeout", "preflight_timeout", "no_runtime_pip")
    takes_command = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        ray = parser.add_argument_group("ray (also --nnodes, --nproc-per-node, --name, --no-preflight)")
        ray.add_argument("--cpus-per-node", type=per_node_int, metavar="C",
                         help="the CPUs Ray offers on each node (ray start --num-cpus); each rank asks for C / --nproc-per-node "
                         "of them (default: the CPUs compat may use on this machine)")
        ray.add_argument("--gloo-timeout", type=positive_int, default=300, metavar="S",
                         help="TorchConfig's timeout_s for Ray's gloo group (default 300; Ray's own default, 1800, turns a "
                         "cross-host fault into a half-hour hang)")
        ray.add_argument("--preflight-timeout", type=positive_int, default=120, metavar="S",
                         help="the preflight's --live-timeout on each node (default 120); the driver waits 60 s more for each node's answer")
        ray.add_argument("--no-runtime-pip", action="store_true",
                         help="leave the set out of the driver's runtime_env (the nodes' Python already holds it; --python ENV "
                         "that holds it implies this)")

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...export import service

        snapshot, env = None, None
        if args.target.interpreter:
            from ...checks.registry import Context, Options
            from ...environment.snapshot import take_snapshot
            from ...shell_env import plan_env

            snapshot = take_snapshot(args.target.interpreter)  # the set is what that environment holds
            ranks = args.job.nproc_per_node
            env = plan_env(Context(planned.matrix, snapshot, Options(ranks_per_node=ranks)), ranks, "ray", None, args.job.nnodes)
        sys.stdout.write(service.ray(planned, args.job, args.ray, args.target.interpreter, (sys.executable, "-m", "compatmatrix"), snapshot, env))
        return EXIT_OK


FORMAT = RayDriver()
