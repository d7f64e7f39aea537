#!/usr/bin/env python3
"""Hand measurement (issue 24): does compat tune's own workload gain from ipex.optimize where IPEX is installed?

Run by the target interpreter, one process per variant (ipex.optimize changes process-wide state, so variants never
share a process): ``ENV/bin/python bench/tune_ipex_optimize.py DTYPE MODE`` with DTYPE fp32|bf16 and MODE plain (IPEX
never imported), import (imported, not used) or optimize (``ipex.optimize(model, optimizer=…, dtype=…)``). It runs the
workload's step loop (tune/workload.py: MLP 64-128-1, global batch 120, SGD lr 0.01, bf16 as autocast, 5 warm-up and 40
timed steps, one process) three times and prints each run's steps/s (1 / the median step) and its last loss. The
docs/commands/tune.md gives the loop over variants and what was measured.
"""

import statistics
import sys
import time

GLOBAL_BATCH, FEATURES, HIDDEN, LR = 120, 64, 128, 0.01


def run(dtype, optimize, steps=45, warmup=5):
    import torch

    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    targets = inputs[:, :8].sum(dim=1, keepdim=True).tanh() + 0.1 * torch.randn(GLOBAL_BATCH, 1, generator=generator)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    if optimize:
        import intel_extension_for_pytorch as ipex

        model.train()
        model, optimizer = ipex.optimize(model, optimizer=optimizer, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    times = []
    for step in range(steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        if dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(inputs)
        else:
            out = model(inputs)
        loss = torch.nn.functional.mse_loss(out.float(), targets)
        loss.backward()
        optimizer.step()
        if step >= warmup:
            times.append(time.perf_counter() - started)
    return 1.0 / statistics.median(times), loss.item()


def main(argv):
    dtype, mode = argv
    if mode == "import":
        import intel_extension_for_pytorch  # noqa: F401
    results = [run(dtype, mode == "optimize") for _ in range(3)]
    print(dtype, mode, " ".join(f"{rate:.0f}" for rate, _ in results), f"loss {results[-1][1]:.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
