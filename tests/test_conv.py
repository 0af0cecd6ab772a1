"""gemmlab.conv2d and gemmlab.nn.Conv2d (im2col, then gemmlab.gemm): values against float64
torch.nn.functional.conv2d at awkward sizes and argument forms, gradients against torch's, the
errors before any launch, the module as a drop-in. CPU tensors run the CPU ladder; the GPU tests
carry the gpu marker."""

import itertools

import pytest
import torch
import torch.nn.functional as F

import gemmlab
from gemmlab.conv import conv_geometry


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


@pytest.mark.parametrize("args,kw,match", [
    ((torch.randn(3, 7, 7), torch.randn(4, 3, 3, 3)), {}, r"x must be \[N, C, H, W\]"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 3, 3)), {}, "weight must be"),
    ((torch.randn(1, 3, 7, 7), torch.randn(4, 5, 3, 3)), {}, "weight has 5 input channels, x has 3"),
    ((torch.randn(1, 4, 7, 7), torch.randn(4, 2, 3, 3)), {"groups": 2}, "groups=2"),
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
    with pytest.raises(ValueError, match="groups=3"):
        gemmlab.nn.Conv2d(3, 6, 3, groups=3)


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


# The conv benchmark: its sweep file, its table, and (GPU) one small run

from gemmlab.bench import conv as conv_bench  # noqa: E402
from gemmlab.bench import tables  # noqa: E402

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
               cudnn_tflops=120.0, ratio=0.8, ms=1.0, unfold_ms=0.25, reps=10, dtype="bf16")  # fmt: skip
    run = {"meta": {"gpu": "GPU", "commit": "abc", "time": "t", "dtype": "bf16"},
           "records": [rec, dict(rec, name="s1 1x1", ratio=1.25, N=32)]}  # fmt: skip
    table = tables.conv_table(run)
    assert "| s1 3x3 | 32 | 64 -> 64 | 3x3/1 | 100352x64x576 | 100.0 | 120.0 | 0.80x | 25% |" in table
    assert "batch 32: **1.00x** (lowest 0.80x)" in table


@gpu
@needs_gpu
def test_a_small_conv_bench_run_writes_checked_records(tmp_path):
    sweep = dict(layers=[conv_bench.Layer("3x3", 5, 13, 11, 8, 3, 3, 1, 1), conv_bench.Layer("7x7/2", 3, 27, 27, 16, 7, 7, 2, 3)],
                 batches=[2], dtypes=["float32", "bf16"], tag="conv-test", reps=3, warmup=1)  # fmt: skip
    done = conv_bench.run_conv_bench(sweep, tmp_path)
    assert len(done) == 2
    for path, records in done:
        assert path.is_file() and len(records) == 2
        for r in records:
            assert r["ms"] > 0 and r["cudnn_ms"] > 0 and r["error"] < (1e-5 if r["dtype"] == "float32" else 2e-2)
