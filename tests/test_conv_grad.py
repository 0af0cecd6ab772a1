"""A convolution's gradients as gemmlab computes them for conv02 and conv03 (gemmlab.conv_grad,
conv.conv_dgrad, conv.conv_wgrad): dgrad as one forward convolution of the spread dY by the flipped
filter, wgrad as one GEMM. On the CPU the formulas run on the CPU ladder (float32) and are checked
against torch's autograd in float64 over random geometries (stride, padding in every form, dilation,
even and odd filters, odd sizes); on a GPU (marker `gpu`) conv2d(algorithm="implicit"/"tma"), gradients
against torch's."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab.activations import ACTIVATIONS
from gemmlab.conv import conv_dgrad, conv_geometry, conv_wgrad, implicit_gemm_why_not, tma_why_not
from gemmlab.conv_grad import dgrad_operands, dgrad_paddings, spread


def _geometries(count: int, seed: int, channels=(1, 3, 5, 8)):
    rng = random.Random(seed)
    for _ in range(count):
        R, S = rng.choice((1, 2, 3, 5)), rng.choice((1, 2, 3, 5))
        dil = (rng.choice((1, 1, 2)), rng.choice((1, 1, 2)))
        padding = rng.choice((0, 1, 2, (R // 2, S // 2), (0, 2), "same", "valid"))
        stride = 1 if padding == "same" else rng.choice((1, 2, 3, (2, 1)))
        H = rng.randint(dil[0] * (R - 1) + 1, 17)
        W = rng.randint(dil[1] * (S - 1) + 1, 17)
        yield dict(N=rng.randint(1, 3), C=rng.choice(channels), H=H, W=W, K=rng.choice(channels), R=R, S=S,
                   stride=stride, padding=padding, dilation=dil)  # fmt: skip


def _torch_grads(x, w, dy, kw):
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(x64, w64, **kw).backward(dy.double())
    return x64.grad, w64.grad


def _close(ours, ref, tol, what):
    err = float((ours.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert err < tol, f"{what}: {err:.2e}"


def test_dgrad_s_convolution_returns_the_input_s_size():
    for case in _geometries(300, seed=3):
        kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
        g = conv_geometry((case["N"], case["C"], case["H"], case["W"]), (case["K"], case["C"], case["R"], case["S"]), **kw)
        before_h, after_h, before_w, after_w = dgrad_paddings(g)
        (sh, sw), (dh, dw) = g["stride"], g["dilation"]
        assert (g["P"] - 1) * sh + 1 + before_h + after_h - dh * (g["R"] - 1) == g["H"], case
        assert (g["Q"] - 1) * sw + 1 + before_w + after_w - dw * (g["S"] - 1) == g["W"], case
    same = conv_geometry((1, 4, 9, 9), (4, 4, 3, 3), 1, 1, 1)  # stride 1, 'same': the padding stays symmetric
    assert dgrad_paddings(same) == (1, 1, 1, 1)


def test_spread_puts_dy_sh_and_sw_apart_with_zeros_between():
    dy = torch.arange(1.0, 7.0).reshape(1, 1, 2, 3)
    z = spread(dy, (2, 3))
    assert z.shape == (1, 1, 3, 7)
    assert z[0, 0].tolist() == [[1, 0, 0, 2, 0, 0, 3], [0] * 7, [4, 0, 0, 5, 0, 0, 6]]
    assert spread(dy, (1, 1)) is dy
    cl = torch.randn(2, 8, 3, 3).to(memory_format=torch.channels_last)
    assert spread(cl, (2, 2)).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("seed", range(4))
def test_dgrad_and_wgrad_match_torch_s_gradients_on_the_cpu(seed):
    for case in _geometries(12, seed=seed):
        kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
        x = torch.randn(case["N"], case["C"], case["H"], case["W"])
        w = torch.randn(case["K"], case["C"], case["R"], case["S"])
        if seed % 2:
            x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        g = conv_geometry(tuple(x.shape), tuple(w.shape), **kw)
        dy = torch.randn(g["N"], g["K"], g["P"], g["Q"])
        gx, gw = _torch_grads(x, w, dy, kw)
        dx, dw = conv_dgrad(dy, w, g), conv_wgrad(x, dy, g)
        assert dx.shape == x.shape and dw.shape == w.shape
        _close(dx, gx, 1e-4, f"dx {case}")
        _close(dw, gw, 1e-4, f"dw {case}")


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_a_1x1_filter_s_dgrad_is_one_gemm_at_the_strided_pixels(channels_last, monkeypatch):
    """A 1x1 filter's dX without padding is dY_rows @ W: at stride 1 the whole of it, at a stride at
    every stride-th pixel and zeros between, rows and columns past the last reached included (H = 8
    at stride 3); no forward convolution (of a spread dY, by a flipped filter) runs; the result
    keeps dY's memory format."""
    import gemmlab.conv as conv

    monkeypatch.setattr(conv, "conv2d", lambda *a, **k: pytest.fail("dgrad ran a convolution"))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for shape, stride in (((2, 6, 8, 9), 3), ((3, 5, 7, 7), 2), ((1, 4, 6, 5), (2, 1)), ((0, 4, 6, 6), 2), ((2, 6, 5, 7), 1)):
        x, w = torch.randn(shape), torch.randn(7, shape[1], 1, 1)
        g = conv_geometry(tuple(x.shape), tuple(w.shape), stride, 0, 1)
        dy = torch.randn(g["N"], 7, g["P"], g["Q"]).contiguous(memory_format=fmt)
        dx = conv_dgrad(dy, w, g)
        assert dx.shape == x.shape and (dx.is_contiguous(memory_format=fmt) or not dx.numel())
        if x.numel():
            _close(dx, _torch_grads(x, w, dy, dict(stride=stride))[0], 1e-4, f"dx {shape} {stride}")


