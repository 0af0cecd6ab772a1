"""The program `gemmlab profile` runs under Nsight Compute: every kernel launched once to compile
and warm up, then once more between cudaProfilerStart/Stop (ncu --profile-from-start off sees only
those). python3 -m gemmlab.profile_target MxNxK [kernel ...]"""

import sys

import torch

import gemmlab
from gemmlab import registry

dims = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "2048").lower().split("x")]
M, N, K = dims * 3 if len(dims) == 1 else dims
ids = sys.argv[2:] or [k.id for k in registry.kernels()]
a = torch.rand(M, K, device="cuda") * 2 - 1
b = torch.rand(K, N, device="cuda") * 2 - 1
for kid in ids:
    gemmlab.gemm(a, b, kernel=kid)  # first launch compiles and loads
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kid in ids:
    gemmlab.gemm(a, b, kernel=kid)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
