"""tc10, skinny problems (a decode step's few rows against a weight): the few rows on the MMA's N
side, and the runs along K its grid launches (skinny_runs)."""

from __future__ import annotations

import torch

from ..problem import GemmProblem
from .base import GRID_YZ_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv
from .tensorcore import _barriers


# tc10: skinny problems (a decode step's few tokens against a weight). The grid is one block a
# BW x NT tile of D (its columns on the MMA's M side, its few rows on N), times `skinny_runs` runs
# along K, so that the column tiles of a narrow layer still fill the SMs. Two blocks fit an SM, but
# the runs are counted for one block an SM, of at least 16 K steps: on an H200 at Llama 3's decode
# layers (results/nvidia-h200/probe-skinny-20261125T003110Z.json, bf16, y = x @ w.t(), 1-64 rows,
# ratios to cuBLAS in the same rounds) that grid with BW = 64 ran ahead of every other tried --
# geometric means 1.005 / 1.033 / 1.021 at 1 / 16 / 32 rows, against 0.98-1.00 / 0.99-1.03 /
# 0.94-1.02 for two blocks an SM, runs of 4 steps, or BW = 128. Fewer, longer runs leave fewer parts
# to add up at the end, and the last run of a tile adds them after everyone else has finished.
SKINNY_BLOCKS_PER_SM = 1
SKINNY_MIN_STEPS = 16  # K steps a run at least


def skinny_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """The runs along K (gridDim.y) tc10 splits each tile's K steps into: enough for the tiles to
    fill the SMs' block slots, each run at least SKINNY_MIN_STEPS K steps long; 1 where the tiles
    alone fill them."""
    tiles = cdiv(problem.N, c["BW"]) * cdiv(problem.M, c["NT"])
    kt = cdiv(problem.K, c["BK"])
    slots = sms * SKINNY_BLOCKS_PER_SM
    if tiles >= slots or kt < 2 * SKINNY_MIN_STEPS:
        return 1
    return max(1, min(slots // tiles, kt // SKINNY_MIN_STEPS, GRID_YZ_MAX))


def skinny_blocks(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """tc10's blocks for the problem: column tiles x row tiles x runs along K."""
    return cdiv(problem.N, c["BW"]) * cdiv(problem.M, c["NT"]) * skinny_runs(problem, c, sms)


def _tc10_smem(c: GemmConfig) -> int:
    return c["STAGES"] * (c["BW"] + c["NT"]) * c["BK"] * 2 + _barriers(c) + 16 + 1024  # (16: a flag a consumer)


def _check_10_tc(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["BW"] in (64, 128), "BW must be 64 or 128 (one consumer warpgroup per 64 columns of D)"),
        (c["NT"] in (16, 32, 64, 128), "NT must be 16, 32, 64 or 128 (the N of one m64nNTk16 MMA: rows of D)"),
        (c["BK"] == 64, "BK must be 64 (one 128-byte swizzle row of K a stage)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
        (_tc10_smem(c) <= 227 * 1024, f"shared memory {_tc10_smem(c)} B exceeds 227 KB"),
    )


TC_10 = KernelSpec(
    id="tc10_skinny",
    epilogues=True,
    step=10,
    title="skinny: the few rows on the MMA's N side",
    idea="D^T = B^T A^T for a few rows of A (decode): B^T's columns on wgmma's M side, A's rows as its N (16-128), K split over the SMs and summed in fp32 by the last run of each tile",
    source="tensorcore/10_skinny.cu",
    entry="tc_skinny",
    params=(
        Param("BW", 64, "columns of D a block: 64 per consumer warpgroup (64 or 128)"),
        Param("NT", 16, "rows of D a block: the N of one m64nNTk16 MMA (16, 32, 64 or 128)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row)"),
        Param("STAGES", 8, "shared buffers in the TMA ring"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major; 0: B row-major, read M-major (set from the problem)"),
    ),
    block=lambda c: ((c["BW"] // 64) * 128 + 32, 1, 1),  # the consumer warpgroups, then the producer warp
    grid=lambda M, N, c: (cdiv(N, c["BW"]) * cdiv(M, c["NT"]), 1, 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc10_smem,
    check_config=_check_10_tc,
    seeds="issue 3, past the ladder: a decode step's GEMM is a weight streamed from memory; swap the operands so its few rows are the MMA's N",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["NT"], c["BK"]), "b": (c["BW"], c["BK"]) if c["TB"] else (c["BK"], 64)},
    min_capability=(9, 0),
    # a BW x NT fp32 part a block of a split grid, a counter a consumer warpgroup and column tile
    workspace=lambda c, grid: (grid[0] * grid[1] * c["BW"] * c["NT"], grid[0] * (c["BW"] // 64)) if grid[1] > 1 else (0, 0),
    k_runs=skinny_runs,
    layouts=("nn", "nt"),
    tags=("skinny",),  # for a few rows only: the default benchmark's squares leave it out
)

