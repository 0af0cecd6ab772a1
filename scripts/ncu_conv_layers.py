"""Nsight Compute over conv2d's steps and cuDNN on two ResNet-50 layers, fp16, one launch each (after
warm-up, between cudaProfilerStart and Stop, so that `ncu --profile-from-start off` sees only them):
stage 4's last 1x1 at batch 32 (1568 x 512 x 2048) through conv03, through gemm() on x's own memory
(tc07) and through cuDNN; stage 1's 3x3 at batch 256 (802816 x 64 x 576) through conv03 and cuDNN.
  ncu --clock-control none --profile-from-start off --csv --page raw --metrics <...> \\
      python3 scripts/ncu_conv_layers.py > ncu.csv
(results/nvidia-h200/ncu-conv03-s4-s1-20261128T1145Z.csv.gz: the metrics docs/ladder/conv03-tma-im2col.md
reads.)"""

import torch
import torch.nn.functional as F

from gemmlab.conv import conv2d


def _layer(n: int, c: int, hw: int, k: int, r: int):
    x = torch.randn(n, c, hw, hw, device="cuda").half().to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5).half().to(memory_format=torch.channels_last)
    return x, w


def main() -> None:
    torch.backends.cudnn.benchmark = True
    x1, w1 = _layer(32, 2048, 7, 512, 1)
    x3, w3 = _layer(256, 64, 56, 64, 3)
    calls = [lambda: conv2d(x1, w1, algorithm="tma"), lambda: conv2d(x1, w1, algorithm="im2col"), lambda: F.conv2d(x1, w1),
             lambda: conv2d(x3, w3, padding=1, algorithm="tma"), lambda: F.conv2d(x3, w3, padding=1)]  # fmt: skip
    for _ in range(3):  # every kernel loaded, cuDNN's algorithms chosen
        for call in calls:
            call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
