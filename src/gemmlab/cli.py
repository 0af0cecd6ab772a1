"""The gemmlab command line: a thin layer over the library (everything here is callable from Python)."""

from __future__ import annotations

import json
import os
from pathlib import Path
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from . import jit, registry

app = typer.Typer(help="Hand-written CUDA GEMM kernels: list, compile, check, benchmark.", no_args_is_help=True)
cache_app = typer.Typer(help="The on-disk cubin cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line
# a table's kernel ids and shapes, what -k and -s take: never wrapped or cut, other columns wrap
# (in a terminal too narrow for even that, they fold onto a second line rather than lose characters)
WHOLE = dict(no_wrap=True, overflow="fold")


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise typer.BadParameter(f"shape {text!r} is not MxNxK or N") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 0:
        raise typer.BadParameter(f"shape {text!r} is not MxNxK or N (non-negative integers)")
    return tuple(dims)


def _kernel_ids(names: Optional[list[str]], device: str = "cuda", pending: bool = False, dtype=None,
                precision: str = "fp32") -> list[str]:  # fmt: skip
    """The named kernels (checked), or by default every kernel of the device taking dtype; for
    float32, those of the given arithmetic (fp32 FFMA, or tf32)."""
    if not names:
        specs = registry.kernels(dtype, device=device, pending=pending)
        return [k.id for k in specs if dtype is None or str(dtype) != "torch.float32" or getattr(k, "math", "fp32") == precision]
    try:
        specs = [registry.get(n) for n in names]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    for s in specs:
        if s.device != device:
            raise typer.BadParameter(f"{s.id} runs on {s.device}, not {device}; pass --device {s.device}")
    return [s.id for s in specs]


def _pick_device(device: str) -> str:
    """'auto' -> the GPU if there is one, else the CPU ladder (said in one line)."""
    import torch

    if device not in ("auto", "cuda", "cpu"):
        raise typer.BadParameter(f"--device must be auto, cuda or cpu, got {device!r}")
    if device == "cuda":
        _require_gpu()
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        err_console.print("gemmlab: no CUDA GPU visible; running the CPU ladder (--device cuda insists on a GPU).")
        return "cpu"
    return device


PENDING_OPTION = typer.Option(False, "--pending", help="also the GPU kernels not yet checked on a GPU")
DEVICE_OPTION = typer.Option("auto", "--device", "-d", help="auto (GPU if present, else CPU), cuda or cpu")


def _user_results() -> Path:
    from .bench.run import user_results_dir

    return user_results_dir()


def _out_option(kind: str):
    """--out of a command that writes records: by default the user's results folder, so a run never
    touches the repository's results/ (the project's records, which the README's tables come from)."""
    return typer.Option(default_factory=_user_results, show_default="$GEMMLAB_RESULTS, else ~/.local/share/gemmlab/results",
                        help=f"records go to OUT/<machine>/{kind}-<time>.json")  # fmt: skip


def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        err_console.print("gemmlab: no CUDA GPU is visible on this machine; this command needs one.")
        raise typer.Exit(2)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


@app.command("list")
def list_kernels() -> None:
    """Every registered kernel, in ladder order."""
    t = Table(title="gemmlab kernels")
    for col in ("id", "device", "step", "dtypes", "config", "idea"):
        t.add_column(col, **(WHOLE if col == "id" else dict(overflow="fold")))
    for k in registry.kernels(device="cuda") + registry.kernels(device="cpu"):
        dtypes = ",".join(str(d).removeprefix("torch.") for d in k.dtypes)
        t.add_row(k.id, k.device, str(k.step), dtypes, str(k.default_config().as_dict()), k.idea)
    console.print(t)


@app.command("compile")
def compile_cmd(
    arch: Optional[str] = typer.Option(None, help="target, e.g. sm_90a; default: the current GPU's"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default all"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="compile in this many processes (0: one a CPU core)"),
) -> None:
    """Compile every kernel for an arch (no GPU needed) and print the resource report."""
    if arch is None:
        _require_gpu()
        arch = jit.device_arch(0)
    import torch

    from .configs import configs_in_use

    ids = _kernel_ids(kernel)
    work = [
        (spec, cfg, dt, od)
        for spec in (registry.get(kid) for kid in ids)
        for cfg in configs_in_use(spec)
        for dt in (spec.dtypes if spec.type_param else (None,))
        for od in ((dt, torch.float32) if spec.type_param else (None,))  # 16-bit kernels: fp32 output too
        if spec.builds_for(cfg, dt, od)  # (tc07 with one staging buffer: 16-bit results only)
    ]
    rows, failed = [], False
    with _progress() as prog:
        task = prog.add_task(f"compiling for {arch}", total=len(work))
        for (spec, *_), ck in zip(work, jit.compile_many([(s.id, c, d, o) for s, c, d, o in work], arch, registry.get, jobs or os.cpu_count())):
            prog.advance(task)
            if isinstance(ck, jit.CompileError):
                err_console.print(str(ck))
                failed = True
                continue
            bad = spec.spill_free and ck.usage.spills > 0
            failed |= bad
            rows.append((spec, ck, bad))
    if as_json:
        print(json.dumps([dict(kernel=s.id, config=c.name_expression, arch=arch, cached=c.from_cache, **c.usage.__dict__) for s, c, _ in rows], indent=1))
    else:
        t = Table(title=f"resource report, {arch} (ptxas)")
        for col in ("kernel", "regs", "static smem", "dynamic smem", "stack", "spill st/ld", "cached"):
            t.add_column(col, no_wrap=col == "kernel")
        for spec, ck, bad in rows:
            u = ck.usage
            spill = f"{u.spill_stores}/{u.spill_loads}" + (" [red]SPILLS[/red]" if bad else "")
            t.add_row(ck.name_expression, str(u.registers), f"{u.static_smem} B", f"{u.dynamic_smem} B", f"{u.stack_frame} B", spill, "yes" if ck.from_cache else "no")
        console.print(t)
    if failed:
        raise typer.Exit(1)


@app.command("check")
def check_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default all"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default the check set"),
    random_shapes: int = typer.Option(3, "--random", help="random odd shapes added to the default set"),
    seed: Optional[int] = typer.Option(None, help="seed for the random shapes (default: fresh)"),
    device: str = DEVICE_OPTION,
    pending: bool = PENDING_OPTION,
) -> None:
    """Verify kernels against float64: pass/fail and error per case; exit 1 on any failure."""
    device = _pick_device(device)
    from . import check

    ids = _kernel_ids(kernel, device, pending)
    shapes = [parse_shape(s) for s in shape] if shape else None
    import random as _random

    seed = seed if seed is not None else _random.randrange(2**31)
    if shapes is None:
        shapes = check.default_shapes(device, random_shapes, seed)
    total = len(check.cases(ids, shapes))
    t = Table(title=f"gemmlab check on {device} (random shapes seed {seed})")
    for col in ("kernel", "dtype", "M x N x K", "variant", "rel_fro", "max_scaled", "result"):
        t.add_column(col, **(WHOLE if col in ("kernel", "M x N x K") else {}))
    results = []
    with _progress() as prog:
        task = prog.add_task("checking", total=total)

        def on_case(r):
            results.append(r)
            prog.advance(task)

        check.run_check(ids, shapes, progress=on_case, device=device)
    for r in results:
        e = r.error
        if r.declined:
            status = f"[yellow]declined[/yellow] {r.message.removeprefix(check.DECLINED)}"
        else:
            status = "[green]pass[/green]" if r.passed else f"[red]FAIL[/red] {r.message or (e.summary() if e else '')}"
        t.add_row(r.kernel, r.dtype, f"{r.M}x{r.N}x{r.K}", r.variant, f"{e.rel_fro:.1e}" if e else "-", f"{e.max_scaled:.1e}" if e else "-", status)
    console.print(t)
    declined = [r for r in results if r.declined]
    bad = [r for r in results if not r.passed and not r.declined]
    console.print(f"{len(results) - len(bad) - len(declined)} passed, {len(bad)} failed"
                  + (f", {len(declined)} declined by a stated constraint ('auto' takes another kernel)" if declined else ""))
    for r in bad:
        err_console.print(f"FAILED {r.label()}: {r.message or r.error.summary()}")
    if bad:
        raise typer.Exit(1)


