"""GemmProblem: what one call asks for, read off the tensors and checked before any launch.

Every check raises TypeError (wrong kind of thing: not a tensor, wrong dtype) or ValueError
(right kind, wrong value: shape, device, strides, aliasing) with a message that names the
argument and says what to do. Nothing here touches the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import numbers
from typing import NamedTuple

import torch

INT32_MAX = 2**31 - 1


class Operand(NamedTuple):
    """One matrix as it lies in memory: rows x cols stored row-major with leading dimension ld
    (elements), its address, and the address one past its last element (== ptr when empty), for
    overlap checks. trans: the argument is the transposed view of that storage (a column-major
    view, such as w.t() of a row-major [N, K] weight), its shape cols x rows."""

    rows: int
    cols: int
    ld: int
    ptr: int
    end: int
    trans: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the argument (the storage's, transposed back where trans)."""
        return (self.cols, self.rows) if self.trans else (self.rows, self.cols)


@dataclass(slots=True)
class GemmProblem:
    """D = alpha * A @ B + beta * C, with A [M, K], B [K, N], C and D [M, N]: C and D row-major, A
    and B row-major or stored transposed (Operand.trans; `layout`)."""

    M: int
    N: int
    K: int
    dtype: torch.dtype
    device: torch.device
    a: Operand
    b: Operand
    c: Operand | None
    d: Operand | None  # None: the output is allocated by gemm()
    alpha: float
    beta: float
    precision: str = "fp32"  # float32 inputs: "fp32" (FFMA), "tf32" (TF32 tensor cores) or "3xtf32" (fp32-accurate, on them)
    out_dtype: torch.dtype | None = None  # the type of C and D: dtype, or float32 for 16-bit inputs

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out_dtype or self.dtype

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def is_empty(self) -> bool:
        return self.M == 0 or self.N == 0

    @property
    def shape(self) -> str:
        return f"M={self.M} N={self.N} K={self.K}" + (f" ({self.layout})" if self.layout != "nn" else "")

    def row_major(self) -> GemmProblem:
        """The problem as a kernel sees it when gemm() hands it row-major copies of the operands
        stored transposed (fresh, aligned allocations)."""
        def copy(o: Operand) -> Operand:
            rows, cols = o.shape
            return Operand(rows, cols, max(cols, 1), 0, 0) if o.trans else o

        return replace(self, a=copy(self.a), b=copy(self.b))

    @property
    def layout(self) -> str:
        """How A and B lie in memory: "nn" both row-major; "nt", "tn", "tt" with B, A or both
        stored transposed (column-major views)."""
        return ("t" if self.a.trans else "n") + ("t" if self.b.trans else "n")



def _operand(name: str, t: torch.Tensor, itemsize: int, transposable: bool = False) -> Operand:
    """Check that t is a 2-D matrix with unit column stride (row-major), or, where transposable (a
    and b), unit row stride (column-major: a transposed view such as w.t()); return a description
    of its storage. (gemm() runs this on every call: it reads each property of t once.)"""
    shape = t.shape
    if len(shape) != 2:
        batch = " (a batch of products: gemmlab.bmm or gemmlab.matmul)" if len(shape) > 2 else ""
        raise ValueError(f"{name} must be a 2-D matrix, got {len(shape)}-D shape {tuple(shape)}{batch}")
    rows, cols = shape
    if t.is_conj() or t.is_neg():
        raise ValueError(f"{name} is a lazy conjugate/negative view; call .resolve_conj()/.resolve_neg()")
    ptr = t.data_ptr()
    if rows == 0 or cols == 0:
        return Operand(rows, cols, max(cols, 1), ptr, ptr)
    row_stride, col_stride = t.stride()
    trans = cols > 1 and col_stride != 1
    if trans:
        if not transposable or (rows > 1 and row_stride != 1):
            kind = "row-major (unit column stride)" + (" or column-major (unit row stride)" if transposable else "")
            raise ValueError(
                f"{name} must be {kind}, got strides {t.stride()} for shape {tuple(shape)} "
                f"(a sliced or permuted view?); pass {name}.contiguous()"
            )
        rows, cols, row_stride = cols, rows, col_stride  # the storage: the transposed view's rows
    ld = row_stride if rows > 1 else cols
    if ld < cols:
        what = ("column stride", "rows") if trans else ("row stride", "columns")
        raise ValueError(
            f"{name} {'columns' if trans else 'rows'} overlap: {what[0]} {row_stride} < {cols} {what[1]}; "
            f"pass {name}.contiguous()"
        )
    if ld > INT32_MAX or rows > INT32_MAX:  # (cols <= ld)
        raise ValueError(f"{name} is too large for 32-bit indices: shape {tuple(shape)}, stride {ld}")
    return Operand(rows, cols, ld, ptr, ptr + (ld * (rows - 1) + cols) * itemsize, trans)


