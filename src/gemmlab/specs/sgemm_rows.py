"""FP32 step 13, few rows (a decode step's 1-16 rows of A against a row-major B): its config for a
problem's rows, and the runs along K its grid launches (few_rows_runs)."""

from __future__ import annotations

from ..problem import GemmProblem
from .base import GRID_YZ_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv

FEW_ROWS_COLS = 128  # columns of D a block: a warp's 32 lanes, four columns each


def few_rows_blocks_per_sm(c: GemmConfig) -> int:
    """Blocks of 256 threads an SM the runs are counted for (the kernel's launch bounds): two up to
    4 rows, one past them. On an H100 three blocks of one row ran 0.74x cuBLAS SGEMM at 1 x 4096 x
    4096 against 0.82x for two, and two blocks of 16 rows 0.63x at 16 x 14336 x 4096 against 0.80x
    for one (results/nvidia-h100-80gb-hbm3/fp32-shapes-20261125T185401Z.json and bench runs beside it)."""
    return 2 if c["MR"] <= 4 else 1


FEW_ROWS_MIN_CHUNKS = 2  # KC-column chunks of K a run at least
FEW_ROWS_MAX = 16  # rows a block covers at most, and the most 'auto' gives step 13 (configs.fp32)


def few_rows_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """The runs along K (gridDim.y): enough for the column blocks to fill the SMs' block slots
    (few_rows_blocks_per_sm), each run at least FEW_ROWS_MIN_CHUNKS chunks of K; 1 where the column
    blocks alone fill them."""
    blocks = cdiv(problem.N, FEW_ROWS_COLS) * cdiv(problem.M, c["MR"])
    slots = sms * few_rows_blocks_per_sm(c)
    chunks = cdiv(problem.K, c["KC"])
    if blocks >= slots or chunks < 2 * FEW_ROWS_MIN_CHUNKS:
        return 1
    return max(1, min(cdiv(slots, blocks), chunks // FEW_ROWS_MIN_CHUNKS, GRID_YZ_MAX))


def _part_floats(c: GemmConfig) -> int:
    return (c["MR"] + 3) // 4 * 256 * 2  # a thread's two columns of each group of four rows


def _check_13(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["MR"] in (1, 2, 4, 8, 16), "MR must be 1, 2, 4, 8 or 16 (rows of D a block covers)"),
        (c["KC"] >= 8 and c["KC"] % 8 == 0, "KC must be a multiple of 8 (the block's 8 warps split it)"),
        (c["AGLOBAL"] in (0, 1), "AGLOBAL must be 0 or 1"),
        (not c["AGLOBAL"] or (c["MR"] <= 2 and not c["PIPE"]), "AGLOBAL = 1 takes MR <= 2 and PIPE = 0"),
        (((1 + c["PIPE"]) * c["KC"] * (c["MR"] + 4 if c["MR"] >= 4 else c["MR"]) + 8 * 4 * FEW_ROWS_COLS) * 4 <= 48 * 1024,
         "the shared tiles exceed 48 KB"),
    )


SGEMM_13 = KernelSpec(
    id="sgemm_13_few_rows",
    epilogues=True,
    step=13,
    title="few rows",
    idea="1-16 rows of A against a row-major B streamed once: a block's 8 warps split K over 128 columns, K also split over the SMs; deterministic sums",
    source="sgemm/13_few_rows.cu",
    entry="sgemm_few_rows",
    params=(
        Param("MR", 16, "rows of D a block covers: M rounded up to 1, 2, 4, 8 or 16"),
        Param("KC", 64, "columns of A staged in shared memory at a time (rows of B a chunk)"),
        Param("PIPE", 0, "1: each chunk's loads go out before the previous chunk's FMAs (two shared buffers of A)"),
        Param("AGLOBAL", 0, "1 (MR <= 2, PIPE = 0): each lane reads A's values itself, no shared A and no barriers in the main loop"),
    ),
    block=lambda c: (256, 1, 1),
    grid=lambda M, N, c: (cdiv(N, FEW_ROWS_COLS) * cdiv(M, c["MR"]), 1, 1),  # column blocks, row block by row block
    check_config=_check_13,
    seeds="past the seeds: a GEMV streams its matrix once (seed 003's roofline: bytes, not FLOPs, bound it)",
    # a block's part (MR rows rounded up to four, 128 columns) a block of a split grid, a counter a column block
    workspace=lambda c, grid: (grid[0] * grid[1] * _part_floats(c), grid[0]) if grid[1] > 1 else (0, 0),
    k_runs=few_rows_runs,
    tags=("skinny",),  # for a few rows only: the default benchmark's squares leave it out
)
