"""Throughput inference with IPEX's CPU runtime (IPEX tutorial shape) and a device check written for Intel GPUs."""
import intel_extension_for_pytorch as ipex
import torch
from intel_extension_for_pytorch.cpu.runtime import CPUPool, MultiStreamModule

device = "xpu" if torch.xpu.is_available() else "cpu"
model = torch.nn.Linear(256, 256).eval()
model = ipex.optimize(model)
pool = CPUPool(node_id=0)
streams = MultiStreamModule(model, num_streams=2, cpu_pool=pool)
with ipex.cpu.runtime.pin(pool):
    out = streams(torch.randn(32, 256))
ipex.set_fp32_math_mode(mode=ipex.FP32MathMode.BF32, device="cpu")
model.to(torch.device("xpu:0"))
