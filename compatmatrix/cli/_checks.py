"""What compat check and compat doctor share: their common options, the builder of ``ChecksArgs`` (doctor adds its
live options, cli/doctor.py), and the run: the checks chosen and run on a snapshot of the environment (or of -r
files' pins), the live run when asked, the findings rendered, exit 1 when one fails. Side effects: the snapshot probes
the target interpreter; the live run starts ranks; --report writes a file.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Callable, Optional

from ..console import make_console, visible
from ..errors import EXIT_OK, EXIT_PROBLEMS, CompatError, UsageError
from ._options import PYTHON_ENV, output, per_node_int, target

if TYPE_CHECKING:
    from ..matrix.model import Matrix
    from ..options import ChecksArgs, LiveArgs


class _Bf16Action(argparse.BooleanOptionalAction):
    """--bf16 / --no-bf16 that remembers both spellings it was given, so `--bf16 --no-bf16` is refused, not last-wins."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        super().__call__(parser, namespace, values, option_string)
        seen = set(getattr(namespace, "bf16_given", ()) or ()) | {option_string}
        namespace.bf16_given = tuple(sorted(seen))




def common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of both commands, after their target options."""
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


def build(ns: argparse.Namespace, live: Callable[[argparse.Namespace], Optional[LiveArgs]] = lambda ns: None) -> ChecksArgs:
    """``ChecksArgs`` of compat check or doctor; ``live``: doctor's --live options (their own checks), None without --live."""
    from ..options import ChecksArgs

    _refuse_bf16(ns)
    launcher = _launcher(ns)
    live_args = live(ns)
    return ChecksArgs(ns.command, output(ns), target(ns), tuple(getattr(ns, "requirement_files", ()) or ()), ns.ranks_per_node, ns.bf16,
                      tuple(ns.only), tuple(ns.skip), ns.list, ns.verbose, getattr(ns, "import_timeout", 120.0), live_args,
                      getattr(ns, "hostfile", None), getattr(ns, "rsh", None), launcher)


def _refuse_bf16(ns: argparse.Namespace) -> None:
    live = getattr(ns, "live", False)
    given = getattr(ns, "bf16_given", ()) or ()
    if not getattr(ns, "list", False):  # --list lists the checks whatever else was given
        if len(given) > 1:
            raise UsageError("--bf16 and --no-bf16 contradict each other.", "Pass one of them.")
        if ns.bf16 is False and not live:
            where = "compat doctor --live" if ns.command == "doctor" else f"compat doctor --live, not compat {ns.command}"
            raise UsageError(f"--no-bf16 only keeps the live Trainer step in fp32: it goes with {where}.",
                             "Drop --no-bf16 (without --bf16 the bf16 checks do not apply), or add --live to compat doctor.")


def _launcher(ns: argparse.Namespace) -> Optional[str]:
    """compat check --launcher, static doctor --launcher: the launcher oneccl.launcher judges and every fix names."""
    launcher = getattr(ns, "check_launcher", None)
    if ns.command == "doctor" and not getattr(ns, "live", False):
        launcher = getattr(ns, "launcher", None)
    if launcher is not None:
        from ..launchers import names
        from ..launchers.interface import ENV

        if launcher not in names(ENV):
            raise UsageError(f"--launcher {launcher!r} is not a launcher compat knows.", f"Use one of: {', '.join(names(ENV))}.")
    return launcher


def run(args: ChecksArgs, live_options: Optional[Callable[[], object]] = None) -> int:
    """compat check, compat doctor: ``live_options`` makes doctor --live's options (checked once the check names are)."""
    from ..checks.registry import Context, Options, all_checks, run_checks, select

    checks = all_checks()
    if args.list_checks:
        from ..render.text import render_check_list

        render_check_list(make_console(args.output.no_color), select(checks, static_only=args.command == "check"))
        return EXIT_OK
    live_named = _live_named(args)
    options_of_live = live_options() if args.live is not None and live_options is not None else None
    snapshot, files, cpu_index, matrix = _environment(args)
    options = Options(ranks_per_node=args.ranks_per_node, bf16=args.bf16 is True, import_timeout=args.import_timeout, launcher=args.launcher,
                      env_launcher=options_of_live.launcher if options_of_live is not None else None,  # the launcher the fixes' compat env names
                      cpu_index=cpu_index)
    context = Context(matrix, snapshot, options)
    findings = run_checks(_chosen(args, checks, live_named, options_of_live is not None, files is not None), context)
    if files is not None:
        from ..inputs.check import file_findings

        findings = file_findings(list(args.files), files, findings)
    live = None
    if options_of_live is not None:
        from ..live.service import run_live

        live = run_live(context, options_of_live)
        findings += live.findings
    return _emit(args, snapshot, findings, files, live)


