"""FP32 step 12 reads a B stored transposed (x @ w.t(), a Linear's forward pass) where it lies
(TB = 1), and auto gives it such problems where the other steps would copy B on every call
(configs.fp32.transposed_b_in_place): on the CPU, the choice and the builds; on a GPU, the same bits
as step 12 on a row-major copy of B (the products are added in the same order), values against
float64 at shapes that fit no tile, B's rows unaligned, split K with both reductions, NaN in C with
beta = 0, NaN and Inf in the weight, and the fused bias and activation."""

import pytest
import torch

import gemmlab
from gemmlab import api, jit, registry
from gemmlab.configs import configs_in_use, select
from gemmlab.configs.fp32 import transposed_b_in_place
from gemmlab.problem import fresh_problem, problem_from_tensors
from gemmlab.reference import check_result

S11, S12 = registry.get("sgemm_11_warp_tile"), registry.get("sgemm_12_split_k")


@pytest.mark.parametrize("M,N,K,in_place", [
    (2048, 4096, 4096, True),   # step 11's size: step 12 in place
    (8192, 8192, 8192, True),
    (256, 4096, 4096, True),    # step 12's own
    (256, 256, 65536, True),
    (1, 4096, 4096, True),      # few rows (step 13 on a copy): step 12 in place
    (16, 14336, 4096, True),
    (64, 4096, 4096, True),     # step 15 on a copy, below TRANSPOSED_B_COPY_ROWS
    (512, 512, 512, False),     # step 15 from 128 rows on: the copy's share is small
    (4096, 4096, 128, False),
])  # fmt: skip
def test_auto_reads_a_transposed_b_in_place_where_the_copy_would_cost(M, N, K, in_place):
    nn = fresh_problem(M, N, K, torch.float32)  # (meta tensors: what auto sees on a GPU)
    nt = fresh_problem(M, N, K, torch.float32, layout="nt")
    spec_nn, cfg_nn = select(nn, device="cuda")
    spec, cfg = select(nt, device="cuda")
    assert spec.reads_in_place(nt, cfg) == in_place, (spec.id, cfg.as_dict())
    if in_place:
        assert spec is S12 and cfg["TB"] == 1
        assert transposed_b_in_place(nt, spec_nn) == (spec_nn is not S12)
    else:
        assert (spec, cfg) == (spec_nn, cfg_nn)


def test_tf32_and_an_a_stored_transposed_keep_their_choice():
    tn = fresh_problem(2048, 2048, 2048, torch.float32, layout="tn")
    spec, cfg = select(tn, device="cuda")
    assert spec is S11 and not spec.reads_in_place(tn, cfg)
    tf32 = fresh_problem(2048, 2048, 2048, torch.float32, layout="nt", precision="tf32")
    assert select(tf32, device="cuda")[0].id == "tc08_tf32"


def test_every_transposed_b_config_auto_can_pick_compiles_without_spills():
    tb = [c for c in configs_in_use(S12) if c["TB"] == 1]
    assert tb and "TB" not in S11.default_config().as_dict()
    for cfg in tb:
        for post in (0, 9):  # plain; the bias and ReLU fused
            u = jit.compile_kernel(S12, cfg, "sm_90a", post=post).usage
            assert u.spills == 0 and u.stack_frame == 0, (S12.name_expression(cfg, post=post), u)


# ---- on a GPU ---------------------------------------------------------------------------------------

gpu = pytest.mark.gpu


def _weight(N, K, view, dtype=torch.float32):
    """A [N, K] weight: contiguous, or a column slice whose rows start off 16-byte boundaries."""
    if view == "misaligned":
        return torch.randn(N, K + 1, device="cuda", dtype=dtype)[:, 1:]
    return torch.randn(N, K, device="cuda", dtype=dtype)


@gpu
@pytest.mark.parametrize("kernel", ["sgemm_12_split_k", "auto"])
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
    if spec is S12:  # (auto's other picks: few columns, or one element, which is no transposed view)
        assert cfg["TB"] == int(problem.b.trans), where
        copy_spec, copy_cfg = select(problem_from_tensors(x, w.t().contiguous(), c, None, alpha=0.75, beta=-0.5), kernel)
        if copy_spec is S12 and {**copy_cfg.as_dict(), "TB": cfg["TB"]} == cfg.as_dict():
            assert torch.equal(d, copy), f"{where}: other bits than on B's row-major copy"


@gpu
@pytest.mark.parametrize("kernel", ["sgemm_12_split_k", "auto"])
def test_transposed_b_with_nan_in_c_and_beta_zero_and_nan_and_inf_in_the_weight(kernel):
    M, N, K = 300, 200, 40000  # sgemm_12 splits this K into runs
    x, w = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    d = gemmlab.gemm(x, w.t(), c, beta=0.0, kernel=kernel)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all() and check_result(d, x, w.t(), None, 1.0, 0.0).passed
    w[5, 31000], w[9, 7] = float("nan"), float("inf")  # column 5 of D: NaN; column 9: x[:, 7]'s sign of Inf
    d = gemmlab.gemm(x, w.t(), kernel=kernel)
    torch.cuda.synchronize()
    others = torch.ones(N, dtype=torch.bool, device="cuda")
    others[[5, 9]] = False
    assert torch.isnan(d[:, 5]).all() and torch.isfinite(d[:, others]).all()
    assert torch.equal(d[:, 9], torch.where(x[:, 7] > 0, float("inf"), float("-inf")))


