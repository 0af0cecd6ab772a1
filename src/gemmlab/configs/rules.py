"""What every kernel's config starts from: memoised configs (_rule_config), the size rules from
tuning runs (SIZE_RULES, and clusters of two where K is long), and the values the problem itself
decides (problem_flags: the layouts read in place and the epilogue)."""

from __future__ import annotations

from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig, KernelSpec, cdiv


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
    "sgemm_11_warp_tile": [(2048 * 2048, None, dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8, SYNC=0))],
    "tc07_persistent_cluster": [(0, 2560 * 2560, dict(CM=1))],
    "tc09_stream_k": [(0, 2560 * 2560, dict(CM=1))],  # tc07's schedule up to its last wave
    # tc11, H200 (results/nvidia-h200/tune-20261127T045811Z.json.gz against the defaults in
    # bench-20261127T045618Z.json): up to about 1.25 waves of 128 x 128 tiles (M * N <= 165 of them)
    # 64 x 128 tiles (1.57-1.60x cuBLAS SGEMM at 1022^3 and 1024^3; a tie with 128 x 128 at 1536^3,
    # 1.54x); from 2048^2 on 128 x 128 (2.04x at 2048^3 against 1.67x). PROMOTE stays 1: 2 and 4 were up to 9% faster with
    # 64 x 128 tiles but 2.4x and 5.3x less accurate (2.0x and 4.0x cuBLAS SGEMM's error at 1536^3 and
    # 512^3 with 4, outside the accuracy contract), and slower with 128 x 128 tiles at every size.
    "tc11_3xtf32": [(0, 165 * 128 * 128, dict(BM=64, STAGES=4))],
}


_RULE_CONFIGS: dict[tuple, GemmConfig] = {}


def _rule_config(spec: KernelSpec, overrides: tuple) -> GemmConfig:
    key = (spec.id, overrides)
    cfg = _RULE_CONFIGS.get(key)
    if cfg is None:
        cfg = _RULE_CONFIGS[key] = spec.config(**dict(overrides))
    return cfg


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
    if single.as_dict().get("CM") != 1 or cdiv(problem.M, single["BM"]) % 2:
        return False
    if spec.id == "tc07_persistent_cluster":
        any_k, flat_k = TC07_CLUSTER_K
        return problem.K >= any_k or (problem.K >= flat_k and problem.N >= 4 * problem.M)
    if spec.id == "tc09_stream_k" and problem.K >= TC09_CLUSTER_K:
        tiles = cdiv(problem.M, single["BM"]) * cdiv(problem.N, single["BN"])
        return tiles > sm_count_of(problem.device)
    return False


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
