"""A hand-written DDP loop on CPUs with oneCCL and IPEX, as the oneCCL bindings' README and the IPEX tutorials wrote it."""
import os

import intel_extension_for_pytorch as ipex
import oneccl_bindings_for_pytorch  # noqa: F401  registers the ccl backend
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "127.0.0.1")
os.environ["MASTER_PORT"] = "29500"
os.environ["RANK"] = str(os.environ.get("PMI_RANK", 0))
os.environ["WORLD_SIZE"] = str(os.environ.get("PMI_SIZE", 1))
os.environ.setdefault("CCL_WORKER_COUNT", "1")
os.environ["CCL_ATL_TRANSPORT"] = "ofi"

dist.init_process_group(backend="ccl")
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model.train()
model, optimizer = ipex.optimize(model, optimizer=optimizer, dtype=torch.bfloat16)
model = DDP(model)
for _step in range(10):
    data = torch.randn(64, 1024)
    target = torch.randint(0, 10, (64,))
    with torch.cpu.amp.autocast():
        loss = torch.nn.functional.cross_entropy(model(data), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
