"""gemmlab.linear and gemmlab.nn.Linear against torch's own, on the CPU ladder here and on the
CUDA kernels where a GPU is present (marker `gpu`)."""

import copy

import pytest
import torch
import torch.nn.functional as F

import gemmlab
from gemmlab.nn import ACTIVATIONS


def _swap_linears(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of model with every torch.nn.Linear (and Conv2d) on gemmlab's, same weights."""
    return gemmlab.nn.convert(copy.deepcopy(model))


def _mlp(device="cpu", dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(17, 64), torch.nn.GELU(), torch.nn.Linear(64, 31), torch.nn.SiLU(),
                               torch.nn.Linear(31, 5, bias=False)).to(device, dtype)  # fmt: skip


def test_the_module_is_a_drop_in_and_state_dicts_load_both_ways():
    ref = torch.nn.Linear(7, 3)
    ours = gemmlab.nn.Linear(7, 3)
    assert isinstance(ours, torch.nn.Linear) and set(ours.state_dict()) == {"weight", "bias"}
    ours.load_state_dict(ref.state_dict())
    ref2 = torch.nn.Linear(7, 3)
    ref2.load_state_dict(ours.state_dict())
    assert torch.equal(ref2.weight, ref.weight) and torch.equal(ref2.bias, ref.bias)
    assert gemmlab.nn.Linear(7, 3, bias=False).bias is None
    assert gemmlab.nn.Linear(7, 3, dtype=torch.float64).weight.dtype == torch.float64


class _Net(torch.nn.Module):
    """Convolutions (grouped, reflect-padded), a Linear, and attention, whose output projection is
    a torch.nn.Linear subclass that torch's attention reads by its weight: convert() leaves it."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, padding_mode="reflect"))  # fmt: skip
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        t = self.features(x).flatten(2).transpose(1, 2)  # [N, H*W, 8]
        return self.head(self.attn(t, t, t, need_weights=False)[0].mean(1))


def test_convert_puts_a_models_layers_on_gemmlab_in_place_and_restore_undoes_it():
    """gemmlab.nn.convert: the same module objects and parameters (an optimizer made before keeps
    training them), the same state_dict keys and results, torch's Linear subclasses left alone;
    restore() gives torch's classes back (CPU, float32)."""
    torch.manual_seed(0)
    model, x = _Net(), torch.randn(2, 3, 6, 6)
    want = model(x)
    params, keys = list(model.parameters()), list(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert gemmlab.nn.convert(model) is model
    assert [type(m) for m in (model.features[0], model.features[2], model.head)] == [gemmlab.nn.Conv2d, gemmlab.nn.Conv2d,
                                                                                      gemmlab.nn.Linear]  # fmt: skip
    assert type(model.attn.out_proj) is torch.nn.modules.linear.NonDynamicallyQuantizableLinear
    assert all(p is q for p, q in zip(model.parameters(), params)) and list(model.state_dict()) == keys
    torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-5)
    before = model.head.weight.detach().clone()
    model(x).square().sum().backward()
    opt.step()
    assert model.head.weight.grad is not None and not torch.equal(model.head.weight, before)
    assert gemmlab.nn.restore(model) is model
    assert type(model.features[0]) is torch.nn.Conv2d and type(model.head) is torch.nn.Linear
    single = gemmlab.nn.convert(torch.nn.Linear(4, 2))  # the module itself
    assert type(single) is gemmlab.nn.Linear
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got function"):
        gemmlab.nn.convert(lambda t: t)


@pytest.mark.parametrize("shape", [(5,), (1, 5), (3, 5), (2, 4, 5), (2, 0, 5)])
def test_any_leading_dimensions(shape):
    ref = torch.nn.Linear(5, 3)
    ours = gemmlab.nn.Linear(5, 3)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(*shape)
    y = ours(x)
    assert y.shape == shape[:-1] + (3,)
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_linear_with_each_activation_matches_torch(activation):
    x, w, b = torch.randn(6, 9, requires_grad=True), torch.randn(4, 9, requires_grad=True), torch.randn(4, requires_grad=True)
    torch_act = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
                 "silu": F.silu}[activation]  # fmt: skip
    y = gemmlab.linear(x, w, b, activation=activation)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y2 = torch_act(F.linear(x2, w2, b2))
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    y2.square().sum().backward()
    for ours, theirs in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("x_transposed", [False, True])
