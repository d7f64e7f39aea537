"""``compat``: the command line. Parse it into typed arguments (options.py), call the core, render (render/), return the
exit code (0 ok, 1 problems, 2 usage or tool error).

Each command has a parser (``build_parser``), a builder that turns argparse's Namespace into its record
(``_resolve_args_of`` ...: every check of the command line alone happens there; ``parse`` does both), and a ``cmd_*``
function that only calls the core (planning.py, the services) and one of the render/ modules. Options several commands take are declared once:
``_output_options``, ``_target_options`` (--python with $COMPAT_PYTHON as its default, --python-version, --platform),
``_wanted_options`` (what to resolve) and ``_source_options`` (where wheels come from).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import __version__
from .console import EXIT_BROKEN_PIPE, make_console, visible
from .errors import EXIT_OK, EXIT_PROBLEMS, EXIT_TOOL_ERROR, CompatError, UsageError, shown

if TYPE_CHECKING:
    from .matrix.model import Matrix
    from .options import (
        ChecksArgs,
        DownloadArgs,
        EnvArgs,
        ExportArgs,
        InstallArgs,
        LaunchArgs,
        MatrixArgs,
        MigrateArgs,
        Output,
        ResolveArgs,
        Sources,
        Target,
        TranslateArgs,
        TuneArgs,
        Wanted,
    )
    from .planning import Planned

# The core (packaging, the matrix model, the resolver, the checks) is imported inside the commands that use it:
# `compat --help`, `--version` and a usage error parse the command line only (tests/test_startup.py).


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
    #: adds the arguments on first use: a subcommand's many options (compat export's) cost nothing to the other commands
    populate: Optional[Callable[[argparse.ArgumentParser], None]] = None

    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        from .redact import redact_text

        self.print_usage(sys.stderr)  # argparse quotes what it refused ("unrecognized arguments: --index ...=https://u:p@..."): masked
        # ... and quotes it as given ("unrecognized arguments: --bad\x1b]0;..."): made visible like every error
        self.exit(EXIT_TOOL_ERROR, f"compat: error: {visible(redact_text(message))}. Run '{self.prog} --help' for the options.\n")

    #: a subcommand's own calls (add_argument, groups, set_defaults), kept until it is used (:class:`_Deferred`); None:
    #: made at once (the top parser, and a subcommand once used)
    _recorded: Optional[list] = None

    def defer(self) -> "_Parser":
        """Keep this subcommand's arguments for its first use: building every command's options costs ~10 ms of every
        command's start-up, and one command line uses one of them."""
        self._recorded = []
        return self

    def _maybe_deferred(self, name: str, args: tuple, kwargs: dict) -> Any:
        if self._recorded is not None:
            return _Deferred(self._recorded, self).method(name)(*args, **kwargs)
        return getattr(super(), name)(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._maybe_deferred("add_argument", args, kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._maybe_deferred("add_argument_group", args, kwargs)

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._maybe_deferred("add_mutually_exclusive_group", args, kwargs)

    def add_subparsers(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._maybe_deferred("add_subparsers", args, kwargs)

    def set_defaults(self, *args: Any, **kwargs: Any) -> None:
        self._maybe_deferred("set_defaults", args, kwargs)

    def ensure_arguments(self) -> argparse.ArgumentParser:
        if self._recorded is not None:
            recorded, self._recorded = self._recorded, None
            made: dict[int, Any] = {}
            for target, name, args, kwargs, result in recorded:
                real = made.get(id(target), target)
                made[id(result)] = getattr(real, name)(*args, **kwargs)
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


#: The parser and group methods a deferred subcommand records (each returns the group or action it makes).
_DEFERRED_CALLS = frozenset({"add_argument", "add_argument_group", "add_mutually_exclusive_group", "set_defaults", "add_subparsers", "add_parser"})


class _Deferred:
    """A recorded call's result (a group, an action) standing in until the subcommand is used: calls on it are recorded
    too, and replayed in order on the real objects (``_Parser.ensure_arguments``)."""

    def __init__(self, recorded: list, target: Any) -> None:
        self._recorded, self._target = recorded, target

    def method(self, name: str) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> "_Deferred":
            result = _Deferred(self._recorded, None)
            self._recorded.append((self._target, name, args, kwargs, result))
            return result

        return record

    def __getattr__(self, name: str) -> Any:
        if name in _DEFERRED_CALLS:
            return _Deferred(self._recorded, self).method(name)
        raise AttributeError(name)


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


class _Bf16Action(argparse.BooleanOptionalAction):
    """--bf16 / --no-bf16 that remembers both spellings it was given, so `--bf16 --no-bf16` is refused, not last-wins."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        super().__call__(parser, namespace, values, option_string)
        seen = set(getattr(namespace, "bf16_given", ()) or ()) | {option_string}
        namespace.bf16_given = tuple(sorted(seen))


# --- the options several commands take: declared once ----------------------------------------------------------------

PYTHON_ENV = "COMPAT_PYTHON"


def _output_options(parser: argparse.ArgumentParser, json_help: str = "print machine-readable JSON (versioned schema) instead of tables") -> None:
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--no-color", action="store_true", help="no colour (also: the NO_COLOR environment variable)")
    _matrix_option(parser)


def _matrix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--matrix",
        metavar="PATH",
        default=os.environ.get("COMPAT_MATRIX"),
        help="read this matrix file instead of the bundled one (also: COMPAT_MATRIX)",
    )


def _target_options(parser: argparse.ArgumentParser, *, python: Optional[str] = None, python_version: Optional[str] = None,
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


def _requirement_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                        help="read requirements from FILE: pip's requirements format as pip reads it (with its -r/-c includes and index lines), "
                        "a pip freeze list, or a PEP 751 pylock.toml; repeatable, combines with REQUIREMENTs")


def _wanted_options(parser: argparse.ArgumentParser, *, requirements: str = "constraints such as 'torch==2.7.0' (as for compat resolve)",
                    profile: str = "ddp-ccl (default), ddp-ccl-legacy, ipex, ccl, stock", with_: str = "comma-separated packages to include",
                    files_last: bool = False) -> None:
    """What to resolve, as compat resolve takes it: REQUIREMENTs, -r FILE, --profile, --with (``files_last``: -r after
    them, as compat resolve's help has always listed it)."""
    parser.add_argument("requirements", nargs="*", metavar="REQUIREMENT", help=requirements)
    if not files_last:
        _requirement_files(parser)
    parser.add_argument("--profile", metavar="NAME", help=profile)
    parser.add_argument("--with", dest="with_", metavar="LIST", default="", help=with_)
    if files_last:
        _requirement_files(parser)


def _source_options(parser: argparse.ArgumentParser, *, verification: bool = True) -> None:
    """Where the planned wheels come from: --index (and with ``verification`` --require-hashes, --allow-unverified)."""
    parser.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                        help="where a host's wheels are (a mirror, a PEP 503 index, a local folder); HOST is a matrix host id "
                        "such as pypi, pytorch-cpu, intel-cpu-us (also COMPAT_INDEX_<HOST> and the [indexes] table of ~/.config/compatmatrix/config.toml)")
    if verification:
        parser.add_argument("--require-hashes", action="store_true", help="refuse any wheel without a sha256 published by its index")
        parser.add_argument("--allow-unverified", action="store_true",
                            help="install (or download) wheels whose index publishes no sha256 (or only an md5), and a wheelhouse without its lock, "
                            "unchecked; each is named. Without it they are refused; with --require-hashes always refused")


def _resolve_args(parser: argparse.ArgumentParser) -> None:
    """install and download: what to resolve and where the wheels come from."""
    _wanted_options(parser)
    _source_options(parser)


def _deferred_parser(**kwargs: Any) -> _Parser:
    """A subcommand's parser, whose arguments are made on its first use (_Parser.defer)."""
    return _Parser(**kwargs).defer()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="compat",
        description="Resolve, install and validate CPU PyTorch DDP stacks from a sourced compatibility matrix.",
    )
    parser.add_argument("--version", action="version", version=f"compat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_deferred_parser)
    commands.required = True

    resolve_cmd = commands.add_parser(
        "resolve",
        help="find the newest consistent set of torch / IPEX / oneccl_bind_pt / transformers / accelerate",
        description=(
            "Find the newest consistent set for a Python and platform, and the index each package comes from. "
            "Exit 0 when a set exists, 1 when none does (with the reasons and the nearest sets that work), 2 on usage errors."
        ),
    )
    _wanted_options(resolve_cmd, requirements="constraints such as 'torch==1.12.1' or 'transformers<4.40'; naming a package also asks for it "
                    "(names: torch, intel-extension-for-pytorch|ipex, oneccl-bind-pt|ccl, transformers, accelerate)",
                    profile="named set of packages: ddp-ccl (default), ipex, ccl, stock",
                    with_="comma-separated packages to include, e.g. ipex,ccl,transformers or torchvision,torchaudio", files_last=True)
    _target_options(resolve_cmd, exclusive=True,
                    python="resolve for this interpreter (its version and platform are probed; default: $COMPAT_PYTHON, else the running one)",
                    python_version="resolve for this CPython version (default: the running one)",
                    platform="PEP 425 platform tag (default: the target interpreter's)")
    _output_options(resolve_cmd)
    resolve_cmd.set_defaults(build=_resolve_args_of)

    matrix_cmd = commands.add_parser(
        "matrix",
        help="show the curated matrix (releases, pairings, Python coverage, sources) and the overlay; 'compat matrix update' refreshes it",
        description="Show the curated matrix, with what the overlay of 'compat matrix update' adds (marked (h)), optionally filtered.",
    )
    matrix_cmd.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, ccl, torchvision, torchaudio, transformers, accelerate")
    matrix_cmd.add_argument("--python-version", metavar="X.Y", help="only releases with wheels (or Requires-Python) for this Python")
    matrix_cmd.add_argument("--torch", metavar="SPEC", help="only releases that pair with a torch matching SPEC, e.g. '==2.7.0' or '>=2.5'")
    matrix_cmd.add_argument("--sources", action="store_true", help="show each entry's sources")
    _output_options(matrix_cmd)
    matrix_cmd.set_defaults(build=_matrix_args_of)
    matrix_actions = matrix_cmd.add_subparsers(dest="matrix_action", metavar="[ACTION]", parser_class=_Parser, title="actions")
    update_cmd = matrix_actions.add_parser(
        "update",
        help="read the registries (PyPI, the PyTorch CPU index) and keep the releases the matrix lacks in the overlay",
        description="Read the registries for torch, torchvision, torchaudio, IPEX, transformers and accelerate, and keep what the "
        "bundled matrix lacks (releases, yanks, Python coverage, glibc floors, the torch each extension declares: pin, floor or range) in the overlay "
        "($XDG_DATA_HOME/compatmatrix/overlay.json) that every command reads; or --write it into a matrix file.",
    )
    update_cmd.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                            help="where a host's index is (a mirror, a PEP 691/503 index); HOST is a matrix host id such as pypi, pytorch-cpu "
                            "(also COMPAT_INDEX_<HOST> and the [indexes] table of ~/.config/compatmatrix/config.toml)")
    update_cmd.add_argument("--write", metavar="FILE", help="write the harvested entries into this matrix file (e.g. data/matrix.toml) "
                            "in its own format instead of the overlay: new entries are added, the rest of the file is kept as it is")
    update_cmd.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, torchvision, "
                            "torchaudio, transformers, accelerate")
    update_cmd.add_argument("--health", action="store_true", help="write nothing; list what the registries make impossible or surprising for "
                            "the matrix's packages and the runtime wheels (unsatisfiable dependencies, Requires-Python holes, yanks, builds "
                            "that differ by host, what pip falls back to), each with its source (--json: matrix-health-v1.json)")
    _output_options(update_cmd, json_help="print the harvest as JSON (compatmatrix/schemas/matrix-update-v1.json)")
    update_cmd.set_defaults(build=_matrix_update_args_of)
    verify_cmd = matrix_actions.add_parser(
        "verify",
        help="try a pairing on this machine (a throw-away venv, a smoke operation) and record it in the overlay as tested-here evidence",
        description="Install PKG==V next to torch in a throw-away venv (compat's own install path, hash-checked; removed afterwards), "
        "import both in a child with a deadline, run a smoke operation through the extension, and record the result in the overlay "
        "as tested-here evidence (a failure as a break, with its error class). Exit 0 it works, 1 it breaks, 2 usage or tool error.",
    )
    verify_cmd.add_argument("pin", metavar="PKG==V", help="the release to try: torchvision, torchaudio, intel-extension-for-pytorch, "
                            "oneccl_bind_pt, transformers or accelerate, e.g. torchvision==0.29.1")
    verify_cmd.add_argument("--with", dest="with_torch", metavar="torch==X", help="the torch to try it with (default: the torch the release pins, or the newest its floor or range admits)")
    verify_cmd.add_argument("--python", metavar="PATH", help="the interpreter the throw-away venv is made with (default: the running one)")
    verify_cmd.add_argument("--host", metavar="HOST", help="the host PKG's wheel comes from (default: the first of its [policy.host_preference] "
                            "with a wheel for that Python), e.g. pypi to try PyPI's build next to the PyTorch CPU index's torch")
    verify_cmd.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                            help="where a host's index is (a mirror, a PEP 691/503 index), as for compat install")
    verify_cmd.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="the deadline of the import and smoke child (default 600)")
    _output_options(verify_cmd, json_help="print the result as JSON (compatmatrix/schemas/matrix-verify-v1.json)")
    verify_cmd.set_defaults(build=_matrix_verify_args_of)

    _checks_parser(
        commands,
        "doctor",
        "inspect an environment: installed set vs the matrix, oneCCL setup, runtime settings, isolated import probes",
        "Inspect an environment and name the cause and the fix of every problem. Imports of the stack run in child "
        "processes with a timeout. Exit 0 no failure, 1 failures, 2 tool error.",
    )
    _checks_parser(
        commands,
        "check",
        "the fast static subset of doctor (no imports), for pre-commit and CI",
        "The static checks of compat doctor (nothing of the stack is imported). Exit 0 clean, 1 problems, 2 tool error.",
    )
    install_cmd = commands.add_parser(
        "install",
        help="install the resolved set into an environment, all of it or nothing",
        description="Resolve, then install the set into the target environment: each package from its own host (sha256 checked), "
        "dependencies from PyPI or its mirror, a snapshot taken first and restored if anything fails or is interrupted, "
        "then the result verified. Exit 0 installed and verified, 1 refused/failed/verification failed, 2 usage error.",
    )
    _resolve_args(install_cmd)
    _target_options(install_cmd, python="install into this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
                    python_version="with --dry-run / --print: plan for this Python instead of an interpreter",
                    platform="with --dry-run / --print: plan for this platform tag")
    install_cmd.add_argument("--yes", action="store_true", help="allow replacing installed versions (torch included)")
    install_cmd.add_argument("--dry-run", action="store_true", help="show the plan; change nothing, fetch nothing")
    install_cmd.add_argument("--installer", choices=["pip", "uv", "auto"], default="pip", help="pip (default), uv, or auto (uv when on PATH)")
    install_cmd.add_argument("--planner", choices=["auto", "uv", "pip"], default="auto",
                             help="what plans the dependencies: auto (default: uv when installing with uv and it can plan for the target), uv, or pip")
    install_cmd.add_argument("--print", dest="print_", choices=["requirements", "constraints", "pip-command"],
                             help="print the plan in this form and exit (the same as compat export requirements|constraints|pip-command)")
    install_cmd.add_argument("--offline", action="store_true", help="no network: take everything from --wheelhouse")
    install_cmd.add_argument("--wheelhouse", metavar="DIR", help="a folder made by compat download")
    install_cmd.add_argument("--torch-from-pypi", action="store_true", help="take torch (and torchvision, torchaudio) from PyPI (the CUDA build, several GB more) instead of the PyTorch CPU index")
    recovery = install_cmd.add_mutually_exclusive_group()
    recovery.add_argument("--restore", action="store_true", help="put back the environment an interrupted compat install left half-done")
    recovery.add_argument("--discard-snapshot", action="store_true", help="keep the environment an interrupted install left, drop its snapshot")
    _output_options(install_cmd)
    install_cmd.set_defaults(build=_install_args_of)

    download_cmd = commands.add_parser(
        "download",
        help="build a wheelhouse (planned wheels + dependencies) for another machine",
        description="Resolve for a target Python and platform and download every wheel it needs into DIR; "
        "then `compat install --offline --wheelhouse DIR` installs with no network.",
    )
    _resolve_args(download_cmd)
    download_cmd.add_argument("-d", "--dest", required=True, metavar="DIR")
    _target_options(download_cmd, python_version="the target machine's Python (default: the running one)",
                    platform="the target machine's platform tag (default: this one)")
    download_cmd.add_argument("--torch-from-pypi", action="store_true", help="take torch from PyPI instead of the PyTorch CPU index")
    _output_options(download_cmd)
    download_cmd.set_defaults(build=_download_args_of)

    translate_cmd = commands.add_parser(
        "translate",
        help="rewrite a training command from the guides for the installed transformers / accelerate",
        description="Rewrite a training command line (--xpu_backend/--ddp_backend, --no_cuda/--use_cpu, --use_ipex, --bf16) "
        "for the installed transformers and accelerate, explaining each change. Exit 1 when the command cannot work with them "
        "at all (for example ccl with transformers >= 5.1).",
    )
    _target_options(translate_cmd, python="read the installed versions from this interpreter (default: $COMPAT_PYTHON, else the running one)")
    translate_cmd.add_argument("--transformers", metavar="VERSION", help="translate for this transformers version instead of the installed one")
    translate_cmd.add_argument("--accelerate", metavar="VERSION", help="translate for this accelerate version instead of the installed one")
    translate_cmd.command_remainder = True
    translate_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command line, after --")
    _output_options(translate_cmd)
    translate_cmd.set_defaults(build=_translate_args_of)

    migrate_cmd = commands.add_parser(
        "migrate",
        help="move an environment off IPEX and oneCCL to stock PyTorch: plan, rewrite the command, install, validate",
        description="Plan the move from the installed set (or -r FILE) to the newest stock set for its Python (IPEX, the oneCCL "
        "bindings and their runtime removed; torch, transformers, accelerate installed, each version with the resolver's reason), "
        "rewrite the training command (ccl to gloo, --use_ipex dropped, mpirun to torchrun where it relied on oneCCL's MPI), list "
        "the IPEX calls in --source scripts and the variables to unset. Without --dry-run (and with --yes) the set is installed in "
        "one transaction and validated with compat doctor --live before it is committed; a failure restores the old set. Exit 0 "
        "planned / migrated / nothing to change, 1 no stock set, a command that cannot work, or a failed install or validation "
        "(restored), 2 usage error.",
    )
    _target_options(migrate_cmd, python="the environment to migrate (default: $COMPAT_PYTHON, else the running one)",
                    python_version="with -r: the Python the pins are for (default: the running one)", platform="with -r: a PEP 425 platform tag")
    _requirement_files(migrate_cmd)
    migrate_cmd.add_argument("--dry-run", action="store_true", help="plan only: change nothing")
    migrate_cmd.add_argument("--yes", action="store_true", help="apply without asking")
    migrate_cmd.add_argument("--to-torch", metavar="SPEC", help="limit torch: 2.13.0, 2.13 or a range such as '>=2.10,<2.14'")
    migrate_cmd.add_argument("--source", dest="sources", action="append", default=[], metavar="PATH",
                             help="a training script (or a folder of them) to scan for IPEX / oneCCL calls (read, never imported or rewritten); repeatable")
    migrate_cmd.add_argument("--compare", action="store_true", help="run the live doctor before and after and print bandwidth, step time and losses side by side")
    migrate_cmd.add_argument("--ranks-per-node", type=per_node_int, default=2, metavar="N", help="ranks of the live validation and of the thread settings (default 2)")
    migrate_cmd.add_argument("--index", dest="indexes", action="append", default=[], metavar="HOST=URL", help="take HOST's packages from URL (as for compat install)")
    migrate_cmd.add_argument("--installer", choices=["pip", "uv", "auto"], default="auto", help="pip, uv, or uv when it is there (default)")
    migrate_cmd.add_argument("--live-timeout", type=positive_float, default=300.0, metavar="S", help="deadline of each live validation run (default 300 s)")
    migrate_cmd.command_remainder = True
    migrate_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the training command to rewrite, after --")
    _output_options(migrate_cmd)
    migrate_cmd.set_defaults(build=_migrate_args_of)

    env_cmd = commands.add_parser(
        "env",
        help="print the exports of the bindings' setvars.sh plus LD_PRELOAD and thread settings: eval \"$(compat env)\"",
        description="Print what sourcing the oneCCL bindings' setvars.sh would export, plus recommended LD_PRELOAD (only paths "
        "that exist), OMP_NUM_THREADS and CCL_WORKER_COUNT for the ranks per node.",
    )
    env_cmd.populate = _env_arguments  # on first use: the launchers registry is read only by the commands that take --launcher
    env_cmd.set_defaults(build=_env_args_of)

    launch_cmd = commands.add_parser(
        "launch",
        help="start torchrun or mpirun with each rank bound to its own physical cores, threads and oneCCL workers planned",
        description="Plan N ranks on this machine (physical cores, not hyperthreads; spread over NUMA nodes; oneCCL worker cores "
        "set aside; the CPUs this process may use and its cgroup quota), then run the launcher with each rank bound to its cores "
        "(its exit code is compat's), or print the command and environment with --print. Exit 2 when the ranks do not fit.",
    )
    launch_cmd.populate = _launch_arguments  # on first use, as env's
    launch_cmd.set_defaults(build=_launch_args_of)

    tune_cmd = commands.add_parser(
        "tune",
        help="measure launch configurations (ranks, threads, oneCCL workers, backend, bf16, torch.compile) and keep the fastest that trains the same model",
        description="Derive the launch configurations worth trying from this machine's topology and the environment (what compat launch plans, "
        "pruned so that no configuration oversubscribes the physical cores, and by the budget), run compat's own tiny training workload "
        "(or the training command after --) under each, measure steps/s after a warm-up, and accept a configuration only if its "
        "losses and final parameters match a single-process reference run of the same global batch within a bound derived from the "
        "dtype (said in the output). Prints the table and the winner as compat launch arguments and environment lines. Ctrl-C keeps "
        "what was measured. Exit 1 when no configuration was accepted.",
    )
    tune_cmd.populate = lambda parser: _launcher_option(parser, "tune", default="torchrun", help="how the ranks are started (default torchrun, as compat launch)")
    tune_cmd.add_argument("--budget", type=positive_float, default=120.0, metavar="SECONDS", help="seconds to spend measuring (default 120)")
    tune_cmd.add_argument("--no-bf16", action="store_true", help="leave bf16 autocast out (the training cannot use it)")
    tune_cmd.add_argument("--no-compile", action="store_true", help="leave torch.compile out (the training cannot use it)")
    tune_cmd.add_argument("--json", action="store_true", help="print the table as JSON (compatmatrix/schemas/tune-v1.json)")
    _matrix_option(tune_cmd)
    tune_cmd.add_argument("--reads", action="append", default=[], metavar="NAME",
                          help="an argument of the training command that its runs only read: an option's name (--reads data_path), a short "
                          "option's letter, or a positional as written; passed as given; repeatable (outputs are pointed into each run's own "
                          "folder, anything else compat cannot place is refused; see README, compat tune)")
    _target_options(tune_cmd, python="the training environment's interpreter (default: $COMPAT_PYTHON, else the running one)")
    tune_cmd.command_remainder = True
    tune_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                          help="the training command to measure instead of compat's workload, after -- (an HF Trainer script: compat sets "
                          "--max_steps, --logging_steps 1 and the batch; see README, Tuning)")
    tune_cmd.set_defaults(build=_tune_args_of)

    _export_parser(commands)
    return parser


