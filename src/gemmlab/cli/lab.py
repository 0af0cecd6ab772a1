"""Commands that measure on a device and write records: bench, pad, overhead, cold-start, fuzz, accuracy,
sustained, peak, conv-bench, linear-bench, bmm-bench, train-bench."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .. import registry
from .common import (
    DEVICE_OPTION, PENDING_OPTION, WHOLE, _kernel_ids, _out_option, _pick_device, _progress, _require_gpu, console,
    err_console, fuzz_exit, fuzz_progress, fuzz_replayed, fuzz_wrong_printer, parse_shape,
)

def bench_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable), or auto (what gemm() chooses, case by case); default all"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default the seeds' sizes"),
    reps: Optional[int] = typer.Option(None, min=1, help="timed runs per kernel and shape (median reported); default 20 on a GPU, 10 on the CPU"),
    warmup: int = typer.Option(2, min=0, help="untimed runs first"),
    out: Path = _out_option("bench"),
    device: str = DEVICE_OPTION,
    budget: float = typer.Option(20.0, help="CPU only: seconds a case may take; slow loops get fewer reps (>= 3)"),
    pending: bool = PENDING_OPTION,
    tag: str = typer.Option("bench", help="file name prefix; reports read 'bench' runs only (use 'tune' for config sweeps)"),
    dtype: Optional[str] = typer.Option(None, help="float32 (the default with -k, -s or --ladder), bfloat16 (bf16), float16 (fp16), tf32 (float32 tensors multiplied as TF32; cuBLAS with TF32 on), 3xtf32 (float32 at fp32's accuracy on the tensor cores: tc11; cuBLAS SGEMM), or bf16-fp32out / fp16-fp32out (16-bit inputs, fp32 result)"),
    sweep: Optional[Path] = typer.Option(None, help="a TOML file with kernels, shapes or a model's layers, dtype, layout, tag (reps, warmup): sweeps/*.toml"),
    resume: Optional[Path] = typer.Option(None, help="a results file of an interrupted run: skip its cases, append the rest"),
    layout: str = typer.Option("nn", help="GPU: how A and B lie in memory: nn (row-major), nt (B a transposed view, x @ w.t()), tn, tt"),
    ladder: bool = typer.Option(False, "--ladder", help="GPU: every step of the --dtype's ladder at the seeds' sizes, not gemm()'s choice in each dtype"),
) -> None:
    """Time kernels against cuBLAS (GPU) or numpy's BLAS (CPU) and write the records.

    GPU, with nothing named: what gemm() chooses in fp32, TF32, bf16 and fp16 at a few squares,
    seed 000's odd sizes and Llama 3 8B's layers (gemmlab.bench.overview); --ladder, -k, -s,
    --dtype or --sweep time what they name. cuBLAS runs on the same inputs, interleaved, L2
    flushed. A kernel may carry a config: -k 'sgemm_11_warp_tile[BK=16,WN=64]'."""
    if sweep is not None:
        from ..bench.run import read_sweep

        try:
            spec = read_sweep(sweep)
        except (ValueError, OSError) as exc:
            raise typer.BadParameter(str(exc)) from None
        kernel = (kernel or []) + spec["kernels"] or None
        shape = (shape or []) + ["x".join(map(str, s)) for s in spec["shapes"]] or None
        reps = spec["reps"] or reps
        warmup = spec["warmup"] if spec["warmup"] is not None else warmup
        dtype, layout, tag = spec["dtype"], spec["layout"], spec["tag"] or tag  # the file's, over the options'
        names = spec["names"]
    else:
        names = None
    device = _pick_device(device)
    if reps is None:
        reps = _default_reps(device)
    named = kernel or shape or sweep or dtype or resume or ladder or pending or layout != "nn" or tag != "bench"
    if device == "cuda" and not named:
        _bench_overview(out, reps, warmup)
        return
    dtype = dtype or "float32"
    if resume is not None and device != "cuda":
        raise typer.BadParameter("--resume works for GPU runs")
    if kernel and any("[" in k or k == "auto" for k in kernel):
        from ..bench.run import parse_kernel_config

        try:
            for k in kernel:
                parse_kernel_config(k)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        ids = list(kernel)
    else:
        from ..bench.run import DTYPES, PRECISIONS

        if dtype not in DTYPES:
            raise typer.BadParameter(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
        ids = _kernel_ids(kernel, device, pending, DTYPES[dtype] if device == "cuda" else None, PRECISIONS.get(dtype, "fp32"))
        if not kernel and device == "cuda":
            # steps for a few rows (tc10) only where a shape has that few: not the default squares
            # (sweeps/models.toml times tc10), nor a -s 3072 that refreshes one row of the tables
            from ..configs import SKINNY_M_MAX

            few = shape and any(parse_shape(s)[0] <= SKINNY_M_MAX for s in shape)
            ids = [k for k in ids if few or "skinny" not in registry.get(k).tags]
    if device == "cpu":
        from ..bench import cpu as bench_cpu

        if "auto" in ids:
            raise typer.BadParameter("-k auto times gemm()'s GPU choice; on the CPU name the kernels")

        shapes = [parse_shape(s) for s in shape] if shape else list(bench_cpu.CPU_SHAPES)
        runner = lambda **kw: bench_cpu.run_cpu_bench(ids, shapes, out, reps=reps, warmup=min(warmup, 1), budget_s=budget, **kw)
        title, unit, scale, base = "gemmlab bench on the CPU (FP32)", "GFLOP/s", 1e3, "numpy"
    else:
        import torch

        from ..bench import run as bench_run

        shapes = [parse_shape(s) for s in shape] if shape else list(bench_run.DEFAULT_SHAPES)
        if dtype not in bench_run.DTYPES:
            raise typer.BadParameter(f"--dtype {dtype!r}: one of {', '.join(bench_run.DTYPES)}")
        if layout not in bench_run.LAYOUTS:
            raise typer.BadParameter(f"--layout {layout!r}: one of {', '.join(bench_run.LAYOUTS)}")
        torch_dtype = bench_run.DTYPES[dtype]
        precision = bench_run.PRECISIONS.get(dtype, "fp32")
        for k in (k for k in ids if k != "auto"):  # 'auto': gemm()'s choice for each case
            spec = registry.get(k.split("[")[0])
            if torch_dtype not in spec.dtypes or (torch_dtype == torch.float32 and spec.math != precision):
                raise typer.BadParameter(f"{spec.id} does not take {dtype}; it takes {spec.dtypes} ({spec.math} math for float32)")
        runner = lambda **kw: bench_run.run_bench(ids, shapes, out, reps=reps, warmup=warmup, tag=tag, resume=resume,
                                                  dtype=torch_dtype, precision=precision,
                                                  out_dtype=bench_run.OUT_DTYPES.get(dtype), layout=layout, names=names,
                                                  **kw)  # fmt: skip
        title, unit, scale, base = f"gemmlab bench ({dtype}{', TF32 off' if precision == 'fp32' else ''}{', ' + layout if layout != 'nn' else ''})", "TFLOP/s", 1.0, "cuBLAS"
    configs = tag != "bench"  # config sweeps: each record's config in a column of its own
    t = bench_table(title, unit, base, configs)
    with _progress() as prog:
        task = prog.add_task("benchmarking", total=len(ids) * len(shapes))

        def on_start(kid, s):
            prog.update(task, description=f"{kid} {s[0]}x{s[1]}x{s[2]}")

        def on_record(r):
            add_bench_row(t, r, scale, configs)
            prog.advance(task)

        path, _ = runner(on_record=on_record, on_start=on_start)
    console.print(t)
    console.print(f"records: {path}")
    failures = json.loads(Path(path).read_text())["meta"].get("failures", [])
    for f in failures:
        err_console.print(f"FAILED M={f['M']} N={f['N']} K={f['K']} kernel={f['kernel']}: {f['error']}")
    if failures:
        raise typer.Exit(1)


def _default_reps(device: str) -> int:
    if device == "cpu":
        from ..bench.cpu import CPU_REPS

        return CPU_REPS
    from ..bench.run import REPS

    return REPS


def bench_table(title: str, unit: str, base: str, configs: bool) -> Table:
    """The table of a named bench; with configs, a column of each record's config. Ids and shapes
    stay whole; a config folds only in a terminal too narrow for it (a log is LOG_WIDTH wide)."""
    t = Table(title=title)
    for col in ("kernel", *(["config"] if configs else []), "M x N x K", "ms", unit, f"{base} {unit}", "ratio"):
        t.add_column(col, justify="right", **(WHOLE if col in ("kernel", "M x N x K") else dict(overflow="fold")))
    return t


def add_bench_row(t: Table, r: dict, scale: float, configs: bool) -> None:
    config = [",".join(f"{k}={v}" for k, v in r["config"].items())] if configs else []
    t.add_row(r["kernel"], *config, f"{r['M']}x{r['N']}x{r['K']}", f"{r['median_ms']:.3f}", f"{r['tflops'] * scale:.2f}",
              f"{r['baseline_tflops'] * scale:.2f}", f"{r['ratio']:.3f}")  # fmt: skip


def _bench_overview(out: Path, reps: int, warmup: int) -> None:
    """gemm()'s choice in each dtype against cuBLAS (bench.overview): a table as it runs, then each
    part's geometric mean."""
    from ..bench import overview

    t = Table(title="gemmlab bench: gemm() (kernel='auto') against cuBLAS, same rounds")
    for col in ("dtype", "M x N x K", "layer", "kernel", "TFLOP/s", "cuBLAS TFLOP/s", "ratio"):
        t.add_column(col, justify="right", **(WHOLE if col in ("kernel", "M x N x K") else dict(overflow="fold")))
    with _progress() as prog:
        task = prog.add_task("benchmarking", total=overview.cases())

        def on_start(part, s):
            prog.update(task, description=f"{part.label} {s[0]}x{s[1]}x{s[2]}")

        def on_record(part, r):
            layer = (part.names or {}).get(f"{r['N']}x{r['K']}", "")
            t.add_row(part.label, f"{r['M']}x{r['N']}x{r['K']}", layer, r["kernel"], f"{r['tflops']:.1f}",
                      f"{r['baseline_tflops']:.1f}", f"{r['ratio']:.2f}x")  # fmt: skip
            prog.advance(task)

        done = overview.run_overview(out, reps=reps, warmup=warmup, on_record=on_record, on_start=on_start)
    console.print(t)
    failed = False
    for part, path, records in done:
        ratios = [r["ratio"] for r in records if r.get("ratio")]
        console.print(f"{part.label}: geometric mean {overview.geomean(ratios):.2f}x cuBLAS over {len(ratios)} "
                      f"problems; record: {path}", highlight=False)  # fmt: skip
        for f in json.loads(Path(path).read_text())["meta"].get("failures", []):
            err_console.print(f"FAILED M={f['M']} N={f['N']} K={f['K']} {part.label}: {f['error']}")
            failed = True
    console.print("every step of a ladder: gemmlab bench --ladder [--dtype bf16|fp16|tf32]")
    if failed:
        raise typer.Exit(1)


