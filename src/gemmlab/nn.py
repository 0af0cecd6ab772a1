"""gemmlab in a model: `linear(x, weight, bias, activation)` and `Linear`, a drop-in for
torch.nn.Linear whose product runs on gemmlab.gemm (so on gemmlab's kernels, with autograd and
torch.compile through torch.ops.gemmlab.gemm), and `Conv2d`, torch.nn.Conv2d's on gemmlab.conv2d.

The product is gemmlab's; the bias and the activation are applied after it by torch's own
operations, not yet in the kernels' epilogue.
"""

import torch
from torch import Tensor

from .activations import ACTIVATIONS
from .conv import conv2d
from .ops import gemm


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None) -> Tensor:
    """activation(x @ weight.t() + bias), as torch.nn.functional.linear takes them: x [..., in]
    with any leading dimensions, weight [out, in] (read in place as the transposed view), bias
    [out] or None. activation: None, "relu", "gelu" (erf), "gelu_tanh" or "silu". CPU tensors run
    the CPU ladder (float32)."""
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(k) for k in ACTIVATIONS)
        raise ValueError(f"activation {activation!r} is not one of {names}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be [out_features, in_features], got shape {tuple(weight.shape)}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x's last dimension must be in_features = {weight.shape[1]}, got shape {tuple(x.shape)}")
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] > 1 and x2.shape[1] > 1 and 1 not in x2.stride():  # a view gemm cannot read
        x2 = x2.contiguous()
    d = gemm(x2, weight.t(), device="cpu" if x.device.type == "cpu" else None)
    if bias is not None:
        d = d + bias
    act = ACTIVATIONS[activation]
    if act is not None:
        d = act(d)
    return d.reshape(*x.shape[:-1], weight.shape[0])


class Linear(torch.nn.Linear):
    """torch.nn.Linear with its product on gemmlab: the same constructor (in_features,
    out_features, bias, device, dtype), parameters, initialisation and state_dict keys, so either
    module loads the other's state_dict."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d with its product on gemmlab (gemmlab.conv2d: im2col, then gemmlab.gemm): the
    same constructor, parameters, initialisation and state_dict keys. groups > 1 is refused here,
    as gemmlab.conv2d refuses it; padding modes other than 'zeros' pad with torch first."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.groups != 1:
            raise ValueError(f"groups={self.groups}: gemmlab.nn.Conv2d computes ordinary convolutions (groups=1) "
                             "only so far; use torch.nn.Conv2d for grouped and depthwise ones")  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        if self.padding_mode != "zeros":  # as torch.nn.Conv2d does: pad, then convolve unpadded
            x = torch.nn.functional.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation)
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)
