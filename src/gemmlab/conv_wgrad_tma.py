"""conv06's host side: a convolution's filter gradient without the im2col matrix.

conv_grad's wgrad is the GEMM dY_rows^T @ im2col(x). Built as a matrix, im2col(x) is R*S times
the input's bytes, written by one strided copy and read back by the GEMM; ResNet-50's 3x3 layers
at batch 256 wrote some 6 GB of it a training step (docs/notes/filter-gradient-copies.md). conv06
(kernels/conv/06_tma_wgrad.cu) is tc09 with B's stages copied by the TMA from x's im2col map, the
map conv03 reads its A through, in boxes of 64 pixels x 64 channels; A is dY_rows read transposed
in place, the [K][R*S*C] result the filter's channels_last memory. `gemmlab.conv.conv_wgrad`
takes it where `why_not` finds nothing against it, else the matrix.

A call works out its launch each time (a few tens of microseconds on the host, beside a kernel of
hundreds at the layers it serves); the kernel, its grid and the workspace are kept."""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from . import jit, launch, tma
from .specs.conv import CONV_06, conv06_config

BOX = 64  # pixels and channels of a box of either operand; conv06's BK
STEPS_MAX = 2**20  # K steps the 32-bit stream-K schedule counts (specs.persistent._stream_k_steps_fit)

_LOADED: dict[tuple, tuple] = {}  # (config, dtype, device) -> (CUfunction, resident blocks, smem)


def why_not(x: Tensor, dy: Tensor, g: dict) -> str | None:
    """None where conv06 computes this convolution's filter gradient (x [N, C, H, W], dY [N, K, P,
    Q], g: conv.conv_geometry's), else why not: where the matrix is a view of x (a 1x1 filter at
    stride 1 without padding) the GEMM reads it in place already, or after one transposing copy."""
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


def _aligned(t: Tensor) -> Tensor:
    """t where its memory is dense (row-major) and 16-byte aligned, as TMA maps need; else a copy."""
    return t if t.is_contiguous() and t.data_ptr() % tma.TMA_ALIGN_BYTES == 0 else t.clone(memory_format=torch.contiguous_format)


def _loaded(cfg, dtype: torch.dtype, device_id: int) -> tuple:
    key = (cfg.values, dtype, device_id)
    found = _LOADED.get(key)
    if found is None:
        loaded = jit.load_kernel(CONV_06, cfg, device_id, dtype, dtype)
        launch.ensure_current(device_id)
        resident = launch.resident_blocks(loaded, device_id, CONV_06.block(cfg), None)
        found = _LOADED[key] = (launch.function_handle(loaded, device_id), resident, loaded.compiled.usage.dynamic_smem)
    return found


def wgrad(x: Tensor, dy: Tensor, g: dict) -> Tensor:
    """The filter gradient [K, R*S*C] (im2col's (r, s, c) order: the filter's channels_last
    memory) of the convolution g of x with the output gradient dY, on conv06 (why_not: None)."""
    from cuda.bindings import driver

    from .api import stream_workspace
    from .device import sm_count
    from .conv_grad import dy_rows

    N, C, K, R, S, P, Q = (g[k] for k in ("N", "C", "K", "R", "S", "P", "Q"))
    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    cfg = conv06_config(K, R * S * C, sm_count(device_id))
    func, resident, smem = _loaded(cfg, x.dtype, device_id)
    xs, rows = _aligned(x.permute(0, 2, 3, 1)), _aligned(dy_rows(dy))  # x's NHWC memory; dY's as [N*P*Q, K]
    pixels, cols = N * P * Q, R * S * C
    d = torch.empty((K, cols), dtype=x.dtype, device=x.device)
    block = CONV_06.block(cfg)
    consumers = cfg["BM"] // 64
    ws, flags = stream_workspace(device_id, resident * consumers * 64 * 256, resident * consumers)
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    fields = (ctypes.c_int32 * 10)(C, S, Q, P * Q, sh, sw, g["pads"][0], g["pads"][2], dh, dw)
    maps = [(ctypes.c_ubyte * 128).from_buffer_copy(b) for b in (
        tma.rows_map(rows, pixels, K, BOX, BOX),
        tma.im2col_map(xs.permute(0, 3, 1, 2), g, BOX, BOX),
        tma.output_map(d, K, cols),
    )]  # fmt: skip
    args = (*maps, ctypes.c_uint64(d.data_ptr()), ctypes.c_uint64(ws.data_ptr()), ctypes.c_uint64(flags.data_ptr()),
            ctypes.c_int32(K), ctypes.c_int32(cols), ctypes.c_int32(pixels), fields)  # fmt: skip
    params = (ctypes.c_void_p * len(args))(*map(ctypes.addressof, args))
    (err,) = driver.cuLaunchKernel(func, resident, 1, 1, *block, smem, launch.driver_stream(device_id),
                                   ctypes.addressof(params), 0)  # fmt: skip
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"launching conv06 {cfg.as_dict()} failed: {err}")
    del xs, rows  # only now may their memory go back to torch's allocator: the kernel is queued behind them
    return d
