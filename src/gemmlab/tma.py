"""TMA tensor maps for the Hopper kernels (tc05 on), encoded on the host by cuda.core.

A tensor map describes one row-major operand to the Tensor Memory Accelerator: its address,
rows x cols, row stride, the box (tile) one copy moves and the shared-memory swizzle. The kernels
take them by value (`const __grid_constant__ gemmlab::TensorMap`). The hardware asks for a 16-byte
aligned address and a row stride that is a multiple of 16 bytes; specs.base.tma_constraints turns
that into a reason 'auto' reads, so other operands go to a kernel without TMA.

Encoding costs microseconds, so maps are memoised on everything they encode (address, shape,
stride, dtype, box): repeated calls on the same tensors reuse them. A map must not keep its
tensor alive (cuda.core's descriptor holds on to what it was built from, and a cache of maps
would then hold up to _MAPS_MAX tensors' memory): maps are built from a small stand-in that
describes the memory by address (__cuda_array_interface__), never from the tensor. A map whose
memory was freed is simply never launched again unless a new tensor of the same address and
layout asks for exactly that map, which is then correct for it.
"""

from __future__ import annotations

from functools import lru_cache

import torch

TMA_ALIGN_BYTES = 16

_MAPS: dict[tuple, object] = {}
_MAPS_MAX = 1024


class _Matrix:
    """rows x cols elements of `itemsize` bytes at a device address, row stride ld elements: what
    cuda.core reads through __cuda_array_interface__, without a reference to any tensor. The type
    string only gives the element size (the tensor map's data type is passed explicitly)."""

    _TYPESTR = {2: "<u2", 4: "<f4"}

    def __init__(self, ptr: int, rows: int, cols: int, ld: int, itemsize: int):
        self.__cuda_array_interface__ = {
            "shape": (rows, cols),
            "strides": (ld * itemsize, itemsize),
            "typestr": self._TYPESTR[itemsize],
            "data": (ptr, False),
            "version": 3,
        }


@lru_cache(maxsize=None)
def _enums():
    """cuda.core's TensorMapDataType and TensorMapSwizzle, from the module that defines
    TensorMapDescriptor (cuda.core._tensor_map, or cuda.core.cu13._tensor_map in wheels that keep
    one build per CUDA major version)."""
    import importlib

    from cuda.core import TensorMapDescriptor

    module = importlib.import_module(TensorMapDescriptor.__module__)
    return module.TensorMapDataType, module.TensorMapSwizzle


def _data_type(dtype: torch.dtype):
    data_type, _ = _enums()
    table = {torch.bfloat16: data_type.BFLOAT16, torch.float16: data_type.FLOAT16, torch.float32: data_type.FLOAT32}
    if dtype not in table:
        raise TypeError(f"no TMA data type for {dtype}")
    return table[dtype]


SWIZZLES = {128: "SWIZZLE_128B", 64: "SWIZZLE_64B", 32: "SWIZZLE_32B"}  # by a box row's bytes


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
    from cuda.core.utils import StridedMemoryView

    _, swizzle = _enums()
    view = StridedMemoryView.from_cuda_array_interface(_Matrix(t.data_ptr(), rows, cols, ld, t.element_size()), stream_ptr=-1)
    found = view.as_tensor_map(box_dim=tuple(box), data_type=_data_type(t.dtype), swizzle=getattr(swizzle, SWIZZLES[row_bytes]))
    if len(_MAPS) >= _MAPS_MAX:
        _MAPS.clear()
    _MAPS[key] = found
    return found