@app.command("bench")
def bench_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable), or auto (what gemm() chooses, case by case); default all"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default the seeds' sizes"),
    reps: int = typer.Option(20, min=1, help="timed runs per kernel and shape (median reported)"),
    warmup: int = typer.Option(2, min=0, help="untimed runs first"),
    out: Path = _out_option("bench"),
    device: str = DEVICE_OPTION,
    budget: float = typer.Option(20.0, help="CPU only: seconds a case may take; slow loops get fewer reps (>= 3)"),
    pending: bool = PENDING_OPTION,
    tag: str = typer.Option("bench", help="file name prefix; reports read 'bench' runs only (use 'tune' for config sweeps)"),
    dtype: str = typer.Option("float32", help="float32, bfloat16 (bf16), float16 (fp16), tf32 (float32 tensors multiplied as TF32; cuBLAS with TF32 on), or bf16-fp32out / fp16-fp32out (16-bit inputs, fp32 result)"),
    sweep: Optional[Path] = typer.Option(None, help="a TOML file with kernels, shapes or a model's layers, dtype, layout, tag (reps, warmup): sweeps/*.toml"),
    resume: Optional[Path] = typer.Option(None, help="a results file of an interrupted run: skip its cases, append the rest"),
    layout: str = typer.Option("nn", help="GPU: how A and B lie in memory: nn (row-major), nt (B a transposed view, x @ w.t()), tn, tt"),
) -> None:
    """Time kernels against cuBLAS (GPU) or numpy's BLAS (CPU) and write the records.

    GPU: cuBLAS on the same inputs, interleaved, L2 flushed. A kernel may carry a config:
    -k 'sgemm_11_warp_tile[BK=16,WN=64]'."""
    if sweep is not None:
        from .bench.run import read_sweep

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
    if resume is not None and device != "cuda":
        raise typer.BadParameter("--resume works for GPU runs")
    if kernel and any("[" in k or k == "auto" for k in kernel):
        from .bench.run import parse_kernel_config

        try:
            for k in kernel:
                parse_kernel_config(k)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        ids = list(kernel)
    else:
        from .bench.run import DTYPES, PRECISIONS

        if dtype not in DTYPES:
            raise typer.BadParameter(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
        ids = _kernel_ids(kernel, device, pending, DTYPES[dtype] if device == "cuda" else None, PRECISIONS.get(dtype, "fp32"))
        if not kernel and device == "cuda":
            # steps for a few rows (tc10) only where a shape has that few: not the default squares
            # (sweeps/models.toml times tc10), nor a -s 3072 that refreshes one row of the tables
            from .configs import SKINNY_M_MAX

            few = shape and any(parse_shape(s)[0] <= SKINNY_M_MAX for s in shape)
            ids = [k for k in ids if few or "skinny" not in registry.get(k).tags]
    if device == "cpu":
        from .bench import cpu as bench_cpu

        if "auto" in ids:
            raise typer.BadParameter("-k auto times gemm()'s GPU choice; on the CPU name the kernels")

        shapes = [parse_shape(s) for s in shape] if shape else list(bench_cpu.CPU_SHAPES)
        runner = lambda **kw: bench_cpu.run_cpu_bench(ids, shapes, out, reps=reps, warmup=min(warmup, 1), budget_s=budget, **kw)
        title, unit, scale, base = "gemmlab bench on the CPU (FP32)", "GFLOP/s", 1e3, "numpy"
    else:
        import torch

        from .bench import run as bench_run

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
    t = Table(title=title)
    configs = tag != "bench"  # config sweeps: each record's config in a column of its own
    for col in ("kernel", *(["config"] if configs else []), "M x N x K", "ms", unit, f"{base} {unit}", "ratio"):
        t.add_column(col, justify="right", **(WHOLE if col in ("kernel", "M x N x K") else dict(overflow="fold")))
    with _progress() as prog:
        task = prog.add_task("benchmarking", total=len(ids) * len(shapes))

        def on_start(kid, s):
            prog.update(task, description=f"{kid} {s[0]}x{s[1]}x{s[2]}")

        def on_record(r):
            config = [",".join(f"{k}={v}" for k, v in r["config"].items())] if configs else []
            t.add_row(r["kernel"], *config, f"{r['M']}x{r['N']}x{r['K']}", f"{r['median_ms']:.3f}", f"{r['tflops'] * scale:.2f}", f"{r['baseline_tflops'] * scale:.2f}", f"{r['ratio']:.3f}")
            prog.advance(task)

        path, _ = runner(on_record=on_record, on_start=on_start)
    console.print(t)
    console.print(f"records: {path}")
    failures = json.loads(Path(path).read_text())["meta"].get("failures", [])
    for f in failures:
        err_console.print(f"FAILED M={f['M']} N={f['N']} K={f['K']} kernel={f['kernel']}: {f['error']}")
    if failures:
        raise typer.Exit(1)


@app.command("pad")
def pad_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default step 11"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default seed 000's odd sizes"),
    reps: int = typer.Option(20, min=1, help="timed runs per case"),
    out: Path = _out_option("pad"),
) -> None:
    """Padding against predication: pad A and B to tile multiples, run, unpad, timed.

    Timed against the same kernel on the odd shape (seeds 000 v4/v7, 003 k5)."""
    _require_gpu()
    from .bench import pad

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


