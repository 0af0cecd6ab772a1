"""Convolution on the GEMM, its first step (im2col): `conv2d` with torch.nn.functional.conv2d's
arguments, the input laid out as the [N*P*Q, R*S*C] matrix of its receptive fields (`im2col`) and
multiplied by the filter, [K, R*S*C] (`filter_matrix`, read transposed in place), through
gemmlab.gemm (so on gemmlab's kernels, with autograd). The product, [N*P*Q, K], is the output in
NHWC memory: a channels_last result is that memory itself, an NCHW one a copy of it.

The matrix is built in NHWC order (a row's elements in (r, s, c) order), so a channels_last input
is read where it lies: padded if the convolution pads (a copy of the input), then every field taken
through one strided view of it (stride and dilation in its strides) and copied once into the
matrix. That copy is R*S times the input's bytes at stride 1, the cost the implicit-GEMM steps
exist to remove. A 1x1 filter at stride 1 without padding needs no copy at all on a channels_last
input: its [N*H*W, C] memory is the matrix, which gemm reads in place. An NCHW input is read
through the same view (a 1x1 filter's matrix is then one transposing copy of it).

The bias and the activation join the product in the GEMM's epilogue (gemm's bias= and
activation=), as in gemmlab.linear: where a gradient will be taken through the activation, torch
applies it instead, so that its input is kept for the backward pass.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import amp
from .activations import ACTIVATIONS
from .conv_im2col import filter_matrix, im2col  # noqa: F401
from .conv_shape import CONV_OP_ARGS, _is_int, _pair, _suggests_channels_last, conv_geometry, empty_result  # noqa: F401
from .conv_wgrad_tma import conv_wgrad
from .ops import _plain, _transformed, dual, gemm, wants_grad


ALGORITHMS = ("im2col", "implicit", "tma", "gather")  # conv01 (on gemm()), conv02, conv03, conv04
CHOICES = ("auto", *ALGORITHMS)  # conv2d's algorithm=: "auto" picks one of the steps a call (choose_algorithm)


def _check(x, weight, bias, groups, activation) -> None:
    if not isinstance(x, Tensor) or not isinstance(weight, Tensor):
        raise TypeError("x and weight must be torch tensors")
    if x.dim() != 4:
        raise ValueError(f"x must be [N, C, H, W] (or one image, [C, H, W]), got shape {tuple(x.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"weight must be [out_channels, in_channels, kH, kW], got shape {tuple(weight.shape)}")
    if not _is_int(groups) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    C, K = x.shape[1], weight.shape[0]
    if groups == 1 and weight.shape[1] != C:
        raise ValueError(f"weight has {weight.shape[1]} input channels, x has {C}")
    if groups > 1 and (C % groups or K % groups):
        raise ValueError(f"groups={groups} must divide both the input channels ({C}) and the output channels ({K})")
    if groups > 1 and weight.shape[1] * groups != C:
        raise ValueError(f"with groups={groups} the weight's in_channels must be {C} / {groups} = {C // groups} "
                         f"(x has {C} channels), got {weight.shape[1]}")  # fmt: skip
    if x.dtype != weight.dtype or x.device != weight.device:
        raise ValueError(f"x and weight must share dtype and device, got {x.dtype} on {x.device} and "
                         f"{weight.dtype} on {weight.device}")  # fmt: skip
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.device != x.device):
        raise ValueError(f"bias must be [{weight.shape[0]}] on {x.device}, got shape {tuple(bias.shape)} on {bias.device}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(repr(k) for k in ACTIVATIONS)}")


def _nhwc_operands(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict):
    """What the implicit-GEMM steps read and write: x's NHWC memory, the [K, R*S*C] filter matrix
    (KRSC), both 16-byte aligned (copies where x is not channels_last, or an offset view's storage
    is not aligned), the empty [N*P*Q, K] result, and the bias in its dtype."""
    xs = x.contiguous(memory_format=torch.channels_last)  # NHWC memory
    wm = filter_matrix(weight).contiguous()  # [K, R*S*C], KRSC
    if xs.data_ptr() % 16 or wm.data_ptr() % 16:  # (an offset view's storage)
        xs, wm = xs.clone(memory_format=torch.channels_last), wm.clone()
    d = torch.empty((g["N"] * g["P"] * g["Q"], g["K"]), dtype=x.dtype, device=x.device)
    b = None if bias is None else bias.to(d.dtype).contiguous()
    return xs, wm, d, b


def implicit_gemm_why_not(x: Tensor, weight: Tensor, bias: Tensor | None) -> str | None:
    """Why conv02 (implicit GEMM) cannot serve a convolution, or None."""
    if x.device.type != "cuda":
        return f"it runs on CUDA tensors, x is on {x.device}"
    if x.dtype not in (torch.bfloat16, torch.float16):
        return f"it takes bf16 or fp16, not {str(x.dtype).removeprefix('torch.')}"
    if x.shape[1] % 8:
        return f"it reads channels 8 at a time (16 bytes): C = {x.shape[1]} is not a multiple of 8"
    return None


def implicit_gemm(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None) -> Tensor:
    """The convolution as conv02 computes it (kernels/conv/02_implicit_gemm.cu): the [N*P*Q, K] NHWC
    result, its A tiles gathered from x's NHWC memory as they are staged (x is copied into that
    layout first unless it is channels_last), the bias and the activation in its epilogue."""
    from . import jit, launch
    from .activations import post_code
    from .specs.conv import CONV_02

    xs, wm, d, b = _nhwc_operands(x, weight, bias, g)
    if d.numel() == 0:
        return d
    M, K = d.shape
    spec, cfg = CONV_02, CONV_02.default_config()
    device_id = x.device.index if x.device.index is not None else torch.cuda.current_device()
    loaded = jit.load_kernel(spec, cfg, device_id, x.dtype, x.dtype, post=post_code(b is not None, activation))
    sizes = (g["N"], g["H"], g["W"], g["C"], K, g["R"], g["S"], g["P"], g["Q"], *g["stride"], g["pads"][0], g["pads"][2],
             *g["dilation"], K)  # (the last: D's row stride)  # fmt: skip
    launch.launch(loaded, device_id, spec.grid(M, K, cfg), spec.block(cfg), xs.data_ptr(), wm.data_ptr(), d.data_ptr(),
                  *(launch.i32(v) for v in sizes), launch.f32(1.0), 0 if b is None else b.data_ptr(),
                  launch.i32(g["C"]))  # (x's pixel stride: one group)  # fmt: skip
    return d


def tma_why_not(x: Tensor, weight: Tensor, bias: Tensor | None, stride=1, padding=0, dilation=1) -> str | None:
    """Why conv03 (TMA im2col, wgmma) cannot serve a convolution, or None: the device (Hopper's TMA
    and wgmma: compute capability 9.0), the dtype, C % 8 (the map's rows are 16-byte multiples),
    a wanted gradient, or a geometry the im2col map cannot describe (gemmlab.tma.im2col_why_not:
    padding or filter reach past the bounding box's 8-bit corners, a stride past 8, taps more than
    255 pixels apart)."""
    from .device import capability
    from .specs.conv import CONV03_BK, CONV_03
    from .tma import im2col_why_not

    why = implicit_gemm_why_not(x, weight, bias)
    if why:
        return why
    cc = capability(x.device)
    if cc is not None and cc < CONV_03.min_capability:
        return f"it needs Hopper's TMA and wgmma (compute capability 9.0), device {x.device} is {cc[0]}.{cc[1]}"
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
    return im2col_why_not(g, CONV_03.default_config()["BM"], CONV03_BK, x.element_size())


def tma_im2col(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, activation: str | None) -> Tensor:
    """The convolution as conv03 computes it (kernels/conv/03_tma_im2col.cu): the [N, K, P, Q]
    result (NHWC memory where torch's would be channels_last), its A tiles copied by the TMA in im2col mode from x's NHWC memory (x is copied into that
    layout first unless it is channels_last), B by tiled TMA from the [K][R*S][C] filter, the bias
    and the activation in its epilogue. Raises ValueError where conv03 cannot serve the call
    (tma_why_not). A kind of call is worked out once (gemmlab.conv03.Plan): later ones launch."""
    from . import conv03

    return _planned(conv03, tma_why_not, "tma", "algorithm='implicit' or 'im2col'", x, weight, bias, stride, padding,
                    dilation, activation)  # fmt: skip


def _planned(step, why_not, algorithm: str, instead: str, x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding,
             dilation, activation: str | None) -> Tensor:  # fmt: skip
    """A call of a step whose host side keeps plans (step: gemmlab.conv03 or gemmlab.conv04): the
    plan of this kind of call, built on its first after why_not has had its say (a ValueError
    naming the algorithm and what to use instead), x, the filter and the bias as the plan reads
    them (copies where it cannot read them in place), and the launch."""
    g_args = tuple(map(_hashable, (stride, padding, dilation)))
    plan = step.cached_plan(x, weight, bias, g_args, activation)
    if plan is None or wants_grad(x, weight, bias):
        why = why_not(x, weight, bias, stride, padding, dilation)
        if why:
            raise ValueError(f"algorithm={algorithm!r} cannot serve this convolution: {why}; use {instead}")
        g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
        plan = step.plan_for(x, weight, bias, g, activation, g_args,
                             _suggests_channels_last(x) or _suggests_channels_last(weight))  # fmt: skip
    xs = x if plan.x_nhwc else x.contiguous(memory_format=torch.channels_last)
    wm = weight if plan.w_krsc else filter_matrix(weight)
    b = bias if plan.bias_direct else bias.to(x.dtype).contiguous()
    return step.run(plan, xs, wm, b)


def gather_why_not(x: Tensor, weight: Tensor, bias: Tensor | None, stride=1, padding=0, dilation=1) -> str | None:
    """Why conv04 (few channels: the fields gathered from an input tile staged in shared memory)
    cannot serve a convolution, or None (gemmlab.conv04.why_not)."""
    from . import conv04

    g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
    return conv04.why_not(x, weight, bias, g)


def gather(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, activation: str | None) -> Tensor:
    """The convolution as conv04 computes it (kernels/conv/04_few_channels.cu): the [N, K, P, Q]
    result (NHWC memory where torch's would be channels_last), each block staging the input its
    output pixels reach in shared memory and gathering the GEMM's A fragments from it (x is copied
    into NHWC memory first unless it is channels_last), the filter held whole in shared memory, the
    bias and the activation in its epilogue. Raises ValueError where conv04 cannot serve the call
    (gather_why_not). A kind of call is worked out once (gemmlab.conv04.Plan): later ones launch."""
    from . import conv04

    return _planned(conv04, gather_why_not, "gather", "algorithm='im2col'", x, weight, bias, stride, padding, dilation,
                    activation)  # fmt: skip


def choose_algorithm(x: Tensor, weight: Tensor, bias: Tensor | None, stride=1, padding=0, dilation=1) -> str:
    """The step algorithm="auto" runs a convolution on: conv03 ("tma") where it can serve the call
    (tma_why_not), else conv02 ("implicit"), else conv04 ("gather": input channels no multiple of
    8, such as a CNN's first layer), else "im2col". With its staged TMA-store epilogue conv03 ran
    ResNet-50's 1x1 layers at stride 1 at 0.83-1.14x cuDNN on an H100, as fast as one gemm() on
    x's own memory or faster (docs/ladder/conv03-tma-im2col.md). CPU tensors take "im2col"; under
    torch.compile the steps run as the operator conv_step_op. conv2d asks once a kind of call
    (_kind remembers the answer)."""
    if x.device.type != "cuda":
        return "im2col"
    if tma_why_not(x, weight, bias, stride, padding, dilation) is None:
        return "tma"
    if implicit_gemm_why_not(x, weight, bias) is None:
        return "implicit"
    if gather_why_not(x, weight, bias, stride, padding, dilation) is None:
        return "gather"
    return "im2col"


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1,
           activation: str | None = None, precision: str = "fp32", algorithm: str = "auto") -> Tensor:  # fmt: skip
    """activation(conv2d(x, weight) + bias) with torch.nn.functional.conv2d's semantics: x [N, C, H, W]
    (or one image, [C, H, W], giving [K, P, Q]) and weight [K, C, R, S], each NCHW or channels_last (the result is channels_last where torch's is:
    where x's or the weight's strides are channels_last, ambiguous ones read as torch reads them), stride, padding (int, pair, "same", "valid") and dilation as ints or pairs. The
    product runs on gemmlab.gemm (precision as gemm takes it: "tf32" lets float32 use the tensor
    cores); CPU tensors run the CPU ladder (float32). groups > 1 (grouped and depthwise
    convolutions, weight [K, C / groups, R, S]) runs one ordinary convolution a group, each on the
    step algorithm picks for it, and concatenates their channels (_grouped): a launch a group. Under
    "auto" or "implicit", bf16/fp16 CUDA tensors whose groups have a multiple of 4 channels run
    instead in one launch of conv02's grouped build (gemmlab.conv_grouped) where no trace records the
    call (with gradients through GroupedConv). A
    depthwise layer (groups = C = K) under "auto" runs instead in one launch of conv05 (bf16, fp16 or
    float32 CUDA tensors; in fp32 arithmetic; under torch.compile as the operator
    gemmlab::conv2d_depthwise), its gradients one launch each too (conv05.DepthwiseConv); so do
    narrow groups (2, 4 or 8 channels and as many filters, conv05.narrow_groups_why_not), on
    conv05's grouped build, with gradients through GroupedConv (traced: the same operator).
    algorithm="depthwise" asks for conv05 by name (a ValueError where it cannot serve the call).

    algorithm: "auto" (the default: the step choose_algorithm picks for the call), "im2col" (the
    matrix of receptive fields, then gemm()), "implicit" (conv02, implicit GEMM: bf16/fp16 CUDA
    tensors with C a multiple of 8; 0.30x cuDNN on ResNet-50's layers), "tma" (conv03, TMA im2col
    feeding wgmma: the same tensors on a Hopper GPU, within the im2col map's limits, tma_why_not)
    or "gather" (conv04: bf16/fp16 CUDA tensors of any C, at most 256 output channels and 1024
    filter entries R*S*C, gather_why_not). conv02, conv03 and conv04 take gradients through
    _ImplicitConv (dgrad and wgrad, gemmlab.conv_grad); where torch.compile traces the call, they
    run as the operator torch.ops.gemmlab.conv2d_step (conv_step_op), which has a fake
    implementation and those gradients, so that a compiled model keeps them.

    Inside a CUDA autocast region, as F.conv2d, x, weight and bias run in its dtype unless precision
    names float32's tensor-core math (gemmlab.amp). Under torch.func's transforms (vmap, grad, vjp,
    jacrev: per-sample gradients) a call runs on im2col's matrix and gemm(), whatever
    algorithm names (gemmlab.conv_func)."""
    if isinstance(x, Tensor) and x.dim() == 3:  # one image [C, H, W], as F.conv2d takes it
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, activation, precision,
                      algorithm).squeeze(0)  # fmt: skip
    region = amp.region_dtype(x, precision)
    if region is not None:
        x, weight, bias = amp.cast(x, region), amp.cast(weight, region), amp.cast(bias, region)
    if (_transformed(x, weight, bias) or dual(x, weight, bias)) and not torch.compiler.is_compiling():  # gemmlab.conv_func
        from .conv_func import conv2d_unfolded

        _check(x, weight, bias, groups, activation)
        if algorithm not in (*CHOICES, "depthwise"):
            raise ValueError(f"algorithm must be one of {', '.join(map(repr, (*CHOICES, 'depthwise')))}, got {algorithm!r}")
        return conv2d_unfolded(x, weight, bias, stride, padding, dilation, groups, activation, precision)
    if algorithm == "depthwise" or not (_is_int(groups) and groups == 1):
        _check(x, weight, bias, groups, activation)  # every error before the first group's launch
        y = algorithm in ("depthwise", "auto") and _depthwise(x, weight, bias, stride, padding, dilation, groups,
                                                               activation, algorithm == "depthwise")  # fmt: skip
        if not isinstance(y, Tensor) and algorithm in ("auto", "implicit", "depthwise"):
            y = _grouped_one_launch(x, weight, bias, stride, padding, dilation, groups, activation, algorithm)
        return y if isinstance(y, Tensor) else _grouped(x, weight, bias, stride, padding, dilation, groups, activation,
                                                        precision, algorithm)  # fmt: skip
    kind = _kind(x, weight, bias, stride, padding, dilation, groups, activation, algorithm)
    algorithm = kind.algorithm
    if algorithm != "im2col" and _traced(x, weight, bias):  # through the operator
        grad = wants_grad(x, weight, bias)
        y = conv_step_op(x, weight, bias, *_step_args(stride, padding, dilation), "" if grad else activation or "",
                         algorithm)  # fmt: skip
        return y if activation is None or not grad else ACTIVATIONS[activation](y)
    if algorithm != "im2col" and wants_grad(x, weight, bias):
        y = _ImplicitConv.apply(x, weight, bias, (stride, padding, dilation), algorithm)
        return y if activation is None else ACTIVATIONS[activation](y)
    if algorithm != "im2col":
        return _implicit(x, weight, bias, stride, padding, dilation, activation, algorithm)
    g = kind.g
    N, K, P, Q = g["N"], g["K"], g["P"], g["Q"]
    cuda = x.device.type == "cuda"
    a = im2col(x, g, aligned=cuda)  # [N*P*Q, R*S*C]
    b = filter_matrix(weight, aligned=cuda).t()  # [R*S*C, K]: the [K, R*S*C] matrix read transposed, in place
    # The bias and the activation in the GEMM's epilogue (as gemmlab.linear: the activation by torch
    # where a gradient will be taken through it, so that its input is kept)
    fused = None if wants_grad(x, weight, bias) else activation
    d = gemm(a, b, precision=precision, device="cpu" if x.device.type == "cpu" else None, bias=bias,
             activation=fused)  # [N*P*Q, K]: NHWC  # fmt: skip
    if activation is not None and fused is None:
        d = ACTIVATIONS[activation](d)
    y = d.reshape(N, P, Q, K).permute(0, 3, 1, 2)  # NCHW sizes over NHWC memory: channels_last
    return y if kind.channels_last else y.contiguous()


def group_slices(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, i: int) -> tuple:
    """Group i's input channels, filters and bias: views, narrowed (an indexed slice of a fake CUDA
    tensor fails where torch has no CUDA)."""
    cg, kg = x.shape[1] // groups, weight.shape[0] // groups
    return x.narrow(1, i * cg, cg), weight.narrow(0, i * kg, kg), None if bias is None else bias.narrow(0, i * kg, kg)


def _grouped_one_launch(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, groups: int,
                        activation: str | None, algorithm: str = "auto") -> Tensor | None:  # fmt: skip
    """A grouped layer in one launch: of conv05's grouped build where its groups are narrow
    (conv05.narrow_groups_why_not: 2-8 channels and as many filters), else of conv02's grouped build
    (gemmlab.conv_grouped); with a gradient to take, GroupedConv and the activation through torch
    after it. None where neither can serve (grouped_why_not, fits) or a trace records the call:
    those run a convolution a group (_grouped), whose steps have operators. algorithm: "auto" takes
    either, "depthwise" (conv05 by name) the first, "implicit" (conv02) the second."""
    from . import conv05, conv_grouped

    narrow = algorithm != "implicit" and conv05.narrow_groups_why_not(x, weight, groups) is None
    if algorithm == "depthwise" and not narrow:
        return None
    if (not narrow and conv_grouped.grouped_why_not(x, weight, groups) is not None) or _traced(x, weight, bias):
        return None
    g = conv_geometry((x.shape[0], x.shape[1] // groups, *x.shape[2:]), tuple(weight.shape), stride, padding, dilation)
    if not narrow and not conv_grouped.fits(g, groups):
        return None
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    if wants_grad(x, weight, bias):
        y = GroupedConv.apply(x, weight, bias, g, groups, last, narrow)
        return y if activation is None else ACTIVATIONS[activation](y)
    if narrow:
        return conv05.run(x, weight, bias, dict(g, C=x.shape[1]), activation, last, x.shape[1] // groups)
    return conv_grouped.run(x, weight, bias, g, groups, activation, last)


class GroupedConv(torch.autograd.Function):
    """A grouped convolution in one launch with autograd (g: one group's geometry): the forward pass
    on conv05's grouped build where `narrow` says so (conv05.narrow_groups_why_not), else on
    conv02's; dX one more grouped convolution through conv2d (the spread dY by each group's filters
    transposed and flipped: gemmlab.conv_grad, one launch again where a grouped build serves dY's
    groups), or conv05's dgrad where the groups are narrow and the stride is not 1 (one launch over
    dY where it lies, not a spread dY four times its pixels; at stride 1 the flipped filters' pass
    takes conv05's sliding row, 3-5% ahead of dgrad at batch 256); dW on conv05's filter gradient
    where the groups are narrow (each group's sums apart, x read where it lies), else the diagonal
    blocks of one GEMM over every channel (conv_grad.wgrad_grouped); the bias's a sum over dY."""

    @staticmethod
    def forward(ctx, x, weight, bias, g, groups, last, narrow=False):
        from . import conv05, conv_grouped

        ctx.save_for_backward(x, weight)
        ctx.g, ctx.groups, ctx.narrow = g, groups, narrow
        if narrow:
            return conv05.run(x, weight, bias, dict(g, C=x.shape[1]), None, last, x.shape[1] // groups)
        return conv_grouped.run(x, weight, bias, g, groups, None, last)

    @staticmethod
    def backward(ctx, dy):
        from . import conv05
        from .conv_grad import dgrad_operands, wgrad_grouped

        x, weight = ctx.saved_tensors
        g, G = ctx.g, ctx.groups
        K, cg, R, S = weight.shape
        dx = dw = None
        strided = tuple(g["stride"]) != (1, 1)
        if ctx.needs_input_grad[0] and ctx.narrow and strided:  # each group's sums apart, over dY where it lies
            dx = conv05.dgrad(dy, weight, dict(g, C=cg * G, K=K), _suggests_channels_last(x), cg)
        elif ctx.needs_input_grad[0]:  # each group's [K/G, C/G, R, S] filters as [C/G, K/G, R, S], flipped
            z, _, pad = dgrad_operands(dy, weight[:1], g)
            w2 = weight.reshape(G, K // G, cg, R, S).transpose(1, 2).reshape(G * cg, K // G, R, S).flip(2, 3)
            dx = conv2d(z, w2.contiguous(memory_format=torch.channels_last), None, 1, pad, g["dilation"], G)
        if ctx.needs_input_grad[1] and ctx.narrow:  # each group's sums apart, in one launch
            dw = conv05.wgrad(x, dy, dict(g, C=cg * G, K=K), weight.dtype, cg)
        elif ctx.needs_input_grad[1]:  # one GEMM over every channel, its diagonal blocks
            dw = wgrad_grouped(x, dy, dict(g, C=cg * G), G)
        db = dy.sum((0, 2, 3)) if ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None, None, None


def _depthwise(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, groups: int,
               activation: str | None, asked: bool = True) -> Tensor | None:  # fmt: skip
    """A depthwise layer in one launch of conv05 (conv05.depthwise_why_not; traced: its operator;
    with a gradient to take: conv05.DepthwiseConv, the activation after it through torch); traced
    narrow groups (conv05.narrow_groups_why_not) through the same operator, which reads the group's
    width from the weight; None where it cannot serve (narrow groups outside a trace included: they
    take _grouped_one_launch), or asked (algorithm="depthwise") where neither serves: a ValueError
    saying why."""
    from . import conv05

    why = conv05.depthwise_why_not(x, weight, groups)
    traced = _traced(x, weight, bias)
    if why is not None:
        narrow = conv05.narrow_groups_why_not(x, weight, groups)
        if asked and narrow is not None:
            raise ValueError(f"algorithm='depthwise': {why}; and {narrow}")
        if narrow is not None or not traced:
            return None
    grad = wants_grad(x, weight, bias)
    if traced:  # through its operator
        y = conv05.depthwise_op(x, weight, bias, *_step_args(stride, padding, dilation), "" if grad else activation or "")
        return y if activation is None or not grad else ACTIVATIONS[activation](y)
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    if grad:
        y = conv05.DepthwiseConv.apply(x, weight, bias, g, last)
        return y if activation is None else ACTIVATIONS[activation](y)
    return conv05.run(x, weight, bias, g, activation, last)


def _grouped(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, groups: int,
             activation: str | None, precision: str, algorithm: str) -> Tensor:  # fmt: skip
    """A grouped convolution as torch defines it: group i convolves input channels
    [i * C/groups, (i+1) * C/groups) with filters [i * K/groups, (i+1) * K/groups) into those output
    channels. Each group is an ordinary conv2d on channel slices of x and the weight (views, no
    copies), so it takes the step algorithm picks for it and autograd and torch.compile see plain
    slices and a concatenation; the result has torch's memory format (channels_last where the
    groups' are)."""
    if algorithm not in CHOICES:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, CHOICES))}, got {algorithm!r}")
    conv_geometry((x.shape[0], x.shape[1] // groups, *x.shape[2:]), tuple(weight.shape), stride, padding, dilation)
    ys = [conv2d(*group_slices(x, weight, bias, groups, i), stride, padding, dilation, 1, activation, precision, algorithm)
          for i in range(groups)]  # fmt: skip
    last = _suggests_channels_last(x) or _suggests_channels_last(weight)
    return torch.cat(ys, dim=1).contiguous(memory_format=torch.channels_last if last else torch.contiguous_format)


class _Kind(NamedTuple):
    """What conv2d works out once for a kind of call: the step it runs (auto resolved), the
    geometry (conv_geometry's) and whether torch's result would be channels_last."""

    algorithm: str
    g: dict
    channels_last: bool


_KINDS: dict[tuple, _Kind] = {}
_KINDS_MAX = 1024  # kinds of call remembered; past it the table starts again


def _kind(x, weight, bias, stride, padding, dilation, groups, activation, algorithm) -> _Kind:
    """The call's _Kind: from the table where a call of the same shapes, strides, dtypes, devices and
    arguments was checked before (every check below is a function of those), else checked (the
    errors conv2d raises) and worked out. Under a torch.compile trace, worked out every time."""
    key = None
    if isinstance(x, Tensor) and isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor)):
        key = (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), weight.dtype, weight.device,
               None if bias is None else (bias.shape, bias.dtype, bias.device), _hashable(stride), _hashable(padding),
               _hashable(dilation), groups, activation, algorithm)  # fmt: skip
        if torch.compiler.is_compiling():
            key = None
    if key is not None:
        try:
            hit = _KINDS.get(key)
        except TypeError:  # an unhashable argument: checked below, worked out every time
            hit = key = None
        if hit is not None:
            return hit
    _check(x, weight, bias, groups, activation)
    if algorithm not in CHOICES:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, CHOICES))}, got {algorithm!r}")
    if algorithm == "auto":
        algorithm = choose_algorithm(x, weight, bias, stride, padding, dilation)
    kind = _Kind(algorithm, conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation),
                 _suggests_channels_last(x) or _suggests_channels_last(weight))  # fmt: skip
    if key is not None:
        if len(_KINDS) >= _KINDS_MAX:
            _KINDS.clear()
        _KINDS[key] = kind
    return kind


