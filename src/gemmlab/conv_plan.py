"""What conv03's and conv04's plans share: a kind of convolution call worked out once -- the
kernel as a CUfunction, its grid, block and shared memory, its arguments as ctypes values with
their addresses packed for cuLaunchKernel, and how the call's operands are laid out -- so that a
later call of the same kind only fills in its addresses and launches."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

from torch import Tensor


@dataclass(kw_only=True)
class LaunchPlan:
    g: dict  # conv.conv_geometry's
    cfg: object
    device_id: int
    func: object  # the CUfunction
    grid: tuple
    block: tuple
    smem: int
    args: tuple  # the launch's arguments as ctypes values; the addresses are filled in per call
    params: ctypes.Array  # their addresses, as cuLaunchKernel takes them
    x_nhwc: bool  # x's strides are dense channels_last ones: its memory is read in place
    w_krsc: bool  # the weight's are: its memory is the [K, R*S*C] filter matrix
    bias_direct: bool  # the bias is contiguous in x's dtype (else conv converts it)
    out_channels_last: bool  # the result is channels_last (else a contiguous NCHW copy), as torch's would be
    lock: threading.Lock = field(default_factory=threading.Lock)  # over args and params, until the launch has read them

    def launch(self, stream, name: str) -> None:
        """cuLaunchKernel with the plan's arguments as they are now (the caller holds the lock)."""
        from cuda.bindings import driver

        (err,) = driver.cuLaunchKernel(self.func, *self.grid, *self.block, self.smem, stream, ctypes.addressof(self.params), 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"launching {name} {self.cfg.as_dict()} failed: {err}")


def nhwc_strides(shape) -> tuple:
    """The strides of a dense channels_last tensor of this [N, C, H, W] shape."""
    _, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def operand_layouts(x: Tensor, weight: Tensor, bias: Tensor | None) -> dict:
    """LaunchPlan's x_nhwc, w_krsc and bias_direct for these operands."""
    return dict(x_nhwc=x.stride() == nhwc_strides(x.shape), w_krsc=weight.stride() == nhwc_strides(weight.shape),
                bias_direct=bias is None or (bias.dtype == x.dtype and bias.stride() == (1,)))