@pytest.mark.parametrize("frozen", ["none", "weight", "x"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradients_in_every_layout_match_torch(x_transposed, frozen, bias):
    # the eager autograd path (nn._LinearFunction): x stored transposed gets its gradient in its
    # own layout, a frozen weight or input gets none, 3-D inputs flatten through a view
    torch.manual_seed(1)
    x = torch.randn(13, 7).t() if x_transposed else torch.randn(7, 13)  # [7, 13] either way
    w, b = torch.randn(5, 13), torch.randn(5) if bias else None
    ours = [t.clone().requires_grad_(not (frozen == "x" and t is x) and not (frozen == "weight" and t is w))
            if t is not None else None for t in (x, w, b)]  # fmt: skip
    if x_transposed:  # keep the transposed storage: clone() of a .t() view is column-major too
        assert ours[0].stride(0) == 1
    theirs = [t.detach().clone().requires_grad_(t.requires_grad) if t is not None else None for t in ours]
    y, y2 = gemmlab.linear(*ours), F.linear(*theirs)
    assert type(y.grad_fn).__name__ == "_LinearFunctionBackward"
    g = torch.randn_like(y2)
    y.backward(g)
    y2.backward(g)
    for o, t in zip(ours, theirs):
        if t is None:
            continue
        if not t.requires_grad:
            assert o.grad is None
        else:
            torch.testing.assert_close(o.grad, t.grad, rtol=1e-4, atol=1e-5)
            assert o.grad.stride() == o.stride()  # each gradient in its parameter's own layout
    x3 = torch.randn(2, 3, 13, requires_grad=True)
    (gx3,) = torch.autograd.grad(gemmlab.linear(x3, w).sum(), x3)
    torch.testing.assert_close(gx3, torch.ones(2, 3, 5) @ w, rtol=1e-5, atol=1e-5)


def test_linear_second_derivatives_follow_torch_s():
    # create_graph: the backward pass's products are recorded, so a gradient of a gradient exists
    torch.manual_seed(2)
    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(3, 6, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    (gx,) = torch.autograd.grad(gemmlab.linear(x, w).square().sum(), x, create_graph=True)
    (gx2,) = torch.autograd.grad(F.linear(x2, w2).square().sum(), x2, create_graph=True)
    torch.testing.assert_close(gx, gx2, rtol=1e-4, atol=1e-5)
    gx.sum().backward()
    gx2.sum().backward()
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-4, atol=1e-5)


def test_bad_arguments_are_clear_errors():
    x, w = torch.randn(6, 9), torch.randn(4, 9)
    with pytest.raises(ValueError, match="activation 'tanh' is not one of"):
        gemmlab.linear(x, w, activation="tanh")
    with pytest.raises(ValueError, match="last dimension must be in_features = 9"):
        gemmlab.linear(torch.randn(6, 8), w)
    with pytest.raises(ValueError, match=r"weight must be \[out_features, in_features\]"):
        gemmlab.linear(x, torch.randn(9))


def test_an_mlp_trains_as_torch_s_does():
    """The same MLP, seed and batches: 30 steps of SGD with every Linear on gemmlab, against
    torch's own; the losses and the final weights agree to fp32 rounding."""
    ref = _mlp()
    ours = _swap_linears(ref)
    opt_ref, opt_ours = torch.optim.SGD(ref.parameters(), lr=0.05), torch.optim.SGD(ours.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    for _ in range(30):
        x, target = torch.randn(32, 17, generator=gen), torch.randn(32, 5, generator=gen)
        losses = []
        for model, opt in ((ref, opt_ref), (ours, opt_ours)):
            opt.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_a_compiled_mlp_is_one_graph():
    model = _swap_linears(_mlp())
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(8, 17)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 5e-2)])
def test_an_mlp_trains_as_torch_s_does_on_cuda(dtype, tol):
    ref = _mlp("cuda", dtype)
    ours = _swap_linears(ref)
    opt_ref, opt_ours = torch.optim.SGD(ref.parameters(), lr=0.05), torch.optim.SGD(ours.parameters(), lr=0.05)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(30):
        x = torch.randn(257, 17, generator=gen, device="cuda").to(dtype)
        target = torch.randn(257, 5, generator=gen, device="cuda").to(dtype)
        losses = []
        for model, opt in ((ref, opt_ref), (ours, opt_ours)):
            opt.zero_grad()
            loss = F.mse_loss(model(x).float(), target.float())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=tol)


