"""Selection for tc08 (TF32): its tile for small problems (tf32_time, a fitted model), stream-K
over the last waves where that finishes first, and single blocks for problems one block wide."""

from __future__ import annotations

from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig, KernelSpec, cdiv
from ..specs.persistent import _stream_k_steps_fit, split_k_ways, split_time
from .persistent import stream_k_time
from .rules import _rule_config


# tc08's stream-K (SK = 1) costs what tc09's does for the same K steps (configs.persistent.stream_k_cost):
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
    slots = sm_count_of(problem.device) // d["CN"]  # clusters of CN = 2 blocks along N
    tiles = cdiv(problem.M, d["BM"]) * cdiv(problem.N, d["CN"] * d["BN"])
    kt = cdiv(problem.K, d["BK"])
    if slots == 0 or kt <= 1 or tiles <= slots or tiles % slots == 0:
        return cfg
    if stream_k_time(tiles, slots, kt) >= -(-tiles // slots):  # against whole waves
        return cfg
    sk = _rule_config(spec, tuple(sorted({**d, "SK": 1}.items())))
    return sk if _stream_k_steps_fit(problem, sk) is None else cfg


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
    (split_time, stream_k_time), in tile-times."""
    d = cfg.as_dict()
    slots = sm_count_of(problem.device) // (d["CM"] * d["CN"])
    tiles = cdiv(problem.M, d["BM"] * d["CM"]) * cdiv(problem.N, d["BN"] * d["CN"])
    kt = cdiv(problem.K, d["BK"])
    if slots == 0:
        return float("inf")
    if d["SPLIT"] and split_k_ways(tiles, slots, kt):
        tile_times = split_time(tiles, slots, kt)
    elif d["SK"]:
        tile_times = stream_k_time(tiles, slots, kt)
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