def _live_named(args: ChecksArgs) -> list[str]:
    """The live check names of --only/--skip (they need --live); any other name must be a check id or area."""
    from ..checks.registry import unknown_names

    live_named = [n for n in args.only + args.skip if n == "live" or n.startswith("live.")]
    if live_named and args.live is None:
        raise UsageError(f"'{live_named[0]}' is a live check: it needs compat doctor --live.", "Add --live.")
    unknown = unknown_names([n for n in args.only + args.skip if n not in live_named])
    if unknown:
        raise UsageError(f"'{unknown[0]}' is not a check id or area.", f"Run 'compat {args.command} --list' for the ids.")
    return live_named


def _environment(args: ChecksArgs):
    """(snapshot, the -r files' request or None, whether the files name the PyTorch CPU index, the matrix)."""
    from ..environment.snapshot import take_snapshot
    from ..planning import load

    matrix = load(args.output.matrix)
    if args.files:
        snapshot, files, cpu_index = _pinned_snapshot(args, matrix)
        return snapshot, files, cpu_index, matrix
    if args.target.python_version or args.target.platform:
        raise UsageError("--python-version and --platform go with -r FILE.", "To check an environment, pass --python PATH of its interpreter.")
    return take_snapshot(args.target.python, cached=True), None, False, matrix  # the environment's facts, kept while its fingerprint holds


def _chosen(args: ChecksArgs, checks, live_named: list[str], live: bool, files: bool) -> list:
    from ..checks.registry import select

    only = [n for n in args.only if n not in live_named]
    chosen = select(checks, only, list(args.skip), static_only=args.command == "check") if only or not args.only else []
    if live and not any(n.startswith("imports") for n in args.only):
        chosen = [c for c in chosen if c.static]  # every rank imports the stack itself: live.imports reports it
    if files:
        chosen = [c for c in chosen if c.id.startswith("packages.")]  # no machine and no shell: only the pins can be judged
    return chosen


def _emit(args: ChecksArgs, snapshot, findings, files, live) -> int:
    """The findings (and the live details) as --json or text, the --report page written first; exit 1 when one fails."""

    def document() -> dict:
        from ..render.json import findings_json

        data = findings_json(args.command, snapshot, findings, list(args.files) if files is not None else None)
        if files is None:  # this host's facts, for doctor --hostfile to compare hosts
            from ..hosts import host_facts

            data["host"] = host_facts(snapshot, os.uname()[1])
        if live is not None:
            data["live"] = live.details
        return data

    written: Optional[dict] = None
    if args.live is not None and args.live.report:
        written = document()  # the page and --json show the same document
        write_report(args.live.report, written)

    def text(console) -> None:
        from ..render.text import findings_header, render_findings

        render_findings(console, findings_header(args.command, snapshot), findings, args.verbose, live.details if live else None)

    from ..render import emit

    emit(args.output.json, args.output.no_color, document if written is None else (lambda: written), text)
    return EXIT_PROBLEMS if any(f.status.value == "fail" for f in findings) else EXIT_OK


def write_report(path: str, data: dict) -> None:
    """The fabric report of ``data`` (the --json document) written whole or not at all (a temporary file renamed)."""
    from ..render.fabric_html import render_report

    write_page(path, render_report(data))


def write_page(path: str, page: str) -> None:
    """A --report page written whole or not at all (a temporary file beside it, renamed): doctor's and launch's."""
    import tempfile

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


def _pinned_snapshot(args: ChecksArgs, matrix: Matrix):
    """compat check -r: an environment made of the files' exact pins (nothing installed, no machine)."""
    from ..environment.from_pins import snapshot_from_pins
    from ..inputs import read_inputs
    from ..inputs.request import file_request
    from ..planning import target_of
    from ..record import replace

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
