"""gemmlab's GEMM as a PyTorch operator: `torch.ops.gemmlab.gemm`, with a shape-only (fake)
implementation for torch.compile and FakeTensorMode, and its gradients.

`gemmlab.gemm()` calls the operator where torch.compile traces the call (or a tensor subclass,
such as a fake tensor, is among its inputs, or torch.func.vmap batches one: its vmap rule is in
gemmlab.batched); an eager call that autograd records runs `_GemmFunction`, the operator's
forward and gradients without torch.library's dispatch, and one under torch.func's gradient
transforms `_GemmFunctorch`; any other call runs `api.gemm` directly, the same launch. The
operator never writes into a given tensor: `out=` is for eager calls only.

Gradients of D = act(Z), Z = alpha A B + beta C + bias, with dD the incoming gradient: dZ = dD
act'(Z) (Z computed again by the operator without the activation, as the forward keeps no Z: a
caller that trains through an activation does better to apply it itself, as gemmlab.linear does),
dA = alpha dZ B^T and dB = alpha A^T dZ, computed by the operator itself (so by gemmlab's
kernels, which read the transposed views B^T and A^T in place where they can), dC = beta dZ and
dbias = dZ summed over the rows. A 16-bit problem with an fp32 result takes dZ rounded to its
inputs' type for dA and dB, the type they are in.
"""

from functools import partial
from typing import Optional

import torch
from torch import Tensor
from torch._subclasses.functional_tensor import FunctionalTensor

from . import amp, api
from .activations import ACTIVATIONS, post_code
from .problem import problem_from_tensors


# flexible_layout: inductor passes the inputs in whatever strides it made them, and the operator
# takes them as they come (gemm reads row- and column-major operands, rows padded or not). With
# torch's default for custom operators (the strides seen when traced), inductor adds a copy into
# those strides; either way, one graph met an inductor padding bug (_check_in_storage).
_FLEXIBLE = {"tags": (torch.Tag.flexible_layout,)} if hasattr(torch.Tag, "flexible_layout") else {}  # (torch < 2.6: no such tag)


@torch.library.custom_op("gemmlab::gemm", mutates_args=(), device_types=("cpu", "cuda"), **_FLEXIBLE)
def gemm_op(a: Tensor, b: Tensor, c: Optional[Tensor], alpha: float, beta: float, kernel: str, precision: str,
            out_dtype: Optional[torch.dtype], bias: Optional[Tensor] = None,
            activation: Optional[str] = None) -> Tensor:  # fmt: skip
    """D = activation(alpha a @ b + beta c + bias): the CUDA kernels for CUDA tensors, the CPU
    ladder for CPU tensors."""
    return _run(a, b, c, alpha, beta, kernel, precision, out_dtype, bias, activation)


def _run(a, b, c, alpha, beta, kernel, precision, out_dtype, bias, activation, traced: bool = True) -> Tensor:
    """The operator's computation, also _GemmFunction's forward. traced: the inputs may come from
    torch.compile, whose views are checked against their storage (_check_in_storage); eager
    tensors cannot reach past theirs (torch refuses such a view when it is made)."""
    for name, t in (("a", a), ("b", b), ("c", c), ("bias", bias)) if traced else ():
        _check_in_storage(name, t)
    a, b, c = _readable(a, True), _readable(b, True), _readable(c, False)
    return api.gemm(a, b, c, alpha=alpha, beta=beta, kernel=kernel, precision=precision, out_dtype=out_dtype,
                    device="cpu" if a.device.type == "cpu" else None, bias=bias, activation=activation)  # fmt: skip


def _check_in_storage(name: str, t: Optional[Tensor]) -> None:
    """A RuntimeError where t's view reaches past the end of its storage. No tensor a program makes
    does; one made by torch.compile did: with inductor's comprehensive padding (torch 2.11), a
    gradient buffer allocated with rows of 1376 reached the operator viewed at a padded row stride
    of 1408, so its rows ran into each other and past the buffer, and the weight gradient came out
    NaN or near 1e22 (docs/notes/compiled-input-strides.md). Refused rather than read."""
    if t is None or t.numel() == 0:
        return
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    have = t.untyped_storage().nbytes() // t.element_size()
    if last >= have:
        raise RuntimeError(
            f"gemmlab.gemm: {name} is a view of shape {tuple(t.shape)}, strides {t.stride()} and offset "
            f"{t.storage_offset()} that reaches element {last} of a storage of {have}: torch.compile passed "
            "a layout its buffer does not have (an inductor padding bug). Compile with "
            "torch._inductor.config.comprehensive_padding = False, which avoids it"
        )


