"""gemmlab bmm-bench: its sweep, its table and summary from hand-made records, its section of
docs/results.md, its command, its refusal to run without CUDA, and (on a GPU) a small run."""

import math
import os
from pathlib import Path
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from gemmlab.bench import report
from gemmlab.bench.bmm import bmm_case, read_bmm_sweep, refuse_wrong, rel_fro, run_bmm_bench
from gemmlab.bench.bmm_table import bmm_summary, bmm_table
from gemmlab.bench.records import load_run
from gemmlab.bench.run import results_path, write_run
from gemmlab.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_the_sweep_covers_the_batched_target_grid_and_a_few_shapes_beside_it():
    spec = read_bmm_sweep(ROOT / "sweeps" / "bmm" / "grid.toml")
    assert spec["dtypes"] == ["bf16"] and spec["tag"] == "bmm" and spec["reps"] >= 10
    grid = [(b, n, n, n) for b in (8, 16, 32, 64) for n in (512, 1024, 2048)]
    assert spec["cases"][: len(grid)] == grid  # the grid first, in order
    others = spec["cases"][len(grid) :]
    assert 2 <= len(others) <= 4 and all(c not in grid for c in others)
    assert any(len({m, n, k}) > 1 for _, m, n, k in others), "a non-square shape beside the grid"
    assert any(all(s % 64 for s in (m, n, k)) for _, m, n, k in others), "a shape no tile divides"


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps" / "bmm").glob("*.toml")), ids=lambda p: p.name)
def test_every_bmm_sweep_reads(path):
    """The batched sweeps (gemmlab bmm-bench) live under sweeps/bmm/ (sweeps/*.toml are gemmlab bench's)."""
    assert read_bmm_sweep(path)["cases"]


@pytest.mark.parametrize("text, match", [
    ('batches = [8]\nsquares = [512]\nlayout = "nt"', "unknown keys"),
    ('dtypes = ["float32"]\nbatches = [8]\nsquares = [512]', "float32"),
    ('dtypes = []\nbatches = [8]\nsquares = [512]', "dtypes"),
    ('shapes = [{ B = 2, M = 3, N = 4 }]', r"shapes\[0\]"),
    ('batches = [8]', "needs batches and squares, or shapes"),
    ('batches = [0]\nsquares = [512]', "B=0 M=512"),
])  # fmt: skip
def test_a_bad_sweep_says_what_is_wrong(tmp_path, text, match):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_bmm_sweep(bad)