@app.command("overhead")
def overhead_cmd(
    kernel: str = typer.Option("auto", help="kernel id or auto"),
    size: int = typer.Option(64, help="M = N = K"),
    out: Path = _out_option("overhead"),
    dtype: Optional[list[str]] = typer.Option(None, help="float32, bf16 or fp16 (repeatable; default float32 and bf16)"),
    staged: bool = typer.Option(True, help="also bf16 at SIZE - 2 on tc07: rows TMA cannot read, copied on every call"),
) -> None:
    """Measure the per-call host overhead of gemm() on a cached kernel."""
    _require_gpu()
    from .bench import environment, overhead
    from .bench.run import DTYPES, PRECISIONS, results_path, write_run

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
    from .bench.report import overhead_table

    console.print(overhead_table({"meta": meta, "records": recs}))
    console.print(f"record: {path}")


@app.command("fuzz")
def fuzz_cmd(
    seconds: float = typer.Option(60.0, help="stop drawing problems after this many seconds"),
    cases: Optional[int] = typer.Option(None, help="stop after this many problems"),
    min_cases: int = typer.Option(0, help="fail (exit 1) if fewer problems than this were tried"),
    seed: Optional[int] = typer.Option(None, help="case i has seed SEED + i (default: a fresh SEED, printed)"),
    dtype: Optional[list[str]] = typer.Option(None, "--dtype", help="only these: bf16, fp16, bf16-fp32out, fp16-fp32out, tf32, fp32 (repeatable)"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="only these kernels (repeatable); default 'auto' and every kernel"),
    replay: Optional[str] = typer.Option(None, help="run one case again: the JSON printed after 'replay:'"),
    repeats: int = typer.Option(1, help="with --replay: how many times"),
    out: Path = _out_option("fuzz"),
) -> None:
    """Random GEMMs in each kernel's risky regimes against float64 and cuBLAS; exit 1 on any wrong result."""
    _require_gpu()
    import random as _random
    import time as _time

    from . import fuzz
    from .bench import environment
    from .bench.run import results_path, write_run

    def show_wrong(o) -> None:
        err_console.print(f"WRONG {o.case.label()}: {o.why}\n  chosen: {o.chosen}\n  call: {o.case.call()}\n"
                          f"  replay: gemmlab fuzz --replay '{o.case.to_json()}'", highlight=False)  # fmt: skip

    if replay is not None:
        outcomes = fuzz.replay(fuzz.Case.from_json(replay), repeats)
        for o in outcomes:
            if o.wrong:
                show_wrong(o)
            else:
                console.print(f"right {o.case.label()} on {o.chosen}: rel_fro {o.ours[0]:.2e} max_scaled {o.ours[1]:.2e} "
                              f"(cuBLAS {o.cublas[0]:.2e} {o.cublas[1]:.2e})", highlight=False)  # fmt: skip
        raise typer.Exit(1 if any(o.wrong for o in outcomes) else 0)
    for d in dtype or ():
        if d not in fuzz.DTYPES:
            raise typer.BadParameter(f"--dtype {d!r}: one of {', '.join(fuzz.DTYPES)}")
    ids = tuple(_kernel_ids(kernel)) if kernel else None
    seed = seed if seed is not None else _random.randrange(2**40)
    err_console.print(f"fuzz: seed {seed}, for {seconds:g} s" + (f" or {cases} problems" if cases else ""), highlight=False)
    last = [_time.monotonic()]

    def progress(s) -> None:  # a line every 15 s: readable in a log as on a terminal
        if _time.monotonic() - last[0] >= 15:
            last[0] = _time.monotonic()
            err_console.print(f"fuzz: {s.tried} problems, {len(s.wrong)} wrong, {s.seconds:.0f} s", highlight=False)

    meta = environment.describe(0)
    meta.update(kind="fuzz", budget_seconds=seconds, max_cases=cases, dtypes=list(dtype or fuzz.DTYPES), kernels=list(ids or ("auto", "every kernel")))
    summary = fuzz.run(seed, seconds, cases, tuple(dtype) if dtype else None, ids, on_wrong=show_wrong, on_progress=progress)
    t = Table(title=f"gemmlab fuzz, seed {seed}: {summary.tried} problems in {summary.seconds:.0f} s")
    for col in ("", "problems"):
        t.add_column(col, no_wrap=True)
    for name, counts in (("regime", summary.by_regime), ("dtype", summary.by_dtype)):
        for k, v in sorted(counts.items()):
            t.add_row(f"{name} {k}", str(v))
    console.print(t)
    console.print(f"kernels that ran: {len(summary.by_kernel)} (kernel and tile); the record lists each")
    path = results_path(out, meta, "fuzz")
    write_run(path, meta, [summary.record()])
    console.print(f"{summary.tried} problems, {len(summary.wrong)} wrong; record: {path}", highlight=False)
    if summary.crashed:
        err_console.print(f"the GPU failed with {len(summary.crashed['cases'])} problems in flight: {summary.crashed['error']}")
    short = summary.tried < min_cases
    if short:
        err_console.print(f"fuzz: {summary.tried} problems tried, fewer than --min-cases {min_cases}")
    if summary.wrong or summary.crashed or short:
        raise typer.Exit(1)


