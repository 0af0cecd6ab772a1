"""gemmlab sustained: parsing nvidia-smi's samples, windows, ratios and the table, without a GPU;
one short run on the GPU."""

import pytest
from typer.testing import CliRunner

from gemmlab.bench import sustained
from gemmlab.bench.tables import sustained_table
from gemmlab.cli import app

from conftest import HAS_GPU

runner = CliRunner()


def test_parse_sample_reads_a_line_and_skips_the_rest():
    s = sustained.parse_sample("2026/11/23 12:00:01.250, 1485, 691.30, 0x0000000000000004, 64")
    assert (s.mhz, s.watts, s.reasons, s.celsius) == (1485.0, 691.3, 4, 64.0)
    later = sustained.parse_sample("2026/11/23 12:00:01.300, 1470, 690.00, 0x4, 64")
    assert later.t - s.t == pytest.approx(0.05)
    for junk in ("", "timestamp, clocks.sm [MHz], power.draw [W]", "2026/11/23 12:00:01.250, [N/A], 691.3, 0x4, 64",
                 "2026/11/23 12:00:01.250, 1485, 691.3"):
        assert sustained.parse_sample(junk) is None


def test_decode_reasons():
    assert sustained.decode_reasons(0x4) == ["power cap"]
    assert sustained.decode_reasons(0x5) == ["idle", "power cap"]
    assert sustained.decode_reasons(0) == []
    assert sustained.decode_reasons(0x4 | 0x4000) == ["power cap", "0x4000"]


def _samples(t0, values):
    return [sustained.Sample(t0 + 0.05 * i, mhz, watts, bits, 60.0 + i % 3) for i, (mhz, watts, bits) in enumerate(values)]


def test_summarise_leaves_out_the_settling_second_and_other_windows():
    settle = [(1980.0, 300.0, 0x0)] * 20  # the first second: top clock, not yet capped
    capped = [(1500.0, 690.0, 0x4), (1470.0, 692.0, 0x4), (1530.0, 689.0, 0x4), (1485.0, 691.0, 0x4 | 0x1)]
    samples = _samples(100.0, settle + capped) + _samples(200.0, [(345.0, 80.0, 0x1)] * 5)
    w = sustained.summarise(samples, 100.0, 100.0 + 0.05 * 23)
    assert w["samples"] == 4
    assert w["sm_mhz"] == 1500.0 and w["sm_mhz_min"] == 1470.0
    assert w["power_w"] == 691.0
    assert w["reasons"] == ["idle", "power cap"]
    assert sustained.summarise(samples, 300.0, 310.0) == {}


def test_ratios_are_against_the_mean_of_the_cublas_windows():
    windows = [dict(name="cublas", tflops=600.0), dict(name="tc07_persistent_cluster", tflops=630.0),
               dict(name="cublas", tflops=660.0)]
    sustained.ratios(windows)
    assert windows[1]["ratio"] == pytest.approx(1.0)
    assert all(w["cublas_tflops"] == 630.0 for w in windows)


def test_table_shows_each_window():
    meta = dict(gpu="NVIDIA H200", gpu_slug="nvidia-h200", commit="0123456789abcdef", time="2026-11-23T12:00:00+00:00",
                seconds=3.0, sample_ms=50, settle_s=1.0, dtype="bf16")
    recs = [dict(name="cublas", M=4096, N=4096, K=4096, tflops=660.0, ratio=1.0, sm_mhz=1530.0, power_w=691.0,
                 reasons=["power cap"]),
            dict(name="tc07_persistent_cluster", M=4096, N=4096, K=4096, tflops=648.0, ratio=0.982, sm_mhz=1500.0,
                 power_w=692.0, reasons=["power cap"])]
    text = sustained_table(dict(meta=meta, records=recs))
    assert "| cuBLAS | 4096 x 4096 x 4096 | 660 |  | 1530 | 691 | 431 | power cap |" in text
    assert "| 0.982 | 1500 | 692 | 432 | power cap |" in text
    assert "0123456789ab" in text and "3 s" in text


@pytest.mark.parametrize("args, message", [
    (["--dtype", "fp32"], "one of bf16, fp16, tf32"),
    (["--dtype", "bf16-fp32out"], "one of bf16, fp16, tf32"),
    (["-k", "nope"], "no kernel named 'nope'"),
    (["-k", "tc08_tf32"], "tc08_tf32 does not take bfloat16"),
    (["-k", "sgemm_11_warp_tile", "--dtype", "tf32"], "does not take float32 with TF32 math"),
    (["-k", "tc07_persistent_cluster[CM=3]"], "CM must be one of"),
    (["--seconds", "0.5"], "greater than or equal to 1.5"),
])
def test_bad_arguments_are_refused_before_anything_runs(args, message):
    res = runner.invoke(app, ["sustained", *args], terminal_width=400)
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


@pytest.mark.skipif(HAS_GPU, reason="checks the message a machine without a GPU gives")
def test_sustained_needs_a_gpu():
    res = runner.invoke(app, ["sustained", "-k", "tc07_persistent_cluster"])
    assert res.exit_code == 2
    assert "no CUDA GPU" in res.output


@pytest.mark.gpu
def test_a_short_sustained_run(tmp_path):
    import json

    res = runner.invoke(app, ["sustained", "-k", "tc07_persistent_cluster", "-k", "auto", "-s", "2048",
                              "--seconds", "1.5", "--out", str(tmp_path)], terminal_width=300)
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*/sustained-*.json")
    run = json.loads(path.read_text())
    names = [r["name"] for r in run["records"]]
    assert names[0] == names[-1] == "cublas" and names[1] == "tc07_persistent_cluster"
    assert names[2] != "auto"  # the kernel auto chose is named
    for r in run["records"]:
        assert r["tflops"] > 10 and r["calls"] > 10 and 0.3 < r["ratio"] < 3
        if "sampling" not in run["meta"]:
            assert r["samples"] >= 5 and 300 < r["sm_mhz"] < 3000 and r["power_w"] > 0


SUSTAINED_RUNS = sorted((__import__("pathlib").Path(__file__).resolve().parents[1] / "results").glob("*/sustained-*.json"))


@pytest.mark.parametrize("path", SUSTAINED_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_sustained_records_are_complete(path):
    import json

    run = json.loads(path.read_text())
    meta, recs = run["meta"], run["records"]
    assert meta["kind"] == "sustained" and meta["commit"] and meta["gpu"] and meta["versions"]["torch"]
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in recs})
    for shape in shapes:
        mine = [r for r in recs if (r["M"], r["N"], r["K"]) == shape]
        assert mine[0]["name"] == mine[-1]["name"] == "cublas" and len(mine) >= 3
        for r in mine:
            assert r["tflops"] > 0 and r["calls"] > 0 and r["samples"] > 0 and r["sm_mhz"] > 0 and r["power_w"] > 0
            assert r["ratio"] == pytest.approx(r["tflops"] / r["cublas_tflops"])
    table = sustained_table(run)
    assert table.count("\n| ") == len(recs)  # a row per window below the header line
