"""The guard: the one place where whatever a command raises becomes one sentence and an exit code in {0, 1, 2}
(130/143 for Ctrl-C/SIGTERM, 141 for a closed pipe), never a traceback. An unexpected error is a bug: its traceback is
written to a report file (``BUG_REPORT_DIR_ENV``) and the user is told where. Side effects: writes to stderr, may point
stdout at /dev/null, may write the report file.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Callable, Optional

from .. import __version__
from ..console import EXIT_BROKEN_PIPE
from ..errors import EXIT_TOOL_ERROR, CompatError
from ._say import say_error

BUG_REPORT_DIR_ENV = "COMPAT_CRASH_DIR"  # where the traceback of an unexpected error is written (default: the temp folder)
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EFBIG, errno.EDQUOT}


class Invocation:
    """What the guard names when something goes wrong: the parsed command line, once there is one."""

    def __init__(self) -> None:
        self.args = argparse.Namespace(command=None)


def guard(run: Callable[[Invocation], int]) -> int:
    """``run`` under the guard: its exit code, or the one sentence and exit code of what it raised."""
    closed = _closed_streams()
    if closed is not None:
        return closed
    invocation = Invocation()
    try:
        return run(invocation)
    except SystemExit as exc:  # argparse: --help, --version and usage errors
        if _output_failed(exc):
            return EXIT_TOOL_ERROR
        raise
    except CompatError as exc:
        message = exc.message if not exc.message or exc.message.endswith((".", "!", "?")) else exc.message + "."  # two sentences, not one run-on
        say_error(f"compat: error: {message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C; the live supervisor also turns SIGTERM/SIGHUP into this, after cleaning up
        return _interrupted(exc, invocation.args)
    except BrokenPipeError:
        # The reader went away (`compat resolve --json | head`): not "problems found".
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS and _stdout_broken() is not None:
            _silence_stdout()
            say_error(f"compat: error: cannot write the output ({exc.strerror}). Free space or redirect the output elsewhere.")
            return EXIT_TOOL_ERROR
        return _unexpected(exc, invocation.args)
    except Exception as exc:  # noqa: BLE001 - the last guard: a bug must still end in one sentence
        return _unexpected(exc, invocation.args)


def _closed_streams() -> Optional[int]:
    """A closed stderr is a null stream (`compat install 2>&-`: progress and messages are dropped, as for a full stderr;
    never a failure); a closed stdout is exit 2 (`compat resolve >&-`: the shell closed the descriptor)."""
    if sys.stderr is None:
        sys.stderr = _null_stream(2)
    _tolerant_encoding(sys.stdout, sys.stderr)
    if sys.stdout is None:
        say_error("compat: error: standard output is closed, so compat has nowhere to write. Redirect it (> FILE or > /dev/null) instead of closing it.")
        return EXIT_TOOL_ERROR
    return None


def _output_failed(exc: SystemExit) -> bool:
    """--help or --version whose output could not be written (a full disk, a closed descriptor): said, True."""
    broken = _stdout_broken() if exc.code in (0, None) else None
    if broken is None:
        return False
    _silence_stdout()
    say_error(f"compat: error: cannot write the output ({broken}). Free space or redirect the output elsewhere.")
    return True


def _interrupted(exc: KeyboardInterrupt, args: argparse.Namespace) -> int:
    from ..processes import Terminated

    terminated = isinstance(exc, Terminated)
    say_error(f"compat: {'terminated' if terminated else 'interrupted'}; nothing of the run is left running."
              if getattr(args, "live", False) else "compat: interrupted.")
    return 143 if terminated else 130


def _tolerant(exc: UnicodeError) -> tuple:
    """The encoding error handler of _tolerant_encoding: a file name's undecodable bytes (surrogateescape) are written
    back as they were, anything else the encoding lacks as a backslash escape."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start:exc.end]
    if all(0xDC80 <= ord(c) <= 0xDCFF for c in chunk):
        return bytes(ord(c) - 0xDC00 for c in chunk), exc.end
    return chunk.encode("ascii", "backslashreplace").decode("ascii"), exc.end


def _tolerant_encoding(*streams) -> None:
    """Under an ASCII locale (LC_ALL=C with PYTHONUTF8=0, ...) a character the stream's encoding lacks (compat's '·',
    a non-ASCII package name) is written as a backslash escape, a non-ASCII path as its bytes, instead of failing."""
    import codecs

    for stream in streams:
        try:
            "·—→…".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            try:
                codecs.register_error("compat-tolerant", _tolerant)
                stream.reconfigure(errors="compat-tolerant")
            except (AttributeError, ValueError, OSError):
                pass
        except (AttributeError, TypeError):
            pass


def _null_stream(fd: int):
    """A text stream on /dev/null for the closed descriptor ``fd`` (opened there, so children inherit it too, and no
    file compat opens later lands on it and receives its messages)."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)


def end_now(code: int) -> None:
    """End the process with ``code`` now, its output written (see SHORT_LIVED); returns only if stderr cannot be
    flushed (the normal exit then reports it as before)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)




def _stdout_broken() -> Optional[str]:
    """Why writing to standard output fails now (a full disk, a closed descriptor), or None when it works."""
    try:
        sys.stdout.write("")
        sys.stdout.flush()
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    except ValueError as exc:
        return str(exc)


def _silence_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _unexpected(exc: BaseException, args: argparse.Namespace) -> int:
    """An exception nobody expected: write the traceback to a file and tell the user where, in one sentence."""
    import tempfile
    import time
    import traceback

    from ..redact import redact_text

    report = ""
    try:
        folder = os.environ.get(BUG_REPORT_DIR_ENV) or tempfile.gettempdir()
        handle, report = tempfile.mkstemp(prefix=f"compat-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt", dir=folder)
        text = (f"compat {__version__} on Python {sys.version.split()[0]}\ncommand: {sys.argv!r}\n\n"
                + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        with os.fdopen(handle, "w", encoding="utf-8", errors="replace") as out:
            out.write(redact_text(text))  # the command line and the exception may hold an index URL: masked like everything compat shows
    except OSError:
        report = ""
    where = f"the details are in {report}" if report else "no report file could be written"
    message = str(exc).splitlines()[0][:200] if str(exc).strip() else ""
    say_error(f"compat: internal error in '{getattr(args, 'command', '?')}' ({type(exc).__name__}{': ' + message if message else ''}); {where}. "
              "This is a bug in compat: please report it with that file attached.")
    return EXIT_TOOL_ERROR
