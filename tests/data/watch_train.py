"""FIXTURE (tests only): a small DDP training loop on gloo for compat launch --watch's real-rank tests.

WATCH_FAULT (read by rank 1 only): ``stop@K`` rank 1 stops itself with SIGSTOP before step K; ``kill@K`` SIGKILL;
``exit@K`` sys.exit(3); ``slow`` a busy loop of WATCH_SLOW_S seconds (default 0.15) in every step. WATCH_STEPS: steps
(default 40), WATCH_STEP_S: a sleep per step (default 0.05). WATCH_BACKEND: the backend (default gloo; ccl imports
oneccl_bindings_for_pytorch first, as a oneCCL script does: the tests give it tests/fixture_ccl.py's FIXTURE). WATCH_SYNC=1:
each step also averages its loss with dist.all_reduce before backward (a collective called through torch.distributed's
Python function, which compat's hook sees; DDP's own gradient all-reduces run in C++ and only the Flight Recorder sees them). Exit status WATCH_EXIT (default 0) when the loop ends, after a line
with the steps' time on stderr. Under mpirun, RANK / WORLD_SIZE come from PMI_RANK / PMI_SIZE.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

for ours, theirs in (("RANK", "PMI_RANK"), ("WORLD_SIZE", "PMI_SIZE")):  # under Intel MPI's mpirun, as a training script maps them
    if ours not in os.environ and theirs in os.environ:
        os.environ[ours] = os.environ[theirs]
backend = os.environ.get("WATCH_BACKEND", "gloo")
if backend == "ccl":
    import oneccl_bindings_for_pytorch  # noqa: F401  (registers the backend "ccl")
dist.init_process_group(backend)
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
fault = os.environ.get("WATCH_FAULT", "") if rank == 1 else ""
kind, _, at = fault.partition("@")
steps = int(os.environ.get("WATCH_STEPS", "40"))
sync = os.environ.get("WATCH_SYNC") == "1"
started = time.perf_counter()
for step in range(steps):
    if kind and at and step == int(at):
        print(f"rank {rank}: {kind} at step {step}", file=sys.stderr, flush=True)
        if kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "exit":
            sys.exit(3)
    if kind == "slow":
        end = time.perf_counter() + float(os.environ.get("WATCH_SLOW_S", "0.15"))
        while time.perf_counter() < end:
            pass
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    if sync:
        mean = loss.detach().clone()
        dist.all_reduce(mean)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(float(os.environ.get("WATCH_STEP_S", "0.05")))
seconds = time.perf_counter() - started
dist.destroy_process_group()
print(f"rank {rank}: done, {steps} steps in {seconds:.3f} s", file=sys.stderr, flush=True)
sys.exit(int(os.environ.get("WATCH_EXIT", "0")))