def pad_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default step 11"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default seed 000's odd sizes"),
    reps: int = typer.Option(20, min=1, help="timed runs per case"),
    out: Path = _out_option("pad"),
) -> None:
    """Padding against predication: pad A and B to tile multiples, run, unpad, timed.

    Timed against the same kernel on the odd shape (seeds 000 v4/v7, 003 k5)."""
    _require_gpu()
    from ..bench import pad

    ids = _kernel_ids(kernel or ["sgemm_11_warp_tile"], "cuda")
    shapes = [parse_shape(s) for s in shape] if shape else list(pad.ODD_SHAPES)
    t = Table(title="padding against predication (ms)")
    for col in ("kernel", "M x N x K", "padded to", "predicated", "padded kernel", "copies", "padded total", "padding pays"):
        t.add_column(col, justify="right", **(WHOLE if col in ("kernel", "M x N x K", "padded to") else {}))
    with _progress() as prog:
        task = prog.add_task("padding", total=len(ids) * len(shapes))

        def on_start(kid, s):
            prog.update(task, description=f"{kid} {s[0]}x{s[1]}x{s[2]}")

        def on_record(r):
            m = r["median_ms"]
            t.add_row(r["kernel"], f"{r['M']}x{r['N']}x{r['K']}", "x".join(map(str, r["padded"])), f"{m['predicated']:.3f}",
                      f"{m['padded_kernel']:.3f}", f"{r['copies_ms']:.3f}", f"{m['padded_total']:.3f}", f"{r['padding_speedup']:.2f}x")
            prog.advance(task)

        path, _ = pad.run_pad_bench(ids, shapes, out, reps=reps, on_record=on_record, on_start=on_start)
    console.print(t)
    console.print(f"records: {path}", highlight=False)


