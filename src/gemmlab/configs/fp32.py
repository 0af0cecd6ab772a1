"""Selection for the FP32 steps past the seeds: step 12's tile for a problem (split_k_config; its K
runs are the spec's split_k_runs, by the same model), step 13's rows (few_rows_config), step 14's
config for a few columns (few_columns_config) and step 15's tile (multistage_config, split along K
where that pays), with the problems 'auto' gives each."""

from __future__ import annotations

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig
from ..specs.sgemm_rows import FEW_ROWS_MAX
from ..specs.sgemm import SPLIT_K_RED_MIN_SLICES, SPLIT_K_SERIAL_WARPS, SPLIT_K_TILES, split_k_runs, split_k_time
from ..specs.sgemm_cols import FEW_COLUMNS_B_FLOATS, FEW_COLUMNS_MAX_N, FEW_COLUMNS_NC
from ..specs.sgemm_multistage_split import MULTISTAGE_SPLIT_TILES, multistage_runs, multistage_split_time
from .rules import _rule_config, _size_rule_config


def split_k_tiles(split: int = 1, red: int = 0) -> list[GemmConfig]:
    """Step 12's candidate tiles (SPLIT_K_TILES), as configs that may split K (split = 1) or not, and
    whose parts the last run adds (red = 0, on SPLIT_K_SERIAL_WARPS' warps where it names the tile)
    or the reduction pass (red = 1, with split = 1)."""
    spec = registry.get("sgemm_12_split_k")
    return [_rule_config(spec, tuple(sorted({**o, **(SPLIT_K_SERIAL_WARPS.get(t, {}) if red == 0 else {}),
                                             "SPLIT": split, "RED": red}.items())))
            for t, (o, _, _) in SPLIT_K_TILES.items()]  # fmt: skip


def split_k_config(problem: GemmProblem) -> GemmConfig:
    """The tile and reduction (RED = 0: the last run; 1: the pass) whose best run count
    split_k_time models fastest for the problem (the larger tile, then RED = 0, on a tie); its
    SPLIT = 0 instantiation where that count is one."""
    sms = sm_count_of(problem.device)
    M, N, K = problem.M, problem.N, problem.K

    def best(c: GemmConfig) -> float:
        return split_k_time(M, N, K, c, split_k_runs(problem, c, sms), sms)

    cfg = min(split_k_tiles() + split_k_tiles(1, 1), key=lambda c: (best(c), -c["BM"] * c["BN"], c["RED"]))
    if split_k_runs(problem, cfg, sms) > 1:
        return cfg
    return _rule_config(registry.get("sgemm_12_split_k"),
                        tuple(sorted({**cfg.as_dict(), "SPLIT": 0, "RED": 0}.items())))  # fmt: skip