def test_shapes_alone_make_a_sweep_in_their_order(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('tag = "bmm-small"\ndtypes = ["fp16", "bf16"]\nreps = 3\nwarmup = 0\n'
                     'shapes = [{ B = 3, M = 129, N = 65, K = 1000 }, { B = 1, M = 1, N = 1, K = 1 }]\n')  # fmt: skip
    spec = read_bmm_sweep(sweep)
    assert spec == dict(cases=[(3, 129, 65, 1000), (1, 1, 1, 1)], dtypes=["fp16", "bf16"], tag="bmm-small", reps=3, warmup=0)


def _record(B, n, vs_torch, per_matrix_vs_torch, k=None):
    """A record as bmm_case writes it, at torch.bmm's 1 ms."""
    k = k or n
    flops = 2.0 * B * n * n * k
    ms, pm_ms = 1.0 / vs_torch, 1.0 / per_matrix_vs_torch
    return dict(B=B, M=n, N=n, K=k, dtype="bf16", reps=20, ms=ms, per_matrix_ms=pm_ms, torch_ms=1.0,
                tflops=flops / ms / 1e9, per_matrix_tflops=flops / pm_ms / 1e9, torch_tflops=flops / 1e9,
                vs_torch=vs_torch, per_matrix_vs_torch=per_matrix_vs_torch,
                errors=dict(one_launch=1.2e-3, per_matrix=1.1e-3, torch=1.0e-3))  # fmt: skip


def _run(records, gpu="NVIDIA H100 80GB HBM3", dtype="bf16", time="2026-12-01T10:00:00+00:00"):
    meta = dict(gpu=gpu, gpu_slug=gpu.lower().replace(" ", "-"), commit="0123456789abcdef0123", time=time,
                kind="bmm", dtype=dtype)  # fmt: skip
    return dict(meta=meta, records=records)


RECORDS = [_record(8, 512, 0.5, 0.25), _record(64, 2048, 1.25, 0.9), _record(32, 1024, 1.6, 2.0, k=128)]


def test_the_summary_is_the_geometric_mean_and_the_lowest_of_each_ratio():
    s = bmm_summary(RECORDS)
    assert s["vs_torch"]["geomean"] == pytest.approx((0.5 * 1.25 * 1.6) ** (1 / 3))  # 1.0
    assert s["per_matrix_vs_torch"]["geomean"] == pytest.approx((0.25 * 0.9 * 2.0) ** (1 / 3))
    assert s["vs_torch"]["lowest"] == 0.5 and s["vs_torch"]["lowest_case"] is RECORDS[0]
    assert s["per_matrix_vs_torch"]["lowest"] == 0.25 and s["per_matrix_vs_torch"]["lowest_case"] is RECORDS[0]
    s = bmm_summary(RECORDS[1:])  # the lowest follows the records: per matrix's is now the first one left
    assert (s["vs_torch"]["lowest"], s["per_matrix_vs_torch"]["lowest"]) == (1.25, 0.9)
    assert s["vs_torch"]["lowest_case"]["B"] == 64


def test_the_table_has_a_row_per_case_and_the_summary_under_it():
    table = bmm_table(_run(RECORDS))
    lines = table.splitlines()
    assert lines[0] == "| B | M x N x K | TFLOP/s | torch.bmm TFLOP/s | one launch vs torch.bmm | per matrix vs torch.bmm | error |"
    tf = 2.0 * 64 * 2048**3 / 1e9  # torch.bmm's TFLOP/s at 1 ms
    assert lines[3] == f"| 64 | 2048x2048x2048 | {tf * 1.25:.0f} | {tf:.0f} | 1.25x | 0.90x | 1.2e-03 |"
    assert lines[4].startswith("| 32 | 1024x1024x128 | ") and "| 1.60x | 2.00x |" in lines[4]
    summary = lines[-1]
    assert summary.startswith("NVIDIA H100 80GB HBM3, runs `0123456789ab` (2026-12-01T10:00:00+00:00), bf16:")
    geo = (0.25 * 0.9 * 2.0) ** (1 / 3)
    assert "**1.00x** in one launch (lowest 0.50x, B=8 512x512x512)" in summary
    assert f"**{geo:.2f}x** per matrix (lowest 0.25x, B=8 512x512x512)" in summary
    assert "median of 20 event-timed runs" in summary


def test_the_results_section_says_there_are_no_records_then_shows_the_newest_per_gpu_and_dtype(tmp_path):
    assert report.results_sections(tmp_path)["bmm"] == "_no records yet_"
    old, new = _run(RECORDS[:1]), _run(RECORDS, time="2026-12-02T10:00:00+00:00")
    fp16 = _run(RECORDS[1:], dtype="fp16", time="2026-12-01T09:00:00+00:00")
    for run in (old, new, fp16):
        write_run(results_path(tmp_path, run["meta"], "bmm"), run["meta"], run["records"])
    small = _run(RECORDS[:1], time="2026-12-03T10:00:00+00:00")  # another tag (a trial sweep): not the section's
    write_run(results_path(tmp_path, small["meta"], "bmm-small"), small["meta"], small["records"])
    section = report.results_sections(tmp_path)["bmm"]
    assert section == bmm_table(new) + "\n\n" + bmm_table(fp16)


def test_results_md_has_the_section_under_its_heading():
    text = (ROOT / "docs" / "results.md").read_text()
    heading = text.index("## Batched GEMM against torch.bmm")
    start, end = text.index("<!-- gemmlab:bmm:start -->"), text.index("<!-- gemmlab:bmm:end -->")
    intro = text[heading:start]
    assert heading < start < end and "one_launch=True" in intro and "one_launch=False" in intro and "torch.bmm(a, b)" in intro


def test_help_lists_the_command_and_its_options():
    runner = CliRunner()
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0 and "bmm-bench" in top.output
    res = runner.invoke(app, ["bmm-bench", "--help"])
    assert res.exit_code == 0, res.output
    for option in ("--sweep", "--dtype", "--out", "--register-stores", "sweeps/bmm/grid.toml"):
        assert option in res.output


def test_the_command_needs_a_gpu():
    r = subprocess.run([sys.executable, "-m", "gemmlab", "bmm-bench"], capture_output=True, text=True,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))  # fmt: skip
    assert r.returncode == 2 and "no CUDA GPU is visible" in r.stderr and "needs one" in r.stderr


