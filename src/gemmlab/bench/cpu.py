"""gemmlab bench --device cpu: the numba CPU ladder against numpy's BLAS, in one process, on the
same inputs, interleaved, with the caches flushed and the thread pools idle before every timed run. Same record format as
the GPU benchmark; the baseline is numpy.matmul and the run header says which BLAS it used and
with how many threads (threadpoolctl)."""

from __future__ import annotations

from dataclasses import asdict
import datetime as dt
import os
import platform
import statistics
import time
from typing import Callable
from pathlib import Path

import numpy as np
import torch

from .. import registry
from ..configs import select
from ..cpu.api import run_kernel
from ..problem import problem_from_tensors
from ..reference import check_result
from . import environment
from .run import results_path, sweep, tflops

CPU_SHAPES = ((256, 256, 256), (512, 512, 512), (1022, 1022, 1022), (1024, 1024, 1024))


def describe_cpu() -> dict:
    import numba
    import threadpoolctl

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = environment.cpu_model()
    return dict(
        time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        commit=environment.git_commit(),
        kind="bench-cpu",
        cpu=model,
        cores=cores,
        gpu_slug=f"cpu-{environment.gpu_slug(model)}-{cores}c",  # the results folder
        numba_threads=numba.get_num_threads(),
        blas=threadpoolctl.threadpool_info(),
        env={k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
        versions=dict(
            python=platform.python_version(),
            numpy=np.__version__,
            numba=numba.__version__,
            torch=torch.__version__,
        ),
        host=platform.node(),
    )


class CacheFlusher:
    """Writes 64 MB, more than the last-level cache of the machines we run on, before each run."""

    def __init__(self, nbytes: int = 64 << 20):
        self.buf = np.empty(nbytes // 4, dtype=np.float32)

    def __call__(self) -> None:
        self.buf.fill(1.0)


# numpy's OpenBLAS threads keep spinning for a while after a call, and numba's OpenMP threads
# after a parallel region; a run that starts while the other library's pool still spins shares
# the cores with it (measured on 2 cores: cpu04 at 1024 ran at half speed right after a numpy
# call, full speed after a 0.2 s pause). Every timed run therefore starts after this pause.
SETTLE_S = 0.2
# Runs of each side a case, the median reported: 10, not the GPU's 20, as the pause before each run
# is most of the time a default run takes (at 20 it took 192 s on 2 cores, 122 s of them pauses);
# the kernel and numpy runs stay interleaved, and the slow loops get fewer (budget_s).
CPU_REPS = 10


def bench_cpu_case(kernel_id: str, M: int, N: int, K: int, reps: int, warmup: int, budget_s: float, flush, settle_s: float = SETTLE_S) -> dict:
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    out = np.full((M, N), np.nan, dtype=np.float32)
    ref_out = np.full((M, N), np.nan, dtype=np.float32)
    ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
    problem = problem_from_tensors(ta, tb, None, tout, device_type="cpu")
    spec, cfg = select(problem, kernel_id)

    def kernel():
        run_kernel(spec, cfg, a, b, None, out, 1.0, 0.0)

    def baseline():
        np.matmul(a, b, out=ref_out)

    t0 = time.perf_counter()
    kernel()  # the first call compiles (or loads numba's cache); then check before timing
    first_s = time.perf_counter() - t0
    baseline()
    err = check_result(tout, ta, tb)
    if not err.passed:
        raise RuntimeError(f"{kernel_id} M={M} N={N} K={K}: wrong result before timing ({err.summary()})")
    base_err = check_result(torch.from_numpy(ref_out), ta, tb)
    t0 = time.perf_counter()
    kernel()
    one = time.perf_counter() - t0
    reps_used = max(3, min(reps, int(budget_s / max(one, 1e-9))))
    for _ in range(warmup):
        kernel()
        baseline()
    times = {"kernel": [], "baseline": []}
    fns = {"kernel": kernel, "baseline": baseline}
    names = list(fns)
    for r in range(reps_used):
        for n in names[r % 2 :] + names[: r % 2]:
            flush()
            time.sleep(settle_s)  # let the other library's thread pool go idle (see SETTLE_S)
            t0 = time.perf_counter()
            fns[n]()
            times[n].append((time.perf_counter() - t0) * 1e3)
    med, base_med = statistics.median(times["kernel"]), statistics.median(times["baseline"])
    return dict(
        kernel=kernel_id,
        config=cfg.as_dict(),
        M=M,
        N=N,
        K=K,
        dtype="float32",
        alpha=1.0,
        beta=0.0,
        times_ms=times["kernel"],
        median_ms=med,
        tflops=tflops(M, N, K, med),
        baseline="numpy.matmul",
        baseline_times_ms=times["baseline"],
        baseline_median_ms=base_med,
        baseline_tflops=tflops(M, N, K, base_med),
        ratio=base_med / med,
        error=asdict(err),
        baseline_error=asdict(base_err),
        first_call_s=first_s,
        settle_s=settle_s,
        reps=reps_used,
        warmup=warmup,
    )


def run_cpu_bench(
    kernels: list[str],
    shapes: list[tuple[int, int, int]],
    out_root: Path,
    reps: int = CPU_REPS,
    warmup: int = 1,
    budget_s: float = 20.0,
    on_record: Callable[[dict], None] | None = None,
    on_start: Callable[[str, tuple], None] | None = None,
) -> tuple[Path, list[dict]]:
    """reps runs per case, fewer (never under 3) where reps would take over budget_s seconds:
    the naive loops at 1024 take seconds a run. Each record says how many it used."""
    for k in kernels:
        if registry.get(k).device != "cpu":
            raise ValueError(f"{k} is not a CPU kernel")
    meta = describe_cpu()
    path = results_path(out_root, meta)
    flush = CacheFlusher()
    case = lambda k, M, N, K: bench_cpu_case(k, M, N, K, reps, warmup, budget_s, flush)  # noqa: E731
    return path, sweep(kernels, shapes, case, path, meta, on_start, on_record)
