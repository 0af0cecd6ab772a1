"""The fuzz harness's drawing and judging, without a GPU; its runs on one are GPU tests below."""

import math
import random

import pytest
import torch

from gemmlab import fuzz
from gemmlab.reference import error_terms

from conftest import HAS_GPU

SEEDS = range(5000)


def test_cases_are_fixed_by_their_seed_and_come_back_from_their_json():
    for seed in range(0, 5000, 97):
        case = fuzz.draw(seed)
        assert fuzz.draw(seed) == case
        assert fuzz.Case.from_json(case.to_json()) == case


def test_drawn_problems_stay_inside_the_limits_and_reach_every_regime():
    cases = [fuzz.draw(s) for s in SEEDS]
    for c in cases:
        assert min(c.M, c.N) >= 1 and c.K >= 0, c.label()
        assert c.M * c.N <= fuzz.MAX_OUTPUT and 2 * c.M * c.N * c.K <= max(fuzz.MAX_FLOPS, 2 * c.M * c.N), c.label()
        assert (c.beta == 0) == (c.c in ("none", "nan")), c.label()
        assert c.alpha != 0 or not c.special, "no NaN or Inf where alpha = 0 multiplies it away"
    for field_, values in (("regime", fuzz.REGIMES), ("dtype", fuzz.DTYPES), ("layout", ("nn", "nt", "tn", "tt")),
                           ("c", ("none", "nan", "random", "inplace")), ("kernel", ("auto", "any"))):  # fmt: skip
        seen = {getattr(c, field_) for c in cases}
        assert seen == set(values), f"{field_}: drew {seen}"
    short = [c for c in cases if c.regime == "short-k"]
    assert all(c.K <= 320 and min(c.M, c.N) >= 768 for c in short)
    assert sum(c.M * c.N >= 128 * 192 * 264 for c in short) > len(short) / 3, "several 128 x 192 tiles a block, often"
    assert any(c.special for c in cases) and any(c.offset for c in cases) and any(any(c.pad) for c in cases)
    assert any(c.K == 0 for c in cases) and not any(c.K == 0 and c.special for c in cases)


def test_the_one_wave_regime_reaches_the_tiles_whose_choice_turns_on_a_wave():
    """Problems of about a wave of tc07's tiles: among their 16-bit cases auto picks each of tc07's
    tiles, the 192 x 128 one (TILE_192X128) and the 128 x 192 one among them."""
    from gemmlab.configs import select

    cases = [c for c in (fuzz.draw(s, dtypes=("bf16",), kernels=("auto",)) for s in range(3000))
             if c.regime == "one-wave" and not c.batch]
    assert len(cases) > 100
    tiles = set()
    for c in cases:
        spec, cfg = select(fuzz.build(c, device="cpu").problem, "auto", device="cuda")
        if spec.id == "tc07_persistent_cluster":
            tiles.add((cfg["BM"], cfg["BN"]))
    assert {(192, 128), (128, 192), (128, 256), (128, 128)} <= tiles, tiles


def test_a_dtype_or_kernel_filter_holds():
    assert {fuzz.draw(s, dtypes=("fp16",)).dtype for s in range(300)} == {"fp16"}
    assert {fuzz.draw(s, kernels=("tc07_persistent_cluster",)).kernel for s in range(300)} == {"any"}


def test_auto_can_be_named_among_the_kernels():
    # '-k auto': gemm()'s own choice alone, batches through bmm among them as in a default run
    alone = [fuzz.draw(s, kernels=("auto",)) for s in range(3000)]
    assert {c.kernel for c in alone} == {"auto"}
    assert any(c.batch for c in alone) == bool(fuzz.BATCHED_SHARE)
    # beside a named kernel: both are drawn, and the named one is all a case drawn 'any' may pick
    mixed = [fuzz.draw(s, kernels=("auto", "sgemm_13_few_rows"), dtypes=("fp32",)) for s in range(300)]
    assert {c.kernel for c in mixed} == {"auto", "any"}
    case = next(c for c in mixed if c.kernel == "any" and c.M <= 16 and c.K)
    problem = fuzz.build(case, device="cpu").problem
    assert fuzz.pick_kernel(case, problem, ("auto", "sgemm_13_few_rows")) in ("sgemm_13_few_rows", "auto")


