"""precision="3xtf32" (tc11): the split of fp32 into TF32 big and small parts, its pre-pass kernel,
the GEMM on them, and its accuracy against float64 and cuBLAS's SGEMM. CPU tests: the split's torch
reference, the builds for sm_90a, validation and routing. GPU tests (marker `gpu`, skipped without
one): the pre-pass bit for bit against the reference, gemm(precision="3xtf32") against float64."""

import math
import random

import pytest
import torch

import gemmlab
from gemmlab import api, jit, registry, split
from gemmlab.configs import configs_in_use, select
from gemmlab.problem import fresh_problem, problem_from_tensors
from gemmlab.reference import TOLERANCES, check_result, round_tf32, split_tf32, tolerance
from gemmlab.specs.tf32x3 import SPLIT_TF32, TC_11

ARCH = "sm_90a"
TF32_MAX = 0x7F7FE000  # the largest finite TF32 value, as fp32 bits
LOW13 = (1 << 13) - 1  # the bits TF32 drops


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def from_bits(values) -> torch.Tensor:
    return torch.tensor([v - 2**32 if v >= 2**31 else v for v in values], dtype=torch.int32).view(torch.float32)


def edge_values() -> torch.Tensor:
    """Zeros, infinities, NaN, the largest values (fp32's, TF32's, between them, where rounding
    would overflow), the normal/subnormal boundary, subnormals, ties at TF32's last bit, and both
    signs of each."""
    pos = [0x00000000, 0x7F800000, 0x7FC00000, 0x7F7FFFFF, TF32_MAX, 0x7F7FE001, 0x7F7FEFFF, 0x7F7FF000, 0x7F7FF001,
           0x00800000, 0x007FFFFF, 0x00000001, 0x00001000, 0x00001FFF, 0x00003000, 0x00400000, 0x00801000,
           0x3F800000, 0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001, 0x3FFFF000, 0x3FFFFFFF, 0x4B7FFFFF]  # fmt: skip
    return from_bits(pos + [v | 0x80000000 for v in pos])


def exact_round_tf32(x: float) -> float:
    """x rounded to TF32 by arithmetic, not bits: to the nearest multiple of TF32's spacing at x
    (2^(e - 10) for |x| in [2^e, 2^(e + 1)), 2^-136 below 2^-126), ties away from zero; truncated
    where that would reach 2^128. An independent check of round_tf32's bit operations."""
    if not math.isfinite(x) or x == 0.0:
        return x
    e = max(math.frexp(abs(x))[1] - 1, -126)
    step = 2.0 ** (e - 10)
    q = abs(x) / step  # exact: a power-of-two scaling
    r = math.floor(q + 0.5) * step
    if r >= 2.0**128:
        r = math.floor(q) * step
    return math.copysign(r, x)


# ---- The split's reference (CPU) --------------------------------------------------------------


def test_round_tf32_is_round_to_nearest_ties_away_with_no_overflow():
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn(4000, generator=gen) * torch.exp2(torch.randint(-150, 128, (4000,), generator=gen).float())
    any_bits = torch.randint(-2**31, 2**31 - 1, (4000,), generator=gen, dtype=torch.int32).view(torch.float32)
    x = torch.cat([edge_values(), wide, any_bits])
    got = round_tf32(x)
    for xi, gi in zip(x.tolist(), got.tolist()):
        want = exact_round_tf32(xi)
        assert (math.isnan(gi) and math.isnan(want)) or gi == want, f"x={xi!r}: {gi!r}, arithmetic says {want!r}"
    finite = torch.isfinite(x)
    assert torch.isfinite(got[finite]).all(), "rounding overflowed to Inf"
    assert (bits(got[finite]) & LOW13 == 0).all(), "not a TF32 value"
    assert torch.equal(bits(got[~finite]), bits(x[~finite])), "Inf and NaN stay as they are"
    assert float(round_tf32(torch.tensor([1.0 + 2**-11]))) == 1.0 + 2**-10  # a tie, away from zero
    assert float(round_tf32(torch.tensor([-(1.0 + 2**-11)]))) == -(1.0 + 2**-10)