# Step 13's chunk of K (KC) by rows, from an H100 (gemmlab bench -k 'sgemm_13_few_rows[MR=..,KC=..]',
# ratios to cuBLAS SGEMM in the same runs): at 8 rows KC = 128 ran 1.04x / 1.11x at 8 x 14336 x 4096 /
# 8 x 4096 x 4096 against 0.81x / 0.87x for 64; at 16 rows KC = 32 ran 0.80x / 1.29x at 16 x 14336 x
# 4096 / 16 x 4096 x 4096, 128 0.73x / 1.32x, 64 0.69x / 1.19x; at one row 64 ran 0.73-0.82x at
# 1 x 4096 x 4096 and 128 0.77x. Untried: 2 and 4 rows (they take the chunk of their neighbours).
FEW_ROWS_KC = {1: 64, 2: 64, 4: 128, 8: 128, 16: 32}
# Step 13's software pipeline (PIPE = 1: a chunk's loads before the previous chunk's FMAs) by rows, H200,
# the same config with and without it in the same rounds (results/nvidia-h200/tune-fp32-rows-pipe-20261128T050821Z.json, -050828Z.json.gz):
# at 8 rows 1.127x / 1.113x cuBLAS SGEMM at 8 x 4096 x 4096 / 8 x 14336 x 4096 against 1.011x / 0.953x,
# at 16 rows 1.689x / 1.075x at 16 x 4096 x 4096 / 16 x 14336 x 4096 against 1.613x / 1.022x; at one row
# it lost (0.679x against 0.806x at 1 x 4096 x 4096, 0.792x against 0.997x at 1 x 8192 x 8192), at two
# it was mixed, and at four (KC = 128) it spills under the two-blocks-an-SM bound.
FEW_ROWS_PIPE = {1: 0, 2: 0, 4: 0, 8: 1, 16: 1}
# Step 13 with A read by each lane from global memory (AGLOBAL = 1: no shared copy of A, no barriers in
# the main loop) by rows, H200, the same config with and without it in the same rounds
# (results/nvidia-h200/tune-fp32-rows-aglobal-20261128T093153Z.json, tune-fp32-rows2-aglobal-20261128T093636Z.json.gz):
# at one row 0.823x against 0.790x cuBLAS SGEMM at 1 x 4096 x 4096, 0.937x / 0.834x at 1 x 1024 x 1024,
# 0.925x / 0.856x at 1 x 2048 x 2048, 0.867x / 0.814x at 1 x 4096 x 1024, 0.874x / 0.838x at
# 1 x 1024 x 4096, 0.970x / 0.955x at 1 x 14336 x 4096, 0.967x / 0.942x at 1 x 4096 x 14336, and
# 0.981x / 0.991x at 1 x 8192 x 8192, its one loss; at two rows it lost where B is large (2.05x against
# 2.35x at 2 x 4096 x 4096, 1.24x / 1.41x at 2 x 14336 x 4096) and won only at 2 x 1024 x 1024.
FEW_ROWS_AGLOBAL = {1: 1, 2: 0, 4: 0, 8: 0, 16: 0}


def few_rows_config(problem: GemmProblem) -> GemmConfig:
    """Step 13's rows, the problem's rounded up to 1, 2, 4, 8 or 16 (FEW_ROWS_MAX), and its chunk of
    K for those rows (FEW_ROWS_KC)."""
    mr = next((r for r in FEW_ROWS_KC if problem.M <= r), FEW_ROWS_MAX)
    return _few_rows_rule(mr)


def few_rows_configs() -> list[GemmConfig]:
    return [_few_rows_rule(mr) for mr in FEW_ROWS_KC]


def _few_rows_rule(mr: int) -> GemmConfig:
    """Step 13's config for MR rows: its chunk (FEW_ROWS_KC), pipeline (FEW_ROWS_PIPE) and where its
    lanes read A (FEW_ROWS_AGLOBAL)."""
    overrides = (("AGLOBAL", FEW_ROWS_AGLOBAL[mr]), ("KC", FEW_ROWS_KC[mr]), ("MR", mr), ("PIPE", FEW_ROWS_PIPE[mr]))
    return _rule_config(registry.get("sgemm_13_few_rows"), overrides)


