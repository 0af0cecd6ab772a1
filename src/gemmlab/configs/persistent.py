"""Selection for the persistent 16-bit steps: tc07's block tile, from a model of the waves of tiles
each candidate fills (tile_time); whether tc09's stream-K or split-K finishes before it
(stream_k_pays); and whether padded copies of operands TMA cannot read pay for themselves
(copies_pay)."""

from __future__ import annotations

import torch

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig, cdiv, operands_to_copy
from ..specs.persistent import split_time, split_ways
from .rules import _rule_config, _size_rule_config, _tma_stores_in_place


# tc07's block tiles besides its 128 x 256 default, each with its rate: the area of C an SM
# finishes per unit of time while busy, against the default tile (narrower tiles read more operand
# bytes per MMA; one consumer warpgroup hides less latency than two). A persistent run takes whole
# waves of tiles (one tile per block slot), so where 128 x 256 tiles leave the last wave part-empty
# a narrower tile can finish first: 3072^2 is 2.2 waves of 128 x 256 (3 waves' time) but 2.9 of
# 128 x 192; 1024^2 is 32 tiles of 128 x 256 for 132 SMs, 128 of 64 x 128. tile_time() models
# that; config_for takes the tile with the least time, the widest on a tie.
# Rates from an H100, bf16 (results/nvidia-h100-80gb-hbm3/tune-tiles-20261123T152942Z.json), busy
# throughput per SM against 128 x 256 at 2048-8192: 128 x 192 0.80-0.90, 64 x 128 0.45-0.55.
# Measured picks: 64 x 128 at 512-1024 (0.86-0.91x cuBLAS against 0.55-0.59x for 128 x 256), 128 x
# 192 at 1536 (0.85x against 0.71x) and 3072 (0.86x against 0.75x, and tc09's 0.83x). 128 x 128
# tiles (CM 1 or 2, four stages) never won a size there (on an H200 with six stages: below). On an H200 the 128 x 192
# tile's rate came out at 0.84-0.95, median 0.91, over 19 shapes from 2304 x 2304 x 8192 to 7936 x
# 7936 x 2048 (results/nvidia-h200/tune-skcost-*.json, against 128 x 256 in the same rounds), and
# with the 0.85 of the H100 'auto' split 3072^3 with tc09 once stream-K's cost was refitted
# (stream_k_cost), 2-4% behind this tile; so 0.91.
# 192 x 256 (three consumer warpgroups, three stages; its cubin's launch register count rewritten,
# gemmlab.cubin) runs its main loop about 5% faster than 128 x 256 in single launches (H200, bf16:
# 857 TFLOP/s at 2304 x 2816 x 16384, one wave of its cluster tiles, results/nvidia-h200/
# tune-m192-20261124T052243Z.json, against 808-814 for 128 x 256 at 1536 x 2816 x 16384, its own one
# wave, probe-m192-20261124T05*); with its longer epilogue and shallower ring, where both tiles fill
# the same waves it ran up to 2% ahead: 6144^3 1.6% in bf16 in five records (tune-m192-rate-*,
# tune-sk192-*, tune-6144-*, tune-rate192-*), 6016^3 1.5-2%, 6144 x 6144 x 2048 1%, 4864^3
# 1.4-1.7%, 3200-3456^3 even to 1%. So its rate is 1.01 -- enough to break the tie of whole waves
# at 6144^2, where it also beat tc09's stream-K by 0.5-1.1% in the same records (B stored
# transposed: 0.5%, both operands: even). Only where that was measured (tile_rate): beta = 0 with
# TMA stores (at 6132^3, whose D rows TMA cannot store, it lost 0.7-1.2% to tc09; with fp32 results,
# which TMA stores there, it won by 1.6-2.8%), A row-major (A stored transposed, 6144^3: 6% behind
# tc09 in one run, 0.5% ahead in the next -- unsettled), and below TALL_TILE_MAX_FLOPS: where the card is
# power-limited it was 0.5-2% behind at 7936^3 (560-610 W, 1950-1965 MHz) and 1.3-1.5% at 10752^3.
# Elsewhere its rate is 1.0, and 'auto' takes it only where its taller tiles fill the waves better
# (2304 x 2816: one wave instead of one and a half; 5632^2).
# 128 x 128 single blocks with six stages (H200, bf16, 2026-11-24): where 'auto' had 128 x 192 tiles
# leave a third of the SMs idle -- 1280^2 is 70 of them, 100 of 128 x 128 -- it ran 17-29% faster:
# 1280^3 1.00x cuBLAS against 0.82x, 1024 x 1536 x 4096 0.85x against 0.66x, and so at all eleven
# shapes drawn from the 71 of 1024 (M, N = 256..8192 in steps of 256, K = 4096) where a rate of
# 0.85 changes the choice (results/nvidia-h200/probe-bf16-128x128-*.json, two runs). A rate of
# 0.95 would also take it from 64 x 128, 128 x 192 and tc09 at 81 more; it lost to each at all
# twelve drawn from those (probe-bf16-128x128-rate-*.json: 0.54x-0.83x against 0.74x-1.01x). Four
# stages ran 2-6% slower than six at 1024-2048 (probe-bf16-small-20261124T214530Z.json).
# 192 x 128 (three consumer warpgroups of m64n128 MMAs, single blocks; 160 registers compiled, 128
# launched, as the 192 x 256 tile) where it alone fits the problem in one wave: a wave of 128 x 256
# tiles is 4/3 the work a block, 128 x 128 tiles take two waves. 3072 x 1024, a transformer's qkv
# weight gradient at d_model 1024, is 96 tiles of 128 x 256 for 132 SMs (0.81x cuBLAS, which runs
# it without splitting K: the same bits), 192 of 128 x 128, 128 of 192 x 128. H200, bf16, against
# the 128 x 256 tile in the same rounds (results/nvidia-h200/tune-tile192x128-20261129T1026*.json):
# 3072 x 1024 x 8192 70.0 against 84.4 us (0.97x cuBLAS, every layout 0.96-0.97x), 3072 x 1024 x
# 4096 0.98-0.995x against 0.82x, 6144 x 512 x 4096 0.955-0.98x against 0.82x; so a rate of 0.87-0.90,
# 0.88 here. Pairs (CM = 2) ran even to 3% behind; fp32 results (four stages) 0.92-0.98x. Measured
# only where every block takes one tile or none (tile_rate); 7424 x 1280 x 4096 (2.95 waves) ran
# 0.76x against tc09's 0.96x in pairs.
TILE_192X128 = dict(BM=192, BN=128, CM=1, STAGES=4)
TC07_TILES: tuple[tuple[dict[str, int], float], ...] = (
    (dict(BN=192, CM=1), 0.91),
    (dict(BM=64, BN=128, CM=1, STAGES=8), 0.45),
    (dict(BM=192, STAGES=3), 1.01),
    (dict(BN=128, CM=1, STAGES=6), 0.85),
    (TILE_192X128, 0.88),
)
TALL_TILE_MAX_FLOPS = 5e11  # 2 x 6300^3: past it the 192-row tile's gain is gone (power-limited)


