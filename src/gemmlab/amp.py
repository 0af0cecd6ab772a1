"""gemmlab's products under `torch.autocast("cuda", dtype=...)`, as torch's own: torch.mm, addmm,
bmm, matmul, linear and conv2d are on autocast's list of ops that run in the lower precision, so
inside an autocast region gemm(), linear(), bmm(), matmul(), conv2d() and the nn modules cast
their float32 CUDA operands to the region's dtype (bf16 or fp16) and run on the tensor cores, and
so does the operator torch.ops.gemmlab.gemm (and the convolution operators) where torch.compile or
a caller dispatches it.

The rule is torch's: a floating-point tensor other than float64 and not already in the region's
dtype is cast (Tensor.to, which autograd records, so a float32 parameter gets a float32
gradient); everything else keeps its type. A call keeps all its types where
- it writes into out= (torch's out= forms do not autocast either);
- it names float32's tensor-core math, precision="tf32" or "3xtf32" (an explicit choice for float32,
  as torch leaves an op alone that is given an explicit dtype);
- its tensors are CPU tensors: gemmlab's CPU ladder computes in float32 only, so
  torch.autocast("cpu") leaves gemmlab's CPU calls as they are.
c, the addend, is cast to the result's type: out_dtype where the call gives one (bf16 operands with
a float32 result, say), else the region's dtype.
"""

import torch
from torch import Tensor

_KEY = "AutocastCUDA"


def region_dtype(t, precision: str = "fp32", out=None) -> torch.dtype | None:
    """The dtype an enclosing CUDA autocast region asks of a product on t, or None where the call keeps
    its types (no such region; out= given; precision naming float32's tensor-core math; t not a
    CUDA tensor). A microsecond-cheap no where no autocast region is open at all."""
    if not torch._C._is_any_autocast_enabled():
        return None
    if out is not None or precision != "fp32" or not isinstance(t, Tensor) or t.device.type != "cuda":
        return None
    return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None


def cast(t, dtype: torch.dtype):
    """t in dtype where autocast casts it (a floating-point tensor other than float64, not already
    in dtype), else t as it is (None, integer tensors, float64)."""
    if isinstance(t, Tensor) and t.dtype != dtype and t.is_floating_point() and t.dtype != torch.float64:
        return t.to(dtype)
    return t


def cast_operands(dtype: torch.dtype, a, b, c, bias, out_dtype=None) -> tuple:
    """a, b and bias in the region's dtype, c in the result's (out_dtype where given)."""
    return cast(a, dtype), cast(b, dtype), cast(c, out_dtype or dtype), cast(bias, dtype)


def cast_gemm_args(dtype: torch.dtype, a, b, c, alpha, beta, kernel, precision, out_dtype, bias=None, activation=None):
    """torch.ops.gemmlab.gemm's arguments as the region casts them (cast_operands); none where
    precision names float32's tensor-core math."""
    if precision == "fp32":
        a, b, c, bias = cast_operands(dtype, a, b, c, bias, out_dtype)
    return a, b, c, alpha, beta, kernel, precision, out_dtype, bias, activation


def cast_conv_args(dtype: torch.dtype, x, weight, bias, *rest):
    """A convolution operator's arguments (x, weight, bias, then its geometry) as the region casts
    them: the three tensors to its dtype."""
    return (cast(x, dtype), cast(weight, dtype), cast(bias, dtype), *rest)


_LIB = torch.library.Library("gemmlab", "IMPL")


def register(op_name: str, cast_args) -> None:
    """A kernel for torch.ops.gemmlab.<op_name> under CUDA autocast: the arguments cast as
    cast_args(region dtype, *args) says, then the operator below autocast. (torch.library's own
    register_autocast casts to one dtype fixed when it is registered; a region may ask for bf16 or
    fp16, read here on each call.)"""
    op = getattr(torch.ops.gemmlab, op_name).default

    def kernel(_keyset, *args):  # (the dispatcher hands every argument by position: none is keyword-only)
        dtype = torch.get_autocast_dtype("cuda")
        with torch.autocast("cuda", enabled=False):
            return op(*cast_args(dtype, *args))

    _LIB.impl(op_name, kernel, _KEY, with_keyset=True)