def test_a_model_exports_with_the_operator_in_its_graph_and_a_dynamic_batch():
    """torch.export over gemmlab.nn.Linear and Conv2d (the CPU ladder here): gemmlab::gemm stays
    an operator of the exported graph, and the program runs at another batch size."""
    model = torch.nn.Sequential(gemmlab.nn.Linear(5, 8), torch.nn.GELU(), gemmlab.nn.Linear(8, 3))
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(model, (torch.randn(4, 5),), dynamic_shapes={"input": {0: batch}})
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count("gemmlab.gemm.default") == 2
    x = torch.randn(9, 5)
    torch.testing.assert_close(program.module()(x), model(x))
    conv = gemmlab.nn.Conv2d(3, 4, 3, padding=1)
    image = torch.randn(2, 3, 9, 9)
    exported = torch.export.export(conv, (image,))
    assert "gemmlab.gemm.default" in [str(n.target) for n in exported.graph.nodes]
    torch.testing.assert_close(exported.module()(image), conv(image))


def test_a_model_on_the_meta_device_runs_shapes_only_as_torchs_does():
    """Linear, Conv2d (plain, grouped, depthwise), linear, matmul and bmm on meta tensors (a model
    built with device="meta" to be materialised later): torch's shapes and dtypes, gradients'
    shapes through backward, and a bad call refused with gemm()'s own error."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, groups=2),
                                torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.Flatten(), torch.nn.Linear(8 * 3 * 3, 5))  # fmt: skip
    ours = gemmlab.nn.convert(copy.deepcopy(model).to("meta"))
    x = torch.randn(2, 3, 7, 7, device="meta", requires_grad=True)
    y = ours(x)
    assert (y.shape, y.device, y.dtype) == (model(torch.randn(2, 3, 7, 7)).shape, torch.device("meta"), torch.float32)
    y.sum().backward()
    assert x.grad.shape == x.shape and all(p.grad.shape == p.shape for p in ours.parameters())
    meta = dict(device="meta")
    assert gemmlab.linear(torch.randn(3, 4, **meta), torch.randn(5, 4, **meta), torch.randn(5, **meta), "gelu").shape == (3, 5)
    assert gemmlab.matmul(torch.randn(2, 3, 4, **meta), torch.randn(4, 6, **meta)).shape == (2, 3, 6)
    assert gemmlab.bmm(torch.randn(2, 3, 4, **meta), torch.randn(2, 4, 6, **meta)).shape == (2, 3, 6)
    with pytest.raises(ValueError, match=r"inner dimensions differ: a is \(2, 4\), b is \(5, 3\)"):
        gemmlab.gemm(torch.randn(2, 4, **meta), torch.randn(5, 3, **meta))


def test_inputs_of_any_strides_as_torchs_layers_take_them():
    """An expanded input (rows that overlap: stride 0), a column-major one and a strided slice
    through linear, nn.Linear, matmul and bmm: copied where gemm() cannot read them, as torch's
    own take any strides (gemm() itself refuses an overlapping operand with a clear error)."""
    torch.manual_seed(0)
    w, b, bias = torch.randn(3, 4), torch.randn(4, 3), torch.randn(3)
    layer = gemmlab.nn.Linear(4, 3)
    for x in (torch.randn(1, 4).expand(5, 4), torch.randn(4, 5).t(), torch.randn(10, 8)[::2, ::2],
              torch.randn(2, 1, 4).expand(2, 5, 4)):  # fmt: skip
        torch.testing.assert_close(gemmlab.linear(x, w, bias), F.linear(x, w, bias))
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
        torch.testing.assert_close(gemmlab.matmul(x, b, device="cpu"), x @ b)
    for a in (torch.randn(2, 1, 4).expand(2, 5, 4), torch.randn(2, 4, 5).transpose(1, 2), torch.randn(1, 5, 4).expand(2, 5, 4)):
        b3 = torch.randn(2, 4, 3)
        torch.testing.assert_close(gemmlab.bmm(a, b3, device="cpu"), torch.bmm(a, b3))
        torch.testing.assert_close(gemmlab.matmul(a, b3, device="cpu"), a @ b3)
    with pytest.raises(ValueError, match="rows overlap: row stride 0 < 4 columns; pass a.contiguous"):
        gemmlab.gemm(torch.randn(1, 4).expand(5, 4), b, device="cpu")
