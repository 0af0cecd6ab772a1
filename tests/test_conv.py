"""gemmlab.conv2d and gemmlab.nn.Conv2d (NHWC im2col, then gemmlab.gemm): the im2col matrix against
one built from torch's unfold, values against float64 torch.nn.functional.conv2d at awkward sizes,
argument forms and both memory formats, the result's memory format against torch's, no copy of x on
the 1x1 path, gradients against torch's, the errors before any launch, the module as a drop-in. CPU
tensors run the CPU ladder; the GPU tests carry the gpu marker."""

import itertools
import random

import pytest
import torch
import torch.nn.functional as F

from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import conv as conv_module
from gemmlab.conv import conv_geometry, im2col


def rel_err(ours, x, w, b=None, **kw):
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), **kw)
    return float((ours.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)), ref


CASES = [
    # (N, C, H, W, K, R, S, stride, padding, dilation)
    (1, 3, 7, 7, 4, 3, 3, 1, 1, 1),
    (2, 3, 13, 11, 5, 5, 5, 2, 2, 1),      # C = 3: every CNN's first layer
    (3, 5, 27, 13, 17, 1, 1, 1, 0, 1),     # a 1x1 layer
    (1, 17, 13, 13, 8, 3, 3, 2, 0, 2),     # stride and dilation
    (2, 5, 1, 7, 3, 1, 3, 1, (0, 1), 1),   # one row, padding as a pair
    (1, 3, 57, 57, 7, 7, 7, 2, 3, 1),      # the 7x7 stem's form
    (2, 5, 13, 7, 6, 3, 3, 1, "same", 2),
    (1, 4, 9, 9, 2, 4, 4, 1, "same", 1),   # an even filter: torch pads bottom and right one more
    (1, 3, 13, 13, 4, 3, 3, (2, 1), "valid", (1, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])) + f"-s{c[7]}-p{c[8]}-d{c[9]}")
@pytest.mark.parametrize("with_bias", [False, True])
def test_values_against_float64_on_the_cpu(case, with_bias):
    N, C, H, W, K, R, S, stride, padding, dilation = case
    x, w = torch.randn(N, C, H, W), torch.randn(K, C, R, S)
    b = torch.randn(K) if with_bias else None
    y = gemmlab.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)
    err, ref = rel_err(y, x, w, b, stride=stride, padding=padding, dilation=dilation)
    assert y.shape == ref.shape and y.dtype == torch.float32 and y.is_contiguous()
    assert err < 1e-5, err


def test_channels_last_in_channels_last_out_and_activations():
    x = torch.randn(2, 5, 9, 8).to(memory_format=torch.channels_last)
    w, b = torch.randn(6, 5, 3, 3), torch.randn(6)
    y = gemmlab.conv2d(x, w, b, padding=1, activation="relu")
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    assert torch.allclose(y, torch.relu(F.conv2d(x, w, b, padding=1)), rtol=1e-5, atol=1e-5)
    for name, fn in [("gelu", F.gelu), ("silu", F.silu)]:
        assert torch.allclose(gemmlab.conv2d(x, w, activation=name), fn(F.conv2d(x, w)), rtol=1e-5, atol=1e-5)


def test_nan_in_the_input_reaches_only_the_outputs_that_see_it():
    x, w = torch.randn(1, 3, 9, 9), torch.randn(4, 3, 3, 3)
    x[0, 1, 4, 4] = float("nan")
    y = gemmlab.conv2d(x, w)  # 7x7 outputs; (4, 4) lies in the fields of rows and columns 2-4
    bad = torch.zeros(7, 7, dtype=torch.bool)
    bad[2:5, 2:5] = True
    assert torch.isnan(y[0, :, bad]).all() and torch.isfinite(y[0, :, ~bad]).all()


def test_gradients_match_torch_on_the_cpu():
    x = torch.randn(2, 3, 11, 9, dtype=torch.float32, requires_grad=True)
    w = torch.randn(5, 3, 3, 3, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    gy = torch.randn(2, 5, 6, 5)
    gemmlab.conv2d(x, w, b, stride=2, padding=2, dilation=2).backward(gy)
    ours = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    F.conv2d(x, w, b, stride=2, padding=2, dilation=2).backward(gy)
    for mine, theirs in zip(ours, (x.grad, w.grad, b.grad)):
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-4)


def draw_case(rng: random.Random) -> tuple:
    """A random (N, C, H, W, K, R, S, stride, padding, dilation) whose filter fits: odd sizes, every
    filter from 1x1 to 7x7 (square or not), stride 1-3, dilation 1-2, padding as an int, a pair,
    'same' (stride 1) or 'valid'."""
    while True:
        N, C, K = rng.choice([1, 2]), rng.choice([1, 3, 5]), rng.choice([1, 4, 7])
        H, W = rng.choice([1, 7, 17]), rng.choice([7, 17])
        R, S = rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 2, 3, 5, 7])
        stride = rng.choice([1, 2, 3, (1, 2), (3, 1)])
        dilation = rng.choice([1, 2, (2, 1)])
        padding = rng.choice([0, 1, 3, (0, 2), (2, 1), "valid"] + (["same"] * 2 if stride == 1 else []))
        try:
            conv_geometry((N, C, H, W), (K, C, R, S), stride, padding, dilation)
        except ValueError:
            continue
        return N, C, H, W, K, R, S, stride, padding, dilation


def case_id(case) -> str:
    N, C, H, W, K, R, S, stride, padding, dilation = case
    return f"N={N} C={C} H={H} W={W} K={K} R={R} S={S} stride={stride} padding={padding!r} dilation={dilation}"


def as_format(t, channels_last: bool):
    """t copied into NCHW or channels_last strides, also where a size-1 dimension makes both
    contiguous (contiguous(memory_format=) would then keep the old strides, which torch reads as NCHW)."""
    return t.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format, copy=True)


def unfold_reference(x, g):
    """The [N*P*Q, R*S*C] matrix from torch's F.unfold (NCHW, [N, C*R*S, L] in (c, r, s) order),
    in float64: padded first, as unfold pads both sides alike, then permuted to (r, s, c) rows."""
    top, bottom, left, right = g["pads"]
    cols = F.unfold(F.pad(x.double(), (left, right, top, bottom)), (g["R"], g["S"]), dilation=g["dilation"],
                    stride=g["stride"])  # fmt: skip
    N, C, R, S = g["N"], g["C"], g["R"], g["S"]
    return cols.reshape(N, C, R, S, -1).permute(0, 4, 2, 3, 1).reshape(-1, R * S * C)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_im2col_is_unfolds_matrix_in_nhwc_order(channels_last):
    rng = random.Random(11 + channels_last)
    for _ in range(300):
        case = draw_case(rng)
        N, C, H, W, K, R, S, stride, padding, dilation = case
        x = as_format(torch.randn(N, C, H, W), channels_last)
        g = conv_geometry(tuple(x.shape), (K, C, R, S), stride, padding, dilation)
        a, ref = im2col(x, g), unfold_reference(x, g)
        assert a.shape == (N * g["P"] * g["Q"], R * S * C) and a.is_contiguous(), case_id(case)
        assert torch.equal(a.double(), ref), case_id(case)  # a copy: exact


