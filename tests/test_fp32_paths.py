"""The FP32 steps past the seeds' ladder: step 12's split K (the runs model on the CPU; on a GPU,
values against float64, the same bits at every launch, NaN in C with beta = 0)."""

from types import SimpleNamespace

import pytest
import torch

import gemmlab
from gemmlab import registry
from gemmlab.configs import select
from gemmlab.configs.fp32 import split_k_tiles
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result
from gemmlab.specs.sgemm import SPLIT_K_MAX_RUNS, split_k_runs

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
        assert registry.get("sgemm_11_warp_tile").config(**cfg.as_dict()) is not None


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
