"""The options several commands take, typed once: the argparse types of numbers (``positive_float``, ``positive_int``,
...), the option groups (``output_options``: --json, --no-color, --matrix; ``target_options``: --python with
$COMPAT_PYTHON as its default, --python-version, --platform; ``wanted_options``: what to resolve; ``source_options``:
where wheels come from) and the builders that turn argparse's Namespace into their records (options.py: ``output``,
``target``, ``wanted``, ``sources``). Each command module (cli/<command>.py) words the help for what it does with them.
Pure.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..errors import shown

if TYPE_CHECKING:
    from ..options import Output, Sources, Target, Wanted

MAX_SECONDS = 86400.0  # the longest timeout an option takes (a day); the helper children are capped there too


def positive_float(text: str) -> float:
    """argparse type: a number of seconds above 0 and at most a day (0, negatives, nan, inf and more are usage errors)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{shown(text)}' is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"'{shown(text)}' must be a finite number of seconds above 0")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"'{shown(text)}' is more than the maximum of {MAX_SECONDS:g} seconds (a day)")
    return value


MAX_COUNT = 1_000_000  # nodes, steps: far above any cluster (the largest have ~160,000 nodes), far below what overflows a writer
MAX_PER_NODE = 8192  # ranks or threads on one node: Linux's own ceiling on CPUs (CONFIG_NR_CPUS, NR_CPUS_MAX)


def _digits(text: str, least: int, most: int) -> int:
    """A whole number from ``least`` to ``most``, written in ASCII digits only: int() would also take '1_000', '+3', ' 3 '
    and other scripts' digits ('３'), which no launcher or scheduler reads back as the same number."""
    if not re.fullmatch(r"[0-9]+", text):
        raise argparse.ArgumentTypeError(f"'{shown(text)}' is not a whole number (digits 0-9 only)")
    if len(text.lstrip("0")) > len(str(most)) or int(text) > most:  # the length first: int() of 5,000 digits is an error
        raise argparse.ArgumentTypeError(f"'{shown(text)}' is more than {most:,}")
    if int(text) < least:
        raise argparse.ArgumentTypeError(f"'{shown(text)}' must be at least {least}")
    return int(text)


def zero_or_more_int(text: str) -> int:
    """argparse type: a whole number from 0 to MAX_COUNT (a node's rank, oneCCL's worker count)."""
    return _digits(text, 0, MAX_COUNT)


def port_int(text: str) -> int:
    """argparse type: a TCP port, 1 to 65535."""
    return _digits(text, 1, 65535)


def positive_int(text: str) -> int:
    """argparse type: a whole number from 1 to MAX_COUNT (nodes, steps)."""
    return _digits(text, 1, MAX_COUNT)


def per_node_int(text: str) -> int:
    """argparse type: a whole number from 1 to MAX_PER_NODE (ranks or threads on one node)."""
    return _digits(text, 1, MAX_PER_NODE)


PYTHON_ENV = "COMPAT_PYTHON"


def output_options(parser: argparse.ArgumentParser, json_help: str = "print machine-readable JSON (versioned schema) instead of tables") -> None:
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--no-color", action="store_true", help="no colour (also: the NO_COLOR environment variable)")
    matrix_option(parser)


def matrix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--matrix",
        metavar="PATH",
        default=os.environ.get("COMPAT_MATRIX"),
        help="read this matrix file instead of the bundled one (also: COMPAT_MATRIX)",
    )


def target_options(parser: argparse.ArgumentParser, *, python: Optional[str] = None, python_version: Optional[str] = None,
                    platform: Optional[str] = None, exclusive: bool = False) -> None:
    """The target interpreter, one definition for every command that takes it: ``--python PATH`` (its default,
    $COMPAT_PYTHON, is read when the arguments are built, and yields to an explicit --python-version), ``--python-version
    X.Y`` and ``--platform TAG``. Each command words the help for what it does with the target; an option without help
    is not offered. ``exclusive``: --python and --python-version are one choice (resolve, export)."""
    group = parser.add_mutually_exclusive_group() if exclusive and python and python_version else parser
    if python:
        group.add_argument("--python", metavar="PATH", help=python)
    if python_version:
        group.add_argument("--python-version", metavar="X.Y", help=python_version)
    if platform:
        parser.add_argument("--platform", metavar="TAG", help=platform)


def requirement_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                        help="read requirements from FILE: pip's requirements format as pip reads it (with its -r/-c includes and index lines), "
                        "a pip freeze list, or a PEP 751 pylock.toml; repeatable, combines with REQUIREMENTs")


