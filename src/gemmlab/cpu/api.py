"""gemm(..., device='cpu'): the CPU ladder on numpy arrays or CPU tensors, with the same checks
as the GPU path."""

from __future__ import annotations

import numpy as np
import torch

from ..configs import select
from ..problem import problem_from_tensors


def _as_tensor(name: str, x):
    if x is None or isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)  # shares memory: results land in the caller's array
    raise TypeError(f"{name} must be a numpy array or a torch.Tensor, got {type(x).__name__}")


def run_kernel(spec, cfg, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, d: np.ndarray, alpha: float, beta: float):
    """Call one CPU kernel on validated numpy views."""
    from . import kernels

    fn = getattr(kernels, spec.entry)
    c_arg = c if c is not None else d  # never read when beta == 0
    fn(a, b, c_arg, d, np.float32(alpha), np.float32(beta), *(v for _, v in cfg.values))


def gemm_cpu(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out=None):
    """D = alpha * a @ b + beta * c on the CPU. Returns a numpy array if a is one, else a tensor."""
    numpy_in = isinstance(a, np.ndarray)
    ta, tb, tc, tout = (_as_tensor(n, x) for n, x in (("a", a), ("b", b), ("c", c), ("out", out)))
    problem = problem_from_tensors(ta, tb, tc, tout, alpha=alpha, beta=beta, device_type="cpu")
    if problem.layout != "nn":  # the CPU kernels walk row-major operands: copy the transposed ones
        ta, tb = (t.contiguous() if o.trans else t for t, o in ((ta, problem.a), (tb, problem.b)))
        problem = problem_from_tensors(ta, tb, tc, tout, alpha=alpha, beta=beta, device_type="cpu")
    spec, cfg = select(problem, kernel)
    if tout is None:
        tout = torch.empty((problem.M, problem.N), dtype=problem.dtype)
    if not problem.is_empty:
        npc = tc.numpy() if tc is not None else None
        run_kernel(spec, cfg, ta.numpy(), tb.numpy(), npc, tout.numpy(), problem.alpha, problem.beta)
    if out is not None:
        return out
    return tout.numpy() if numpy_in else tout