@gpu
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_linear_in_float32_fuses_the_bias_and_activation_on_the_weight_where_it_lies(activation):
    x, w, bias = torch.randn(100, 1022, device="cuda"), torch.randn(509, 1022, device="cuda"), torch.randn(509, device="cuda")
    with torch.no_grad():
        d = gemmlab.linear(x, w, bias, activation=activation)
        want = torch.nn.functional.linear(x.double(), w.double(), bias.double())
        want = {None: want, "relu": torch.relu(want), "gelu": torch.nn.functional.gelu(want),
                "silu": torch.nn.functional.silu(want)}[activation]  # fmt: skip
    spec, cfg = select(problem_from_tensors(x, w.t(), None, None))
    assert spec is S12 and cfg["TB"] == 1
    torch.testing.assert_close(d.double(), want, rtol=1e-5, atol=1e-4)


# ---- a few rows: D^T = w x^T on step 14 (api._few_rows_as_columns) ------------------------------------


@pytest.mark.parametrize("M,layout,dtype,precision,K,expected", [
    (1, "nt", torch.float32, "fp32", 4096, True),
    (16, "nt", torch.float32, "fp32", 4096, True),
    (17, "nt", torch.float32, "fp32", 4096, False),   # past FEW_ROWS_AS_COLUMNS: step 12 in place
    (1, "nn", torch.float32, "fp32", 4096, False),    # a row-major B: step 13 streams it
    (2, "tt", torch.float32, "fp32", 4096, False),    # (one row of x is row-major either way)
    (1, "nt", torch.float32, "tf32", 4096, False),
    (1, "nt", torch.bfloat16, "fp32", 4096, False),   # tc10 reads w.t() in place
    (1, "nt", torch.float32, "fp32", 0, False),       # nothing to multiply: C and the epilogue alone
])  # fmt: skip
def test_a_few_rows_of_x_at_w_t_run_as_columns_of_d_t(M, layout, dtype, precision, K, expected):
    problem = fresh_problem(M, 4096, K, dtype, layout=layout, precision=precision)
    assert api.few_rows_as_columns(problem) == expected
    if expected:
        columns = api.columns_problem(problem)
        assert (columns.M, columns.N, columns.K, columns.layout) == (4096, M, K, "nn")
        assert select(columns, device="cuda")[0].id == "sgemm_14_few_columns"


def test_compile_warms_step_14_for_a_few_rows_of_x_at_w_t():
    jobs = api.compile_jobs([fresh_problem(8, 4096, 4096, torch.float32, layout="nt")])
    assert [spec.id for spec, *_ in jobs] == ["sgemm_14_few_columns"]


def _case(M, N, K, view, c_kind, bias, out_kind):
    x, w = torch.randn(M, K, device="cuda"), _weight(N, K, view)
    c = {"none": None, "random": torch.randn(M, N, device="cuda"), "nan": torch.full((M, N), float("nan"), device="cuda")}[c_kind]
    b = torch.randn(N, device="cuda") if bias else None
    out = None
    if out_kind == "strided":  # rows N + 3 apart, poisoned
        out = torch.full((M, N + 3), float("nan"), device="cuda")[:, :N]
    elif out_kind == "c":
        out = c
    return x, w, c, b, out


@gpu
@pytest.mark.parametrize("M", [1, 2, 7, 16])
@pytest.mark.parametrize("N,K", [(1, 1), (17, 127), (1000, 1022), (4096, 4099)])
@pytest.mark.parametrize("view", ["contiguous", "misaligned"])
@pytest.mark.parametrize("c_kind,beta,bias,activation,out_kind", [
    ("none", 0.0, False, None, "new"),
    ("random", -0.5, False, None, "strided"),
    ("nan", 0.0, True, "gelu", "new"),      # beta 0: C never read, NaN or not; the bias goes in as C
    ("random", 1.5, True, "silu", "new"),   # beta and a bias: the bias and the activation after, by torch
    ("random", 0.5, False, "relu", "c"),    # in place over C
])  # fmt: skip
def test_a_few_rows_of_x_at_w_t_against_float64(M, N, K, view, c_kind, beta, bias, activation, out_kind):
    from gemmlab.reference import check_result

    x, w, c, b, out = _case(M, N, K, view, c_kind, bias, out_kind)
    c_before = None if c is None else c.clone()
    d = gemmlab.gemm(x, w.t(), c, alpha=0.75, beta=beta, out=out, bias=b, activation=activation)
    torch.cuda.synchronize()
    if out is not None:
        assert d is out
    report = check_result(d, x, w.t(), c_before if beta != 0 else None, 0.75, beta, bias=b, activation=activation)
    assert report.passed, report.summary()
    if c is not None and out_kind != "c":
        assert torch.equal(c.isnan(), c_before.isnan()) and torch.equal(c.nan_to_num(), c_before.nan_to_num())


@gpu
def test_a_few_rows_of_x_at_w_t_keep_nan_and_inf_where_they_belong():
    x, w = torch.randn(4, 3000, device="cuda"), torch.randn(2000, 3000, device="cuda")
    x[1, 17] = float("nan")
    w[5, 2999] = float("inf")
    d = gemmlab.gemm(x, w.t())
    torch.cuda.synchronize()
    assert torch.isnan(d[1]).all()
    rows = torch.tensor([0, 2, 3], device="cuda")
    assert torch.equal(d[rows, 5], torch.where(x[rows, 2999] > 0, float("inf"), float("-inf")))
    others = torch.ones(2000, dtype=torch.bool, device="cuda")
    others[5] = False
    assert torch.isfinite(d[rows][:, others]).all()
