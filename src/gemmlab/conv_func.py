"""conv2d under torch.func's transforms (vmap, grad, vjp, jacrev, and vmap of them: per-sample
gradients of a network of gemmlab.nn.Conv2d). The convolution kernels have no batching rule and
their autograd Functions none for functorch, so under a transform a call runs as conv01 does,
in torch's own operations around gemm(): F.unfold's matrix of receptive fields, one product with
the filter matrix a group (gemmlab.gemm, whose operator has a vmap rule and gradients that
torch.func follows: gemmlab.ops._GemmFunctorch), the bias and the activation by torch. Every piece
has its own batching rule and derivative, so each transform composes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .activations import ACTIVATIONS
from .conv_shape import _suggests_channels_last, conv_geometry
from .ops import gemm


def conv2d_unfolded(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, groups: int,
                    activation: str | None, precision: str) -> Tensor:  # fmt: skip
    """activation(F.conv2d(x, weight, bias, stride, padding, dilation, groups)) from unfolded
    receptive fields and gemm(): x [N, C, H, W], weight [K, C / groups, R, S], arguments checked by
    the caller (conv._check). The result is channels_last where x's or the weight's strides are
    (as torch's), else NCHW."""
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    cg = x.shape[1] // groups
    g = conv_geometry((x.shape[0], cg, *x.shape[2:]), tuple(weight.shape), stride, padding, dilation)
    N, K, P, Q = g["N"], g["K"], g["P"], g["Q"]
    top, bottom, left, right = g["pads"]
    if top or bottom or left or right:  # (padding="same" pads one more on the bottom and right for an even reach)
        x = F.pad(x, (left, right, top, bottom))
    kg = K // groups
    device = "cpu" if x.device.type == "cpu" else None
    products = []
    for i in range(groups):
        xi = x.narrow(1, i * cg, cg) if groups > 1 else x
        cols = F.unfold(xi, (g["R"], g["S"]), dilation=g["dilation"], stride=g["stride"])  # [N, cg*R*S, P*Q]
        a = cols.transpose(1, 2).reshape(N * P * Q, cg * g["R"] * g["S"])  # rows (n, p, q), columns (c, r, s)
        w = (weight.narrow(0, i * kg, kg) if groups > 1 else weight).reshape(kg, -1)  # the same column order
        products.append(gemm(a, w.t(), precision=precision, device=device))  # [N*P*Q, kg]
    d = torch.cat(products, 1) if groups > 1 else products[0]
    y = d.reshape(N, P, Q, K).permute(0, 3, 1, 2)  # NCHW sizes over NHWC memory
    if bias is not None:
        y = y + bias.reshape(1, K, 1, 1)
    if activation is not None:
        y = ACTIVATIONS[activation](y)
    return y if last else y.contiguous()
