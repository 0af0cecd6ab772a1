"""TMA tensor maps for the Hopper kernels (tc05 on), encoded on the host by the CUDA driver
(cuTensorMapEncodeTiled through cuda.bindings) as the 128 bytes a kernel takes by value.

A tensor map describes one row-major operand (tensor_map_3d: a batch of them) to the Tensor Memory Accelerator: its address,
rows x cols, row stride, the box (tile) one copy moves and the shared-memory swizzle. The kernels
take them by value (`const __grid_constant__ gemmlab::TensorMap`). The hardware asks for a 16-byte
aligned address and a row stride that is a multiple of 16 bytes; specs.base.tma_constraints turns
that into a reason 'auto' reads, so other operands go to a kernel without TMA.

Encoding costs microseconds, so maps are memoised on everything they encode (address, shape,
stride, dtype, box): repeated calls on the same tensors reuse them. A map holds an address, not
its tensor, so the table keeps no tensor's memory alive. A map whose memory was freed is simply
never launched again unless a new tensor of the same address and layout asks for exactly that
map, which is then correct for it.
"""

from __future__ import annotations

import torch

TMA_ALIGN_BYTES = 16

_MAPS: dict[tuple, object] = {}
_MAPS_MAX = 1024

SWIZZLES = {128: "SWIZZLE_128B", 64: "SWIZZLE_64B", 32: "SWIZZLE_32B"}  # by a box row's bytes


