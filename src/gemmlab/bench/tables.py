"""Markdown tables built from benchmark records: one function a kind of record. No number here is
typed by hand; reading the records is records.py's, placing the tables in documents report.py's."""

from __future__ import annotations

from pathlib import Path
import statistics
from typing import Callable

import torch

from .. import registry
from ..api import FEW_ROWS_AS_COLUMNS
from ..profile import NCU_COLUMNS, read_ncu_csv
from .records import _commits, _sidecar, _step, short_commit


def _title(kernel_id: str) -> str:
    try:
        spec = registry.get(kernel_id)
        return f"{spec.step:02d} {spec.title}"
    except ValueError:
        return kernel_id


def _ladder_position(kernel_id: str) -> int:
    """A kernel's step, for ordering columns; ids the registry no longer knows go last."""
    try:
        return registry.get(kernel_id).step
    except ValueError:
        return 1 << 30


def _off_its_problems(r: dict) -> bool:
    """A record of a step for a few rows (tc10, tag "skinny") at a shape with more rows than 'auto'
    gives it (configs.SKINNY_M_MAX): measured, but no row of the ladder's tables."""
    from ..configs import SKINNY_M_MAX

    try:
        tags = getattr(registry.get(r["kernel"]), "tags", ())
    except ValueError:
        return False
    return "skinny" in tags and r["M"] > SKINNY_M_MAX


def _baseline_tflops(r: dict) -> float:
    return r["baseline_tflops"] if "baseline_tflops" in r else r["cublas_tflops"]


