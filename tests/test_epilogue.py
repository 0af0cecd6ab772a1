"""The fused epilogue, D = activation(alpha A B + beta C + bias): its codes, its compiles (every
kernel that fuses it, spill-free for sm_90a), argument errors before any launch, the CPU ladder's
results and gradients here; on a GPU (marker `gpu`) every kernel that fuses it, and one that does
not, against float64 at odd shapes, with NaN in C at beta = 0 and a poisoned D."""

import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import jit, registry
from gemmlab.activations import ACTIVATION_CODES, ACTIVATIONS, POST_FUSED, apply_post, post_code
from gemmlab.configs import configs_in_use
from gemmlab.reference import check_result, reference, reference_post

ARCH = "sm_90a"
FUSED = [k for k in registry.kernels(pending=True) if k.epilogues]  # pending ones too: they need it checked most
ACTS = [a for a in ACTIVATIONS if a is not None]


def test_the_kernels_that_fuse_it():
    assert {k.id for k in FUSED} == {"sgemm_11_warp_tile", "sgemm_12_split_k", "sgemm_13_few_rows",
                                     "sgemm_14_few_columns", "sgemm_15_multistage", "tc07_persistent_cluster", "tc08_tf32",
                                     "tc09_stream_k", "tc10_skinny"}  # fmt: skip


