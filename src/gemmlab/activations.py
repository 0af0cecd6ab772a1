"""The activations gemmlab's layers (linear, conv2d) apply after their product, by name."""

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
