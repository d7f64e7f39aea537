"""Where a training command's runs may write (``compat tune -- train.py …``): every path argument of the command is
classified by its name before anything runs, and each run's command line points the output ones into that run's own
scratch folder. Pure.

The rule, for each ``--NAME VALUE`` / ``--NAME=VALUE`` of the command (NAME lowercased, ``-`` read as ``_``):

* **Redirected** into the run's folder (a fresh path per run, removed with compat tune's scratch folder): the HF
  Trainer's own output folders (TrainingArguments ``output_dir``: checkpoints, ``save_model()``, the trainer state;
  ``logging_dir``: TensorBoard events), and every path-named argument (the name ends in dir, path, file, folder,
  directory, prefix or root) whose words say output (output, out, save, checkpoint, ckpt, log, logs, logging, dump,
  export, result, results, report, tensorboard, artifact, ...): ``--save_dir``, ``--checkpoint_path``, ``--outdir``,
  ``--log_file``, ``--output``. A Trainer command without ``--output_dir`` gets one there too (transformers 5 writes
  ``trainer_output/`` into the working folder otherwise).
* **Kept as given**: path arguments the HF Trainer and its example scripts only read (INPUTS: ``model_name_or_path``,
  ``train_file``, ``resume_from_checkpoint``, ``deepspeed``, ...), the caches (CACHES: ``cache_dir`` — written by
  content, as your own runs write it, and an offline run needs it), and those the user names with ``--reads NAME``.
* **Refused** (exit 2, before anything runs): any other path-named argument (``--data_path``, ``--foo_dir``): compat
  cannot tell whether the run writes there. The fix names ``--reads NAME``.

Positional arguments and paths the script chooses itself are not seen; the README says so (Guarantees, Not promised).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path

from ..errors import CompatError
from ..record import Record

#: TrainingArguments fields the Trainer writes into (transformers/training_args.py: output_dir, logging_dir)
TRAINER_OUTPUTS = frozenset({"output_dir", "logging_dir"})
#: the shortest prefix argparse resolves to each of them among TrainingArguments' options (transformers
#: src/transformers/training_args.py: output_dir is the only field beginning "ou"; logging_dir shares "logging_" with
#: logging_strategy, logging_steps, logging_first_step, logging_nan_inf_filter); "out" rather than "ou": a word
#: for an output either way
ABBREVIATED = {"output_dir": "out", "logging_dir": "logging_d"}
#: path arguments the HF Trainer (TrainingArguments) and its example scripts (ModelArguments, DataTrainingArguments of
#: transformers/examples/pytorch/*) only read
INPUTS = frozenset({
    "resume_from_checkpoint", "deepspeed", "fsdp_config", "accelerator_config", "model_name_or_path", "config_name",
    "tokenizer_name", "train_file", "validation_file", "test_file", "data_dir", "dataset_name", "dataset_config_name",
    "train_dir", "validation_dir", "test_dir", "image_processor_name", "feature_extractor_name",
})
#: caches: written by content, the same way the user's own runs write them (and an offline run needs them filled)
CACHES = frozenset({"cache_dir", "hf_cache_dir", "datasets_cache_dir"})
#: path-shaped names that are flags, not paths (TrainingArguments.overwrite_output_dir takes no path)
FLAGS = frozenset({"overwrite_output_dir", "overwrite_cache"})
OUTPUT_WORDS = frozenset({"output", "outputs", "out", "save", "saved", "saving", "checkpoint", "checkpoints", "ckpt", "ckpts",
                          "log", "logs", "logging", "dump", "export", "result", "results", "report", "reports", "tensorboard", "tb",
                          "artifact", "artifacts", "snapshot", "snapshots", "write", "writer"})
PATH_WORDS = frozenset({"dir", "dirs", "directory", "folder", "path", "file", "filename", "prefix", "root"})
_GLUED = ("dir", "path", "file", "folder")  # outdir, logdir, savepath, outfile
SINGLE_OUTPUTS = frozenset({"output", "out", "outputs"})
_NAME = re.compile(r"--([A-Za-z][A-Za-z0-9_-]{0,99})")
_BASENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", re.ASCII)


class PathArgs(Record):
    """What compat tune does with the command's path arguments (names without dashes, in the order given)."""

    redirected: tuple[str, ...]
    kept: tuple[str, ...]  # read-only by name or by --reads
    caches: tuple[str, ...]
    refused: tuple[str, ...]
    add_output_dir: bool  # a Trainer command without --output_dir: one is added, in the run's folder