@app.command("sustained")
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
    from .bench import sustained
    from .bench.report import sustained_table
    from .bench.run import DTYPES, OUT_DTYPES, PRECISIONS

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


@app.command("peak")
def peak_cmd(out: Path = _out_option("peak")) -> None:
    """The GPU's theoretical and measured FP32/tensor/bandwidth ceilings, stored as a record."""
    _require_gpu()
    from .bench import environment, peak
    from .bench.report import peak_table
    from .bench.run import results_path, write_run

    meta = environment.describe(0)
    meta["kind"] = "peak"
    rec = peak.measure(0)
    path = results_path(out, meta, "peak")
    write_run(path, meta, [rec])
    console.print(peak_table({"meta": meta, "records": [rec]}), markup=False, highlight=False)
    console.print(f"record: {path}", highlight=False)


@app.command("report")
def report_cmd(
    results: Path = typer.Option(Path("results"), help="the records' root folder; by default the project's records (pass your results folder for your runs)"),
    write: Optional[list[Path]] = typer.Option(None, help="rewrite the marked sections of this file (repeatable: README.md, docs/ladder.md)"),
) -> None:
    """Markdown tables from the newest records of each GPU: printed, or written between markers."""
    from .bench import report

    sections = report.all_sections(results)
    if write is None:
        for name, body in sections.items():
            console.print(f"## {name}\n\n{body}\n", markup=False, highlight=False)
        return
    for path in write:
        try:
            names = report.update_present_sections(path, sections)
        except ValueError as exc:
            err_console.print(f"gemmlab: {exc}")
            raise typer.Exit(1)
        console.print(f"{path}: sections {', '.join(names)} regenerated")


