"""The FP32 SIMT ladder (seeds 000-003): one KernelSpec a step, each step's tile sizes and the
checks its static_asserts make, said in Python before compiling."""

from __future__ import annotations

from ..problem import GemmProblem
from .base import GRID_YZ_MAX, STATIC_SMEM_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv


_BX = Param("BX", 32, "threads along blockDim.x")
_BY = Param("BY", 32, "threads along blockDim.y")

SGEMM_01 = KernelSpec(
    id="sgemm_01_naive",
    step=1,
    title="naive",
    idea="one thread per C element; consecutive threads walk rows of C (uncoalesced)",
    source="sgemm/01_naive.cu",
    entry="sgemm_naive",
    params=(_BX, _BY),
    block=lambda c: (c["BX"], c["BY"], 1),
    grid=lambda M, N, c: (cdiv(M, c["BX"]), cdiv(N, c["BY"]), 1),
    seeds="001 gemmKernel; 000 v1",
)

SGEMM_02 = KernelSpec(
    id="sgemm_02_coalesced",
    step=2,
    title="coalesced naive",
    idea="consecutive threads walk columns of C: B loads and C stores coalesce, A broadcasts",
    source="sgemm/02_coalesced.cu",
    entry="sgemm_coalesced",
    params=(_BX, _BY),
    block=lambda c: (c["BX"], c["BY"], 1),
    grid=lambda M, N, c: (cdiv(N, c["BX"]), cdiv(M, c["BY"]), 1),
    seeds="002 kernel 1",
)

SGEMM_03 = KernelSpec(
    id="sgemm_03_smem_tile",
    step=3,
    title="shared-memory tiles",
    idea="stage TILE x TILE tiles of A and B in shared memory: each global element read once per block",
    source="sgemm/03_smem_tile.cu",
    entry="sgemm_smem_tile",
    params=(Param("TILE", 32, "side of the square C tile, shared tiles and thread block"),),
    block=lambda c: (c["TILE"], c["TILE"], 1),
    grid=lambda M, N, c: (cdiv(N, c["TILE"]), cdiv(M, c["TILE"]), 1),
    check_config=lambda c: None if 2 * c["TILE"] ** 2 * 4 <= STATIC_SMEM_MAX else "shared tiles exceed 48 KB",
    seeds="000 v2; 002 kernel 2; 003 kernels 2-3; 004",
)


# Steps 04-11: register tiling, vector loads, conflict-free shared memory, pipelining, warp tiles.
# Every constraint below is also a static_assert in the kernel; these say it before compiling.


def _div(a: int, b: int) -> int:
    return a // b if b > 0 else 0  # a zero thread count, reported by KernelSpec.config


def _threads_2d(c: GemmConfig) -> int:
    return _div(c["BM"], c["TM"]) * _div(c["BN"], c["TN"])


def _threads_warp(c: GemmConfig) -> int:
    return _div(c["BM"], c["WM"]) * _div(c["BN"], c["WN"]) * 32


def _tiles_split(c: GemmConfig, threads: int, vector: int) -> tuple[bool, str]:
    """The A and B tiles, in units of `vector` floats, must split evenly over the threads."""
    a, b = c["BM"] * c["BK"] // vector, c["BK"] * c["BN"] // vector
    unit = "float4s" if vector == 4 else "floats"
    return (a % threads == 0 and b % threads == 0 and min(a, b) >= threads,
            f"the {c['BM']}x{c['BK']} A tile ({a} {unit}) and the {c['BK']}x{c['BN']} B tile ({b} {unit}) "
            f"must split evenly over the {threads} threads")


def _float4_tiles(c: GemmConfig) -> list[tuple[bool, str]]:
    return [
        (c["TM"] % 4 == 0 and c["TN"] % 4 == 0, "TM and TN must be multiples of 4 (fragments are read as float4)"),
        (c["BK"] % 4 == 0 and c["BN"] % 4 == 0, "BK and BN must be multiples of 4 (tile rows are read as float4)"),
    ]


def _pad_ok(c: GemmConfig) -> tuple[bool, str]:
    return c["PAD"] >= 0 and c["PAD"] % 4 == 0, "PAD must be a multiple of 4 (rows of sA stay 16-byte aligned)"