def check_1x1_hands_gemm_x_itself(monkeypatch, device="cpu", dtype=torch.float32, tol=1e-5):
    """The [N*H*W, C] matrix gemm reads is x's own memory, and the channels_last result is gemm's
    output itself; NCHW, a stride or a padding each take a copy (which the same check sees)."""
    seen = {}

    def recording_gemm(a, b, **kw):
        d = gemmlab.gemm(a, b, **kw)
        seen.update(a=a.untyped_storage().data_ptr(), d=d.untyped_storage().data_ptr())
        return d

    monkeypatch.setattr(conv_module, "gemm", recording_gemm)
    w = torch.randn(6, 5, 1, 1, device=device).to(dtype)
    for channels_last, stride, padding, copies in [(True, 1, 0, False), (True, 1, "valid", False), (False, 1, 0, True),
                                                   (True, 2, 0, True), (True, 1, 1, True)]:  # fmt: skip
        x = as_format(torch.randn(2, 5, 7, 9, device=device).to(dtype), channels_last)
        y = gemmlab.conv2d(x, w, stride=stride, padding=padding, algorithm="im2col")  # (auto: conv04 on a GPU, C = 5)
        where = f"channels_last={channels_last} stride={stride} padding={padding!r} dtype={dtype}"
        assert (seen["a"] != x.untyped_storage().data_ptr()) == copies, where
        assert (y.untyped_storage().data_ptr() == seen["d"]) == channels_last, where
        err, _ = rel_err(y, x, w, stride=stride, padding=padding)
        assert err < tol, (where, err)


def test_1x1_at_stride_1_on_channels_last_hands_gemm_x_itself(monkeypatch):
    check_1x1_hands_gemm_x_itself(monkeypatch)


def memory_format(t) -> tuple[bool, bool]:
    return t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last)


def check_values_and_memory_format(x_last, w_last, seed, draws, device="cpu", dtype=torch.float32, tol=1e-5):
    """Random geometries (C, K and H of 1 among them, where a memory format is ambiguous): values
    against float64 F.conv2d, and the result's memory format that of F.conv2d on the same tensors."""
    rng = random.Random(seed)
    for _ in range(draws):
        case = draw_case(rng)
        N, C, H, W, K, R, S, stride, padding, dilation = case
        x = as_format(torch.randn(N, C, H, W, device=device).to(dtype), x_last)
        w = as_format(torch.randn(K, C, R, S, device=device).to(dtype), w_last)
        b = torch.randn(K, device=device).to(dtype) if rng.random() < 0.5 else None
        kw = dict(stride=stride, padding=padding, dilation=dilation)
        y = gemmlab.conv2d(x, w, b, **kw)
        err, ref = rel_err(y, x, w, b, **kw)
        where = f"{case_id(case)} x_last={x_last} w_last={w_last} dtype={dtype}"
        assert y.shape == ref.shape and y.dtype == dtype and err < tol, (where, err)
        assert memory_format(y) == memory_format(F.conv2d(x, w, b, **kw)), where


@pytest.mark.parametrize("x_last,w_last", itertools.product([False, True], repeat=2), ids=lambda v: "cl" if v else "nchw")
def test_values_and_memory_format_are_torchs_for_either_format(x_last, w_last):
    check_values_and_memory_format(x_last, w_last, seed=23 + 2 * x_last + w_last, draws=40)


PATH_CASES = [
    (2, 5, 7, 9, 6, 1, 1, 1, 0, 1),             # 1x1, stride 1: x itself on channels_last
    (2, 5, 9, 8, 6, 1, 1, 2, 1, 1),             # 1x1, strided and padded
    (2, 3, 11, 9, 5, 3, 3, 2, 2, 2),            # stride, padding, dilation
    (1, 3, 9, 10, 4, 4, 2, 1, "same", (2, 1)),  # uneven 'same'
]  # fmt: skip


def check_gradients(case, x_last, device="cpu", tol=1e-5):
    """x's, the filter's and the bias's gradients (float32) against float64 torch's."""
    N, C, H, W, K, R, S, stride, padding, dilation = case
    kw = dict(stride=stride, padding=padding, dilation=dilation)
    x = as_format(torch.randn(N, C, H, W, device=device), x_last).requires_grad_()
    w = torch.randn(K, C, R, S, device=device, requires_grad=True)
    b = torch.randn(K, device=device, requires_grad=True)
    y = gemmlab.conv2d(x, w, b, **kw)
    gy = torch.randn(y.shape, dtype=torch.float64, device=device)
    y.backward(gy.float())
    ref = [t.detach().double().requires_grad_() for t in (x, w, b)]
    F.conv2d(*ref, **kw).backward(gy)
    for name, mine, theirs in zip("xwb", (x.grad, w.grad, b.grad), (t.grad for t in ref)):
        err = float((mine.double() - theirs).abs().max() / theirs.abs().max())
        assert err < tol, (name, case_id(case), f"x_last={x_last}", err)


@pytest.mark.parametrize("x_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("case", PATH_CASES, ids=case_id)
def test_gradients_match_float64_torch_on_every_path(case, x_last):
    check_gradients(case, x_last)


@pytest.mark.parametrize("args,kw,match", [
    ((torch.randn(2, 3, 7, 7, 1), torch.randn(4, 3, 3, 3)), {}, r"x must be \[N, C, H, W\] \(or one image"),
    ((torch.randn(7, 7), torch.randn(4, 3, 3, 3)), {}, r"x must be \[N, C, H, W\]"),
    ((torch.randn(5, 7, 7), torch.randn(4, 3, 3, 3)), {}, "weight has 3 input channels, x has 5"),  # one image
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3)), {}, "weight must be"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 5, 3, 3)), {}, "weight has 5 input channels, x has 3"),
    ((torch.randn(1, 4, 7, 7), torch.randn(4, 4, 3, 3)), {"groups": 2}, r"in_channels must be 4 / 2 = 2"),
    ((torch.randn(1, 6, 7, 7), torch.randn(4, 2, 3, 3)), {"groups": 3}, r"groups=3 must divide both"),
    ((torch.randn(1, 4, 7, 7), torch.randn(4, 4, 3, 3)), {"groups": 0}, "groups must be a positive int"),
    ((torch.randn(1, 4, 7, 7), torch.randn(4, 2, 3, 3)), {"groups": 2, "padding": "same", "stride": 2}, "needs stride 1"),
    ((torch.randn(1, 4, 7, 7), torch.randn(4, 2, 3, 3)), {"groups": 2, "algorithm": "fast"}, "algorithm must be one of"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"padding": -1}, "must not be negative"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"padding": "full"}, "'same' or 'valid'"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"padding": "same", "stride": 2}, "needs stride 1"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"stride": 0}, "must be positive"),
    ((torch.randn(1, 3, 2, 2), torch.randn(4, 3, 3, 3)), {}, "does not fit"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3, dtype=torch.float64)), {}, "share dtype and device"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3), torch.randn(5)), {}, r"bias must be \[4\]"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"activation": "tanh"}, "activation 'tanh'"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3, 3)), {"stride": (1, 2, 3)}, "an int or a pair"),
])  # fmt: skip
def test_bad_arguments_are_clear_errors(args, kw, match):
    with pytest.raises(ValueError, match=match):
        gemmlab.conv2d(*args, **kw)


