"""FP32 step 15 split along K (SPLIT = 1): its configs and launch geometry, the runs its model takes,
the parts' layout against step 12's reduction pass (emulated on the CPU), what 'auto' would pick with
configs.fp32.MULTISTAGE_SPLIT on (and that it picks as before with it off); its builds compiled
spill-free for sm_90a; on a GPU (marker `gpu`) against float64 with out poisoned, at shapes no tile
divides, K not a multiple of 8, beta = 0 with NaN in C, NaN and Inf, a fused bias and activation,
the same bits at two launches, and in a CUDA graph."""

import math

import numpy as np
import pytest
import torch

import gemmlab
from gemmlab import api, configs, jit, registry
from gemmlab.activations import post_code
from gemmlab.configs import configs_in_use, select
from gemmlab.configs import fp32
from gemmlab.problem import fresh_problem, problem_from_tensors
from gemmlab.reference import check_result, fused_epilogue_failures
from gemmlab.specs.sgemm import SPLIT_K_RED_MAX_RUNS, SPLIT_K_RED_MIN_SLICES
from gemmlab.specs.sgemm_multistage_split import MULTISTAGE_SPLIT_TILES, multistage_runs

SPEC = registry.get("sgemm_15_multistage")
ARCH = "sm_90a"

# The split tiles (MULTISTAGE_SPLIT_TILES) and, for the one-run builds, the 4-warp tiles alone.
SPLIT_TILES = {f"{bm}x{bn}": o for (bm, bn), (o, _, _) in MULTISTAGE_SPLIT_TILES.items()}


def _cfg(name, split=1):
    return SPEC.config(**SPLIT_TILES[name], SPLIT=split)


def problem(M, N, K):
    """A problem of these sizes as 'auto' sees it on a GPU (the choice reads only shapes and strides)."""
    return fresh_problem(M, N, K, torch.float32)


@pytest.fixture
def split_on(monkeypatch):
    """configs.fp32.MULTISTAGE_SPLIT on, and the memoised choices and plans forgotten both ways."""
    configs._CHOICES.clear(), api._PLANS.clear()
    monkeypatch.setattr(fp32, "MULTISTAGE_SPLIT", True)
    yield
    configs._CHOICES.clear(), api._PLANS.clear()


