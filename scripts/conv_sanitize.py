"""conv03 under compute-sanitizer: a few small convolutions through algorithm="tma", with the
staged TMA-store epilogue and the register one, the persistent grid forced down to 3 blocks so
that every block walks several tiles (where a hand-over of the staging buffers between tiles
would race), each checked against float64. Run by scripts/gpu_run.sh's "conv-sanitize" step:
  compute-sanitizer --tool racecheck python3 scripts/conv_sanitize.py
Exit 1 on a wrong result; the sanitizer's own exit code reports hazards."""

import sys

import torch
import torch.nn.functional as F

import gemmlab
from gemmlab import conv03, launch

# (N, C, H, W, K, R, stride, padding): a 1x1 (short reduction: one stage a tile), a 3x3, a strided
# 3x3 with an odd output-channel count (the register fallback of the staged build), a 1x1/2
CASES = [(2, 64, 20, 20, 128, 1, 1, 0), (2, 32, 13, 11, 192, 3, 1, 1), (1, 16, 17, 17, 130, 3, 2, 1),
         (2, 128, 14, 14, 256, 1, 2, 0)]  # fmt: skip


def main() -> int:
    torch.manual_seed(0)
    launch.resident_blocks = lambda *args, **kw: 3  # (conv03 asks it for the persistent grid)
    wrong = 0
    for staged in (True, False):
        with conv03.staged_stores(staged), torch.no_grad():
            conv03._PLANS.clear()
            for N, C, H, W, K, R, stride, padding in CASES:
                x = torch.randn(N, C, H, W, device="cuda").bfloat16().to(memory_format=torch.channels_last)
                w = (torch.randn(K, C, R, R, device="cuda") / (C * R * R) ** 0.5).bfloat16()
                bias = torch.randn(K, device="cuda").bfloat16()
                y = gemmlab.conv2d(x, w, bias, stride=stride, padding=padding, activation="relu", algorithm="tma")
                ref = F.relu(F.conv2d(x.double(), w.double(), bias.double(), stride=stride, padding=padding))
                err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                plan = conv03.cached_plan(x, w, bias, (stride, padding, 1), "relu")
                what = conv03.describe(plan) if plan is not None else {}
                ok = err < 2e-2 and not y.isnan().any()
                wrong += not ok
                print(f"{'passed' if ok else 'FAIL'} staged={staged} x={N}x{C}x{H}x{W} w={K}x{C}x{R}x{R} stride={stride} "
                      f"error {err:.1e} {what}", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