@app.command("profile")
def profile_cmd(
    kernels: list[str] = typer.Argument(..., help="one or two kernel ids; 'cublas' is torch.mm in the other's dtype"),
    shape: str = typer.Option("2048", "--shape", "-s", help="MxNxK or N"),
    csv: Optional[Path] = typer.Option(None, help="keep ncu's CSV here"),
) -> None:
    """Nsight Compute metrics of one launch per kernel (ncu --clock-control none), and their delta."""
    from . import profile

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
    console.print(f"ncu CSV: {path}", highlight=False)


@app.command("sass")
def sass_cmd(
    kernel: str = typer.Argument(..., help="kernel id, optionally with a config: 'sgemm_11_warp_tile[BM=256]'"),
    arch: str = typer.Option("sm_90a", help="target to compile for (no GPU needed)"),
) -> None:
    """The instruction mix of a kernel's cubin (cuobjdump), and where the full listing is."""
    from . import sass
    from .bench.run import parse_kernel_config

    try:
        kid, cfg = parse_kernel_config(kernel)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    spec = registry.get(kid)
    if spec.device != "cuda":
        raise typer.BadParameter(f"{kid} is a CPU kernel: it has no SASS")
    ck = jit.compile_kernel(spec, cfg or spec.default_config(), arch, spec.dtypes[0] if spec.type_param else None)
    try:
        text = sass.disassemble(ck.cubin)
    except sass.ToolMissing as exc:
        err_console.print(f"gemmlab: {exc}")
        raise typer.Exit(2)
    listing = jit.cache_dir() / f"{kid}-{arch}-{ck.lowered_name[:60]}.sass"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(text)
    mix = sass.instruction_mix(text)
    t = Table(title=f"{ck.name_expression} on {arch}: {mix.total} instructions (static count)")
    t.add_column("instruction")
    t.add_column("count", justify="right")
    for op in sass.SHOWN:
        if op in sass.MEMORY_OPS:
            for (base, bits), n in sorted(mix.memory.items()):
                if base == op:
                    t.add_row(f"{op}.{bits}", str(n))
        elif mix.count(op):
            t.add_row(op, str(mix.count(op)))
    console.print(t)
    console.print(f"full listing: {listing}", highlight=False)


