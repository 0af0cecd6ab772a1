"""conv03's host side: gemmlab.conv2d(algorithm="tma") prepared once per kind of call.

The kernel (kernels/conv/03_tma_im2col.cu) runs ResNet-50's layers at batch 32 in 20-40 us; a
call that works everything out again each time (the geometry, the refusals, the config, the
kernel's lookup, the maps' parameters, each launch argument's conversion) spent several times
that on the host, and the GPU waited for it. So the first call of a kind (shapes, strides, dtype,
device, bias, activation, stride, padding, dilation: `_key`) builds a `Plan` with all of that, and
later calls of the kind only look the plan up, take their tensors' addresses, fetch or encode the
tensor maps of those addresses, and launch.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import jit, launch, tma
from .activations import post_code
from .specs.conv import CONV03_BK, CONV_03, conv03_config

_PLANS: dict[tuple, Plan] = {}
_PLANS_MAX = 256  # kinds of call remembered; past it the table starts again
_MAPS_MAX = 16  # tensor maps a plan remembers for each operand (by address)
_lock = threading.Lock()


@dataclass
class Plan:
    """What a kind of conv03 call launches: the geometry g, the GEMM's M (output pixels) and K
    (output channels), the config, the kernel as a CUfunction, grid, block and shared memory, the
    launch's fixed arguments (sizes, alpha) as ctypes values, and the maps' parameters."""

    g: dict
    M: int
    K: int
    cfg: object
    device_id: int
    func: object
    grid: tuple
    block: tuple
    smem: int
    fixed: tuple  # ctypes values of the arguments after D and before the bias
    x_params: dict
    w_params: dict
    x_maps: dict = field(default_factory=dict)  # x's address -> its im2col map (a ctypes array)
    w_maps: dict = field(default_factory=dict)


def _key(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> tuple:
    b = None if bias is None else (bias.dtype, bias.stride())
    return (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), b, activation, g_args)


def cached_plan(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> Plan | None:
    """The plan of this kind of call if an earlier call built one (g_args: stride, padding and
    dilation as conv2d was given them, lists made tuples), else None."""
    return _PLANS.get(_key(x, weight, bias, g_args, activation))


def plan_for(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None, g_args: tuple) -> Plan:
    """The plan of this kind of call, built on its first call (g: conv.conv_geometry's)."""
    key = _key(x, weight, bias, g_args, activation)
    M, K = g["N"] * g["P"] * g["Q"], g["K"]
    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    from .device import sm_count

    cfg = conv03_config(K, M, sm_count(device_id))
    loaded = jit.load_kernel(CONV_03, cfg, device_id, x.dtype, x.dtype, post=post_code(bias is not None, activation))
    launch.ensure_current(device_id)
    sizes = (M, K, g["C"], g["R"], g["S"], g["P"], g["Q"], *g["stride"], g["pads"][0], g["pads"][2], *g["dilation"],
             K)  # (the last: D's row stride)  # fmt: skip
    fixed = (*(ctypes.c_int32(v) for v in sizes), ctypes.c_float(1.0))
    plan = Plan(g=g, M=M, K=K, cfg=cfg, device_id=device_id, func=launch.function_handle(loaded, device_id),
                grid=CONV_03.grid(M, K, cfg), block=CONV_03.block(cfg), smem=loaded.compiled.usage.dynamic_smem,
                fixed=fixed, x_params=tma.im2col_map_params(g, cfg["BM"], CONV03_BK, x.element_size()),
                w_params=tma.filter_map_params(K, g["R"], g["S"], g["C"], cfg["BN"], CONV03_BK, x.element_size()))  # fmt: skip
    with _lock:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _map(maps: dict, t: Tensor, encode) -> ctypes.Array:
    """The tensor map of t's address from a plan's table, encoded on a miss."""
    ptr = t.data_ptr()
    found = maps.get(ptr)
    if found is None:
        if ptr % tma.TMA_ALIGN_BYTES:
            raise ValueError(f"TMA needs a 16-byte aligned operand, got address {ptr:#x}")
        found = (ctypes.c_ubyte * 128).from_buffer_copy(encode(t))
        with _lock:
            if len(maps) >= _MAPS_MAX:
                maps.clear()
            maps[ptr] = found
    return found


def run(plan: Plan, xs: Tensor, wm: Tensor, bias: Tensor | None) -> Tensor:
    """Launch the plan over NHWC x (xs), the [K, R*S*C] filter matrix (wm) and the bias (in the
    output's dtype, contiguous) on torch's current stream; returns D, [N*P*Q, K] (NHWC)."""
    from cuda.bindings import driver

    d = torch.empty((plan.M, plan.K), dtype=xs.dtype, device=xs.device)
    if d.numel() == 0:
        return d
    g = plan.g
    map_x = _map(plan.x_maps, xs, lambda t: tma.im2col_map(t, g, plan.cfg["BM"], CONV03_BK))
    map_w = _map(plan.w_maps, wm, lambda t: tma.filter_map(t, plan.K, g["R"], g["S"], g["C"], plan.cfg["BN"], CONV03_BK))
    held = (map_x, map_w, ctypes.c_uint64(d.data_ptr()), *plan.fixed, ctypes.c_uint64(0 if bias is None else bias.data_ptr()))
    params = (ctypes.c_void_p * len(held))(*map(ctypes.addressof, held))
    (err,) = driver.cuLaunchKernel(plan.func, *plan.grid, *plan.block, plan.smem,
                                   driver.CUstream(launch.current_stream_handle(plan.device_id)), ctypes.addressof(params), 0)  # fmt: skip
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"launching conv03 {plan.cfg.as_dict()} failed: {err}")
    return d