def _smem_ok(floats: int) -> tuple[bool, str]:
    return floats * 4 <= STATIC_SMEM_MAX, f"shared tiles of {floats * 4} bytes exceed the 48 KB of static shared memory"


def _thread_tile_ok(c: GemmConfig) -> tuple[bool, str]:
    ok = min(c["TM"], c["TN"]) >= 1 and c["BM"] % c["TM"] == 0 and c["BN"] % c["TN"] == 0
    return ok, "TM must divide BM and TN must divide BN"


_BM = Param("BM", 128, "rows of the C tile a block computes")
_BN = Param("BN", 128, "columns of the C tile a block computes")
_BK = Param("BK", 8, "depth of the K slice staged in shared memory per step")
_TM = Param("TM", 8, "rows of C per thread")
_TN = Param("TN", 8, "columns of C per thread")
_PAD = Param("PAD", 4, "floats of padding per row of the transposed A tile (bank shift)")
_GRID_BLOCK_TILES = lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1)  # noqa: E731


def _check_04(c: GemmConfig) -> str | None:
    t = _div(c["BM"] * c["BN"], c["TM"])
    return _first_failure(
        (c["TM"] >= 1 and c["BM"] % c["TM"] == 0, "TM must divide BM"),
        _tiles_split(c, t, 1),
        _smem_ok(c["BM"] * c["BK"] + c["BK"] * c["BN"]),
    )


