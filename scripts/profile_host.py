"""Where gemm()'s host time goes: cProfile over many calls of one small problem on a GPU.

    PYTHONPATH=src python3 scripts/profile_host.py [bf16|fp16|fp32|tf32] [M N K] [calls]

Prints the functions with the most time of their own, and the mean wall time per call, with out=
given (no allocation) and without."""

import cProfile
import pstats
import sys
import time

import torch

import gemmlab

DTYPES = {"bf16": (torch.bfloat16, "fp32"), "fp16": (torch.float16, "fp32"), "fp32": (torch.float32, "fp32"),
          "tf32": (torch.float32, "tf32")}  # fmt: skip


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    M, N, K = (int(x) for x in sys.argv[2:5]) if len(sys.argv) > 4 else (64, 64, 64)
    calls = int(sys.argv[5]) if len(sys.argv) > 5 else 2000
    dtype, precision = DTYPES[name]
    a = torch.randn(M, K, device="cuda").to(dtype)
    b = torch.randn(K, N, device="cuda").to(dtype)
    out = torch.empty(M, N, device="cuda", dtype=dtype)
    for _ in range(50):
        gemmlab.gemm(a, b, out=out, precision=precision)
    torch.cuda.synchronize()
    for label, kw in (("out given", {"out": out}), ("out allocated", {})):
        t0 = time.perf_counter()
        for _ in range(calls):
            gemmlab.gemm(a, b, precision=precision, **kw)
        torch.cuda.synchronize()
        print(f"{name} {M}x{N}x{K}, {label}: {(time.perf_counter() - t0) / calls * 1e6:.1f} us a call")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        gemmlab.gemm(a, b, out=out, precision=precision)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