def _hashable(value):
    """stride, padding or dilation as a key holds it (lists as tuples)."""
    return tuple(value) if isinstance(value, list) else value


def _implicit(x: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation, activation: str | None,
              algorithm: str) -> Tensor:  # fmt: skip
    """conv2d on conv02 ("implicit"), conv03 ("tma") or conv04 ("gather"), or the ValueError saying
    why it cannot."""
    if algorithm == "tma":  # (their plans skip the geometry's working out)
        return tma_im2col(x, weight, bias, stride, padding, dilation, activation)
    if algorithm == "gather":
        return gather(x, weight, bias, stride, padding, dilation, activation)
    g = conv_geometry(tuple(x.shape), tuple(weight.shape), stride, padding, dilation)
    why = implicit_gemm_why_not(x, weight, bias)
    if why:
        raise ValueError(f"algorithm='implicit' cannot serve this convolution: {why}; use algorithm='im2col'")
    y = implicit_gemm(x, weight, bias, g, activation).reshape(g["N"], g["P"], g["Q"], g["K"]).permute(0, 3, 1, 2)
    return y if _suggests_channels_last(x) or _suggests_channels_last(weight) else y.contiguous()


def conv_dgrad(dy: Tensor, weight: Tensor, g: dict, algorithm: str = "im2col", precision: str = "fp32") -> Tensor:
    """The input's gradient of a convolution of geometry g (conv_geometry's), dY [N, K, P, Q] ->
    dX [N, C, H, W]: one forward convolution of the spread dY by the flipped filter
    (gemmlab.conv_grad; for a 1x1 filter without padding one GEMM, conv_grad.pointwise_dgrad), on
    the algorithm asked for where it serves those operands, else the next
    (tma, implicit, gather, im2col; a forward pass on gather starts the chain at tma: dY's
    channels are the forward pass's output channels)."""
    from .conv_grad import dgrad_operands, pointwise_dgrad

    if g["R"] == g["S"] == 1 and not any(g["pads"]):
        return pointwise_dgrad(dy, weight, g, precision)
    z, w2, pad = dgrad_operands(dy, weight, g)
    key = (z.shape, z.stride(), w2.shape, w2.stride(), z.dtype, z.device, pad, tuple(g["dilation"]), algorithm)
    chosen = _DGRAD_ALGORITHMS.get(key)
    if chosen is None:  # the refusals depend on shapes, strides, dtype and device alone: worked out once a kind
        chosen = "tma" if algorithm == "gather" else algorithm
        if chosen == "tma" and tma_why_not(z, w2, None, 1, pad, g["dilation"]) is not None:
            chosen = "implicit"
        if chosen == "implicit" and implicit_gemm_why_not(z, w2, None) is not None:
            chosen = "gather"
        if chosen == "gather" and gather_why_not(z, w2, None, 1, pad, g["dilation"]) is not None:
            chosen = "im2col"
        if len(_DGRAD_ALGORITHMS) >= 1024:
            _DGRAD_ALGORITHMS.clear()
        _DGRAD_ALGORITHMS[key] = chosen
    return conv2d(z, w2, None, 1, pad, g["dilation"], precision=precision, algorithm=chosen)