def wanted_options(parser: argparse.ArgumentParser, *, requirements: str = "constraints such as 'torch==2.7.0' (as for compat resolve)",
                    profile: str = "ddp-ccl (default), ddp-ccl-legacy, ipex, ccl, stock", with_: str = "comma-separated packages to include",
                    files_last: bool = False) -> None:
    """What to resolve, as compat resolve takes it: REQUIREMENTs, -r FILE, --profile, --with (``files_last``: -r after
    them, as compat resolve's help has always listed it)."""
    parser.add_argument("requirements", nargs="*", metavar="REQUIREMENT", help=requirements)
    if not files_last:
        requirement_files(parser)
    parser.add_argument("--profile", metavar="NAME", help=profile)
    parser.add_argument("--with", dest="with_", metavar="LIST", default="", help=with_)
    if files_last:
        requirement_files(parser)


def source_options(parser: argparse.ArgumentParser, *, verification: bool = True) -> None:
    """Where the planned wheels come from: --index (and with ``verification`` --require-hashes, --allow-unverified)."""
    parser.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                        help="where a host's wheels are (a mirror, a PEP 503 index, a local folder); HOST is a matrix host id "
                        "such as pypi, pytorch-cpu, intel-cpu-us (also COMPAT_INDEX_<HOST> and the [indexes] table of ~/.config/compatmatrix/config.toml)")
    if verification:
        parser.add_argument("--require-hashes", action="store_true", help="refuse any wheel without a sha256 published by its index")
        parser.add_argument("--allow-unverified", action="store_true",
                            help="install (or download) wheels whose index publishes no sha256 (or only an md5), and a wheelhouse without its lock, "
                            "unchecked; each is named. Without it they are refused; with --require-hashes always refused")


def resolve_arguments(parser: argparse.ArgumentParser) -> None:
    """install and download: what to resolve and where the wheels come from."""
    wanted_options(parser)
    source_options(parser)


# --- argparse's Namespace -> the shared records (options.py) ---------------------------------------------------------


def output(ns: argparse.Namespace) -> Output:
    from ..options import Output

    return Output(json=bool(getattr(ns, "json", False)), no_color=bool(getattr(ns, "no_color", False)), matrix=getattr(ns, "matrix", None))


def target(ns: argparse.Namespace) -> Target:
    """The target options as given, --python defaulting to $COMPAT_PYTHON (only for commands that take --python)."""
    from ..options import Target

    given = getattr(ns, "python", None)
    python = given
    if given is None and hasattr(ns, "python"):
        python = os.environ.get(PYTHON_ENV) or None
    return Target(python, given is not None, getattr(ns, "python_version", None), getattr(ns, "platform", None))


def wanted(ns: argparse.Namespace) -> Wanted:
    from ..options import Wanted

    return Wanted(tuple(getattr(ns, "requirements", ()) or ()), tuple(ns.requirement_files), ns.profile,
                  tuple(name.strip() for name in ns.with_.split(",") if name.strip()))


def sources(ns: argparse.Namespace, wheelhouse: Optional[str] = None) -> Sources:
    from ..options import Sources

    return Sources(tuple(ns.index), bool(getattr(ns, "torch_from_pypi", False)), bool(getattr(ns, "require_hashes", False)),
                   bool(getattr(ns, "allow_unverified", False)), wheelhouse)


def command_words(words: Optional[Sequence[str]]) -> tuple[str, ...]:
    """argparse's REMAINDER with the leading -- dropped."""
    words = list(words or ())
    return tuple(words[1:] if words[:1] == ["--"] else words)



class Registered:
    """--launcher's choices: the launchers of the registry that offer ``capability`` (launchers.names; "env", "tune"),
    read on first use (a value given, or the help), so that a command's start imports no launcher module unless it is."""

    def __init__(self, capability: str) -> None:
        self.capability = capability

    def _names(self) -> tuple[str, ...]:
        from ..launchers import names

        return names(self.capability)

    def __contains__(self, value: object) -> bool:
        return value in self._names()

    def __iter__(self):  # noqa: ANN204
        return iter(self._names())


def launcher_option(parser: argparse.ArgumentParser, capability: str, **kwargs: Any) -> None:
    """--launcher with the registry's choices (Registered), given once the option is made: argparse writes a new
    option's choices out to check it, which would read the registry at every start of the command."""
    parser.add_argument("--launcher", **kwargs).choices = Registered(capability)
