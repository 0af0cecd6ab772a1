"""Problem -> config, and the choice between kernels.

Configs are data: a kernel runs its registry defaults unless a rule below, taken from a tuning
run committed under results/<gpu>/tune-*.json, says otherwise for the problem's size; tc07's
block tile is chosen by a model of the waves of tiles each candidate fills (tile_time). 'auto'
takes the latest ladder step that can serve the problem -- the benchmark records show it the
fastest registered step at the default shapes -- except where the step's spec says it does not
pay for this problem (KernelSpec.auto_skip: tc09's stream-K only where tc07's last wave idles)."""

from __future__ import annotations

import torch

from . import registry
from .problem import GemmProblem
from .registry import GemmConfig, KernelSpec


# kernel id -> [(smallest M * N, largest M * N or None, overrides)]: a rule applies to problems
# whose M * N lies in its range; first match wins, the registry default otherwise.
# sgemm_11_warp_tile, H200 (results/nvidia-h200/tune-20261122T015612Z.json): 256 x 128 block
# tiles with 64 x 64 warp tiles beat the 128 x 128 default at 2048 x 2048 x 1024 and at every
# square from 4096 to 8192; below that the larger tile leaves SMs idle, so the default stays.
# tc07_persistent_cluster, H200 (results/nvidia-h200/tune-20261122T050341Z.json): up to about
# one and a half waves of 128 x 256 tiles (M * N <= 2560^2) single blocks beat clusters of two --
# 0.98x cuBLAS instead of 0.93x at 2048^3, 0.96x instead of 0.91x at 2560^3 -- even at 3072^3,
# and clusters win from 4096^2 on (0.97x against 0.96x).
SIZE_RULES: dict[str, list[tuple[int, int | None, dict[str, int]]]] = {
    "sgemm_11_warp_tile": [(2048 * 2048, None, dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8))],
    "tc07_persistent_cluster": [(0, 2560 * 2560, dict(CM=1))],
    "tc09_stream_k": [(0, 2560 * 2560, dict(CM=1))],  # tc07's schedule up to its last wave
}


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
# (registry.stream_k_cost), 2-4% behind this tile; so 0.91.
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
TC07_TILES: tuple[tuple[dict[str, int], float], ...] = (
    (dict(BN=192, CM=1), 0.91),
    (dict(BM=64, BN=128, CM=1, STAGES=8), 0.45),
    (dict(BM=192, STAGES=3), 1.01),
    (dict(BN=128, CM=1, STAGES=6), 0.85),
)
TALL_TILE_MAX_FLOPS = 5e11  # 2 x 6300^3: past it the 192-row tile's gain is gone (power-limited)


def tile_rate(problem: GemmProblem, overrides: dict[str, int], rate: float) -> float:
    """A TC07_TILES entry's rate for the problem: the 192-row tile's gain only where it was measured
    (beta = 0, D taking TMA stores, A row-major, below the power limit)."""
    if overrides.get("BM") != 192:
        return rate
    measured = (problem.beta == 0 and _tma_stores_in_place(problem) and not problem.a.trans
                and problem.flops <= TALL_TILE_MAX_FLOPS)
    return rate if measured else min(rate, 1.0)


def tile_time(problem: GemmProblem, cfg: GemmConfig, rate: float = 1.0) -> float:
    """A persistent run's time in whole waves of tiles, in units of one 128 x 256 tile at rate 1:
    waves x (the tile's area against 128 x 256) / rate. The same K for every tile, so K drops out."""
    slots = registry._sm_count(problem.device) // cfg["CM"]
    tiles = registry.cdiv(problem.M, cfg["BM"] * cfg["CM"]) * registry.cdiv(problem.N, cfg["BN"])
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
        cfg = _rule_config(spec, tuple(sorted(overrides.items())))
        t = tile_time(problem, cfg, tile_rate(problem, overrides, rate))
        if t < best_time:
            best, best_time = cfg, t
    if _tile128_clusters(problem, best) or _tile192_clusters(problem, best):
        best = _rule_config(spec, tuple(sorted({**best.as_dict(), "CM": 2}.items())))
    if _tile192_deep(problem, best):
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
    if (d["BM"], d["BN"], d["CM"]) != (128, 128, 1) or registry.cdiv(problem.M, 128) % 2:
        return False
    sms = registry._sm_count(problem.device)
    tiles = registry.cdiv(problem.M, 128) * registry.cdiv(problem.N, 128)
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
    if (d["BM"], d["BN"], d["CM"]) != (128, 192, 1) or registry.cdiv(problem.M, 128) % 2:
        return False
    sms = registry._sm_count(problem.device)
    tiles = registry.cdiv(problem.M, 128) * registry.cdiv(problem.N, 192)
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
    tiles = registry.cdiv(problem.M, 128) * registry.cdiv(problem.N, 192)  # one a block slot, or none
    return tiles <= registry._sm_count(problem.device) // d["CM"] * d["CM"]


