"""The errors an install ends with: one sentence, the fix, and what the environment looks like now. No side effects."""

from __future__ import annotations

from ..errors import EXIT_PROBLEMS, EXIT_TOOL_ERROR, CompatError


class InstallError(CompatError):
    """The install was refused or failed (exit 1); ``state`` says what the environment looks like now:
    "unchanged", "restored", or "unknown" (a restore failed half-way; the message says where things are)."""

    exit_code = EXIT_PROBLEMS

    def __init__(self, message: str, fix: str = "", state: str = "unchanged", findings: tuple = ()) -> None:
        super().__init__(message, fix)
        self.state = state
        self.findings = findings


class InstallInputError(InstallError):
    """Input compat cannot use (exit 2): a crafted journal, a local "wheel" that is no regular file, a folder
    that is a file, an environment compat cannot write to. Nothing was done."""

    exit_code = EXIT_TOOL_ERROR


class InstallInterrupted(InstallError):
    """SIGINT (exit 130) or SIGTERM/SIGHUP (exit 143) stopped the install; the environment was put back first."""

    def __init__(self, message: str, fix: str, terminated: bool, state: str = "restored") -> None:
        super().__init__(message, fix, state=state)
        self.exit_code = 143 if terminated else 130
