"""conv02, implicit GEMM (kernels/conv/02_implicit_gemm.cu, gemmlab.conv2d(algorithm="implicit")):
its compiles for sm_90a with the resource report checked and its refusals here; on a GPU (marker
`gpu`) its results against float64 torch.nn.functional.conv2d over random geometries, padding
forms, both memory formats, with a bias and each activation."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.conv import implicit_gemm_why_not
from gemmlab.specs.conv import CONV_02, CONV_KERNELS


@pytest.mark.parametrize("dtype,out_dtype", [(torch.bfloat16, None), (torch.float16, None)])
@pytest.mark.parametrize("activation", [False, None, "gelu", "silu"], ids=["plain", "bias", "gelu", "silu"])
def test_compiles_for_hopper_without_spills(dtype, out_dtype, activation):
    post = 0 if activation is False else post_code(True, activation)
    ck = jit.compile_kernel(CONV_02, CONV_02.default_config(), "sm_90a", dtype, out_dtype, post)
    assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, ck.usage
    assert ck.usage.dynamic_smem == CONV_02.dynamic_smem(CONV_02.default_config())


def test_the_conv_kernels_stay_out_of_the_gemm_registry():
    assert all(k.id not in {s.id for s in gemmlab.kernels()} for k in CONV_KERNELS)
    with pytest.raises(ValueError, match="every thread must stage"):
        CONV_02.config(BM=16, WM=16, BN=128, WN=32)


def test_what_it_refuses_is_said_before_any_launch():
    with FakeTensorMode():
        x = torch.empty(2, 16, 9, 9, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(4, 16, 3, 3, device="cuda", dtype=torch.bfloat16)
        assert implicit_gemm_why_not(x, w, None) is None
        x3 = torch.empty(2, 3, 9, 9, device="cuda", dtype=torch.bfloat16)
        assert "multiple of 8" in implicit_gemm_why_not(x3, w, None)
        x32 = torch.empty(2, 16, 9, 9, device="cuda", dtype=torch.float32)
        assert "bf16 or fp16" in implicit_gemm_why_not(x32, w, None)
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        gemmlab.conv2d(torch.randn(1, 8, 5, 5), torch.randn(2, 8, 3, 3), algorithm="implicit")


def _geometries(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        R, S = rng.choice((1, 3, 5, 7)), rng.choice((1, 3, 5, 7))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 33), rng.randint(dil * (S - 1) + 1, 33)
        padding = rng.choice((0, 1, R // 2, "same", "valid", (R // 2, 0)))
        stride = 1 if padding == "same" else rng.choice((1, 2, 3))
        yield dict(N=rng.randint(1, 3), C=8 * rng.randint(1, 9), H=H, W=W, K=rng.choice((1, 7, 64, 130, 256)), R=R, S=S,
                   stride=stride, padding=padding, dilation=dil)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_values_against_float64_on_the_gpu(dtype, tol, channels_last):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for i, g in enumerate(_geometries(40, seed=int(channels_last))):
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype).to(memory_format=fmt)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(dtype)
        bias = torch.randn(g["K"], device="cuda").to(dtype) if i % 2 else None
        activation = [None, *ACTIVATIONS][i % 5] if i % 3 else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="implicit", **kw)
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < tol, f"{g} bias={bias is not None} {activation}: {err:.2e}"
        assert y.is_contiguous(memory_format=fmt) or y.shape[1] == 1


def test_the_conv_table_says_when_implicit_gemm_ran():
    from gemmlab.bench.layer_tables import conv_table

    rec = dict(name="s1 3x3", N=32, C=64, K=64, R=3, S=3, stride=1, padding=1, P=56, Q=56, dtype="bf16",
               gemm=dict(M=100352, N=64, K=576), ms=0.2, cudnn_ms=0.1, im2col_ms=None, tflops=37.0, cudnn_tflops=74.0,
               ratio=0.5, reps=10, algorithm="implicit")  # fmt: skip
    run = dict(meta=dict(gpu="NVIDIA H100 80GB HBM3", commit="abc1234", time="2026-01-01T00:00:00+00:00", dtype="bf16",
                         algorithm="implicit"), records=[rec])  # fmt: skip
    table = conv_table(run)
    assert "| none (implicit) |" in table and "conv02, implicit GEMM" in table and "**0.50x**" in table