@pytest.mark.parametrize("H,R,stride,padding,dilation", itertools.product([1, 7, 13], [1, 3, 5], [1, 2], [0, 2], [1, 2]))
def test_geometry_is_torchs(H, R, stride, padding, dilation):
    x, w = torch.empty(1, 1, H, H, device="meta"), torch.empty(1, 1, R, R, device="meta")
    try:
        want = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation).shape[2:]
    except RuntimeError:
        with pytest.raises(ValueError, match="does not fit"):
            conv_geometry((1, 1, H, H), (1, 1, R, R), stride, padding, dilation)
        return
    g = conv_geometry((1, 1, H, H), (1, 1, R, R), stride, padding, dilation)
    assert (g["P"], g["Q"]) == tuple(want)


def test_conv2d_module_is_a_drop_in_for_torchs():
    torch.manual_seed(0)
    ours = gemmlab.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    theirs = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 17, 13)
    assert torch.allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    reflect = gemmlab.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
    ref = torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
    ref.load_state_dict(reflect.state_dict())
    assert torch.allclose(reflect(x), ref(x), rtol=1e-5, atol=1e-5)
    grouped = gemmlab.nn.Conv2d(6, 9, 3, padding=1, groups=3)
    ref = torch.nn.Conv2d(6, 9, 3, padding=1, groups=3)
    ref.load_state_dict(grouped.state_dict())
    x = torch.randn(2, 6, 11, 9)
    assert torch.allclose(grouped(x), ref(x), rtol=1e-5, atol=1e-5)


# (N, C, H, W, K, R, S, stride, padding, dilation, groups): grouped, depthwise (groups = C), depthwise
# with a channel multiplier (K = 2C), odd sizes and channel counts
GROUPED_CASES = [
    (2, 4, 9, 7, 6, 3, 3, 1, 1, 1, 2),
    (1, 6, 13, 13, 9, 3, 3, 2, 1, 1, 3),
    (3, 5, 7, 11, 5, 3, 3, 1, 1, 1, 5),
    (2, 8, 12, 12, 16, 5, 5, 1, 2, 1, 8),
    (1, 12, 9, 9, 8, 3, 1, 1, 0, 2, 4),
    (2, 17, 7, 7, 34, 1, 1, 1, 0, 1, 17),
]


def grouped_id(c) -> str:
    return "x".join(map(str, c[:7])) + f"-s{c[7]}-p{c[8]}-d{c[9]}-g{c[10]}"


@pytest.mark.parametrize("case", GROUPED_CASES, ids=grouped_id)
@pytest.mark.parametrize("x_last", [False, True], ids=["nchw", "channels_last"])
def test_grouped_and_depthwise_match_float64_torch_with_gradients(case, x_last):
    """groups > 1 as torch defines it: values, bias and activation against F.conv2d in float64, the
    result in torch's memory format, and the gradients of x, the weight and the bias."""
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W)
    if x_last:
        x = x.to(memory_format=torch.channels_last)
    w, b = torch.randn(K, C // groups, R, S), torch.randn(K)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    want = F.conv2d(x.double(), w.double(), b.double(), **kw)
    got = gemmlab.conv2d(x, w, b, **kw)
    assert got.shape == want.shape
    for fmt in (torch.channels_last, torch.contiguous_format):  # torch's memory format
        assert got.is_contiguous(memory_format=fmt) == want.is_contiguous(memory_format=fmt), fmt
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-5
    relu = gemmlab.conv2d(x, w, b, activation="relu", **kw)
    assert float((relu.double() - want.relu()).abs().max() / want.abs().max()) < 1e-5
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    ref = [t.double().detach().requires_grad_() for t in (x, w, b)]
    gy = torch.randn(want.shape)
    gemmlab.conv2d(xs, ws, bs, activation="silu", **kw).backward(gy)
    F.silu(F.conv2d(*ref, **kw)).backward(gy.double())
    for name, mine, theirs in zip("xwb", (xs.grad, ws.grad, bs.grad), (t.grad for t in ref)):
        assert float((mine.double() - theirs).abs().max() / theirs.abs().max()) < 1e-5, name


def test_a_compiled_model_with_grouped_layers_runs_whole_and_keeps_its_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(8, 16, 3, padding=1, groups=4), torch.nn.ReLU(),
                                gemmlab.nn.Conv2d(16, 16, 3, padding=1, groups=16))  # fmt: skip
    x = torch.randn(2, 8, 9, 9)
    y = torch.compile(model, fullgraph=True)(x)
    assert torch.allclose(y, model(x), rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    ref = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, groups=4), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 16, 3, padding=1, groups=16))  # fmt: skip
    ref.load_state_dict(model.state_dict())
    ref(x).square().sum().backward()
    for mine, theirs in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-4, atol=1e-4)


def test_a_traced_grouped_call_runs_each_group_on_its_own_step(monkeypatch):
    """Under a trace each group is its own conv2d: channel slices of a channels_last bf16 input whose
    groups start 16-byte aligned go to conv03 through the operator, and the result has torch's
    shape and format (fake CUDA tensors, no GPU)."""
    calls = []
    real = conv_module.conv_step_op
    monkeypatch.setattr(conv_module, "conv_step_op", lambda *a: (calls.append(a[-1]), real(*a))[1])
    monkeypatch.setattr(conv_module, "_traced", lambda *t: True)
    monkeypatch.setattr(conv_module, "wants_grad", lambda *t: False)
    with FakeTensorMode():
        x = torch.empty(2, 64, 15, 17, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.empty(32, 16, 3, 3, device="cuda", dtype=torch.bfloat16)
        y = gemmlab.conv2d(x, w, torch.empty(32, device="cuda", dtype=torch.bfloat16), padding=1, groups=4)
        assert y.shape == (2, 32, 15, 17) and y.is_contiguous(memory_format=torch.channels_last)
    assert calls == ["tma"] * 4


def test_a_grouped_convolution_checks_everything_before_the_first_group_runs(monkeypatch):
    """A bad argument that only a group's own call would find (the filter too large for the input)
    is raised before any group has run."""
    calls = []
    real = conv_module._kind
    monkeypatch.setattr(conv_module, "_kind", lambda *args: (calls.append(1), real(*args))[1])
    with pytest.raises(ValueError, match="does not fit"):
        gemmlab.conv2d(torch.randn(1, 4, 2, 2), torch.randn(4, 2, 3, 3), groups=2)
    assert calls == []


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: "x".join(map(str, c[:7])))
def test_values_against_float64_on_the_gpu(dtype, tol, case):
    N, C, H, W, K, R, S, stride, padding, dilation = case
    x, w = torch.randn(N, C, H, W, device="cuda").to(dtype), torch.randn(K, C, R, S, device="cuda").to(dtype)
    y = gemmlab.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    err, _ = rel_err(y, x, w, stride=stride, padding=padding, dilation=dilation)
    assert y.dtype == dtype and err < tol, err