def overhead_cmd(
    kernel: str = typer.Option("auto", help="kernel id or auto"),
    size: int = typer.Option(64, help="M = N = K"),
    out: Path = _out_option("overhead"),
    dtype: Optional[list[str]] = typer.Option(None, help="float32, bf16 or fp16 (repeatable; default float32 and bf16)"),
    staged: bool = typer.Option(True, help="also bf16 at SIZE - 2 on tc07: rows TMA cannot read, copied on every call"),
) -> None:
    """Measure the per-call host overhead of gemm() on a cached kernel."""
    _require_gpu()
    from ..bench import environment, overhead
    from ..bench.run import DTYPES, PRECISIONS, results_path, write_run

    names = dtype or ["float32", "bf16"]
    bad = [d for d in names if d not in DTYPES or d in PRECISIONS]
    if bad:
        raise typer.BadParameter(f"--dtype {bad[0]!r}: one of float32, bf16, fp16")
    meta = environment.describe(0)
    meta["kind"] = "overhead"
    recs = [overhead.measure(kernel=kernel, n=size, dtype=DTYPES[d]) for d in names]
    if staged and size > 2:
        recs.append(overhead.measure(kernel="tc07_persistent_cluster", n=size - 2, dtype=DTYPES["bf16"]))
    path = results_path(out, meta, "overhead")
    write_run(path, meta, recs)
    from ..bench.tables import overhead_table

    console.print(overhead_table({"meta": meta, "records": recs}))
    console.print(f"record: {path}")


