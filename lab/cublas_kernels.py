"""Which kernels cuBLAS runs, shape by shape: torch.mm under torch.profiler, with both of torch's
BLAS back ends ('cublas' and 'cublaslt'), the kernel names, grids, blocks, registers and shared
memory the trace records, and their durations. The names of cuBLAS's Hopper kernels carry their
tile, stages and cluster shape (e.g. nvjet_sm90_tst_256x128_64x4_1x2_...: a 256 x 128 tile, K
stages of 64, four of them, clusters of 1 x 2).

  PYTHONPATH=src python3 lab/cublas_kernels.py [--tf32 | --dtype fp32] [--layout nt] SHAPE...

SHAPE: 'MxNxK' or one size for a square. Writes $OUT/probe-cublas-kernels-<dtype>-<layout>-<time>.json."""
import argparse
import datetime as dt
import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

from gemmlab.bench import environment
from probe_record import shape_of


def kernels_of(fn, reps: int = 5) -> list[dict]:
    """The GPU kernels `fn` launches, read from one profiled run of `reps` calls (after a warm-up
    call, so that no tuning or loading shows): name, grid, block, registers, shared memory and
    the median duration a call."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    seen: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args", {})
        entry = seen.setdefault(e["name"], dict(name=e["name"], calls=0, durations_us=[],
                                                **{k: args[k] for k in args if k in KEEP}))
        entry["calls"] += 1
        entry["durations_us"].append(e.get("dur"))
    for entry in seen.values():
        d = sorted(x for x in entry["durations_us"] if x is not None)
        entry["median_us"] = d[len(d) // 2] if d else None
    return list(seen.values())


KEEP = ("grid", "block", "registers per thread", "shared memory", "cluster", "blocks per SM",
        "warps per SM", "est. achieved occupancy %")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="+")
    p.add_argument("--tf32", action="store_true", help="float32 inputs with TF32 allowed (else bf16)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"),
                   help="fp32: float32 with TF32 off (cuBLAS SGEMM)")
    p.add_argument("--layout", default="nn", choices=("nn", "nt"))
    args = p.parse_args()
    dtype = torch.float32 if args.tf32 else {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    dev = torch.device("cuda", 0)
    record = dict(name="cublas-kernels", dtype=str(dtype), tf32=args.tf32, layout=args.layout,
                  environment=environment.describe(0), cases=[])
    for text in args.shapes:
        m, n, k = shape_of(text)
        torch.manual_seed(0)
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(n, k, device=dev, dtype=dtype).t() if args.layout == "nt" else torch.randn(k, n, device=dev, dtype=dtype)
        d = torch.empty(m, n, device=dev, dtype=dtype)
        for backend in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(backend)
            ks = kernels_of(lambda: torch.mm(a, b, out=d))
            record["cases"].append(dict(M=m, N=n, K=k, backend=backend, kernels=ks))
            for kk in ks:
                print(f"{text:>18s} {backend:9s} {kk.get('median_us')!s:>8s} us  grid {kk.get('grid')} "
                      f"block {kk.get('block')} regs {kk.get('registers per thread')} smem {kk.get('shared memory')}  {kk['name'][:110]}")
    torch.backends.cuda.preferred_blas_library("cublas")
    out = os.environ.get("OUT", ".")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    tag = "tf32" if args.tf32 else args.dtype
    path = os.path.join(out, f"probe-cublas-kernels-{tag}-{args.layout}-{stamp}.json")
    json.dump(record, open(path, "w"), indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
