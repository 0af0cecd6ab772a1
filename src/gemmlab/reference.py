"""float64 references and the error metrics every check uses.

Two metrics, both against D_ref computed in float64 from the same (rounded) inputs:

* rel_fro   = ||D - D_ref||_F / ||D_ref||_F           (the overall error)
* max_scaled = max_ij |D - D_ref|_ij / (|alpha| (|A| |B|)_ij + |beta| |C|_ij)
  (each element's error against the size of the terms summed into it; it does not blow up
  where D_ref happens to be near zero, and one wrong element shows up in it).

NaN or Inf anywhere in D where the reference is finite fails the check outright.
"""

from __future__ import annotations

from dataclasses import dataclass
import math

import torch


@dataclass(frozen=True)
class Tolerance:
    rel_fro: float
    max_scaled: float
    why: str


# FP32 with fp32 accumulation: errors grow like sqrt(K) * 2^-24 for random data; these bounds
# leave a wide margin at K = 8192 (~1e-6 measured) and still catch a single missing k-term
# (max_scaled ~ 1/K >= 1.2e-4 at K = 8192).
# bf16/fp16 inputs with fp32 accumulation: the reference uses the same rounded inputs, so what is
# left is the fp32 summation (small) and rounding D to the 16-bit type: half an ulp of |D|, 2^-9
# for bf16 and 2^-12 for fp16, relative to each element (and less relative to |A||B|).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(1e-5, 2e-5, "fp32 FFMA, fp32 accumulation: sqrt(K) * 6e-8 with margin"),
    torch.bfloat16: Tolerance(1e-2, 1e-2, "bf16 output rounding (2^-9 relative) with margin"),
    torch.float16: Tolerance(2e-3, 2e-3, "fp16 output rounding (2^-12 relative) with margin"),
}


# fp32 inputs multiplied as TF32 (precision="tf32"): each factor keeps 10 of its 23 mantissa bits
# (an error below 2^-10 of it, whether the hardware rounds or truncates), so a product is off by up
# to ~2^-9 of itself; sums of random-signed products keep rel_fro near 1e-3 and below.
TF32_TOLERANCE = Tolerance(2e-3, 4e-3, "TF32 factors (10 mantissa bits), fp32 accumulation, with margin")


# fp32 inputs as three TF32 products (precision="3xtf32", tc11): each factor is split into TF32 parts
# that hold it to 23 of its 24 bits, and the MMAs' sums are promoted into fp32 every K stage, so the
# result is held to SGEMM's bound (fp32's) -- the reason to ask for it.
THREE_TF32_TOLERANCE = TOLERANCES[torch.float32]


# 16-bit inputs with an fp32 result: the tensor cores' fp32 accumulation loses more than FFMA's
# and the loss grows linearly with the K steps one accumulator takes (measured on an H100, bf16 and
# fp16 alike, every step from tc01 to tc07 within 3%: rel_fro 9e-6 at K = 8192, 1.8e-5 at 16384,
# 7.5e-5 at 65536; tc09 and cuBLAS, which split K there, 1e-6 to 9e-6). So the FP32 bound holds up
# to K = 4000 and grows as K x 2.5e-9 beyond it: twice what was measured, and still far below the
# ~1 / sqrt(K) relative error of a single missing k-term (K x 2.5e-9 = 1.6e-4 at K = 65536 against 3.9e-3).
TC_FP32_OUT_REL_PER_K = 2.5e-9


def tolerance(dtype: torch.dtype, precision: str = "fp32", input_dtype: torch.dtype | None = None,
              k: int = 0) -> Tolerance:  # fmt: skip
    """The bound for results of dtype; precision "tf32" (float32 inputs on TF32 tensor cores) is looser;
    an fp32 result of 16-bit inputs (input_dtype) over k products gets the tensor cores' bound."""
    if precision == "tf32":
        return TF32_TOLERANCE
    if precision == "3xtf32":
        return THREE_TF32_TOLERANCE
    tol = TOLERANCES[dtype]
    if dtype == torch.float32 and input_dtype in (torch.bfloat16, torch.float16) and k * TC_FP32_OUT_REL_PER_K > tol.rel_fro:
        return Tolerance(k * TC_FP32_OUT_REL_PER_K, tol.max_scaled,
                         f"16-bit inputs, fp32 result: tensor-core accumulation over K = {k} (K x {TC_FP32_OUT_REL_PER_K:g})")  # fmt: skip
    return tol