def cold_start_cmd(
    size: int = typer.Option(2048, min=1, help="M = N = K"),
    reps: int = typer.Option(5, min=1, help="repetitions, each in fresh processes with a new, empty cache (medians reported)"),
    arch: Optional[str] = typer.Option(None, help="time only what the first calls compile for this target (e.g. sm_90a): no GPU needed, no record written"),
    out: Path = _out_option("cold-start"),
) -> None:
    """Time a program's first gemm() of each dtype, with an empty and with a warm cubin cache.

    In fresh processes: `python -c "import gemmlab"`; the first bf16 and the first fp32 SIZE^3
    gemm() to completion with a new, empty GEMMLAB_CACHE_DIR (the kernels are compiled), then in a
    new process with the cache they left; torch.mm's first calls in a new process beside them.
    Without a GPU it exits 2, unless --arch asks for the compile-only measurement."""
    import torch

    if arch is None and not torch.cuda.is_available():
        err_console.print("gemmlab: no CUDA GPU is visible on this machine; cold-start times first calls on one "
                          "(--arch sm_90a times only what they compile).")  # fmt: skip
        raise typer.Exit(2)
    from ..bench import coldstart
    from ..bench.run import results_path, write_run
    from ..bench.tables import cold_start_table

    meta = coldstart.host_meta(arch)
    with _progress() as prog:
        task = prog.add_task("cold-start repetitions", total=reps)
        recs = coldstart.measure(size, reps, arch, on_rep=lambda i: prog.update(task, completed=i))
    console.print(cold_start_table({"meta": meta, "records": recs}), markup=False, highlight=False)
    if arch is None:
        path = results_path(out, meta, "cold-start")
        write_run(path, meta, recs)
        console.print(f"record: {path}", highlight=False)


