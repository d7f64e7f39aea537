"""compat tune's protocol for a user's training command (``compat tune -- train.py …``): how the command is run for a
bounded number of steps and what is read from its output. Pure.

The protocol works with an HF Trainer script unchanged: compat recognises one by a TrainingArguments flag on its
command line (``--output_dir`` or ``--do_train``) and sets, for every run, overriding the same flags of the command:

* ``--max_steps N`` (the bounded run), ``--logging_steps 1`` and ``--logging_strategy steps`` (a loss line every
  step: the Trainer prints ``{'loss': 0.6931, 'grad_norm': …, 'learning_rate': …, 'epoch': …}`` on the main process),
  ``--save_strategy no`` (no checkpoints), ``--report_to none`` and ``--push_to_hub false`` (nothing sent; the
  command's push_to_hub and hub_* options are dropped, every spelling), ``--disable_tqdm true`` (no progress bar in the
  log). The command's options are read in every spelling HfArgumentParser and argparse take (tune/argv.py:
  ``--per-device-train-batch-size``, a unique prefix). Where the run writes is tune/paths.py's: ``--save_strategy no`` does not
  stop a script's own ``save_model()``, so the output arguments point into each run's own folder;
* the configuration's own Trainer flags: ``--ddp_backend gloo|ccl``, ``--bf16``, ``--torch_compile``;
* the same global batch in every configuration: ``--per_device_train_batch_size`` becomes the command's value (the
  Trainer's default 8 when it has none) divided by the ranks; a configuration whose ranks do not divide it is not
  run (the reference could not be compared).

What is read from rank 0's output: every logged ``'loss'`` in order (one per step: the losses the proof compares) and
the final metrics line's ``'train_steps_per_second'`` (numbers or quoted numbers: transformers 4 prints
``'loss': 2.3026`` (4 decimals), transformers 5 ``'loss': '2.303'`` (4 significant digits); the printing rounds, so
the proof's bound adds what each run's printing may have rounded away, read from the text itself: log_precision) and (the Trainer's own: steps over ``train_runtime``, which starts
after the model is loaded and the process group is up, so start-up is left out but the first steps count).

A command that is not a Trainer script must print the same two things itself: a line ``{'loss': X}`` per step and one
``{'train_steps_per_second': Y}`` at the end (compat then adds no flags, and passes the step count as
COMPAT_TUNE_STEPS). A run whose losses cannot be read is "unproven", never accepted.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Optional

from ..record import Record

DEFAULT_BATCH = 8  # TrainingArguments.per_device_train_batch_size's default
MAX_BATCH = 1 << 20  # a per-device batch past this is no batch a CPU run takes (and never a divisor to compute with)
STEPS_VAR = "COMPAT_TUNE_STEPS"
#: The widest fan-in assumed for a user's model (its dot products' length, which OpenMP threads split): hidden sizes of
#: models trained on CPUs are below it; it enters the proof's count of reduction terms.
ASSUMED_FAN_IN = 4096

_NUMBER = r"'?(-?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf))'?"
_LOSS = re.compile(r"['\"]loss['\"]:\s*" + _NUMBER)
_RATE = re.compile(r"['\"]train_steps_per_second['\"]:\s*" + _NUMBER)


class TrainerLog(Record):
    losses: tuple[float, ...]
    steps_per_second: Optional[float]
    precision: float  # what the printing of a loss may have rounded away, at most (log_precision)
    more: int = 0  # loss lines past MAX_LOSSES: counted, not kept


def is_trainer_command(argv: Sequence[str]) -> bool:
    """An HF Trainer command: --output_dir or --do_train in any spelling the Trainer's parser takes (tune/argv.py)."""
    from .argv import is_trainer

    return is_trainer(argv)


