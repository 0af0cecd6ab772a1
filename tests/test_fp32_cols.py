"""FP32 step 14, few columns (N <= 16): its configs, K runs and refusals on the CPU, every config it
launches compiled for sm_90a without spills; on a GPU, values against float64 at awkward shapes,
misaligned views, NaN in C with beta = 0, C as out, NaN propagating, and the same bits at every
launch where K is split."""

import itertools
from types import SimpleNamespace

import pytest
import torch

import gemmlab
from gemmlab import configs, jit, registry
from gemmlab.configs import auto_skip, configs_in_use, select
from gemmlab.configs.fp32 import few_columns_config
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result
from gemmlab.specs.base import stated_constraint
from gemmlab.specs.sgemm_cols import (
    FEW_COLUMNS_B_FLOATS, FEW_COLUMNS_BLOCKS_PER_SM, FEW_COLUMNS_MIN_STEPS, few_columns_runs, few_columns_smem,
    rows_per_block,
)

COLS = registry.get("sgemm_14_few_columns")
SMS = 132  # an H100's or H200's


def P(M, N, K, dtype=torch.float32, **kw):
    """A problem of M x K times K x N on the CPU (shapes only: nothing is launched)."""
    return problem_from_tensors(torch.empty((M, K), dtype=dtype), torch.empty((K, N), dtype=dtype),
                                device_type="cpu", **kw)  # fmt: skip


def sizes(M, N, K):
    """What few_columns_runs reads of a problem: its sizes."""
    return SimpleNamespace(M=M, N=N, K=K)


def test_on_the_fp32_ladder_after_step_13():
    assert COLS in registry.kernels(torch.float32) and COLS not in registry.SGEMM_PENDING
    assert registry.SGEMM_LADDER.index(COLS) == registry.SGEMM_LADDER.index(registry.get("sgemm_13_few_rows")) + 1


@pytest.mark.parametrize("N", range(1, 17))
def test_the_config_covers_n_with_the_fewest_columns(N):
    cfg = few_columns_config(sizes(1000, N, 1000))
    assert cfg["NC"] == next(nc for nc in (1, 2, 4, 8, 16) if N <= nc)
    assert COLS.why_not(P(1000, N, 1000), cfg) is None
    assert select(P(1000, N, 1000), COLS.id, device="cuda") == (COLS, cfg)


def test_configs_in_use_are_one_a_column_count():
    used = configs_in_use(COLS)
    assert [c["NC"] for c in used] == [1, 2, 4, 8, 16]
    assert COLS.default_config() in used  # the default is NC = 16's
    for c in used:
        assert COLS.check_config(c) is None
        assert c["BK"] * c["NC"] == FEW_COLUMNS_B_FLOATS and c["BK"] % (128 * c["KV"]) == 0


@pytest.mark.parametrize("overrides,message", [
    (dict(NC=3), "NC must be 1, 2, 4, 8 or 16"),
    (dict(RW=3), "RW must be 1, 2, 4 or 8"),
    (dict(KV=0), "KV must be 1..8"),
    (dict(THREADS=48), "THREADS must be a multiple of 32"),
    (dict(BK=384), r"BK must be a multiple of 128 \* KV = 256"),
    (dict(NC=16, BK=1024), "exceeds the 48 KB"),
    (dict(THREADS=2048), "1..1024 allowed"),
])  # fmt: skip
def test_configs_are_checked_before_compiling(overrides, message):
    with pytest.raises(ValueError, match=message):
        COLS.config(**overrides)


def test_wider_d_is_refused_by_name_with_the_reason():
    with pytest.raises(ValueError, match=r"'sgemm_14_few_columns' cannot serve M=64 N=17 K=300: .* at most 16 columns, "
                                         r"not N=17; use kernel='auto'"):  # fmt: skip
        select(P(64, 17, 300), COLS.id, device="cuda")
    reason = COLS.why_not(P(64, 17, 300))
    assert stated_constraint(reason)  # `gemmlab check` and the benchmark record it as declined
    assert COLS.why_not(P(64, 8, 300), COLS.config(NC=4, BK=512)) == "config NC=4 covers 4 columns of D, not N=8"
    assert "takes float32, not bfloat16" in COLS.why_not(P(64, 8, 300, dtype=torch.bfloat16))
    assert "precision='tf32'" in COLS.why_not(P(64, 8, 300, precision="tf32"))


