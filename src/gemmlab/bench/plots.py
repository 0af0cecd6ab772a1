"""Plots generated from benchmark records (matplotlib, no display needed). Each function returns
the Figure, so tests can check its series, and writes a PNG when given a path."""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .. import registry  # noqa: E402
from ..conv import ALGORITHMS  # noqa: E402
from .records import short_commit  # noqa: E402
from .tables import _baseline_tflops  # noqa: E402
from .tables import _title as _label  # noqa: E402


def _of_dtype(run: dict, dtype: str) -> list[dict]:
    return [r for r in run["records"] if r.get("dtype", "float32") == dtype]


def ladder_bars(run: dict, shape: tuple[int, int, int], path: Path | None = None, dtype: str = "float32"):
    """TFLOP/s of every step at one shape, with cuBLAS (same run) as a horizontal line."""
    recs = [r for r in _of_dtype(run, dtype) if (r["M"], r["N"], r["K"]) == tuple(shape)]
    if not recs:
        raise ValueError(f"no records at {shape} in this run")
    recs.sort(key=lambda r: registry.get(r["kernel"]).step)
    fig, ax = plt.subplots(figsize=(10, 5), layout="constrained")
    labels = [_label(r["kernel"]) for r in recs]
    bars = ax.bar(labels, [r["tflops"] for r in recs], color="tab:blue", label="gemmlab step")
    for bar, r in zip(bars, recs):
        ax.annotate(f"{r['ratio']:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    cublas = max(_baseline_tflops(r) for r in recs)
    ax.axhline(cublas, color="tab:red", linestyle="--", label=f"cuBLAS ({cublas:.1f})")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{dtype} ladder at {shape[0]}x{shape[1]}x{shape[2]}, {run['meta']['gpu']} (ratio to cuBLAS above bars)")
    plt.setp(ax.get_xticklabels(), rotation=35, ha="right", rotation_mode="anchor")
    ax.legend(loc="upper left")
    if path:
        fig.savefig(path, dpi=110)
    return fig


def versus_size(run: dict, kernels: list[str], path: Path | None = None, dtype: str = "float32"):
    """TFLOP/s against problem size for chosen kernels and cuBLAS (seed 002's plot.py, from records)."""
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    cub: dict[int, float] = {}

    def even(n: int) -> bool:  # the seeds' sizes are multiples of 1024; seed 000's odd ones are not
        return n % 1024 == 0

    for k in kernels:
        recs = sorted((r for r in _of_dtype(run, dtype) if r["kernel"] == k and r["M"] == r["N"] == r["K"]), key=lambda r: r["M"])
        if not recs:
            raise ValueError(f"no square records for {k} in this run")
        sq = [r for r in recs if even(r["M"])]
        odd = [r for r in recs if not even(r["M"])]
        (line,) = ax.plot([r["M"] for r in sq], [r["tflops"] for r in sq], marker="o", label=_label(k))
        ax.plot([r["M"] for r in odd], [r["tflops"] for r in odd], marker="x", linestyle="none", color=line.get_color())
        for r in recs:
            cub[r["M"]] = max(cub.get(r["M"], 0.0), _baseline_tflops(r))
    sizes = sorted(s for s in cub if even(s))
    ax.plot(sizes, [cub[s] for s in sizes], marker="s", color="black", linestyle="--", label="cuBLAS")
    odd_sizes = sorted(s for s in cub if not even(s))
    ax.plot(odd_sizes, [cub[s] for s in odd_sizes], marker="x", color="black", linestyle="none", label="x: seed 000's odd sizes")
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{dtype} GEMM against size, {run['meta']['gpu']}")
    ax.grid(alpha=0.3)
    ax.legend()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def roofline(run: dict, peak: dict, shapes: list[tuple[int, int, int]], path: Path | None = None):
    """Each kernel at the given shapes against the measured ceilings: FP32 FFMA rate and DRAM
    bandwidth. Arithmetic intensity counts the fewest bytes a GEMM must move (A and B read once,
    D written once, fp32), so the distance below the roof includes any re-reads a step does."""
    p = peak["records"][0]
    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    bw = p["measured_copy_gbs"] * 1e9
    top = p["measured_ffma_tflops"] * 1e12
    ai = [2 ** (x / 4) for x in range(-4, 60)]
    ax.plot(ai, [min(top, bw * x) / 1e12 for x in ai], color="black", label=f"roof: {p['measured_copy_gbs']:.0f} GB/s, FFMA {p['measured_ffma_tflops']:.1f} TFLOP/s")
    if p.get("theoretical_fp32_tflops"):
        ax.axhline(p["theoretical_fp32_tflops"], color="gray", linestyle=":", label=f"FP32 theoretical {p['theoretical_fp32_tflops']:.1f}")
    markers = "os^D"
    for si, shape in enumerate(shapes):
        M, N, K = shape
        x = 2.0 * M * N * K / (4.0 * (M * K + K * N + M * N))
        recs = sorted((r for r in _of_dtype(run, "float32") if (r["M"], r["N"], r["K"]) == tuple(shape)), key=lambda r: registry.get(r["kernel"]).step)
        for r in recs:
            ax.scatter([x], [r["tflops"]], marker=markers[si % len(markers)], s=30, zorder=3)
            ax.annotate(f"{registry.get(r['kernel']).step:02d}", (x, r["tflops"]), textcoords="offset points", xytext=(5, -3), fontsize=7)
        if recs:
            ax.scatter([x], [_baseline_tflops(recs[0])], marker="*", s=120, color="red", zorder=4, label="cuBLAS, same run (stars)" if si == 0 else None)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flops per byte, fewest bytes)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline, {run['meta']['gpu']}: steps (numbers) at " + ", ".join(f"{s[0]}^3" if s[0] == s[1] == s[2] else "x".join(map(str, s)) for s in shapes))
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def models_bars(run: dict, path: Path | None = None):
    """A models run (sweeps/models.toml): gemm()'s ratio to cuBLAS for each layer, one bar per
    token count, with parity marked."""
    from .tables import model_layers

    layers, tokens, grid = model_layers(run)
    fig, ax = plt.subplots(figsize=(11, 5), layout="constrained")
    width = 0.8 / len(tokens)
    for i, m in enumerate(tokens):
        xs = [j + (i - (len(tokens) - 1) / 2) * width for j, n in enumerate(layers) if (n, m) in grid]
        ax.bar(xs, [grid[(n, m)]["ratio"] for n in layers if (n, m) in grid], width, label=f"M = {m} tokens")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="cuBLAS (same run)")
    ax.set_xticks(range(len(layers)), layers)
    plt.setp(ax.get_xticklabels(), rotation=25, ha="right", rotation_mode="anchor")
    ax.set_ylabel("ratio to cuBLAS (> 1: faster)")
    ax.set_ylim(0, max(1.15, max(r["ratio"] for r in grid.values()) + 0.05))
    ax.set_title(f"gemm() on Llama 3's linear layers (x @ w.t(), {run['records'][0]['dtype'].split('-')[0]}), {run['meta']['gpu']}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if path:
        fig.savefig(path, dpi=110)
    return fig


# conv_bars' axis ends here: a layer past it (conv04's stem, 3.8-4.5x cuDNN's bf16 one on an H100)
# would squeeze every other bar into the first fifth of the plot; its bar stops at the end, labelled
CONV_AXIS_MAX = 2.0


def conv_bars(runs: list[dict], path: Path | None = None, layers_of: str = "ResNet-50's layers"):
    """conv-bench runs of one GPU (the newest of each algorithm): gemmlab.conv2d's ratio to cuDNN
    for each layer in the sweep's order, one bar per (algorithm, batch), with parity marked.
    Hatched bars are layers the run's algorithm could not serve, which ran im2col instead.
    layers_of names the sweep's layers in the title."""
    if not runs:
        raise ValueError("no conv-bench runs to plot")
    order = (*ALGORITHMS, "auto")  # the ladder's steps, then the pick of them
    runs = sorted(runs, key=lambda run: order.index(_conv_algorithm(run)))
    layers = list(dict.fromkeys(r["name"] for run in runs for r in run["records"]))  # sweep order
    series = [(run, n) for run in runs for n in sorted({r["N"] for r in run["records"]})]
    dtypes = sorted({r["dtype"] for run in runs for r in run["records"]})
    shades = {"im2col": plt.cm.Blues, "implicit": plt.cm.Oranges, "tma": plt.cm.Greens, "gather": plt.cm.Reds,
              "auto": plt.cm.Purples}  # fmt: skip
    fig, ax = plt.subplots(figsize=(9, 2.5 + 0.32 * len(layers)), layout="constrained")
    height = 0.8 / len(series)
    top = 1.0
    handles: list = []
    beyond: dict[str, list[float]] = {}  # a layer's ratios past CONV_AXIS_MAX, in the series' order
    # auto's runs of several dtypes: a colour a dtype (bf16 auto's purple, fp16 red-purple, float32 grey)
    auto_shades = {"bf16": plt.cm.Purples, "fp16": plt.cm.PuRd, "float32": plt.cm.Greys}
    for i, (run, n) in enumerate(series):
        alg = _conv_algorithm(run)
        recs = {r["name"]: r for r in run["records"] if r["N"] == n}
        key = lambda s: (_conv_algorithm(s[0]), s[0]["records"][0]["dtype"] if len(dtypes) > 1 else "")  # noqa: E731
        kin = [key(s) for s in series]  # a (step, dtype)'s series: one shade each, darker on
        cmap = auto_shades.get(key(series[i])[1], shades[alg]) if alg == "auto" else shades[alg]
        color = cmap(0.5 + 0.35 * kin[:i].count(key(series[i])) / max(1, kin.count(key(series[i])) - 1))
        ys = [j + (i - (len(series) - 1) / 2) * height for j, name in enumerate(layers) if name in recs]
        ratios = [recs[name]["ratio"] for name in layers if name in recs]
        mean = statistics.geometric_mean(ratios)
        step = "algorithm='auto'" if alg == "auto" else f"conv{ALGORITHMS.index(alg) + 1:02d} {alg}"
        dtype = f", {next(iter(recs.values()))['dtype']}" if len(dtypes) > 1 else ""
        bars = ax.barh(ys, [min(r, CONV_AXIS_MAX) for r in ratios], height, color=color)
        for name, r in zip((name for name in layers if name in recs), ratios):
            if r > CONV_AXIS_MAX:  # past the axis: the bar stops at its end, the layer's row says how far it went
                beyond.setdefault(name, []).append(r)
        handles.append(Patch(color=color, label=f"{step}, batch {n}{dtype}: geometric mean {mean:.2f}x"))
        for bar, name in zip(bars, (name for name in layers if name in recs)):
            if alg != "auto" and recs[name].get("algorithm", alg) != alg:
                bar.set_hatch("//")
                bar.set_edgecolor("white")
        top = max(top, *ratios)
    for name, past in beyond.items():
        ax.text(CONV_AXIS_MAX, layers.index(name), " " + ", ".join(f"{r:.2f}x" for r in past), va="center", ha="left",
                fontsize=7, bbox=dict(facecolor="white", edgecolor="none", pad=1))  # fmt: skip
    handles.append(ax.axvline(1.0, color="black", linestyle="--", linewidth=1, label="cuDNN (same run)"))
    if any(bar.get_hatch() for bar in ax.patches):
        handles.append(Patch(facecolor="lightgray", hatch="//", edgecolor="white", label="im2col ran: the step cannot serve the layer"))
    ax.set_yticks(range(len(layers)), layers)
    ax.invert_yaxis()  # the sweep's first layer on top
    ax.set_xlim(0, min(top, CONV_AXIS_MAX) + (0.45 if top > CONV_AXIS_MAX else 0.1))
    ax.set_xlabel("cuDNN time / gemmlab.conv2d's (> 1: faster than cuDNN)")
    commits = ", ".join(dict.fromkeys(short_commit(run["meta"]["commit"])[:7] for run in runs))
    ax.set_title(f"gemmlab.conv2d against cuDNN on {layers_of}\n{runs[0]['meta']['gpu']}, {', '.join(dtypes)}\nruns {commits}",
                 fontsize=10)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def _conv_algorithm(run: dict) -> str:
    """The algorithm a conv-bench run asked conv2d for (records before meta carried it: im2col)."""
    return run["meta"].get("algorithm", "im2col")