def normal_name(word: str) -> str:
    """``--Output-Dir=x`` -> ``output_dir``; "" for a word that is no long option. A proper prefix of one of the Trainer's
    outputs is that output: argparse (HfArgumentParser) takes ``--output_d`` or ``--outp`` for ``--output_dir``."""
    match = _NAME.fullmatch(word.partition("=")[0])
    if not match:
        return ""
    name = match.group(1).lower().replace("-", "_")
    return next((full for full, least in ABBREVIATED.items() if name.startswith(least) and full.startswith(name)), name)


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


def classify(argv: Sequence[str], reads: Collection[str] = (), trainer: bool = False) -> PathArgs:
    """Each path-named option of ``argv`` (that has a value) in one of the four classes; ``reads``: names the user says
    the run only reads (normal_name form)."""
    redirected: list[str] = []
    kept: list[str] = []
    caches: list[str] = []
    refused: list[str] = []
    for name, _, _ in _valued(argv):
        if name in TRAINER_OUTPUTS or (is_output_name(name) and name not in reads):
            target = redirected
        elif name in CACHES:
            target = caches
        elif name in INPUTS or name in reads:
            target = kept
        else:
            target = refused
        if name not in target:
            target.append(name)
    has_output = any(normal_name(word) == "output_dir" for word in argv)
    return PathArgs(tuple(redirected), tuple(kept), tuple(caches), tuple(refused), trainer and not has_output)


def refuse(found: PathArgs) -> None:
    """Raise the one sentence for arguments compat cannot tell read from written."""
    if not found.refused:
        return
    names = ", ".join(f"--{name}" for name in found.refused)
    example = " ".join(f"--reads {name}" for name in found.refused)
    raise CompatError(f"compat tune cannot tell whether your command writes into the path it gives {names}: its runs may not write where you keep things.",
                      f"If the runs only read it, say so with {example} (before --); if they write there, name it as an output "
                      "(e.g. --save_dir) and compat tune points it into each run's own folder.")


def redirect(argv: Sequence[str], found: PathArgs, folder: Path) -> list[str]:
    """``argv`` with every redirected argument's value replaced by a path under ``folder`` (one run's), a fresh
    ``folder/K/<its last component>`` each (K its place on the command line; the component kept only where it is a
    plain name); plus ``--output_dir folder/output_dir`` where ``found.add_output_dir``. The folders K are created, the
    paths themselves are left for the run to create (a file or a folder)."""
    words = list(argv)
    for index, (name, at, value) in enumerate(_valued(argv)):
        if name not in found.redirected:
            continue
        last = Path(value.rstrip("/")).name
        place = folder / str(index)
        place.mkdir(parents=True, exist_ok=True)
        target = str(place / (last if _BASENAME.fullmatch(last) else "out"))
        if "=" in words[at]:
            words[at] = words[at].partition("=")[0] + "=" + target
        else:
            words[at + 1] = target
    if found.add_output_dir:
        words += ["--output_dir", str(folder / "output_dir")]
    return words


def _valued(argv: Sequence[str]) -> list[tuple[str, int, str]]:
    """(name, index of the option's word, value) of every path-named long option with a value: ``--NAME=VALUE``, or
    ``--NAME VALUE`` where VALUE is no option itself."""
    found = []
    for at, word in enumerate(argv):
        name = normal_name(word)
        if not name or not (is_path_name(name) or name in TRAINER_OUTPUTS):
            continue
        if "=" in word:
            found.append((name, at, word.partition("=")[2]))
        elif at + 1 < len(argv) and (argv[at + 1] == "-" or not argv[at + 1].startswith("-")):  # argparse takes a lone '-' for a value
            found.append((name, at, argv[at + 1]))
    return found


def notes(found: PathArgs) -> list[str]:
    """What the output says about the command's paths."""
    said = []
    if found.redirected or found.add_output_dir:
        names = [f"--{name}" for name in found.redirected] + (["--output_dir (added: the Trainer would write trainer_output/ here)"] if found.add_output_dir else [])
        said.append(f"your command's outputs ({', '.join(names)}) pointed into each run's own folder inside compat tune's scratch "
                    "folder, removed afterwards: nothing was written where they point on your command line")
    if found.kept:
        said.append(f"kept as given, read only: {', '.join('--' + name for name in found.kept)}")
    if found.caches:
        said.append(f"kept as given, a cache the runs fill as your own runs do: {', '.join('--' + name for name in found.caches)}")
    return said
