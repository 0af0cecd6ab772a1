"""The tensor-core ladder's first steps, tc01-tc06 (issue 3): WMMA, mma.sync, cp.async, wgmma,
TMA, warp specialisation. 16-bit inputs (bf16, fp16), fp32 accumulation; each kernel is templated
on its element type. Also the pieces the later steps (gemmlab.specs.persistent) build on."""

from __future__ import annotations

import torch

from .base import STATIC_SMEM_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv


def _check_warp_tiles(c: GemmConfig) -> str | None:
    """The warp-tile constraints every mma step shares (its static_asserts, as a Python error)."""
    if c["BM"] % c["WM"] or c["BN"] % c["WN"]:
        return "WM must divide BM and WN divide BN"
    if c["WM"] % 16 or c["WN"] % 16 or c["BK"] % 16:
        return "WM, WN and BK must be multiples of 16"
    return None


def _tile_bytes(c: GemmConfig, pad: int = 8) -> int:
    """One stage of 16-bit A and B tiles, rows padded by `pad` elements (8: 16 bytes; 0: swizzled)."""
    return 2 * (c["BM"] * (c["BK"] + pad) + c["BK"] * (c["BN"] + pad))


def _check_swizzle_widths(c: GemmConfig) -> str | None:
    """tc03's XOR swizzle permutes 16-byte chunks within 128-byte lines (gemmlab::swizzled)."""
    ok = lambda w: w in (16, 32) or (w >= 64 and w % 64 == 0)  # noqa: E731
    return None if ok(c["BK"]) and ok(c["BN"]) else "BK and BN must be 16, 32 or a multiple of 64 (the XOR swizzle)"


