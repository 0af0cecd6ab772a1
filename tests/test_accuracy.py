"""gemmlab accuracy (gemmlab.bench.accuracy): the input sets, the cases, the table and verdict from a
record, the command's refusal without a GPU (CPU tests); on a GPU (marker `gpu`), a reduced set of
cases through the same functions, held to the contract."""

import pytest
import torch

from gemmlab.bench import accuracy
from gemmlab.reference import split_tf32

M, N, K = 37, 29, 64  # drawn on the CPU: small, odd


def _draw(inputs: str, seed: int = 5):
    return accuracy.draw(inputs, M, N, K, seed, "cpu")


def test_cases_cover_every_k_and_ten_shapes():
    every = accuracy.cases()
    assert [c.K for c in every[: len(accuracy.SHAPES)]] == [1, 2, 8, 32, 64, 256, 1024, 4096, 16384, 65536]
    assert len({(c.M, c.N, c.K) for c in every}) >= 10 and any(c.M % 2 and c.N % 2 for c in every)
    assert {c.inputs for c in every} == set(accuracy.INPUTS) and len(every) == len(accuracy.INPUTS) * len(accuracy.SHAPES)
    assert set(accuracy.CONTRACT_INPUTS) == {"normal", "uniform", "wide"}
    for c in every:  # A and B in float64 stay under 1.2 GB
        assert 8 * (c.M + c.N) * c.K <= 1.2e9, c
    assert accuracy.cases(["wide"], [4096]) == [accuracy.AccuracyCase("wide", 1023, 1025, 4096)]
    with pytest.raises(ValueError, match="inputs 'huge'"):
        accuracy.cases(["huge"])
    with pytest.raises(ValueError, match="K=3: one of 1, 2, 8"):
        accuracy.cases(None, [3])


def test_seeds_are_fixed_by_the_case_and_differ_between_cases():
    every = accuracy.cases()
    assert len({c.seed for c in every}) == len(every)
    assert accuracy.AccuracyCase("normal", 1024, 1024, 64).seed == accuracy.AccuracyCase("normal", 1024, 1024, 64).seed
    assert "seed=" in every[0].label()


@pytest.mark.parametrize("inputs", list(accuracy.INPUTS))
def test_inputs_are_deterministic_finite_float32(inputs):
    first, again, other = _draw(inputs), _draw(inputs), _draw(inputs, seed=6)
    for t in (first.a, first.b):
        assert t.dtype == torch.float32 and torch.isfinite(t).all()
    assert first.a.shape == (M, K) and first.b.shape == (K, N)
    assert torch.equal(first.a, again.a) and torch.equal(first.b, again.b)
    assert not torch.equal(first.a, other.a)


def test_pow2_is_exact_and_refuses_subnormal_exponents():
    e = torch.arange(-126, 128)
    assert torch.equal(accuracy.pow2(e).double(), torch.exp2(e.double()))
    with pytest.raises(ValueError, match="exponents in"):
        accuracy.pow2(torch.tensor([-127]))


@pytest.mark.parametrize("inputs,a_axis,b_axis", [("wide", 1, 0), ("wide-k", 0, 1)])
def test_wide_scales_are_whole_powers_of_two_in_range(inputs, a_axis, b_axis):
    """wide: rows of A and columns of B scaled; wide-k: A's columns and B's rows. Exponents are
    integers in [-30, 30], both ends reachable, and the scaled values divide back to randn's."""
    ops = _draw(inputs)
    for e in (ops.a_exp, ops.b_exp):
        assert e.dtype == torch.int32 and int(e.min()) >= -accuracy.WIDE and int(e.max()) <= accuracy.WIDE
    many = accuracy.draw(inputs, 400, 400, 400, 1, "cpu")
    assert {int(many.a_exp.min()), int(many.a_exp.max())} == {-accuracy.WIDE, accuracy.WIDE}
    a_base = ops.a / accuracy.pow2(ops.a_exp).unsqueeze(a_axis)
    b_base = ops.b / accuracy.pow2(ops.b_exp).unsqueeze(b_axis)
    for base in (a_base, b_base):  # randn's values: nothing else was scaled
        assert base.abs().max() < 8 and base.abs().max() > 0.5
    assert torch.equal(a_base * accuracy.pow2(ops.a_exp).unsqueeze(a_axis), ops.a)  # exact scaling


def test_near_underflow_keeps_every_product_and_sum_normal_and_small_parts_subnormal():
    """A in [2^-126, 2^-119), B in [1, 2): products and sums normal fp32 values (at least 2^-126),
    while A's TF32 small parts fall below 2^-126, among the subnormals."""
    ops = _draw("near-underflow")
    tiny = 2.0**-126
    assert (ops.a >= tiny).all() and (ops.a < 2.0**-119).all() and (ops.b >= 1).all() and (ops.b < 2).all()
    lo, hi = accuracy.UNDERFLOW_EXP
    assert int(ops.a_exp.min()) >= lo and int(ops.a_exp.max()) <= hi and ops.b_exp is None
    assert ((ops.a.view(torch.int32) >> 23) - 127).flatten().tolist() == ops.a_exp.tolist()  # m 2^e, m in [1, 2)
    assert ((ops.a.double()[:, :, None] * ops.b.double()[None]) >= tiny).all()
    assert ((ops.a.double() @ ops.b.double()) >= tiny).all()
    _, small = split_tf32(ops.a)
    nonzero = small != 0
    assert nonzero.any() and (small[nonzero].abs() < tiny).all()


def test_ratio_is_ours_over_sgemm_and_none_where_unbounded():
    assert accuracy.ratio(2e-7, 4e-7) == 0.5
    assert accuracy.ratio(0.0, 0.0) == 1.0
    assert accuracy.ratio(1e-7, 0.0) is None and accuracy.ratio(None, 1e-7) is None


def test_error_terms_are_normwise_and_max_over_the_largest_element():
    ref = torch.tensor([[4.0, -2.0], [1.0, 0.0]], dtype=torch.float64)
    d = torch.tensor([[4.5, -2.0], [1.0, 0.25]])
    rel, largest, bad = accuracy.error_terms(d, ref).tolist()
    assert rel == pytest.approx((0.5**2 + 0.25**2) ** 0.5 / (16 + 4 + 1) ** 0.5)
    assert largest == 0.5 / 4 and bad == 0
    assert accuracy.error_terms(torch.tensor([[float("nan"), 0.0]]), ref[:1]).tolist()[2] == 1
