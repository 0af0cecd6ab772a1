"""conv06 (the filter gradient through the im2col map, gemmlab.conv_wgrad_tma) under
compute-sanitizer, in each schedule its tc09 body runs: every tile split along K (few tiles), whole
tiles and stream-K pieces (more tiles than the grid), with the persistent grid forced down to a few
blocks so that each walks several pieces, at small odd images (a 64-pixel box crossing rows and
images, the last past the batch), both builds (BM = 64 and 128), stride, padding and dilation.
Each result is checked against float64. Run by scripts/gpu_run.sh's "wgrad-sanitize" step:
  compute-sanitizer --tool racecheck python3 scripts/wgrad_sanitize.py
Exit 1 on a wrong result; the sanitizer's own exit code reports hazards."""

import sys

import torch

from gemmlab import conv_wgrad_tma, launch
from gemmlab.conv import conv_geometry

BLOCKS = 6  # the persistent grid: with 1-3 tiles, split two or three ways; with more, several pieces a block
CASES = (  # (N, C, H, W, K, R, S, stride, padding, dilation)
    (2, 64, 36, 36, 64, 3, 3, 1, 1, 1),  # 3 tiles of 64 rows, 41 K steps: each split two ways
    (3, 128, 15, 15, 200, 3, 3, 2, 1, 1),  # 2 x 5 tiles of 128 rows, 3 K steps: stream-K over 6 blocks
    (1, 64, 13, 10, 72, 5, 3, 1, (2, 1), (1, 2)),  # dilation, asymmetric filter
    (2, 192, 8, 8, 8, 1, 1, 2, 0, 1),  # a strided 1x1: one tap, one K step, a tile of whole K
)


def main() -> int:
    torch.manual_seed(0)
    launch.resident_blocks = lambda loaded, device_id, block, cluster: BLOCKS
    wrong = 0
    for N, C, H, W, K, R, S, stride, padding, dilation in CASES:
        x = torch.randn(N, C, H, W, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
        g = conv_geometry(tuple(x.shape), (K, C, R, S), stride, padding, dilation)
        dy = torch.randn(N, K, g["P"], g["Q"], device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
        got = conv_wgrad_tma.wgrad(x, dy, g).double()
        ref = torch.nn.grad.conv2d_weight(x.double(), (K, C, R, S), dy.double(), stride=stride, padding=padding,
                                          dilation=dilation).permute(0, 2, 3, 1).reshape(K, -1)  # fmt: skip
        err = float((got - ref).abs().max() / ref.abs().max())
        ok = err < 2e-2 and not got.isnan().any()
        wrong += not ok
        print(f"{'passed' if ok else 'FAIL'} x {tuple(x.shape)} filter {K}x{C}x{R}x{S} stride {stride} padding {padding} "
              f"dilation {dilation}: error {err:.1e}", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
