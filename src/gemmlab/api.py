"""The public entry point: gemm() validates, picks a kernel, launches on torch's current stream."""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from . import jit, launch, registry
from .configs import select
from .problem import GemmProblem, problem_from_tensors
from .registry import GemmConfig, KernelSpec

__all__ = ["gemm", "kernels", "select", "run", "prepare"]


def kernels(dtype: torch.dtype | None = None) -> list[KernelSpec]:
    """The registered kernels in ladder order (optionally only those taking dtype)."""
    return registry.kernels(dtype)


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out=None) -> torch.Tensor:
    """D = alpha * a @ b + beta * c on CUDA tensors, launched on torch's current stream.

    a: [M, K], b: [K, N], c: [M, N] or None (then beta must be 0), row-major (unit column
    stride; any row stride). beta == 0 never reads c. out: where to write D (may be c itself for
    an in-place update); allocated when None. kernel: a registered kernel id, or "auto" for the
    fastest registered kernel that can serve the problem. Returns D.

    Raises TypeError/ValueError before any launch if the arguments cannot be served.
    """
    problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta)
    spec, cfg = select(problem, kernel)
    if out is None:
        out = torch.empty((problem.M, problem.N), dtype=problem.dtype, device=problem.device)
    if problem.is_empty:
        return out
    _planned_launch(spec, cfg, problem, out)()
    return out


def run(spec: KernelSpec, cfg: GemmConfig, problem: GemmProblem, out: torch.Tensor) -> None:
    """Launch one kernel on an already validated problem (no checks: use gemm())."""
    _planned_launch(spec, cfg, problem, out)()


def prepare(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out) -> Callable[[], None]:
    """Validate once and return a function that relaunches the same GEMM (for benchmarks:
    it skips validation and selection on every call). The tensors must stay alive."""
    problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta)
    spec, cfg = select(problem, kernel)
    if problem.is_empty:
        return lambda: None
    return _planned_launch(spec, cfg, problem, out)


def _planned_launch(spec: KernelSpec, cfg: GemmConfig, problem: GemmProblem, out: torch.Tensor):
    device_id = problem.device.index if problem.device.index is not None else torch.cuda.current_device()
    loaded = jit.load_kernel(spec, cfg, device_id)
    M, N, K = problem.M, problem.N, problem.K
    ldd = problem.d.ld if problem.d is not None else N
    c_ptr, ldc = (problem.c.ptr, problem.c.ld) if problem.c is not None else (0, N)
    i32, f32 = launch.i32, launch.f32
    args = (
        problem.a.ptr,
        problem.b.ptr,
        c_ptr,
        out.data_ptr(),
        i32(M),
        i32(N),
        i32(K),
        i32(problem.a.ld),
        i32(problem.b.ld),
        i32(ldc),
        i32(ldd),
        f32(problem.alpha),
        f32(problem.beta),
    )
    grid, block = spec.grid(M, N, cfg), spec.block(cfg)
    return partial(launch.launch, loaded, device_id, grid, block, *args)