@pytest.mark.parametrize("dist", ["normal", "uniform", "wide", "bits"])
def test_split_parts_are_tf32_and_add_up_to_x(dist):
    """big and small are TF32 values, small at most half a unit of big's last bit; big + small is x
    within max(2^-23 |x|, 2^-137) (TF32 keeps fp32's exponent range, so below 2^-114 the small part
    runs into TF32's subnormal spacing, 2^-136), 2^-22 |x| where big is truncated (the largest values)."""
    gen = torch.Generator().manual_seed(2)
    n = 20000
    x = {"normal": lambda: torch.randn(n, generator=gen),
         "uniform": lambda: torch.rand(n, generator=gen),
         "wide": lambda: torch.randn(n, generator=gen) * torch.exp2(torch.randint(-149, 127, (n,), generator=gen).float()),
         "bits": lambda: torch.randint(-2**31, 2**31 - 1, (n,), generator=gen, dtype=torch.int32).view(torch.float32)}[dist]()
    x = torch.cat([x, edge_values()])
    big, small = split_tf32(x)
    assert big.dtype == small.dtype == torch.float32
    finite = torch.isfinite(x)
    assert (bits(big[finite]) & LOW13 == 0).all() and (bits(small) & LOW13 == 0).all()
    assert torch.isfinite(big[finite]).all() and torch.isfinite(small).all()
    top = (bits(x) & 0x7FFFFFFF) >= TF32_MAX
    x64, err = x[finite].double(), (big[finite].double() + small[finite].double() - x[finite].double()).abs()
    rel = torch.where(top[finite], 2.0**-22, 2.0**-23)
    bound = torch.maximum(x64.abs() * rel, torch.full_like(x64, 2.0**-137))
    assert (err <= bound).all(), f"worst: x={float(x64[(err / bound).argmax()])!r}"
    # small is at most half a unit of big's last bit (a whole unit where big is truncated, at the top;
    # below 2^-114 both parts are multiples of TF32's subnormal spacing instead)
    normal = finite & (x.abs() >= 2.0**-114) & ~top
    assert (small[normal].abs() <= big[normal].abs() * 2.0**-11).all()
    assert (small[finite & top].abs() <= big[finite & top].abs() * 2.0**-10).all()


@pytest.mark.parametrize("significant", [22, 23])
def test_split_is_exact_for_23_significant_bits(significant):
    """x with at most 23 significant bits (the low mantissa bit clear; 22: the low two), from 2^-114
    up to below the largest TF32 value: big + small == x exactly."""
    gen = torch.Generator().manual_seed(3)
    n = 20000
    mant = torch.randint(0, 1 << 23, (n,), generator=gen, dtype=torch.int32) & ~((1 << (24 - significant)) - 1)
    expo = torch.randint(127 - 114, 254, (n,), generator=gen, dtype=torch.int32)  # biased: 2^-114 .. 2^126
    sign = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int32) << 31
    x = (sign | (expo << 23) | mant).view(torch.float32)
    big, small = split_tf32(x)
    assert torch.equal(big.double() + small.double(), x.double())


def test_split_of_inf_nan_and_the_largest_values():
    """Inf and NaN go whole into big with small = 0 (an Inf must not become NaN); at and above the
    largest TF32 value big is x truncated, never Inf, and small the rest; zeros stay zeros."""
    inf, nan = float("inf"), float("nan")
    big, small = split_tf32(torch.tensor([inf, -inf, nan, 0.0, -0.0]))
    assert big[0] == inf and big[1] == -inf and big[2].isnan() and (small == 0).all()
    assert torch.equal(bits(big[3:]), bits(torch.tensor([0.0, -0.0])))
    top = from_bits([0x7F7FFFFF, 0x7F7FF000, TF32_MAX + 1, 0xFF7FFFFF])
    big, small = split_tf32(top)
    assert torch.equal(bits(big) & 0x7FFFFFFF, torch.tensor([TF32_MAX] * 4, dtype=torch.int32))
    err = (big.double() + small.double() - top.double()).abs()
    assert torch.isfinite(small).all() and (err <= top.double().abs() * 2.0**-22).all()


def _emulated_3xtf32(a: torch.Tensor, b: torch.Tensor, block: int = 32) -> torch.Tensor:
    """tc11's arithmetic with an exact MMA: each 32-K block's three products summed exactly (in
    float64: TF32 products are exact there), rounded to fp32 once and added into an fp32 sum."""
    (ab, as_), (bb, bs) = split_tf32(a), split_tf32(b)
    ab, as_, bb, bs = (t.double() for t in (ab, as_, bb, bs))
    s = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k0 in range(0, a.shape[1], block):
        k = slice(k0, k0 + block)
        s = s + (as_[:, k] @ bb[k] + ab[:, k] @ bs[k] + ab[:, k] @ bb[k]).float()
    return s