def test_auto_takes_it_for_few_fp32_columns_once_it_joins_the_ladder(monkeypatch):
    monkeypatch.setattr(registry, "KERNELS", registry.KERNELS + (COLS,))
    monkeypatch.setattr(configs, "_CHOICES", {})
    for M, N, K in [(4096, 1, 4096), (8192, 1, 8192), (4096, 16, 4096), (7, 3, 5), (5, 7, 0)]:
        assert select(P(M, N, K), device="cuda")[0] is COLS, (M, N, K)
    assert select(P(4096, 17, 4096), device="cuda")[0].id in ("sgemm_11_warp_tile", "sgemm_12_split_k", "sgemm_15_multistage")  # tiles past 16 columns
    assert select(P(4096, 1, 4096, precision="tf32"), device="cuda")[0].id == "tc08_tf32"
    assert auto_skip(COLS, P(64, 17, 64), COLS.default_config()) and not auto_skip(COLS, P(64, 16, 64), COLS.default_config())


@pytest.mark.parametrize("M,N,K,runs", [
    (4096, 1, 4096, "many"),   # 128 blocks of 32 rows for 132 SMs' two slots each: two runs
    (8192, 1, 8192, "one"),    # 256 blocks: the slots are full
    (4096, 16, 4096, "many"),
    (100, 3, 0, "one"),        # no K at all
    (7, 1, 7, "one"),          # one step of K
    (1, 1, 1000, "one"),       # too few steps to split
    (64, 1, 131072, "many"),   # two blocks of rows, a long K
    (16, 8, 65536, "many"),
    (1, 1, 1_000_000, "many"),
    (2048, 1, 4096, "many"),   # 64 blocks of rows: two runs each
])  # fmt: skip
def test_runs_fill_the_sms_where_rows_are_few_and_k_long(M, N, K, runs):
    cfg = few_columns_config(sizes(M, N, K))
    r = few_columns_runs(sizes(M, N, K), cfg, SMS)
    steps = -(-K // (128 * cfg["KV"]))
    blocks = -(-M // rows_per_block(cfg))
    assert r >= 1
    if runs == "one":
        assert r == 1, r
    else:  # as many as fill the SMs' slots, each run at least FEW_COLUMNS_MIN_STEPS steps of K
        slots = SMS * FEW_COLUMNS_BLOCKS_PER_SM
        assert r > 1 and blocks * r <= slots and steps // r >= FEW_COLUMNS_MIN_STEPS, r
        assert blocks * (r + 1) > slots or r == steps // FEW_COLUMNS_MIN_STEPS, r


def test_workspace_only_for_a_split_grid():
    cfg = COLS.default_config()
    assert COLS.workspace(cfg, (10, 1, 1)) == (0, 0)
    floats, flags = COLS.workspace(cfg, (10, 4, 1))
    assert floats == 10 * 4 * rows_per_block(cfg) * cfg["NC"] and flags == 10


def test_every_config_it_launches_compiles_for_hopper_without_spills():
    """With the registers ptxas gives them, two blocks of each config fit an SM (the configs are
    chosen for it: configs.fp32.FEW_COLUMNS_KV)."""
    for cfg in configs_in_use(COLS):
        u = jit.compile_kernel(COLS, cfg, "sm_90a").usage
        name = COLS.name_expression(cfg)
        assert u.spills == 0 and u.stack_frame == 0, f"{name}: {u}"
        assert 2 * u.registers * cfg["THREADS"] <= 65536, f"{name}: {u.registers} registers a thread"
        assert u.static_smem == few_columns_smem(cfg), f"{name}: {u}"


# ---- On a GPU ----------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def rand(*shape):
    return torch.rand(shape, device="cuda") * 2 - 1


def run(a, b, c=None, **kw):
    """gemm on step 14, checked against float64 (out poisoned with NaN unless given)."""
    M, N = a.shape[0], b.shape[1]
    out = kw.pop("out", None)
    if out is None:
        out = torch.full((M, N), float("nan"), device="cuda")
    c_ref = None if c is None else c.clone()
    gemmlab.gemm(a, b, c, kernel=COLS.id, out=out, **kw)
    torch.cuda.synchronize()
    rep = check_result(out, a, b, c_ref, kw.get("alpha", 1.0), kw.get("beta", 0.0))
    assert rep.passed, f"M={M} N={N} K={a.shape[1]} kernel={COLS.id} {kw}: {rep.summary()}"
    return out


def runs_of(a, b) -> int:
    problem = problem_from_tensors(a, b, None, None)
    _, cfg = select(problem, COLS.id)
    return few_columns_runs(problem, cfg, torch.cuda.get_device_properties(0).multi_processor_count)


SIDES = (1, 7, 17, 127, 1000, 3135)
PRIMES = (2, 13, 257, 4099)


@gpu
@needs_gpu
@pytest.mark.parametrize("M,K", list(itertools.product(SIDES + PRIMES[1:], SIDES + PRIMES)))
def test_every_column_count_against_float64(M, K):
    for N in range(1, 17):
        run(rand(M, K), rand(K, N))


@gpu
@needs_gpu
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-0.5, 0.0), (1.25, 0.5), (2.0, -1.0), (0.0, 1.0)])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (3135, 1, 1000), (127, 16, 4099), (17, 5, 65537)])
def test_alpha_and_beta(M, N, K, alpha, beta):
    run(rand(M, K), rand(K, N), rand(M, N) if beta else None, alpha=alpha, beta=beta)


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(1000, 1, 3135), (127, 16, 1000), (7, 5, 17), (64, 3, 40001)])
def test_misaligned_and_strided_views(M, N, K):
    """A not 16-byte aligned (a[:, 1:] of a wider matrix: every row off by a float, an odd row
    stride); B, C and out views with row strides of their own; K not a multiple of 4."""
    a = rand(M, K + 3)[:, 1 : K + 1]
    b = rand(K + 1, N + 7)[1:, 2 : N + 2]
    c = rand(M, N + 5)[:, 3 : N + 3]
    out_big = torch.full((M, N + 9), float("nan"), device="cuda")
    run(a, b, c, alpha=0.5, beta=1.5, out=out_big[:, 4 : N + 4])
    assert out_big[:, :4].isnan().all() and out_big[:, N + 4 :].isnan().all(), "wrote outside out"
    aligned = rand(M, -(-K // 4) * 4 + 4)[:, :K]  # rows 16-byte aligned, K not a multiple of 4 (but at 1000)
    run(aligned, b)  # 16-byte loads, the last step's floats one by one


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(70, 9, 33), (64, 1, 131072)])  # one run, and K split
def test_beta_zero_never_reads_nan_c_and_c_may_be_out(M, N, K):
    a, b = rand(M, K), rand(K, N)
    c = torch.full((M, N), float("nan"), device="cuda")
    out = run(a, b, c, alpha=1.5, beta=0.0)
    assert not out.isnan().any()
    run(a, b, c, alpha=1.5, beta=0.0, out=c)  # in place: out is the NaN-filled c itself
    c = rand(M, N)
    run(a, b, c, alpha=0.75, beta=-1.5, out=c)  # C read and overwritten by the same thread


