"""gemmlab train-bench: its sweep, the block and its swap to gemmlab.nn.Linear (on the CPU), the
agreement check, its table and summary from hand-made records, its section of docs/results.md,
its command and its step in scripts/gpu_run.sh, its refusal to run without CUDA, and (on a GPU) a
small run."""

import math
import os
from pathlib import Path
import subprocess
import sys

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import gemmlab
from gemmlab.bench import report
from gemmlab.bench.block import Block, on_gemmlab
from gemmlab.bench.records import load_run
from gemmlab.bench.run import results_path, write_run
from gemmlab.bench.train import (
    agreement, read_train_sweep, refuse_mismatch, run_train_bench, train_case, training_step,
)
from gemmlab.bench.train_table import train_summary, train_table
from gemmlab.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_the_sweep_has_an_8b_sized_block_and_a_small_one_at_8192_tokens_in_bf16():
    spec = read_train_sweep(ROOT / "sweeps" / "train" / "block.toml")
    assert spec["dtype"] == "bf16" and spec["tag"] == "train" and spec["reps"] >= 10 and spec["warmup"] >= 1
    sizes = [(b["d_model"], b["heads"], b["ffn"]) for b in spec["blocks"]]
    assert (4096, 32, 14336) in sizes and any(d == 1024 and ffn == 4096 for d, _, ffn in sizes)
    assert all(b["batch"] * b["seq"] == 8192 for b in spec["blocks"])
    assert len({b["name"] for b in spec["blocks"]}) == len(spec["blocks"])


def test_the_mixed_precision_sweep_is_the_same_blocks_under_autocast():
    amp, plain = (read_train_sweep(ROOT / "sweeps" / "train" / name) for name in ("block-amp.toml", "block.toml"))
    assert amp["dtype"] == "amp-bf16" and amp["tag"] == "train-amp" and amp["blocks"] == plain["blocks"]


def test_a_mixed_precision_step_on_the_cpu_autocasts_nothing_and_matches_float32():
    """training_step's region is CUDA's: on CPU tensors (the CPU ladder) the step is float32's."""
    torch.manual_seed(0)
    model = Block(d=32, heads=4, ffn=48)
    twin = on_gemmlab(model)
    x, target = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    plain = float(training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), x, target)())
    mixed = float(training_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-3), x, target, torch.bfloat16)())
    assert mixed == pytest.approx(plain, rel=1e-5)


@pytest.mark.parametrize("text, match", [
    ('layout = "nt"\n[[blocks]]\nname = "a"\nd_model = 8\nheads = 2\nffn = 8\nbatch = 1\nseq = 4', "unknown keys"),
    ('dtype = "fp8"\n[[blocks]]\nname = "a"\nd_model = 8\nheads = 2\nffn = 8\nbatch = 1\nseq = 4', "fp8"),
    ('dtype = "bf16"', r"needs \[\[blocks\]\]"),
    ('[[blocks]]\nname = "a"\nd_model = 8\nheads = 2\nffn = 8\nbatch = 1', r"blocks\[0\] has keys"),
    ('[[blocks]]\nname = "a"\nd_model = 10\nheads = 4\nffn = 8\nbatch = 1\nseq = 4', "d_model=10 a multiple of heads=4"),
    ('[[blocks]]\nname = "a"\nd_model = 8\nheads = 2\nffn = 8\nbatch = 0\nseq = 4', "at least 1"),
])  # fmt: skip
def test_a_bad_sweep_says_what_is_wrong(tmp_path, text, match):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_train_sweep(bad)


def test_the_block_builds_small_on_the_cpu_and_the_swap_keeps_its_weights():
    torch.manual_seed(0)
    ref = Block(d=32, heads=4, ffn=48, dtype=torch.float32)
    ours = on_gemmlab(ref)
    linears = [name for name, m in ours.named_modules() if isinstance(m, nn.Linear)]
    assert linears == ["qkv", "out", "gate_up", "down"]
    assert all(type(getattr(ours, n)) is gemmlab.nn.Linear for n in linears)
    assert all(type(getattr(ref, n)) is nn.Linear for n in linears), "the reference keeps torch's Linear"
    assert ref.qkv.bias is None and ours.qkv.bias is None and ref.gate_up.weight.shape == (96, 32)
    for (name, p), (name2, q) in zip(ref.named_parameters(), ours.named_parameters()):
        assert name == name2 and torch.equal(p, q) and p.data_ptr() != q.data_ptr(), name
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-4, atol=1e-4)


def test_a_block_whose_heads_do_not_divide_d_is_refused():
    with pytest.raises(ValueError, match="d=30 is not a multiple of heads=4"):
        Block(d=30, heads=4, ffn=8)


