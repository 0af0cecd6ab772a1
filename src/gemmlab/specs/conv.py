"""The convolution ladder's kernels past im2col (gemmlab.conv runs step 01 on gemm()): their
specs, as data. They take a convolution's geometry, not a GEMM problem, so they are not in the
GEMM registry and `auto` never sees them; gemmlab.conv.conv2d launches them when asked by name."""

from __future__ import annotations

import torch

from .base import GemmConfig, KernelSpec, Param, cdiv
from .tensorcore import _check_warp_tiles, _smem_fits


def _stage_bytes(c: GemmConfig) -> int:
    return 2 * (c["BM"] * c["BK"] + c["BN"] * c["BK"])


def _check(c: GemmConfig) -> str | None:
    threads = (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32
    if c["BK"] not in (16, 32) and c["BK"] % 64:
        return "BK must be 16, 32 or a multiple of 64 (the XOR swizzle)"
    if c["BM"] * (c["BK"] // 8) % threads:
        return "every thread must stage the same number of A chunks: BM * BK / 8 a multiple of the threads"
    if c["STAGES"] < 2:
        return "STAGES must be at least 2"
    return _check_warp_tiles(c) or _smem_fits(c["STAGES"] * _stage_bytes(c), 227 * 1024)


# Its GPU tests pass (H100); at 0.30x cuDNN on ResNet-50's layers (bf16, batch 32, H200) conv2d
# takes it only when asked (algorithm="implicit"): docs/ladder/conv02-implicit-gemm.md.
CONV_02 = KernelSpec(
    id="conv02_implicit_gemm",
    step=2,
    title="implicit GEMM",
    idea="A's tiles gathered from the NHWC input as they are staged (cp.async, zero-filled in the padding): no im2col matrix",
    source="conv/02_implicit_gemm.cu",
    entry="conv_implicit_gemm",
    params=(
        Param("BM", 128, "output pixels a block"),
        Param("BN", 128, "output channels a block"),
        Param("BK", 32, "reduction slice (filter taps x channels) of one stage (multiple of 16)"),
        Param("WM", 64, "output pixels a warp (multiple of 16)"),
        Param("WN", 32, "output channels a warp (multiple of 16)"),
        Param("STAGES", 4, "shared buffers in the cp.async ring"),
    ),
    block=lambda c: ((c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=lambda c: c["STAGES"] * _stage_bytes(c),
    check_config=_check,
    seeds="the implicit-GEMM convolution: im2col's gather moved into the tile loads",
    type_param=True,
    epilogues=True,
)

CONV_KERNELS: tuple[KernelSpec, ...] = (CONV_02,)
