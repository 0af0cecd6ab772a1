"""The checks can fail: wrong, missing or NaN results are caught; right ones pass."""

import torch

from gemmlab.reference import check_result, compare, reference, tolerance


def rand(*s):
    return torch.rand(s, dtype=torch.float32) * 2 - 1


def test_fp32_result_passes_and_metrics_are_small():
    a, b = rand(200, 300), rand(300, 150)
    rep = check_result(a @ b, a, b)
    assert rep.passed and rep.rel_fro < 1e-6 and rep.nonfinite == 0


def test_alpha_beta_reference():
    a, b, c = rand(20, 30), rand(30, 10), rand(20, 10)
    d = 1.5 * (a @ b) - 0.25 * c
    assert check_result(d, a, b, c, 1.5, -0.25).passed
    assert not check_result(d, a, b, c, 1.5, 0.25).passed


def test_one_missing_k_term_fails_at_large_k():
    a, b = rand(64, 8192), rand(8192, 64)
    wrong = a[:, 1:] @ b[1:, :]
    assert not check_result(wrong, a, b).passed


def test_fp32_results_of_16_bit_inputs_get_the_tensor_cores_bound_and_still_catch_a_missing_term():
    """Tensor-core fp32 accumulation loses precision linearly in K (reference.py): past K = 4000 an
    fp32 result of bf16/fp16 inputs gets K x 2.5e-9, fp32 inputs keep their bound; at K = 65536 a
    result one k-term short still fails, and an fp32 sum of the bf16 products passes."""
    assert tolerance(torch.float32, input_dtype=torch.bfloat16, k=2048).rel_fro == 1e-5
    assert tolerance(torch.float32, input_dtype=torch.float16, k=65536).rel_fro == 65536 * 2.5e-9
    assert tolerance(torch.float32, input_dtype=torch.float32, k=65536).rel_fro == 1e-5
    assert tolerance(torch.bfloat16, input_dtype=torch.bfloat16, k=65536).rel_fro == 1e-2
    k = 65536
    a, b = rand(8, k).to(torch.bfloat16), rand(k, 8).to(torch.bfloat16)
    a32, b32 = a.float(), b.float()
    assert check_result(a32 @ b32, a, b).passed
    assert not check_result(a32[:, 1:] @ b32[1:, :], a, b).passed


def test_one_wrong_element_fails():
    a, b = rand(100, 100), rand(100, 100)
    d = a @ b
    d[37, 71] += 0.01
    rep = check_result(d, a, b)
    assert not rep.passed and rep.max_scaled > tolerance(torch.float32).max_scaled


def test_nan_or_unwritten_output_fails():
    a, b = rand(50, 40), rand(40, 30)
    d = a @ b
    d[0, 0] = float("nan")
    rep = check_result(d, a, b)
    assert not rep.passed and rep.nonfinite == 1
    d[0, 0] = float("inf")
    assert not check_result(d, a, b).passed


def test_beta_zero_reference_ignores_nan_c():
    a, b = rand(10, 5), rand(5, 10)
    c = torch.full((10, 10), float("nan"))
    ref, scale = reference(a, b, c, 2.0, 0.0)
    assert torch.isfinite(ref).all() and torch.isfinite(scale).all()


def test_k_zero_and_empty():
    a, b, c = rand(4, 0), rand(0, 3), rand(4, 3)
    assert check_result(0.5 * c, a, b, c, 1.0, 0.5).passed
    assert not check_result(0.5 * c + 1e-3, a, b, c, 1.0, 0.5).passed
    assert check_result(torch.empty(0, 3), rand(0, 2), rand(2, 3)).passed


def test_compare_uses_float64():
    a, b = rand(30, 30), rand(30, 30)
    ref, scale = reference(a, b)
    assert ref.dtype == torch.float64
    assert compare(ref.float(), ref, scale, tolerance(torch.float32)).passed


def test_fp16_subnormal_outputs_are_not_held_against_the_kernel():
    a = torch.full((4, 1), 0.004, dtype=torch.float16)
    b = torch.full((1, 4), 0.003, dtype=torch.float16)
    d = (a.float() @ b.float()).half()  # 1.2e-5: an fp16 subnormal, correctly rounded
    assert check_result(d, a, b).passed
    assert not check_result(d + 1e-4, a, b).passed  # a real error is still caught


def test_cancelling_terms_are_judged_against_their_size():
    """D = alpha A B + beta C where the two terms nearly cancel: rel_fro is taken over
    ||alpha A B|| + ||beta C||, so a TF32-sized rounding of the product passes (it failed a 1 x 1 x 1
    GPU test against ||D||), and an error of the size of D still fails."""
    a, b, c = torch.tensor([[0.9794]]), torch.tensor([[0.8215]]), torch.tensor([[0.5234]])
    exact = 0.5 * a.double() @ b.double() - c.double()
    rounded = (exact + 0.5 * 0.8 * 6e-4).float()  # one TF32 rounding of the product
    assert check_result(rounded, a, b, c, 0.5, -1.0, precision="tf32").passed
    assert not check_result((exact * 1.05).float(), a, b, c, 0.5, -1.0, precision="tf32").passed


def test_a_cancelling_dot_product_is_judged_against_its_terms():
    """A 1 x 1 x 64 product whose 64 terms nearly cancel: fp32 summation error relative to the tiny
    result can exceed the fp32 bound (hypothesis found M=1 N=1 K=64 at rel_fro 5.5e-5 with
    max_scaled 1.5e-8); over the size of the terms it is ordinary. A real error still fails."""
    v = torch.linspace(1, 2, 64)
    v[1::2] = v[0::2]
    a = torch.tensor([[1.0, -1.0] * 32]) * v  # pairs +x, -x
    b = v.clone().reshape(64, 1)
    b[0] += 1e-3  # the pairs cancel but for ~1e-3; the terms are ~1-4 each
    exact = a.double() @ b.double()
    assert 1e-4 < abs(float(exact)) < 1e-2
    tnorm = float((a.double().square().sum(0) * b.double().square().sum(1)).sum().sqrt())
    off = exact + 2e-7 * tnorm  # summation-sized error: ~4e-3 of the result itself
    assert float((off - exact).abs() / exact.abs()) > 1e-5  # the old rel_fro (over ||D||) failed this
    assert check_result(off.float(), a, b).passed
    assert not check_result((exact + 1e-3 * tnorm).float(), a, b).passed


def test_fused_epilogue_failures_passes_the_cpu_ladder_and_catches_a_missing_bias(monkeypatch):
    import gemmlab
    from gemmlab.reference import fused_epilogue_failures

    a, b, bias = torch.randn(17, 33), torch.randn(33, 9), torch.randn(9)
    for activation in (None, "relu", "gelu"):
        assert fused_epilogue_failures(a, b, "auto", bias, activation, device="cpu") == []
    gemm = gemmlab.gemm
    monkeypatch.setattr(gemmlab, "gemm", lambda *args, bias=None, **kw: gemm(*args, **kw))  # drops the bias
    failed = fused_epilogue_failures(a, b, "auto", bias, None, device="cpu")
    assert len(failed) == 2 and all("beta=" in f for f in failed)