_TF32_KEEP = 0xFFFFE000  # sign, exponent and the top 10 mantissa bits
_TF32_HALF = 0x1000  # half a unit of TF32's last mantissa bit
_TF32_MAX = 0x7F7FE000  # the largest finite TF32 value, (2 - 2^-10) 2^127, as bits
_FP32_INF = 0x7F800000


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 x rounded to TF32 as tc11's pre-pass rounds it (kernels/tensorcore/split_tf32.cu,
    round_tf32), in torch bit operations: to nearest with ties away from zero (cvt.rna's rounding:
    add half a unit, clear the 13 bits below TF32's mantissa); Inf and NaN as they are; at or above
    the largest TF32 value truncated, where rounding would overflow to Inf."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_tf32 takes float32, not {x.dtype}")
    u = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # the bits, as an unsigned 32-bit value
    mag = u & 0x7FFFFFFF
    r = torch.where(mag >= _TF32_MAX, u & _TF32_KEEP, (u + _TF32_HALF) & _TF32_KEEP)
    r = torch.where(mag >= _FP32_INF, u, r)
    return torch.where(r >= 2**31, r - 2**32, r).to(torch.int32).view(torch.float32)


def split_tf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(big, small): float32 x split into two TF32 values as tc11's pre-pass splits it, big = x
    rounded to TF32 and small = (x - big) rounded to TF32 (x - big is exact in fp32); Inf and NaN
    in big, small = 0. big + small is x where x has 23 significant bits or fewer (from 2^-114 up to
    the largest TF32 value), and within max(2^-23 |x|, 2^-137) of it otherwise (TF32's subnormals
    are 2^-136 apart; at or above the largest TF32 value, where big is truncated, 2^-22 |x|)."""
    big = round_tf32(x)
    small = torch.where(torch.isfinite(x), round_tf32(x - big), torch.zeros_like(x))
    return big, small


def reference(a, b, c=None, alpha=1.0, beta=0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(D_ref, scale) in float64 on the inputs' device; scale is |alpha||A||B| + |beta||C|."""
    a64, b64 = a.double(), b.double()
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (a64.abs() @ b64.abs())
    if beta != 0.0 and c is not None:
        c64 = c.double()
        ref = ref + beta * c64
        scale = scale + abs(beta) * c64.abs()
    return ref, scale


# The steepest slope of the activations a fused epilogue applies (GELU's, 1.129 near x = 0.75): an
# error in Z grows at most this much through them, so a result's scale grows by as much.
POST_SLOPE = 1.13