# tc10 (skinny problems): the MMA's N is the problem's rows rounded up to 16, 32, 64 or 128, and the
# ring (BW = 64: one consumer warpgroup) as deep as two blocks an SM allow, about 100 KB each
# (SKINNY_STAGES). 'auto' takes it up to SKINNY_ANY_M rows: on an H200 at Llama 3's decode layers
# (results/nvidia-h200/probe-skinny-20261125T003110Z.json, bf16, y = x @ w.t()) it ran 0.97-1.11x
# cuBLAS at 1, 16 and 32 rows where tc07 and tc09 ran 0.78-1.11x (geometric means 1.005-1.033x
# against 0.85-0.92x). From 33 to SKINNY_M_MAX rows (the MMA's N 64) only where its blocks fill at
# least SKINNY_FILL_MIN of the block slots of the waves they take, one block an SM: at 40, 48 and 64
# rows (tune-skinny-rows-20261125T021036Z.json, probe-skinny-waves-20261125T024258Z.json) it lost
# at the two layers that leave SMs idle -- 6144 x 4096 (96 blocks for 132 SMs: 0.83-0.85x against
# 0.91-0.94x) and 10240 x 8192 (160 blocks, two waves: 0.85-0.95x against 0.96-0.99x) -- and won at
# most others (4096 x 4096 0.86-0.91x against 0.79-0.83x, 8192 x 8192 0.89-0.97x against
# 0.78-0.82x; 28672 x 4096, 448 blocks in four waves, 0.85x against 0.89x at 40 rows, 0.93-0.98x
# against 0.91-0.93x at 48-64). Past 64 rows tc07 and tc09 serve.
SKINNY_STAGES = {16: 8, 32: 8, 64: 6, 128: 4}
SKINNY_ANY_M = 32
SKINNY_M_MAX = 64
SKINNY_FILL_MIN = 0.8
# At 33-64 rows (NT = 64) six stages hold 48 KB of the weight. Where tc10's blocks all run at once,
# one an SM, the ring takes the SM's shared memory instead: 14 stages, 112 KB of weight in flight
# (results/nvidia-h200/probe-skinny-deep-20261125T065409Z.json, bf16, x @ w.t(): 64 x 4096 x 14336
# 0.97x -> 1.02x cuBLAS, 64 x 8192 x 8192 0.96x -> 1.00x, 64 x 6144 x 4096 0.84x -> 0.94x, 64 x
# 4096 x 4096 0.92x -> 0.93x). Where the blocks outnumber the SMs it lost 6-20% (two blocks no longer
# share an SM); at 1-32 rows, eight stages already hold 64 KB of weight, and the deepest ring lost
# 0-7% even with one block an SM (not explained), so those keep theirs.
SKINNY_DEEP_STAGES = {64: 14}


def skinny_config(problem: GemmProblem) -> GemmConfig:
    spec = registry.get("tc10_skinny")
    nt = next((n for n in SKINNY_STAGES if problem.M <= n), 128)
    cfg = _rule_config(spec, (("NT", nt), ("STAGES", SKINNY_STAGES[nt])))
    if nt in SKINNY_DEEP_STAGES:
        sms = registry._sm_count(problem.device)
        if registry.skinny_blocks(problem, cfg, sms) <= sms:  # one block an SM, all at once
            cfg = _rule_config(spec, (("NT", nt), ("STAGES", SKINNY_DEEP_STAGES[nt])))
    return cfg


def config_for(spec: KernelSpec, problem: GemmProblem) -> GemmConfig:
    if spec.id == "tc07_persistent_cluster":
        cfg = tc07_tile(problem)[0]
    elif spec.id == "tc10_skinny":
        cfg = skinny_config(problem)
    else:
        cfg = _split_config(spec, problem, _narrow_config(spec, problem, _size_rule_config(spec, problem)))
        cfg = _tf32_small_tile(spec, problem, _tf32_stream_k_config(spec, problem, cfg))
    return _problem_config(spec, problem, cfg)


