"""conv05, depthwise (kernels/conv/05_depthwise.cu; gemmlab.conv05): a depthwise conv2d (groups =
C = K) in one launch, and its gradients. On the CPU: its builds compile for sm_90a without spills,
what it refuses, its VEC and channel vectors, wgrad's chunks, and which calls conv2d sends to it (a
gradient through conv05.DepthwiseConv; the explicit algorithms keep the grouped path). On a GPU
(marker `gpu`): its results and gradients against float64 F.conv2d over random geometries (odd
sizes, strides, paddings, dilations, channel counts that are and are not multiples of 16 bytes),
every dtype, both memory formats, a bias and each activation, into poisoned memory, with NaN and
Inf in the input; the filter gradient's bits from launch to launch; the operators under opcheck and
torch.compile; and that it is one launch."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import conv, conv05, jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.specs.conv import (CONV_05, CONV_05_DGRAD, CONV_05_WGRAD, CONV_05_WGRAD_SUM, conv05_channel_vectors,
                                conv05_vec)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_compiles_for_hopper_without_spills(dtype):
    """The forward kernel (each TQ the host picks, plain and fused), dgrad and wgrad, at both VECs."""
    for vec in (conv05_vec(dtype, 64, True), 1):
        jobs = [(CONV_05, CONV_05.config(VEC=vec, TQ=tq, SW=sw), post) for tq in (1, 4) for sw in (0, 3, 5, 7)
                for post in (0, post_code(True, "gelu"))]  # fmt: skip
        jobs += [(CONV_05, CONV_05.config(VEC=vec, TQ=tq, SW=sw, SX=2), 0) for tq in (1, 4) for sw in (3, 5, 7)]
        if vec == 8:  # 16-bit on a strided sliding row
            jobs += [(CONV_05, CONV_05.config(VEC=8, TQ=conv05.STRIDED_ROW_TQ_16BIT, SW=sw, SX=2), post)
                     for sw in (3, 5, 7) for post in (0, post_code(True, "gelu"))]  # fmt: skip
        if vec == 4:  # float32 on a 7-wide sliding row
            jobs += [(CONV_05, CONV_05.config(VEC=4, TQ=conv05.WIDE_ROW_TQ_FP32, SW=conv05.WIDE_ROW), post)
                     for post in (0, post_code(True, "gelu"))]  # fmt: skip
        jobs += [(CONV_05_DGRAD, CONV_05_DGRAD.config(VEC=vec, TQ=tq, UNIT=u), 0) for tq in (1, 4) for u in (0, 1)]
        jobs.append((CONV_05_DGRAD, CONV_05_DGRAD.config(VEC=vec, TQ=conv05.STRIDED_DGRAD_TQ, UNIT=0), 0))  # strided dgrad
        jobs += [(CONV_05_WGRAD, CONV_05_WGRAD.config(VEC=vec, SG=sg, RG=rg, PIX=conv05.wgrad_pixels(sg, rg, vec)), 0)
                 for sg, rg in ((1, 1), (3, 1), (5, 1), (7, 1), (8, 1), (1, 3), (2, 1))]  # fmt: skip (the rule's picks)
        jobs += [(CONV_05_WGRAD_SUM, CONV_05_WGRAD_SUM.config(), 0)]
        for spec, cfg, post in jobs:
            ck = jit.compile_kernel(spec, cfg, "sm_90a", dtype, None, post)
            assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, f"{ck.name_expression}: {ck.usage}"
            assert ck.usage.registers * 256 <= 65536 and ck.usage.static_smem <= 16384, f"{ck.name_expression}: {ck.usage}"


def test_a_block_covers_channel_vectors_whose_taps_fit_its_staged_copy():
    assert conv05_channel_vectors(32, 8, 9) == 4  # every vector of C = 32 in one block
    assert conv05_channel_vectors(576, 8, 9) == 16  # 72 vectors: 32 would leave 24 of the last block's idle, 16 leaves 8
    assert conv05_channel_vectors(768, 8, 49) == 8  # 49 taps x 8 vectors x 8 channels fit 4096
    assert conv05_channel_vectors(768, 8, 64) == 8 and conv05_channel_vectors(768, 8, 65) == 4
    assert conv05_channel_vectors(13, 1, 9) == 2 and conv05_channel_vectors(3, 1, 4096) == 1
    assert conv05_channel_vectors(3, 1, 4097) is None and conv05_channel_vectors(64, 8, 513) is None
    for C, vec, taps in [(96, 8, 9), (100, 1, 49), (960, 4, 9), (24, 8, 25)]:
        cv = conv05_channel_vectors(C, vec, taps)
        assert cv & (cv - 1) == 0 and taps * cv * vec <= 4096, (C, vec, taps)


def test_the_depthwise_block_is_at_most_eight_vectors_and_eight_at_a_stride():
    assert conv05.depthwise_block(576, 8, 16, 9, False) == 8 and conv05.depthwise_block(960, 4, 32, 9, False) == 8
    assert conv05.depthwise_block(32, 8, 4, 9, False) == 4  # below the cap: the rule's
    assert conv05.depthwise_block(144, 8, 4, 9, True) == 8 and conv05.depthwise_block(576, 8, 16, 9, True) == 8
    assert conv05.depthwise_block(32, 8, 4, 9, True) == 4  # four vectors: no block of eight
    assert conv05.depthwise_block(768, 8, 1, 100, True) == 1  # 100 taps x 8 vectors x 8 channels pass the staged copy
    assert conv05.depthwise_block(13, 1, 32, 9, True) == 32  # one channel a thread: the rule's, unmeasured


def test_the_sliding_row_serves_filters_3_5_and_7_wide_at_stride_and_dilation_1_along_w():
    def sw(S, stride=1, dilation=1):
        return conv05.sliding_width(conv.conv_geometry((1, 8, 20, 20), (8, 1, 3, S), stride, 1, dilation))

    assert (sw(3), sw(5), sw(7), sw(1), sw(9)) == (3, 5, 7, 0, 0)
    assert sw(3, (2, 1)) == 3 and sw(3, 2) == 3 and sw(5, (1, 3)) == 0 and sw(3, 1, (1, 2)) == 0
    assert sw(3, 1, (2, 1)) == 3
    with conv05.sliding_rows(False):
        assert sw(3) == 0
    with pytest.raises(ValueError, match="SW must be 0 or a filter width"):
        CONV_05.config(VEC=8, TQ=4, SW=4)
    with pytest.raises(ValueError, match="SX must be 1, or 2 with a sliding row"):
        CONV_05.config(VEC=8, TQ=4, SW=0, SX=2)
    assert conv05.sliding_block(8, 8, 4, 56, 7, 1) == (4, 4) and conv05.sliding_block(8, 2, 4, 56, 7, 1) == (2, 4)
    assert conv05.sliding_block(4, 8, 4, 14, 7, 1) == (8, 8) and conv05.sliding_block(4, 8, 4, 7, 7, 1) == (8, 4)
    assert conv05.sliding_block(1, 32, 4, 56, 7, 1) == (32, 4) and conv05.sliding_block(8, 8, 4, 56, 3, 1) == (8, 4)
    assert conv05.sliding_block(8, 8, 4, 56, 3, 2) == (4, 2) and conv05.sliding_block(8, 8, 1, 1, 3, 2) == (4, 1)
    assert conv05.sliding_block(4, 8, 4, 56, 3, 2) == (8, 4)  # float32 at stride 2: the rule's


def test_wgrad_chunks_depend_on_the_shapes_and_sms_alone():
    g = conv.conv_geometry((32, 96, 56, 56), (96, 1, 7, 7), 1, 3)
    chunk = conv05.wgrad_chunk(g, 8, 132)
    assert chunk == conv05.wgrad_chunk(dict(g), 8, 132) and 16 <= chunk < 32 * 56 * 56
    chunks = -(-32 * 56 * 56 // chunk)
    assert chunks * 49 * 96 <= conv05._WGRAD_PARTS_MAX and chunks * 7 * (96 // 8) >= 0.9 * 132 * conv05._WGRAD_THREADS_AN_SM
    assert conv05.wgrad_taps(7, 7) == (7, 1) and conv05.wgrad_taps(3, 3) == (3, 1) and conv05.wgrad_taps(9, 9) == (8, 1)
    assert conv05.wgrad_taps(3, 1) == (1, 3)  # a 3x1 filter's rows together
    tiny = conv.conv_geometry((1, 8, 3, 3), (8, 1, 3, 3), 1, 1)
    assert conv05.wgrad_chunk(tiny, 8, 132) == 9  # 9 pixels: one chunk


def test_a_batch_whose_counts_pass_2_to_the_31_splits_into_launches_of_whole_images(monkeypatch):
    """The kernels count in 32 bits: _launches caps the grid, then takes as many images a launch as
    keep its tasks plus the grid's threads below 2^31 -- every image where they fit -- and refuses
    an image that alone does not fit."""
    from gemmlab import device

    monkeypatch.setattr(device, "sm_count", lambda device_id: 132)
    grid, images = conv05._launches(32, 56 * 14, 144, 8, 16, 0)  # MobileNetV2's 56^2 layer, TQ = 4
    assert grid == (min(-(-32 * 56 * 14 // 16), 16 * 132 // 2), 2, 1) and images == 32
    per_image = 1 << 26  # 64M tasks an image: 31 images fit beside the grid's threads, not 32
    grid, images = conv05._launches(100, per_image, 8, 8, 1, 0)
    assert grid == (16 * 132, 1, 1) and images == (2**31 - 1 - 16 * 132 * 256) // per_image == 31
    with pytest.raises(ValueError, match="counts in 32 bits"):
        conv05._launches(1, 2**31 - 1000, 8, 8, 1, 0)


def test_the_gradient_operators_fake_implementations_give_torchs_shapes():
    with FakeTensorMode():
        dy = torch.empty(2, 24, 8, 9, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(24, 1, 3, 3, device="cuda", dtype=torch.bfloat16)
        dx = torch.ops.gemmlab.conv2d_depthwise_dgrad(dy, w, [2, 24, 15, 17], [2, 2], [1, 1], "", [1, 1], True)
        assert dx.shape == (2, 24, 15, 17) and dx.is_contiguous(memory_format=torch.channels_last)
        x = torch.empty(2, 24, 15, 17, device="cuda", dtype=torch.bfloat16)
        dw = torch.ops.gemmlab.conv2d_depthwise_wgrad(x, dy, [24, 1, 3, 3], [2, 2], [1, 1], "", [1, 1], torch.float32)
        assert dw.shape == (24, 1, 3, 3) and dw.dtype == torch.float32


def test_vec_is_sixteen_bytes_of_channels_where_they_fit():
    assert conv05_vec(torch.bfloat16, 64, True) == 8 and conv05_vec(torch.float32, 64, True) == 4
    assert conv05_vec(torch.float16, 12, True) == 1 and conv05_vec(torch.float32, 6, True) == 1
    assert conv05_vec(torch.bfloat16, 64, False) == 1
    with pytest.raises(ValueError, match="VEC must be 1 or 16 bytes"):
        CONV_05.config(VEC=2)


def test_what_it_refuses():
    with FakeTensorMode():
        x = torch.empty(2, 32, 9, 9, device="cuda", dtype=torch.bfloat16)
        assert conv05.depthwise_why_not(x, torch.empty(32, 1, 3, 3, device="cuda", dtype=torch.bfloat16), 32) is None
        assert "depthwise" in conv05.depthwise_why_not(x, torch.empty(64, 1, 3, 3, device="cuda", dtype=torch.bfloat16), 32)
        assert "depthwise" in conv05.depthwise_why_not(x, torch.empty(16, 2, 3, 3, device="cuda", dtype=torch.bfloat16), 16)
        assert "float32" in conv05.depthwise_why_not(x.double(), torch.empty(32, 1, 3, 3, device="cuda").double(), 32)
    assert "CUDA" in conv05.depthwise_why_not(torch.empty(2, 4, 5, 5), torch.empty(4, 1, 3, 3), 4)


def test_which_calls_conv2d_sends_to_it(monkeypatch):
    """With the trace check standing aside (fake tensors read as traced), a depthwise call under
    auto goes to conv05.run with the whole layer's geometry, one that wants a gradient to
    conv05.DepthwiseConv (without the activation, which torch applies after it); an explicit
    algorithm, or a grouped layer that is not depthwise, goes to the grouped path."""
    ran, with_grad = [], []

    def fake_run(x, weight, bias, g, activation, channels_last):
        ran.append((g, activation, channels_last))
        return torch.empty(g["N"], g["K"], g["P"], g["Q"], dtype=x.dtype, device=x.device)

    class FakeAutograd:  # (autograd over fake CUDA tensors needs a CUDA build of torch)
        @staticmethod
        def apply(x, weight, bias, g, channels_last):
            with_grad.append((g["P"], g["Q"], channels_last))
            return torch.empty(g["N"], g["K"], g["P"], g["Q"], dtype=x.dtype, device=x.device)

    grouped = []
    monkeypatch.setattr(conv, "_traced", lambda *a: False)
    monkeypatch.setattr(conv05, "run", fake_run)
    monkeypatch.setattr(conv05, "DepthwiseConv", FakeAutograd)
    monkeypatch.setattr(conv, "_grouped", lambda *a, **k: grouped.append(a) or torch.empty(0))
    with FakeTensorMode():
        x = torch.empty(2, 32, 9, 11, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.empty(32, 1, 3, 3, device="cuda", dtype=torch.bfloat16)
        y = gemmlab.conv2d(x, w, stride=2, padding=1, groups=32, activation="relu")
        assert y.shape == (2, 32, 5, 6)
        (g, act, last), = ran
        assert (g["C"], g["K"], g["P"], g["Q"], g["stride"], g["pads"]) == (32, 32, 5, 6, (2, 2), (1, 1, 1, 1))
        assert act == "relu" and last
        gemmlab.conv2d(x, w, groups=32, algorithm="im2col")
        y = gemmlab.conv2d(x, w.detach().requires_grad_(), groups=32, activation="silu")
        assert y.shape == (2, 32, 7, 9) and with_grad == [(7, 9, True)]
        gemmlab.conv2d(x, torch.empty(64, 1, 3, 3, device="cuda", dtype=torch.bfloat16), groups=32)
        gemmlab.conv2d(x, w, groups=32, algorithm="depthwise")  # asked for by name
        gemmlab.conv2d(x, w.detach().requires_grad_(), padding=1, groups=32, algorithm="depthwise")
        with pytest.raises(ValueError, match="algorithm='depthwise': conv05 is depthwise"):
            gemmlab.conv2d(x, torch.empty(64, 1, 3, 3, device="cuda", dtype=torch.bfloat16), groups=32, algorithm="depthwise")
        with pytest.raises(ValueError, match="algorithm='depthwise': conv05 holds filters of at most 4096 taps"):
            gemmlab.conv2d(x, torch.empty(32, 1, 65, 65, device="cuda", dtype=torch.bfloat16), groups=32, algorithm="depthwise")
    assert len(ran) == 2 and len(grouped) == 2 and with_grad == [(7, 9, True), (9, 11, True)]


def test_a_traced_call_runs_as_the_operator_with_torchs_shape_and_format(monkeypatch):
    """Where torch.compile traces conv2d (fake tensors read as traced), a depthwise call goes through
    torch.ops.gemmlab.conv2d_depthwise, whose fake implementation gives torch's shape and memory
    format without a GPU; a call that takes a gradient (wants_grad, stood in for) goes through it
    without the activation, which torch applies after it; narrow groups (2 channels and filters a
    group here) go through the same operator; a grouped layer that is neither takes the grouped
    path."""
    calls = []
    real = conv05.depthwise_op
    monkeypatch.setattr(conv05, "depthwise_op", lambda *a: (calls.append(a[3:]), real(*a))[1])
    with FakeTensorMode():
        for C, R, stride, padding, last in [(32, 3, 2, 1, True), (12, 7, 1, "same", False), (8, 5, (1, 2), (2, 0), True)]:
            x = torch.empty(2, C, 15, 17, device="cuda", dtype=torch.bfloat16)
            x = x.to(memory_format=torch.channels_last) if last else x
            w = torch.empty(C, 1, R, R, device="cuda", dtype=torch.bfloat16)
            y = gemmlab.conv2d(x, w, stride=stride, padding=padding, groups=C, activation="gelu")
            g = conv.conv_geometry(tuple(x.shape), tuple(w.shape), stride, padding)
            assert y.shape == (2, C, g["P"], g["Q"]) and y.device.type == "cuda"
            assert y.is_contiguous(memory_format=torch.channels_last if last else torch.contiguous_format)
        grouped = []
        monkeypatch.setattr(conv, "wants_grad", lambda *t: True)
        monkeypatch.setattr(conv, "_grouped", lambda *a, **k: grouped.append(a) or torch.empty(0))
        y = gemmlab.conv2d(x, w, stride=(1, 2), padding=(2, 0), groups=8, activation="gelu")
        assert y.shape == (2, 8, 15, 7)
        y = gemmlab.conv2d(x, torch.empty(8, 2, 5, 5, device="cuda", dtype=torch.bfloat16), groups=4)
        assert y.shape == (2, 8, 11, 13)
        gemmlab.conv2d(x, torch.empty(16, 2, 5, 5, device="cuda", dtype=torch.bfloat16), groups=4)  # 4 filters a group
    assert calls == [([2, 2], [1, 1], "", [1, 1], "gelu"), ([1, 1], [0, 0], "same", [1, 1], "gelu"),
                     ([1, 2], [2, 0], "", [1, 1], "gelu"), ([1, 2], [2, 0], "", [1, 1], ""),
                     ([1, 1], [0, 0], "", [1, 1], "")] and len(grouped) == 1  # fmt: skip


def _geometries(count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        R, S = rng.choice((1, 3, 3, 5, 7)), rng.choice((1, 3, 3, 5, 7))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 30), rng.randint(dil * (S - 1) + 1, 30)
        padding = rng.choice((0, 1, R // 2, "same", "valid", (R // 2, 0)))
        stride = 1 if padding == "same" else rng.choice((1, 2))
        C = rng.choice((1, 3, 8, 12, 24, 32, 96, 100, 136))
        yield dict(N=rng.randint(1, 4), C=C, H=H, W=W, R=R, S=S, stride=stride, padding=padding, dilation=dil)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3), (torch.float32, 1e-5)],
                         ids=["bf16", "fp16", "fp32"])  # fmt: skip
def test_values_against_float64_on_the_gpu(dtype, tol, monkeypatch):
    """Depthwise layers under auto, every other one channels_last, with a bias and an activation now
    and then and a NaN and an Inf in x now and then: each one launch of conv05 (the grouped path
    fails the test if taken), its result against float64 F.conv2d, NaN exactly where the
    reference has it."""
    monkeypatch.setattr(conv, "_grouped", lambda *a, **k: pytest.fail("the grouped path ran"))
    for i, g in enumerate(_geometries(24, seed=5 + len(str(dtype)))):
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype)
        if i % 2:
            x = x.to(memory_format=torch.channels_last)
        if i % 5 == 4:
            x[0, 0, 0, 0], x[-1, -1, -1, -1] = float("nan"), float("inf")
        w = (torch.randn(g["C"], 1, g["R"], g["S"], device="cuda") / (g["R"] * g["S"]) ** 0.5).to(dtype)
        activation = list(ACTIVATIONS)[i % 4] if i % 5 < 4 else None  # (None, relu, gelu, gelu_tanh; silu below)
        activation = "silu" if i % 7 == 6 else activation
        bias = torch.randn(g["C"], device="cuda").to(dtype) if i % 3 else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")  # freed: poison for the result
        y = gemmlab.conv2d(x, w, bias, groups=g["C"], activation=activation, **kw)
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), groups=g["C"], **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        case = f"{g} {dtype} bias={bias is not None} {activation} channels_last={bool(i % 2)}"
        assert y.shape == ref.shape and y.dtype == dtype, case
        assert y.is_contiguous(memory_format=torch.channels_last if i % 2 else torch.contiguous_format), case
        assert torch.equal(y.isnan(), ref.isnan()), f"{case}: NaN where the reference has none, or none where it has"
        finite = ref.isfinite()
        assert torch.equal(y.isinf(), ref.isinf()), case
        err = float((y.double() - ref)[finite].abs().max() / ref[finite].abs().max().clamp_min(1e-30)) if finite.any() else 0.0
        assert err < tol, f"{case}: {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_sliding_row_gives_the_same_bits_as_a_load_a_tap_on_the_gpu(dtype):
    """The forward pass with each row's pixels loaded once for its taps (SW) and with each tap's
    loaded on its own: the same products added in the same order, so the same bits, NaN and Inf
    included, on geometries where the sliding row serves (3, 5 and 7 wide at stride 1 and 2 along
    W, some narrow rows, padding on either side, a NaN and an Inf in x) -- and against float64."""
    rng = random.Random(11)
    served = 0
    for i in range(16):
        S = rng.choice((3, 5, 7))
        R, C = rng.choice((1, 3, S)), rng.choice((8, 24, 96, 100, 136))
        H, W = rng.randint(R, 19), rng.randint(1, 23)
        padding = (rng.randint(0, R // 2), rng.choice((0, S // 2, S - 1)))
        W = max(W, S - 2 * padding[1])  # (at least one output column)
        stride = (rng.choice((1, 2)), rng.choice((1, 1, 2)))
        x = torch.randn(rng.randint(1, 3), C, H, W, device="cuda").to(dtype).to(memory_format=torch.channels_last)
        if i % 3 == 0:
            x[0, 0, 0, 0], x[-1, -1, -1, -1] = float("nan"), float("inf")
        w = (torch.randn(C, 1, R, S, device="cuda") / S).to(dtype)
        g = conv.conv_geometry(tuple(x.shape), tuple(w.shape), stride, padding)
        served += conv05.sliding_width(g) == S
        with conv05.sliding_rows(True):
            slid = gemmlab.conv2d(x, w, stride=stride, padding=padding, groups=C)
        with conv05.sliding_rows(False):
            tapped = gemmlab.conv2d(x, w, stride=stride, padding=padding, groups=C)
        assert torch.equal(slid.isnan(), tapped.isnan()) and torch.equal(slid.nan_to_num(), tapped.nan_to_num()), g
        ref = F.conv2d(x.double(), w.double(), stride=stride, padding=padding, groups=C)
        assert torch.equal(slid.isnan(), ref.isnan()), g
        fin = ref.isfinite()
        err = float((slid.double()[fin] - ref[fin]).abs().max() / ref[fin].abs().max().clamp_min(1e-30)) if fin.any() else 0.0
        assert err <= (2e-2 if dtype == torch.bfloat16 else 1e-5), (g, err)
    assert served == 16


@pytest.mark.gpu
def test_the_operator_passes_opcheck_and_a_compiled_model_runs_it_on_the_gpu():
    """torch.library.opcheck over gemmlab::conv2d_depthwise (its fake implementation against the
    launch, its schema), and a MobileNet-like block under torch.compile(fullgraph=True), no
    gradients, within bf16 roundings of float64."""
    x = torch.randn(2, 24, 15, 13, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w, b = torch.randn(24, 1, 3, 3, device="cuda").bfloat16(), torch.randn(24, device="cuda").bfloat16()
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise.default, (x, w, b, [2, 2], [1, 1], "", [1, 1], "relu"))
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise.default, (x.float(), w.float(), None, [1, 1], [0, 0], "same",
                                                                      [2, 2], ""))  # fmt: skip
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(24, 24, 3, padding=1, groups=24), torch.nn.ReLU(),
                                gemmlab.nn.Conv2d(24, 32, 1)).cuda().bfloat16().to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = torch.compile(model, fullgraph=True)(x)
        w0, b0, w2, b2 = (p.double() for p in model.parameters())
        want = F.conv2d(F.relu(F.conv2d(x.double(), w0, b0, padding=1, groups=24)), w2, b2)
    assert ((y.double() - want).norm() / want.norm()).item() < 2e-2


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3), (torch.float32, 2e-5)],
                         ids=["bf16", "fp16", "fp32"])  # fmt: skip
def test_gradients_against_float64_on_the_gpu(dtype, tol, monkeypatch):
    """dx, dw and the bias's gradient of random depthwise layers (strides, paddings, dilations,
    channel counts that are and are not 16 bytes of channels), every other one channels_last, an
    activation now and then (applied by torch after conv05), into poisoned memory: each against
    float64 F.conv2d's, the result's gradient exact in both (it is a tensor of the dtype); and no
    launch a group (the grouped path fails the test if taken)."""
    monkeypatch.setattr(conv, "_grouped", lambda *a, **k: pytest.fail("the grouped path ran"))
    for i, g in enumerate(_geometries(16, seed=41 + len(str(dtype)))):
        last = bool(i % 2)
        fmt = torch.channels_last if last else torch.contiguous_format
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype).contiguous(memory_format=fmt)
        w = (torch.randn(g["C"], 1, g["R"], g["S"], device="cuda") / (g["R"] * g["S"]) ** 0.5).to(dtype)
        bias = torch.randn(g["C"], device="cuda").to(dtype) if i % 3 else None
        activation = (None, "relu", "silu", None)[i % 4]
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"], groups=g["C"])
        leaves = [t.detach().requires_grad_() for t in (x, w, bias) if t is not None]
        torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")  # freed: poison for the gradients
        y = gemmlab.conv2d(*leaves[:2], leaves[2] if bias is not None else None, activation=activation, **kw)
        r = torch.randn(y.shape, device="cuda").to(dtype)
        (y * r).sum().backward()
        ref_leaves = [t.detach().double().requires_grad_() for t in (x, w, bias) if t is not None]
        ref = F.conv2d(*ref_leaves[:2], ref_leaves[2] if bias is not None else None, **kw)
        ref = ACTIVATIONS[activation](ref) if activation else ref
        (ref * r.double()).sum().backward()
        case = f"{g} {dtype} bias={bias is not None} {activation} channels_last={last}"
        for name, got, want in zip(("dx", "dw", "db"), leaves, ref_leaves):
            assert got.grad.shape == want.shape and got.grad.dtype == dtype, f"{case} {name}"
            assert got.grad.isfinite().all(), f"{case} {name}: not finite"
            assert _error(got.grad, want.grad) < tol, f"{case} {name}: {_error(got.grad, want.grad):.2e}"
        assert leaves[0].grad.is_contiguous(memory_format=fmt), case


@pytest.mark.gpu
def test_the_filter_gradient_has_the_same_bits_every_launch_and_long_batches_split_into_launches(monkeypatch):
    """wgrad's parts are added in a fixed order: two backward passes give the same bits.
    With the images a launch takes (which the kernels' 32-bit counts bound) stood in for by four, a
    batch of six runs as two launches, with the same forward and dx and, within fp32 sums, dw."""
    x = torch.randn(6, 40, 23, 19, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(40, 1, 5, 5, device="cuda").bfloat16()
    dy = torch.randn(6, 40, 12, 10, device="cuda").bfloat16()
    g = conv.conv_geometry(tuple(x.shape), tuple(w.shape), 2, 2)
    y = conv05.run(x, w, None, g, None, True)
    dx = conv05.dgrad(dy, w, g, True)
    dw = conv05.wgrad(x, dy, g, torch.float32)
    assert torch.equal(dw, conv05.wgrad(x, dy, g, torch.float32))
    launches = []
    real, real_launches = conv05.launch.launch, conv05._launches
    monkeypatch.setattr(conv05.launch, "launch", lambda *a, **k: (launches.append(a[2]), real(*a, **k)))
    monkeypatch.setattr(conv05, "_launches", lambda *a: (real_launches(*a)[0], 4))  # four images a launch at most
    assert torch.equal(conv05.run(x, w, None, g, None, True), y) and len(launches) == 2
    launches.clear()
    assert torch.equal(conv05.dgrad(dy, w, g, True), dx) and len(launches) == 2
    launches.clear()
    assert _error(conv05.wgrad(x, dy, g, torch.float32), dw.double()) < 1e-5 and len(launches) == 3  # and the sum
    monkeypatch.setattr(conv05, "WGRAD_SUM_CHUNKS", 0)  # torch's sum instead of conv05's
    assert _error(conv05.wgrad(x, dy, g, torch.float32), dw.double()) < 1e-5


@pytest.mark.gpu
def test_the_gradient_operators_pass_opcheck_and_a_compiled_block_trains_on_the_gpu():
    """torch.library.opcheck over gemmlab::conv2d_depthwise_dgrad and _wgrad, and a depthwise block
    under torch.compile(fullgraph=True), forward and backward: its gradients those of the same
    block run eagerly."""
    x = torch.randn(2, 24, 15, 13, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w, dy = torch.randn(24, 1, 3, 3, device="cuda").bfloat16(), torch.randn(2, 24, 8, 7, device="cuda").bfloat16()
    args = ([2, 2], [1, 1], "", [1, 1])
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise_dgrad.default, (dy, w, list(x.shape), *args, True))
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise_wgrad.default, (x, dy, list(w.shape), *args, torch.float32))
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise.default, (x, w, None, *args, ""))
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(24, 24, 3, padding=1, groups=24), torch.nn.GELU(),
                                gemmlab.nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24))  # fmt: skip
    model = model.cuda().to(memory_format=torch.channels_last)
    xf = x.float().requires_grad_()
    compiled = torch.compile(model, fullgraph=True)
    compiled(xf).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()] + [xf.grad.clone()]
    model.zero_grad()
    xf.grad = None
    model(xf).square().sum().backward()
    want = [p.grad for p in model.parameters()] + [xf.grad]
    for a, b in zip(got, want):
        assert a.shape == b.shape and _error(a, b.double()) < 1e-5


# ---- conv-bench over depthwise layers ---------------------------------------------------------


def test_the_depthwise_sweep_parses_and_a_bad_groups_is_a_clear_error(tmp_path):
    from pathlib import Path

    from gemmlab.bench.conv import read_conv_sweep

    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "depthwise.toml")
    assert sweep["tag"] == "conv-depthwise" and len(sweep["layers"]) == 12
    assert all(l.groups == l.C == l.K for l in sweep["layers"]) and {l.R for l in sweep["layers"]} == {3, 7}
    bad = tmp_path / "s.toml"
    bad.write_text('batches = [1]\nlayers = [{ name = "x", C = 6, H = 9, W = 9, K = 6, R = 3, S = 3, groups = 4 }]\n')
    with pytest.raises(ValueError, match="groups=4 must divide C=6 and K=6"):
        read_conv_sweep(bad)


def test_depthwise_records_have_a_table_of_their_own(tmp_path):
    """conv-depthwise-auto records merge among themselves (DEPTHWISE_TAGS) and stay out of ResNet-50's
    tables (CONV_TAGS); their rows say conv05 ran and show the groups."""
    from conftest import conv_run
    from gemmlab.bench import layer_tables, records
    from gemmlab.bench.run import write_run

    run = conv_run("auto", {("mbv2 112", 32): 0.5}, "dddd")
    run["records"][0].update(algorithm="depthwise", C=32, K=32, R=3, S=3, stride=1, groups=32, tflops=1.0,
                             cudnn_tflops=2.0, gemm=dict(M=401408, N=1, K=9))  # fmt: skip
    write_run(tmp_path / "nvidia-h200" / "conv-depthwise-auto-20261128T000000Z.json", run["meta"], run["records"])
    assert records.merged_conv(tmp_path) == []
    (merged,) = records.merged_conv(tmp_path, records.DEPTHWISE_TAGS)
    table = layer_tables.conv_table(merged)
    assert "| mbv2 112 | 32 | 32 -> 32 | 3x3/1, groups 32 | 401408x1x9 |" in table and "| 0.50x | conv05 |" in table


@pytest.mark.gpu
def test_a_depthwise_bench_run_says_conv05_ran_on_the_gpu(tmp_path):
    from gemmlab.bench import conv as conv_bench

    layer = conv_bench.Layer("dw", 24, 15, 13, 24, 3, 3, 1, 1, groups=24)
    sweep = dict(layers=[layer], batches=[2], dtypes=["bf16", "float32"], tag="t", reps=3, warmup=1)
    for _, (r,) in conv_bench.run_conv_bench(sweep, tmp_path, algorithm="auto"):
        assert r["algorithm"] == "depthwise" and r["groups"] == 24 and r["gemm"] == dict(M=2 * 15 * 13, N=1, K=9)
        assert r["error"] < 2e-2 and r["ms"] > 0 and r["cudnn_ms"] > 0
