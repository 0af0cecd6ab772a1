"""gemmlab accuracy (gemmlab.bench.accuracy): the input sets, the cases, the table and verdict from a
record, the command's refusal without a GPU (CPU tests); on a GPU (marker `gpu`), a reduced set of
cases through the same functions, held to the contract."""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gemmlab.bench import accuracy, accuracy_table, records, report
from gemmlab.bench.run import results_path, write_run
from gemmlab.cli import app
from gemmlab.reference import split_tf32

from conftest import HAS_GPU

ROOT = Path(__file__).resolve().parents[1]
M, N, K = 37, 29, 64  # drawn on the CPU: small, odd


def _draw(inputs: str, seed: int = 5):
    return accuracy.draw(inputs, M, N, K, seed, "cpu")


def test_cases_cover_every_k_and_ten_shapes():
    every = accuracy.cases()
    assert [c.K for c in every[: len(accuracy.SHAPES)]] == [1, 2, 8, 32, 64, 256, 1024, 4096, 16384, 65536]
    assert len({(c.M, c.N, c.K) for c in every}) >= 10 and any(c.M % 2 and c.N % 2 for c in every)
    assert {c.inputs for c in every} == set(accuracy.INPUTS) and len(every) == len(accuracy.INPUTS) * len(accuracy.SHAPES)
    assert set(accuracy.CONTRACT_INPUTS) == {"normal", "uniform", "wide"}
    for c in every:  # A and B in float64 stay under 1.2 GB
        assert 8 * (c.M + c.N) * c.K <= 1.2e9, c
    assert accuracy.cases(["wide"], [4096]) == [accuracy.AccuracyCase("wide", 1023, 1025, 4096)]
    with pytest.raises(ValueError, match="inputs 'huge'"):
        accuracy.cases(["huge"])
    with pytest.raises(ValueError, match="K=3: one of 1, 2, 8"):
        accuracy.cases(None, [3])


def test_seeds_are_fixed_by_the_case_and_differ_between_cases():
    every = accuracy.cases()
    assert len({c.seed for c in every}) == len(every)
    assert accuracy.AccuracyCase("normal", 1024, 1024, 64).seed == accuracy.AccuracyCase("normal", 1024, 1024, 64).seed
    assert "seed=" in every[0].label()


@pytest.mark.parametrize("inputs", list(accuracy.INPUTS))
def test_inputs_are_deterministic_finite_float32(inputs):
    first, again, other = _draw(inputs), _draw(inputs), _draw(inputs, seed=6)
    for t in (first.a, first.b):
        assert t.dtype == torch.float32 and torch.isfinite(t).all()
    assert first.a.shape == (M, K) and first.b.shape == (K, N)
    assert torch.equal(first.a, again.a) and torch.equal(first.b, again.b)
    assert not torch.equal(first.a, other.a)


def test_pow2_is_exact_and_refuses_subnormal_exponents():
    e = torch.arange(-126, 128)
    assert torch.equal(accuracy.pow2(e).double(), torch.exp2(e.double()))
    with pytest.raises(ValueError, match="exponents in"):
        accuracy.pow2(torch.tensor([-127]))


@pytest.mark.parametrize("inputs,a_axis,b_axis", [("wide", 1, 0), ("wide-k", 0, 1)])
def test_wide_scales_are_whole_powers_of_two_in_range(inputs, a_axis, b_axis):
    """wide: rows of A and columns of B scaled; wide-k: A's columns and B's rows. Exponents are
    integers in [-30, 30], both ends reachable, and the scaled values divide back to randn's."""
    ops = _draw(inputs)
    for e in (ops.a_exp, ops.b_exp):
        assert e.dtype == torch.int32 and int(e.min()) >= -accuracy.WIDE and int(e.max()) <= accuracy.WIDE
    many = accuracy.draw(inputs, 400, 400, 400, 1, "cpu")
    assert {int(many.a_exp.min()), int(many.a_exp.max())} == {-accuracy.WIDE, accuracy.WIDE}
    a_base = ops.a / accuracy.pow2(ops.a_exp).unsqueeze(a_axis)
    b_base = ops.b / accuracy.pow2(ops.b_exp).unsqueeze(b_axis)
    for base in (a_base, b_base):  # randn's values: nothing else was scaled
        assert base.abs().max() < 8 and base.abs().max() > 0.5
    assert torch.equal(a_base * accuracy.pow2(ops.a_exp).unsqueeze(a_axis), ops.a)  # exact scaling