EXPORT_FORMATS = ("pytorchjob", "sbatch", "dockerfile", "requirements", "constraints", "pip-command", "pylock")


def _export_parser(commands) -> None:
    export_cmd = commands.add_parser(
        "export",
        help="write the resolved set as a Kubernetes PyTorchJob, a Dockerfile, a requirements/constraints file, a pip command or a "
        "pylock.toml; or check a hand-written manifest or Dockerfile (--validate FILE)",
        usage="compat export {%s} [REQUIREMENT ...] [resolve options] [format options] [-- TRAINING COMMAND ...]\n"
        "       compat export --validate FILE [--show-pods] [--trainer-version V | --crd FILE] [--json] [resolve options | --python PATH]"
        % ",".join(EXPORT_FORMATS),
        description="Resolve as compat resolve does, then write the set in FORMAT to standard output: pytorchjob (a Kubeflow "
        "PyTorchJob, --trainer-v2 a TrainJob, running the training command after -- under torchrun), sbatch (a Slurm batch script: "
        "compat env, the live preflight under srun, then the training command after -- under srun), dockerfile (an image that "
        "installs the set with compat install and checks it), requirements, constraints, pip-command (what compat install "
        "--print printed), pylock (a PEP 751 pylock.toml of the set). --validate FILE checks a PyTorchJob/TrainJob manifest or a "
        "Dockerfile against the rules the generated ones follow, for the transformers/accelerate/torch of --python's environment "
        "or of the resolved set, after what the API server would do with it (the CRD's fields, types and CEL rules; a TrainJob "
        "against the Trainer release of --trainer-version or --crd), on the pods the cluster would run. Exit 0 written (--validate: no failure), 1 no consistent set, a training command that cannot work "
        "with the set, or (--validate) failures; 2 usage error or an unreadable file.",
    )
    export_cmd.command_after_dashes = True
    export_cmd.populate = _export_arguments