def test_one_step_of_each_agrees_on_the_cpu_and_the_check_passes_it():
    """The check the bench makes before timing, on the CPU ladder (float32): one step of each model
    from the same weights; losses and gradients agree to float32's bound."""
    torch.manual_seed(0)
    ref = Block(d=32, heads=4, ffn=48)
    ours = on_gemmlab(ref)
    x, target = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    losses = {}
    for key, model in (("torch", ref), ("gemmlab", ours)):
        losses[key] = float(training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), x, target)())
    agree = agreement(ref, ours, losses)
    assert agree["loss"] == losses and agree["loss_gap"] < 1e-5 and agree["grad_gap"] < 1e-4, agree
    assert agree["grad_gap_param"] in dict(ref.named_parameters())
    refuse_mismatch("d=32 float32", agree, "float32")  # within the bound: no error


def test_a_step_that_disagrees_is_refused_before_timing():
    ok = dict(loss=dict(torch=1.0, gemmlab=1.001), loss_gap=1e-3, grad_gap=5e-3, grad_gap_param="down.weight")
    refuse_mismatch("case", ok, "bf16")
    with pytest.raises(RuntimeError, match=r"case: the first step's losses differ by 5.00e-02 .* not timed"):
        refuse_mismatch("case", dict(ok, loss_gap=5e-2), "bf16")
    for gap in (0.5, math.nan):
        with pytest.raises(RuntimeError, match=r"case: the gradient of down.weight differs by .* over 2e-02; not timed"):
            refuse_mismatch("case", dict(ok, grad_gap=gap), "bf16")
    with pytest.raises(RuntimeError, match="over 1e-04"):
        refuse_mismatch("case", ok, "float32")  # float32's bound is tighter


def _record(name, d, heads, ffn, ms, torch_ms, batch=4, seq=2048):
    """A record as train_case writes it."""
    tokens = batch * seq
    return dict(name=name, d_model=d, heads=heads, ffn=ffn, batch=batch, seq=seq, tokens=tokens, dtype="bf16",
                optimizer="torch.optim.AdamW(lr=0.001) (foreach)", reps=20, ms=ms, torch_ms=torch_ms,
                times_ms=[ms] * 20, torch_times_ms=[torch_ms] * 20, vs_torch=torch_ms / ms,
                tokens_per_s=tokens / ms * 1e3, torch_tokens_per_s=tokens / torch_ms * 1e3,
                loss=dict(torch=2.0, gemmlab=2.0002), loss_gap=1e-4, grad_gap=3.2e-3, grad_gap_param="down.weight")  # fmt: skip


def _run(records, gpu="NVIDIA H100 80GB HBM3", time="2026-12-01T10:00:00+00:00", dtype="bf16"):
    meta = dict(gpu=gpu, gpu_slug=gpu.lower().replace(" ", "-"), commit="0123456789abcdef0123", time=time,
                kind="train", dtype=dtype)  # fmt: skip
    return dict(meta=meta, records=records)


RECORDS = [_record("d1024", 1024, 16, 4096, ms=4.0, torch_ms=3.2), _record("d4096 (8B widths)", 4096, 32, 14336, ms=25.0, torch_ms=31.25)]


def test_the_summary_is_the_geometric_mean_and_the_lowest_ratio():
    s = train_summary(RECORDS)
    assert s["geomean"] == pytest.approx(math.sqrt(0.8 * 1.25))  # 1.0
    assert s["lowest"] == pytest.approx(0.8) and s["lowest_case"] is RECORDS[0]
    assert train_summary(RECORDS[1:])["lowest"] == pytest.approx(1.25)


def test_the_table_has_a_row_per_block_and_the_summary_under_it():
    lines = train_table(_run(RECORDS)).splitlines()
    assert lines[0] == ("| block | d_model, heads, ffn | batch x seq | ms | torch ms | tokens/s | torch tokens/s | vs torch | "
                        "loss gap | gradient gap |")  # fmt: skip
    assert lines[2] == "| d1024 | 1024, 16, 4096 | 4x2048 | 4.00 | 3.20 | 2,048,000 | 2,560,000 | 0.80x | 1.0e-04 | 3.2e-03 |"
    assert lines[3] == ("| d4096 (8B widths) | 4096, 32, 14336 | 4x2048 | 25.00 | 31.25 | 327,680 | 262,144 | 1.25x | "
                        "1.0e-04 | 3.2e-03 |")  # fmt: skip
    summary = lines[-1]
    assert summary.startswith("NVIDIA H100 80GB HBM3, runs `0123456789ab` (2026-12-01T10:00:00+00:00), bf16: ")
    assert "geometric mean **1.00x** torch's own nn.Linear (lowest 0.80x, d1024, 4x2048 tokens)" in summary
    assert "median of 20 event-timed steps with L2 flushed" in summary
    assert "torch.optim.AdamW(lr=0.001) (foreach) step" in summary


