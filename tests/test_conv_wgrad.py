"""conv06, the filter gradient through the TMA's im2col map (kernels/conv/06_tma_wgrad.cu,
gemmlab.conv_wgrad_tma): its builds compile for sm_90a without spills; tc09, whose body it shares,
keeps its code; the config rule; its refusals, said before any launch; and the producer's
coordinates (gemmlab::load_fields_stage), run through the CPU model of the TMA's im2col walk that
tests conv03, give torch's filter gradient in float64. On a GPU (marker `gpu`): its results against
float64 over random geometries (partial tiles of rows, columns and pixels; strides, padding,
dilation; every tc09 schedule: split-K, whole tiles, stream-K), into memory that held NaN, with NaN
and Inf in the inputs kept where torch keeps them, and through autograd in gemmlab.conv2d."""

import random

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gemmlab import conv_wgrad_tma, jit
from gemmlab.conv import conv_geometry
from gemmlab.specs.conv import CONV06_STAGES, CONV_06, conv06_config
from gemmlab.tma import im2col_map_params
from test_conv_tma import _walk


@pytest.mark.parametrize("bm", sorted(CONV06_STAGES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_compiles_for_hopper_without_spills(bm, dtype):
    cfg = CONV_06.config(BM=bm, STAGES=CONV06_STAGES[bm])
    ck = jit.compile_kernel(CONV_06, cfg, "sm_90a", dtype, None)
    u = ck.usage
    assert u.spills == 0 and u.stack_frame == 0, u
    assert u.dynamic_smem == CONV_06.dynamic_smem(cfg) <= 227 * 1024
    assert u.registers * CONV_06.block(cfg)[0] <= 65536, u


def test_the_config_rule_keeps_every_sm_busy():
    assert conv06_config(64, 576).as_dict() == {"BM": 64, "STAGES": 5}  # one warpgroup holds the rows
    assert conv06_config(256, 2304)["BM"] == 128  # 18 tiles: split along K
    # 72 tiles of 128 rows on 132 SMs would run whole, 60 SMs idle; 144 of 64 rows run stream-K
    assert conv06_config(512, 4608, sms=132)["BM"] == 64
    assert conv06_config(512, 4608, sms=60)["BM"] == 128  # more than a wave either way
    with pytest.raises(ValueError, match="BM must be 64 or 128"):
        CONV_06.config(BM=192)


def _fake(shape, dtype=torch.bfloat16, **kw):
    return torch.empty(*shape, device="cuda", dtype=dtype, **kw)


def test_what_it_refuses_is_said_before_any_launch():
    def reason(x_shape, k, r, dtype=torch.bfloat16, **kw):
        with FakeTensorMode():
            x = _fake(x_shape, dtype, memory_format=torch.channels_last)
            g = conv_geometry(tuple(x.shape), (k, x_shape[1], r, r), **kw)
            dy = _fake((g["N"], k, g["P"], g["Q"]), dtype)
            return conv_wgrad_tma.why_not(x, dy, g)

    assert "bf16 or fp16" in reason((2, 64, 9, 9), 64, 3, torch.float32, padding=1)
    assert "is x itself" in reason((2, 64, 9, 9), 64, 1)
    assert "boxes of 64 channels" in reason((2, 72, 9, 9), 64, 3, padding=1)
    assert "16-byte units" in reason((2, 64, 9, 9), 65, 3, padding=1)
    assert "no pixels" in reason((0, 64, 9, 9), 64, 3, padding=1)
    assert "bf16 or fp16" in conv_wgrad_tma.why_not(torch.ones(1, 64, 3, 3), torch.ones(1, 8, 1, 1),
                                                    conv_geometry((1, 64, 3, 3), (8, 64, 3, 3)))  # a CPU tensor


def _emulated_conv06(x: torch.Tensor, dy: torch.Tensor, g: dict) -> torch.Tensor:
    """The filter gradient [K, R*S*C] in float64 on the CPU as conv06 loads its operands: B's stage
    at pixel k0 and column col0 as gemmlab::load_fields_stage works out each box's base and tap,
    the box's pixels walked as the TMA walks the im2col map (test_conv_tma's model), A as dY's rows."""
    N, C, K, R, S, P, Q = (g[k] for k in ("N", "C", "K", "R", "S", "P", "Q"))
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    BK, BN, box_w = 64, 256, 64
    p = im2col_map_params(g, BK, box_w)
    xh = x.permute(0, 2, 3, 1).double()
    rows = dy.permute(0, 2, 3, 1).reshape(-1, K).double()
    pixels, cols = N * P * Q, R * S * C
    d = torch.zeros(K, cols, dtype=torch.float64)
    for col0 in range(0, cols, BN):
        for k0 in range(0, pixels, BK):
            n, pq = k0 // (P * Q), k0 % (P * Q)
            base = (n, pq // Q * sh - g["pads"][0], pq % Q * sw - g["pads"][2])
            bases = list(_walk(p, base, BK))
            b = torch.zeros(BK, BN, dtype=torch.float64)
            for box in range(BN // box_w):
                col = col0 + box * box_w if col0 + box * box_w < cols else 0
                tap, c = col // C, col % C
                r, s = tap // S, tap % S
                for i, (nn, h, w) in enumerate(bases):
                    h, w = h + r * dh, w + s * dw
                    if nn < N and 0 <= h < g["H"] and 0 <= w < g["W"]:
                        b[i, box * box_w:(box + 1) * box_w] = xh[nn, h, w, c:c + box_w]
            a = torch.zeros(BK, K, dtype=torch.float64)
            a[: min(BK, pixels - k0)] = rows[k0:k0 + BK]
            width = min(BN, cols - col0)
            d[:, col0:col0 + width] += (a.t() @ b)[:, :width]
    return d


def _reference(x: torch.Tensor, dy: torch.Tensor, g: dict, kw: dict) -> torch.Tensor:
    """torch's filter gradient in float64, as conv06 lays it out: [K, R*S*C]."""
    dw = torch.nn.grad.conv2d_weight(x.double(), (g["K"], g["C"], g["R"], g["S"]), dy.double(), **kw)
    return dw.permute(0, 2, 3, 1).reshape(g["K"], -1)


@pytest.mark.parametrize("case", [
    dict(N=2, C=64, H=7, W=9, K=8, R=3, S=3, stride=1, padding=1, dilation=1),
    dict(N=3, C=64, H=11, W=6, K=16, R=3, S=1, stride=2, padding=(1, 0), dilation=1),
    dict(N=1, C=128, H=9, W=9, K=8, R=5, S=3, stride=1, padding=(2, 2), dilation=(1, 2)),
    dict(N=2, C=64, H=15, W=13, K=8, R=1, S=1, stride=2, padding=0, dilation=1),
], ids=["3x3/1", "3x1/2-asym", "5x3-dil", "1x1/2"])
def test_the_producers_coordinates_give_the_filter_gradient_on_a_model_of_the_tma(case):
    """Small images, so that a 64-pixel box crosses rows and images and the last runs past the
    batch; R*S*C columns that end inside a 256-wide tile (the boxes past it load column 0's)."""
    torch.manual_seed(0)
    x = torch.randn(case["N"], case["C"], case["H"], case["W"], dtype=torch.float64)
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    g = conv_geometry(tuple(x.shape), (case["K"], case["C"], case["R"], case["S"]), **kw)
    dy = torch.randn(g["N"], g["K"], g["P"], g["Q"], dtype=torch.float64)
    assert torch.allclose(_emulated_conv06(x, dy, g), _reference(x, dy, g, kw), atol=1e-9), case


def _geometries(count: int, seed: int = 0):
    """Random convolutions conv06 takes: 64-256 channels, rows (K) that end inside a tile, filters
    1x1 to 7x7 (a 1x1 only with a stride or padding), pixel counts from one box to several thousand."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        R, S = rng.choice((1, 3, 3, 5, 7)), rng.choice((1, 3, 3, 5))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 40), rng.randint(dil * (S - 1) + 1, 40)
        padding = rng.choice((0, 1, R // 2, (R // 2, S // 2), (0, S // 2)))
        stride = rng.choice((1, 1, 2, 3))
        if (R, S, stride) == (1, 1, 1) and padding in (0, (0, 0)):
            continue
        out.append(dict(N=rng.randint(1, 5), C=64 * rng.randint(1, 4), H=H, W=W, K=rng.choice((8, 64, 72, 128, 200, 264)),
                        R=R, S=S, stride=stride, padding=padding, dilation=dil))  # fmt: skip
    return out


def _poisoned_wgrad(x, dy, g):
    """conv06's result, its output most likely in memory torch's allocator last handed out full of
    NaN: a block of the same size filled and freed just before the call."""
    torch.full((g["K"], g["R"] * g["S"] * g["C"]), float("nan"), dtype=x.dtype, device=x.device)
    return conv_wgrad_tma.wgrad(x, dy, g)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
def test_values_against_float64_on_the_gpu(dtype, tol):
    torch.manual_seed(1)
    for case in _geometries(24, seed=1 if dtype == torch.bfloat16 else 2):
        kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
        x = torch.randn(case["N"], case["C"], case["H"], case["W"], device="cuda").to(dtype)
        x = x.contiguous(memory_format=torch.channels_last)
        g = conv_geometry(tuple(x.shape), (case["K"], case["C"], case["R"], case["S"]), **kw)
        dy = torch.randn(g["N"], g["K"], g["P"], g["Q"], device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
        assert conv_wgrad_tma.why_not(x, dy, g) is None, case
        got = _poisoned_wgrad(x, dy, g).double()
        ref = _reference(x, dy, g, kw)
        err = float((got - ref).abs().max() / ref.abs().max())
        assert not got.isnan().any() and err < tol, f"{case}: error {err:.1e}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [
    (1, 64, 56, 56, 64),      # 3 tiles of 64 rows: every tile split along K
    (2, 512, 14, 14, 512),    # 144 tiles of 64 rows on 132 SMs: stream-K
    (1, 256, 14, 14, 1024),   # 8 x 9 = 72 tiles of 128 rows, 144 of 64: stream-K again
    (3, 128, 5, 5, 128),      # 75 pixels: two K steps
], ids=["split", "stream-k", "stream-k-wide", "two-steps"])
def test_each_schedule_against_float64_on_the_gpu(shape):
    """The resnet-like 3x3 layers that put tc09's schedule in each of its modes."""
    torch.manual_seed(2)
    n, c, h, w, k = shape
    x = torch.randn(n, c, h, w, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    g = conv_geometry(tuple(x.shape), (k, c, 3, 3), padding=1)
    dy = torch.randn(n, k, g["P"], g["Q"], device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    got, ref = _poisoned_wgrad(x, dy, g).double(), _reference(x, dy, g, dict(padding=1))
    err = float((got - ref).abs().max() / ref.abs().max())
    assert not got.isnan().any() and err < 2e-2, f"error {err:.1e}"


@pytest.mark.gpu
def test_nan_and_inf_reach_the_filter_where_torchs_do():
    torch.manual_seed(3)
    x = torch.randn(2, 64, 9, 9, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    x[1, 5, 4, 4] = float("nan")
    x[0, 9, 0, 0] = float("inf")
    g = conv_geometry(tuple(x.shape), (16, 64, 3, 3), padding=1)
    dy = torch.randn(2, 16, 9, 9, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    got = conv_wgrad_tma.wgrad(x, dy, g).double()
    ref = _reference(x, dy, g, dict(padding=1))
    assert torch.equal(got.isnan(), ref.isnan()) and ref.isnan().any()
    assert torch.equal(got.isinf(), ref.isinf())
    finite = ref.isfinite()
    assert float((got - ref)[finite].abs().max() / ref[finite].abs().max()) < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc", "nchw"])
def test_conv2d_takes_it_for_the_filter_gradient_on_the_gpu(channels_last, monkeypatch):
    """gemmlab.conv2d's backward pass launches conv06 where it serves, and its gradient is torch's."""
    import gemmlab

    calls = []
    real = conv_wgrad_tma._run
    monkeypatch.setattr(conv_wgrad_tma, "_run", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(4)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(3, 128, 17, 17, device="cuda").bfloat16().contiguous(memory_format=fmt).requires_grad_()
    w = (torch.randn(72, 128, 3, 3, device="cuda") / 30).bfloat16().contiguous(memory_format=fmt).requires_grad_()
    y = gemmlab.conv2d(x, w, stride=2, padding=1)
    dy = torch.randn_like(y)
    y.backward(dy)
    assert calls, "conv06 did not run"
    ref = torch.nn.grad.conv2d_weight(x.detach().double(), tuple(w.shape), dy.double(), stride=2, padding=1)
    err = float((w.grad.double() - ref).abs().max() / ref.abs().max())
    assert err < 2e-2, f"error {err:.1e}"


def test_a_recorded_backward_pass_keeps_the_differentiable_gemm(monkeypatch):
    """Where autograd records the filter gradient (a backward pass with create_graph=True), conv06,
    whose launch has no gradient, is not asked: gemm() over the matrix is, whose result has one."""
    from gemmlab.conv_wgrad_tma import conv_wgrad

    monkeypatch.setattr(conv_wgrad_tma, "_plan", lambda *a: pytest.fail("conv06 was asked"))
    x = torch.randn(2, 64, 6, 6, requires_grad=True)
    g = conv_geometry(tuple(x.shape), (8, 64, 3, 3), padding=1)
    dy = torch.randn(2, 8, 6, 6)
    dw = conv_wgrad(x, dy, g)
    assert dw.requires_grad
    ref = torch.nn.grad.conv2d_weight(x.detach().double(), (8, 64, 3, 3), dy.double(), padding=1)
    assert float((dw.detach().double() - ref).abs().max() / ref.abs().max()) < 1e-4


@pytest.mark.gpu
def test_second_order_gradients_through_conv2d_on_the_gpu():
    """The gradient of a function of the filter's gradient (create_graph=True) reaches x as torch's does."""
    import gemmlab

    torch.manual_seed(5)
    x = torch.randn(2, 64, 9, 9, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last).requires_grad_()
    w = (torch.randn(16, 64, 3, 3, device="cuda") / 24).bfloat16().contiguous(memory_format=torch.channels_last).requires_grad_()
    dy = torch.randn(2, 16, 9, 9, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)

    def penalty(conv, xx, ww, d):
        (gw,) = torch.autograd.grad(conv(xx, ww, padding=1), ww, d, create_graph=True)
        return (gw.float() ** 2).sum()

    (ours,) = torch.autograd.grad(penalty(gemmlab.conv2d, x, w, dy), x)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(penalty(torch.nn.functional.conv2d, x64, w64, dy.double()), x64)
    err = float((ours.double() - ref).abs().max() / ref.abs().max())
    assert err < 5e-2, f"error {err:.1e}"
