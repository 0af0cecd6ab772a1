"""A convolution's gradients as problems gemmlab already solves: the input's (dgrad) as one more
forward convolution, the filter's (wgrad) as one GEMM. The geometry and the operands here;
gemmlab.conv wires them into autograd (its _ImplicitConv) and runs them on its own kernels.

dgrad. The forward pass reads row i = p*sh + r*dh of the padded input for output row p and filter
row r, so the padded input's gradient at row i sums dY[p] * W[r] over the (p, r) that reach it.
Spread dY's rows sh apart (zeros between them, `spread`) and that sum is a correlation of the
spread dY with the filter flipped (r -> R-1-r) at dilation dh, over the spread dY padded by
dh*(R-1) on each side. Dropping the forward pass's padding from the result (and rows it never
reached, past the last: zero) makes the padding before dh*(R-1) - top and the padding after
whatever leaves H rows: a negative padding is a crop. So dX = conv2d(spread dY, W', stride 1,
dilation (dh, dw), those paddings), W' = W with its channel axes swapped and its taps flipped,
[C, K, R, S]: the forward kernels themselves compute it (conv02, conv03; im2col where they cannot).

wgrad. dW[k, c, r, s] = sum over n, p, q of dY[n, k, p, q] * x_padded[n, c, p*sh + r*dh,
q*sw + s*dw]: the GEMM dY_rows^T @ im2col(x), [K, N*P*Q] x [N*P*Q, R*S*C], dY_rows the [N*P*Q, K]
matrix of dY's NHWC memory, read transposed in place. Its [K, R*S*C] result, in im2col's (r, s, c)
order, is the filter's channels_last memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def dgrad_paddings(g: dict) -> tuple[int, int, int, int]:
    """(before, after) in height then width of dgrad's convolution over the spread dY, for the
    forward geometry g (gemmlab.conv.conv_geometry's): each may be negative (a crop)."""
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    top, _, left, _ = g["pads"]
    spread_h, spread_w = (g["P"] - 1) * sh + 1, (g["Q"] - 1) * sw + 1
    before_h, before_w = dh * (g["R"] - 1) - top, dw * (g["S"] - 1) - left
    after_h = g["H"] - spread_h - before_h + dh * (g["R"] - 1)
    after_w = g["W"] - spread_w - before_w + dw * (g["S"] - 1)
    return before_h, after_h, before_w, after_w


def spread(dy: Tensor, stride: tuple[int, int]) -> Tensor:
    """dY [N, K, P, Q] with its rows sh and its columns sw apart, zeros between: [N, K, (P-1)*sh+1,
    (Q-1)*sw+1], in dY's memory format (dY itself at stride 1)."""
    sh, sw = stride
    if (sh, sw) == (1, 1):
        return dy
    n, k, p, q = dy.shape
    shape = (n, k, (p - 1) * sh + 1, (q - 1) * sw + 1)
    out = torch.empty(shape, dtype=dy.dtype, device=dy.device, memory_format=_format_of(dy)).zero_()
    out[:, :, ::sh, ::sw] = dy
    return out


def dgrad_operands(dy: Tensor, weight: Tensor, g: dict) -> tuple[Tensor, Tensor, tuple[int, int]]:
    """What dgrad's forward convolution reads: the spread dY, padded (or cropped) where its two
    sides differ, the flipped filter W' [C, K, R, S] in dY's memory format, and the padding that is
    left for the convolution itself (equal on both sides)."""
    before_h, after_h, before_w, after_w = dgrad_paddings(g)
    z = spread(dy, g["stride"])
    if before_h == after_h >= 0 and before_w == after_w >= 0:
        padding = (before_h, before_w)
    else:  # F.pad's negative widths crop; the result keeps the memory format asked for below
        z = F.pad(z, (before_w, after_w, before_h, after_h)).contiguous(memory_format=_format_of(dy))
        padding = (0, 0)
    w2 = weight.transpose(0, 1).flip(2, 3).contiguous(memory_format=_format_of(dy))
    return z, w2, padding


def dy_rows(dy: Tensor) -> Tensor:
    """dY [N, K, P, Q] as the [N*P*Q, K] matrix of its NHWC memory (a view of a channels_last dY), a
    row-major copy where that view would not have unit column stride (an expanded dY, as
    y.sum().backward() passes: every stride 0)."""
    n, k, p, q = dy.shape
    m = dy.permute(0, 2, 3, 1).reshape(n * p * q, k)
    return m if m.is_contiguous() else m.contiguous()


def filter_from_rows(m: Tensor, g: dict) -> Tensor:
    """wgrad's [K, R*S*C] product as the [K, C, R, S] filter gradient (channels_last memory)."""
    return m.reshape(g["K"], g["R"], g["S"], g["C"]).permute(0, 3, 1, 2)


def _format_of(t: Tensor) -> torch.memory_format:
    """channels_last for a tensor laid out so (and not also contiguous), else contiguous_format."""
    cl = t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    return torch.channels_last if cl else torch.contiguous_format