def test_near_underflow_keeps_every_product_and_sum_normal_and_small_parts_subnormal():
    """A in [2^-126, 2^-119), B in [1, 2): products and sums normal fp32 values (at least 2^-126),
    while A's TF32 small parts fall below 2^-126, among the subnormals."""
    ops = _draw("near-underflow")
    tiny = 2.0**-126
    assert (ops.a >= tiny).all() and (ops.a < 2.0**-119).all() and (ops.b >= 1).all() and (ops.b < 2).all()
    lo, hi = accuracy.UNDERFLOW_EXP
    assert int(ops.a_exp.min()) >= lo and int(ops.a_exp.max()) <= hi and ops.b_exp is None
    assert ((ops.a.view(torch.int32) >> 23) - 127).flatten().tolist() == ops.a_exp.tolist()  # m 2^e, m in [1, 2)
    assert ((ops.a.double()[:, :, None] * ops.b.double()[None]) >= tiny).all()
    assert ((ops.a.double() @ ops.b.double()) >= tiny).all()
    _, small = split_tf32(ops.a)
    nonzero = small != 0
    assert nonzero.any() and (small[nonzero].abs() < tiny).all()


def test_ratio_is_ours_over_sgemm_and_none_where_unbounded():
    assert accuracy.ratio(2e-7, 4e-7) == 0.5
    assert accuracy.ratio(0.0, 0.0) == 1.0
    assert accuracy.ratio(1e-7, 0.0) is None and accuracy.ratio(None, 1e-7) is None


def test_error_terms_are_normwise_and_max_over_the_largest_element():
    ref = torch.tensor([[4.0, -2.0], [1.0, 0.0]], dtype=torch.float64)
    d = torch.tensor([[4.5, -2.0], [1.0, 0.25]])
    rel, largest, bad = accuracy.error_terms(d, ref).tolist()
    assert rel == pytest.approx((0.5**2 + 0.25**2) ** 0.5 / (16 + 4 + 1) ** 0.5)
    assert largest == 0.5 / 4 and bad == 0
    assert accuracy.error_terms(torch.tensor([[float("nan"), 0.0]]), ref[:1]).tolist()[2] == 1


def _record(inputs: str, K: int, ours: tuple, sgemm: tuple) -> dict:
    o, s = dict(rel=ours[0], max=ours[1], nonfinite=0), dict(rel=sgemm[0], max=sgemm[1], nonfinite=0)
    return dict(inputs=inputs, M=100, N=77, K=K, seed=K, kernel="tc11_3xtf32", config={"BM": 128},
                contract=inputs in accuracy.CONTRACT_INPUTS, ours=o, sgemm=s,
                ratio={m: accuracy.ratio(o[m], s[m]) for m in accuracy.METRICS})  # fmt: skip


META = dict(gpu="NVIDIA H100 80GB HBM3", gpu_slug="nvidia-h100-80gb-hbm3", commit="0123456789abcdef0123",
            time="2026-11-28T10:00:00+00:00", kind="accuracy", max_ratio=1.5)  # fmt: skip


