"""What a long install shows while it works: its phases with their times, each download with its bytes and rate,
and one summary line at the end with every phase's time.

One interface (``Progress``), two displays behind it:

* ``Lines``: plain lines through the install's ``say`` (a log, a pipe, CI, the tests). ``compat install --json``
  gives a silent ``say``, so nothing is added to the JSON run.
* ``Bars``: rich.progress on a terminal (a spinner per phase, a bar per download with bytes and rate); the lines
  ``say`` writes meanwhile appear above the bars. rich.progress is imported only when this display is chosen.

``display="auto"`` takes the bars when both stderr and stdout are terminals (an interactive run; ``--json`` output is
read by a program, so its stdout is not one), plain lines otherwise; "lines" and "bars" choose one, "none" shows
nothing. A phase may be entered more than once: its time is the sum.

Side effects: writes to stderr (through ``say``, or rich's console on stderr).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Callable, Optional

Say = Callable[[str], None]
PHASES = ("preflight", "plan", "fetch", "snapshot", "install", "verify")


def seconds_text(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def size_text(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # unreachable


class Transfer:
    """One download (or copy) in progress: ``advance(n)`` as bytes arrive."""

    def __init__(self, display: "Display", label: str, total: Optional[int]) -> None:
        self.display, self.label, self.total = display, label, total
        self.done = 0
        self.started = time.monotonic()
        self.handle = display.transfer_started(label, total)

    def advance(self, count: int) -> None:
        self.done += count
        self.display.transfer_advanced(self.handle, count)

    def counted(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.advance(len(chunk))
            yield chunk


class Display:
    """What a display is told; this one shows nothing (``display="none"``)."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def phase_started(self, name: str) -> None:
        pass

    def phase_ended(self, name: str, seconds: float, ok: bool) -> None:
        pass

    def transfer_started(self, label: str, total: Optional[int]) -> object:
        return None

    def transfer_advanced(self, handle: object, count: int) -> None:
        pass

    def transfer_ended(self, transfer: Transfer, seconds: float, ok: bool) -> None:
        pass

    def line(self, text: str) -> None:
        pass


def _transfer_words(transfer: Transfer, seconds: float) -> str:
    rate = transfer.done / seconds if seconds > 0 else 0.0
    return f"{transfer.label}: {size_text(transfer.done)} in {seconds_text(seconds)} ({size_text(rate)}/s)"


class Lines(Display):
    """Plain lines through ``say``: a phase when it ends, a download when it ends."""

    def __init__(self, say: Say) -> None:
        self.say = say

    def phase_ended(self, name: str, seconds: float, ok: bool) -> None:
        self.say(f"  [{name}] {seconds_text(seconds)}" + ("" if ok else " (stopped)"))

    def transfer_ended(self, transfer: Transfer, seconds: float, ok: bool) -> None:
        if ok:
            self.say(f"  fetched {_transfer_words(transfer, seconds)}")

    def line(self, text: str) -> None:
        self.say(text)


class Bars(Display):
    """rich.progress on stderr: a spinner for the phase under way, a bar per download (bytes, rate)."""

    def __init__(self, say: Say) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            ProgressColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )
        from rich.text import Text

        from ..console import rich_console  # lazily: only an interactive install draws bars

        class Transfers(ProgressColumn):
            """A column drawn for downloads only (a phase has no bytes)."""

            def __init__(self, column: ProgressColumn) -> None:
                super().__init__()
                self.column = column

            def render(self, task):  # noqa: ANN001, ANN201 - rich's signature
                return self.column.render(task) if task.fields.get("transfer") else Text("")

        self.say = say
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), Transfers(BarColumn()), Transfers(DownloadColumn()),
                                 Transfers(TransferSpeedColumn()), TimeElapsedColumn(), console=rich_console(stderr=True), transient=True)
        self.phases: dict[str, object] = {}

    def start(self) -> None:
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def phase_started(self, name: str) -> None:
        self.phases[name] = self.progress.add_task(name, total=None)

    def phase_ended(self, name: str, seconds: float, ok: bool) -> None:
        task = self.phases.pop(name, None)
        if task is not None:
            self.progress.remove_task(task)  # type: ignore[arg-type]
        self.progress.console.print(f"  [{name}] {seconds_text(seconds)}" + ("" if ok else " (stopped)"), highlight=False, markup=False)

    def transfer_started(self, label: str, total: Optional[int]) -> object:
        return self.progress.add_task(f"  {label}", total=total, transfer=True)

    def transfer_advanced(self, handle: object, count: int) -> None:
        self.progress.advance(handle, count)  # type: ignore[arg-type]

    def transfer_ended(self, transfer: Transfer, seconds: float, ok: bool) -> None:
        self.progress.remove_task(transfer.handle)  # type: ignore[arg-type]
        if ok:
            self.progress.console.print(f"  fetched {_transfer_words(transfer, seconds)}", highlight=False, markup=False)

    def line(self, text: str) -> None:
        from ..redact import redact_text

        self.progress.console.print(redact_text(text), highlight=False, markup=False)  # on a terminal, lines bypass cli/_say.say_error


def _terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def choose_display(display: str, say: Say) -> Display:
    """"auto": bars when stderr and stdout are both terminals, else lines; "lines", "bars", "none"."""
    if display == "none":
        return Display()
    if display == "bars" or (display == "auto" and _terminal(sys.stderr) and _terminal(sys.stdout)):
        try:
            return Bars(say)
        except ImportError:  # compat installed without rich: plain lines
            return Lines(say)
    return Lines(say)


class Progress:
    """Times the phases of one install and tells the display; ``summary()`` is the line with every phase's time."""

    def __init__(self, display: Optional[Display] = None) -> None:
        self.display = display or Display()
        self.times: dict[str, float] = {}
        self.started = time.monotonic()
        self._running = False

    def __enter__(self) -> "Progress":
        self.display.start()
        self._running = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._running:
            self._running = False
            self.display.stop()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        self.display.phase_started(name)
        ok = False
        try:
            yield
            ok = True
        finally:
            seconds = time.monotonic() - start
            self.times[name] = self.times.get(name, 0.0) + seconds
            self.display.phase_ended(name, seconds, ok)

    @contextmanager
    def transfer(self, label: str, total: Optional[int]) -> Iterator[Transfer]:
        """A download or copy: bytes and rate while it runs, one line when it is done."""
        transfer = Transfer(self.display, label, total)
        ok = False
        try:
            yield transfer
            ok = True
        finally:
            self.display.transfer_ended(transfer, time.monotonic() - transfer.started, ok)

    def summary(self) -> str:
        """``phases: preflight 0.21 s, plan 1.13 s, ..., total 7.62 s`` (the phases that ran, in their order)."""
        parts = [f"{name} {seconds_text(self.times[name])}" for name in PHASES if name in self.times]
        parts += [f"{name} {seconds_text(seconds)}" for name, seconds in self.times.items() if name not in PHASES]
        return "phases: " + ", ".join(parts + [f"total {seconds_text(time.monotonic() - self.started)}"])

    def finish(self) -> None:
        """Stop the bars (if any) and say the summary line."""
        self.__exit__(None, None, None)
        self.display.line("  " + self.summary())


def silent() -> Progress:
    return Progress(Display())
