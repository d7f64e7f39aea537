"""Where a training command's runs may write (``compat tune -- train.py …``): every argument of the command is placed
before anything runs, and each run's command line points the output ones into that run's own scratch folder. Pure.

The rule is closed: each argument after the script (tune/argv.py splits them as argparse does; names read with ``-``
as ``_``, any case; in an HF Trainer command argparse's prefixes read as the Trainer's options they may mean) is

* **redirected** into the run's folder (a fresh path per run, removed with compat tune's scratch folder): the HF
  Trainer's own output folders (TrainingArguments ``output_dir``, and ``logging_dir`` of transformers 4: checkpoints,
  ``save_model()``, the trainer state, TensorBoard events; any spelling argparse may read as one of them only:
  ``--output-dir``, ``--outp``), and every option whose full name says an output path (the name ends in dir, path,
  file, folder, directory, prefix or root, and its words say output: output, out, save, checkpoint, ckpt, log,
  logging, dump, export, result, report, tensorboard, artifact, …): ``--save_dir``, ``--checkpoint_path``,
  ``--outdir``, ``--log_file``. A Trainer command without ``--output_dir VALUE`` gets one there too (transformers 5
  writes ``trainer_output/`` into the working folder otherwise);
* **kept as given**: the inputs the HF Trainer and its example scripts only read (INPUTS: ``model_name_or_path``,
  ``train_file``, ``resume_from_checkpoint``, ``deepspeed``, …, spelled in full), the caches (``cache_dir``: written by
  content, as your own runs write it, and an offline run needs it), and what the user declares with ``--reads NAME``
  (an option's name, a short option's letter, or a positional word as written);
* **passed**: a value that names no file (a number, true/false, yes/no), an option without a value, and in a Trainer
  command the value of the Trainer's other options spelled in full (``--run_name``, ``--lr_scheduler_type``: the
  Trainer writes no file by them); the Hub options are dropped (trainer.trainer_argv);
* **refused** (exit 2, before anything runs): everything else — an abbreviation of the script's own options
  (``--save_d``), a name that says no path (``--ckpt``, ``--save_to``, ``--log``), a short option's value (``-o out``),
  a positional (``config.json``), a prefix that may mean an output or something else: compat cannot tell whether the
  run writes there. The fix names ``--reads NAME``. A ``--reads`` that names an output, or no argument, is refused too.

Paths the script chooses itself, and what a file it reads (a JSON config, HfArgumentParser's ``train.args``) names,
are not seen; docs/guarantees.md says so (Not promised).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from pathlib import Path

from ..errors import CompatError, shown
from ..record import Record
from .argv import KNOWN, Arg, appended, arguments, candidates, is_trainer, normal, plainly_no_path, resolved

#: the Trainer's output folders (TrainingArguments output_dir; logging_dir up to transformers 4)
TRAINER_OUTPUTS = frozenset(name for name, kind in KNOWN.items() if kind == "output")
#: path arguments the HF Trainer (TrainingArguments) and its example scripts only read
INPUTS = frozenset(name for name, kind in KNOWN.items() if kind == "input")
#: caches: written by content, the same way the user's own runs write them (and an offline run needs them filled)
CACHES = frozenset(name for name, kind in KNOWN.items() if kind == "cache")
OUTPUT_WORDS = frozenset({"output", "outputs", "out", "save", "saved", "saving", "checkpoint", "checkpoints", "ckpt", "ckpts",
                          "log", "logs", "logging", "dump", "export", "result", "results", "report", "reports", "tensorboard", "tb",
                          "artifact", "artifacts", "snapshot", "snapshots", "write", "writer"})
PATH_WORDS = frozenset({"dir", "dirs", "directory", "folder", "path", "file", "filename", "prefix", "root"})
_GLUED = ("dir", "path", "file", "folder")  # outdir, logdir, savepath, outfile
SINGLE_OUTPUTS = frozenset({"output", "out", "outputs"})
FLAGS = frozenset({"overwrite_output_dir", "overwrite_cache"})  # path-shaped names that take no path
_BASENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", re.ASCII)


class PathArgs(Record):
    """What compat tune does with the command's arguments, in the order given: redirected and caches by their option's
    name (no dashes: ``output_dir``), kept and refused as written (``--data_path``, ``-c``, ``config.json``)."""

    redirected: tuple[str, ...]
    kept: tuple[str, ...]  # read-only by name or by --reads
    caches: tuple[str, ...]
    refused: tuple[str, ...]
    add_output_dir: bool  # a Trainer command without --output_dir: one is added, in the run's folder
    dropped: tuple[str, ...] = ()  # the Hub options of a Trainer command (trainer.trainer_argv drops them): nothing is sent
    conflicts: tuple[str, ...] = ()  # --reads words that name an output (never un-redirected: refused)
    unmatched: tuple[str, ...] = ()  # --reads words that name no argument of the command (refused: a typo reads nothing)
    trainer: bool = False  # an HF Trainer command (trainer.is_trainer_command): the Trainer's options are known


def is_path_name(name: str) -> bool:
    """A name that says it holds a path: its last word is a path word (``data_dir``, ``log_file``, ``dir``), an output
    word glued to one (``outdir``, ``logfile``, ``model_savepath``), or just ``output`` / ``out``."""
    last = name.split("_")[-1]
    return name not in FLAGS and (last in PATH_WORDS or _glued_output(last) or name in SINGLE_OUTPUTS)


def is_output_name(name: str) -> bool:
    """A path name whose words say output (``save_dir``, ``checkpoint_path``, ``outdir``), or the Trainer's own."""
    if name in TRAINER_OUTPUTS:
        return True
    words = name.split("_")
    return is_path_name(name) and (bool(set(words) & OUTPUT_WORDS) or _glued_output(words[-1]) or name in SINGLE_OUTPUTS)