def _readable(t: Optional[Tensor], transposable: bool) -> Optional[Tensor]:
    """t, or a contiguous copy where its strides are ones gemm does not read (an operand neither
    row- nor column-major, or whose rows overlap, as an expanded one's; a C not row-major): a
    layout the operator's callers may hand it under torch.compile, where its inputs' strides are
    left to inductor, and one that linear, matmul and bmm take as torch's do. A batch ([B, rows,
    cols]) by the strides of its matrices (the batch's own stride is bmm's to judge)."""
    if t is None or t.dim() < 2 or min(t.shape[-2:]) <= 1:
        return t
    rows, cols = t.shape[-2:]
    if t.stride(-1) == 1 and t.stride(-2) >= cols:
        return t
    if transposable and t.stride(-2) == 1 and t.stride(-1) >= rows:
        return t
    return t.contiguous()


@gemm_op.register_fake
def _gemm_fake(a, b, c, alpha, beta, kernel, precision, out_dtype, bias=None, activation=None):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: f"a and b must be matrices, got {a.dim()}-D and {b.dim()}-D")
    torch._check(a.shape[1] == b.shape[0], lambda: f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    torch._check(bias is None or (bias.dim() == 1 and bias.shape[0] == b.shape[1]),
                 lambda: f"bias must be a vector of N = {b.shape[1]} elements, got shape {tuple(bias.shape)}")  # fmt: skip
    torch._check(activation in ACTIVATIONS, lambda: f"activation {activation!r} is not one of {list(ACTIVATIONS)}")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)


def _setup_context(ctx, inputs, output):
    a, b, c, alpha, beta, kernel, precision, out_dtype, bias, activation = inputs
    # Z is computed again from a, b, c and bias where an activation lies between it and D
    again = activation is not None
    ctx.save_for_backward(a if ctx.needs_input_grad[1] or again else None, b if ctx.needs_input_grad[0] or again else None,
                          c if again else None, bias if again else None)  # fmt: skip
    ctx.alpha, ctx.beta, ctx.precision, ctx.input_dtype = alpha, beta, precision, a.dtype
    ctx.kernel, ctx.out_dtype, ctx.activation = kernel, out_dtype, activation
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.a_transposed, ctx.b_transposed = _column_major(a), _column_major(b)


def _column_major(t: Tensor) -> bool:
    """Whether a matrix is stored transposed (a .t() view of a row-major one), as nn.Linear's
    weight.t() is."""
    return t.shape[0] > 1 and t.shape[1] > 1 and t.stride(0) == 1 and t.stride(1) != 1


def _product_in_layout(p: Tensor, q: Tensor, transposed: bool, alpha: float, precision: str) -> Tensor:
    """alpha p @ q, in the layout of the operand it is the gradient of: computed as (q^T @ p^T)^T
    where that operand is stored transposed. Autograd hands a parameter a gradient of its own
    layout as it is, and copies any other into that layout first (for a Linear's weight, read as
    weight.t(), a copy of the whole weight every step)."""
    if transposed:
        return _product(q.t(), p.t(), None, alpha, 0.0, "auto", precision, None).t()
    return _product(p, q, None, alpha, 0.0, "auto", precision, None)


def _on_meta(a, b, c, alpha, beta, kernel, out, precision, out_dtype, bias, activation) -> Tensor:
    """gemm() on meta tensors, as torch's own ops run there: the call checked as on a GPU (the same
    errors), then the operator's shape-only implementation, with its gradients; out= is returned as
    it is."""
    problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta, precision=precision, out_dtype=out_dtype,
                                   device_type="meta")  # fmt: skip
    post_code(bias is not None, activation)  # (the activation's name checked)
    if bias is not None:
        api._bias_for(problem, bias)  # (its errors; the operator converts it itself)
    if out is not None:
        return out
    return gemm_op(a, b, c, float(alpha), float(beta), kernel, precision, out_dtype, bias, activation)


def _product(*args) -> Tensor:
    """A product of the backward pass: through the operator where autograd records it (a backward
    pass with create_graph) or a trace needs it, else launched directly; under torch.func's
    transforms, through _GemmFunctorch, so that they see the backward pass's products too."""
    if _transformed(*args[:3], *args[8:9]) == "grad" and not torch.compiler.is_compiling():
        return _GemmFunctorch.apply(*args, *(None,) * (10 - len(args)))
    if (torch.is_grad_enabled() or not _plain(*args[:3], *args[8:9]) or torch.compiler.is_compiling()
            or args[0].is_meta):
        return gemm_op(*args)
    return _run(*args, *(None,) * (10 - len(args)), traced=False)  # (bias and activation: none unless given)


