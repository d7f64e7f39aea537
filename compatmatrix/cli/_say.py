"""The two things every command may say on stderr: one line (an error, a progress line), and why there is no
consistent set. Side effects: writes to stderr."""

from __future__ import annotations

import sys

from ..console import make_console, visible
from ..errors import EXIT_PROBLEMS


def say_error(line: str) -> None:
    """One line to stderr (errors and install progress), a URL's credentials masked (redact.py)."""
    from ..redact import redact_text

    try:
        sys.stderr.write(visible(redact_text(line)) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def say_conflict(no_color: bool, error) -> int:
    """No consistent set for a command that needed one: the reasons and what would work, on stderr; exit 1."""
    from ..render.text import render_outcome

    render_outcome(make_console(no_color, stderr=True), error.conflict)
    return EXIT_PROBLEMS
