"""im2col: a convolution's input as the GEMM's A operand, the [N*P*Q, R*S*C] matrix of its
receptive fields in NHWC's (r, s, c) order, and the filter as the matching [K, R*S*C] matrix
(gemmlab.conv's first step, and the filter gradient's B operand, gemmlab.conv_grad)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def im2col(x: Tensor, g: dict, aligned: bool = False) -> Tensor:
    """The GEMM's A operand for conv2d: the [N*P*Q, R*S*C] matrix whose row n*P*Q + p*Q + q is the
    receptive field of output pixel (p, q) of image n, in (r, s, c) order (NHWC's). x [N, C, H, W]
    is read as [N, H, W, C] (a view: its own memory for a channels_last x), zero-padded if the
    geometry g (conv_geometry's) pads, and every field is taken through a strided view of that,
    honouring stride and dilation, then copied once into the row-major matrix. Where x's memory
    already is that matrix (a 1x1 filter at stride 1 without padding on a channels_last x) nothing
    is copied: the result is a view of x. aligned: where the copy is made and R*S*C elements are not
    whole 16-byte units, its rows are spaced to start on 16-byte boundaries (_aligned_rows), so
    that gemm's TMA steps can read it."""
    N, C, P, Q, R, S = g["N"], g["C"], g["P"], g["Q"], g["R"], g["S"]
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    top, bottom, left, right = g["pads"]
    xh = x.permute(0, 2, 3, 1)  # [N, H, W, C]
    if R == S == 1 and (sh, sw) == (1, 1) and not any(g["pads"]):  # every pixel its own field: the
        return xh.reshape(N * P * Q, C).contiguous()  # same matrix without the strided views (host time)
    if any(g["pads"]):
        xh = F.pad(xh, (0, 0, left, right, top, bottom))  # [N, H + top + bottom, W + left + right, C]: a copy
    span_h, span_w = dh * (R - 1) + 1, dw * (S - 1) + 1  # the rows and columns one field reaches over
    fields = xh.unfold(1, span_h, sh).unfold(2, span_w, sw)  # [N, P, Q, C, span_h, span_w]: a view
    fields = fields[..., ::dh, ::dw].permute(0, 1, 2, 4, 5, 3)  # [N, P, Q, R, S, C]: a view
    # the one copy. reshape alone may return a view with overlapping rows (fields that share
    # elements) or strided columns, which gemm refuses; contiguous() copies those and keeps the
    # view only where x's memory already is the matrix
    if not aligned or (R * S * C * x.element_size()) % _ROW_ALIGN == 0:
        return fields.reshape(N * P * Q, R * S * C).contiguous()
    a = _aligned_rows(N * P * Q, R * S * C, x)
    a.unflatten(0, (N, P, Q)).unflatten(1 + 2, (R, S, C)).copy_(fields)
    return a


# gemm's TMA steps read rows that start on 16-byte boundaries: a matrix whose rows are not whole
# 16-byte units (ResNet's stem: 7 * 7 * 3 = 147 bf16 columns) went to tc04, without TMA, which ran
# the stem's GEMM at 36 TFLOP/s on an H100 where the unfold alone took 0.19 ms
_ROW_ALIGN = 16


def _aligned_rows(rows: int, cols: int, like: Tensor) -> Tensor:
    """An uninitialised [rows, cols] matrix whose row stride is cols rounded up to 16 bytes (the
    columns past cols are never read: the GEMM's K is cols)."""
    per = _ROW_ALIGN // like.element_size()
    return torch.empty((rows, -(-cols // per) * per), dtype=like.dtype, device=like.device)[:, :cols]


def filter_matrix(weight: Tensor, aligned: bool = False) -> Tensor:
    """The filter [K, C, R, S] as the [K, R*S*C] matrix in im2col's (r, s, c) order: a view of a
    channels_last filter's memory, else a copy (the filter is small beside the input). aligned: its
    rows start on 16-byte boundaries (a copy with a wider row stride where R*S*C elements are not
    whole 16-byte units), as im2col(aligned=True)'s."""
    m = weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1)
    if not aligned or (m.shape[1] * m.element_size()) % _ROW_ALIGN == 0:
        return m.contiguous()
    out = _aligned_rows(*m.shape, weight)
    out.copy_(m)
    return out
