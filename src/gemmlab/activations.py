"""The activations gemmlab's layers (linear, conv2d) apply after their product, by name, and the
code of each in the kernels' fused epilogue (gemmlab::post in kernels/common/gemm_common.cuh)."""

from functools import partial

import torch
import torch.nn.functional as F

ACTIVATIONS = {
    None: None,
    "relu": torch.relu,
    "gelu": F.gelu,  # the erf form, as torch.nn.GELU()
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}

# gemmlab::ACT_* and POST_FUSED: a fused epilogue's POST is POST_FUSED plus the activation's code,
# compiled in; the bias is the kernel's argument (null where there is none), so one build serves a
# layer with and without its bias.
ACTIVATION_CODES = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
POST_FUSED = 8


def check_activation(activation) -> None:
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(k) for k in ACTIVATIONS)
        raise ValueError(f"activation {activation!r} is not one of {names}")


def post_code(has_bias: bool, activation) -> int:
    """The POST template argument a call needs: POST_FUSED plus the activation's code where it adds
    a bias or applies an activation, else 0 (the plain epilogue)."""
    check_activation(activation)
    return POST_FUSED + ACTIVATION_CODES[activation] if has_bias or activation is not None else 0


def apply_post(d: torch.Tensor, bias, activation) -> torch.Tensor:
    """d + bias, then the activation, in place in d (what a fused epilogue computes, by torch: for
    the kernels that do not fuse it, and the CPU ladder). Returns d."""
    if bias is not None:
        d.add_(bias)
    act = ACTIVATIONS[activation]
    if act is not None:
        d.copy_(act(d))
    return d