def test_the_printed_call_names_what_the_case_passes():
    case = fuzz.Case(1, "short-k", "bf16-fp32out", 5, 6, 7, "nt", (0, 0, 0), 0, 1.5, -0.75, "inplace", "poison", "",
                     "auto")  # fmt: skip
    assert case.call() == "gemmlab.gemm(a, b, c, alpha=1.5, beta=-0.75, kernel='auto', out=c)"
    tf = fuzz.Case(1, "broad", "tf32", 5, 6, 7, "nn", (0, 0, 0), 0, 1.0, 0.0, "none", "new", "", "tc08_tf32")
    assert tf.call() == "gemmlab.gemm(a, b, alpha=1.0, beta=0.0, kernel='tc08_tf32', precision='tf32')"


def _case(dtype="bf16", K=64):
    return fuzz.Case(3, "short-k", dtype, 100, 100, K, "nn", (0, 0, 0), 0, 1.0, 0.0, "nan", "poison", "", "auto")


def test_judge_fails_an_error_over_the_tolerance_and_cublas_s():
    ok = fuzz.judge(_case(), "k", [2e-3, 4e-3, 0, 0, 1.7e-3, 3.8e-3, 0, 0, 0])
    assert not ok.wrong
    bad = fuzz.judge(_case(), "k", [0.2, 0.7, 0, 0, 1.7e-3, 3.8e-3, 0, 0, 0])
    assert bad.wrong and "rel_fro" in bad.why and "max_scaled" in bad.why
    # over the tolerance, but cuBLAS is as far off on the same problem: not ours to fail
    shared = fuzz.judge(_case("fp32", K=60000), "k", [2e-5, 1e-5, 0, 0, 1.5e-5, 1e-5, 0, 0, 0])
    assert not shared.wrong


@pytest.mark.parametrize("terms,word", [((1, 0, 0), "appear"), ((0, 1, 0), "missing"), ((0, 0, 3), "C changed")])
def test_judge_fails_nan_appearing_or_vanishing_and_a_changed_c(terms, word):
    appeared, vanished, changed = terms
    o = fuzz.judge(_case(), "k", [0, 0, appeared, vanished, 0, 0, 0, 0, changed])
    assert o.wrong and word in o.why


def test_error_terms_count_nan_and_inf_that_appear_or_vanish():
    ref = torch.tensor([[1.0, math.nan], [math.inf, 4.0]], dtype=torch.float64)
    scale = torch.ones_like(ref)
    right = torch.tensor([[1.0, math.nan], [math.inf, 4.0]])
    assert error_terms(right, ref, scale, 1.0).tolist() == [0.0, 0.0, 0.0, 0.0]
    wrong = torch.tensor([[math.nan, 2.0], [-math.inf, 4.0]])  # a NaN appears, a NaN and an Inf vanish
    rel, ms, appeared, vanished = error_terms(wrong, ref, scale, 1.0).tolist()
    assert (appeared, vanished) == (1.0, 2.0)
    assert math.isinf(rel) and math.isinf(ms)


def _fake_start(case, kernels=None):
    """start() without a GPU: a ValueError for every tenth case, terms over both bounds for another
    tenth, a failing GPU at seed 130, right terms for the rest."""
    if case.seed == 130:
        raise RuntimeError("an illegal memory access was encountered")
    if case.seed % 10 == 3:
        raise ValueError("boom")
    bad = case.seed % 10 == 7
    terms = [0.5, 0.5, 0, 0, 1e-9, 1e-9, 0, 0, 0] if bad else [1e-9, 1e-9, 0, 0, 1e-9, 1e-9, 0, 0, 0]
    return case, "tc07_persistent_cluster BM=128,BN=256", torch.tensor(terms, dtype=torch.float64)


def test_a_run_counts_what_it_judged_and_keeps_what_was_in_flight_when_the_gpu_failed(monkeypatch):
    """run()'s bookkeeping (gemmlab.fuzz_loop.drive) with start() replaced: wrong by terms and by a
    refusal are both counted and kept, every judged case is counted once by regime, dtype and
    kernel, and a failure other than a refusal ends the run with its queued cases and the one that
    failed kept for replay."""
    import json

    monkeypatch.setattr(fuzz, "warm", lambda *a, **k: 0)
    monkeypatch.setattr(fuzz, "start", _fake_start)
    s = fuzz.run(100, seconds=60, max_cases=25)
    assert s.tried == 25 and s.crashed is None
    assert len(s.wrong) == sum(i % 10 in (3, 7) for i in range(100, 125))
    assert sum(s.by_dtype.values()) == sum(s.by_regime.values()) == sum(i % 10 != 3 for i in range(100, 125))
    assert set(s.by_kernel) == {"tc07_persistent_cluster BM=128,BN=256"} and s.worst
    crashed = fuzz.run(100, seconds=60, max_cases=1000)
    assert crashed.crashed["error"].startswith("RuntimeError: an illegal memory access")
    # refusals settle what was queued first; cases 124-129 were queued when 130 failed
    assert [c["seed"] for c in crashed.crashed["cases"]] == [124, 125, 126, 127, 128, 129, 130]
    assert [fuzz.Case.from_json(r).seed for r in crashed.crashed["replay"]] == list(range(124, 131))
    json.dumps(crashed.record())


