"""``compat``: wiring only. Parse the command line, call the core, render, return the exit code."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from . import __version__
from .console import EXIT_BROKEN_PIPE, dump_json, make_console
from .errors import EXIT_OK, EXIT_PROBLEMS, EXIT_TOOL_ERROR, CompatError, UsageError, shown

if TYPE_CHECKING:
    from .matrix.model import Matrix
    from .target import Platform, PythonTarget

# The core (packaging, the matrix model, the resolver, the checks) is imported inside the commands that use it:
# `compat --help`, `--version` and a usage error parse the command line only (tests/test_startup.py).


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors end with exit 2 and one line that says how to get help."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        self.print_usage(sys.stderr)
        self.exit(EXIT_TOOL_ERROR, f"compat: error: {message}. Run '{self.prog} --help' for the options.\n")


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


class _Bf16Action(argparse.BooleanOptionalAction):
    """--bf16 / --no-bf16 that remembers both spellings it was given, so `--bf16 --no-bf16` is refused, not last-wins."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        super().__call__(parser, namespace, values, option_string)
        seen = set(getattr(namespace, "bf16_given", ()) or ()) | {option_string}
        namespace.bf16_given = tuple(sorted(seen))


def _check_bf16(args: argparse.Namespace) -> None:
    """--bf16 and --no-bf16 together contradict each other; --no-bf16 only means something for doctor --live."""
    given = getattr(args, "bf16_given", ()) or ()
    if len(given) > 1:
        raise UsageError("--bf16 and --no-bf16 contradict each other.", "Pass one of them.")
    if args.bf16 is False and not getattr(args, "live", False):
        where = "compat doctor --live" if args.command == "doctor" else f"compat doctor --live, not compat {args.command}"
        raise UsageError(f"--no-bf16 only keeps the live Trainer step in fp32: it goes with {where}.",
                         "Drop --no-bf16 (without --bf16 the bf16 checks do not apply), or add --live to compat doctor.")


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (versioned schema) instead of tables")
    parser.add_argument("--no-color", action="store_true", help="no colour (also: the NO_COLOR environment variable)")
    parser.add_argument(
        "--matrix",
        metavar="PATH",
        default=os.environ.get("COMPAT_MATRIX"),
        help="read this matrix file instead of the bundled one (also: COMPAT_MATRIX)",
    )


def _target(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--python", metavar="PATH", help="resolve for this interpreter (its version and platform are probed)")
    group.add_argument("--python-version", metavar="X.Y", help="resolve for this CPython version (default: the running one)")
    parser.add_argument("--platform", metavar="TAG", help="PEP 425 platform tag (default: the target interpreter's)")


def _requirement_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                        help="read requirements from FILE: pip's requirements format as pip reads it (with its -r/-c includes and index lines), "
                        "a pip freeze list, or a PEP 751 pylock.toml; repeatable, combines with REQUIREMENTs")


