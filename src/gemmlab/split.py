"""The pre-pass of precision="3xtf32" (tc11): A and B split into TF32 big and small parts.

A [M, K] is split as it is, B [K, N] as B^T ([N, K]: element (n, k) is B[k][n]), so that both reach
tc11 K-major, the only way wgmma reads TF32 operands. Each split lands in a scratch tensor
[2, rows, ld] -- big, then small; ld = K rounded up to 32 floats, rows of whole 128-byte lines
(LD_ALIGN) -- that torch allocates on the current stream for the call (kernels/tensorcore/split_tf32.cu
writes it; gemmlab.reference.split_tf32 is the same split in torch). Any layout, address and stride
is read as it lies: the split reads element (r, c) at r * sr + c * sc, through a transposing shared
tile where the unit stride runs along r. The caller frees the scratch once the GEMM that reads it
is queued behind it on the same stream (torch's allocator then hands its memory out only to work
queued after)."""

from __future__ import annotations

import torch

from . import jit, launch
from .problem import GemmProblem, Operand
from .specs.tf32x3 import SPLIT_TF32


def element_strides(op: Operand) -> tuple[int, int]:
    """(row stride, column stride) in elements of the matrix argument an Operand describes (its
    storage's rows, or columns where it is a transposed view)."""
    return (1, op.ld) if op.trans else (op.ld, 1)


def split_strides(problem: GemmProblem) -> tuple[tuple[int, int], tuple[int, int]]:
    """The element strides (along rows, along columns) of A [M, K] and of B^T [N, K] as the
    pre-pass reads them: ((sam, sak), (sbn, sbk)), element (m, k) of A at m * sam + k * sak and
    (k, n) of B at k * sbk + n * sbn."""
    (sam, sak), (sbk, sbn) = element_strides(problem.a), element_strides(problem.b)
    return (sam, sak), (sbn, sbk)


# Rows of the scratch start on 128-byte lines (TMA needs 16): with 16-byte rows, 6132^3 ran 4.89 ms
# on an H200 and 4.19 ms with 128-byte ones, 6144^3 3.85 ms (gemm() calls timed with CUDA events).
LD_ALIGN = 32


_CONFIGS = {t: SPLIT_TF32.config(TRANS=t) for t in (0, 1)}
_LOADED: dict[tuple, object] = {}  # (TRANS, device) -> the loaded pre-pass: no lookup a call


def split_config(sr: int, sc: int):
    """The pre-pass's config for a matrix of these element strides: TRANS = 1 where the unit
    stride runs along its rows (read through the transposing tile), 0 otherwise."""
    return _CONFIGS[int(sr < sc)]


def split_jobs(problem: GemmProblem | None = None) -> list[tuple]:
    """The pre-pass's builds a 3xTF32 problem loads besides tc11 (None: both), as jit.compile_many's
    jobs; none where K = 0 (nothing to split)."""
    if problem is None:
        cfgs = list(_CONFIGS.values())
    else:
        cfgs = [split_config(*s) for s in split_strides(problem)] if problem.K else []
    return [(SPLIT_TF32, cfg, None, None) for cfg in dict.fromkeys(cfgs)]


def split(ptr: int, rows: int, cols: int, sr: int, sc: int, device: torch.device, device_id: int) -> torch.Tensor:
    """The float32 rows x cols matrix at address ptr (element (r, c) at r * sr + c * sc elements)
    split into [2, rows, ld] (big, small): launched on torch's current stream, returned unwaited."""
    ld = -(-cols // LD_ALIGN) * LD_ALIGN
    parts = torch.empty((2, rows, ld), dtype=torch.float32, device=device)
    cfg = split_config(sr, sc)
    loaded = _LOADED.get((cfg["TRANS"], device_id))
    if loaded is None:
        loaded = _LOADED[cfg["TRANS"], device_id] = jit.load_kernel(SPLIT_TF32, cfg, device_id)
    i32, i64 = launch.i32, launch.i64
    launch.launch(loaded, device_id, SPLIT_TF32.grid(rows, cols, cfg), SPLIT_TF32.block(cfg), ptr, parts[0].data_ptr(),
                  parts[1].data_ptr(), i32(rows), i32(cols), i64(sr), i64(sc), i32(ld))  # fmt: skip
    return parts
