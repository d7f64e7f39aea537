"""The training job of bench/watch_bench.py: a real Hugging Face Trainer run of the tiny GPT-2 compat doctor --live's
Trainer step uses (GPT2Config vocab 128, 2 layers, 64 wide; built from its config, nothing downloaded) on gloo, each
step timed by a TrainerCallback. Rank 0 writes the step times (after WATCH_BENCH_WARMUP warm-up steps) as JSON to
WATCH_BENCH_OUT. WATCH_BENCH_STEPS steps (default 120), batch WATCH_BENCH_BATCH (default 8), sequence 32.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

steps = int(os.environ.get("WATCH_BENCH_STEPS", "120"))
warmup = int(os.environ.get("WATCH_BENCH_WARMUP", "10"))
batch = int(os.environ.get("WATCH_BENCH_BATCH", "8"))


class Samples(torch.utils.data.Dataset):
    def __init__(self, count):
        self.rows = torch.randint(64, 128, (count, 32), generator=torch.Generator().manual_seed(7))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "attention_mask": torch.ones_like(self.rows[i]), "labels": self.rows[i].clone()}


times = []


class Timer(TrainerCallback):
    def on_step_begin(self, *a, **k):
        self.start = time.perf_counter()

    def on_step_end(self, *a, **k):
        times.append(time.perf_counter() - self.start)


dist.init_process_group("gloo")
torch.manual_seed(1234)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2))
args = TrainingArguments(output_dir=f"/tmp/watch-bench-{os.getpid()}", per_device_train_batch_size=batch, max_steps=steps, learning_rate=1e-3,
                         logging_steps=10_000, save_strategy="no", report_to=[], disable_tqdm=True, seed=1234, use_cpu=True, ddp_backend="gloo",
                         ddp_find_unused_parameters=False, average_tokens_across_devices=False, remove_unused_columns=False, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Samples(steps * batch * dist.get_world_size()), callbacks=[Timer()]).train()
if dist.get_rank() == 0 and os.environ.get("WATCH_BENCH_OUT"):
    with open(os.environ["WATCH_BENCH_OUT"], "w") as handle:
        json.dump({"step_seconds": times[warmup:]}, handle)
dist.barrier()
dist.destroy_process_group()