@app.command("plot")
def plot_cmd(
    results: Path = typer.Option(Path("results"), help="the records' root folder; by default the project's records (pass your results folder for your runs)"),
    out: Path = typer.Option(Path("docs/img"), help="folder for the PNGs"),
    shape: str = typer.Option("4096", help="the shape of the ladder bar chart"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernels of the size plot (default: 01, 03, 07, 10, 11)"),
) -> None:
    """PNGs from the newest records of each GPU: the ladder, TFLOP/s against size, a roofline.

    The ladder at one size, TFLOP/s against size, a roofline where the GPU has a peak record, and
    gemm() on a model's layers where it has a models sweep."""
    from .bench import plots, report

    runs = report.merged_runs(report.find_runs(results, "bench"))
    if not runs:
        err_console.print(f"gemmlab: no bench records under {results}")
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
        models = [p for p in report._newest_per_gpu(report.find_runs(results, "models")) if p.parent.name == slug]
        if models:  # gemmlab bench --sweep sweeps/models.toml
            written.append(out / f"{slug}-models.png")
            plots.models_bars(report.load_run(models[0]), written[-1])
        peak = report.newest_peak(results, slug)
        if peak is not None:
            written.append(out / f"{slug}-roofline.png")
            plots.roofline(run, peak, [(1024, 1024, 1024), (8192, 8192, 8192)], written[-1])
        for p in written:
            console.print(f"wrote {p}")


@cache_app.command("show")
def cache_show() -> None:
    """Where the cache is and what it holds."""
    d = jit.cache_dir()
    files = sorted(d.glob("*.bin")) if d.is_dir() else []
    size = sum(f.stat().st_size for f in files)
    console.print(f"cache: {d}  ({len(files)} entries, {size / 1024:.0f} KiB)")
    for f in files:
        console.print(f"  {f.name}  {f.stat().st_size} B", highlight=False)


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every cached cubin."""
    n = jit.clear_cache()
    console.print(f"removed {n} entries from {jit.cache_dir()}")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
