"""FP32 steps 11 and 12 read a B stored transposed (x @ w.t(), a Linear's forward pass) where it
lies (TB = 1): on the CPU, which configs auto gives such problems and that they compile; on a GPU,
the same bits as the same kernel on a row-major copy of B (the products are added in the same
order), values against float64 at shapes that fit no tile, B's rows unaligned, split K with both
reductions, NaN in C with beta = 0, NaN and Inf in the weight, and the fused bias and activation."""

import pytest
import torch

import gemmlab
from gemmlab import jit, registry
from gemmlab.configs import configs_in_use, select
from gemmlab.problem import fresh_problem, problem_from_tensors
from gemmlab.reference import check_result

S11, S12 = registry.get("sgemm_11_warp_tile"), registry.get("sgemm_12_split_k")


@pytest.mark.parametrize("M,N,K", [(2048, 4096, 4096), (4096, 4096, 4096), (1000, 1022, 1022), (256, 4096, 4096),
                                   (256, 256, 65536), (3135, 3135, 3135)])  # fmt: skip
def test_auto_reads_a_transposed_b_in_place_where_it_picks_step_11_or_12(M, N, K):
    nn = fresh_problem(M, N, K, torch.float32)  # (meta tensors: what auto sees on a GPU)
    nt = fresh_problem(M, N, K, torch.float32, layout="nt")
    spec_nn, cfg_nn = select(nn, device="cuda")
    spec, cfg = select(nt, device="cuda")
    assert spec is spec_nn
    if spec in (S11, S12):
        assert cfg["TB"] == 1 and spec.reads_in_place(nt, cfg)
        assert {**cfg.as_dict(), "TB": 0} == cfg_nn.as_dict()  # the row-major problem's tile, runs and all
    else:  # (few rows, multistage: still given a row-major copy)
        assert not spec.reads_in_place(nt, cfg)


def test_an_a_stored_transposed_is_still_copied():
    tn = fresh_problem(2048, 2048, 2048, torch.float32, layout="tn")
    spec, cfg = select(tn, device="cuda")
    assert spec in (S11, S12) and not spec.reads_in_place(tn, cfg)


def test_every_transposed_b_config_auto_can_pick_compiles_without_spills():
    for spec in (S11, S12):
        tb = [c for c in configs_in_use(spec) if c["TB"] == 1]
        assert tb
        for cfg in tb:
            for post in (0, 9):  # plain; the bias and ReLU fused
                u = jit.compile_kernel(spec, cfg, "sm_90a", post=post).usage
                assert u.spills == 0 and u.stack_frame == 0, (spec.name_expression(cfg, post=post), u)


# ---- on a GPU ---------------------------------------------------------------------------------------

gpu = pytest.mark.gpu


def _weight(N, K, view, dtype=torch.float32):
    """A [N, K] weight: contiguous, or a column slice whose rows start off 16-byte boundaries."""
    if view == "misaligned":
        return torch.randn(N, K + 1, device="cuda", dtype=dtype)[:, 1:]
    return torch.randn(N, K, device="cuda", dtype=dtype)


@gpu
@pytest.mark.parametrize("kernel", ["sgemm_11_warp_tile", "sgemm_12_split_k", "auto"])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 17, 127), (127, 1000, 1022), (1000, 1022, 1022), (1031, 61, 3135),
                                   (256, 256, 65536), (17, 127, 20011), (2048, 2048, 2048)])  # fmt: skip
@pytest.mark.parametrize("view", ["contiguous", "misaligned"])
def test_transposed_b_gives_the_copy_s_bits_and_float64_s_values(kernel, M, N, K, view):
    x, w = torch.randn(M, K, device="cuda"), _weight(N, K, view)
    c = torch.randn(M, N, device="cuda")
    problem = problem_from_tensors(x, w.t(), c, None, alpha=0.75, beta=-0.5)
    spec, cfg = select(problem, kernel)
    d = torch.full((M, N), float("nan"), device="cuda")
    gemmlab.gemm(x, w.t(), c, alpha=0.75, beta=-0.5, kernel=kernel, out=d)
    copy = gemmlab.gemm(x, w.t().contiguous(), c, alpha=0.75, beta=-0.5, kernel=kernel)
    torch.cuda.synchronize()
    report = check_result(d, x, w.t(), c, 0.75, -0.5)
    assert report.passed, report.summary()
    where = f"{spec.id} {cfg.as_dict()}"
    if spec in (S11, S12):
        assert cfg["TB"] == 1, where
        assert torch.equal(d, copy), f"{where}: other bits than on B's row-major copy"


@gpu
@pytest.mark.parametrize("kernel", ["sgemm_11_warp_tile", "sgemm_12_split_k"])
def test_transposed_b_with_nan_in_c_and_beta_zero_and_nan_and_inf_in_the_weight(kernel):
    M, N, K = 300, 200, 40000  # sgemm_12 splits this K into runs
    x, w = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    d = gemmlab.gemm(x, w.t(), c, beta=0.0, kernel=kernel)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all() and check_result(d, x, w.t(), None, 1.0, 0.0).passed
    w[5, 31000], w[9, 7] = float("nan"), float("inf")  # columns 5 and 9 of D: NaN (Inf times both signs)
    d = gemmlab.gemm(x, w.t(), kernel=kernel)
    torch.cuda.synchronize()
    others = torch.ones(N, dtype=torch.bool, device="cuda")
    others[[5, 9]] = False
    assert torch.isnan(d[:, 5]).all() and torch.isnan(d[:, 9]).all() and torch.isfinite(d[:, others]).all()


@gpu
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_linear_in_float32_fuses_the_bias_and_activation_on_the_weight_where_it_lies(activation):
    x, w, bias = torch.randn(1000, 1022, device="cuda"), torch.randn(509, 1022, device="cuda"), torch.randn(509, device="cuda")
    with torch.no_grad():
        d = gemmlab.linear(x, w, bias, activation=activation)
        want = torch.nn.functional.linear(x.double(), w.double(), bias.double())
        want = {None: want, "relu": torch.relu(want), "gelu": torch.nn.functional.gelu(want),
                "silu": torch.nn.functional.silu(want)}[activation]  # fmt: skip
    spec, cfg = select(problem_from_tensors(x, w.t(), None, None))
    assert spec in (S11, S12) and cfg["TB"] == 1
    torch.testing.assert_close(d.double(), want, rtol=1e-5, atol=1e-4)
