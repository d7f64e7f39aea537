"""What an output format of compat export is (pip-audit's ``_format/interface.py``): its name, the options it alone
takes, whether it runs the training command after ``--``, its argument group, and how it writes the planned set. One
module per format beside this one; the registry (``formats.py``) lists them. Pure: ``write`` writes to stdout only.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...options import ExportArgs
    from ...planning import Planned


class ExportFormat(ABC):
    """One FORMAT of ``compat export FORMAT``."""

    #: the word on the command line
    name: str = ""
    #: the options (argparse dests) this format takes besides the resolve options every format takes, in the order they
    #: are named when refused; another format (or --validate) given one of them with a value other than its default is
    #: a usage error that names this format
    options: tuple[str, ...] = ()
    #: the format runs the training command after ``--`` (the others refuse one)
    takes_command: bool = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this format's own argument group (a format without options adds none)."""
        return None

    @abstractmethod
    def write(self, planned: Planned, args: ExportArgs) -> int:
        """Write the planned set to standard output; the exit code (0 written; a refusal raises a CompatError)."""
