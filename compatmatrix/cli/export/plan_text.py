"""compat export requirements | constraints | pip-command: the plan as pip reads it (render/requirements.py), the same
text as compat install --print FORMAT. Writes to stdout."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...errors import EXIT_OK, UsageError
from .interface import ExportFormat

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


def print_plan(planned: Planned, kind: str, require_hashes: bool) -> int:
    """requirements | constraints | pip-command: compat export FORMAT, and compat install --print FORMAT (the same text)."""
    from ...render.requirements import plan_text

    if require_hashes and kind != "pip-command":
        raise UsageError("A hash-pinned requirements file needs every dependency's hash, which compat knows only once it has downloaded them.",
                         "Run compat download -d DIR --require-hashes: it writes DIR/compat-wheelhouse.lock with all of them.")
    sys.stdout.write(plan_text(planned.plan, kind))
    return EXIT_OK


class PlanText(ExportFormat):
    options = ("require_hashes",)  # --require-hashes is an option of compat export itself (install --print shares it)

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, planned: Planned, args: ExportArgs) -> int:
        return print_plan(planned, self.name, args.sources.require_hashes)


REQUIREMENTS = PlanText("requirements")
CONSTRAINTS = PlanText("constraints")
PIP_COMMAND = PlanText("pip-command")
#: compat install --print's choices: the same texts
PLAN_TEXTS = (REQUIREMENTS, CONSTRAINTS, PIP_COMMAND)
