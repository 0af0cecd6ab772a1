"""The convolution ladder's kernels past im2col (gemmlab.conv runs step 01 on gemm()): their
specs, as data. They take a convolution's geometry, not a GEMM problem, so they are not in the
GEMM registry and `auto` never sees them; gemmlab.conv.conv2d launches them when asked by name."""

from __future__ import annotations

import functools

import torch

from .base import GemmConfig, KernelSpec, Param, cdiv
from .persistent import TC_09
from .tensorcore import _check_warp_tiles, _smem_fits


def _stage_bytes(c: GemmConfig) -> int:
    return 2 * (c["BM"] * c["BK"] + c["BN"] * c["BK"])


def _check(c: GemmConfig) -> str | None:
    threads = (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32
    if c["BK"] not in (16, 32) and c["BK"] % 64:
        return "BK must be 16, 32 or a multiple of 64 (the XOR swizzle)"
    if c["CH"] not in (4, 8):
        return "CH must be 8 (16-byte copies) or 4 (8-byte copies, for groups of 4 channels)"
    if c["BM"] * (c["BK"] // c["CH"]) % threads:
        return "every thread must stage the same number of A chunks: BM * BK / CH a multiple of the threads"
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
        Param("CH", 8, "channels a cp.async copies: 8 (16 bytes) or 4 (8 bytes: groups of 4 channels)"),
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


# conv02's builds for grouped convolutions (one grid layer a group, blockIdx.z), by the group's
# output channels: the narrowest tile that holds them, four warps of 32 pixels (BN <= 32) or 2 x 2
# warps, so that a group of 4..32 filters does not compute a 128-wide tile of mostly zeros.
CONV02_GROUPED_TILES = (  # (most output channels a group, BM, BN, WM, WN)
    (16, 128, 16, 32, 16),
    (32, 128, 32, 32, 32),
    (64, 128, 64, 64, 32),
)


@functools.lru_cache(maxsize=256)
def conv02_grouped_config(group_out_channels: int, group_in_channels: int) -> GemmConfig:
    """conv02's config for a grouped convolution whose groups have these many output and input
    channels: CONV02_GROUPED_TILES' tile (the default one past 64 output channels), 8-byte copies
    where a group's channels are not a multiple of 8. (Kept: a config is checked as it is made,
    some 9 us a call, which every grouped call would otherwise pay twice.)"""
    ch = 8 if group_in_channels % 8 == 0 else 4
    for most, bm, bn, wm, wn in CONV02_GROUPED_TILES:
        if group_out_channels <= most:
            return CONV_02.config(BM=bm, BN=bn, WM=wm, WN=wn, CH=ch)
    return CONV_02.config(CH=ch)


# conv03: a stage is one filter tap and 64 channels (one 128-byte swizzle row); BM pixels (64 per
# consumer warpgroup) by BN output channels, in a ring of STAGES; one tile a block, or (PERSISTENT)
# at most one block an SM, each walking tiles. TMA_STORE: the staged epilogue's two 64 x 64 16-bit
# buffers a consumer (16 KB) beside the ring.
CONV03_BK = 64
CONV03_STAGING = 2 * 64 * 64 * 2  # bytes of one consumer's staging buffers


def conv03_consumers(bm: int) -> int:
    """conv03's consumer warpgroups for a tile of bm pixels: one per 64 pixels, two of 128 at 256."""
    return min(bm // 64, 2)


def _conv03_smem(c: GemmConfig) -> int:
    """The ring (A: BM x 64, B: BN x 64 16-bit elements a stage), the staging buffers (TMA_STORE),
    the ring's full and empty barriers, and 1 KB to align the ring to the 128-byte swizzle's
    1024-byte atoms."""
    staging = c["TMA_STORE"] * conv03_consumers(c["BM"]) * CONV03_STAGING
    return c["STAGES"] * 2 * CONV03_BK * (c["BM"] + c["BN"]) + staging + 2 * 8 * c["STAGES"] + 1024


def _conv03_check(c: GemmConfig) -> str | None:
    if c["BM"] not in (64, 128, 256):
        return "BM must be 64, 128 or 256 (one consumer warpgroup per 64 output pixels, two of 128 at 256)"
    if c["BN"] not in (64, 128, 256):
        return "BN must be 64, 128 or 256 (one m64n64k16, m64n128k16 or m64n256k16 MMA a warpgroup)"
    if c["BM"] == 256 and c["BN"] == 256:
        return "a 256 x 256 tile's accumulators (two 64 x 256 parts a warpgroup) do not fit in registers"
    if c["STAGES"] < 2:
        return "STAGES must be at least 2"
    if c["PERSISTENT"] not in (0, 1):
        return "PERSISTENT must be 0 (one tile a block) or 1 (blocks walk tiles)"
    if c["TMA_STORE"] not in (0, 1):
        return "TMA_STORE must be 0 (register stores) or 1 (staged through shared memory, TMA stores)"
    if c["A_ROWS"] not in (0, 1):
        return "A_ROWS must be 0 (the im2col map) or 1 (a tiled map of the input's rows)"
    return _smem_fits(_conv03_smem(c), 227 * 1024)


def _conv03_grid(M: int, N: int, c: GemmConfig) -> tuple[int, int, int]:
    """One tile a block: (N tiles, M tiles). Persistent: every tile along x, which the host
    (gemmlab.conv03) caps at the blocks resident at once."""
    tiles_m, tiles_n = cdiv(M, c["BM"]), cdiv(N, c["BN"])
    return (tiles_m * tiles_n, 1, 1) if c["PERSISTENT"] else (tiles_n, tiles_m, 1)


# Correct on Hopper GPUs (tests/test_conv_tma.py), 0.69x cuDNN so far (docs/ladder/conv03-tma-im2col.md).
# conv2d takes it only when asked (algorithm="tma").
CONV_03 = KernelSpec(
    id="conv03_tma_im2col",
    step=3,
    title="TMA im2col",
    idea="A's tiles copied by the TMA in im2col mode (a tap's BM pixels x 64 channels an instruction), "
    "a producer warpgroup feeding wgmma consumers as tc06",
    source="conv/03_tma_im2col.cu",
    entry="conv_tma_im2col",
    params=(
        Param("BM", 128, "output pixels a block: 64 per consumer warpgroup (64 or 128), or two of 128 (256)"),
        Param("BN", 128, "output channels a block (64, 128 or 256: one m64nBNk16 MMA a warpgroup)"),
        Param("STAGES", 6, "shared buffers in the TMA ring (a stage: one tap x 64 channels)"),
        Param("PERSISTENT", 0, "0 one tile a block; 1 at most one block an SM, each walking tiles"),
        Param("TMA_STORE", 0, "0 the epilogue stores from registers; 1 through shared memory with TMA stores"),
        Param("A_ROWS", 0, "0 A through the im2col map; 1 through a tiled map of the input's rows (1x1, stride 1, no padding)"),
    ),
    block=lambda c: ((conv03_consumers(c["BM"]) + 1) * 128, 1, 1),
    grid=_conv03_grid,
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_conv03_smem,
    check_config=_conv03_check,
    seeds="Hopper's TMA im2col mode (cuTensorMapEncodeIm2col) with tc06's warp-specialised wgmma pipeline",
    type_param=True,
    epilogues=True,
    min_capability=(9, 0),
)


# conv03's tiles (BM, BN) with their rings: the 64-wide ones (for layers of 64 output channels,
# which a 128-wide tile computes half of in zeros) and the 256-pixel ones (two 64-pixel parts a
# consumer warpgroup) with the deepest ring 227 KB of shared memory holds beside them.
CONV03_TILES = {(128, 256): 4, (128, 128): 6, (64, 256): 5, (64, 128): 8, (128, 64): 9, (64, 64): 14, (256, 128): 4,
                (256, 64): 5}
# The same with the staged epilogue's buffers (TMA_STORE = 1, 16 KB a consumer): the 64-wide tiles
# give up a stage for them; the others' rings fit beside them as they are.
CONV03_STAGED_TILES = {(128, 256): 4, (128, 128): 6, (64, 256): 5, (64, 128): 8, (128, 64): 8, (64, 64): 13, (256, 128): 4,
                       (256, 64): 4}
# A tile's time for a k-step, relative to a 128 x 256 tile's: smaller tiles read more bytes a
# multiply-add and keep fewer MMAs in flight, so each costs more than its share of the area. A
# first estimate, to be replaced by measurement; the 64-wide tiles' are guesses on the same lines
# (m64n64k16 reads A from shared memory once for half the columns of m64n128k16).
CONV03_TILE_COST = {(128, 256): 1.0, (128, 128): 0.55, (64, 256): 0.6, (64, 128): 0.35, (128, 64): 0.35, (64, 64): 0.2,
                    (256, 128): 1.0, (256, 64): 0.55}
# The tiles the one-tile-a-block rule weighs. The 64-wide tiles came with the persistent build and
# are weighed only there until a GPU run has measured them (both builds compile and test them).
CONV03_ONE_TILE_A_BLOCK = ((128, 256), (128, 128), (64, 256), (64, 128))


def conv03_tile_config(tile: tuple[int, int], persistent: bool = False, tma_store: bool = False,
                       a_rows: bool = False) -> GemmConfig:  # fmt: skip
    """conv03's config on a tile (BM, BN) of CONV03_TILES: its ring (CONV03_STAGED_TILES' with the
    staged epilogue), the build (PERSISTENT), the epilogue (TMA_STORE) and A's map (A_ROWS)."""
    stages = (CONV03_STAGED_TILES if tma_store else CONV03_TILES)[tile]
    return CONV_03.config(BM=tile[0], BN=tile[1], STAGES=stages, PERSISTENT=int(persistent), TMA_STORE=int(tma_store),
                          A_ROWS=int(a_rows))  # fmt: skip


def conv03_config(out_channels: int, rows: int | None = None, sms: int = 132, persistent: bool = False,
                  tma_store: bool = False, a_rows: bool = False) -> GemmConfig:  # fmt: skip
    """conv03's config for a convolution of out_channels (the GEMM's N) over rows output pixels (its
    M) on sms SMs: the tile whose busiest SM takes least time by CONV03_TILE_COST, the larger tile
    where two tie. Without rows, the rule for a large layer: 128 x 256 tiles where there are at
    least 256 output channels, else 128 x 128. persistent: the persistent build's config
    (PERSISTENT = 1), chosen among every tile of CONV03_TILES. tma_store: the staged epilogue's
    (TMA_STORE = 1, conv03_tile_config's ring); the tile rule is the same. a_rows: A through a tiled
    map of the input's rows (A_ROWS = 1: a 1x1 filter at stride 1 without padding).

    Either way one block an SM holds the ring (no two fit), so the busiest SM runs ceil(tiles /
    sms) tiles: waves of blocks, or the longest walk of a persistent block. The rule charges k-step
    time only. One tile a block also pays each wave's ring fill and epilogue, which favours fewer,
    larger tiles; the persistent build overlaps those with the next tile's loads and MMAs, so the
    same count is a closer model of it. That is a guess, not a measurement."""
    if rows is None:
        return conv03_tile_config((128, 256) if out_channels >= 256 else (128, 128), persistent, tma_store, a_rows)

    def cost(tile):
        bm, bn = tile
        tiles = -(-rows // bm) * -(-out_channels // bn)
        return -(-tiles // sms) * CONV03_TILE_COST[tile], -bm * bn

    tile = min(CONV03_TILES if persistent else CONV03_ONE_TILE_A_BLOCK, key=cost)
    return conv03_tile_config(tile, persistent, tma_store, a_rows)


# conv04: a block stages the input its TP x TQ output pixels reach (with the halo) in shared memory
# and builds mma.sync's A fragments from it, for layers whose C is no multiple of 8 (conv02's and
# conv03's 16-byte loads need one): ResNet's stem, C = 3. The geometry is compiled in.
def _conv04_layout(c: GemmConfig) -> dict[str, int]:
    """The kernel's shared-memory layout (conv04::Layout in kernels/conv/04_few_channels.cu), in
    16-bit elements, and its bytes."""
    C, R, S = c["C"], c["R"], c["S"]
    kr = R * S * C
    krp = -(-kr // 16) * 16
    ph = (c["TP"] - 1) * c["SH"] + (R - 1) * c["DH"] + 1
    pw = (c["TQ"] - 1) * c["SW"] + (S - 1) * c["DW"] + 1
    row = -(-pw * C // 2) * 2
    patch = ph * row
    zeros_at = -(-patch // 8) * 8
    row_max = (c["TP"] - 1) * c["SH"] * row + (c["TQ"] - 1) * c["SW"] * C
    pbuf = -(-(zeros_at + row_max + 1) // 8) * 8
    w_elems, out_elems = c["KT"] * 64 * (krp + 8), 4 * 32 * 72
    return dict(KR=kr, KRP=krp, PATCH=patch, PBUF=pbuf, BYTES=2 * (w_elems + pbuf + out_elems) + 4 * krp)


# The tiles of output pixels conv04 is built for (TP x TQ = 128, four warps of 32 pixels)
CONV04_TILES = ((8, 16), (4, 32), (16, 8))
# The most filter entries a build holds (R*S*C), and the most output channels (KT <= 4)
CONV04_MAX_ENTRIES = 1024
CONV04_MAX_K = 256


def _conv04_check(c: GemmConfig) -> str | None:
    if (c["TP"], c["TQ"]) not in CONV04_TILES:
        return f"TP x TQ must be one of {', '.join(f'{p}x{q}' for p, q in CONV04_TILES)}"
    if min(c["C"], c["R"], c["S"], c["SH"], c["SW"], c["DH"], c["DW"]) < 1:
        return "C, R, S, the stride and the dilation must be positive"
    if not 1 <= c["KT"] <= CONV04_MAX_K // 64:
        return f"KT (output channels held, in 64s) must be 1..{CONV04_MAX_K // 64}"
    if c["R"] * c["S"] * c["C"] > CONV04_MAX_ENTRIES:
        return f"R*S*C must be at most {CONV04_MAX_ENTRIES}"
    return _smem_fits(_conv04_layout(c)["BYTES"], 227 * 1024)


CONV_04 = KernelSpec(
    id="conv04_few_channels",
    step=4,
    title="few channels",
    idea="a block stages its pixels' input tile with the halo in shared memory and gathers A's fragments "
    "from it through a table of filter-entry offsets: any C, no 16-byte loads, no im2col matrix",
    source="conv/04_few_channels.cu",
    entry="conv_few_channels",
    params=(
        Param("C", 3, "input channels (compiled in)"),
        Param("R", 7, "filter rows"),
        Param("S", 7, "filter columns"),
        Param("SH", 2, "stride along rows"),
        Param("SW", 2, "stride along columns"),
        Param("DH", 1, "dilation along rows"),
        Param("DW", 1, "dilation along columns"),
        Param("KT", 1, "output channels held in shared memory, in 64s"),
        Param("TP", 8, "output rows a tile"),
        Param("TQ", 16, "output columns a tile (TP x TQ = 128)"),
    ),
    block=lambda c: (128, 1, 1),
    grid=lambda M, N, c: (cdiv(M, 128), 1, 1),  # an upper bound: the host launches the resident blocks, no more than tiles
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=lambda c: _conv04_layout(c)["BYTES"],
    check_config=_conv04_check,
    seeds="seed 000's im2col, the gather done in shared memory from a staged input tile",
    type_param=True,
    epilogues=True,
    persistent=True,
    min_capability=(8, 0),
)


def conv04_config(g: dict) -> GemmConfig:
    """conv04's config for a convolution of geometry g (gemmlab.conv.conv_geometry's): its C, R, S,
    stride and dilation, the output channels it holds, and the tile of CONV04_TILES that computes
    fewest pixels past the output's edges (the first of equals). Raises ValueError where no build
    serves g (too many filter entries or output channels, or the shared memory)."""
    if g["K"] > CONV04_MAX_K:
        raise ValueError(f"K = {g['K']} output channels: conv04 holds at most {CONV04_MAX_K}")
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]

    tp, tq, least = 0, 0, None
    for p, q in CONV04_TILES:  # (a loop, not min() with a key: torch.compile traces this under conv2d)
        computed = -(-g["P"] // p) * p * -(-g["Q"] // q) * q
        if least is None or computed < least:
            tp, tq, least = p, q, computed
    return CONV_04.config(C=g["C"], R=g["R"], S=g["S"], SH=sh, SW=sw, DH=dh, DW=dw, KT=-(-g["K"] // 64), TP=tp, TQ=tq)


# conv05: a depthwise convolution (groups = C = K) computed directly, each thread VEC channels of
# TQ output pixels of a row over the taps, the block's taps staged in shared memory: memory-bound,
# no MMA. The host picks VEC, TQ and the block's channel vectors (CV) per call. Its gradients are two
# more entries of the same file.
CONV05_THREADS = 256
CONV05_TAPS_SMEM = 4096  # fp32 taps a block stages (the kernel's TAPS_SMEM): R*S*CV*VEC*CG at most
CONV05_WG_S = 8  # wgrad: taps of a filter row a thread sums at once, at most (the kernel's SG)
CONV05_SUM_ENTRIES = 32  # wgrad's sum: filter entries a block of 256 threads adds (the kernel's SUM_ENTRIES)
CONV05_WG_SUMS = 96  # wgrad: fp32 sums a thread holds, RG * SG * VEC * CG, at most (the kernel's static_assert)
CONV05_SLIDING_WIDTHS = (3, 5, 7)  # filter widths the forward pass's sliding row serves (the kernel's SW)


def _conv05_check(c: GemmConfig) -> str | None:
    if c["VEC"] not in (1, 4, 8):
        return "VEC must be 1 or 16 bytes of channels (8 16-bit ones, 4 fp32 ones)"
    if "TQ" in c.as_dict() and not 1 <= c["TQ"] <= 8:
        return "TQ must be 1 to 8 pixels a thread"
    if "CG" in c.as_dict() and (c["CG"] not in (1, 2, 4, 8) or c["VEC"] % c["CG"]):
        return "CG must be 1, 2, 4 or 8 channels a group, dividing VEC"
    if "SG" in c.as_dict() and not 1 <= c["SG"] <= CONV05_WG_S:
        return f"SG must be 1 to {CONV05_WG_S} taps a thread"
    if "RG" in c.as_dict() and not (1 <= c["RG"] and c["RG"] * c["SG"] <= 9):
        return "RG must be at least 1 filter row a thread, RG * SG at most 9 taps"
    if "RG" in c.as_dict() and c["RG"] * c["SG"] * c["VEC"] * c["CG"] > CONV05_WG_SUMS:
        return f"RG * SG * VEC * CG must be at most {CONV05_WG_SUMS} sums a thread"
    if "PIX" in c.as_dict() and not (1 <= c["PIX"] <= 8 and c["PIX"] * (c["RG"] * c["SG"] + 1) <= 16):
        return "PIX must be 1 to 8 pixels, PIX * (RG * SG + 1) at most 16 loads in flight"
    if "SW" in c.as_dict() and c["SW"] not in CONV05_SLIDING_WIDTHS + (0,):
        return f"SW must be 0 or a filter width of {CONV05_SLIDING_WIDTHS}"
    if "SX" in c.as_dict() and (c["SX"] not in (1, 2) or (c["SX"] == 2 and not c["SW"])):
        return "SX must be 1, or 2 with a sliding row (SW)"
    if "UNIT" in c.as_dict() and c["UNIT"] not in (0, 1):
        return "UNIT must be 0 or 1"
    return None


_VEC = Param("VEC", 8, "channels a thread: 16 bytes of them (8 16-bit, 4 fp32) or 1")
_CONV05 = dict(step=5, title="depthwise", source="conv/05_depthwise.cu", block=lambda c: (CONV05_THREADS, 1, 1),
               grid=lambda M, N, c: (cdiv(M * N // c["VEC"], CONV05_THREADS), 1, 1),  # an upper bound: the host sets it
               dtypes=(torch.bfloat16, torch.float16, torch.float32), check_config=_conv05_check, type_param=True,
               seeds="a depthwise layer is C products of one channel each: a direct loop, not a GEMM")  # fmt: skip

CONV_05 = KernelSpec(
    id="conv05_depthwise",
    idea="one filter a channel: each thread 16 bytes of channels of a few output pixels over the taps, in fp32, "
    "one launch for every group where the grouped path launches one a group; narrow groups (2-8 channels) alike",
    entry="conv_depthwise",
    params=(_VEC, Param("TQ", 4, "output pixels of a row a thread computes"),
            Param("CG", 1, "channels (and filters) a group: 1 depthwise; 2, 4 or 8 (dividing VEC) narrow groups"),
            Param("SW", 0, "the filter's width where a row's pixels are loaded once for its taps (3, 5 or 7: stride 1 or "
                  "2 and dilation 1 along W), else 0"),
            Param("SX", 1, "the stride along W of that sliding row: 1 or 2 (1 where SW = 0)")),
    epilogues=True,
    **_CONV05,
)
CONV_05_DGRAD = KernelSpec(
    id="conv05_depthwise_dgrad",
    idea="the input's gradient of a depthwise layer (or of narrow groups): each input pixel sums dy over the outputs "
    "that read it",
    entry="conv_depthwise_dgrad",
    params=(_VEC, Param("TQ", 4, "input pixels of a row a thread computes"),
            Param("UNIT", 1, "1 where both strides are 1 (no division by the stride)"),
            Param("CG", 1, "channels (and filters) a group: 1 depthwise; 2, 4 or 8 (dividing VEC) narrow groups")),
    **_CONV05,
)
CONV_05_WGRAD = KernelSpec(
    id="conv05_depthwise_wgrad",
    idea="the filter's gradient of a depthwise layer (or of narrow groups): fp32 sums over chunks of pixels, then "
    "added in a fixed order",
    entry="conv_depthwise_wgrad",
    params=(_VEC, Param("SG", 3, "taps of a filter row a thread sums: S, or 8 of a wider row"),
            Param("RG", 1, "filter rows a thread sums (R * SG <= 9; the host's conv05.wgrad_taps)"),
            Param("CG", 1, "channels (and filters) a group: 1 depthwise; 2, 4 or 8 (dividing VEC) narrow groups"),
            Param("PIX", 1, "pixels whose loads a thread issues before their multiply-adds (the host's "
                  "conv05.wgrad_pixels)")),
    **_CONV05,
)
CONV_05_WGRAD_SUM = KernelSpec(
    id="conv05_depthwise_wgrad_sum",
    idea="wgrad's parts added in a fixed order into the filter's gradient, in the weight's dtype and layout",
    entry="conv_depthwise_wgrad_sum",
    params=(Param("VEC", 1, "one element a thread"),),
    **_CONV05,
)


def conv05_vec(dtype: torch.dtype, channels: int, aligned: bool) -> int:
    """conv05's VEC for a call: 16 bytes of channels where C is a multiple of them and every
    address 16-byte aligned (aligned), else 1."""
    vec = 16 // (2 if dtype in (torch.bfloat16, torch.float16) else 4)
    return vec if aligned and channels % vec == 0 else 1


def conv05_channel_vectors(channels: int, vec: int, taps: int) -> int | None:
    """CV, the channel vectors a conv05 block covers: a power of two up to 32 whose taps fit the
    staged copy (taps * CV * vec <= CONV05_TAPS_SMEM), the widest that leaves at most an eighth of
    the last block's vectors idle (else the narrowest that fits); None where even one vector's
    taps do not fit."""
    vecs = -(-channels // vec)
    fits = [cv for cv in (32, 16, 8, 4, 2, 1) if taps * cv * vec <= CONV05_TAPS_SMEM]
    if not fits:
        return None
    for cv in fits:
        if -(-vecs // cv) * cv - vecs <= vecs / 8:
            return cv
    return fits[-1]


CONV_KERNELS: tuple[KernelSpec, ...] = (CONV_02, CONV_03, CONV_04, CONV_05, CONV_05_DGRAD, CONV_05_WGRAD,
                                         CONV_05_WGRAD_SUM)  # fmt: skip


# conv06: the filter gradient on tc09's pipeline with B's stages copied from the input's im2col map
# (kernels/conv/06_tma_wgrad.cu). Its shared memory is tc09's for the same tile: BM x 64 of dY and
# 64 pixels x 256 columns a stage, the staging buffers and barriers, the schedule.
def _conv06_tc09(c: GemmConfig) -> GemmConfig:
    """The tc09 config whose body conv06 runs (kernels/conv/06_tma_wgrad.cu's template arguments)."""
    return TC_09.config(BM=c["BM"], BN=256, BK=64, STAGES=c["STAGES"], CM=1, GROUP=8, TMA_STORE=1, TB=0, TA=1, EPI=0,
                        SPLIT=1)  # fmt: skip


CONV06_STAGES = {64: 5, 128: 4}  # the deepest ring beside the staging buffers, by BM


def _conv06_check(c: GemmConfig) -> str | None:
    if c["BM"] not in CONV06_STAGES:
        return "BM must be 64 or 128 (one or two consumer warpgroups of 64 output channels)"
    if c["STAGES"] < 2:
        return "STAGES must be at least 2"
    return _smem_fits(_conv06_smem(c), 227 * 1024)


def _conv06_smem(c: GemmConfig) -> int:
    return TC_09.dynamic_smem(_conv06_tc09(c))


CONV_06 = KernelSpec(
    id="conv06_tma_wgrad",
    step=6,
    title="filter gradient, TMA im2col",
    idea="dW = dY_rows^T @ im2col(x) on tc09's stream-K/split-K pipeline, B's stages (64 pixels x 64 channels a box) "
    "copied from x's im2col map: no im2col matrix",
    source="conv/06_tma_wgrad.cu",
    entry="conv_tma_wgrad",
    params=(
        Param("BM", 128, "filter rows (output channels) a block: 64 per consumer warpgroup (64 or 128)"),
        Param("STAGES", 4, "shared buffers in the TMA ring (a stage: 64 pixels of dY and of 256 (r, s, c) columns)"),
    ),
    block=lambda c: (c["BM"] // 64 * 128 + 128, 1, 1),
    grid=lambda M, N, c: (cdiv(M, c["BM"]) * cdiv(N, 256), 1, 1),  # capped by the host at the blocks resident at once
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_conv06_smem,
    check_config=_conv06_check,
    seeds="the filter gradient as an implicit GEMM: conv03's im2col map as tc09's B",
    type_param=True,
    min_capability=(9, 0),
)


@functools.lru_cache(maxsize=256)  # (a config is checked as it is made: 0.2 ms, each backward pass's layer)
def conv06_config(out_channels: int, columns: int | None = None, sms: int = 132) -> GemmConfig:
    """conv06's config for a filter of out_channels rows and columns = R*S*C on sms SMs: one
    consumer warpgroup (BM = 64) where the rows fit in it, else two -- unless 128-row tiles would
    come to more than half a wave and less than a whole one and 64-row tiles would not: tc09 splits
    along K only up to half a wave of tiles and balances stream-K pieces only past a whole one, so
    in between each tile runs whole on its own SM and the rest idle (ResNet-50's last 3x3 layers,
    512 x 4608: 72 tiles of 128 rows, 144 of 64). The deepest ring that fits."""

    def idles(bm: int) -> bool:
        tiles = cdiv(out_channels, bm) * cdiv(columns, 256)
        return sms < 2 * tiles and tiles < sms

    bm = 64 if out_channels <= 64 or (columns is not None and idles(128) and not idles(64)) else 128
    return CONV_06.config(BM=bm, STAGES=CONV06_STAGES[bm])
