"""torch.autocast around gemmlab's products (gemmlab.amp): the rules on fake CUDA tensors here (a
CUDA autocast region switched on directly, which a CPU-only torch allows), values, gradients, a
training run with a gradient scaler and torch.compile on the GPU (marker `gpu`)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import amp, api, nn as gnn
from gemmlab.conv05 import depthwise_op  # noqa: F401  (registers gemmlab::conv2d_depthwise)

HALF = [torch.bfloat16, torch.float16]


@pytest.fixture
def region(request):
    """A CUDA autocast region of request.param's dtype, switched on as torch.autocast does, without
    a GPU (torch.autocast("cuda") turns itself off where CUDA is missing)."""
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", request.param)
    yield request.param
    torch.set_autocast_enabled("cuda", before[0])
    torch.set_autocast_dtype("cuda", before[1])


@pytest.fixture
def launches(monkeypatch):
    """api.gemm replaced by a recorder of the types it is handed, returning an empty result of the
    type it would (gemm's launch, which fake CUDA tensors cannot reach on a CPU-only torch)."""
    seen = []

    def record(a, b, c=None, **kw):
        bias = kw.get("bias")
        seen.append((a.dtype, b.dtype, None if c is None else c.dtype, None if bias is None else bias.dtype))
        return torch.empty((a.shape[0], b.shape[1]), dtype=kw.get("out_dtype") or a.dtype, device=a.device)

    monkeypatch.setattr(api, "gemm", record)
    return seen


def _cuda(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="cuda")


def test_no_region_no_cast():
    with FakeTensorMode():
        assert amp.region_dtype(_cuda(3, 3)) is None


@pytest.mark.parametrize("region", HALF, indirect=True)
def test_what_keeps_its_types_in_a_region(region):
    with FakeTensorMode():
        a = _cuda(3, 3)
        assert amp.region_dtype(a) == region
        assert amp.region_dtype(a, out=_cuda(3, 3)) is None  # out= forms do not autocast
        assert amp.region_dtype(a, "tf32") is None and amp.region_dtype(a, "3xtf32") is None
    assert amp.region_dtype(torch.ones(3, 3)) is None  # a CPU tensor: the CPU ladder is float32 only
    assert amp.region_dtype("not a tensor") is None


def test_what_is_cast():
    x = torch.ones(2, dtype=torch.float32)
    assert amp.cast(x, torch.bfloat16).dtype == torch.bfloat16
    assert amp.cast(x.half(), torch.bfloat16).dtype == torch.bfloat16  # another 16-bit type too, as torch
    assert amp.cast(x.double(), torch.bfloat16).dtype == torch.float64  # float64 is never cast
    assert amp.cast(x.int(), torch.bfloat16).dtype == torch.int32
    assert amp.cast(None, torch.bfloat16) is None
    same = x.bfloat16()
    assert amp.cast(same, torch.bfloat16) is same


@pytest.mark.parametrize("region", HALF, indirect=True)
def test_gemm_launches_in_the_region_s_dtype(region, launches):
    with FakeTensorMode():
        a, b, c, bias = _cuda(30, 20), _cuda(20, 10), _cuda(30, 10), _cuda(10)
        assert gemmlab.gemm(a, b).dtype == region
        assert gemmlab.gemm(a, b, c, beta=0.5, bias=bias).dtype == region
        # an fp32 result asked for: the operands in the region's type, c in the result's
        assert gemmlab.gemm(a, b, c, beta=0.5, out_dtype=torch.float32).dtype == torch.float32
        assert gemmlab.gemm(a, b, precision="tf32").dtype == torch.float32  # float32's own math, named
        assert gemmlab.gemm(a, b, out=_cuda(30, 10)).dtype == torch.float32
    assert launches == [(region, region, None, None), (region, region, region, region),
                        (region, region, torch.float32, None), (torch.float32,) * 2 + (None, None),
                        (torch.float32,) * 2 + (None, None)]  # fmt: skip


@pytest.mark.parametrize("region", HALF, indirect=True)
def test_the_operators_cast_in_a_region(region):
    """torch.ops.gemmlab.* as torch.compile and direct callers dispatch them: their autocast kernel."""
    with FakeTensorMode():
        a, b, bias = _cuda(30, 20), _cuda(20, 10), _cuda(10)
        assert torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", None).dtype == region
        assert torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", None, bias=bias).dtype == region
        assert torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", torch.float32).dtype == torch.float32
        assert torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "3xtf32", None).dtype == torch.float32
        x, w, wd = _cuda(2, 16, 9, 9), _cuda(32, 16, 3, 3), _cuda(16, 1, 3, 3)
        geometry = ([1, 1], [1, 1], "", [1, 1], "")
        assert torch.ops.gemmlab.conv2d_step(x, w, _cuda(32), *geometry, "implicit").dtype == region
        assert torch.ops.gemmlab.conv2d_depthwise(x, wd, None, *geometry).dtype == region


