"""From typed arguments (options.py) to the core's inputs and answers: the matrix, the target Python and platform, the
resolver's request (the command line and the -r files together), and the install plan that resolve, install,
download and export share.

Side effects: reads the matrix and the -r files, probes a --python interpreter (a child process), reads the index
configuration (config file, COMPAT_INDEX_*).
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any, Optional

from .errors import UsageError, shown

if TYPE_CHECKING:
    from .environment.snapshot import EnvSnapshot
    from .inputs.model import InputSet
    from .inputs.request import FileRequest
    from .install.plan import InstallPlan
    from .matrix.model import Matrix
    from .options import Sources, Target, Wanted
    from .search import Conflict, Outcome, Request
    from .target import Platform, PythonTarget


class NoSet(Exception):
    """No consistent set: the conflict, for the caller to print (exit 1)."""

    def __init__(self, conflict: Conflict) -> None:
        super().__init__("no consistent set")
        self.conflict = conflict


def load(matrix_path: Optional[str]) -> Matrix:
    """The bundled matrix with the user's overlay (compat matrix update's harvest, matrix/overlay.py), or --matrix /
    $COMPAT_MATRIX alone. An overlay that is ignored, or that disagrees with curated facts, is said once on stderr."""
    return load_with_overlay(matrix_path)[0]


_SAID: set[str] = set()


def load_with_overlay(matrix_path: Optional[str]):
    """(matrix, the overlay's state or None): what ``load`` reads, and what the overlay added or why it was ignored."""
    if matrix_path is not None and ("\x00" in matrix_path or not matrix_path.strip()):
        raise UsageError(f"--matrix '{shown(matrix_path)}' is not a file name.", "Pass the path of a matrix TOML file, or leave --matrix out for the bundled one.")
    from .matrix.load import load_matrix

    matrix = load_matrix(matrix_path)
    if matrix_path is not None:
        return matrix, None
    from .matrix.overlay import apply

    matrix, state = apply(matrix)
    if state is not None:
        _say_overlay(state)
    return matrix, state


def _say_overlay(state) -> None:
    import sys

    from .console import visible

    if state.ignored and "ignored" not in _SAID:
        _SAID.add("ignored")
        sys.stderr.write(visible(f"compat: note: the overlay {state.path} is ignored: {shown(state.ignored, 300)}. {state.ignored_advice}") + "\n")
        return
    if state.skipped and "skipped" not in _SAID:
        _SAID.add("skipped")
        more = f" and {len(state.skipped) - 1} more" if len(state.skipped) > 1 else ""
        sys.stderr.write(visible(f"compat: note: the overlay {state.path}: a record is skipped ({shown(state.skipped[0], 300)}){more}; "
                                 "the rest of it is used ('compat matrix' lists what was skipped).") + "\n")
    if state.disagreements and "disagree" not in _SAID:
        _SAID.add("disagree")
        count = len(state.disagreements)
        sys.stderr.write(f"compat: note: the overlay disagrees with the curated matrix on {count} fact{'s' if count != 1 else ''}; "
                         "the curated facts are used ('compat matrix' lists them).\n")


def target_of(target: Target, snapshot: Optional[EnvSnapshot] = None) -> tuple[PythonTarget, Platform]:
    """The Python and platform to resolve for, glibc included: a probed environment's (``snapshot``, install), else
    --python's (probed), --python-version's, or the running interpreter's; --platform overrides the platform. The one
    decision every route to a target takes (resolve, install, download, check -r, export): the same interpreter gives
    the same platform, and so the same set, whichever command asks."""
    from .target import Platform, PythonTarget

    platform = Platform.from_tag(target.platform) if target.platform else None
    if snapshot is not None:
        return snapshot.python_target(), platform or snapshot.platform
    interpreter = target.interpreter
    if interpreter:
        from .environment.interpreter import query_interpreter

        info = query_interpreter(interpreter)
        return info.python_target(f"--python {info.executable}"), platform or info.platform
    if target.python_version:
        return PythonTarget.parse(target.python_version), platform or Platform.current()
    return PythonTarget.running(), platform or Platform.current()


class Asked:
    """The resolver's request and what the -r files said (None without files)."""

    __slots__ = ("request", "files", "inputs")

    def __init__(self, request: Request, files: Optional[FileRequest], inputs: Optional[InputSet]) -> None:
        self.request = request
        self.files = files
        self.inputs = inputs


def ask(matrix: Matrix, wanted: Wanted, python: PythonTarget, platform: Platform) -> Asked:
    """The resolver's request from the command line and the -r files together."""
    from .resolve import build_request, with_constraints

    inputs = files = None
    if wanted.files:
        from .inputs import read_inputs
        from .inputs.request import file_request

        inputs = read_inputs(list(wanted.files), python, platform=platform)
        files = file_request(matrix, inputs)
    requirements = list(wanted.requirements) + list(files.requirements if files else ())
    request = build_request(matrix, python, platform, wanted.profile, list(wanted.with_), requirements)
    if files is not None:
        request = with_constraints(matrix, request, files.constraints)
        request = request.replace(notes=request.notes + tuple(f"warning: {w}" for w in files.warnings) + files.notes
                                  + tuple(f"passed through untouched (not resolved by compat): {line}" for line in files.shown_passthrough))
    return Asked(request, files, inputs)


class Planned:
    """A resolved set turned into an install plan."""

    __slots__ = ("matrix", "outcome", "plan", "asked")

    def __init__(self, matrix: Matrix, outcome: Outcome, plan: InstallPlan, asked: Asked) -> None:
        self.matrix = matrix
        self.outcome = outcome
        self.plan = plan
        self.asked = asked


def plan_for(matrix: Matrix, wanted: Wanted, sources: Sources, python: PythonTarget, platform: Platform) -> Planned:
    """Resolve for the target and turn the answer into an install plan (each package from its own host, --index,
    --wheelhouse and --torch-from-pypi applied); raises NoSet with the conflict when no set exists."""
    from pathlib import Path

    from .install.indexes import configure_indexes
    from .install.plan import make_plan
    from .resolve import resolve
    from .search import Conflict

    asked = ask(matrix, wanted, python, platform)
    outcome = resolve(matrix, asked.request)
    if isinstance(outcome, Conflict):
        raise NoSet(outcome)
    locations = configure_indexes(matrix, list(sources.index))
    if sources.wheelhouse:
        from .install.service import offline_locations

        check_wheelhouse(sources.wheelhouse)
        locations = offline_locations(locations, Path(sources.wheelhouse))
    if sources.torch_from_pypi:
        outcome = _torch_from_pypi(matrix, outcome, python)
    plan = make_plan(outcome, locations)
    if asked.files is not None and asked.files.passthrough:
        import dataclasses

        refuse_unsatisfiable_runtime(matrix, asked.files)
        plan = dataclasses.replace(plan, passthrough=passed_on(asked.files), withheld=asked.files.withheld)
    return Planned(matrix, outcome, plan, asked)


def refuse_unsatisfiable_runtime(matrix: Matrix, files: FileRequest) -> None:
    """A pin of a runtime wheel whose declared dependencies no index has is never planned: pip would fail on it
    (matrix/runtime.py), after compat had taken its snapshot. Refused, naming the newest release that installs."""
    from .inputs.request import runtime_sentences
    from .matrix.runtime import install_words

    refused, _ = runtime_sentences(matrix, files.passthrough)
    if refused:
        said, name = refused[0]
        raise UsageError(said + ".", f"Pin {install_words(matrix, name)} in its place (the newest release whose dependencies an index has).")


def passed_on(files: FileRequest) -> tuple[str, ...]:
    """The files' requirements compat does not resolve, as the lines pip and uv get (arguments of pip, lines of uv's
    input file, lines of the exports): each must read back as exactly that one requirement, else it is refused naming
    its file -- a name holding a newline would otherwise put its own --index-url in front of pip."""
    from .render.requirements import requirement_problem
    from .values import quoted

    lines = files.passthrough_lines
    for item, line, as_shown in zip(files.passthrough, lines, files.shown_passthrough):
        why = requirement_problem(line)
        if why:
            raise UsageError(f"{item.origin}: the requirement '{quoted(as_shown)}' cannot be passed on to pip: {why}.",
                             "Correct that entry of the file (a package name is letters, digits, '.', '_' and '-').")
    return lines


def _torch_from_pypi(matrix: Matrix, outcome: Any, python: PythonTarget) -> Any:
    """torch (and torchvision, torchaudio: one build) from PyPI instead of the PyTorch CPU index."""
    from .matrix.model import components_where
    from .record import replace

    picks = dict(outcome.picks)
    for component in components_where(cpu_index_build=True):
        pick = outcome.picks.get(component)
        if pick is None:
            continue
        pypi = next((w for w in pick.release.wheels if w.host == "pypi"), None)
        if pypi is None or not pypi.has_python(python.version):
            raise UsageError(f"PyPI has no {component.label} {pick.version} wheel for Python {python.label}, so --torch-from-pypi cannot help.",
                             "Use a mirror of the PyTorch CPU index: --index pytorch-cpu=URL (or a local folder of wheels).")
        picks[component] = replace(pick, host=matrix.hosts["pypi"], wheels=pypi)
    return replace(outcome, picks=picks)


def check_wheelhouse(given: str) -> None:
    """--wheelhouse must name a folder: a missing path, a file or a FIFO is unusable input (exit 2)."""
    import stat

    try:
        mode = os.stat(given).st_mode
        why = "" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a file"
    except OSError as exc:
        why = "missing" if exc.errno == errno.ENOENT else f"unreadable: {exc.strerror}"
    if why:
        raise UsageError(f"The wheelhouse {shown(given, 200)} is not a folder (it is {why}).", "Pass --wheelhouse DIR, a folder made by compat download -d DIR.")
