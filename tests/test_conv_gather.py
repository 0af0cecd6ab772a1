"""conv04, few channels (kernels/conv/04_few_channels.cu, gemmlab.conv2d(algorithm="gather")): its
compiles for sm_90a with the resource report checked, its configs and refusals, auto's choice of it
for channels no multiple of 8, and a Python model of the kernel's address arithmetic (the staged
tile with its run of zeros, the table of filter-entry offsets, the fragment rows' pixel offsets,
the tile walk) computing convolutions against float64 F.conv2d on the CPU. On a GPU (marker
`gpu`): its results against float64 F.conv2d over random geometries (C = 1..7, 12, 17; filters
1x1 to 7x7; stride, dilation, every padding form; both memory formats; bias and each activation)
into NaN-poisoned memory, the grid forced down so that each block walks several tiles, an Inf in
the input making exactly F.conv2d's pattern of non-finite outputs, gradients, and a plan reused
with new tensors."""

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.conv import choose_algorithm, conv_geometry, gather_why_not
from gemmlab.conv04 import tiles_of
from gemmlab.specs.conv import CONV04_TILES, CONV_04, _conv04_layout, conv04_config

# the stem, a 3x3 over 5 channels at stride 1, a dilated 5x5 over one channel, a 1x1 over 17 and
# 3x3 over 12 channels into 130 output channels (KT = 3), a 7x7 over 7 channels into 256
BUILDS = [
    CONV_04.default_config(),
    CONV_04.config(C=5, R=3, S=3, SH=1, SW=1),
    CONV_04.config(C=1, R=5, S=5, SH=1, SW=1, DH=2, DW=2, TP=4, TQ=32),
    CONV_04.config(C=17, R=1, S=1, SH=1, SW=1, TP=16, TQ=8),
    CONV_04.config(C=12, R=3, S=3, SH=2, SW=1, KT=3),
    CONV_04.config(C=7, R=7, S=7, KT=4),
]


def _cfg_id(c) -> str:
    return f"C{c['C']}-{c['R']}x{c['S']}-s{c['SH']}{c['SW']}-d{c['DH']}{c['DW']}-KT{c['KT']}-{c['TP']}x{c['TQ']}"


@pytest.mark.parametrize("cfg", BUILDS, ids=_cfg_id)
@pytest.mark.parametrize("dtype,activation", [(torch.bfloat16, False), (torch.float16, "gelu")], ids=["bf16-plain", "fp16-gelu"])
def test_compiles_for_hopper_without_spills(cfg, dtype, activation):
    """No spills, no local memory, within the register file at the block's launch bounds (two
    blocks of 128 threads an SM), the shared memory the spec computes."""
    post = 0 if activation is False else post_code(True, activation)
    ck = jit.compile_kernel(CONV_04, cfg, "sm_90a", dtype, None, post)
    u, name = ck.usage, CONV_04.name_expression(cfg, dtype, None, post)
    assert u.spills == 0 and u.stack_frame == 0, f"{name}: {u}"
    assert u.dynamic_smem == CONV_04.dynamic_smem(cfg) <= 227 * 1024
    assert u.registers * 128 * 2 <= 65536, f"{name}: {u.registers} registers"


def test_configs_it_refuses():
    with pytest.raises(ValueError, match="TP x TQ"):
        CONV_04.config(TP=8, TQ=8)
    with pytest.raises(ValueError, match="KT"):
        CONV_04.config(KT=5)
    with pytest.raises(ValueError, match="R\\*S\\*C"):
        CONV_04.config(C=7, R=13, S=13)
    with pytest.raises(ValueError, match="shared memory"):
        CONV_04.config(C=5, R=11, S=11, DH=4, DW=4, KT=4)
    with pytest.raises(ValueError, match="positive"):
        CONV_04.config(DH=0)


def _g(N=2, C=3, H=224, W=224, K=64, R=7, S=7, stride=2, padding=3, dilation=1):
    return conv_geometry((N, C, H, W), (K, C, R, S), stride, padding, dilation)


def test_the_config_compiles_the_geometry_in_and_picks_the_tile_with_least_waste():
    cfg = conv04_config(_g())
    assert cfg == CONV_04.default_config()  # the stem: 112 x 112 output, 8 x 16 tiles fit it exactly
    assert (cfg["TP"], cfg["TQ"]) == (8, 16) and cfg["KT"] == 1
    wide = conv04_config(_g(H=9, W=130, R=3, S=3, stride=1, padding=1, K=65))  # 9 x 130 output
    assert (wide["TP"], wide["TQ"]) == (4, 32) and wide["KT"] == 2
    tall = conv04_config(_g(H=130, W=7, R=3, S=3, stride=1, padding=1, dilation=(2, 1)))
    assert (tall["TP"], tall["TQ"]) == (16, 8) and (tall["DH"], tall["DW"]) == (2, 1)
    with pytest.raises(ValueError, match="256"):
        conv04_config(_g(K=257))


