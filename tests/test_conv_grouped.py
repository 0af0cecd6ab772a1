"""Grouped convolutions in one launch of conv02's grouped build (gemmlab.conv_grouped): its
compiles for sm_90a with the resource report checked, the tile it takes for a group's channels,
what it refuses, and when conv2d takes it (fake CUDA tensors, no GPU); on a GPU (marker `gpu`) its
results against float64 over random grouped layers, with groups of 4k and 8k channels, both memory
formats, a bias and each activation, NaN and Inf carried through as torch carries them, and the
gradients of x, the weight and the bias (GroupedConv) against torch's in float64. The filter
gradient's diagonal blocks of one GEMM (conv_grad.wgrad_grouped) run on the CPU ladder too, in one
run and in several runs of images, NaN included."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import conv as conv_module
from gemmlab import conv05, conv_grad, conv_grouped, jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.conv_shape import conv_geometry
from gemmlab.specs.conv import CONV02_GROUPED_TILES, CONV_02, conv02_grouped_config

BUILDS = [conv02_grouped_config(k, c) for k in (16, 32, 64, 65) for c in (4, 8)]


@pytest.mark.parametrize("cfg", BUILDS, ids=lambda c: f"BN{c['BN']}-CH{c['CH']}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_each_grouped_build_compiles_for_hopper_without_spills(cfg, dtype):
    for post in (0, post_code(True, "gelu")):
        ck = jit.compile_kernel(CONV_02, cfg, "sm_90a", dtype, dtype, post)
        assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, ck.usage
        assert ck.usage.dynamic_smem == CONV_02.dynamic_smem(cfg)


def test_the_tile_holds_a_groups_output_channels_and_the_copies_fit_its_input_channels():
    for k, bn in ((1, 16), (4, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)):
        cfg = conv02_grouped_config(k, 8)
        assert cfg["BN"] == bn and cfg["CH"] == 8 and CONV_02.block(cfg)[0] == 128
    assert conv02_grouped_config(4, 4)["CH"] == 4 and conv02_grouped_config(4, 12)["CH"] == 4
    assert conv02_grouped_config(65, 16) == CONV_02.config(CH=8)
    assert [t[0] for t in CONV02_GROUPED_TILES] == sorted(t[0] for t in CONV02_GROUPED_TILES)
    with pytest.raises(ValueError, match="CH must be 8"):
        CONV_02.config(CH=2)


def test_what_it_refuses():
    with FakeTensorMode():
        x = torch.empty(2, 64, 9, 9, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, 4, 3, 3, device="cuda", dtype=torch.bfloat16)
        assert conv_grouped.grouped_why_not(x, w, 16) is None
        assert "multiple of 4" in conv_grouped.grouped_why_not(x, torch.empty(64, 2, 3, 3, device="cuda"), 32)
        assert "bf16 or fp16" in conv_grouped.grouped_why_not(x.float(), w.float(), 16)
        assert "groups > 1" in conv_grouped.grouped_why_not(x, torch.empty(64, 64, 3, 3, device="cuda"), 1)
    assert "CUDA tensors" in conv_grouped.grouped_why_not(torch.empty(1, 8, 3, 3), torch.empty(8, 4, 1, 1), 2)


def _dispatch(monkeypatch, requires_grad=False, traced=False, groups=8, channels=64, dtype=torch.bfloat16, filters=128,
              algorithm="auto"):  # fmt: skip
    """Which path conv2d takes for a grouped call on fake CUDA tensors: 'one launch' (conv02's
    grouped build), 'conv05' (its narrow groups), "conv05's operator" (the same, traced) or 'a
    group at a time'."""
    taken = []
    monkeypatch.setattr(conv_module, "_traced", lambda *t: traced)
    monkeypatch.setattr(conv_module, "wants_grad", lambda *t: requires_grad)
    monkeypatch.setattr(conv_grouped, "run", lambda *a: (taken.append("one launch"), torch.empty(0))[1])
    monkeypatch.setattr(conv05, "run", lambda *a: (taken.append("conv05"), torch.empty(0))[1])
    monkeypatch.setattr(conv05, "depthwise_op", lambda *a: (taken.append("conv05's operator"), torch.empty(0))[1])
    monkeypatch.setattr(conv_module, "_grouped", lambda *a: (taken.append("a group at a time"), torch.empty(0))[1])
    monkeypatch.setattr(conv_module.GroupedConv, "apply", lambda *a: (taken.append("one launch, autograd"), torch.empty(0))[1])
    with FakeTensorMode():
        x = torch.empty(2, channels, 9, 9, device="cuda", dtype=dtype)
        w = torch.empty(filters, channels // groups, 3, 3, device="cuda", dtype=dtype)
        gemmlab.conv2d(x, w, padding=1, groups=groups, algorithm=algorithm)
    return taken


def test_conv2d_takes_one_launch_for_a_grouped_layer_outside_a_trace(monkeypatch):
    assert _dispatch(monkeypatch) == ["one launch"]
    assert _dispatch(monkeypatch, groups=16) == ["one launch"]  # groups of 4 channels
    assert _dispatch(monkeypatch, requires_grad=True) == ["one launch, autograd"]  # (GroupedConv's gradients)
    assert _dispatch(monkeypatch, traced=True) == ["a group at a time"]  # (its steps have operators)
    assert _dispatch(monkeypatch, groups=32) == ["a group at a time"]  # groups of 2 channels
    assert _dispatch(monkeypatch, dtype=torch.float32) == ["a group at a time"]
    # narrow groups with as many filters as channels: conv05's grouped build, fp32 too where a
    # group's channels fall within a thread's 16 bytes (4 fp32 ones)
    assert _dispatch(monkeypatch, filters=64) == ["conv05"]  # 8 channels, 8 filters a group
    assert _dispatch(monkeypatch, filters=64, groups=16) == ["conv05"]
    assert _dispatch(monkeypatch, filters=64, groups=32) == ["conv05"]
    assert _dispatch(monkeypatch, filters=64, groups=16, dtype=torch.float32) == ["conv05"]
    assert _dispatch(monkeypatch, filters=64, dtype=torch.float32) == ["a group at a time"]  # 8 fp32: 32 bytes
    assert _dispatch(monkeypatch, filters=64, requires_grad=True) == ["one launch, autograd"]
    assert _dispatch(monkeypatch, filters=64, traced=True) == ["conv05's operator"]  # (gemmlab::conv2d_depthwise)
    assert _dispatch(monkeypatch, filters=64, traced=True, requires_grad=True) == ["conv05's operator"]
    # algorithm="depthwise" asks for conv05 (narrow groups too), "implicit" for conv02
    assert _dispatch(monkeypatch, filters=64, algorithm="depthwise") == ["conv05"]
    assert _dispatch(monkeypatch, filters=64, algorithm="implicit") == ["one launch"]
    with pytest.raises(ValueError, match="algorithm='depthwise'.*as many"):
        _dispatch(monkeypatch, algorithm="depthwise")  # 16 filters a group of 8 channels
    assert _dispatch(monkeypatch, filters=64, algorithm="depthwise", traced=True) == ["conv05's operator"]
    monkeypatch.setattr(conv_grouped, "GRID_Y_MAX", 1)  # more tiles of pixels than one launch's grid holds
    assert _dispatch(monkeypatch) == ["a group at a time"]
    assert _dispatch(monkeypatch, filters=64) == ["conv05"]  # (its grid strides over the pixels)


def test_fits_counts_the_tiles_of_output_pixels():
    g = dict(N=32, C=4, K=128, P=56, Q=56)  # ResNeXt-50's first grouped layer: 784 tiles of 128 pixels
    assert conv_grouped.fits(g, 32)
    assert conv_grouped.fits(dict(g, N=1, P=2048, Q=4095), 32)  # 65,520 tiles
    assert not conv_grouped.fits(dict(g, N=1, P=2048, Q=4096), 32)  # 65,536: past the grid's y dimension


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _layers(count: int, seed: int = 0):
    """Random grouped layers: groups of 4..40 channels (4k and 8k), 1..70 filters a group, odd
    images, filters 1x1..5x5, stride, padding and dilation as conv2d takes them."""
    rng = random.Random(seed)
    for _ in range(count):
        groups = rng.choice((2, 3, 4, 8, 32))
        cg, kg = 4 * rng.randint(1, 10), rng.choice((1, 3, 4, 8, 13, 16, 24, 32, 40, 64, 70))
        R = rng.choice((1, 3, 3, 5))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 29), rng.randint(dil * (R - 1) + 1, 29)
        padding = rng.choice((0, 1, R // 2, "same", "valid"))
        stride = 1 if padding == "same" else rng.choice((1, 2))
        yield dict(N=rng.randint(1, 3), C=cg * groups, H=H, W=W, K=kg * groups, R=R, stride=stride, padding=padding,
                   dilation=dil, groups=groups)  # fmt: skip


def _counted_launches(monkeypatch) -> list:
    """A list that gets an entry at each launch of the grouped build (conv_grouped.run)."""
    launches = []
    real = conv_grouped.run
    monkeypatch.setattr(conv_grouped, "run", lambda *a: (launches.append(1), real(*a))[1])
    return launches


def _sizes(layer: dict) -> tuple:
    """A drawn layer's (N, C, H, W, K, R, groups), and conv2d's keywords for it."""
    L = dict(layer)
    return tuple(L.pop(k) for k in "NCHWKR") + (L["groups"],), L


def test_the_drawn_layers_are_grouped_and_split_into_sizes_and_keywords():
    for layer in _layers(30):
        (N, C, H, W, K, R, groups), kw = _sizes(layer)
        assert C % (4 * groups) == 0 and K % groups == 0 and set(kw) == {"stride", "padding", "dilation", "groups"}


def _torch_wgrad(x, dy, w, L):
    """torch's filter gradient of the layer (aten.convolution_backward, the weight's alone)."""
    g = conv_geometry(tuple(x.shape), tuple(w.shape), L["stride"], L["padding"], L["dilation"])
    top, bottom, left, right = g["pads"]
    if (top, left) != (bottom, right):  # "same" with an even reach: pad the far side first
        x, (top, left) = F.pad(x, (0, right - left, 0, bottom - top)), (top, left)
    return torch.ops.aten.convolution_backward(dy, x, w, None, list(g["stride"]), [top, left], list(g["dilation"]), False,
                                               [0, 0], L["groups"], [False, True, False])[1]  # fmt: skip


@pytest.mark.parametrize("runs", ["one run", "a run an image"])
@pytest.mark.parametrize("layer", list(_layers(6, seed=2)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_the_filter_gradient_is_the_diagonal_of_one_gemm(layer, runs, monkeypatch):
    """wgrad_grouped on the CPU ladder (float32) against torch's float64 filter gradient of the same
    grouped layer: every group's block, in one run of images and with the images one a run (the
    parts summed in fp32 through gemm's c)."""
    if runs != "one run":
        monkeypatch.setattr(conv_grad, "WGRAD_FIELDS_BYTES", 1)
    (N, C, H, W, K, R, groups), L = _sizes(layer)
    torch.manual_seed(3)
    x = torch.randn(N, C, H, W).to(memory_format=torch.channels_last)
    w = torch.randn(K, C // groups, R, R)
    g = conv_geometry(tuple(x.shape), (K, C, R, R), L["stride"], L["padding"], L["dilation"])
    dy = torch.randn(N, K, g["P"], g["Q"]).to(memory_format=torch.channels_last)
    dw = conv_grad.wgrad_grouped(x, dy, g, groups)
    ref = _torch_wgrad(x.double(), dy.double(), w.double(), L)
    assert dw.shape == ref.shape and dw.dtype == torch.float32
    err = float((dw.double() - ref).abs().max() / ref.abs().max())
    assert err < 1e-5, f"{layer} {runs}: {err:.2e}"


def test_a_nan_in_one_groups_input_reaches_that_groups_filter_gradient_alone(monkeypatch):
    """The dense GEMM's other blocks multiply every group's input too; they are dropped, so a NaN
    in group 1's input and an Inf in group 2's dY reach exactly the filter gradients torch gives
    them (in one run and in several)."""
    groups, cg, kg = 4, 4, 3
    x = torch.randn(2, cg * groups, 9, 8).to(memory_format=torch.channels_last)
    dy = torch.randn(2, kg * groups, 9, 8).to(memory_format=torch.channels_last)
    x[1, cg + 2, 4, 4] = float("nan")
    dy[0, 2 * kg + 1, 3, 3] = float("inf")
    L = dict(stride=1, padding=1, dilation=1, groups=groups)
    g = conv_geometry(tuple(x.shape), (kg * groups, cg * groups, 3, 3), 1, 1, 1)
    ref = _torch_wgrad(x.double(), dy.double(), torch.empty(kg * groups, cg, 3, 3, dtype=torch.double), L)
    for fields_bytes in (conv_grad.WGRAD_FIELDS_BYTES, 1):
        monkeypatch.setattr(conv_grad, "WGRAD_FIELDS_BYTES", fields_bytes)
        dw = conv_grad.wgrad_grouped(x, dy, g, groups)
        assert torch.equal(dw.isnan(), ref.isnan()) and torch.equal(dw.isinf(), ref.isinf())
        assert dw.isnan().any() and not dw[:kg].isnan().any() and not dw[3 * kg:].isnan().any()


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layer", list(_layers(16)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_one_launch_against_float64_on_the_gpu(dtype, tol, layer, monkeypatch):
    """The layer in one launch (each launch counted) with a bias and an activation, both memory
    formats, against F.conv2d in float64; the memory the result lands in is filled with NaN before."""
    launches = _counted_launches(monkeypatch)
    (N, C, H, W, K, R, groups), L = _sizes(layer)
    torch.manual_seed(0)
    rng = random.Random(str(layer))
    x = torch.randn(N, C, H, W, device="cuda").to(dtype)
    if rng.random() < 0.5:
        x = x.to(memory_format=torch.channels_last)
    w = (torch.randn(K, C // groups, R, R, device="cuda") / (C // groups * R * R) ** 0.5).to(dtype)
    bias = torch.randn(K, device="cuda").to(dtype) if rng.random() < 0.7 else None
    activation = rng.choice((None, "relu", "gelu", "silu"))
    want = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **L)
    want = want if activation is None else ACTIVATIONS[activation](want)
    torch.full((4 * want.numel() + 4096,), float("nan"), device="cuda", dtype=dtype)  # freed: the result's memory
    y = gemmlab.conv2d(x, w, bias, activation=activation, **L)
    assert launches == [1] and y.dtype == dtype and y.shape == want.shape
    theirs = F.conv2d(x, w, bias, **L)
    for fmt in (torch.channels_last, torch.contiguous_format):  # torch's memory format
        assert y.is_contiguous(memory_format=fmt) == theirs.is_contiguous(memory_format=fmt), fmt
    assert not y.isnan().any()
    err = float((y.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))
    assert err < tol, f"{layer} bias={bias is not None} {activation}: {err:.2e}"


@gpu
@needs_gpu
def test_nan_and_inf_reach_the_groups_they_are_in_on_the_gpu():
    """A NaN in one group's input and an Inf in another's filter reach exactly the outputs torch's
    convolution gives them, in one launch; a group of 4 channels and one of 8."""
    for cg in (4, 8):
        _nan_and_inf_reach_their_groups(cg, 6, 4)


def _nan_and_inf_reach_their_groups(cg: int, kg: int, groups: int) -> None:
    """A NaN in group 1's input and an Inf in group 3's filters: conv2d's NaN and Inf where torch's
    float64 grouped convolution has them (bf16, channels_last)."""
    x = torch.randn(2, cg * groups, 11, 13, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(kg * groups, cg, 3, 3, device="cuda").bfloat16()
    x[1, cg + 1, 5, 6] = float("nan")  # group 1
    w[3 * kg + 1, 0, 1, 1] = float("inf")  # group 3
    y = gemmlab.conv2d(x, w, padding=1, groups=groups)
    ref = F.conv2d(x.double(), w.double(), padding=1, groups=groups)
    assert torch.equal(y.isnan(), ref.isnan()) and torch.equal(y.isinf(), ref.isinf())
    assert y.isnan().any() and y.isinf().any()


# ---- conv-bench over ResNeXt-50's grouped layers ------------------------------------------------


def test_the_resnext_sweep_parses():
    from pathlib import Path

    from gemmlab.bench.conv import read_conv_sweep

    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "resnext50.toml")
    assert sweep["tag"] == "conv-resnext50" and len(sweep["layers"]) == 7
    assert all(l.groups == 32 and l.C == l.K and l.R == l.S == 3 for l in sweep["layers"])
    assert sorted({l.C // 32 for l in sweep["layers"]}) == [4, 8, 16, 32]


def test_grouped_records_have_a_table_of_their_own(tmp_path):
    """conv-resnext50-auto records merge among themselves (GROUPED_TAGS) and stay out of ResNet-50's
    and the depthwise layers' tables; their rows say which path ran: one launch or a group at a time."""
    from conftest import conv_run
    from gemmlab.bench import layer_tables, records
    from gemmlab.bench.run import write_run

    run = conv_run("auto", {("s1 3x3", 32): 0.8, ("s2 3x3", 32): 0.1}, "gggg")
    for r, algorithm in zip(run["records"], ("grouped-conv02", "grouped")):
        r.update(algorithm=algorithm, C=128, K=128, R=3, S=3, stride=1, groups=32, tflops=1.0, cudnn_tflops=2.0,
                 gemm=dict(M=100352, N=4, K=36))  # fmt: skip
    write_run(tmp_path / "nvidia-h200" / "conv-resnext50-auto-20261128T000000Z.json", run["meta"], run["records"])
    assert records.merged_conv(tmp_path) == [] and records.merged_conv(tmp_path, records.DEPTHWISE_TAGS) == []
    (merged,) = records.merged_conv(tmp_path, records.GROUPED_TAGS)
    table = layer_tables.conv_table(merged)
    assert "| 0.80x | conv02, one launch (32 groups) |" in table
    assert "| 0.10x | a convolution a group (32) |" in table


@gpu
@needs_gpu
def test_a_grouped_bench_run_says_which_build_ran_in_one_launch_on_the_gpu(tmp_path):
    from gemmlab.bench import conv as conv_bench

    layer = conv_bench.Layer("g", 64, 15, 13, 128, 3, 3, 1, 1, groups=16)  # 4 channels and 8 filters a group
    narrow = conv_bench.Layer("n", 64, 15, 13, 64, 3, 3, 1, 1, groups=16)  # 4 and 4: conv05's grouped build
    sweep = dict(layers=[layer, narrow], batches=[2], dtypes=["bf16"], tag="t", reps=3, warmup=1)
    runs = [r for _, rs in conv_bench.run_conv_bench(sweep, tmp_path, algorithm="auto") for r in rs]
    assert [r["algorithm"] for r in runs] == ["grouped-conv02", "grouped-conv05"]
    assert runs[0]["groups"] == 16 and runs[0]["gemm"] == dict(M=2 * 15 * 13, N=8, K=36)
    for r in runs:
        assert r["error"] < 2e-2 and r["ms"] > 0 and r["cudnn_ms"] > 0


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layer", list(_layers(10, seed=1)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_gradients_against_float64_on_the_gpu(dtype, tol, layer, monkeypatch):
    """GroupedConv: the forward pass in one launch, then dX (one more grouped convolution: in one
    launch too where dY's groups have a multiple of 4 channels) and dW, db, against torch's float64
    gradients of the same layer with a SiLU after it, at a random dY."""
    launches = _counted_launches(monkeypatch)
    (N, C, H, W, K, R, groups), L = _sizes(layer)
    _check_gradients(layer, dtype, tol, seed=1)
    assert len(launches) == 1 + ((K // groups) % 4 == 0)  # the forward pass, and dX where dY's groups allow


def _check_gradients(layer: dict, dtype, tol: float, seed: int) -> None:
    """conv2d's dX, dW and db of a layer with a SiLU after it, at a random dY, against torch's in
    float64 (error relative to each gradient's largest element, under 4 * tol)."""
    (N, C, H, W, K, R, groups), L = _sizes(layer)
    torch.manual_seed(seed)
    x = torch.randn(N, C, H, W, device="cuda").to(dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(K, C // groups, R, R, device="cuda") / (C // groups * R * R) ** 0.5).to(dtype)
    b = torch.randn(K, device="cuda").to(dtype)
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    y = gemmlab.conv2d(xs, ws, bs, activation="silu", **L)
    dy = torch.randn(y.shape, device="cuda").to(dtype)
    y.backward(dy)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    F.silu(F.conv2d(*ref, **L)).backward(dy.double())
    for name, mine, theirs in zip("xwb", (xs.grad, ws.grad, bs.grad), (t.grad for t in ref)):
        assert mine.shape == theirs.shape and mine.dtype == dtype, name
        err = float((mine.double() - theirs).abs().max() / theirs.abs().max().clamp_min(1e-30))
        assert err < 4 * tol, f"{layer} d{name}: {err:.2e}"


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
def test_the_filter_gradient_in_runs_of_images_on_the_gpu(dtype, tol, monkeypatch):
    """wgrad_grouped with an image a run (the parts summed in fp32 through gemm's c, rounded once)
    against torch's float64 filter gradient, and a NaN in one group's input reaching that group's
    filters alone, as torch's does."""
    monkeypatch.setattr(conv_grad, "WGRAD_FIELDS_BYTES", 1)
    groups, cg, kg = 8, 4, 12
    torch.manual_seed(4)
    x = torch.randn(3, cg * groups, 15, 17, device="cuda").to(dtype).to(memory_format=torch.channels_last)
    L = dict(stride=2, padding=1, dilation=1, groups=groups)
    g = conv_geometry(tuple(x.shape), (kg * groups, cg * groups, 3, 3), 2, 1, 1)
    dy = torch.randn(3, kg * groups, g["P"], g["Q"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
    w = torch.empty(kg * groups, cg, 3, 3, dtype=torch.double, device="cuda")
    dw = conv_grad.wgrad_grouped(x, dy, g, groups)
    ref = _torch_wgrad(x.double(), dy.double(), w, L)
    assert dw.dtype == dtype
    assert float((dw.double() - ref).abs().max() / ref.abs().max()) < 4 * tol
    x[2, 5 * cg + 1, 7, 7] = float("nan")  # group 5
    dw = conv_grad.wgrad_grouped(x, dy, g, groups)
    ref = _torch_wgrad(x.double(), dy.double(), w, L)
    assert torch.equal(dw.isnan(), ref.isnan()) and dw[5 * kg:6 * kg].isnan().any() and not dw[:5 * kg].isnan().any()


# ---- conv05's grouped build: narrow groups (2, 4 or 8 channels, as many filters) ---------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_the_narrow_group_builds_compile_for_hopper_without_spills(dtype):
    """conv05's forward kernel with CG = 2, 4 and 8 (those dividing a thread's 16 bytes of
    channels), each TQ the host picks, with and without the sliding row (3 and 7 wide; 3 at stride
    2), plain and fused."""
    from gemmlab.specs.conv import CONV_05

    vec = 16 // torch.empty(0, dtype=dtype).element_size()
    jobs = [(CONV_05, CONV_05.config(VEC=vec, TQ=tq, CG=cg, SW=sw, SX=sx), post) for cg in conv05.NARROW_GROUPS
            if vec % cg == 0 for tq in (1, 4) for sw, sx in ((0, 1), (3, 1), (7, 1), (3, 2))
            for post in (0, post_code(True, "silu"))]  # fmt: skip
    assert len(jobs) == 16 * (3 if vec == 8 else 2)
    from gemmlab.specs.conv import CONV_05_WGRAD  # and the filter gradient's, at every SG the rule can pick

    jobs += [(CONV_05_WGRAD, CONV_05_WGRAD.config(VEC=vec, SG=sg, RG=1, CG=cg, PIX=conv05.wgrad_pixels(sg, 1, vec, cg)), 0)
             for cg in conv05.NARROW_GROUPS if vec % cg == 0
             for sg in range(1, min(8, conv05.NARROW_WGRAD_SUMS // (vec * cg)) + 1)]  # fmt: skip
    from gemmlab.specs.conv import CONV_05_DGRAD  # and dgrad's, each TQ and stride the host picks

    jobs += [(CONV_05_DGRAD, CONV_05_DGRAD.config(VEC=vec, TQ=tq, UNIT=unit, CG=cg), 0) for cg in conv05.NARROW_GROUPS
             if vec % cg == 0 for tq, unit in ((1, 1), (4, 1), (1, 0), (conv05.STRIDED_DGRAD_TQ, 0))]  # fmt: skip
    for spec, cfg, post in jobs:
        ck = jit.compile_kernel(spec, cfg, "sm_90a", dtype, dtype, post=post)
        assert ck.usage.spills == 0 and ck.usage.stack_frame == 0 and ck.usage.registers <= 255, (cfg, ck.usage)
    with pytest.raises(ValueError, match="CG must be"):
        CONV_05.config(VEC=4, TQ=4, CG=8)
    with pytest.raises(ValueError, match="at most 96 sums a thread"):
        CONV_05_WGRAD.config(VEC=8, SG=2, RG=1, CG=8)


def test_the_narrow_group_filter_gradient_keeps_a_threads_sums_in_registers():
    """conv05.wgrad_taps: depthwise as before (a row, or every row of a 3x1); narrow groups as many
    taps of a row as keep SG * VEC * CG within NARROW_WGRAD_SUMS, one row a thread; wgrad_pixels:
    as many pixels' loads in flight as fit the registers left."""
    assert conv05.NARROW_WGRAD_SUMS == 32 and conv05.WGRAD_REGISTERS == 96
    assert conv05.wgrad_taps(3, 3) == (3, 1) and conv05.wgrad_taps(3, 1) == (1, 3)
    assert conv05.wgrad_taps(3, 3, 8, 4) == (1, 1) and conv05.wgrad_taps(3, 3, 8, 8) == (1, 1)  # (64 sums: one tap)
    assert conv05.wgrad_taps(5, 5, 4, 2) == (4, 1) and conv05.wgrad_taps(7, 7, 4, 4) == (2, 1)
    assert conv05.wgrad_taps(1, 1, 8, 8) == (1, 1) and conv05.wgrad_taps(3, 3, 8, 2) == (2, 1)
    assert conv05.wgrad_pixels(1, 1, 8, 8) == min(conv05.NARROW_WGRAD_PIX, 4)  # 64 sums, 4 x 2 loads of 4 registers
    assert conv05.wgrad_pixels(2, 1, 8, 4) == min(conv05.NARROW_WGRAD_PIX, 2)  # 64 sums, 2 x 3 loads
    assert conv05.wgrad_pixels(8, 1, 8, 1) == 1  # 64 sums, 9 loads a pixel: one pixel whatever WGRAD_PIX
    g = conv_geometry((32, 128, 56, 56), (128, 4, 3, 3), 1, 1)
    chunk = conv05.wgrad_chunk(g, 8, 132, 4)
    assert chunk == conv05.wgrad_chunk(dict(g), 8, 132, 4)
    assert -(-32 * 56 * 56 // chunk) * 9 * 128 * 4 <= conv05._WGRAD_PARTS_MAX


def test_the_filter_gradients_parts_land_in_the_weights_layout_by_either_sum():
    """wgrad's parts, laid out as the kernel stores them ([taps][VEC][CG][C / VEC] a chunk: slot
    j * CG + i of channel vector v for filter v * VEC + j, its group's channel i), added by torch's
    sum (conv05.wgrad's reshape) and by the index arithmetic of conv05's sum kernel, written here
    in Python: both put every (filter, channel, tap) where the weight [C, CG, R, S] has it."""
    for C, vec, cg, R, S in ((16, 8, 4, 3, 3), (24, 8, 8, 1, 3), (12, 4, 2, 3, 1), (13, 1, 1, 2, 2), (64, 8, 1, 3, 3)):
        vecs, taps = C // vec, R * S
        want = torch.arange(C * cg * taps, dtype=torch.float64).reshape(C, cg, R, S)  # a distinct value an entry
        parts = torch.empty(2, taps, C * cg, dtype=torch.float64)
        for v in range(vecs):  # the kernel's stores: out[(j * CG + i) * (C / VEC) + v] at each tap
            for j in range(vec):
                for i in range(cg):
                    for tap in range(taps):
                        parts[0, tap, (j * cg + i) * vecs + v] = want[v * vec + j, i, tap // S, tap % S]
        parts[1] = 0.0
        summed = parts.sum(0).view(taps, vec, cg, vecs)  # torch's sum, as conv05.wgrad reshapes it
        assert torch.equal(summed.permute(3, 1, 2, 0).reshape(C, cg, R, S), want), (C, vec, cg)
        dw = torch.full((C * cg * taps,), float("nan"), dtype=torch.float64)
        width = C * cg
        for e in range(taps * width):  # conv_depthwise_wgrad_sum's entry e
            tap, slot, c = e // width, e % width // vecs, e % vecs * vec + e % width // vecs // cg
            dw[(c * cg + slot % cg) * taps + tap] = parts[:, tap, e % width].sum()
        assert torch.equal(dw.view(C, cg, R, S), want), (C, vec, cg)


def test_narrow_groups_take_conv05s_gradients(monkeypatch):
    """GroupedConv's dX and dW: conv05.dgrad (at a stride) and conv05.wgrad (cg channels a group)
    where the forward pass ran on conv05's grouped build, dX at stride 1 the flipped filters' grouped
    conv2d; a grouped conv2d over the spread dY and the diagonal of one GEMM
    (conv_grad.wgrad_grouped) where it ran on conv02's."""
    calls = []
    monkeypatch.setattr(conv05, "wgrad", lambda x, dy, g, dt, cg=1: calls.append(("conv05", g["C"], g["K"], cg)))
    monkeypatch.setattr(conv05, "dgrad", lambda dy, w, g, last, cg=1: calls.append(("conv05 dgrad", g["C"], g["K"], cg)))
    monkeypatch.setattr(conv_module, "conv2d", lambda *a, **k: calls.append(("conv2d", a[-1])))
    monkeypatch.setattr(conv_grad, "wgrad_grouped", lambda x, dy, g, G, precision="fp32": calls.append(("gemm", g["C"], G)))
    monkeypatch.setattr(conv05, "run", lambda *a, **k: torch.empty(0))
    monkeypatch.setattr(conv_grouped, "run", lambda *a, **k: torch.empty(0))
    for C, K, groups, narrow, stride in ((128, 128, 32, True, 2), (128, 128, 32, True, 1), (64, 128, 16, False, 2)):
        x = torch.empty(2, C, 8, 8).requires_grad_()
        w = torch.empty(K, C // groups, 3, 3).requires_grad_()
        g = conv_geometry((2, C // groups, 8, 8), (K, C // groups, 3, 3), stride, 1)
        ctx = type("Ctx", (), {"needs_input_grad": (True, True, False),
                               "save_for_backward": lambda self, *t: setattr(self, "saved_tensors", t)})()  # fmt: skip
        conv_module.GroupedConv.forward(ctx, x, w, None, g, groups, True, narrow)
        conv_module.GroupedConv.backward(ctx, torch.empty(2, K, g["P"], g["Q"]))
    assert calls == [("conv05 dgrad", 128, 128, 4), ("conv05", 128, 128, 4),  # strided: dgrad's own launch
                     ("conv2d", 32), ("conv05", 128, 128, 4),  # stride 1: the flipped filters' pass (a sliding row)
                     ("conv2d", 16), ("gemm", 64, 16)]  # fmt: skip


def test_what_the_narrow_group_build_refuses():
    with FakeTensorMode():
        x = torch.empty(2, 64, 9, 9, device="cuda", dtype=torch.bfloat16)
        for cg in (2, 4, 8):
            assert conv05.narrow_groups_why_not(x, torch.empty(64, cg, 3, 3, device="cuda"), 64 // cg) is None
        assert "as many" in conv05.narrow_groups_why_not(x, torch.empty(128, 4, 3, 3, device="cuda"), 16)
        assert "not 16 channels" in conv05.narrow_groups_why_not(x, torch.empty(64, 16, 3, 3, device="cuda"), 4)
        assert "within 16 bytes" in conv05.narrow_groups_why_not(x.float(), torch.empty(64, 8, 3, 3, device="cuda"), 8)
        x36 = torch.empty(2, 36, 9, 9, device="cuda", dtype=torch.bfloat16)
        assert "within 16 bytes" in conv05.narrow_groups_why_not(x36, torch.empty(36, 4, 3, 3, device="cuda"), 9)
        assert "too large" in conv05.narrow_groups_why_not(x, torch.empty(64, 8, 9, 9, device="cuda"), 8)  # 81*8*8 > 4096
        assert conv05.narrow_groups_why_not(x, torch.empty(64, 8, 8, 8, device="cuda"), 8) is None  # 64*8*8 = 4096
        assert "bf16, fp16 or float32" in conv05.narrow_groups_why_not(x.double(), torch.empty(64, 4, 3, 3), 16)
    assert "CUDA tensors" in conv05.narrow_groups_why_not(torch.empty(1, 8, 3, 3), torch.empty(8, 4, 1, 1), 2)


def _narrow_layers(count: int, seed: int = 5):
    """Random layers conv05's grouped build serves: two or more groups of 2, 4 or 8 channels and
    as many filters, odd images, filters 1x1..5x5, stride, padding and dilation, a dtype each."""
    rng = random.Random(seed)
    for _ in range(count):
        dtype = rng.choice(("bf16", "fp16", "fp32"))
        cg = rng.choice((2, 4) if dtype == "fp32" else (2, 4, 8))
        C = rng.choice((16, 24, 64, 136)) if dtype != "fp32" else rng.choice((8, 12, 64))  # (two groups at least)
        R, dil = rng.choice((1, 3, 3, 5)), rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 31), rng.randint(dil * (R - 1) + 1, 31)
        padding = rng.choice((0, 1, R // 2, "same"))
        stride = 1 if padding == "same" else rng.choice((1, 2))
        yield dict(dtype=dtype, N=rng.randint(1, 3), C=C, H=H, W=W, K=C, R=R, stride=stride, padding=padding,
                   dilation=dil, groups=C // cg)  # fmt: skip


_DT = {"bf16": (torch.bfloat16, 2e-2), "fp16": (torch.float16, 4e-3), "fp32": (torch.float32, 1e-5)}


@gpu
@needs_gpu
@pytest.mark.parametrize("layer", list(_narrow_layers(16)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_narrow_groups_against_float64_on_the_gpu(layer, monkeypatch):
    """conv2d on conv05's grouped build (one launch, counted) against F.conv2d in float64: both
    memory formats, an offset view of x, a bias and an activation, the output poisoned first."""
    L = dict(layer)
    dtype, tol = _DT[L.pop("dtype")]
    (N, C, H, W, K, R, groups), kw = _sizes(L)
    launches = []
    real = conv05.run
    monkeypatch.setattr(conv05, "run", lambda *a: (launches.append(a[-1]), real(*a))[1])
    torch.manual_seed(6)
    base = torch.randn(N, C + 8, H, W, device="cuda").to(dtype)
    for x in (base[:, 8:].contiguous(), base[:, 8:].contiguous(memory_format=torch.channels_last), base[:, 4:4 + C]):
        w = (torch.randn(K, C // groups, R, R, device="cuda") / (C // groups * R * R) ** 0.5).to(dtype)
        b = torch.randn(K, device="cuda").to(dtype)
        y = gemmlab.conv2d(x, w, b, activation="gelu", **kw)
        ref = F.gelu(F.conv2d(x.double(), w.double(), b.double(), **kw))
        assert y.shape == ref.shape and y.dtype == dtype and not y.isnan().any()
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        assert err < tol, f"{layer}: {err:.2e}"
    assert launches == [C // groups] * 3  # cg, one launch a call


@gpu
@needs_gpu
def test_narrow_groups_carry_nan_and_inf_as_torch_does_on_the_gpu():
    """A NaN in one group's input and an Inf in another's filter reach exactly the outputs torch's
    grouped convolution gives them, on conv05's grouped build, groups of 2, 4 and 8."""
    for cg in (2, 4, 8):
        _nan_and_inf_reach_their_groups(cg, cg, 32 // cg)


@gpu
@needs_gpu
@pytest.mark.parametrize("layer", list(_narrow_layers(6, seed=7)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_narrow_group_gradients_against_float64_on_the_gpu(layer):
    """GroupedConv with its forward pass (and dX's grouped convolution) on conv05's grouped build:
    dX, dW and db against torch's float64 gradients, a SiLU after the layer."""
    L = dict(layer)
    dtype, tol = _DT[L.pop("dtype")]
    _check_gradients(L, dtype, tol, seed=8)


@gpu
@needs_gpu
@pytest.mark.parametrize("layer", list(_narrow_layers(8, seed=9)), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_the_narrow_group_filter_gradient_against_float64_on_the_gpu(layer, monkeypatch):
    """conv05.wgrad with cg channels a group against torch's float64 filter gradient: from an offset
    view of x, its parts added by conv05's kernel and by torch's sum (WGRAD_SUM_CHUNKS), the same bits
    at a second launch, and a NaN in one group's input reaching that group's filters alone."""
    L = dict(layer)
    dtype, tol = _DT[L.pop("dtype")]
    (N, C, H, W, K, R, groups), kw = _sizes(L)
    cg = C // groups
    torch.manual_seed(10)
    x = torch.randn(N, C + 8, H, W, device="cuda").to(dtype).to(memory_format=torch.channels_last)[:, 8:]
    g = conv_geometry(tuple(x.shape), (K, cg, R, R), kw["stride"], kw["padding"], kw["dilation"])
    dy = torch.randn(N, K, g["P"], g["Q"], device="cuda").to(dtype)
    w = torch.empty(K, cg, R, R, dtype=torch.double, device="cuda")
    ref = _torch_wgrad(x.double(), dy.double(), w, L)
    for sum_chunks in (conv05.WGRAD_SUM_CHUNKS, 0):
        monkeypatch.setattr(conv05, "WGRAD_SUM_CHUNKS", sum_chunks)
        dw = conv05.wgrad(x, dy, g, dtype, cg)
        assert dw.shape == ref.shape and dw.dtype == dtype and torch.equal(dw, conv05.wgrad(x, dy, g, dtype, cg))
        err = float((dw.double() - ref).abs().max() / ref.abs().max())
        assert err < 4 * tol, f"{layer} sum_chunks={sum_chunks}: {err:.2e}"
    x = x.clone(memory_format=torch.channels_last)
    x[N - 1, cg + 1, H // 2, W // 2] = float("nan")  # group 1
    dw, ref = conv05.wgrad(x, dy, g, dtype, cg), _torch_wgrad(x.double(), dy.double(), w, L)
    assert torch.equal(dw.isnan(), ref.isnan()) and not dw[:cg].isnan().any() and not dw[2 * cg:].isnan().any()


@gpu
@needs_gpu
def test_traced_narrow_groups_pass_opcheck_and_a_compiled_block_trains_on_the_gpu(monkeypatch):
    """Narrow groups under torch.compile run as conv05's operators (gemmlab::conv2d_depthwise and its
    dgrad and wgrad, the group's width read from the weight): opcheck over the three with groups of 4
    channels, and a ResNeXt-like block of narrow groups (4 channels a group, then 2 at stride 2)
    under torch.compile(fullgraph=True), forward and backward, its gradients those of the same block
    run eagerly (GroupedConv), each narrow layer one launch of conv05 a pass."""
    x = torch.randn(2, 32, 15, 13, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w, dy = torch.randn(32, 4, 3, 3, device="cuda").bfloat16(), torch.randn(2, 32, 8, 7, device="cuda").bfloat16()
    args = ([2, 2], [1, 1], "", [1, 1])
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise.default, (x, w, None, *args, "silu"))
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise_dgrad.default, (dy, w, list(x.shape), *args, True))
    torch.library.opcheck(torch.ops.gemmlab.conv2d_depthwise_wgrad.default, (x, dy, list(w.shape), *args, torch.float32))
    model = torch.nn.Sequential(gemmlab.nn.Conv2d(32, 32, 3, padding=1, groups=8), torch.nn.GELU(),
                                gemmlab.nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=16))  # fmt: skip
    model = model.cuda().to(memory_format=torch.channels_last)
    xf = x.float().requires_grad_()
    widths = []
    real = conv05.run
    monkeypatch.setattr(conv05, "run", lambda *a, **k: (widths.append(a[-1] if len(a) > 6 else k.get("cg", 1)), real(*a, **k))[1])
    compiled = torch.compile(model, fullgraph=True)
    compiled(xf).square().sum().backward()
    assert set(widths) == {2, 4}  # each layer's forward pass on conv05, traced
    got = [p.grad.clone() for p in model.parameters()] + [xf.grad.clone()]
    model.zero_grad()
    xf.grad = None
    model(xf).square().sum().backward()
    want = [p.grad for p in model.parameters()] + [xf.grad]
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert float((a.double() - b.double()).abs().max() / b.abs().max()) < 1e-5


def test_the_narrow_group_build_takes_blocks_of_two_channel_vectors():
    """conv05.run's grouped build covers NARROW_CV vectors a block where the depthwise rule would
    take the widest block whose taps fit; depthwise launches keep that rule."""
    from gemmlab.specs.conv import conv05_channel_vectors

    assert conv05.NARROW_CV == 2
    assert conv05_channel_vectors(128, 8, 9 * 4) == 8  # the depthwise rule at stage 1's 3x3
    assert conv05.narrow_block(8, 8, 9, 4) == 2 and conv05.narrow_block(8, 4, 9, 8) == 2
    assert conv05.narrow_block(8, 32, 9, 1) == 32  # depthwise: as the rule says
    assert conv05.narrow_block(8, 1, 300, 8) == 1  # 300 x 8 taps of two vectors pass the staged copy
