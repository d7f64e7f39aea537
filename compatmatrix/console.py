"""The console people read (rich: colour only on a terminal, NO_COLOR honoured) and JSON for machines.

rich costs ~20 ms of start-up (importing it, making a Console) and is needed only for colour, tables and lines
it would wrap. :func:`make_console` returns a :class:`TextConsole`: when rich would write no escape codes at all
(the stream is not a terminal and no variable forces one) it writes the lines rich would write itself -- a
single line of console markup whose text is printable ASCII and holds no backslash: rich writes
exactly that text -- and hands everything else (colour, tables, non-ASCII lines, escaped brackets) to a
rich Console, made on first use. ``--json``, ``--help`` and ``--version`` never import rich.

Off a terminal nothing is wrapped (rich soft-wraps: a line stays one line, whatever its length). Every text goes
through :func:`visible` on its way out, so control characters from outside show as escapes; NO_COLOR (any
non-empty value) and ``--no-color`` turn off every style escape code, on a terminal too.
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
WIDTH = 160  # off a terminal, the width of tables; lines are never wrapped there (soft wrap: logs are read later and searched)

#: rich's console markup tags (rich.markup.RE_TAGS without the backslashes before them, which TextConsole refuses).
_TAG = re.compile(r"\[[a-z#/@][^\[]*?\]")
#: Characters beyond printable ASCII that compat's texts use, each one cell wide for rich (tests/cli/test_console.py).
NARROW = frozenset("·–—®×≥≤→…")
#: Variables that make rich treat any stream as a terminal (or size it): with one set, rich writes every line.
_RICH_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "JUPYTER_COLUMNS")


#: Characters that act on a terminal instead of showing: C0 controls but newline and tab, DEL, C1 controls (U+0085
#: included), the line and paragraph separators and the bidirectional overrides and isolates ("Trojan source").
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LINE_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # newline and tab too


def _visible_escape(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every character that would act on a terminal (an escape sequence, a bell, a carriage return
    that overwrites the line, U+0085, a bidi override) written as a visible escape (``\\x1b``); newline and tab stay.
    The one rule for text compat writes for people: every console line and every error message goes through it,
    on a terminal and piped alike, so a value from outside (a file, a host's answer, an index) cannot drive the
    operator's terminal."""
    return _CONTROL.sub(_visible_escape, text) if not text.isprintable() else text


def visible_line(text: str) -> str:
    """``visible`` for a value that must stay on one line (a host's answer inside a finding): newline and tab are
    written as escapes too."""
    return _LINE_CONTROL.sub(_visible_escape, text)


def no_color_requested() -> bool:
    """NO_COLOR set to any non-empty value (no-color.org): no colour and no other styling escape codes."""
    return bool(os.environ.get("NO_COLOR"))


def _rich_console_class() -> type:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            _broken_pipe()

        def _render_buffer(self, buffer):  # noqa: ANN001, ANN202 - rich's own signature
            # The text of each segment made visible (console.visible) before rich adds its own style codes;
            # control segments (cursor moves of a progress display) are rich's and stay.
            from rich.segment import Segment

            return super()._render_buffer(Segment(visible(text), style, control) if not control else Segment(text, style, control)
                                          for text, style, control in buffer)

    return _Console


def rich_console(**options: Any) -> Console:
    """A rich Console that writes every value visibly (console.visible) and honours NO_COLOR fully."""
    if no_color_requested():
        options.update(no_color=True, color_system=None)
    return _rich_console_class()(**options)


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
        self._terminal = terminal
        self._width = None if terminal or os.environ.get("COLUMNS") else WIDTH

    @property
    def _stream(self) -> Any:
        return sys.stderr if self._stderr else sys.stdout

    def rich(self) -> Console:
        """The rich Console behind this one (made, and rich imported, on first use)."""
        if self._rich is None:
            # rich only colours a terminal; --no-color and NO_COLOR (rich_console) turn every style off.
            # emoji=False: stage names such as "trainer:train:" must not turn into pictures.
            # soft_wrap off a terminal: a log is read later and searched, so a line is never broken (tables keep WIDTH)
            options: dict[str, Any] = {"no_color": True, "color_system": None} if self._no_color else {}
            self._rich = rich_console(stderr=self._stderr, highlight=False, soft_wrap=not self._terminal, width=self._width, emoji=False, **options)
        return self._rich

    def print(self, *objects: Any, style: Any = None, highlight: Optional[bool] = None, **options: Any) -> None:
        from .redact import redact_text

        # a URL's credentials masked (redact.py), control characters shown as escapes, before rich measures it (tables)
        objects = tuple(visible(redact_text(o)) if isinstance(o, str) else o for o in objects)
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
        for line in text.split("\n"):
            if not (line.isascii() and line.isprintable()) and not all(c in NARROW or (c.isascii() and c.isprintable()) for c in line):
                return None
        return text  # off a terminal rich soft-wraps: the line as it is

    def _write(self, text: str) -> None:
        stream = self._stream
        try:
            stream.write(visible(text))
            stream.flush()  # as rich does after each print: stdout and stderr stay in order
        except BrokenPipeError:
            _broken_pipe()  # what rich does (on_broken_pipe), for either stream


def escape(text: str) -> str:
    """rich.markup.escape, which changes nothing in a text without "[" or a backslash (rich is not imported then)."""
    if "[" not in text and "\\" not in text:
        return text
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def make_console(no_color: bool = False, stderr: bool = False) -> TextConsole:
    return TextConsole(no_color=no_color, stderr=stderr)


def plural(count: int, word: str, many: str = "") -> str:
    """"1 warning", "2 warnings", "0 entries" (``many``: the plural when it is not ``word`` + s): the one rule for a
    count in a sentence, so no output says "1 warnings"."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def dump_json(data: Mapping[str, Any]) -> str:
    """A --json document; every string in it with a URL's credentials masked (redact.py) and a file name's undecodable
    bytes written as backslash escapes (json_safe)."""
    from .redact import redact_document

    document = redact_document(data)
    text = json.dumps(document, indent=2, sort_keys=False)
    # a surrogate is written as \udXXX (ensure_ascii): only then is the document walked (an emoji's pair too, left as it is)
    return json.dumps(json_safe(document), indent=2, sort_keys=False) if "\\ud" in text else text


_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with the bytes of a name that is not UTF-8 (Python's surrogateescape: r'\udcff') written as '\xff',
    so no lone surrogate reaches a JSON document (strict parsers refuse it) or a log; other text unchanged."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-8", "surrogateescape" if all(0xDC80 <= ord(c) <= 0xDCFF for c in _SURROGATE.findall(text)) else "surrogatepass") \
        .decode("utf-8", "backslashreplace")


def json_safe(value: Any) -> Any:
    """``value`` (a document of dicts, lists and scalars) with every string, keys too, through :func:`safe_text`."""
    from .redact import map_strings

    return map_strings(safe_text, value)
