"""Where gemm()'s host time goes: cProfile over many calls of one small problem on a GPU.

    PYTHONPATH=src python3 scripts/profile_host.py [bf16|fp16|fp32|tf32] [M N K] [calls]

Prints the functions with the most time of their own, and the mean wall time per call, with out=
given (no allocation) and without.

    PYTHONPATH=src python3 scripts/profile_host.py record [--calls 2000] [--rounds 7] [--out DIR]

Host time a call at 64 x 64 x 64, in bf16 and float32: torch.mm, gemmlab.gemm with its table of
kinds of call on and off (gemmlab.calls.fast_path), F.linear and gemmlab.linear with a bias (on
and off). Each call is made `calls` times in a loop with the GPU kept busy behind it (its kernels
are shorter than the host's time a call; grad mode on, as in an eager program, on tensors that
need no gradient), and the loops of every variant alternate over `rounds`
rounds, so drift of the host's speed falls on all of them; the median round is reported. Writes a
record, <out>/<gpu>/host-<UTC stamp>.json (out: --out, else $OUT/results, else the user's results
folder), with the environment and every round's time."""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import gemmlab
from gemmlab import calls

DTYPES = {"bf16": (torch.bfloat16, "fp32"), "fp16": (torch.float16, "fp32"), "fp32": (torch.float32, "fp32"),
          "tf32": (torch.float32, "tf32")}  # fmt: skip


def _per_call_us(fn, calls_: int) -> float:
    """Mean wall time of fn over calls_ calls, the GPU's queue drained after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls_):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls_ * 1e6


def _variants(dtype: torch.dtype) -> dict:
    """label -> (function of one call, whether the table of kinds of call is on)."""
    a, b = torch.randn(64, 64, device="cuda").to(dtype), torch.randn(64, 64, device="cuda").to(dtype)
    w, bias = torch.randn(64, 64, device="cuda").to(dtype), torch.randn(64, device="cuda").to(dtype)
    return {
        "torch.mm": (lambda: torch.mm(a, b), True),
        "gemmlab.gemm, fast path": (lambda: gemmlab.gemm(a, b), True),
        "gemmlab.gemm, full path": (lambda: gemmlab.gemm(a, b), False),
        "F.linear, bias": (lambda: F.linear(a, w, bias), True),
        "gemmlab.linear, bias, fast path": (lambda: gemmlab.linear(a, w, bias), True),
        "gemmlab.linear, bias, full path": (lambda: gemmlab.linear(a, w, bias), False),
    }


def record(argv: list[str]) -> None:
    from gemmlab.bench import environment
    from gemmlab.bench.run import results_path, user_results_dir, write_run

    parser = argparse.ArgumentParser(prog="profile_host.py record")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or (Path(os.environ["OUT"]) / "results" if os.environ.get("OUT") else user_results_dir())
    meta = dict(environment.describe(), kind="host", M=64, N=64, K=64, calls=args.calls, rounds=args.rounds)
    records = []
    for dtype in (torch.bfloat16, torch.float32):
        variants = _variants(dtype)
        for fn, on in variants.values():  # warm-up: compiles, plans, the table's entries
            with calls.fast_path(on):
                for _ in range(50):
                    fn()
        rounds = {label: [] for label in variants}
        for _ in range(args.rounds):
            for label, (fn, on) in variants.items():
                with calls.fast_path(on):
                    rounds[label].append(_per_call_us(fn, args.calls))
        for label, times in rounds.items():
            us = statistics.median(times)
            records.append(dict(dtype=str(dtype).removeprefix("torch."), call=label, host_us=us, rounds_us=times))
            print(f"{str(dtype).removeprefix('torch.'):9} {label:34} {us:7.1f} us a call "
                  f"(rounds {min(times):.1f}-{max(times):.1f})")  # fmt: skip
    path = results_path(out, meta, tag="host")
    write_run(path, meta, records)
    print(f"wrote {path}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "record":
        return record(sys.argv[2:])
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
