"""conv2d under torch.func's transforms (vmap, grad, vjp, jacrev, and vmap of them: per-sample
gradients of a network of gemmlab.nn.Conv2d) and on dual tensors (forward-mode AD). The convolution
kernels have no batching rule and their autograd Functions no jvp, so there a call runs as conv01
does: im2col's matrix of receptive fields and the filter matrix (gemmlab.conv_im2col, torch's own
views and copies), one product a group (gemmlab.gemm, whose operator has a vmap rule and gradients
that torch.func follows: gemmlab.ops._GemmFunctorch), the bias and the activation by torch. Every
piece has its own batching rule and derivative, so each transform composes."""

from __future__ import annotations

import torch
from torch import Tensor

from .activations import ACTIVATIONS
from .conv_im2col import filter_matrix, im2col
from .conv_shape import _suggests_channels_last, conv_geometry
from .ops import gemm


def conv2d_unfolded(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, groups: int,
                    activation: str | None, precision: str) -> Tensor:  # fmt: skip
    """activation(F.conv2d(x, weight, bias, stride, padding, dilation, groups)) from im2col's matrix
    and gemm(): x [N, C, H, W], weight [K, C / groups, R, S], arguments checked by the caller
    (conv._check). The result is channels_last where x's or the weight's strides are (as torch's),
    else NCHW."""
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    cg, kg = x.shape[1] // groups, weight.shape[0] // groups
    g = conv_geometry((x.shape[0], cg, *x.shape[2:]), tuple(weight.shape), stride, padding, dilation)
    N, K, P, Q = g["N"], g["K"], g["P"], g["Q"]
    device = "cpu" if x.device.type == "cpu" else None
    products = [gemm(im2col(x.narrow(1, i * cg, cg), g), filter_matrix(weight.narrow(0, i * kg, kg)).t(),
                     precision=precision, device=device) for i in range(groups)]  # [N*P*Q, kg] each  # fmt: skip
    d = torch.cat(products, 1) if groups > 1 else products[0]
    y = d.reshape(N, P, Q, K).permute(0, 3, 1, 2)  # NCHW sizes over NHWC memory
    if bias is not None:
        y = y + bias.reshape(1, K, 1, 1)
    if activation is not None:
        y = ACTIVATIONS[activation](y)
    return y if last else y.contiguous()
