"""A grouped layer's two paths against cuDNN on ResNeXt-50's grouped 3x3 layers
(sweeps/conv/resnext50.toml): one launch of conv02's grouped build (gemmlab.conv_grouped.run) and
one convolution a group with their concatenation (conv._grouped, what conv2d ran before the grouped
build, and still runs where a gradient is taken), beside F.conv2d, channels_last, timed interleaved
behind a host gate with L2 flushed (median of 20 each, microseconds). Each path's result is checked
against float64 on the first images first. Prints one line a layer, batch and dtype. With
`backward`: the forward and backward pass together (torch.autograd.grad of x and the weight at a
random dY) through conv2d (GroupedConv: one launch forward, dX one more grouped convolution, dW a
GEMM a group), through the group-by-group path, and through cuDNN.
  python3 scripts/grouped_paths.py [bf16,fp16] [32,256] [backward [narrow]]"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from gemmlab import conv, conv_grouped
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _tensors(L, n: int, name: str, grad: bool = False):
    """The layer's input at batch n and its filter (channels_last, in dtype `name`, requiring grad
    where asked), and conv2d's keywords for it."""
    G = L.groups
    x = torch.randn(n, L.C, L.H, L.W, device="cuda").to(DTYPES[name]).to(memory_format=torch.channels_last)
    w = (torch.randn(L.K, L.C // G, L.R, L.S, device="cuda") / (L.C // G * 9) ** 0.5).to(x.dtype)
    w = w.to(memory_format=torch.channels_last)
    return x.requires_grad_(grad), w.requires_grad_(grad), dict(stride=L.stride, padding=L.padding, groups=G)


def _err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().max() / ref.abs().max())


def main() -> None:
    dtypes = (sys.argv[1] if len(sys.argv) > 1 else "bf16,fp16").split(",")
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "32,256").split(",")]
    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "resnext50.toml")
    flush, gate = L2Flusher(0), HostGate(0)
    if len(sys.argv) > 3 and sys.argv[3] == "backward":
        return backward(sweep, dtypes, batches, flush, gate, sys.argv[4:] == ["narrow"])
    for name in dtypes:
        for n in batches:
            for L in sweep["layers"]:
                G = L.groups
                x, w, kw = _tensors(L, n, name)
                g = conv.conv_geometry((n, L.C // G, L.H, L.W), tuple(w.shape), L.stride, L.padding)
                fns = {"one launch": lambda: conv_grouped.run(x, w, None, g, G, None, True),
                       "a group at a time": lambda: conv._grouped(x, w, None, L.stride, L.padding, 1, G, None, "fp32", "auto"),
                       "cudnn": lambda: F.conv2d(x, w, None, **kw)}  # fmt: skip
                with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
                    ref = F.conv2d(x[:2].double(), w.double(), **kw)
                    errs = [_err(f()[:2], ref) for f in fns.values()]
                    t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate).items()}
                print(f"{name} N={n} {L.name} C={L.C}/{G}:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
                      f"| x cuDNN: {t['cudnn'] / t['one launch']:.2f} and {t['cudnn'] / t['a group at a time']:.2f}",
                      "| errors " + " ".join(f"{e:.1e}" for e in errs), flush=True)  # fmt: skip


def backward(sweep, dtypes, batches, flush, gate, narrow: bool = False) -> None:
    """narrow: conv05's narrow-group layers alone (groups of 2-8 channels), without the group-by-group path."""
    for name in dtypes:
        for n in batches:
            for L in sweep["layers"]:
                G = L.groups
                if narrow and L.C // G not in (2, 4, 8):
                    continue
                x, w, kw = _tensors(L, n, name, grad=True)
                dy = torch.randn_like(F.conv2d(x.detach(), w.detach(), **kw))
                grad = lambda y: torch.autograd.grad(y, (x, w), dy)  # noqa: E731
                fns = {"conv2d": lambda: grad(conv.conv2d(x, w, **kw)),
                       "a group at a time": lambda: grad(conv._grouped(x, w, None, L.stride, L.padding, 1, G, None, "fp32", "auto")),
                       "cudnn": lambda: grad(F.conv2d(x, w, **kw))}  # fmt: skip
                if narrow:
                    del fns["a group at a time"]
                with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
                    t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=10, warmup=2, flush=flush, gate=gate).items()}
                print(f"{name} N={n} {L.name} C={L.C}/{G} forward+backward:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
                      f"| x cuDNN: {t['cudnn'] / t['conv2d']:.2f}",
                      "" if narrow else f"and {t['cudnn'] / t['a group at a time']:.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