def _glued_output(word: str) -> bool:
    return any(word.endswith(glue) and word[: -len(glue)] in OUTPUT_WORDS for glue in _GLUED)


def _kinds(arg: Arg, trainer: bool) -> set[str]:
    return {KNOWN[name] for name in candidates(arg.name, trainer)}


def could_be_output(arg: Arg, trainer: bool) -> bool:
    """A long option argparse may read as an output: one of the Trainer's output folders among what it may mean, or
    (meaning no known option) a full name that says an output path."""
    kinds = _kinds(arg, trainer)
    return "output" in kinds or (not kinds and is_output_name(arg.name))


def is_redirected(arg: Arg, trainer: bool) -> bool:
    """An option with a value that argparse can read as an output only: its value is pointed into the run's folder."""
    return arg.kind == "long" and bool(arg.values) and could_be_output(arg, trainer) and _kinds(arg, trainer) <= {"output"}


def _reads_keys(reads: Collection[str]) -> dict[str, str]:
    """``--reads`` word -> the option name it stands for (``--Data-Path`` -> ``data_path``)."""
    return {word: word.lstrip("-").lower().replace("-", "_") for word in reads}


def classify(argv: Sequence[str], reads: Collection[str] = (), trainer: "bool | None" = None) -> PathArgs:
    """Each argument of ``argv`` (the command, script first) in its class (the module's rule); ``reads``: the words the
    user passed to ``--reads``; ``trainer``: whether it is an HF Trainer command (None: trainer.is_trainer_command)."""
    trainer = is_trainer(argv) if trainer is None else trainer
    keys = _reads_keys(reads)
    redirected: list[str] = []
    kept: list[str] = []
    caches: list[str] = []
    refused: list[str] = []
    dropped: list[str] = []
    conflicts: list[str] = []
    used: set[str] = set()
    has_output = False

    def declared(arg: Arg) -> bool:
        as_written = arg.kind in ("positional", "bad")
        names = {arg.written} if as_written else {arg.name, resolved(arg.name, trainer) or arg.name}
        hits = [word for word, key in keys.items() if (word if as_written else key) in names]
        used.update(hits)
        return bool(hits)

    for arg in arguments(argv, trainer):
        declared(arg)  # a --reads word naming an argument that needs no declaring (--seed 3) is no typo
    for arg in arguments(argv, trainer):
        target = _place(arg, trainer, declared)
        if arg.kind == "long" and could_be_output(arg, trainer) and declared(arg):
            conflicts.extend(word for word, key in keys.items() if key in (arg.name, resolved(arg.name, trainer)))
        if target == "redirected":
            name = resolved(arg.name, trainer) or arg.name
            has_output = has_output or name == "output_dir"
            _add(redirected, name)
        elif target == "cache":
            _add(caches, resolved(arg.name, trainer) or arg.name)
        elif target == "kept":
            _add(kept, arg.written)
        elif target == "dropped":
            _add(dropped, arg.written)
        elif target == "refused":
            _add(refused, arg.written)
    unmatched = tuple(word for word in keys if word not in used)
    return PathArgs(tuple(redirected), tuple(kept), tuple(caches), tuple(refused), trainer and not has_output, tuple(dropped),
                    tuple(dict.fromkeys(conflicts)), unmatched, trainer)


def _add(found: list[str], item: str) -> None:
    if item not in found:
        found.append(item)


def _place(arg: Arg, trainer: bool, declared) -> str:  # noqa: ANN001
    """redirected, cache, kept, dropped, refused or passed (the rule of the module docstring)."""
    if arg.kind != "long":
        no_path = plainly_no_path(arg.name) if arg.kind == "positional" else arg.kind == "short" and all(plainly_no_path(v) for v in arg.values)
        return "passed" if no_path else "kept" if declared(arg) else "refused"
    if is_redirected(arg, trainer):
        return "redirected"
    if trainer and "hub" in _kinds(arg, trainer):
        return "dropped"
    if not arg.values or all(plainly_no_path(v) for v in arg.values):
        return "passed"
    if could_be_output(arg, trainer):  # a prefix that may mean an output or something else
        return "refused"
    if declared(arg):
        return "kept"
    return _place_known(arg, trainer)


