"""Batched GEMM: `bmm(a, b)` over a batch of matrices, as torch.bmm and torch.matmul take them.

D[i] = activation(alpha A[i] B[i] + beta C[i] + bias) for i in the batch, with A [B, M, K] and
B [B, K, N], or one of them a single matrix shared by the whole batch:
- A [B, M, K] against a shared B [K, N] (a Linear layer over a batch of sequences) is one GEMM: the
  batch's rows stacked, [B*M, K] @ [K, N], one launch, with no copy where A's rows are evenly
  strided (a contiguous A, or any view whose matrices follow one another).
- Otherwise each matrix of the batch is its own launch of gemmlab.gemm, in order on the current
  stream. One launch for a whole batch of distinct B matrices needs kernels that step a batch
  stride (gridDim.z); none does yet.
Every call goes through gemmlab.gemm, so through its operator where autograd or torch.compile needs
it: gradients and traces come as gemm's do.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .ops import gemm


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
        out_dtype=None, bias=None, activation=None, device=None) -> Tensor:  # fmt: skip
    """activation(alpha * a @ b + beta * c + bias) over a batch: a [B, M, K] or [M, K], b [B, K, N]
    or [K, N] (at least one of them batched; batch sizes equal), c [B, M, N] or None; the other
    arguments as gemmlab.gemm takes them. Returns D [B, M, N]. device="cpu" runs the CPU ladder."""
    for name, t in (("a", a), ("b", b)):
        bad = _rank_error(name, t)
        if bad:
            raise TypeError(bad) if "torch tensor" in bad else ValueError(bad)
    if a.dim() == 2 and b.dim() == 2:
        raise ValueError("neither a nor b has a batch dimension: use gemmlab.gemm for one product")
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"batch sizes differ: a has {a.shape[0]} matrices, b has {b.shape[0]}")
    M, K = a.shape[-2:]
    if b.shape[-2] != K:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    N = b.shape[-1]
    if c is not None and (not isinstance(c, Tensor) or tuple(c.shape) != (batch, M, N)):
        raise ValueError(f"c must be [{batch}, {M}, {N}], got {tuple(getattr(c, 'shape', ()))}")
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
