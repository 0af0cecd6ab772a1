"""Plots generated from benchmark records (matplotlib, no display needed). Each function returns
the Figure, so tests can check its series, and writes a PNG when given a path."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .. import registry  # noqa: E402
from .report import _baseline_tflops  # noqa: E402


def _label(kernel_id: str) -> str:
    try:
        spec = registry.get(kernel_id)
        return f"{spec.step:02d} {spec.title}"
    except ValueError:
        return kernel_id


def ladder_bars(run: dict, shape: tuple[int, int, int], path: Path | None = None):
    """TFLOP/s of every step at one shape, with cuBLAS (same run) as a horizontal line."""
    recs = [r for r in run["records"] if (r["M"], r["N"], r["K"]) == tuple(shape)]
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
    ax.set_title(f"FP32 ladder at {shape[0]}x{shape[1]}x{shape[2]}, {run['meta']['gpu']} (ratio to cuBLAS above bars)")
    plt.setp(ax.get_xticklabels(), rotation=35, ha="right", rotation_mode="anchor")
    ax.legend(loc="upper left")
    if path:
        fig.savefig(path, dpi=110)
    return fig


def versus_size(run: dict, kernels: list[str], path: Path | None = None):
    """TFLOP/s against problem size for chosen kernels and cuBLAS (seed 002's plot.py, from records)."""
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    cub: dict[int, float] = {}

    def even(n: int) -> bool:  # the seeds' sizes are multiples of 1024; seed 000's odd ones are not
        return n % 1024 == 0

    for k in kernels:
        recs = sorted((r for r in run["records"] if r["kernel"] == k and r["M"] == r["N"] == r["K"]), key=lambda r: r["M"])
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
    ax.set_title(f"FP32 GEMM against size, {run['meta']['gpu']}")
    ax.grid(alpha=0.3)
    ax.legend()
    if path:
        fig.savefig(path, dpi=110)
    return fig