def _resolve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("requirements", nargs="*", metavar="REQUIREMENT", help="constraints such as 'torch==2.7.0' (as for compat resolve)")
    _requirement_files(parser)
    parser.add_argument("--profile", metavar="NAME", help="ddp-ccl (default), ddp-ccl-legacy, ipex, ccl, stock")
    parser.add_argument("--with", dest="with_", metavar="LIST", default="", help="comma-separated packages to include")
    parser.add_argument("--index", action="append", default=[], metavar="HOST=URL",
                        help="where a host's wheels are (a mirror, a PEP 503 index, a local folder); HOST is a matrix host id "
                        "such as pypi, pytorch-cpu, intel-cpu-us (also COMPAT_INDEX_<HOST> and the [indexes] table of ~/.config/compatmatrix/config.toml)")
    parser.add_argument("--require-hashes", action="store_true", help="refuse any wheel without a sha256 published by its index")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="install (or download) wheels whose index publishes no sha256 (or only an md5), and a wheelhouse without its lock, "
                        "unchecked; each is named. Without it they are refused; with --require-hashes always refused")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="compat",
        description="Resolve, install and validate CPU PyTorch DDP stacks from a sourced compatibility matrix.",
    )
    parser.add_argument("--version", action="version", version=f"compat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    resolve_cmd = commands.add_parser(
        "resolve",
        help="find the newest consistent set of torch / IPEX / oneccl_bind_pt / transformers / accelerate",
        description=(
            "Find the newest consistent set for a Python and platform, and the index each package comes from. "
            "Exit 0 when a set exists, 1 when none does (with the reasons and the nearest sets that work), 2 on usage errors."
        ),
    )
    resolve_cmd.add_argument(
        "requirements",
        nargs="*",
        metavar="REQUIREMENT",
        help="constraints such as 'torch==1.12.1' or 'transformers<4.40'; naming a package also asks for it "
        "(names: torch, intel-extension-for-pytorch|ipex, oneccl-bind-pt|ccl, transformers, accelerate)",
    )
    resolve_cmd.add_argument("--profile", metavar="NAME", help="named set of packages: ddp-ccl (default), ipex, ccl, stock")
    resolve_cmd.add_argument("--with", dest="with_", metavar="LIST", default="", help="comma-separated packages to include, e.g. ipex,ccl,transformers or torchvision,torchaudio")
    _requirement_files(resolve_cmd)
    _target(resolve_cmd)
    _common(resolve_cmd)

    matrix_cmd = commands.add_parser(
        "matrix",
        help="show the curated matrix (releases, pairings, Python coverage, sources)",
        description="Show the curated matrix, optionally filtered.",
    )
    matrix_cmd.add_argument("--package", action="append", metavar="NAME", help="only this package (repeatable): torch, ipex, ccl, torchvision, torchaudio, transformers, accelerate")
    matrix_cmd.add_argument("--python-version", metavar="X.Y", help="only releases with wheels (or Requires-Python) for this Python")
    matrix_cmd.add_argument("--torch", metavar="SPEC", help="only releases that pair with a torch matching SPEC, e.g. '==2.7.0' or '>=2.5'")
    matrix_cmd.add_argument("--sources", action="store_true", help="show each entry's sources")
    _common(matrix_cmd)

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
    install_cmd.add_argument("--python", metavar="PATH", default=os.environ.get("COMPAT_PYTHON") or None, help="install into this interpreter's environment (default: $COMPAT_PYTHON, else the running one)")
    install_cmd.add_argument("--yes", action="store_true", help="allow replacing installed versions (torch included)")
    install_cmd.add_argument("--dry-run", action="store_true", help="show the plan; change nothing, fetch nothing")
    install_cmd.add_argument("--installer", choices=["pip", "uv", "auto"], default="pip", help="pip (default), uv, or auto (uv when on PATH)")
    install_cmd.add_argument("--print", dest="print_", choices=["requirements", "constraints", "pip-command"], help="print the plan in this form and exit")
    install_cmd.add_argument("--python-version", metavar="X.Y", help="with --dry-run / --print: plan for this Python instead of an interpreter")
    install_cmd.add_argument("--platform", metavar="TAG", help="with --dry-run / --print: plan for this platform tag")
    install_cmd.add_argument("--offline", action="store_true", help="no network: take everything from --wheelhouse")
    install_cmd.add_argument("--wheelhouse", metavar="DIR", help="a folder made by compat download")
    install_cmd.add_argument("--torch-from-pypi", action="store_true", help="take torch (and torchvision, torchaudio) from PyPI (the CUDA build, several GB more) instead of the PyTorch CPU index")
    recovery = install_cmd.add_mutually_exclusive_group()
    recovery.add_argument("--restore", action="store_true", help="put back the environment an interrupted compat install left half-done")
    recovery.add_argument("--discard-snapshot", action="store_true", help="keep the environment an interrupted install left, drop its snapshot")
    _common(install_cmd)

    download_cmd = commands.add_parser(
        "download",
        help="build a wheelhouse (planned wheels + dependencies) for another machine",
        description="Resolve for a target Python and platform and download every wheel it needs into DIR; "
        "then `compat install --offline --wheelhouse DIR` installs with no network.",
    )
    _resolve_args(download_cmd)
    download_cmd.add_argument("-d", "--dest", required=True, metavar="DIR")
    download_cmd.add_argument("--python-version", metavar="X.Y", help="the target machine's Python (default: the running one)")
    download_cmd.add_argument("--platform", metavar="TAG", help="the target machine's platform tag (default: this one)")
    download_cmd.add_argument("--torch-from-pypi", action="store_true", help="take torch from PyPI instead of the PyTorch CPU index")
    _common(download_cmd)

    translate_cmd = commands.add_parser(
        "translate",
        help="rewrite a training command from the guides for the installed transformers / accelerate",
        description="Rewrite a training command line (--xpu_backend/--ddp_backend, --no_cuda/--use_cpu, --use_ipex, --bf16) "
        "for the installed transformers and accelerate, explaining each change. Exit 1 when the command cannot work with them "
        "at all (for example ccl with transformers >= 5.1).",
    )
    translate_cmd.add_argument("--python", metavar="PATH", default=os.environ.get("COMPAT_PYTHON") or None, help="read the installed versions from this interpreter")
    translate_cmd.add_argument("--transformers", metavar="VERSION", help="translate for this transformers version instead of the installed one")
    translate_cmd.add_argument("--accelerate", metavar="VERSION", help="translate for this accelerate version instead of the installed one")
    translate_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command line, after --")
    _common(translate_cmd)

    env_cmd = commands.add_parser(
        "env",
        help="print the exports of the bindings' setvars.sh plus LD_PRELOAD and thread settings: eval \"$(compat env)\"",
        description="Print what sourcing the oneCCL bindings' setvars.sh would export, plus recommended LD_PRELOAD (only paths "
        "that exist), OMP_NUM_THREADS and CCL_WORKER_COUNT for the ranks per node.",
    )
    env_cmd.add_argument("--shell", choices=["bash", "zsh", "fish"], default="bash")
    env_cmd.add_argument("--ranks-per-node", type=positive_int, default=2, metavar="N")
    env_cmd.add_argument("--launcher", choices=["torchrun", "spawn", "mpirun"],
                         help="also export what this launcher needs for ccl (torchrun/spawn: CCL_ATL_TRANSPORT=ofi, FI_PROVIDER_PATH, ...)")
    env_cmd.add_argument("--python", metavar="PATH", default=os.environ.get("COMPAT_PYTHON") or None,
                         help="the interpreter whose bindings to use (default: $COMPAT_PYTHON, else the running one)")
    _common(env_cmd)

    launch_cmd = commands.add_parser(
        "launch",
        help="start torchrun or mpirun with each rank bound to its own physical cores, threads and oneCCL workers planned",
        description="Plan N ranks on this machine (physical cores, not hyperthreads; spread over NUMA nodes; oneCCL worker cores "
        "set aside; the CPUs this process may use and its cgroup quota), then run the launcher with each rank bound to its cores "
        "(its exit code is compat's), or print the command and environment with --print. Exit 2 when the ranks do not fit.",
    )
    launch_cmd.add_argument("--launcher", choices=["torchrun", "mpirun"], required=True, help="torchrun (of --python's environment) or mpirun (Intel MPI, Open MPI, MPICH)")
    launch_cmd.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=positive_int, required=True, metavar="N", help="ranks on this node")
    launch_cmd.add_argument("--ccl-workers", type=int, default=None, metavar="K",
                            help="oneCCL worker cores set aside per rank (default: 1 where the cores allow it, else 0; 0: none, the worker shares the rank's cores)")
    launch_cmd.add_argument("--print", dest="print_", action="store_true", help="print the plan, the exports and the command instead of running it")
    launch_cmd.add_argument("--json", action="store_true", help="with --print: the plan as JSON (compatmatrix/schemas/launch-v1.json)")
    launch_cmd.add_argument("--python", metavar="PATH", default=os.environ.get("COMPAT_PYTHON") or None,
                            help="the training environment's interpreter: runs torchrun and scripts (default: $COMPAT_PYTHON, else the running one)")
    launch_cmd.add_argument("--sysfs-root", metavar="DIR", help="with --print: plan for a recorded topology, a folder shaped like /sys")
    launch_cmd.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
    launch_cmd.add_argument("--mpi-flavor", choices=["intel-mpi", "open-mpi", "mpich"], help="mpirun: which MPI it is (default: asked with mpirun --version)")
    launch_cmd.add_argument("training_command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="what each rank runs, after -- (a .py script gets the interpreter in front)")
    return parser


def _target_from(args: argparse.Namespace) -> tuple[PythonTarget, Platform]:
    from .target import Platform, PythonTarget

    platform = Platform.from_tag(args.platform) if args.platform else None
    if args.python:
        from .environment.interpreter import query_interpreter

        info = query_interpreter(args.python)
        return info.python_target(f"--python {info.executable}"), platform or info.platform
    if args.python_version:
        return PythonTarget.parse(args.python_version), platform or Platform.current()
    return PythonTarget.running(), platform or Platform.current()


def _load(args: argparse.Namespace) -> Matrix:
    if args.matrix is not None and ("\x00" in args.matrix or not args.matrix.strip()):
        raise UsageError(f"--matrix '{shown(args.matrix)}' is not a file name.", "Pass the path of a matrix TOML file, or leave --matrix out for the bundled one.")
    from .matrix.load import load_matrix

    return load_matrix(args.matrix)


def _file_request(args: argparse.Namespace, matrix: Matrix, python: PythonTarget):
    """The -r files, read for the target Python, or None without any."""
    if not getattr(args, "requirement_files", None):
        return None
    from .inputs import read_inputs
    from .inputs.request import file_request

    return file_request(matrix, read_inputs(args.requirement_files, python.version))


def _request(args: argparse.Namespace, matrix: Matrix, python: PythonTarget, platform: Platform):
    """The resolver's request from the command line and the -r files together; (request, file request or None)."""
    from .resolve import build_request, with_constraints

    files = _file_request(args, matrix, python)
    with_components = [name.strip() for name in args.with_.split(",") if name.strip()]
    requirements = list(args.requirements) + list(files.requirements if files else ())
    request = build_request(matrix, python, platform, args.profile, with_components, requirements)
    if files is not None:
        request = with_constraints(matrix, request, files.constraints)
        request = request.replace(notes=request.notes + tuple(f"warning: {w}" for w in files.index_warnings) + files.notes
                                  + tuple(f"passed through untouched (not resolved by compat): {line}" for line in files.passthrough_lines))
    return request, files


def cmd_resolve(args: argparse.Namespace) -> int:
    from .render import outcome_json, render_outcome
    from .resolve import resolve

    matrix = _load(args)
    python, platform = _target_from(args)
    request, files = _request(args, matrix, python, platform)
    outcome = resolve(matrix, request)
    if args.json:
        document = outcome_json(outcome)
        if files is not None:
            document["passthrough"] = list(files.passthrough_lines)
            document["files"] = list(args.requirement_files)
        print(dump_json(document))
    else:
        render_outcome(make_console(args.no_color), outcome)
    return EXIT_OK if outcome.ok else EXIT_PROBLEMS


def cmd_matrix(args: argparse.Namespace) -> int:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from .matrix.model import Component
    from .render import matrix_json, matrix_rows, render_matrix
    from .target import PythonTarget

    matrix = _load(args)
    try:
        packages = [Component.from_name(name) for name in args.package] if args.package else list(Component)
    except KeyError as exc:
        raise UsageError(f"{exc.args[0]!r} is not a package in the matrix.", "Use torch, ipex, ccl, torchvision, torchaudio, transformers or accelerate.") from None
    python = PythonTarget.parse(args.python_version).version if args.python_version else None
    try:
        torch = SpecifierSet(args.torch) if args.torch else None
    except InvalidSpecifier:
        raise UsageError(f"'{shown(args.torch)}' is not a version specifier.", "Write it like '==2.7.0' or '>=2.5,<2.8'.") from None
    if torch is not None:
        from .resolve import check_specifier_versions

        check_specifier_versions(args.torch, torch)
    rows = matrix_rows(matrix, packages, python, torch)
    if args.json:
        print(dump_json(matrix_json(matrix, rows)))
    else:
        render_matrix(make_console(args.no_color), matrix, rows, args.sources)
    return EXIT_OK


def _checks_parser(commands, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=description)
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=os.environ.get("COMPAT_PYTHON") or None,
        help="inspect this interpreter's environment (default: $COMPAT_PYTHON, else the running one)",
    )
    if name == "check":
        parser.add_argument("-r", "--requirement", dest="requirement_files", action="append", default=[], metavar="FILE",
                            help="check the pins of FILE instead of an environment (a requirements file, pip freeze list or pylock.toml): "
                            "the CI gate before anything is installed; only the package checks apply")
        parser.add_argument("--python-version", metavar="X.Y", help="with -r: the Python the files are for (default: the running one)")
        parser.add_argument("--platform", metavar="TAG", help="with -r: the platform tag (default: this machine's)")
    parser.add_argument("--ranks-per-node", "--nproc-per-node", dest="ranks_per_node", type=positive_int, default=2, metavar="N",
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
        parser.add_argument("--import-timeout", type=positive_float, default=120.0, metavar="S", help="seconds each import probe may take (default 120)")
        live = parser.add_argument_group("live validation (--live)")
        live.add_argument("--live", action="store_true", help="start real ranks: a 2-rank allreduce (fp32, bf16, bandwidth) and a short Trainer step")
        live.add_argument("--launcher", choices=["spawn", "torchrun", "mpirun"], default="spawn", help="how the ranks start (default spawn: compat starts them)")
        live.add_argument("--backend", choices=["auto", "ccl", "gloo"], default="auto", help="auto (default): ccl when the oneCCL bindings register it, else gloo")
        live.add_argument("--live-timeout", type=positive_float, default=120.0, metavar="S", help="hard limit for the whole live run (default 120 s)")
        live.add_argument("--no-trainer", action="store_true", help="only the allreduce, no Trainer step")
        live.add_argument("--steps", type=positive_int, default=3, metavar="K", help="Trainer steps (default 3)")
        live.add_argument("--nnodes", type=positive_int, default=1, metavar="N", help="nodes in the run (torchrun/spawn: run compat doctor --live on each)")
        live.add_argument("--node-rank", type=int, default=0, metavar="R", help="this node's index, 0..N-1")
        live.add_argument("--master-addr", metavar="HOST", help="rendezvous address, node 0 (default 127.0.0.1, or the hostfile's first host)")
        live.add_argument("--master-port", type=int, metavar="PORT", help="rendezvous port (default: a free one; required with --nnodes > 1)")
        live.add_argument("--hostfile", metavar="FILE", help="mpirun: the hosts to start ranks on (--nproc-per-node each)")
        live.add_argument("--mpirun", metavar="PATH", help="mpirun: this binary (default: next to the interpreter, then PATH)")
        live.add_argument("--run-dir", metavar="DIR", help="where the ranks write their results (mpirun --hostfile: a folder every node sees)")
        live.add_argument("--rsh", metavar="PROG", help="the remote shell that reaches the hostfile's hosts, called like ssh (default: "
                          "$I_MPI_HYDRA_BOOTSTRAP_EXEC, $OMPI_MCA_plm_rsh_agent, else ssh); also for doctor --hostfile without --live")
        live.add_argument("--no-rank-env", action="store_true",
                          help="start the ranks without RANK/WORLD_SIZE (spawn, mpirun): reproduces the every-rank-trains-alone mistake")
    _common(parser)
    return parser


def _run_checks(args: argparse.Namespace, command: str, static_only: bool) -> int:
    from .checks.finding import Context, Options, all_checks, run_checks, select, unknown_names
    from .environment.snapshot import take_snapshot
    from .render_findings import findings_json, render_check_list, render_findings

    checks = all_checks()
    if args.list:
        render_check_list(make_console(args.no_color), select(checks, static_only=static_only))
        return EXIT_OK
    _check_bf16(args)
    if getattr(args, "hostfile", None) and not getattr(args, "live", False):
        return _run_hosts(args)
    live_named = [n for n in args.only + args.skip if n == "live" or n.startswith("live.")]
    if live_named and not getattr(args, "live", False):
        raise UsageError(f"'{live_named[0]}' is a live check: it needs compat doctor --live.", "Add --live.")
    unknown = unknown_names([n for n in args.only + args.skip if n not in live_named])
    if unknown:
        raise UsageError(f"'{unknown[0]}' is not a check id or area.", f"Run 'compat {command} --list' for the ids.")
    if args.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be at least 1.", "Pass the number of ranks you start on each node.")
    live_options = _live_options(args) if getattr(args, "live", False) else None
    matrix = _load(args)
    files = None
    if getattr(args, "requirement_files", None):
        snapshot, files = _pinned_snapshot(args, matrix)
    else:
        if getattr(args, "python_version", None) or getattr(args, "platform", None):
            raise UsageError("--python-version and --platform go with -r FILE.", "To check an environment, pass --python PATH of its interpreter.")
        snapshot = take_snapshot(args.python, cached=True)  # the environment's facts, kept while its fingerprint holds
    options = Options(ranks_per_node=args.ranks_per_node, bf16=args.bf16 is True, import_timeout=getattr(args, "import_timeout", 120.0))
    context = Context(matrix, snapshot, options)
    only = [n for n in args.only if n not in live_named]
    chosen = select(checks, only, args.skip, static_only=static_only) if only or not args.only else []
    if live_options is not None and not any(n.startswith("imports") for n in args.only):
        chosen = [c for c in chosen if c.static]  # every rank imports the stack itself: live.imports reports it
    if files is not None:
        chosen = [c for c in chosen if c.id.startswith("packages.")]  # no machine and no shell: only the pins can be judged
    findings = run_checks(chosen, context)
    if files is not None:
        from .inputs.check import file_findings

        findings = file_findings(args.requirement_files, files, findings)
    live = None
    if live_options is not None:
        from .live.service import run_live

        live = run_live(context, live_options)
        findings += live.findings
    if args.json:
        document = findings_json(command, snapshot, findings)
        if files is None:  # this host's facts, for doctor --hostfile to compare hosts
            from .hosts import host_facts

            document["host"] = host_facts(snapshot, os.uname()[1])
        if live is not None:
            document["live"] = live.details
        print(dump_json(document))
    else:
        render_findings(make_console(args.no_color), command, snapshot, findings, args.verbose, live.details if live else None)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def _run_hosts(args: argparse.Namespace) -> int:
    """compat doctor --hostfile FILE [--rsh PROG]: compat check on every host through the remote shell, and the differences."""
    from .environment.snapshot import take_snapshot
    from .hosts import collect, compare, remote_command
    from .live.launch import LaunchError, read_hostfile, remote_shell
    from .render_findings import findings_json, render_findings

    if not os.path.isfile(args.hostfile):
        raise UsageError(f"--hostfile {args.hostfile} is not a readable file.", "Pass a file with one host name per line.")
    try:
        hosts = list(dict.fromkeys(name for name, _ in read_hostfile(args.hostfile)))
    except LaunchError as exc:
        raise UsageError(str(exc), exc.fix) from None
    rsh, source = remote_shell(os.environ, args.rsh)
    answers = collect(hosts, rsh, remote_command(args.python, args.ranks_per_node), os.environ)
    findings = compare(answers, rsh, source)
    snapshot = take_snapshot(args.python)
    if args.json:
        document = findings_json("doctor", snapshot, findings)
        document["hosts"] = {a.host: (a.document or {}).get("host") for a in answers}
        print(dump_json(document))
    else:
        render_findings(make_console(args.no_color), "doctor", snapshot, findings, args.verbose)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def _pinned_snapshot(args: argparse.Namespace, matrix: Matrix):
    """compat check -r: an environment made of the files' exact pins (nothing installed, no machine)."""
    from .environment.from_pins import snapshot_from_pins
    from .target import Platform, PythonTarget

    if args.python and args.python != os.environ.get("COMPAT_PYTHON"):  # an exported COMPAT_PYTHON (pre-commit) does not conflict
        raise UsageError("-r checks files, --python an environment: give one of them.", "Drop --python to check the files' pins.")
    python = PythonTarget.parse(args.python_version) if args.python_version else PythonTarget.running()
    platform = Platform.from_tag(args.platform) if args.platform else Platform.current()
    files = _file_request(args, matrix, python)
    origin = ", ".join(args.requirement_files)
    return snapshot_from_pins(files.pinned, python.version, platform, origin), files


def _live_options(args: argparse.Namespace):
    from .live.launch import Topology
    from .live.service import LiveOptions

    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        raise UsageError("--node-rank must be between 0 and --nnodes - 1.", "Pass --nnodes N and a --node-rank below N.")
    if args.live_timeout <= 0 or args.steps < 1:
        raise UsageError("--live-timeout and --steps must be positive.", "Pass e.g. --live-timeout 120 --steps 3.")
    if args.hostfile and args.launcher != "mpirun":
        raise UsageError("--hostfile goes with --launcher mpirun.", "Add --launcher mpirun, or use --nnodes/--node-rank/--master-addr with torchrun.")
    if args.no_rank_env and args.launcher == "torchrun":
        raise UsageError("--no-rank-env cannot apply to torchrun: torchrun always sets RANK/WORLD_SIZE.", "Use --launcher spawn or mpirun.")
    if args.master_port is not None and not 0 < args.master_port < 65536:
        raise UsageError("--master-port must be between 1 and 65535.", "Pass a free TCP port, e.g. 29500.")
    if args.run_dir and os.path.exists(args.run_dir) and not os.path.isdir(args.run_dir):
        raise UsageError(f"--run-dir {args.run_dir} is not a folder.", "Pass a folder (it is created if missing) that every node sees at the same path.")
    if args.hostfile and not os.path.isfile(args.hostfile):
        raise UsageError(f"--hostfile {args.hostfile} is not a readable file.", "Pass a file with one host name per line.")
    if args.rsh and args.launcher != "mpirun":
        raise UsageError("--rsh with --live goes with --launcher mpirun (torchrun and spawn run one compat per node).", "Add --launcher mpirun --hostfile FILE.")
    topology = Topology(args.ranks_per_node, args.nnodes, args.node_rank, args.master_addr, args.master_port, args.hostfile)
    return LiveOptions(launcher=args.launcher, topology=topology, backend=args.backend, timeout=args.live_timeout, trainer=not args.no_trainer,
                       steps=args.steps, mpirun=args.mpirun, rank_env=not args.no_rank_env, run_dir=args.run_dir, bf16=args.bf16, rsh=args.rsh)


def cmd_doctor(args: argparse.Namespace) -> int:
    return _run_checks(args, "doctor", static_only=False)


def cmd_check(args: argparse.Namespace) -> int:
    return _run_checks(args, "check", static_only=True)


def cmd_env(args: argparse.Namespace) -> int:
    from .checks.finding import Context, Options
    from .environment.snapshot import take_snapshot
    from .shell_env import format_env, plan_env

    if args.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be at least 1.", "Pass the number of ranks you start on each node.")
    snapshot = take_snapshot(args.python)
    context = Context(_load(args), snapshot, Options(ranks_per_node=args.ranks_per_node))
    plan = plan_env(context, args.ranks_per_node, args.launcher)
    if args.json:
        print(dump_json(plan.to_json(snapshot.executable)))
    else:
        sys.stdout.write(format_env(plan, args.shell))
    return EXIT_OK


def cmd_launch(args: argparse.Namespace) -> int:
    from .placement.service import LaunchOptions, command_words, prepare

    if args.json and not args.print_:
        raise UsageError("--json goes with --print (a running job writes its own output).", "Add --print to get the plan as JSON.")
    if args.ccl_workers is not None and args.ccl_workers < 0:
        raise UsageError("--ccl-workers must be 0 or more.", "Pass the oneCCL worker cores per rank, e.g. --ccl-workers 1.")
    options = LaunchOptions(launcher=args.launcher, nproc_per_node=args.nproc_per_node, command=command_words(args.training_command),
                            ccl_workers=args.ccl_workers, python=args.python, sysfs_root=args.sysfs_root, mpirun=args.mpirun,
                            mpi_flavor=args.mpi_flavor, print_only=args.print_)
    prepared = prepare(options, os.environ)
    if args.print_:
        from .placement.render import launch_json, launch_text

        if args.json:
            print(dump_json(launch_json(prepared.plan, prepared.invocation, prepared.rank_env, prepared.notes)))
        else:
            sys.stdout.write(launch_text(prepared.plan, prepared.invocation, prepared.notes))
        return EXIT_OK
    from .placement.render import summary_lines
    from .placement.run import run_invocation

    for line in summary_lines(prepared.plan, prepared.invocation, ()):
        _say_error(f"compat launch: {line}")
    _say_error(f"compat launch: {prepared.invocation.shell_line()}")
    sys.stdout.flush()
    return run_invocation(prepared.invocation, os.environ, say=_say_error)


def _plan_for(args: argparse.Namespace, python: PythonTarget, platform: Platform):
    """Resolve for the target and turn the answer into an install plan; a conflict is exit 1 with the reasons."""
    from pathlib import Path

    from .install.indexes import configure_indexes
    from .install.plan import make_plan
    from .render import render_outcome
    from .resolve import Conflict, resolve

    matrix = _load(args)
    request, files = _request(args, matrix, python, platform)
    outcome = resolve(matrix, request)
    if isinstance(outcome, Conflict):
        render_outcome(make_console(args.no_color, stderr=True), outcome)
        raise _NoSet()
    locations = configure_indexes(matrix, args.index)
    if getattr(args, "wheelhouse", None):
        from .install.service import offline_locations

        _check_wheelhouse(args.wheelhouse)
        locations = offline_locations(locations, Path(args.wheelhouse))
    if args.torch_from_pypi:
        from .matrix.model import Component
        from .record import replace

        picks = dict(outcome.picks)
        for component in (Component.TORCH, Component.TORCHVISION, Component.TORCHAUDIO):  # one build: all from PyPI
            pick = outcome.picks.get(component)
            if pick is None:
                continue
            pypi = next((w for w in pick.release.wheels if w.host == "pypi"), None)
            if pypi is None or not pypi.has_python(python.version):
                raise UsageError(f"PyPI has no {component.label} {pick.version} wheel for Python {python.label}, so --torch-from-pypi cannot help.",
                                 "Use a mirror of the PyTorch CPU index: --index pytorch-cpu=URL (or a local folder of wheels).")
            picks[component] = replace(pick, host=matrix.hosts["pypi"], wheels=pypi)
        outcome = replace(outcome, picks=picks)
    plan = make_plan(outcome, locations)
    if files is not None and files.passthrough:
        import dataclasses

        plan = dataclasses.replace(plan, passthrough=files.passthrough_lines)
    return matrix, outcome, plan


def _check_wheelhouse(given: str) -> None:
    """--wheelhouse must name a folder: a missing path, a file or a FIFO is unusable input (exit 2)."""
    import stat

    try:
        mode = os.stat(given).st_mode
        why = "" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a file"
    except OSError as exc:
        why = "missing" if exc.errno == errno.ENOENT else f"unreadable: {exc.strerror}"
    if why:
        raise UsageError(f"The wheelhouse {shown(given, 200)} is not a folder (it is {why}).", "Pass --wheelhouse DIR, a folder made by compat download -d DIR.")


class _NoSet(Exception):
    pass


def cmd_install(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .environment.snapshot import take_snapshot
    from .install.runner import InstallError
    from .install.service import InstallOptions, describe_findings, install, pip_command_text, requirements_text
    from .target import Platform, PythonTarget

    if args.offline and not args.wheelhouse:
        raise UsageError("--offline needs --wheelhouse DIR.", "Make one with compat download -d DIR, then pass --wheelhouse DIR.")
    if args.restore or args.discard_snapshot:
        from .install.service import recover, recover_without_interpreter

        try:
            if args.python and not os.path.exists(args.python):  # a restore killed between two renames can leave bin/ missing
                print(recover_without_interpreter(args.python, restore_it=args.restore))
            else:
                print(recover(take_snapshot(args.python), restore_it=args.restore))
        except InstallError as exc:
            _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
            return exc.exit_code
        return EXIT_OK
    planning_only = args.dry_run or args.print_
    if (args.python_version or args.platform) and not planning_only:
        raise UsageError("--python-version and --platform only go with --dry-run or --print.", "To install, pass --python PATH of the target interpreter.")
    snapshot = None
    if args.python_version:
        python = PythonTarget.parse(args.python_version)
        platform = Platform.from_tag(args.platform) if args.platform else Platform.current()
    else:
        snapshot = take_snapshot(args.python)
        python = PythonTarget(snapshot.python_minor, snapshot.python, f"--python {snapshot.executable}")
        platform = Platform.from_tag(args.platform) if args.platform else snapshot.platform
    try:
        matrix, outcome, plan = _plan_for(args, python, platform)
    except _NoSet:
        return EXIT_PROBLEMS
    if args.print_:
        if args.print_ == "pip-command":
            print(pip_command_text(plan))
        elif args.require_hashes:
            raise UsageError("A hash-pinned requirements file needs every dependency's hash, which --print cannot know.",
                             "Run compat download -d DIR --require-hashes: it writes DIR/compat-wheelhouse.lock with all of them.")
        else:
            sys.stdout.write(requirements_text(plan, args.print_))
        return EXIT_OK
    def say(line: str) -> None:  # progress: a full or closed stderr must never fail the install
        if not args.json:
            _say_error(line)

    say(f"compat install: Python {python.label} ({python.origin}) · {platform.tag}")
    for package in plan.packages:
        say(f"  plan: {package.pin:<45} from {package.location.host_id} {package.location.url}")
    if args.dry_run and snapshot is not None:
        installed = snapshot.versions()
        from .names import canonical_name

        for package in plan.packages:
            before = installed.get(canonical_name(package.distribution))
            after = f"{package.version}{package.local_label}"
            if before is None:
                say(f"  would install {package.distribution} {after}")
            elif before != after:
                say(f"  would replace {package.distribution} {before} -> {after} (needs --yes)")
        say("  (dependencies are planned by pip at install time; this is the planned set only)")
    if args.dry_run:
        if args.json:
            print(dump_json({"schema_version": 1, "command": "install", "dry_run": True, "python": python.label,
                             "packages": {p.component.distribution: p.pin for p in plan.packages},
                             "hosts": {p.component.distribution: p.location.url for p in plan.packages}}))
        return EXIT_OK
    assert snapshot is not None
    options = InstallOptions(yes=args.yes, installer=args.installer, require_hashes=args.require_hashes, allow_unverified=args.allow_unverified,
                             offline_dir=Path(args.wheelhouse) if args.offline else None, say=say)
    try:
        result = install(matrix, plan, snapshot, options)
    except InstallError as exc:
        if args.json:
            print(dump_json({"schema_version": 1, "command": "install", "ok": False, "state": exc.state, "error": exc.message, "fix": exc.fix,
                             "checks": [f.to_json() for f in exc.findings]}))
        else:
            _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    lines = describe_findings(result.findings)
    if args.json:
        print(dump_json({"schema_version": 1, "command": "install", "ok": result.ok, "state": "installed", "installer": result.installer,
                         "changes": [{"name": c.name, "before": c.before, "after": c.after, "kind": c.kind} for c in result.changes],
                         "checks": [f.to_json() for f in result.findings]}))
    else:
        say("verification:")
        for line in lines:
            say(f"  {line}")
        say("OK: installed and verified" if result.ok else "FAIL: installed, but the verification above failed")
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def cmd_download(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .install.plan import WheelTarget
    from .install.runner import InstallError
    from .install.service import InstallOptions, download
    from .target import Platform, PythonTarget

    python = PythonTarget.parse(args.python_version) if args.python_version else PythonTarget.running()
    platform = Platform.from_tag(args.platform) if args.platform else Platform.current()
    try:
        _, _, plan = _plan_for(args, python, platform)
    except _NoSet:
        return EXIT_PROBLEMS
    try:
        options = InstallOptions(require_hashes=args.require_hashes, allow_unverified=args.allow_unverified,
                                 say=(lambda line: None) if args.json else _say_error)
        files = download(plan, WheelTarget(python.version, platform), Path(args.dest), sys.executable, options)
    except InstallError as exc:
        _say_error(f"compat: {exc.message}" + (f" {exc.fix}" if exc.fix else ""))
        return exc.exit_code
    if args.json:
        print(dump_json({"schema_version": 1, "command": "download", "dest": str(Path(args.dest).resolve()), "files": [f.name for f in files],
                         "packages": {p.component.distribution: p.pin for p in plan.packages}}))
    else:
        print(f"{len(files)} wheels in {args.dest} for Python {python.label} on {platform.tag}; install them with:")
        import shlex

        again = [*args.requirements] + (["--profile", args.profile] if args.profile else []) + (["--with", args.with_] if args.with_ else [])
        again += ["--torch-from-pypi"] if args.torch_from_pypi else []
        print("  " + shlex.join(["compat", "install", "--offline", "--wheelhouse", args.dest, *again]))
    return EXIT_OK


def cmd_translate(args: argparse.Namespace) -> int:
    import shlex

    from packaging.version import InvalidVersion, Version

    from .translate import translate

    command = args.training_command[1:] if args.training_command[:1] == ["--"] else args.training_command
    if not command:
        raise UsageError("No command line to translate.", "Write it after --, e.g. compat translate -- python run_qa.py --no_cuda --ddp_backend ccl")
    versions = {}
    for name in ("transformers", "accelerate"):
        given = getattr(args, name)
        if given:
            try:
                versions[name] = Version(given)
            except (InvalidVersion, ValueError):  # ValueError: more digits than int() takes
                raise UsageError(f"'{shown(given)}' is not a version.", f"Pass --{name} X.Y.Z.") from None
    if "transformers" not in versions or "accelerate" not in versions or args.python:
        from .environment.snapshot import take_snapshot

        snapshot = take_snapshot(args.python)
        for name in ("transformers", "accelerate", "torch"):
            dist = snapshot.get(name)
            if name not in versions and dist is not None and dist.public_version is not None:
                versions[name] = dist.public_version
    if "transformers" not in versions:
        raise UsageError("transformers is not installed in the target environment.", "Pass --python PATH of your training environment, or --transformers X.Y.Z.")
    result = translate(_load(args), command, versions["transformers"], versions.get("accelerate"), versions.get("torch"))
    if args.json:
        print(dump_json({"schema_version": 1, "command": "translate", "transformers": str(result.transformers),
                         "accelerate": str(result.accelerate) if result.accelerate else None, "argv": list(result.argv),
                         "edits": [{"before": e.before, "after": e.after, "why": e.why} for e in result.edits],
                         "warnings": list(result.warnings), "blocking": list(result.blocking)}))
    else:
        accelerate = f" / accelerate {result.accelerate}" if result.accelerate else ""
        print(f"# for transformers {result.transformers}{accelerate}")
        print(shlex.join(result.argv))
        for edit in result.edits:
            print(f"# {edit.before} -> {edit.after or '(dropped)'}: {edit.why}")
        for line in result.blocking:
            print(f"# CANNOT WORK: {line}")
        for line in result.warnings:
            print(f"# note: {line}")
    return EXIT_PROBLEMS if result.blocking else EXIT_OK


COMMANDS = {"translate": cmd_translate, "install": cmd_install, "download": cmd_download, "resolve": cmd_resolve, "matrix": cmd_matrix, "doctor": cmd_doctor, "check": cmd_check, "env": cmd_env, "launch": cmd_launch}


BUG_REPORT_DIR_ENV = "COMPAT_CRASH_DIR"  # where the traceback of an unexpected error is written (default: the temp folder)
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EFBIG, errno.EDQUOT}


#: Commands that read, compute and print, start nothing that outlives them and clean nothing up at exit. Run as the
#: program (``main()`` without arguments: the entry point, ``python -m compatmatrix``) they work with the cyclic
#: garbage collector off (their objects live until the end: collecting would only scan them) and end with os._exit
#: once their output is flushed: the interpreter's teardown would free the matrix object by object (~15 ms).
SHORT_LIVED = frozenset({"resolve", "matrix", "check"})


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command. Whatever happens, the user gets one sentence and an exit code in {0, 1, 2} (130/143 for
    Ctrl-C/SIGTERM, 141 for a closed pipe), never a traceback: an unexpected error is a bug, written to a report file."""
    if sys.stdout is None or sys.stderr is None:  # `compat resolve >&-`: the shell closed the descriptor
        if sys.stderr is not None:
            sys.stderr.write("compat: error: standard output is closed, so compat has nowhere to write. Redirect it (> FILE or > /dev/null) instead of closing it.\n")
        return EXIT_TOOL_ERROR
    args = argparse.Namespace(command=None)
    try:
        args = build_parser().parse_args(argv)
        short = argv is None and args.command in SHORT_LIVED
        if short:
            import gc

            gc.disable()
        code = COMMANDS[args.command](args)
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
        terminated = exc.__class__.__name__ == "Terminated"
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


def _end_now(code: int) -> None:
    """End the process with ``code`` now, its output written (see SHORT_LIVED); returns only if stderr cannot be
    flushed (the normal exit then reports it as before)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _say_error(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
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

    report = ""
    try:
        folder = os.environ.get(BUG_REPORT_DIR_ENV) or tempfile.gettempdir()
        handle, report = tempfile.mkstemp(prefix=f"compat-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8", errors="replace") as out:
            out.write(f"compat {__version__} on Python {sys.version.split()[0]}\ncommand: {sys.argv!r}\n\n")
            out.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except OSError:
        report = ""
    where = f"the details are in {report}" if report else "no report file could be written"
    message = str(exc).splitlines()[0][:200] if str(exc).strip() else ""
    _say_error(f"compat: internal error in '{getattr(args, 'command', '?')}' ({type(exc).__name__}{': ' + message if message else ''}); {where}. "
               "This is a bug in compat: please report it with that file attached.")
    return EXIT_TOOL_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
