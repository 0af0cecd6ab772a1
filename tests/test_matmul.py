"""gemmlab.matmul: torch.matmul's semantics (vectors, one product, batches broadcast against each
other) on gemm and bmm. On the CPU ladder: values against float64 torch.matmul over every form of
operand, empty ones included, the paths it takes, gradients against torch's, argument errors, a
torch.compile graph. On a GPU (marker `gpu`): attention's 4-D products in bf16 against float64,
through bmm's one launch."""

import pytest
import torch

import gemmlab
from gemmlab import batched

SHAPES = [
    ((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((4, 5), (5, 3)), ((1, 1), (1, 1)),
    ((2, 4, 5), (5,)), ((5,), (2, 5, 3)), ((2, 4, 5), (5, 3)), ((4, 5), (2, 5, 3)), ((2, 4, 5), (2, 5, 3)),
    ((2, 1, 4, 5), (3, 5, 6)), ((4, 5), (2, 3, 5, 6)), ((2, 3, 4, 5), (5, 6)), ((2, 3, 7, 17), (2, 3, 17, 127)),
    ((3, 1, 2, 1, 5, 4), (2, 1, 4, 3)),
    ((0, 4, 5), (5, 6)), ((3, 4, 0), (3, 0, 2)), ((2, 0, 3), (2, 3, 4)), ((1, 2), (0, 2, 3)), ((0,), (0,)),
]  # fmt: skip


@pytest.mark.parametrize("sa,sb", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_values_and_shapes_against_float64_torch_matmul(sa, sb):
    a, b = torch.randn(*sa), torch.randn(*sb)
    d = gemmlab.matmul(a, b, device="cpu")
    want = torch.matmul(a.double(), b.double())
    assert d.shape == want.shape and d.dtype == torch.float32, (sa, sb, tuple(d.shape))
    torch.testing.assert_close(d.double(), want, rtol=1e-5, atol=1e-5)


def test_the_paths_it_takes(monkeypatch):
    """One product: one gemm. A batch against a 2-D b: one gemm over a's stacked rows (a view where
    a's matrices follow one another). A batched b: one bmm over the broadcast batch, flattened."""
    gemms, bmms = [], []
    real_gemm, real_bmm = batched.gemm, batched.bmm
    monkeypatch.setattr(batched, "gemm", lambda a, b, *r, **k: gemms.append((a, b)) or real_gemm(a, b, *r, **k))
    monkeypatch.setattr(batched, "bmm", lambda a, b, *r, **k: bmms.append((a.shape, b.shape)) or real_bmm(a, b, *r, **k))
    x = torch.randn(2, 3, 7, 5)
    gemmlab.matmul(x, torch.randn(5, 4), device="cpu")
    (a, _), = gemms
    assert a.shape == (42, 5) and a.data_ptr() == x.data_ptr()  # x's own memory, its rows stacked
    gemms.clear()
    gemmlab.matmul(torch.randn(2, 1, 7, 5), torch.randn(3, 5, 4), device="cpu")
    assert bmms == [((6, 7, 5), (6, 5, 4))]
    gemmlab.matmul(torch.randn(7, 5), torch.randn(3, 5, 4), device="cpu")
    assert bmms[-1] == ((7, 5), (3, 5, 4))  # a shared a stays 2-D: bmm takes it as it is


def test_gradients_match_torch():
    for sa, sb in (((2, 3, 7, 5), (3, 5, 4)), ((5,), (2, 5, 3)), ((4, 7, 5), (5,)), ((2, 3, 7, 5), (5, 4))):
        a, b = torch.randn(*sa, requires_grad=True), torch.randn(*sb, requires_grad=True)
        d = gemmlab.matmul(a, b, device="cpu")
        g = torch.randn(d.shape)
        (d * g).sum().backward()
        a2, b2 = (t.detach().double().requires_grad_() for t in (a, b))
        (torch.matmul(a2, b2) * g.double()).sum().backward()
        torch.testing.assert_close(a.grad.double(), a2.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(b.grad.double(), b2.grad, rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_refused_with_what_to_do():
    with pytest.raises(TypeError, match="a must be a torch tensor"):
        gemmlab.matmul([1.0], torch.randn(1))
    with pytest.raises(ValueError, match="scalar"):
        gemmlab.matmul(torch.tensor(2.0), torch.randn(3))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemmlab.matmul(torch.randn(3, 4), torch.randn(5, 2), device="cpu")
    with pytest.raises(ValueError, match="do not broadcast"):
        gemmlab.matmul(torch.randn(2, 3, 4), torch.randn(3, 4, 5), device="cpu")


def test_a_compiled_matmul_is_one_graph():
    a, b = torch.randn(2, 3, 5, 4), torch.randn(3, 4, 6)
    f = torch.compile(lambda a, b: gemmlab.matmul(a, b, device="cpu"), fullgraph=True)
    torch.testing.assert_close(f(a, b), torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_attention_products_against_float64_on_the_gpu():
    """q @ k^T and p @ v of [batch, heads, tokens, 64] in bf16: one bmm over batch x heads, each
    product against float64."""
    q = torch.randn(2, 8, 127, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 8, 127, 64, device="cuda", dtype=torch.bfloat16)
    for a, b in ((q, k.transpose(-2, -1)), (torch.softmax(q.float() @ k.float().transpose(-2, -1), -1).bfloat16(), k)):
        d = gemmlab.matmul(a, b)
        want = torch.matmul(a.double(), b.double())
        assert d.shape == want.shape and d.dtype == torch.bfloat16
        err = float((d.double() - want).norm() / want.norm())
        assert err < 1e-2, err