def _export_arguments(export_cmd: argparse.ArgumentParser) -> None:
    export_cmd.add_argument("format", nargs="?", metavar="FORMAT", help="one of " + ", ".join(EXPORT_FORMATS))
    _wanted_options(export_cmd)
    _target_options(export_cmd, exclusive=True,
                    python="resolve for this interpreter; with --validate: take the versions from its installed set (default: $COMPAT_PYTHON, "
                    "else the running one's Python)",
                    python_version="resolve for this CPython version (default: the running one)",
                    platform="PEP 425 platform tag (default: the target interpreter's)")
    _source_options(export_cmd, verification=False)
    export_cmd.add_argument("--torch-from-pypi", action="store_true", help="take torch from PyPI instead of the PyTorch CPU index")
    export_cmd.add_argument("--require-hashes", action="store_true", help="requirements: refused (as compat install --print), since the "
                            "dependencies' hashes are known only to compat download")
    export_cmd.add_argument("--validate", metavar="FILE", help="check this PyTorchJob/TrainJob manifest (YAML, several documents allowed) or "
                            "Dockerfile (a FROM line) and print findings as compat doctor does; no FORMAT")
    _output_options(export_cmd, json_help="with --validate: the findings as JSON (compatmatrix/schemas/export-validate-v1.json)")
    job = export_cmd.add_argument_group("pytorchjob")
    job.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="pods (nodes): a Master and N-1 Workers (default 1)")
    job.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=per_node_int, default=1, metavar="M",
                     help="ranks per pod (default 1), started by torchrun")
    job.add_argument("--image", metavar="IMG", help="the image that holds the set (compat export dockerfile writes its Dockerfile); required")
    job.add_argument("--cpu", metavar="C", help="CPUs per pod, a Kubernetes quantity (8, 7500m): requests = limits; the thread plan follows it; required")
    job.add_argument("--memory", metavar="M", help="memory per pod (16Gi): requests = limits; required")
    job.add_argument("--name", default="compat-train", metavar="NAME", help="the job's name, a DNS-1035 label (default compat-train)")
    job.add_argument("--namespace", metavar="NS", help="the job's namespace (default: none in the manifest)")
    job.add_argument("--shm-size", default="2Gi", metavar="S", help="size of the Memory emptyDir mounted at /dev/shm (default 2Gi)")
    job.add_argument("--threads-per-core", type=per_node_int, default=1, metavar="K",
                     help="2 when the pod's CPU units are hyperthreads of SMT nodes (the plan then counts physical cores); default 1")
    job.add_argument("--no-preflight", action="store_true", help="no compat doctor --live in every pod before training")
    job.add_argument("--trainer-v2", action="store_true", help="write a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) instead")
    slurm = export_cmd.add_argument_group("sbatch (also --nnodes, --nproc-per-node, --name, --no-preflight)")
    slurm.add_argument("--time", metavar="T", help="the job's time limit, as Slurm takes it (MINUTES, HH:MM:SS, DAYS-HH:MM:SS)")
    slurm.add_argument("--partition", metavar="P", help="the partition to submit to (default: the cluster's)")
    k8s = export_cmd.add_argument_group("trainjob (with pytorchjob --trainer-v2, and with --validate)")
    k8s.add_argument("--trainer-version", metavar="V", help="the Kubeflow Trainer release of the cluster: v2.0, v2.1, v2.2 or v2.3 "
                     "(default: the newest); its TrainJob fields, override mechanism and runtime part names are used")
    k8s.add_argument("--crd", metavar="FILE", help="the cluster's TrainJob CRD (kubectl get crd trainjobs.trainer.kubeflow.org -o yaml) "
                     "instead of --trainer-version; a release compat does not know is judged by its schema")
    k8s.add_argument("--show-pods", action="store_true", help="with --validate: also print the pods the cluster would run for "
                     "the manifest (YAML); they are judged either way")
    docker = export_cmd.add_argument_group("dockerfile")
    docker.add_argument("--base", metavar="IMG", help="the base image (default python:X.Y-slim for the resolved set's Python)")
    docker.add_argument("--ranks-per-node", type=per_node_int, default=1, metavar="N", help="ranks per container, for compat env's thread settings (default 1)")
    docker.add_argument("--wheelhouse", metavar="DIR", help="install offline from this compat download folder of the build context")
    export_cmd.set_defaults(build=_export_args_of)


class _Registered:
    """--launcher's choices: the launchers of the registry that offer ``capability`` (launchers.names; "env", "tune"),
    read on first use (a value given, or the help), so that a command's start imports no launcher module unless it is."""

    def __init__(self, capability: str) -> None:
        self.capability = capability

    def _names(self) -> tuple[str, ...]:
        from .launchers import names

        return names(self.capability)

    def __contains__(self, value: object) -> bool:
        return value in self._names()

    def __iter__(self):  # noqa: ANN204
        return iter(self._names())


def _launcher_option(parser: argparse.ArgumentParser, capability: str, **kwargs: Any) -> None:
    """--launcher with the registry's choices (_Registered), given once the option is made: argparse writes a new
    option's choices out to check it, which would read the registry at every start of the command."""
    parser.add_argument("--launcher", **kwargs).choices = _Registered(capability)


def _env_arguments(env_cmd: argparse.ArgumentParser) -> None:
    env_cmd.add_argument("--shell", choices=["bash", "zsh", "fish"], default="bash")
    env_cmd.add_argument("--ranks-per-node", type=per_node_int, default=2, metavar="N")
    _launcher_option(env_cmd, "env", help="also export what this launcher needs for ccl (torchrun/spawn: CCL_ATL_TRANSPORT=ofi, FI_PROVIDER_PATH, ...)")
    env_cmd.add_argument("--master-addr", metavar="HOST", help="the job's master (node 0; default $MASTER_ADDR): export the interface that reaches "
                         "it for gloo (GLOO_SOCKET_IFNAME), oneCCL (CCL_KVS_IFACE, FI_TCP_IFACE) and --launcher's MPI, and MASTER_ADDR")
    env_cmd.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="hosts in the job (default 1): with N > 1 a master that is "
                         "loopback here is named as the fault it is")
    env_cmd.add_argument("--mpirun", metavar="PATH", help="with --launcher mpirun: the mpirun the job runs, whose MPI decides oneCCL's transport "
                         "(Intel MPI: its MPI transport; Open MPI, MPICH: ofi); default: next to the interpreter, then PATH")
    env_cmd.add_argument("--defaults", action="store_true",
                         help="write the settings (OMP_NUM_THREADS, CCL_WORKER_COUNT, LD_PRELOAD, ...) as defaults that a value already set "
                         "when the file is sourced overrides: for a file written during docker build, so a pod's or docker run -e value wins")
    _target_options(env_cmd, python="the interpreter whose bindings to use (default: $COMPAT_PYTHON, else the running one)")
    _output_options(env_cmd)


def _launch_arguments(launch_cmd: argparse.ArgumentParser) -> None:
    from .launchers import LAUNCHERS, names
    from .launchers.interface import BOUND
    from .watch.command import LAUNCHERS as WATCH_LAUNCHERS
    from .watch.command import watch_arguments

    launch_cmd.add_argument("--launcher", choices=(*names(BOUND), *WATCH_LAUNCHERS), required=True,
                            help="torchrun (of --python's environment) or mpirun (Intel MPI, Open MPI, MPICH); spawn: compat starts the ranks (with --watch)")
    launch_cmd.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=per_node_int, required=True, metavar="N", help="ranks on this node")
    launch_cmd.add_argument("--ccl-workers", type=zero_or_more_int, default=None, metavar="K",
                            help="oneCCL worker cores set aside per rank (default: 1 where the cores allow it, else 0; 0: none, the worker shares the rank's cores)")
    launch_cmd.add_argument("--print", dest="print_", action="store_true", help="print the plan, the exports and the command instead of running it")
    launch_cmd.add_argument("--json", action="store_true", help="with --print: the plan as JSON (compatmatrix/schemas/launch-v1.json); with --watch: the findings (watch-v1.json)")
    _matrix_option(launch_cmd)
    watch_arguments(launch_cmd)  # --watch, --watch-only, --stall-after
    _target_options(launch_cmd, python="the training environment's interpreter: runs torchrun and scripts (default: $COMPAT_PYTHON, else the running one)")
    launch_cmd.add_argument("--sysfs-root", metavar="DIR", help="with --print: plan for a recorded topology, a folder shaped like /sys")
    launch_cmd.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
    launch_cmd.add_argument("--mpi-flavor", choices=LAUNCHERS["mpirun"].flavors, help="mpirun: which MPI it is (default: asked with mpirun --version)")
    launch_cmd.command_remainder = True
    launch_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="what each rank runs, after -- (a .py script gets the interpreter in front)")