# ---- Configs and geometry -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPLIT_TILES)
def test_the_split_tiles_are_valid_configs_of_cublas_block_sizes(name):
    cfg = _cfg(name)
    threads = SPEC.block(cfg)[0]
    assert threads == (256 if name == "128x128" else 128)  # cuBLAS's sm80 tiles below 128 x 128 take 4 warps
    assert (cfg["WM"] // cfg["TM"]) * (cfg["WN"] // cfg["TN"]) == 32
    assert SPEC.config(**SPLIT_TILES[name]) == _cfg(name, 0)  # the same tile, one run


def test_split_is_checked():
    with pytest.raises(ValueError, match="SPLIT must be 0"):
        SPEC.config(SPLIT=2)
    assert SPEC.default_config()["SPLIT"] == 0


def test_grid_workspace_and_reduction_by_split():
    one, split = SPEC.default_config(), SPEC.config(SPLIT=1)
    assert SPEC.grid(1000, 3000, one) == (24, 8, 1)  # tiles across, tiles down
    assert SPEC.grid(1000, 3000, split) == (24 * 8, 1, 1)  # tiles; gridDim.y becomes the runs
    assert SPEC.workspace(one, (24, 8, 1)) is None  # no workspace at all (null pointers after the bias)
    assert SPEC.workspace(split, (192, 1, 1)) == (0, 0)
    assert SPEC.workspace(split, (192, 4, 1)) == (192 * 4 * 128 * 128, 0)  # a padded part a block, no counters
    assert SPEC.workspace_last
    assert SPEC.parts_reduced(split, (192, 4, 1)) and not SPEC.parts_reduced(split, (192, 1, 1))
    assert not SPEC.parts_reduced(one, (24, 8, 1))


@pytest.mark.parametrize("M,N,K", [(64, 4096, 4096), (32, 8192, 8192), (1024, 1024, 16384), (512, 512, 512),
                                   (100, 100, 31), (256, 256, 65536), (7, 7, 1 << 20)])  # fmt: skip
def test_runs_are_whole_slices_of_at_least_the_minimum(M, N, K):
    for name in SPLIT_TILES:
        cfg = _cfg(name)
        r = multistage_runs(problem(M, N, K), cfg, 132)
        kt = math.ceil(K / cfg["BK"])
        assert 1 <= r <= max(1, min(SPLIT_K_RED_MAX_RUNS, kt // SPLIT_K_RED_MIN_SLICES)), (M, N, K, name, r)
        assert multistage_runs(problem(M, N, K), _cfg(name, 0), 132) is None  # one run: the spec's grid


def _runs_of_k(K, BK, runs):
    """The kernel's cut (step 12's): run -> (first slice, slices)."""
    kt = math.ceil(K / BK)
    q, r = divmod(kt, runs)
    return [(run * q + min(run, r), q + (run < r)) for run in range(runs)]


@pytest.mark.parametrize("K,runs", [(8, 1), (4099, 7), (16384, 4), (30001, 250), (33, 4), (0, 3)])
def test_the_runs_cover_every_slice_once(K, runs):
    cut = _runs_of_k(K, 8, runs)
    assert [s for first, n in cut for s in range(first, first + n)] == list(range(math.ceil(K / 8)))
    assert max(n for _, n in cut) - min(n for _, n in cut) <= 1


@pytest.mark.parametrize("name", SPLIT_TILES)
@pytest.mark.parametrize("M,N,K,runs", [(70, 130, 45, 3), (129, 65, 80, 4), (1, 200, 17, 2)])
def test_the_parts_are_where_the_reduction_pass_reads_them(name, M, N, K, runs):
    """The kernel's part stores (thread tid's results at rows tm + i / 4 * TM_STRIDE + i % 4, columns
    tn + q * TN_STRIDE + 0..3 of its tile, at run * tiles * BM * BN + m * ldw + n), emulated in
    float64, then added as the reduction pass reads them (gemmlab.reduce's ldw and run stride for
    this grid): A @ B, and every element the pass reads written by exactly one store a run."""
    cfg = _cfg(name)
    BM, BN, BK, WM, WN, TM, TN = (cfg[k] for k in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    threads = SPEC.block(cfg)[0]
    grid = SPEC.grid(M, N, cfg)
    tiles_n, tiles = math.ceil(N / BN), grid[0]
    ldw, run_stride = tiles_n * BN, tiles * BM * BN  # reduce.plan's, for this grid
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    ws = np.full(runs * run_stride, np.nan)
    writes = np.zeros(runs * run_stride, dtype=int)
    for run, (first, n) in enumerate(_runs_of_k(K, BK, runs)):
        k0, k1 = first * BK, min(K, (first + n) * BK)
        for tile in range(tiles):
            row0, col0 = tile // tiles_n * BM, tile % tiles_n * BN
            for tid in range(threads):
                warp, lane = divmod(tid, 32)
                tm = warp // (BN // WN) * WM + lane // (WN // TN) * 4
                tn = warp % (BN // WN) * WN + lane % (WN // TN) * 4
                for i in range(TM):
                    m = row0 + tm + i // 4 * (WM // (TM // 4)) + i % 4
                    for q in range(TN // 4):
                        n0 = col0 + tn + q * (WN // (TN // 4))
                        at = run * run_stride + m * ldw + n0
                        for e in range(4):
                            inside = m < M and n0 + e < N
                            ws[at + e] = A[m, k0:k1] @ B[k0:k1, n0 + e] if inside else 0.0
                            writes[at + e] += 1
    assert (writes == 1).all()
    parts = ws.reshape(runs, tiles * BM * BN)
    rows = np.arange(M)[:, None] * ldw + np.arange(N)[None, :]
    np.testing.assert_allclose(parts[:, rows].sum(axis=0), A @ B, rtol=1e-12, atol=1e-12)


# ---- Selection: unchanged with the switch off, and what it would pick with it on ------------------

SHAPES = [(32, 8192, 8192), (64, 4096, 4096), (64, 28672, 8192), (8192, 64, 8192), (1024, 1024, 16384),
          (512, 512, 512), (640, 640, 640), (768, 768, 768), (1000, 1000, 1000), (1024, 1024, 1024),
          (1031, 1031, 1031)]  # fmt: skip


def test_the_switch_is_on_and_off_gives_step_12_the_splits(monkeypatch):
    assert fp32.MULTISTAGE_SPLIT is True
    configs._CHOICES.clear()
    monkeypatch.setattr(fp32, "MULTISTAGE_SPLIT", False)
    for M, N, K in SHAPES:
        spec, cfg = select(problem(M, N, K))
        assert spec.id == "sgemm_12_split_k", (M, N, K)  # step 12 serves every one of them without step 15's splits
    assert set(configs_in_use(SPEC)) == set(fp32.multistage_configs())
    assert all(c["SPLIT"] == 0 for c in configs_in_use(SPEC))
    assert select(problem(4096, 4096, 128))[0] is SPEC
    configs._CHOICES.clear()


# (M, N, K) -> (BM, BN, runs) the model picks; 132 SMs (an H100's). cuBLAS on an H100 runs 64 x 128
# split 4-8 at the 32-64 row shapes, 128 x 128 split 4 at 1024 x 1024 x 16384, 64 x 64 split 4 at
# 512^3 and 128 x 64 unsplit at 1024^3: the model differs at the squares (and splits 64 x 4096 x 4096
# twelve ways). Timed on an H100 (results/nvidia-h100-80gb-hbm3/tune-fp32-ms-split-*), each pick is
# within 4% of the best split tile there, ahead of step 12 but for a tie at 1024 x 1024 x 16384.
WOULD_PICK = {
    (32, 8192, 8192): (64, 128, 6),
    (64, 4096, 4096): (64, 128, 12),
    (64, 28672, 8192): (64, 128, 7),
    (8192, 64, 8192): (128, 64, 6),
    (512, 512, 512): (64, 128, 11),
    (640, 640, 640): (64, 128, 7),
    (768, 768, 768): (64, 128, 5),
    (1000, 1000, 1000): (128, 128, 4),
    (1024, 1024, 1024): (128, 128, 4),
    (1031, 1031, 1031): (128, 128, 3),
}


@pytest.mark.parametrize("M,N,K", list(WOULD_PICK))
def test_with_the_switch_on_auto_would_split_on_step_15(split_on, M, N, K):
    spec, cfg = select(problem(M, N, K))
    assert spec is SPEC and cfg["SPLIT"] == 1
    assert (cfg["BM"], cfg["BN"], multistage_runs(problem(M, N, K), cfg, 132)) == WOULD_PICK[M, N, K]
    assert cfg in configs_in_use(SPEC)


@pytest.mark.parametrize("M,N,K,kernel", [
    (4096, 4096, 4096, "sgemm_11_warp_tile"),   # a full output: splitting does not pay
    (2048, 2048, 2048, "sgemm_11_warp_tile"),
    (4096, 4096, 128, "sgemm_15_multistage"),   # short K: step 15's whole tiles, as before
    (16, 4096, 4096, "sgemm_13_few_rows"),       # few rows and columns keep their steps
    (4096, 16, 4096, "sgemm_14_few_columns"),
    (1024, 1024, 16384, "sgemm_12_split_k"),    # past MULTISTAGE_SPLIT_K_MAX
    (64, 64, 131072, "sgemm_12_split_k"),
    (512, 512, 4096, "sgemm_12_split_k"),       # 128 x 128 from MULTISTAGE_SPLIT_LONG_K
    (256, 256, 65536, "sgemm_12_split_k"),
    (64, 64, 64, "sgemm_12_split_k"),           # below MULTISTAGE_SPLIT_MIN_FLOPS: one launch
    (256, 256, 256, "sgemm_12_split_k"),
])  # fmt: skip
def test_with_the_switch_on_the_rest_is_as_before(split_on, M, N, K, kernel):
    spec, cfg = select(problem(M, N, K))
    assert spec.id == kernel
    if spec is SPEC:
        assert cfg["SPLIT"] == 0


def test_compile_jobs_take_the_reduction_with_a_split(split_on):
    jobs = api.compile_jobs([problem(64, 4096, 4096), problem(4096, 4096, 128)])
    ids = [j[0].id for j in jobs]
    assert ids.count(SPEC.id) == 2 and ids.count("sgemm_12_split_k_reduce") == 1


# ---- Builds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("post", [0, post_code(True, "silu")], ids=["plain", "bias+silu"])
@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("name", SPLIT_TILES)
def test_the_split_tiles_compile_without_spills(name, split, post):
    """Registers at the tree this was written on (NVRTC 13.0, sm_90a), SPLIT = 0 / 1, plain and
    bias+SiLU alike: 128x128 127-128 / 122, 64x128 149 / 153, 128x64 167 / 149, 64x64 93 / 91. The
    SPLIT = 0 builds of step 15's earlier tiles compile to the instructions they did before SPLIT
    existed (checked with nvdisasm when it was added)."""
    ck = jit.compile_kernel(SPEC, _cfg(name, split), ARCH, None, None, post)
    u = ck.usage
    assert u.spills == 0 and u.stack_frame == 0, f"{ck.name_expression}: {u}"
    threads = SPEC.block(_cfg(name))[0]
    _, per_sm, _ = MULTISTAGE_SPLIT_TILES[_cfg(name)["BM"], _cfg(name)["BN"]]
    if split:  # the model's blocks an SM fit the registers (256 a warp, 64K an SM)
        assert per_sm * threads // 32 * math.ceil(u.registers / 8) * 8 * 32 <= 65536, (name, u.registers)


# ---- On a GPU -----------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (M, N, K): long K (many runs), K not a multiple of 8, shapes no tile divides; (127, 129, 37) is
# five slices: a SPLIT = 1 build launched with one run (its tile order, the epilogue).
GPU_SHAPES = [(1, 1, 9000), (7, 17, 30001), (127, 129, 20000), (64, 4096, 4099), (1000, 1022, 4093),
              (3135, 61, 12345), (257, 513, 2047), (127, 129, 37), (33, 70, 0)]  # fmt: skip


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _prepared(a, b, c, alpha, beta, cfg, out):
    from gemmlab.api import prepare

    prepare(a, b, c, alpha=alpha, beta=beta, kernel=SPEC.id, out=out, config=cfg)()
    torch.cuda.synchronize()
    return out


@gpu
@needs_gpu
@pytest.mark.parametrize("name", SPLIT_TILES)
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_split_against_float64_and_the_same_bits_twice(name, M, N, K):
    cfg = _cfg(name)
    a, b, c = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), math.nan, device="cuda")
    runs = multistage_runs(problem_from_tensors(a, b, None, None), cfg, _sms())
    assert (runs > 1) == (K >= 2047), (M, N, K, name, runs)  # (the model's runs on 132 SMs: 3 to 251)
    for cc, alpha, beta in ((None, 1.0, 0.0), (c, 0.75, -2.0), (nan_c, 1.5, 0.0)):
        first = None
        for _ in range(2):
            out = _prepared(a, b, cc, alpha, beta, cfg, torch.full((M, N), math.nan, device="cuda"))
            rep = check_result(out, a, b, cc if beta != 0 else None, alpha, beta)
            assert rep.passed, f"M={M} N={N} K={K} kernel={SPEC.id} tile={name} runs={runs} beta={beta}: {rep.summary()}"
            first = out.clone() if first is None else first
            assert torch.equal(out, first), f"M={M} N={N} K={K} tile={name}: other bits at another launch"


@gpu
@needs_gpu
@pytest.mark.parametrize("name", SPLIT_TILES)
def test_split_nan_and_inf_reach_exactly_their_rows(name):
    M, N, K = 96, 80, 40001
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    assert multistage_runs(problem_from_tensors(a, b, None, None), _cfg(name), _sms()) > 1
    a[5, 31000] = math.nan  # in one run's share of K only
    a[9, 17] = math.inf  # row 9: +-Inf or NaN in every column
    out = _prepared(a, b, None, 1.0, 0.0, _cfg(name), torch.full((M, N), math.nan, device="cuda"))
    rows = torch.arange(M, device="cuda")
    assert torch.isnan(out[5]).all() and not torch.isfinite(out[9]).any()
    assert torch.isfinite(out[(rows != 5) & (rows != 9)]).all()


@gpu
@needs_gpu
def test_split_of_misaligned_b_and_d():
    """B's rows not 16-byte aligned (4-byte copies in every run) and D at an odd stride (the
    reduction's scalar stores); nothing written around D's view."""
    M, N, K = 129, 1021, 20001
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N + 3, device="cuda")[:, 1:N + 1]
    big = torch.full((M, N + 3), math.nan, device="cuda")
    out = big[:, 1:N + 1]
    for name in SPLIT_TILES:
        _prepared(a, b, None, 1.0, 0.0, _cfg(name), out)
        assert check_result(out, a, b).passed, name
        assert big[:, 0].isnan().all() and big[:, N + 1:].isnan().all(), "wrote outside out"


@gpu
@needs_gpu
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_split_applies_the_bias_and_activation(split_on, activation):
    """Through gemm() with the switch on: the reduction pass applies step 12's fused epilogue."""
    for M, N, K in ((64, 4096, 4096), (1024, 1024, 1024), (127, 1021, 3001)):
        a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
        assert select(problem_from_tensors(a, b, None, None), SPEC.id)[1]["SPLIT"] == 1
        assert not fused_epilogue_failures(a, b, SPEC.id, torch.randn(N, device="cuda"), activation)


@gpu
@needs_gpu
def test_split_in_a_cuda_graph(split_on):
    """Captured on a side stream (the split kernel, the pass, a workspace of the capture's own),
    replayed on new inputs: float64's result and the bits of an eager call."""
    M, N, K = 64, 4096, 4096
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    assert select(problem_from_tensors(a, b, None, None), "auto")[1]["SPLIT"] == 1
    out = torch.empty(M, N, device="cuda")
    gemmlab.gemm(a, b, out=out)  # compiled and loaded before the capture
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        gemmlab.gemm(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    a.copy_(torch.randn(M, K, device="cuda"))
    out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    assert check_result(out, a, b).passed
    assert torch.equal(out, gemmlab.gemm(a, b))


@gpu
@needs_gpu
def test_one_run_builds_still_serve_with_null_workspace_pointers():
    """SPLIT = 0 (the workspace pointers, last, are null): float64's result through gemm()."""
    M, N, K = 1000, 1022, 1023
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    d = gemmlab.gemm(a, b, kernel=SPEC.id)
    torch.cuda.synchronize()
    assert check_result(d, a, b).passed
