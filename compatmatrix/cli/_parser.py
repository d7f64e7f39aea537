"""compat's argparse parser: usage errors end with exit 2 and one line that says how to get help; a subcommand's
arguments are made on its first use (``populate``); the training command after ``--`` is kept apart. Pure (it writes
only argparse's own usage lines to stderr)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Callable, Optional

from ..console import visible
from ..errors import EXIT_TOOL_ERROR, shown


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors end with exit 2 and one line that says how to get help.

    With ``command_after_dashes`` set (compat export), the words after the first ``--`` are kept apart as
    ``training_command`` (None without ``--``) and the rest is parsed intermixed, so REQUIREMENTs may stand before or
    after the options."""

    command_after_dashes = False
    #: a subcommand whose training command is argparse's REMAINDER (launch, translate, migrate, tune): an option it does
    #: not know, before the command, is refused by name (REMAINDER would take it, and everything after it, as the command)
    command_remainder = False
    _inner = False
    #: adds the arguments on first use: a subcommand's options (and its module, cli/<command>.py) cost nothing to the
    #: other commands; building every command's options would cost ~10 ms of every command's start-up
    populate: Optional[Callable[[argparse.ArgumentParser], None]] = None

    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        from ..redact import redact_text

        self.print_usage(sys.stderr)  # argparse quotes what it refused ("unrecognized arguments: --index ...=https://u:p@..."): masked
        # ... and quotes it as given ("unrecognized arguments: --bad\x1b]0;..."): made visible like every error
        self.exit(EXIT_TOOL_ERROR, f"compat: error: {visible(redact_text(message))}. Run '{self.prog} --help' for the options.\n")

    def ensure_arguments(self) -> argparse.ArgumentParser:
        """Make this subcommand's arguments now, if they are not made yet (a test reads a subcommand's actions)."""
        if self.populate is not None:
            populate, self.populate = self.populate, None
            populate(self)
        return self

    def _refuse_unknown_options_before_the_command(self, words: Sequence[str]) -> None:
        """Read the words up to where argparse's REMAINDER would start (the first word that is neither an option of this
        command nor its value, or ``--``) and refuse the first option this command does not have."""
        index = 0
        while index < len(words):
            word = words[index]
            if word == "--" or not word.startswith("-") or word == "-":
                return
            name = word.split("=", 1)[0]
            action = self._option_string_actions.get(name)
            if action is None and not word.startswith("--") and word[:2] in self._option_string_actions:
                index += 1  # a short option with its value attached (-rFILE)
                continue
            if action is None and self.allow_abbrev and name.startswith("--"):
                matches = {a for option, a in self._option_string_actions.items() if option.startswith(name)}
                if len(matches) > 1:
                    return  # argparse names the ambiguity itself
                action = matches.pop() if matches else None
            if action is None:
                self.error(f"unrecognized option '{shown(word, 80)}' (the training command goes after --)")
            takes = action.nargs if action.nargs is not None else 1
            index += 1 + (takes if isinstance(takes, int) and "=" not in word else 0)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self.ensure_arguments()
        if self.command_remainder and not self._inner:
            self._refuse_unknown_options_before_the_command(list(sys.argv[1:] if args is None else args))
        if not self.command_after_dashes or self._inner:  # parse_known_intermixed_args calls back in (Python < 3.12)
            return super().parse_known_args(args, namespace)
        words = list(sys.argv[1:] if args is None else args)
        split = words.index("--") if "--" in words else len(words)
        self._inner = True
        try:
            namespace, extras = self.parse_known_intermixed_args(words[:split], namespace)
        finally:
            self._inner = False
        namespace.training_command = tuple(words[split + 1:]) if split < len(words) else None
        return namespace, extras