def script_words(argv: Sequence[str]) -> tuple[list[str], Optional[str]]:
    """The command as compat launch takes it (a script, -m MODULE or -c CODE first): a leading ``python`` word is
    dropped (the environment's interpreter runs the ranks), with a note saying so."""
    words = list(argv)
    if words and re.fullmatch(r"python[0-9.]*", os.path.basename(words[0])):
        return words[1:], f"the leading {words[0]!r} was dropped: each rank runs the script with the measured environment's interpreter"
    return words, None


BATCH = "per_device_train_batch_size"
#: the Trainer options each run sets (replaced in the command, in every spelling argparse reads as one of them)
VALUED = ("max_steps", "logging_steps", "logging_strategy", "save_strategy", "report_to", "disable_tqdm", "ddp_backend", BATCH,
          "per_gpu_train_batch_size")  # transformers 4's per_gpu_train_batch_size overrides the per-device one: dropped
BOOLEAN = ("bf16", "torch_compile", "fp16")


def _value(argv: Sequence[str], name: str) -> Optional[str]:
    """The last value the command gives the Trainer option ``name``, in any spelling that means it alone."""
    from .argv import arguments, resolved

    found = None
    for arg in arguments(argv):
        if arg.kind == "long" and arg.values and resolved(arg.name) == name:
            found = arg.values[0]
    return found


