"""The persistent, clustered TMA steps: tc07 (persistent clusters), tc08 (TF32) and tc09 (stream-K),
and the rule by which tc08 and tc09 split few tall-K tiles along K (split_k_ways: the kernels'
own rule in kernels/common/tma.cuh, mirrored here)."""

from __future__ import annotations

import dataclasses

import torch

from ..problem import GemmProblem
from .base import GRID_X_MAX, GemmConfig, KernelSpec, Param, _first_failure, cdiv
from .tensorcore import (
    _CLUSTER_GRID, _CLUSTER_GROUP, _WS_BLOCK, _WS_STAGES, _barriers, _check_cluster, _check_tma_tiles, _cluster_m,
    _tma_stage_bytes,
)


def _tc07_smem(c: GemmConfig) -> int:
    staging = (c["BM"] // 64) * c.as_dict().get("OB", 2) * 64 * 64 * 2  # OB 64 x 64 output buffers per consumer
    return c["STAGES"] * _tma_stage_bytes(c) + staging + _barriers(c) + 1024


STREAM_K_MAX_SLOTS = 1024  # resident clusters: more than any GPU's SMs


def _stream_k_steps_fit(problem: GemmProblem, c: GemmConfig) -> str | None:
    """tc09 and tc08 with SK = 1 count the K steps of their split tiles in 32-bit integers
    (gemmlab::StreamK): fewer than two waves of tiles -- two a resident cluster, of at most
    STREAM_K_MAX_SLOTS -- times K / BK."""
    if 2 * STREAM_K_MAX_SLOTS * cdiv(problem.K, c["BK"]) >= 2**31:
        return (f"K = {problem.K} is too deep for the 32-bit stream-K schedule "
                f"(K / BK must stay below {2**31 // (2 * STREAM_K_MAX_SLOTS)})")
    return None


def _tc09_tall_tile_serves(problem: GemmProblem, c: GemmConfig) -> str | None:
    """tc09's 192-row tile launches with 128 registers a thread only where the code before its
    setmaxnreg stays below R128 (gemmlab.cubin checks every build). With fp32 results and the full
    epilogue (beta != 0, or a D that TMA cannot store to) ptxas puts that code in R152-R157."""
    if c["BM"] == 192 and problem.result_dtype == torch.float32 and (c["EPI"] == 1 or problem.beta != 0):
        return "tc09's BM = 192 tile with fp32 results takes only beta = 0 and a D TMA can store to (EPI = 0)"
    return None


def _tc09_smem(c: GemmConfig) -> int:
    return _tc07_smem(c) + 64  # and the stream-K schedule (gemmlab::StreamK, tile counts), after the barriers


def _check_07_tc(c: GemmConfig, bn: tuple[int, ...] = (128, 192, 256), max_bm: int = 192, smem: int | None = None) -> str | None:
    return (
        _check_tma_tiles(c, bn, max_bm, _tc07_smem(c) if smem is None else smem, bk=(64, 32))
        or _check_cluster(c, (1, 2, 4))
        or _first_failure((c["TB"] or c["BN"] // 64 >= c["CM"],
                           f"BN / 64 = {c['BN'] // 64} boxes of B leave some of CM = {c['CM']} blocks none to load"),
                          (not c["TB"] or c["BN"] // c["CM"] % 8 == 0,
                           f"B's {c['BN']} rows do not split into whole 8-row atoms among CM = {c['CM']} blocks"),
                          (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
                          (c["TA"] in (0, 1), "TA must be 0 (A row-major) or 1 (A stored transposed)"),
                          (c["EPI"] in (0, 1), "EPI must be 0 (TMA stores without C) or 1 (every epilogue)"),
                          (c["EPI"] == 1 or c["TMA_STORE"] == 1, "EPI = 0 is the TMA-store epilogue: it needs TMA_STORE = 1"),
                          (c.as_dict().get("HO", 0) in (0, 1), "HO must be 0 (never) or 1 (the hand-over where it applies)"),
                          (c.as_dict().get("OB", 2) in (1, 2), "OB must be 1 or 2 (staging buffers a consumer)"))
    )


def _tc07_launch_registers(c: GemmConfig) -> int | None:
    """The register count tc07's cubin is launched with where it compiles for more (the kernel's
    __maxnreg__): the 192-row tile (160 -> 128), the 128-row tile with the hand-over (232 -> 168)."""
    if c["BM"] == 192:
        return 128
    if c["BM"] == 128 and c["HO"] and c["BN"] == 256 and c["EPI"] == 0:
        return 168
    return None


def _tc07_boxes(c: GemmConfig) -> dict[str, tuple[int, int]]:
    """A's box: BM rows of BK (row-major A), or with TA BK rows of 64 (A stored transposed: BM / 64
    boxes a stage); B's: BK rows of 64 columns (row-major B), or with TB its BN / CM rows of BK (B
    stored transposed: each block of a cluster loads its share of the tile's rows)."""
    a = (c["BK"], 64) if c["TA"] else (c["BM"], c["BK"])
    b = (c["BN"] // c["CM"], c["BK"]) if c["TB"] else (c["BK"], 64)
    return {"a": a, "b": b, "d": (64, 64)}


TC_07 = KernelSpec(
    id="tc07_persistent_cluster",
    epilogues=True,
    step=7,
    title="persistent clusters",
    idea="one block per SM walks grouped tiles; block pairs share B by TMA multicast; epilogue via swizzled smem and TMA stores",
    source="tensorcore/07_persistent_cluster.cu",
    entry="tc_persistent_cluster",
    params=(
        Param("BM", 128, "rows of C a block: 64 per consumer warpgroup (64, 128 or 192; 192 fits three stages)"),
        Param("BN", 256, "columns of C a block: 128, 192 or 256 (one m64nBNk16 MMA a warpgroup)"),
        Param("BK", 64, "K slice of one stage: 64 (128-byte swizzle rows of A) or 32 (64-byte, twice the stages)"),
        _WS_STAGES,
        _cluster_m((1, 2, 4)),
        _CLUSTER_GROUP,
        Param("TMA_STORE", 1, "1: epilogue through swizzled smem and TMA stores; 0: registers to global"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major; 0: B row-major (set from the problem)"),
        Param("TA", 0, "1: A stored transposed ([K][M], e.g. x.t()), read M-major; 0: A row-major (set from the problem)"),
        Param("EPI", 1, "0: only the epilogue of beta = 0 and a D TMA stores to (set from the problem); 1: every epilogue"),
        Param("HO", 1, "1: hand a tile over half by half, its epilogue beside MMAs (the 128 x 256 tile with EPI = 0 and a 16-bit D); 0: never"),
        Param("OB", 2, "the epilogue's 8 KB staging buffers a consumer: 2 (a chunk stores while the next is staged) or 1 (room for another K stage; a 16-bit D only)"),
    ),
    block=_WS_BLOCK,
    grid=_CLUSTER_GRID,
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc07_smem,
    check_config=_check_07_tc,
    seeds="issue 3: persistent tile scheduler, clusters with TMA multicast, TMA-store epilogue; tile widths for whole waves",
    type_param=True,
    tma=("a", "b", "d"),
    tma_boxes=_tc07_boxes,
    cluster=lambda c: (c["CM"], 1, 1),
    persistent=True,
    min_capability=(9, 0),
    staged=True,
    layouts=("nn", "nt", "tn", "tt"),
    # BM = 192: compiled for 160 registers a thread, launched with 128 (see the kernel and gemmlab.cubin);
    # BM = 128 with the hand-over: compiled for 232, launched with 168
    launch_registers=_tc07_launch_registers,
    result_types=lambda c: (torch.bfloat16, torch.float16) if c["OB"] == 1 else None,
)


def _tc08_smem(c: GemmConfig) -> int:
    staging = (c["TMA_STORE"] > 0) * (c["BN"] // 64) * 16384  # 16 KB of fp32 staging per consumer
    return c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 4 + staging + _barriers(c) + 64 * c["SK"] + 1024  # (SK: the stream-K plan after the barriers)


def _check_08_tc(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["BM"] in (128, 256), "BM must be 256 or 128 (the N of one m64n256k8 or m64n128k8 MMA: C's rows are the MMA's columns)"),
        (c["BM"] == 256 or (c["SPLIT"] == 0 and c["SK"] == 0),
         "BM = 128 runs whole tiles only (SPLIT = 0, SK = 0): the workspace's parts are 64 x 256"),
        (c["BN"] in (64, 128), "BN must be 64 or 128 (one consumer warpgroup per 64 columns of C)"),
        (c["BK"] == 32, "BK must be 32 (32 fp32: one 128-byte swizzle row)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (c["CM"] in (1, 2) and c["CN"] in (1, 2) and c["CM"] * c["CN"] <= 2,
         "CM and CN must be 1 or 2, at most one of them 2 (clusters of at most two blocks)"),
        (c["GROUP"] >= 1, "GROUP must be at least 1"),
        (c["TMA_STORE"] in (0, 1), "TMA_STORE must be 0 or 1"),
        (c["SPLIT"] in (0, 1), "SPLIT must be 0 or 1"),
        (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
        (c["EPI"] in (0, 1), "EPI must be 0 (TMA stores without C) or 1 (every epilogue)"),
        (c["EPI"] == 1 or c["TMA_STORE"] == 1, "EPI = 0 is the TMA-store epilogue: it needs TMA_STORE = 1"),
        (c["SK"] in (0, 1), "SK must be 0 (whole tiles) or 1 (stream-K over the last waves)"),
        (c["SK"] == 0 or c["SPLIT"] == 0, "SK = 1 (stream-K) and SPLIT = 1 (split-K of few tall tiles) are separate builds"),
        (_tc08_smem(c) <= 227 * 1024, f"shared memory {_tc08_smem(c)} B exceeds 227 KB"),
    )


TC_08 = KernelSpec(
    id="tc08_tf32",
    epilogues=True,
    step=8,
    title="TF32 wgmma",
    idea="float32 inputs on the tensor cores as TF32 (asked for with precision='tf32'): D^T = B^T A^T, B's fragments from registers, no transposed copy (a B stored transposed: both from shared memory); the last waves split along K (stream-K, as tc09), few tall-K tiles each split over many",
    source="tensorcore/08_tf32.cu",
    entry="tc_tf32",
    params=(
        Param("BM", 256, "rows of C a block (256 or 128: the N of one m64n256k8 or m64n128k8 MMA)"),
        Param("BN", 128, "columns of C a block: 64 per consumer warpgroup (64 or 128)"),
        Param("BK", 32, "K slice of one stage (32 fp32: one 128-byte swizzle row)"),
        _WS_STAGES,
        Param("CM", 1, "blocks per cluster along M, sharing B tiles by multicast (1 or 2)"),
        # CN = 2 measured best on an H100 (results/nvidia-h100-80gb-hbm3/tune-20261122T044930Z.json):
        # sharing the 32 KB A tile moves fewer bytes than sharing the 16 KB B tile
        Param("CN", 2, "blocks per cluster along N, sharing A tiles by multicast (1 or 2; CM * CN <= 2)"),
        _CLUSTER_GROUP,
        Param("TMA_STORE", 1, "1: the epilogue through shared memory and TMA stores; 0: scalar stores from registers"),
        Param("SPLIT", 0, "1: few tiles with a tall K split along K over every SM (tc09's split-K; chosen where it splits); 0: whole tiles only"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major from shared memory; 0: B row-major, its fragments from registers (set from the problem)"),
        Param("EPI", 1, "0: only the epilogue of beta = 0 and a D TMA stores to (set from the problem); 1: every epilogue"),
        Param("SK", 0, "1: the last full wave of tiles and the partial one split along K over every cluster (tc09's stream-K); 0: whole tiles"),
    ),
    block=lambda c: ((c["BN"] // 64 + 1) * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(M, c["BM"] * c["CM"]) * cdiv(N, c["BN"] * c["CN"]) * c["CM"] * c["CN"], 1, 1),
    dtypes=(torch.float32,),
    dynamic_smem=_tc08_smem,
    check_config=_check_08_tc,
    seeds="issue 3: TF32 on request; wgmma reads TF32 from shared memory K-major only, A may come from registers",
    tma=("a", "b", "d", "a_edge"),
    tma_boxes=lambda c: {
        "a": (c["BM"] // c["CN"], c["BK"]),
        "a_edge": (64, c["BK"]),  # A again, in boxes of 64 rows: a tile past row M skips those outside
        "b": (c["BN"] // c["CM"], c["BK"]) if c["TB"] else (c["BK"], 32),  # rows n of K, or rows k of 32 n
        "d": (64, 32),  # the epilogue's pieces: 64 rows of D x 32 fp32
    },
    cluster=lambda c: (c["CM"] * c["CN"], 1, 1),
    persistent=True,
    min_capability=(9, 0),
    math="tf32",
    staged=True,
    # as tc09's: one 64 x 256 fp32 part a consumer warpgroup and block, and the tiles' counters
    workspace=lambda c, grid: (grid[0] * (c["BN"] // 64) * 64 * 256, grid[0] * (c["BN"] // 64)),
    splits_k=lambda p, c, blocks: _splits(p, c, blocks, c["CM"] * c["CN"], c["BM"] * c["CM"], c["BN"] * c["CN"]),
    extra_constraints=lambda p, c: _stream_k_steps_fit(p, c) if c["SK"] else None,
    layouts=("nn", "nt"),
)

# With at most half a wave of tiles tc09 splits every tile over `split_ways` runs (kernels/common/
# tma.cuh, StreamK: the same rule, the same constant): as many as the slots allow, down to runs of
# SPLIT_MIN_STEPS K steps. The runs then add up the tile's parts together, a share each. Fitted to
# an H100 run (results/nvidia-h100-80gb-hbm3/tune-splitk-20261123T171114Z.json, 16 to 132 runs of
# 4 to 124 K steps): that and starting the runs cost about SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS x
# runs K steps of a whole 128 x 256 tile's time (11.7 us over 16 runs, 18-20 us over 128-132).
SPLIT_MIN_STEPS = 4
SPLIT_FIXED_STEPS = 16.0
SPLIT_RUN_STEPS = 0.1
def split_ways(tiles: int, slots: int, kt: int) -> int:
    """Runs each tile would be split over when 2 * tiles <= slots (and kt > 1)."""
    return min(slots // tiles, max(2, kt // SPLIT_MIN_STEPS))


def split_k_ways(tiles: int, slots: int, kt: int) -> int:
    """The kernels' rule (tma.cuh, split_k_ways): the runs each tile is split over, 0 for none --
    only with at most half a wave of tiles, two K steps or more, and where split_time is below 1."""
    if kt <= 1 or tiles < 1 or 2 * tiles > slots:
        return 0
    return split_ways(tiles, slots, kt) if split_time(tiles, slots, kt) < 1 else 0


def _splits(problem: GemmProblem, c: GemmConfig, blocks: int, cluster: int, tile_m: int, tile_n: int) -> bool:
    """Whether a SPLIT config of tc08 or tc09 splits this problem's cluster tiles (tile_m x tile_n)
    along K with `blocks` resident in clusters of `cluster`."""
    tiles = cdiv(problem.M, tile_m) * cdiv(problem.N, tile_n)
    return bool(c["SPLIT"]) and split_k_ways(tiles, blocks // cluster, cdiv(problem.K, c["BK"])) > 0


def split_time(tiles: int, slots: int, kt: int) -> float:
    """tc09's time with every tile split, in units of one whole tile's K steps: a run of
    KT / ways steps and the cost of splitting. The kernel splits only where this is below 1."""
    ways = split_ways(tiles, slots, kt)
    return (kt / ways + SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS * tiles * ways) / kt


TC_09 = KernelSpec(
    id="tc09_stream_k",
    epilogues=True,
    step=9,
    title="stream-K",
    idea="tc07 with the last, partial wave split along K over every cluster (and few tall-K tiles each split over many); split tiles summed in fp32 through a workspace",
    source="tensorcore/09_stream_k.cu",
    entry="tc_stream_k",
    params=tuple(Param("BN", 256, "columns of C a block (256: one m64n256k16 MMA a warpgroup)") if p.name == "BN" else p
                 for p in TC_07.params if p.name not in ("HO", "OB"))
    + (Param("SPLIT", 0, "1: few tiles with a tall K split along K over every SM (chosen where it splits); 0: never"),),
    block=_WS_BLOCK,
    # every SM, whatever the tile count (a persistent grid is capped at the blocks that fit): with
    # half a wave of tiles or less, the idle ones take a share of each tile's K steps
    grid=lambda M, N, c: (GRID_X_MAX // c["CM"] * c["CM"], 1, 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc09_smem,
    check_config=lambda c: _check_07_tc(c, bn=(256,), smem=_tc09_smem(c)) or _first_failure(
        (c["BM"] < 192 or c["SPLIT"] == 0, "BM = 192 has no split-K (SPLIT = 0): its code before setmaxnreg would call a subroutine")),
    seeds="issue 3: past tc07 -- stream-K (Osama et al., 2023) for the wave-quantisation loss measured in tc07",
    type_param=True,
    tma=("a", "b", "d"),
    tma_boxes=TC_07.tma_boxes,
    cluster=TC_07.cluster,
    persistent=True,
    min_capability=(9, 0),
    # one 64 x 256 fp32 part and one flag per consumer warpgroup and block
    workspace=lambda c, grid: (grid[0] * (c["BM"] // 64) * 64 * 256, grid[0] * (c["BM"] // 64)),
    splits_k=lambda p, c, blocks: _splits(p, c, blocks, c["CM"], c["BM"] * c["CM"], c["BN"]),
    staged=True,
    extra_constraints=lambda p, c: _stream_k_steps_fit(p, c) or _tc09_tall_tile_serves(p, c),
    layouts=TC_07.layouts,
    launch_registers=lambda c: 128 if c["BM"] == 192 else None,  # as tc07's 192-row tile
)



# tc07's batched build (BATCHED = 1 in its source; entry tc_persistent_cluster_batched): one launch
# for a batch of products, A, B and D through rank-3 tensor maps. Not registered: gemm() and 'auto'
# never see it; gemmlab.batched_tc07 launches it and chooses TMA_STORE and EPI a call (config_for):
# the staged epilogue where D takes TMA stores, the register stores where it does not. Single
# blocks (its 3-D loads have no multicast yet) and no hand-over (its stores take no batch yet).
# Shared memory as tc07's: the staging buffers are counted whether or not the build stores through them.
_BATCHED_DEFAULTS = {"CM": 1, "TMA_STORE": 1, "EPI": 1, "HO": 0}


def _check_07_batched(c: GemmConfig) -> str | None:
    return _check_07_tc(c) or _first_failure(
        (c["CM"] == 1, f"tc07's batched build runs single blocks (CM = 1), not CM = {c['CM']}: its 3-D loads have no multicast"),
        (c["TMA_STORE"] in (0, 1), "TMA_STORE must be 0 (register stores) or 1 (the staged epilogue through D's rank-3 map)"),
        (c["HO"] == 0, "tc07's batched build has no hand-over (HO = 0): its half-tile stores take no batch coordinate"),
        (c["BM"] < 192, "tc07's batched build has no 192-row tile (its launch-register rewrite is not checked batched)"),
    )


TC_07_BATCHED = dataclasses.replace(
    TC_07,
    id="tc07_persistent_cluster_batched",
    title="persistent clusters, batched",
    idea="tc07 over a batch of products in one launch: the tile loop walks batch x tiles; A and B through 3-D tensor maps",
    entry="tc_persistent_cluster_batched",
    params=tuple(dataclasses.replace(p, default=_BATCHED_DEFAULTS[p.name]) if p.name in _BATCHED_DEFAULTS else p
                 for p in TC_07.params),
    check_config=_check_07_batched,
    cluster=lambda c: (1, 1, 1),
)
