"""gemmlab accuracy: precision="3xtf32" against float64 and cuBLAS SGEMM, case by case.

The accuracy contract of 3xTF32 (docs/ladder/tc11-3xtf32.md, "Accuracy on a GPU"): on the inputs
of CONTRACT_INPUTS, at every K of SHAPES, gemm(a, b, precision="3xtf32")'s error against float64
within MAX_RATIO times cuBLAS SGEMM's on the same inputs, and below it on average (geometric
mean). Each case draws its inputs on the GPU from a seed of its own (case_seed: fixed by the case,
so a rerun draws the same values), then:

* ours: gemmlab.gemm(a, b, precision="3xtf32"), and the kernel gemm() chooses for it (select);
* SGEMM: torch.mm(a, b) with torch.backends.cuda.matmul.allow_tf32 off (restored after);
* the reference: a.double() @ b.double() on the GPU.

Two errors of each result D against the reference R (REL and MAX):

* rel = ||D - R||_F / ||R||_F, the normwise relative error;
* max = max_ij |D - R|_ij / max_ij |R|_ij, the largest element error over the largest element of
  the reference (one scale for every element: not each element's own relative error, which a
  result near zero blows up);

and their ratios ours / SGEMM. Records: accuracy-<time>.json under the machine's folder, every case
with its seed; accuracy_table.py builds the table and the contract's verdict from them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, NamedTuple
import zlib

import torch

# K -> (M, N): the longest K with small M and N so that A and B (and their float64 copies) stay a
# few hundred MB; odd sizes that no tile divides among them.
SHAPES: dict[int, tuple[int, int]] = {
    1: (2048, 2048),
    2: (1000, 777),
    8: (2047, 1025),
    32: (777, 1000),
    64: (1024, 1024),
    256: (2048, 2048),
    1024: (1000, 777),
    4096: (1023, 1025),
    16384: (777, 1000),
    65536: (257, 255),
}

WIDE = 30  # "wide": scales 2^e, e a uniform integer in [-WIDE, WIDE]
UNDERFLOW_EXP = (-126, -120)  # "near-underflow": A's exponents, fp32's smallest normal one up

# name -> how its A and B are drawn (also written into each record's header)
INPUTS: dict[str, str] = {
    "normal": "A and B randn",
    "uniform": "A and B uniform in [0, 1) (torch.rand)",
    "wide": f"randn, row i of A times 2^e_i and column j of B times 2^f_j, e and f uniform integers in "
            f"[-{WIDE}, {WIDE}]: D's elements span 2^{4 * WIDE}",
    "wide-k": f"randn, column k of A times 2^e_k and row k of B times 2^f_k, e and f uniform integers in "
              f"[-{WIDE}, {WIDE}]: the products summed into one element span 2^{4 * WIDE}",
    "near-underflow": f"A = m 2^e, m uniform in [1, 2), e a uniform integer in [{UNDERFLOW_EXP[0]}, {UNDERFLOW_EXP[1]}] "
                      f"(1.2e-38 to 1.5e-36); B uniform in [1, 2): every product and every sum is a normal fp32 "
                      f"value (at least 2^-126), while the TF32 small part of each element of A (about 2^-11 of it) "
                      f"lies among TF32's subnormals",
}  # fmt: skip
# The inputs, which the contract is held to; the others are measured beside them.
CONTRACT_INPUTS = ("normal", "uniform", "wide")
MAX_RATIO = 1.5  # ours / SGEMM, at every contract case

METRICS = {
    "rel": "||D - R||_F / ||R||_F (R: the float64 product of the same inputs)",
    "max": "max_ij |D - R|_ij / max_ij |R|_ij",
}


class AccuracyCase(NamedTuple):
    inputs: str  # a key of INPUTS
    M: int
    N: int
    K: int

    @property
    def seed(self) -> int:
        return case_seed(self)

    def label(self) -> str:
        return f"{self.inputs} M={self.M} N={self.N} K={self.K} seed={self.seed}"


def case_seed(case: AccuracyCase) -> int:
    """The case's seed: a checksum of its name, so that it stays what it is when cases are added."""
    return zlib.crc32(f"{case.inputs} {case.M}x{case.N}x{case.K}".encode())


def cases(inputs: list[str] | None = None, ks: list[int] | None = None) -> list[AccuracyCase]:
    """Every input set at every K of SHAPES (or those named), input set by input set."""
    for name in inputs or ():
        if name not in INPUTS:
            raise ValueError(f"inputs {name!r}: one of {', '.join(INPUTS)}")
    for k in ks or ():
        if k not in SHAPES:
            raise ValueError(f"K={k}: one of {', '.join(map(str, SHAPES))}")
    return [AccuracyCase(name, *SHAPES[k], k) for name in (inputs or INPUTS) for k in (ks or SHAPES)]


class Operands(NamedTuple):
    a: torch.Tensor  # [M, K] float32
    b: torch.Tensor  # [K, N] float32
    a_exp: torch.Tensor | None  # the exponents A was scaled by (per row: wide; per column: wide-k, near-underflow)
    b_exp: torch.Tensor | None  # those of B (per column: wide; per row: wide-k)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as float32, exactly, for integer e in fp32's normal range [-126, 127]: built from its bits."""
    if int(e.min()) < -126 or int(e.max()) > 127:
        raise ValueError("pow2 builds normal fp32 powers of two: exponents in [-126, 127]")
    return ((e.to(torch.int32) + 127) << 23).view(torch.float32)