def test_the_bench_refuses_to_run_without_cuda(tmp_path, monkeypatch):
    spec = dict(cases=[(2, 64, 64, 64)], dtypes=["bf16"], tag="bmm", reps=3, warmup=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="on a CUDA GPU, and none is visible"):
        run_bmm_bench(spec, tmp_path)
    assert not any(tmp_path.iterdir()), "no record written"
    with pytest.raises(ValueError, match="device 'cpu' is not a CUDA device"):
        bmm_case(2, 64, 64, 64, "bf16", reps=3, warmup=0, flusher=None, device="cpu")


def test_a_wrong_result_is_refused_before_timing():
    ok = dict(one_launch=1e-3, per_matrix=2e-3, torch=1e-3)
    refuse_wrong("B=2 M=3 N=4 K=5 bf16", ok, 1e-2)  # within the bound: no error
    for key, value in (("one_launch", 0.5), ("per_matrix", 2e-2), ("one_launch", math.nan)):
        with pytest.raises(RuntimeError, match=rf"B=2 M=3 N=4 K=5 bf16 \({key}\).*not timed"):
            refuse_wrong("B=2 M=3 N=4 K=5 bf16", dict(ok, **{key: value}), 1e-2)
    refuse_wrong("B=2 M=3 N=4 K=5 bf16", dict(ok, torch=0.5), 1e-2)  # torch's own error is recorded, not judged
    with pytest.raises(RuntimeError, match=r"\(registers\).*not timed"):  # --register-stores' side too
        refuse_wrong("B=2 M=3 N=4 K=5 bf16", dict(ok, registers=0.5), 1e-2)


def test_rel_fro_is_the_frobenius_norm_of_the_difference_over_the_reference():
    ref = torch.tensor([[[3.0, 0.0], [0.0, 4.0]]], dtype=torch.float64)  # ||ref|| = 5
    d = torch.tensor([[[3.0, 0.0], [0.0, 4.5]]], dtype=torch.bfloat16)  # off by 0.5 in one element
    assert rel_fro(d, ref) == pytest.approx(0.1)
    assert rel_fro(ref.to(torch.bfloat16), ref) == 0.0


@pytest.mark.gpu
def test_the_bench_runs_and_writes_its_record(tmp_path):
    sweep = tmp_path / "small.toml"
    sweep.write_text('tag = "bmm-small"\ndtypes = ["bf16"]\nreps = 3\nbatches = [3]\nsquares = [256]\n'
                     'shapes = [{ B = 5, M = 129, N = 200, K = 1000 }]\n')  # fmt: skip
    [(path, records)] = run_bmm_bench(read_bmm_sweep(sweep), tmp_path)
    assert path.exists() and path.name.startswith("bmm-small-") and len(records) == 2
    for r in records:
        assert r["errors"]["one_launch"] < 1e-2 and r["errors"]["per_matrix"] < 1e-2, r["errors"]
        assert r["ms"] > 0 and r["per_matrix_ms"] > 0 and r["torch_ms"] > 0
        assert r["vs_torch"] == pytest.approx(r["torch_ms"] / r["ms"])
    assert "| 5 | 129x200x1000 |" in bmm_table(load_run(path))


@pytest.mark.gpu
def test_the_bench_times_the_register_build_beside_the_staged_one(tmp_path):
    sweep = tmp_path / "small.toml"
    sweep.write_text('tag = "bmm-regs"\ndtypes = ["bf16"]\nreps = 3\nshapes = [{ B = 4, M = 129, N = 256, K = 512 }]\n')
    [(path, [r])] = run_bmm_bench(read_bmm_sweep(sweep), tmp_path, registers=True)
    assert r["errors"]["registers"] < 1e-2 and r["registers_ms"] > 0
    assert r["registers_vs_torch"] == pytest.approx(r["torch_ms"] / r["registers_ms"])