def fuzz_cmd(
    seconds: float = typer.Option(60.0, help="stop drawing problems after this many seconds"),
    cases: Optional[int] = typer.Option(None, help="stop after this many problems"),
    min_cases: int = typer.Option(0, help="fail (exit 1) if fewer problems than this were tried"),
    seed: Optional[int] = typer.Option(None, help="case i has seed SEED + i (default: a fresh SEED, printed)"),
    dtype: Optional[list[str]] = typer.Option(None, "--dtype", help="only these: bf16, fp16, bf16-fp32out, fp16-fp32out, tf32, fp32, 3xtf32 (repeatable)"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="only these kernels (repeatable; 'auto': gemm()'s own choice); default 'auto' and every kernel"),
    replay: Optional[str] = typer.Option(None, help="run one case again: the JSON printed after 'replay:'"),
    repeats: int = typer.Option(1, help="with --replay: how many times"),
    batched: bool = typer.Option(False, "--batched", help="draw batches through bmm's one-launch path even before it is on by default (batched.ONE_LAUNCH)"),
    out: Path = _out_option("fuzz"),
) -> None:
    """Random GEMMs in each kernel's risky regimes against float64 and cuBLAS; exit 1 on any wrong result."""
    _require_gpu()
    import random as _random

    from .. import fuzz

    if batched:
        fuzz.BATCHED_SHARE = fuzz.BATCHED_SHARE_ON
    from ..bench import environment
    from ..bench.run import results_path, write_run

    if replay is not None:
        fuzz_replayed(fuzz.replay(fuzz.Case.from_json(replay), repeats), "fuzz", "cuBLAS", lambda o: o.cublas)
    for d in dtype or ():
        if d not in fuzz.DTYPES:
            raise typer.BadParameter(f"--dtype {d!r}: one of {', '.join(fuzz.DTYPES)}")
    ids = None
    if kernel:  # 'auto' names gemm()'s own choice; the others are checked kernel ids
        others = [k for k in kernel if k != "auto"]
        ids = (("auto",) if "auto" in kernel else ()) + (tuple(_kernel_ids(others)) if others else ())
    seed = seed if seed is not None else _random.randrange(2**40)
    err_console.print(f"fuzz: seed {seed}, for {seconds:g} s" + (f" or {cases} problems" if cases else "")
                      + f"; epilogues with {fuzz.run_activation(seed) or 'a bias alone'}: every build a case may "
                      "launch compiles first, side by side (not counted in the seconds)", highlight=False)  # fmt: skip
    meta = environment.describe(0)
    meta.update(kind="fuzz", budget_seconds=seconds, max_cases=cases, dtypes=list(dtype or fuzz.DTYPES), kernels=list(ids or ("auto", "every kernel")))
    summary = fuzz.run(seed, seconds, cases, tuple(dtype) if dtype else None, ids, on_wrong=fuzz_wrong_printer("fuzz"),
                       on_progress=fuzz_progress("fuzz", "problems"))  # fmt: skip
    t = Table(title=f"gemmlab fuzz, seed {seed}: {summary.tried} problems in {summary.seconds:.0f} s")
    for col in ("", "problems"):
        t.add_column(col, no_wrap=True)
    for name, counts in (("regime", summary.by_regime), ("dtype", summary.by_dtype)):
        for k, v in sorted(counts.items()):
            t.add_row(f"{name} {k}", str(v))
    console.print(t)
    console.print(f"kernels that ran: {len(summary.by_kernel)} (kernel and tile); the record lists each"
                  + (f"; never drawn: {', '.join(summary.not_reached)}" if summary.not_reached else ""), highlight=False)
    path = results_path(out, meta, "fuzz")
    write_run(path, meta, [summary.record()])
    console.print(f"{summary.tried} problems, {len(summary.wrong)} wrong; record: {path}", highlight=False)
    fuzz_exit(summary, min_cases, "fuzz", "problems")


