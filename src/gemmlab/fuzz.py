"""gemmlab fuzz: random GEMMs drawn into each kernel's risky regimes, checked against float64.

A fixed list of shapes only looks where someone has looked before; a wrong result that needs a
persistent block to take several tiles with a K shorter than its ring, a transposed slice, and
beta = 0 at once is found by drawing such problems at random, many thousands of them. Every problem
comes from its own seed (its sizes, layout, scalars, kernel and input values alike), so any one
can be run again alone from the line printed for it (`gemmlab fuzz --replay '<case>'`).

Each problem: inputs drawn fresh (normal), output poisoned with NaN unless gemm() allocates it or
it is C itself, C full of NaN where beta = 0 (it must not be read), now and then a NaN or an Inf
in A or B (it must reach exactly the elements it should), and in about a third of them a fused
epilogue: a bias over D's columns and an activation (every kernel serves them: those without
the fused epilogue through torch after the launch). A share of the 16-bit cases (BATCHED_SHARE) is
a batch of products through bmm's one-launch path (one_launch=True: tc07's batched build; before
sm_90, the per-matrix path), its
matrices laid out one after another with a gap, a NaN or Inf in one matrix that must not reach
another's result, and now and then one A shared by the batch. A run draws one activation for all its
epilogues (run_activation: the kernels compile each activation in, the bias they read at run
time), so the fused builds it needs are one a kernel config; they and the plain builds are
compiled side by side before it starts (warm); runs of other seeds take the other activations. The result is compared with float64
(reference.error_terms) and so is cuBLAS's (torch.addmm on the same tensors): a problem is wrong
where NaN or Inf appears or vanishes, C changes though D is elsewhere, or an error exceeds both
the dtype's stated tolerance (reference.tolerance) and BASELINE_FACTOR (gemmlab.fuzz_loop) times cuBLAS's own error on
the same problem. The errors are computed on the GPU without waiting for it and read back in
batches, so the harness costs about a millisecond a small problem.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import partial
import json
import math
import random
from typing import Callable

import torch

from . import registry
from .api import gemm
from .batched import ONE_LAUNCH, bmm
from .fuzz_loop import Summary as RunSummary, drive, reasons
from .fuzz_tensors import batch_operand, operand
from .configs import TC07_TILES, select
from .problem import problem_from_tensors
from .activations import ACTIVATIONS, apply_post, post_code
from .reference import error_terms, reference, reference_norm, reference_post, tolerance

EPILOGUE_SHARE = 0.3  # of the problems drawn with a fused epilogue (bias, activation or both)
# Of the 16-bit problems, the share drawn as a batch through bmm's one-launch path -- once that path
# has passed its GPU tests (batched.ONE_LAUNCH): a kernel not yet run on a GPU may hang rather than
# fail, and the harness's run must not wait on it. `gemmlab fuzz --batched` draws them regardless.
BATCHED_SHARE_ON = 0.1
BATCHED_SHARE = BATCHED_SHARE_ON if ONE_LAUNCH else 0.0
BATCH_SIZES = (1, 2, 3, 5, 8)

# name -> (input dtype, result dtype, precision)
DTYPES: dict[str, tuple[torch.dtype, torch.dtype, str]] = {
    "bf16": (torch.bfloat16, torch.bfloat16, "fp32"),
    "fp16": (torch.float16, torch.float16, "fp32"),
    "bf16-fp32out": (torch.bfloat16, torch.float32, "fp32"),
    "fp16-fp32out": (torch.float16, torch.float32, "fp32"),
    "tf32": (torch.float32, torch.float32, "tf32"),
    "fp32": (torch.float32, torch.float32, "fp32"),
    "3xtf32": (torch.float32, torch.float32, "3xtf32"),
}
DTYPE_WEIGHTS = {"bf16": 0.25, "fp16": 0.2, "bf16-fp32out": 0.1, "fp16-fp32out": 0.1, "tf32": 0.2, "fp32": 0.15,
                 "3xtf32": 0.1}  # fmt: skip

# Sizes where tiles and stages begin and end (powers of two, the 192-wide tile, and either side).
EDGES = (1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 45, 63, 64, 65, 86, 127, 128, 129, 191, 192, 193, 207, 208, 209,
         255, 256, 257, 319, 320, 321, 383, 384, 385, 511, 512, 513)
PRIMES = (2, 3, 5, 7, 13, 17, 31, 61, 97, 127, 131, 257, 509, 521, 1021, 1031, 2039, 2053, 3137, 4099, 6133, 8191)
MAX_FLOPS = 2 * 4096**3  # per problem: the float64 reference (two DGEMMs) stays a few milliseconds
MAX_OUTPUT = 6144 * 6144  # elements of D: each float64 pass over it stays well under a millisecond
# Named kernels (not 'auto') are drawn only for problems they finish quickly: the early ladder
# steps run at a few TFLOP/s or less, so they get smaller problems.
NAMED_MAX_FLOPS = {"sgemm_01_naive": 4e9, "sgemm_02_coalesced": 8e9, "sgemm_03_smem_tile": 2e10,
                   "tc01_wmma": 5e10, "tc02_mma_sync": 5e10, "tc03_cp_async": 5e10}  # fmt: skip
NAMED_DEFAULT_MAX_FLOPS = 1e11


@dataclass(frozen=True)
class Case:
    """One problem, every choice of it fixed: run(case) builds it again from these fields alone."""

    seed: int
    regime: str
    dtype: str  # a key of DTYPES
    M: int
    N: int
    K: int
    layout: str  # "nn", "nt", "tn", "tt": A and B row-major (n) or transposed views (t)
    pad: tuple[int, int, int]  # extra elements in the row stride of A's, B's and C's / D's storage
    offset: int  # elements between the start of each allocation and the operand (0: aligned)
    alpha: float
    beta: float
    c: str  # "none", "nan" (C full of NaN, beta = 0), "random", "inplace" (out is c)
    out: str  # "poison" (a NaN-filled D) or "new" (gemm() allocates D)
    special: str  # "", or a NaN or an Inf placed in A or B: "nan-a", "inf-a", "nan-b", "inf-b"
    kernel: str  # "auto" or a kernel id
    epilogue: str = ""  # "", or "bias", an activation's name, or "bias+" one: gemm()'s bias= and activation=
    batch: int = 0  # 0: one product (gemm); B >= 1: B products in one launch (bmm(one_launch=True))
    shared_a: bool = False  # with batch: one [M, K] A for every product

    @property
    def bias(self) -> bool:
        return self.epilogue.split("+")[0] == "bias"

    @property
    def activation(self) -> str | None:
        act = self.epilogue.split("+")[-1]
        return None if act in ("", "bias") else act

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "Case":
        d = json.loads(text)
        return Case(**{**d, "pad": tuple(d["pad"])})

    def label(self) -> str:
        return (f"M={self.M} N={self.N} K={self.K} kernel={self.kernel} dtype={self.dtype} layout={self.layout} "
                f"pad={list(self.pad)} offset={self.offset} alpha={self.alpha:g} beta={self.beta:g} c={self.c} "
                f"out={self.out}" + (f" special={self.special}" if self.special else "")
                + (f" epilogue={self.epilogue}" if self.epilogue else "")
                + (f" batch={self.batch}" + (" shared_a" if self.shared_a else "") if self.batch else "")
                + f" [{self.regime}]")  # fmt: skip

    def call(self) -> str:
        """The gemm() call this case makes, as Python."""
        _, result, precision = DTYPES[self.dtype]
        args = ["a", "b"] + (["c"] if self.c in ("random", "inplace") else [])
        kw = [f"alpha={self.alpha!r}", f"beta={self.beta!r}", f"kernel={self.kernel!r}"]
        if self.c == "inplace":
            kw.append("out=c")
        elif self.out == "poison":
            kw.append("out=out")
        if precision != "fp32":
            kw.append(f"precision={precision!r}")
        if result != DTYPES[self.dtype][0] and self.out == "new" and self.c != "inplace":
            kw.append("out_dtype=torch.float32")
        if self.bias:
            kw.append("bias=bias")
        if self.activation:
            kw.append(f"activation={self.activation!r}")
        if self.batch:
            kw = [k for k in kw if not k.startswith("kernel=")] + ["one_launch=True"]
            return f"gemmlab.bmm({', '.join(args + kw)})"
        return f"gemmlab.gemm({', '.join(args + kw)})"


# ---- Drawing problems ---------------------------------------------------------------------------


def _log_int(rng: random.Random, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


def _side(rng: random.Random, lo: int, hi: int) -> int:
    """A size in [lo, hi]: log-uniform, or a tile edge or a prime in range, or odd."""
    pick = rng.random()
    near = [v for v in EDGES + PRIMES if lo <= v <= hi]
    if pick < 0.25 and near:
        return rng.choice(near)
    v = _log_int(rng, lo, hi)
    return v | 1 if pick < 0.5 and v < hi else v


def _tile_edge(rng: random.Random, hi: int) -> int:
    """A whole number of some tile width, or one either side of it."""
    t = rng.choice((64, 128, 192, 256))
    return max(1, min(hi, t * rng.randint(1, max(1, hi // t)) + rng.choice((-1, 0, 1))))


def _short_k(rng: random.Random) -> int:
    return rng.choice(EDGES[:29]) if rng.random() < 0.5 else rng.randint(1, 320)


# Each regime: (weight, what it aims at, M, N, K drawn from a Random).
REGIMES: dict[str, tuple[float, str, Callable[[random.Random], tuple[int, int, int]]]] = {
    "short-k": (0.3, "several tiles a persistent block, K shorter than the ring (one to five stages)",
                lambda r: (_side(r, 1024, 6144), _side(r, 1024, 6144), _short_k(r))),
    "small-odd": (0.2, "sizes no tile divides, below a wave of tiles",
                  lambda r: (_side(r, 1, 1100), _side(r, 1, 1100), _side(r, 1, 1100))),
    "tile-edge": (0.15, "whole tiles and one either side, in M, N and K",
                  lambda r: (_tile_edge(r, 4608), _tile_edge(r, 4608), _short_k(r) if r.random() < 0.5 else _tile_edge(r, 2304))),
    "skinny": (0.12, "1-160 rows or columns against thousands: the skinny and split paths",
               lambda r: _skinny(r)),
    "tall-k": (0.05, "few output tiles, a long K: split-K and stream-K",
               lambda r: (_side(r, 1, 768), _side(r, 1, 768), _log_int(r, 2048, 65536))),
    "broad": (0.18, "any size up to 8192 on each side",
              lambda r: (_log_int(r, 1, 8192), _log_int(r, 1, 8192), _log_int(r, 1, 8192))),
    "one-wave": (0.1, "about a wave of some tc07 tile (one a block, where auto's tile choice turns)",
                 lambda r: _one_wave(r)),
}  # fmt: skip

# tc07's block tiles (BM, BN), its default and those tile_time weighs (TC07_TILES): a "one-wave"
# problem is about an SM's worth of one of them
WAVE_TILES = tuple(dict.fromkeys([(128, 256)] + [(o.get("BM", 128), o.get("BN", 256)) for o, _ in TC07_TILES]))


def _one_wave(rng: random.Random) -> tuple[int, int, int]:
    """M x N of 60 to 140 tiles of one of WAVE_TILES (an H100's or H200's 132 SMs, or half of
    them in pairs), each edge a part-tile short now and then; K short or long."""
    bm, bn = rng.choice(WAVE_TILES)
    tiles = rng.randint(60, 140)
    rows = rng.randint(1, min(tiles, 48))
    cols = max(1, tiles // rows)
    M = max(1, rows * bm - (rng.randint(1, bm - 1) if rng.random() < 0.5 else 0))
    N = max(1, cols * bn - (rng.randint(1, bn - 1) if rng.random() < 0.5 else 0))
    return M, N, _short_k(rng) if rng.random() < 0.3 else _log_int(rng, 64, 16384)


def _skinny(rng: random.Random) -> tuple[int, int, int]:
    small = rng.choice(EDGES[:23]) if rng.random() < 0.5 else rng.randint(1, 160)
    big, k = _side(rng, 256, 16384), _side(rng, 16, 8192)
    return (small, big, k) if rng.random() < 0.5 else (big, small, k)


def _fit(M: int, N: int, K: int) -> tuple[int, int, int]:
    """The problem shrunk (K first, then M and N alike) to MAX_OUTPUT and MAX_FLOPS."""
    while M * N > MAX_OUTPUT:
        M, N = max(1, M * 3 // 4), max(1, N * 3 // 4)
    K = max(1, min(K, MAX_FLOPS // (2 * M * N)))
    return M, N, K


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def run_activation(seed: int) -> str | None:
    """The activation of a run's epilogues (None: a bias alone), drawn from its seed."""
    return random.Random(f"activation {seed}").choice([None, *(a for a in ACTIVATIONS if a is not None)])


