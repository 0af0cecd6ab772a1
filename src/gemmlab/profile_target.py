"""The program `gemmlab profile` runs under Nsight Compute: every kernel launched once to compile
and warm up, then once more between cudaProfilerStart/Stop (ncu --profile-from-start off sees only
those). python3 -m gemmlab.profile_target MxNxK [kernel ...]; "cublas" is torch.mm in the dtype of
the other kernel named."""

import sys

import torch

import gemmlab
from gemmlab import registry
from gemmlab.check import precision_of

CUBLAS = "cublas"  # torch.mm in the dtype (and TF32 setting) of the kernel it is compared with

dims = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "2048").lower().split("x")]
M, N, K = dims * 3 if len(dims) == 1 else dims
ids = sys.argv[2:] or [k.id for k in registry.kernels()]
ours = [k for k in ids if k != CUBLAS]
ref_dtype = registry.get(ours[0]).dtypes[0] if ours else torch.float32
torch.backends.cuda.matmul.allow_tf32 = bool(ours) and precision_of(ours[0], ref_dtype) == "tf32"


def dtype_of(kid: str) -> torch.dtype:
    return ref_dtype if kid == CUBLAS else registry.get(kid).dtypes[0]


inputs = {}
for kid in ids:  # each kernel in its first dtype (float32 for the SIMT ladder and TF32, bf16 for tensor cores)
    dt = dtype_of(kid)
    if dt not in inputs:
        inputs[dt] = ((torch.rand(M, K, device="cuda") * 2 - 1).to(dt), (torch.rand(K, N, device="cuda") * 2 - 1).to(dt))


def run(kid: str) -> None:
    dt = dtype_of(kid)
    if kid == CUBLAS:
        torch.mm(*inputs[dt])
    else:
        gemmlab.gemm(*inputs[dt], kernel=kid, precision=precision_of(kid, dt))


for kid in ids:
    run(kid)  # the first launch compiles and loads
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for kid in ids:
    run(kid)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
