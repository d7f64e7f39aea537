"""The registry of compat export's formats (pip-audit's ``OutputFormatChoice``): FORMAT on the command line -> its
module's ``ExportFormat``. A new format is its module beside this one, one line here, and its tests."""

from __future__ import annotations

from . import dockerfile, plan_text, pylock, pytorchjob, ray, sbatch, skypilot
from .interface import ExportFormat

#: in the order compat export's help names them (and their argument groups stand)
FORMATS: dict[str, ExportFormat] = {choice.name: choice for choice in (
    pytorchjob.FORMAT,
    sbatch.FORMAT,
    skypilot.FORMAT,
    ray.FORMAT,
    dockerfile.FORMAT,
    plan_text.REQUIREMENTS,
    plan_text.CONSTRAINTS,
    plan_text.PIP_COMMAND,
    pylock.FORMAT,
)}
