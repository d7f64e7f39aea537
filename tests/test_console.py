"""console.TextConsole writes what rich writes, byte for byte, and imports rich only when rich must write.

Off a terminal rich writes no escape codes; TextConsole then writes lines of markup itself (tags removed,
long lines word-wrapped as rich wraps them) and hands rich everything else. These tests print the same
markup through both, off a terminal, at compat's width, and compare the bytes.
"""

from __future__ import annotations

import io
import random
import string

import pytest

from compatmatrix import console as console_module
from compatmatrix.console import NARROW, WIDTH, TextConsole, escape

rich_console = pytest.importorskip("rich.console")
rich_markup = pytest.importorskip("rich.markup")


def _rich_text(markup: str, **options) -> str:
    out = io.StringIO()
    rich = rich_console.Console(file=out, no_color=None, highlight=False, soft_wrap=False, width=WIDTH, emoji=False, force_terminal=False)
    rich.print(markup, **options)
    return out.getvalue()


def _ours(markup: str, monkeypatch, **options) -> tuple[str, bool]:
    """What TextConsole writes for ``markup`` (stdout not a terminal), and whether it asked rich."""
    for name in console_module._RICH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    ours = TextConsole()
    assert ours._plain
    ours.print(markup, **options)
    return out.getvalue(), ours._rich is not None


@pytest.mark.parametrize("markup", [
    "",
    "plain",
    "  [bold green]PASS[/] packages.torch-installed: torch 2.13.0+cpu",
    "\n[bold]packages[/]",
    "compat check · /x/bin/python (Python 3.11.7) · linux_x86_64",
    "trailing spaces   ",
    "[bold red]NO SET[/] no consistent set exists, because:",
    "  -> change torch==1.12.1 to torch==1.12.0: torch 1.12.0, oneccl_bind_pt 1.12.0",
    "Python 3.10 (--python-version 3.10) · linux_x86_64 · torch==2.1.0 intel-extension-for-pytorch==2.3.0 oneccl_bind_pt==2.0.0 "
    "transformers==4.30.0 accelerate==0.20.0",
    "word " * 100,
    "  indented " + "x" * 150 + " tail",
    "a list [1] and [2], a price [$3]",
    "x" * 160,
    "x" * 159 + " y",
])
def test_plain_lines_are_rich_bytes(markup, monkeypatch):
    ours, _ = _ours(markup, monkeypatch, style="dim")
    assert ours == _rich_text(markup, style="dim")


@pytest.mark.parametrize("markup", [
    "x" * 161,  # a word longer than the line: rich folds it
    "tab\there",
    "wide 漢字",
    "escaped \\[bold] not a tag",
    " " * 200,
])
def test_what_rich_must_say_goes_to_rich(markup, monkeypatch):
    ours, asked = _ours(markup, monkeypatch)
    assert asked
    assert ours == _rich_text(markup)


def test_random_lines_wrap_as_rich_wraps(monkeypatch):
    rng = random.Random(15)
    alphabet = string.ascii_letters + string.digits + "-_=.,:;()+/'\"<>!?*#@%&" + "".join(sorted(NARROW))
    for _ in range(400):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, rng.choice((8, 30, 90))))) for _ in range(rng.randint(1, 60))]
        text = " " * rng.randint(0, 4) + "".join(w + " " * rng.choice((1, 1, 1, 2, 3)) for w in words)
        text = text[: rng.randint(1, len(text))]
        markup = escape(text)
        if rng.random() < 0.3:
            markup = f"  [bold]{markup[:10]}[/]{markup[10:]}"
        ours, _ = _ours(markup, monkeypatch, style="green")
        assert ours == _rich_text(markup, style="green"), text


def test_escape_is_rich_escape():
    for text in ("", "plain", "[bold]", "a [link=x] b", "back\\", "back\\\\", "\\[x]", "[1] [a", "x · y"):
        assert escape(text) == rich_markup.escape(text)


def test_narrow_characters_are_one_cell_for_rich():
    from rich.cells import cell_len

    for char in NARROW:
        assert cell_len(char) == 1, char


def test_a_terminal_or_forced_colour_goes_to_rich(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not TextConsole()._plain
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setenv("COLUMNS", "100")
    assert not TextConsole()._plain