def _tiled_map(t: torch.Tensor, dims: tuple, strides: tuple, box: tuple, row_bytes: int):
    """cuTensorMapEncodeTiled over the memory at t: dims and box innermost first, strides (bytes) of
    dims 1.. , element strides 1, swizzled over the box row's width, no interleave, no L2 promotion,
    zeros (not NaN) outside the tensor -- the 128 bytes as a ctypes array, which the launch passes
    by value."""
    import ctypes

    from cuda.bindings import driver

    types = {torch.bfloat16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             torch.float16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             torch.float32: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}  # fmt: skip
    if t.dtype not in types:
        raise TypeError(f"no TMA data type for {t.dtype}")
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    err, tmap = driver.cuTensorMapEncodeTiled(
        types[t.dtype], len(dims), t.data_ptr(), [u64(v) for v in dims], [u64(v) for v in strides],
        [u32(v) for v in box], [u32(1)] * len(dims), driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_{SWIZZLES[row_bytes]}"),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # fmt: skip
    _check(driver, err, f"cuTensorMapEncodeTiled(dims {dims}, strides {strides}, box {box}, {t.dtype})")
    return (ctypes.c_ubyte * 128).from_buffer_copy(map_bytes(tmap))


def tensor_map(t: torch.Tensor, rows: int, cols: int, ld: int, box: tuple[int, int]):
    """The tensor map of the rows x cols matrix at t (row stride ld elements), copied in boxes of
    box = (box_rows, box_cols) into shared memory swizzled over the box row's width (128, 64 or
    32 bytes: the layouts wgmma reads); zeros outside the matrix."""
    row_bytes = box[1] * t.element_size()
    if row_bytes not in SWIZZLES:
        raise ValueError(f"a TMA box row of {row_bytes} bytes has no swizzle mode; use 32, 64 or 128 bytes")
    per16 = TMA_ALIGN_BYTES // t.element_size()
    if rows <= 1:  # a single row's stride is never used; the map still wants a multiple of 16 bytes
        ld = -(-cols // per16) * per16
    key = (t.data_ptr(), t.device.index, t.dtype, rows, cols, ld, box)
    found = _MAPS.get(key)
    if found is not None:
        return found
    if t.data_ptr() % TMA_ALIGN_BYTES or (ld * t.element_size()) % TMA_ALIGN_BYTES:
        raise ValueError(
            f"TMA needs a 16-byte aligned matrix whose row stride is a multiple of 16 bytes; got address "
            f"{t.data_ptr():#x}, row stride {ld} x {t.element_size()} bytes"
        )
    size = t.element_size()
    found = _tiled_map(t, (cols, rows), (ld * size,), (box[1], box[0]), row_bytes)
    return _remember(key, found)


def tensor_map_3d(t: torch.Tensor, batch: int, rows: int, cols: int, ld: int, batch_stride: int, box: tuple[int, int]):
    """The rank-3 tensor map of `batch` rows x cols matrices at t (row stride ld, batch stride
    batch_stride elements: the outermost), copied one matrix's box = (box_rows, box_cols) at a time
    as tensor_map's boxes are. TMA fills zeros past each matrix's own rows and columns, never
    elements of the next matrix."""
    row_bytes = box[1] * t.element_size()
    if row_bytes not in SWIZZLES:
        raise ValueError(f"a TMA box row of {row_bytes} bytes has no swizzle mode; use 32, 64 or 128 bytes")
    per16 = TMA_ALIGN_BYTES // t.element_size()
    if rows <= 1:  # as tensor_map: a stride never used still wants a multiple of 16 bytes
        ld = -(-cols // per16) * per16
    if batch <= 1:
        batch_stride = rows * ld
    key = ("3d", t.data_ptr(), t.device.index, t.dtype, batch, rows, cols, ld, batch_stride, box)
    found = _MAPS.get(key)
    if found is not None:
        return found
    size = t.element_size()
    if t.data_ptr() % TMA_ALIGN_BYTES or (ld * size) % TMA_ALIGN_BYTES or (batch_stride * size) % TMA_ALIGN_BYTES:
        raise ValueError(
            f"TMA needs a 16-byte aligned batch whose row and batch strides are multiples of 16 bytes; got "
            f"address {t.data_ptr():#x}, row stride {ld} and batch stride {batch_stride} x {size} bytes"
        )
    found = _tiled_map(t, (cols, rows, batch), (ld * size, batch_stride * size), (box[1], box[0], 1), row_bytes)
    return _remember(key, found)


def batched_output_map_params(batch: int, rows: int, cols: int, ld: int, batch_stride: int, itemsize: int) -> dict | None:
    """The rank-3 map tc07's batched build stores D [batch][rows][cols] through (row stride ld,
    batch stride batch_stride elements), innermost first as the driver takes it: dims (cols, rows,
    batch), strides of dims 1 and 2 in bytes, boxes of one 64-row staging chunk of one matrix --
    64 columns of a 16-bit D, 32 of fp32 (a 128-byte row: the staging buffers' 128-byte swizzle, as
    the 2-D D map of gemm()'s tc07) -- so a chunk's TMA store clips at its own matrix's last row
    and column, never writing the next matrix's rows. None where D cannot take TMA stores: rows,
    row stride or batch stride not whole 16-byte units (TMA clips a box along a row only to 16
    bytes). D's address must be 16-byte aligned too (tensor_map_3d checks)."""
    box_cols = min(64, 128 // itemsize)
    if any((v * itemsize) % TMA_ALIGN_BYTES for v in (cols, ld, batch_stride)):
        return None
    return dict(dims=(cols, rows, batch), strides=(ld * itemsize, batch_stride * itemsize), box=(box_cols, 64, 1),
                swizzle=box_cols * itemsize)


def batched_output_map(d: torch.Tensor, p: dict):
    """The map of batched_output_map_params' p over the memory at d, encoded (and cached by
    address) as tensor_map_3d encodes the batched operands' maps."""
    (cols, rows, batch), (ld_bytes, bs_bytes), (box_cols, box_rows, _) = p["dims"], p["strides"], p["box"]
    size = d.element_size()
    return tensor_map_3d(d, batch, rows, cols, ld_bytes // size, bs_bytes // size, (box_rows, box_cols))


# ---- conv03: the im2col map of an NHWC input, the tiled maps of its filter and its output -----
#
# These are encoded through cuda.bindings' driver too (cuTensorMapEncodeIm2col, cuTensorMapEncodeTiled),
# with L2 promotion of 128 bytes, and reach the kernel as the CUtensorMap's 128 bytes (map_bytes),
# which gemmlab.conv03 passes by value to cuLaunchKernel. The parameters are worked out first by pure functions
# (im2col_map_params, filter_map_params, output_map_params), tested on the CPU; the driver call only
# encodes them.

# What the hardware takes in im2col mode over a rank-4 (NHWC) tensor (cuTensorMapEncodeIm2col):
IM2COL_CORNER = (-128, 127)  # the bounding box's corner offsets, signed 8-bit for rank 4
IM2COL_OFFSET_MAX = 255  # the instruction's per-tap offsets (r * dil_h, s * dil_w), unsigned 8-bit for rank 4
IM2COL_PIXELS_MAX = 256  # pixels a box (Pixels-per-Column) kept within a tiled box's limit
IM2COL_CHANNELS_MAX = 256  # channels a pixel (Channels-per-Pixel)
TRAVERSAL_STRIDE_MAX = 8  # elementStrides: the convolution's stride


def im2col_map_params(g: dict, box_pixels: int, box_channels: int, itemsize: int = 2) -> dict:
    """The parameters of the im2col tensor map conv03 reads its input through, for a convolution
    of geometry g (gemmlab.conv.conv_geometry's) over NHWC memory: every array innermost first
    (C, W, H, N), as cuTensorMapEncodeIm2col takes them, corners (W, H). The box's pixels walk the
    bounding box of the filter's base (its (0, 0) tap): from -pad_left (-pad_top) to the last base
    whose filter still ends inside the far padding, W - 1 + pad_right - dil_w * (S - 1) -- given as
    an offset from the far edge, pad_right - dil_w * (S - 1) -- stepping by the stride, so that
    a row of the box has exactly Q bases and its rows P. Raises ValueError where the hardware
    cannot hold the geometry (see im2col_why_not)."""
    why = im2col_why_not(g, box_pixels, box_channels, itemsize)
    if why:
        raise ValueError(why)
    N, C, H, W, R, S = g["N"], g["C"], g["H"], g["W"], g["R"], g["S"]
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    top, bottom, left, right = g["pads"]
    return dict(
        dims=(C, W, H, N),
        strides=(C * itemsize, W * C * itemsize, H * W * C * itemsize),  # bytes, of dims 1..3
        lower=(-left, -top),
        upper=(right - dw * (S - 1), bottom - dh * (R - 1)),
        channels=box_channels,
        pixels=box_pixels,
        element_strides=(1, sw, sh, 1),
    )


def im2col_why_not(g: dict, box_pixels: int = 128, box_channels: int = 64, itemsize: int = 2) -> str | None:
    """None if an im2col map can describe this convolution, else why not (for conv2d's refusal)."""
    C, R, S = g["C"], g["R"], g["S"]
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    top, bottom, left, right = g["pads"]
    lo, hi = IM2COL_CORNER
    if (C * itemsize) % TMA_ALIGN_BYTES:
        return f"TMA needs rows of 16-byte multiples: C = {C} channels of {itemsize} bytes are not"
    if max(sh, sw) > TRAVERSAL_STRIDE_MAX:
        return f"the TMA walks pixels with a stride of at most {TRAVERSAL_STRIDE_MAX}, not {(sh, sw)}"
    corners = (-left, -top, right - dw * (S - 1), bottom - dh * (R - 1))
    if not all(lo <= v <= hi for v in corners):
        return (f"the im2col bounding box's corner offsets {corners} (from the padding {g['pads']}, filter {R}x{S} and "
                f"dilation {(dh, dw)}) leave the hardware's range {lo}..{hi}")  # fmt: skip
    if max(dh * (R - 1), dw * (S - 1)) > IM2COL_OFFSET_MAX:
        return (f"the filter's last tap lies {max(dh * (R - 1), dw * (S - 1))} pixels from its first; the im2col "
                f"offsets reach {IM2COL_OFFSET_MAX}")  # fmt: skip
    if not 1 <= box_pixels <= IM2COL_PIXELS_MAX or not 1 <= box_channels <= IM2COL_CHANNELS_MAX:
        return f"a box of {box_pixels} pixels x {box_channels} channels is past the TMA's limits"
    if box_channels * itemsize > 128:
        return f"a pixel's {box_channels} channels are wider than the 128-byte swizzle"
    return None


def filter_map_params(K: int, R: int, S: int, C: int, box_rows: int, box_channels: int, itemsize: int = 2) -> dict:
    """The tiled map of the filter matrix [K][R*S*C] (KRSC) read as the rank-3 tensor [K][R*S][C]:
    a box is box_channels channels of one tap for box_rows output channels, so channels past C
    (the last slice of a tap, where C is not a multiple of the box) arrive as zeros rather than as
    the next tap's weights. Innermost first, as cuTensorMapEncodeTiled takes them."""
    return dict(
        dims=(C, R * S, K),
        strides=(C * itemsize, R * S * C * itemsize),
        box=(box_channels, 1, box_rows),
    )


def output_map_params(M: int, K: int, box: int = 64, itemsize: int = 2) -> dict | None:
    """The tiled map conv03's staged epilogue stores its [M = N*P*Q][K] row-major output through, in
    box x box chunks (a 128-byte row of 16-bit elements: the staging buffers' swizzle), innermost
    first; None where D cannot take TMA stores: rows that are not whole 16-byte units (TMA clips a
    box at D's right edge only to 16 bytes; the output D is allocated 16-byte aligned)."""
    if (K * itemsize) % TMA_ALIGN_BYTES or box * itemsize not in SWIZZLES:
        return None
    return dict(dims=(K, M), strides=(K * itemsize,), box=(box, box))


def _driver_enums(dtype: torch.dtype):
    from cuda.bindings import driver

    types = {torch.bfloat16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             torch.float16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}  # fmt: skip
    if dtype not in types:
        raise TypeError(f"conv03's maps take bf16 or fp16, not {dtype}")
    return driver, types[dtype]


def _check(driver, err, what: str):
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def map_bytes(tensor_map) -> bytes:
    """The 128 bytes of a driver CUtensorMap: what the kernel's __grid_constant__ TensorMap holds."""
    import ctypes

    return ctypes.string_at(tensor_map.getPtr(), 128)


def encode_im2col(driver, data_type, ptr: int, p: dict):
    """cuTensorMapEncodeIm2col over im2col_map_params' p: (error, map). The binding takes its sized
    integers (cuuint32_t, cuuint64_t) where the C API has them, and refuses plain ints there."""
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    err, tmap = driver.cuTensorMapEncodeIm2col(
        data_type, 4, ptr, [u64(v) for v in p["dims"]], [u64(v) for v in p["strides"]], list(p["lower"]),
        list(p["upper"]), u32(p["channels"]), u32(p["pixels"]), [u32(v) for v in p["element_strides"]],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # fmt: skip
    return err, tmap


def encode_filter(driver, data_type, ptr: int, p: dict):
    """cuTensorMapEncodeTiled over filter_map_params' (or output_map_params') p: (error, map), with
    the binding's sized integers."""
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    rank = len(p["dims"])
    err, tmap = driver.cuTensorMapEncodeTiled(
        data_type, rank, ptr, [u64(v) for v in p["dims"]], [u64(v) for v in p["strides"]],
        [u32(v) for v in p["box"]], [u32(1)] * rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # fmt: skip
    return err, tmap


def im2col_map(x: torch.Tensor, g: dict, box_pixels: int, box_channels: int) -> bytes:
    """The im2col tensor map (its 128 bytes) of the NHWC memory of x (channels_last, 16-byte aligned)
    for the convolution g, 128-byte swizzled (the K-major layout conv03's wgmma descriptors read),
    zeros outside the tensor. Encoded on every call: gemmlab.conv03's plans keep them by address."""
    p = im2col_map_params(g, box_pixels, box_channels, x.element_size())
    if x.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(f"TMA needs a 16-byte aligned input, got address {x.data_ptr():#x}")
    driver, data_type = _driver_enums(x.dtype)
    err, tmap = encode_im2col(driver, data_type, x.data_ptr(), p)
    _check(driver, err, f"cuTensorMapEncodeIm2col({p})")
    return map_bytes(tmap)


def filter_map(w: torch.Tensor, K: int, R: int, S: int, C: int, box_rows: int, box_channels: int) -> bytes:
    """The tiled tensor map (its 128 bytes) of the contiguous [K][R*S*C] filter matrix at w, read as
    [K][R*S][C] in boxes of box_channels x 1 tap x box_rows, 128-byte swizzled. Encoded on every
    call, as im2col_map."""
    p = filter_map_params(K, R, S, C, box_rows, box_channels, w.element_size())
    if w.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(f"TMA needs a 16-byte aligned filter, got address {w.data_ptr():#x}")
    driver, data_type = _driver_enums(w.dtype)
    err, tmap = encode_filter(driver, data_type, w.data_ptr(), p)
    _check(driver, err, f"cuTensorMapEncodeTiled({p})")
    return map_bytes(tmap)


def rows_map(x: torch.Tensor, rows: int, channels: int, box_rows: int, box_channels: int) -> bytes:
    """The tiled tensor map (its 128 bytes) of the NHWC memory of x read as the [rows = N*H*W][channels]
    matrix it is, in boxes of box_rows rows x box_channels channels, 128-byte swizzled, zeros past
    its edges: conv03's A where the filter is 1x1 at stride 1 without padding, whose im2col matrix
    is x itself (the same shared-memory layout as im2col_map's boxes). Encoded on every call, as
    im2col_map."""
    if (channels * x.element_size()) % TMA_ALIGN_BYTES or x.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(f"TMA needs a 16-byte aligned input with rows of whole 16-byte units; got {channels} channels "
                         f"at address {x.data_ptr():#x}")  # fmt: skip
    p = dict(dims=(channels, rows), strides=(channels * x.element_size(),), box=(box_channels, box_rows))
    driver, data_type = _driver_enums(x.dtype)
    err, tmap = encode_filter(driver, data_type, x.data_ptr(), p)
    _check(driver, err, f"cuTensorMapEncodeTiled({p})")
    return map_bytes(tmap)


def output_map(d: torch.Tensor, M: int, K: int, box: int = 64) -> bytes:
    """The tiled tensor map (its 128 bytes) of the contiguous [M][K] output at d, stored to in box x
    box chunks from 128-byte-swizzled staging buffers. Encoded on every call, as im2col_map."""
    p = output_map_params(M, K, box, d.element_size())
    if p is None or d.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(f"TMA cannot store to an output of {K} channels at address {d.data_ptr():#x}: rows and "
                         "address must be 16-byte aligned")  # fmt: skip
    driver, data_type = _driver_enums(d.dtype)
    err, tmap = encode_filter(driver, data_type, d.data_ptr(), p)
    _check(driver, err, f"cuTensorMapEncodeTiled({p})")
    return map_bytes(tmap)


def _remember(key: tuple, found):
    """Keep a map in the table (started again once it holds _MAPS_MAX) and return it."""
    if len(_MAPS) >= _MAPS_MAX:
        _MAPS.clear()
    _MAPS[key] = found
    return found