def test_table_rows_and_verdict_from_a_record(tmp_path):
    recs = [_record("normal", 64, (1e-7, 2e-7), (2e-7, 2e-7)), _record("wide", 4096, (3e-7, 1e-7), (6e-7, 2e-7)),
            _record("near-underflow", 256, (3e-6, 2e-6), (1e-7, 1e-7))]  # fmt: skip
    write_run(results_path(tmp_path, META, "accuracy"), META, recs)
    section = report.accuracy_section(tmp_path)
    assert section.startswith("**NVIDIA H100 80GB HBM3**")
    lines = section.splitlines()
    assert "| inputs | M x N x K | kernel | ours rel | SGEMM rel | ratio | ours max | SGEMM max | ratio |" in lines
    assert "| normal | 100 x 77 x 64 | tc11_3xtf32 | 1.00e-07 | 2.00e-07 | 0.50x | 2.00e-07 | 2.00e-07 | 1.00x |" in lines
    assert "| wide | 100 x 77 x 4096 | tc11_3xtf32 | 3.00e-07 | 6.00e-07 | 0.50x | 1.00e-07 | 2.00e-07 | 0.50x |" in lines
    assert "| near-underflow | 100 x 77 x 256 | tc11_3xtf32 | 3.00e-06 | 1.00e-07 | 30.00x | 2.00e-06 | 1.00e-07 | 20.00x |" in lines
    # the verdict: over the contract's inputs only; geometric means 0.50x (rel) and sqrt(0.5) = 0.71x (max)
    assert ("The contract's inputs (normal, wide: 2 cases). Normwise worst 0.50x (normal 100x77x64), geometric mean "
            "0.50x; max element worst 1.00x (normal 100x77x64), geometric mean 0.71x. The contract (every ratio at most "
            "1.5x, each geometric mean below 1x) **holds**.") in section  # fmt: skip
    beside = section.split("Beside the contract (near-underflow: 1 case), not held to it:")[1]
    assert "| near-underflow | 100 x 77 x 256 |" in beside and "| near-underflow |" not in section.split("Beside")[0]
    assert "Normwise worst 30.00x (near-underflow 100x77x256), geometric mean 30.00x;" in beside
    assert "`0123456789ab` (2026-11-28T10:00:00+00:00)" in section
    assert "max: `max |D - R| / max |R|`" in section


def test_the_contract_fails_on_one_ratio_over_the_limit_or_a_mean_at_one():
    ok = _record("normal", 64, (1e-7, 1e-7), (2e-7, 2e-7))
    assert accuracy_table.verdict([ok])["holds"]
    over = _record("uniform", 1024, (1.6e-7, 1e-7), (1e-7, 1e-7))  # 1.6x, though the mean stays below 1
    v = accuracy_table.verdict([ok, ok, ok, over])
    assert not v["holds"] and v["rel"]["worst"] == pytest.approx(1.6) and v["rel"]["geomean"] < 1
    assert [(m, r["inputs"]) for m, r in v["over"]] == [("rel", "uniform")]
    even = _record("uniform", 1024, (1e-7, 1e-7), (1e-7, 1e-7))  # every ratio 1x: not below SGEMM on average
    assert not accuracy_table.verdict([even])["holds"]
    unbounded = _record("wide", 1, (1e-7, 1e-7), (0.0, 0.0))
    assert unbounded["ratio"]["rel"] is None and not accuracy_table.verdict([ok, unbounded])["holds"]
    table = accuracy_table.accuracy_table({"meta": META, "records": [ok, unbounded]})
    assert "| unbounded |" in table
    assert "Normwise worst unbounded (wide 100x77x1), geometric mean 0.50x of the bounded ones (1 unbounded)" in table
    assert not accuracy_table.verdict([])["holds"]


def test_the_section_is_the_newest_record_of_each_gpu_or_says_there_is_none(tmp_path):
    assert report.accuracy_section(tmp_path) == "_no records yet_"
    older = dict(META, time="2026-11-27T10:00:00+00:00")
    write_run(results_path(tmp_path, older, "accuracy"), older, [_record("normal", 64, (9e-7, 9e-7), (1e-7, 1e-7))])
    write_run(results_path(tmp_path, META, "accuracy"), META, [_record("normal", 64, (1e-7, 1e-7), (2e-7, 2e-7))])
    h200 = dict(META, gpu="NVIDIA H200", gpu_slug="nvidia-h200")
    write_run(results_path(tmp_path, h200, "accuracy"), h200, [_record("uniform", 8, (1e-7, 1e-7), (2e-7, 2e-7))])
    section = report.accuracy_section(tmp_path)
    assert "9.00e-07" not in section and "**NVIDIA H100 80GB HBM3**" in section and "**NVIDIA H200**" in section
    assert section == "\n\n".join(f"**{m['gpu']}**\n\n" + accuracy_table.accuracy_table(records.load_run(p))
                                  for m, p in ((META, records.find_runs(tmp_path, "accuracy")[1]),
                                               (h200, records.find_runs(tmp_path, "accuracy")[2])))  # fmt: skip
    assert "accuracy-3xtf32" in report.all_sections(tmp_path)


