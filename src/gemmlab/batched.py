"""Batched GEMM: `bmm(a, b)` over a batch of matrices, as torch.bmm and torch.matmul take them.

D[i] = activation(alpha A[i] B[i] + beta C[i] + bias) for i in the batch, with A [B, M, K] and
B [B, K, N], or one of them a single matrix shared by the whole batch:
- A [B, M, K] against a shared B [K, N] (a Linear layer over a batch of sequences) is one GEMM: the
  batch's rows stacked, [B*M, K] @ [K, N], one launch, with no copy where A's rows are evenly
  strided (a contiguous A, or any view whose matrices follow one another).
- Otherwise each matrix of the batch is its own launch of gemmlab.gemm, in order on the current
  stream, and the results are stacked.
- One launch for the whole batch (bf16/fp16, a [B, M, K] or [M, K] A with a [B, K, N] B, on a
  Hopper GPU): tc07's batched build (gemmlab.batched_tc07), whose tile loop walks every product's
  tiles and whose 3-D tensor maps keep each matrix's edges: taken by default where it can serve
  the call (ONE_LAUNCH; one_launch=False asks for the per-matrix launches). It fuses
  a bias and an activation as gemm() does. Where an input requires grad (eager), the one launch
  runs under its own autograd Function (_BmmFunction), whose gradients are one launch each too;
  under torch.compile bmm takes the per-matrix path (one_launch=True then raises).
The per-matrix and stacked paths go through gemmlab.gemm, so through its operator where autograd or
torch.compile needs it: gradients and traces come as gemm's do.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import amp, batched_tc07
from .activations import ACTIVATIONS
from .ops import _plain, _readable, dual, gemm, gemm_op, wants_grad

# Whether bmm takes the one-launch path (batched_tc07) wherever it can serve a call: on since its
# GPU tests (tests/test_batched_tc07.py) and the fuzz's batched problems passed on an H100, where it
# ran 0.96x torch.bmm in GPU time as a geometric mean (with its staged epilogue; 0.70x storing from
# registers) against the per-matrix launches' 0.31x (bmm-bench, bmm-20261127T182505Z).
ONE_LAUNCH = True


def _rank_error(name: str, t) -> str | None:
    if not isinstance(t, Tensor):
        return f"{name} must be a torch tensor, got {type(t).__name__}"
    if t.dim() not in (2, 3):
        return f"{name} must be [batch, rows, cols] or a single [rows, cols] matrix, got shape {tuple(t.shape)}"
    return None


def _stacked_rows(a: Tensor) -> Tensor | None:
    """A [B, M, K] as the [B*M, K] matrix of its rows without a copy, where its matrices follow
    one another at an even row stride; else None."""
    B, M, K = a.shape
    if K > 1 and a.stride(2) != 1:
        return None
    row = a.stride(1) if M > 1 else a.stride(0)  # (a dimension of size 1 may have any stride)
    if B > 1 and M > 0 and a.stride(0) != M * row:
        return None
    return a.as_strided((B * M, K), (row, 1))


def bmm(a: Tensor, b: Tensor, c: Tensor | None = None, *, alpha=1.0, beta=0.0, kernel="auto", precision="fp32",
        out_dtype=None, bias=None, activation=None, device=None, one_launch=None) -> Tensor:  # fmt: skip
    """activation(alpha * a @ b + beta * c + bias) over a batch: a [B, M, K] or [M, K], b [B, K, N]
    or [K, N] (at least one of them batched; batch sizes equal), c [B, M, N] or None; the other
    arguments as gemmlab.gemm takes them. Returns D [B, M, N]. device="cpu" runs the CPU ladder.
    one_launch: True the whole batch in one launch of tc07's batched build (a ValueError says why
    where it cannot serve the call); False the per-matrix launches; None (the default) as
    ONE_LAUNCH says, where the one-launch path can serve the call. Inside a CUDA autocast region,
    as torch.bmm, float32 operands run in its dtype (gemmlab.amp)."""
    for name, t in (("a", a), ("b", b)):
        bad = _rank_error(name, t)
        if bad:
            raise TypeError(bad) if "torch tensor" in bad else ValueError(bad)
    region = amp.region_dtype(a, precision)
    if region is not None:
        a, b, c, bias = amp.cast_operands(region, a, b, c, bias, out_dtype)
    if a.dim() == 2 and b.dim() == 2:
        raise ValueError("neither a nor b has a batch dimension: use gemmlab.gemm for one product")
    a, b = _readable(a, True), _readable(b, True)  # (matrices gemm cannot read copied, as torch.bmm takes any strides)
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"batch sizes differ: a has {a.shape[0]} matrices, b has {b.shape[0]}")
    M, K = a.shape[-2:]
    if b.shape[-2] != K:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    N = b.shape[-1]
    if c is not None and (not isinstance(c, Tensor) or tuple(c.shape) != (batch, M, N)):
        raise ValueError(f"c must be [{batch}, {M}, {N}], got {tuple(getattr(c, 'shape', ()))}")
    if one_launch and device is not None:
        raise ValueError("bmm(one_launch=True): device= picks the CPU ladder; the one-launch path runs on CUDA tensors")
    # asked for, or by default once ONE_LAUNCH is on: where b is batched (a batch against one B is
    # one launch below already, its rows stacked)
    if one_launch or (one_launch is None and ONE_LAUNCH and device is None and b.dim() == 3):
        grad = wants_grad(a, b, c, bias)  # the activation then by torch, which keeps its input for the gradient
        why = _one_launch_refusal(a, b, c, alpha, beta, kernel, out_dtype, bias, None if grad else activation)
        if why is None and grad:
            d = _BmmFunction.apply(a, b, c, float(alpha), float(beta), out_dtype, bias)
            return d if activation is None else ACTIVATIONS[activation](d)
        if why is None:
            return batched_tc07.bmm_one_launch(a, b, c, alpha=alpha, beta=beta, out_dtype=out_dtype, bias=bias,
                                                activation=activation)
        if one_launch:
            raise ValueError(f"bmm(one_launch=True): {why}")
    kw = dict(alpha=alpha, beta=beta, kernel=kernel, precision=precision, out_dtype=out_dtype, bias=bias,
              activation=activation, device=device)  # fmt: skip
    if a.dim() == 3 and b.dim() == 2:
        rows = _stacked_rows(a)
        c_rows = None if c is None else _stacked_rows(c)
        if rows is not None and (c is None or c_rows is not None):  # one launch for the whole batch
            return gemm(rows, b, c_rows, **kw).reshape(batch, M, N)
    parts = [gemm(a[i] if a.dim() == 3 else a, b[i] if b.dim() == 3 else b, None if c is None else c[i], **kw)
             for i in range(batch)]  # fmt: skip
    if not parts:
        result = out_dtype or a.dtype
        return torch.empty((0, M, N), dtype=result, device=a.device)
    return torch.stack(parts)


def _one_launch_refusal(a, b, c, alpha, beta, kernel, out_dtype, bias, activation) -> str | None:
    """Why the one-launch path cannot serve this call, or None."""
    if kernel not in ("auto", batched_tc07.SPEC.id.removesuffix("_batched")):
        return f"kernel={kernel!r} asks for per-matrix launches of that kernel; the one-launch path is tc07's batched build"
    if torch.compiler.is_compiling() or not _plain(a, b, c, bias) or torch._C._are_functorch_transforms_active():
        return ("under torch.compile (or over fake tensors) the per-matrix path's operators trace; the one-launch path "
                "is no operator yet")  # fmt: skip
    if dual(a, b, c, bias):
        return "dual tensors (forward-mode AD) take the per-matrix path, whose products carry their tangents"
    if batched_tc07.prepared(a, b, c, alpha=alpha, beta=beta, out_dtype=out_dtype, bias=bias, activation=activation):
        return None  # a call of this kind was served before: nothing in the refusal has changed
    return batched_tc07.refusal(a, b, c, beta=beta, out_dtype=out_dtype, bias=bias, activation=activation)


class _BmmFunction(torch.autograd.Function):
    """bmm's one launch with its gradients, for an eager call that autograd records: D = alpha A B +
    beta C + bias over the batch (B batched; A batched or one [M, K] matrix for every product),
    dA = alpha dD B^T and dB = alpha A^T dD each one more launch of the batched build (B^T and A^T
    per-matrix transposed views, read in place), dA of a shared A the sum over the batch of its
    products (made in fp32, rounded once), dC = beta dD, dbias = dD summed over the batch and the
    rows. As gemm()'s gradients, an fp32 result of 16-bit inputs takes dD rounded to their type.
    With create_graph the gradients are bmm calls that autograd records in turn."""

    @staticmethod
    def forward(ctx, a, b, c, alpha: float, beta: float, out_dtype, bias):
        d = batched_tc07.bmm_one_launch(a, b, c, alpha=alpha, beta=beta, out_dtype=out_dtype, bias=bias)
        ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
        ctx.alpha, ctx.beta, ctx.input_dtype, ctx.shared_a = alpha, beta, a.dtype, a.dim() == 2
        ctx.bias_dtype = None if bias is None else bias.dtype
        return d

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        g = grad.to(ctx.input_dtype).contiguous()  # (an expanded gradient, as sum() gives, has stride 0)
        da = db = dc = dbias = None
        if ctx.needs_input_grad[0]:
            if ctx.shared_a:  # one A for every product: its gradient sums theirs
                da = bmm(g, b.transpose(1, 2), alpha=ctx.alpha, out_dtype=torch.float32).sum(0).to(ctx.input_dtype)
            else:
                da = bmm(g, b.transpose(1, 2), alpha=ctx.alpha)
        if ctx.needs_input_grad[1]:
            db = bmm(a.transpose(-2, -1), g, alpha=ctx.alpha)
        if ctx.needs_input_grad[2]:
            dc = grad * ctx.beta
        if ctx.needs_input_grad[6]:
            dbias = grad.sum((0, 1)).to(ctx.bias_dtype)
        return da, db, dc, None, None, None, dbias


@gemm_op.register_vmap
def _gemm_vmap(info, in_dims, a, b, c, alpha, beta, kernel, precision, out_dtype, bias=None, activation=None):
    """torch.func.vmap over gemmlab::gemm (and so over gemm(), linear() and matmul(), which reach the
    operator under a transform): the mapped dimension moved to the front, the products are one bmm()
    over the batch (one launch, or a's rows stacked against a shared b, where bmm can), c expanded
    where only it is shared; a mapped bias, or a batch whose operands a and b are both shared, runs
    the operator once a batch element. The result carries the batch in front."""
    dims = (*in_dims, *(None,) * (10 - len(in_dims)))  # (one a given argument: bias and activation may be left out)
    a, b, c, bias = (t if d is None else t.movedim(d, 0) for t, d in zip((a, b, c, bias), (*dims[:3], dims[8])))
    mapped = [d is not None for d in dims]
    if mapped[8] or not (mapped[0] or mapped[1]):
        def each(t, i, on):
            return t[i] if on else t

        parts = [gemm_op(each(a, i, mapped[0]), each(b, i, mapped[1]), each(c, i, mapped[2]), alpha, beta, kernel,
                         precision, out_dtype, each(bias, i, mapped[8]), activation) for i in range(info.batch_size)]  # fmt: skip
        return torch.stack(parts), 0
    if c is not None and not mapped[2]:
        c = c.expand(info.batch_size, *c.shape)
    d = bmm(a, b, c, alpha=alpha, beta=beta, kernel=kernel, precision=precision, out_dtype=out_dtype, bias=bias,
            activation=activation, device="cpu" if a.device.type == "cpu" else None)  # fmt: skip
    return d, 0


def matmul(a: Tensor, b: Tensor, *, kernel="auto", precision="fp32", out_dtype=None, device=None) -> Tensor:
    """a @ b with torch.matmul's semantics on gemmlab's kernels: 1-D operands are vectors (a's gets
    a row dimension, b's a column, removed from the result), 2-D ones one product (gemm), and
    anything with more dimensions a batch over the leading ones, broadcast against each other as
    torch broadcasts them. A batch against a 2-D b stacks a's rows into one GEMM (a view where a's
    matrices follow one another); a batched b goes to bmm over the batch flattened (broadcast
    operands are expanded, as torch.matmul expands them). The keywords as gemmlab.gemm takes them.
    Gradients and torch.compile come through gemm and bmm; a CUDA autocast region, as torch.matmul,
    runs float32 operands in its dtype (gemmlab.amp), cast before any broadcast copy."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError(f"{name} is a scalar (0-d): matmul needs at least one dimension on each side")
    region = amp.region_dtype(a, precision)
    if region is not None:
        a, b = amp.cast(a, region), amp.cast(b, region)
    kw = dict(kernel=kernel, precision=precision, out_dtype=out_dtype, device=device)
    A = a.unsqueeze(0) if a.dim() == 1 else a  # [..., M, K]
    B = b.unsqueeze(-1) if b.dim() == 1 else b  # [..., K, N]
    M, K = A.shape[-2:]
    N = B.shape[-1]
    if B.shape[-2] != K:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if A.dim() == 2 and B.dim() == 2:  # (views gemm cannot read copied, as torch.matmul takes any strides)
        d = gemm(_readable(A, True), _readable(B, True), **kw)
    elif B.dim() == 2:  # a batch against one matrix: a's rows stacked, one GEMM
        d = gemm(_readable(A.reshape(math.prod(A.shape[:-1]), K), True), _readable(B, True), **kw).reshape(*A.shape[:-1], N)
    else:
        try:
            batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        except RuntimeError:
            raise ValueError(f"batch dimensions do not broadcast: a is {tuple(a.shape)}, b is {tuple(b.shape)}") from None
        n = math.prod(batch)  # (not -1 in the reshapes: a batch of empty matrices has no size to infer)
        a3 = A if A.dim() == 2 else A.expand(*batch, M, K).reshape(n, M, K)
        d = bmm(a3, B.expand(*batch, K, N).reshape(n, K, N), **kw).reshape(*batch, M, N)
    if a.dim() == 1:
        d = d.squeeze(-2)
    return d.squeeze(-1) if b.dim() == 1 else d
