"""Plots render from the committed records, with the series a reader expects."""

import statistics
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.colors import same_color
import pytest

from gemmlab.bench import plots, records
from gemmlab.registry import SGEMM_LADDER

from conftest import conv_run

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
    shapes = [(1024, 1024, 1024), (8192, 8192, 8192)]
    ladder = {k.id for k in SGEMM_LADDER}
    timed = {s: {r["kernel"] for r in run["records"] if r.get("dtype", "float32") == "float32"
                 and (r["M"], r["N"], r["K"]) == s and r["kernel"] in ladder} for s in shapes}  # fmt: skip
    assert min(len(t) for t in timed.values()) >= 11
    # a point for every step timed at each shape (auto's own choices, such as step 15 at 1024^3, at
    # one of them only) and cuBLAS's at both
    assert len(ax.collections) == sum(len(t) + 1 for t in timed.values())
    plt.close(fig)


LAYERS = ["stem", "s1 3x3", "s4 1x1"]


def test_conv_bars_draw_a_bar_per_layer_algorithm_and_batch(tmp_path):
    """Two algorithms at two batches: a bar for each (layer, algorithm, batch), each bar its record's
    ratio, the layers top to bottom in the sweep's order, parity as a line at 1.0x, the fallback hatched."""
    ratios = {alg: {(name, n): round(0.1 * (i + 1) + 0.01 * j + (0.5 if alg == "tma" else 0), 2)
                    for i, name in enumerate(LAYERS) for j, n in enumerate((32, 256))} for alg in ("implicit", "tma")}
    runs = [conv_run("tma", ratios["tma"], "ab12"), conv_run("implicit", ratios["implicit"], "cd34")]  # tma first: sorted by step
    png = tmp_path / "conv.png"
    fig = plots.conv_bars(runs, png)
    ax = fig.axes[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bars = ax.patches
    assert len(bars) == len(LAYERS) * 2 * 2
    # series in ladder order (conv02 implicit, then conv03 tma), each batch ascending; a bar per layer
    expect = [ratios[alg][(name, n)] for alg in ("implicit", "tma") for n in (32, 256) for name in LAYERS]
    assert [round(b.get_width(), 2) for b in bars] == expect
    centres = [b.get_y() + b.get_height() / 2 for b in bars]
    for k, name in enumerate(LAYERS):  # the four bars of a layer sit around its tick
        assert all(abs(c - k) < 0.5 for c in centres[k::len(LAYERS)]), name
    assert [t.get_text() for t in ax.get_yticklabels()] == LAYERS and ax.yaxis_inverted()
    assert [bool(b.get_hatch()) for b in bars] == [name == "stem" for _ in range(4) for name in LAYERS]
    (parity,) = [line for line in ax.get_lines() if line.get_label().startswith("cuDNN")]
    assert list(parity.get_xdata()) == [1.0, 1.0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:4] == [f"conv{s}, batch {n}: geometric mean {gm:.2f}x"
                          for s, alg in (("02 implicit", "implicit"), ("03 tma", "tma")) for n in (32, 256)
                          for gm in [statistics.geometric_mean([ratios[alg][(name, n)] for name in LAYERS])]]
    assert legend[4:] == ["cuDNN (same run)", "im2col ran: the step cannot serve the layer"]
    assert not same_color(bars[0].get_facecolor(), bars[len(LAYERS)].get_facecolor())  # the batches apart
    title = ax.get_title()
    assert "NVIDIA H200" in title and "bf16" in title and "cd34cd3, ab12ab1" in title
    assert "cuDNN time / gemmlab.conv2d's" in ax.get_xlabel()
    plt.close(fig)


def test_conv_bars_stop_a_bar_past_the_axis_and_say_its_ratio():
    """A layer far past parity (conv04's stem, 3.8-4.5x) would squeeze the others: its bars stop at
    CONV_AXIS_MAX and its row is labelled with every ratio past it, in the series' order."""
    ratios = {(name, n): (4.5 if n == 32 else 3.25) if name == "stem" else 0.9 for name in LAYERS for n in (32, 256)}
    fig = plots.conv_bars([conv_run("auto", ratios, "ab12")])
    ax = fig.axes[0]
    assert max(b.get_width() for b in ax.patches if b.get_y() < 1) == plots.CONV_AXIS_MAX
    assert [t.get_text().strip() for t in ax.texts] == ["4.50x, 3.25x"]
    assert plots.CONV_AXIS_MAX < ax.get_xlim()[1] < plots.CONV_AXIS_MAX + 1
    plt.close(fig)


def test_conv_bars_skip_a_layer_a_run_did_not_time():
    partial = conv_run("tma", {("stem", 32): 0.5, ("s4 1x1", 32): 0.8})
    fig = plots.conv_bars([conv_run("implicit", {(name, 32): 0.3 for name in LAYERS}), partial])
    ax = fig.axes[0]
    assert len(ax.patches) == len(LAYERS) + 2 and [t.get_text() for t in ax.get_yticklabels()] == LAYERS
    plt.close(fig)
    with pytest.raises(ValueError, match="no conv-bench runs"):
        plots.conv_bars([])


CONV = {}
for _run in records.merged_conv(RESULTS):
    CONV.setdefault(_run["meta"]["gpu_slug"], []).append(_run)


@pytest.mark.parametrize("slug", sorted(CONV))
def test_conv_bars_from_the_committed_records(slug, tmp_path):
    fig = plots.conv_bars(CONV[slug], tmp_path / "conv.png")
    assert len(fig.axes[0].patches) == sum(len(run["records"]) for run in CONV[slug])  # a bar a record
    plt.close(fig)


def test_conv_bars_put_an_auto_run_after_the_steps_without_hatching_its_picks():
    """An algorithm='auto' run's records name the step each layer ran on; none of them is a fallback."""
    auto = conv_run("auto", {(name, 32): 0.9 for name in LAYERS}, "ef56")
    for r, alg in zip(auto["records"], ("im2col", "tma", "im2col")):
        r["algorithm"] = alg
    fig = plots.conv_bars([auto, conv_run("tma", {(name, 32): 0.7 for name in LAYERS})])
    bars = fig.axes[0].patches
    assert [round(b.get_width(), 2) for b in bars] == [0.7] * len(LAYERS) + [0.9] * len(LAYERS)
    assert [bool(b.get_hatch()) for b in bars[len(LAYERS):]] == [False] * len(LAYERS)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[1] == "algorithm='auto', batch 32: geometric mean 0.90x"
    plt.close(fig)


DEPTHWISE = {}
for _run in records.merged_conv(RESULTS, records.DEPTHWISE_TAGS):
    DEPTHWISE.setdefault(_run["meta"]["gpu_slug"], []).append(_run)


@pytest.mark.parametrize("slug", sorted(DEPTHWISE))
def test_depthwise_bars_from_the_committed_records_name_their_layers(slug, tmp_path):
    """The depthwise sweep's auto runs, one per dtype: a bar a record, each dtype's series in the
    legend, the title naming the layers."""
    fig = plots.conv_bars(DEPTHWISE[slug], tmp_path / "dw.png", "MobileNetV2's and ConvNeXt-T's depthwise layers")
    assert len(fig.axes[0].patches) == sum(len(run["records"]) for run in DEPTHWISE[slug])
    assert "depthwise layers" in fig.axes[0].get_title() and (tmp_path / "dw.png").stat().st_size > 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sum("algorithm='auto', batch 32, bf16" in t for t in legend) == 1
    plt.close(fig)
