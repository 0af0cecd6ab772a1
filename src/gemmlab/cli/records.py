"""Commands that read records and profiles: report tables, Nsight Compute metrics, plots."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .. import registry
from .common import _kernel_ids, _require_gpu, console, err_console, parse_shape

def report_cmd(
    results: Path = typer.Option(Path("results"), help="the records' root folder; by default the project's records (pass your results folder for your runs)"),
    write: Optional[list[Path]] = typer.Option(None, help="rewrite the marked sections of this file (repeatable: README.md, docs/results.md, docs/ladder/*.md)"),
) -> None:
    """Markdown tables from the newest records of each GPU: printed, or written between markers."""
    from ..bench import report

    sections = report.all_sections(results)
    if write is None:
        for name, body in sections.items():
            console.print(f"## {name}\n\n{body}\n", markup=False, highlight=False)
        return
    # Several files (docs/ladder/*.md): those without markers are named and left as they are; it is
    # an error only if a file is missing or none of them has a generated section.
    written = 0
    for path in write:
        if not path.is_file():
            err_console.print(f"gemmlab: {path}: no such file")
            raise typer.Exit(1)
        try:
            names = report.update_present_sections(path, sections)
        except ValueError as exc:
            if len(write) == 1:
                err_console.print(f"gemmlab: {exc}")
                raise typer.Exit(1)
            console.print(f"{path}: no generated sections, left as it is")
            continue
        written += 1
        console.print(f"{path}: sections {', '.join(names)} regenerated")
    if not written:
        err_console.print(f"gemmlab: none of the {len(write)} files has gemmlab section markers")
        raise typer.Exit(1)


def profile_cmd(
    kernels: list[str] = typer.Argument(..., help="one or two kernel ids; 'cublas' is torch.mm in the other's dtype"),
    shape: str = typer.Option("2048", "--shape", "-s", help="MxNxK or N"),
    csv: Optional[Path] = typer.Option(None, help="keep ncu's CSV here"),
) -> None:
    """Nsight Compute metrics of one launch per kernel (ncu --clock-control none), and their delta."""
    from .. import profile

    if not 1 <= len(kernels) <= 2:
        raise typer.BadParameter("give one kernel, or two to compare")
    ids = [k if k == "cublas" else _kernel_ids([k], "cuda", pending=True)[0] for k in kernels]
    _require_gpu()
    path = csv or profile.default_csv_path()
    try:
        rows = profile.run_ncu(ids, parse_shape(shape), path)
    except profile.ProfileError as exc:
        err_console.print(f"gemmlab: {exc}")
        raise typer.Exit(2)
    t = Table(title=f"Nsight Compute, {shape} (clocks not locked)")
    t.add_column("metric")
    for kid in ids:
        t.add_column(kid, justify="right")
    if len(ids) == 2:
        t.add_column("delta", justify="right")
    for header, vals, delta in profile.compare_rows(rows):
        cells = ["" if v is None else f"{v:,.2f}" for v in vals]
        t.add_row(header, *cells, *([delta] if len(ids) == 2 else []))
    console.print(t)
    for name, metrics in profile.prepass_rows(path):
        console.print(f"pre-pass {name}: {metrics.get('gpu__time_duration.sum', float('nan')) * 1e-3:,.2f} us", highlight=False)
    console.print(f"ncu CSV: {path}", highlight=False)


def plot_cmd(
    results: Path = typer.Option(Path("results"), help="the records' root folder; by default the project's records (pass your results folder for your runs)"),
    out: Path = typer.Option(Path("docs/img"), help="folder for the PNGs"),
    shape: str = typer.Option("4096", help="the shape of the ladder bar chart"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernels of the size plot (default: 01, 03, 07, 10, 11)"),
) -> None:
    """PNGs from the newest records of each GPU: the ladder, TFLOP/s against size, a roofline.

    The ladder at one size, TFLOP/s against size, a roofline where the GPU has a peak record,
    gemm() on a model's layers where it has a models sweep, and conv2d against cuDNN on ResNet-50's
    layers, on depthwise layers and on ResNeXt-50's grouped layers where it has conv-bench records of them."""
    from ..bench import plots, records

    runs = records.merged_runs(records.find_runs(results, "bench"))
    conv: dict[str, list[dict]] = {}
    for run in records.merged_conv(results):
        conv.setdefault(run["meta"]["gpu_slug"], []).append(run)
    depthwise: dict[str, list[dict]] = {}
    for run in records.merged_conv(results, records.DEPTHWISE_TAGS):
        depthwise.setdefault(run["meta"]["gpu_slug"], []).append(run)
    grouped: dict[str, list[dict]] = {}
    for run in records.merged_conv(results, records.GROUPED_TAGS):
        grouped.setdefault(run["meta"]["gpu_slug"], []).append(run)
    if not runs and not conv and not depthwise and not grouped:
        err_console.print(f"gemmlab: no bench or conv-bench records under {results}")
        raise typer.Exit(1)
    out.mkdir(parents=True, exist_ok=True)
    ids = kernel or ["sgemm_01_naive", "sgemm_03_smem_tile", "sgemm_07_vectorized", "sgemm_10_smem_double_buffer", "sgemm_11_warp_tile"]
    for run in runs:
        slug = run["meta"]["gpu_slug"]
        written = [out / f"{slug}-ladder-{shape}.png", out / f"{slug}-vs-size.png"]
        plots.ladder_bars(run, parse_shape(shape), written[0])
        # the default kernels a GPU's records hold (a run may have timed only some of the FP32
        # ladder); kernels asked for by name must be there
        fp32 = {r["kernel"] for r in run["records"] if r.get("dtype", "float32") == "float32" and r["M"] == r["N"] == r["K"]}
        size_ids = ids if kernel else [k for k in ids if k in fp32]
        if size_ids:
            plots.versus_size(run, size_ids, written[1])
        else:
            written.remove(written[1])
            console.print(f"{slug}: no square float32 records of {', '.join(ids)}; no size plot")
        import torch

        tc = [k.id for k in registry.kernels(torch.bfloat16) if "skinny" not in k.tags]  # (tc10: no squares)
        if tc and any(r.get("dtype") == "bfloat16" for r in run["records"]):
            written.append(out / f"{slug}-vs-size-bfloat16.png")
            plots.versus_size(run, tc, written[-1], dtype="bfloat16")
            written.append(out / f"{slug}-ladder-{shape}-bfloat16.png")
            plots.ladder_bars(run, parse_shape(shape), written[-1], dtype="bfloat16")
        models = [p for p in records._newest_per_gpu(records.find_runs(results, "models")) if p.parent.name == slug]
        if models:  # gemmlab bench --sweep sweeps/models.toml
            written.append(out / f"{slug}-models.png")
            plots.models_bars(records.load_run(models[0]), written[-1])
        peak = records.newest_peak(results, slug)
        if peak is not None:
            written.append(out / f"{slug}-roofline.png")
            plots.roofline(run, peak, [(1024, 1024, 1024), (8192, 8192, 8192)], written[-1])
        for p in written:
            console.print(f"wrote {p}")
    for slug, conv_runs in sorted(conv.items()):  # gemmlab conv-bench --sweep sweeps/conv/resnet50.toml
        png = out / f"{slug}-conv-resnet50.png"
        plots.conv_bars(conv_runs, png)
        console.print(f"wrote {png}")
    for slug, dw_runs in sorted(depthwise.items()):  # gemmlab conv-bench --sweep sweeps/conv/depthwise.toml
        png = out / f"{slug}-conv-depthwise.png"
        plots.conv_bars(dw_runs, png, "MobileNetV2's and ConvNeXt-T's depthwise layers")
        console.print(f"wrote {png}")
    for slug, g_runs in sorted(grouped.items()):  # gemmlab conv-bench --sweep sweeps/conv/resnext50.toml
        png = out / f"{slug}-conv-grouped.png"
        plots.conv_bars(g_runs, png, "ResNeXt-50's grouped 3x3 layers")
        console.print(f"wrote {png}")