def _checks_parser(commands, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=description)

    def add(parser: argparse.ArgumentParser) -> None:
        if name == "check":
            _target_options(parser, python="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
                            python_version="with -r: the Python the files are for (default: the running one)",
                            platform="with -r: the platform tag (default: this machine's)")
            parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                                help="check the pins of FILE instead of an environment (a requirements file, pip freeze list or pylock.toml): "
                                "the CI gate before anything is installed; only the package checks apply")
            # checked against the launchers registry only when given (_checks_args_of): compat check's start stays light
            parser.add_argument("--launcher", dest="check_launcher", metavar="LAUNCHER",
                                help="the launcher you start ranks with (any that compat env --launcher takes): oneccl.launcher checks what ccl needs "
                                "under it (its transport, I_MPI_ROOT, MASTER_ADDR/MASTER_PORT; the rendezvous under mpirun whatever the backend)")
        else:
            _target_options(parser, python="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)")
        parser.add_argument("--ranks-per-node", "--nproc-per-node", dest="ranks_per_node", type=per_node_int, default=2, metavar="N",
                            help="ranks you launch per node (default 2): for the thread checks, and the ranks --live starts")
        parser.add_argument("--bf16", action=_Bf16Action, default=None,
                            help="--bf16: you intend to train in bf16 (checks the CPU supports it natively; --live then trains in bf16, emulated "
                            "where the CPU has no native bf16); --no-bf16: the live Trainer step stays fp32; default: --live uses bf16 when the CPU has "
                            "avx512_bf16 or AMX")
        parser.add_argument("--only", action="append", default=[], metavar="ID", help="run only these checks or areas (repeatable)")
        parser.add_argument("--skip", action="append", default=[], metavar="ID", help="skip these checks or areas (repeatable)")
        parser.add_argument("--list", action="store_true", help="list the checks and exit")
        parser.add_argument("--verbose", action="store_true", help="show the evidence of passing checks too")
        if name == "doctor":
            from .launchers import names
            from .launchers.interface import LIVE

            parser.add_argument("--import-timeout", type=positive_float, default=120.0, metavar="S", help="seconds each part of the import probe (torch, IPEX, the bindings) may take (default 120)")
            live = parser.add_argument_group("live validation (--live)")
            live.add_argument("--live", action="store_true", help="start real ranks: a 2-rank allreduce (fp32, bf16, bandwidth) and a short Trainer step")
            live.add_argument("--launcher", choices=names(LIVE), default=None,
                              help="how the ranks start (default: srun inside an srun step, where the allocation gives the layout; else spawn: compat starts them); "
                              "without --live: the launcher oneccl.launcher judges and the fixes' compat env names, as compat check --launcher")
            live.add_argument("--backend", choices=["auto", "ccl", "gloo"], default="auto", help="auto (default): ccl when the oneCCL bindings register it, else gloo")
            live.add_argument("--live-timeout", type=positive_float, default=None, metavar="S",
                              help="hard limit for the whole live run (default 120 s; 300 s with --fabric)")
            live.add_argument("--no-trainer", action="store_true", help="only the allreduce, no Trainer step")
            live.add_argument("--steps", type=positive_int, default=3, metavar="K", help="Trainer steps (default 3)")
            live.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="nodes in the run (torchrun/spawn: run compat doctor --live on each)")
            live.add_argument("--node-rank", type=zero_or_more_int, default=0, metavar="R", help="this node's index, 0..N-1")
            live.add_argument("--master-addr", metavar="HOST", help="rendezvous address, node 0 (default 127.0.0.1, or the hostfile's first host)")
            live.add_argument("--master-port", type=port_int, metavar="PORT", help="rendezvous port (default: a free one; required with --nnodes > 1)")
            live.add_argument("--hostfile", metavar="FILE", help="the hosts: a hostfile or a Slurm node list, node[01-16]; with --live, mpirun starts --nproc-per-node ranks on each; without --live, the static preflight on every host")
            live.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
            live.add_argument("--run-dir", metavar="DIR", help="where the ranks write their results (mpirun --hostfile: a folder every node sees)")
            live.add_argument("--rsh", metavar="PROG", help="the remote shell that reaches the hostfile's hosts, called like ssh (default: "
                              "$I_MPI_HYDRA_BOOTSTRAP_EXEC, $OMPI_MCA_plm_rsh_agent, else ssh); also for doctor --hostfile without --live")
            live.add_argument("--fabric", action="store_true",
                              help="also sweep allreduce, allgather, reduce_scatter, broadcast and all_to_all over message sizes (fp32 and bf16), "
                              "every result checked exactly, bus bandwidth as nccl-tests defines it")
            live.add_argument("--sizes", metavar="LIST", help="--fabric's message sizes, e.g. 1K,64K,4M (default: 1 KiB up by powers of 4 to 16 MiB, bounded by memory)")
            live.add_argument("--pairs", metavar="MODE", help="--fabric across hosts: which pairs of hosts to measure: all (default; N-1 rounds "
                              "for N hosts), ring (N pairs, 2-3 rounds: finds a slow host) or sample:K (the ring plus K rounds drawn from all)")
            live.add_argument("--pair-deadline", type=positive_float, default=None, metavar="S",
                              help="--fabric across hosts: seconds each pair of hosts may take before it is named as not answering (default 30)")
            live.add_argument("--fabric-deadline", default=None, metavar="S",
                              help="--fabric: seconds the pairs and the sweep may take in all, 1 to 3600, e.g. 90 or 90.5 (default 60: 4 hosts in "
                              "under 2 minutes in all); the pairs "
                              "come first, the sweep is sized to the slowest link they found, and what did not fit is named")
            live.add_argument("--report", metavar="FILE.html", help="--fabric: also write one self-contained HTML page (no network needed to open it): "
                              "the pair heat-map, bus bandwidth against size, the memory-copy line and the findings (needs matplotlib: the report extra)")
            live.add_argument("--no-rank-env", action="store_true",
                              help="start the ranks without RANK/WORLD_SIZE (spawn, mpirun): reproduces the every-rank-trains-alone mistake")
        _output_options(parser)

    if name == "doctor":
        parser.populate = add  # on first use: doctor's --launcher reads the launchers registry
    else:
        add(parser)
    parser.set_defaults(build=_checks_args_of)
    return parser


# --- argparse's Namespace -> the command's typed arguments (options.py) ------------------------------------------------


def _output(ns: argparse.Namespace) -> Output:
    from .options import Output

    return Output(json=bool(getattr(ns, "json", False)), no_color=bool(getattr(ns, "no_color", False)), matrix=getattr(ns, "matrix", None))


def _target(ns: argparse.Namespace) -> Target:
    """The target options as given, --python defaulting to $COMPAT_PYTHON (only for commands that take --python)."""
    from .options import Target

    given = getattr(ns, "python", None)
    python = given
    if given is None and hasattr(ns, "python"):
        python = os.environ.get(PYTHON_ENV) or None
    return Target(python, given is not None, getattr(ns, "python_version", None), getattr(ns, "platform", None))


def _wanted(ns: argparse.Namespace) -> Wanted:
    from .options import Wanted

    return Wanted(tuple(getattr(ns, "requirements", ()) or ()), tuple(ns.requirement_files), ns.profile,
                  tuple(name.strip() for name in ns.with_.split(",") if name.strip()))


def _sources(ns: argparse.Namespace, wheelhouse: Optional[str] = None) -> Sources:
    from .options import Sources

    return Sources(tuple(ns.index), bool(getattr(ns, "torch_from_pypi", False)), bool(getattr(ns, "require_hashes", False)),
                   bool(getattr(ns, "allow_unverified", False)), wheelhouse)


def _command_words(words: Optional[Sequence[str]]) -> tuple[str, ...]:
    """argparse's REMAINDER with the leading -- dropped."""
    words = list(words or ())
    return tuple(words[1:] if words[:1] == ["--"] else words)


def _resolve_args_of(ns: argparse.Namespace) -> ResolveArgs:
    from .options import ResolveArgs

    return ResolveArgs(_output(ns), _target(ns), _wanted(ns))


def _matrix_args_of(ns: argparse.Namespace) -> MatrixArgs:
    from .options import MatrixArgs

    return MatrixArgs(_output(ns), tuple(ns.package or ()), ns.python_version, ns.torch, ns.sources)


def _matrix_update_args_of(ns: argparse.Namespace):
    from .options import MatrixUpdateArgs

    return MatrixUpdateArgs(_output(ns), tuple(ns.index), ns.write, tuple(ns.package or ()), bool(ns.health))


def _matrix_verify_args_of(ns: argparse.Namespace):
    from .options import MatrixVerifyArgs

    return MatrixVerifyArgs(_output(ns), ns.pin, ns.with_torch, ns.python, ns.host, tuple(ns.index), ns.timeout)


def _checks_args_of(ns: argparse.Namespace) -> ChecksArgs:
    from .options import ChecksArgs, LiveArgs

    live = getattr(ns, "live", False)
    given = getattr(ns, "bf16_given", ()) or ()
    if not getattr(ns, "list", False):  # --list lists the checks whatever else was given
        if len(given) > 1:
            raise UsageError("--bf16 and --no-bf16 contradict each other.", "Pass one of them.")
        if ns.bf16 is False and not live:
            where = "compat doctor --live" if ns.command == "doctor" else f"compat doctor --live, not compat {ns.command}"
            raise UsageError(f"--no-bf16 only keeps the live Trainer step in fp32: it goes with {where}.",
                             "Drop --no-bf16 (without --bf16 the bf16 checks do not apply), or add --live to compat doctor.")
    launcher = getattr(ns, "check_launcher", None)
    if ns.command == "doctor" and not live:  # static doctor --launcher: the launcher oneccl.launcher judges and every fix names
        launcher = getattr(ns, "launcher", None)
    if launcher is not None:
        from .launchers import names
        from .launchers.interface import ENV

        if launcher not in names(ENV):
            raise UsageError(f"--launcher {launcher!r} is not a launcher compat knows.", f"Use one of: {', '.join(names(ENV))}.")
    live_args = None
    if live:
        timeout = ns.live_timeout if ns.live_timeout is not None else FABRIC_LIVE_TIMEOUT_S if ns.fabric else LIVE_TIMEOUT_S
        live_args = LiveArgs(ns.launcher, ns.backend, timeout, not ns.no_trainer, ns.steps, ns.nnodes, ns.node_rank, ns.master_addr,
                             ns.master_port, ns.mpirun, ns.run_dir, not ns.no_rank_env, ns.fabric, _sizes(ns.sizes, ns.fabric),
                             _pairs(ns.pairs, ns.fabric), _report(ns.report, ns.fabric), _pair_deadline(ns.pair_deadline, ns.fabric),
                             _fabric_deadline(ns.fabric_deadline, ns.fabric))
    elif getattr(ns, "fabric", False) or getattr(ns, "sizes", None) or getattr(ns, "pairs", None) or getattr(ns, "pair_deadline", None) is not None \
            or getattr(ns, "fabric_deadline", None) is not None:
        raise UsageError("--fabric, --sizes, --pairs, --pair-deadline and --fabric-deadline measure the ranks: they go with compat doctor --live.", "Add --live.")
    elif getattr(ns, "report", None):
        raise UsageError("--report draws what compat doctor --live --fabric measures: it goes with them.", "Add --live --fabric.")
    return ChecksArgs(ns.command, _output(ns), _target(ns), tuple(getattr(ns, "requirement_files", ()) or ()), ns.ranks_per_node, ns.bf16,
                      tuple(ns.only), tuple(ns.skip), ns.list, ns.verbose, getattr(ns, "import_timeout", 120.0), live_args,
                      getattr(ns, "hostfile", None), getattr(ns, "rsh", None), launcher)


LIVE_TIMEOUT_S = 120.0  # compat doctor --live's default --live-timeout
FABRIC_LIVE_TIMEOUT_S = 300.0  # with --fabric: the sweep to 16 MiB and the pair rounds (91 s in all on 4 namespace hosts here)


def _fabric_only(option: str, purpose: str, fabric: bool) -> None:
    """An option of the --fabric test given without --fabric: one sentence, exit 2."""
    if not fabric:
        raise UsageError(f"{option} {purpose}.", f"Add --fabric, or drop {option}.")


def _sizes(text: Optional[str], fabric: bool) -> tuple[int, ...]:
    if text is None:
        return ()
    _fabric_only("--sizes", "sets the sizes of the --fabric sweep", fabric)
    from .live.fabric import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass sizes like --sizes 1K,64K,4M (bytes, K = 1024, M = 1024 K, G = 1024 M).") from None


def _report(path: Optional[str], fabric: bool) -> Optional[str]:
    """--report FILE.html, checked before any rank starts: it goes with --fabric, its folder exists, and matplotlib (the
    report extra, imported on this path only) is installed."""
    if path is None:
        return None
    _fabric_only("--report", "draws the --fabric measurements", fabric)
    folder = os.path.dirname(os.path.abspath(path))
    if not path or not os.path.isdir(folder) or os.path.isdir(path):
        raise UsageError(f"--report {visible(path[:200])} is not a file in an existing folder.", "Pass a file name such as --report fabric.html.")
    _probe_folder(folder, path)
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise UsageError("--report draws its charts with matplotlib, which is not installed in compat's environment.",
                         "Install it (pip install 'compatmatrix[report]', or pip install matplotlib), then run again.")
    return path


def _probe_folder(folder: str, path: str) -> None:
    """The report's folder takes a file (created, written, removed: what _write_report does at the end), before any rank
    starts: a folder that cannot be written would otherwise fail after the whole run, with its findings lost."""
    import tempfile

    try:
        handle, probe = tempfile.mkstemp(prefix=".compat-report-probe-", suffix=".html", dir=folder)
        try:
            os.write(handle, b"<!-- compat probe -->")
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--report {visible(path[:200])} cannot be written: its folder {visible(folder[:200])} refuses a new file "
                         f"({exc.strerror or exc.__class__.__name__}).",
                         "Pass --report a file in a folder you can write to (e.g. --report ./fabric.html), then run again.") from None


PAIR_DEADLINE_S = 30.0  # --pair-deadline's default: a pair test takes ~0.3 s on a healthy link, ~1 s through 10 Mbit/s