def test_the_operators_keep_their_types_outside_a_region():
    with FakeTensorMode():
        assert torch.ops.gemmlab.gemm(_cuda(3, 2), _cuda(2, 4), None, 1.0, 0.0, "auto", "fp32", None).dtype == torch.float32


@pytest.mark.parametrize("region", HALF, indirect=True)
def test_linear_and_matmul_launch_in_the_region_s_dtype(region, launches):
    with FakeTensorMode():
        y = gemmlab.linear(_cuda(4, 30, 20), _cuda(10, 20), _cuda(10), activation="relu")
        assert (y.shape, y.dtype) == ((4, 30, 10), region)
        assert gemmlab.matmul(_cuda(3, 30, 20), _cuda(20, 10)).dtype == region
    assert launches == [(region, region, None, region), (region, region, None, None)]


def test_cpu_calls_keep_float32_in_a_cpu_region():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    want = a @ b
    with torch.autocast("cpu", dtype=torch.bfloat16):
        d = gemmlab.gemm(a, b, device="cpu")
        y = gemmlab.linear(a, b.t().contiguous())
    assert d.dtype == y.dtype == torch.float32
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)


# ---- on the GPU ---------------------------------------------------------------------------------


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("M,K,N", [(1, 7, 17), (127, 1000, 33), (1022, 3135, 257)])
def test_gemm_in_a_region_matches_torch_s_mm_there(dtype, M, K, N):
    """The same types as torch.mm's in the region, and an error against float64 (of the operands as
    the region rounds them) no larger than about torch's own: both compute the same rounded product."""
    g = torch.Generator(device="cuda").manual_seed(M + K + N)
    a, b = torch.randn(M, K, device="cuda", generator=g), torch.randn(K, N, device="cuda", generator=g)
    c, bias = torch.randn(M, N, device="cuda", generator=g), torch.randn(N, device="cuda", generator=g)
    exact = (a.to(dtype).double() @ b.to(dtype).double() * 0.5 + c.to(dtype).double() * 0.25
             + bias.to(dtype).double())  # fmt: skip
    with torch.autocast("cuda", dtype=dtype):
        ours = gemmlab.gemm(a, b, c, alpha=0.5, beta=0.25, bias=bias)
        theirs = torch.addmm(c, a, b, beta=0.25, alpha=0.5) + bias.to(dtype)  # (an add does not autocast)
        wide = gemmlab.gemm(a, b, out_dtype=torch.float32)
    assert ours.dtype == theirs.dtype == dtype and wide.dtype == torch.float32
    assert _rel(ours, exact) <= 2 * _rel(theirs, exact) + 1e-3
    assert _rel(wide, a.to(dtype).double() @ b.to(dtype).double()) < 1e-5


