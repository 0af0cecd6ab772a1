"""conv06's host side: a convolution's filter gradient without the im2col matrix.

conv_grad's wgrad is the GEMM dY_rows^T @ im2col(x). Built as a matrix, im2col(x) is R*S times
the input's bytes, written by one strided copy and read back by the GEMM; ResNet-50's 3x3 layers
at batch 256 wrote some 6 GB of it a training step (docs/notes/filter-gradient-copies.md). conv06
(kernels/conv/06_tma_wgrad.cu) is tc09 with B's stages copied by the TMA from x's im2col map, the
map conv03 reads its A through, in boxes of 64 pixels x 64 channels; A is dY_rows read transposed
in place, the [K][R*S*C] result the filter's channels_last memory. `conv_wgrad` (the backward
pass's, gemmlab.conv's) takes it where `why_not` finds nothing against it, else the matrix.

The first call of a kind (shapes, dtype, device, geometry) works out whether conv06 serves it and
its launch (config, kernel, grid, the geometry's argument); later calls look that up, and find
their tensor maps by the addresses they read and write."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import jit, launch, tma
from .specs.conv import CONV_06, conv06_config

# The filter gradient on conv06 where it serves (conv_wgrad); False: always the GEMM over the
# im2col matrix.
ON = True
BOX = 64  # pixels and channels of a box of either operand; conv06's BK
STEPS_MAX = 2**20  # K steps the 32-bit stream-K schedule counts (specs.persistent._stream_k_steps_fit)
_MAPS_MAX = 16  # address triples a plan remembers the tensor maps of

_lock = threading.Lock()


@dataclass(kw_only=True)
class Plan:
    cfg: object
    device_id: int
    func: object  # the CUfunction
    grid: int  # the blocks resident at once (a persistent grid)
    block: tuple
    smem: int
    fields: ctypes.Array  # gemmlab::ConvFields
    maps: dict = field(default_factory=dict)  # (dY rows, x, dW) addresses -> their three maps


_PLANS: dict[tuple, Plan | str] = {}  # kind of call -> its plan, or why conv06 does not serve it


def conv_wgrad(x: Tensor, dy: Tensor, g: dict, precision: str = "fp32") -> Tensor:
    """The filter's gradient of a convolution of geometry g, [K, C, R, S] (channels_last memory):
    the GEMM dY_rows^T @ im2col(x) (gemmlab.conv_grad), on conv06 where it serves in eager calls,
    else through gemm() over the im2col matrix, dY_rows read transposed in place."""
    from .conv_grad import dy_rows, filter_from_rows
    from .conv_im2col import im2col
    from .ops import _plain, gemm, wants_grad

    # Traced (torch.compile, fake tensors), it takes gemm(), whose operator traces; where autograd
    # records the call (a backward pass with create_graph=True), gemm(), which has a gradient.
    if (ON and not torch.compiler.is_compiling() and _plain(x, dy) and not wants_grad(x, dy)
            and isinstance(plan := _plan(x, dy, g), Plan)):  # fmt: skip
        return filter_from_rows(_run(plan, x, dy, g), g)
    m = gemm(dy_rows(dy).t(), im2col(x, g), precision=precision, device="cpu" if x.device.type == "cpu" else None)
    return filter_from_rows(m, g)


def why_not(x: Tensor, dy: Tensor, g: dict) -> str | None:
    """None where conv06 computes this convolution's filter gradient (x [N, C, H, W], dY [N, K, P,
    Q], g: conv.conv_geometry's), else why not. Where the matrix is x's own memory or one
    transposing copy of it (a 1x1 filter at stride 1 without padding), gemm() reads it as it is."""
    plan = _plan(x, dy, g)
    return plan if isinstance(plan, str) else None


def _refusal(x: Tensor, dy: Tensor, g: dict) -> str | None:
    if x.device.type != "cuda" or x.dtype not in CONV_06.dtypes or dy.dtype != x.dtype:
        return "conv06 takes bf16 or fp16 CUDA tensors"
    if g["R"] == g["S"] == 1 and tuple(g["stride"]) == (1, 1) and not any(g["pads"]):
        return "the im2col matrix of a 1x1 filter at stride 1 without padding is x itself"
    if g["C"] % BOX:
        return f"conv06 takes whole boxes of {BOX} channels; C = {g['C']}"
    if g["K"] % 8:
        return f"dY's rows must be whole 16-byte units for its tiled map; K = {g['K']}"
    pixels = g["N"] * g["P"] * g["Q"]
    if pixels == 0:
        return "no pixels: the gradient is zeros"
    if -(-pixels // BOX) >= STEPS_MAX:
        return f"{pixels} output pixels pass the stream-K schedule's 32-bit count of K steps"
    if torch.cuda.get_device_capability(x.device) < CONV_06.min_capability:
        return "conv06 needs a Hopper GPU (TMA im2col, wgmma)"
    return tma.im2col_why_not(g, BOX, BOX, x.element_size())


def _plan(x: Tensor, dy: Tensor, g: dict) -> Plan | str:
    """The plan of this kind of call, or why conv06 does not serve it; worked out on its first call."""
    key = (x.shape, dy.shape, x.dtype, dy.dtype, x.device, g["R"], g["S"], tuple(g["stride"]), tuple(g["pads"]),
           tuple(g["dilation"]))  # fmt: skip
    found = _PLANS.get(key)
    if found is None:
        found = _refusal(x, dy, g) or _make_plan(x, g)
        with _lock:
            if len(_PLANS) >= 256:
                _PLANS.clear()
            _PLANS[key] = found
    return found


def _make_plan(x: Tensor, g: dict) -> Plan:
    from .device import sm_count

    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    cfg = conv06_config(g["K"], g["R"] * g["S"] * g["C"], sm_count(device_id))
    loaded = jit.load_kernel(CONV_06, cfg, device_id, x.dtype, x.dtype)
    launch.ensure_current(device_id)
    block = CONV_06.block(cfg)
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    fields = (ctypes.c_int32 * 10)(g["C"], g["S"], g["Q"], g["P"] * g["Q"], sh, sw, g["pads"][0], g["pads"][2], dh, dw)
    return Plan(cfg=cfg, device_id=device_id, func=launch.function_handle(loaded, device_id),
                grid=launch.resident_blocks(loaded, device_id, block, None), block=block,
                smem=loaded.compiled.usage.dynamic_smem, fields=fields)  # fmt: skip


def _aligned(t: Tensor) -> Tensor:
    """t where its memory is dense (row-major) and 16-byte aligned, as TMA maps need; else a copy."""
    return t if t.is_contiguous() and t.data_ptr() % tma.TMA_ALIGN_BYTES == 0 else t.clone(memory_format=torch.contiguous_format)


def _run(plan: Plan, x: Tensor, dy: Tensor, g: dict) -> Tensor:
    """The filter gradient [K, R*S*C] (im2col's (r, s, c) order: the filter's channels_last
    memory) of the convolution g of x with the output gradient dY, on conv06, launched on torch's
    current stream."""
    from cuda.bindings import driver

    from .api import stream_workspace
    from .conv_grad import dy_rows

    K, pixels, cols = g["K"], g["N"] * g["P"] * g["Q"], g["R"] * g["S"] * g["C"]
    xs, rows = _aligned(x.permute(0, 2, 3, 1)), _aligned(dy_rows(dy))  # x's NHWC memory; dY's as [N*P*Q, K]
    d = torch.empty((K, cols), dtype=x.dtype, device=x.device)
    consumers = plan.cfg["BM"] // 64
    ws, flags = stream_workspace(plan.device_id, plan.grid * consumers * 64 * 256, plan.grid * consumers)
    where = (rows.data_ptr(), xs.data_ptr(), d.data_ptr())
    maps = plan.maps.get(where)
    if maps is None:
        maps = tuple((ctypes.c_ubyte * 128).from_buffer_copy(b) for b in (
            tma.rows_map(rows, pixels, K, BOX, BOX),
            tma.im2col_map(xs.permute(0, 3, 1, 2), g, BOX, BOX),
            tma.output_map(d, K, cols),
        ))  # fmt: skip
        with _lock:
            if len(plan.maps) >= _MAPS_MAX:
                plan.maps.clear()
            plan.maps[where] = maps
    args = (*maps, ctypes.c_uint64(d.data_ptr()), ctypes.c_uint64(ws.data_ptr()), ctypes.c_uint64(flags.data_ptr()),
            ctypes.c_int32(K), ctypes.c_int32(cols), ctypes.c_int32(pixels), plan.fields)  # fmt: skip
    params = launch.addresses(args)
    (err,) = driver.cuLaunchKernel(plan.func, plan.grid, 1, 1, *plan.block, plan.smem, launch.driver_stream(plan.device_id),
                                   ctypes.addressof(params), 0)  # fmt: skip
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"launching conv06 {plan.cfg.as_dict()} failed: {err}")
    del xs, rows  # only now may their memory go back to torch's allocator: the kernel is queued behind them
    return d


def wgrad(x: Tensor, dy: Tensor, g: dict) -> Tensor:
    """conv06's [K, R*S*C] filter gradient (why_not: None) -- for the tests; conv_wgrad is the way in."""
    plan = _plan(x, dy, g)
    if isinstance(plan, str):
        raise ValueError(f"conv06 cannot compute this filter gradient: {plan}")
    return _run(plan, x, dy, g)
