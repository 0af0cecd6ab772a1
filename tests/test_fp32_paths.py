"""The FP32 steps past the seeds' ladder: step 12's split K (the runs model on the CPU; on a GPU,
values against float64, the same bits at every launch, NaN in C with beta = 0)."""

from types import SimpleNamespace

import pytest
import torch

import gemmlab
from gemmlab import api, registry
from gemmlab.configs import select
from gemmlab.configs.fp32 import split_k_tiles
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result
from gemmlab.specs.sgemm import SPLIT_K_MAX_RUNS, split_k_runs
from gemmlab.specs.sgemm_rows import few_rows_runs

SPLIT = registry.get("sgemm_12_split_k")


def sizes(M, N, K):
    """What split_k_runs reads of a problem: its sizes."""
    return SimpleNamespace(M=M, N=N, K=K)


@pytest.mark.parametrize("M,N,K,runs", [
    (256, 256, 65536, "many"),    # four 128 x 128 tiles, a long K: split until the SMs are full
    (64, 64, 131072, "many"),
    (8192, 8192, 128, "one"),     # thousands of tiles and 16 K slices: nothing to split
    (2048, 2048, 2048, "one"),    # a whole number of waves
    (100, 100, 0, "one"),         # no K slices at all
    (100, 100, 7, "one"),         # one K slice
])  # fmt: skip
def test_runs_fill_the_sms_where_k_is_long_and_tiles_few(M, N, K, runs):
    for cfg in split_k_tiles():
        r = split_k_runs(sizes(M, N, K), cfg, 132)
        assert 1 <= r <= max(1, -(-K // cfg["BK"]))
        tiles = -(-M // cfg["BM"]) * -(-N // cfg["BN"])
        if runs == "one" and cfg["BM"] >= 128:  # (64 x 64 tiles may split 2048^3's 1.6 waves)
            assert r == 1, (cfg.as_dict(), r)
        elif runs == "many":  # as many as fill the SMs, up to the cap
            assert r >= min(SPLIT_K_MAX_RUNS, 132 // tiles), (cfg.as_dict(), r)


def test_every_candidate_tile_is_a_valid_step_11_tile():
    for cfg in split_k_tiles():
        assert SPLIT.check_config(cfg) is None
        tile = {k: v for k, v in cfg.as_dict().items() if k not in ("SPLIT", "PV", "RED")}
        assert registry.get("sgemm_11_warp_tile").config(**tile) is not None


def test_workspace_only_for_a_split_grid():
    cfg = SPLIT.default_config()
    assert SPLIT.workspace(cfg, (10, 1, 1)) == (0, 0)
    floats, flags = SPLIT.workspace(cfg, (10, 4, 1))
    assert floats == 10 * 4 * cfg["BM"] * cfg["BN"] and flags == 10


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(1, 1, 9000), (7, 17, 30001), (127, 129, 20000), (256, 256, 65536),
                                   (1000, 1022, 4099), (3135, 61, 12345)])
def test_split_k_is_right_and_the_same_at_every_launch(M, N, K):
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    first = None
    for _ in range(3):
        out = torch.full((M, N), float("nan"), device="cuda")
        gemmlab.gemm(a, b, c, alpha=0.5, beta=-1.5, kernel="sgemm_12_split_k", out=out)
        torch.cuda.synchronize()
        rep = check_result(out, a, b, c, 0.5, -1.5)
        assert rep.passed, rep.summary()
        if first is None:
            first = out.clone()
        assert torch.equal(out, first), "split K gave other bits at another launch"


@gpu
@needs_gpu
def test_split_k_with_nan_in_c_and_beta_zero_and_nan_in_a():
    M, N, K = 96, 80, 40000
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    spec, cfg = select(problem_from_tensors(a, b, None, None), "sgemm_12_split_k")
    assert split_k_runs(problem_from_tensors(a, b, None, None), cfg, torch.cuda.get_device_properties(0).multi_processor_count) > 1
    c = torch.full((M, N), float("nan"), device="cuda")
    out = gemmlab.gemm(a, b, c, beta=0.0, kernel="sgemm_12_split_k")
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and check_result(out, a, b, None, 1.0, 0.0).passed
    a[5, 31000] = float("nan")  # in one run's share of K only: every part of row 5 is summed
    out = gemmlab.gemm(a, b, kernel="sgemm_12_split_k")
    torch.cuda.synchronize()
    assert torch.isnan(out[5]).all() and torch.isfinite(out[torch.arange(M, device="cuda") != 5]).all()


def test_scalar_part_builds_compile_without_spills():
    """PV = 1 (a split's parts stored and read a float at a time) for every candidate tile: the build
    docs/notes/split-k-register-banks.md proposes to time against PV = 4."""
    from gemmlab import jit

    for cfg in split_k_tiles():
        scalar = SPLIT.config(**{**cfg.as_dict(), "PV": 1})
        usage = jit.compile_kernel(SPLIT, scalar, "sm_90a").usage
        assert usage.spill_stores == usage.spill_loads == 0 and usage.registers <= 255, (scalar.as_dict(), usage)
    with pytest.raises(ValueError, match="PV must be 4 or 1"):
        SPLIT.config(PV=2)


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(127, 129, 20000), (256, 256, 65536), (1000, 1022, 4099)])
def test_scalar_parts_give_the_same_bits_as_float4_parts(M, N, K):
    """The parts' access width changes the registers, not the sum: each tile's PV = 1 build gives the
    bits of its PV = 4 build (the runs added in the same order)."""
    from gemmlab.api import prepare

    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    for cfg in split_k_tiles():
        outs = []
        for pv in (4, 1):
            out = torch.full((M, N), float("nan"), device="cuda")
            prepare(a, b, c, alpha=0.5, beta=-1.5, kernel="sgemm_12_split_k", out=out,
                    config=SPLIT.config(**{**cfg.as_dict(), "PV": pv}))()  # fmt: skip
            torch.cuda.synchronize()
            assert check_result(out, a, b, c, 0.5, -1.5).passed, (cfg.as_dict(), pv)
            outs.append(out)
        assert torch.equal(*outs), cfg.as_dict()


