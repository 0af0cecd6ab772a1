"""gemmlab check: every registered kernel against float64 over a shape set and alpha/beta variants.

Inputs are drawn fresh (uniform in [-1, 1)) for every case; outputs are poisoned with NaN
before the launch, so an element the kernel forgets to write fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass
import random
from typing import Callable, Iterable

import torch

from . import registry
from .api import gemm
from .reference import ErrorReport, check_result
from .specs.base import stated_constraint

FIXED_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (7, 13, 17),
    (127, 129, 65),
    (1000, 1000, 1000),
    (1022, 1022, 1022),
    (2048, 2048, 1024),
    (3135, 3135, 1000),  # more tiles than SMs and a partial last wave: tc09 splits it along K
    (129, 257, 20000),  # four tiles, a tall K: tc09 splits each over 33 runs that sum it together
    (3135, 1, 1001),  # a matrix times a vector (sgemm_14's one column)
    (257, 13, 20001),  # few rows, few columns, a tall K: sgemm_14 splits K into runs
    (0, 5, 3),  # empty output
    (5, 7, 0),  # K = 0: D = beta * C
)


# The CPU ladder's naive loops run at ~1 GFLOP/s: smaller shapes, still none a multiple of a block.
CPU_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (7, 13, 17),
    (127, 129, 65),
    (257, 255, 129),
    (0, 5, 3),
    (5, 7, 0),
)


def random_odd_shapes(n: int, rng: random.Random, low: int = 2, high: int = 700) -> list[tuple[int, int, int]]:
    """n shapes whose sides are odd (so never a multiple of any power-of-two tile)."""
    return [tuple(rng.randrange(low, high) | 1 for _ in range(3)) for _ in range(n)]


@dataclass(frozen=True)
class Variant:
    name: str
    alpha: float
    beta: float
    c: str  # "none", "random", "nan" (C full of NaN, must not be read), "inplace" (out is c)
    fp32_out: bool = False  # 16-bit inputs, C and D in float32 (out_dtype=torch.float32)
    bias: bool = False  # a bias over D's columns (gemm's bias=)
    activation: str | None = None  # gemm's activation=


VARIANTS: tuple[Variant, ...] = (
    Variant("a=1 b=0", 1.0, 0.0, "none"),
    Variant("a=1.5 b=-0.75", 1.5, -0.75, "random"),
    Variant("a=-1 b=0 C=NaN", -1.0, 0.0, "nan"),
    Variant("a=0.5 b=2 in-place", 0.5, 2.0, "inplace"),
)

# What the kernels with the fused epilogue add: a bias and an activation in it, with C read and not.
EPILOGUE_VARIANTS: tuple[Variant, ...] = (
    Variant("bias+gelu a=1 b=0 C=NaN", 1.0, 0.0, "nan", bias=True, activation="gelu"),
    Variant("silu a=1.5 b=-0.75", 1.5, -0.75, "random", activation="silu"),
)

# What the bf16/fp16 kernels add: their fp32 output.
FP32_OUT_VARIANTS: tuple[Variant, ...] = (
    Variant("fp32 out a=1.5 b=-0.75", 1.5, -0.75, "random", fp32_out=True),
    Variant("fp32 out a=-1 b=0 C=NaN", -1.0, 0.0, "nan", fp32_out=True),
)


@dataclass(frozen=True)
class CaseResult:
    kernel: str
    dtype: str
    M: int
    N: int
    K: int
    variant: str
    error: ErrorReport | None
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.error is not None and self.error.passed

    @property
    def declined(self) -> bool:
        """The kernel's spec refused the problem with a stated constraint (e.g. TMA needs K >= 1)."""
        return self.error is None and self.message.startswith(DECLINED)

    def label(self) -> str:
        return f"M={self.M} N={self.N} K={self.K} kernel={self.kernel} dtype={self.dtype} [{self.variant}]"


DECLINED = "declined: "  # the message prefix of a case the kernel's spec refuses (auto goes elsewhere)


