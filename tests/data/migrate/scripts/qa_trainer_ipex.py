"""Fine-tune a question-answering model with the Trainer on CPUs (shape of transformers' run_qa.py, trimmed)."""
import logging
import os
import sys

import torch
from datasets import load_dataset
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments

logger = logging.getLogger(__name__)

try:
    import intel_extension_for_pytorch as ipex  # noqa: F401  (the guides: "IPEX provides performance optimizations for CPU training")
except ImportError:
    ipex = None


def main():
    parser = HfArgumentParser(TrainingArguments)
    (training_args,) = parser.parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained("google-bert/bert-large-uncased")
    model = AutoModelForQuestionAnswering.from_pretrained("google-bert/bert-large-uncased")
    raw = load_dataset("squad")
    if ipex is not None and not training_args.use_ipex:
        model.train()
        model = ipex.optimize(model, dtype=torch.bfloat16 if training_args.bf16 else torch.float32)
    trainer = Trainer(model=model, args=training_args, train_dataset=raw["train"], tokenizer=tokenizer)
    trainer.train()
    logger.info("done on %s", os.uname()[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