def _sequential_sgemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An SGEMM that sums k in order with one fp32 FMA a step (as each thread of a GPU SGEMM does)."""
    s = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    a64, b64 = a.double(), b.double()
    for k in range(a.shape[1]):
        s = (s.double() + a64[:, k : k + 1] * b64[k : k + 1]).float()
    return s


@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_the_arithmetic_is_as_accurate_as_sgemm_past_one_product(dist):
    """The design's claim, on the CPU with an exact MMA: splitting into big + small and promoting
    every 32 K keeps the normwise error within SGEMM's (sequential FMA) from K = 64 on -- far below
    it on long K (SGEMM rounds K times, the promotion K / 32 times). For K = 1 SGEMM rounds one
    product once, while the split drops small_a small_b and the last bit of each small part, up to
    2^-22 + 2^-23 + 2^-23 of the product: about 3x SGEMM's error (2.9x normal, 3.2x uniform at
    64 x 64 in docs/ladder/tc11-3xtf32.md's table), within 2^-21 normwise. The GPU test below holds
    tc11 to the same bounds."""
    gen = torch.Generator().manual_seed(4)
    draw = (lambda *s: torch.randn(*s, generator=gen)) if dist == "normal" else (lambda *s: torch.rand(*s, generator=gen))
    for K in (1, 64, 1024):
        a, b = draw(32, K), draw(K, 32)
        ref = a.double() @ b.double()
        err = lambda d: float(torch.linalg.vector_norm(d.double() - ref) / torch.linalg.vector_norm(ref))  # noqa: E731
        ours, sgemm = err(_emulated_3xtf32(a, b)), err(_sequential_sgemm(a, b))
        if K == 1:
            assert ours <= 2.0**-21 and ours > sgemm, (K, ours, sgemm)
        else:
            assert ours <= 1.5 * sgemm, (K, ours, sgemm)


# ---- Builds, validation, routing (CPU) ----------------------------------------------------------


@pytest.mark.parametrize("trans", [0, 1])
def test_the_prepass_compiles_without_spills(trans):
    ck = jit.compile_kernel(SPLIT_TF32, SPLIT_TF32.config(TRANS=trans), ARCH)
    assert ck.cubin[:4] == b"\x7fELF" and 1 <= ck.usage.registers <= 255
    assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, ck.usage


@pytest.mark.parametrize("overrides", [{}, dict(BM=64, STAGES=4), dict(PROMOTE=2), dict(PROMOTE=4), dict(SUM=0),
                                       dict(SUM=2), dict(BM=64, STAGES=4, SUM=2)],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_tc11_compiles_without_spills_or_serialised_mmas(overrides):
    """tc11 fits the 168 registers 384 threads leave (64 accumulators and a 64-register sum a
    thread), and ptxas neither serialises its MMAs nor injects waits (C751x) on any path: every
    stage but a promotion interval's last keeps a group in flight, the last waits for all."""
    cfg = TC_11.config(**overrides)
    ck = jit.compile_kernel(TC_11, cfg, ARCH)
    assert ck.usage.spills == 0 and ck.usage.stack_frame == 0, ck.usage
    assert ck.usage.registers <= (168 if cfg["BM"] == 128 else 255)
    assert "C751" not in ck.log and "serialized" not in ck.log, ck.log


