"""tc11 (3xTF32, precision="3xtf32"): float32 products as accurate as SGEMM's on the TF32 tensor
cores, and its pre-pass, the kernel that splits A and B into TF32 big and small parts
(kernels/tensorcore/split_tf32.cu). The pre-pass is not a GEMM: it is not in the registry, and
gemm() launches it before every tc11 launch (gemmlab.split)."""

from __future__ import annotations

import torch

from .base import GemmConfig, KernelSpec, Param, _first_failure, cdiv
from .tensorcore import _barriers

SMEM_MAX = 227 * 1024


def _tc11_smem(c: GemmConfig) -> int:
    """The ring (four tiles a stage: A's and B^T's big and small parts, fp32), its barriers, and
    room to align the ring to 1024 bytes."""
    return c["STAGES"] * 2 * (c["BM"] + c["BN"]) * c["BK"] * 4 + _barriers(c) + 1024


def _check_11(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["BM"] in (64, 128), "BM must be 64 or 128 (one or two consumer warpgroups of 64 rows)"),
        (c["BN"] == 128, "BN must be 128 (the N of one m64n128k8 MMA: 64 accumulators and a 64-register sum a thread)"),
        (c["BK"] == 32, "BK must be 32 (32 fp32: one 128-byte swizzle row)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (c["GROUP"] >= 1, "GROUP must be at least 1"),
        (c["PROMOTE"] >= 1, "PROMOTE must be at least 1 (K stages between promotions)"),
        (c["SUM"] in (0, 1, 2), "SUM must be 0 (one fp32 sum), 1 (two fp32 levels) or 2 (an fp64 sum)"),
        (_tc11_smem(c) <= SMEM_MAX, f"shared memory {_tc11_smem(c)} B exceeds 227 KB"),
    )


TC_11 = KernelSpec(
    id="tc11_3xtf32",
    step=11,
    title="3xTF32",
    idea="float32 as accurate as SGEMM on the TF32 tensor cores (asked for with precision='3xtf32'): a pre-pass splits A and B into TF32 big and small parts, three MMAs a k8 step (small terms first), the MMA accumulator added into an fp32 sum every PROMOTE K stages",
    source="tensorcore/11_3xtf32.cu",
    entry="tc_3xtf32",
    params=(
        Param("BM", 128, "rows of D a block: 64 per consumer warpgroup (64 or 128)"),
        Param("BN", 128, "columns of D a block (128: one m64n128k8 MMA)"),
        Param("BK", 32, "K slice of one stage (32 fp32: one 128-byte swizzle row)"),
        Param("STAGES", 3, "K stages in the TMA ring (four tiles each: 64 KB at 128 x 128)"),
        Param("GROUP", 8, "tile rows walked together by the tile scheduler (L2 reuse)"),
        Param("PROMOTE", 1, "K stages the MMA accumulator takes before it is added into the fp32 sum and started again"),
        Param("SUM", 1, "how the promoted values are summed along K: 0 one fp32 sum, 1 two fp32 levels (16 promotions a partial sum), 2 an fp64 sum"),
    ),
    block=lambda c: ((c["BM"] // 64 + 1) * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(M, c["BM"]) * cdiv(N, c["BN"]), 1, 1),
    dtypes=(torch.float32,),
    dynamic_smem=_tc11_smem,
    check_config=_check_11,
    seeds="not in the seeds: CUTLASS's 3xTF32 (big and small TF32 parts, small terms first); FP8 GEMMs' promotion of wgmma accumulators into fp32 registers (DeepGEMM)",
    tma=("a", "a_small", "b", "b_small"),
    tma_boxes=lambda c: {"a": (c["BM"], c["BK"]), "a_small": (c["BM"], c["BK"]),
                         "b": (c["BN"], c["BK"]), "b_small": (c["BN"], c["BK"])},  # fmt: skip
    persistent=True,
    min_capability=(9, 0),
    math="3xtf32",
    layouts=("nn", "nt", "tn", "tt"),
    split_operands=True,
)


SPLIT_TF32 = KernelSpec(
    id="split_tf32",
    step=0,
    title="3xTF32 pre-pass",
    idea="not a GEMM: each fp32 element of an operand split into TF32 big and small parts, written K-major for tc11's TMA loads",
    source="tensorcore/split_tf32.cu",
    entry="split_tf32",
    params=(Param("TRANS", 0, "0: the input's unit stride runs along its columns, as the output's (read as it lies); 1: along its rows (a transposed view, read through a 32 x 32 shared tile)"),),
    block=lambda c: (32, 8, 1),
    grid=lambda rows, cols, c: (cdiv(rows, 32) * cdiv(cols, 32), 1, 1),  # one 32 x 32 tile a block
    dtypes=(torch.float32,),
    check_config=lambda c: None if c["TRANS"] in (0, 1) else "TRANS must be 0 or 1",
    seeds="CUTLASS's 3xTF32 split (big = x rounded to TF32, small = the rest rounded to TF32)",
)
