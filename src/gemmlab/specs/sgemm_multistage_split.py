"""Step 15's split of K (SPLIT = 1): the tiles it may split with and the model of their time, step
12's model (split_k_time's units, its block cost and its reduction pass) with step 15's own tiles.

Every split of step 15 ends in step 12's reduction pass (its parts are step 12's RED = 1 layout), so
its runs are chosen as step 12's RED = 1 runs are: at least SPLIT_K_RED_MIN_SLICES slices each, at
most SPLIT_K_RED_MAX_RUNS, the count the model gives the least time. The throughputs below are not
fitted; on an H100 the model's pick was within 4% of the best split tile at every shape timed
(docs/ladder/sgemm-15-multistage.md)."""

from __future__ import annotations

from ..problem import GemmProblem
from .base import GRID_YZ_MAX, GemmConfig, cdiv
from .sgemm import SPLIT_K_BLOCK_COST, SPLIT_K_RED_MAX_RUNS, SPLIT_K_RED_MIN_SLICES, split_k_reduce_time

# (BM, BN) -> (overrides of step 15's defaults, blocks an SM, relative FFMA throughput of an SM full of
# such blocks). The three 4-warp tiles are cuBLAS's sm80 SGEMM tiles on an H100 at the shapes step 12
# serves (64 x 128 split 4-8 ways at 32-64 rows, 64 x 64 split 4 at 512^3, 128 x 64 at 1024^3,
# results/nvidia-h100-80gb-hbm3/probe-cublas-kernels-fp32-nn-20261127T200559Z.json); 128 x 128 (256
# threads) is step 15's default, cuBLAS's tile split 4 ways at 1024 x 1024 x 16384. Blocks an SM:
# from the registers ptxas gives the SPLIT = 1 builds for sm_90a (122, 153, 149 and 91 a thread,
# tests/test_fp32_multistage_split.py) and the 64K registers of an SM, allocated 256 a warp: 64 x 128
# and 128 x 64 fit three blocks (four would need 128 a thread). Throughputs, set before any timing
# and kept since their picks held up on an H100: 1.0 for the tiles step 15 already ran at
# 0.86x-1.02x cuBLAS, less for 64 results a thread (more shared-memory reads a FMA) and step 12's
# fitted 0.7 for 32.
MULTISTAGE_SPLIT_TILES: dict[tuple[int, int], tuple[dict[str, int], int, float]] = {
    (128, 128): (dict(), 2, 1.0),
    (64, 128): (dict(BM=64, BN=128, WM=32, WN=64, TM=8, TN=8), 3, 0.9),
    (128, 64): (dict(BM=128, BN=64, WM=64, WN=32, TM=8, TN=8), 3, 0.9),
    (64, 64): (dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8), 5, 0.7),
}


def multistage_split_time(M: int, N: int, K: int, c: GemmConfig, runs: int, sms: int) -> float:
    """Modelled time of step 15 with tile c and K cut into `runs` runs, in split_k_time's units (one
    BK slice of a 256 x 128 tile on an SM of its own): whole waves of blocks, each its share of K's
    slices plus a block's fixed cost, plus step 12's reduction pass where runs > 1."""
    _, per_sm, speed = MULTISTAGE_SPLIT_TILES.get((c["BM"], c["BN"]), ({}, 1, 0.5))
    tiles, kt = cdiv(M, c["BM"]) * cdiv(N, c["BN"]), max(1, cdiv(K, c["BK"]))
    waves = cdiv(tiles * runs, sms * per_sm)
    slice_time = c["BM"] * c["BN"] * per_sm / (256 * 128 * speed)  # a block's slice, per_sm blocks sharing an SM
    reduce = split_k_reduce_time(M, N, c, runs) if runs > 1 else 0.0
    return waves * slice_time * (cdiv(kt, runs) + SPLIT_K_BLOCK_COST) + reduce


def multistage_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int | None:
    """The runs along K (gridDim.y) of a SPLIT = 1 config: the count multistage_split_time models
    fastest, each of at least SPLIT_K_RED_MIN_SLICES slices; None for SPLIT = 0 (its grid is the
    spec's, tiles across and down)."""
    if not c["SPLIT"]:
        return None
    most = max(1, min(SPLIT_K_RED_MAX_RUNS, cdiv(problem.K, c["BK"]) // SPLIT_K_RED_MIN_SLICES, GRID_YZ_MAX))
    M, N, K = problem.M, problem.N, problem.K
    return min(range(1, most + 1), key=lambda r: (multistage_split_time(M, N, K, c, r, sms), r))
