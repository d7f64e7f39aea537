"""compat tune's own tiny training workload: one rank. Run by the *target* interpreter, never imported by compat.

Standard library only at module level (Python 3.6+); torch (and, for the ccl backend, the oneCCL bindings) is
imported inside ``main``. The data, the model's initial parameters and the global batch are the same in every
configuration (fixed seeds), so a run can be compared with the single-process reference:

* data: GLOBAL_BATCH samples of FEATURES inputs and one target, the same every step;
* model: Linear(FEATURES, HIDDEN), tanh, Linear(HIDDEN, 1); MSE loss; SGD (lr 0.01);
* rank r of W trains on rows [r*B/W, (r+1)*B/W) under DistributedDataParallel (the gradient is averaged over the
  ranks: the global batch's gradient);
* every step's loss is averaged over the ranks once at the end (one collective, outside the timed steps);
* the first ``--warmup`` steps are not timed; the others are, one by one (rank 0's clock: DDP's allreduce keeps the
  ranks in step).

Rank 0 writes ``<out>/result.json``: losses, final parameters (float32 values and their SHA-256), step times.
A rank that fails writes ``<out>/error-<rank>.txt`` (the traceback) and exits 1.

Test hook (a FIXTURE): COMPAT_TUNE_FIXTURE_PERTURB=FACTOR makes rank 0 of a run with more than one rank multiply its
gradients by FACTOR before every optimizer step (FACTOR@STEP: before step STEP's only, 1-based): a configuration that
trains something else, which compat tune's correctness proof must reject. Only the test suite sets it. (A training
command's ranks get the same variable through fixture_site/sitecustomize.py, which perturbs rank 1 before DDP's
allreduce.)
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import time
import traceback

GLOBAL_BATCH = 120  # divides over 1, 2, 3, 4, 5, 6, 8 ranks
FEATURES = 64
HIDDEN = 128  # the widest fan-in
LR = 0.01
FIXTURE_VAR = "COMPAT_TUNE_FIXTURE_PERTURB"


def arguments(argv):
    parser = argparse.ArgumentParser(prog="compat-tune-workload")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--backend", choices=("gloo", "ccl"), default="gloo")
    parser.add_argument("--compile", action="store_true")
    return parser.parse_args(argv)


def main(argv):
    args = arguments(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        return run(args, rank, world)
    except BaseException:
        with open(os.path.join(args.out, "error-%d.txt" % rank), "w") as handle:
            handle.write(traceback.format_exc()[-8000:])
        return 1


def run(args, rank, world):
    import torch

    if GLOBAL_BATCH % world:
        raise SystemExit("the global batch of %d does not divide over %d ranks" % (GLOBAL_BATCH, world))
    dist = join_group(args.backend, rank, world)
    inputs, targets = rank_data(torch, rank, world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))
    trained = wrapped(torch, model, dist is not None, args.compile)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    perturb, perturbed_step = fixture_perturbation(rank, world)
    losses, times = [], []
    for step in range(args.steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = step_loss(torch, trained, inputs, targets, args.dtype)
        loss.backward()
        if perturb != 1.0 and perturbed_step in (None, step + 1):
            for parameter in model.parameters():
                parameter.grad.mul_(perturb)
        optimizer.step()
        losses.append(loss.detach().clone())
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    every = torch.stack(losses).double()
    if dist is not None:
        dist.all_reduce(every)
        every /= world
    if rank == 0:
        write_result(args.out, torch, model, every, times, world)
    if dist is not None:
        dist.destroy_process_group()
    return 0


def join_group(backend, rank, world):
    """torch.distributed with this rank's process group formed, or None for a single rank."""
    if world <= 1:
        return None
    import torch.distributed as dist

    if backend == "ccl":
        import oneccl_bindings_for_pytorch  # noqa: F401  (registers the ccl backend)
    dist.init_process_group(backend, rank=rank, world_size=world)
    return dist


def wrapped(torch, model, distributed, compiled):
    """The model as the steps call it: under DistributedDataParallel across ranks, then torch.compile'd when asked."""
    trained = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    return torch.compile(trained) if compiled else trained


def rank_data(torch, rank, world):
    """(inputs, targets) of this rank: its share of the global batch, the same data in every configuration."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    targets = inputs[:, :8].sum(dim=1, keepdim=True).tanh() + 0.1 * torch.randn(GLOBAL_BATCH, 1, generator=generator)
    share = GLOBAL_BATCH // world
    return inputs[rank * share:(rank + 1) * share], targets[rank * share:(rank + 1) * share]


def fixture_perturbation(rank, world):
    """(the factor this rank multiplies its gradients by, the 1-based step it does so at or None for every step):
    COMPAT_TUNE_FIXTURE_PERTURB's, for rank 0 of a run of several ranks; 1.0 otherwise."""
    factor_text, at, step_text = (os.environ.get(FIXTURE_VAR) or "1").partition("@")
    perturb = float(factor_text) if world > 1 and rank == 0 else 1.0
    return perturb, int(step_text) if at else None


def step_loss(torch, trained, inputs, targets, dtype):
    """One forward pass and its MSE loss (in fp32), under bf16 autocast for the bf16 configurations."""
    if dtype == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = trained(inputs)
    else:
        out = trained(inputs)
    return torch.nn.functional.mse_loss(out.float(), targets)


def write_result(folder, torch, model, every, times, world):
    """Rank 0's ``<folder>/result.json`` (written whole or not at all): the losses, final parameters and their digest, step times."""
    flat = [float(v) for p in model.parameters() for v in p.detach().float().reshape(-1).tolist()]
    result = {"losses": [float(v) for v in every.tolist()], "params": flat,
              "digest": hashlib.sha256(struct.pack("<%df" % len(flat), *flat)).hexdigest(),
              "step_seconds": times, "world_size": world, "threads": torch.get_num_threads(),
              "global_batch": GLOBAL_BATCH, "fan_in": max(FEATURES, HIDDEN), "torch": torch.__version__}
    tmp = os.path.join(folder, "result.json.tmp")
    with open(tmp, "w") as handle:
        json.dump(result, handle)
    os.replace(tmp, os.path.join(folder, "result.json"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