def tile_rate(problem: GemmProblem, overrides: dict[str, int], rate: float) -> float | None:
    """A TC07_TILES entry's rate for the problem, or None where it is not a candidate: the 192 x
    256 tile's gain only where it was measured (beta = 0, D taking TMA stores, A row-major, below
    the power limit); the 192 x 128 tile only where its tiles fit one wave."""
    if overrides.get("BM") != 192:
        return rate
    if overrides.get("BN") == 128:
        tiles = cdiv(problem.M, 192) * cdiv(problem.N, 128)
        return rate if tiles <= sm_count_of(problem.device) else None
    measured = (problem.beta == 0 and _tma_stores_in_place(problem) and not problem.a.trans
                and problem.flops <= TALL_TILE_MAX_FLOPS)
    return rate if measured else min(rate, 1.0)


def tile_time(problem: GemmProblem, cfg: GemmConfig, rate: float = 1.0) -> float:
    """A persistent run's time in whole waves of tiles, in units of one 128 x 256 tile at rate 1:
    waves x (the tile's area against 128 x 256) / rate. The same K for every tile, so K drops out."""
    slots = sm_count_of(problem.device) // cfg["CM"]
    tiles = cdiv(problem.M, cfg["BM"] * cfg["CM"]) * cdiv(problem.N, cfg["BN"])
    waves = -(-tiles // slots) if slots else tiles
    return waves * cfg["BM"] * cfg["BN"] / (128 * 256) / rate


def tc07_tile(problem: GemmProblem) -> tuple[GemmConfig, float]:
    """tc07's config for the problem, by tile_time, and that time: the size rule's 128 x 256
    config unless one of TC07_TILES finishes first (the 128 x 128 and 128 x 192 tiles in clusters
    of two where _tile128_clusters and _tile192_clusters say so: the same waves, so the same time)."""
    spec = registry.get("tc07_persistent_cluster")
    best = _size_rule_config(spec, problem)
    best_time = tile_time(problem, best)
    for overrides, rate in TC07_TILES:
        rate = tile_rate(problem, overrides, rate)
        if rate is None:
            continue
        cfg = _rule_config(spec, tuple(sorted(overrides.items())))
        t = tile_time(problem, cfg, rate)
        if t < best_time:
            best, best_time = cfg, t
    if _tile128_clusters(problem, best) or _tile192_clusters(problem, best):
        best = _rule_config(spec, tuple(sorted({**best.as_dict(), "CM": 2}.items())))
    if _tile192_deep(problem, best) or _tall_tile_deep(problem, best):
        best = _rule_config(spec, tuple(sorted({**best.as_dict(), **TILE192_DEEP}.items())))
    return best, best_time


# tc07's 128 x 128 tile in clusters of two along M, sharing B's tile by multicast (H200, bf16,
# ratios to cuBLAS in the same rounds). Its MMAs read 64 bytes a cycle an SM from L2 where a 128 x
# 256 tile reads 47, and with most SMs busy that is what holds it back: at 4096^3 single blocks ran
# 0.77x, pairs 0.92x (results/nvidia-h200/tune-tile128-cm-20261125T021044Z.json). Against the
# single blocks 'auto' ran, at 40 shapes where it took them (tune-tile128-cm-fit-*, two runs,
# kernel times), the pairs were
# - ahead by 12% at 660 tiles (more than a wave: 3840 x 2816 x 2048, 1280 x 8448 x 2048);
# - ahead on flat problems (N >= 4 M) with at least 110 tiles: +4% at 256 x 7680 x 2048, 0-5% at
#   116-132 tiles and K = 4096, 3-13% at K = 8192, 7-17% at K = 16384;
# - ahead by 0.2-2% at K = 16384 whatever the shape;
# - behind by up to 5.6% elsewhere -- problems that are not flat or fill fewer SMs, K up to 8192 --
#   where the pair's blocks wait for each other and L2 had room to spare.
# At Llama 3's 8B out and down layers at 512 tokens (tune-m512-cm-20261125T021017Z.json, w read in
# place): 512 x 4096 x 4096 0.85x -> 0.89-0.90x, 512 x 4096 x 14336 0.83x -> 0.92-0.93x.
TILE128_CLUSTER_K = 16384  # from this K the pairs serve any problem whose tiles pair up
TILE128_FLAT_SHARE = 5 / 6  # the least share of the SMs a flat problem's tiles fill for pairs


def _tile128_clusters(problem: GemmProblem, cfg: GemmConfig) -> bool:
    """Whether tc07's 128 x 128 tile, chosen in single blocks, runs in clusters of two instead:
    its tiles pair up along M, and there are more of them than SMs, or K reaches
    TILE128_CLUSTER_K, or the problem is flat (N >= 4 M) with tiles for TILE128_FLAT_SHARE of
    the SMs."""
    d = cfg.as_dict()
    if (d["BM"], d["BN"], d["CM"]) != (128, 128, 1) or cdiv(problem.M, 128) % 2:
        return False
    sms = sm_count_of(problem.device)
    tiles = cdiv(problem.M, 128) * cdiv(problem.N, 128)
    flat = problem.N >= 4 * problem.M and tiles >= TILE128_FLAT_SHARE * sms
    return tiles > sms or problem.K >= TILE128_CLUSTER_K or flat


# tc07's 128 x 192 tile in clusters of two along M: its MMAs ask L2 for 52 bytes a cycle an SM
# (16 KB of A and 24 KB of B a 768-cycle K stage), pairs for 36 (the blocks split B's three
# 64-column boxes two and one, or with B stored transposed its 192 rows 96 and 96). H200, bf16,
# single blocks against pairs in the same rounds (results/nvidia-h200/tune-tile192-cm-*.json):
# - more than a wave of tiles: pairs ahead at 7 of 9 shapes, by 0.4-8.9% (3072^3 +1.6%, 1280 x
#   4864 x 4096 +8.9%), behind by 0.4% and 1.1% at the other two;
# - a B stored transposed (x @ w.t()) with tiles for 5/6 of the SMs or more: +1.5% at 512 x 6144 x
#   4096, +11.6% at 768 x 4096 x 4096, +23% at 768 x 4096 x 14336 (128-132 tiles), +6.9% at 1024 x
#   6144 x 4096;
# - a row-major B with a wave or less: behind by 1-6% at 10 of 13 shapes.
TILE192_TRANSPOSED_SHARE = 5 / 6


def _tile192_clusters(problem: GemmProblem, cfg: GemmConfig) -> bool:
    """Whether tc07's 128 x 192 tile, chosen in single blocks, runs in clusters of two instead: its
    tiles pair up along M, and there are more of them than SMs, or B is stored transposed and they
    fill TILE192_TRANSPOSED_SHARE of the SMs."""
    d = cfg.as_dict()
    if (d["BM"], d["BN"], d["CM"]) != (128, 192, 1) or cdiv(problem.M, 128) % 2:
        return False
    sms = sm_count_of(problem.device)
    tiles = cdiv(problem.M, 128) * cdiv(problem.N, 192)
    return tiles > sms or (problem.b.trans and tiles >= TILE192_TRANSPOSED_SHARE * sms)


# tc07's 128 x 192 tile with a fifth K stage, in the 8 KB a consumer's second staging buffer held
# (OB = 1: each 64-column chunk of the epilogue waits for the last one's store), where every block
# runs one tile. cuBLAS runs the same tile at Llama 3 8B's qkv layer at 512 tokens with five stages
# (nvjet_sm90_tst_192x128_64x5_1x2, probe-cublas-kernels-bf16-nt-20261125T042335Z.json). H200, bf16,
# against four stages in the same rounds (probe-onebuf-20261125T0444*Z.json): 512 x 6144 x 4096
# (x @ w.t(), 128 tiles in pairs) 0.930x -> 0.974x cuBLAS, 1024 x 3072 x 4096 +0.7% (single
# blocks); at a short K the epilogue's waits weigh more than the ring's depth: 1536^3 (96 tiles)
# 3.7% behind; and where blocks run several tiles too: 3072^3 -2%, 2304^3 -2.5%, 1024 x 6144 x
# 4096 -1%. Three shapes gained or lost: the thresholds are fitted, not explained.
TILE192_DEEP = dict(STAGES=5, OB=1)
TILE192_DEEP_MIN_K = 4096


def _tile192_deep(problem: GemmProblem, cfg: GemmConfig) -> bool:
    """Whether tc07's 128 x 192 tile takes TILE192_DEEP: one tile or none for every block, K of at
    least TILE192_DEEP_MIN_K, and a 16-bit result (one staging buffer holds a 64-column chunk of
    16-bit values, not of fp32)."""
    d = cfg.as_dict()
    if ((d["BM"], d["BN"]) != (128, 192) or problem.K < TILE192_DEEP_MIN_K
            or problem.result_dtype not in (torch.bfloat16, torch.float16)):
        return False
    tiles = cdiv(problem.M, 128) * cdiv(problem.N, 192)  # one a block slot, or none
    return tiles <= sm_count_of(problem.device) // d["CM"] * d["CM"]


def _tall_tile_deep(problem: GemmProblem, cfg: GemmConfig) -> bool:
    """Whether tc07's 192 x 128 tile takes TILE192_DEEP's fifth stage: with a 16-bit result, whose
    64-column chunk one staging buffer holds (H200, bf16, in pairs, tune-tile192x128-20261129T102433Z.json.gz:
    five stages 0.958x and 0.948x cuBLAS where four ran 0.914-0.927x and 0.874-0.894x at 3072 x 1024
    x 4096 and 6144 x 512 x 4096, and even at 3072 x 1024 x 8192). The tile serves one wave or less
    (tile_rate)."""
    d = cfg.as_dict()
    return (d["BM"], d["BN"]) == (192, 128) and problem.result_dtype in (torch.bfloat16, torch.float16)


# 16-bit problems whose A or B rows TMA cannot read (a row stride not a multiple of 8 elements:
# 1022, 3135, 6132 ...) reach tc07/tc09 through padded copies (KernelSpec.staged). A copy is one
# more launch and moves the operand's bytes twice, so 'auto' stages only where the GEMM is large
# enough and dense enough for tc07's speed over tc04's (which reads any layout in place) to repay
# it: at least STAGE_MIN_FLOPS, and STAGE_MIN_INTENSITY flops for every byte copied. Measured on
# an H100 (results/nvidia-h100-80gb-hbm3/tune-staged-*.json, bf16): on GPU time alone staging wins
# from 383^3 (32 against 38 us) and ties at 319^3; but a staged call also costs the host ~31 us more
# (65 against 34 us at 62^3, overhead-20261123T143746Z.json), about what it saves at 639^3
# (36 against 56 us): 'auto' starts there. At 1022^3 it is 2.4x faster than tc04, at 3135^3 4x.
STAGE_MIN_FLOPS = 2 * 640**3
STAGE_MIN_INTENSITY = 256
# That rule was measured on cubes, where tc04 fills the GPU with tiles. A thin product with a long
# reduction (a grouped layer's filter gradient, 4 x 36 x 100352; 100 x 100 x 16384) is a few tc04
# tiles, each block walking all of K alone: on an H200, bf16, tc04 took 4,555 us at 4 x 36 x 100352
# and 789 us at 1 x 100 x 16384, where tc09 on padded copies (stream-K over every SM) took 51 and
# 25 us, torch.mm 23 and 10; at 100 x 100 x 1024 57 against 28 us
# (results/nvidia-h200/few-tiles-20261128T1834Z.txt, docs/notes/few-tiles-unaligned-rows.md). So
# the copies also pay where tc04's 128 x 128 tiles are one wave or less and K is at least
# STAGE_FEW_TILES_MIN_K.
STAGE_FEW_TILES_MIN_K = 1024
TC04_TILE = 128


def copies_pay(problem: GemmProblem, c: GemmConfig) -> str | None:
    """None where tc07/tc09 read A and B in place or their copies pay for themselves; else why not."""
    copied = operands_to_copy(problem)
    if not copied:
        return None
    size = problem.dtype.itemsize
    nbytes = sum(getattr(problem, n).rows * getattr(problem, n).cols * size for n in copied)
    if problem.flops >= STAGE_MIN_FLOPS and problem.flops >= STAGE_MIN_INTENSITY * nbytes:
        return None
    tc04_tiles = cdiv(problem.M, TC04_TILE) * cdiv(problem.N, TC04_TILE)
    if problem.K >= STAGE_FEW_TILES_MIN_K and tc04_tiles <= sm_count_of(problem.device):
        return None  # tc04 would walk the whole of K in a few blocks
    return (f"{' and '.join(copied)} would need a padded copy for TMA, which costs more than it saves "
            f"at {problem.shape}; tc04 reads them in place")


# Stream-K's cost (tc09, and tc08 with SK = 1), in waves of whole tiles, where each tile takes `kt`
# K steps: STREAM_K_COST_STEPS steps of one tile's time -- every block writes one head part and
# reads one back (128 KB of fp32 each way), about 7 us at the ~0.68 us a step of a 128 x 256 bf16
# tile or a 256 x 128 TF32 tile in a single launch, as the traced fix-up measured (2.4 + 4.4 us a block)
# -- plus STREAM_K_COST_WAVES of a wave (runs starting mid-tile, parts' traffic in L2). Fitted on an
# H200 to 155 pairs of whole tiles against stream-K in the same rounds (2 to 12 waves; bf16, fp16,
# fp32 results, TF32), cost = waves x (stream-K time / whole-tile time) - tiles / slots:
# results/nvidia-h200/tune-skcost-20261124T1127*.json (2560-8192^2 and K = 2048, 8192 at four M x
# N) and every record since ceb9d27 with both; rms 0.06 waves, TF32's alone 0.05 + 16.6 / kt, the
# 16-bit ones' 0.13 + 9.3 / kt. The earlier 0.1 + 1.2 / waves (an H100 fit of squares, kernels of
# then) overstated it at 2-3 waves: it kept tc07 at 2560^2 and 3200-3328^2, where tc09 ran 4-6% ahead.
STREAM_K_COST_WAVES = 0.11
STREAM_K_COST_STEPS = 10.8


def stream_k_cost(kt: int) -> float:
    """What splitting the last waves along K costs, in waves of whole tiles of kt K steps each."""
    return STREAM_K_COST_WAVES + STREAM_K_COST_STEPS / kt


def stream_k_time(tiles: int, slots: int, kt: int) -> float:
    """A stream-K run's time in waves of whole tiles: the tiles spread evenly over the slots, plus
    the cost of splitting. tc09 and tc08's SK = 1 are taken where it is below whole tiles' time."""
    return tiles / slots + stream_k_cost(kt)
# 'auto' splits only where the model puts tc09 at least 10% ahead of tc07: tile_time
# overstates tc07's small one-wave runs (at 512 x 512 x 4096 tc07 took 19.2 us, tc09 split 21.0 us,
# where the models said 0.56 against 0.51 tile-times)
SPLIT_MARGIN = 0.9


def stream_k_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """None where tc09 should serve instead of tc07: where tiles / slots + stream_k_cost(kt),
    tc09's time in units of one 128 x 256 tile, is less than tile_time of tc07's own
    choice of tile (waves, with 128 x 256 tiles).

    History of the rule. On an H200 (results/nvidia-h200/tune-20261122T052201Z.json,
    bench-20261122T053339Z.json) stream-K won where tc07's waves leave much of the cluster-time
    idle -- 3072^3 0.84x cuBLAS against 0.75x, 5120^3 0.98x against 0.91x, 8192^3 1.04x against
    1.02x -- and lost at 4096^3 (0.93x against 0.99x); once its runs were aligned and its heads
    published late (a52f9cf, 0c7f1ea) it also won at 6144^3 (all 12 H200 comparisons,
    3c42ca5-c8c87c7). The rule was idle > 0.3, then 0.25, / waves. An H100 run of every tc07 tile
    (results/nvidia-h100-80gb-hbm3/tune-tiles-20261123T152942Z.json) put the cost at 0.68 waves at
    2560^2 (2 waves), 0.55 at 3072^2 (3), 0.32 at 4096^2, 0.33 at 5120^2, 0.23 at 6144^2 and 0.1
    at 8192^2 (16) -- falling with the number of waves, hence 0.1 + 1.2 / waves -- and showed the
    flat cost taking tc09 at 2560^2, where it lost (0.89x against 0.98x). With tc07's narrower
    tiles (TC07_TILES) tc09 no longer serves 3072^2 (tc07's 128 x 192: 0.86x against 0.83x).
    Refitted on an H200 with the kernels since ceb9d27 (stream_k_cost): the cost follows the K
    steps a tile takes, not the waves -- the fix-up is a fixed time a block -- and is lower at
    2-3 waves than the H100 fit had it (tc09 1.02x-1.04x against tc07's 0.98x-0.99x at 2560^2)."""
    slots = sm_count_of(problem.device) // c["CM"]
    tiles = cdiv(problem.M, c["BM"] * c["CM"]) * cdiv(problem.N, c["BN"])
    kt = cdiv(problem.K, c["BK"])
    if slots and kt > 1 and 2 * tiles <= slots:  # every tile split along K, where that pays
        tc07_cfg, tc07_time = tc07_tile(problem)
        t = split_time(tiles, slots, kt)
        if t >= 1:
            return f"too few K steps ({kt}) to split {tiles} tiles: tc09 would run them whole, behind tc07"
        if t < SPLIT_MARGIN * tc07_time:
            return None
        return (f"splitting {tiles} tiles over {split_ways(tiles, slots, kt)} runs each ({t:.2f} tile-times) is not "
                f"clearly faster than tc07's {tc07_cfg['BM']} x {tc07_cfg['BN']} tiles ({tc07_time:.2f})")
    if slots == 0 or tiles <= slots:
        return "one wave of tiles or less, too many to split each (more than half a wave)"
    if kt < 2:
        return f"{kt} K step{'s' * (kt != 1)}: stream-K needs two to split a tile"
    tc07_cfg, tc07_time = tc07_tile(problem)
    if stream_k_time(tiles, slots, kt) < tc07_time:
        return None
    if tc07_cfg["BN"] != c["BN"] or tc07_cfg["BM"] != c["BM"]:
        return f"tc07's {tc07_cfg['BM']} x {tc07_cfg['BN']} tiles finish sooner than splitting 128 x 256 ones would"
    waves = -(-tiles // slots)
    idle = (waves * slots - tiles) / (waves * slots)
    return (f"tc07's {waves} waves leave {idle:.0%} of the cluster-time idle, less than splitting costs "
            f"(~{stream_k_cost(kt) / waves:.0%})")
