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

FIXED_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (7, 13, 17),
    (127, 129, 65),
    (1000, 1000, 1000),
    (1022, 1022, 1022),
    (2048, 2048, 1024),
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


VARIANTS: tuple[Variant, ...] = (
    Variant("a=1 b=0", 1.0, 0.0, "none"),
    Variant("a=1.5 b=-0.75", 1.5, -0.75, "random"),
    Variant("a=-1 b=0 C=NaN", -1.0, 0.0, "nan"),
    Variant("a=0.5 b=2 in-place", 0.5, 2.0, "inplace"),
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

    def label(self) -> str:
        return f"M={self.M} N={self.N} K={self.K} kernel={self.kernel} dtype={self.dtype} [{self.variant}]"


def run_case(kernel: str, M: int, N: int, K: int, v: Variant, device: str = "cuda", dtype=torch.float32) -> CaseResult:
    gen = torch.Generator(device=device)
    gen.seed()
    a = torch.rand((M, K), generator=gen, device=device, dtype=dtype) * 2 - 1
    b = torch.rand((K, N), generator=gen, device=device, dtype=dtype) * 2 - 1
    c = None
    if v.c in ("random", "inplace"):
        c = torch.rand((M, N), generator=gen, device=device, dtype=dtype) * 2 - 1
    elif v.c == "nan":
        c = torch.full((M, N), float("nan"), device=device, dtype=dtype)
    c_before = c.clone() if c is not None else None
    if v.c == "inplace":
        out = c
    else:
        out = torch.full((M, N), float("nan"), device=device, dtype=dtype)  # poison
    try:
        gemm(a, b, c, alpha=v.alpha, beta=v.beta, kernel=kernel, out=out, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # reported per case, never swallowed silently
        return CaseResult(kernel, _dt(dtype), M, N, K, v.name, None, f"{type(exc).__name__}: {exc}")
    err = check_result(out, a, b, c_before, v.alpha, v.beta)
    if v.c in ("random", "nan") and not _same(c, c_before):
        return CaseResult(kernel, _dt(dtype), M, N, K, v.name, err, "c was modified though out is separate")
    return CaseResult(kernel, _dt(dtype), M, N, K, v.name, err)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise-equal including NaN positions."""
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0))


def cases(kernels: Iterable[str], shapes: Iterable[tuple[int, int, int]], variants=VARIANTS):
    """(kernel, dtype, shape, variant) for every dtype each kernel takes."""
    return [(k, d, s, v) for k in kernels for d in registry.get(k).dtypes for s in shapes for v in variants]


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
) -> list[CaseResult]:
    kernels = kernels or [k.id for k in registry.kernels(device=device)]
    if shapes is None:
        shapes = default_shapes(device, n_random, seed)
    results = []
    for k, dtype, (M, N, K), v in cases(kernels, shapes):
        r = run_case(k, M, N, K, v, device=device, dtype=dtype)
        results.append(r)
        if progress:
            progress(r)
    return results