def accuracy_cmd(
    inputs: Optional[list[str]] = typer.Option(None, "--inputs", help="only these input sets (repeatable): normal, uniform, wide, wide-k, near-underflow"),
    k: Optional[list[int]] = typer.Option(None, "--k", "-K", help="only these K (repeatable): 1, 2, 8, 32, 64, 256, 1024, 4096, 16384, 65536"),
    out: Path = _out_option("accuracy"),
) -> None:
    """precision="3xtf32" against float64 and cuBLAS SGEMM, K from 1 to 65536; exit 1 where the contract fails.

    Each case: its inputs drawn from its own seed, gemm(a, b, precision="3xtf32") and torch.mm with
    TF32 off against the float64 product; the normwise and the max element error of both and their
    ratios (gemmlab.bench.accuracy). The contract, on the normal, uniform and wide inputs: every
    ratio at most 1.5x, their geometric mean below 1x. `gemmlab report` makes the table."""
    from ..bench import accuracy
    from ..bench.accuracy_table import accuracy_table, case_line, verdict

    try:
        todo = accuracy.cases(inputs, k)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    _require_gpu()
    with _progress() as prog:
        task = prog.add_task("accuracy", total=len(todo))

        def on_record(r: dict) -> None:
            prog.console.print(case_line(r), highlight=False)
            prog.advance(task)

        path, recs = accuracy.run_accuracy(out, todo, on_start=lambda c: prog.update(task, description=c.label()),
                                           on_record=on_record)  # fmt: skip
    from ..bench.records import load_run

    console.print(accuracy_table(load_run(path)), markup=False, highlight=False)
    console.print(f"record: {path}", highlight=False)
    contract = [r for r in recs if r["contract"]]
    if contract and not verdict(contract, accuracy.MAX_RATIO)["holds"]:
        raise typer.Exit(1)


def sustained_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id or id[NAME=VALUE,...] (repeatable); default auto"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK or N (repeatable); default 4096 and 8192"),
    dtype: str = typer.Option("bf16", help="bf16, fp16 or tf32 (float32 inputs, TF32 math on both sides)"),
    seconds: float = typer.Option(3.0, min=1.5, help="back-to-back running time per kernel and shape"),
    out: Path = _out_option("sustained"),
) -> None:
    """Throughput with the card at its power limit: each kernel back to back for seconds.

    cuBLAS runs before and after each kernel; the SM clock, board power and clock-event reasons
    are sampled meanwhile."""
    from ..bench import sustained
    from ..bench.tables import sustained_table
    from ..bench.run import DTYPES, OUT_DTYPES, PRECISIONS

    if dtype not in DTYPES or dtype in OUT_DTYPES or (DTYPES[dtype] == DTYPES["float32"] and dtype not in PRECISIONS):
        raise typer.BadParameter(f"--dtype {dtype!r}: one of bf16, fp16, tf32")
    ids = list(kernel or ["auto"])
    try:
        sustained.check_kernels(ids, DTYPES[dtype], PRECISIONS.get(dtype, "fp32"))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    shapes = [parse_shape(s) for s in shape] if shape else [(4096, 4096, 4096), (8192, 8192, 8192)]
    _require_gpu()
    with _progress() as prog:
        task = prog.add_task("sustained", total=len(shapes))

        started = []

        def on_start(s):  # called as each shape begins: the ones before it are done
            prog.update(task, completed=len(started), description=f"{s[0]}x{s[1]}x{s[2]}: {len(ids) + 2} windows of {seconds:g} s")
            started.append(s)

        path, recs = sustained.run_sustained(ids, shapes, out, DTYPES[dtype], PRECISIONS.get(dtype, "fp32"), dtype,
                                             seconds, on_start=on_start)  # fmt: skip
        prog.update(task, completed=len(shapes))
    meta = json.loads(Path(path).read_text())["meta"]
    console.print(sustained_table({"meta": meta, "records": recs}), markup=False, highlight=False)
    if meta.get("sampling"):
        err_console.print(meta["sampling"])
    console.print(f"record: {path}")


def peak_cmd(out: Path = _out_option("peak")) -> None:
    """The GPU's theoretical and measured FP32/tensor/bandwidth ceilings, stored as a record."""
    _require_gpu()
    from ..bench import environment, peak
    from ..bench.tables import peak_table
    from ..bench.run import results_path, write_run

    meta = environment.describe(0)
    meta["kind"] = "peak"
    rec = peak.measure(0)
    path = results_path(out, meta, "peak")
    write_run(path, meta, [rec])
    console.print(peak_table({"meta": meta, "records": [rec]}), markup=False, highlight=False)
    console.print(f"record: {path}", highlight=False)