def _warps(c: GemmConfig) -> int:
    return (c["BM"] // c["WM"]) * (c["BN"] // c["WN"])


def _smem_fits(nbytes: int, limit: int) -> str | None:
    return None if nbytes <= limit else f"shared memory {nbytes} B exceeds {limit} B"


TC_01 = KernelSpec(
    id="tc01_wmma",
    step=1,
    title="WMMA",
    idea="nvcuda::wmma 16x16x16 fragments from shared-memory tiles: the tensor cores through the C++ API",
    source="tensorcore/01_wmma.cu",
    entry="tc_wmma",
    params=(
        Param("BM", 128, "rows of C a block"),
        Param("BN", 128, "columns of C a block"),
        Param("BK", 32, "K slice staged in shared memory (multiple of 16)"),
        Param("WM", 64, "rows of C a warp (multiple of 16)"),
        Param("WN", 32, "columns of C a warp (multiple of 16)"),
    ),
    block=lambda c: ((c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    check_config=lambda c: _check_warp_tiles(c) or _smem_fits(_tile_bytes(c) + 1024 * _warps(c), STATIC_SMEM_MAX),
    seeds="001 extension: WMMA",
    type_param=True,
)

TC_02 = KernelSpec(
    id="tc02_mma_sync",
    step=2,
    title="mma.sync + ldmatrix",
    idea="inline-PTX mma.sync.m16n8k16 on fragments loaded by ldmatrix; accumulators written from registers",
    source="tensorcore/02_mma_sync.cu",
    entry="tc_mma_sync",
    params=TC_01.params,
    block=TC_01.block,
    grid=TC_01.grid,
    dtypes=(torch.bfloat16, torch.float16),
    check_config=lambda c: _check_warp_tiles(c) or _smem_fits(_tile_bytes(c), STATIC_SMEM_MAX),
    seeds="001 inline PTX: mma.sync",
    type_param=True,
)

TC_03 = KernelSpec(
    id="tc03_cp_async",
    step=3,
    title="cp.async pipeline",
    idea="16-byte cp.async copies into a ring of STAGES XOR-swizzled shared buffers: global loads overlap the MMAs",
    source="tensorcore/03_cp_async.cu",
    entry="tc_cp_async",
    params=TC_01.params + (Param("STAGES", 3, "shared buffers in the cp.async ring"),),
    block=TC_01.block,
    grid=TC_01.grid,
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=lambda c: c["STAGES"] * _tile_bytes(c, pad=0),
    check_config=lambda c: _check_warp_tiles(c)
    or _check_swizzle_widths(c)
    or ("STAGES must be at least 2" if c["STAGES"] < 2 else _smem_fits(c["STAGES"] * _tile_bytes(c, pad=0), 227 * 1024)),
    seeds="the Ampere recipe (cp.async multistage)",
    type_param=True,
)

TC_04 = KernelSpec(
    id="tc04_wgmma",
    step=4,
    title="wgmma",
    idea="Hopper wgmma.mma_async m64n128k16: a warpgroup's MMA reads 128-byte-swizzled shared tiles through descriptors",
    source="tensorcore/04_wgmma.cu",
    entry="tc_wgmma",
    params=(
        Param("BM", 128, "rows of C a block (multiple of 64: one warpgroup of 128 threads per 64 rows)"),
        Param("BN", 128, "columns of C a block (multiple of 128: m64n128k16 MMAs)"),
        Param("BK", 64, "K slice of one stage (multiple of 64: one 128-byte swizzle row)"),
        Param("STAGES", 3, "shared buffers in the cp.async ring"),
    ),
    block=lambda c: (c["BM"] // 64 * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    # the stages plus 1 KB, for aligning the ring to the swizzle's 1024-byte period
    dynamic_smem=lambda c: c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2 + 1024,
    check_config=lambda c: (
        "BM must be a multiple of 64, at most 512 (one warpgroup per 64 rows)"
        if c["BM"] % 64 or not 64 <= c["BM"] <= 512
        else "BN must be a multiple of 128 (m64n128k16 MMAs)"
        if c["BN"] % 128 or c["BN"] < 128
        else "BK must be a multiple of 64 (one 128-byte swizzle row)"
        if c["BK"] % 64 or c["BK"] < 64
        else "STAGES must be at least 2"
        if c["STAGES"] < 2
        else "the stages exceed 227 KB of shared memory"
        if c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2 + 1024 > 227 * 1024
        else None
    ),
    seeds="issue 3: Hopper wgmma",
    type_param=True,
    min_capability=(9, 0),
)

# Steps 05-07 move tiles with the TMA: the operands they map must suit it (tma_constraints);
# others go to tc04, which copies with cp.async and takes any layout.

def _tma_stage_bytes(c: GemmConfig) -> int:
    return (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2


def _barriers(c: GemmConfig) -> int:
    return 2 * c["STAGES"] * 8  # a full and an empty mbarrier per stage


def _check_tma_tiles(c: GemmConfig, bn: tuple[int, ...], max_bm: int, smem: int, bk: tuple[int, ...] = (64,)) -> str | None:
    return _first_failure(
        (c["BM"] % 64 == 0 and 64 <= c["BM"] <= max_bm,
         f"BM must be a multiple of 64 from 64 to {max_bm} (one warpgroup per 64 rows)"),
        (c["BN"] in bn, f"BN must be one of {bn}"),
        (c["BK"] in bk, f"BK must be {' or '.join(map(str, bk))} (one swizzle row of K: the TMA box width)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (smem <= 227 * 1024, f"shared memory {smem} B exceeds 227 KB"),
    )


def _tc05_smem(c: GemmConfig) -> int:
    return c["STAGES"] * _tma_stage_bytes(c) + _barriers(c) + 1024


TC_05 = KernelSpec(
    id="tc05_tma",
    step=5,
    title="TMA + mbarriers",
    idea="one thread loads whole swizzled tiles with TMA; full/empty mbarriers replace __syncthreads; one MMA group stays in flight",
    source="tensorcore/05_tma.cu",
    entry="tc_tma",
    params=(
        Param("BM", 128, "rows of C a block (multiple of 64, at most 256: one warpgroup per 64 rows)"),
        Param("BN", 128, "columns of C a block (multiple of 128: m64n128k16 MMAs)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row, the TMA box width)"),
        Param("STAGES", 4, "shared buffers in the TMA ring"),
    ),
    block=lambda c: (c["BM"] // 64 * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc05_smem,
    check_config=lambda c: _check_tma_tiles(c, (128, 256, 384, 512), 256, _tc05_smem(c)),
    seeds="issue 3: TMA loads into a ring of stages guarded by mbarriers",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["BM"], 64), "b": (c["BK"], 64)},
    min_capability=(9, 0),
)


# What tc06-tc08 share: a producer warpgroup plus one consumer warpgroup per 64 rows of a 256-wide
# tile; tc07 and tc08 add the persistent, clustered schedule.
_WS_BM = Param("BM", 128, "rows of C a block: 64 per consumer warpgroup (64 or 128)")
_WS_STAGES = Param("STAGES", 4, "shared buffers in the TMA ring")
_CLUSTER_GROUP = Param("GROUP", 8, "cluster rows walked together by the tile scheduler (L2 reuse)")
_WS_BLOCK = lambda c: ((c["BM"] // 64 + 1) * 128, 1, 1)  # noqa: E731
# every cluster tile's blocks; the launch caps this at the blocks that can be resident at once
_CLUSTER_GRID = lambda M, N, c: (cdiv(M, c["BM"] * c["CM"]) * cdiv(N, c["BN"]) * c["CM"], 1, 1)  # noqa: E731


def _cluster_m(options: tuple[int, ...]) -> Param:
    names = ", ".join(map(str, options[:-1])) + f" or {options[-1]}"
    return Param("CM", 2, f"blocks per cluster along M, sharing B tiles by multicast ({names})")


def _check_cluster(c: GemmConfig, cm: tuple[int, ...]) -> str | None:
    return _first_failure(
        (c["CM"] in cm, f"CM must be one of {cm} (blocks per cluster along M)"),
        (c["GROUP"] >= 1, "GROUP must be at least 1"),
    )


def _tc06_smem(c: GemmConfig) -> int:
    return c["STAGES"] * _tma_stage_bytes(c) + _barriers(c) + 1024


TC_06 = KernelSpec(
    id="tc06_warp_specialized",
    step=6,
    title="warp specialisation",
    idea="a producer warpgroup issues the TMA, two consumer warpgroups (setmaxnreg 40/232) each run m64n256k16: 128x256 tiles",
    source="tensorcore/06_warp_specialized.cu",
    entry="tc_warp_specialized",
    params=(
        _WS_BM,
        Param("BN", 256, "columns of C a block (256: one m64n256k16 MMA a warpgroup)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row)"),
        _WS_STAGES,
    ),
    block=_WS_BLOCK,
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc06_smem,
    check_config=lambda c: _check_tma_tiles(c, (256,), 128, _tc06_smem(c)),
    seeds="issue 3: warp specialisation, setmaxnreg, larger block tiles",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["BM"], 64), "b": (c["BK"], 64)},
    min_capability=(9, 0),
)


