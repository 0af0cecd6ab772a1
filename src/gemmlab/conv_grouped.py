"""Grouped convolutions in one launch: conv02's grouped build (kernels/conv/02_implicit_gemm.cu,
one grid layer a group). A grouped layer that is not depthwise (ResNeXt's 3x3s: 32 groups of 4 to
32 channels) otherwise runs one convolution a group and concatenates them (conv._grouped), a
launch, a result and a copy a group. This build reads each group's channels where they lie in
x's NHWC memory and writes its output channels straight into the one result, the bias and the
activation fused, for bf16 and fp16 CUDA tensors whose groups have a multiple of 4 channels, where
no trace records the call (a trace keeps the group-by-group path, whose steps have operators).
With gradients to take (gemmlab.conv.GroupedConv), dX is one more grouped convolution, of the spread
dY by the flipped filters (gemmlab.conv_grad), and dW the diagonal blocks of one GEMM over every
channel (conv_grad.wgrad_grouped)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import jit, launch
from .activations import post_code
from .specs.base import cdiv
from .specs.conv import CONV_02, conv02_grouped_config

GRID_Y_MAX = 65535  # the grid's y dimension (tiles of output pixels)


def grouped_why_not(x: Tensor, weight: Tensor, groups: int) -> str | None:
    """Why conv02's grouped build cannot serve this grouped convolution (None where it can)."""
    if x.device.type != "cuda":
        return f"it runs on CUDA tensors, x is on {x.device}"
    if x.dtype not in (torch.bfloat16, torch.float16):
        return f"it takes bf16 or fp16, not {str(x.dtype).removeprefix('torch.')}"
    if groups < 2:
        return "it is for groups > 1"
    cg = x.shape[1] // groups
    if cg % 4:
        return f"it reads a group's channels 4 at a time: {cg} channels a group are not a multiple of 4"
    return None


def _operands(x: Tensor, weight: Tensor, bias: Tensor | None, cg: int):
    """x's NHWC memory, the [K, R*S*C/groups] filter matrix (KRSC: each group's filters are its own
    rows), both aligned to the copies' width (copies where an offset view's storage is not), and the
    bias in x's dtype."""
    align = 16 if cg % 8 == 0 else 8
    xs = x.contiguous(memory_format=torch.channels_last)
    wm = weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1).contiguous()
    if xs.data_ptr() % align or wm.data_ptr() % align:
        xs, wm = xs.clone(memory_format=torch.channels_last), wm.clone()
    return xs, wm, None if bias is None else bias.to(x.dtype).contiguous()


def fits(g: dict, groups: int) -> bool:
    """Whether one launch holds the layer: its tiles of output pixels within the grid's y dimension
    (GRID_Y_MAX; g: one group's geometry)."""
    return cdiv(g["N"] * g["P"] * g["Q"], conv02_grouped_config(g["K"] // groups, g["C"])["BM"]) <= GRID_Y_MAX


def run(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, groups: int, activation: str | None,
        channels_last: bool) -> Tensor:  # fmt: skip
    """activation(conv2d(x, weight, bias, groups=groups)) in one launch, g the geometry of one group
    (conv_geometry of x's shape with C / groups channels; its K is every group's; fits(g, groups)
    holds); the result NCHW over NHWC memory where channels_last, else contiguous."""
    cg, kg = g["C"], g["K"] // groups
    cfg = conv02_grouped_config(kg, cg)
    M = g["N"] * g["P"] * g["Q"]
    d = torch.empty((M, g["K"]), dtype=x.dtype, device=x.device)
    if M and g["K"]:
        xs, wm, b = _operands(x, weight, bias, cg)
        device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
        loaded = jit.load_kernel(CONV_02, cfg, device_id, x.dtype, x.dtype, post=post_code(b is not None, activation))
        sizes = (g["N"], g["H"], g["W"], cg, kg, g["R"], g["S"], g["P"], g["Q"], *g["stride"], g["pads"][0], g["pads"][2],
                 *g["dilation"], g["K"])  # (the last: D's row stride)  # fmt: skip
        grid = (cdiv(kg, cfg["BN"]), cdiv(M, cfg["BM"]), groups)
        launch.launch(loaded, device_id, grid, CONV_02.block(cfg), xs.data_ptr(), wm.data_ptr(), d.data_ptr(),
                      *(launch.i32(v) for v in sizes), launch.f32(1.0), 0 if b is None else b.data_ptr(),
                      launch.i32(groups * cg))  # (x's pixel stride)  # fmt: skip
    y = d.reshape(g["N"], g["P"], g["Q"], g["K"]).permute(0, 3, 1, 2)
    return y if channels_last else y.contiguous()
