"""Per-call overhead of gemm() on a cached kernel: the host time a call costs beyond the kernel.

Measured at 64 x 64 x 64 (the kernel itself takes a few microseconds) three ways, each next to
torch.mm on the same tensors for scale:
* host_us: wall time of one call with no synchronisation (what the call costs the CPU; with the
  GPU running asynchronously this is the time beyond the kernel). Median of many calls.
* kernel_us: the kernel alone: a CUDA graph of prepared launches, replayed and event-timed.
* sync_us: one call followed by torch.cuda.synchronize(), wall time, minus nothing: launch
  latency included, as a user timing one call would see it.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..api import gemm, prepare


def _host_us(fn, calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
        if len(samples) % 256 == 0:
            torch.cuda.synchronize()  # keep the queue short so launches never block
    torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


def _sync_us(fn, calls: int) -> float:
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def _kernel_us(fn, calls: int) -> float:
    """GPU time of one launch: a CUDA graph of `calls` launches replayed, so host launch cost is
    out of the measurement (events around a single launch would time the host instead)."""
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            with torch.cuda.graph(graph, stream=side):
                for _ in range(calls):
                    fn()
        torch.cuda.current_stream().wait_stream(side)
        graph.replay()
        times = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graph.replay()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3 / calls)
        return statistics.median(times)
    except RuntimeError:  # capture not possible here: fall back to events around each launch
        return _kernel_us_events(fn, calls)


def _kernel_us_events(fn, calls: int) -> float:
    pairs = []
    for _ in range(calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3


def measure(kernel: str = "auto", n: int = 64, calls: int = 2000, device_id: int = 0,
            dtype: torch.dtype = torch.float32) -> dict:  # fmt: skip
    """dtype picks the ladder: float32 the SIMT kernels, bfloat16/float16 the tensor-core ones
    (whose TMA steps also look up their cached tensor maps on every call)."""
    dev = f"cuda:{device_id}"
    a = (torch.rand((n, n), device=dev) * 2 - 1).to(dtype)
    b = (torch.rand((n, n), device=dev) * 2 - 1).to(dtype)
    out = torch.empty((n, n), device=dev, dtype=dtype)
    launch = prepare(a, b, kernel=kernel, out=out)
    for _ in range(100):  # compile, load, warm every cache
        gemm(a, b, kernel=kernel)
        gemm(a, b, kernel=kernel, out=out)
        torch.mm(a, b, out=out)
    torch.cuda.synchronize()
    from ..problem import problem_from_tensors
    from ..configs import select

    result = dict(
        M=n,
        N=n,
        K=n,
        kernel=kernel,
        dtype=str(dtype).removeprefix("torch."),
        chosen=select(problem_from_tensors(a, b, None, out), kernel)[0].id,
        calls=calls,
        kernel_us=_kernel_us(launch, calls // 4),
        host_us=_host_us(lambda: gemm(a, b, kernel=kernel), calls),
        host_us_out=_host_us(lambda: gemm(a, b, kernel=kernel, out=out), calls),
        host_us_prepared=_host_us(launch, calls),
        sync_us=_sync_us(lambda: gemm(a, b, kernel=kernel, out=out), calls // 4),
        torch_mm_host_us=_host_us(lambda: torch.mm(a, b), calls),
        torch_mm_sync_us=_sync_us(lambda: torch.mm(a, b, out=out), calls // 4),
    )
    result["overhead_us"] = result["host_us"]
    return result
