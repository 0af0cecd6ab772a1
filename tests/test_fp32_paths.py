"""The FP32 steps past the seeds' ladder: step 12's split K (the runs model on the CPU; on a GPU,
values against float64, the same bits at every launch, NaN in C with beta = 0)."""

from types import SimpleNamespace

import pytest
import torch

import gemmlab
from gemmlab import api, registry
from gemmlab.configs import select
from gemmlab.configs.fp32 import FEW_ROWS_KC, split_k_tiles
from gemmlab.problem import fresh_problem, problem_from_tensors
from gemmlab.reference import check_result, fused_epilogue_failures
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
        tile = {k: v for k, v in cfg.as_dict().items() if k not in ("SPLIT", "PV", "RED", "TB")}
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


# Step 12's reduction pass (RED = 1): the runs store their parts, a second kernel adds them up
from gemmlab.specs.sgemm import (SPLIT_K_RED_MAX_RUNS, SPLIT_K_RED_MIN_SLICES, SPLIT_K_REDUCE,  # noqa: E402
                                 SPLIT_K_REDUCE_MAX_SLICES, SPLIT_K_REDUCE_SLICE_RUNS, split_k_reduce_grid,
                                 split_k_reduce_slices)


def cpu_problem(M, N, K):
    """A problem of these sizes as 'auto' sees it on a GPU (the choice reads only shapes and strides)."""
    return fresh_problem(M, N, K, torch.float32)


def split_choice(M, N, K):
    """(kernel id, config, runs) 'auto' launches for the problem."""
    problem = cpu_problem(M, N, K)
    spec, cfg = select(problem, device="cuda")
    return spec.id, cfg, split_k_runs(problem, cfg, 132) if spec.id == SPLIT.id else 1


# The shapes docs/notes/fp32-split-k-and-few-rows.md lists step 12 behind cuBLAS at (cuBLAS splits K
# 128 and 64 ways at the first three, with a separate reduction kernel: an H100 torch.profiler run),
# and shapes whose choice the reduction pass must leave alone. The runs are the model's picks.
@pytest.mark.parametrize("M,N,K,kernel,red,least_runs", [
    (64, 64, 131072, SPLIT.id, 1, 64),   # one tile: the last-run sum capped it at 64 runs
    (256, 256, 65536, SPLIT.id, 1, 64),
    (128, 512, 32768, SPLIT.id, 1, 64),
    (1024, 1024, 16384, SPLIT.id, 0, 2),  # a few runs: the serial sum is short (cuBLAS splits 4 ways here)
    (32, 8192, 8192, "sgemm_15_multistage", None, 1),  # step 15 splits these (configs.fp32.MULTISTAGE_SPLIT)
    (64, 4096, 4096, "sgemm_15_multistage", None, 1),
    (512, 512, 512, "sgemm_15_multistage", None, 1),
    (256, 256, 256, SPLIT.id, 1, 2),      # below step 15's split's least flops
    (4096, 4096, 4096, "sgemm_11_warp_tile", None, 1),
    (4096, 4096, 128, "sgemm_15_multistage", None, 1),  # whole tiles of a short K: step 15
])  # fmt: skip
def test_auto_takes_the_reduction_pass_where_the_last_run_sum_caps_the_runs(M, N, K, kernel, red, least_runs):
    kid, cfg, runs = split_choice(M, N, K)
    assert kid == kernel, (M, N, K, kid)
    if red is not None:
        assert cfg["SPLIT"] == 1 and cfg["RED"] == red and runs >= least_runs, (M, N, K, cfg.as_dict(), runs)
        assert SPLIT.parts_reduced(cfg, (1, runs, 1)) == bool(red)