def draw(seed: int, dtypes: tuple[str, ...] | None = None, kernels: tuple[str, ...] | None = None,
         activation: str | None = None) -> Case:  # fmt: skip
    """Case `seed`: every choice but a named kernel's (which needs the tensors: pick_kernel).
    activation: the run's (run_activation), taken by the cases drawn with an epilogue."""
    rng = random.Random(seed)
    regime = _weighted(rng, {k: w for k, (w, _, _) in REGIMES.items()})
    M, N, K = _fit(*REGIMES[regime][2](rng))
    if rng.random() < 0.01:  # no K at all: D = beta * C (alpha times an empty sum)
        K = 0
    dt = _weighted(rng, {k: w for k, w in DTYPE_WEIGHTS.items() if dtypes is None or k in dtypes})
    layout = rng.choice(("nn", "nn", "nt", "tn", "tt"))
    pad = tuple(0 if rng.random() < 0.6 else rng.choice((rng.randint(1, 16), 64 * rng.randint(1, 4))) for _ in range(3))
    offset = 0 if rng.random() < 0.85 else rng.randint(1, 7)
    alpha = 0.0 if rng.random() < 0.02 else rng.choice((1.0, 1.0, -1.0, 0.5, 2.0, round(rng.uniform(-2, 2), 3)))
    c = _weighted(rng, {"none": 0.35, "nan": 0.25, "random": 0.25, "inplace": 0.15})
    beta = 0.0 if c in ("none", "nan") else rng.choice((1.0, -0.75, 0.5, round(rng.uniform(-2, 2), 3) or 1.0))
    out = "poison" if c == "inplace" or rng.random() < 0.85 else "new"
    special = "" if alpha == 0.0 or K == 0 or rng.random() >= 0.04 else rng.choice(("nan-a", "inf-a", "nan-b", "inf-b"))
    named = _named(kernels)
    if kernels is not None and not named:  # 'auto' alone
        kernel = "auto"
    else:
        kernel = "auto" if (kernels is None or "auto" in kernels) and rng.random() < 0.6 else "any"
    if kernel == "any" and rng.random() < 0.4:  # rows TMA can read in place: the unstaged TMA steps serve too
        pad, offset = _aligned_pads(M, N, K, layout, DTYPES[dt][0].itemsize, DTYPES[dt][1].itemsize, rng), 0
    # drawn from a generator of its own, so that every other choice of a seed is what it was before
    # epilogues were drawn
    erng = random.Random(f"epilogue {seed}")
    epilogue = ""
    if erng.random() < EPILOGUE_SHARE:
        with_bias = activation is None or erng.random() < 0.6
        epilogue = "+".join(p for p in ("bias" if with_bias else "", activation or "") if p)
    case = Case(seed, regime, dt, M, N, K, layout, pad, offset, alpha, beta, c, out, special, kernel, epilogue)
    return _batched(case) if kernels is None or "auto" in kernels else case  # (named kernels alone: gemm() only)