_DGRAD_ALGORITHMS: dict[tuple, str] = {}  # conv_dgrad's choice by kind of call


class _ImplicitConv(torch.autograd.Function):
    """conv2d on conv02, conv03 or conv04 with autograd: the forward pass as
    _implicit runs it (no activation: conv2d applies it after, through torch, so that its input is
    kept), the backward pass as conv_dgrad, conv_wgrad and a sum over dY for the bias."""

    @staticmethod
    def forward(ctx, x, weight, bias, g_args, algorithm):
        ctx.save_for_backward(x, weight)
        ctx.g = conv_geometry(tuple(x.shape), tuple(weight.shape), *g_args)
        ctx.algorithm = algorithm
        return _implicit(x, weight, bias, *g_args, None, algorithm)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx = conv_dgrad(dy, weight, ctx.g, ctx.algorithm) if ctx.needs_input_grad[0] else None
        dw = conv_wgrad(x, dy, ctx.g) if ctx.needs_input_grad[1] else None
        db = dy.sum((0, 2, 3)) if ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None


# ---- conv02, conv03 and conv04 as an operator, for torch.compile ------------------------------


def _traced(*tensors) -> bool:
    """Whether the call is traced rather than run: torch.compile is tracing, or a tensor is fake or
    functional (AOT autograd tracing a backward pass, FakeTensorMode), whose memory cannot be
    launched on. (A function of its own, so that a test can stand in for a trace.)"""
    return torch.compiler.is_compiling() or not _plain(*tensors)