def _backward(ctx, grad):
    a, b, c, bias = ctx.saved_tensors
    if ctx.activation is not None:  # dZ = dD act'(Z), through torch's own derivative of the activation
        z = _product(a, b, c, ctx.alpha, ctx.beta, ctx.kernel, ctx.precision, ctx.out_dtype, bias, None)
        if torch._C._are_functorch_transforms_active():  # (no requires_grad_() inside a torch.func transform)
            (grad,) = torch.func.vjp(ACTIVATIONS[ctx.activation], z)[1](grad)
        else:
            with torch.enable_grad():
                z = z.detach().requires_grad_()
                (grad,) = torch.autograd.grad(ACTIVATIONS[ctx.activation](z), z, grad)
    g = grad.to(ctx.input_dtype).contiguous()  # (an expanded gradient, as sum() gives, has stride 0)
    product = partial(_product_in_layout, alpha=ctx.alpha, precision=ctx.precision)
    da = product(g, b.t(), ctx.a_transposed) if ctx.needs_input_grad[0] else None
    db = product(a.t(), g, ctx.b_transposed) if ctx.needs_input_grad[1] else None
    dc = grad * ctx.beta if ctx.needs_input_grad[2] else None
    wants_dbias = len(ctx.needs_input_grad) > 8 and ctx.needs_input_grad[8]
    dbias = grad.sum(0).to(ctx.bias_dtype) if wants_dbias else None
    return (da, db, dc, None, None, None, None, None, dbias, None)[: len(ctx.needs_input_grad)]


gemm_op.register_autograd(_backward, setup_context=_setup_context)
amp.register("gemm", amp.cast_gemm_args)  # (under torch.autocast: gemmlab.amp)


class _GemmFunction(torch.autograd.Function):
    """The operator's autograd for eager calls on plain tensors: the same forward (_run) and the same
    gradients (_backward, _setup_context) without torch.library's dispatch, which cost about 90 us
    a forward call and 400 us a backward one on an H100's host, more than a small GEMM's kernel
    (docs/notes/host-time-a-call.md). torch.compile traces, tensor subclasses (fake tensors among
    them) and functorch transforms go through the operator."""

    @staticmethod
    def forward(ctx, *args):
        # (forward with ctx, no setup_context: with one, Function.apply binds its arguments to
        # forward's signature through inspect on every call, tens of microseconds of host time)
        d = _run(*args, traced=False)
        _setup_context(ctx, args, d)
        return d

    backward = staticmethod(_backward)


