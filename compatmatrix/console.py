"""The console people read (rich: colour only on a terminal, NO_COLOR honoured) and JSON for machines.

rich costs ~20 ms of start-up (importing it, making a Console) and is needed only for colour, tables and lines
it would wrap. :func:`make_console` returns a :class:`TextConsole`: when rich would write no escape codes at all
(the stream is not a terminal and no variable forces one) it writes the lines rich would write itself -- a
single line of console markup whose text is printable ASCII, holds no backslash and fits the width: rich writes
exactly that text -- and hands everything else (colour, tables, long or non-ASCII lines, escaped brackets) to a
rich Console, made on first use. ``--json``, ``--help`` and ``--version`` never import rich.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from rich.console import Console

JSON_SCHEMA_VERSION = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports it: not "problems found" (1)
WIDTH = 160  # off a terminal: logs (CI, pre-commit) are read later and searched, so no wrapping at rich's 80 columns

#: rich's console markup tags (rich.markup.RE_TAGS without the backslashes before them, which TextConsole refuses).
_TAG = re.compile(r"\[[a-z#/@][^\[]*?\]")
#: rich's words: a run of non-space characters with the spaces before and after it (rich._wrap.re_word).
_WORD = re.compile(r"\s*\S+\s*")
#: Characters beyond printable ASCII that compat's texts use, each one cell wide for rich (tests/test_console.py).
NARROW = frozenset("·–—®×≥≤→…")
#: Variables that make rich treat any stream as a terminal (or size it): with one set, rich writes every line.
_RICH_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "JUPYTER_COLUMNS")


def _rich_console_class() -> type:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            _broken_pipe()

    return _Console


def _broken_pipe() -> None:
    # The reader went away (`compat matrix | head`). rich would exit 1, our "problems found".
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


class TextConsole:
    """``print(markup, style=..., highlight=...)`` as rich.console.Console prints it (the subset compat's renderers use),
    with rich imported only for what needs it."""

    def __init__(self, no_color: bool = False, stderr: bool = False) -> None:
        self._no_color = no_color
        self._stderr = stderr
        self._rich: Optional[Console] = None
        try:
            terminal = self._stream.isatty()
        except (AttributeError, ValueError):
            terminal = True  # rich decides
        import builtins

        jupyter = hasattr(builtins, "get_ipython")  # IPython's shell (rich renders for it)
        self._plain = not terminal and not jupyter and not any(name in os.environ for name in _RICH_VARIABLES)
        self._width = None if terminal or os.environ.get("COLUMNS") else WIDTH

    @property
    def _stream(self) -> Any:
        return sys.stderr if self._stderr else sys.stdout

    def rich(self) -> Console:
        """The rich Console behind this one (made, and rich imported, on first use)."""
        if self._rich is None:
            # rich already honours NO_COLOR and only colours a terminal; --no-color forces it off.
            # emoji=False: stage names such as "trainer:train:" must not turn into pictures
            self._rich = _rich_console_class()(no_color=self._no_color or None, stderr=self._stderr, highlight=False, soft_wrap=False,
                                               width=self._width, emoji=False)
        return self._rich

    def print(self, *objects: Any, style: Any = None, highlight: Optional[bool] = None, **options: Any) -> None:
        from .redact import redact_text

        objects = tuple(redact_text(o) if isinstance(o, str) else o for o in objects)  # a URL's credentials: masked (redact.py)
        if self._plain and len(objects) == 1 and not options and isinstance(objects[0], str):
            text = self._plain_text(objects[0])
            if text is not None:
                self._write(text + "\n")
                return
        self.rich().print(*objects, style=style, highlight=highlight, **options)

    def _plain_text(self, markup: str) -> Optional[str]:
        """What rich writes for ``markup`` off a terminal, or None when that takes rich to say (see the module)."""
        if "\\" in markup:
            return None
        text = _TAG.sub("", markup) if "[" in markup else markup
        lines = []
        for line in text.split("\n"):
            if not (line.isascii() and line.isprintable()) and not all(c in NARROW or (c.isascii() and c.isprintable()) for c in line):
                return None
            if len(line) <= WIDTH:
                lines.append(line)
                continue
            wrapped = wrap(line, WIDTH)
            if wrapped is None:
                return None
            lines += wrapped
        return "\n".join(lines)

    def _write(self, text: str) -> None:
        stream = self._stream
        try:
            stream.write(text)
            stream.flush()  # as rich does after each print: stdout and stderr stay in order
        except BrokenPipeError:
            _broken_pipe()  # what rich does (on_broken_pipe), for either stream


def wrap(line: str, width: int) -> Optional[list[str]]:
    """rich's word wrap of one line of one-cell characters (rich._wrap.divide_line, then Text.rstrip_end): greedy, a
    word and its trailing spaces at a time, a line ending in the spaces of its last word unless they pass ``width``;
    None for a word longer than ``width`` or a line of spaces alone (rich folds or crops those)."""
    breaks = []
    offset = 0
    found = False
    for match in _WORD.finditer(line):
        found = True
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if length > width:
            return None
        if width - offset >= length:
            offset += len(word)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    if not found:
        return None
    pieces = [line[a:b] for a, b in zip([0, *breaks], [*breaks, len(line)])]
    out = []
    for piece in pieces:
        if len(piece) > width:  # Text.rstrip_end: trailing spaces beyond the width go
            excess = len(piece) - width
            spaces = len(piece) - len(piece.rstrip())
            piece = piece[: len(piece) - min(spaces, excess)]
            if len(piece) > width:
                return None  # rich would fold the rest
        out.append(piece)
    return out


def escape(text: str) -> str:
    """rich.markup.escape, which changes nothing in a text without "[" or a backslash (rich is not imported then)."""
    if "[" not in text and "\\" not in text:
        return text
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def make_console(no_color: bool = False, stderr: bool = False) -> TextConsole:
    return TextConsole(no_color=no_color, stderr=stderr)


def dump_json(data: Mapping[str, Any]) -> str:
    """A --json document; every string in it with a URL's credentials masked (redact.py)."""
    from .redact import redact_document

    return json.dumps(redact_document(data), indent=2, sort_keys=False)
