"""conv05's three passes one by one against cuDNN's on a few depthwise layers (bf16, batch 32,
channels_last): the forward pass (conv05.run), dgrad (conv05.dgrad) and wgrad (conv05.wgrad)
beside F.conv2d and aten's convolution_backward asked for the input's or the filter's gradient
alone, timed interleaved behind a host gate with L2 flushed (median of 20 each, microseconds).
Prints one line a layer.
  python3 scripts/depthwise_passes.py"""

import torch
import torch.nn.functional as F

from gemmlab import conv, conv05
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median

# (C, H = W, R = S, stride): MobileNetV2's 56^2 and 112^2 3x3, ConvNeXt-T's first 7x7, two 7^2/14^2 ones
LAYERS = [(144, 56, 3, 1), (96, 56, 7, 1), (32, 112, 3, 1), (960, 7, 3, 1), (576, 14, 3, 2)]


def main() -> None:
    flush, gate = L2Flusher(0), HostGate(0)
    dtype = torch.bfloat16
    for C, HW, R, stride in LAYERS:
        x = torch.randn(32, C, HW, HW, device="cuda").to(dtype).to(memory_format=torch.channels_last)
        w = (torch.randn(C, 1, R, R, device="cuda") / R).to(dtype)
        g = conv.conv_geometry(tuple(x.shape), tuple(w.shape), stride, R // 2)
        dy = torch.randn(32, C, g["P"], g["Q"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
        args = ([0], [stride] * 2, [R // 2] * 2, [1, 1], False, [0, 0], C)
        backward = torch.ops.aten.convolution_backward
        fns = {"fwd": lambda: conv05.run(x, w, None, g, None, True), "dgrad": lambda: conv05.dgrad(dy, w, g, True),
               "wgrad": lambda: conv05.wgrad(x, dy, g, dtype),
               "cudnn fwd": lambda: F.conv2d(x, w, None, stride, R // 2, 1, C),
               "cudnn dgrad": lambda: backward(dy, x, w, *args, [True, False, False]),
               "cudnn wgrad": lambda: backward(dy, x, w, *args, [False, True, False])}  # fmt: skip
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
            t = interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate)
        print(f"C={C} {HW}x{HW} {R}x{R}/{stride}", " ".join(f"{k} {median(v) * 1e3:.1f}" for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
