"""gemmlab in a model: `linear(x, weight, bias, activation)` and `Linear`, a drop-in for
torch.nn.Linear whose product runs on gemmlab.gemm (so on gemmlab's kernels, with autograd and
torch.compile through torch.ops.gemmlab.gemm), and `Conv2d`, torch.nn.Conv2d's on gemmlab.conv2d;
`convert(model)` puts an existing model's Linear and Conv2d layers on them in place (`restore`
undoes it).

The bias and the activation join the product in the kernel's epilogue (gemmlab.gemm's bias= and
activation=), except where a gradient will be taken through the activation: then the kernel adds
the bias and torch applies the activation, so that its input is kept for the backward pass
rather than computed again.
"""

import torch
from torch import Tensor

from . import amp, api
from .activations import ACTIVATIONS, check_activation
from .conv import conv2d
from .ops import _column_major, _plain, _readable, dual, gemm, wants_grad


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None) -> Tensor:
    """activation(x @ weight.t() + bias), as torch.nn.functional.linear takes them: x [..., in]
    with any leading dimensions, weight [out, in] (read in place as the transposed view), bias
    [out] or None. activation: None, "relu", "gelu" (erf), "gelu_tanh" or "silu". CPU tensors run
    the CPU ladder (float32). Inside a CUDA autocast region, as F.linear, x, weight and bias run in
    its dtype (gemmlab.amp)."""
    check_activation(activation)
    if weight.dim() != 2:
        raise ValueError(f"weight must be [out_features, in_features], got shape {tuple(weight.shape)}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x's last dimension must be in_features = {weight.shape[1]}, got shape {tuple(x.shape)}")
    region = amp.region_dtype(x)
    if region is not None:
        x, weight, _, bias = amp.cast_operands(region, x, weight, None, bias)
    # (a view gemm cannot read -- neither row- nor column-major, or rows that overlap, as an expanded
    # input's -- is copied, as F.linear takes any strides)
    x2 = _readable(x if x.dim() == 2 else x.reshape(-1, x.shape[-1]), True)
    device = "cpu" if x.device.type == "cpu" else None
    if wants_grad(x, weight, bias):  # the activation is left to torch, which keeps its input for its gradient
        fused = None
        if (_plain(x2, weight, bias) and not torch.compiler.is_compiling() and not torch._C._are_functorch_transforms_active()
                and not dual(x2, weight, bias) and not x2.is_meta):
            d = _LinearFunction.apply(x2, weight, bias, device)
        else:  # a trace, a tensor subclass, a functorch transform, dual or meta tensors: through the operator
            d = gemm(x2, weight.t(), device=device, bias=bias)
    else:
        fused = activation
        d = gemm(x2, weight.t(), device=device, bias=bias, activation=fused)
    if activation is not None and fused is None:
        d = ACTIVATIONS[activation](d)
    return d if x.dim() == 2 else d.reshape(*x.shape[:-1], weight.shape[0])


class _LinearFunction(torch.autograd.Function):
    """x @ weight.t() + bias with its gradients, for an eager call on torch's own tensors that autograd
    records: the launches gemm()'s operator makes (the same kernels, the same layouts, so the same
    bits), without its general arguments: a Linear's forward and backward pass took 256 us of host
    time this way and 370 through the operator's path (torch's own: 195) on an H200's host, where a
    small model's eager training step waits for the host (docs/notes/host-time-a-call.md).

    dx = g @ weight (computed as (weight^T g^T)^T where x is stored transposed, in x's own layout),
    dweight = g^T @ x (weight's layout: the kernel reads g^T in place), dbias = g summed over rows.
    With create_graph the products go through gemmlab.gemm, so autograd records them."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, device: str | None) -> Tensor:
        d = api.gemm(x, weight.t(), device=device, bias=bias)
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weight if ctx.needs_input_grad[0] else None)
        ctx.device, ctx.bias_dtype, ctx.x_transposed = device, None if bias is None else bias.dtype, _column_major(x)
        return d

    @staticmethod
    def backward(ctx, g: Tensor):
        x, weight = ctx.saved_tensors
        mm = gemm if torch.is_grad_enabled() else api.gemm  # (create_graph: recorded through the operator)
        g = g.contiguous()  # (an expanded gradient, as sum() gives, has stride 0)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = mm(weight.t(), g.t(), device=ctx.device).t() if ctx.x_transposed else mm(g, weight, device=ctx.device)
        if ctx.needs_input_grad[1]:
            dw = mm(g.t(), x, device=ctx.device)
        if ctx.needs_input_grad[2]:
            db = g.sum(0).to(ctx.bias_dtype)
        return dx, dw, db, None


class Linear(torch.nn.Linear):
    """torch.nn.Linear with its product on gemmlab: the same constructor (in_features,
    out_features, bias, device, dtype), parameters, initialisation and state_dict keys, so either
    module loads the other's state_dict."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d with its product on gemmlab (gemmlab.conv2d, algorithm="auto": the step it picks
    for each kind of call, gemmlab.conv.choose_algorithm): the
    same constructor, parameters, initialisation and state_dict keys; groups > 1 runs a convolution
    a group (gemmlab.conv2d's groups=); padding modes other than 'zeros' pad with torch first."""

    def forward(self, x: Tensor) -> Tensor:
        if self.padding_mode != "zeros":  # as torch.nn.Conv2d does: pad, then convolve unpadded
            x = torch.nn.functional.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


# torch's classes and gemmlab's drop-ins for them (each subclasses torch's, adding only its forward)
_DROP_INS = {torch.nn.Linear: Linear, torch.nn.Conv2d: Conv2d}


def convert(module: torch.nn.Module) -> torch.nn.Module:
    """Put a model's products on gemmlab, in place: every torch.nn.Linear and torch.nn.Conv2d in
    `module` (itself included) becomes gemmlab.nn.Linear or gemmlab.nn.Conv2d by its class alone --
    the same module objects, parameters, buffers, hooks and state_dict keys, so an optimizer made
    before keeps updating them. Subclasses of torch's modules (with a forward of their own, such as
    MultiheadAttention's output projection, whose weight torch's attention reads directly) are left
    as they are. Returns `module`; restore() turns them back. Convert before torch.compile or
    torch.export, which record the modules' classes as they find them.

        model = gemmlab.nn.convert(torchvision.models.resnet50().cuda())
    """
    return _swap(module, _DROP_INS)


def restore(module: torch.nn.Module) -> torch.nn.Module:
    """convert() undone, in place: every gemmlab.nn.Linear and gemmlab.nn.Conv2d in `module` becomes
    torch's own class again, its parameters untouched. Returns `module`."""
    return _swap(module, {ours: theirs for theirs, ours in _DROP_INS.items()})


def _swap(module: torch.nn.Module, classes: dict) -> torch.nn.Module:
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(module).__name__}")
    for m in module.modules():
        to = classes.get(type(m))  # (the exact class: a subclass keeps its own forward)
        if to is not None:
            m.__class__ = to
    return module