def few_rows_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes step 13 for problems of at most FEW_ROWS_MAX rows (it serves more, a row block
    at a time, when named)."""
    if problem.M > FEW_ROWS_MAX:
        return f"{problem.M} rows: sgemm_13_few_rows serves problems of at most {FEW_ROWS_MAX} rows"
    return None


# Step 11 where A's or B's rows are not whole 16-byte units (each float4 of a slice then goes through
# four checked scalar loads): its 128 x 128 tile, which hands each slice over before the slice's last
# k step (SYNC = 1), ran ahead of the 256 x 128 tile of the size rule at every such shape measured,
# and ahead of step 15 from K = 512 (H100, ratios to cuBLAS SGEMM in the same rounds,
# results/nvidia-h100-80gb-hbm3/tune-fp32-sync-odd-20261128T044728Z.json.gz): 3135^3 0.886x against
# 0.719x (and step 12's split, 'auto' before: 0.844x), 5001^3 0.850x against 0.763x, 4099 x 4099 x 1021
# 0.869x against 0.761x (step 15: 0.772x-0.788x), 6133 x 6133 x 1021 0.808x against 0.757x,
# 2047 x 8191 x 515 0.801x against 0.753x. On aligned rows the two tiles are within 1% from 2048^2
# on (6132^3: 0.873x against 0.865x), so the size rule stands there.
MISALIGNED_WHOLE_K_MIN = 512  # K from which misaligned rows go to step 11's 128 x 128 tile, not step 15


def rows_misaligned(problem: GemmProblem) -> bool:
    """Whether A's or B's rows, as the FP32 steps read them, are not whole 16-byte units: a row-major
    operand with a leading dimension or address off a multiple of 16 bytes, or a transposed one whose
    row-major copy (fresh, K or N floats a row) has rows of a length that is not a multiple of 4."""
    def off(o) -> bool:
        rows, cols = o.shape
        return cols % 4 != 0 if o.trans else (o.ld % 4 != 0 or o.ptr % 16 != 0)

    return off(problem.a) or off(problem.b)


def whole_tile_config(problem: GemmProblem) -> GemmConfig:
    """Step 11's config for the problem: the size rule's tile, or the 128 x 128 default where the
    rows are misaligned (rows_misaligned)."""
    spec = registry.get("sgemm_11_warp_tile")
    return spec.default_config() if rows_misaligned(problem) else _size_rule_config(spec, problem)


# Step 12's main loop is step 11's, yet ran 7% slower on an H100 at 2048^3 and 4096^3 (0.815x / 0.829x
# cuBLAS SGEMM against 0.877x / 0.892x for step 11 at the same 256 x 128 tile, one run, same runs of
# gemmlab bench; results/nvidia-h100-80gb-hbm3/fp32-shapes-20261125T185401Z.json also shows its splits
# of the large squares behind step 11's single runs). 'auto' therefore gives it only the problems its
# split is modelled to serve in at most SPLIT_K_GAIN_MIN of step 11's time.
SPLIT_K_GAIN_MIN = 0.85
# Where the rows are misaligned (rows_misaligned) step 11's 128 x 128 tile with SYNC = 1 runs further
# ahead of the model: at 3135^3 step 12's split, modelled at 0.85 of its time, took 1.05x it (0.844x
# against 0.886x cuBLAS SGEMM, fp32-shapes-20261127T232325Z and tune-fp32-sync-odd-20261128T044728Z, H100).
SPLIT_K_GAIN_MIN_MISALIGNED = 0.8


def split_k_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """None where step 12 splits K and split_k_time models it well ahead of step 11's one run
    (SPLIT_K_GAIN_MIN); else why step 11 serves the problem instead."""
    if not c["SPLIT"]:
        return "K is not split: step 11 runs the same tile"
    sms = sm_count_of(problem.device)
    whole = whole_tile_config(problem)
    t_split = split_k_time(problem.M, problem.N, problem.K, c, split_k_runs(problem, c, sms), sms)
    t_whole = split_k_time(problem.M, problem.N, problem.K, whole, 1, sms)
    gain_min = SPLIT_K_GAIN_MIN_MISALIGNED if rows_misaligned(problem) else SPLIT_K_GAIN_MIN
    if t_split > gain_min * t_whole:
        return f"split K is modelled at {t_split / t_whole:.2f} of step 11's time (it pays below {gain_min})"
    return None


# Step 14: NC is N rounded up to a power of two (B's columns past N are zeros in shared memory), BK
# as long as FEW_COLUMNS_B_FLOATS of B's chunk allow, RW = 4 rows a warp, and KV (loads in flight a
# row) as deep as two blocks of 256 threads an SM allow: ptxas for sm_90a gives 100, 104, 128 and 128
# registers a thread at NC = 1, 2, 4 and 8 with KV = 4; at NC = 16 254 with KV = 4, 124 with KV = 2.
# Not yet tuned on a GPU.
FEW_COLUMNS_KV = {1: 4, 2: 4, 4: 4, 8: 4, 16: 2}


def few_columns_configs() -> list[GemmConfig]:
    """Step 14's config for each column count NC."""
    spec = registry.get("sgemm_14_few_columns")
    return [_rule_config(spec, (("BK", FEW_COLUMNS_B_FLOATS // nc), ("KV", FEW_COLUMNS_KV[nc]), ("NC", nc)))
            for nc in FEW_COLUMNS_NC]  # fmt: skip


def few_columns_config(problem: GemmProblem) -> GemmConfig:
    """Step 14's config for the problem: the fewest columns NC that cover N (NC = 16 past 16 columns,
    which the spec then turns down with the reason)."""
    configs = few_columns_configs()
    return next((c for c in configs if problem.N <= c["NC"]), configs[-1])


def few_columns_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes step 14 for D of at most FEW_COLUMNS_MAX_N columns, where tiles of 64 or more
    columns waste most of their FMAs (float32 and fp32 math are its spec's own checks). The spec's
    max_n turns wider D down already; a limit measured on a GPU (a size below which step 14 does
    not pay) belongs here."""
    if problem.N > FEW_COLUMNS_MAX_N:
        return f"N={problem.N}: sgemm_14_few_columns serves D of at most {FEW_COLUMNS_MAX_N} columns"
    return None


# Step 15 (cp.async multistage) against step 11's 256 x 128 tile, H100, ratios to cuBLAS SGEMM in the
# same rounds (results/nvidia-h100-80gb-hbm3/tune-fp32-ms-20261127T202436Z.json.gz and -202617Z.json.gz):
# - K of 100-300: 0.91x-1.02x against 0.62x-0.79x (4096 x 4096 x 128 0.98x against 0.64x);
# - K = 512: 0.86x against 0.79x-0.82x; K = 1024: 0.85x against 0.84x-0.86x, a tie;
# - K >= 2048: behind (0.84x against 0.88x at 4096 x 4096 x 2048, 0.84x against 0.91x at 8192^3).
# Its tile: 128 x 128 (two blocks an SM) ahead of 256 x 128 at K <= 256 (0.98x against 0.93x at
# 4096 x 4096 x 128, 1.02x against 0.93x at 2048 x 2048 x 100), behind it at K = 512 (0.84x against
# 0.86x). Below 2048^2 results 128 x 128 (0.58x at 1024 x 1024 x 256 against 0.34x for 256 x 128).
MULTISTAGE_K_MAX = 1024  # K from which step 11 serves whole tiles instead
MULTISTAGE_SHORT_K = 256  # K up to which the 128 x 128 tile serves at any size
MULTISTAGE_WIDE = dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8)


# Step 15 split along K (SPLIT = 1: cuBLAS's recipe at the shapes step 12 ran below 0.8x cuBLAS
# SGEMM -- 64 x 128 tiles of 128 threads split 4-8 ways at 32-64 rows, 64 x 64 at 512^3, 128 x 128
# at 1024 x 1024 x 16384 -- its parts added by step 12's reduction pass). On an H100, against cuBLAS
# SGEMM in the same rounds (results/nvidia-h100-80gb-hbm3/tune-fp32-ms-split-*), the tile and runs
# multistage_split_config picks against step 12 as 'auto' ran it:
# - 32-64 rows: 0.86x-0.91x against 0.74x-0.81x (64 x 128 tiles); 64 columns: 0.88x against 0.79x;
# - squares: 512^3 0.94x against 0.68x, 768^3 1.05x against 0.79x, 1024^3 0.95x against 0.81x,
#   1031^3 0.77x against 0.74x;
# - 1024 x 1024 x 16384: 0.78x against 0.78x, a tie.
# Where it stops paying (results/nvidia-h100-80gb-hbm3/tune-fp32-ms-split-small-*, fp32-shapes-*):
# - at long K on the 128 x 128 tile, step 12's 256 x 128 RED = 1 split is ahead: 512 x 512 x 4096
#   0.88x against 0.91x, 512 x 512 x 16384 0.82x against 0.88x, 256 x 256 x 65536 0.82x against
#   0.89x, 1024 x 1024 x 12288 0.78x against 0.81x (1024 x 1024 x 8192 a tie): from K =
#   MULTISTAGE_SPLIT_LONG_K only the 4-warp tiles split on step 15, and only up to
#   MULTISTAGE_SPLIT_K_MAX (64 x 64 x 131072 on 64 x 128: 0.71x against 0.75x);
# - below MULTISTAGE_SPLIT_MIN_FLOPS a second launch costs more than the tile gains: 64^3 10.0 us
#   against 9.0, 128^3 10.4 against 9.7, 64 x 64 x 1024 12.2 against 11.6; 256^3 a tie; 384^3
#   13.9 us against 14.5.
# So 'auto' splits K on step 15 for every problem between those bounds (past a few rows and
# columns) whose best split multistage_split_time models at most MULTISTAGE_SPLIT_GAIN_MIN of step
# 11's one run of the whole tile (split_k_pays's test, with step 15's tiles and model), and step 12
# keeps what is left.
MULTISTAGE_SPLIT_LONG_K = 4096
MULTISTAGE_SPLIT_K_MAX = 8192
MULTISTAGE_SPLIT_MIN_FLOPS = 1 << 26  # 2 x 323^3
MULTISTAGE_SPLIT = True
MULTISTAGE_SPLIT_GAIN_MIN = SPLIT_K_GAIN_MIN


def multistage_configs() -> list[GemmConfig]:
    """Step 15's tiles 'auto' launches: the default 128 x 128 and 256 x 128 (MULTISTAGE_WIDE), and
    with MULTISTAGE_SPLIT its split tiles (multistage_split_configs)."""
    spec = registry.get("sgemm_15_multistage")
    whole = [spec.default_config(), _rule_config(spec, tuple(sorted(MULTISTAGE_WIDE.items())))]
    return whole + (multistage_split_configs() if MULTISTAGE_SPLIT else [])


def multistage_split_configs() -> list[GemmConfig]:
    """Step 15's split tiles (MULTISTAGE_SPLIT_TILES), SPLIT = 1."""
    spec = registry.get("sgemm_15_multistage")
    return [_rule_config(spec, tuple(sorted({**o, "SPLIT": 1}.items()))) for o, _, _ in MULTISTAGE_SPLIT_TILES.values()]


def multistage_split_config(problem: GemmProblem) -> tuple[GemmConfig, int, float] | None:
    """The split tile, its runs and its modelled time, fastest by multistage_split_time among those
    whose best run count is above one (the larger tile on a tie); None where no tile splits K."""
    sms = sm_count_of(problem.device)
    M, N, K = problem.M, problem.N, problem.K
    picks = [(c, r, multistage_split_time(M, N, K, c, r, sms))
             for c in multistage_split_configs() for r in [multistage_runs(problem, c, sms)] if r > 1]  # fmt: skip
    return min(picks, key=lambda p: (p[2], -p[0]["BM"] * p[0]["BN"]), default=None)


def multistage_split_pays(problem: GemmProblem) -> str | None:
    """None where step 15 would split K for the problem (MULTISTAGE_SPLIT aside): past a few rows and
    columns, between the bounds measured (MULTISTAGE_SPLIT_MIN_FLOPS, MULTISTAGE_SPLIT_K_MAX, and
    4-warp tiles only from MULTISTAGE_SPLIT_LONG_K), its best split modelled at most
    MULTISTAGE_SPLIT_GAIN_MIN of step 11's one run of the whole tile; else why not."""
    if problem.M <= FEW_ROWS_MAX or problem.N <= FEW_COLUMNS_MAX_N:
        return "a few rows or columns: steps 13 and 14 stream the large operand once"
    if problem.flops < MULTISTAGE_SPLIT_MIN_FLOPS:
        return f"{problem.flops} flops: below {MULTISTAGE_SPLIT_MIN_FLOPS}, step 12's one launch is ahead"
    if problem.K > MULTISTAGE_SPLIT_K_MAX:
        return f"K={problem.K}: step 12 splits K past {MULTISTAGE_SPLIT_K_MAX}"
    pick = multistage_split_config(problem)
    if pick is None:
        return f"K={problem.K} is too short to split into runs of {SPLIT_K_RED_MIN_SLICES} slices that pay"
    if problem.K >= MULTISTAGE_SPLIT_LONG_K and pick[0]["BM"] * pick[0]["BN"] >= 128 * 128:
        return f"K={problem.K}: step 12's 256 x 128 split is ahead of step 15's 128 x 128 from K = {MULTISTAGE_SPLIT_LONG_K}"
    sms = sm_count_of(problem.device)
    whole = whole_tile_config(problem)
    t_whole = split_k_time(problem.M, problem.N, problem.K, whole, 1, sms)
    if pick[2] > MULTISTAGE_SPLIT_GAIN_MIN * t_whole:
        return f"step 15's split is modelled at {pick[2] / t_whole:.2f} of step 11's time (it pays below {MULTISTAGE_SPLIT_GAIN_MIN})"
    return None


def multistage_config(problem: GemmProblem) -> GemmConfig:
    """With MULTISTAGE_SPLIT, the split tile where splitting K pays (multistage_split_pays); else 128 x
    128 where K is short (MULTISTAGE_SHORT_K) or the output small (below 2048^2), 256 x 128 past that."""
    if MULTISTAGE_SPLIT and multistage_split_pays(problem) is None:
        return multistage_split_config(problem)[0]
    small, wide = multistage_configs()[:2]
    return small if problem.K <= MULTISTAGE_SHORT_K or problem.M * problem.N < 2048 * 2048 else wide


def multistage_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes step 15 for whole tiles where K is short of MULTISTAGE_K_MAX, and leaves few rows
    and columns to steps 13 and 14 and the splits step 12 is modelled to serve to it; a split config
    (multistage_config gives one only with MULTISTAGE_SPLIT, where it pays) it takes."""
    if c["SPLIT"]:
        return None
    if problem.K >= MULTISTAGE_K_MAX:
        return f"K={problem.K}: step 11's main loop serves whole tiles from K = {MULTISTAGE_K_MAX}"
    if problem.K >= MISALIGNED_WHOLE_K_MIN and rows_misaligned(problem):
        return f"K={problem.K} with rows that are not whole 16-byte units: step 11's 128 x 128 tile serves them"
    if problem.M <= FEW_ROWS_MAX or problem.N <= FEW_COLUMNS_MAX_N:
        return "a few rows or columns: steps 13 and 14 stream the large operand once"
    split = split_k_config(problem)
    if split_k_pays(problem, split) is None:
        return "step 12 splits K for this problem"
    return None


# x @ w.t() in fp32 (a Linear's forward pass: B stored transposed). Step 12 reads such a B where it
# lies (TB = 1); steps 11, 13 and 15 are handed a row-major copy of it, made on every call, which
# moves the whole weight twice through a transposing copy (125 us for a 4096 x 4096 weight on an
# H200, where step 12 takes 78 us for the whole product at one row). Step 11's tile reading B in
# place (tried: B's slices loaded along K and stored transposed, as A's are) ran 1854 us at 2048 x
# 4096 x 4096 against step 12's 1530 and 1620 for step 11 with the copy; at few rows step 12 in
# place ran 78-84 us at 1-64 x 4096 x 4096 against 148-192 for steps 13 and 15 with the copy, and
# from 128 rows on the copy's share is small enough that step 15 on it can keep up (512^3: 25 us
# with the copy against 27 in place; 4096 x 4096 x 128: 124 against 171). H200, fp32, cold L2,
# interleaved: docs/notes/fp32-transposed-weight.md. (Up to 16 rows gemm() itself computes
# D^T = w x^T on step 14 instead: api.few_rows_as_columns.)
TRANSPOSED_B_COPY_ROWS = 128  # rows from which steps 13 and 15 keep their choice with the copy


def transposed_b_in_place(problem: GemmProblem, spec) -> bool:
    """Whether 'auto' gives an fp32 problem with B stored transposed (layout nt) to step 12 reading
    B where it lies rather than to `spec`, the row-major problem's kernel, on a copy of B."""
    if problem.layout != "nt" or problem.precision != "fp32" or spec.id == "sgemm_12_split_k":
        return False
    if spec.id == "sgemm_11_warp_tile":
        return True
    return spec.id in ("sgemm_13_few_rows", "sgemm_15_multistage") and problem.M < TRANSPOSED_B_COPY_ROWS