SGEMM_04 = KernelSpec(
    id="sgemm_04_thread_tile_1d",
    step=4,
    title="1-D thread tile",
    idea="each thread computes TM results of a column: one sB load reused TM times",
    source="sgemm/04_thread_tile_1d.cu",
    entry="sgemm_thread_tile_1d",
    params=(Param("BM", 64, "rows of the C tile a block computes"),
            Param("BN", 64, "columns of the C tile a block computes"),
            _BK,
            Param("TM", 8, "rows of C per thread (one column); BM * BN / TM threads")),
    block=lambda c: (_div(c["BM"] * c["BN"], c["TM"]), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_04,
    seeds="002 kernel 3",
)


def _check_05(c: GemmConfig) -> str | None:
    return _first_failure(
        _thread_tile_ok(c),
        _tiles_split(c, _threads_2d(c), 1),
        _smem_ok(c["BM"] * c["BK"] + c["BK"] * c["BN"]),
    )


SGEMM_05 = KernelSpec(
    id="sgemm_05_thread_tile_2d",
    step=5,
    title="2-D thread tile",
    idea="each thread computes a TM x TN block: TM * TN FMAs per TM + TN values read",
    source="sgemm/05_thread_tile_2d.cu",
    entry="sgemm_thread_tile_2d",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_05,
    seeds="002 kernel 4; 003 kernels 6-7; 000 v5-v6",
)

SGEMM_06 = KernelSpec(
    id="sgemm_06_register_fragments",
    step=6,
    title="register fragments",
    idea="copy each k step's A column and B row into registers, then an outer product from registers",
    source="sgemm/06_register_fragments.cu",
    entry="sgemm_register_fragments",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_05,
    seeds="002 kernel 5; 003 kernel 6 (rank-1 updates in registers)",
)


def _check_07(c: GemmConfig, pad: int = 0, buffers: int = 1) -> str | None:
    return _first_failure(
        _thread_tile_ok(c),
        *_float4_tiles(c),
        _tiles_split(c, _threads_2d(c), 4),
        _smem_ok(buffers * (c["BK"] * (c["BM"] + pad) + c["BK"] * c["BN"])),
    )


SGEMM_07 = KernelSpec(
    id="sgemm_07_vectorized",
    step=7,
    title="float4 loads",
    idea="128-bit global and shared loads, A stored transposed; scalar loads at edges and misaligned rows",
    source="sgemm/07_vectorized.cu",
    entry="sgemm_vectorized",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_07,
    seeds="002 kernel 6; 001 gemm_use_128, gemm_transpose_smem; 000 v7; 003 kernel 8",
)


def _check_08(c: GemmConfig, buffers: int = 1) -> str | None:
    return _first_failure(_pad_ok(c)) or _check_07(c, c["PAD"], buffers)


SGEMM_08 = KernelSpec(
    id="sgemm_08_bank_conflict_free",
    step=8,
    title="bank-conflict-free shared memory",
    idea="pad the rows of the transposed A tile; spread a thread's float4s of B BN/(TN/4) apart",
    source="sgemm/08_bank_conflict_free.cu",
    entry="sgemm_bank_conflict_free",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_08,
    seeds="003 (bank conflicts, kernels 2-3 and 8); 001 gemm_final (strided thread columns)",
)

SGEMM_09 = KernelSpec(
    id="sgemm_09_register_double_buffer",
    step=9,
    title="register double buffer",
    idea="load k step kk + 1's fragments from shared memory while step kk's FMAs run",
    source="sgemm/09_register_double_buffer.cu",
    entry="sgemm_register_double_buffer",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_08,
    seeds="001 gemm_hide_smem_latency",
)

SGEMM_10 = KernelSpec(
    id="sgemm_10_smem_double_buffer",
    step=10,
    title="shared-memory double buffer",
    idea="two shared buffers: fetch the next K slice from global memory while computing this one",
    source="sgemm/10_smem_double_buffer.cu",
    entry="sgemm_smem_double_buffer",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=lambda c: _check_08(c, buffers=2),
    seeds="002 kernel 7; 001 gemm_final",
)


def _warp_tile_checks(c: GemmConfig) -> list[tuple[bool, str]]:
    """The warp-tile layout's checks, as step 11's kernel and those built on its tiles (12, 15) make them."""
    wm, wn, tm, tn = c["WM"], c["WN"], c["TM"], c["TN"]
    return [
        (wm >= 1 and wn >= 1 and c["BM"] % wm == 0 and c["BN"] % wn == 0, "WM must divide BM and WN must divide BN"),
        *_float4_tiles(c),
        (min(tm, tn) >= 4 and wm % tm == 0 and wn % tn == 0 and (wm // tm) * (wn // tn) == 32,
         f"a warp's 32 threads must cover its {wm}x{wn} tile with {tm}x{tn} results each: (WM/TM) * (WN/TN) == 32"),
        _pad_ok(c),
    ]


def _check_11(c: GemmConfig) -> str | None:
    tb = c.as_dict().get("TB", 0)
    return _first_failure(
        (tb in (0, 1), "TB must be 0 or 1"),
        *_warp_tile_checks(c),
        _tiles_split(c, _threads_warp(c), 4),
        _smem_ok(2 * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * (c["BN"] + tb * c["PAD"]))),
    )


# Step 12 reads a B stored transposed where it lies (x @ w.t(), a Linear's forward pass); set from
# the problem (configs.rules.problem_flags), never by hand.
_TB = Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), its slices loaded along K as A's and stored "
                     "transposed; 0: B row-major (set from the problem)")


# The warp-tile layout's parameters, which steps 12 and 15 take from step 11 (without its SYNC).
WARP_TILE_PARAMS = (_BM, _BN, _BK,
                    Param("WM", 64, "rows of the C tile a warp computes"),
                    Param("WN", 32, "columns of the C tile a warp computes; (BM/WM) * (BN/WN) warps"),
                    _TM, _TN, _PAD)

