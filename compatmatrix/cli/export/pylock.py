"""compat export pylock: the planned set as a PEP 751 pylock.toml (export/service.py). Writes to stdout."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK
from .interface import ExportFormat

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class Pylock(ExportFormat):
    name = "pylock"

    def write(self, planned: Planned, args: ExportArgs) -> int:
        from ...export import service

        sys.stdout.write(service.pylock(planned))
        return EXIT_OK


FORMAT = Pylock()
