"""The tables of scripts/wgrad_bench.py's and scripts/model_bench.py's records, from the records
alone: a convolution's filter gradient on conv06, on the im2col matrix and on cuDNN; a torchvision
network on gemmlab.nn.convert against torch's own layers."""

from __future__ import annotations

import statistics

from .records import _commits


def wgrad_table(run: dict) -> str:
    """A wgrad-bench run: rows the layers at each batch; the time of gemmlab's filter gradient (and
    the path it took), of the GEMM over the im2col matrix and of cuDNN's, the ratios; then the
    geometric means against cuDNN and against the matrix, per batch."""
    meta, recs = run["meta"], run["records"]
    lines = [f"{meta['gpu']}, {recs[0]['dtype'] if recs else ''}, {_commits(meta)}: microseconds (median)", "",
             "| layer | batch | path | gemmlab | im2col matrix | cuDNN | vs cuDNN | vs matrix |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        lines.append(f"| {r['layer']} | {r['batch']} | {r['path']} | {r['ms'] * 1e3:.0f} | {r['matrix_ms'] * 1e3:.0f} | "
                     f"{r['cudnn_ms'] * 1e3:.0f} | {r['vs_cudnn']:.2f}x | {r['vs_matrix']:.2f}x |")  # fmt: skip
    lines.append("")
    for batch in sorted({r["batch"] for r in recs}):
        rows = [r for r in recs if r["batch"] == batch]
        lines.append(f"Batch {batch}: geometric mean {statistics.geometric_mean([r['vs_cudnn'] for r in rows]):.2f}x "
                     f"cuDNN, {statistics.geometric_mean([r['vs_matrix'] for r in rows]):.2f}x the im2col matrix's "
                     f"time ({len(rows)} layers).  ")  # fmt: skip
    return "\n".join(lines).rstrip()


def model_table(run: dict) -> str:
    """A model-bench run: rows the network at each batch and step (inference, a training step);
    each side's time and images/s, the ratio, and the gap between the first outputs."""
    meta, recs = run["meta"], run["records"]
    lines = [f"{meta['gpu']}, {_commits(meta)}", "",
             "| network | batch | dtype | step | ms | torch ms | images/s | torch images/s | vs torch | output gap |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        lines.append(f"| {r['model']} | {r['batch']} | {r['dtype']} | {r['step']} | {r['ms']:.2f} | {r['torch_ms']:.2f} | "
                     f"{r['images_per_s']:,.0f} | {r['torch_images_per_s']:,.0f} | {r['vs_torch']:.2f}x | "
                     f"{r['output_gap']:.1e} |")  # fmt: skip
    return "\n".join(lines)
