"""torch.ops.gemmlab.gemm: registration, fake shapes, gradients and torch.compile. The CPU ladder
runs the operator here; the GPU tests (marker `gpu`) run the CUDA kernels through it."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.library import opcheck

import gemmlab
from gemmlab import ops

SHAPES = [(1, 1, 1), (7, 5, 3), (17, 1, 127), (127, 33, 1)]


def _leaf(*shape, dtype=torch.float32, device="cpu", transposed=False):
    """A random leaf that requires grad: row-major, or the transposed view of a row-major matrix."""
    t = torch.randn(*(shape[::-1] if transposed else shape), dtype=dtype, device=device)
    return (t.t() if transposed else t).detach().requires_grad_()


def _torch_grads(a, b, c, alpha, beta, weight):
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    c2 = c.detach().double().requires_grad_() if c is not None else None
    d = alpha * a2 @ b2 + (beta * c2 if c2 is not None else 0)
    (d * weight.double()).sum().backward()
    return d, a2.grad, b2.grad, c2.grad if c2 is not None else None


def test_the_operator_is_registered_with_its_schema():
    schema = str(torch.ops.gemmlab.gemm.default._schema)
    assert schema == ("gemmlab::gemm(Tensor a, Tensor b, Tensor? c, float alpha, float beta, str kernel, str precision, "
                      "ScalarType? out_dtype, Tensor? bias=None, str? activation=None) -> Tensor")  # fmt: skip


@pytest.mark.parametrize("with_c", [False, True])
def test_opcheck_on_the_cpu_ladder(with_c):
    a, b = _leaf(7, 5), _leaf(5, 3, transposed=True)
    c = _leaf(7, 3) if with_c else None
    opcheck(torch.ops.gemmlab.gemm.default, (a, b, c, 1.5, -0.5 if with_c else 0.0, "auto", "fp32", None))


def test_fake_shapes_on_cuda_tensors_without_a_gpu():
    with FakeTensorMode():
        a = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(100, 200, device="cuda", dtype=torch.bfloat16).t()
        d = torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", torch.float32)
        assert (d.shape, d.dtype, d.device.type) == ((300, 100), torch.float32, "cuda")
        assert torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", None).dtype == torch.bfloat16
        with pytest.raises(RuntimeError, match="inner dimensions differ"):
            torch.ops.gemmlab.gemm(a, a, None, 1.0, 0.0, "auto", "fp32", None)


@pytest.mark.parametrize("M,K,N", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "tt"])
def test_gradients_match_torch_on_the_cpu(M, K, N, layout):
    a, b = _leaf(M, K, transposed=layout[0] == "t"), _leaf(K, N, transposed=layout[1] == "t")
    c = _leaf(M, N)
    weight = torch.randn(M, N)
    d = gemmlab.gemm(a, b, c, alpha=1.5, beta=-0.75, device="cpu")
    assert d.grad_fn is not None
    (d * weight).sum().backward()
    ref, ga, gb, gc = _torch_grads(a, b, c, 1.5, -0.75, weight)
    torch.testing.assert_close(d.double(), ref, rtol=1e-5, atol=1e-5)
    for ours, theirs, name in ((a.grad, ga, "a"), (b.grad, gb, "b"), (c.grad, gc, "c")):
        torch.testing.assert_close(ours.double(), theirs, rtol=1e-5, atol=1e-5, msg=lambda m: f"d{name}: {m}")


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_each_gradient_arrives_in_its_operand_s_layout(layout):
    """A gradient of another layout than its leaf's is copied into the leaf's before it is kept
    (autograd's layout contract): for a Linear's weight, read as weight.t(), the whole weight."""
    a, b = _leaf(7, 5, transposed=layout[0] == "t"), _leaf(5, 3, transposed=layout[1] == "t")
    arrived = {}
    a.register_hook(lambda g: arrived.update(a=g.stride()))
    b.register_hook(lambda g: arrived.update(b=g.stride()))
    gemmlab.gemm(a, b, device="cpu").sum().backward()
    assert arrived == {"a": a.stride(), "b": b.stride()}


def test_a_linear_weight_s_gradient_is_not_copied():
    lin = gemmlab.nn.Linear(5, 3)
    arrived = []
    lin.weight.register_hook(lambda g: arrived.append(g.is_contiguous()))
    lin(torch.randn(4, 5)).sum().backward()
    assert arrived == [True] and lin.weight.grad.is_contiguous()


def test_only_the_inputs_that_require_grad_get_one():
    a, b = _leaf(7, 5), torch.randn(5, 3)
    gemmlab.gemm(a, b, device="cpu").sum().backward()
    assert a.grad is not None and a.grad.shape == (7, 5) and b.grad is None


def test_torch_compile_keeps_the_call_in_one_graph():
    f = torch.compile(lambda x, y: torch.relu(gemmlab.gemm(x, y, device="cpu")) + 1, fullgraph=True)
    a, b = torch.randn(33, 17), torch.randn(17, 9)
    torch.testing.assert_close(f(a, b), torch.relu(a @ b) + 1, rtol=1e-5, atol=1e-5)


def test_eager_calls_without_grad_skip_the_operator(monkeypatch):
    called = []
    monkeypatch.setattr(ops, "gemm_op", lambda *args: called.append(args))
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    d = gemmlab.gemm(a, b, device="cpu")
    with torch.no_grad():
        gemmlab.gemm(a.requires_grad_(), b, device="cpu")
    assert not called and d.grad_fn is None


def test_eager_calls_with_grad_skip_the_dispatcher_and_give_the_operator_s_gradients(monkeypatch):
    """Eager autograd runs _GemmFunction (the operator's forward and backward without torch.library's
    dispatch, whose host time outweighs a small GEMM): the same values and gradients."""
    a, b, c = _leaf(7, 5), _leaf(5, 3, transposed=True), _leaf(7, 3)
    bias = torch.randn(3, requires_grad=True)
    weight = torch.randn(7, 3)
    args = (1.5, -0.5, "auto", "fp32", None)
    via_op = torch.ops.gemmlab.gemm(a, b, c, *args, bias, "gelu")
    (via_op * weight).sum().backward()
    want = [t.grad.clone() for t in (a, b, c, bias)]
    for t in (a, b, c, bias):
        t.grad = None
    called = []
    real = ops.gemm_op
    monkeypatch.setattr(ops, "gemm_op", lambda *x: (called.append(x), real(*x))[1])
    d = gemmlab.gemm(a, b, c, alpha=1.5, beta=-0.5, device="cpu", bias=bias, activation="gelu")
    assert type(d.grad_fn).__name__ == "_GemmFunctionBackward"
    (d * weight).sum().backward()
    assert not called
    torch.testing.assert_close(d, via_op)
    for t, w in zip((a, b, c, bias), want):
        torch.testing.assert_close(t.grad, w)


def test_a_gradient_of_a_gradient_goes_through_the_operator():
    """With create_graph the backward pass's products are recorded (through the operator): for
    D = A B, d(sum of dL/dA)/dB = M ones with L = sum(D)."""
    a, b = _leaf(7, 5), _leaf(5, 3)
    (ga,) = torch.autograd.grad(gemmlab.gemm(a, b, device="cpu").sum(), a, create_graph=True)
    torch.testing.assert_close(ga, torch.ones(7, 3) @ b.detach().t())
    ga.sum().backward()
    torch.testing.assert_close(b.grad, torch.full((5, 3), 7.0))


def test_fake_tensors_that_want_a_gradient_take_the_operator():
    """A tensor subclass (here a fake tensor; on the CPU: a CPU-only torch cannot record autograd on
    fake CUDA tensors) goes through the operator, whose fake implementation gives its shape."""
    with FakeTensorMode():
        a = torch.empty(300, 200, requires_grad=True)
        w = torch.empty(100, 200, requires_grad=True)
        d = gemmlab.gemm(a, w.t(), device="cpu")
        assert d.shape == (300, 100) and "gemmlab_gemm" in type(d.grad_fn).__name__


def test_torch_refuses_an_eager_view_past_its_storage():
    """What lets eager calls skip _check_in_storage (the operator keeps it for torch.compile's views)."""
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.empty(10).as_strided((4, 4), (4, 1))


def test_out_with_autograd_is_a_clear_error():
    a, b = _leaf(7, 5), torch.randn(5, 3)
    with pytest.raises(ValueError, match="use the returned tensor"):
        gemmlab.gemm(a, b, device="cpu", out=torch.empty(7, 3))


def test_cpu_tensors_without_device_cpu_still_get_the_gpu_s_error():
    with pytest.raises((TypeError, ValueError), match="(?i)cuda|gpu|device"):
        gemmlab.gemm(_leaf(7, 5), torch.randn(5, 3))


# ---- on a GPU ---------------------------------------------------------------------------------

CUDA_CASES = [(torch.bfloat16, "fp32", 2e-2), (torch.float16, "fp32", 1e-2), (torch.float32, "fp32", 1e-4),
              (torch.float32, "tf32", 5e-3)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision,tol", CUDA_CASES)
def test_opcheck_on_cuda(dtype, precision, tol):
    a, b = _leaf(127, 65, dtype=dtype, device="cuda"), _leaf(65, 33, dtype=dtype, device="cuda", transposed=True)
    opcheck(torch.ops.gemmlab.gemm.default, (a, b, None, 1.0, 0.0, "auto", precision, None))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision,tol", CUDA_CASES)
@pytest.mark.parametrize("M,K,N", [(1, 7, 127), (1000, 3135, 7), (129, 257, 1000)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_gradients_match_torch_on_cuda(dtype, precision, tol, M, K, N, layout):
    a = _leaf(M, K, dtype=dtype, device="cuda", transposed=layout[0] == "t")
    b = _leaf(K, N, dtype=dtype, device="cuda", transposed=layout[1] == "t")
    c = _leaf(M, N, dtype=dtype, device="cuda")
    weight = torch.randn(M, N, device="cuda")
    d = gemmlab.gemm(a, b, c, alpha=0.5, beta=-1.0, precision=precision)
    (d.float() * weight).sum().backward()
    ref, ga, gb, gc = _torch_grads(a, b, c, 0.5, -1.0, weight)
    scale = lambda t: tol * max(1.0, float(t.abs().max()))  # noqa: E731
    for ours, theirs, name in ((d, ref, "d"), (a.grad, ga, "da"), (b.grad, gb, "db"), (c.grad, gc, "dc")):
        err = float((ours.double() - theirs).abs().max())
        assert err <= scale(theirs), f"{name} {layout} M={M} K={K} N={N} {dtype} {precision}: max error {err:.3g}"


@pytest.mark.gpu
def test_torch_compile_fullgraph_on_cuda():
    f = torch.compile(lambda x, y: torch.relu(gemmlab.gemm(x, y)) + 1, fullgraph=True)
    a = torch.randn(1000, 3135, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3135, 257, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(f(a, b), torch.relu(a @ b) + 1, rtol=2e-2, atol=2e-2)


def test_the_operator_takes_whatever_strides_inductor_gives_it():
    """Tagged flexible_layout (where torch has the tag), so inductor hands the operator its inputs
    in the strides it made them instead of copying them into the traced ones (a copy that read a
    padded row stride its source did not have, in torch 2.11: docs/notes/compiled-input-strides.md);
    strides gemm does not read are made contiguous by the operator itself."""
    if hasattr(torch.Tag, "flexible_layout"):
        assert torch.Tag.flexible_layout in torch.ops.gemmlab.gemm.default.tags
    a = torch.randn(9, 14)[:, ::2]  # 9 x 7, no unit stride
    b = torch.randn(5, 7).t()  # 7 x 5, column-major
    c = torch.randn(5, 9).t()  # 9 x 5, column-major: gemm reads C row-major only
    d = torch.ops.gemmlab.gemm(a, b, c, 1.5, 0.5, "auto", "fp32", None)
    torch.testing.assert_close(d, 1.5 * a @ b + 0.5 * c, rtol=1e-5, atol=1e-5)


def test_a_view_past_its_storage_is_refused_before_any_read():
    """The layout torch.compile handed the operator in one graph (a buffer of 1024 rows of 1376,
    viewed at a padded row stride of 1408: inductor's reinterpret_tensor does not check bounds)."""
    from torch._C._dynamo.guards import _reinterpret_tensor

    grad = _reinterpret_tensor(torch.randn(1024 * 1376), (1024, 1376), (1408, 1), 0)
    x = torch.randn(256, 1024).t()
    with pytest.raises(RuntimeError, match="reaches element 1441759 of a storage of 1409024.*comprehensive_padding"):
        torch.ops.gemmlab.gemm(x.t(), grad, None, 1.0, 0.0, "auto", "fp32", None)


# ---- torch.func's gradient transforms (ops._GemmFunctorch) -----------------------------------------


def test_torch_func_grad_jacrev_and_a_gradient_of_a_gradient():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    f = lambda w: gemmlab.gemm(a, w, device="cpu").square().sum()  # noqa: E731
    g = lambda w: (a @ w).square().sum()  # noqa: E731  (torch's own)
    torch.testing.assert_close(torch.func.grad(f)(b), torch.func.grad(g)(b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.func.jacrev(lambda w: gemmlab.gemm(a, w, device="cpu"))(b),
                               torch.func.jacrev(lambda w: a @ w)(b))  # fmt: skip
    twice = [torch.func.grad(lambda w, h=h: torch.func.grad(h)(w).sum())(b) for h in (f, g)]
    torch.testing.assert_close(twice[0], twice[1], rtol=1e-5, atol=1e-5)


def test_torch_func_grad_through_c_the_bias_and_a_fused_activation():
    a, b, c, bias = torch.randn(7, 5), torch.randn(5, 3), torch.randn(7, 3), torch.randn(3)

    def ours(c, bias):
        return gemmlab.gemm(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="gelu", device="cpu").square().sum()

    def theirs(c, bias):
        return torch.nn.functional.gelu(1.5 * a @ b + 0.5 * c + bias).square().sum()

    for got, want in zip(torch.func.grad(ours, argnums=(0, 1))(c, bias), torch.func.grad(theirs, argnums=(0, 1))(c, bias)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
def test_forward_mode_jvp_jacfwd_and_a_hessian(activation):
    """ops._tangent: torch.func.jvp through every input (a, b, c, the bias) with alpha, beta and the
    fused activation; jacfwd against jacrev; a hessian (jacfwd of jacrev) of a scalar loss; and
    forward mode through gemmlab.linear and conv2d (on gemm: gemmlab.conv_func) -- each against
    torch's own (CPU, float32)."""
    torch.manual_seed(0)
    act = {None: lambda t: t, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation]
    a, b, c, bias = torch.randn(7, 5), torch.randn(5, 3), torch.randn(7, 3), torch.randn(3)
    primals, tangents = (a, b, c, bias), tuple(torch.randn_like(t) for t in (a, b, c, bias))

    def ours(a_, b_, c_, bias_):
        return gemmlab.gemm(a_, b_, c_, alpha=1.5, beta=-0.5, bias=bias_, activation=activation, device="cpu")

    def theirs(a_, b_, c_, bias_):
        return act(1.5 * a_ @ b_ - 0.5 * c_ + bias_)

    close = dict(rtol=1e-5, atol=1e-5)
    for got, want in zip(torch.func.jvp(ours, primals, tangents), torch.func.jvp(theirs, primals, tangents)):
        torch.testing.assert_close(got, want, **close)
    only_b = (torch.zeros_like(a), tangents[1], torch.zeros_like(c), torch.zeros_like(bias))
    torch.testing.assert_close(torch.func.jvp(ours, primals, only_b)[1], torch.func.jvp(theirs, primals, only_b)[1], **close)
    torch.testing.assert_close(torch.func.jacfwd(lambda w: ours(a, w, c, bias))(b), torch.func.jacrev(lambda w: ours(a, w, c, bias))(b), **close)
    torch.testing.assert_close(torch.func.hessian(lambda w: ours(a, w, c, bias).square().sum())(b),
                               torch.func.hessian(lambda w: theirs(a, w, c, bias).square().sum())(b), rtol=1e-4, atol=1e-4)  # fmt: skip
    x, w = torch.randn(4, 5), torch.randn(3, 5)
    torch.testing.assert_close(torch.func.jvp(lambda w_: gemmlab.linear(x, w_, bias, activation), (w,), (tangents[1].t(),))[1],
                               torch.func.jvp(lambda w_: act(x @ w_.t() + bias), (w,), (tangents[1].t(),))[1], **close)  # fmt: skip
    img, k = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    torch.testing.assert_close(torch.func.jacfwd(lambda k_: gemmlab.conv2d(img, k_, padding=1))(k),
                               torch.func.jacfwd(lambda k_: torch.nn.functional.conv2d(img, k_, padding=1))(k), rtol=1e-4, atol=1e-4)  # fmt: skip


def test_per_sample_gradients_of_a_linear_layer():
    """vmap over torch.func.grad: each example's own weight and bias gradients (the per-sample
    gradients of differentially private training), as torch's F.linear gives them."""
    w, bias, x = torch.randn(3, 5), torch.randn(3), torch.randn(4, 7, 5)

    def per_sample(linear):
        loss = lambda w, bias, xi: linear(xi, w, bias).square().sum()  # noqa: E731
        return torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0))(w, bias, x)

    ours = per_sample(lambda xi, w, bias: gemmlab.linear(xi, w, bias, "silu"))
    theirs = per_sample(lambda xi, w, bias: torch.nn.functional.silu(torch.nn.functional.linear(xi, w, bias)))
    assert ours[0].shape == (4, 3, 5) and ours[1].shape == (4, 3)
    for got, want in zip(ours, theirs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_per_sample_gradients_on_cuda(dtype, tol):
    w = torch.randn(33, 127, device="cuda", dtype=dtype)
    x = torch.randn(6, 17, 127, device="cuda", dtype=dtype)

    def per_sample(linear):
        loss = lambda w, xi: linear(xi, w).float().square().sum()  # noqa: E731
        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(w, x)

    ours = per_sample(lambda xi, w: gemmlab.linear(xi, w))
    exact = per_sample(lambda xi, w: torch.nn.functional.linear(xi.double(), w.double()))
    assert ours.shape == (6, 33, 127) and ours.dtype == dtype
    assert ((ours.double() - exact).norm() / exact.norm()).item() < tol


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_forward_mode_on_cuda(dtype, tol):
    """torch.func.jvp through gemm() with a bias and a fused activation on CUDA tensors, and a
    jacfwd of gemmlab.linear, against float64."""
    torch.manual_seed(0)
    a, b, bias = (torch.randn(*s, device="cuda", dtype=dtype) for s in ((129, 67), (67, 33), (33,)))
    da, db = torch.randn_like(a), torch.randn_like(b)
    _, ours = torch.func.jvp(lambda a_, b_: gemmlab.gemm(a_, b_, bias=bias, activation="silu"), (a, b), (da, db))
    _, exact = torch.func.jvp(lambda a_, b_: torch.nn.functional.silu(a_ @ b_ + bias.double()),
                              (a.double(), b.double()), (da.double(), db.double()))  # fmt: skip
    assert ours.dtype == dtype and ((ours.double() - exact).norm() / exact.norm()).item() < tol
    x, w = torch.randn(5, 67, device="cuda", dtype=dtype), torch.randn(9, 67, device="cuda", dtype=dtype)
    jac = torch.func.jacfwd(lambda w_: gemmlab.linear(x, w_))(w)
    want = torch.func.jacfwd(lambda w_: x.double() @ w_.t())(w.double())
    assert jac.shape == (5, 9, 9, 67) and ((jac.double() - want).norm() / want.norm()).item() < tol


def test_dual_tensors_of_torch_autograd_forward_ad_keep_their_tangents():
    """torch.autograd.forward_ad outside torch.func: gemm (with c, the bias and an activation),
    linear (also with a weight that requires grad: its eager Function has no jvp, so the operator's
    path serves), bmm (the per-matrix path) and conv2d (gemmlab.conv_func) carry the tangent torch's
    own operations give (CPU, float32); outside a dual level the tangent-free paths stay as they were."""
    import torch.autograd.forward_ad as fwAD

    torch.manual_seed(0)
    F = torch.nn.functional
    a, b, c, bias = torch.randn(7, 5), torch.randn(5, 3), torch.randn(7, 3), torch.randn(3)
    ta, tb = torch.randn_like(a), torch.randn_like(b)
    w = torch.randn(3, 5, requires_grad=True)
    cases = [
        (lambda a_, b_: gemmlab.gemm(a_, b_, c, beta=0.5, bias=bias, activation="gelu", device="cpu"),
         lambda a_, b_: F.gelu(a_ @ b_ + 0.5 * c + bias)),
        (lambda a_, b_: gemmlab.linear(a_, b_.t(), bias, "silu"), lambda a_, b_: F.silu(a_ @ b_ + bias)),
        (lambda a_, b_: gemmlab.linear(a_, w) * b_.sum(), lambda a_, b_: (a_ @ w.t()) * b_.sum()),
        (lambda a_, b_: gemmlab.bmm(a_.expand(2, 7, 5), b_.expand(2, 5, 3), device="cpu"),
         lambda a_, b_: torch.bmm(a_.expand(2, 7, 5), b_.expand(2, 5, 3))),
        (lambda a_, b_: gemmlab.conv2d(a_.reshape(1, 1, 7, 5), b_[:2].t().reshape(3, 1, 1, 2), padding=1),
         lambda a_, b_: F.conv2d(a_.reshape(1, 1, 7, 5), b_[:2].t().reshape(3, 1, 1, 2), padding=1)),
    ]  # fmt: skip
    for ours, theirs in cases:
        with fwAD.dual_level():
            got = fwAD.unpack_dual(ours(fwAD.make_dual(a, ta), fwAD.make_dual(b, tb)))
            want = fwAD.unpack_dual(theirs(fwAD.make_dual(a, ta), fwAD.make_dual(b, tb)))
        assert got.tangent is not None
        torch.testing.assert_close(got.primal, want.primal, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.tangent, want.tangent, rtol=1e-5, atol=1e-5)
    with fwAD.dual_level():  # tensors without tangents inside a level: the plain path, out= included
        out = torch.full((7, 3), float("nan"))
        gemmlab.gemm(a, b, out=out, device="cpu")
        assert not gemmlab.ops.dual(a, b) and gemmlab.ops.dual(fwAD.make_dual(a, ta))
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