@pytest.mark.parametrize("K", [0, 1, 7, 8, 31, 32, 33, 100, 1000, 8191, 65537, 10**6])
def test_reduction_runs_keep_a_few_slices_each_and_never_outnumber_them(K):
    """RED = 1 runs: at most SPLIT_K_RED_MAX_RUNS, each at least SPLIT_K_RED_MIN_SLICES BK slices
    (so never more runs than K slices); one run where K has too few (then no reduction at all)."""
    for cfg in split_k_tiles(1, 1):
        for M, N in ((1, 1), (64, 64), (1000, 17), (4096, 4096)):
            r = split_k_runs(sizes(M, N, K), cfg, 132)
            kt = -(-K // cfg["BK"])
            assert 1 <= r <= max(1, min(SPLIT_K_RED_MAX_RUNS, kt // SPLIT_K_RED_MIN_SLICES)), (M, N, K, r)
            assert r == 1 or r <= kt
    spec, cfg = select(cpu_problem(64, 64, 24), "sgemm_12_split_k", device="cuda")
    assert (cfg["SPLIT"], cfg["RED"]) == (0, 0)  # three slices: nothing to split


def test_reduction_configs_are_checked():
    assert SPLIT.default_config()["RED"] == 0
    with pytest.raises(ValueError, match="RED = 1 needs SPLIT = 1"):
        SPLIT.config(SPLIT=0, RED=1)
    with pytest.raises(ValueError, match="RED must be 0 or 1"):
        SPLIT.config(RED=2)
    cfg = SPLIT.config(RED=1)
    assert SPLIT.parts_reduced(cfg, (4, 8, 1)) and not SPLIT.parts_reduced(cfg, (4, 1, 1))
    assert not SPLIT.parts_reduced(SPLIT.default_config(), (4, 8, 1))
    assert SPLIT.workspace(cfg, (4, 8, 1))[0] == 4 * 8 * cfg["BM"] * cfg["BN"]  # a padded part a run
    assert SPLIT_K_REDUCE.grid(7, 17, SPLIT_K_REDUCE.default_config()) == (1, 1, 1)  # 7 rows x 5 float4s
    assert SPLIT_K_REDUCE.grid(4096, 4096, SPLIT_K_REDUCE.default_config()) == (4096 * 1024 // 256, 1, 1)
    from gemmlab.configs import configs_in_use

    used = configs_in_use(SPLIT)
    assert all(c in used for c in split_k_tiles(1, 1)) and all(c in used for c in split_k_tiles(1, 0))


@pytest.mark.parametrize("M,N", [(1, 1), (7, 17), (64, 64), (256, 256), (1000, 1022), (4096, 4096)])
@pytest.mark.parametrize("runs", [2, 8, 15, 16, 66, 256, 1000])
def test_the_reduction_pass_shares_a_float4_only_where_d_is_small(M, N, runs):
    """Slices (threads a float4 of D): a power of two dividing the block, each thread at least
    SPLIT_K_REDUCE_SLICE_RUNS runs, more only while the pass has fewer than two blocks an SM; the grid
    covers every float4 of D."""
    threads = SPLIT_K_REDUCE.default_config()["THREADS"]
    s = split_k_reduce_slices(M, N, runs, 132, threads)
    assert s & (s - 1) == 0 and 1 <= s <= SPLIT_K_REDUCE_MAX_SLICES and threads % s == 0, s
    assert s == 1 or runs >= s * SPLIT_K_REDUCE_SLICE_RUNS, (s, runs)
    quads = M * -(-N // 4)
    grid = split_k_reduce_grid(M, N, SPLIT_K_REDUCE.default_config(), s)
    assert grid[0] * (threads // s) >= quads > (grid[0] - 1) * (threads // s)
    if s > 1:  # it was doubled only while the pass was short of blocks
        assert -(-quads // (threads * 2 // s)) < 2 * 132
    if M * N >= 1000 * 1022:
        assert s == 1, "a large D keeps a thread a float4"
    # the kernel's mapping (12_split_k_reduce.cu): thread t of block x adds float4 q = x * (THREADS /
    # slices) + t % (THREADS / slices) over runs [runs * sl / slices, runs * (sl + 1) / slices), sl = t /
    # (THREADS / slices): every (float4, run) pair exactly once
    per_block = threads // s
    seen = {}
    for x in range(min(grid[0], 3)):
        for t in range(threads):
            q, sl = x * per_block + t % per_block, t // per_block
            for r in range(runs * sl // s, runs * (sl + 1) // s):
                seen[(q, r)] = seen.get((q, r), 0) + 1
    covered = min(quads, min(grid[0], 3) * per_block)
    assert all(seen.get((q, r)) == 1 for q in range(covered) for r in range(runs))
    assert split_k_reduce_slices(64, 64, 256, 132, threads) == 32  # 64 x 64 x 131072: 128 blocks, not 4


def test_compile_jobs_include_the_reduction_where_auto_takes_it():
    jobs = api.compile_jobs([cpu_problem(64, 64, 131072), cpu_problem(1024, 1024, 8192)])
    ids = [j[0].id for j in jobs]
    assert ids.count(SPLIT.id) == 2 and ids.count(SPLIT_K_REDUCE.id) == 1


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(1, 1, 9000), (7, 17, 30001), (17, 127, 20011), (127, 129, 20000), (64, 64, 131072),
                                   (1000, 1022, 4099), (3135, 61, 12345), (256, 256, 65536)])  # fmt: skip
def test_reduction_pass_is_right_and_the_same_at_every_launch(M, N, K):
    """Each candidate tile with RED = 1, on fresh inputs, out poisoned with NaN first: float64's
    result, and the same bits at a second launch; then what auto launches for the problem."""
    from gemmlab.api import prepare

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    problem = problem_from_tensors(a, b, c, None, beta=-1.5)
    for cfg in split_k_tiles(1, 1):
        assert split_k_runs(problem, cfg, sms) > 1, (M, N, K, cfg.as_dict())  # the pass runs
        first = None
        for _ in range(2):
            out = torch.full((M, N), float("nan"), device="cuda")
            prepare(a, b, c, alpha=0.5, beta=-1.5, kernel=SPLIT.id, out=out, config=cfg)()
            torch.cuda.synchronize()
            rep = check_result(out, a, b, c, 0.5, -1.5)
            assert rep.passed, f"M={M} N={N} K={K} kernel={SPLIT.id} {cfg.as_dict()}: {rep.summary()}"
            first = out.clone() if first is None else first
            assert torch.equal(out, first), f"M={M} N={N} K={K} {cfg.as_dict()}: other bits at another launch"
    out = torch.full((M, N), float("nan"), device="cuda")
    gemmlab.gemm(a, b, c, alpha=0.5, beta=-1.5, kernel=SPLIT.id, out=out)
    torch.cuda.synchronize()
    assert check_result(out, a, b, c, 0.5, -1.5).passed


@gpu
@needs_gpu
def test_reduction_pass_with_nan_in_c_and_beta_zero_nan_and_inf_in_a_and_in_place():
    M, N, K = 96, 80, 40000
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    spec, cfg = select(problem_from_tensors(a, b, None, None), SPLIT.id)
    assert cfg["RED"] == 1  # (the model's pick: 250 runs of a 128 x 128 tile)
    c = torch.full((M, N), float("nan"), device="cuda")
    out = gemmlab.gemm(a, b, c, beta=0.0, kernel=SPLIT.id)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and check_result(out, a, b, None, 1.0, 0.0).passed
    c = torch.randn(M, N, device="cuda")
    c0 = c.clone()
    gemmlab.gemm(a, b, c, alpha=2.0, beta=0.5, kernel=SPLIT.id, out=c)  # in place: C is D
    torch.cuda.synchronize()
    assert check_result(c, a, b, c0, 2.0, 0.5).passed
    a[5, 31000] = float("nan")  # in one run's share of K only
    a[9, 17] = float("inf")  # row 9: +-Inf or NaN in every column (Inf times b's signs)
    out = gemmlab.gemm(a, b, kernel=SPLIT.id)
    torch.cuda.synchronize()
    rows = torch.arange(M, device="cuda")
    assert torch.isnan(out[5]).all() and not torch.isfinite(out[9]).any()
    assert torch.isfinite(out[(rows != 5) & (rows != 9)]).all()


@gpu
@needs_gpu
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_reduction_pass_applies_the_bias_and_activation(activation):
    for M, N, K in ((7, 17, 30001), (64, 64, 131072), (127, 1021, 9973)):
        a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
        assert select(problem_from_tensors(a, b, None, None), SPLIT.id)[1]["RED"] == 1  # the pass serves these
        assert not fused_epilogue_failures(a, b, SPLIT.id, torch.randn(N, device="cuda"), activation)


@gpu
@needs_gpu
def test_reduction_pass_stores_to_a_d_of_odd_stride_and_address():
    """Rows of D not 16-byte aligned (row stride 1023, and an address 4 bytes past one): scalar stores."""
    M, N, K = 129, 1021, 20000
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    for ld, off in ((1023, 0), (1024, 1)):
        buf = torch.full((M * ld + 8,), float("nan"), device="cuda")
        out = buf[off: off + M * ld].view(M, ld)[:, :N]
        gemmlab.gemm(a, b, kernel=SPLIT.id, out=out)
        torch.cuda.synchronize()
        assert select(problem_from_tensors(a, b, None, out), SPLIT.id)[1]["RED"] == 1
        assert check_result(out, a, b).passed, (ld, off)
        assert torch.isnan(buf[:off]).all() and torch.isnan(out.as_strided((M, ld - N), (ld, 1), out.storage_offset() + N)).all()


@gpu
@needs_gpu
def test_reduction_pass_in_a_cuda_graph():
    """Captured on a side stream (both launches, and a workspace of the capture's own), replayed on
    new inputs: float64's result and the bits of an eager call."""
    M, N, K = 64, 64, 131072
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    out = torch.empty(M, N, device="cuda")
    gemmlab.gemm(a, b, kernel=SPLIT.id, out=out)  # compiled and loaded before the capture
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        gemmlab.gemm(a, b, kernel=SPLIT.id, out=out)
    torch.cuda.current_stream().wait_stream(side)
    a.copy_(torch.randn(M, K, device="cuda"))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert check_result(out, a, b).passed
    assert torch.equal(out, gemmlab.gemm(a, b, kernel=SPLIT.id))


# Step 13, few rows
ROWS = registry.get("sgemm_13_few_rows")


@pytest.mark.parametrize("M,mr", [(1, 1), (2, 2), (3, 4), (5, 8), (16, 16)])
def test_few_rows_config_rounds_the_rows_up(M, mr):
    a, b = torch.empty(M, 64), torch.empty(64, 300)
    spec, cfg = select(problem_from_tensors(a, b, None, None, device_type="cpu"), device="cuda")  # 'auto' takes step 13
    assert spec.id == "sgemm_13_few_rows" and cfg["MR"] == mr
    assert cfg["AGLOBAL"] == (mr == 1)  # one row: lanes read A from global memory (FEW_ROWS_AGLOBAL)


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
@pytest.mark.parametrize("pipe", [0, 1])
@pytest.mark.parametrize("mr", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("M,N,K", [(7, 13, 2000), (5, 3000, 5000), (33, 520, 515), (16, 4096, 16384)])
def test_every_rows_config_named_for_more_rows_than_it_covers(mr, pipe, M, N, K):
    """A config named for the problem (prepare(config=...), as tuning does) with M spanning several
    row blocks of MR rows, split K among them, with and without the software pipeline: against
    float64 with C read (beta = -2) and with NaN in C at beta = 0, and the same bits at every launch.
    With MR = 1 or 2 a block also stored rows of the next row block (alpha * 0 + beta * C) and raced
    its true sums."""
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), float("nan"), device="cuda")
    for cc, alpha, beta in ((c, 0.5, -2.0), (nan_c, 1.0, 0.0)):
        out = torch.full((M, N), float("nan"), device="cuda")
        cfg = ROWS.config(MR=mr, KC=FEW_ROWS_KC[mr], PIPE=pipe)
        run = api.prepare(a, b, cc, alpha=alpha, beta=beta, out=out, kernel=ROWS.id, config=cfg)
        run()
        first = out.clone()
        rep = check_result(first, a, b, cc, alpha, beta)
        assert rep.passed, f"MR={mr} PIPE={pipe} {M}x{N}x{K} beta={beta}: {rep.summary()}"
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


def test_rows_read_from_global_compile_without_spills_and_are_refused_past_two_rows():
    """AGLOBAL = 1 (each lane reads A's one or two rows itself: no shared A, no barriers in the main
    loop) at both chunks of K, plain and fused: no spills, within the two blocks an SM the launch
    bounds ask for, and the shared A gone; refused with more rows or the pipeline."""
    from gemmlab import jit
    from gemmlab.activations import post_code

    for mr in (1, 2):
        for kc in (64, 128):
            for post in (0, post_code(True, "gelu")):
                cfg = ROWS.config(MR=mr, KC=kc, AGLOBAL=1, PIPE=0)
                u = jit.compile_kernel(ROWS, cfg, "sm_90a", post=post).usage
                shared = jit.compile_kernel(ROWS, ROWS.config(MR=mr, KC=kc, PIPE=0), "sm_90a", post=post).usage
                assert u.spill_stores == u.spill_loads == 0 and u.registers <= 128, (cfg.as_dict(), u)
                assert u.static_smem < shared.static_smem, (u, shared)  # no sA
    with pytest.raises(ValueError, match="AGLOBAL = 1 takes MR <= 2 and PIPE = 0"):
        ROWS.config(MR=4, AGLOBAL=1)
    with pytest.raises(ValueError, match="AGLOBAL = 1 takes MR <= 2 and PIPE = 0"):
        ROWS.config(MR=1, AGLOBAL=1, PIPE=1)


@gpu
@needs_gpu
@pytest.mark.parametrize("mr,kc", [(1, 64), (1, 128), (2, 64), (2, 128)])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (1, 4096, 4096), (1, 1000, 30001), (2, 127, 777), (3, 129, 2100),
                                   (7, 13, 2000), (1, 3, 0)])  # fmt: skip
def test_rows_read_from_global_give_the_shared_builds_bits(mr, kc, M, N, K):
    """AGLOBAL = 1 against float64 (C read with beta = -2; NaN in C with beta = 0; into NaN-poisoned
    D), M spanning several row blocks of MR rows where M > MR, split K where the runs rule splits:
    the same bits as the shared-A build of the same MR and KC (the same FMAs in the same order), at
    every launch."""
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), float("nan"), device="cuda")
    for cc, alpha, beta in ((c, 0.5, -2.0), (nan_c, 1.0, 0.0)):
        outs = []
        for ag in (0, 1):
            out = torch.full((M, N), float("nan"), device="cuda")
            cfg = ROWS.config(MR=mr, KC=kc, PIPE=0, AGLOBAL=ag)
            run = api.prepare(a, b, cc, alpha=alpha, beta=beta, out=out, kernel=ROWS.id, config=cfg)
            run()
            first = out.clone()
            rep = check_result(first, a, b, cc, alpha, beta)
            assert rep.passed, f"MR={mr} KC={kc} AGLOBAL={ag} {M}x{N}x{K} beta={beta}: {rep.summary()}"
            out.fill_(float("nan"))
            run()
            assert torch.equal(out, first), f"MR={mr} AGLOBAL={ag} {M}x{N}x{K}: another launch, other bits"
            outs.append(first)
        assert torch.equal(*outs), f"MR={mr} KC={kc} {M}x{N}x{K} beta={beta}: AGLOBAL changed the bits"