def reference_post(ref, scale, bias=None, activation=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(activation(ref + bias), its scale) in float64, from reference()'s pair: the reference of a
    GEMM with a fused epilogue (bias a vector over D's columns; activation a name of
    gemmlab.activations.ACTIVATIONS)."""
    from .activations import ACTIVATIONS

    if bias is not None:
        b64 = bias.double()
        ref, scale = ref + b64, scale + b64.abs()
    act = ACTIVATIONS[activation]
    if act is not None:
        ref, scale = act(ref), scale * POST_SLOPE
    return ref, scale


@dataclass(frozen=True)
class ErrorReport:
    rel_fro: float
    max_scaled: float
    nonfinite: int  # elements of D that are NaN/Inf where the reference is finite
    passed: bool

    def summary(self) -> str:
        flag = "ok" if self.passed else "FAIL"
        return f"{flag} rel_fro={self.rel_fro:.2e} max_scaled={self.max_scaled:.2e} nonfinite={self.nonfinite}"


def error_terms(d: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, ref_norm) -> torch.Tensor:
    """[rel_fro, max_scaled, appeared, vanished] of D against the float64 reference, as one float64
    tensor on D's device, computed without waiting for the GPU (the fuzz harness queues many).
    appeared: elements of D that are NaN or Inf where the reference is finite; vanished: elements
    where the reference is NaN or +-Inf and D is not the same (a NaN, the same infinity).
    ref_norm: the norm rel_fro is taken against (a float or a 0-d tensor)."""
    d64 = d.double()
    finite_ref = torch.isfinite(ref)
    appeared = (~torch.isfinite(d64) & finite_ref).sum()
    same = (d64.isnan() & ref.isnan()) | (d64 == ref)  # NaN where NaN, the same infinity
    vanished = (~finite_ref & ~same).sum()
    if d64.numel() == 0:
        return torch.zeros(4, dtype=torch.float64, device=d.device)
    diff = (d64 - ref).where(finite_ref, torch.zeros_like(ref))
    diff = torch.nan_to_num(diff, nan=math.inf)
    # Below the output type's normal range its spacing stops shrinking: a result that lands among
    # fp16's subnormals (|D| < 6.1e-5) is rounded to a multiple of 2^-24, whatever its size. Half
    # that spacing is the least error any kernel can have there, so it is not held against it.
    fi = torch.finfo(d.dtype)
    err = (diff.abs() - fi.smallest_normal * fi.eps / 2).clamp_min(0.0)
    err_norm = torch.linalg.vector_norm(err)
    rel_fro = torch.where(torch.as_tensor(ref_norm, dtype=torch.float64, device=d.device) > 0, err_norm / ref_norm, err_norm)
    floor = torch.finfo(torch.float32).tiny
    max_scaled = torch.nan_to_num(err / scale.clamp_min(floor), nan=0.0, posinf=math.inf).max()  # 0 / inf: non-finite rows
    return torch.stack([rel_fro, max_scaled, appeared.double(), vanished.double()])


def compare(d: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, tol: Tolerance,
            ref_norm: float | None = None) -> ErrorReport:  # fmt: skip
    """rel_fro is the error's Frobenius norm over ref_norm: by default ||ref||; check_result passes
    the size of the terms the kernel sums (see terms_norm), so that a result small only because its
    terms cancel is not held to a relative bound of the difference."""
    if d.numel() == 0:
        return ErrorReport(0.0, 0.0, 0, True)
    if ref_norm is None:
        finite_ref = torch.isfinite(ref)
        ref_norm = float(torch.linalg.vector_norm(ref.where(finite_ref, torch.zeros_like(ref))))
    rel_fro, max_scaled, appeared, _ = error_terms(d, ref, scale, ref_norm).tolist()
    nonfinite = int(appeared)
    passed = nonfinite == 0 and rel_fro <= tol.rel_fro and max_scaled <= tol.max_scaled
    return ErrorReport(rel_fro, max_scaled, nonfinite, passed)


def check_result(d, a, b, c=None, alpha=1.0, beta=0.0, precision: str = "fp32", bias=None,
                 activation=None) -> ErrorReport:  # fmt: skip
    """D against float64's activation(alpha A B + beta C + bias); rel_fro is taken over the size of
    the result before the activation (reference_norm), which bounds its errors' growth through it."""
    a64, b64 = a.double(), b.double()  # once: reference and terms_norm take them as they are
    ref, scale = reference(a64, b64, c, alpha, beta)
    ref, scale = reference_post(ref, scale, bias, None)
    ref_norm = float(reference_norm(ref, a64, b64, c, alpha, beta))
    ref, scale = reference_post(ref, scale, None, activation)
    return compare(d, ref, scale, tolerance(d.dtype, precision, a.dtype, a.shape[1]), ref_norm)


def fused_epilogue_failures(a, b, kernel: str, bias, activation, alpha: float = 1.5, beta: float = -0.75,
                            device: str | None = None) -> list[str]:  # fmt: skip
    """gemmlab.gemm(a, b, kernel=kernel, device=device) with the bias and activation fused, once
    without C and once with a fresh random C and beta, each held to float64 (check_result): what
    failed, as summaries."""
    import gemmlab

    c = torch.randn(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    failed = []
    for cc, bt in ((None, 0.0), (c, beta)):
        d = gemmlab.gemm(a, b, cc, alpha=alpha, beta=bt, kernel=kernel, bias=bias, activation=activation, device=device)
        rep = check_result(d, a, b, cc, alpha, bt, bias=bias, activation=activation)
        if not rep.passed:
            failed.append(f"{kernel} {tuple(a.shape)} x {tuple(b.shape)} {activation} beta={bt}: {rep.summary()}")
    return failed


def reference_norm(ref, a, b, c=None, alpha=1.0, beta=0.0) -> torch.Tensor:
    """What rel_fro is taken against, as a 0-d tensor (no wait for the GPU): the larger of ||D_ref||
    over its finite elements and terms_norm."""
    finite_norm = torch.linalg.vector_norm(ref.where(torch.isfinite(ref), torch.zeros_like(ref)))
    return torch.maximum(finite_norm, terms_norm_tensor(a, b, c if beta != 0.0 else None, alpha, beta))


def terms_norm(a, b, c=None, alpha=1.0, beta=0.0) -> float:
    """|alpha| ||T|| + |beta| ||C|| (Frobenius), T[i][j] = sqrt(sum_k (A[i][k] B[k][j])^2): the size of
    the products a kernel adds up, which is what ||A B|| is for random signs. Where the products
    cancel (a 1 x 1 x 64 dot product near zero, or alpha A B against beta C) ||D|| can be far
    smaller than the rounding the sums are entitled to; rel_fro is taken over the larger of the two.
    ||T||^2 = sum_k ||A[:, k]||^2 ||B[k, :]||^2, so no second product is needed."""
    return float(terms_norm_tensor(a, b, c, alpha, beta))


def terms_norm_tensor(a, b, c=None, alpha=1.0, beta=0.0) -> torch.Tensor:
    """terms_norm as a 0-d float64 tensor on the inputs' device, without waiting for the GPU."""
    a64, b64 = a.double(), b.double()
    cols = torch.nan_to_num(a64, nan=0.0, posinf=0.0, neginf=0.0).square().sum(dim=-2)  # [(batch,) K]
    rows = torch.nan_to_num(b64, nan=0.0, posinf=0.0, neginf=0.0).square().sum(dim=-1)  # (a batch: over every product)
    norm = abs(alpha) * (cols * rows).sum().sqrt()
    if c is not None and beta != 0.0:
        norm = norm + abs(beta) * torch.linalg.vector_norm(torch.nan_to_num(c.double(), nan=0.0, posinf=0.0, neginf=0.0))
    return norm