class _GemmFunctorch(torch.autograd.Function):
    """The operator with its gradients under torch.func's transforms (grad, vjp, jacrev, vmap of
    them: per-sample gradients), which torch's own autograd of a custom operator does not support
    yet (it fails there asking for a setup_context: pytorch/pytorch#170834). The forward is the
    operator (and so its vmap rule, which generate_vmap_rule runs it under), the gradients the
    operator's own (_backward), their products through this Function again; forward-mode AD (jvp,
    jacfwd, hessian as jacfwd of jacrev) through _tangent."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*args):
        return gemm_op(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)
        a, b, c, *_, bias, _activation = inputs
        ctx.save_for_forward(a, b, c, bias)

    backward = staticmethod(_backward)

    @staticmethod
    def jvp(ctx, da, db, dc, *tangents):
        return _tangent(ctx, da, db, dc, tangents[5])


def _tangent(ctx, da, db, dc, dbias):
    """D's tangent, for forward-mode AD: with Z = alpha A B + beta C + bias, dZ = alpha (dA B + A dB)
    + beta dC + dbias (the products on gemmlab's kernels, through _product), and dD = act'(Z) dZ, Z
    computed again: the activation acts element by element, so its Jacobian is diagonal and torch's
    own reverse derivative (vjp) gives the same product -- torch.func.jvp would open a second
    forward level inside torch.autograd.forward_ad's, which torch refuses. In D's dtype."""
    a, b, c, bias = ctx.saved_tensors
    result = ctx.out_dtype or ctx.input_dtype
    terms = [_product(p, q, None, ctx.alpha, 0.0, "auto", ctx.precision, result)
             for p, q in ((da, b), (a, db)) if p is not None and q is not None]  # fmt: skip
    terms += [ctx.beta * dc.to(result)] if dc is not None and ctx.beta != 0 else []
    terms += [dbias.to(result).expand(a.shape[0], b.shape[1])] if dbias is not None else []
    dz = sum(terms[1:], terms[0]) if terms else a.new_zeros((a.shape[0], b.shape[1]), dtype=result)
    if ctx.activation is None:
        return dz
    z = _product(a, b, c, ctx.alpha, ctx.beta, ctx.kernel, ctx.precision, ctx.out_dtype, bias, None)
    return torch.func.vjp(ACTIVATIONS[ctx.activation], z)[1](dz)[0]


_PLAIN = (Tensor, torch.nn.Parameter)
_WRAPPED = torch._C._functorch.is_functorch_wrapped_tensor
_FORWARD_AD = torch.autograd.forward_ad


def dual(*tensors) -> bool:
    """Whether one of these carries a tangent of torch.autograd.forward_ad (a dual tensor), which an
    eager path without a jvp would drop. Outside a dual level (forward_ad's own counter at -1) this
    is one comparison."""
    if _FORWARD_AD._current_level < 0:
        return False
    for t in tensors:
        if isinstance(t, Tensor) and _FORWARD_AD.unpack_dual(t).tangent is not None:
            return True
    return False


def _transformed(*tensors) -> str | None:
    """"grad" where a torch.func transform is running and one of these is tracked by its gradient
    transform (the outermost wrapper: grad inside vmap), "vmap" where one is batched, else None
    (inside a vmap rule, or on tensors the transform does not see, the call is an ordinary one)."""
    if not torch._C._are_functorch_transforms_active():
        return None
    kind = None
    for t in tensors:
        if isinstance(t, Tensor) and _WRAPPED(t):
            if torch._C._functorch.is_gradtrackingtensor(t):
                return "grad"
            kind = "vmap"
    return kind


def _plain(*tensors) -> bool:
    """Whether these are torch's own tensors (or None): no fake tensors or other subclasses."""
    return all(t is None or type(t) in _PLAIN for t in tensors)


def wants_grad(*tensors) -> bool:
    """Whether autograd would record a call on these tensors (grad mode on, one of them requiring
    grad): where gemmlab.linear and conv2d leave the activation to torch, to keep its input."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # (a loop: any() over a generator cost about a microsecond a gemm() call)
        if isinstance(t, Tensor) and t.requires_grad:
            return True
    return False


def _needs_operator(*tensors) -> bool:
    """Under a torch.compile trace, where autograd would record the call, or where a tensor is a
    functional one (AOT autograd tracing a backward pass that calls gemm, as conv2d's does;
    torch.library.opcheck traces so without torch.compile), under torch.func's transforms, or where
    a tensor carries a forward-mode tangent (both through _GemmFunctorch). A fake tensor alone is
    not enough: under FakeTensorMode api.gemm checks the call, with its own errors, and returns a
    fake result."""
    return (torch.compiler.is_compiling() or wants_grad(*tensors) or type(tensors[0]) is FunctionalTensor
            or _transformed(*tensors) or (_FORWARD_AD._current_level >= 0 and dual(*tensors)))
    # (a's type alone: under AOT tracing every tensor of the call is functional, and this runs on
    # every eager gemm() call, where a loop over all four cost host time for nothing)


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out=None, device=None, precision="fp32",
         out_dtype=None, bias=None, activation=None):  # fmt: skip
    """D = activation(alpha * a @ b + beta * c + bias): api.gemm's arguments and result (its
    docstring says what each takes), through the operator torch.ops.gemmlab.gemm where autograd or
    torch.compile needs it, so the result has a grad_fn and a compiled function keeps the call in
    its graph. Inside a CUDA autocast region float32 operands run in its dtype (gemmlab.amp)."""
    region = amp.region_dtype(a, precision, out)
    if region is not None:
        a, b, c, bias = amp.cast_operands(region, a, b, c, bias, out_dtype)
    if isinstance(a, Tensor) and a.is_meta:  # shapes only (a model on the meta device)
        return _on_meta(a, b, c, alpha, beta, kernel, out, precision, out_dtype, bias, activation)
    if not _needs_operator(a, b, c, bias) or not (isinstance(a, Tensor) and (a.device.type == "cuda" or device == "cpu")):
        return api.gemm(a, b, c, alpha=alpha, beta=beta, kernel=kernel, out=out, device=device, precision=precision,
                        out_dtype=out_dtype, bias=bias, activation=activation)  # fmt: skip
    if out is not None:
        raise ValueError("out= writes in place, which autograd and torch.compile cannot follow: "
                         "use the returned tensor (d = gemmlab.gemm(a, b, ...))")  # fmt: skip
    args = (a, b, c, float(alpha), float(beta), kernel, precision, out_dtype, bias, activation)
    if torch.compiler.is_compiling() or not _plain(a, b, c, bias):
        return gemm_op(*args)
    if torch._C._are_functorch_transforms_active():  # (batched, or inside a vmap rule: the operator)
        return _GemmFunctorch.apply(*args) if _transformed(a, b, c, bias) == "grad" else gemm_op(*args)
    if dual(a, b, c, bias):  # tangents of torch.autograd.forward_ad: the Function with a jvp
        return _GemmFunctorch.apply(*args)
    return _GemmFunction.apply(*args)
