"""Step 12's reduction pass (RED = 1): after the split kernel has stored every run's fp32 part in the
workspace, kernels/sgemm/12_split_k_reduce.cu adds each element's parts in run order and writes D
through the epilogue. gemm() launches it right behind the split kernel on the same stream (so it
also runs inside a captured CUDA graph), reading the workspace the split kernel wrote."""

from __future__ import annotations

from typing import NamedTuple

from . import jit, launch
from .device import sm_count
from .specs.base import GemmConfig, KernelSpec, cdiv
from .specs.sgemm import SPLIT_K_REDUCE, split_k_reduce_grid, split_k_reduce_slices

_CONFIG = SPLIT_K_REDUCE.default_config()


class Reduction(NamedTuple):
    """A planned reduction: the loaded kernel, its geometry and the parts' layout."""

    loaded: object
    grid: tuple
    block: tuple
    ldw: int  # floats between rows of a part: the split grid's tiles across x BN
    run_stride: int  # floats between runs' parts: tiles x BM x BN
    slices: int  # threads a float4 of D, each adding a range of the runs (split_k_reduce_slices)


def reduce_job(post: int = 0) -> tuple:
    """The reduction's build for a fused epilogue, as a jit.compile_many job."""
    return (SPLIT_K_REDUCE, _CONFIG, None, None, post)


def plan(spec: KernelSpec, cfg: GemmConfig, M: int, N: int, grid: tuple, device_id: int, post: int) -> Reduction | None:
    """The reduction a launch of spec on this grid needs (spec.parts_reduced), None if it needs none."""
    if spec.parts_reduced is None or not spec.parts_reduced(cfg, grid):
        return None
    loaded = jit.load_kernel(SPLIT_K_REDUCE, _CONFIG, device_id, post=post)
    slices = split_k_reduce_slices(M, N, grid[1], sm_count(device_id), _CONFIG["THREADS"])
    return Reduction(loaded, split_k_reduce_grid(M, N, _CONFIG, slices), SPLIT_K_REDUCE.block(_CONFIG),
                     cdiv(N, cfg["BN"]) * cfg["BN"], grid[0] * cfg["BM"] * cfg["BN"], slices)  # fmt: skip


def launch_reduction(r: Reduction, device_id: int, ws_ptr: int, runs: int, c_ptr: int, d_ptr: int, tail: tuple,
                     bias_ptr: int) -> None:  # fmt: skip
    """Launch the planned reduction on torch's current stream. tail: the split kernel's scalars (M, N,
    K, lda, ldb, ldc, ldd, alpha, beta)."""
    M, N, _, _, _, ldc, ldd, alpha, beta = tail
    launch.launch(r.loaded, device_id, r.grid, r.block, ws_ptr, c_ptr, d_ptr, M, N, launch.i32(r.ldw),
                  launch.i64(r.run_stride), launch.i32(runs), launch.i32(r.slices), ldc, ldd, alpha, beta, bias_ptr)  # fmt: skip
