"""A convolution's shape arithmetic, shared by gemmlab.conv and the steps that take a whole layer
(conv05): the output's size and padding (conv_geometry), the forms stride, padding and dilation
come in, and the memory format torch gives a result."""

from __future__ import annotations

import torch
from torch import Tensor


def _is_int(v) -> bool:
    """An int (not a bool), or torch.compile's symbolic one (a size it traces with dynamic shapes)."""
    return isinstance(v, torch.SymInt) or (isinstance(v, int) and not isinstance(v, bool))


def _pair(value, name: str) -> tuple[int, int]:
    if _is_int(value):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_int(v) for v in value):
        return value[0], value[1]
    raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")


def conv_geometry(x_shape, w_shape, stride=1, padding=0, dilation=1) -> dict:
    """The output size and the padding of each side, as F.conv2d computes them, or a ValueError:
    x [N, C, H, W], weight [K, C, R, S]; padding an int, a pair, "same" (stride 1 only; an even
    reach pads one more on the bottom and right, as torch does) or "valid"."""
    N, C, H, W = x_shape
    K, Cw, R, S = w_shape
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if min(sh, sw) < 1 or min(dh, dw) < 1:
        raise ValueError(f"stride and dilation must be positive, got stride={stride!r}, dilation={dilation!r}")
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("padding='same' needs stride 1 (as torch.nn.functional.conv2d)")
            th, tw = dh * (R - 1), dw * (S - 1)
            pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)  # top, bottom, left, right
        else:
            raise ValueError(f"padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
    else:
        ph, pw = _pair(padding, "padding")
        if min(ph, pw) < 0:
            raise ValueError(f"padding must not be negative, got {padding!r}")
        pads = (ph, ph, pw, pw)
    P = (H + pads[0] + pads[1] - dh * (R - 1) - 1) // sh + 1
    Q = (W + pads[2] + pads[3] - dw * (S - 1) - 1) // sw + 1
    if P < 1 or Q < 1:
        raise ValueError(f"the {R}x{S} filter (dilation {(dh, dw)}) does not fit the {H}x{W} input padded by "
                         f"{pads}: the output would be {P}x{Q}")  # fmt: skip
    return dict(N=N, C=C, H=H, W=W, K=K, R=R, S=S, P=P, Q=Q, stride=(sh, sw), dilation=(dh, dw), pads=pads)


def _suggests_channels_last(t: Tensor) -> bool:
    """Whether torch reads a 4-D tensor's strides as channels_last (c10's suggest_memory_format):
    strides that do not decrease in the order C, W, H, N, each at least the extent of the one before;
    where size-1 dimensions leave it ambiguous, NCHW, as torch decides."""
    sizes, strides = t.shape, t.stride()
    if strides[1] == 0:
        return False
    reach = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < reach or (d == 0 and reach == strides[1]):
            return False
        reach = strides[d] * max(sizes[d], 1)
    return True


# The arguments of gemmlab's convolution operators (gemmlab::conv2d_step, gemmlab::conv2d_depthwise)
# in torch.library's schema language: stride, padding as pairs, the padding's name ("same", "valid"
# or "" for numbers), dilation, the fused activation ("" for none).
CONV_OP_ARGS = ("Tensor x, Tensor weight, Tensor? bias, int[] stride, int[] padding, str padding_name, int[] dilation, "
                "str activation")  # fmt: skip


def empty_result(x: Tensor, weight: Tensor, stride, padding, padding_name: str, dilation) -> Tensor:
    """An uninitialised result of the convolution, as an operator's fake implementation gives it:
    [N, K, P, Q] by conv_geometry (padding_name, where not "", instead of padding), channels_last
    where x's or the weight's strides are (as the steps return it)."""
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), tuple(stride), padding_name or tuple(padding), tuple(dilation))
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    return torch.empty((g["N"], g["K"], g["P"], g["Q"]), dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last if last else torch.contiguous_format)  # fmt: skip