def test_the_page_names_the_shapes_the_module_runs():
    page = (ROOT / "docs" / "ladder" / "tc11-3xtf32.md").read_text()
    section = page.split("## Accuracy on a GPU")[1].split("\n## ")[0]
    for k, (m, n) in accuracy.SHAPES.items():
        assert f"{m} x {n}" in section, (m, n, k)
    assert "gemmlab accuracy" in section and "<!-- gemmlab:accuracy-3xtf32:start -->" in section


@pytest.mark.skipif(HAS_GPU, reason="checks the message a machine without a GPU gives")
def test_the_command_refuses_without_a_gpu(tmp_path):
    res = CliRunner().invoke(app, ["accuracy", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == "gemmlab: no CUDA GPU is visible on this machine; this command needs one."
    assert list(tmp_path.iterdir()) == []


def test_the_command_refuses_unknown_inputs_and_k_before_anything():
    for args, message in ((["--inputs", "huge"], "inputs 'huge'"), (["--k", "3"], "K=3")):
        res = CliRunner().invoke(app, ["accuracy", *args])
        assert res.exit_code == 2 and message in res.output, res.output


# ---- On a GPU -------------------------------------------------------------------------------

GPU_KS = (1, 8, 64, 1024, 4096)


@pytest.mark.gpu
def test_the_contract_holds_at_a_reduced_set_of_cases(tmp_path):
    """The contract's inputs at five K through run_accuracy (the command's function, record
    written): ratio at most 1.5x for both errors from K = 64 on. Below 64: the same where gemm()
    routes the problem away from tc11 (an FFMA step); where tc11 runs it, the split's bound, 2^-21
    normwise (docs/ladder/tc11-3xtf32.md: at K = 1 SGEMM rounds one product once, while the split
    drops terms worth up to 2^-21 of it)."""
    todo = accuracy.cases(list(accuracy.CONTRACT_INPUTS), list(GPU_KS))
    path, recs = accuracy.run_accuracy(tmp_path, todo)
    run = records.load_run(path)
    assert run["meta"]["kind"] == "accuracy" and len(run["records"]) == len(todo)
    failed = []
    for r in recs:
        label = f"{r['inputs']} M={r['M']} N={r['N']} K={r['K']} kernel={r['kernel']} seed={r['seed']}"
        assert r["ours"]["nonfinite"] == 0 and r["sgemm"]["nonfinite"] == 0, label
        if r["K"] < 64 and r["kernel"] == "tc11_3xtf32":
            if r["ours"]["rel"] > 2.0**-21:
                failed.append(f"{label}: rel {r['ours']['rel']:.3e} over 2^-21")
            continue
        for m in accuracy.METRICS:
            q = r["ratio"][m]
            if q is None or q > accuracy.MAX_RATIO:
                failed.append(f"{label}: {m} {r['ours'][m]:.3e}, SGEMM {r['sgemm'][m]:.3e}")
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("K", [64, 4096])
def test_near_underflow_stays_finite_positive_and_within_tf32(K):
    """Values near fp32's underflow edge: no NaN or Inf, no element of D flushed to zero (every
    product is a positive normal value), and the normwise error within 2^-10, TF32 alone's bound --
    the split's small parts lie among TF32's subnormals there, so SGEMM's accuracy is not held to."""
    case = accuracy.AccuracyCase("near-underflow", *accuracy.SHAPES[K], K)
    ops = accuracy.draw(case.inputs, case.M, case.N, case.K, case.seed)
    import gemmlab

    d = gemmlab.gemm(ops.a, ops.b, precision="3xtf32")
    assert torch.isfinite(d).all() and (d > 0).all(), case.label()
    r = accuracy.measure(case)
    assert r["ours"]["rel"] <= 2.0**-10, f"{case.label()}: rel {r['ours']['rel']:.3e}"
