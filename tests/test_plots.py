"""Plots render from the committed records, with the series a reader expects."""

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from gemmlab.bench import plots, records
from gemmlab.registry import SGEMM_LADDER

RESULTS = Path(__file__).resolve().parents[1] / "results"
RUNS = records.merged_runs(records.find_runs(RESULTS, "bench"))


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["meta"]["gpu_slug"])
def test_ladder_bars_have_every_step_and_cublas(run, tmp_path):
    png = tmp_path / "ladder.png"
    fig = plots.ladder_bars(run, (4096, 4096, 4096), png)
    ax = fig.axes[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    timed = {r["kernel"] for r in run["records"] if r.get("dtype", "float32") == "float32" and (r["M"], r["N"], r["K"]) == (4096,) * 3}
    steps = [k for k in SGEMM_LADDER if k.id in timed]
    assert len(ax.patches) == len(steps)  # one bar a step of the FP32 ladder the run timed there
    assert [k.step for k in steps][:11] == list(range(1, 12))  # every step of the seeds' ladder among them
    assert [t.get_text() for t in ax.get_xticklabels()][0].startswith("01 ")
    assert any(line.get_label().startswith("cuBLAS") for line in ax.get_lines())
    plt.close(fig)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["meta"]["gpu_slug"])
def test_size_plot_has_chosen_kernels_and_cublas(run, tmp_path):
    ids = ["sgemm_03_smem_tile", "sgemm_11_warp_tile"]
    fig = plots.versus_size(run, ids, tmp_path / "size.png")
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "03 shared-memory tiles" in labels and "11 warp tiles" in labels and "cuBLAS" in labels
    plt.close(fig)


def test_missing_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="no records at"):
        plots.ladder_bars(RUNS[0], (3, 3, 3))


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["meta"]["gpu_slug"])
def test_roofline_from_the_committed_peak(run, tmp_path):
    peak = records.newest_peak(RESULTS, run["meta"]["gpu_slug"])
    if peak is None:
        pytest.skip("no peak record for this GPU")
    fig = plots.roofline(run, peak, [(1024, 1024, 1024), (8192, 8192, 8192)], tmp_path / "roof.png")
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(lbl.startswith("roof:") for lbl in labels)
    timed = {r["kernel"] for r in run["records"] if r.get("dtype", "float32") == "float32"}
    steps = [k for k in SGEMM_LADDER if k.id in timed]
    assert len(steps) >= 11 and len(ax.collections) == 2 * (len(steps) + 1)  # every step timed and cuBLAS at both shapes
    plt.close(fig)