def test_tc11_configs_are_checked_before_compiling():
    for overrides, message in ((dict(BN=256), "BN must be 128"), (dict(BM=192), "BM must be 64 or 128"),
                               (dict(PROMOTE=0), "PROMOTE must be at least 1"), (dict(STAGES=4), "exceeds 227 KB"),
                               (dict(SUM=3), "SUM must be 0")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            TC_11.config(**overrides)
    assert [c.as_dict() for c in configs_in_use(TC_11)] == [TC_11.default_config().as_dict(), TC_11.config(BM=64, STAGES=4).as_dict()]


def test_precision_3xtf32_is_for_float32_only():
    a, b = torch.empty(8, 4), torch.empty(4, 6)
    assert problem_from_tensors(a, b, device_type="cpu", precision="3xtf32").precision == "3xtf32"
    for dtype in (torch.bfloat16, torch.float16):
        with pytest.raises(ValueError, match="precision='3xtf32' is for float32 inputs"):
            problem_from_tensors(a.to(dtype), b.to(dtype), device_type="cpu", precision="3xtf32")
    with pytest.raises(ValueError, match=r"precision must be one of \('fp32', 'tf32', '3xtf32'\)"):
        problem_from_tensors(a, b, device_type="cpu", precision="4xtf32")
    with pytest.raises(ValueError, match="CPU ladder computes and writes fp32 only"):
        gemmlab.gemm(a, b, device="cpu", precision="3xtf32")


def test_3xtf32_only_when_asked_for_and_only_tc11():
    a, b = torch.empty(64, 64), torch.empty(64, 48)
    p = {prec: problem_from_tensors(a, b, device_type="cpu", precision=prec) for prec in ("fp32", "tf32", "3xtf32")}
    assert "precision='3xtf32'" in TC_11.why_not(p["fp32"]) and "precision='3xtf32'" in TC_11.why_not(p["tf32"])
    assert TC_11.why_not(p["3xtf32"]) is None
    assert "precision='tf32'" in registry.get("tc08_tf32").why_not(p["3xtf32"])
    assert "full fp32" in registry.get("sgemm_11_warp_tile").why_not(p["3xtf32"])
    assert select(p["3xtf32"], device="cuda")[0] is TC_11
    assert select(p["fp32"], device="cuda")[0] is not TC_11 and select(p["tf32"], device="cuda")[0].id == "tc08_tf32"
    with pytest.raises(ValueError, match="cannot serve.*computes in full fp32"):
        select(p["3xtf32"], "sgemm_11_warp_tile", device="cuda")
    with pytest.raises(ValueError, match="cannot serve.*precision='3xtf32'"):
        select(p["fp32"], "tc11_3xtf32", device="cuda")
    assert tolerance(torch.float32, "3xtf32") == TOLERANCES[torch.float32]  # as accurate as SGEMM


@pytest.mark.parametrize("K", [1, 7, 32, 33, 1000])
def test_short_k_goes_to_ffma_under_auto(K):
    """Below SPLIT_TF32_MIN_K, 'auto' serves precision='3xtf32' with the FFMA ladder (fp32
    arithmetic, SGEMM's accuracy); tc11 named still runs there."""
    from gemmlab.configs import SPLIT_TF32_MIN_K

    for layout in ("nn", "tt"):
        a = torch.empty(300, K) if layout[0] == "n" else torch.empty(K, 300).t()
        b = torch.empty(K, 200) if layout[1] == "n" else torch.empty(200, K).t()
        p = problem_from_tensors(a, b, device_type="cpu", precision="3xtf32")
        spec, _ = select(p, device="cuda")
        assert (spec is TC_11) == (K >= SPLIT_TF32_MIN_K), (K, layout, spec.id)
        assert spec.math == ("3xtf32" if K >= SPLIT_TF32_MIN_K else "fp32")
        assert select(p, "tc11_3xtf32", device="cuda")[0] is TC_11


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_every_layout_stride_and_address_is_read_as_it_lies(layout):
    """The pre-pass reads any strides, so tc11 takes every layout in place (no row-major copies)
    and no operand is refused for TMA: rows of 37 floats (148 bytes), addresses off 16 bytes."""
    M, N, K = 33, 17, 37
    store = torch.empty(4096)
    a = store[1 : 1 + M * K].view(K, M).t() if layout[0] == "t" else store[1 : 1 + M * K].view(M, K)
    b = store[3 : 3 + N * K].view(N, K).t() if layout[1] == "t" else store[3 : 3 + N * K].view(K, N)
    p = problem_from_tensors(a, b, device_type="cpu", precision="3xtf32")
    spec, cfg = select(p, device="cuda")
    assert spec is TC_11 and spec.why_not(p, cfg) is None and spec.reads_in_place(p, cfg)
    (sam, sak), (sbn, sbk) = split.split_strides(p)
    assert (sam, sak) == ((1, M) if layout[0] == "t" else (K, 1)) and (sbk, sbn) == ((1, K) if layout[1] == "t" else (N, 1))
    for x, (sr, sc) in ((a, (sam, sak)), (b.t(), (sbn, sbk))):  # A, and B read as B^T
        assert x.stride() == (sr, sc) and split.split_config(sr, sc)["TRANS"] == int(x.stride(0) < x.stride(1))


@pytest.mark.parametrize("layout,trans", [("nn", {0, 1}), ("nt", {0}), ("tn", {1}), ("tt", {0, 1})])
def test_compile_jobs_name_the_prepass_builds(layout, trans):
    """`gemmlab compile --shape` warms what a 3xtf32 call loads: tc11 and the pre-pass builds its
    operands' layouts take (A as it lies, B as B^T: TRANS = 1 for a row-major B); without K, 'auto'
    takes the FFMA ladder and nothing is split."""
    p = fresh_problem(300, 520, 136, torch.float32, layout=layout, precision="3xtf32", device=torch.device("cuda", 0))
    jobs = api.compile_jobs([p])
    assert jobs[0][0] is TC_11 and {job[1]["TRANS"] for job in jobs[1:]} == trans
    assert all(job[0] is SPLIT_TF32 for job in jobs[1:])
    p0 = fresh_problem(300, 520, 0, torch.float32, layout=layout, precision="3xtf32", device=torch.device("cuda", 0))
    assert all(job[0] not in (TC_11, SPLIT_TF32) for job in api.compile_jobs([p0]))


def test_check_and_fuzz_run_3xtf32_against_sgemm():
    from gemmlab import fuzz
    from gemmlab.check import precision_of

    assert precision_of("tc11_3xtf32", torch.float32) == "3xtf32" and fuzz.DTYPES["3xtf32"][2] == "3xtf32"
    assert "3xtf32" in fuzz.DTYPE_WEIGHTS
    assert any(fuzz.draw(s).dtype == "3xtf32" for s in range(200))
    p = problem_from_tensors(torch.empty(300, 200), torch.empty(200, 100), device_type="cpu", precision="3xtf32")
    case = fuzz.Case(5, "small-odd", "3xtf32", 300, 100, 200, "nn", (0, 0, 0), 0, 1.0, 0.0, "none", "new", "", "any")
    assert fuzz.pick_kernel(case, p, None) == "tc11_3xtf32"


def test_bench_and_compile_take_3xtf32():
    """`gemmlab bench --dtype 3xtf32` times gemm(precision="3xtf32") against cuBLAS SGEMM, in records
    of their own name; `gemmlab compile -s ... --dtype 3xtf32` warms tc11 and the pre-pass."""
    from gemmlab.bench import run as bench_run
    from gemmlab.bench.tables import _arithmetic
    from gemmlab.cli.kernels import _shape_jobs

    assert bench_run.DTYPES["3xtf32"] == torch.float32 and bench_run.PRECISIONS["3xtf32"] == "3xtf32"
    assert bench_run.dtype_name(torch.float32, "3xtf32") == "3xtf32"
    assert bench_run.dtype_name(torch.float32, "3xtf32", layout="nt") == "3xtf32-nt"
    assert "SGEMM" in _arithmetic("3xtf32") and "tc11 reads the transposed operands in place" in _arithmetic("3xtf32-tt")
    jobs = _shape_jobs([(300, 520, 136)], ["3xtf32"], ["nn"])
    assert [j[0].id for j in jobs] == ["tc11_3xtf32", "split_tf32", "split_tf32"]


# ---- On a GPU -------------------------------------------------------------------------------


def rand(*shape, dist="uniform"):
    if dist == "normal":
        return torch.randn(shape, device="cuda")
    return torch.rand(shape, device="cuda") * 2 - 1


def operand(rows, cols, trans=False, pad=0, offset=0, dist="uniform"):
    """A rows x cols operand: row-major with pad extra elements a row, or the transposed view of a
    [cols][rows + pad] matrix; offset elements into its allocation (offsets that are not 16-byte
    multiples: the pre-pass reads any address)."""
    outer, inner = (cols, rows) if trans else (rows, cols)
    ld = inner + pad
    flat = rand(offset + outer * ld, dist=dist)
    m = flat[offset:].view(outer, ld)[:, :inner]
    return m.t() if trans else m


def edge_tensor(n: int) -> torch.Tensor:
    """n values: edge_values() among random ones of every exponent."""
    gen = torch.Generator().manual_seed(n)
    wide = torch.randn(n, generator=gen) * torch.exp2(torch.randint(-150, 128, (n,), generator=gen).float())
    e = edge_values()[:n]
    wide[torch.randperm(n, generator=gen)[: len(e)]] = e
    return wide


@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 13), (33, 65), (129, 1000), (1000, 3135)])
@pytest.mark.parametrize("trans", [False, True])
def test_prepass_is_the_python_split_bit_for_bit(rows, cols, trans):
    """The pre-pass on a row-major matrix (TRANS = 0) and on a transposed view (TRANS = 1, through
    the shared tile), with padded rows, every edge value among random ones of every exponent:
    big and small bit for bit as reference.split_tf32 gives them, NaN's bits included."""
    x = operand(rows, cols, trans, pad=3, offset=1)
    x.copy_(edge_tensor(rows * cols).view(rows, cols).cuda())
    sr, sc = x.stride()
    parts = split.split(x.data_ptr(), rows, cols, sr, sc, x.device, 0)
    torch.cuda.synchronize()
    assert parts.shape == (2, rows, -(-cols // split.LD_ALIGN) * split.LD_ALIGN) and split.split_config(sr, sc)["TRANS"] == int(trans)
    big, small = split_tf32(x.cpu())
    assert torch.equal(bits(parts[0, :, :cols].cpu()), bits(big)), "big"
    assert torch.equal(bits(parts[1, :, :cols].cpu()), bits(small)), "small"


VARIANTS = [(1.0, 0.0, "none"), (1.5, -0.75, "random"), (-1.0, 0.0, "nan"), (0.5, 2.0, "inplace")]
SHAPES = [(1, 1, 1), (7, 7, 7), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (3135, 3135, 1000), (131, 257, 509),
          (509, 131, 257), (300, 200, 1), (1, 3135, 17), (2053, 1, 1031), (65, 129, 4099)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_3xtf32_against_float64(layout, M, N, K):
    """tc11 (named: 'auto' gives K < 33 to FFMA) in every layout, at sizes no tile divides (1, 7, 17, 127, 1000, 3135,
    primes, K = 1), each alpha/beta variant -- C read, C full of NaN with beta = 0, in place -- into
    poisoned D, held to fp32's tolerance; C left as it was where D is elsewhere."""
    a = operand(M, K, layout[0] == "t", pad=M % 3)
    b = operand(K, N, layout[1] == "t", pad=K % 5, offset=K % 2)
    for alpha, beta, kind in VARIANTS:
        c = None if kind == "none" else torch.full((M, N), float("nan"), device="cuda") if kind == "nan" else rand(M, N)
        c0 = None if c is None else c.clone()
        out = c if kind == "inplace" else torch.full((M, N), float("nan"), device="cuda")
        gemmlab.gemm(a, b, c, alpha=alpha, beta=beta, out=out, kernel="tc11_3xtf32", precision="3xtf32")
        torch.cuda.synchronize()
        label = f"M={M} N={N} K={K} kernel=tc11_3xtf32 {layout} alpha={alpha} beta={beta} C={kind}"
        rep = check_result(out, a, b, c0 if beta else None, alpha, beta, "3xtf32")
        assert rep.passed, f"{label}: {rep.summary()}"
        if kind in ("random", "nan"):
            assert torch.equal(c.isnan(), c0.isnan()) and torch.equal(c.nan_to_num(), c0.nan_to_num()), f"{label}: C changed"


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [TC_11.config(**o) for o in ({}, dict(BM=64, STAGES=4), dict(PROMOTE=2), dict(PROMOTE=4),
                                                                  dict(BM=64, STAGES=4, PROMOTE=3), dict(SUM=0), dict(SUM=2),
                                                                  dict(BM=64, STAGES=4, SUM=0))],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.as_dict().items()))
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (129, 68, 33), (1000, 1022, 1000), (300, 701, 4099), (4096, 130, 64), (2500, 2500, 97)])
def test_every_tile_and_promotion_interval(cfg, M, N, K):
    """Each config by name through prepare() -- both tiles, promotion every 1 to 4 stages (the
    interval's last stage shorter where K / 32 does not divide) -- several tiles a persistent
    block, alpha and beta, launched twice (the scratch is allocated again each time)."""
    a, b, c = rand(M, K), rand(K, N), rand(M, N)
    out = torch.full((M, N), float("nan"), device="cuda")
    run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel="tc11_3xtf32", config=cfg, precision="3xtf32")
    for _ in range(2):
        run()
        torch.cuda.synchronize()
        rep = check_result(out, a, b, c, 0.5, -1.0, "3xtf32")
        assert rep.passed, f"M={M} N={N} K={K} {cfg.as_dict()}: {rep.summary()}"
        out.fill_(float("nan"))