def _step_args(stride, padding, dilation) -> tuple[list[int], list[int], str, list[int]]:
    """conv2d's stride, padding and dilation as the operator's schema takes them: stride, padding
    as a pair (zeros where padding is "same" or "valid"), the padding's name ("" for numbers),
    dilation."""
    named = padding if isinstance(padding, str) else ""
    pads = [0, 0] if named else list(_pair(padding, "padding"))
    return list(_pair(stride, "stride")), pads, named, list(_pair(dilation, "dilation"))


def _conv_step(x: Tensor, weight: Tensor, bias: Tensor | None, stride: list[int], padding: list[int], padding_name: str,
               dilation: list[int], activation: str, algorithm: str) -> Tensor:  # fmt: skip
    """activation(conv2d(x, weight) + bias) on conv02 ("implicit"), conv03 ("tma") or conv04
    ("gather"), launched as in eager calls (_implicit); activation "" for none."""
    return _implicit(x, weight, bias, tuple(stride), padding_name or tuple(padding), tuple(dilation), activation or None,
                     algorithm)  # fmt: skip


conv_step_op = torch.library.custom_op("gemmlab::conv2d_step", _conv_step, mutates_args=(), device_types="cuda",
                                       schema=f"({CONV_OP_ARGS}, str algorithm) -> Tensor")