SGEMM_11 = KernelSpec(
    id="sgemm_11_warp_tile",
    epilogues=True,
    step=11,
    title="warp tiles",
    idea="each warp owns a WM x WN tile, each thread 4 x 4 blocks spread over it: less shared traffic per FMA",
    source="sgemm/11_warp_tile.cu",
    entry="sgemm_warp_tile",
    params=(*WARP_TILE_PARAMS,
            Param("SYNC", 1, "1: hand the next slice over before a slice's last k step, so its first fragments load under that step's FMAs")),
    block=lambda c: (_threads_warp(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_11,
    seeds="siboehm/SGEMM_CUDA kernel 10 (warptiling); 001 gemm_final; 002 kernel 7",
)


# Steps 12-13, past the seeds: shapes step 11 leaves its SMs idle at (configs.fp32 chooses their
# tiles and K runs).

# (BM, BN) -> (step 11's overrides, blocks an SM at the registers ptxas gives it for sm_90a,
# relative FFMA throughput of an SM full of such blocks). 256 x 128 (254 registers a thread split,
# 225 not: one block an SM) and 128 x 128 (128: two) are step 11's tiles; 64 x 64 (96: five blocks of
# 128 threads) serves short K and outputs too small to fill the SMs. The kernel's launch bounds hold
# those occupancies. The throughputs, the block's fixed
# cost and a part's cost were fitted on an H100 to every tile x runs candidate at the 43 shapes of
# sweeps/fp32-shapes.toml (results/nvidia-h100-80gb-hbm3/tune-fp32-split-20261125T183708Z.json):
# the model's picks reach a geometric mean of 0.711x cuBLAS SGEMM there, the best candidates 0.730x;
# its worst pick is 15% slower than that shape's best. 128 x 128 ran as fast as 256 x 128 at the
# large squares once split (the 256 x 128 size rule of step 11 is an H200 measurement).
# RED = 1 builds (parts stored row-major, no last-run sum) take 213, 127 and 96 registers for sm_90a:
# the same blocks an SM, which the launch bounds hold.
# Where the last run adds the parts (RED = 0), the 128 x 128 tile runs on four warps of 64 x 64
# (SPLIT_K_SERIAL_WARPS; 254 registers, still two blocks of 128 threads an SM), as cuBLAS's 128 x 128
# split runs: each warp reads a quarter fewer shared-memory bytes a multiply-add than a 64 x 32 warp,
# which pays where each run's main loop is long. H200, ratios to cuBLAS SGEMM in the same rounds
# (results/nvidia-h200/tune-fp32-warp64-red0-20261128T094501Z.json, tune-fp32-warp64-split-20261128T093556Z.json):
# 0.836x -> 0.880x at 1024 x 1024 x 8192, 0.783x -> 0.823x at 1024 x 1024 x 32768, 0.786x -> 0.826x at
# 768 x 768 x 16384, 0.827x -> 0.869x at 1024 x 2048 x 16384, 0.856x -> 0.888x at 1536 x 1536 x 8192,
# 0.797x -> 0.837x at 1024 x 1024 x 4096, 0.773x -> 0.809x at 1000 x 1000 x 16000. Its RED = 1 build lost
# where runs are short (128 x 512 x 32768: 37.7 against 39.2 TFLOP/s), so RED = 1 keeps eight warps.
SPLIT_K_SERIAL_WARPS: dict[tuple[int, int], dict[str, int]] = {(128, 128): dict(WM=64, WN=64, TM=16, TN=8)}
SPLIT_K_TILES: dict[tuple[int, int], tuple[dict[str, int], int, float]] = {
    (256, 128): (dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8), 1, 1.0),
    (128, 128): (dict(), 2, 1.0),
    (64, 64): (dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8), 5, 0.7),
}
SPLIT_K_MAX_RUNS = 64
SPLIT_K_BLOCK_COST = 3.0  # K slices' worth of time a block spends outside its main loop
SPLIT_K_PART_COST = 2.0  # K slices' worth of time to write, or to read back, one tile's part
# RED = 1 (the runs store their parts, a second kernel adds them up): no tile waits on one block's
# serial sum, so a tile may take many more runs, each of at least a few slices (a run is a block's
# fixed cost plus its share of K). The reduction is a pass over bytes: every run's part (the padded
# tiles, BM x BN a tile) written and read back once, D written once, at SPLIT_K_REDUCE_BYTES a unit of
# the model's time, plus a fixed cost for its launch and a tail that is latency-bound where D is small
# (one float4 of D a thread). The unit, one BK = 8 slice of a 256 x 128 tile on an SM of its own, is
# 2,048 clocks of the SM's 128 FP32 lanes: about 1.5 us on an H100 at the ~80% of peak that steps 11
# and 12 reach; 4 MB in 1.5 us is ~2.7 TB/s, about the H100's DRAM bandwidth (parts that stay in its
# 50 MB L2 move faster). Not yet fitted to a timing: no RED = 1 launch has been timed.
# The cap on RED = 1 runs: at 64 x 64 x 131072 the model takes 656 runs (five 64 x 64 blocks an SM)
# where a cap of 256 held it to 256: 45.8 against 63.6 us, 1.20x against 0.87x cuBLAS SGEMM in the
# same rounds on an H200 (docs/notes/split-k-reduction-pass.md).
SPLIT_K_RED_MAX_RUNS = 1024
SPLIT_K_RED_MIN_SLICES = 4
SPLIT_K_REDUCE_BYTES = 4e6
SPLIT_K_REDUCE_FIXED = 2.0  # a second launch (~3 us with its latency-bound tail)


