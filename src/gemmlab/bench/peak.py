"""gemmlab peak: the GPU's theoretical and measured ceilings, stored with the records so reports
can say "% of peak" and plots can draw a roofline.

Theoretical FP32 (seed 001's formula): SMs x FP32 lanes per SM x 2 (an FMA is two flops) x the
maximum SM clock; Hopper has 128 FP32 lanes per SM. Dense BF16 tensor-core rate on Hopper: 4096
flops per SM per clock (NVIDIA's H100 SXM datasheet: 989.4 TFLOP/s with 132 SMs at 1830 MHz).
Measured: a long FFMA loop (kernels/selftest/ffma_peak.cu), a device-to-device copy (bytes read
plus bytes written), and cuBLAS through torch.mm at 8192^3 in FP32 (TF32 off) and BF16.
"""

from __future__ import annotations

import statistics

import torch

from .. import jit, launch
from ..specs.base import KernelSpec, Param
from . import environment

FP32_LANES_PER_SM = {9: 128, 8: 64}  # by compute-capability major (Hopper 128; A100 64)
BF16_DENSE_FLOPS_PER_SM_CLK = {9: 4096}

FFMA_SPEC = KernelSpec(
    id="selftest_ffma_peak",
    step=0,
    title="FFMA peak",
    idea="not a GEMM: sustained FP32 FMA rate",
    source="selftest/ffma_peak.cu",
    entry="ffma_peak",
    params=(Param("CHAINS", 8, "independent FMA chains a thread"),),
    block=lambda c: (256, 1, 1),
    grid=lambda M, N, c: (1, 1, 1),
)


def _events_ms(fn, reps: int = 10) -> float:
    fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def measure_ffma(device_id: int = 0, iters: int = 1 << 16) -> float:
    """Sustained FP32 TFLOP/s of FFMA chains over all SMs."""
    cfg = FFMA_SPEC.default_config()
    loaded = jit.load_kernel(FFMA_SPEC, cfg, device_id)
    sms = torch.cuda.get_device_properties(device_id).multi_processor_count
    blocks, threads = sms * 8, 256
    out = torch.zeros(blocks, device=f"cuda:{device_id}")
    args = (out.data_ptr(), launch.i32(iters), launch.f32(0.9999999), launch.f32(1e-7))
    ms = _events_ms(lambda: launch.launch(loaded, device_id, (blocks, 1, 1), (threads, 1, 1), *args))
    flops = 2.0 * cfg["CHAINS"] * iters * blocks * threads
    return flops / (ms * 1e-3) / 1e12


def measure_copy_gbs(device_id: int = 0, nbytes: int = 2 << 30) -> float:
    x = torch.empty(nbytes // 4, device=f"cuda:{device_id}")
    y = torch.empty_like(x)
    ms = _events_ms(lambda: y.copy_(x))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def measure_cublas(dtype: torch.dtype, n: int = 8192, device_id: int = 0) -> float:
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = torch.randn(n, n, device=f"cuda:{device_id}", dtype=dtype)
        b = torch.randn(n, n, device=f"cuda:{device_id}", dtype=dtype)
        c = torch.empty(n, n, device=f"cuda:{device_id}", dtype=dtype)
        ms = _events_ms(lambda: torch.mm(a, b, out=c))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return 2.0 * n**3 / (ms * 1e-3) / 1e12


def measure(device_id: int = 0) -> dict:
    props = torch.cuda.get_device_properties(device_id)
    clocks = environment.clocks(device_id)
    max_mhz = clocks.get("clocks.max.sm")
    lanes = FP32_LANES_PER_SM.get(props.major)
    tc = BF16_DENSE_FLOPS_PER_SM_CLK.get(props.major)
    sms = props.multi_processor_count
    theory_fp32 = sms * lanes * 2 * max_mhz * 1e6 / 1e12 if lanes and isinstance(max_mhz, float) else None
    theory_bf16 = sms * tc * max_mhz * 1e6 / 1e12 if tc and isinstance(max_mhz, float) else None
    return dict(
        sm_count=sms,
        max_sm_clock_mhz=max_mhz,
        fp32_lanes_per_sm=lanes,
        theoretical_fp32_tflops=theory_fp32,
        theoretical_bf16_dense_tflops=theory_bf16,
        measured_ffma_tflops=measure_ffma(device_id),
        measured_copy_gbs=measure_copy_gbs(device_id),
        cublas_fp32_8192_tflops=measure_cublas(torch.float32, device_id=device_id),
        cublas_bf16_8192_tflops=measure_cublas(torch.bfloat16, device_id=device_id),
        clocks_after=environment.clocks(device_id),
    )
