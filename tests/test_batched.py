"""gemmlab.bmm: a batch of products as torch.bmm and torch.matmul take them, on the CPU ladder here
(values, the one-launch path for a shared B, gradients, argument errors) and on the GPU (marker
`gpu`) in bf16 and float32 against float64."""

import pytest
import torch

import gemmlab
from gemmlab import batched
from gemmlab.reference import check_result


def _ref(a, b, c=None, alpha=1.0, beta=0.0):
    d = alpha * torch.matmul(a.double(), b.double())
    return d + beta * c.double() if c is not None else d


@pytest.mark.parametrize("B,M,K,N", [(1, 1, 1, 1), (3, 7, 5, 17), (4, 33, 1, 9), (2, 1, 127, 3)])
@pytest.mark.parametrize("form", ["both", "shared_b", "shared_a"])
def test_values_against_float64_on_the_cpu(B, M, K, N, form):
    a = torch.randn(M, K) if form == "shared_a" else torch.randn(B, M, K)
    b = torch.randn(K, N) if form == "shared_b" else torch.randn(B, K, N)
    c = torch.randn(B, M, N)
    d = gemmlab.bmm(a, b, c, alpha=1.5, beta=-0.5, device="cpu")
    assert d.shape == (B, M, N)
    torch.testing.assert_close(d.double(), _ref(a, b, c, 1.5, -0.5), rtol=1e-4, atol=1e-4)


def test_a_shared_b_is_one_gemm_over_the_stacked_rows(monkeypatch):
    calls = []
    real = batched.gemm

    def spy(a, b, c=None, **kw):
        calls.append((tuple(a.shape), a.untyped_storage().data_ptr()))
        return real(a, b, c, **kw)

    monkeypatch.setattr(batched, "gemm", spy)
    a = torch.randn(4, 6, 5)
    gemmlab.bmm(a, torch.randn(5, 3), device="cpu")
    assert calls == [((24, 5), a.untyped_storage().data_ptr())]  # the batch's rows, not a copy
    calls.clear()
    gemmlab.bmm(a.transpose(0, 1), torch.randn(5, 3), device="cpu")  # matrices not one after another
    assert len(calls) == 6
    calls.clear()
    gemmlab.bmm(a, torch.randn(4, 5, 3), device="cpu")  # distinct B matrices: one launch each
    assert len(calls) == 4


