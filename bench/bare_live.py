"""The hand-written baseline for bench/live_bench.py: what a user would write to check the same things by hand.

One rank of: init_process_group(gloo) from the launcher's variables, an fp32 and a bf16 allreduce, the same
bandwidth loop (1/16/64 MiB), a 3-step Trainer run of the same tiny GPT-2 from a config with the same
arguments, then the shutdown sequence. No status files, no checks, no stack dumps: the floor compat is
measured against. Launch it with torchrun (or mpirun after mapping PMI_* yourself).
"""

import gc
import os
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
t = (torch.arange(1 << 16, dtype=torch.float32) % 1024) * (rank + 1)
dist.all_reduce(t)
b = ((torch.arange(1 << 16) % 16).to(torch.bfloat16)) * (rank + 1)
dist.all_reduce(b)
for mib, iterations in ((1, 10), (16, 5), (64, 3)):
    x = torch.ones(mib * (1 << 20) // 4)
    dist.all_reduce(x)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(x)
    if rank == 0:
        print(f"{mib} MiB: {x.numel() * 4 / ((time.perf_counter() - start) / iterations) / 1e9:.2f} GB/s", flush=True)


class Samples(torch.utils.data.Dataset):
    def __init__(self):
        self.rows = torch.randint(64, 128, (64, 16), generator=torch.Generator().manual_seed(7))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "attention_mask": torch.ones_like(self.rows[i]), "labels": self.rows[i].clone()}


torch.manual_seed(1234)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2))
args = TrainingArguments(output_dir=f"/tmp/bare-live-{os.getpid()}", per_device_train_batch_size=4, max_steps=3, learning_rate=1e-3, logging_steps=1,
                         save_strategy="no", report_to=[], disable_tqdm=True, seed=1234, use_cpu=True, ddp_backend="gloo",
                         ddp_find_unused_parameters=False, average_tokens_across_devices=False, remove_unused_columns=False)
trainer = Trainer(model=model, args=args, train_dataset=Samples())
trainer.train()
del trainer, model
gc.collect()
dist.barrier()
dist.destroy_process_group()
