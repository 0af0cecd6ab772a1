"""The program `gemmlab profile` runs under Nsight Compute: every kernel launched once to compile
and warm up, then once more between cudaProfilerStart/Stop (ncu --profile-from-start off sees only
those). python3 -m gemmlab.profile_target MxNxK [kernel ...]"""

import sys

import torch

import gemmlab
from gemmlab import registry
from gemmlab.check import precision_of

dims = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "2048").lower().split("x")]
M, N, K = dims * 3 if len(dims) == 1 else dims
ids = sys.argv[2:] or [k.id for k in registry.kernels()]
inputs = {}
for kid in ids:  # each kernel in its first dtype (float32 for the SIMT ladder and TF32, bf16 for tensor cores)
    dt = registry.get(kid).dtypes[0]
    if dt not in inputs:
        inputs[dt] = ((torch.rand(M, K, device="cuda") * 2 - 1).to(dt), (torch.rand(K, N, device="cuda") * 2 - 1).to(dt))


def run(kid: str) -> None:
    dt = registry.get(kid).dtypes[0]
    gemmlab.gemm(*inputs[dt], kernel=kid, precision=precision_of(kid, dt))


for kid in ids:
    run(kid)  # the first launch compiles and loads
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kid in ids:
    run(kid)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
