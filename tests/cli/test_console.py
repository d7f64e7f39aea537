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
    rich = rich_console.Console(file=out, no_color=None, highlight=False, soft_wrap=True, width=WIDTH, emoji=False, force_terminal=False)
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
    "tab\there",
    "wide 漢字",
    "escaped \\[bold] not a tag",
])
def test_what_rich_must_say_goes_to_rich(markup, monkeypatch):
    ours, asked = _ours(markup, monkeypatch)
    assert asked
    assert ours == _rich_text(markup)


def test_random_lines_are_written_as_rich_writes_them(monkeypatch):
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


# ---------------------------------------------------------------- what reaches a terminal (issue 19)

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from compatmatrix.console import visible  # noqa: E402

HOSTILE = "\x1b[31mRED\x1b]0;title\x07\x9b2J\r\x85\u202eevil\x00"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_visible_leaves_nothing_that_acts_on_a_terminal(text):
    shown = visible(text)
    acting = [c for c in shown if c not in "\n\t" and (ord(c) < 32 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029" or 0x202a <= ord(c) <= 0x202e
                                                          or 0x2066 <= ord(c) <= 0x2069)]
    assert not acting, repr(shown)
    if all(c.isprintable() or c in "\n\t" for c in text):
        assert shown == text  # printable text and line breaks are left alone


def _compat(*args, env=None, tty=False):
    environment = {k: v for k, v in os.environ.items() if k not in ("COMPAT_MATRIX", "COMPAT_PYTHON", "NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    environment.update(env or {})
    command = [sys.executable, "-m", "compatmatrix", *args]
    if not tty:
        done = subprocess.run(command, capture_output=True, timeout=120, env=environment, stdin=subprocess.DEVNULL)
        return done.stdout + done.stderr
    import pty

    master, slave = pty.openpty()
    try:
        child = subprocess.Popen(command, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=environment)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    child.wait(timeout=120)
    return b"".join(chunks)


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_control_characters_from_a_file_are_shown_not_obeyed(tmp_path, tty):
    """The defect: escape sequences in a requirements file reached the terminal raw (in the error that quotes the line)."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch==2.7.0{HOSTILE}\n", encoding="utf-8")
    for args in (["check", "-r", str(requirements)], ["resolve", "-r", str(requirements)], ["resolve", "--profile", HOSTILE.replace("\x00", "")]):
        said = _compat(*args, tty=tty)
        for raw in ("\x1b[31mRED", "\x1b]0;", "\x07", "\x9b", "\u202e", "\x85", "\x00"):
            assert raw.encode() not in said, (args, raw, said[-600:])
        # shown as an escape, or named by its code point (the requirements reader refuses such a line: U+001B)
        assert b"\\x1b" in said or b"U+001B" in said, said[-600:]


@pytest.mark.parametrize("args", [["resolve", "--bad" + HOSTILE.replace("\x00", "")], ["resolve", "torch", "--json", "x" + HOSTILE.replace("\x00", "")]],
                         ids=["unknown-option", "extra-word"])
def test_a_refused_command_line_word_is_shown_not_obeyed(args):
    """The defect: argparse's "unrecognized arguments: ..." error quoted the word raw (ESC, BEL, CSI reached the
    terminal); argparse's other errors (invalid choice) use repr and were safe by chance."""
    said = _compat(*args, tty=False)
    assert b"unrecognized arguments" in said, said[-600:]
    for raw in ("\x1b[31mRED", "\x1b]0;", "\x07", "\x9b", "\u202e", "\x85"):
        assert raw.encode() not in said, (args, raw, said[-600:])
    assert b"\\x1b" in said, said[-600:]


def test_no_color_on_a_terminal_means_no_escape_codes():
    """no-color.org: NO_COLOR with any non-empty value; rich removed colours but kept bold and dim."""
    coloured = _compat("check", "--python", sys.executable, tty=True)
    assert b"\x1b[" in coloured
    plain = _compat("check", "--python", sys.executable, env={"NO_COLOR": "1"}, tty=True)
    assert b"\x1b" not in plain and b"packages" in plain, plain[:400]
    empty = _compat("check", "--python", sys.executable, env={"NO_COLOR": ""}, tty=True)
    assert b"\x1b[" in empty  # an empty NO_COLOR is not a request


def test_piped_output_is_not_wrapped():
    """The defect: off a terminal, lines were broken at 160 columns in mid-phrase."""
    said = _compat("resolve", "--python-version", "3.11").decode()
    long = [line for line in said.splitlines() if len(line) > WIDTH]
    assert long, said[-800:]
    assert any("oneccl_bind_pt is deprecated since" in line and "compat resolve --profile stock" in line for line in said.splitlines()), said[-1500:]
