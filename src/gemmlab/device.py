"""What the code asks of a CUDA device: its SM count and compute capability. Where no device can be
asked (compile-only machines) the SM count is an H100's or H200's (132) and the capability None:
kernels still compile there and their specs are still checked."""

from __future__ import annotations

from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    return int(torch.cuda.get_device_properties(device_id).multi_processor_count)


_SM_COUNTS: dict = {}


def sm_count_of(device: torch.device) -> int:
    """SMs of the problem's device, or 132 where none can be asked."""
    key = (device.type, device.index)
    if key not in _SM_COUNTS:
        n = 132
        if device.type == "cuda" and torch.cuda.is_available():
            n = sm_count(device.index if device.index is not None else torch.cuda.current_device())
        _SM_COUNTS[key] = n
    return _SM_COUNTS[key]


_CAPABILITIES: dict = {}


def capability(device: torch.device) -> tuple[int, int] | None:
    """The device's compute capability, or None where there is no CUDA device to ask."""
    key = (device.type, device.index)
    if key not in _CAPABILITIES:
        cc = None
        if device.type == "cuda" and torch.cuda.is_available():
            cc = tuple(torch.cuda.get_device_capability(device))
        _CAPABILITIES[key] = cc
    return _CAPABILITIES[key]