def test_gradients_match_torch_on_the_cpu():
    a = torch.randn(3, 7, 5, requires_grad=True)
    b = torch.randn(3, 5, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    g = torch.randn(3, 7, 4)
    (gemmlab.bmm(a, b, device="cpu") * g).sum().backward()
    (gemmlab.bmm(a, w, device="cpu") * g).sum().backward()
    a2, b2, w2 = (t.detach().double().requires_grad_() for t in (a, b, w))
    ((torch.bmm(a2, b2) + torch.matmul(a2, w2)) * g.double()).sum().backward()
    for got, want in ((a.grad, a2.grad), (b.grad, b2.grad), (w.grad, w2.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_bias_and_activation_over_the_batch():
    a, b, bias = torch.randn(2, 5, 6), torch.randn(6, 3), torch.randn(3)
    d = gemmlab.bmm(a, b, bias=bias, activation="silu", device="cpu")
    torch.testing.assert_close(d.double(), torch.nn.functional.silu(_ref(a, b) + bias.double()), rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="neither a nor b has a batch"):
        gemmlab.bmm(torch.randn(3, 4), torch.randn(4, 5), device="cpu")
    with pytest.raises(ValueError, match="batch sizes differ"):
        gemmlab.bmm(torch.randn(2, 3, 4), torch.randn(3, 4, 5), device="cpu")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemmlab.bmm(torch.randn(2, 3, 4), torch.randn(2, 5, 5), device="cpu")
    with pytest.raises(ValueError, match=r"must be \[batch, rows, cols\]"):
        gemmlab.bmm(torch.randn(2, 2, 3, 4), torch.randn(4, 5), device="cpu")
    with pytest.raises(ValueError, match=r"c must be \[2, 3, 5\]"):
        gemmlab.bmm(torch.randn(2, 3, 4), torch.randn(4, 5), torch.randn(3, 5), beta=1.0, device="cpu")
    with pytest.raises(TypeError, match="torch tensor"):
        gemmlab.bmm([[1.0]], torch.randn(2, 1, 1), device="cpu")


def test_an_empty_batch():
    d = gemmlab.bmm(torch.randn(0, 3, 4), torch.randn(0, 4, 5), device="cpu")
    assert d.shape == (0, 3, 5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("form", ["both", "shared_b", "shared_a"])
def test_values_against_float64_on_the_gpu(dtype, form):
    for B, M, K, N in ((8, 512, 512, 512), (3, 127, 1000, 33), (17, 1, 64, 7)):
        a = torch.randn(M, K, device="cuda").to(dtype) if form == "shared_a" else torch.randn(B, M, K, device="cuda").to(dtype)
        b = torch.randn(K, N, device="cuda").to(dtype) if form == "shared_b" else torch.randn(B, K, N, device="cuda").to(dtype)
        d = gemmlab.bmm(a, b)
        torch.cuda.synchronize()
        for i in range(B):
            rep = check_result(d[i], a[i] if a.dim() == 3 else a, b[i] if b.dim() == 3 else b)
            assert rep.passed, f"{form} {B}x{M}x{K}x{N} [{i}]: {rep.summary()}"


def test_a_compiled_bmm_is_one_graph():
    a, b, w = torch.randn(3, 5, 4), torch.randn(3, 4, 6), torch.randn(4, 6)
    f = torch.compile(lambda a, b: gemmlab.bmm(a, b, activation="relu", device="cpu"), fullgraph=True)
    torch.testing.assert_close(f(a, b), torch.relu(torch.bmm(a, b)), rtol=1e-5, atol=1e-5)
    g = torch.compile(lambda a: gemmlab.bmm(a, w, device="cpu"), fullgraph=True)  # the one-GEMM path
    torch.testing.assert_close(g(a), a @ w, rtol=1e-5, atol=1e-5)


def test_fake_tensors_take_the_per_matrix_path():
    """Over fake tensors (a trace outside torch.compile's own, such as AOT autograd's), the one-launch
    path, which is no operator yet, refuses, so bmm goes through gemm's operator; plain tensors are
    not refused for being plain."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(4, 7, 64, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(4, 64, 32, device="cuda", dtype=torch.bfloat16)
        why = batched._one_launch_refusal(a, b, None, 1.0, 0.0, "auto", None, None, None)
    assert "fake tensors" in why
    a, b = torch.randn(4, 7, 64), torch.randn(4, 64, 32)
    assert "fake" not in (batched._one_launch_refusal(a, b, None, 1.0, 0.0, "auto", None, None, None) or "")


# ---- torch.func.vmap over gemm (the operator's vmap rule, batched._gemm_vmap) ---------------------

_A, _B, _C = (7, 5), (5, 3), (7, 3)


def _vmapped(case: str):
    """A function to vmap, its mapped inputs and in_dims, and what torch computes for it."""
    g = torch.Generator().manual_seed(3)
    a, b, c = (torch.randn(4, *s, generator=g) for s in (_A, _B, _C))
    bias = torch.randn(4, 3, generator=g)
    on = dict(device="cpu")
    return {
        "a": (lambda x: gemmlab.gemm(x, b[0], **on), (a,), 0, a @ b[0]),
        "a and b": (lambda x, y: gemmlab.gemm(x, y, **on), (a, b), 0, a @ b),
        "b": (lambda y: gemmlab.gemm(a[0], y, **on), (b,), 0, a[0] @ b),
        "a, c shared": (lambda x: gemmlab.gemm(x, b[0], c[0], beta=0.5, **on), (a,), 0, a @ b[0] + 0.5 * c[0]),
        "a and c": (lambda x, z: gemmlab.gemm(x, b[0], z, alpha=2.0, beta=0.5, **on), (a, c), 0, 2 * a @ b[0] + 0.5 * c),
        "c": (lambda z: gemmlab.gemm(a[0], b[0], z, beta=1.0, **on), (c,), 0, a[0] @ b[0] + c),
        "a and bias": (lambda x, t: gemmlab.gemm(x, b[0], bias=t, activation="relu", **on), (a, bias), 0,
                       torch.relu(a @ b[0] + bias[:, None])),
        "a at dim 1": (lambda x: gemmlab.gemm(x, b[0], **on), (a.transpose(0, 1),), 1, a @ b[0]),
        "linear": (lambda x: gemmlab.linear(x, b[0].t(), bias[0]), (a,), 0, a @ b[0] + bias[0]),
        "matmul": (lambda x: gemmlab.matmul(x, b[0], **on), (a,), 0, a @ b[0]),
    }[case]


@pytest.mark.parametrize("case", ["a", "a and b", "b", "a, c shared", "a and c", "c", "a and bias", "a at dim 1",
                                  "linear", "matmul"])  # fmt: skip
def test_vmap_over_gemm_matches_torch(case):
    f, inputs, in_dims, want = _vmapped(case)
    got = torch.func.vmap(f, in_dims=in_dims)(*inputs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_nested_vmap_and_gradients_through_it():
    x = torch.randn(2, 4, *_A, requires_grad=True)
    b = torch.randn(*_B, requires_grad=True)
    d = torch.func.vmap(torch.func.vmap(lambda t: gemmlab.gemm(t, b, device="cpu")))(x)
    torch.testing.assert_close(d, x @ b, rtol=1e-5, atol=1e-5)
    weight = torch.randn(2, 4, *_C)
    (d * weight).sum().backward()
    torch.testing.assert_close(x.grad, weight @ b.detach().t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad, (x.detach().transpose(-2, -1) @ weight).sum((0, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_vmap_over_gemm_on_the_gpu(dtype):
    """A batch under vmap: one bmm over it, against float64."""
    a, b = torch.randn(6, 127, 1000, device="cuda").to(dtype), torch.randn(6, 1000, 33, device="cuda").to(dtype)
    bias = torch.randn(33, device="cuda").to(dtype)
    d = torch.func.vmap(lambda x, y: gemmlab.gemm(x, y, bias=bias))(a, b)
    want = a.double() @ b.double() + bias.double()
    assert d.shape == (6, 127, 33) and d.dtype == dtype
    assert ((d.double() - want).norm() / want.norm()).item() < (1e-2 if dtype == torch.bfloat16 else 1e-5)