def test_what_it_refuses_is_said_before_any_launch():
    x = torch.randn(1, 3, 9, 9)
    w = torch.randn(8, 3, 3, 3)
    assert "CUDA tensors" in gather_why_not(x, w, None)
    with pytest.raises(ValueError, match="algorithm='gather' cannot serve this convolution: it runs on CUDA tensors"):
        gemmlab.conv2d(x, w, algorithm="gather")
    with FakeTensorMode():
        xc = torch.empty(1, 3, 9, 9, device="cuda")
        assert "bf16 or fp16" in gather_why_not(xc, torch.empty(8, 3, 3, 3, device="cuda"), None)
        xb = xc.to(torch.bfloat16)
        assert "at most 256" in gather_why_not(xb, torch.empty(300, 3, 3, 3, device="cuda", dtype=torch.bfloat16), None)
        assert "R*S*C" in gather_why_not(torch.empty(1, 3, 40, 40, device="cuda", dtype=torch.bfloat16), torch.empty(8, 3, 19, 19, device="cuda", dtype=torch.bfloat16), None)


def test_auto_takes_it_where_channels_are_no_multiple_of_8():
    def pick(C, dtype=torch.bfloat16, K=64, R=7, stride=2, padding=3):
        with FakeTensorMode():
            x = torch.empty(2, C, 30, 30, device="cuda", dtype=dtype)
            w = torch.empty(K, C, R, R, device="cuda", dtype=dtype)
            return choose_algorithm(x, w, None, stride, padding)

    assert pick(3) == "gather" and pick(1, torch.float16) == "gather" and pick(12, R=3, stride=1, padding=1) == "gather"
    assert pick(16, R=3, stride=1, padding=1) == "tma"  # a multiple of 8: conv03's
    assert pick(3, torch.float32) == "im2col"
    assert pick(3, K=512) == "im2col"  # more output channels than a build holds


# ---- a model of the kernel's address arithmetic ------------------------------------------------


