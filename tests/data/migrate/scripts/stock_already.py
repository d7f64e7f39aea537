"""A training script already on stock PyTorch: nothing to report."""
import torch
import torch.distributed as dist

dist.init_process_group(backend="gloo")
model = torch.compile(torch.nn.Linear(16, 16))
with torch.autocast("cpu", dtype=torch.bfloat16):
    model(torch.randn(4, 16)).sum().backward()
