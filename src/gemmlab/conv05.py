"""conv05's host side: a depthwise convolution (groups = C = K) in one launch of
kernels/conv/05_depthwise.cu, where conv2d's grouped path makes one convolution a group.

conv2d(..., groups=C) takes it under algorithm="auto" for CUDA tensors that need no gradient
(depthwise_why_not says where it does not serve); a call that takes a gradient keeps the grouped
path, whose groups are ordinary convolutions. Under torch.compile it runs as the operator
torch.ops.gemmlab.conv2d_depthwise (depthwise_op: a fake implementation for tracing, no
gradients), so that a compiled model's depthwise layers are one launch each too."""

from __future__ import annotations

import torch
from torch import Tensor

from . import jit, launch
from .activations import post_code
from .conv_shape import CONV_OP_ARGS, _suggests_channels_last, conv_geometry, empty_result
from .specs.conv import CONV05_THREADS, CONV_05, conv05_vec

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BLOCKS_AN_SM = 16  # the grid's cap: blocks of 256 threads an SM; past it each thread strides over more pixels
_ALIGN = 16


def depthwise_why_not(x: Tensor, weight: Tensor, groups: int) -> str | None:
    """Why conv05 cannot serve this call (None where it can): it takes CUDA tensors in bf16, fp16
    or float32 with one filter a channel (groups = C = K, weight [C, 1, R, S])."""
    if x.device.type != "cuda":
        return f"conv05 runs on CUDA tensors, not {x.device.type}"
    if x.dtype not in DTYPES:
        return f"conv05 takes bf16, fp16 or float32, not {x.dtype}"
    C = x.shape[1]
    if not (groups == C and weight.shape[0] == C and weight.shape[1] == 1):
        return f"conv05 is depthwise: groups = in_channels = out_channels ({C}), one filter a channel"
    return None


def _aligned(*ts: Tensor | None) -> bool:
    return all(t is None or t.data_ptr() % _ALIGN == 0 for t in ts)


def run(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None, channels_last: bool) -> Tensor:
    """activation(depthwise conv2d(x, weight) + bias) in one launch (g: conv.conv_geometry's for
    the whole layer, C channels in and out). Returns [N, C, P, Q], channels_last where
    channels_last says torch's result would be, else contiguous."""
    N, C, P, Q, R, S = g["N"], g["C"], g["P"], g["Q"], g["R"], g["S"]
    xs = x.contiguous(memory_format=torch.channels_last)  # its memory NHWC: x itself where it is already
    taps = weight.reshape(C, R * S).t().contiguous()  # [R*S][C]: a tap's channels side by side
    b = None if bias is None else bias.to(x.dtype).contiguous()
    y = torch.empty((N, P, Q, C), dtype=x.dtype, device=x.device)  # NHWC
    if y.numel():
        device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
        cfg = CONV_05.config(VEC=conv05_vec(x.dtype, C, _aligned(xs, taps, y, b)))
        loaded = jit.load_kernel(CONV_05, cfg, device_id, x.dtype, x.dtype, post=post_code(b is not None, activation))
        from .device import sm_count

        tasks = N * P * Q * (C // cfg["VEC"])
        grid = (max(1, min(-(-tasks // CONV05_THREADS), BLOCKS_AN_SM * sm_count(device_id))), 1, 1)
        i32 = launch.i32
        sizes = (N, g["H"], g["W"], C, P, Q, R, S, *g["stride"], g["pads"][0], g["pads"][2], *g["dilation"])
        launch.launch(loaded, device_id, grid, (CONV05_THREADS, 1, 1), xs.data_ptr(), taps.data_ptr(), y.data_ptr(),
                      0 if b is None else b.data_ptr(), *(i32(v) for v in sizes))  # fmt: skip
    out = y.permute(0, 3, 1, 2)
    return out if channels_last else out.contiguous()


def _op(x: Tensor, weight: Tensor, bias: Tensor | None, stride: list[int], padding: list[int], padding_name: str,
        dilation: list[int], activation: str) -> Tensor:  # fmt: skip
    """The operator's launch: run() over the layer's geometry (activation "" for none)."""
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), tuple(stride), padding_name or tuple(padding), tuple(dilation))
    return run(x, weight, bias, g, activation or None, _suggests_channels_last(x) or _suggests_channels_last(weight))


depthwise_op = torch.library.custom_op("gemmlab::conv2d_depthwise", _op, mutates_args=(), device_types="cuda",
                                       schema=f"({CONV_OP_ARGS}) -> Tensor")


@depthwise_op.register_fake
def _op_fake(x, weight, bias, stride, padding, padding_name, dilation, activation):
    """The result's shape and memory format without a launch, as run() returns it."""
    return empty_result(x, weight, stride, padding, padding_name, dilation)
