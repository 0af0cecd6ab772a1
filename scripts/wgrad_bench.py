"""The filter gradient of ResNet-50's convolutions (sweeps/conv/resnet50.toml: those whose im2col
matrix is a copy -- the 3x3 layers and the strided projections) three ways, timed
in one run: gemmlab's conv_wgrad as the backward pass calls it (conv06 where it serves: the
im2col map read by the TMA), the same GEMM over the im2col matrix (gemm() on dY_rows^T and
im2col(x), the path conv06 replaced; conv_wgrad_tma.ON off), and cuDNN's filter gradient
(torch.ops.aten.convolution_backward with only the weight's gradient asked for, cudnn.benchmark
on). Each result is checked against the matrix path's first; channels_last bf16 (or fp16) operands.
Timing as conv-bench's (gemmlab.bench.timing.interleaved: rounds alternated, L2 flushed). One
record file, rewritten after each case: <out>/<gpu>/wgrad-<time>.json.

  PYTHONPATH=src python3 scripts/wgrad_bench.py --out "$OUT/results"
"""

import argparse
from functools import partial
from pathlib import Path

import torch

from gemmlab import conv_wgrad_tma
from gemmlab.bench import environment
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.run import record_cases, results_path
from gemmlab.bench.timing import L2Flusher, interleaved, median
from gemmlab.conv import conv_geometry, conv_wgrad
from gemmlab.settings import setting

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def case(layer, batch: int, dtype_name: str, reps: int, flusher) -> dict:
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(batch)
    shape = (batch, layer.C, layer.H, layer.W)
    x = torch.randn(shape, generator=gen, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(layer.K, layer.C, layer.R, layer.S, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    g = conv_geometry(shape, tuple(w.shape), layer.stride, layer.padding, 1)
    dy = torch.randn(batch, layer.K, g["P"], g["Q"], generator=gen, device="cuda").to(dtype)
    dy = dy.contiguous(memory_format=torch.channels_last)
    served = conv_wgrad_tma.why_not(x, dy, g)

    def matrix():
        with setting(conv_wgrad_tma, "ON", False):
            return conv_wgrad(x, dy, g)

    def cudnn():
        return torch.ops.aten.convolution_backward(dy, x, w, None, list(g["stride"]), [g["pads"][0], g["pads"][2]],
                                                   [1, 1], False, [0, 0], 1, [False, True, False])[1]  # fmt: skip

    ref = matrix().double()
    gaps = {}
    for name, fn in (("gemmlab", lambda: conv_wgrad(x, dy, g)), ("cudnn", cudnn)):
        got = fn().double()
        gaps[name] = float((got - ref).norm() / ref.norm())
    fns = {"gemmlab": lambda: conv_wgrad(x, dy, g), "matrix": matrix, "cudnn": cudnn}
    times = interleaved(fns, reps=reps, warmup=2, flush=flusher)
    ms = {k: median(v) for k, v in times.items()}
    label = f"{layer.name} batch {batch} {dtype_name}"
    print(f"{label}: {'conv06' if served is None else 'matrix'} {ms['gemmlab']:.3f} ms, matrix {ms['matrix']:.3f}, "
          f"cuDNN {ms['cudnn']:.3f} ({ms['cudnn'] / ms['gemmlab']:.2f}x cuDNN)", flush=True)  # fmt: skip
    return dict(layer=layer.name, batch=batch, dtype=dtype_name, C=layer.C, H=layer.H, W=layer.W, K=layer.K, R=layer.R,
                S=layer.S, stride=layer.stride, padding=layer.padding, path="conv06" if served is None else "matrix",
                why_not=served, ms=ms["gemmlab"], matrix_ms=ms["matrix"], cudnn_ms=ms["cudnn"],
                vs_cudnn=ms["cudnn"] / ms["gemmlab"], vs_matrix=ms["matrix"] / ms["gemmlab"], gap_vs_matrix=gaps["gemmlab"],
                cudnn_gap_vs_matrix=gaps["cudnn"], times_ms=times["gemmlab"], matrix_times_ms=times["matrix"],
                cudnn_times_ms=times["cudnn"])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=Path("sweeps/conv/resnet50.toml"))
    ap.add_argument("--batch", type=int, action="append", help="default: the sweep's")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("wgrad_bench times kernels on a CUDA GPU, and none is visible here")
    torch.backends.cudnn.benchmark = True
    sweep = read_conv_sweep(args.sweep)
    meta = environment.describe(0)
    meta.update(kind="wgrad", sweep=str(args.sweep), baseline="cuDNN's filter gradient (aten.convolution_backward, "
                "weight only, cudnn.benchmark on), channels_last; and gemm() over the im2col matrix")  # fmt: skip
    path = results_path(args.out, meta, "wgrad")
    flusher = L2Flusher(0)
    # the layers whose im2col matrix is a copy (filters past 1x1, or a stride); the others' is x itself,
    # and the stem's C = 3 takes the matrix path either way
    layers = [layer for layer in sweep["layers"] if layer.C % 8 == 0 and (layer.R * layer.S > 1 or layer.stride > 1)]
    cases = [partial(case, layer, b, args.dtype, args.reps, flusher) for b in args.batch or sweep["batches"] for layer in layers]
    record_cases(path, meta, cases)
    print(f"record: {path}")


if __name__ == "__main__":
    main()
