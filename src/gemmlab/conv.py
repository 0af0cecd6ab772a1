"""Convolution on the GEMM, its first step (im2col): `conv2d` with torch.nn.functional.conv2d's
arguments, the input unfolded into the [N*P*Q, C*R*S] matrix of its receptive fields and multiplied
by the filter, [K, C*R*S], through gemmlab.gemm (so on gemmlab's kernels, with autograd).

The unfold is torch's (torch.nn.functional.unfold) and writes the whole matrix: R*S times the input's
bytes for a stride of 1, the cost the implicit-GEMM steps exist to remove. The bias and the
activation are applied after the product by torch, as gemmlab.linear applies them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .activations import ACTIVATIONS
from .ops import gemm


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return int(value[0]), int(value[1])
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


def _check(x, weight, bias, groups, activation) -> None:
    if not isinstance(x, Tensor) or not isinstance(weight, Tensor):
        raise TypeError("x and weight must be torch tensors")
    if x.dim() != 4:
        raise ValueError(f"x must be [N, C, H, W], got shape {tuple(x.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"weight must be [out_channels, in_channels, kH, kW], got shape {tuple(weight.shape)}")
    if groups != 1:
        raise ValueError(f"groups={groups}: gemmlab.conv2d computes ordinary convolutions (groups=1) only so far; "
                         "grouped and depthwise ones need torch.nn.functional.conv2d")  # fmt: skip
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"weight has {weight.shape[1]} input channels, x has {x.shape[1]}")
    if x.dtype != weight.dtype or x.device != weight.device:
        raise ValueError(f"x and weight must share dtype and device, got {x.dtype} on {x.device} and "
                         f"{weight.dtype} on {weight.device}")  # fmt: skip
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.device != x.device):
        raise ValueError(f"bias must be [{weight.shape[0]}] on {x.device}, got shape {tuple(bias.shape)} on {bias.device}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(repr(k) for k in ACTIVATIONS)}")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1,
           activation: str | None = None, precision: str = "fp32") -> Tensor:  # fmt: skip
    """activation(conv2d(x, weight) + bias) with torch.nn.functional.conv2d's semantics: x [N, C, H, W]
    (NCHW or channels_last; the result keeps x's memory format), weight [K, C, R, S], stride,
    padding (int, pair, "same", "valid") and dilation as ints or pairs. The product runs on
    gemmlab.gemm (precision as gemm takes it: "tf32" lets float32 use the tensor cores); CPU tensors
    run the CPU ladder (float32). groups > 1 is refused."""
    _check(x, weight, bias, groups, activation)
    keep_nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
    N, K, P, Q = g["N"], g["K"], g["P"], g["Q"]
    top, bottom, left, right = g["pads"]
    if top != bottom or left != right:  # unfold pads both sides alike: an uneven 'same' pads first
        x, unfold_pad = F.pad(x, (left, right, top, bottom)), (0, 0)
    else:
        unfold_pad = (top, left)
    cols = F.unfold(x, (g["R"], g["S"]), dilation=g["dilation"], padding=unfold_pad, stride=g["stride"])
    a = cols.transpose(1, 2).reshape(N * P * Q, -1)  # [N*P*Q, C*R*S]: a receptive field a row
    d = gemm(a, weight.reshape(K, -1).t(), precision=precision, device="cpu" if x.device.type == "cpu" else None)
    if bias is not None:
        d = d + bias
    act = ACTIVATIONS[activation]
    if act is not None:
        d = act(d)
    y = d.reshape(N, P, Q, K).permute(0, 3, 1, 2)  # NCHW sizes over NHWC memory: channels_last
    return y if keep_nhwc else y.contiguous()
