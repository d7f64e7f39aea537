"""The training command and the set a job engine runs, shared by the job contract (export/contract.py) and the export
service: torchrun's words for a script (training_command), a launcher or a rank starter refused where the engine starts
every rank itself (refuse_rank_starters), the command translated for the set's transformers/accelerate (_for_the_set,
CannotWork), the set an environment holds (held_set) and the versions a set or an environment has. Pure but for the
snapshot it is handed."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from ..errors import EXIT_PROBLEMS, CompatError, UsageError

if TYPE_CHECKING:
    from packaging.version import Version

    from ..planning import Planned


CCL_KEY = "oneccl-bind-pt"  # the oneCCL bindings in the versions of --validate: whether the image's set can run the ccl backend


_PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")


class CannotWork(CompatError):
    """The training command cannot work with the resolved set (exit 1, as compat translate)."""

    exit_code = EXIT_PROBLEMS


def training_command(command: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """The words torchrun gets after its own options, and what was changed: a ``.py`` script or ``-m MODULE`` as given;
    ``python SCRIPT.py`` without the interpreter (torchrun runs the script with the image's Python); anything else
    (a shell script, a program) with ``--no_python``."""
    words = list(command)
    notes: list[str] = []
    if not words:
        raise UsageError("No training command.", "Write it after --, e.g. compat export pytorchjob --image IMG --cpu 8 --memory 16Gi -- train.py --ddp_backend gloo")
    from ..launchers import recognise

    if recognise(program=os.path.basename(words[0])) == "torchrun" or (
            _PYTHON.match(words[0]) and words[1:2] == ["-m"] and len(words) > 2 and recognise(module=words[2]) == "torchrun"):
        raise UsageError("The pods start torchrun themselves: the training command is what torchrun runs, not torchrun.",
                         "Give the script after -- (compat export pytorchjob --nproc-per-node M -- train.py ...).")
    if _PYTHON.match(words[0]) and len(words) > 1:
        if words[1] == "-c":
            raise UsageError("torchrun cannot run python -c CODE.", "Put the code in a script and pass the script after --.")
        notes.append(f"training command: '{words[0]}' dropped: torchrun runs {words[1]} with the image's Python itself")
        words = words[1:]
    if not (words[0].endswith(".py") or words[0] in ("-m", "--module")):
        notes.append(f"training command: {words[0]} is not a .py script, so torchrun runs it with --no_python")
        words = ["--no_python", *words]
    return tuple(words), notes


def launch_words(command: Sequence[str]) -> tuple[str, ...]:
    """The training command in compat launch's words from torchrun's (training_command's): ``--no_python PROGRAM`` is
    the program itself, ``--module M`` is ``-m M`` (compat launch puts the interpreter in front of a script and -m)."""
    words = list(command)
    if words[:1] in (["--no_python"], ["--no-python"]):
        words = words[1:]
    elif words[:1] == ["--module"]:
        words = ["-m", *words[1:]]
    return tuple(words)


def _for_the_set(planned: Any, command: Sequence[str], form: str, versions: Optional[Mapping[str, Optional[Version]]] = None) -> tuple[list[str], list[str]]:
    """The training command as the resolved set's transformers/accelerate take it (translate), and what was changed and
    why; CannotWork when no rewrite makes it run with that set. ``versions``: an environment's own (installed_versions)
    instead of the resolved set's."""
    versions = versions if versions is not None else resolved_versions(planned.outcome)
    transformers, accelerate, torch = versions["transformers"], versions["accelerate"], versions["torch"]
    if transformers is None:
        return list(command), ["no transformers in the set: the training command is used as written"]
    from ..translate import translate

    done = translate(planned.matrix, list(command), transformers, accelerate, torch)
    if done.blocking:
        raise CannotWork(f"The training command cannot work with the resolved set ({'; '.join(done.blocking)}).",
                         f"Resolve a set that still runs it (compat export {form} --profile ddp-ccl ...), or change the command (--ddp_backend gloo).")
    notes = [f"training command for transformers {transformers}: {e.before} -> {e.after or '(dropped)'}: {e.why}" for e in done.edits]
    return list(done.argv), notes + [f"note: {w}" for w in done.warnings]


# programs that start ranks of their own (one srun task each would start several): accelerate launch, deepspeed
_RANK_STARTERS = {("accelerate", "launch"): "accelerate launch", ("deepspeed",): "deepspeed",
                  ("-m", "accelerate.commands.launch"): "accelerate launch", ("-m", "deepspeed.launcher.runner"): "deepspeed"}


def _rank_starter(command: Sequence[str]) -> Optional[str]:
    words = [os.path.basename(command[0]), *command[1:]]
    if _PYTHON.match(command[0]):
        words = words[1:]
    return next((name for start, name in _RANK_STARTERS.items() if tuple(words[:len(start)]) == start), None)


def held_set(planned: Planned, snapshot: Any) -> Optional[tuple[list[str], dict[str, Optional[Version]]]]:
    """The set an environment holds (``snapshot``: --python probed): for each package of the resolved set, the pin of
    the version installed there ('torch==2.13.0+cpu', 'no torchaudio' where it is missing), and transformers/accelerate/
    torch/the oneCCL bindings as installed (what the training command is translated for); None when it holds none of the
    set's packages (an environment still to fill). UsageError when it holds a version that the requirements given on
    the command line exclude (the script runs that environment as it is)."""
    request = planned.plan.resolution.request
    pins, missing = [], []
    for package in planned.plan.packages:
        dist = snapshot.get(package.distribution)
        if dist is None:
            missing.append(package.distribution)
            continue
        specifier = request.spec(package.component)
        if specifier is not None and dist.public_version is not None and not specifier.contains(dist.public_version, prereleases=True):
            raise UsageError(f"{snapshot.executable} holds {dist.name} {dist.raw_version}, not the {package.distribution}{specifier} asked for.",
                             f"Install the set there first (compat install '{package.distribution}{specifier}' --python {snapshot.executable}), "
                             "or leave that requirement out.")
        pins.append(f"{package.distribution}=={dist.raw_version}")  # the name as the set names it (canonical), not as dist-info spells it
    if not pins:
        return None  # not the set's environment yet (compat install fills it): the resolved set is the one it must hold
    return pins + [f"no {name}" for name in missing], installed_versions(snapshot)


def refuse_rank_starters(command: Sequence[str], who: str, form: str, leave: Optional[str] = None) -> list[str]:
    """The training command each rank runs as given; a launcher or a program that starts ranks of its own (torchrun,
    mpirun, srun, accelerate launch, deepspeed) is refused, since ``who`` (srun, Ray Train) starts every rank and each
    would start several (UsageError naming it, the fix in compat export ``form``'s words)."""
    command = list(command)
    from ..launchers import recognise

    launcher = recognise(program=os.path.basename(command[0])) or (
        recognise(module=command[2]) if _PYTHON.match(command[0]) and command[1:2] == ["-m"] and len(command) > 2 else None)
    launcher = (launcher if launcher != leave else None) or _rank_starter(command)  # leave: refused by the caller in its own words
    if launcher:
        head = "The job starts every rank under srun itself" if who == "srun" else f"{who} starts every rank itself"
        raise UsageError(f"{head}: the training command is what each rank runs, not {launcher}.",
                         f"Give the script after -- (compat export {form} --nproc-per-node M -- train.py ...).")
    return command


def installed_versions(snapshot) -> dict[str, Optional[Version]]:
    """transformers, accelerate and torch as installed in an environment (None: not installed)."""
    versions = {}
    for name in ("transformers", "accelerate", "torch", CCL_KEY):
        dist = snapshot.get(name)
        versions[name] = dist.public_version if dist is not None else None
    return versions


def resolved_versions(outcome: Any) -> dict[str, Optional[Version]]:
    """transformers, accelerate and torch of a resolved set (None: not in it)."""
    from ..matrix.model import Component

    return {name: (pick.version if (pick := outcome.picks.get(Component.from_name(name))) is not None else None)
            for name in ("transformers", "accelerate", "torch", CCL_KEY)}
