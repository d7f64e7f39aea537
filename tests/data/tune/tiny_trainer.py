"""A tiny HF Trainer script, unchanged by compat tune's protocol: a linear regression model trained by the Trainer
with the flags of its command line (compat tune sets --max_steps, --logging_steps, the batch). Used by
tests/tune/test_tune_real.py and to record tests/data/tune/*.log."""

import sys

import torch
from transformers import HfArgumentParser, Trainer, TrainingArguments


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 1)

    def forward(self, x, labels=None):
        out = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(512, 16, generator=generator)
        self.y = self.x[:, :4].sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def main():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(sys.argv[1:])
    torch.manual_seed(0)
    Trainer(model=Regression(), args=args, train_dataset=Data()).train()


if __name__ == "__main__":
    main()