def _model(x: torch.Tensor, w: torch.Tensor, g: dict, cfg) -> np.ndarray:
    """The convolution as the kernel computes it, in float64: for each tile of the walk, the staged
    tile ([PH][PW * C made even], zeros in the padding) followed by its run of zeros, the table of entry offsets
    (entries past R*S*C point at the zeros), each pixel's offset, and A[m][k] read at their sum; the
    filter padded with zeros past R*S*C. Returns the NHWC output."""
    lay = _conv04_layout(cfg)
    C, R, S, TP, TQ = cfg["C"], cfg["R"], cfg["S"], cfg["TP"], cfg["TQ"]
    sh, sw, dh, dw = cfg["SH"], cfg["SW"], cfg["DH"], cfg["DW"]
    ph, pw = (TP - 1) * sh + (R - 1) * dh + 1, (TQ - 1) * sw + (S - 1) * dw + 1
    row = -(-pw * C // 2) * 2  # a staged row's elements, made even
    zeros_at = -(-lay["PATCH"] // 8) * 8
    xn = x.permute(0, 2, 3, 1).double().numpy()  # NHWC
    wm = np.zeros((g["K"], lay["KRP"]))
    wm[:, : lay["KR"]] = w.permute(0, 2, 3, 1).reshape(g["K"], -1).double().numpy()
    k = np.arange(lay["KRP"])
    c, tap = k % C, k // C
    koff = np.where(k < lay["KR"], (tap // S) * dh * row + (tap % S) * dw * C + c, zeros_at)
    m = np.arange(128)
    rows = (m // TQ) * sh * row + (m % TQ) * sw * C
    out = np.full((g["N"], g["P"], g["Q"], g["K"]), np.nan)
    tq, tp = -(-g["Q"] // TQ), -(-g["P"] // TP)
    for t in range(tiles_of(g, cfg)):
        qt, pt, n = t % tq, t // tq % tp, t // (tq * tp)
        h0, w0 = pt * TP * sh - g["pads"][0], qt * TQ * sw - g["pads"][2]
        buf = np.zeros(lay["PBUF"])
        for r in range(ph):
            for col in range(pw):
                h, wc = h0 + r, w0 + col
                if 0 <= h < g["H"] and 0 <= wc < g["W"]:
                    buf[r * row + col * C : r * row + (col + 1) * C] = xn[n, h, wc]
        assert rows.max() + koff.max() < lay["PBUF"]  # every read lands in the buffer
        d = buf[rows[:, None] + koff[None, :]] @ wm.T  # [128, K]
        for i in range(128):
            p, q = pt * TP + i // TQ, qt * TQ + i % TQ
            if p < g["P"] and q < g["Q"]:
                assert np.isnan(out[n, p, q, 0]), "two tiles wrote one pixel"
                out[n, p, q] = d[i]
    return out


def _geometries(count: int, seed: int):
    """Random convolutions within conv04's reach (a build holds them): C = 1..7, 12 or 17, odd image
    sizes, filters 1x1 to 7x7, stride and dilation 1 or 2, every padding form, K from 1 to 256."""
    rng = random.Random(seed)
    while count:
        R, S = rng.choice((1, 3, 5, 7)), rng.choice((1, 3, 7))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 40) | 1, rng.randint(dil * (S - 1) + 1, 40) | 1
        padding = rng.choice((0, 1, 3, "same", "valid", (R // 2, 0)))
        stride = 1 if padding == "same" else rng.choice((1, 2))
        spec = dict(N=rng.randint(1, 3), C=rng.choice((1, 2, 3, 4, 5, 6, 7, 12, 17)), H=H, W=W,
                    K=rng.choice((1, 7, 64, 65, 130, 256)), R=R, S=S, stride=stride, padding=padding, dilation=dil)  # fmt: skip
        g = conv_geometry(*((spec["N"], spec["C"], H, W), (spec["K"], spec["C"], R, S)), stride, padding, dil)
        try:
            conv04_config(g)
        except ValueError:  # past a build's shared memory: drawn again
            continue
        count -= 1
        yield spec


@pytest.mark.parametrize("i", range(8))
def test_the_model_of_its_addresses_computes_the_convolution(i):
    """The kernel's arithmetic, modelled in Python, gives float64 F.conv2d's result at every pixel,
    and every pixel exactly once (each tile's pixels; the NaN the model starts from shows a gap)."""
    spec = list(_geometries(8, seed=7))[i]
    N, C, H, W, K, R, S = (spec[k] for k in "N C H W K R S".split())
    kw = dict(stride=spec["stride"], padding=spec["padding"], dilation=spec["dilation"])
    x, w = torch.randn(N, C, H, W), torch.randn(K, C, R, S)
    g = conv_geometry((N, C, H, W), (K, C, R, S), **kw)
    got = _model(x, w, g, conv04_config(g))
    ref = F.conv2d(x.double(), w.double(), **kw).permute(0, 2, 3, 1).numpy()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


def test_entries_past_the_filter_meet_zeros_not_the_input():
    """An Inf anywhere in the staged tile: the padded entries (147 -> 160 for the stem) read the
    run of zeros, so the model's non-finite outputs are exactly F.conv2d's."""
    x, w = torch.randn(1, 3, 29, 31), torch.randn(5, 3, 7, 7)
    x[0, 1, 10, 12] = float("inf")
    g = conv_geometry(tuple(x.shape), tuple(w.shape), 2, 3)
    got = _model(x, w, g, conv04_config(g))
    ref = F.conv2d(x.double(), w.double(), stride=2, padding=3).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(np.isfinite(got), np.isfinite(ref)) and (~np.isfinite(ref)).any()


# ---- on the GPU ---------------------------------------------------------------------------------


def _check_case(g: dict, i: int, dtype, tol, fmt=torch.contiguous_format, activation=None, with_bias=None):
    x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype).to(memory_format=fmt)
    w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(dtype)
    with_bias = i % 2 == 1 if with_bias is None else with_bias
    bias = torch.randn(g["K"], device="cuda").to(dtype) if with_bias else None
    kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
    assert gather_why_not(x, w, bias, **kw) is None
    torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")  # freed: poison for the result
    with torch.no_grad():
        y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="gather", **kw)
    ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
    if activation:
        ref = ACTIVATIONS[activation](ref)
    case = f"{g} bias={bias is not None} {activation}"
    assert y.shape == ref.shape, case
    assert not y.isnan().any(), f"{case}: NaN in the result"
    err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert err < tol, f"{case}: {err:.2e}"
    assert y.is_contiguous(memory_format=fmt) or y.shape[1] == 1, case


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_values_against_float64_on_the_gpu(dtype, tol, channels_last):
    """Random geometries (each a build of its own), both memory formats, with and without a bias,
    each activation, into NaN-poisoned memory, against float64 F.conv2d."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for i, g in enumerate(_geometries(16, seed=int(channels_last) + 2 * (dtype == torch.float16))):
        _check_case(g, i, dtype, tol, fmt, activation=[None, *ACTIVATIONS][i % 5] if i % 3 else None)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", CONV04_TILES, ids=lambda t: f"{t[0]}x{t[1]}")
def test_each_tile_with_several_tiles_a_block_on_the_gpu(tile, monkeypatch):
    """Each tile of output pixels on every geometry (the rule replaced), the grid forced down to
    1, 2, 3 or 5 blocks so that every block walks several tiles, loading each next tile while it
    multiplies the last."""
    from gemmlab import conv04, launch

    def forced(g):
        (sh, sw), (dh, dw) = g["stride"], g["dilation"]
        return CONV_04.config(C=g["C"], R=g["R"], S=g["S"], SH=sh, SW=sw, DH=dh, DW=dw, KT=-(-g["K"] // 64), TP=tile[0],
                              TQ=tile[1])  # fmt: skip

    monkeypatch.setattr(conv04, "conv04_config", forced)
    for i, g in enumerate(_geometries(8, seed=30 + tile[0])):
        blocks = (1, 2, 3, 5)[i % 4]
        monkeypatch.setattr(launch, "resident_blocks_all", lambda *a, n=blocks: n)
        monkeypatch.setattr(conv04, "_PLANS", {})
        _check_case(g, i, torch.bfloat16, 2e-2, torch.channels_last, activation="relu")
        (plan,) = conv04._PLANS.values()
        assert plan.grid == (min(blocks, plan.tiles), 1, 1) and (plan.cfg["TP"], plan.cfg["TQ"]) == tile


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch", [1, 3])
def test_resnet_stem_on_the_gpu(dtype, batch):
    g = dict(N=batch, C=3, H=224, W=224, K=64, R=7, S=7, stride=2, padding=3, dilation=1)
    _check_case(g, 1, dtype, 2e-2 if dtype == torch.bfloat16 else 4e-3, torch.channels_last, activation="relu")


@pytest.mark.gpu
def test_an_inf_in_the_input_makes_torchs_non_finite_outputs_on_the_gpu():
    """Inf and NaN in x: the outputs that are non-finite are F.conv2d's (float64) and no others --
    the entries past R*S*C multiply zeros, never an input element."""
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(2, 3, 61, 67, device="cuda").to(dtype)
        x[0, 1, 10, 12] = float("inf")
        x[1, 2, 40, 3] = float("nan")
        x[1, 0, 0, 66] = float("-inf")
        w = (torch.randn(16, 3, 7, 7, device="cuda") / 12).to(dtype)
        y = gemmlab.conv2d(x, w, stride=2, padding=3, algorithm="gather")
        ref = F.conv2d(x.double(), w.double(), stride=2, padding=3)
        assert torch.equal(y.isfinite(), ref.isfinite()), dtype
        assert torch.equal(y.isnan(), ref.isnan()), dtype


@pytest.mark.gpu
def test_gradients_match_torch_on_the_gpu():
    """conv04 in the forward pass; dX and dW as conv2d's autograd computes them (dgrad on conv03,
    its operands having the layer's 64 output channels; wgrad as a GEMM), against float64 torch."""
    x = torch.randn(2, 3, 33, 35, device="cuda").to(torch.bfloat16).requires_grad_()
    w = (torch.randn(64, 3, 7, 7, device="cuda") / 12).to(torch.bfloat16).requires_grad_()
    b = torch.randn(64, device="cuda").to(torch.bfloat16).requires_grad_()
    y = gemmlab.conv2d(x, w, b, stride=2, padding=3, activation="relu", algorithm="gather")
    dy = torch.randn_like(y)
    y.backward(dy)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    torch.relu(F.conv2d(xd, wd, bd, stride=2, padding=3)).backward(dy.double())
    for name, got, ref in (("y", y, torch.relu(F.conv2d(xd, wd, bd, stride=2, padding=3))), ("dx", x.grad, xd.grad),
                           ("dw", w.grad, wd.grad), ("db", b.grad, bd.grad)):  # fmt: skip
        err = float((got.double() - ref).abs().max() / ref.abs().max())
        assert err < 3e-2, f"{name}: {err:.2e}"


@pytest.mark.gpu
def test_a_kind_of_call_reuses_its_plan_with_new_tensors():
    from gemmlab import conv04

    w = torch.randn(32, 3, 5, 5, device="cuda", dtype=torch.float16) / 9
    for step in range(4):
        x = torch.randn(3, 3, 21, 19, device="cuda", dtype=torch.float16)
        if step == 2:
            w = torch.randn(32, 3, 5, 5, device="cuda", dtype=torch.float16) / 9
        y = gemmlab.conv2d(x, w, padding=2, algorithm="gather")
        ref = F.conv2d(x.double(), w.double(), padding=2)
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        assert err < 4e-3, f"call {step}: {err:.2e}"
        assert conv04.cached_plan(x, w, None, (1, 2, 1), None) is not None
