"""conv02's grouped build, conv03, conv04 and conv05 under compute-sanitizer: a few small
convolutions, each checked against float64, with the persistent grid forced down to 3 blocks so
that every block walks several tiles (where a hand-over of shared memory between tiles would race).
conv03 through algorithm="tma", with the staged TMA-store epilogue and the register one, on the
rule's tiles and the 256-pixel ones; conv04 through algorithm="gather" (few input channels: the
stem, a dilated 3x3, a 5x5 over one channel), its input tile staged in shared memory while the last
tile's fragments are gathered; conv05 through algorithm="depthwise" (its reads at the borders, 16
bytes of channels a thread and one), forward, dgrad and wgrad; conv02's grouped build (every group
in one launch, groups of 4, 24 and 32 channels) and conv05's narrow groups. Run by
scripts/gpu_run.sh's "conv-sanitize" step; "conv05" runs conv05's cases alone:
  compute-sanitizer --tool racecheck python3 scripts/conv_sanitize.py [conv05]
Exit 1 on a wrong result; the sanitizer's own exit code reports hazards."""

import sys

import torch
import torch.nn.functional as F

import gemmlab
from gemmlab import conv03, conv04, launch

# (N, C, H, W, K, R, stride, padding): a 1x1 (short reduction: one stage a tile; A through x's rows,
# the A_ROWS build), a 3x3, a strided
# 3x3 with an odd output-channel count (the register fallback of the staged build), a 1x1/2
CASES = [(2, 64, 20, 20, 128, 1, 1, 0), (2, 32, 13, 11, 192, 3, 1, 1), (1, 16, 17, 17, 130, 3, 2, 1),
         (2, 128, 14, 14, 256, 1, 2, 0)]  # fmt: skip
# conv05's depthwise layers (N, C, H, W, R, stride, padding, dilation, dtype): 16 bytes of channels a
# thread (24 bf16 channels, 12 float32 ones) and one (13 channels), the padding's reads at every border;
# the sliding row 3 wide (the first), 7 wide in bf16 (blocks of 4 vectors) and in float32 (8 pixels a
# thread: rows of 17), 5 wide over one channel a thread
DEPTHWISE_CASES = [(2, 24, 13, 11, 3, 1, 1, 1, torch.bfloat16), (1, 12, 9, 17, 7, 2, 3, 1, torch.float32),
                   (2, 13, 8, 8, 5, 1, "same", 2, torch.float16), (2, 40, 11, 15, 7, 1, 3, 1, torch.bfloat16),
                   (1, 12, 9, 17, 7, 1, 3, 1, torch.float32), (2, 13, 8, 10, 5, 1, 2, 1, torch.float16)]  # fmt: skip
# grouped layers in one launch (N, C, H, W, K, R, stride, padding, groups): conv02's grouped build
# over groups of 4 channels and 8 filters (8-byte copies, the 16-wide tile), of 24 at stride 2 (the
# 64-wide tile), of 32; conv05's over narrow groups of 4, of 2 at stride 2, of 8, with their gradients
GROUPED_CASES = [(2, 64, 13, 11, 128, 3, 1, 1, 16), (1, 96, 9, 17, 192, 3, 2, 1, 4), (2, 256, 7, 7, 256, 3, 1, 1, 8),
                 (2, 64, 13, 11, 64, 3, 1, 1, 16), (1, 32, 9, 17, 32, 3, 2, 1, 16), (2, 64, 7, 9, 64, 3, 1, 1, 8)]
# conv04's (N, C, H, W, K, R, stride, padding, dilation): the stem on a small odd image, a 3x3 over 5
# channels dilated 2 into 130 output channels (three 64-channel parts held), a 5x5 over one channel
GATHER_CASES = [(2, 3, 37, 45, 64, 7, 2, 3, 1), (1, 5, 29, 23, 130, 3, 1, 2, 2), (2, 1, 31, 33, 24, 5, 1, 2, 1)]