@pytest.mark.gpu
def test_a_short_fuzz_run_finds_nothing_wrong():
    s = fuzz.run(random.randrange(2**40), seconds=60, max_cases=2000)
    assert s.tried == 2000 and s.crashed is None, s.crashed
    assert not s.wrong, s.wrong[:3]


@pytest.mark.gpu
def test_the_harness_sees_a_wrong_result():
    """A case run right, then the same case with one element of D changed after the kernel ran:
    the verdict must turn."""
    case = fuzz.Case(11, "short-k", "bf16", 300, 200, 40, "nt", (3, 0, 0), 0, 1.0, 0.0, "nan", "poison", "", "auto")
    t = fuzz.build(case)
    d = fuzz.gemm(t.a, t.b, t.c, alpha=case.alpha, beta=case.beta, out=t.out)
    assert not fuzz.judge(case, "auto", fuzz._errors(case, t, d).tolist()).wrong
    d[17, 101] += 0.5
    o = fuzz.judge(case, "auto", fuzz._errors(case, t, d).tolist())
    assert o.wrong and "max_scaled" in o.why


@pytest.mark.skipif(HAS_GPU, reason="the message of a machine without a GPU")
def test_the_command_says_it_needs_a_gpu():
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["fuzz", "--seconds", "1"])
    assert r.exit_code == 2 and "needs one" in r.output


@pytest.mark.parametrize("rows,cols,trans,pad,offset", [(5, 7, False, 0, 0), (5, 7, True, 3, 2), (5, 0, False, 4, 1),
                                                         (5, 0, True, 9, 0), (0, 5, True, 2, 3), (1, 1, True, 0, 7)])  # fmt: skip