@gpu
@needs_gpu
def test_gradients_match_torch_on_the_gpu():
    x = torch.randn(4, 5, 27, 13, device="cuda", requires_grad=True)
    w = torch.randn(7, 5, 3, 3, device="cuda", requires_grad=True)
    gy = torch.randn(4, 7, 27, 13, device="cuda")
    gemmlab.conv2d(x, w, padding=1).backward(gy)
    ours = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    with torch.backends.cudnn.flags(allow_tf32=False):
        F.conv2d(x, w, padding=1).backward(gy)
    for mine, theirs in zip(ours, (x.grad, w.grad)):
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-3)


def test_a_traced_call_runs_the_steps_as_an_operator_with_torchs_shape_and_format(monkeypatch):
    """Where torch.compile traces conv2d (conv._traced, stood in for here), a call auto sends to
    conv02, conv03 or conv04 goes through torch.ops.gemmlab.conv2d_step, whose fake implementation
    gives torch's shape and memory format without a GPU; where a gradient is wanted (wants_grad,
    stood in for: autograd on fake CUDA tensors needs a CUDA build of torch) the operator takes
    no activation, which torch then applies."""
    calls = []
    real = conv_module.conv_step_op
    monkeypatch.setattr(conv_module, "conv_step_op", lambda *a: (calls.append((a[-2], a[-1])), real(*a))[1])
    monkeypatch.setattr(conv_module, "_traced", lambda *t: True)
    with FakeTensorMode():
        for C, R, stride, padding, last, grad in [(3, 7, 2, 3, True, False), (16, 3, 1, "same", False, True),
                                                  (64, 1, 2, 0, True, False)]:  # fmt: skip
            monkeypatch.setattr(conv_module, "wants_grad", lambda *t, g=grad: g)
            x = torch.empty(2, C, 15, 17, device="cuda", dtype=torch.bfloat16)
            x = x.to(memory_format=torch.channels_last) if last else x
            w = torch.empty(32, C, R, R, device="cuda", dtype=torch.bfloat16)
            y = gemmlab.conv2d(x, w, stride=stride, padding=padding, activation="relu")
            g = conv_geometry(tuple(x.shape), tuple(w.shape), stride, padding)
            assert y.shape == (2, 32, g["P"], g["Q"]) and y.device.type == "cuda"
            assert y.is_contiguous(memory_format=torch.channels_last if last else torch.contiguous_format)
    assert calls == [("relu", "gather"), ("", "tma"), ("relu", "tma")]


@gpu
@needs_gpu
def test_a_conv2d_module_compiles_whole_and_auto_picks_per_layer_on_the_gpu():
    """torch.compile(fullgraph=True) over gemmlab.nn.Conv2d layers in bf16: traced, each call runs
    the step auto picks as the operator gemmlab::conv2d_step (conv03 for the 3x3 where the GPU has
    it); eager, the same steps directly; both within bf16 roundings of float64, the result and
    every parameter's gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), gemmlab.nn.Conv2d(32, 16, 1))
    model = model.cuda().bfloat16().to(memory_format=torch.channels_last)
    x = torch.randn(4, 16, 13, 11, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    gy = torch.randn(4, 16, 13, 11, device="cuda").bfloat16()
    w0, b0, w2, b2 = (p.detach().double().requires_grad_() for p in model.parameters())
    want = F.conv2d(F.relu(F.conv2d(x.double(), w0, b0, padding=1)), w2, b2)
    want.backward(gy.double())
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    for run in (model, torch.compile(model, fullgraph=True)):
        y = run(x)
        y.backward(gy)
        assert rel(y, want) < 2e-2
        for p, ref in zip(model.parameters(), (w0, b0, w2, b2)):
            assert rel(p.grad, ref.grad) < 3e-2, (run is model, p.shape)
        model.zero_grad()


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_compiled_cnn_with_a_stem_matches_float64_on_the_gpu(dtype):
    """A stem (7x7 over 3 channels: conv04), a 3x3 (conv03) and a 1x1, compiled whole: the result
    against float64 torch, and the compiled run's result and every parameter's gradient against the
    eager run's, which run the same kernels. (The gradients against float64 are the fuzz harness's
    and test_conv_gather's to judge: with torch.nn.Conv2d's small biases many pre-activations lie
    near ReLU's kink, where a 16-bit rounding flips the gate.)"""
    torch.manual_seed(1)
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(3, 16, 7, stride=2, padding=3), torch.nn.ReLU(),
                                gemmlab.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), gemmlab.nn.Conv2d(32, 8, 1))  # fmt: skip
    model = model.cuda().to(dtype).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 37, 41, device="cuda").to(dtype).to(memory_format=torch.channels_last)
    p = [q.detach().double() for q in model.parameters()]
    want = F.conv2d(F.relu(F.conv2d(F.relu(F.conv2d(x.double(), p[0], p[1], stride=2, padding=3)), p[2], p[3], padding=1)),
                    p[4], p[5])  # fmt: skip
    gy = torch.randn(want.shape, device="cuda").to(dtype)
    rel = lambda a, b: ((a.double() - b.double()).norm() / b.double().norm()).item()  # noqa: E731
    runs = []
    for run in (model, torch.compile(model, fullgraph=True)):
        y = run(x)
        y.backward(gy)
        assert rel(y, want) < (2e-2 if dtype == torch.bfloat16 else 4e-3), run is model
        runs.append((y.detach(), [q.grad.clone() for q in model.parameters()]))
        model.zero_grad()
    (y0, g0), (y1, g1) = runs
    assert rel(y1, y0) < 1e-2
    for a, b, q in zip(g1, g0, model.parameters()):
        assert rel(a, b) < 1e-2, q.shape


@gpu
@needs_gpu
def test_the_conv_operator_passes_opcheck_on_the_gpu():
    """torch.library.opcheck over gemmlab::conv2d_step on each step it runs (conv04's stem in fp16,
    conv03's 3x3 in bf16 with a bias and 'same' padding): schema, fake implementation, autograd
    registration and AOT dispatch."""
    x = torch.randn(2, 3, 29, 31, device="cuda", dtype=torch.float16, requires_grad=True)
    w = (torch.randn(16, 3, 7, 7, device="cuda") / 12).half().requires_grad_()
    torch.library.opcheck(torch.ops.gemmlab.conv2d_step.default, (x, w, None, [2, 2], [3, 3], "", [1, 1], "", "gather"))
    x = torch.randn(2, 16, 13, 11, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(32, 16, 3, 3, device="cuda") / 12).bfloat16().requires_grad_()
    b = torch.randn(32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(torch.ops.gemmlab.conv2d_step.default, (x, w, b, [1, 1], [0, 0], "same", [1, 1], "", "tma"))


GPU_DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 4e-3)]


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", GPU_DTYPES, ids=str)
@pytest.mark.parametrize("case", GROUPED_CASES + [(2, 64, 15, 17, 32, 3, 3, 1, 1, 1, 4), (2, 32, 14, 14, 32, 3, 3, 2, 1, 1, 32)],
                         ids=grouped_id)  # fmt: skip  (the last two: groups of 16 channels, depthwise at stride 2)
