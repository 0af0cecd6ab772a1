"""FP32 step 15, the cp.async multistage kernel: its configs checked before compiling, the tiles it
is meant to run compiled spill-free for sm_90a (with and without a fused epilogue); on a GPU
(marker `gpu`) each of them against float64 at shapes no tile divides, K not a multiple of BK,
K shorter than a slice and K = 0, misaligned rows (its 4-byte copies and scalar stores), NaN in C
with beta = 0, NaN and Inf in A and B, and a fused bias and activation."""

import math

import pytest
import torch

import gemmlab
from gemmlab import jit, registry
from gemmlab.activations import post_code
from gemmlab.configs import auto_skip, config_for, configs_in_use, select
from gemmlab.configs.fp32 import multistage_config, multistage_configs
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result
from gemmlab.specs.sgemm_multistage import ring_floats

SPEC = registry.get("sgemm_15_multistage")
ARCH = "sm_90a"

# The tiles step 15 is written for (cuBLAS's three SGEMM kernels on an H100: 256x128 at large squares,
# 128x64 at 1024^3, 64x64 at short K), each by its overrides of the spec's defaults.
TILES = {
    "128x128": dict(),
    "256x128": dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8, STAGES=3),
    "128x64-s3": dict(BM=128, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=3),
    "128x64-s4": dict(BM=128, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=4),
    "64x64-s3": dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=3),
    "64x64-s4": dict(BM=64, BN=64, WM=32, WN=32, TM=4, TN=8, STAGES=4),
}


def test_step_15_is_on_the_ladder_after_step_14():
    assert SPEC in registry.KERNELS and SPEC not in registry.PENDING
    assert SPEC in registry.kernels(torch.float32)
    assert SPEC.epilogues and SPEC.spill_free and SPEC.step == 15 and SPEC.math == "fp32"


def _problem(M, N, K):
    return problem_from_tensors(torch.empty((M, K)), torch.empty((K, N)), device_type="cpu")


@pytest.mark.parametrize("M,N,K,kernel,tile", [
    (4096, 4096, 128, "sgemm_15_multistage", (128, 128)),   # short K: 128 x 128, two blocks an SM
    (2048, 2048, 100, "sgemm_15_multistage", (128, 128)),
    (6144, 4096, 300, "sgemm_15_multistage", (256, 128)),   # past MULTISTAGE_SHORT_K on a large output
    (2040, 4100, 1020, "sgemm_15_multistage", (256, 128)),
    (2039, 4099, 1021, "sgemm_11_warp_tile", (128, 128)),   # rows not whole 16-byte units: step 11's 128 x 128
    (4096, 4096, 1024, "sgemm_11_warp_tile", (256, 128)),   # from MULTISTAGE_K_MAX on: step 11's loop
    (4096, 4096, 4096, "sgemm_11_warp_tile", (256, 128)),
    (16, 4096, 256, "sgemm_13_few_rows", None),             # few rows and columns keep their steps
    (4096, 16, 256, "sgemm_14_few_columns", None),
    (64, 64, 131072, "sgemm_12_split_k", (64, 64)),          # splits keep step 12
])  # fmt: skip
def test_auto_takes_step_15_for_whole_tiles_of_a_short_k(M, N, K, kernel, tile):
    spec, cfg = select(_problem(M, N, K), device="cuda")
    assert spec.id == kernel
    if tile is not None:
        assert (cfg["BM"], cfg["BN"]) == tile
    skip = auto_skip(SPEC, _problem(M, N, K), multistage_config(_problem(M, N, K)))
    assert (skip is None) == (kernel == "sgemm_15_multistage")


def test_auto_launches_only_configs_in_use():
    assert set(configs_in_use(SPEC)) == set(multistage_configs())
    for K in (100, 300, 1000):
        assert multistage_config(_problem(4096, 4096, K)) in multistage_configs()


@pytest.mark.parametrize("name", TILES)
def test_the_tiles_are_valid_configs(name):
    cfg = SPEC.config(**TILES[name])
    assert ring_floats(cfg) * 4 <= 48 * 1024
    assert SPEC.block(cfg)[0] == (cfg["BM"] // cfg["WM"]) * (cfg["BN"] // cfg["WN"]) * 32


@pytest.mark.parametrize("overrides,message", [
    (dict(STAGES=1), "STAGES must be at least 2"),
    (dict(STAGES=5, BK=16), "exceed the 48 KB"),        # 5 x (16 x 132 + 16 x 128) floats
    (dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8, STAGES=4), "exceed the 48 KB"),  # 49,664 bytes
    (dict(PAD=2), "PAD must be a multiple of 4"),
    (dict(BK=6), "BK and BN must be multiples of 4"),
    (dict(TM=6), "multiples of 4"),
    (dict(WM=48), "WM must divide BM"),
    (dict(WN=64), r"\(WM/TM\) \* \(WN/TN\) == 32"),
    (dict(BK=12), "BK must divide 256"),              # a thread copies one column of A's slice
    (dict(BM=16, BN=256, WM=16, WN=32, TM=4, TN=4), "rows a pass must divide BM"),  # 32 rows a pass
])  # fmt: skip
def test_bad_configs_are_refused_with_the_reason(overrides, message):
    with pytest.raises(ValueError, match=message) as info:
        SPEC.config(**overrides)
    assert "sgemm_15_multistage" in str(info.value)