@gpu
@needs_gpu
def test_k_zero_gives_beta_c():
    c = rand(5, 3)
    out = gemmlab.gemm(rand(5, 0), rand(0, 3), c, alpha=2.0, beta=0.5, kernel=COLS.id)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 0.5 * c, rtol=0, atol=0)


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(64, 1, 131072), (16, 8, 65536), (1, 16, 100003), (127, 5, 30001),
                                   (3, 13, 65537)])  # fmt: skip
def test_split_k_is_right_and_the_same_at_every_launch(M, N, K):
    a, b, c = rand(M, K), rand(K, N), rand(M, N)
    assert runs_of(a, b) > 1
    first = None
    for _ in range(3):
        out = run(a, b, c, alpha=0.5, beta=-1.5)
        if first is None:
            first = out.clone()
        assert torch.equal(out, first), "split K gave other bits at another launch"


@gpu
@needs_gpu
@pytest.mark.parametrize("M,N,K", [(33, 16, 20), (96, 3, 40000)])  # one run, and K split
def test_nan_in_a_or_b_propagates(M, N, K):
    a, b = rand(M, K), rand(K, N)
    a[5, K * 3 // 4] = float("nan")  # in one run's share of K only: every part of row 5 is summed
    out = gemmlab.gemm(a, b, kernel=COLS.id)
    torch.cuda.synchronize()
    others = torch.arange(M, device="cuda") != 5
    assert out[5].isnan().all() and torch.isfinite(out[others]).all()
    a[5, K * 3 // 4] = 1.0
    b[K // 3, N - 1] = float("inf")  # a column of D: +-inf (or NaN where a zero of A meets it)
    out = gemmlab.gemm(a, b, kernel=COLS.id)
    torch.cuda.synchronize()
    assert not torch.isfinite(out[:, N - 1]).any() and torch.isfinite(out[:, : N - 1]).all()


@gpu
@needs_gpu
def test_wider_d_named_raises_before_any_launch():
    a, b = rand(8, 4), rand(4, 17)
    out = torch.full((8, 17), 7.0, device="cuda")
    with pytest.raises(ValueError, match="at most 16 columns, not N=17"):
        gemmlab.gemm(a, b, kernel=COLS.id, out=out)
    torch.cuda.synchronize()
    assert (out == 7.0).all()
