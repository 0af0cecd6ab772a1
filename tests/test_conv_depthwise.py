"""conv05, depthwise (kernels/conv/05_depthwise.cu; gemmlab.conv05): a depthwise conv2d (groups =
C = K) in one launch. On the CPU: its builds compile for sm_90a without spills, what it refuses,
its VEC, and which calls conv2d sends to it (a trace, a gradient and the explicit algorithms keep
the grouped path). On a GPU (marker `gpu`): its results against float64 F.conv2d over random
geometries (odd sizes, strides, paddings, dilations, channel counts that are and are not
multiples of 16 bytes), every dtype, both memory formats, a bias and each activation, into
poisoned memory, with NaN and Inf in the input; and that it is one launch."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import conv, conv05, jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.specs.conv import CONV_05, conv05_vec


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_compiles_for_hopper_without_spills(dtype):
    for vec in (conv05_vec(dtype, 64, True), 1):
        for post in (0, post_code(True, "gelu")):
            ck = jit.compile_kernel(CONV_05, CONV_05.config(VEC=vec), "sm_90a", dtype, None, post)
            assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, f"{ck.name_expression}: {ck.usage}"
            assert ck.usage.registers * 256 <= 65536


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
    auto goes to conv05.run with the whole layer's geometry; one that wants a gradient, an explicit
    algorithm, or a grouped layer that is not depthwise goes to the grouped path."""
    ran = []

    def fake_run(x, weight, bias, g, activation, channels_last):
        ran.append((g, activation, channels_last))
        return torch.empty(g["N"], g["K"], g["P"], g["Q"], dtype=x.dtype, device=x.device)

    grouped = []
    monkeypatch.setattr(conv, "_traced", lambda *a: False)
    monkeypatch.setattr(conv05, "run", fake_run)
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
        gemmlab.conv2d(x, w.detach().requires_grad_(), groups=32)
        gemmlab.conv2d(x, torch.empty(64, 1, 3, 3, device="cuda", dtype=torch.bfloat16), groups=32)
        gemmlab.conv2d(x, w, groups=32, algorithm="depthwise")  # asked for by name
        with pytest.raises(ValueError, match="algorithm='depthwise': conv05 is depthwise"):
            gemmlab.conv2d(x, torch.empty(64, 1, 3, 3, device="cuda", dtype=torch.bfloat16), groups=32, algorithm="depthwise")
        with pytest.raises(ValueError, match="algorithm='depthwise': conv05 computes no gradients"):
            gemmlab.conv2d(x, w.detach().requires_grad_(), groups=32, algorithm="depthwise")
    assert len(ran) == 2 and len(grouped) == 3


def test_a_traced_call_runs_as_the_operator_with_torchs_shape_and_format(monkeypatch):
    """Where torch.compile traces conv2d (fake tensors read as traced), a depthwise call goes through
    torch.ops.gemmlab.conv2d_depthwise, whose fake implementation gives torch's shape and memory
    format without a GPU; a call that takes a gradient (wants_grad, stood in for) keeps the grouped
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
        gemmlab.conv2d(x, w, stride=(1, 2), padding=(2, 0), groups=8)
    assert calls == [([2, 2], [1, 1], "", [1, 1], "gelu"), ([1, 1], [0, 0], "same", [1, 1], "gelu"),
                     ([1, 2], [2, 0], "", [1, 1], "gelu")] and len(grouped) == 1  # fmt: skip


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


@pytest.mark.gpu
def test_a_gradient_takes_the_grouped_path_and_is_torchs_on_the_gpu():
    """Where a gradient will be taken the call keeps the grouped path: the forward result equals
    conv05's, and the gradients are torch's (float32, against float64)."""
    x = torch.randn(2, 24, 13, 11, device="cuda", requires_grad=True)
    w = torch.randn(24, 1, 3, 3, device="cuda", requires_grad=True)
    y = gemmlab.conv2d(x, w, padding=1, groups=24)
    with torch.no_grad():
        direct = gemmlab.conv2d(x, w, padding=1, groups=24)
    assert (y - direct).abs().max() < 1e-4
    y.square().sum().backward()
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.conv2d(xd, wd, padding=1, groups=24).square().sum().backward()
    assert (x.grad.double() - xd.grad).abs().max() / xd.grad.abs().max() < 1e-5
    assert (w.grad.double() - wd.grad).abs().max() / wd.grad.abs().max() < 1e-5


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
