"""A training command's words as argparse and HF's HfArgumentParser read them (``compat tune -- train.py …``): which
word is an option, its value words, a positional; and which of the HF Trainer's options a spelling may mean. Pure.

Spellings: HfArgumentParser gives every field ``--field_name`` and ``--field-name`` (transformers
src/transformers/hf_argparser.py, HfArgumentParser._parse_dataclass_field: ``long_options.append(f"--{field.name.replace('_',
'-')}")``), so a name is read with ``-`` as ``_``; argparse takes any unique prefix of an option (allow_abbrev, its
default), so ``--output_d`` is ``--output_dir`` where the parser has no other option beginning so. A name may mean every
known option it is a prefix of (``candidates``): which one argparse picks depends on the parser (the transformers
release, the script's own options); a prefix of two of them in one parser is argparse's error, and the run fails.

The known options: TrainingArguments' fields in transformers 4.52.4, 4.56.2 and 5.24.0 (src/transformers/training_args.py
of each, read from the installed wheels), with HfArgumentParser's ``--no_FIELD`` of the bool fields whose default is
True; and the ModelArguments / DataTrainingArguments of HF's example scripts (examples/pytorch/language-modeling/run_clm.py
at 00d481d1; the inputs of run_glue.py and run_image_classification.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from ..record import Record

#: kinds: "output" a folder the Trainer writes; "input" a path it only reads; "cache" filled by content; "bool" a
#: flag taking at most one of string_to_bool's words; "list" one value or more (nargs="+"); "value" one value the
#: Trainer writes nowhere; "hub" sends to the Hugging Face Hub (compat drops it)
_TRAINING_ARGUMENTS = {
    "output": "output_dir logging_dir",
    "input": "resume_from_checkpoint deepspeed fsdp_config accelerator_config",
    "bool": "average_tokens_across_devices bf16 fp16 bf16_full_eval fp16_full_eval tf32 activation_checkpointing gradient_checkpointing "
            "torch_compile use_liger_kernel use_cache auto_find_batch_size logging_first_step log_on_each_node logging_nan_inf_filter "
            "disable_tqdm prediction_loss_only eval_on_start eval_do_concat_batches eval_use_gather_object batch_eval_metrics save_only_model "
            "save_on_each_node enable_jit_checkpoint load_best_model_at_end greater_is_better ignore_data_skip "
            "restore_callback_states_from_checkpoint full_determinism use_cpu dataloader_drop_last dataloader_pin_memory "
            "dataloader_persistent_workers dataloader_in_order remove_unused_columns ddp_find_unused_parameters ddp_broadcast_buffers "
            "ddp_static_graph skip_memory_metrics do_train do_eval do_predict adafactor group_by_length include_inputs_for_metrics "
            "include_tokens_per_second jit_mode_eval no_cuda overwrite_output_dir save_safetensors tpu_metrics_debug use_ipex "
            "use_legacy_prediction_loop use_mps_device",
    "list": "optim_target_modules report_to include_for_metrics label_names",
    "value": "per_device_train_batch_size num_train_epochs max_steps learning_rate lr_scheduler_type lr_scheduler_kwargs warmup_steps optim "
             "optim_args weight_decay adam_beta1 adam_beta2 adam_epsilon gradient_accumulation_steps max_grad_norm label_smoothing_factor "
             "activation_checkpointing_kwargs gradient_checkpointing_kwargs torch_compile_backend torch_compile_mode liger_kernel_config "
             "neftune_noise_alpha torch_empty_cache_steps logging_strategy logging_steps include_num_input_tokens_seen log_level "
             "log_level_replica run_name project trackio_space_id trackio_bucket_id trackio_static_space_id eval_strategy eval_steps "
             "eval_delay per_device_eval_batch_size eval_accumulation_steps save_strategy save_steps save_total_limit metric_for_best_model "
             "seed data_seed parallelism_config dataloader_num_workers dataloader_prefetch_factor dataloader_multiprocessing_context "
             "train_sampling_strategy length_column_name ddp_bucket_cap_mb ddp_backend ddp_timeout fsdp debug local_rank _n_gpu "
             "fp16_backend fp16_opt_level fsdp_min_num_params fsdp_transformer_layer_cls_to_wrap half_precision_backend mp_parameters "
             "past_index per_gpu_eval_batch_size per_gpu_train_batch_size ray_scope torchdynamo tpu_num_cores warmup_ratio",
    "hub": "push_to_hub hub_token hub_private_repo hub_model_id hub_strategy hub_always_push hub_revision push_to_hub_model_id "
           "push_to_hub_organization push_to_hub_token",
}
#: HfArgumentParser's --no_FIELD of the bool fields whose default is True (store_false)
_NO_FLAGS = ("average_tokens_across_devices log_on_each_node logging_nan_inf_filter eval_do_concat_batches dataloader_pin_memory "
             "dataloader_in_order remove_unused_columns skip_memory_metrics save_safetensors use_fast_tokenizer keep_linebreaks")
_EXAMPLE_ARGUMENTS = {
    "input": "model_name_or_path config_name tokenizer_name train_file validation_file test_file data_dir dataset_name "
             "dataset_config_name train_dir validation_dir test_dir image_processor_name feature_extractor_name",
    "cache": "cache_dir",
    "bool": "use_fast_tokenizer trust_remote_code streaming overwrite_cache keep_linebreaks",
    "value": "model_type config_overrides model_revision token dtype torch_dtype max_train_samples max_eval_samples block_size "
             "validation_split_percentage preprocessing_num_workers",
}


def _table() -> dict[str, str]:
    kinds: dict[str, str] = {}
    for table in (_TRAINING_ARGUMENTS, _EXAMPLE_ARGUMENTS):
        for kind, names in table.items():
            kinds.update(dict.fromkeys(names.split(), kind))
    kinds.update({f"no_{name}": "bool" for name in _NO_FLAGS.split()})
    return kinds


#: every known option's name (``_`` spelling) and its kind
KNOWN = _table()
#: the known options that are bool fields (HfArgumentParser: at most one true/false word after them), Hub ones included
BOOLS = frozenset(name for name, kind in KNOWN.items() if kind == "bool") | {"push_to_hub", "hub_private_repo", "hub_always_push"}
#: known options compat reads wherever they appear, in any command: the example scripts' inputs and caches, the Trainer's
#: output folders (their names say what they are); the rest is known in a Trainer command only
EVERYWHERE = frozenset(name for name, kind in KNOWN.items() if kind in ("input", "cache", "output"))

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,99}")
_SHORT = re.compile(r"-([A-Za-z0-9])=?(.*)", re.DOTALL)
#: a number as Python and argparse read one (argparse takes a negative number for a value, not an option)
NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
#: HfArgumentParser's string_to_bool words (transformers src/transformers/hf_argparser.py), any case
BOOL_WORDS = frozenset({"yes", "true", "t", "y", "1", "no", "false", "f", "n", "0"})


class Arg(Record):
    """One argument of the command: an option with its value words, or a positional word."""

    kind: str  # "long", "short", "positional", "bad" (a word beginning with '-' that argparse reads as no option name)
    written: str  # as on the command line, without a glued value: "--save_d", "-o", "config.json"
    name: str  # "--Save-D" -> "save_d", "-o" -> "o"; a positional: its word
    start: int  # index of its first word
    end: int  # one past its last word (its values included)
    values: tuple[str, ...]  # its value words (a glued one: "--x=1" -> ("1",))
    glued: bool = False  # the value is in the option's own word

    @property
    def value_at(self) -> Optional[int]:
        """The index of the word holding its (first) value."""
        if not self.values:
            return None
        return self.start if self.glued else self.start + 1


def normal(word: str) -> str:
    """``--Output-Dir=x`` -> ``output_dir``; "" for a word that is no long option argparse could name."""
    body = word.partition("=")[0]
    if not body.startswith("--") or not _NAME.fullmatch(body[2:]):
        return ""
    return body[2:].lower().replace("-", "_")


def candidates(name: str, trainer: bool = True) -> frozenset[str]:
    """The known options ``name`` (normal form) may mean: itself where it is one, else (a Trainer command) every known
    option it is a proper prefix of (argparse's abbreviations). In a command that is no Trainer's only the EVERYWHERE
    ones, spelled in full: the script's own parser decides what a prefix means there."""
    if not name:
        return frozenset()
    if not trainer:
        return frozenset({name}) if name in EVERYWHERE else frozenset()
    if name in KNOWN:
        return frozenset({name})
    return frozenset(known for known in KNOWN if known.startswith(name))


def resolved(name: str, trainer: bool = True) -> Optional[str]:
    """The one known option ``name`` means (exact or a unique prefix), None otherwise."""
    found = candidates(name, trainer)
    return next(iter(found)) if len(found) == 1 else None


TRAINER_MARKERS = ("output_dir", "do_train")


def is_trainer(words: Sequence[str]) -> bool:
    """An HF Trainer command: one of its options reads as TrainingArguments' output_dir or do_train (any spelling
    HfArgumentParser and argparse take for them: ``--do-train``, ``--output_d``)."""
    return any(arg.kind == "long" and resolved(arg.name) in TRAINER_MARKERS for arg in arguments(words))


def is_option(word: str) -> bool:
    """A word argparse reads as an option: a leading '-', not '-' alone and not a negative number."""
    return word.startswith("-") and word != "-" and not NUMBER.fullmatch(word)


def first_argument(words: Sequence[str]) -> int:
    """Where the script's own arguments begin in ``words`` (a script, or -m MODULE / -c CODE, first)."""
    return 2 if words[:1] in (["-m"], ["-c"]) else 1


def arguments(words: Sequence[str], trainer: bool = True) -> list[Arg]:
    """The script's arguments in ``words`` (the command after its interpreter), as argparse splits them: a long option
    takes ``=VALUE`` or the next word that is no option (a known list option every such word; a known bool option only a
    true/false word; a ``--no_FIELD`` none); a short one ``-oVALUE``, ``-o=VALUE`` or the next word; after ``--``
    every word is positional."""
    found: list[Arg] = []
    at = first_argument(words)
    rest = False
    while at < len(words):
        word = words[at]
        if word == "--" and not rest:
            rest = True
            at += 1
            continue
        if rest or not is_option(word):
            arg = Arg("positional", word, word, at, at + 1, ())
        elif word.startswith("--"):
            arg = _long_option(words, at, trainer)
        else:
            arg = _short_option(words, at)
        found.append(arg)
        at = arg.end
    return found


def _takes(words: Sequence[str], at: int) -> bool:
    """Whether the word at ``at`` can be an option's value: there is one, and it is no option and not ``--``."""
    return at < len(words) and not is_option(words[at]) and words[at] != "--"


def _long_option(words: Sequence[str], at: int, trainer: bool) -> Arg:
    """The long option at ``at`` with its value words (see arguments)."""
    word = words[at]
    body, eq, value = word.partition("=")
    name = normal(word)
    if not name:
        return Arg("bad", body, body, at, at + 1, (value,) if eq else ())
    if eq:
        return Arg("long", body, name, at, at + 1, (value,), True)
    meant = resolved(name, trainer)
    end = at + 1
    if KNOWN.get(meant or "", "") == "list":
        while _takes(words, end):
            end += 1
    elif _takes(words, end) and not (meant and meant.startswith("no_")) \
            and (meant not in BOOLS or words[end].lower() in BOOL_WORDS):  # a flag's value: a true/false word only
        end += 1
    return Arg("long", body, name, at, end, tuple(words[at + 1:end]))


def _short_option(words: Sequence[str], at: int) -> Arg:
    """The short option at ``at`` with its glued or next-word value (see arguments)."""
    word = words[at]
    short = _SHORT.fullmatch(word)
    if not short:
        return Arg("bad", word, word, at, at + 1, ())
    if short.group(2) or "=" in word[:3]:
        return Arg("short", word[:2], short.group(1), at, at + 1, (short.group(2),), True)
    end = at + 2 if _takes(words, at + 1) else at + 1
    return Arg("short", word, short.group(1), at, end, tuple(words[at + 1:end]))


#: words taken for no path whatever the option: true/false, yes/no (any case); the single letters of BOOL_WORDS may be files
PLAIN_WORDS = frozenset({"true", "false", "yes", "no"})


def appended(words: Sequence[str], options: Sequence[str]) -> list[str]:
    """``words`` with ``options`` added where argparse still reads them as options: before the command's ``--``
    separator, if it has one (after it every word is positional), else at the end (the last of an option wins)."""
    words = list(words)
    at = first_argument(words)
    cut = words.index("--", at) if "--" in words[at:] else len(words)
    return words[:cut] + list(options) + words[cut:]


def plainly_no_path(value: str) -> bool:
    """A value that names no file: a number, or true/false/yes/no."""
    return bool(NUMBER.fullmatch(value)) or value.lower() in PLAIN_WORDS