# tc08's stream-K (SK = 1) costs what tc09's does for the same K steps (registry.stream_k_cost):
# the parts passed between runs are as large, and a 32-wide TF32 K step of its 256 x 128 tile takes
# as long as a 64-wide bf16 step of 128 x 256 -- so at the same K, with twice the steps, half the
# waves. Measured on an H200 against whole tiles in the same rounds (results/nvidia-h200/
# tune-tf32-sk-*.json, two runs): 3072^3 +23% (0.92x -> 1.13x cuBLAS TF32), 5120^3 +12%, 6144^3
# +5%, 8192^3 +2.5%, 3000 x 5000 x 4000 +5%; 4096^3 -1.4% (3.88 waves: the idle share of the last
# one is less than splitting costs), 4096 x 4096 x 16384 even; and at 22 shapes from 2560^2 to
# 8192^2 (tune-skcost-tf32-*), where the rule below picks the faster of the two at every one but
# 7168^2 (11.9 waves: 0.7% apart).


def _tf32_stream_k_config(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    """tc08's whole-tile config with SK = 1 where stream-K finishes first: more cluster tiles than
    slots, not a whole number of waves, and tiles / slots plus the cost of splitting below the
    waves whole tiles take."""
    d = cfg.as_dict()
    if spec.id != "tc08_tf32" or d["SPLIT"] or d["SK"] or (d["BN"], d["CM"], d["CN"]) != (128, 1, 2):
        return cfg
    slots = registry._sm_count(problem.device) // d["CN"]  # clusters of CN = 2 blocks along N
    tiles = registry.cdiv(problem.M, d["BM"]) * registry.cdiv(problem.N, d["CN"] * d["BN"])
    kt = registry.cdiv(problem.K, d["BK"])
    if slots == 0 or kt <= 1 or tiles <= slots or tiles % slots == 0:
        return cfg
    if registry.stream_k_time(tiles, slots, kt) >= -(-tiles // slots):  # against whole waves
        return cfg
    sk = _rule_config(spec, tuple(sorted({**d, "SK": 1}.items())))
    return sk if registry._stream_k_steps_fit(problem, sk) is None else cfg


def problem_flags(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> dict[str, int]:
    """The config values the problem itself decides, for the parameters cfg has: TA / TB, whether
    the kernel reads an A / a B stored transposed in place, and EPI, its epilogue (epilogue_for)."""
    values = cfg.as_dict()
    native = problem.layout in getattr(spec, "layouts", ("nn",))
    flags = {"TA": int(problem.a.trans and native), "TB": int(problem.b.trans and native)}
    if "EPI" in values:
        flags["EPI"] = epilogue_for(spec, problem) if values.get("TMA_STORE", 1) else 1
    return {k: v for k, v in flags.items() if k in values}


def _problem_config(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    """cfg with the values the problem decides (problem_flags)."""
    values = cfg.as_dict()
    flags = problem_flags(spec, problem, cfg)
    if all(values[k] == v for k, v in flags.items()):
        return cfg
    return _rule_config(spec, tuple(sorted({**values, **flags}.items())))


def wide_d(spec: KernelSpec, problem: GemmProblem) -> int:
    """For a staged 16-bit step (tc07, tc09) whose D the epilogue could only write element by
    element -- rows not whole 16-byte units for TMA stores, nor pairs of elements for 4-byte
    register stores (an odd row stride: N = 3135) -- the width of the padded buffer it writes
    instead: N rounded up to 16 bytes. The kernel then runs as if N were that wide (B's map still
    ends at N, so the extra columns are zeros nobody reads), and gemm() copies the N columns out.
    0: D is written in place. Measured on an H100 (results/nvidia-h100-80gb-hbm3/tune-staged-d-*):
    at 3135^3 bf16 tc07 +10%, tc09 +3%; where pairs were possible (1022, 2044, 6132) the extra copy
    cost 1-10%, and TF32's tc08 lost 1-6% too, so they write D in place."""
    if not (spec.staged and spec.type_param and "d" in spec.tma):
        return 0
    if _tma_stores_in_place(problem):
        return 0
    size = problem.result_dtype.itemsize
    ld, ptr = (problem.d.ld, problem.d.ptr) if problem.d is not None else (problem.N, 0)  # torch.empty: aligned
    if ld % 2 == 0 and ptr % (2 * size) == 0:
        return 0  # register stores of pairs (the epilogue's own test)
    per16 = 16 // size
    return -(-problem.N // per16) * per16


def _tma_stores_in_place(problem: GemmProblem) -> bool:
    """Whether D's rows are whole, aligned 16-byte units: what the TMA-store epilogues need (a D
    gemm() allocates is contiguous and aligned)."""
    per16 = 16 // problem.result_dtype.itemsize
    ld, ptr = (problem.d.ld, problem.d.ptr) if problem.d is not None else (problem.N, 0)
    return problem.N % per16 == 0 and ld % per16 == 0 and ptr % 16 == 0


# tc07, tc09 and tc08 with beta = 0 and a D TMA can store to (in place, or the padded buffer wide_d gives
# a staged step) need only the TMA-store epilogue without C: EPI = 0 compiles that alone. The
# register-store fallback and C's reads are 59 of tc07's 83 KB of SASS, and code a launch never
# runs still costs: a probe build without them ran 0.6% faster at 4096^3 and 0.2-0.6% at 6144^3 on
# an H200 (results/nvidia-h200/tune-lean-*.json). tc08 (TF32) with it: 8.6% faster at 2048^3 (one
# wave: each SM runs the epilogue once), 1% at 4096^3, within the runs' spread above
# (tune-tf32-epi-*.json).
def epilogue_for(spec: KernelSpec, problem: GemmProblem) -> int:
    """EPI for a problem: 0 where beta is 0 and D (or its padded buffer) takes TMA stores, else 1."""
    if problem.beta != 0:
        return 1
    return 0 if _tma_stores_in_place(problem) or wide_d(spec, problem) else 1


# tc08's tiles for problems that leave most SMs idle with its 256 x 128 pairs: each as (config,
# fixed cost in us, us a 256 x 128 x 1024 block tile), a least-squares fit of time = fixed + unit x
# waves x (tile area / 256 x 128) x K / 1024 to TF32 launches on an H200 at 13 shapes from 256^3 to
# 2048^3 (results/nvidia-h200/probe-tf32-small-20261124T212207Z.json; rms 0.6-1.4 us, 3.8 for 256 x 64).
# The narrow tiles run a block tile slower (their MMAs are narrower and one consumer warpgroup
# waits on its own loads) but spread a small problem over more SMs, and cost less to start: a
# cluster of two and the pairs' two consumers cost 2-3 us more. 128 x 64 tiles (m64n128k8 MMAs)
# gained most from a deeper ring: eight stages against four ran 13-22% faster at 512^3-1024^3.
# The rule before them (256 x 64 tiles up to 1024^2, four stages) ran 0.72x-0.82x cuBLAS TF32 at
# 256^3-1024^3 in the same record, the choice now 0.99x-1.11x; at shapes the fit did not see
# 0.79x-1.07x against 1.04x-1.51x (probe-tf32-small-check-20261124T213124Z.json). A tile row partly
# outside the matrix ran slower than its share until tc08 stopped loading A's rows there
# (docs/ladder.md, "128-row tiles and a modelled choice").
TC08_PAIRS = (9.3, 18.8)  # the default 256 x 128 pairs (and their single blocks where N <= 128)
TC08_TILES: tuple[tuple[dict[str, int], float, float], ...] = (
    (dict(BN=64, CN=1, STAGES=5), 5.8, 27.0),
    (dict(BM=128, BN=64, CN=1, STAGES=8), 5.9, 37.0),
    (dict(BM=128, BN=64, CN=2, STAGES=8), 7.4, 31.2),
)


def tf32_time(problem: GemmProblem, cfg: GemmConfig, fixed_us: float, unit_us: float) -> float:
    """tc08's modelled time in us with cfg: fixed_us plus unit_us for every 256 x 128 x 1024 of block
    tile its busiest slot runs -- whole waves of tiles, or with SPLIT or SK their split's time
    (registry.split_time, stream_k_time), in tile-times."""
    d = cfg.as_dict()
    slots = registry._sm_count(problem.device) // (d["CM"] * d["CN"])
    tiles = registry.cdiv(problem.M, d["BM"] * d["CM"]) * registry.cdiv(problem.N, d["BN"] * d["CN"])
    kt = registry.cdiv(problem.K, d["BK"])
    if slots == 0:
        return float("inf")
    if d["SPLIT"] and registry.split_k_ways(tiles, slots, kt):
        tile_times = registry.split_time(tiles, slots, kt)
    elif d["SK"]:
        tile_times = registry.stream_k_time(tiles, slots, kt)
    else:
        tile_times = -(-tiles // slots)
    return fixed_us + unit_us * problem.K / 1024 * tile_times * d["BM"] * d["BN"] / (256 * 128)


def _tf32_small_tile(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    """tc08's config: cfg (its pairs, whole, split or stream-K) or one of TC08_TILES, whichever
    tf32_time puts first."""
    if spec.id != "tc08_tf32":
        return cfg
    best, best_time = cfg, tf32_time(problem, cfg, *TC08_PAIRS)
    for overrides, fixed_us, unit_us in TC08_TILES:
        c = _rule_config(spec, tuple(sorted({**spec.default_config().as_dict(), **overrides}.items())))
        t = tf32_time(problem, c, fixed_us, unit_us)
        if t < best_time:
            best, best_time = c, t
    return best


# tc08's clusters pair blocks along N (CN = 2). On a problem no wider than one block (N <= BN) the
# second block of every pair has no columns to compute and its SM idles; single blocks then give a
# split twice the slots. TF32 on an H100 (results/nvidia-h100-80gb-hbm3/tune-tf32split-cn-
# 20261123T185016Z.json): 64 x 64 x 65536 0.80x cuBLAS against 0.51x with pairs, 128 x 128 x 1048576
# 0.96x against 0.58x; wider problems ran the same or better in pairs (512 x 512 x 32768: 1.27x
# against 1.23x single; 256 x 256 x 65536, 1024 x 1024 x 16384: within 1%).
def _narrow_config(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    d = cfg.as_dict()
    if d.get("CN", 1) > 1 and problem.N <= d["BN"]:
        return _rule_config(spec, tuple(sorted({**d, "CN": 1}.items())))
    return cfg


# A kernel with a SPLIT parameter (tc08, tc09) has its split-K code in its SPLIT = 1 instantiation only:
# compiled into every launch, it cost the whole tiles 2-4% (H100, TF32, 0.948x against 0.970x
# cuBLAS at 4096^3, 1.050x against 1.094x at 5120^3: results/nvidia-h100-80gb-hbm3/
# tune-tf32split-20261123T181921Z.json). The split one serves where it splits (spec.splits_k).
def _split_config(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    if getattr(spec, "splits_k", None) is None or cfg.as_dict().get("SPLIT") != 0:
        return cfg
    split = _rule_config(spec, tuple(sorted({**cfg.as_dict(), "SPLIT": 1}.items())))
    return split if spec.splits_k(problem, split, registry._sm_count(problem.device)) else cfg


# Clusters of two where K is long, inside SIZE_RULES' single-block range (H200, bf16, nn and nt;
# ratios to cuBLAS in the same rounds: results/nvidia-h200/tune-cm-flat-*.json, tune-m512-*.json at
# Llama 3's layers, tune-cm-check-*.json at shapes not fitted). The single-block rule was measured
# on near-squares (tune-small-cm-*), where single blocks won by 0.3-4.9% below K = 4096.
# - tc09 with more tiles than slots (stream-K over every slot, or over its last waves): clusters
#   ahead at every such shape from K = 4096, by 0.2-10% at the shapes fitted (512 x 10240 x 4096
#   +9-10%, 512 x 12288 x 8192 +9.5-9.9%, 1024 x 6144 x 4096-8192 +2.6-5.2%, 2560^2 x 8192
#   +1.2-1.5%, 2048 x 3072 x 4096 +0.2-0.7%) and by 0.9-18.5% at the 14 cases not fitted (256 x
#   20480 x 8192 0.80x -> 0.95x, 1280 x 5120 x 8192 +1.7-2.1%, 768 x 6144 x 8192 +1.7-2.0%). With one
#   wave or less tc09 is not 'auto''s choice, and half a wave or less is split along K, whose runs
#   were fitted with single blocks: both keep the rule.
# - tc07 (whole waves): clusters behind at K = 4096 (0-2.5%); at 8192 ahead where the problem is
#   flat (N >= 4 M: 256 x 16384 +3.1-4.6%, 512 x 8192 +0.7-1.9%, 1024 x 4096 +0.3-0.6%), behind
#   where it is not (2048^2 -0.1 to -0.5%, 1792 x 2048 -0.3 to -0.8%); at 16384 ahead by 0.7-2.2%.
#   That rule is read off these points, not explained.
# - Only where the 128-row tiles pair up (an even number of them down M): with an odd number a
#   cluster row runs half empty, and tc09's modelled time then gave the shape to tc07, 5-8% slower
#   at 384 x 12288 x 4096, 640 x 10240 x 8192 and 896 x 7168 x 4096 (tune-cm-check-20261124T2311*).
TC09_CLUSTER_K = 4096  # the least K for tc09's clusters of two
TC07_CLUSTER_K = (16384, 8192)  # tc07's: any problem, a flat one (N >= 4 M)


def _size_rule_config(spec: KernelSpec, problem: GemmProblem) -> GemmConfig:
    mn = problem.M * problem.N
    for lo, hi, overrides in SIZE_RULES.get(spec.id, ()):
        if lo <= mn and (hi is None or mn <= hi):
            cfg = _rule_config(spec, tuple(sorted(overrides.items())))
            return spec.default_config() if _long_k_clusters(spec, problem, cfg) else cfg
    return spec.default_config()


def _long_k_clusters(spec: KernelSpec, problem: GemmProblem, single: GemmConfig) -> bool:
    """Whether clusters of two (the default) serve better than the size rule's single blocks:
    K long enough for the kernel (TC07_CLUSTER_K, TC09_CLUSTER_K), 128-row tiles that pair up
    along M, and for tc09 more tiles than slots."""
    if single.as_dict().get("CM") != 1 or registry.cdiv(problem.M, single["BM"]) % 2:
        return False
    if spec.id == "tc07_persistent_cluster":
        any_k, flat_k = TC07_CLUSTER_K
        return problem.K >= any_k or (problem.K >= flat_k and problem.N >= 4 * problem.M)
    if spec.id == "tc09_stream_k" and problem.K >= TC09_CLUSTER_K:
        tiles = registry.cdiv(problem.M, single["BM"]) * registry.cdiv(problem.N, single["BN"])
        return tiles > registry._sm_count(problem.device)
    return False


def configs_in_use(spec: KernelSpec) -> list[GemmConfig]:
    """Every config 'auto' can launch a kernel with: its default, those of its size rules and, for
    tc07, its other tiles; for tc08 and tc09 their split instantiations, tc08's single blocks for
    narrow problems and its tiles for small ones (TC08_TILES)."""
    out = [spec.default_config()]
    for _, _, overrides in SIZE_RULES.get(spec.id, ()):
        out.append(_rule_config(spec, tuple(sorted(overrides.items()))))
    if spec.id == "tc07_persistent_cluster":
        out += [_rule_config(spec, tuple(sorted(o.items()))) for o, _ in TC07_TILES]
        out += [_rule_config(spec, tuple(sorted({**o, "CM": 2}.items()))) for o, _ in TC07_TILES
                if (o.get("BM", 128), o.get("BN")) in ((128, 128), (128, 192))]  # pairs: _tile128_clusters, _tile192_clusters
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), **TILE192_DEEP}.items()))) for c in out
                if (c["BM"], c["BN"]) == (128, 192)]  # one tile a block: _tile192_deep
    if spec.id == "tc10_skinny":
        out += [_rule_config(spec, (("NT", nt), ("STAGES", st))) for nt, st in SKINNY_STAGES.items()
                if 16 < nt <= SKINNY_M_MAX]  # fmt: skip
        out += [_rule_config(spec, (("NT", nt), ("STAGES", st))) for nt, st in SKINNY_DEEP_STAGES.items()]
    out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "CN": 1}.items()))) for c in out if c.as_dict().get("CN", 1) > 1]
    if getattr(spec, "splits_k", None) is not None:  # (the CPU ladder's specs have none)
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "SPLIT": 1}.items()))) for c in out if c["SPLIT"] == 0]
    if spec.id == "tc08_tf32":  # tiles for small problems (TC08_TILES); stream-K over the last waves
        out += [_rule_config(spec, tuple(sorted({**spec.default_config().as_dict(), **o}.items()))) for o, _, _ in TC08_TILES]
        out.append(_rule_config(spec, tuple(sorted({**spec.default_config().as_dict(), "SK": 1}.items()))))
    if "EPI" in spec.default_config().as_dict():  # each again with the lean epilogue (epilogue_for)
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "EPI": 0}.items()))) for c in out if c["TMA_STORE"]]
    if "nt" in getattr(spec, "layouts", ()):  # each again for a B stored transposed
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "TB": 1}.items()))) for c in out]
    if "tn" in getattr(spec, "layouts", ()):  # and for an A stored transposed
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "TA": 1}.items()))) for c in out]
    return out


