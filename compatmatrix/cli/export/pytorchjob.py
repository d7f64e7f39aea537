"""compat export pytorchjob: a Kubeflow PyTorchJob (--trainer-v2: a Trainer TrainJob) that runs the training command
after -- under torchrun, each pod holding the planned set (export/service.py builds it, render/manifest.py writes the
YAML). Writes to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .._options import per_node_int, positive_int
from .interface import ExportFormat

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned

#: the options of a job: pytorchjob's group holds them, sbatch takes them too
JOB_OPTIONS = ("nnodes", "nproc_per_node", "name", "no_preflight")


class PyTorchJob(ExportFormat):
    name = "pytorchjob"
    options = (*JOB_OPTIONS, "image", "cpu", "memory", "namespace", "shm_size", "threads_per_core", "trainer_v2", "watch", "watch_claim")
    takes_command = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        job = parser.add_argument_group("pytorchjob")
        job.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="pods (nodes): a Master and N-1 Workers (default 1)")
        job.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=per_node_int, default=1, metavar="M",
                         help="ranks per pod (default 1), started by torchrun")
        job.add_argument("--image", metavar="IMG", help="the image that holds the set (compat export dockerfile writes its Dockerfile); required")
        job.add_argument("--cpu", metavar="C", help="CPUs per pod, a Kubernetes quantity (8, 7500m): requests = limits; the thread plan follows it; required "
                         "(skypilot: vCPUs per node, 8 or 8+ for at least 8)")
        job.add_argument("--memory", metavar="M", help="memory per pod (16Gi): requests = limits; required (skypilot: GB per node, 32 or 32+)")
        job.add_argument("--name", default="compat-train", metavar="NAME", help="the job's name, a DNS-1035 label (default compat-train)")
        job.add_argument("--namespace", metavar="NS", help="the job's namespace (default: none in the manifest)")
        job.add_argument("--shm-size", default="2Gi", metavar="S", help="size of the Memory emptyDir mounted at /dev/shm (default 2Gi)")
        job.add_argument("--threads-per-core", type=per_node_int, default=1, metavar="K",
                         help="2 when the pod's CPU units are hyperthreads of SMT nodes (the plan then counts physical cores); default 1")
        job.add_argument("--no-preflight", action="store_true", help="no compat doctor --live in every pod before training")
        job.add_argument("--trainer-v2", action="store_true", help="write a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) instead")
        job.add_argument("--watch", action="store_true",
                         help="pytorchjob, sbatch: the nodes run the training under compat launch --watch (a stalled or dead rank, or a straggler, named "
                         "in the job's log); sbatch: the run folder in the submit directory; pods: each its own unless --watch-claim")
        job.add_argument("--watch-claim", metavar="CLAIM",
                         help="with --watch, several pods: a ReadWriteMany PersistentVolumeClaim every pod mounts at /compat-watch, one run folder "
                         "for every pod's ranks (then each pod's watcher sees every rank, stalls across pods too)")

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...export import service
        from ...render.manifest import manifest_text

        release = service.trainer_release(args.trainer_version, args.crd) if args.job.trainer_v2 else None
        manifest = service.job_manifest(planned, args.job, release)
        sys.stdout.write(manifest_text(manifest.document, manifest.notes))
        return EXIT_OK


FORMAT = PyTorchJob()
