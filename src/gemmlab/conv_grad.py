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

Grouped wgrad (`wgrad_grouped`). Group i's filters [K/G, C/G, R, S] are the GEMM of its own dY
columns and its own channels' fields: G GEMMs of [K/G, N*P*Q] x [N*P*Q, R*S*C/G], tiny ones where
groups are narrow (ResNeXt-50's first grouped layer: 32 of 4 x 36 with a reduction of 100,352 at
batch 32). Instead, one GEMM over every channel, dY_rows^T @ im2col(x) as for an ungrouped layer,
[K, R*S*C], holds each group's filters as its diagonal block (rows of group i, channels of group i),
and the rest is dropped: G times the multiply-adds the groups need, the same as the layer's wgrad
would cost with groups=1, in one launch. Each element of a diagonal block is still the sum over
pixels of its own group's dY times its own group's input, so a NaN or an Inf in one group's input
reaches that group's filters alone, as in torch. The fields' matrix is R*S times x's bytes; where
that passes WGRAD_FIELDS_BYTES the images go in runs, each run's product added to the ones before
in fp32 (gemm's c and beta, fp32 out) and rounded once at the end.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .conv_im2col import im2col
from .ops import gemm


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


def pointwise_dgrad(dy: Tensor, weight: Tensor, g: dict, precision: str = "fp32") -> Tensor:
    """dX of a 1x1 filter without padding (a bottleneck's 1x1 layers, ResNet's projections): input
    pixel (p * sh, q * sw) took output pixel (p, q) alone, so dX is the GEMM dY_rows @ W [N*P*Q, C]
    -- W read in place, no flipped copy of it -- and at a stride, that product at the strided pixels
    of a zeroed dX: a quarter of the multiply-adds of the spread dY's convolution at stride 2, and
    none of its copies. In dY's memory format."""
    N, C, H, W, K, P, Q = (g[k] for k in ("N", "C", "H", "W", "K", "P", "Q"))
    sh, sw = g["stride"]
    device = "cpu" if dy.device.type == "cpu" else None
    m = gemm(dy_rows(dy), weight.reshape(K, C), precision=precision, device=device)  # [N*P*Q, C]
    if (sh, sw) == (1, 1):
        dx = m.view(N, H, W, C)
    else:
        dx = torch.zeros((N, H, W, C), dtype=m.dtype, device=dy.device)
        if m.numel():
            dx[:, : (P - 1) * sh + 1 : sh, : (Q - 1) * sw + 1 : sw] = m.view(N, P, Q, C)
    dx = dx.permute(0, 3, 1, 2)
    return dx if _format_of(dy) == torch.channels_last else dx.contiguous()


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


# The most bytes of fields (im2col's matrix) one run of wgrad_grouped builds: at ResNeXt-50's first
# grouped layer (128 channels at 56 x 56, bf16) 7.2 MB an image, so 35 images a run
WGRAD_FIELDS_BYTES = 256 * 2**20


def wgrad_grouped(x: Tensor, dy: Tensor, g: dict, groups: int, precision: str = "fp32") -> Tensor:
    """The filter's gradient of a grouped convolution, [K, C/G, R, S] (channels_last memory): the
    diagonal blocks of one GEMM over every channel (the module's docstring). g is the geometry of
    the whole layer (every channel of x, every filter: its C and K are the layer's)."""
    N, K, C, R, S, G = g["N"], g["K"], g["C"], g["R"], g["S"], groups
    per_image = g["P"] * g["Q"] * R * S * C * x.element_size()
    run = max(1, min(N, WGRAD_FIELDS_BYTES // max(per_image, 1)))
    rows = dy_rows(dy)  # [N*P*Q, K]
    pixels = g["P"] * g["Q"]
    device = "cpu" if x.device.type == "cpu" else None
    m = None
    for n0 in range(0, N, run):
        n = min(run, N - n0)
        fields = im2col(x.narrow(0, n0, n), dict(g, N=n))
        part = rows.narrow(0, n0 * pixels, n * pixels).t()
        if run >= N:  # one run: the GEMM writes x's dtype, as conv_wgrad's does
            m = gemm(part, fields, precision=precision, device=device)
        elif m is None:
            m = gemm(part, fields, precision=precision, device=device, out_dtype=_fp32_out(x))
        else:
            m = gemm(part, fields, m, beta=1.0, precision=precision, device=device, out_dtype=_fp32_out(x))
    if m is None:  # no images: nothing summed
        m = torch.zeros((K, R * S * C), dtype=x.dtype, device=x.device)
    kg, cg = K // G, C // G
    blocks = torch.diagonal(m.view(G, kg, R, S, G, cg), dim1=0, dim2=4)  # [K/G, R, S, C/G, G]
    dw = blocks.permute(4, 0, 1, 2, 3).reshape(K, R, S, cg).to(x.dtype)  # KRSC memory
    return dw.permute(0, 3, 1, 2)


def _fp32_out(x: Tensor):
    """gemm's out_dtype for an fp32 sum of 16-bit operands (None: float32 operands write fp32 anyway)."""
    return torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else None
