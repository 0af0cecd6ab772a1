"""Padding against predication (seeds 000 v4/v7 and 003 k5): copy A and B into zero-padded
buffers whose sides are multiples of the kernel's tiles, run the kernel there, copy the M x N
result out — against the same kernel run directly on the odd shape, where its predicated edges
(and, when K or N is not a multiple of 4, its scalar fallback loads) do the work.

The padded run uses the same predicated kernel; on tile multiples every predicate holds and every
row is 16-byte aligned, so it runs the fast path throughout. Three timings per shape, interleaved
with cuBLAS as usual: the kernel on the odd shape, the kernel on the padded shape alone, and the
whole padded path (two copies in, the kernel, one copy out)."""

from __future__ import annotations

from dataclasses import asdict
import math

import torch

from .. import registry
from ..api import prepare
from ..configs import select
from ..problem import problem_from_tensors
from ..reference import check_result
from . import environment
from .run import CUBLAS_BACKENDS, _cublas, results_path, sweep, tflops
from .timing import HostGate, L2Flusher, interleaved, median

ODD_SHAPES = tuple((n, n, n) for n in (1022, 2044, 3135, 4088, 6132, 8176))  # seed 000's sizes


def padded_sides(cfg: dict, M: int, N: int, K: int) -> tuple[int, int, int]:
    """M, N, K rounded up to the kernel's block tile (and to 4, for 16-byte rows)."""
    bm = cfg.get("BM", cfg.get("TILE", cfg.get("BY", 1)))
    bn = cfg.get("BN", cfg.get("TILE", cfg.get("BX", 1)))
    bk = cfg.get("BK", cfg.get("TILE", 1))

    def up(x: int, m: int) -> int:
        m = math.lcm(m, 4)
        return -(-x // m) * m

    return up(M, bm), up(N, bn), up(K, bk)


def bench_pad_case(kernel_id: str, M: int, N: int, K: int, reps: int, warmup: int, flusher, device_id: int,
                   gate: HostGate | None = None) -> dict:  # fmt: skip
    dev = f"cuda:{device_id}"
    a = torch.rand((M, K), device=dev) * 2 - 1
    b = torch.rand((K, N), device=dev) * 2 - 1
    out = torch.full((M, N), float("nan"), device=dev)
    spec, cfg = select(problem_from_tensors(a, b, None, out), kernel_id)
    Mp, Np, Kp = padded_sides(cfg.as_dict(), M, N, K)
    a_pad = torch.zeros((Mp, Kp), device=dev)
    b_pad = torch.zeros((Kp, Np), device=dev)
    d_pad = torch.zeros((Mp, Np), device=dev)
    out_pad = torch.full((M, N), float("nan"), device=dev)
    predicated = prepare(a, b, kernel=kernel_id, out=out, config=cfg)
    padded_kernel = prepare(a_pad, b_pad, kernel=kernel_id, out=d_pad, config=cfg)

    def padded_total():
        a_pad[:M, :K].copy_(a)  # the padding stays zero: only the interior is ever written
        b_pad[:K, :N].copy_(b)
        padded_kernel()
        out_pad.copy_(d_pad[:M, :N])

    ref_out = {be: torch.empty((M, N), device=dev) for be in CUBLAS_BACKENDS}
    cublas = {be: _cublas(a, b, ref_out[be], be) for be in CUBLAS_BACKENDS}
    for pick, run in cublas.values():  # everything timed behind the gate has run once (HostGate)
        pick()
        run()
    predicated()
    padded_total()
    torch.cuda.synchronize()
    errs = {name: check_result(d, a, b) for name, d in (("predicated", out), ("padded", out_pad))}
    for name, e in errs.items():
        if not e.passed:
            raise RuntimeError(f"{kernel_id} {name} M={M} N={N} K={K}: wrong result ({e.summary()})")
    fns = {"predicated": predicated, "padded_total": padded_total, "padded_kernel": padded_kernel}
    fns |= {be: run for be, (pick, run) in cublas.items()}
    before = {be: pick for be, (pick, run) in cublas.items()}
    times = interleaved(fns, reps, warmup, flusher, before, gate=gate)
    torch.backends.cuda.preferred_blas_library("default")
    if gate is not None and gate.timed_out():
        raise RuntimeError(f"{kernel_id} M={M} N={N} K={K}: the host took over {gate.limit_s} s to queue a round of launches")
    med = {k: median(v) for k, v in times.items()}
    best = min(CUBLAS_BACKENDS, key=med.get)
    return dict(
        kernel=kernel_id,
        config=cfg.as_dict(),
        M=M,
        N=N,
        K=K,
        padded=[Mp, Np, Kp],
        times_ms=times,
        median_ms=med,
        predicated_tflops=tflops(M, N, K, med["predicated"]),
        padded_total_tflops=tflops(M, N, K, med["padded_total"]),
        copies_ms=med["padded_total"] - med["padded_kernel"],
        padding_speedup=med["predicated"] / med["padded_total"],  # > 1: padding pays for its copies
        cublas_backend=best,
        cublas_tflops=tflops(M, N, K, med[best]),
        errors={k: asdict(e) for k, e in errs.items()},
        reps=reps,
    )


def run_pad_bench(kernels, shapes, out_root, reps=20, warmup=2, device_id=0, on_record=None, on_start=None):
    for k in kernels:
        if registry.get(k).device != "cuda":
            raise ValueError(f"{k} is not a GPU kernel")
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = environment.describe(device_id)
    meta["kind"] = "pad"
    meta["gate"] = "round"  # each round of timed launches queued behind a HostGate, as in run_bench
    path = results_path(out_root, meta, "pad")
    flusher, gate = L2Flusher(device_id), HostGate(device_id)
    case = lambda k, M, N, K: bench_pad_case(k, M, N, K, reps, warmup, flusher, device_id, gate)  # noqa: E731
    return path, sweep(kernels, shapes, case, path, meta, on_start, on_record, after=torch.cuda.empty_cache)
