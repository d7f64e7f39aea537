"""Errors the tool reports as one sentence plus the fix, and the exit codes they map to."""

from __future__ import annotations

import errno
import os
from typing import Optional

from .redact import redact_text

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_TOOL_ERROR = 2


class CompatError(Exception):
    """An error of use or of the tool itself (exit 2): ``message`` says what, ``fix`` says what to do."""

    exit_code = EXIT_TOOL_ERROR

    def __init__(self, message: str, fix: str = "") -> None:
        message, fix = redact_text(message), redact_text(fix)  # a URL's credentials never reach a sentence (redact.py)
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} {self.fix}".strip()


class UsageError(CompatError):
    """The command line asks for something that cannot be understood."""


class MatrixError(CompatError):
    """The matrix file is malformed or inconsistent; names the file, the entry and the field."""

    def __init__(self, path: str, where: str, field: str, problem: str, fix: str = "") -> None:
        location = f"{path}: {where}" if where else path
        if field:
            location += f", field '{field}'"
        super().__init__(f"{location}: {problem}", fix or "Correct the matrix entry (see docs/MATRIX.md).")
        self.path = path
        self.where = where
        self.field = field
        self.problem = problem


class InterpreterError(CompatError):
    """A target interpreter could not be run or inspected."""


def shown(text: str, limit: int = 60) -> str:
    """User input quoted in an error message, cut so a 10,000-character argument cannot flood the terminal; a URL's
    credentials are masked first (a cut could leave half a password that no later rule recognises)."""
    text = redact_text(text).replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


_PATH_ERRORS = {
    errno.ENOENT: "does not exist (no such file or folder)",
    errno.ENOTDIR: "does not exist (a part of it is not a folder)",
    errno.ENAMETOOLONG: "is longer than the file system allows (a name over 255 bytes, or the whole path over 4096)",
    errno.ELOOP: "is a loop of symbolic links",
    errno.EACCES: "cannot be reached (permission denied on a folder on the way)",
}


def path_refused(path: str) -> Optional[str]:
    """Why a path given by the user cannot even be looked at, as words after the path ("does not exist (no such
    file or folder)", "is longer than the file system allows ..."); None when os.stat answers. One rule for every
    path from outside, so none reaches the internal-error guard as an OSError."""
    try:
        os.stat(path)
    except OSError as exc:
        return _PATH_ERRORS.get(exc.errno, f"cannot be looked at ({exc.strerror or exc})")
    except ValueError:  # an embedded NUL
        return "holds a NUL character, which no file name can"
    return None