def test_post_codes_match_the_kernels_enum():
    """gemmlab::ACT_* and POST_FUSED in gemm_common.cuh, read from the header itself; the bias is
    read at run time, so a layer with and without it shares a build."""
    header = (jit.kernels_dir() / "common" / "gemm_common.cuh").read_text()
    for name, code in (("ACT_NONE", 0), ("ACT_RELU", 1), ("ACT_GELU", 2), ("ACT_GELU_TANH", 3), ("ACT_SILU", 4)):
        assert f"{name} = {code}" in header
    assert f"POST_FUSED = {POST_FUSED}" in header
    assert ACTIVATION_CODES == {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
    assert post_code(False, None) == 0 and post_code(True, None) == 8 and post_code(True, "silu") == 12
    assert post_code(False, "silu") == post_code(True, "silu")
    with pytest.raises(ValueError, match="activation 'tanh' is not one of"):
        post_code(True, "tanh")


def test_name_expression_takes_post_after_the_config():
    spec = registry.get("tc07_persistent_cluster")
    cfg = spec.default_config()
    plain = spec.name_expression(cfg, torch.bfloat16)
    assert spec.name_expression(cfg, torch.bfloat16, None, 0) == plain
    assert spec.name_expression(cfg, torch.bfloat16, None, 10) == plain[:-1] + ", 10>"
    with pytest.raises(ValueError, match="POST"):
        spec.name_expression(cfg, torch.bfloat16, None, 4)
    with pytest.raises(ValueError, match="does not fuse"):
        registry.get("tc04_wgmma").name_expression(registry.get("tc04_wgmma").default_config(), torch.bfloat16, None, 8)


# Builds that spill, and how much at most: tc08's default config with no activation or ReLU reads
# the bias behind a null check, which tips its 168 registers (its GELU and SiLU builds do not).
SPILLS_STATED = {("tc08_tf32", "none"): 32, ("tc08_tf32", "relu"): 32}


@pytest.mark.parametrize("spec", FUSED, ids=lambda s: s.id)
@pytest.mark.parametrize("activation", [None, *ACTS], ids=lambda a: a or "none")
def test_fused_epilogues_compile_without_spills(spec, activation):
    """The default config with every activation (the bias is read at run time, so each build
    serves a layer with and without one); every config auto can choose is compiled with SiLU, the
    longest, under `-m compile_all`."""
    dtype = spec.dtypes[0] if spec.type_param else None
    post = post_code(True, activation)
    ck = jit.compile_kernel(spec, spec.default_config(), ARCH, dtype, None, post)
    allowed = SPILLS_STATED.get((spec.id, activation or "none"), 0)
    assert ck.usage.spills <= allowed and ck.usage.stack_frame <= allowed, f"{ck.name_expression}: {ck.usage}"
    assert ck.name_expression.endswith(f", {post}>")


@pytest.mark.compile_all
def test_every_config_auto_can_choose_compiles_with_a_fused_epilogue():
    """SiLU, the epilogue that needs the most registers, in every config auto can choose
    (first type pair the config is built for). Step 12's unsplit configs are left out: auto never
    launches them (step 11 runs the same tile: configs.auto_skip), and the 128 x 128 one sits at
    its 128-register cap with the plain epilogue, so any activation spills 16-32 bytes there."""
    jobs = []
    for spec in FUSED:
        for cfg in configs_in_use(spec):
            if spec.id == "sgemm_12_split_k" and cfg["SPLIT"] == 0:
                continue
            types = (None, None)
            if spec.type_param:
                dtype = spec.dtypes[0]
                types = (dtype, None) if spec.builds_for(cfg, dtype, None) else (dtype, torch.float32)
            jobs.append((spec, cfg, *types, 12))
    bad = []
    for job, ck in zip(jobs, jit.compile_many(jobs, ARCH, workers=os.cpu_count() or 1)):
        assert not isinstance(ck, Exception), f"{job[0].id} {job[1].as_dict()}: {ck}"
        if ck.usage.spills or ck.usage.stack_frame:
            bad.append(f"{ck.name_expression}: {ck.usage}")
    assert not bad, "\n".join(bad)


# ---- Arguments ------------------------------------------------------------------------------------


def test_bad_bias_and_activation_are_refused_before_any_launch():
    with FakeTensorMode():
        a = torch.empty(30, 20, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(20, 10, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="bias must be a vector of N = 10"):
            gemmlab.gemm(a, b, bias=torch.empty(30, device="cuda", dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="bias must be a vector of N = 10"):
            gemmlab.gemm(a, b, bias=torch.empty(1, 10, device="cuda", dtype=torch.bfloat16))
        with pytest.raises(TypeError, match="floating-point"):
            gemmlab.gemm(a, b, bias=torch.empty(10, device="cuda", dtype=torch.int32))
        with pytest.raises(ValueError, match="activation 'gelu_erf' is not one of"):
            gemmlab.gemm(a, b, activation="gelu_erf")
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with pytest.raises(ValueError, match="bias must be a vector of N = 5"):
        gemmlab.gemm(a, b, bias=torch.randn(4), device="cpu")


def test_bias_on_another_device_is_refused_with_a_hint():
    with FakeTensorMode(allow_non_fake_inputs=True):
        a = torch.empty(30, 20, device="cuda")
        b = torch.empty(20, 10, device="cuda")
        bias = torch.empty(10, device="cpu")
        with pytest.raises(ValueError, match=r"bias is on cpu, D on cuda"):
            gemmlab.gemm(a, b, bias=bias)


def test_the_operator_traces_bias_and_activation_on_fake_tensors():
    with FakeTensorMode():
        x = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(100, 200, device="cuda", dtype=torch.bfloat16)
        bias = torch.empty(100, device="cuda", dtype=torch.bfloat16)
        d = torch.ops.gemmlab.gemm(x, w.t(), None, 1.0, 0.0, "auto", "fp32", None, bias, "gelu")
        assert (d.shape, d.dtype) == ((300, 100), torch.bfloat16)
        with pytest.raises(RuntimeError, match="bias must be a vector of N = 100"):
            short = torch.empty(7, device="cuda", dtype=torch.bfloat16)
            torch.ops.gemmlab.gemm(x, w.t(), None, 1.0, 0.0, "auto", "fp32", None, short, None)


# ---- The CPU ladder: torch applies the epilogue --------------------------------------------------


@pytest.mark.parametrize("activation", [None, *ACTS])
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (7, 17, 5), (33, 3, 127)])
def test_cpu_results_against_float64(M, K, N, activation):
    a, b, c, bias = torch.randn(M, K), torch.randn(K, N), torch.randn(M, N), torch.randn(N)
    d = gemmlab.gemm(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, device="cpu")
    assert check_result(d, a, b, c, 1.5, -0.5, bias=bias, activation=activation).passed


def test_reference_post_is_the_activation_of_the_biased_product():
    a, b, bias = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    ref, scale = reference(a, b)
    got, got_scale = reference_post(ref, scale, bias, "silu")
    torch.testing.assert_close(got, torch.nn.functional.silu(a @ b + bias), rtol=0, atol=0)
    assert bool((got_scale > scale).all())


def test_apply_post_keeps_nan_and_is_in_place():
    d = torch.tensor([[-1.0, math.nan, 2.0]])
    out = apply_post(d, torch.tensor([0.5, 0.0, -3.0]), "relu")
    assert out is d
    assert d[0, 0] == 0.0 and math.isnan(d[0, 1]) and d[0, 2] == 0.0


@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
def test_gradients_through_the_fused_operator_match_torch(activation):
    """The operator with an activation computes Z again in its backward (dZ = dD act'(Z))."""
    x = torch.randn(9, 6, requires_grad=True)
    w = torch.randn(5, 6, requires_grad=True)
    bias = torch.randn(5, requires_grad=True)
    g = torch.randn(9, 5)
    d = torch.ops.gemmlab.gemm(x, w.t(), None, 1.0, 0.0, "auto", "fp32", None, bias, activation)
    (d * g).sum().backward()
    x2, w2, b2 = (t.detach().double().requires_grad_() for t in (x, w, bias))
    z = x2 @ w2.t() + b2
    d2 = ACTIVATIONS[activation](z) if activation else z
    (d2 * g.double()).sum().backward()
    for got, want in ((d, d2), (x.grad, x2.grad), (w.grad, w2.grad), (bias.grad, b2.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_linear_applies_the_activation_itself_where_it_trains(monkeypatch):
    """With gradients wanted, the kernel adds the bias and torch applies the activation (its input is
    kept for the backward); without, both go to the kernel's epilogue."""
    from gemmlab import api
    from gemmlab import nn as gnn

    seen = []
    real = api.gemm

    def spy(*args, **kw):  # every path's launch: nn._LinearFunction's, and gemm()'s through ops
        seen.append(kw.get("activation"))
        return real(*args, **kw)

    monkeypatch.setattr(api, "gemm", spy)
    x, w, bias = torch.randn(4, 6), torch.randn(3, 6, requires_grad=True), torch.randn(3)
    gnn.linear(x, w, bias, "gelu")
    with torch.no_grad():
        out = gnn.linear(x, w, bias, "gelu")
    assert seen == [None, "gelu"]
    torch.testing.assert_close(out, torch.nn.functional.gelu(x @ w.detach().t() + bias), rtol=1e-5, atol=1e-5)


# ---- The GPU: every kernel that fuses it, and a kernel that does not -----------------------------

GPU_CASES = [pytest.param(k.id, d, id=f"{k.id}-{str(d).removeprefix('torch.')}") for k in FUSED for d in k.dtypes]
GPU_CASES.append(pytest.param("tc04_wgmma", torch.bfloat16, id="tc04_wgmma-unfused"))
SHAPES = [(1, 7, 1), (7, 17, 33), (127, 3135, 129), (1000, 1022, 64), (2053, 127, 521), (16, 4096, 1024)]


def _precision(kernel: str) -> str:
    return "tf32" if registry.get(kernel).math == "tf32" else "fp32"


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,dtype", GPU_CASES)
@pytest.mark.parametrize("activation", [None, *ACTS])
def test_fused_epilogue_against_float64_on_the_gpu(kernel, dtype, activation):
    spec = registry.get(kernel)
    for M, N, K in SHAPES:
        N = min(N, spec.max_n or N)
        a = torch.randn(M, K, device="cuda").to(dtype)
        b = torch.randn(K, N, device="cuda").to(dtype)
        bias = torch.randn(N, device="cuda").to(dtype)
        c = torch.full((M, N), math.nan, device="cuda", dtype=dtype)  # beta = 0: never read
        out = torch.full((M, N), math.nan, device="cuda", dtype=dtype)
        try:
            d = gemmlab.gemm(a, b, c, beta=0.0, kernel=kernel, out=out, precision=_precision(kernel), bias=bias,
                             activation=activation)  # fmt: skip
        except ValueError as exc:  # a shape this kernel does not serve (stated why)
            assert "cannot serve" in str(exc)
            continue
        torch.cuda.synchronize()
        rep = check_result(d, a, b, None, 1.0, 0.0, _precision(kernel), bias=bias, activation=activation)
        assert rep.passed, f"{kernel} {M}x{N}x{K} {activation}: {rep.summary()}"
        # alpha, beta and C together with the epilogue
        c = torch.randn(M, N, device="cuda").to(dtype)
        d = gemmlab.gemm(a, b, c, alpha=-0.5, beta=1.25, kernel=kernel, precision=_precision(kernel), bias=bias,
                         activation=activation)  # fmt: skip
        torch.cuda.synchronize()
        rep = check_result(d, a, b, c, -0.5, 1.25, _precision(kernel), bias=bias, activation=activation)
        assert rep.passed, f"{kernel} {M}x{N}x{K} {activation} beta: {rep.summary()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("activation", [None, "gelu", "silu"])
def test_linear_layers_on_the_gpu_match_float64(dtype, activation):
    """x @ w.t() + bias at LLM-like and odd shapes, through auto (nt layout: tc07/tc09/tc10, or the
    FP32 steps on copies), inference (fused) and training (bias fused, activation by torch)."""
    for tokens, inp, outp in ((16, 4096, 1024), (2048, 1024, 3072), (1000, 1022, 3135), (7, 17, 1)):
        x = torch.randn(tokens, inp, device="cuda", dtype=dtype)
        w = torch.randn(outp, inp, device="cuda", dtype=dtype) / math.sqrt(inp)
        bias = torch.randn(outp, device="cuda", dtype=dtype)
        with torch.no_grad():
            d = gemmlab.linear(x, w, bias, activation)
        torch.cuda.synchronize()
        assert check_result(d, x, w.t(), bias=bias, activation=activation).passed
        w.requires_grad_()
        d = gemmlab.linear(x, w, bias, activation)
        assert d.grad_fn is not None
        assert check_result(d.detach(), x, w.detach().t(), bias=bias, activation=activation).passed


@pytest.mark.gpu
def test_opcheck_with_bias_and_activation():
    from torch.library import opcheck

    x = torch.randn(65, 40, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(33, 40, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(33, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    opcheck(torch.ops.gemmlab.gemm.default, (x, w.t(), None, 1.0, 0.0, "auto", "fp32", None, bias, "gelu"))


@pytest.mark.gpu
def test_a_compiled_fused_linear_is_one_graph():
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16) / 20
    bias = torch.randn(384, device="cuda", dtype=torch.bfloat16)
    f = torch.compile(lambda x: gemmlab.linear(x, w, bias, "silu") * 2, fullgraph=True)
    with torch.no_grad():
        got = f(x)
        want = gemmlab.linear(x, w, bias, "silu") * 2
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- linear-bench -------------------------------------------------------------------------------


def test_linear_sweep_files_are_read_and_checked(tmp_path):
    from gemmlab.bench.linear import read_linear_sweep

    spec = read_linear_sweep(Path("sweeps/linear/llama-mlp.toml"))
    assert spec["dtype"] == "bf16" and spec["activation"] == "gelu" and spec["tokens"] == [2048, 4096, 8192]
    assert ("8B gate+up", 28672, 4096) in spec["weights"]
    bad = tmp_path / "bad.toml"
    for text, match in (('tokens = [1]\nweight = {}', "unknown keys"), ('tokens = [1]\n[weights]\n"7by5" = "x"', "NxK"),
                        ('tokens = [1]\nactivation = "tanh"\n[weights]\n"7x5" = "x"', "activation 'tanh'"),
                        ('dtype = "int8"\ntokens = [1]', "dtype 'int8'"), ('tokens = [1]', "needs weights")):  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_linear_sweep(bad)


def test_linear_table_from_a_record():
    from gemmlab.bench.layer_tables import linear_table

    rec = dict(name="8B down", tokens=2048, N=4096, K=14336, dtype="bf16", activation="gelu", reps=20, ms=1.0,
               unfused_ms=1.2, eager_ms=1.3, compiled_ms=1.1, tflops=240.5, vs_eager=1.3, vs_compiled=1.1)  # fmt: skip
    run = dict(meta=dict(gpu="NVIDIA H100 80GB HBM3", commit="abc1234", time="2026-01-01T00:00:00+00:00",
                         dtype="bf16", activation="gelu"), records=[rec, dict(rec, tokens=4096, vs_eager=1.1)])  # fmt: skip
    table = linear_table(run)
    assert "| 8B down | 2048 | 4096x14336 | 240 | 1.30x | 1.10x | 1.08x |" in table
    assert f"geometric mean **{(1.3 * 1.1) ** 0.5:.2f}x** torch eager" in table


def test_linear_bench_needs_a_gpu():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gemmlab", "linear-bench"], capture_output=True, text=True,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))  # fmt: skip
    assert r.returncode != 0 and "needs one" in (r.stdout + r.stderr)


@pytest.mark.gpu
def test_linear_bench_runs_and_writes_its_record(tmp_path):
    from gemmlab.bench.linear import read_linear_sweep, run_linear_bench

    sweep = tmp_path / "small.toml"
    sweep.write_text('tag = "linear-small"\ndtype = "bf16"\nactivation = "silu"\ntokens = [64, 300]\nreps = 3\n'
                     '[weights]\n"1024x512" = "small"\n"129x1000" = "odd"\n')  # fmt: skip
    path, records = run_linear_bench(read_linear_sweep(sweep), tmp_path)
    assert path.exists() and len(records) == 4
    for r in records:
        assert r["errors"]["ours"] < 2e-2 and r["errors"]["eager"] < 2e-2, r["errors"]
        assert r["ms"] > 0 and r["eager_ms"] > 0 and r["compiled_ms"] > 0


def test_compile_warms_the_fused_builds_a_linear_layer_needs():
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["compile", "--arch", ARCH, "-s", "64x96x128", "--dtype", "bf16", "--layout", "nt",
                                 "--activation", "gelu", "--activation", "none", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    names = [row["config"] for row in json.loads(r.output[r.output.index("[\n"):])]  # (after the progress bar)
    plain = [n for n in names if not n.endswith((", 10>", ", 8>"))]
    assert len(plain) == 1 and f"{plain[0][:-1]}, 10>" in names and f"{plain[0][:-1]}, 8>" in names
    bad = CliRunner().invoke(app, ["compile", "--arch", ARCH, "-s", "64", "--activation", "tanh"])
    assert bad.exit_code != 0 and "--activation 'tanh'" in bad.output


def test_check_takes_the_epilogue_variants_for_the_kernels_that_fuse_it():
    from gemmlab.check import EPILOGUE_VARIANTS, cases, run_case

    names = lambda k: {v.name for _, _, _, v in cases([k], [(7, 9, 11)])}  # noqa: E731
    assert {v.name for v in EPILOGUE_VARIANTS} <= names("tc07_persistent_cluster")
    assert not {v.name for v in EPILOGUE_VARIANTS} & names("tc04_wgmma")
    for v in EPILOGUE_VARIANTS:  # the CPU ladder applies them with torch, and check compares to float64
        r = run_case("cpu03_blocked", 17, 13, 9, v, device="cpu")
        assert r.passed, (r.message, r.error)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_opcheck_with_bias_and_activation_on_the_cpu_ladder(activation):
    from torch.library import opcheck

    x, w, bias = (torch.randn(*s, requires_grad=True) for s in ((7, 5), (3, 5), (3,)))
    opcheck(torch.ops.gemmlab.gemm.default, (x, w.t(), None, 1.0, 0.0, "auto", "fp32", None, bias, activation))