@pytest.mark.parametrize("overrides", [dict(BK=16, STAGES=2), dict(BM=64, BN=256, WM=64, WN=32, BK=4, STAGES=6),
                                       dict(BM=32, BN=128, WM=32, WN=64, TM=4, TN=16)], ids=str)
def test_configs_python_accepts_the_kernel_compiles(overrides):
    """check_config and the static_asserts agree on configs off the beaten path (a deeper slice, a
    shallow one in six stages, one warp row)."""
    ck = jit.compile_kernel(SPEC, SPEC.config(**overrides), ARCH)
    assert ck.usage.spills == 0


@pytest.mark.parametrize("name", TILES)
def test_a_warps_copies_of_a_hit_32_banks_and_whole_sectors(name):
    """issue_slice's layout for A, as its comment states it: thread tid copies column k = tid % BK,
    rows tid / BK + p * THREADS / BK. For BK = 8 and PAD = 4 each warp's 32 shared writes of a pass
    land in 32 distinct banks, and its global reads are 4 rows of 8 consecutive floats (32 bytes)."""
    cfg = SPEC.config(**TILES[name])
    bm, bk, pad, threads = cfg["BM"], cfg["BK"], cfg["PAD"], SPEC.block(cfg)[0]
    rows = threads // bk
    covered = set()
    for p in range(bm // rows):
        for warp in range(threads // 32):
            lanes = [(tid % bk, tid // bk + p * rows) for tid in range(32 * warp, 32 * warp + 32)]  # (k, m)
            assert len({(k * (bm + pad) + m) % 32 for k, m in lanes}) == 32
            assert {m for _, m in lanes} == {lanes[0][1] + i for i in range(32 // bk)}  # 4 whole rows of k
            covered |= set(lanes)
    assert covered == {(k, m) for k in range(bk) for m in range(bm)} and bm // rows * threads == bm * bk  # each once


def test_the_shared_ring_is_what_ptxas_reports():
    for overrides in TILES.values():
        cfg = SPEC.config(**overrides)
        assert jit.compile_kernel(SPEC, cfg, ARCH).usage.static_smem == ring_floats(cfg) * 4


@pytest.mark.parametrize("post", [0, post_code(True, "silu")], ids=["plain", "bias+silu"])
@pytest.mark.parametrize("name", TILES)
def test_every_tile_compiles_without_spills(name, post):
    """Registers at the tree this was written on (NVRTC 13.0, sm_90a), plain / bias+SiLU: 128x128
    127 / 128 (two blocks an SM: its launch bounds), 256x128 211 / 211, 128x64 91 / 91, 64x64 93 / 93
    (either STAGES)."""
    ck = jit.compile_kernel(SPEC, SPEC.config(**TILES[name]), ARCH, None, None, post)
    u = ck.usage
    assert u.spills == 0 and u.stack_frame == 0, f"{ck.name_expression}: {u}"
    assert 1 <= u.registers <= 255


# ---- On a GPU -----------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SHAPES = [(1, 1, 1), (7, 17, 5), (17, 7, 8), (127, 129, 3), (1000, 1022, 1023), (3135, 97, 61), (1022, 1000, 64),
          (257, 513, 0), (509, 521, 1031), (61, 2053, 13), (2039, 31, 4099)]  # fmt: skip


def _run(a, b, c, alpha, beta, tile, out):
    from gemmlab.api import prepare

    prepare(a, b, c, alpha=alpha, beta=beta, kernel=SPEC.id, out=out, config=SPEC.config(**TILES[tile]))()
    torch.cuda.synchronize()
    return out


def _poisoned(M, N):
    return torch.full((M, N), math.nan, device="cuda")


@gpu
@needs_gpu
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_every_tile_against_float64(tile, M, N, K):
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), math.nan, device="cuda")
    for cc, alpha, beta in ((None, 1.0, 0.0), (c, 0.75, -2.0), (nan_c, 1.5, 0.0), (c, 0.0, 1.0)):
        out = _run(a, b, cc, alpha, beta, tile, _poisoned(M, N))
        rep = check_result(out, a, b, cc if beta != 0 else None, alpha, beta)
        assert rep.passed, f"M={M} N={N} K={K} kernel={SPEC.id} tile={tile} alpha={alpha} beta={beta}: {rep.summary()}"


@gpu
@needs_gpu
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("M,N,K", [(127, 129, 31), (1000, 1022, 1023), (64, 64, 8), (3135, 97, 61)])
@pytest.mark.parametrize("odd", ["a", "b", "cd", "all"])
def test_misaligned_rows(tile, M, N, K, odd):
    """Views one float past an aligned start with odd row strides: B's 4-byte copies (A's are 4-byte
    always) and, for C and D, the scalar epilogue; the elements around D's view stay untouched."""
    def view(rows, cols, on):
        return torch.randn(rows, cols + 3, device="cuda")[:, 1:cols + 1] if on else torch.randn(rows, cols, device="cuda")

    a, b = view(M, K, odd in ("a", "all")), view(K, N, odd in ("b", "all"))
    c = view(M, N, odd in ("cd", "all"))
    big = torch.full((M, N + 3), math.nan, device="cuda")
    out = big[:, 1:N + 1] if odd in ("cd", "all") else _poisoned(M, N)
    _run(a, b, c, -1.25, 0.5, tile, out)
    rep = check_result(out, a, b, c, -1.25, 0.5)
    assert rep.passed, f"M={M} N={N} K={K} kernel={SPEC.id} tile={tile} odd={odd}: {rep.summary()}"
    if odd in ("cd", "all"):
        assert big[:, 0].isnan().all() and big[:, N + 1:].isnan().all(), "wrote outside out"


@gpu
@needs_gpu
@pytest.mark.parametrize("tile", TILES)
def test_nan_and_inf_reach_exactly_their_rows_and_columns(tile):
    M, N, K = 300, 200, 77
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    a[5, 75] = math.nan  # in K's last, partial slice (72..76)
    b[3, 150] = math.inf
    out = _run(a, b, None, 1.0, 0.0, tile, _poisoned(M, N))
    rows, cols = torch.arange(M, device="cuda"), torch.arange(N, device="cuda")
    assert out[5].isnan().all()
    others = out[rows != 5]
    assert others[:, 150].isinf().all()  # one Inf in the sum: +-Inf (a[m, 3] is never exactly 0 here)
    assert torch.isfinite(others[:, cols != 150]).all()


@gpu
@needs_gpu
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("M,N,K", [(7, 17, 5), (1000, 1022, 1023), (3135, 97, 61), (128, 128, 0)])
def test_fused_bias_and_activation(activation, M, N, K):
    """The default tile through gemm(): the float4 stores (aligned) and the scalar ones (N = 17, 97)
    apply the bias and activation alike; NaN in C at beta = 0 stays unread."""
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    bias = torch.randn(N, device="cuda")
    c = torch.full((M, N), math.nan, device="cuda")
    out = _poisoned(M, N)
    gemmlab.gemm(a, b, c, beta=0.0, kernel=SPEC.id, out=out, bias=bias, activation=activation)
    torch.cuda.synchronize()
    rep = check_result(out, a, b, None, 1.0, 0.0, bias=bias, activation=activation)
    assert rep.passed, f"M={M} N={N} K={K} kernel={SPEC.id} activation={activation}: {rep.summary()}"
    c = torch.randn(M, N, device="cuda")
    d = gemmlab.gemm(a, b, c, alpha=-0.5, beta=1.25, kernel=SPEC.id, bias=bias, activation=activation)
    torch.cuda.synchronize()
    rep = check_result(d, a, b, c, -0.5, 1.25, bias=bias, activation=activation)
    assert rep.passed, f"M={M} N={N} K={K} kernel={SPEC.id} activation={activation} beta: {rep.summary()}"


@gpu
@needs_gpu
def test_in_place_and_the_same_bits_as_step_11():
    """out = C in place, on the tile 'auto' picks (a split of K here) and on the default tile; and,
    both summing k in order with one FMA a step, the default tile gives step 11's default tile's
    bits (the same 128 x 128 warp layout)."""
    from gemmlab.api import prepare

    M, N, K = 1000, 1022, 1023
    a, b, c = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.randn(M, N, device="cuda")
    picked = select(problem_from_tensors(a, b, c, None), SPEC.id)[1]
    for cfg in (picked, SPEC.default_config()):
        d = c.clone()
        prepare(a, b, d, alpha=0.75, beta=-1.5, kernel=SPEC.id, out=d, config=cfg)()
        torch.cuda.synchronize()
        rep = check_result(d, a, b, c, 0.75, -1.5)
        assert rep.passed, f"in place, {cfg.as_dict()}: {rep.summary()}"
    d = c.clone()
    gemmlab.gemm(a, b, d, alpha=0.75, beta=-1.5, kernel=SPEC.id, out=d)
    torch.cuda.synchronize()
    assert check_result(d, a, b, c, 0.75, -1.5).passed
    ours = torch.empty(M, N, device="cuda")
    prepare(a, b, kernel=SPEC.id, out=ours, config=SPEC.default_config())()
    theirs = gemmlab.gemm(a, b, kernel="sgemm_11_warp_tile")
    torch.cuda.synchronize()
    assert config_for(registry.SGEMM_11, problem_from_tensors(a, b, None, None)) == registry.SGEMM_11.default_config()
    assert torch.equal(ours, theirs)