# Step 13, few rows
ROWS = registry.get("sgemm_13_few_rows")


@pytest.mark.parametrize("M,mr", [(1, 1), (2, 2), (3, 4), (5, 8), (16, 16)])
def test_few_rows_config_rounds_the_rows_up(M, mr):
    a, b = torch.empty(M, 64), torch.empty(64, 300)
    spec, cfg = select(problem_from_tensors(a, b, None, None, device_type="cpu"), device="cuda")  # 'auto' takes step 13
    assert spec.id == "sgemm_13_few_rows" and cfg["MR"] == mr


def test_auto_gives_few_rows_at_most_16_rows_and_the_kernel_serves_more_when_named():
    a, b = torch.empty(17, 64), torch.empty(64, 300)
    problem = problem_from_tensors(a, b, None, None, device_type="cpu")
    assert select(problem, device="cuda")[0].id == "sgemm_12_split_k"
    assert ROWS.why_not(problem, ROWS.config(MR=16)) is None  # two row blocks
    assert ROWS.grid(17, 300, ROWS.config(MR=16)) == (3 * 2, 1, 1)


@pytest.mark.parametrize("N,K,split", [(4096, 4096, True), (14336, 4096, True), (65536, 4096, False), (4096, 100, False)])
def test_few_rows_split_k_only_where_column_blocks_leave_sms_idle(N, K, split):
    cfg = ROWS.config(MR=16)
    r = few_rows_runs(sizes(1, N, K), cfg, 132)
    assert (r > 1) == split and r <= max(1, K // cfg["KC"])


@gpu
@needs_gpu
@pytest.mark.parametrize("M", [1, 2, 3, 7, 16, 17, 100])
@pytest.mark.parametrize("N,K", [(1, 1), (17, 127), (1000, 1022), (3135, 4099), (4096, 4096), (127, 30011)])
@pytest.mark.parametrize("view", ["contiguous", "misaligned"])
def test_few_rows_against_float64(M, N, K, view):
    if view == "misaligned":  # one float past an aligned start, and row strides not a multiple of 4
        a = torch.randn(M, K + 3, device="cuda")[:, 1:K + 1]
        b = torch.randn(K, N + 5, device="cuda")[:, 1:N + 1]
    else:
        a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), float("nan"), device="cuda")
    for cc, alpha, beta in ((None, 1.0, 0.0), (c, 0.75, -2.0), (nan_c, 1.5, 0.0)):
        out = torch.full((M, N), float("nan"), device="cuda")
        gemmlab.gemm(a, b, cc, alpha=alpha, beta=beta, kernel="sgemm_13_few_rows", out=out)
        torch.cuda.synchronize()
        rep = check_result(out, a, b, cc, alpha, beta)
        assert rep.passed, f"{M}x{N}x{K} {view} alpha={alpha} beta={beta}: {rep.summary()}"


@gpu
@needs_gpu
@pytest.mark.parametrize("mr", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("M,N,K", [(7, 13, 2000), (5, 3000, 5000), (33, 520, 515), (16, 4096, 16384)])
def test_every_rows_config_named_for_more_rows_than_it_covers(mr, M, N, K):
    """A config named for the problem (prepare(config=...), as tuning does) with M spanning several
    row blocks of MR rows, split K among them: against float64 with C read (beta = -2) and with NaN
    in C at beta = 0, and the same bits at every launch. With MR = 1 or 2 a block also stored rows
    of the next row block (alpha * 0 + beta * C) and raced its true sums."""
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), float("nan"), device="cuda")
    for cc, alpha, beta in ((c, 0.5, -2.0), (nan_c, 1.0, 0.0)):
        out = torch.full((M, N), float("nan"), device="cuda")
        run = api.prepare(a, b, cc, alpha=alpha, beta=beta, out=out, kernel=ROWS.id, config=ROWS.config(MR=mr))
        run()
        first = out.clone()
        rep = check_result(first, a, b, cc, alpha, beta)
        assert rep.passed, f"MR={mr} {M}x{N}x{K} beta={beta}: {rep.summary()}"
        for _ in range(3):
            out.fill_(float("nan"))
            run()
            assert torch.equal(out, first), f"MR={mr} {M}x{N}x{K} beta={beta}: another launch, other bits"


@gpu
@needs_gpu
def test_few_rows_split_k_is_the_same_at_every_launch_and_nan_propagates():
    M, N, K = 5, 1000, 50000
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    assert few_rows_runs(sizes(M, N, K), ROWS.config(MR=8), torch.cuda.get_device_properties(0).multi_processor_count) > 1
    first = gemmlab.gemm(a, b, kernel="sgemm_13_few_rows")
    for _ in range(3):
        assert torch.equal(gemmlab.gemm(a, b, kernel="sgemm_13_few_rows"), first)
    b[40000, 7] = float("inf")
    out = gemmlab.gemm(a, b, kernel="sgemm_13_few_rows")
    torch.cuda.synchronize()
    assert not torch.isfinite(out[:, 7]).any() and torch.isfinite(out[:, :7]).all()