def _scalar(name: str, value) -> float:
    if type(value) is float or type(value) is int:  # the common case, without the ABC check
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _overlaps(x: Operand, y: Operand) -> bool:
    return x.ptr < y.end and y.ptr < x.end  # empty ranges (end == ptr) never overlap


# The arithmetic of a float32 problem: "fp32" (FFMA, the default), "tf32" (the TF32 tensor cores,
# ~1e-3 relative error) or "3xtf32" (three TF32 products a product: fp32's accuracy on the tensor
# cores). The tensor cores only when asked for.
PRECISIONS = ("fp32", "tf32", "3xtf32")


def problem_from_tensors(
    a, b, c=None, out=None, *, alpha=1.0, beta=0.0, device_type: str = "cuda", precision: str = "fp32",
    out_dtype: torch.dtype | None = None,
) -> GemmProblem:  # fmt: skip
    """Validate the arguments of gemm() and describe the problem, or raise a clear error.

    device_type is the kind of device the tensors must live on ("cuda" for the GPU kernels,
    "cpu" for the CPU ladder). out_dtype: the type of the result (and of c): the inputs' type by
    default, or float32 for bf16/fp16 inputs (fp32 accumulators written without rounding to 16
    bits); an out tensor's dtype says it too.
    """
    Tensor = torch.Tensor
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and (c is None or isinstance(c, Tensor))
            and (out is None or isinstance(out, Tensor))):  # fmt: skip
        for n, t in _present(a, b, c, out):
            if not isinstance(t, Tensor):
                raise TypeError(f"{n} must be a torch.Tensor, got {type(t).__name__}")
    device = a.device
    dtype = a.dtype
    result = dtype if out is None and out_dtype is None else _result_dtype(dtype, out_dtype, out)
    if not (device.type == device_type and b.device == device and b.dtype == dtype
            and (c is None or (c.device == device and c.dtype == result))
            and (out is None or (out.device == device and out.dtype == result))):  # fmt: skip
        _explain_mismatch(_present(a, b, c, out), device_type, result)
    alpha_f, beta_f = _scalar("alpha", alpha), _scalar("beta", beta)

    size = dtype.itemsize
    oa, ob = _operand("a", a, size, True), _operand("b", b, size, True)
    M, K = oa.shape
    if ob.shape[0] != K:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
            f"(a.shape[1] must equal b.shape[0])"
        )
    N = ob.shape[1]
    oc = od = None
    if c is not None:
        if tuple(c.shape) != (M, N):
            raise ValueError(f"c must have shape ({M}, {N}) = (a.shape[0], b.shape[1]), got {tuple(c.shape)}")
        oc = _operand("c", c, result.itemsize)
    elif beta_f != 0.0:
        raise ValueError(f"beta={beta_f} needs c: pass c= or set beta=0")
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out must have shape ({M}, {N}), got {tuple(out.shape)}")
        od = _operand("out", out, result.itemsize)
        for n, o in (("a", oa), ("b", ob)):
            if _overlaps(od, o):
                raise ValueError(
                    f"out overlaps {n} in memory (their address ranges intersect); writing the "
                    f"result could corrupt an input: give out its own memory"
                )
        if oc is not None and _overlaps(od, oc) and (od.ptr, od.ld) != (oc.ptr, oc.ld):
            raise ValueError("out partially overlaps c; pass out=c exactly for an in-place update, or separate memory")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision in ("tf32", "3xtf32") and dtype != torch.float32:
        raise ValueError(f"precision={precision!r} is for float32 inputs; {dtype} inputs use their own tensor-core math")
    return GemmProblem(M, N, K, dtype, device, oa, ob, oc, od, alpha_f, beta_f, precision,
                       result if result != dtype else None)  # fmt: skip