#: where the value of a known option of each kind goes (a bool option's: passed when it is a true/false letter or digit)
_KNOWN_PLACE = {"cache": "cache", "input": "kept", "value": "passed", "list": "passed"}


def _place_known(arg: Arg, trainer: bool) -> str:
    """A long option no rule above placed: by the kind of the known option it names in full; refused when it names
    none or abbreviates one (the script may have an option of that very name)."""
    meant = resolved(arg.name, trainer)
    if meant != arg.name:
        return "refused"
    kind = KNOWN[meant]
    if kind == "bool" and all(v.lower() in ("t", "y", "n", "f", "1", "0") for v in arg.values):
        return "passed"
    return _KNOWN_PLACE.get(kind, "refused")


def _shell(word: str) -> str:
    return shlex.quote(shown(word))


def _reads_name(written: str) -> str:
    """The --reads word that declares an argument written so: an option's name without its dashes; a positional, or a
    word argparse reads as no option, as written."""
    return written.lstrip("-") if normal(written) or re.fullmatch(r"-[A-Za-z0-9]", written) else written


def refuse(found: PathArgs) -> None:
    """Raise the one sentence for what compat cannot place: a --reads that names an output or nothing, then the
    arguments compat cannot tell read from written."""
    if found.conflicts:
        names = ", ".join(f"--reads {_shell(word)}" for word in found.conflicts)
        raise CompatError(f"{names} names an output of your command, which compat tune points into each run's own folder: its runs never write "
                          "where you keep things, and --reads never changes that.", f"Drop {names}.")
    if found.unmatched:
        names = ", ".join(f"--reads {_shell(word)}" for word in found.unmatched)
        raise CompatError(f"{names} names no argument of your command (an option's name without its dashes, a short option's letter, "
                          "or a positional argument as written).", f"Correct or drop {names}.")
    if not found.refused:
        return
    written = ", ".join(_shell(word) for word in found.refused)
    example = " ".join(f"--reads {_shell(_reads_name(word))}" for word in found.refused)
    raise CompatError(f"compat tune cannot tell whether your command writes into what {'this argument' if len(found.refused) == 1 else 'these arguments'} "
                      f"of it name{'s' if len(found.refused) == 1 else ''}: {written} (its runs may not write where you keep things).",
                      f"If the runs only read it (or it names no file), declare each with {example} (before --); an output must be "
                      "spelled out in full as one (--output_dir, or a name that says an output path, e.g. --save_dir), and compat tune "
                      "points it into each run's own folder.")


def redirect(argv: Sequence[str], found: PathArgs, folder: Path) -> list[str]:
    """``argv`` with every redirected argument's value replaced by a path under ``folder`` (one run's), a fresh
    ``folder/K/<its last component>`` each (K its place among them; the component kept only where it is a plain
    name); plus ``--output_dir folder/output_dir`` where ``found.add_output_dir``. The folders K are created, the
    paths themselves are left for the run to create (a file or a folder)."""
    words = list(argv)
    targets = [arg for arg in arguments(argv, found.trainer) if is_redirected(arg, found.trainer)]
    for index, arg in enumerate(targets):
        at = arg.value_at
        assert at is not None
        value = arg.values[0]
        last = Path(value.rstrip("/")).name
        place = folder / str(index)
        place.mkdir(parents=True, exist_ok=True)
        target = str(place / (last if _BASENAME.fullmatch(last) else "out"))
        words[at] = words[at].partition("=")[0] + "=" + target if arg.glued else target
    if found.add_output_dir:
        words = appended(words, ["--output_dir", str(folder / "output_dir")])
    return words


def notes(found: PathArgs) -> list[str]:
    """What the output says about the command's arguments."""
    said = []
    if found.redirected or found.add_output_dir:
        names = [f"--{name}" for name in found.redirected] + (["--output_dir (added: the Trainer would write trainer_output/ here)"] if found.add_output_dir else [])
        said.append(f"your command's outputs ({', '.join(names)}) pointed into each run's own folder inside compat tune's scratch "
                    "folder, removed afterwards: nothing was written where they point on your command line")
    if found.kept:
        said.append(f"kept as given, read only: {', '.join(found.kept)}")
    if found.caches:
        said.append(f"kept as given, a cache the runs fill as your own runs do: {', '.join('--' + name for name in found.caches)}")
    if found.dropped:
        said.append(f"dropped, and --push_to_hub false set: {', '.join(found.dropped)} (the runs send nothing to the Hugging Face Hub)")
    return said