def _pair_deadline(seconds: Optional[float], fabric: bool) -> float:
    if seconds is None:
        return PAIR_DEADLINE_S
    _fabric_only("--pair-deadline", "bounds each pair of hosts of the --fabric test", fabric)
    if seconds > 3600:
        raise UsageError(f"--pair-deadline {seconds:g} is more than an hour.", "Pass a number of seconds up to 3600, e.g. --pair-deadline 60.")
    return seconds


FABRIC_DEADLINE_RESERVE_S = 30.0  # of --live-timeout, kept beside --fabric-deadline: the ranks' start and the Trainer step


def _fabric_deadline(text: Optional[str], fabric: bool) -> Optional[float]:
    if text is None:
        return None
    _fabric_only("--fabric-deadline", "bounds the --fabric measurements", fabric)
    from .live.fabric import parse_deadline

    try:
        return parse_deadline(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass whole or decimal seconds from 1 to 3600, e.g. --fabric-deadline 120.") from None


def fabric_deadline_for(asked: Optional[float], live_timeout: float) -> float:
    """--fabric-deadline as the run uses it: the one asked (it must fit in --live-timeout beside the ranks' start and the
    Trainer step), else live/fabric.FABRIC_DEADLINE_S, shortened to fit a shorter --live-timeout."""
    from .live.fabric import FABRIC_DEADLINE_S

    room = live_timeout - FABRIC_DEADLINE_RESERVE_S
    if asked is None:
        return max(5.0, min(FABRIC_DEADLINE_S, room))
    if asked > room:
        raise UsageError(f"--fabric-deadline {asked:g} does not fit in --live-timeout {live_timeout:g} beside the {FABRIC_DEADLINE_RESERVE_S:g} s "
                         "the ranks' start and the Trainer step take.",
                         f"Pass --fabric-deadline {max(1, int(room))} or less, or --live-timeout {int(asked + FABRIC_DEADLINE_RESERVE_S) + 1} or more.")
    return asked


def _pairs(text: Optional[str], fabric: bool) -> str:
    if text is None:
        return "all"
    if not fabric:
        raise UsageError("--pairs chooses the host pairs of the --fabric test.", "Add --fabric, or drop --pairs.")
    from .live.fabric import parse_pair_mode

    try:
        mode = parse_pair_mode(text)
    except ValueError as exc:
        raise UsageError(f"{exc}.", "Pass --pairs all, --pairs ring or --pairs sample:4.") from None
    return mode.kind if mode.kind != "sample" else f"sample:{mode.rounds_drawn}"


def _install_args_of(ns: argparse.Namespace) -> InstallArgs:
    from .options import InstallArgs

    if ns.offline and not ns.wheelhouse:
        raise UsageError("--offline needs --wheelhouse DIR.", "Make one with compat download -d DIR, then pass --wheelhouse DIR.")
    return InstallArgs(_output(ns), _target(ns), _wanted(ns), _sources(ns, ns.wheelhouse), ns.yes, ns.dry_run, ns.installer, ns.print_,
                       ns.offline, ns.restore, ns.discard_snapshot, ns.planner)


def _download_args_of(ns: argparse.Namespace) -> DownloadArgs:
    from .options import DownloadArgs

    return DownloadArgs(_output(ns), _target(ns), _wanted(ns), _sources(ns), ns.dest)


def _translate_args_of(ns: argparse.Namespace) -> TranslateArgs:
    from .options import TranslateArgs

    return TranslateArgs(_output(ns), _target(ns).python, ns.transformers, ns.accelerate, _command_words(ns.training_command))


def _migrate_args_of(ns: argparse.Namespace) -> MigrateArgs:
    from .options import MigrateArgs

    return MigrateArgs(_output(ns), _target(ns), tuple(ns.requirement_files), ns.dry_run, ns.yes, ns.to_torch, _command_words(ns.training_command),
                       tuple(ns.sources), ns.compare, ns.ranks_per_node, tuple(ns.indexes), ns.installer, ns.live_timeout)


def _env_args_of(ns: argparse.Namespace) -> EnvArgs:
    from .options import EnvArgs

    if ns.master_addr is not None:
        from .hostlist import parse_host

        entry, _problem = parse_host(ns.master_addr)
        if entry is None or "@" in ns.master_addr or entry[1] is not None:
            raise UsageError(f"--master-addr {visible(ns.master_addr[:80])} is not a host name or an address.",
                             "Pass the first host's name or address, e.g. --master-addr node01.")
    if ns.mpirun is not None and ns.launcher != "mpirun":
        raise UsageError("--mpirun goes with --launcher mpirun.", "Add --launcher mpirun, or drop --mpirun.")
    return EnvArgs(_output(ns), _target(ns).python, ns.shell, ns.ranks_per_node, ns.launcher, ns.defaults, ns.master_addr, ns.nnodes, ns.mpirun)


def _tune_args_of(ns: argparse.Namespace) -> TuneArgs:
    from .options import TuneArgs

    command = _command_words(ns.training_command)
    if ns.reads and not command:
        raise UsageError("--reads names an argument of a training command, and none was given after --.",
                         "Pass the command after -- (compat tune --reads data_path -- train.py --data_path d), or drop --reads.")
    for word in ns.reads:
        if not word.strip("-") or "\0" in word:
            raise UsageError(f"--reads takes the name of one of the command's options or a positional argument as written, not {word[:60]!r}.",
                             "Pass e.g. --reads data_path (without its value).")
    return TuneArgs(ns.json, ns.launcher, ns.budget, _target(ns).python, not ns.no_bf16, not ns.no_compile, command, tuple(ns.reads), ns.matrix)


def _launch_args_of(ns: argparse.Namespace) -> LaunchArgs:
    from .options import LaunchArgs
    from .watch.command import watch_args_of

    if ns.json and not ns.print_ and not (ns.watch or ns.watch_only):
        raise UsageError("--json goes with --print (a running job writes its own output).", "Add --print to get the plan as JSON.")
    return LaunchArgs(ns.json, ns.launcher, ns.nproc_per_node, ns.ccl_workers, ns.print_, _target(ns).python, ns.sysfs_root, ns.mpirun,
                      ns.mpi_flavor, _command_words(ns.training_command), ns.matrix, *watch_args_of(ns))


#: the options of one export format; any other format (or --validate) given one of them is a usage error
_JOB_OPTIONS = {"nnodes": 1, "nproc_per_node": 1, "name": "compat-train", "no_preflight": False}  # pytorchjob's and sbatch's
_FORMAT_OPTIONS = {
    "pytorchjob": {**_JOB_OPTIONS, "image": None, "cpu": None, "memory": None, "namespace": None,
                   "shm_size": "2Gi", "threads_per_core": 1, "trainer_v2": False},
    "sbatch": {**_JOB_OPTIONS, "time": None, "partition": None},
    "dockerfile": {"base": None, "ranks_per_node": 1, "wheelhouse": None},
    "requirements": {"require_hashes": False},
}


def _export_args_of(ns: argparse.Namespace) -> ExportArgs:
    from .options import DockerArgs, ExportArgs, JobArgs, SlurmArgs, Wanted

    requirements = list(ns.requirements)
    form = ns.format
    if ns.validate is not None and form is not None and form not in EXPORT_FORMATS:
        requirements.insert(0, form)  # the first REQUIREMENT, taken for FORMAT by argparse
        form = None
    if ns.validate is not None and form is not None:
        raise UsageError(f"--validate checks a file; it takes no FORMAT ('{shown(form)}').", "Run compat export --validate FILE, or compat export FORMAT.")
    if ns.validate is None and form is None:
        raise UsageError("compat export needs a FORMAT or --validate FILE.", f"Name one of {', '.join(EXPORT_FORMATS)}, e.g. compat export requirements.")
    if form is not None and form not in EXPORT_FORMATS:
        raise UsageError(f"'{shown(form)}' is not an export format.", f"Name one of {', '.join(EXPORT_FORMATS)}.")
    if ns.json and ns.validate is None:
        raise UsageError("--json goes with --validate (the formats are their own output).", "Drop --json, or check a file with --validate FILE.")
    for owner, options in _FORMAT_OPTIONS.items():
        if owner == form or (owner == "requirements" and form in ("requirements", "constraints", "pip-command")):
            continue
        given = [name for name, default in options.items() if getattr(ns, name) != default
                 and not (name in _JOB_OPTIONS and form in ("pytorchjob", "sbatch"))]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} goes with compat export {owner}" + (f", not {form}." if form else ", not --validate."),
                             f"Drop {flag}, or export {owner}.")
    if ns.training_command is not None and form not in ("pytorchjob", "sbatch"):
        raise UsageError("Only compat export pytorchjob and sbatch take a training command after --.", "Drop the words after --.")
    release_flag = "--crd" if ns.crd is not None else "--trainer-version" if ns.trainer_version is not None else None
    if ns.crd is not None and ns.trainer_version is not None:
        raise UsageError("--crd and --trainer-version both name the Trainer release.", "Pass one of them (--crd when your cluster's release is newer than compat knows).")
    if release_flag and ns.validate is None and not (form == "pytorchjob" and ns.trainer_v2):
        raise UsageError(f"{release_flag} goes with compat export pytorchjob --trainer-v2 or with --validate.", f"Add --trainer-v2, or drop {release_flag}.")
    if ns.show_pods and ns.validate is None:
        raise UsageError("--show-pods goes with --validate FILE.", "Run compat export --validate FILE --show-pods.")
    job = JobArgs(ns.nnodes, ns.nproc_per_node, ns.image, ns.cpu, ns.memory, ns.name, ns.namespace, ns.shm_size, ns.threads_per_core,
                  not ns.no_preflight, ns.trainer_v2, tuple(ns.training_command or ()))
    docker = DockerArgs(ns.base, ns.ranks_per_node, ns.wheelhouse)
    wanted = _wanted(ns)
    return ExportArgs(_output(ns), _target(ns), Wanted(tuple(requirements), wanted.files, wanted.profile, wanted.with_), _sources(ns), form,
                      ns.validate, job, docker, ns.trainer_version, ns.crd, ns.show_pods, SlurmArgs(ns.time, ns.partition))


# --- the commands: typed arguments -> core -> render -> exit code -----------------------------------------------------


def _say_conflict(no_color: bool, error) -> int:
    """No consistent set for a command that needed one: the reasons and what would work, on stderr; exit 1."""
    from .render.text import render_outcome

    render_outcome(make_console(no_color, stderr=True), error.conflict)
    return EXIT_PROBLEMS


def cmd_resolve(args: ResolveArgs) -> int:
    from .planning import ask, load, target_of
    from .render import emit
    from .resolve import resolve

    matrix = load(args.output.matrix)
    python, platform = target_of(args.target)
    asked = ask(matrix, args.wanted, python, platform)
    outcome = resolve(matrix, asked.request)
    files = asked.files

    def document() -> dict:
        from .render.json import resolve_document

        return resolve_document(outcome, args.wanted.files if files is not None else None, files.shown_passthrough if files is not None else ())

    def text(console) -> None:
        from .render.text import render_outcome

        render_outcome(console, outcome)

    emit(args.output.json, args.output.no_color, document, text)
    return EXIT_OK if outcome.ok else EXIT_PROBLEMS


def cmd_matrix(args: MatrixArgs) -> int:
    from .options import MatrixUpdateArgs, MatrixVerifyArgs

    if isinstance(args, MatrixUpdateArgs):
        return cmd_matrix_update(args)
    if isinstance(args, MatrixVerifyArgs):
        return cmd_matrix_verify(args)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from .matrix.model import Component
    from .planning import load_with_overlay
    from .render import emit
    from .render.json import matrix_json, matrix_rows
    from .target import PythonTarget

    matrix, overlay = load_with_overlay(args.output.matrix)
    try:
        packages = [Component.from_name(name) for name in args.packages] if args.packages else list(Component)
    except KeyError as exc:
        raise UsageError(f"{exc.args[0]!r} is not a package in the matrix.", "Use torch, ipex, ccl, torchvision, torchaudio, transformers or accelerate.") from None
    python = PythonTarget.parse(args.python_version).version if args.python_version else None
    try:
        torch = SpecifierSet(args.torch) if args.torch else None
    except InvalidSpecifier:
        raise UsageError(f"'{shown(args.torch or '')}' is not a version specifier.", "Write it like '==2.7.0' or '>=2.5,<2.8'.") from None
    if torch is not None:
        from .resolve import check_specifier_versions

        check_specifier_versions(args.torch, torch)
    rows = matrix_rows(matrix, packages, python, torch, overlay)

    def text(console) -> None:
        from .render.text import render_matrix

        render_matrix(console, matrix, rows, args.sources, overlay)

    emit(args.output.json, args.output.no_color, lambda: matrix_json(matrix, rows, overlay), text)
    return EXIT_OK