def draw(inputs: str, M: int, N: int, K: int, seed: int, device: str | torch.device = "cuda") -> Operands:
    """A case's A [M, K] and B [K, N], drawn on `device` from a generator seeded with `seed` (the
    same seed and device give the same values). How each input set is drawn: INPUTS."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def exps(n: int, lo: int, hi: int) -> torch.Tensor:
        return torch.randint(lo, hi + 1, (n,), generator=gen, device=device, dtype=torch.int32)

    def randn(*shape):
        return torch.randn(shape, generator=gen, device=device)

    if inputs == "normal":
        return Operands(randn(M, K), randn(K, N), None, None)
    if inputs == "uniform":
        return Operands(torch.rand((M, K), generator=gen, device=device), torch.rand((K, N), generator=gen, device=device),
                        None, None)  # fmt: skip
    if inputs == "wide":
        ea, eb = exps(M, -WIDE, WIDE), exps(N, -WIDE, WIDE)
        return Operands(randn(M, K) * pow2(ea)[:, None], randn(K, N) * pow2(eb)[None, :], ea, eb)
    if inputs == "wide-k":
        ea, eb = exps(K, -WIDE, WIDE), exps(K, -WIDE, WIDE)
        return Operands(randn(M, K) * pow2(ea)[None, :], randn(K, N) * pow2(eb)[:, None], ea, eb)
    if inputs == "near-underflow":
        # m in [1, 2) times 2^e, e per element: stored as [M, K] exponents, flattened for the record
        e = exps(M * K, *UNDERFLOW_EXP)
        m = 1.0 + torch.rand((M, K), generator=gen, device=device)
        a = m * pow2(e).view(M, K)  # exact: a power of two times a value in [1, 2), a normal result
        b = 1.0 + torch.rand((K, N), generator=gen, device=device)
        return Operands(a, b, e, None)
    raise ValueError(f"inputs {inputs!r}: one of {', '.join(INPUTS)}")


def sgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cuBLAS SGEMM: torch.mm with TF32 off (the setting restored after)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.mm(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def error_terms(d: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """[rel, max, non-finite elements of D] of D against the float64 reference (METRICS), as one
    float64 tensor on D's device."""
    diff = d.double() - ref
    rel = torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref)
    largest = diff.abs().max() / ref.abs().max()
    return torch.stack([rel, largest, (~torch.isfinite(d)).sum().double()])


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs; 1.0 where both are exact (0 / 0); None where it is unbounded or an error is
    not finite (the contract counts None as broken)."""
    if ours is None or theirs is None:
        return None
    if theirs == 0.0:
        return 1.0 if ours == 0.0 else None
    return ours / theirs


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # (JSON has no Inf or NaN)


def measure(case: AccuracyCase, device: str = "cuda") -> dict:
    """One case's record: what ran, both errors of ours and SGEMM's, and their ratios."""
    from ..api import gemm
    from ..configs import select
    from ..problem import problem_from_tensors

    ops = draw(case.inputs, case.M, case.N, case.K, case.seed, device)
    spec, cfg = select(problem_from_tensors(ops.a, ops.b, precision="3xtf32"))
    ours = gemm(ops.a, ops.b, precision="3xtf32")
    theirs = sgemm(ops.a, ops.b)
    ref = ops.a.double() @ ops.b.double()
    (o_rel, o_max, o_bad), (s_rel, s_max, s_bad) = torch.stack([error_terms(ours, ref), error_terms(theirs, ref)]).tolist()
    o = dict(rel=_finite(o_rel), max=_finite(o_max), nonfinite=int(o_bad))
    s = dict(rel=_finite(s_rel), max=_finite(s_max), nonfinite=int(s_bad))
    return dict(inputs=case.inputs, M=case.M, N=case.N, K=case.K, seed=case.seed, kernel=spec.id,
                config=cfg.as_dict(), contract=case.inputs in CONTRACT_INPUTS, ours=o, sgemm=s,
                ratio={m: ratio(o[m], s[m]) for m in METRICS})  # fmt: skip


def header(device_id: int = 0) -> dict:
    """The record's meta: the environment (GPU, driver, versions, commit) and what the cases mean."""
    from . import environment

    meta = environment.describe(device_id)
    meta.update(kind="accuracy", precision="3xtf32", inputs=INPUTS, contract_inputs=list(CONTRACT_INPUTS),
                max_ratio=MAX_RATIO, metrics=METRICS, seed="zlib.crc32 of '<inputs> <M>x<N>x<K>', seeding a torch.Generator on the GPU",
                baseline="torch.mm, allow_tf32 off (cuBLAS SGEMM)", reference="float64 matmul on the GPU")  # fmt: skip
    return meta


def run_accuracy(out_root: Path, todo: list[AccuracyCase], on_start: Callable[[AccuracyCase], None] | None = None,
                 on_record: Callable[[dict], None] | None = None) -> tuple[Path, list[dict]]:  # fmt: skip
    """Measure every case, then write the record (accuracy-<time>.json under out_root/<gpu>/)."""
    from .run import results_path, write_run

    meta = header(0)
    recs = []
    for case in todo:
        if on_start:
            on_start(case)
        recs.append(measure(case))
        if on_record:
            on_record(recs[-1])
    path = results_path(out_root, meta, "accuracy")
    write_run(path, meta, recs)
    return path, recs