# The reduction pass's threads a float4 of D (its `slices`): a power of two, at most
# SPLIT_K_REDUCE_MAX_SLICES, doubled while the pass would have fewer blocks than two an SM and each
# thread keeps at least SPLIT_K_REDUCE_SLICE_RUNS runs (one round of its loads in flight). At
# 64 x 64 x 131072 (256 runs) it is 32: 128 blocks instead of 4.
SPLIT_K_REDUCE_MAX_SLICES = 32
SPLIT_K_REDUCE_SLICE_RUNS = 8


def split_k_reduce_slices(M: int, N: int, runs: int, sms: int, threads: int) -> int:
    """How many threads add the parts of one float4 of D, each a contiguous range of the runs."""
    quads, slices = M * cdiv(N, 4), 1
    while (slices * 2 <= min(SPLIT_K_REDUCE_MAX_SLICES, threads) and runs >= SPLIT_K_REDUCE_SLICE_RUNS * slices * 2
           and cdiv(quads, threads // slices) < 2 * sms):
        slices *= 2
    return slices


def split_k_reduce_grid(M: int, N: int, c: GemmConfig, slices: int = 1) -> tuple[int, int, int]:
    """The reduction pass's grid: THREADS / slices float4s of D a block."""
    return (cdiv(M * cdiv(N, 4), c["THREADS"] // slices), 1, 1)


def split_k_reduce_time(M: int, N: int, c: GemmConfig, runs: int) -> float:
    """Modelled time of the RED = 1 reduction pass, in split_k_time's units."""
    parts = runs * cdiv(M, c["BM"]) * c["BM"] * cdiv(N, c["BN"]) * c["BN"] * 4  # bytes, written then read
    return SPLIT_K_REDUCE_FIXED + (2 * parts + 4 * M * N) / SPLIT_K_REDUCE_BYTES


def split_k_time(M: int, N: int, K: int, c: GemmConfig, runs: int, sms: int) -> float:
    """Modelled time of step 12 with tile c and K cut into `runs` runs, in units of one BK slice of
    a 256 x 128 tile on an SM of its own: whole waves of blocks, each its share of K's slices plus a
    block's fixed cost, plus the parts written and, by the last run of a tile, read back (RED = 0), or
    plus the reduction pass (RED = 1: split_k_reduce_time)."""
    _, per_sm, speed = SPLIT_K_TILES.get((c["BM"], c["BN"]), ({}, 1, 0.5))
    tiles, kt = cdiv(M, c["BM"]) * cdiv(N, c["BN"]), max(1, cdiv(K, c["BK"]))
    waves = cdiv(tiles * runs, sms * per_sm)
    slice_time = c["BM"] * c["BN"] * per_sm / (256 * 128 * speed)  # a block's slice, per_sm blocks sharing an SM
    if runs > 1 and c.as_dict().get("RED", 0):
        return waves * slice_time * (cdiv(kt, runs) + SPLIT_K_BLOCK_COST) + split_k_reduce_time(M, N, c, runs)
    per_block = cdiv(kt, runs) + SPLIT_K_BLOCK_COST + (SPLIT_K_PART_COST if runs > 1 else 0.0)
    add_up = runs * SPLIT_K_PART_COST * slice_time / per_sm if runs > 1 else 0.0  # the last run, alone on its SM
    return waves * slice_time * per_block + add_up


def split_k_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """The runs along K (gridDim.y) step 12 splits each tile into: the count split_k_time models
    fastest, each run at least one BK slice (SPLIT_K_MAX_RUNS at most) or, with RED = 1,
    SPLIT_K_RED_MIN_SLICES (SPLIT_K_RED_MAX_RUNS at most); 1 for a SPLIT = 0 config."""
    kt = cdiv(problem.K, c["BK"])
    if not c["SPLIT"]:
        most = 1
    elif c.as_dict().get("RED", 0):
        most = max(1, min(SPLIT_K_RED_MAX_RUNS, kt // SPLIT_K_RED_MIN_SLICES, GRID_YZ_MAX))
    else:
        most = max(1, min(SPLIT_K_MAX_RUNS, kt, GRID_YZ_MAX))
    return min(range(1, most + 1), key=lambda r: (split_k_time(problem.M, problem.N, problem.K, c, r, sms), r))


SGEMM_12 = KernelSpec(
    id="sgemm_12_split_k",
    epilogues=True,
    step=12,
    title="split K",
    idea="step 11's tiles with K cut into runs that fill the SMs; the last run of a tile (RED = 0) or a second kernel over the whole GPU (RED = 1) adds the fp32 parts in run order (deterministic)",
    source="sgemm/12_split_k.cu",
    entry="sgemm_split_k",
    params=(*WARP_TILE_PARAMS, Param("SPLIT", 1, "1: K may be split into runs (gridDim.y); 0: one run, without the split code"),
            Param("PV", 4, "floats a store or load of a split's fp32 parts moves: 4 (float4) or 1"),
            Param("RED", 0, "0: the last run of a tile adds the parts; 1: the runs store their parts and a "
                            "second kernel (SPLIT_K_REDUCE) adds them over the whole GPU (needs SPLIT = 1)"),
            _TB),
    block=SGEMM_11.block,
    layouts=("nn", "nt"),
    grid=lambda M, N, c: (cdiv(N, c["BN"]) * cdiv(M, c["BM"]), 1, 1),
    check_config=lambda c: _first_failure((c["SPLIT"] in (0, 1), "SPLIT must be 0 or 1"),
                                          (c["PV"] in (4, 1), "PV must be 4 or 1"),
                                          (c["RED"] in (0, 1), "RED must be 0 or 1"),
                                          (c["SPLIT"] == 1 or c["RED"] == 0, "RED = 1 needs SPLIT = 1 (K split into runs)"),
                                          ) or _check_11(c),  # fmt: skip
    seeds="past the seeds: split-K (CUTLASS's parallel and serial split-K reductions); tc10's last-run sum",
    # a BM x BN fp32 part a block of a split grid, a counter a tile
    workspace=lambda c, grid: (grid[0] * grid[1] * c["BM"] * c["BN"], grid[0]) if grid[1] > 1 else (0, 0),
    k_runs=split_k_runs,
    parts_reduced=lambda c, grid: c["RED"] == 1 and grid[1] > 1,
)


# Step 12's reduction pass (RED = 1). Not a GEMM: not in the registry; gemm() launches it behind every
# split launch of a RED = 1 config (gemmlab.reduce).
SPLIT_K_REDUCE = KernelSpec(
    id="sgemm_12_split_k_reduce",
    epilogues=True,
    step=0,
    title="split-K reduction",
    idea="not a GEMM: each element's fp32 parts of step 12's runs added in run order, then the epilogue, a float4 of D a thread (or a few threads a float4, each a range of the runs, where D is small)",
    source="sgemm/12_split_k_reduce.cu",
    entry="sgemm_split_k_reduce",
    params=(Param("THREADS", 256, "threads a block; a thread adds and writes four consecutive elements of a row of D"),),
    block=lambda c: (c["THREADS"], 1, 1),
    grid=lambda M, N, c: split_k_reduce_grid(M, N, c),
    check_config=lambda c: None if c["THREADS"] % 32 == 0 and 32 <= c["THREADS"] <= 1024 else "THREADS must be whole warps, 32..1024",
    seeds="CUTLASS's parallel split-K reduction; cuBLAS's splitKreduce_kernel",
)