def bench_table(run: dict, peak: dict | None = None, label: str = "**{}**") -> str:
    """Rows: shapes; columns: each kernel's rate with its ratio to the baseline, then the baseline,
    then (given a peak record) the best kernel's share of the measured FFMA peak. One table per
    dtype, each under `label` with the dtype in it: a ratio only compares like with like."""
    dtypes = list(dict.fromkeys(r.get("dtype", "float32") for r in run["records"]))
    if len(dtypes) > 1:
        return "\n\n".join(
            label.format(d) + "\n\n" + bench_table({"meta": run["meta"], "records": [r for r in run["records"] if r.get("dtype", "float32") == d]}, peak)
            for d in dtypes
        )
    if dtypes and dtypes[0] != "float32":
        peak = None  # the FFMA peak is an FP32 ceiling
    recs = [r for r in run["records"] if not _off_its_problems(r)]
    meta = run["meta"]
    cpu = meta.get("kind") == "bench-cpu"
    unit, scale = ("GFLOP/s", 1e3) if cpu else ("TFLOP/s", 1.0)
    base_name = "numpy (BLAS)" if cpu else "cuBLAS"
    # ladder order, not order of appearance: a step that serves only some shapes (tc05/tc06 skip
    # the odd ones) must not land after the later steps
    kernels = sorted(dict.fromkeys(r["kernel"] for r in recs), key=_ladder_position)
    shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in recs))
    cell = {(r["kernel"], (r["M"], r["N"], r["K"])): r for r in recs}
    top = peak["records"][0]["measured_ffma_tflops"] if peak and not cpu else None
    head = ["M x N x K"] + [_title(k) for k in kernels] + [base_name] + (["best, % of FFMA peak"] if top else [])
    lines = [f"{unit} (ratio to {base_name}, same run)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in shapes:
        row = [" x ".join(map(str, s))]
        base = []
        for k in kernels:
            r = cell.get((k, s))
            if r is None:
                row.append("")
                continue
            row.append(f"{r['tflops'] * scale:.2f} ({r['ratio']:.2f}x)")
            base.append(_baseline_tflops(r) * scale)
        row.append(f"{statistics.median(base):.1f}" if base else "")
        if top:
            best = max((cell[(k, s)]["tflops"] for k in kernels if (k, s) in cell), default=0.0)
            row.append(f"{100 * best / top:.0f}%")
        lines.append("| " + " | ".join(row) + " |")
    peak_note = (
        f" Peak: {top:.1f} TFLOP/s measured by `gemmlab peak` (FFMA loop) on this GPU, commit `{short_commit(peak['meta']['commit'])}`."
        if top
        else ""
    )
    return "\n".join(lines) + "\n\n" + (_cpu_note(meta, recs) if cpu else _gpu_note(meta, recs)) + peak_note


def _gpu_note(meta: dict, recs: list[dict]) -> str:
    clocks = sorted(
        {int(r["clocks_mid"]["clocks.sm"]) for r in recs if isinstance(r.get("clocks_mid", {}).get("clocks.sm"), float)}
    )
    # nvidia-smi's samples land between launches: a kernel at full tensor load runs lower (Nsight
    # Compute put every full-size bf16 GEMM on an H200 at 1.55-1.6 GHz: docs/notes/clock-of-a-single-launch.md)
    clock_txt = (f"SM clock {clocks[0]}-{clocks[-1]} MHz in nvidia-smi's mid-run samples (between launches; "
                 "kernels at full tensor load run lower: docs/notes/clock-of-a-single-launch.md)"
                 if clocks else "SM clock not read")
    v = meta["versions"]
    return (
        f"{meta['gpu']}, driver {meta.get('driver')}, torch {v['torch']} (CUDA {v['torch_cuda']}), "
        f"cuda-core {v['cuda_core']}, NVRTC {v['nvrtc']}, {_commits(meta)}; {clock_txt}. "
        f"Median of {recs[0]['reps']} event-timed runs with L2 flushed{_held(meta)}, {_arithmetic(recs[0].get('dtype', 'float32'))}; "
        f"ratio = cuBLAS median time / kernel median time; cuBLAS = torch.mm, the better of the "
        f"cublas and cublasLt backends, timed in the same rounds (its median across kernels shown)."
    )


def _held(meta: dict) -> str:
    """How the timed window was kept free of host launch latency: a spin before each start event
    (runs from 2026-11-22 05:00), then a gate the host opens once a round is queued (2026-11-23)."""
    if meta.get("gate"):
        return (" (runs from 2026-11-23 16:00 UTC on queue each round of launches before a gate kernel lets the"
                " GPU start it; runs from `113c584` to then held the stream with a 200,000-cycle spin before each start event)")
    cycles = meta.get("hold_cycles")
    return f" (runs from `113c584` on also hold the stream with a {cycles:,}-cycle spin before each start event)" if cycles else ""


_STAGED = "operands whose row stride TMA cannot take (odd sizes) are copied to padded rows inside the timed call"


_LAYOUTS = {"nt": "B a transposed view (x @ w.t() of a [N, K] weight)",
            "tn": "A a transposed view (dy.t() @ x of a [K, M] gradient, as a weight gradient passes it)",
            "tt": "A and B transposed views"}


def _short_id(kernel_id: str) -> str:
    """A kernel's id as the notes name it: its step (tc07), or the FP32 ladder's sgemm_11."""
    parts = kernel_id.split("_")
    return "_".join(parts[:2]) if parts[0] == "sgemm" else parts[0]


def _layout_note(layout: str, base: str) -> str:
    """A layout's views, and which steps of the table's dtype (base: bfloat16, tf32, ...) read them
    in place (KernelSpec.layouts) rather than copy them."""
    name = base.removesuffix("-fp32out")
    math = name if name in ("tf32", "3xtf32") else "fp32"
    dtype = getattr(torch, "float32" if math != "fp32" else name, None)
    readers = [_short_id(k.id) for k in registry.KERNELS
               if layout in getattr(k, "layouts", ()) and dtype in k.dtypes and getattr(k, "math", "fp32") == math]
    if not readers:
        return f"{_LAYOUTS[layout]}, copied row-major inside the timed call"
    verb = "reads" if len(readers) == 1 else "read"
    names = readers[0] if len(readers) == 1 else f"{', '.join(readers[:-1])} and {readers[-1]}"
    columns = ""
    if layout == "nt" and name == "float32":  # api.few_rows_as_columns
        columns = (f"; at up to {FEW_ROWS_AS_COLUMNS} rows gemm() computes D^T = w x^T on sgemm_14, w read in "
                   "place, x^T and D^T copied inside the timed call")
    return (f"{_LAYOUTS[layout]}; {names} {verb} the transposed operands in place, other kernels "
            f"get row-major copies inside the timed call{columns}")


def _arithmetic(dtype: str) -> str:
    """What a table of this dtype measured; the steps that stage copies (tc07-tc09) say so, and a
    layout other than row-major (dtype suffix -nt, -tn, -tt) is named."""
    base, _, layout = dtype.rpartition("-")
    if layout in _LAYOUTS:
        return f"{_arithmetic(base)}; {_layout_note(layout, base)}; cuBLAS on the same views"
    if dtype == "float32":
        return "float32 (TF32 off)"
    if dtype == "tf32":
        return f"float32 inputs multiplied as TF32 (cuBLAS with TF32 on); {_STAGED}"
    if dtype == "3xtf32":
        return ("float32 inputs as three TF32 products, fp32's accuracy (cuBLAS SGEMM, TF32 off); A and B split "
                "into TF32 parts by tc11's pre-pass inside the timed call")
    if dtype.endswith("-fp32out"):
        what = f"{dtype.removesuffix('-fp32out')} inputs, fp32 accumulation and output (cuBLAS: torch.mm with out_dtype float32)"
    else:
        what = f"{dtype} inputs and output, fp32 accumulation"
    return f"{what}; for tc07 and tc09 {_STAGED}"


def _cpu_note(meta: dict, recs: list[dict]) -> str:
    blas = ", ".join(f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')}, {b.get('num_threads')} threads)" for b in meta.get("blas", []) if b.get("user_api") == "blas")
    reps = sorted({r["reps"] for r in recs})
    return (
        f"{meta['cpu']}, {meta['cores']} cores; numba {meta['versions']['numba']} with {meta['numba_threads']} threads; "
        f"numpy {meta['versions']['numpy']} on {blas or 'unknown BLAS'}; {_commits(meta)}. "
        f"Median of {reps[0]}-{reps[-1]} wall-clock runs (fewer for the slow loops), caches flushed and "
        f"a {recs[0].get('settle_s', 0)} s pause before each (thread pools of numpy and numba idle)."
    )


def overhead_table(run: dict) -> str:
    """One table per record (dtype) of an overhead run."""
    meta = run["meta"]
    tables = [_overhead_rows(r) for r in run["records"]]
    r = run["records"][0]
    return "\n\n".join(tables) + f"\n\n{meta['gpu']}, commit `{short_commit(meta['commit'])}`, {meta['time']}; medians of {r['calls']} calls."


def _overhead_rows(r: dict) -> str:
    rows = [
        ("gemm(a, b): host time per call", r["host_us"], r["torch_mm_host_us"]),
        ("gemm(a, b, out=out): host time per call", r["host_us_out"], None),
        ("prepared launch (benchmark path): host time", r["host_us_prepared"], None),
        ("one call + synchronize, wall time", r["sync_us"], r["torch_mm_sync_us"]),
        ("the kernel alone (CUDA events)", r["kernel_us"], None),
    ]
    chosen = f" ({r['chosen']})" if "chosen" in r else ""
    lines = [f"| {r['M']}x{r['N']}x{r['K']} {r.get('dtype', 'float32')}, kernel={r['kernel']}{chosen} | gemmlab (us) | torch.mm (us) |",
             "|---|---|---|"]  # fmt: skip
    for name, ours, theirs in rows:
        lines.append(f"| {name} | {ours:.1f} | {'' if theirs is None else f'{theirs:.1f}'} |")
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.1f} ms"


def cold_start_table(run: dict) -> str:
    """A cold-start run (gemmlab cold-start): a row a scenario, a column a dtype, first calls to
    completion (or, compile only, what they compile); what the empty cache compiled, and jit's time
    on each phase of it."""
    meta, recs = run["meta"], run["records"]
    cell = {(r["scenario"], r["dtype"]): r for r in recs if r["scenario"] != "import"}
    dtypes = list(dict.fromkeys(d for _, d in cell))
    first = next(iter(cell.values()))
    compile_only = meta.get("gpu") is None
    what = f"what the first call compiles for {meta['arch']}" if compile_only else "first call, to completion"
    lines = [f"| {first['M']}x{first['N']}x{first['K']}, {what} | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]

    def row(scenario: str, label: str, value: Callable[[dict], str]) -> None:
        cells = [value(cell[(scenario, d)]) if (scenario, d) in cell else "" for d in dtypes]
        if any(cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")

    phases = list(dict.fromkeys(p for (sc, _), r in cell.items() if sc == "cold" for p in r["phases_median_s"]))
    row("cold", "gemmlab, empty cache (a fresh install)", lambda r: _duration(r["median_s"]))
    row("cold", f"&nbsp;&nbsp;of it in jit: {', '.join(phases)}",
        lambda r: ", ".join(_duration(r["phases_median_s"][p]) if p in r["phases_median_s"] else "-" for p in phases))
    outside = "&nbsp;&nbsp;of it outside jit" + ("" if compile_only else " (imports, loading, launching)")
    row("cold", outside, lambda r: _duration(r["outside_jit_median_s"]))
    row("cold", "&nbsp;&nbsp;kernels compiled", lambda r: ", ".join(k["kernel"] for k in r["kernels"]) or "none")
    row("warm", "gemmlab, warm cache, new process", lambda r: _duration(r["median_s"]))
    row("warm", outside, lambda r: _duration(r["outside_jit_median_s"]))
    row("torch", "torch.mm, new process", lambda r: _duration(r["median_s"]))
    row("warm", "gemmlab, a second call", lambda r: _duration(r["second_median_s"]) if "second_median_s" in r else "")
    row("torch", "torch.mm, a second call", lambda r: _duration(r["second_median_s"]))
    imports = next(r["median_s"] for r in recs if r["scenario"] == "import")
    where = (f"Compile only, on {meta['cpu']} ({meta['cores']} cores)" if compile_only
             else f"{meta['gpu']}, host CPU {meta['cpu']} ({meta['cores']} cores)")  # fmt: skip
    setup = "" if compile_only else f", CUDA's context and the inputs {_duration(first['cuda_median_s'])}"
    return "\n".join(lines) + (
        f"\n\n{where}, commit `{short_commit(meta['commit'])}`, {meta['time']}. Medians of {len(first['times_s'])} "
        "repetitions, each in fresh processes with a new, empty GEMMLAB_CACHE_DIR (NVRTC's own cache off); the "
        "dtypes' first calls one after the other in one process, in the table's order. Before them, in each "
        f"process: importing torch and gemmlab {_duration(first['import_median_s'])}{setup}; "
        f"`python -c \"import gemmlab\"` took {_duration(imports)} from the shell. Target: an empty cache's first "
        "call within 1.0 s, a warm one's within 50 ms."
    )


def model_layers(run: dict) -> tuple[list[str], list[int], dict[tuple[str, int], dict]]:
    """A models run (gemmlab bench --sweep sweeps/models.toml) as a grid: its layers' names (the
    sweep's order), the token counts (M), and the record of each (name, M)."""
    names = run["meta"].get("names") or {}
    if not names:
        raise ValueError("a models run names its layers in its header (the sweep's weights table)")
    grid = {(names[f"{r['N']}x{r['K']}"], r["M"]): r for r in run["records"] if f"{r['N']}x{r['K']}" in names}
    tokens = sorted({m for _, m in grid})
    return [n for n in names.values() if any((n, m) in grid for m in tokens)], tokens, grid


def models_table(run: dict) -> str:
    """Rows: a model's layers (y = x @ w.t(), w of N x K); columns: tokens (M). Each cell: the
    ratio to cuBLAS of what gemm() chose (kernel step and tile), the geometric mean under each
    column."""
    layers, tokens, grid = model_layers(run)
    head = "| layer (N x K) | " + " | ".join(f"M = {m}" for m in tokens) + " |"
    lines = [head, "|---" * (len(tokens) + 1) + "|"]

    def cell(r: dict | None) -> str:
        if r is None:
            return ""
        c = r["config"]
        if "NT" in c:  # tc10: NT rows x BW columns of D a block, K in gridDim.y runs (the record's grid)
            runs = (r.get("extra", {}).get("grid") or [0, 1])[1]
            return f"{r['ratio']:.2f}x ({_step(r['kernel']):02d}: {c['NT']} x {c['BW']}{f', K / {runs}' if runs > 1 else ''})"
        split = " split" if c.get("SPLIT") else ""
        return f"{r['ratio']:.2f}x ({_step(r['kernel']):02d}: {c['BM']} x {c['BN']}{', pairs' if c.get('CM', 1) > 1 else ''}{split})"

    for name in layers:
        r0 = next(grid[(name, m)] for m in tokens if (name, m) in grid)
        lines.append(f"| {name} ({r0['N']} x {r0['K']}) | " + " | ".join(cell(grid.get((name, m))) for m in tokens) + " |")
    geo = []
    for m in tokens:
        ratios = [grid[(n, m)]["ratio"] for n in layers if (n, m) in grid]
        geo.append(f"**{statistics.geometric_mean(ratios):.2f}x**" if ratios else "")
    lines.append("| geometric mean | " + " | ".join(geo) + " |")
    recs = run["records"]
    failed = run["meta"].get("failures") or []
    note = (f"\n\n{run['meta']['gpu']}, {_commits(run['meta'])}: {recs[0]['dtype']} "
            f"(B = w.t(), a transposed view read in place), 'auto' (gemm()'s choice: step, block tile, pairs = "
            f"clusters of two; for step 10 rows x columns of D a block, K / n: K split into n runs), median of {recs[0]['reps']} event-timed runs with L2 flushed against torch.mm (the "
            f"better of the cublas and cublasLt backends) in the same rounds; every result checked against float64 "
            f"first{f'; {len(failed)} cases failed and are not shown' if failed else ''}.")
    return "\n".join(lines) + note


def reorder_table(cpu_run: dict) -> str:
    """Seed 004's claim, measured: the i-k-j order against the naive i-j-k, per shape."""
    recs = {(r["kernel"], r["M"], r["N"], r["K"]): r for r in cpu_run["records"]}
    lines = ["| M x N x K | cpu01 naive i-j-k (ms) | cpu02 reordered i-k-j (ms) | speed-up |", "|---|---|---|---|"]
    for (k, M, N, K), r in recs.items():
        if k != "cpu01_naive" or ("cpu02_reordered", M, N, K) not in recs:
            continue
        r2 = recs[("cpu02_reordered", M, N, K)]
        lines.append(f"| {M} x {N} x {K} | {r['median_ms']:.2f} | {r2['median_ms']:.2f} | {r['median_ms'] / r2['median_ms']:.1f}x |")
    meta = cpu_run["meta"]
    return "\n".join(lines) + f"\n\n{meta['cpu']}, {meta['cores']} cores, commit `{short_commit(meta['commit'])}`, {meta['time']}."


def cpu_vs_gpu_table(cpu_run: dict, gpu_run: dict, shape=(2048, 2048, 1024)) -> str:
    """Seed 001's comparison: the best GPU kernel against the multithreaded CPU at one shape."""
    M, N, K = shape
    cpu = [r for r in cpu_run["records"] if (r["M"], r["N"], r["K"]) == shape]
    gpu = [r for r in gpu_run["records"] if (r["M"], r["N"], r["K"]) == shape]
    if not cpu or not gpu:
        return f"_no records at {M} x {N} x {K} in both runs_"
    best_gpu = max(gpu, key=lambda r: r["tflops"])
    best_cpu = max(cpu, key=lambda r: r["tflops"])
    rows = [
        (f"GPU: {best_gpu['kernel']} ({gpu_run['meta']['gpu']})", best_gpu["median_ms"], best_gpu["tflops"]),
        (f"GPU: cuBLAS ({gpu_run['meta']['gpu']})", best_gpu["median_ms"] * best_gpu["ratio"], _baseline_tflops(best_gpu)),
        (f"CPU: {best_cpu['kernel']} ({cpu_run['meta']['cores']} cores)", best_cpu["median_ms"], best_cpu["tflops"]),
        (f"CPU: numpy BLAS ({cpu_run['meta']['cores']} cores)", best_cpu["median_ms"] * best_cpu["ratio"], best_cpu["baseline_tflops"]),
    ]
    lines = [f"| {M} x {N} x {K} | ms | GFLOP/s | vs {best_cpu['kernel']} |", "|---|---|---|---|"]
    for name, ms, tf in rows:
        lines.append(f"| {name} | {ms:.2f} | {tf * 1e3:.0f} | {best_cpu['median_ms'] / ms:.1f}x |")
    return "\n".join(lines) + (
        f"\n\nCPU run: {cpu_run['meta']['cpu']}, commit `{short_commit(cpu_run['meta']['commit'])}`, {cpu_run['meta']['time']}; "
        # the run the GPU row came from (merged runs keep each record's own), not the newest header
        f"GPU run: commit `{short_commit(best_gpu.get('_commit', gpu_run['meta']['commit']))}`, "
        f"{best_gpu.get('_time', gpu_run['meta']['time'])}."
    )


def sustained_table(run: dict) -> str:
    """A `gemmlab sustained` run: per window, throughput, ratio to cuBLAS, clock, power, reasons."""
    meta = run["meta"]
    lines = [
        "| kernel | M x N x K | TFLOP/s | ratio | SM clock (MHz) | power (W) | TFLOP/s per GHz | clock held by |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in run["records"]:
        name = "cuBLAS" if r["name"] == "cublas" else _title(r["name"])
        per_ghz = f"{r['tflops'] / (r['sm_mhz'] / 1000):.0f}" if r.get("sm_mhz") else ""
        ratio = "" if r["name"] == "cublas" else f"{r['ratio']:.3f}"
        lines.append(
            f"| {name} | {r['M']} x {r['N']} x {r['K']} | {r['tflops']:.0f} | "
            f"{ratio} | {r.get('sm_mhz', 0):.0f} | "
            f"{r.get('power_w', 0):.0f} | {per_ghz} | {', '.join(r.get('reasons', [])) or 'nothing'} |"
        )
    sampling = f" {meta['sampling']}." if meta.get("sampling") else ""
    return "\n".join(lines) + (
        f"\n\n{meta['gpu']} ({meta.get('dtype', '?')}), commit `{short_commit(meta['commit'])}`, {meta['time']}; each kernel "
        f"launched back to back for {meta['seconds']:g} s, cuBLAS before and after (ratio: against their mean); clock "
        f"and power are medians of nvidia-smi samples every {meta['sample_ms']} ms after the first "
        f"{meta['settle_s']:g} s of a window.{sampling}"
    )


def k_sweep_shape(run: dict) -> tuple[str, int, int] | None:
    """(kernel, M, N) when a run timed one kernel at one M x N and at least four K (a K sweep)."""
    recs = run["records"]
    keys = {(r["kernel"], r["M"], r["N"]) for r in recs}
    return next(iter(keys)) if len(keys) == 1 and len({r["K"] for r in recs}) >= 4 else None


def _line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (a, b)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def k_sweep_table(runs: list[dict], min_k: int = 1024) -> str:
    """Time against K at fixed M x N on one GPU, kernel and cuBLAS fitted to t = a + b K over K >= min_k:
    a is what does not grow with K (launch, pipeline fill, epilogues, the tail), b the main loop's
    time per K step -- where a gap to cuBLAS comes from."""
    lines = [
        "| kernel | dtype | M x N | K fitted | fixed cost a (us) | cuBLAS a (us) | b (us per 1024 K) | cuBLAS b | main-loop ratio (cuBLAS b / b) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    notes = []
    for run in runs:
        kernel, M, N = k_sweep_shape(run)
        recs = sorted((r for r in run["records"] if r["K"] >= min_k), key=lambda r: r["K"])
        if len(recs) < 3:
            continue
        ks = [r["K"] for r in recs]
        a, b = _line_fit(ks, [r["median_ms"] * 1e3 for r in recs])
        ca, cb = _line_fit(ks, [r["median_ms"] * 1e3 * r["ratio"] for r in recs])
        lines.append(
            f"| {_title(kernel)} | {recs[0]['dtype']} | {M} x {N} | {ks[0]}-{ks[-1]} | {a:.1f} | {ca:.1f} | "
            f"{b * 1024:.2f} | {cb * 1024:.2f} | {cb / b:.3f} |"
        )
        notes.append(f"`{short_commit(run['meta']['commit'])}` ({run['meta']['time']})")
    gpu = runs[0]["meta"]["gpu"]
    return "\n".join(lines) + (
        f"\n\n{gpu}, runs {', '.join(notes)}; medians of event-timed runs with L2 flushed, cuBLAS timed in the same "
        "rounds (its time = kernel time x ratio); least-squares fits over the K listed."
    )


def ncu_table(csv_path: Path) -> str:
    meta = _sidecar(csv_path)
    lines = ["| kernel | " + " | ".join(h for _, h, _ in NCU_COLUMNS) + " |", "|---" * (len(NCU_COLUMNS) + 1) + "|"]
    for name, metrics in read_ncu_csv(csv_path):
        cells = []
        for metric, _, scale in NCU_COLUMNS:
            v = metrics.get(metric)
            if v is None:
                cells.append("")
            elif float(v * scale).is_integer() or v * scale >= 100:
                cells.append(f"{v * scale:,.0f}")
            else:
                cells.append(f"{v * scale:,.2f}")
        lines.append(f"| `{name.split('<')[0]}` | " + " | ".join(cells) + " |")
    note = (
        f"\n\nNsight Compute, {meta.get('gpu', '?')}, shape {meta.get('shape')}, commit `{short_commit(str(meta.get('commit', '?')))}`, "
        f"{meta.get('time', '?')}, clocks not locked (`--clock-control none`); one launch per step. Stalls are "
        f"warps stalled per issued instruction."
    )
    return "\n".join(lines) + note


def peak_table(run: dict) -> str:
    r = run["records"][0]
    meta = run["meta"]

    def f(v, unit):
        return "n/a" if v is None else f"{v:,.1f} {unit}"

    rows = [
        ("FP32, theoretical (SMs x lanes x 2 x max clock)", f(r["theoretical_fp32_tflops"], "TFLOP/s")),
        ("FP32, measured FFMA loop", f(r["measured_ffma_tflops"], "TFLOP/s")),
        ("FP32, cuBLAS 8192^3 (TF32 off)", f(r["cublas_fp32_8192_tflops"], "TFLOP/s")),
        ("BF16 dense tensor cores, theoretical", f(r["theoretical_bf16_dense_tflops"], "TFLOP/s")),
        ("BF16, cuBLAS 8192^3", f(r["cublas_bf16_8192_tflops"], "TFLOP/s")),
        ("DRAM, measured device-to-device copy (read + write)", f(r["measured_copy_gbs"], "GB/s")),
    ]
    lines = ["| ceiling | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines) + (
        f"\n\n{meta['gpu']}, {r['sm_count']} SMs, max SM clock {r['max_sm_clock_mhz']} MHz, "
        f"commit `{short_commit(meta['commit'])}`, {meta['time']}."
    )


def pad_table(run: dict) -> str:
    lines = [
        "| kernel | M x N x K | padded to | predicated (ms) | padded kernel (ms) | copies (ms) | padded total (ms) | padding pays |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in run["records"]:
        m = r["median_ms"]
        lines.append(
            f"| {_title(r['kernel'])} | {r['M']} x {r['N']} x {r['K']} | {' x '.join(map(str, r['padded']))} | "
            f"{m['predicated']:.3f} | {m['padded_kernel']:.3f} | {r['copies_ms']:.3f} | {m['padded_total']:.3f} | {r['padding_speedup']:.2f}x |"
        )
    meta = run["meta"]
    return "\n".join(lines) + (
        f"\n\n{meta['gpu']}, commit `{short_commit(meta['commit'])}`, {meta['time']}; medians of {run['records'][0]['reps']} "
        f"event-timed runs, L2 flushed, interleaved with cuBLAS. 'padding pays' = predicated / padded total (> 1: the copies pay for themselves)."
    )


# The README's summary: a few square sizes, seed 000's odd sizes, the four arithmetics (every dtype,
# layout and size is in docs/results.md)
SUMMARY_SIZES = (1024, 2048, 4096, 8192)
SUMMARY_ODD_SIZES = (3135, 6132)
SUMMARY_DTYPES = ("float32", "tf32", "bfloat16", "float16")


def _step_name(kernel_id: str) -> str:
    """tc07 for a tensor-core step, 11 for a step of the FP32 ladder."""
    return kernel_id.split("_")[0] if kernel_id.startswith("tc") else f"{_step(kernel_id):02d}"


def summary_table(bench_runs: list[dict]) -> str:
    """Rows: each GPU's dtypes; columns: square sizes, then seed 000's odd sizes. Each cell: what
    gemm() itself chose there (a record of `-k auto`, as `gemmlab bench` writes them), its ratio to
    cuBLAS and step; where no such record exists yet, the best ratio among the steps measured at
    that shape, marked with an asterisk."""
    sizes = SUMMARY_SIZES + SUMMARY_ODD_SIZES
    head = ["GPU", "dtype"] + [f"{n}^3" for n in SUMMARY_SIZES] + [f"{n}^3 (odd)" for n in SUMMARY_ODD_SIZES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    starred = False
    for run in bench_runs:
        best: dict[tuple[str, int], dict] = {}
        auto: dict[tuple[str, int], dict] = {}
        for r in run["records"]:
            if r["M"] == r["N"] == r["K"] and r["M"] in sizes and not _off_its_problems(r):
                key = (r.get("dtype", "float32"), r["M"])
                if r.get("extra", {}).get("request") == "auto" and r.get("_time", "") >= auto.get(key, {}).get("_time", ""):
                    auto[key] = r  # the newest choice: an older run's choice may have been another step
                if key not in best or r["ratio"] > best[key]["ratio"]:
                    best[key] = r
        for dtype in SUMMARY_DTYPES:
            if not any((dtype, n) in best for n in sizes):
                continue
            cells = []
            for n in sizes:
                r = auto.get((dtype, n)) or best.get((dtype, n))
                mark = "" if r is None or (dtype, n) in auto else "*"
                starred |= mark == "*"
                cells.append(f"{r['ratio']:.2f}x ({_step_name(r['kernel'])}){mark}" if r else "")
            lines.append(f"| {run['meta']['gpu']} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        "\n\nRatio = cuBLAS median time / kernel median time, timed in the same rounds (torch.mm, the better of the "
        "cublas and cublasLt backends, in the same arithmetic: TF32 off for float32, on for tf32), median of "
        "event-timed runs with L2 flushed, from the newest record of every kernel and shape per GPU; in brackets the "
        "step `gemm()` chose there (tcNN: the tensor-core ladder, NN: the FP32 ladder)"
        + (", or, marked *, where `gemm()` itself has no record there yet, the fastest step measured, among which "
           "`kernel=\"auto\"` picks" if starred else "")
        + ". Every run behind each number: [docs/results.md](docs/results.md)."
    )


def models_summary(models_runs: list[dict]) -> str:
    """Per GPU, the geometric mean over a models run's layers of auto's ratio to cuBLAS, per token count."""
    tokens = sorted({m for run in models_runs for m in model_layers(run)[1]})
    lines = ["| GPU | layers | " + " | ".join(f"M = {m}" for m in tokens) + " |", "|" + "---|" * (len(tokens) + 2)]
    for run in models_runs:
        layers, ms, grid = model_layers(run)
        geo = []
        for m in tokens:
            ratios = [grid[(n, m)]["ratio"] for n in layers if (n, m) in grid]
            geo.append(f"{statistics.geometric_mean(ratios):.2f}x" if ratios else "")
        lines.append(f"| {run['meta']['gpu']} | {len(layers)} ({run['records'][0]['dtype']}) | " + " | ".join(geo) + " |")
    meta = models_runs[0]["meta"] if len(models_runs) == 1 else None
    where = f", {_commits(meta)}" if meta else ""
    return "\n".join(lines) + (
        f"\n\nGeometric mean over the layers of `gemm()`'s own choice (`-k auto`) against torch.mm in the same rounds{where}; "
        "y = x @ w.t() with M tokens and the [N, K] weight read in place (`sweeps/models.toml`; every layer: "
        "[docs/results.md](docs/results.md#on-a-models-layers))."
    )


def _geo_min_low(run: dict, low: float = 0.8) -> tuple[float, float, int, int]:
    ratios = [r["ratio"] for r in run["records"]]
    return statistics.geometric_mean(ratios), min(ratios), sum(x < low for x in ratios), len(ratios)


def fp32_shapes_summary(runs: list[dict]) -> str:
    """Per GPU, what gemm() chooses for exact float32 over sweeps/fp32-shapes.toml against cuBLAS
    SGEMM: the geometric mean, the lowest ratio and how many shapes fall below 0.8x."""
    lines = ["| GPU | shapes | geometric mean | lowest | below 0.8x |", "|---|---|---|---|---|"]
    for run in runs:
        geo, low, below, n = _geo_min_low(run)
        lines.append(f"| {run['meta']['gpu']} | {n} | {geo:.2f}x | {low:.2f}x | {below} |")
    where = f", {_commits(runs[0]['meta'])}" if len(runs) == 1 else ""
    return "\n".join(lines) + (
        f"\n\n`gemm()` on float32 with FFMA math (TF32 off) against cuBLAS SGEMM in the same rounds{where}, "
        "over the shape classes of `sweeps/fp32-shapes.toml` (one row, a few rows or columns, long K, "
        "small and odd squares, short K, model projections; every shape: "
        "[docs/results.md](docs/results.md#exact-float32-at-every-shape))."
    )


def fp32_shapes_table(run: dict) -> str:
    """Every shape of an fp32-shapes run: the step gemm() chose and its config, the rates, the ratio."""
    lines = ["| M x N x K | step | config | TFLOP/s | cuBLAS TFLOP/s | ratio |", "|---|---|---|---|---|---|"]
    for r in run["records"]:
        cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"| {r['M']}x{r['N']}x{r['K']} | {_step(r['kernel']):02d} | {cfg} | {r['tflops']:.2f} | "
                     f"{r['cublas_tflops']:.2f} | {r['ratio']:.2f}x |")
    geo, low, below, n = _geo_min_low(run)
    reps = run["records"][0]["reps"]
    return "\n".join(lines) + (
        f"\n\n{run['meta']['gpu']}, {_commits(run['meta'])}: geometric mean **{geo:.2f}x**, lowest {low:.2f}x, "
        f"{below} of {n} shapes below 0.8x; median of {reps} event-timed runs with L2 flushed, against torch.mm with TF32 off."
    )