def _layer_sweep(read, path: Path) -> dict:
    """A layer benchmark's sweep file, as `read` takes it, or why not, as a bad --sweep."""
    try:
        return read(path)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None


def _numbered(total: int, line):
    """What a layer benchmark calls after each record: '[i/total]' and the record's line."""
    done = [0]

    def progress(rec: dict) -> None:
        done[0] += 1
        console.print(f"[{done[0]}/{total}] {line(rec)}", highlight=False)

    return progress


def conv_bench_cmd(
    sweep: Path = typer.Option(Path("sweeps/conv/resnet50.toml"), help="a conv sweep file: layers, batches, dtypes"),
    dtype: Optional[list[str]] = typer.Option(None, help="float32, tf32, bf16 or fp16 (repeatable); default the sweep's"),
    batch: Optional[list[int]] = typer.Option(None, help="batch sizes (repeatable); default the sweep's"),
    algorithm: str = typer.Option("auto", help="conv2d's: auto (the step conv2d picks a layer, the default), im2col, implicit (conv02, implicit GEMM), tma (conv03, TMA im2col + wgmma, Hopper) or gather (conv04, few channels); implicit and tma bf16/fp16 with C a multiple of 8, gather bf16/fp16, im2col elsewhere"),
    tiles: bool = typer.Option(False, "--tiles", help="with --algorithm tma: time conv03 on every tile too (the record's tile_ms)"),
    tma_store: Optional[bool] = typer.Option(None, "--tma-store/--register-store", help="with --algorithm tma or auto: conv03 with its staged TMA-store epilogue (the default) or its register one (conv03.TMA_STORE)"),
    out: Path = _out_option("conv"),
) -> None:
    """Time gemmlab.conv2d against cuDNN on a sweep of convolution layers, its im2col step timed beside them."""
    _require_gpu()
    from ..bench.conv import read_conv_sweep, run_conv_bench
    from ..bench.layer_tables import conv_table

    spec = _layer_sweep(read_conv_sweep, sweep)
    if dtype:
        spec["dtypes"] = list(dtype)
    if batch:
        spec["batches"] = list(batch)
    bad = [d for d in spec["dtypes"] if d not in ("float32", "tf32", "bf16", "fp16")]
    if bad:
        raise typer.BadParameter(f"--dtype {bad[0]!r}: one of float32, tf32, bf16, fp16")
    progress = _numbered(len(spec["dtypes"]) * len(spec["batches"]) * len(spec["layers"]),
                         lambda r: f"{r['dtype']} N={r['N']} {r['name']}: {r['ratio']:.2f}x cuDNN")  # fmt: skip
    from ..conv import CHOICES

    if algorithm not in CHOICES:
        raise typer.BadParameter(f"--algorithm {algorithm!r}: one of {', '.join(CHOICES)}")
    if tiles and algorithm != "tma":
        raise typer.BadParameter("--tiles times conv03's tiles: it goes with --algorithm tma")
    if tma_store is not None and algorithm not in ("tma", "auto"):
        raise typer.BadParameter("--tma-store/--register-store pick conv03's epilogue: they go with --algorithm tma or auto")
    for path, records in run_conv_bench(spec, out, on_record=progress, algorithm=algorithm, tiles=tiles, tma_store=tma_store):
        from ..bench.records import load_run

        console.print(conv_table(load_run(path)), markup=False, highlight=False)
        console.print(f"record: {path}")


