"""compat export dockerfile: an image that installs the planned set with compat install and checks it
(export/service.py). Writes to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .._options import per_node_int
from .interface import ExportFormat

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class Dockerfile(ExportFormat):
    name = "dockerfile"
    options = ("base", "ranks_per_node", "wheelhouse")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        docker = parser.add_argument_group("dockerfile")
        docker.add_argument("--base", metavar="IMG", help="the base image (default python:X.Y-slim for the resolved set's Python)")
        docker.add_argument("--ranks-per-node", type=per_node_int, default=1, metavar="N", help="ranks per container, for compat env's thread settings (default 1)")
        docker.add_argument("--wheelhouse", metavar="DIR", help="install offline from this compat download folder of the build context")

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...export import service

        sys.stdout.write(service.dockerfile(planned, args.docker))
        return EXIT_OK


FORMAT = Dockerfile()