def cmd_matrix_update(args) -> int:
    from .matrix.harvest import PACKAGES
    from .matrix.model import Component
    from .maintain.registry import terminal_progress
    from .maintain.update import update, update_json, update_lines

    try:
        packages = [Component.from_name(name) for name in args.packages] if args.packages else list(PACKAGES)
    except KeyError as exc:
        raise UsageError(f"{shown(str(exc.args[0]))!r} is not a package compat matrix update reads.", "Use torch, ipex, torchvision, torchaudio, transformers or accelerate.") from None
    if any(p not in PACKAGES for p in packages):
        raise UsageError("oneccl_bind_pt is not on a registry compat can read (Intel's hosts are not harvested).", "Use torch, ipex, torchvision, torchaudio, transformers or accelerate.")
    if args.write is not None and ("\x00" in args.write or not args.write.strip()):
        raise UsageError(f"--write '{shown(args.write)}' is not a file name.", "Pass the matrix file to update, e.g. --write data/matrix.toml.")
    from .matrix.load import load_matrix

    progress = terminal_progress()
    if args.health:
        if args.write is not None:
            raise UsageError("--health writes nothing: it goes without --write.", "Drop --write, or run compat matrix update --write FILE on its own.")
        return _matrix_health(load_matrix(args.output.matrix), args, packages, progress)
    return _read_registries(args, progress, lambda: update(load_matrix(args.output.matrix), args.indexes, args.write, packages, progress),
                            update_json, update_lines)


def _matrix_health(matrix, args, packages, progress) -> int:
    """compat matrix update --health: the registries read, nothing written; exit 0 (the findings are facts of the
    registries, not problems of this machine)."""
    from .matrix.health import health_json, health_lines
    from .maintain.health_read import read_health

    return _read_registries(args, progress, lambda: read_health(matrix, args.indexes, packages, progress), health_json, health_lines)


def _read_registries(args, progress, read, to_json, to_lines) -> int:
    """compat matrix update and --health: ``read()`` under the progress line (cleared when it ends, however), then its
    result as ``--json`` or as text, one fact a line: a registry's line break (a yank reason's) is shown as \\n, never
    starts a line of its own. Exit 0."""
    try:
        result = read()
    finally:
        if progress is not None:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
    if args.output.json:
        from .console import dump_json

        print(dump_json(to_json(result)))
    else:
        from .console import visible_line
        from .redact import redact_text

        sys.stdout.write("".join(visible_line(redact_text(line)) + "\n" for line in to_lines(result)))
    return EXIT_OK


def cmd_matrix_verify(args) -> int:
    from .environment.child import valid_timeout
    from .matrix.model import Component
    from .maintain.verify import SMOKE_TIMEOUT_S, parse_pin, verify, verify_json, verify_lines
    from .planning import load

    component, version = parse_pin(args.pin)
    torch = None
    if args.with_torch is not None:
        partner, torch = parse_pin(args.with_torch, "torch==X")
        if partner is not Component.TORCH:
            raise UsageError(f"--with '{shown(args.with_torch)}' is not a torch pin.", "Write it as --with torch==X, e.g. --with torch==2.13.0.")
    timeout = SMOKE_TIMEOUT_S if args.timeout is None else args.timeout
    if not valid_timeout(timeout) or timeout > 86400:
        raise UsageError(f"--timeout {args.timeout} is not a number of seconds between 0 and a day.", "Pass --timeout SECONDS, e.g. --timeout 600.")
    python = args.python or sys.executable
    if "\x00" in python or not python.strip():
        raise UsageError(f"--python '{shown(python)}' is not a path.", "Pass --python PATH of a Python interpreter.")
    say = (lambda line: None) if args.output.json else (lambda line: _say_error(line))
    result = verify(load(args.output.matrix), component, version, torch, python, args.indexes, args.host, say,
                    display="none" if args.output.json else "auto", timeout=timeout)
    if args.output.json:
        from .console import dump_json

        print(dump_json(verify_json(result)))
    else:
        sys.stdout.write(visible("\n".join(verify_lines(result)) + "\n"))
    return EXIT_OK if result.record.works else EXIT_PROBLEMS


def _run_checks(args: ChecksArgs) -> int:
    from .checks.registry import Context, Options, all_checks, run_checks, select, unknown_names
    from .environment.snapshot import take_snapshot
    from .planning import load

    static_only = args.command == "check"
    checks = all_checks()
    if args.list_checks:
        from .render.text import render_check_list

        render_check_list(make_console(args.output.no_color), select(checks, static_only=static_only))
        return EXIT_OK
    if args.hostfile and args.live is None:
        return _run_hosts(args)
    live_named = [n for n in args.only + args.skip if n == "live" or n.startswith("live.")]
    if live_named and args.live is None:
        raise UsageError(f"'{live_named[0]}' is a live check: it needs compat doctor --live.", "Add --live.")
    unknown = unknown_names([n for n in args.only + args.skip if n not in live_named])
    if unknown:
        raise UsageError(f"'{unknown[0]}' is not a check id or area.", f"Run 'compat {args.command} --list' for the ids.")
    live_options = _live_options(args) if args.live is not None else None
    matrix = load(args.output.matrix)
    files = None
    cpu_index = False
    if args.files:
        snapshot, files, cpu_index = _pinned_snapshot(args, matrix)
    else:
        if args.target.python_version or args.target.platform:
            raise UsageError("--python-version and --platform go with -r FILE.", "To check an environment, pass --python PATH of its interpreter.")
        snapshot = take_snapshot(args.target.python, cached=True)  # the environment's facts, kept while its fingerprint holds
    options = Options(ranks_per_node=args.ranks_per_node, bf16=args.bf16 is True, import_timeout=args.import_timeout, launcher=args.launcher,
                      env_launcher=live_options.launcher if live_options is not None else None,  # the launcher the fixes' compat env names
                      cpu_index=cpu_index)
    context = Context(matrix, snapshot, options)
    only = [n for n in args.only if n not in live_named]
    chosen = select(checks, only, list(args.skip), static_only=static_only) if only or not args.only else []
    if live_options is not None and not any(n.startswith("imports") for n in args.only):
        chosen = [c for c in chosen if c.static]  # every rank imports the stack itself: live.imports reports it
    if files is not None:
        chosen = [c for c in chosen if c.id.startswith("packages.")]  # no machine and no shell: only the pins can be judged
    findings = run_checks(chosen, context)
    if files is not None:
        from .inputs.check import file_findings

        findings = file_findings(list(args.files), files, findings)
    live = None
    if live_options is not None:
        from .live.service import run_live

        live = run_live(context, live_options)
        findings += live.findings

    def document() -> dict:
        from .render.json import findings_json

        data = findings_json(args.command, snapshot, findings, list(args.files) if files is not None else None)
        if files is None:  # this host's facts, for doctor --hostfile to compare hosts
            from .hosts import host_facts

            data["host"] = host_facts(snapshot, os.uname()[1])
        if live is not None:
            data["live"] = live.details
        return data

    written: Optional[dict] = None
    if args.live is not None and args.live.report:
        written = document()  # the page and --json show the same document
        _write_report(args.live.report, written)

    def text(console) -> None:
        from .render.text import findings_header, render_findings

        render_findings(console, findings_header(args.command, snapshot), findings, args.verbose, live.details if live else None)

    from .render import emit

    emit(args.output.json, args.output.no_color, document if written is None else (lambda: written), text)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def _write_report(path: str, data: dict) -> None:
    """The fabric report of ``data`` (the --json document) written whole or not at all (a temporary file renamed)."""
    import tempfile

    from .render.fabric_html import render_report

    page = render_report(data)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".compat-report-", suffix=".html", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(page)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        raise CompatError(f"The report could not be written to {visible(path[:200])}: {exc.strerror or exc}.",
                          "Pass --report a file in a folder you can write to.") from None


def _preflight_hosts(given: str) -> list[str]:
    """--hostfile's hosts (doctor --hostfile, doctor --live --hostfile): a hostfile, or (no such file) a Slurm node list
    such as node[01-16], read by the one route both take (hosts.read_host_list)."""
    from .hostlist import HostfileError, read_host_list

    try:
        return list(dict.fromkeys(name for name, _ in read_host_list(given)))
    except HostfileError as exc:
        raise UsageError(visible(str(exc)), exc.fix) from None


def _run_hosts(args: ChecksArgs) -> int:
    """compat doctor --hostfile FILE [--rsh PROG]: compat check on every host through the remote shell, and the differences."""
    from .environment.snapshot import take_snapshot
    from .hosts import collect, compare, own_addresses, remote_command, routes_from_here
    from .launchers.mpirun import remote_shell
    from .render import emit
    from .render.json import findings_json
    from .render.text import findings_header, render_findings

    assert args.hostfile is not None
    hosts = _preflight_hosts(args.hostfile)
    rsh, source = remote_shell(os.environ, args.rsh)
    answers = collect(hosts, rsh, remote_command(args.target.python, args.ranks_per_node, args.launcher), os.environ)
    findings = compare(answers, rsh, source, routes_from_here(own_addresses(answers)), args.target.python, args.launcher)
    snapshot = take_snapshot(args.target.python)

    def document() -> dict:
        data = findings_json("doctor", snapshot, findings)
        data["hosts"] = {a.host: (a.document or {}).get("host") for a in answers}
        return data

    emit(args.output.json, args.output.no_color, document,
         lambda console: render_findings(console, findings_header("doctor", snapshot), findings, args.verbose))
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def _pinned_snapshot(args: ChecksArgs, matrix: Matrix):
    """compat check -r: an environment made of the files' exact pins (nothing installed, no machine)."""
    from .environment.from_pins import snapshot_from_pins
    from .inputs import read_inputs
    from .inputs.request import file_request
    from .planning import target_of
    from .record import replace

    if args.target.python and args.target.python != os.environ.get(PYTHON_ENV):  # an exported COMPAT_PYTHON (pre-commit) does not conflict
        raise UsageError("-r checks files, --python an environment: give one of them.", "Drop --python to check the files' pins.")
    python, platform = target_of(replace(args.target, python=None, python_given=False))  # the files' target, not an environment's
    inputs = read_inputs(list(args.files), python, platform=platform)
    files = file_request(matrix, inputs)
    origin = ", ".join(args.files)
    return snapshot_from_pins(files.pinned, python.version, platform, origin), files, _names_cpu_index(matrix, inputs)


def _names_cpu_index(matrix: Matrix, inputs) -> bool:
    """Do the files name the PyTorch CPU index (--index-url or --extra-index-url)? There pip takes an unlabelled
    torch/torchvision/torchaudio pin as its +cpu build: a local version sorts above PyPI's release of the same number."""
    host = matrix.hosts.get("pytorch-cpu")
    return host is not None and any(line.kind in ("index-url", "extra-index-url") and line.url.rstrip("/") == host.url.rstrip("/")
                                    for line in inputs.indexes)


