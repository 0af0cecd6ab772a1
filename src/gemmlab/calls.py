"""gemm()'s table of kinds of call: a repeated call of one kind launches from what its first call
worked out, without reading and checking its arguments again.

A kind of call (`key`) is everything the checks, the kernel's choice and the launch's arguments
depend on: each tensor's shape, strides, dtype, device, negative-view bit and the 16-byte class of
its address (the choice and the TMA maps look at alignment, never at the address itself), alpha
and beta exactly (their sign of zero too: alpha = -0.0 writes -0.0), out_dtype, the bias's, the
activation, the kernel and the precision asked for. What a call's values may make wrong and the
key cannot hold -- out overlapping an operand: addresses -- is checked again on every call (api).
A call whose arguments are not all of the plain types the full path reads at once (an alpha of
numpy's float, a tensor subclass such as FakeTensor, a kernel that is not a str) has no key and
takes the full path, which checks everything, every time.

Entries are immutable and put whole into a dict, so threads may share the table under the GIL;
past _CALLS_MAX kinds it starts again. FAST_PATH = False (or `fast_path(False)`) sends every call
down the full path, for tests and benchmarks that compare the two.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import torch

from .settings import setting

FAST_PATH = True

_CALLS: dict[tuple, Call] = {}
_CALLS_MAX = 1024  # kinds of call remembered; past it the table starts again

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_WORDS = (str, type(None))


def fast_path(on: bool = True):
    """Within it, repeated gemm() calls of a kind launch from its table (on) or take the full path
    (off); FAST_PATH as it was after."""
    return setting(sys.modules[__name__], "FAST_PATH", on)


class Call(NamedTuple):
    """What the first call of a kind worked out. problem: the GemmProblem the kernel was launched
    for, given: the one the arguments described (the same object unless gemm() handed the kernel
    row-major copies of operands stored transposed); their addresses are the first call's, and
    api puts each call's own in, keeping the shapes, strides and extents. bias_direct: the bias is
    read as given (contiguous, of the result's type); torch_post: torch applies the epilogue after
    the launch."""

    plan: object  # api._Plan
    problem: object  # problem.GemmProblem
    given: object  # problem.GemmProblem
    bias_direct: bool
    torch_post: bool  # the kernel does not fuse the bias and activation asked for: torch applies them after
    # the kernel reads the caller's tensors where they are and writes out itself (no copies, no
    # padded D, no split operands): a hit passes their addresses straight to the launch
    # (api._launch_kernel), with the TMA maps the plan made for those addresses, without a
    # GemmProblem of its own (one is made only where the maps of new addresses are made)
    direct: bool = False


def _tensor(t) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16, t.is_neg())


def _number(x) -> tuple | None:
    """x exactly (the sign of a zero with it), for an int or a float; None for anything else."""
    if type(x) is float or type(x) is int:
        x = float(x)
        return (x, math.copysign(1.0, x))
    return None


def key(a, b, c, out, alpha, beta, kernel, precision, out_dtype, bias, activation) -> tuple | None:
    """The kind of gemm() call these arguments make, or None where it takes the full path every time
    (arguments of other types than the plain ones; an error from reading a tensor is the full
    path's to raise)."""
    if not (type(a) in _PLAIN and type(b) in _PLAIN and (c is None or type(c) in _PLAIN)
            and (out is None or type(out) in _PLAIN) and (bias is None or type(bias) in _PLAIN)
            and type(kernel) is str and type(precision) is str and type(activation) in _WORDS
            and (out_dtype is None or type(out_dtype) is torch.dtype)):  # fmt: skip
        return None
    scalars = _number(alpha), _number(beta)
    if scalars[0] is None or scalars[1] is None:
        return None
    try:
        return (_tensor(a), _tensor(b), None if c is None else _tensor(c), None if out is None else _tensor(out),
                *scalars, kernel, precision, out_dtype, None if bias is None else _tensor(bias), activation)  # fmt: skip
    except RuntimeError:  # (a tensor without strides or storage: the full path says what is wrong)
        return None


def remember(k: tuple, call: Call) -> None:
    if len(_CALLS) >= _CALLS_MAX:
        _CALLS.clear()
    _CALLS[k] = call


def clear() -> None:
    _CALLS.clear()
