"""conv04's host side: gemmlab.conv2d(algorithm="gather") for layers whose input channels are no
multiple of 8 (ResNet's stem, C = 3), prepared once per kind of call.

The kernel (kernels/conv/04_few_channels.cu) compiles the geometry in (C, R, S, stride, dilation),
so a kind of call (shapes, strides, dtype, device, bias, activation, stride, padding, dilation:
`_key`) builds a `Plan` on its first call: the config (specs.conv.conv04_config), the kernel as a
CUfunction, its grid (the blocks resident at once, no more than tiles: each block walks tiles)
and the launch's arguments as ctypes values. Later calls look the plan up, fill in their tensors'
addresses and launch.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from . import jit, launch
from .activations import post_code
from .conv_plan import LaunchPlan, operand_layouts
from .specs.conv import CONV_04, conv04_config

_PLANS: dict[tuple, Plan] = {}
_PLANS_MAX = 256  # kinds of call remembered; past it the table starts again
_lock = threading.Lock()


@dataclass(kw_only=True)
class Plan(LaunchPlan):
    """What a kind of conv04 call launches (LaunchPlan's; X's, the filter's, D's and the bias's
    addresses filled in per call), with the tiles its persistent grid walks."""

    tiles: int


def why_not(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict) -> str | None:
    """Why conv04 cannot serve a convolution of geometry g, or None: the device (mma.sync: compute
    capability 8.0), the dtype, or a geometry no build holds (conv04_config's refusals: output
    channels, filter entries, shared memory)."""
    from .device import capability

    if x.device.type != "cuda":
        return f"it runs on CUDA tensors, x is on {x.device}"
    if x.dtype not in (torch.bfloat16, torch.float16):
        return f"it takes bf16 or fp16, not {str(x.dtype).removeprefix('torch.')}"
    cc = capability(x.device)
    if cc is not None and cc < CONV_04.min_capability:
        return f"it needs mma.sync's bf16 and fp16 (compute capability 8.0), device {x.device} is {cc[0]}.{cc[1]}"
    try:
        conv04_config(g)
    except ValueError as e:
        return str(e).replace(f"{CONV_04.id} ", "", 1)
    return None


def _key(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> tuple:
    b = None if bias is None else (bias.dtype, bias.stride())
    return (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), b, activation, g_args)


def cached_plan(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> Plan | None:
    """The plan of this kind of call if an earlier call built one, else None."""
    return _PLANS.get(_key(x, weight, bias, g_args, activation))


def tiles_of(g: dict, cfg) -> int:
    """The tiles of output pixels a launch walks: images x tile rows x tile columns."""
    return g["N"] * -(-g["P"] // cfg["TP"]) * -(-g["Q"] // cfg["TQ"])


def plan_for(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None, g_args: tuple,
             out_channels_last: bool) -> Plan:  # fmt: skip
    """The plan of this kind of call, built on its first call (g: conv.conv_geometry's;
    out_channels_last: whether torch's result would be channels_last)."""
    cfg = conv04_config(g)
    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    loaded = jit.load_kernel(CONV_04, cfg, device_id, x.dtype, x.dtype, post=post_code(bias is not None, activation))
    launch.ensure_current(device_id)
    block = CONV_04.block(cfg)
    tiles = tiles_of(g, cfg)
    resident = launch.resident_blocks_all(loaded, device_id, block)
    sizes = (g["N"], g["H"], g["W"], g["K"], g["P"], g["Q"], g["pads"][0], g["pads"][2])
    args = (ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_uint64(0), *(ctypes.c_int32(v) for v in sizes),
            ctypes.c_uint64(0))  # fmt: skip
    plan = Plan(g=g, cfg=cfg, device_id=device_id, func=launch.function_handle(loaded, device_id),
                grid=(max(1, min(tiles, resident)), 1, 1), block=block, smem=loaded.compiled.usage.dynamic_smem,
                tiles=tiles, args=args, params=launch.addresses(args), out_channels_last=out_channels_last,
                **operand_layouts(x, weight, bias))  # fmt: skip
    with _lock:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[_key(x, weight, bias, g_args, activation)] = plan
    return plan


def describe(plan: Plan) -> dict:
    """What a plan launches, for a benchmark's record: the tile, the output channels held, the
    grid and the tiles it walks."""
    return dict(TP=plan.cfg["TP"], TQ=plan.cfg["TQ"], KT=plan.cfg["KT"], grid=plan.grid[0], tiles=plan.tiles)


def run(plan: Plan, xs: Tensor, wm: Tensor, bias: Tensor | None) -> Tensor:
    """Launch the plan on torch's current stream over xs (x's dense NHWC memory), wm (the dense
    [K, R*S*C] filter matrix, or the channels_last weight itself) and the bias (in x's dtype,
    contiguous). Returns the [N, K, P, Q] result, channels_last where torch's would be, else
    contiguous."""
    g = plan.g
    d = torch.empty((g["N"], g["P"], g["Q"], g["K"]), dtype=xs.dtype, device=xs.device)  # NHWC
    if d.numel():
        stream = launch.driver_stream(plan.device_id)
        with plan.lock:
            plan.args[0].value, plan.args[1].value, plan.args[2].value = xs.data_ptr(), wm.data_ptr(), d.data_ptr()
            plan.args[-1].value = 0 if bias is None else bias.data_ptr()
            plan.launch(stream, "conv04")
    y = d.permute(0, 3, 1, 2)
    return y if plan.out_channels_last else y.contiguous()