def test_dgrad_s_operands_keep_dy_s_memory_format():
    g = conv_geometry((2, 8, 16, 16), (16, 8, 3, 3), 2, 1, 1)  # the spread dY's 15 rows: padded 1 before, 2 after
    dy = torch.randn(2, 16, g["P"], g["Q"]).to(memory_format=torch.channels_last)
    z, w2, padding = dgrad_operands(dy, torch.randn(16, 8, 3, 3), g)
    assert w2.shape == (8, 16, 3, 3) and padding == (0, 0)  # stride 2: the two sides differ, so padded first
    assert z.is_contiguous(memory_format=torch.channels_last) and w2.is_contiguous(memory_format=torch.channels_last)


def test_a_wanted_gradient_is_served_by_the_algorithm_asked_for():
    with FakeTensorMode():
        x = torch.empty(2, 8, 9, 9, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(16, 8, 3, 3, device="cuda", dtype=torch.bfloat16)
        assert implicit_gemm_why_not(x, w, None) is None
        assert tma_why_not(x, w, None, padding=1) is None


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["implicit", "tma"])
def test_gradients_match_torch_s_on_the_gpu(algorithm):
    """bf16 inputs, fp32 accumulation: the gradients within a few bf16 roundings of torch's in
    float64, through a bias and each activation (torch applies it), C and K multiples of 8 (so the
    dgrad convolution, whose input channels are K, runs on the same algorithm) and not (im2col)."""
    if algorithm == "tma" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    for i, case in enumerate(_geometries(24, seed=11, channels=(8, 16, 24, 64))):
        kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
        fmt = torch.channels_last if i % 2 else torch.contiguous_format
        x = torch.randn(case["N"], case["C"], case["H"], case["W"], device="cuda").bfloat16().to(memory_format=fmt)
        w = (torch.randn(case["K"], case["C"], case["R"], case["S"], device="cuda") / 8).bfloat16()
        b = torch.randn(case["K"], device="cuda").bfloat16() if i % 3 else None
        activation = [None, *ACTIVATIONS][i % 5]
        ours = [t.detach().clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
        y = gemmlab.conv2d(*ours[:2], ours[2] if b is not None else None, activation=activation, algorithm=algorithm, **kw)
        dy = torch.randn_like(y)
        y.backward(dy)
        ref = [t.detach().double().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
        r = F.conv2d(ref[0], ref[1], ref[2] if b is not None else None, **kw)
        (ACTIVATIONS[activation](r) if activation else r).backward(dy.double())
        for name, o, t in zip(("dx", "dw", "db"), ours, ref):
            _close(o.grad, t.grad, 3e-2, f"{algorithm} {name} {case} {activation}")