def _live_options(args: ChecksArgs):
    from .launchers import LAUNCHERS
    from .launchers import names as launcher_names
    from .launchers.interface import HOSTFILE, LIVE, UNMAPPED, RankLayout
    from .live.service import LiveOptions
    from .record import replace

    live = args.live
    assert live is not None
    layout_notes: tuple[str, ...] = ()
    layout_hosts: tuple[str, ...] = ()  # srun: the allocation's hosts, node by node (the live report names them)
    if live.launcher is None:  # inside an srun step the allocation says where the ranks go; elsewhere compat starts them
        from .launchers.srun import in_step

        live = replace(live, launcher="srun" if in_step(os.environ) else "spawn")
        if live.launcher == "srun":
            layout_notes = ("srun: chosen because compat runs as a task of an srun step (--launcher spawn to start only this node's ranks)",)
    if live.launcher == "srun":
        from .launchers.srun import allocation_layout

        if live.nnodes != 1 or live.node_rank != 0 or args.hostfile:
            raise UsageError("Under srun the nodes and this node's rank come from the allocation, not from --nnodes/--node-rank/--hostfile.",
                             "Drop them: srun --ntasks-per-node=1 compat doctor --live reads SLURM_NODEID and the node list itself.")
        allocated, notes = allocation_layout(os.environ, args.ranks_per_node, live.master_addr, live.master_port)
        live = replace(live, nnodes=allocated.nnodes, node_rank=allocated.node_rank, master_addr=allocated.master_addr, master_port=allocated.master_port)
        layout_notes += notes
        layout_hosts = allocated.hosts
    if live.nnodes < 1 or not 0 <= live.node_rank < live.nnodes:
        raise UsageError("--node-rank must be between 0 and --nnodes - 1.", "Pass --nnodes N and a --node-rank below N.")
    if live.timeout <= 0 or live.steps < 1:
        raise UsageError("--live-timeout and --steps must be positive.", "Pass e.g. --live-timeout 120 --steps 3.")
    if live.fabric:
        from .live.service import init_timeout_for

        group_timeout = init_timeout_for(live.timeout)  # the ranks wait for a round's pairs on their own group's timeout
        if live.pair_deadline > group_timeout - 5:
            raise UsageError(f"--pair-deadline {live.pair_deadline:g} does not fit in the ranks' own timeout of {group_timeout:g} s "
                             f"(half of --live-timeout, at most 60 s), which the other ranks wait on while a pair runs.",
                             f"Pass --pair-deadline {max(1, int(group_timeout - 5))} or less, or a longer --live-timeout.")
    across = launcher_names(HOSTFILE)  # the launchers that start other hosts' ranks themselves
    if args.hostfile and live.launcher not in across:
        raise UsageError(f"--hostfile goes with --launcher {' or '.join(across)}.",
                         f"Add --launcher {across[0]}, or use --nnodes/--node-rank/--master-addr with {' or '.join(n for n in launcher_names(LIVE) if n not in across)}.")
    if not live.rank_env and UNMAPPED not in LAUNCHERS[live.launcher].capabilities:
        raise UsageError(f"--no-rank-env cannot apply to {live.launcher}: {live.launcher} always sets RANK/WORLD_SIZE.",
                         f"Use --launcher {' or '.join(launcher_names(UNMAPPED))}.")
    if live.master_port is not None and not 0 < live.master_port < 65536:
        raise UsageError("--master-port must be between 1 and 65535.", "Pass a free TCP port, e.g. 29500.")
    if live.run_dir and os.path.exists(live.run_dir) and not os.path.isdir(live.run_dir):
        raise UsageError(f"--run-dir {live.run_dir} is not a folder.", "Pass a folder (it is created if missing) that every node sees at the same path.")
    if args.hostfile:
        from .hostlist import NODELIST_OR_FILE, is_node_list

        if is_node_list(args.hostfile):  # node[01-16]: expanded as doctor --hostfile expands it (hosts.read_host_list), refused here if it is none
            _preflight_hosts(args.hostfile)
        elif not os.path.isfile(args.hostfile):
            raise UsageError(f"--hostfile {visible(args.hostfile[:200])} is not a readable file.", NODELIST_OR_FILE)
    if args.rsh and live.launcher not in across:
        one_per_node = " and ".join(n for n in launcher_names(LIVE) if n not in across)
        raise UsageError(f"--rsh with --live goes with --launcher {' or '.join(across)} ({one_per_node} run one compat per node).",
                         f"Add --launcher {across[0]} --hostfile FILE.")
    topology = RankLayout(args.ranks_per_node, live.nnodes, live.node_rank, live.master_addr, live.master_port, args.hostfile, layout_hosts)
    return LiveOptions(launcher=live.launcher, topology=topology, backend=live.backend, timeout=live.timeout, trainer=live.trainer,
                       steps=live.steps, mpirun=live.mpirun, rank_env=live.rank_env, run_dir=live.run_dir, bf16=args.bf16, rsh=args.rsh,
                       layout_notes=layout_notes, fabric=live.fabric, fabric_sizes=live.sizes, pairs=live.pairs,
                       pair_deadline=live.pair_deadline, fabric_deadline=fabric_deadline_for(live.fabric_deadline, live.timeout) if live.fabric else 0.0)


def cmd_doctor(args: ChecksArgs) -> int:
    return _run_checks(args)


def cmd_check(args: ChecksArgs) -> int:
    return _run_checks(args)


def cmd_env(args: EnvArgs) -> int:
    from .checks.registry import Context, Options
    from .environment.snapshot import take_snapshot
    from .planning import load
    from .shell import format_env
    from .shell_env import plan_env

    snapshot = take_snapshot(args.python)
    context = Context(load(args.output.matrix), snapshot, Options(ranks_per_node=args.ranks_per_node))
    plan = plan_env(context, args.ranks_per_node, args.launcher, args.master_addr, args.nnodes, mpirun=args.mpirun)
    if args.output.json:
        from .console import dump_json
        from .render.json import env_json

        print(dump_json(env_json(plan, snapshot.executable)))
    else:
        sys.stdout.write(format_env(plan, args.shell, defaults=args.defaults))
    return EXIT_OK


def cmd_launch(args: LaunchArgs) -> int:
    from .placement.service import LaunchOptions, prepare
    from .planning import load

    if args.watch and args.launcher == "spawn":  # compat starts the ranks itself: no launcher to plan for
        from .watch.command import launch_watched

        return launch_watched(None, os.environ, args, _say_error)

    options = LaunchOptions(launcher=args.launcher, nproc_per_node=args.nproc_per_node, command=args.command,
                            ccl_workers=args.ccl_workers, python=args.python, sysfs_root=args.sysfs_root, mpirun=args.mpirun,
                            mpi_flavor=args.mpi_flavor, print_only=args.print_, matrix=load(args.matrix))
    prepared = prepare(options, os.environ)
    if args.print_:
        if args.json:
            from .console import dump_json
            from .render.json import launch_json

            print(dump_json(launch_json(prepared)))
        else:
            from .placement.render import launch_text

            sys.stdout.write(visible(launch_text(prepared.plan, prepared.invocation, prepared.notes)))
        return EXIT_OK
    from .launchers.run import run_invocation
    from .placement.render import summary_lines

    for line in summary_lines(prepared.plan, prepared.invocation, ()):
        _say_error(f"compat launch: {line}")
    _say_error(f"compat launch: {prepared.invocation.shell_line()}")
    sys.stdout.flush()
    if args.watch:
        from .watch.command import launch_watched

        return launch_watched(lambda env: run_invocation(prepared.invocation, env, say=_say_error), os.environ, args, _say_error)
    return run_invocation(prepared.invocation, os.environ, say=_say_error)


def cmd_tune(args: TuneArgs) -> int:
    from .planning import load
    from .tune.service import TuneOptions, tune

    outcome = tune(TuneOptions(args.python, args.launcher, args.budget, load(args.matrix), args.bf16, args.compile, args.command, args.reads), os.environ, say=_say_error if not args.json else (lambda line: None))
    if args.json:
        from .console import dump_json
        from .tune.render import tune_json

        print(dump_json(tune_json(outcome)))
    else:
        from .tune.render import tune_text

        sys.stdout.write(visible(tune_text(outcome)))
    if outcome.interrupted:
        return outcome.interrupted
    return EXIT_OK if outcome.winner is not None else EXIT_PROBLEMS


def _print_plan(planned: Planned, kind: str, require_hashes: bool) -> int:
    """requirements | constraints | pip-command: compat export FORMAT, and compat install --print FORMAT (the same text)."""
    from .render.requirements import plan_text

    if require_hashes and kind != "pip-command":
        raise UsageError("A hash-pinned requirements file needs every dependency's hash, which compat knows only once it has downloaded them.",
                         "Run compat download -d DIR --require-hashes: it writes DIR/compat-wheelhouse.lock with all of them.")
    sys.stdout.write(plan_text(planned.plan, kind))
    return EXIT_OK


