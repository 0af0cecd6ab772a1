"""conv03's host side: gemmlab.conv2d(algorithm="tma") prepared once per kind of call.

The kernel (kernels/conv/03_tma_im2col.cu) runs ResNet-50's layers at batch 32 in 20-40 us; a
call that works everything out again each time (the geometry, the refusals, the config, the
kernel's lookup, the maps' parameters, each launch argument's conversion) spent several times
that on the host, and the GPU waited for it. So the first call of a kind (shapes, strides, dtype,
device, bias, activation, stride, padding, dilation: `_key`) builds a `Plan` with all of that, and
later calls of the kind only look the plan up, take their tensors' addresses, fetch or encode the
tensor maps of those addresses, and launch.

PERSISTENT picks the kernel's persistent build (PERSISTENT = 1: at most one block an SM, each
walking tiles; tile_walk below is that walk in Python), on since its GPU tests passed on an H200
and it ran 0.74x cuDNN against one tile a block's 0.69x there (ResNet-50, batch 32).

TMA_STORE picks the staged epilogue (TMA_STORE = 1: each 64 x 64 chunk of the result through
shared memory and a TMA store, as tc07's), on since it ran ResNet-50's layers at 0.97x cuDNN
against the register epilogue's 0.73-0.75x on one H100 (bf16, batch 32;
conv-resnet50-tma-20261127T171232Z..171334Z): the register stores of a 16-bit D moved a third of
the bytes a TMA store does. Turn it off (conv03.TMA_STORE = False) or run within
`staged_stores(False)`; a layer whose output rows are not whole 16-byte units (K not a multiple of
8) keeps the register epilogue either way.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import jit, launch, tma
from .activations import post_code
from .conv_plan import LaunchPlan, operand_layouts
from .settings import setting
from .specs.conv import CONV03_BK, CONV_03, conv03_config, conv03_tile_config

# Launch the persistent build (plans are kept apart by it); False: one tile a block.
PERSISTENT = True
# The kernel's GROUP: its tile walk takes groups of this many rows of tiles, column by column.
WALK_GROUP = 1
# A tile (BM, BN) of CONV03_TILES every plan takes instead of the rule's (conv-bench --tiles times
# each); None: the rule's (conv03_config). Plans are kept apart by it.
TILE: tuple[int, int] | None = None
# Launch the staged TMA-store epilogue where the output takes it (TMA_STORE = 1); False: register
# stores. Plans are kept apart by it.
TMA_STORE = True
# Read A through a tiled map of x's rows where the filter is 1x1 at stride 1 without padding (the
# A_ROWS build); False: the im2col map for every layer. Plans are kept apart by it.
A_ROWS = True

_PLANS: dict[tuple, Plan] = {}
_PLANS_MAX = 256  # kinds of call remembered; past it the table starts again
_MAPS_MAX = 16  # tensor maps a plan remembers for each operand (by address)
_lock = threading.Lock()


@dataclass(kw_only=True)
class Plan(LaunchPlan):
    """What a kind of conv03 call launches (LaunchPlan's), with the GEMM's M (output pixels) and K
    (output channels) and the tensor maps of the addresses seen so far."""

    M: int
    K: int
    x_maps: dict = field(default_factory=dict)  # x's address -> its im2col map (a ctypes array)
    w_maps: dict = field(default_factory=dict)
    d_maps: dict = field(default_factory=dict)  # the output's address -> its map (TMA_STORE builds only)


def _key(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> tuple:
    b = None if bias is None else (bias.dtype, bias.stride())
    return (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), b, activation, g_args, PERSISTENT, TILE, TMA_STORE,
            A_ROWS)  # fmt: skip


def cached_plan(x: Tensor, weight: Tensor, bias: Tensor | None, g_args: tuple, activation: str | None) -> Plan | None:
    """The plan of this kind of call if an earlier call built one (g_args: stride, padding and
    dilation as conv2d was given them, lists made tuples), else None."""
    return _PLANS.get(_key(x, weight, bias, g_args, activation))


def plan_for(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None, g_args: tuple,
             out_channels_last: bool) -> Plan:  # fmt: skip
    """The plan of this kind of call, built on its first call (g: conv.conv_geometry's;
    out_channels_last: whether torch's result would be channels_last)."""
    key = _key(x, weight, bias, g_args, activation)
    M, K = g["N"] * g["P"] * g["Q"], g["K"]
    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    from .device import sm_count

    staged, a_rows = stores_staged(K), rows_of_x(g)
    if TILE is None:
        cfg = conv03_config(K, M, sm_count(device_id), persistent=PERSISTENT, tma_store=staged, a_rows=a_rows)
    else:
        cfg = conv03_tile_config(TILE, PERSISTENT, staged, a_rows)
    loaded = jit.load_kernel(CONV_03, cfg, device_id, x.dtype, x.dtype, post=post_code(bias is not None, activation))
    launch.ensure_current(device_id)
    resident = launch.resident_blocks(loaded, device_id, CONV_03.block(cfg), None) if cfg["PERSISTENT"] else 0
    sizes = (M, K, g["C"], g["R"], g["S"], g["P"], g["Q"], *g["stride"], g["pads"][0], g["pads"][2], *g["dilation"],
             K)  # (the last: D's row stride)  # fmt: skip
    # (tmX, tmW, D, the sizes, alpha, the bias, tmD: 128 bytes the register epilogue never reads)
    args = ((ctypes.c_ubyte * 128)(), (ctypes.c_ubyte * 128)(), ctypes.c_uint64(0), *(ctypes.c_int32(v) for v in sizes),
            ctypes.c_float(1.0), ctypes.c_uint64(0), (ctypes.c_ubyte * 128)())  # fmt: skip
    plan = Plan(g=g, M=M, K=K, cfg=cfg, device_id=device_id, func=launch.function_handle(loaded, device_id),
                grid=grid_for(M, K, cfg, resident), block=CONV_03.block(cfg), smem=loaded.compiled.usage.dynamic_smem,
                args=args, params=launch.addresses(args), out_channels_last=out_channels_last,
                **operand_layouts(x, weight, bias))  # fmt: skip
    with _lock:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def rows_of_x(g: dict) -> bool:
    """Whether a plan reads A through a tiled map of x's rows (the A_ROWS build): the filter is 1x1
    at stride 1 without padding, so that the im2col matrix is x's NHWC memory itself, and A_ROWS is
    on."""
    return A_ROWS and g["R"] == g["S"] == 1 and tuple(g["stride"]) == (1, 1) and not any(g["pads"])


def stores_staged(K: int) -> bool:
    """Whether a plan over K output channels takes the staged TMA-store build: TMA_STORE is on and
    the output's rows are whole 16-byte units (run allocates it 16-byte aligned)."""
    return TMA_STORE and tma.output_map_params(1, K) is not None


def staged_stores(on: bool = True):
    """Within it, plans take the staged TMA-store epilogue where they can (on) or never (off);
    TMA_STORE as it was after."""
    return setting(sys.modules[__name__], "TMA_STORE", on)


def on_tile(tile: tuple[int, int] | None):
    """Within it, every plan takes this tile of CONV03_TILES (None: the rule's); TILE as it was after."""
    return setting(sys.modules[__name__], "TILE", tile)


def describe(plan: Plan) -> dict:
    """What a plan launches, for a benchmark's record: the tile, the builds (a_rows: A through x's
    rows) and the grid."""
    return dict(BM=plan.cfg["BM"], BN=plan.cfg["BN"], STAGES=plan.cfg["STAGES"], persistent=bool(plan.cfg["PERSISTENT"]),
                tma_store=bool(plan.cfg["TMA_STORE"]), a_rows=bool(plan.cfg["A_ROWS"]),
                grid=plan.grid[0] * plan.grid[1] * plan.grid[2],
                tiles=-(-plan.M // plan.cfg["BM"]) * -(-plan.K // plan.cfg["BN"]))  # fmt: skip


def grid_for(M: int, K: int, cfg, resident: int) -> tuple:
    """The grid of a launch over M output pixels and K output channels: a block a tile, or for the
    persistent build (cfg's PERSISTENT) as many blocks as are resident at once, no more than tiles."""
    grid = CONV_03.grid(M, K, cfg)
    return (max(1, min(grid[0], resident)), 1, 1) if cfg["PERSISTENT"] else grid


def tile_origin(t: int, tiles_m: int, tiles_n: int, group: int = WALK_GROUP) -> tuple[int, int]:
    """Tile t's (row of tiles, column of tiles) in the persistent build's walk:
    gemmlab::grouped_tile_origin's arithmetic (kernels/common/tma.cuh) for single blocks, in tiles
    rather than elements. With the kernel's group of one row, the output channels run fastest."""
    per_group = group * tiles_n
    top = t // per_group * group
    rows = min(tiles_m - top, group)
    in_group = t % per_group
    return top + in_group % rows, in_group // rows


def tile_walk(block: int, grid: int, tiles_m: int, tiles_n: int, group: int = WALK_GROUP) -> list[tuple[int, int]]:
    """The tiles block `block` of a persistent grid of `grid` blocks computes, in its order: tiles
    block, block + grid, ... (the kernel's loop over t), each as tile_origin gives it. A model of
    the kernel for the tests: every tile must fall to exactly one block."""
    return [tile_origin(t, tiles_m, tiles_n, group) for t in range(block, tiles_m * tiles_n, grid)]


def _map(maps: dict, t: Tensor, encode) -> ctypes.Array:
    """The tensor map of t's address from a plan's table, encoded on a miss."""
    ptr = t.data_ptr()
    found = maps.get(ptr)
    if found is None:
        found = (ctypes.c_ubyte * 128).from_buffer_copy(encode(t))
        with _lock:
            if len(maps) >= _MAPS_MAX:
                maps.clear()
            maps[ptr] = found
    return found


def run(plan: Plan, xs: Tensor, wm: Tensor, bias: Tensor | None) -> Tensor:
    """Launch the plan on torch's current stream over xs (x's NHWC memory: x itself where the plan
    says x_nhwc), wm (the [K, R*S*C] filter matrix, or the weight itself where it says w_krsc) and
    the bias (in x's dtype, contiguous). Returns the [N, K, P, Q] result, channels_last where
    torch's would be, else contiguous."""
    g = plan.g
    if xs.data_ptr() % tma.TMA_ALIGN_BYTES:  # (an offset view's storage)
        xs = xs.clone(memory_format=torch.channels_last)
    if wm.data_ptr() % tma.TMA_ALIGN_BYTES:
        wm = wm.clone(memory_format=torch.channels_last if wm.dim() == 4 else torch.contiguous_format)
    d = torch.empty((g["N"], g["P"], g["Q"], g["K"]), dtype=xs.dtype, device=xs.device)  # NHWC
    if d.numel():
        if plan.cfg["A_ROWS"]:
            map_x = _map(plan.x_maps, xs, lambda t: tma.rows_map(t, plan.M, g["C"], plan.cfg["BM"], CONV03_BK))
        else:
            map_x = _map(plan.x_maps, xs, lambda t: tma.im2col_map(t, g, plan.cfg["BM"], CONV03_BK))
        map_w = _map(plan.w_maps, wm, lambda t: tma.filter_map(t, plan.K, g["R"], g["S"], g["C"], plan.cfg["BN"], CONV03_BK))
        map_d = _map(plan.d_maps, d, lambda t: tma.output_map(t, plan.M, plan.K)) if plan.cfg["TMA_STORE"] else plan.args[-1]
        stream = launch.driver_stream(plan.device_id)
        with plan.lock:
            plan.params[0], plan.params[1], plan.params[-1] = map(ctypes.addressof, (map_x, map_w, map_d))
            plan.args[2].value = d.data_ptr()
            plan.args[-2].value = 0 if bias is None else bias.data_ptr()
            plan.launch(stream, "conv03")
    y = d.permute(0, 3, 1, 2)
    return y if plan.out_channels_last else y.contiguous()