def _matrix(rows: int, cols: int, ld_multiple: int, fill, device: str, dtype, gen) -> torch.Tensor:
    """A rows x cols matrix whose row stride is cols rounded up to ld_multiple (a view into a wider
    allocation when that pads), filled uniform in [-1, 1) or with `fill`."""
    ld = -(-max(cols, 1) // ld_multiple) * ld_multiple
    if fill is None:
        full = torch.rand((rows, ld), generator=gen, device=device, dtype=dtype) * 2 - 1
    else:
        full = torch.full((rows, ld), fill, device=device, dtype=dtype)
    return full[:, :cols]


def _tma_padding(kernel: str, dtype: torch.dtype, M: int, N: int, K: int, layout: str = "nn") -> int:
    """1 (contiguous operands) unless the kernel moves operands with TMA and these sizes give row
    strides TMA cannot take: then strides are padded to 16 bytes, the layout such a caller passes,
    so the kernel's edge handling is checked at every odd size rather than skipped."""
    spec = registry.get(kernel) if kernel != "auto" else None
    if spec is None or not getattr(spec, "tma", ()) or spec.staged or spec.split_operands:  # CPU kernels
        return 1  # have no TMA; staged kernels get TMA-ready copies from gemm(), tc11 its split parts
    per16 = 16 // dtype.itemsize
    rows = (M if layout[0] == "t" else K, K if layout[1] == "t" else N)  # the inner sizes of A's and B's storage
    return 1 if all(r % per16 == 0 for r in (*rows, N)) else per16


LAYOUTS = ("nn", "nt", "tn", "tt")  # A and B row-major (n) or the transposed view of their storage (t)


def _operand(rows: int, cols: int, trans: bool, pad: int, device: str, dtype, gen) -> torch.Tensor:
    """A rows x cols operand: row-major, or (trans) the transposed view of a cols x rows matrix, as
    w.t() of a Linear's [N, K] weight is."""
    return _matrix(cols, rows, pad, None, device, dtype, gen).t() if trans else _matrix(rows, cols, pad, None, device, dtype, gen)


def precision_of(kernel: str, dtype: torch.dtype) -> str:
    """The precision= a named kernel needs: its math on float32 ("tf32" for tc08, "3xtf32" for tc11),
    else "fp32"."""
    if kernel == "auto" or dtype != torch.float32:
        return "fp32"
    return getattr(registry.get(kernel), "math", "fp32")


def run_case(kernel: str, M: int, N: int, K: int, v: Variant, device: str = "cuda", dtype=torch.float32,
             layout: str = "nn") -> CaseResult:  # fmt: skip
    """One check: the kernel's D for fresh random A and B (row-major, or transposed views where
    layout says: "nt" is x @ w.t()) against float64, out poisoned with NaN first."""
    precision = precision_of(kernel, dtype)
    label = precision if precision != "fp32" else _dt(dtype)  # float32 inputs, TF32 or 3xTF32 math
    label += "" if layout == "nn" else f"-{layout}"
    gen = torch.Generator(device=device)
    gen.seed()
    pad = _tma_padding(kernel, dtype, M, N, K, layout)
    a = _operand(M, K, layout[0] == "t", pad, device, dtype, gen)
    b = _operand(K, N, layout[1] == "t", pad, device, dtype, gen)
    od = torch.float32 if v.fp32_out else dtype  # the type of C and D
    c = None
    if v.c in ("random", "inplace"):
        c = _matrix(M, N, pad, None, device, od, gen)
    elif v.c == "nan":
        c = _matrix(M, N, pad, float("nan"), device, od, gen)
    c_before = c.clone() if c is not None else None
    bias = _matrix(1, N, pad, None, device, od, gen)[0] if v.bias else None
    if v.c == "inplace":
        out = c
    else:
        out = _matrix(M, N, pad, float("nan"), device, od, gen)  # poison
    try:
        gemm(a, b, c, alpha=v.alpha, beta=v.beta, kernel=kernel, out=out, device=device, precision=precision,
             bias=bias, activation=v.activation)  # fmt: skip
        if device == "cuda":
            torch.cuda.synchronize()
    except ValueError as exc:
        reason = str(exc)
        if "cannot serve" in reason and stated_constraint(reason):  # not a failure
            return CaseResult(kernel, label, M, N, K, v.name, None, DECLINED + reason)
        return CaseResult(kernel, label, M, N, K, v.name, None, f"ValueError: {exc}")
    except Exception as exc:  # reported per case, never swallowed silently
        return CaseResult(kernel, label, M, N, K, v.name, None, f"{type(exc).__name__}: {exc}")
    err = check_result(out, a, b, c_before, v.alpha, v.beta, precision, bias=bias, activation=v.activation)
    if v.c in ("random", "nan") and not _same(c, c_before):
        return CaseResult(kernel, label, M, N, K, v.name, err, "c was modified though out is separate")
    return CaseResult(kernel, label, M, N, K, v.name, err)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise-equal including NaN positions."""
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0))


def cases(kernels: Iterable[str], shapes: Iterable[tuple[int, int, int]], variants=VARIANTS):
    """(kernel, dtype, shape, variant) for every dtype each kernel takes; the bf16/fp16 kernels
    also with fp32 output, the kernels with the fused epilogue also with a bias and an activation."""
    out = []
    for k in kernels:
        spec = registry.get(k)
        for d in spec.dtypes:
            extra = FP32_OUT_VARIANTS if getattr(spec, "type_param", False) and variants is VARIANTS else ()
            extra += EPILOGUE_VARIANTS if getattr(spec, "epilogues", False) and variants is VARIANTS else ()
            out += [(k, d, s, v) for s in shapes for v in (*variants, *extra)]
    return out


def default_shapes(device: str, n_random: int, seed: int | None) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    if device == "cpu":
        return list(CPU_SHAPES) + random_odd_shapes(n_random, rng, high=300)
    return list(FIXED_SHAPES) + random_odd_shapes(n_random, rng)


def run_check(
    kernels: list[str] | None = None,
    shapes: list[tuple[int, int, int]] | None = None,
    n_random: int = 3,
    seed: int | None = None,
    progress: Callable[[CaseResult], None] | None = None,
    device: str = "cuda",
    layout: str = "nn",
) -> list[CaseResult]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    kernels = kernels or [k.id for k in registry.kernels(device=device)]
    if shapes is None:
        shapes = default_shapes(device, n_random, seed)
    results = []
    for k, dtype, (M, N, K), v in cases(kernels, shapes):
        r = run_case(k, M, N, K, v, device=device, dtype=dtype, layout=layout)
        results.append(r)
        if progress:
            progress(r)
    return results
