# The changes the 2021 Hugging Face blog made to run_glue.py for oneCCL (torch_ccl before 1.12), in context.
import os
import sys

import torch_ccl  # noqa: F401
from transformers import HfArgumentParser, TrainingArguments


def main():
    # add local rank for cpu-dist
    sys.argv.append("--local_rank")
    sys.argv.append(str(os.environ.get("PMI_RANK", -1)))

    # ccl specific environment variables
    if "ccl" in sys.argv:
        os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = "29500"
        os.environ["RANK"] = str(os.environ.get("PMI_RANK", -1))
        os.environ["WORLD_SIZE"] = str(os.environ.get("PMI_SIZE", -1))

    parser = HfArgumentParser(TrainingArguments)
    return parser.parse_args_into_dataclasses()


if __name__ == "__main__":
    main()