_RULE_CONFIGS: dict[tuple, GemmConfig] = {}


def _rule_config(spec: KernelSpec, overrides: tuple) -> GemmConfig:
    key = (spec.id, overrides)
    cfg = _RULE_CONFIGS.get(key)
    if cfg is None:
        cfg = _RULE_CONFIGS[key] = spec.config(**dict(overrides))
    return cfg


_CHOICES: dict[tuple, tuple[KernelSpec, GemmConfig]] = {}
_CHOICES_MAX = 4096


def _choice_key(problem: GemmProblem, kernel: str) -> tuple:
    """Everything a kernel's constraints and config may look at: sizes, dtypes and precision,
    whether beta is 0, leading dimensions and the 16-byte alignment of every operand (not the
    addresses themselves)."""
    a, b, c, d = problem.a, problem.b, problem.c, problem.d
    return (
        kernel, problem.dtype, problem.out_dtype, problem.precision, problem.M, problem.N, problem.K, problem.beta != 0,
        a.ld, a.ptr % 16, a.trans, b.ld, b.ptr % 16, b.trans,
        None if c is None else (c.ld, c.ptr % 16),
        None if d is None else (d.ld, d.ptr % 16),
    )  # fmt: skip


def select(problem: GemmProblem, kernel: str = "auto", device: str | None = None) -> tuple[KernelSpec, GemmConfig]:
    """The kernel and config that will serve the problem, or a ValueError saying why none can.
    device: the ladder to choose from ('cuda' or 'cpu'); default the tensors' device type.
    Choices are memoised on _choice_key, so repeated calls of one shape skip the search."""
    device = device or problem.device.type
    key = (_choice_key(problem, kernel), device)
    hit = _CHOICES.get(key)
    if hit is None:
        hit = _select(problem, kernel, device)
        if len(_CHOICES) >= _CHOICES_MAX:
            _CHOICES.clear()
        _CHOICES[key] = hit
    return hit