amp.register("conv2d_step", amp.cast_conv_args)


@conv_step_op.register_fake
def _conv_step_fake(x, weight, bias, stride, padding, padding_name, dilation, activation, algorithm):
    """The result's shape and memory format without a launch (conv_shape.empty_result)."""
    return empty_result(x, weight, stride, padding, padding_name, dilation)


def _conv_step_setup(ctx, inputs, output) -> None:
    x, weight, bias, stride, padding, padding_name, dilation, activation, algorithm = inputs
    ctx.save_for_backward(x, weight)
    ctx.g = conv_geometry(tuple(x.shape), tuple(weight.shape), tuple(stride), padding_name or tuple(padding), tuple(dilation))
    ctx.algorithm, ctx.activation, ctx.has_bias = algorithm, activation, bias is not None


def _conv_step_backward(ctx, dy):
    """dX, dW and the bias's gradient as _ImplicitConv's backward computes them (conv_dgrad on the
    forward step's algorithm, conv_wgrad, a sum over dY). conv2d passes no activation where a
    gradient is wanted: it applies it through torch, which keeps its input."""
    if ctx.activation:
        raise RuntimeError("gemmlab::conv2d_step takes gradients without a fused activation; conv2d applies the "
                           "activation through torch where one is wanted")  # fmt: skip
    x, weight = ctx.saved_tensors
    dx = conv_dgrad(dy, weight, ctx.g, ctx.algorithm) if ctx.needs_input_grad[0] else None
    dw = conv_wgrad(x, dy, ctx.g) if ctx.needs_input_grad[1] else None
    db = dy.sum((0, 2, 3)) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return dx, dw, db, None, None, None, None, None, None


conv_step_op.register_autograd(_conv_step_backward, setup_context=_conv_step_setup)