def _without(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """``argv`` without every option argparse may read as one of ``names`` or as a Hub option (push_to_hub, hub_*),
    with its value words (a bool option's only where they are true/false words)."""
    from .argv import BOOL_WORDS, BOOLS, KNOWN, arguments, candidates

    drop: set[int] = set()
    for arg in arguments(argv):
        meant = candidates(arg.name) if arg.kind == "long" else frozenset()
        kinds = {KNOWN[name] for name in meant}
        if not (meant & set(names) or "hub" in kinds):
            continue
        end = arg.end
        if meant <= BOOLS and not arg.glued and not all(value.lower() in BOOL_WORDS for value in arg.values):
            end = arg.start + 1  # a word after a flag that is no true/false word is not its value
        drop.update(range(arg.start, end))
    return [word for at, word in enumerate(argv) if at not in drop]


def global_batch(argv: Sequence[str]) -> int:
    """The command's per-device batch (one process's, the reference's), DEFAULT_BATCH when not given; transformers 4's
    --per_gpu_train_batch_size first, as the Trainer reads it."""
    from ..values import whole_number

    text = _value(argv, "per_gpu_train_batch_size")
    text = text if text is not None else _value(argv, BATCH)
    number = whole_number(text, 1, MAX_BATCH) if text is not None else None
    return number if number is not None else DEFAULT_BATCH


def trainer_argv(argv: Sequence[str], steps: int, ranks: int, backend: Optional[str], dtype: str, compile: bool) -> Optional[list[str]]:
    """The command for one run of ``ranks`` ranks; None when the global batch does not divide over them."""
    batch = global_batch(argv)
    if batch % ranks:
        return None
    from .argv import appended

    extra = ["--max_steps", str(steps), "--logging_steps", "1", "--logging_strategy", "steps", "--save_strategy", "no",
             "--report_to", "none", "--push_to_hub", "false", "--disable_tqdm", "true", "--per_device_train_batch_size", str(batch // ranks)]
    if backend:
        extra += ["--ddp_backend", backend]
    if dtype == "bf16":
        extra.append("--bf16")
    if compile:
        extra.append("--torch_compile")
    return appended(_without(argv, VALUED + BOOLEAN), extra)


def read_log(text: str) -> TrainerLog:
    """The losses logged, in order, and the final train_steps_per_second (None: not printed), from a run's output."""
    reader = LogReader()
    reader.feed(text.encode("utf-8", errors="surrogateescape"))
    return reader.result()


MAX_LINE = 64 * 1024  # bytes of one output line looked at (a loss line is far shorter); the rest of a longer line is skipped
MAX_LOSSES = 10_000  # loss lines kept of one run (the protocol's runs log CMD_STEPS); more are counted, not kept
MAX_NUMBER = 64  # characters of a printed number


class LogReader:
    """read_log over a stream, fed a run's output in chunks as it comes (live/supervise.py's on_output): it keeps at most
    MAX_LINE bytes of an unfinished line and what it parsed (MAX_LOSSES losses, with their printed text for the
    precision), so a run that prints hundreds of MiB costs no more memory than one that prints a page."""

    def __init__(self) -> None:
        self.partial = bytearray()
        self.overlong = False  # the current line passed MAX_LINE: skipped to its end
        self.losses: list[float] = []
        self.texts: list[str] = []
        self.more = 0  # loss lines past MAX_LOSSES
        self.rate: Optional[float] = None

    def feed(self, chunk: bytes) -> None:
        pieces = re.split(rb"[\r\n]", chunk)
        for piece in pieces[:-1]:  # each ends a line
            if not self.overlong:
                self.partial += piece[: MAX_LINE - len(self.partial)]
                self._line(bytes(self.partial))
            self.partial.clear()
            self.overlong = False
        if not self.overlong:
            self.partial += pieces[-1][: MAX_LINE + 1 - len(self.partial)]
            if len(self.partial) > MAX_LINE:
                self._line(bytes(self.partial[:MAX_LINE]))
                self.partial.clear()
                self.overlong = True

    def _line(self, raw: bytes) -> None:
        at = raw.find(b"{")
        if at < 0:
            return
        body = raw[at:].decode("utf-8", errors="replace")
        loss = _LOSS.search(body)
        if loss and len(loss.group(1)) <= MAX_NUMBER:
            if len(self.losses) < MAX_LOSSES:
                self.losses.append(_float(loss.group(1)))
                self.texts.append(loss.group(1))
            else:
                self.more += 1
        found = _RATE.search(body)
        if found and len(found.group(1)) <= MAX_NUMBER:
            self.rate = _float(found.group(1))

    def result(self) -> TrainerLog:
        """What was read, the unfinished last line included."""
        if self.partial and not self.overlong:
            self._line(bytes(self.partial))
            self.partial.clear()
        rate = self.rate
        return TrainerLog(tuple(self.losses), rate if rate is not None and math.isfinite(rate) and rate > 0 else None, log_precision(self.texts), self.more)


def log_precision(texts: Sequence[str]) -> float:
    """What the printing of these losses may have rounded away, at most: the printer kept either a fixed number of
    decimals (transformers 4: 4) or of significant digits (transformers 5: 4), and dropped trailing zeros ('1.1'), so
    each value is taken to the finer of the two places the log shows it uses (its most decimals, its most significant
    digits): never coarser than the truth, so the slack never widens the bound beyond the printing's own rounding."""
    numbers = [(text, _float(text)) for text in texts if math.isfinite(_float(text)) and printed_precision(text) > 0]
    if not numbers:
        return 0.0
    places = [-math.log10(2 * printed_precision(text)) for text, _ in numbers]  # decimals, 10^-places = the last digit's unit
    decimals = max(places)
    significant = max(p + math.floor(math.log10(abs(v))) + 1 for (_, v), p in zip(numbers, places) if v != 0) if any(v for _, v in numbers) else decimals
    worst = 0.0
    for _, value in numbers:
        by_decimals = 0.5 * 10.0 ** (-decimals)
        by_digits = 0.5 * 10.0 ** (math.floor(math.log10(abs(value))) - significant + 1) if value else by_decimals
        worst = max(worst, min(by_decimals, by_digits))
    return worst


def printed_precision(text: str) -> float:
    """Half a unit in the last place of a printed decimal: '3.802' 0.0005, '2.3026' 0.00005, '5e-05' 5e-06, '12' 0.5."""
    mantissa, _, exponent = text.lower().partition("e")
    if not re.fullmatch(r"-?[0-9]*\.?[0-9]*", mantissa) or not re.search(r"[0-9]", mantissa):
        return 0.0
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if re.fullmatch(r"[-+]?[0-9]+", exponent) else 0))


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