def _in_place(spec: KernelSpec, problem: GemmProblem) -> GemmConfig | None:
    """spec's config for a problem of transposed views, where it reads that layout where it lies."""
    if problem.layout not in getattr(spec, "layouts", ()):
        return None
    native = config_for(spec, problem)
    return native if spec.why_not(problem, native) is None else None


def _select(problem: GemmProblem, kernel: str, device: str) -> tuple[KernelSpec, GemmConfig]:
    if problem.layout != "nn":
        if kernel != "auto":  # a named kernel that reads this layout in place serves it as it is
            spec = registry.get(kernel)
            native = _in_place(spec, problem) if spec.device == device else None
            if native is not None:
                return spec, native
        # The kernel the row-major problem gets; it reads this layout in place where it can, and is
        # otherwise given row-major copies (gemm() makes them where spec.layouts lacks the layout).
        spec, cfg = _select(problem.row_major(), kernel, device)
        return spec, _in_place(spec, problem) or cfg
    if kernel != "auto":
        spec = registry.get(kernel)
        if spec.device != device:
            raise ValueError(
                f"kernel {kernel!r} runs on {spec.device}, not {device}; "
                + ("pass device='cpu' for the CPU ladder" if spec.device == "cpu" else "use a GPU kernel or kernel='auto'")
            )
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg)
        if reason:
            raise ValueError(f"kernel {kernel!r} cannot serve {problem.shape}: {reason}; use kernel='auto'")
        return spec, cfg
    reasons = []
    ladder = registry.kernels(device=device)
    for spec in sorted(ladder, key=lambda k: -k.step):
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg) or getattr(spec, "auto_skip", lambda p, c: None)(problem, cfg)
        if reason is None:
            return spec, cfg
        reasons.append(reason)
    dtypes = sorted({str(d).removeprefix("torch.") for k in ladder for d in k.dtypes})
    if problem.dtype not in {d for k in ladder for d in k.dtypes}:
        raise TypeError(
            f"no registered kernel takes {str(problem.dtype).removeprefix('torch.')}; supported dtypes: {', '.join(dtypes)}"
        )
    raise ValueError(f"no registered kernel can serve {problem.shape}: " + "; ".join(reasons))