def fresh_problem(M: int, N: int, K: int, dtype: torch.dtype, *, layout: str = "nn", precision: str = "fp32",
                  out_dtype: torch.dtype | None = None, device: torch.device | str = "cuda") -> GemmProblem:  # fmt: skip
    """The problem gemm(a, b) sees for freshly allocated a [M, K] and b [K, N] of dtype on device,
    each a transposed view where layout says so ("nt": b = w.t() of a [N, K] weight, as x @ w.t()
    passes it), beta 0 and a new result: what `gemmlab compile --shape` warms the cache for. Built
    from meta tensors, so nothing is allocated (their address, 0, is as aligned as a fresh one)."""
    if layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"layout must be nn, nt, tn or tt, got {layout!r}")

    def operand(rows: int, cols: int, trans: bool) -> torch.Tensor:
        t = torch.empty((cols, rows) if trans else (rows, cols), dtype=dtype, device="meta")
        return t.t() if trans else t

    a, b = operand(M, K, layout[0] == "t"), operand(K, N, layout[1] == "t")
    problem = problem_from_tensors(a, b, device_type="meta", precision=precision, out_dtype=out_dtype)
    return replace(problem, device=torch.device(device))


SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def _result_dtype(dtype: torch.dtype, out_dtype, out) -> torch.dtype:
    """The type of D (and C): out's dtype or out_dtype, the inputs' type when neither is given."""
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype, got {type(out_dtype).__name__}")
    result = out.dtype if isinstance(out, torch.Tensor) else (out_dtype or dtype)
    if out_dtype is not None and result != out_dtype:
        raise TypeError(f"out is {result} but out_dtype={out_dtype}: pass one of them, or make them agree")
    if result != dtype and not (dtype in SIXTEEN_BIT and result == torch.float32):
        raise TypeError(
            f"a {dtype} GEMM writes {dtype}"
            + (" or float32 (out_dtype=torch.float32)" if dtype in SIXTEEN_BIT else "")
            + f", not {result}"
        )
    return result


def _present(a, b, c, out) -> list:
    """(name, value) of the arguments given, for error messages."""
    return [(n, t) for n, t in (("a", a), ("b", b), ("c", c), ("out", out)) if n in "ab" or t is not None]


def _explain_mismatch(present, device_type: str, result: torch.dtype) -> None:
    """Raise the error that says which tensor is on the wrong device or has the wrong dtype."""
    for n, t in present:
        if t.device.type != device_type:
            hint = f"{n}.cuda(), or pass device='cpu' to run the CPU ladder" if device_type == "cuda" else f"{n}.cpu()"
            raise ValueError(f"{n} is on {t.device}, but this path runs on {device_type} tensors; move it with {hint}")
    if len({t.device for _, t in present}) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in present)
        raise ValueError(f"all tensors must be on one device, got {where}")
    what = ", ".join(f"{n}: {t.dtype}" for n, t in present)
    if present[0][1].dtype != present[1][1].dtype:
        halves = {torch.float32, torch.bfloat16, torch.float16}
        hint = (", or call inside torch.autocast('cuda', dtype=...), which casts them as it does torch.mm's"
                if device_type == "cuda" and {t.dtype for _, t in present[:2]} <= halves else "")  # fmt: skip
        raise TypeError(f"a and b must have one dtype, got {what}; cast them with .to(dtype){hint}")
    raise TypeError(f"c and out must be {result} (the result's type), got {what}; cast them with .to(dtype)")