@pytest.mark.gpu
@pytest.mark.parametrize("M,N", [(5, 7), (300, 129)])
def test_k_zero_is_beta_c_and_reads_nothing(M, N):
    a, b, c = torch.empty(M, 0, device="cuda"), torch.empty(0, N, device="cuda"), rand(M, N)
    out = gemmlab.gemm(a, b, c, alpha=2.0, beta=0.5, precision="3xtf32")
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 0.5 * c, rtol=0, atol=0)
    assert (gemmlab.gemm(a, b, precision="3xtf32") == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K", [(33, 20, 17), (300, 257, 1000)])
def test_inf_and_nan_propagate_as_in_fp32(layout, M, N, K):
    """Inf and NaN in A and B reach D as in float64 on the same inputs: NaN where it is NaN, the
    same infinity where it is infinite, finite elsewhere -- including an Inf whose partner is
    exactly TF32 (small part 0: the split's Inf x 0 = NaN, which tc11 recomputes in fp32) and an
    Inf against a zero (NaN)."""
    rng = random.Random(M * N + K)
    a, b = operand(M, K, layout[0] == "t"), operand(K, N, layout[1] == "t")
    b.copy_(torch.round(b * 8) / 8)  # exactly TF32 values: small parts of 0
    for _ in range(4):
        a[rng.randrange(M), rng.randrange(K)] = rng.choice([math.inf, -math.inf, math.nan])
        b[rng.randrange(K), rng.randrange(N)] = rng.choice([math.inf, -math.inf, math.nan, 0.0])
    a[0, 0], b[0, 0] = math.inf, 0.0  # Inf x 0 = NaN in D[0][0]
    out = gemmlab.gemm(a, b, kernel="tc11_3xtf32", precision="3xtf32")  # named: 'auto' takes FFMA at K = 17
    ref = a.double() @ b.double()
    torch.cuda.synchronize()
    d = out.double()
    assert torch.equal(d.isnan(), ref.isnan()), f"{layout} M={M} N={N} K={K}: NaN where float64 has none, or none where it has"
    inf = ref.isinf()
    assert torch.equal(d.isinf(), inf) and torch.equal(d[inf], ref[inf]), f"{layout} M={M} N={N} K={K}: infinities differ"
    rep = check_result(out, a, b, precision="3xtf32")
    assert rep.nonfinite == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dist", ["normal", "uniform"])
@pytest.mark.parametrize("K", [1, 64, 1024, 4096, 16384])
def test_as_accurate_as_cublas_sgemm(dist, K):
    """Normwise relative error against float64 within 1.5x cuBLAS SGEMM's (torch.mm, TF32 off) on
    the same inputs, normal and uniform [0, 1) -- except at K = 1, where SGEMM rounds one product
    once and the split's dropped terms (small_a small_b, the last bit of each small part) cost about
    3x that (test_the_arithmetic_is_as_accurate_as_sgemm_past_one_product, emulated): there within
    2^-21, the split's bound."""
    torch.manual_seed(K)
    M = N = 1024
    draw = (lambda *s: torch.randn(*s, device="cuda")) if dist == "normal" else (lambda *s: torch.rand(*s, device="cuda"))
    a, b = draw(M, K), draw(K, N)
    ref = a.double() @ b.double()
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        sgemm = torch.mm(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    ours = gemmlab.gemm(a, b, precision="3xtf32")
    err = lambda d: float(torch.linalg.vector_norm(d.double() - ref) / torch.linalg.vector_norm(ref))  # noqa: E731
    e_ours, e_cublas = err(ours), err(sgemm)
    bound = 2.0**-21 if K == 1 else 1.5 * e_cublas
    assert e_ours <= bound, f"{dist} K={K}: 3xTF32 {e_ours:.3e}, cuBLAS SGEMM {e_cublas:.3e}"
