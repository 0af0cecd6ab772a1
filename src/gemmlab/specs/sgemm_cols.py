"""FP32 step 14, few columns (N <= 16: a matrix times a vector or a few): its tunables, the checks
its static_asserts make, and the runs along K its grid launches (few_columns_runs)."""

from __future__ import annotations

from ..problem import GemmProblem
from .base import GRID_YZ_MAX, STATIC_SMEM_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv

FEW_COLUMNS_MAX_N = 16  # the widest D a block covers (NC = 16)
FEW_COLUMNS_NC = (1, 2, 4, 8, 16)
FEW_COLUMNS_B_FLOATS = 8192  # BK * NC: 32 KB of B's chunk a block (configs.fp32.few_columns_config)

# The runs along K: where the blocks of rows are fewer than FEW_COLUMNS_BLOCKS_PER_SM an SM, K is
# split until they are not, each run at least FEW_COLUMNS_MIN_STEPS steps (128 * KV floats) of K.
# One block of eight warps an SM holds RW * KV = 16 loads of 16 bytes a thread in flight (KV = 4, up
# to NC = 8), 64 KB an SM, which Little's law says is enough for an H100's 3.35 TB/s at ~2.5 us of
# latency; measured, it is not: on an H200 (the same problem with one, two and three blocks an SM
# alternated in one process, cuBLAS SGEMM in the same rounds; docs/ladder/sgemm-14-few-columns.md)
# two blocks an SM ran 4096 x 16 x 4096 at 1.34x cuBLAS against 0.94x with one (4096 rows at RW = 4:
# 128 blocks, split into 2 runs), 4096 x 8 x 4096 1.64x against 1.35x, 2048 x 16 x 4096 1.55x against
# 1.19x, 4096 x 4 x 4096 2.64x against 2.50x; three were slower than two at each. A run's fixed cost --
# staging B, the sums across the warp, writing its part and counting itself in -- is about what a
# step of A costs, hence runs of at least two steps.
FEW_COLUMNS_BLOCKS_PER_SM = 2
FEW_COLUMNS_MIN_STEPS = 2


def rows_per_block(c: GemmConfig) -> int:
    """Rows of A (and D) a block streams: THREADS / 32 warps of RW rows."""
    return c["THREADS"] // 32 * c["RW"]


def few_columns_pad(nc: int) -> int:
    """Floats of padding a row of sBt[NC][BK + PAD] (the kernel's few_columns::pad): staging stores
    of a warp in distinct banks, rows 16-byte aligned."""
    return max(4, (32 // nc) % 32)


def few_columns_smem(c: GemmConfig) -> int:
    """Static shared memory in bytes: sBt and the flag of the last run to arrive."""
    return c["NC"] * (c["BK"] + few_columns_pad(c["NC"])) * 4 + 4 if c["NC"] in FEW_COLUMNS_NC else 0


def few_columns_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """The runs along K (gridDim.y) step 14 splits each block of rows into: 1 where the blocks of
    rows fill FEW_COLUMNS_BLOCKS_PER_SM an SM, else as many as fill them, each run at least
    FEW_COLUMNS_MIN_STEPS steps of K."""
    steps = cdiv(problem.K, 128 * c["KV"])
    blocks = max(1, cdiv(problem.M, rows_per_block(c)))
    slots = sms * FEW_COLUMNS_BLOCKS_PER_SM
    if blocks >= slots or steps < 2 * FEW_COLUMNS_MIN_STEPS:
        return 1
    return max(1, min(slots // blocks, steps // FEW_COLUMNS_MIN_STEPS, GRID_YZ_MAX))


def _check_14(c: GemmConfig) -> str | None:
    step = 128 * max(c["KV"], 1)
    return _first_failure(
        (c["NC"] in FEW_COLUMNS_NC, "NC must be 1, 2, 4, 8 or 16 (columns of D a block covers)"),
        (c["RW"] in (1, 2, 4, 8), "RW must be 1, 2, 4 or 8 (rows of A a warp streams)"),
        (1 <= c["KV"] <= 8, "KV must be 1..8 (128-float steps of K a row has in flight)"),
        (c["THREADS"] % 32 == 0, "THREADS must be a multiple of 32 (whole warps)"),
        (c["BK"] > 0 and c["BK"] % step == 0, f"BK must be a multiple of 128 * KV = {step} (whole steps of a warp)"),
        (few_columns_smem(c) <= STATIC_SMEM_MAX,
         f"sBt ({few_columns_smem(c)} B) exceeds the 48 KB of static shared memory"),
    )


def _columns_covered(problem: GemmProblem, c: GemmConfig) -> str | None:
    """Why a config's NC columns do not cover the problem's D (spec.max_n caps N itself)."""
    if problem.N > c["NC"]:
        return f"config NC={c['NC']} covers {c['NC']} columns of D, not N={problem.N}"
    return None


SGEMM_14 = KernelSpec(
    id="sgemm_14_few_columns",
    epilogues=True,
    step=14,
    title="few columns",
    idea="N <= 16: each warp streams RW rows of A once in 16-byte loads against B's K chunk transposed in shared memory, sums added across the warp by shuffles; K split over runs where the rows cannot fill the SMs",
    source="sgemm/14_few_columns.cu",
    entry="sgemm_few_columns",
    params=(
        Param("NC", 16, "columns of D a block covers: N rounded up to 1, 2, 4, 8 or 16"),
        Param("RW", 4, "rows of A a warp streams at once (each float4 of B read from shared memory serves RW rows)"),
        Param("KV", 2, "128-float steps of K a row has in flight: RW * KV 16-byte loads a thread"),
        Param("BK", 512, "floats of K a block stages of B at a time (BK x NC, a multiple of 128 * KV)"),
        Param("THREADS", 256, "threads a block: THREADS / 32 warps of RW rows each"),
    ),
    block=lambda c: (c["THREADS"], 1, 1),
    grid=lambda M, N, c: (cdiv(M, rows_per_block(c)), 1, 1),
    check_config=_check_14,
    extra_constraints=_columns_covered,
    max_n=FEW_COLUMNS_MAX_N,
    seeds="past the seeds: a GEMV's weight streamed once (cuBLAS's gemv kernels); step 12's last-run sum",
    # a block's V = RW * NC sums a warp, a part a block of a split grid; a counter a block of rows
    workspace=lambda c, grid: (grid[0] * grid[1] * rows_per_block(c) * c["NC"], grid[0]) if grid[1] > 1 else (0, 0),
    k_runs=few_columns_runs,
)