def cmd_install(args: InstallArgs) -> int:
    from .console import dump_json
    from .environment.snapshot import take_snapshot
    from .install.runner import InstallError
    from .planning import NoSet, load, plan_for, target_of
    from .record import replace
    from .render import json as documents

    as_json = args.output.json
    python_path = args.target.python
    if args.restore or args.discard_snapshot:
        from .install.service import recover, recover_without_interpreter

        try:
            if python_path and not os.path.exists(python_path):  # a restore killed between two renames can leave bin/ missing
                said = recover_without_interpreter(python_path, restore_it=args.restore)
            else:
                said = recover(take_snapshot(python_path), restore_it=args.restore)
        except InstallError as exc:
            if as_json:
                print(dump_json(documents.install_error_json(exc)))
            else:
                _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
            return exc.exit_code
        print(dump_json(documents.recover_json(said, args.restore)) if as_json else visible(said))
        return EXIT_OK
    planning_only = args.dry_run or args.print_
    if (args.target.python_version or args.target.platform) and not planning_only:
        raise UsageError("--python-version and --platform only go with --dry-run or --print.", "To install, pass --python PATH of the target interpreter.")
    snapshot = None
    if args.target.python_version:  # planning for a named Python: --python (or $COMPAT_PYTHON) is not the target then
        python, platform = target_of(replace(args.target, python=None, python_given=False))
    else:
        snapshot = take_snapshot(python_path)
        python, platform = target_of(args.target, snapshot)
    try:
        planned = plan_for(load(args.output.matrix), args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return _say_conflict(args.output.no_color, no_set)
    if args.print_:
        return _print_plan(planned, args.print_, args.sources.require_hashes)
    plan = planned.plan

    def say(line: str) -> None:  # progress: a full or closed stderr must never fail the install
        if not as_json:
            _say_error(line)

    from .render.text import dry_run_lines, install_plan_lines, verification_lines

    for line in install_plan_lines(python.label, python.origin, platform.tag, plan):
        say(line)
    if args.dry_run:
        if snapshot is not None:
            for line in dry_run_lines(plan, snapshot.versions()):
                say(line)
        if as_json:
            print(dump_json(documents.install_plan_json(python.label, plan)))
        return EXIT_OK
    assert snapshot is not None
    from pathlib import Path

    from .install.service import InstallOptions, install

    options = InstallOptions(yes=args.yes, installer=args.installer, require_hashes=args.sources.require_hashes,
                             allow_unverified=args.sources.allow_unverified,
                             offline_dir=Path(args.sources.wheelhouse) if args.offline and args.sources.wheelhouse else None, say=say,
                             planner=args.planner, display="none" if as_json else "auto")  # --json: no bars, no lines, the document only
    try:
        result = install(planned.matrix, plan, snapshot, options)
    except InstallError as exc:
        if as_json:
            print(dump_json(documents.install_error_json(exc)))
        else:
            _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    if as_json:
        print(dump_json(documents.install_result_json(result)))
    else:
        for line in verification_lines(result.findings, result.ok):
            say(line)
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def cmd_download(args: DownloadArgs) -> int:
    from pathlib import Path

    from .install.plan import WheelTarget
    from .install.runner import InstallError
    from .install.service import InstallOptions, download
    from .planning import NoSet, load, plan_for, target_of

    python, platform = target_of(args.target)
    try:
        planned = plan_for(load(args.output.matrix), args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return _say_conflict(args.output.no_color, no_set)
    try:
        options = InstallOptions(require_hashes=args.sources.require_hashes, allow_unverified=args.sources.allow_unverified,
                                 say=(lambda line: None) if args.output.json else _say_error)
        files = download(planned.plan, WheelTarget(python.version, platform), Path(args.dest), sys.executable, options)
    except InstallError as exc:
        _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    if args.output.json:
        from .console import dump_json
        from .render.json import download_json

        print(dump_json(download_json(str(Path(args.dest).resolve()), files, planned.plan)))
    else:
        from .render.text import download_text

        wanted = args.wanted
        again = [*wanted.requirements] + (["--profile", wanted.profile] if wanted.profile else []) + (["--with", ",".join(wanted.with_)] if wanted.with_ else [])
        again += ["--torch-from-pypi"] if args.sources.torch_from_pypi else []
        sys.stdout.write(visible(download_text(len(files), args.dest, python.label, platform.tag, again)))
    return EXIT_OK


def cmd_translate(args: TranslateArgs) -> int:
    from packaging.version import InvalidVersion, Version

    from .planning import load
    from .translate import translate

    if not args.command:
        raise UsageError("No command line to translate.", "Write it after --, e.g. compat translate -- python run_qa.py --no_cuda --ddp_backend ccl")
    versions = {}
    for name, given in (("transformers", args.transformers), ("accelerate", args.accelerate)):
        if given:
            try:
                versions[name] = Version(given)
            except (InvalidVersion, ValueError):  # ValueError: more digits than int() takes
                raise UsageError(f"'{shown(given)}' is not a version.", f"Pass --{name} X.Y.Z.") from None
    snapshot = None
    if "transformers" not in versions or "accelerate" not in versions or args.python:
        from .environment.snapshot import take_snapshot

        snapshot = take_snapshot(args.python)
        for name in ("transformers", "accelerate", "torch"):
            dist = snapshot.get(name)
            if name not in versions and dist is not None and dist.public_version is not None:
                versions[name] = dist.public_version
    if "transformers" not in versions:
        raise UsageError("transformers is not installed in the target environment.", "Pass --python PATH of your training environment, or --transformers X.Y.Z.")
    matrix = load(args.output.matrix)
    result = translate(matrix, args.command, versions["transformers"], versions.get("accelerate"), versions.get("torch"))
    environment = _translated_environment(matrix, snapshot, args.command, args.python) if result.ccl else None
    if args.output.json:
        from .console import dump_json
        from .render.json import translate_json

        print(dump_json(translate_json(result, environment)))
    else:
        from .render.text import translate_text

        sys.stdout.write(visible(translate_text(result, environment)))
    return EXIT_PROBLEMS if result.blocking else EXIT_OK


def _translated_environment(matrix, snapshot, command, python):  # noqa: ANN001, ANN202
    """(launcher, the eval line, shell_env.ccl_launch_env's plan or None) for a command that runs ccl: the launcher its
    command line starts with (torchrun, mpirun; none: a single process), and what compat env --launcher exports for the
    target environment (None when it was not probed or has no bindings)."""
    import shlex

    from .launchers import recognise

    words = list(command)
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
    launcher = recognise(os.path.basename(words[0]) if words else "", module)
    target = f" --python {shlex.quote(python)}" if python else ""
    line = f'eval "$(compat env{target}' + (f" --launcher {launcher}" if launcher else "") + ')"'
    plan = None
    if snapshot is not None:
        from .checks.registry import Context, Options
        from .shell_env import ccl_launch_env

        plan = ccl_launch_env(Context(matrix, snapshot, Options(launcher=launcher)), launcher)
    return launcher, line, plan


def cmd_export(args: ExportArgs) -> int:
    from .planning import NoSet, load, plan_for, target_of

    matrix = load(args.output.matrix)
    if args.validate is not None:
        return _export_validate(args, matrix)
    python, platform = target_of(args.target)
    try:
        planned = plan_for(matrix, args.wanted, args.sources, python, platform)
    except NoSet as no_set:
        return _say_conflict(args.output.no_color, no_set)
    assert args.format is not None
    if args.format in ("requirements", "constraints", "pip-command"):
        return _print_plan(planned, args.format, args.sources.require_hashes)
    from .export import service

    if args.format == "pytorchjob":
        from .render.manifest import manifest_text

        release = service.trainer_release(args.trainer_version, args.crd) if args.job.trainer_v2 else None
        manifest = service.job_manifest(planned, args.job, release)
        sys.stdout.write(manifest_text(manifest.document, manifest.notes))
    elif args.format == "sbatch":
        from .environment.snapshot import take_snapshot  # --python given: the set is what that environment holds

        snapshot = take_snapshot(args.target.interpreter) if args.target.interpreter else None
        sys.stdout.write(service.sbatch(planned, args.job, args.slurm, args.target.interpreter, (sys.executable, "-m", "compatmatrix"), snapshot))
    elif args.format == "dockerfile":
        sys.stdout.write(service.dockerfile(planned, args.docker))
    else:
        sys.stdout.write(service.pylock(planned))
    return EXIT_OK


def _export_validate(args: ExportArgs, matrix: Matrix) -> int:
    """compat export --validate FILE: the file read and judged; the versions of --python's environment, else the resolved set's."""
    from .export import service
    from .planning import NoSet, plan_for, target_of
    from .render import emit
    from .render.json import validate_json
    from .render.text import render_findings

    assert args.validate is not None
    text = service.read_file(args.validate)
    versions: dict = {}
    origin = ""
    if not service.is_dockerfile(text):
        interpreter = args.target.interpreter
        if interpreter:
            from .environment.snapshot import take_snapshot

            snapshot = take_snapshot(interpreter)
            versions = service.installed_versions(snapshot)
            origin = f"installed in {snapshot.executable}"
        else:
            python, platform = target_of(args.target)
            try:
                planned = plan_for(matrix, args.wanted, args.sources, python, platform)
            except NoSet as no_set:
                return _say_conflict(args.output.no_color, no_set)
            versions = service.resolved_versions(planned.outcome)
            request = planned.outcome.request
            origin = f"the set compat resolves for Python {request.python.label}" + (f", profile {request.profile}" if request.profile else "")
    release = service.trainer_release(args.trainer_version, args.crd) if (args.trainer_version or args.crd) else None
    done = service.validate_text(args.validate, text, matrix, versions, release)
    shown_versions = {name: str(v) if v is not None else None for name, v in versions.items() if name != service.CCL_KEY}
    said = ", ".join(f"{name} {v}" for name, v in shown_versions.items() if v) or "no versions"
    against = f" · {done.release.label} ({done.release.cited})" if done.release is not None else ""
    header = f"compat export --validate {args.validate} ({done.kind}) · {said}" + (f" ({origin})" if origin else "") + against

    def document() -> dict:
        data = validate_json(args.validate or "", done.kind, done.documents, shown_versions, origin, done.findings)
        if done.release is not None:
            data["trainer"] = {"version": done.release.version, "tag": done.release.tag, "commit": done.release.commit, "note": done.release.note}
        if args.show_pods:
            data["pods"] = [{"role": role, "count": count, "pod": pod} for role, count, pod in done.pods]
        return data

    def text_out(console) -> None:
        if args.show_pods and done.pods:
            from .redact import redact_document
            from .render.manifest import manifest_text

            for role, count, pod in done.pods:  # an index URL in the pods' env masked, as --json and every other output has it
                sys.stdout.write(manifest_text(redact_document(pod), [f"{count} pod(s): {role}"]) + "---\n")
            sys.stdout.flush()
        render_findings(console, header, done.findings, False)

    emit(args.output.json, args.output.no_color, document, text_out)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in done.findings) else EXIT_OK


def cmd_migrate(args: MigrateArgs) -> int:
    from .migrate.service import MigrateOptions, run_migrate

    target = args.target
    options = MigrateOptions(python=None if args.requirement_files else target.interpreter, requirement_files=args.requirement_files,
                             python_version=target.python_version, platform=target.platform, dry_run=args.dry_run, yes=args.yes,
                             to_torch=args.to_torch, command=args.command, sources=args.sources, compare=args.compare,
                             ranks_per_node=args.ranks_per_node, indexes=args.indexes, installer=args.installer,
                             live_timeout=args.live_timeout, matrix=args.output.matrix)
    code, document = run_migrate(options)
    if args.output.json:
        from .console import dump_json

        print(dump_json(document))
    else:
        from .migrate.text import format_text

        sys.stdout.write(visible(format_text(document)))
    return code


COMMANDS: dict[str, Callable[..., int]] = {"translate": cmd_translate, "install": cmd_install, "download": cmd_download, "resolve": cmd_resolve,
                                           "matrix": cmd_matrix, "doctor": cmd_doctor, "check": cmd_check, "env": cmd_env, "launch": cmd_launch,
                                           "export": cmd_export, "migrate": cmd_migrate, "tune": cmd_tune}


def parse(argv: Optional[Sequence[str]] = None):
    """The command line as the command's typed arguments (options.py); usage errors raise SystemExit (argparse) or
    UsageError (the builders)."""
    namespace = build_parser().parse_args(argv)
    return namespace.build(namespace)


BUG_REPORT_DIR_ENV = "COMPAT_CRASH_DIR"  # where the traceback of an unexpected error is written (default: the temp folder)
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EFBIG, errno.EDQUOT}


#: Commands that read, compute and print, start nothing that outlives them and clean nothing up at exit. Run as the
#: program (``main()`` without arguments: the entry point, ``python -m compatmatrix``) they work with the cyclic
#: garbage collector off (their objects live until the end: collecting would only scan them) and end with os._exit
#: once their output is flushed: the interpreter's teardown would free the matrix object by object (~15 ms).
SHORT_LIVED = frozenset({"resolve", "matrix", "check", "export"})


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command. Whatever happens, the user gets one sentence and an exit code in {0, 1, 2} (130/143 for
    Ctrl-C/SIGTERM, 141 for a closed pipe), never a traceback: an unexpected error is a bug, written to a report file."""
    if sys.stderr is None:  # `compat install 2>&-`: progress and messages are dropped, as for a full stderr; never a failure
        sys.stderr = _null_stream(2)
    _tolerant_encoding(sys.stdout, sys.stderr)
    if sys.stdout is None:  # `compat resolve >&-`: the shell closed the descriptor
        _say_error("compat: error: standard output is closed, so compat has nowhere to write. Redirect it (> FILE or > /dev/null) instead of closing it.")
        return EXIT_TOOL_ERROR
    args = argparse.Namespace(command=None)
    try:
        args = build_parser().parse_args(argv)
        short = argv is None and args.command in SHORT_LIVED
        if short:
            import gc

            gc.disable()
        code = COMMANDS[args.command](args.build(args))  # the typed arguments (options.py); usage errors raise here
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not in the interpreter's shutdown
        if short:
            _end_now(code)
        return code
    except SystemExit as exc:  # argparse: --help, --version and usage errors
        broken = _stdout_broken() if exc.code in (0, None) else None
        if broken is not None:
            _silence_stdout()
            _say_error(f"compat: error: cannot write the output ({broken}). Free space or redirect the output elsewhere.")
            return EXIT_TOOL_ERROR
        raise
    except CompatError as exc:
        message = exc.message if not exc.message or exc.message.endswith((".", "!", "?")) else exc.message + "."  # two sentences, not one run-on
        _say_error(f"compat: error: {message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C; the live supervisor also turns SIGTERM/SIGHUP into this, after cleaning up
        from .processes import Terminated

        terminated = isinstance(exc, Terminated)
        _say_error(f"compat: {'terminated' if terminated else 'interrupted'}; nothing of the run is left running."
                   if getattr(args, "live", False) else "compat: interrupted.")
        return 143 if terminated else 130
    except BrokenPipeError:
        # The reader went away (`compat resolve --json | head`): not "problems found".
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS and _stdout_broken() is not None:
            _silence_stdout()
            _say_error(f"compat: error: cannot write the output ({exc.strerror}). Free space or redirect the output elsewhere.")
            return EXIT_TOOL_ERROR
        return _unexpected(exc, args)
    except Exception as exc:  # noqa: BLE001 - the last guard: a bug must still end in one sentence
        return _unexpected(exc, args)


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


def _end_now(code: int) -> None:
    """End the process with ``code`` now, its output written (see SHORT_LIVED); returns only if stderr cannot be
    flushed (the normal exit then reports it as before)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _say_error(line: str) -> None:
    """One line to stderr (errors and install progress), a URL's credentials masked (redact.py)."""
    from .redact import redact_text

    try:
        sys.stderr.write(visible(redact_text(line)) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


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

    from .redact import redact_text

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
    _say_error(f"compat: internal error in '{getattr(args, 'command', '?')}' ({type(exc).__name__}{': ' + message if message else ''}); {where}. "
               "This is a bug in compat: please report it with that file attached.")
    return EXIT_TOOL_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