def _named(kernels: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The kernels named among `kernels` ('auto' is gemm()'s choice, not a kernel); None: every one."""
    return None if kernels is None else tuple(k for k in kernels if k != "auto")


def _batched(case: Case) -> Case:
    """A 16-bit case made a batch of products for bmm's one-launch path, BATCHED_SHARE of them,
    from a generator of its own (every other choice of the seed stays what it was): the batch's
    work fitted to the same limits, D allocated by bmm (it takes no out=), C never D."""
    rng = random.Random(f"batch {case.seed}")
    if DTYPES[case.dtype][0] == torch.float32 or rng.random() >= BATCHED_SHARE:
        return case
    batch = rng.choice(BATCH_SIZES)
    M, N, K = case.M, case.N, case.K
    while batch * M * N > MAX_OUTPUT:
        M, N = max(1, M * 3 // 4), max(1, N * 3 // 4)
    K = max(1, min(K, MAX_FLOPS // (2 * M * N * batch)))  # (K = 0: nothing for one launch to load)
    c = "random" if case.c == "inplace" else case.c
    return replace(case, M=M, N=N, K=K, c=c, out="new", kernel="auto", batch=batch, shared_a=rng.random() < 0.25,
                   special=case.special if K else "")  # fmt: skip


def _aligned_pads(M: int, N: int, K: int, layout: str, size: int, result_size: int, rng: random.Random) -> tuple:
    """Pads that make every row stride a whole number of 16-byte units (what TMA reads)."""
    def pad(inner: int, elem: int) -> int:
        per16 = 16 // elem
        return -inner % per16 + per16 * rng.randint(0, 2)

    inner_a = M if layout[0] == "t" else K
    inner_b = K if layout[1] == "t" else N
    return pad(inner_a, size), pad(inner_b, size), pad(N, result_size)


def pick_kernel(case: Case, problem, kernels: tuple[str, ...] | None) -> str:
    """A kernel id for a case drawn with kernel 'any': one of those (of `kernels`, or of the
    registry) that serve the problem and finish it quickly, drawn from the case's seed; 'auto'
    where none does."""
    rng = random.Random(case.seed + 1)
    dtype, _, precision = DTYPES[case.dtype]
    specs = [registry.get(k) for k in _named(kernels)] if kernels else registry.kernels(dtype)
    serving = [s.id for s in specs
               if dtype in s.dtypes and (dtype != torch.float32 or s.math == precision)
               and problem.flops <= NAMED_MAX_FLOPS.get(s.id, NAMED_DEFAULT_MAX_FLOPS) and _serves(s, problem)]  # fmt: skip
    return rng.choice(serving) if serving else "auto"


def _serves(spec, problem) -> bool:
    try:
        spec_, _ = select(problem, spec.id, device="cuda")  # (a problem built on the CPU asks the same)
        return spec_.id == spec.id
    except ValueError:
        return False


# ---- Building and running a case ----------------------------------------------------------------


@dataclass
class Built:
    """A case's tensors and what its check needs."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor | None
    out: torch.Tensor | None
    c_before: torch.Tensor | None  # C before the call, where C is read or must stay unchanged
    problem: object
    bias: torch.Tensor | None = None


def build(case: Case, device: str = "cuda") -> Built:
    """The case's tensors on the GPU. device="cpu": the same shapes, strides and offsets, their
    values left unset -- all a kernel choice looks at -- to see on a machine without a GPU which
    kernels the cases reach."""
    dtype, result, precision = DTYPES[case.dtype]
    gen = None
    if device == "cuda":
        gen = torch.Generator(device=device)
        gen.manual_seed(case.seed)
    ta, tb = case.layout[0] == "t", case.layout[1] == "t"
    store = partial(operand, gen=gen, device=device)
    if case.batch:  # a batch of products: B's (and C's) matrices one after another, A's too unless shared
        store = partial(batch_operand, case.batch, gen=gen, device=device)
    a = (partial(operand, gen=gen, device=device) if case.shared_a else store)(case.M, case.K, ta, case.pad[0], case.offset, dtype)
    b = store(case.K, case.N, tb, case.pad[1], case.offset, dtype)
    if case.special:
        what, side = case.special.split("-")
        target = a if side == "a" else b
        if target.dim() == 3:  # in one matrix of the batch: the others' results must stay finite
            target = target[random.Random(case.seed + 4).randrange(target.shape[0])]
        i = random.Random(case.seed + 2).randrange(target.shape[0])
        j = random.Random(case.seed + 3).randrange(target.shape[1])
        target[i, j] = math.nan if what == "nan" else -math.inf if (i + j) % 2 else math.inf
    c = out = c_before = None
    if case.c in ("random", "inplace"):
        c = store(case.M, case.N, False, case.pad[2], case.offset, result)
    elif case.c == "nan":
        c = store(case.M, case.N, False, case.pad[2], case.offset, result, fill=math.nan)
    if c is not None:
        c_before = c.clone()
    if case.c == "inplace":
        out = c
    elif case.out == "poison":
        out = store(case.M, case.N, False, case.pad[2], 0, result, fill=math.nan)
    first = (lambda t: t if t is None or t.dim() == 2 else t[0]) if case.batch else (lambda t: t)
    problem = problem_from_tensors(first(a), first(b), first(c), out, alpha=case.alpha, beta=case.beta,
                                   precision=precision, out_dtype=result, device_type=device)  # fmt: skip
    # one vector over D's columns, for a batch too (the batch's store would give one a matrix)
    bias = operand(1, case.N, False, 0, 0, result, gen=gen, device=device)[0] if case.bias else None
    return Built(a, b, c, out, c_before, problem, bias)


def _cublas(case: Case, t: Built) -> torch.Tensor:
    """cuBLAS on the same problem: torch.addmm in the case's arithmetic (16-bit inputs with an fp32
    result: fp32 SGEMM on the same values, TF32 off)."""
    dtype, result, precision = DTYPES[case.dtype]
    a, b = (t.a.float(), t.b.float()) if result != dtype else (t.a, t.b)
    c = t.c_before if case.beta != 0 else torch.zeros((), dtype=result, device="cuda")
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        if case.batch:
            a = a.expand(case.batch, -1, -1) if a.dim() == 2 else a
            return apply_post(torch.baddbmm(c, a, b, beta=case.beta, alpha=case.alpha), t.bias, case.activation)
        return apply_post(torch.addmm(c, a, b, beta=case.beta, alpha=case.alpha), t.bias, case.activation)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _errors(case: Case, t: Built, d: torch.Tensor) -> torch.Tensor:
    """[ours: rel_fro, max_scaled, appeared, vanished; cuBLAS's four; C changed] without a sync."""
    a64, b64 = t.a.double(), t.b.double()
    ref, scale = reference(a64, b64, t.c_before, case.alpha, case.beta)
    ref, scale = reference_post(ref, scale, t.bias, None)
    norm = reference_norm(ref, a64, b64, t.c_before, case.alpha, case.beta)  # before the activation: it bounds its errors
    ref, scale = reference_post(ref, scale, None, case.activation)
    ours = error_terms(d, ref, scale, norm)
    theirs = error_terms(_cublas(case, t), ref, scale, norm)
    changed = torch.zeros((), dtype=torch.float64, device="cuda")
    if t.c is not None and case.c != "inplace":
        changed = (~((t.c == t.c_before) | (t.c.isnan() & t.c_before.isnan()))).sum().double()
    return torch.cat([ours, theirs, changed[None]])


@dataclass
class Outcome:
    case: Case
    chosen: str  # the kernel that ran ('auto' resolved) and its tile, for the coverage counts
    wrong: bool
    why: str
    ours: tuple[float, float]  # rel_fro, max_scaled
    cublas: tuple[float, float]
    tol: tuple[float, float]


def judge(case: Case, chosen: str, v: list[float]) -> Outcome:
    """The verdict on a case from its nine error terms (_errors)."""
    dtype, result, precision = DTYPES[case.dtype]
    tol = tolerance(result, precision, dtype, case.K)
    rel, ms, _, _, c_rel, c_ms, _, _, changed = v
    why = reasons(v, tol, "cuBLAS")
    if changed:
        why.append(f"{int(changed)} elements of C changed, though D is elsewhere")
    return Outcome(case, chosen, bool(why), "; ".join(why), (rel, ms), (c_rel, c_ms), (tol.rel_fro, tol.max_scaled))


def _chosen(problem, kernel: str, batch: int = 0) -> str:
    if batch:  # bmm's one-launch path
        from .batched_tc07 import SPEC, config_for

        cfg = config_for(problem.N, int(problem.a.trans), int(problem.b.trans))
        return f"{SPEC.id} BM={cfg['BM']},BN={cfg['BN']}"
    spec, cfg = select(problem, kernel)
    tile = {k: v for k, v in cfg.as_dict().items() if k in ("BM", "BN", "CM", "NT", "BW", "SPLIT", "SK", "RED")}
    return spec.id + ("" if not tile else " " + ",".join(f"{k}={v}" for k, v in tile.items()))


def start(case: Case, kernels: tuple[str, ...] | None = None) -> tuple[Case, str, torch.Tensor]:
    """Build and launch a case and queue its checks: (the case, its kernel resolved, the error
    terms, still on the GPU). A gemm() that refuses the problem raises its ValueError."""
    t = build(case)
    if case.kernel == "any":
        case = replace(case, kernel=pick_kernel(case, t.problem, kernels))
    precision = DTYPES[case.dtype][2]
    chosen = _chosen(t.problem, case.kernel, case.batch)
    if case.batch:
        hopper = torch.cuda.get_device_capability(t.a.device) >= (9, 0)  # else bmm's per-matrix path
        d = bmm(t.a, t.b, t.c, alpha=case.alpha, beta=case.beta, out_dtype=DTYPES[case.dtype][1], bias=t.bias,
                activation=case.activation, one_launch=hopper)  # fmt: skip
        return case, chosen, _errors(case, t, d)
    d = gemm(t.a, t.b, t.c, alpha=case.alpha, beta=case.beta, kernel=case.kernel, out=t.out, precision=precision,
             out_dtype=DTYPES[case.dtype][1], bias=t.bias, activation=case.activation)  # fmt: skip
    return case, chosen, _errors(case, t, d)


# ---- The run ------------------------------------------------------------------------------------


@dataclass
class Summary(RunSummary):
    not_reached: list[str] = field(default_factory=list)  # registered kernels of the dtypes drawn that never ran


def _as_record(o: Outcome) -> dict:
    return dict(case=asdict(o.case), chosen=o.chosen, why=o.why, ours=o.ours, cublas=o.cublas, tol=o.tol)


def run(seed: int, seconds: float, max_cases: int | None = None, dtypes: tuple[str, ...] | None = None,
        kernels: tuple[str, ...] | None = None, on_wrong: Callable[[Outcome], None] | None = None,
        on_progress: Callable[[Summary], None] | None = None) -> Summary:  # fmt: skip
    """Cases seed, seed + 1, ... until `seconds` have passed or max_cases are done. kernels: only
    these kernels ('auto' among them: gemm()'s own choice too), else 'auto' and every kernel that
    serves each problem."""
    s = Summary(seed)
    activation = run_activation(seed)
    warm(activation, dtypes, kernels)

    def count(item, o: Outcome) -> None:
        s.by_regime[o.case.regime] += 1
        s.by_dtype[o.case.dtype] += 1
        s.by_kernel[o.chosen] += 1

    def refused(case: Case, exc: ValueError) -> Outcome:  # gemm() refused a problem a user may pass: a failure too
        return Outcome(case, case.kernel, True, f"refused: {exc}", (0.0, 0.0), (0.0, 0.0), (0.0, 0.0))

    drive(s, seed, seconds, max_cases, draw=lambda i: draw(i, dtypes, kernels, activation),
          start=lambda case: start(case, kernels), judge=lambda item, v: judge(item[0], item[1], v), count=count,
          refused=refused, as_record=_as_record, on_wrong=on_wrong, on_progress=on_progress)  # fmt: skip
    ran = {chosen.split()[0] for chosen in s.by_kernel}
    wanted = _named(kernels) if kernels else [k.id for dt in (dtypes or DTYPES) for k in registry.kernels(DTYPES[dt][0])
                         if DTYPES[dt][0] != torch.float32 or k.math == DTYPES[dt][2]]  # fmt: skip
    s.not_reached = sorted(set(wanted) - ran)
    return s


def warm(activation: str | None, dtypes: tuple[str, ...] | None = None,
         kernels: tuple[str, ...] | None = None) -> int:  # fmt: skip
    """Compile, side by side in threads, every build a run may launch: the plain build of every
    config auto can choose (configs_in_use) of every kernel in the dtypes drawn, and the
    fused-epilogue build of those that fuse one, for this activation. A run's cases then wait for
    no compile (compiled one at a time as cases met them, a run on an H100 got through 8,002
    problems in its 400 s instead of 100,000). Returns how many builds there are (most come from
    the disk cache after a first run)."""
    import os

    from .configs import configs_in_use
    from .jit import compile_many, device_arch
    from .split import split_jobs
    from .reduce import reduce_job

    fused = post_code(True, activation)
    named = _named(kernels)
    every = not kernels or "auto" in kernels  # every build auto may choose, besides those named
    jobs = {}
    for dt in dtypes or DTYPES:
        dtype, result, precision = DTYPES[dt]
        for spec in registry.kernels(dtype, pending=bool(named)):  # a pending kernel only when named
            if (not every and spec.id not in named) or (dtype == torch.float32 and spec.math != precision):
                continue
            types = (dtype, result) if spec.type_param else (None, None)
            for cfg in configs_in_use(spec):
                if spec.type_param and not spec.builds_for(cfg, *types):
                    continue
                for post in (0, fused) if spec.epilogues else (0,):
                    jobs.setdefault(spec.name_expression(cfg, *types, post), (spec, cfg, *types, post))
            for job in split_jobs() if spec.split_operands else ():  # tc11's pre-pass
                jobs.setdefault(job[0].name_expression(job[1]), job)
            for post in (0, fused) if spec.parts_reduced is not None else ():  # step 12's reduction pass (RED = 1)
                job = reduce_job(post)
                jobs.setdefault(job[0].name_expression(job[1], None, None, post), job)
        if dtype != torch.float32 and BATCHED_SHARE and every:  # bmm's one-launch path: tc07's batched build
            from .batched_tc07 import SPEC, config_for

            for cfg in [config_for(n, ta, tb) for n in (256, 128) for ta in (0, 1) for tb in (0, 1)]:
                for post in (0, fused):
                    jobs.setdefault(SPEC.name_expression(cfg, dtype, result, post), (SPEC, cfg, dtype, result, post))
    arch = device_arch(torch.cuda.current_device())
    for done in compile_many(list(jobs.values()), arch, workers=os.cpu_count() or 1):
        if isinstance(done, Exception):
            raise done
    return len(jobs)


def replay(case: Case, repeats: int = 1) -> list[Outcome]:
    """Run one case again (repeats times, on its same inputs), each checked at once."""
    out = []
    for _ in range(repeats):
        c, chosen, e = start(case)
        out.append(judge(c, chosen, e.tolist()))
    return out
