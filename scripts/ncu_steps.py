"""Launch each FP32 step once at one shape, for Nsight Compute to profile (scripts/gpu_run.sh and
the profile notes use it): python3 scripts/ncu_steps.py 2048 [kernel ...]"""

import sys

import torch

import gemmlab
from gemmlab import registry

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
ids = sys.argv[2:] or [k.id for k in registry.kernels()]
a = torch.rand(n, n, device="cuda") * 2 - 1
b = torch.rand(n, n, device="cuda") * 2 - 1
for kid in ids:
    gemmlab.gemm(a, b, kernel=kid)  # first launch compiles and loads
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kid in ids:
    gemmlab.gemm(a, b, kernel=kid)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
