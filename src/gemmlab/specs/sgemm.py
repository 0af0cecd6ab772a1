"""The FP32 SIMT ladder (seeds 000-003): one KernelSpec a step, each step's tile sizes and the
checks its static_asserts make, said in Python before compiling."""

from __future__ import annotations

from .base import STATIC_SMEM_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv


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


def _check_11(c: GemmConfig) -> str | None:
    wm, wn, tm, tn = c["WM"], c["WN"], c["TM"], c["TN"]
    return _first_failure(
        (wm >= 1 and wn >= 1 and c["BM"] % wm == 0 and c["BN"] % wn == 0, "WM must divide BM and WN must divide BN"),
        *_float4_tiles(c),
        (min(tm, tn) >= 4 and wm % tm == 0 and wn % tn == 0 and (wm // tm) * (wn // tn) == 32,
         f"a warp's 32 threads must cover its {wm}x{wn} tile with {tm}x{tn} results each: (WM/TM) * (WN/TN) == 32"),
        _pad_ok(c),
        _tiles_split(c, _threads_warp(c), 4),
        _smem_ok(2 * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * c["BN"])),
    )


SGEMM_11 = KernelSpec(
    id="sgemm_11_warp_tile",
    step=11,
    title="warp tiles",
    idea="each warp owns a WM x WN tile, each thread 4 x 4 blocks spread over it: less shared traffic per FMA",
    source="sgemm/11_warp_tile.cu",
    entry="sgemm_warp_tile",
    params=(_BM, _BN, _BK,
            Param("WM", 64, "rows of the C tile a warp computes"),
            Param("WN", 32, "columns of the C tile a warp computes; (BM/WM) * (BN/WN) warps"),
            _TM, _TN, _PAD),
    block=lambda c: (_threads_warp(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_11,
    seeds="siboehm/SGEMM_CUDA kernel 10 (warptiling); 001 gemm_final; 002 kernel 7",
)