@pytest.mark.gpu
def test_beta_zero_never_reads_c_in_a_region():
    """NaN in c with beta = 0 stays out of the result, after c's cast too."""
    a, b = torch.randn(65, 40, device="cuda"), torch.randn(40, 33, device="cuda")
    c = torch.full((65, 33), float("nan"), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        d = gemmlab.gemm(a, b, c, beta=0.0)
    assert d.dtype == torch.bfloat16 and torch.isfinite(d).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_linear_module_gradients_in_a_region_match_torch_s(dtype):
    """gemmlab.nn.Linear and torch.nn.Linear with the same float32 weights, forward and backward in a
    region: the same result type, float32 gradients on the weights, values within the 16-bit type's
    rounding (the same products, summed in another order)."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(1000, 127, device="cuda")
    ours = gnn.Linear(1000, 127, device="cuda")
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 7, 1000, device="cuda")
    outs = []
    for model in (ref, ours):
        with torch.autocast("cuda", dtype=dtype):
            y = model(x)
        (y.float() ** 2).mean().backward()
        outs.append(y)
    assert outs[0].dtype == outs[1].dtype == dtype
    torch.testing.assert_close(outs[1], outs[0], rtol=2e-2, atol=2e-2)
    for p, q in ((ref.weight, ours.weight), (ref.bias, ours.bias)):
        assert q.grad.dtype == torch.float32
        torch.testing.assert_close(q.grad, p.grad, rtol=3e-2, atol=3e-3)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(17, 256), torch.nn.GELU(), torch.nn.Linear(256, 127), torch.nn.SiLU(),
                               torch.nn.Linear(127, 5)).cuda()  # fmt: skip


@pytest.mark.gpu
def test_an_mlp_trains_with_a_gradient_scaler_as_torch_s_does():
    """torch's mixed-precision recipe (fp16 autocast, GradScaler, AdamW), 200 steps, every Linear
    swapped for gemmlab's: the losses follow torch's and the final float32 weights agree."""
    ref = _mlp()
    ours = copy.deepcopy(ref)
    for i in (0, 2, 4):
        new = gnn.Linear(ref[i].in_features, ref[i].out_features, device="cuda")
        new.load_state_dict(ref[i].state_dict())
        ours[i] = new
    runs = []
    for model in (ref, ours):
        opt, scaler = torch.optim.AdamW(model.parameters(), lr=1e-3), torch.amp.GradScaler("cuda")
        g = torch.Generator(device="cuda").manual_seed(1)
        losses = []
        for _ in range(200):
            x, target = torch.randn(64, 17, device="cuda", generator=g), torch.randn(64, 5, device="cuda", generator=g)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.mse_loss(model(x).float(), target)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        runs.append(losses)
    assert ours[0].weight.dtype == torch.float32
    assert max(abs(p - q) / p for p, q in zip(*runs)) < 2e-2
    for p, q in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(q, p, rtol=2e-2, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_bmm_matmul_and_conv2d_in_a_region(dtype):
    a, b = torch.randn(4, 127, 64, device="cuda"), torch.randn(4, 64, 33, device="cuda")
    x, w = torch.randn(2, 16, 13, 13, device="cuda"), torch.randn(32, 16, 3, 3, device="cuda")
    wd = torch.randn(16, 1, 3, 3, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        pairs = [(gemmlab.bmm(a, b), torch.bmm(a, b)), (gemmlab.matmul(a, b[0]), torch.matmul(a, b[0])),
                 (gemmlab.conv2d(x, w, padding=1), F.conv2d(x, w, padding=1)),
                 (gemmlab.conv2d(x, wd, padding=1, groups=16), F.conv2d(x, wd, padding=1, groups=16))]  # fmt: skip
        tf32 = gemmlab.conv2d(x, w, padding=1, precision="tf32")
    for ours, theirs in pairs:
        assert ours.dtype == theirs.dtype == dtype
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=5e-2)
    assert tf32.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.parametrize("inside", [False, True])
def test_a_compiled_model_autocasts_as_the_eager_one(inside):
    """torch.compile(fullgraph=True) with the region around the compiled call or inside the compiled
    function: the result's type and values as in eager mode."""
    model = torch.nn.Sequential(gnn.Linear(64, 96), torch.nn.ReLU(), gnn.Linear(96, 33)).cuda()
    x = torch.randn(50, 64, device="cuda")

    def run(x):
        if inside:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x)
        return model(x)

    compiled = torch.compile(run, fullgraph=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not inside):
        eager, traced = run(x), compiled(x)
    assert eager.dtype == traced.dtype == torch.bfloat16
    torch.testing.assert_close(traced, eager, rtol=1e-2, atol=1e-2)