def test_operands_have_the_shape_strides_and_offset_asked(rows, cols, trans, pad, offset):
    m = fuzz.operand(rows, cols, trans, pad, offset, torch.bfloat16, torch.Generator(), device="cpu")
    assert m.shape == (rows, cols) and m.storage_offset() == offset
    if rows and cols:
        inner = rows if trans else cols
        assert m.stride() == ((1, inner + pad) if trans else (inner + pad, 1))
        assert m.untyped_storage().nbytes() == (offset + (m.numel() // inner - 1) * (inner + pad) + inner) * 2


def test_the_cases_reach_every_gpu_kernel_and_every_tc07_tile():
    """What the first 3,000 cases run, worked out on the CPU from their shapes, strides and
    offsets (the choice looks at nothing else): every registered GPU kernel by name, and each of
    tc07's tiles through 'auto'. A kernel or tile the harness never draws is one it never checks."""
    from collections import Counter

    from gemmlab import registry
    from gemmlab.configs import select

    named, tiles = Counter(), Counter()
    for seed in range(3000):
        case = fuzz.draw(seed)
        problem = fuzz.build(case, device="cpu").problem
        if case.kernel == "any":
            named[fuzz.pick_kernel(case, problem, None)] += 1
        else:
            spec, cfg = select(problem, "auto", device="cuda")
            if spec.id == "tc07_persistent_cluster":
                tiles[cfg["BM"], cfg["BN"]] += 1
    assert {k.id for k in registry.KERNELS} <= set(named), f"never drawn by name: {set(k.id for k in registry.KERNELS) - set(named)}"
    assert {(128, 256), (128, 192), (128, 128), (64, 128), (192, 256)} <= set(tiles), f"tc07 tiles through auto: {tiles}"


def test_the_cases_reach_both_of_step_12s_reductions():
    """Step 12 as 'auto' or a named kernel launches it: among the first 3,000 cases, some whose
    parts the last run adds (RED = 0) and some whose parts the reduction pass adds (RED = 1)."""
    from collections import Counter

    from gemmlab.configs import select

    red = Counter()
    for seed in range(3000):
        case = fuzz.draw(seed)
        if case.dtype != "fp32":
            continue
        problem = fuzz.build(case, device="cpu").problem
        kernel = fuzz.pick_kernel(case, problem, None) if case.kernel == "any" else "auto"
        spec, cfg = select(problem, kernel, device="cuda")
        if spec.id == "sgemm_12_split_k" and cfg["SPLIT"]:
            red[cfg["RED"]] += 1
    assert red[0] >= 10 and red[1] >= 10, red


@pytest.fixture
def batched_share(monkeypatch):
    monkeypatch.setattr(fuzz, "BATCHED_SHARE", fuzz.BATCHED_SHARE_ON)


def test_batched_cases_wait_for_the_one_launch_path():
    from gemmlab import batched

    assert fuzz.BATCHED_SHARE == (fuzz.BATCHED_SHARE_ON if batched.ONE_LAUNCH else 0.0)


def test_batched_cases_are_16_bit_bmm_calls_inside_the_limits(batched_share):
    cases = [fuzz.draw(s) for s in SEEDS]
    batched = [c for c in cases if c.batch]
    assert batched and any(c.shared_a for c in batched) and any(c.special for c in batched)
    assert {c.batch for c in batched} == set(fuzz.BATCH_SIZES)
    for c in batched:
        assert fuzz.DTYPES[c.dtype][0] != torch.float32, c.label()
        assert c.batch * c.M * c.N <= fuzz.MAX_OUTPUT and 2 * c.batch * c.M * c.N * c.K <= max(fuzz.MAX_FLOPS, 2 * c.batch * c.M * c.N)
        assert c.K >= 1 and c.out == "new" and c.c != "inplace" and c.kernel == "auto", c.label()
        assert c.call().startswith("gemmlab.bmm(") and "one_launch=True" in c.call()
        assert fuzz.Case.from_json(c.to_json()) == c
    assert not any(fuzz.draw(s, kernels=("tc07_persistent_cluster",)).batch for s in range(300))


def test_a_batched_case_builds_its_batch_with_gaps_on_the_cpu(batched_share):
    case = next(c for c in (fuzz.draw(s) for s in SEEDS) if c.batch > 1 and any(c.pad) and not c.shared_a)
    t = fuzz.build(case, device="cpu")
    assert t.a.shape == (case.batch, case.M, case.K) and t.b.shape == (case.batch, case.K, case.N)
    for x, pad in ((t.a, case.pad[0]), (t.b, case.pad[1])):
        outer, inner = (x.shape[2], x.shape[1]) if x.stride(1) == 1 and x.shape[1] > 1 else (x.shape[1], x.shape[2])
        assert x.stride(0) == outer * max(inner + pad, 1) + pad, case.label()


def test_a_batched_case_with_a_bias_builds_one_vector_over_the_columns(batched_share):
    """bmm takes one bias for the whole batch, a vector of N: built from the batch's store it was
    a [1, N] matrix, which the one-launch path refuses (every such case counted wrong on a GPU)."""
    case = next(c for c in (fuzz.draw(s) for s in range(2000)) if c.batch > 1 and c.bias)
    t = fuzz.build(case, device="cpu")
    assert t.bias.shape == (case.N,), case.label()
    from gemmlab import batched_tc07

    why = batched_tc07.refusal(t.a, t.b, t.c, beta=case.beta, out_dtype=None, bias=t.bias, activation=case.activation)
    assert why is None or "bias" not in why, why


def test_a_pending_kernel_is_drawn_when_named():
    """`gemmlab fuzz -k sgemm_15_multistage`: a kernel not yet on the ladder (registry.PENDING) is
    drawn for every fp32 problem it serves (warm() compiles its builds too: registry.kernels(pending=True)
    when kernels are named)."""
    ms = ("sgemm_15_multistage",)
    picked = set()
    for seed in range(200):
        case = fuzz.draw(seed, dtypes=("fp32",), kernels=ms)
        if 2 * case.M * case.N * case.K <= fuzz.NAMED_MAX_FLOPS.get(ms[0], fuzz.NAMED_DEFAULT_MAX_FLOPS):  # else 'auto'
            picked.add(fuzz.pick_kernel(case, fuzz.build(case, device="cpu").problem, ms))
    assert picked == {"sgemm_15_multistage"}