def linear_bench_cmd(
    sweep: Path = typer.Option(Path("sweeps/linear/llama-mlp.toml"), help="a linear sweep file: weights, tokens, dtype, activation"),
    tokens: Optional[list[int]] = typer.Option(None, help="token counts (repeatable); default the sweep's"),
    activation: Optional[str] = typer.Option(None, help="relu, gelu, gelu_tanh or silu; default the sweep's"),
    out: Path = _out_option("linear"),
) -> None:
    """Time gemmlab.linear (bias and activation fused into the GEMM) against torch eager and torch.compile."""
    _require_gpu()
    from ..bench.linear import read_linear_sweep, run_linear_bench
    from ..bench.records import load_run
    from ..bench.layer_tables import linear_table

    spec = _layer_sweep(read_linear_sweep, sweep)
    if tokens:
        spec["tokens"] = list(tokens)
    if activation is not None:
        if activation not in ("relu", "gelu", "gelu_tanh", "silu"):
            raise typer.BadParameter(f"--activation {activation!r}: one of relu, gelu, gelu_tanh, silu")
        spec["activation"] = activation
    progress = _numbered(len(spec["weights"]) * len(spec["tokens"]),
                         lambda r: f"{r['name']} tokens={r['tokens']}: {r['vs_eager']:.2f}x eager, {r['vs_compiled']:.2f}x compiled")  # fmt: skip
    path, _ = run_linear_bench(spec, out, on_record=progress)
    console.print(linear_table(load_run(path)), markup=False, highlight=False)
    console.print(f"record: {path}")


def bmm_bench_cmd(
    sweep: Path = typer.Option(Path("sweeps/bmm/grid.toml"), help="a bmm sweep file: batches crossed with squares, shapes, dtypes"),
    dtype: Optional[list[str]] = typer.Option(None, help="bf16 or fp16 (repeatable); default the sweep's"),
    out: Path = _out_option("bmm"),
    register_stores: bool = typer.Option(False, "--register-stores", help="time the one-launch path a second time with its staged TMA-store epilogue off (the register build), in the same rounds"),
) -> None:
    """Time gemmlab.bmm, in one launch and per matrix, against torch.bmm on a sweep of batches."""
    _require_gpu()
    from ..bench.bmm import BMM_DTYPES, read_bmm_sweep, run_bmm_bench
    from ..bench.bmm_table import bmm_table
    from ..bench.records import load_run

    spec = _layer_sweep(read_bmm_sweep, sweep)
    if dtype:
        bad = [d for d in dtype if d not in BMM_DTYPES]
        if bad:
            raise typer.BadParameter(f"--dtype {bad[0]!r}: one of {', '.join(BMM_DTYPES)}")
        spec["dtypes"] = list(dtype)
    progress = _numbered(len(spec["dtypes"]) * len(spec["cases"]),
                         lambda r: f"{r['dtype']} B={r['B']} {r['M']}x{r['N']}x{r['K']}: {r['vs_torch']:.2f}x torch.bmm "
                                   f"in one launch, {r['per_matrix_vs_torch']:.2f}x per matrix"
                                   + (f", {r['registers_vs_torch']:.2f}x with register stores" if "registers_ms" in r else ""))  # fmt: skip
    for path, _ in run_bmm_bench(spec, out, on_record=progress, registers=register_stores):
        console.print(bmm_table(load_run(path)), markup=False, highlight=False)
        console.print(f"record: {path}")


def train_bench_cmd(
    sweep: Path = typer.Option(Path("sweeps/train/block.toml"), help="a train sweep file: block sizes, batch x seq, dtype"),
    out: Path = _out_option("train"),
) -> None:
    """Time a transformer block's training step on gemmlab.nn.Linear against the same block on torch's nn.Linear."""
    _require_gpu()
    from ..bench.records import load_run
    from ..bench.train import read_train_sweep, run_train_bench
    from ..bench.train_table import train_table

    spec = _layer_sweep(read_train_sweep, sweep)
    progress = _numbered(len(spec["blocks"]),
                         lambda r: f"{r['name']} {r['batch']}x{r['seq']} tokens: {r['vs_torch']:.2f}x torch ({r['ms']:.2f} ms "
                                   f"against {r['torch_ms']:.2f}), loss gap {r['loss_gap']:.1e}, gradient gap {r['grad_gap']:.1e}")  # fmt: skip
    path, _ = run_train_bench(spec, out, on_record=progress)
    console.print(train_table(load_run(path)), markup=False, highlight=False)
    console.print(f"record: {path}")