def test_grouped_and_depthwise_against_float64_on_the_gpu(dtype, tol, case):
    """Every group on the step auto picks for it (channels_last input), with bias and ReLU, against
    torch's float64 convolution, and the gradients of x, the weight and the bias against its."""
    N, C, H, W, K, R, S, stride, padding, dilation, groups = case
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda").to(dtype).to(memory_format=torch.channels_last)
    w, b = torch.randn(K, C // groups, R, S, device="cuda").to(dtype), torch.randn(K, device="cuda").to(dtype)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    want = F.conv2d(x.double(), w.double(), b.double(), **kw)
    y = gemmlab.conv2d(x, w, b, activation="relu", **kw)
    assert y.dtype == dtype and y.shape == want.shape and y.is_contiguous(memory_format=torch.channels_last)
    assert float((y.double() - want.relu()).abs().max() / want.abs().max()) < tol
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    ref = [t.double().detach().requires_grad_() for t in (x, w, b)]
    gy = torch.randn(want.shape, device="cuda")
    gemmlab.conv2d(xs, ws, bs, **kw).backward(gy.to(dtype))
    F.conv2d(*ref, **kw).backward(gy.to(dtype).double())
    for name, mine, theirs in zip("xwb", (xs.grad, ws.grad, bs.grad), (t.grad for t in ref)):
        assert float((mine.double() - theirs).abs().max() / theirs.abs().max()) < 4 * tol, name


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", GPU_DTYPES, ids=str)
def test_1x1_at_stride_1_on_channels_last_hands_gemm_x_itself_on_the_gpu(monkeypatch, dtype, tol):
    check_1x1_hands_gemm_x_itself(monkeypatch, "cuda", dtype, tol)


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", GPU_DTYPES, ids=str)
@pytest.mark.parametrize("x_last,w_last", itertools.product([False, True], repeat=2), ids=lambda v: "cl" if v else "nchw")
def test_values_and_memory_format_are_torchs_on_the_gpu(x_last, w_last, dtype, tol):
    check_values_and_memory_format(x_last, w_last, seed=29 + 2 * x_last + w_last, draws=20, device="cuda", dtype=dtype,
                                   tol=tol)  # fmt: skip


@gpu
@needs_gpu
@pytest.mark.parametrize("x_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("case", PATH_CASES, ids=case_id)
def test_gradients_match_float64_torch_on_every_path_on_the_gpu(case, x_last):
    check_gradients(case, x_last, "cuda")


# The conv benchmark: its sweep file, its table, and (GPU) one small run

from gemmlab.bench import conv as conv_bench  # noqa: E402
from gemmlab.bench import layer_tables as tables  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_the_resnet50_sweep_has_every_distinct_layer_and_each_fits():
    sweep = conv_bench.read_conv_sweep(ROOT / "sweeps" / "conv" / "resnet50.toml")
    layers = sweep["layers"]
    assert len(layers) == 23 and sweep["batches"] == [32, 256] and set(sweep["dtypes"]) == {"bf16", "fp16", "float32"}
    assert len({(l.C, l.H, l.W, l.K, l.R, l.S, l.stride, l.padding) for l in layers}) == len(layers)
    stem = layers[0]
    assert (stem.C, stem.R, stem.stride) == (3, 7, 2)
    assert conv_geometry((1, stem.C, stem.H, stem.W), (stem.K, stem.C, stem.R, stem.S), stem.stride, stem.padding)["P"] == 112


@pytest.mark.parametrize("text,match", [
    ('layers = []\nbatches = [1]\n', "needs layers"),
    ('bogus = 1\n', "unknown keys"),
    ('batches = [1]\nlayers = [{ name = "x", C = 3, H = 2, W = 2, K = 4, R = 3, S = 3 }]\n', "does not fit"),
    ('batches = [1]\nlayers = [{ name = "x", C = 3, H = 9, W = 9, K = 4, R = 3 }]\n', "missing"),
    ('batches = [1]\ndtypes = ["int8"]\nlayers = [{ name = "x", C = 3, H = 9, W = 9, K = 4, R = 3, S = 3 }]\n', "int8"),
])  # fmt: skip
def test_a_bad_conv_sweep_is_a_clear_error(tmp_path, text, match):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        conv_bench.read_conv_sweep(path)


def test_conv_table_has_a_row_a_layer_and_the_geometric_mean_per_batch():
    rec = dict(name="s1 3x3", N=32, C=64, K=64, R=3, S=3, stride=1, gemm=dict(M=100352, N=64, K=576), tflops=100.0,
               cudnn_tflops=120.0, ratio=0.8, ms=1.0, im2col_ms=0.25, reps=10, dtype="bf16")  # fmt: skip
    view = dict(rec, name="s1 1x1", R=1, S=1, gemm=dict(M=100352, N=64, K=64), ratio=1.25, im2col_ms=None)
    run = {"meta": {"gpu": "GPU", "commit": "abc", "time": "t", "dtype": "bf16"}, "records": [rec, view]}
    table = tables.conv_table(run)
    assert "| im2col share |" in table and "unfold" not in table
    assert "| s1 3x3 | 32 | 64 -> 64 | 3x3/1 | 100352x64x576 | 100.0 | 120.0 | 0.80x | 25% |" in table
    assert "| s1 1x1 | 32 | 64 -> 64 | 1x1/1 | 100352x64x64 | 100.0 | 120.0 | 1.25x | none (view) |" in table
    assert "batch 32: **1.00x** (lowest 0.80x)" in table


def test_conv_table_of_conv03_shows_the_tile_that_ran_and_the_fastest():
    rec = dict(name="s3 3x3", N=32, C=256, K=256, R=3, S=3, stride=1, gemm=dict(M=6272, N=256, K=2304), tflops=300.0,
               cudnn_tflops=400.0, ratio=0.75, ms=0.1, im2col_ms=None, reps=20, dtype="bf16", algorithm="tma",
               conv03=dict(BM=64, BN=128, STAGES=8, persistent=True, grid=132, tiles=196),
               tile_ms={"128x256": 0.12, "64x128": 0.1, "128x128": 0.08})  # fmt: skip
    fallback = dict(rec, name="stem", C=3, algorithm="im2col")
    del fallback["conv03"], fallback["tile_ms"]
    run = {"meta": {"gpu": "GPU", "commit": "abc", "time": "t", "dtype": "bf16", "algorithm": "tma"}, "records": [rec, fallback]}
    table = tables.conv_table(run)
    assert "| ratio | conv03 tile | best tile |" in table and table.splitlines()[1].count("---") == 10
    assert "| 0.75x | 64x128, 2 a block | 128x128 (25% faster) |" in table
    assert "| im2col (not conv03) | - |" in table
    rec["tile_ms"]["64x128"] = 0.05
    assert "| 64x128, 2 a block | the rule's |" in tables.conv_table(run)
    del rec["tile_ms"], run["records"][1]
    assert "| ratio | conv03 tile |\n" in tables.conv_table(run)


def test_conv_table_of_an_auto_run_says_which_step_ran_each_layer():
    base = dict(N=32, C=64, K=64, stride=1, tflops=100.0, cudnn_tflops=120.0, ratio=1.0, ms=1.0, reps=10, dtype="bf16")
    recs = [dict(base, name="s1 1x1", R=1, S=1, gemm=dict(M=100352, N=64, K=64), im2col_ms=None, algorithm="im2col"),
            dict(base, name="s1 3x3", R=3, S=3, gemm=dict(M=100352, N=64, K=576), im2col_ms=None, algorithm="tma",
                 conv03=dict(BM=128, BN=64, STAGES=6, persistent=True, grid=132, tiles=784)),
            dict(base, name="stem", C=3, R=7, S=7, stride=2, gemm=dict(M=401408, N=64, K=147), im2col_ms=0.5,
                 algorithm="im2col"),
            dict(base, name="s4 1x1", C=2048, K=512, R=1, S=1, gemm=dict(M=1568, N=512, K=2048), im2col_ms=None,
                 algorithm="tma", conv03=dict(BM=64, BN=128, STAGES=8, persistent=True, a_rows=True, grid=100, tiles=100))]  # fmt: skip
    run = {"meta": {"gpu": "GPU", "commit": "abc", "time": "t", "dtype": "bf16", "algorithm": "auto"}, "records": recs}
    table = tables.conv_table(run)
    assert "| ratio | ran |" in table and "algorithm='auto'" in table
    assert "| 1.00x | im2col (view) |" in table
    assert "| 1.00x | conv03 128x64, 6 a block |" in table  # (a record from before the rows build: no a_rows)
    assert "| 1.00x | conv03 64x128, 1 a block, A as rows |" in table
    assert "| 1.00x | im2col (50% im2col) |" in table


def test_auto_runs_conv03_wherever_it_can():
    """algorithm='auto' (the default): which step each kind of call gets, said before any launch:
    conv03 wherever it serves the call, the 1x1 filters at stride 1 among them."""
    from gemmlab.conv import choose_algorithm

    def pick(C=64, R=3, dtype=torch.bfloat16, stride=1, padding=1, device="cuda"):
        with FakeTensorMode():
            x = torch.empty(2, C, 14, 14, device=device, dtype=dtype)
            w = torch.empty(32, C, R, R, device=device, dtype=dtype)
            return choose_algorithm(x, w, None, stride, padding)

    assert pick(R=1, padding=0) == "tma" and pick(R=1, padding="valid") == "tma"
    assert pick(R=1, padding=0, stride=2) == "tma"
    assert pick(R=1, padding=1) == "tma"
    assert pick() == "tma" and pick(dtype=torch.float16, R=5, padding="same") == "tma"
    assert pick(C=3, R=7, stride=2, padding=3) == "gather"  # C not a multiple of 8: neither conv02 nor conv03, conv04
    assert pick(dtype=torch.float32) == "im2col"
    assert pick(device="cpu") == "im2col"
    with pytest.raises(ValueError, match="'auto', 'im2col', 'implicit', 'tma', 'gather'"):
        gemmlab.conv2d(torch.randn(1, 8, 5, 5), torch.randn(2, 8, 3, 3), algorithm="fastest")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_aligned_im2col_spaces_rows_to_16_bytes_and_holds_the_same_matrix(dtype):
    """The stem's 7 * 7 * 3 = 147 columns: rows spaced to 16 bytes (148 floats, 152 bf16), so that
    gemm's TMA steps read them; the same values as the packed matrix, the filter's as well; whole
    16-byte rows (C = 8) and the 1x1 view are left as they were."""
    from gemmlab.conv import conv_geometry, filter_matrix, im2col

    x, w = torch.randn(2, 3, 11, 13).to(dtype), torch.randn(5, 3, 7, 7).to(dtype)
    g = conv_geometry(tuple(x.shape), tuple(w.shape), 2, 3, 1)
    packed, spaced = im2col(x, g), im2col(x, g, aligned=True)
    assert spaced.stride(0) * spaced.element_size() % 16 == 0 and spaced.stride(0) > 147 and spaced.stride(1) == 1
    assert torch.equal(packed, spaced) and packed.is_contiguous()
    fw = filter_matrix(w, aligned=True)
    assert fw.stride(0) == spaced.stride(0) and torch.equal(fw, filter_matrix(w))
    x8, w8 = torch.randn(2, 8, 9, 9).to(dtype), torch.randn(4, 8, 3, 3).to(dtype)
    g8 = conv_geometry(tuple(x8.shape), tuple(w8.shape), 1, 1, 1)
    assert im2col(x8, g8, aligned=True).is_contiguous() and filter_matrix(w8, aligned=True).is_contiguous()
    cl = x8.to(memory_format=torch.channels_last)
    one = conv_geometry(tuple(cl.shape), (4, 8, 1, 1), 1, 0, 1)
    assert im2col(cl, one, aligned=True).data_ptr() == cl.data_ptr()


def test_a_kind_of_call_is_checked_once_and_each_new_kind_again(monkeypatch):
    checked = []
    real = conv_module._check
    monkeypatch.setattr(conv_module, "_check", lambda *args: (checked.append(args[0].shape), real(*args)))
    monkeypatch.setattr(conv_module, "_KINDS", {})
    x, w = torch.randn(2, 5, 9, 9), torch.randn(4, 5, 3, 3)
    first = gemmlab.conv2d(x, w, padding=[1, 1])  # a list: kept as a tuple in the table
    assert torch.equal(gemmlab.conv2d(x, w, padding=(1, 1)), first) and len(checked) == 1
    assert torch.equal(gemmlab.conv2d(x, w, padding=1), first)  # another way to say it: another kind, checked
    assert len(checked) == 2
    with pytest.raises(ValueError, match="share dtype"):
        gemmlab.conv2d(x.double(), w, padding=[1, 1])
    with pytest.raises(ValueError, match="groups=2 must divide"):
        gemmlab.conv2d(x, w, padding=[1, 1], groups=2)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        gemmlab.conv2d(x, w, padding=[1, 1], algorithm="fastest")
    cl = x.to(memory_format=torch.channels_last)  # same shape, other strides: its own kind and format
    assert gemmlab.conv2d(cl, w, padding=[1, 1]).is_contiguous(memory_format=torch.channels_last)
    assert len(checked) == 6


def test_auto_on_the_cpu_gives_what_im2col_gives():
    x, w, b = torch.randn(2, 5, 9, 9), torch.randn(4, 5, 3, 3), torch.randn(4)
    assert torch.equal(gemmlab.conv2d(x, w, b, padding=1), gemmlab.conv2d(x, w, b, padding=1, algorithm="im2col"))


def test_conv_table_reads_records_that_timed_the_unfold():
    """Records written when conv2d unfolded with torch (unfold_ms, no im2col_ms) keep their column's name."""
    rec = dict(name="s1 3x3", N=32, C=64, K=64, R=3, S=3, stride=1, gemm=dict(M=100352, N=64, K=576), tflops=100.0,
               cudnn_tflops=120.0, ratio=0.8, ms=1.0, unfold_ms=0.5, unfold_bytes=1, reps=10, dtype="bf16")  # fmt: skip
    table = tables.conv_table({"meta": {"gpu": "GPU", "commit": "abc", "time": "t"}, "records": [rec]})
    assert "| unfold share |" in table and "im2col share" not in table
    assert "| 0.80x | 50% |" in table and "torch's unfold alone" in table


@gpu
@needs_gpu
def test_a_small_conv_bench_run_writes_checked_records(tmp_path):
    sweep = dict(layers=[conv_bench.Layer("3x3", 5, 13, 11, 8, 3, 3, 1, 1), conv_bench.Layer("7x7/2", 3, 27, 27, 16, 7, 7, 2, 3),
                         conv_bench.Layer("1x1", 8, 9, 9, 16, 1, 1), conv_bench.Layer("1x1/2", 8, 9, 9, 16, 1, 1, 2)],
                 batches=[2], dtypes=["float32", "bf16"], tag="conv-test", reps=3, warmup=1)  # fmt: skip
    done = conv_bench.run_conv_bench(sweep, tmp_path)
    assert len(done) == 2
    for path, records in done:
        assert path.is_file() and len(records) == 4
        for r in records:
            assert r["ms"] > 0 and r["cudnn_ms"] > 0 and r["error"] < (1e-5 if r["dtype"] == "float32" else 2e-2)
            view = r["name"] == "1x1"  # stride 1, no padding, channels_last: A is x itself
            if view:
                assert r["im2col_ms"] is None and r["im2col_bytes"] == 0, r
            else:
                assert r["im2col_ms"] > 0 and r["im2col_bytes"] > 0, r
        assert "none (view)" in tables.conv_table({"meta": {"gpu": "GPU", "commit": "abc", "time": "t"}, "records": records})


def test_tiles_are_timed_only_for_conv03(tmp_path):
    sweep = dict(layers=[conv_bench.Layer("1x1", 8, 9, 9, 16, 1, 1)], batches=[2], dtypes=["bf16"], tag="t", reps=3, warmup=1)
    with pytest.raises(ValueError, match="algorithm='tma'"):
        conv_bench.run_conv_bench(sweep, tmp_path, algorithm="implicit", tiles=True)
    for store in (True, False):
        with pytest.raises(ValueError, match="algorithm='tma' or 'auto'"):
            conv_bench.run_conv_bench(sweep, tmp_path, algorithm="im2col", tma_store=store)


@gpu
@needs_gpu
def test_a_conv03_bench_run_with_the_staged_epilogue_says_so(tmp_path):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    import json

    from gemmlab import conv03

    sweep = dict(layers=[conv_bench.Layer("1x1", 64, 14, 14, 256, 1, 1)], batches=[4], dtypes=["bf16"], tag="t", reps=3,
                 warmup=1)  # fmt: skip
    for store in (False, True):
        ((path, (r,)),) = conv_bench.run_conv_bench(sweep, tmp_path, algorithm="tma", tma_store=store)
        assert r["conv03"]["tma_store"] is store and r["error"] < 2e-2 and conv03.TMA_STORE is True
        assert json.loads(path.read_text())["meta"]["conv03_tma_store"] is store


@gpu
@needs_gpu
def test_a_conv03_bench_run_records_its_build_and_every_tile_s_time(tmp_path, monkeypatch):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03
    from gemmlab.specs.conv import CONV03_TILES

    # a table of two plans: the tiles' plans push the timed one out, as 256 did over ResNet-50's layers
    monkeypatch.setattr(conv03, "_PLANS_MAX", 2)

    sweep = dict(layers=[conv_bench.Layer("3x3", 64, 14, 14, 128, 3, 3, 1, 1)], batches=[4], dtypes=["bf16"], tag="t",
                 reps=3, warmup=1)  # fmt: skip
    ((path, (r,)),) = conv_bench.run_conv_bench(sweep, tmp_path, algorithm="tma", tiles=True)
    assert r["algorithm"] == "tma" and r["conv03"]["persistent"] == conv03.PERSISTENT and conv03.TILE is None
    tiles = -(-4 * 14 * 14 // r["conv03"]["BM"]) * -(-128 // r["conv03"]["BN"])
    assert r["conv03"]["tiles"] == tiles and 1 <= r["conv03"]["grid"] <= tiles
    assert sorted(r["tile_ms"]) == sorted(f"{bm}x{bn}" for bm, bn in CONV03_TILES) and min(r["tile_ms"].values()) > 0


def test_a_plan_launches_its_packed_arguments_and_names_itself_when_the_launch_fails(monkeypatch):
    """conv03's and conv04's plans (gemmlab.conv_plan.LaunchPlan): cuLaunchKernel gets the plan's
    function, grid, block, shared memory and the address of its packed arguments, which point at
    the ctypes values the call filled in; a failed launch raises with the step's name and config."""
    import ctypes

    from cuda.bindings import driver

    from gemmlab.conv_plan import LaunchPlan, nhwc_strides, operand_layouts
    from gemmlab.launch import addresses as packed

    class Cfg:
        def as_dict(self):
            return {"TP": 8}

    args = (ctypes.c_uint64(0), ctypes.c_int32(7))
    plan = LaunchPlan(g={}, cfg=Cfg(), device_id=0, func="f", grid=(3, 1, 1), block=(128, 1, 1), smem=512,
                      args=args, params=packed(args), x_nhwc=True, w_krsc=True, bias_direct=True, out_channels_last=True)
    seen = []

    def fake(func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.append((func, (gx, gy, gz), (bx, by, bz), smem, stream, params, extra))
        return (result,)

    monkeypatch.setattr(driver, "cuLaunchKernel", fake)
    result = driver.CUresult.CUDA_SUCCESS
    args[0].value = 0xABC0
    plan.launch("s", "conv04")
    (func, grid, block, smem, stream, params, extra), = seen
    assert (func, grid, block, smem, stream, extra) == ("f", (3, 1, 1), (128, 1, 1), 512, "s", 0)
    pointers = (ctypes.c_void_p * 2).from_address(params)
    assert ctypes.c_uint64.from_address(pointers[0]).value == 0xABC0 and ctypes.c_int32.from_address(pointers[1]).value == 7
    result = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(RuntimeError, match=r"launching conv03 \{'TP': 8\} failed"):
        plan.launch("s", "conv03")
    x = torch.empty(2, 3, 5, 7).to(memory_format=torch.channels_last)
    w = torch.empty(4, 3, 3, 3).to(memory_format=torch.channels_last)
    assert nhwc_strides(x.shape) == x.stride()
    assert operand_layouts(x, w, torch.empty(4)) == dict(x_nhwc=True, w_krsc=True, bias_direct=True)
    assert operand_layouts(x.contiguous(), w, torch.empty(8)[::2].double()) == dict(x_nhwc=False, w_krsc=True, bias_direct=False)


@pytest.mark.parametrize("groups", [1, 2])
def test_one_image_without_a_batch_dimension_as_torch_takes_it(groups):
    """x [C, H, W] (torch's unbatched input): the result [K, P, Q], its gradients, and
    gemmlab.nn.Conv2d on it, against torch's (CPU, float32)."""
    torch.manual_seed(0)
    x = torch.randn(4, 9, 8, requires_grad=True)
    w = torch.randn(6, 4 // groups, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    ours = gemmlab.conv2d(x, w, b, stride=2, padding=1, groups=groups, activation="relu")
    theirs = torch.relu(F.conv2d(x, w, b, stride=2, padding=1, groups=groups))
    assert ours.shape == theirs.shape == (6, 5, 4)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(theirs)
    for got, want in zip(torch.autograd.grad(ours, (x, w, b), g), torch.autograd.grad(theirs, (x, w, b), g)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    module, reference = gemmlab.nn.Conv2d(4, 6, 3, padding="same", groups=groups), torch.nn.Conv2d(4, 6, 3, padding="same", groups=groups)
    module.load_state_dict(reference.state_dict())
    torch.testing.assert_close(module(x), reference(x), rtol=1e-4, atol=1e-4)


CONV_FUNC_CASES = [  # (C, K, R, S, groups, stride, padding, dilation, bias, activation, channels_last)
    (3, 4, 3, 3, 1, 1, 1, 1, True, None, False),
    (4, 6, 2, 2, 2, 1, "same", 1, False, "relu", False),  # an even reach: one more on the bottom and right
    (6, 6, 3, 3, 3, 2, 1, (2, 1), True, "gelu", True),
    (5, 7, 1, 3, 1, (1, 2), "valid", 1, True, "silu", False),
]  # fmt: skip


@pytest.mark.parametrize("C,K,R,S,groups,stride,padding,dilation,with_bias,act,last", CONV_FUNC_CASES)
def test_torch_func_transforms_match_torchs_on_f_conv2d(C, K, R, S, groups, stride, padding, dilation, with_bias, act, last):
    """gemmlab.conv_func: vmap over a batch of inputs, grad and jacrev with respect to the weight,
    and per-sample gradients (vmap of grad) of the weight and the bias, each against the same
    transform of F.conv2d (CPU, float32), for groups, "same" padding with an even filter, stride,
    dilation, channels_last, bias and activations."""
    torch.manual_seed(0)
    F = torch.nn.functional
    acts = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}
    x = torch.randn(3, C, 7, 9)
    w = torch.randn(K, C // groups, R, S) / (C * R * S) ** 0.5
    b = torch.randn(K) if with_bias else None
    if last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)

    def ours(x_, w_, b_):
        return gemmlab.conv2d(x_, w_, b_, stride, padding, dilation, groups, activation=act)

    def theirs(x_, w_, b_):
        return acts[act](F.conv2d(x_, w_, b_, stride, padding, dilation, groups))

    close = dict(rtol=1e-4, atol=1e-4)
    batched = x.unsqueeze(1)  # a batch of one-image batches
    torch.testing.assert_close(torch.func.vmap(lambda t: ours(t, w, b))(batched),
                               torch.func.vmap(lambda t: theirs(t, w, b))(batched), **close)  # fmt: skip
    loss = {f: (lambda w_, b_, x_=x, f=f: (f(x_, w_, b_) ** 2).sum()) for f in (ours, theirs)}
    argnums = (0, 1) if with_bias else 0
    for got, want in zip(torch.utils._pytree.tree_leaves(torch.func.grad(loss[ours], argnums)(w, b)),
                         torch.utils._pytree.tree_leaves(torch.func.grad(loss[theirs], argnums)(w, b))):  # fmt: skip
        torch.testing.assert_close(got, want, **close)
    torch.testing.assert_close(torch.func.jacrev(lambda w_: ours(x[:1], w_, b))(w),
                               torch.func.jacrev(lambda w_: theirs(x[:1], w_, b))(w), **close)  # fmt: skip
    per_sample = {f: torch.func.vmap(torch.func.grad(lambda w_, b_, t, f=f: (f(t.unsqueeze(0), w_, b_) ** 2).sum(), argnums),
                                     in_dims=(None, None, 0))(w, b, x) for f in (ours, theirs)}  # fmt: skip
    for got, want in zip(torch.utils._pytree.tree_leaves(per_sample[ours]), torch.utils._pytree.tree_leaves(per_sample[theirs])):
        assert got.shape[0] == x.shape[0]
        torch.testing.assert_close(got, want, **close)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        torch.func.vmap(lambda t: gemmlab.conv2d(t, w, groups=groups, algorithm="fft"))(batched)
    with pytest.raises(ValueError, match="weight has 1 input channels"):  # checked as outside a transform
        torch.func.vmap(lambda t: gemmlab.conv2d(t, w[:, :1]))(batched)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_per_sample_conv_gradients_on_cuda(dtype, tol):
    """vmap of grad over gemmlab.conv2d on CUDA tensors (gemmlab.conv_func: the products on the
    GPU's kernels), a grouped, strided, padded layer with a bias, against float64."""
    torch.manual_seed(0)
    x = torch.randn(5, 6, 13, 11, device="cuda", dtype=dtype)
    w = torch.randn(8, 3, 3, 3, device="cuda", dtype=dtype) / 3
    b = torch.randn(8, device="cuda", dtype=dtype)

    def per_sample(conv):
        loss = lambda w_, b_, xi: conv(xi.unsqueeze(0), w_, b_).float().square().sum()  # noqa: E731
        return torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0))(w, b, x)

    ours = per_sample(lambda xi, w_, b_: gemmlab.conv2d(xi, w_, b_, stride=2, padding=1, groups=2))
    exact = per_sample(lambda xi, w_, b_: F.conv2d(xi.double(), w_.double(), b_.double(), stride=2, padding=1, groups=2))
    assert ours[0].shape == (5, 8, 3, 3, 3) and ours[0].dtype == dtype and ours[1].shape == (5, 8)
    for got, want in zip(ours, exact):
        assert ((got.double() - want).norm() / want.norm()).item() < tol


def test_per_sample_gradients_of_a_small_cnn_on_gemmlabs_modules():
    """The torch.func recipe for per-sample gradients (functional_call, vmap of grad) over a CNN of
    gemmlab.nn.Conv2d and gemmlab.nn.Linear, against the same network on torch's own modules with
    the same weights (CPU, float32)."""
    torch.manual_seed(0)

    def net(conv, linear):
        return torch.nn.Sequential(conv(3, 8, 3, padding=1), torch.nn.ReLU(), conv(8, 8, 3, stride=2, groups=2),
                                   torch.nn.Flatten(), linear(8 * 3 * 3, 5))  # fmt: skip

    ours, theirs = net(gemmlab.nn.Conv2d, gemmlab.nn.Linear), net(torch.nn.Conv2d, torch.nn.Linear)
    ours.load_state_dict(theirs.state_dict())
    x, target = torch.randn(4, 3, 8, 8), torch.randn(4, 5)

    def per_sample(model):
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, xi, ti):
            return torch.nn.functional.mse_loss(torch.func.functional_call(model, p, (xi.unsqueeze(0),)), ti.unsqueeze(0))

        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, target)

    got, want = per_sample(ours), per_sample(theirs)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].shape == (4, *dict(theirs.named_parameters())[k].shape), k
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=k)