def test_the_results_section_says_there_are_no_records_then_shows_the_newest_per_gpu(tmp_path):
    assert report.results_sections(tmp_path)["train"] == "_no records yet_"
    old, new = _run(RECORDS[:1]), _run(RECORDS, time="2026-12-02T10:00:00+00:00")
    h200 = _run(RECORDS[1:], gpu="NVIDIA H200", time="2026-12-01T09:00:00+00:00")
    for run in (old, new, h200):
        write_run(results_path(tmp_path, run["meta"], "train"), run["meta"], run["records"])
    trial = _run(RECORDS[:1], time="2026-12-03T10:00:00+00:00")  # another tag (a trial sweep): not the section's
    write_run(results_path(tmp_path, trial["meta"], "train-small"), trial["meta"], trial["records"])
    assert report.results_sections(tmp_path)["train"] == train_table(new) + "\n\n" + train_table(h200)


def test_mixed_precision_records_are_a_table_of_their_own(tmp_path):
    bf16, mixed = _run(RECORDS), _run(RECORDS, dtype="amp-bf16", time="2026-12-03T10:00:00+00:00")
    write_run(results_path(tmp_path, bf16["meta"], "train"), bf16["meta"], bf16["records"])
    write_run(results_path(tmp_path, mixed["meta"], "train-amp"), mixed["meta"], mixed["records"])
    assert report.results_sections(tmp_path)["train"] == train_table(mixed) + "\n\n" + train_table(bf16)
    assert "amp-bf16 (float32 parameters and optimizer, the forward pass in a bf16 autocast region): geometric mean" \
        in train_table(mixed)


def test_results_md_has_the_section_under_its_heading():
    text = (ROOT / "docs" / "results.md").read_text()
    heading = text.index("## A training step against torch's own Linear")
    start, end = text.index("<!-- gemmlab:train:start -->"), text.index("<!-- gemmlab:train:end -->")
    intro = text[heading:start]
    assert heading < start < end and "gemmlab train-bench" in intro and "AdamW" in intro and "8192 tokens" in intro


def test_help_lists_the_command_and_its_options():
    runner = CliRunner()
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0 and "train-bench" in top.output
    res = runner.invoke(app, ["train-bench", "--help"])
    assert res.exit_code == 0, res.output
    for option in ("--sweep", "--out", "sweeps/train/block.toml"):
        assert option in res.output


def test_the_readme_and_the_gpu_script_name_the_command():
    assert "| `gemmlab train-bench" in (ROOT / "README.md").read_text()
    script = (ROOT / "scripts" / "gpu_run.sh").read_text()
    assert "if want train; then" in script and '"train" ' in script.split("set -uo pipefail")[0], "a step, in the header"
    assert 'timeout "${TRAIN_SECONDS:-480}" python3 -m gemmlab train-bench --out "$OUT/results"' in script


def test_the_command_needs_a_gpu():
    r = subprocess.run([sys.executable, "-m", "gemmlab", "train-bench"], capture_output=True, text=True,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))  # fmt: skip
    assert r.returncode == 2 and "no CUDA GPU is visible" in r.stderr and "needs one" in r.stderr


def test_the_bench_refuses_to_run_without_cuda(tmp_path, monkeypatch):
    block = dict(name="tiny", d_model=32, heads=4, ffn=48, batch=2, seq=8)
    spec = dict(blocks=[block], dtype="bf16", tag="train", reps=3, warmup=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="on a CUDA GPU, and none is visible"):
        run_train_bench(spec, tmp_path)
    assert not any(tmp_path.iterdir()), "no record written"
    with pytest.raises(ValueError, match="device 'cpu' is not a CUDA device"):
        train_case(block, "bf16", reps=3, warmup=0, flusher=None, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "amp-bf16"])
def test_the_bench_runs_and_writes_its_record(tmp_path, dtype):
    sweep = tmp_path / "small.toml"
    sweep.write_text(f'tag = "train-small"\ndtype = "{dtype}"\nreps = 3\nwarmup = 1\n[[blocks]]\nname = "d256"\n'
                     'd_model = 256\nheads = 4\nffn = 688\nbatch = 2\nseq = 128\n')  # fmt: skip
    path, [r] = run_train_bench(read_train_sweep(sweep), tmp_path)
    assert r["dtype"] == dtype
    assert path.exists() and path.name.startswith("train-small-")
    assert r["loss_gap"] < 1e-2 and r["grad_gap"] < 2e-2, r
    assert r["ms"] > 0 and r["torch_ms"] > 0 and r["vs_torch"] == pytest.approx(r["torch_ms"] / r["ms"])
    assert r["tokens"] == 256 and r["tokens_per_s"] == pytest.approx(256 / r["ms"] * 1e3)
    assert "| d256 | 256, 4, 688 | 2x128 |" in train_table(load_run(path))
