"""`gemmlab bench` with nothing named, on a GPU: gemm()'s choice in each dtype against cuBLAS
(gemmlab.bench.overview). Here the GPU and run_bench are stood in for, so what is asked of them
and what the command prints are checked without one; the timings themselves are the GPU's."""

import json

import pytest
import torch
from typer.testing import CliRunner

from gemmlab.bench import overview, run
from gemmlab.cli import app


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """run_bench records what it is asked and writes a record whose every ratio is 1.25 (0.8 for
    the model layers); the CLI believes there is a GPU."""
    calls = []

    def run_bench(kernels, shapes, out_root, **kw):
        calls.append(dict(kernels=kernels, shapes=shapes, **kw))
        ratio = 0.8 if kw.get("names") else 1.25
        records = [dict(kernel="tc07_persistent_cluster", M=m, N=n, K=k, median_ms=1.0, tflops=100.0, baseline_tflops=100.0 / ratio,
                        ratio=ratio) for m, n, k in shapes]  # fmt: skip
        path = tmp_path / f"bench-{len(calls)}.json"
        path.write_text(json.dumps({"meta": {"failures": []}, "records": records}))
        for r in records:
            if kw.get("on_start"):
                kw["on_start"]("auto", (r["M"], r["N"], r["K"]))
            if kw.get("on_record"):
                kw["on_record"](r)
        return path, records

    monkeypatch.setattr(run, "run_bench", run_bench)
    monkeypatch.setattr("gemmlab.cli.lab._pick_device", lambda device: "cuda")
    return calls


def test_the_overview_times_auto_in_every_dtype_and_on_model_layers(fake_gpu, tmp_path):
    done = overview.run_overview(tmp_path)
    assert [c["kernels"] for c in fake_gpu] == [["auto"]] * len(overview.PARTS)
    asked = [(c["dtype"], c["precision"], c["layout"]) for c in fake_gpu]
    assert asked == [(torch.float32, "fp32", "nn"), (torch.float32, "tf32", "nn"), (torch.bfloat16, "fp32", "nn"),
                     (torch.float16, "fp32", "nn"), (torch.bfloat16, "fp32", "nt")]  # fmt: skip
    odd = {(3135, 3135, 3135), (6132, 6132, 6132)}
    assert all(odd <= set(c["shapes"]) for c in fake_gpu[:4]), "seed 000's odd sizes in every dtype"
    layers = fake_gpu[4]
    assert {m for m, _, _ in layers["shapes"]} == set(overview.TOKENS) and layers["names"]["4096x14336"] == "8B down"
    assert len(done) == len(overview.PARTS) and overview.cases() == sum(len(c["shapes"]) for c in fake_gpu)


def test_bench_with_nothing_named_runs_the_overview_and_says_the_means(fake_gpu, tmp_path):
    r = CliRunner().invoke(app, ["bench", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert len(fake_gpu) == len(overview.PARTS)
    assert "float32: geometric mean 1.25x cuBLAS over 5 problems" in r.output
    assert "bf16 nt model layers: geometric mean 0.80x cuBLAS over 8 problems" in r.output
    assert "gemmlab bench --ladder" in r.output


@pytest.mark.parametrize("args", [["--ladder"], ["--dtype", "bf16"], ["-k", "auto"], ["-s", "1024"]])
def test_naming_anything_runs_what_is_named_instead(fake_gpu, tmp_path, args):
    r = CliRunner().invoke(app, ["bench", "--out", str(tmp_path), *args])
    assert r.exit_code == 0, r.output
    assert len(fake_gpu) == 1 and "geometric mean" not in r.output


def test_geomean():
    assert overview.geomean([2.0, 0.5]) == pytest.approx(1.0)