def _error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def main() -> int:
    torch.manual_seed(0)
    launch.resident_blocks = lambda *args, **kw: 3  # (conv03 asks it for the persistent grid)
    launch.resident_blocks_all = lambda *args, **kw: 3  # (conv04 asks this one)
    wrong = 0
    # each case on the rule's tile, with and without the staged epilogue; then on the 256-pixel tiles
    # (two 64-pixel parts a consumer warpgroup), which the rule takes only for large layers
    only_conv05 = sys.argv[1:] == ["conv05"]
    runs = [] if only_conv05 else [(staged, None) for staged in (True, False)] + [(True, (256, 64)), (False, (256, 128))]
    for staged, tile in runs:
        with conv03.staged_stores(staged), conv03.on_tile(tile), torch.no_grad():
            conv03._PLANS.clear()
            for N, C, H, W, K, R, stride, padding in CASES:
                x = torch.randn(N, C, H, W, device="cuda").bfloat16().to(memory_format=torch.channels_last)
                w = (torch.randn(K, C, R, R, device="cuda") / (C * R * R) ** 0.5).bfloat16()
                bias = torch.randn(K, device="cuda").bfloat16()
                y = gemmlab.conv2d(x, w, bias, stride=stride, padding=padding, activation="relu", algorithm="tma")
                ref = F.relu(F.conv2d(x.double(), w.double(), bias.double(), stride=stride, padding=padding))
                err = _error(y, ref)
                plan = conv03.cached_plan(x, w, bias, (stride, padding, 1), "relu")
                what = conv03.describe(plan) if plan is not None else {}
                ok = err < 2e-2 and not y.isnan().any()
                wrong += not ok
                print(f"{'passed' if ok else 'FAIL'} staged={staged} x={N}x{C}x{H}x{W} w={K}x{C}x{R}x{R} stride={stride} "
                      f"error {err:.1e} {what}", flush=True)  # fmt: skip
    conv04._PLANS.clear()
    with torch.no_grad():
        for (N, C, H, W, K, R, stride, padding, dilation), dtype in zip([] if only_conv05 else GATHER_CASES,
                                                                        (torch.bfloat16, torch.float16, torch.bfloat16)):  # fmt: skip
            x = torch.randn(N, C, H, W, device="cuda").to(dtype)
            w = (torch.randn(K, C, R, R, device="cuda") / (C * R * R) ** 0.5).to(dtype)
            bias = torch.randn(K, device="cuda").to(dtype)
            kw = dict(stride=stride, padding=padding, dilation=dilation)
            y = gemmlab.conv2d(x, w, bias, **kw, activation="gelu", algorithm="gather")
            ref = F.gelu(F.conv2d(x.double(), w.double(), bias.double(), **kw))
            err = _error(y, ref)
            plan = conv04.cached_plan(x, w, bias, (stride, padding, dilation), "gelu")
            what = conv04.describe(plan) if plan is not None else {}
            ok = err < 2e-2 and not y.isnan().any() and plan is not None and plan.tiles > plan.grid[0]
            wrong += not ok
            print(f"{'passed' if ok else 'FAIL'} gather x={N}x{C}x{H}x{W} w={K}x{C}x{R}x{R} stride={stride} "
                  f"padding={padding} dilation={dilation} {str(dtype).removeprefix('torch.')} error {err:.1e} {what}",
                  flush=True)  # fmt: skip
    for N, C, H, W, R, stride, padding, dilation, dtype in DEPTHWISE_CASES:
        x = torch.randn(N, C, H, W, device="cuda").to(dtype).to(memory_format=torch.channels_last).requires_grad_()
        w = (torch.randn(C, 1, R, R, device="cuda") / R).to(dtype).requires_grad_()
        bias = torch.randn(C, device="cuda").to(dtype)
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=C)
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, **kw, activation="silu", algorithm="depthwise")
        ref = F.silu(F.conv2d(x.detach().double(), w.detach().double(), bias.double(), **kw))
        # and its gradients (dgrad, wgrad) at a random dY, against float64's
        dy = torch.randn(ref.shape, device="cuda").to(dtype)
        got = torch.autograd.grad(gemmlab.conv2d(x, w, **kw, algorithm="depthwise"), (x, w), dy)
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        want = torch.autograd.grad(F.conv2d(x64, w64, **kw), (x64, w64), dy.double())
        err = max(_error(y, ref), *(_error(a, b) for a, b in zip(got, want)))
        ok = err < 2e-2 and not y.isnan().any() and all(g.isfinite().all() for g in got)
        wrong += not ok
        print(f"{'passed' if ok else 'FAIL'} depthwise x={N}x{C}x{H}x{W} w={C}x1x{R}x{R} stride={stride} padding={padding} "
              f"dilation={dilation} {str(dtype).removeprefix('torch.')} error (y, dx, dw) {err:.1e}", flush=True)  # fmt: skip
    for N, C, H, W, K, R, stride, padding, groups in GROUPED_CASES[3:] if only_conv05 else GROUPED_CASES:
        x = torch.randn(N, C, H, W, device="cuda").bfloat16().to(memory_format=torch.channels_last)
        w = (torch.randn(K, C // groups, R, R, device="cuda") / (C // groups * R * R) ** 0.5).bfloat16()
        bias = torch.randn(K, device="cuda").bfloat16()
        kw = dict(stride=stride, padding=padding, groups=groups)
        y = gemmlab.conv2d(x, w, bias, **kw, activation="relu")
        err = _error(y, F.relu(F.conv2d(x.double(), w.double(), bias.double(), **kw)))
        grads = []
        if C == K and C // groups in (2, 4, 8):  # conv05's narrow groups: their gradients too (wgrad on conv05)
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            dy = torch.randn(y.shape, device="cuda").bfloat16()
            grads = torch.autograd.grad(gemmlab.conv2d(xg, wg, **kw), (xg, wg), dy)
            x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
            want = torch.autograd.grad(F.conv2d(x64, w64, **kw), (x64, w64), dy.double())
            err = max(err, *(_error(a, b) for a, b in zip(grads, want)))
        ok = err < 2e-2 and not y.isnan().any() and all(g.isfinite().all() for g in grads)
        wrong += not ok
        print(f"{'passed' if ok else 'FAIL'} grouped x={N}x{C}x{H}x{W} w={K}x{C // groups}x{R}x{R} stride={stride} "
              f"groups={groups} error{' (y, dx, dw)' if grads else ''} {err:.1e}", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
