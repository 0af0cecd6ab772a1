"""Depthwise layers (groups = C = K) of MobileNetV2 and ConvNeXt-T at batch 32: gemmlab.conv2d
under auto (conv05, one launch), the grouped path it replaces (one convolution a group, timed on a
few layers only: it launches hundreds of kernels) and cuDNN (F.conv2d, cudnn.benchmark on,
channels_last), each checked against float64 first, then timed interleaved behind a host gate with
L2 flushed (median of 20). Prints one line a layer and dtype. With "backward" it times a forward
and backward pass instead -- torch.autograd.grad of the layer's result for x and the filter at a
fixed dY (conv05, dgrad and wgrad, against cuDNN's), the gradients checked against float64 first.
  python3 scripts/depthwise_bench.py [bf16,fp16,fp32] [backward]"""

import sys

import torch
import torch.nn.functional as F

from gemmlab import conv
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median

# (name, C, H = W, R = S, stride)
LAYERS = [("mbv2 112 s1", 32, 112, 3, 1), ("mbv2 112 s2", 96, 112, 3, 2), ("mbv2 56", 144, 56, 3, 1),
          ("mbv2 28", 192, 28, 3, 1), ("mbv2 14", 384, 14, 3, 1), ("mbv2 14 s2", 576, 14, 3, 2),
          ("mbv2 7", 960, 7, 3, 1), ("convnext 56", 96, 56, 7, 1), ("convnext 28", 192, 28, 7, 1),
          ("convnext 14", 384, 14, 7, 1), ("convnext 7", 768, 7, 7, 1)]  # fmt: skip
GROUPED_TIMED = {"mbv2 112 s1", "convnext 56"}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _rel(got, want) -> float:
    return float((got.double() - want).norm() / want.norm())


def backward(name: str, dtype, flush, gate) -> None:
    for layer, C, HW, R, stride in LAYERS:
        x = torch.randn(32, C, HW, HW, device="cuda").to(dtype).to(memory_format=torch.channels_last).requires_grad_()
        w = (torch.randn(C, 1, R, R, device="cuda") / R).to(dtype).requires_grad_()
        kw = dict(stride=stride, padding=R // 2, groups=C)
        dy = torch.randn(F.conv2d(x.detach(), w.detach(), **kw).shape, device="cuda").to(dtype)
        dy = dy.to(memory_format=torch.channels_last)
        x2, w2 = x.detach()[:2].double().requires_grad_(), w.detach().double().requires_grad_()
        want = torch.autograd.grad(F.conv2d(x2, w2, **kw), (x2, w2), dy[:2].double())
        got = torch.autograd.grad(conv.conv2d(x[:2], w, **kw), (x, w), dy[:2])
        err = max(_rel(got[0][:2], want[0]), _rel(got[1], want[1]))
        fns = {"conv05": lambda: torch.autograd.grad(conv.conv2d(x, w, **kw), (x, w), dy),
               "cudnn": lambda: torch.autograd.grad(F.conv2d(x, w, **kw), (x, w), dy)}  # fmt: skip
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
            t = interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate)
        ms = {k: median(v) for k, v in t.items()}
        print(f"{name} fwd+bwd {layer:12s} C={C:4d} {HW:3d}x{HW:<3d} {R}x{R}/{stride}  conv05 {ms['conv05'] * 1e3:7.1f} us  "
              f"cuDNN {ms['cudnn'] * 1e3:7.1f} us  ratio {ms['cudnn'] / ms['conv05']:.3f}x  error {err:.1e}", flush=True)  # fmt: skip


def main() -> None:
    flush, gate = L2Flusher(0), HostGate(0)
    for name in (sys.argv[1] if len(sys.argv) > 1 else "bf16,fp16,fp32").split(","):
        if sys.argv[2:] == ["backward"]:
            backward(name, DTYPES[name], flush, gate)
            continue
        dtype = DTYPES[name]
        for layer, C, HW, R, stride in LAYERS:
            x = torch.randn(32, C, HW, HW, device="cuda").to(dtype).to(memory_format=torch.channels_last)
            w = (torch.randn(C, 1, R, R, device="cuda") / R).to(dtype)
            kw = dict(stride=stride, padding=R // 2, groups=C)
            ref = F.conv2d(x[:2].double(), w.double(), **kw)
            err = float((conv.conv2d(x[:2], w, **kw).double() - ref).norm() / ref.norm())
            fns = {"conv05": lambda: conv.conv2d(x, w, **kw), "cudnn": lambda: F.conv2d(x, w, **kw)}
            if layer in GROUPED_TIMED:
                fns["grouped"] = lambda: conv._grouped(x, w, None, stride, R // 2, 1, C, None, "fp32", "auto")
            with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
                t = interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate)
            ms = {k: median(v) for k, v in t.items()}
            moved = (x.numel() + x.numel() // stride**2) * x.element_size()  # input read, output written
            grouped = f"  grouped {ms['grouped'] * 1e3:8.1f} us ({ms['cudnn'] / ms['grouped']:.3f}x)" if "grouped" in ms else ""
            print(f"{name} {layer:12s} C={C:4d} {HW:3d}x{HW:<3d} {R}x{R}/{stride}  conv05 {ms['conv05'] * 1e3:7.1f} us  "
                  f"cuDNN {ms['cudnn'] * 1e3:7.1f} us  ratio {ms['cudnn'] / ms['conv05']:.3f}x  "
                  f"{moved / ms['conv05'] / 1e6:6.0f} GB/s  error {err:.1e}{grouped}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
