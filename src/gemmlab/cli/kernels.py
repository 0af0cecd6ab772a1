"""Commands about the kernels themselves: list them, compile them, check them against float64,
read their SASS, and the cubin cache."""

from __future__ import annotations

import json
import os
from typing import Optional

import typer
from rich.table import Table

from .. import jit, registry
from .common import (
    DEVICE_OPTION, PENDING_OPTION, WHOLE, _kernel_ids, _pick_device, _progress, _require_gpu, console, err_console,
    parse_shape,
)

def list_kernels() -> None:
    """Every registered kernel, in ladder order."""
    t = Table(title="gemmlab kernels")
    for col in ("id", "device", "step", "dtypes", "config", "idea"):
        t.add_column(col, **(WHOLE if col == "id" else dict(overflow="fold")))
    for k in registry.kernels(device="cuda") + registry.kernels(device="cpu"):
        dtypes = ",".join(str(d).removeprefix("torch.") for d in k.dtypes)
        t.add_row(k.id, k.device, str(k.step), dtypes, str(k.default_config().as_dict()), k.idea)
    console.print(t)


def compile_cmd(
    arch: Optional[str] = typer.Option(None, help="target, e.g. sm_90a; default: the current GPU's"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default all"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="compile in this many threads (0: one a CPU core)"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK or N (repeatable): only what gemm() launches for these problems, in each --dtype and --layout"),
    dtype: Optional[list[str]] = typer.Option(None, "--dtype", help="with --shape: float32, tf32, bf16, fp16, bf16-fp32out or fp16-fp32out (repeatable; default float32 and bf16)"),
    layout: Optional[list[str]] = typer.Option(None, "--layout", help="with --shape: nn, nt (x @ w.t(), as nn.Linear passes it), tn or tt (repeatable; default nn)"),
    activation: Optional[list[str]] = typer.Option(None, "--activation", help="also the fused-epilogue builds (bias= and activation=, as gemmlab.linear asks) for none (a bias alone), relu, gelu, gelu_tanh or silu (repeatable): of what --shape compiles, else of every config"),
) -> None:
    """Compile kernels for an arch (no GPU needed) and print the resource report.

    By default every config 'auto' can launch of every kernel (-k: of the kernels named), some
    minutes on one core. With --shape, only the kernels gemm() launches for those problems: run it
    before a program's first calls (gemmlab compile -s 2048 --dtype bf16 --layout nt) and they load
    their cubins from the cache (GEMMLAB_CACHE_DIR, else the user's cache folder) instead of
    compiling them, a second or more each."""
    if shape and kernel:
        raise typer.BadParameter("--shape compiles what gemm() chooses for the shapes; -k names kernels: give one of them")
    if (dtype or layout) and not shape:
        raise typer.BadParameter("--dtype and --layout say which problems of --shape to compile for")
    from ..activations import post_code

    acts = [None if a == "none" else a for a in (activation or [])]
    bad_act = [a for a in acts if a not in (None, "relu", "gelu", "gelu_tanh", "silu")]
    if bad_act:
        raise typer.BadParameter(f"--activation {bad_act[0]!r}: one of none, relu, gelu, gelu_tanh, silu")
    if arch is None:
        _require_gpu()
        arch = jit.device_arch(0)
    import torch

    from ..configs import configs_in_use

    if shape:
        work = _shape_jobs([parse_shape(s) for s in shape], dtype or ["float32", "bf16"], layout or ["nn"])
    else:
        work = [
            (spec, cfg, dt, od)
            for spec in (registry.get(kid) for kid in _kernel_ids(kernel))
            for cfg in configs_in_use(spec)
            for dt in (spec.dtypes if spec.type_param else (None,))
            for od in ((dt, torch.float32) if spec.type_param else (None,))  # 16-bit kernels: fp32 output too
            if spec.builds_for(cfg, dt, od)  # (tc07 with one staging buffer: 16-bit results only)
        ]
    # the fused builds of the kernels that have the epilogue (the others apply it with torch)
    work += [(*job, post_code(True, a)) for a in acts for job in work if job[0].epilogues]
    rows, failed = [], False
    with _progress() as prog:
        task = prog.add_task(f"compiling for {arch}", total=len(work))
        for (spec, *rest), ck in zip(work, jit.compile_many(work, arch, jobs or os.cpu_count())):
            prog.advance(task)
            if isinstance(ck, jit.CompileError):
                err_console.print(str(ck))
                failed = True
                continue
            bad = spec.spill_free and ck.usage.spills > 0
            # a fused build's spills are shown, not failed on: a few are known (tests/test_epilogue.py)
            failed |= bad and not rest[3:]
            rows.append((spec, ck, bad))
    if as_json:
        print(json.dumps([dict(kernel=s.id, config=c.name_expression, arch=arch, cached=c.from_cache,
                               seconds=round(sum(t for _, t in c.timings), 4), **c.usage.__dict__)
                          for s, c, _ in rows], indent=1))  # fmt: skip
    else:
        t = Table(title=f"resource report, {arch} (ptxas)")
        for col in ("kernel", "regs", "static smem", "dynamic smem", "stack", "spill st/ld", "cached", "s"):
            t.add_column(col, no_wrap=col == "kernel")
        for spec, ck, bad in rows:
            u = ck.usage
            spill = f"{u.spill_stores}/{u.spill_loads}" + (" [red]SPILLS[/red]" if bad else "")
            t.add_row(ck.name_expression, str(u.registers), f"{u.static_smem} B", f"{u.dynamic_smem} B", f"{u.stack_frame} B", spill,
                      "yes" if ck.from_cache else "no", f"{sum(x for _, x in ck.timings):.2f}")  # fmt: skip
        console.print(t)
    if failed:
        raise typer.Exit(1)


def _shape_jobs(shapes: list[tuple[int, int, int]], dtypes: list[str], layouts: list[str]) -> list[tuple]:
    """The (spec, config, types) jobs of what gemm() launches for each shape in each dtype name
    (bench.run.DTYPES) and layout, on this machine's GPU (its SM count steers the choice), else as
    on an H100 or H200 (132 SMs)."""
    import torch

    from ..api import compile_jobs
    from ..bench.run import DTYPES, LAYOUTS, OUT_DTYPES, PRECISIONS
    from ..problem import fresh_problem

    for name in dtypes:
        if name not in DTYPES:
            raise typer.BadParameter(f"--dtype {name!r}: one of {', '.join(DTYPES)}")
    for name in layouts:
        if name not in LAYOUTS:
            raise typer.BadParameter(f"--layout {name!r}: one of {', '.join(LAYOUTS)}")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cuda")
    problems = [fresh_problem(*s, DTYPES[d], layout=lay, precision=PRECISIONS.get(d, "fp32"), out_dtype=OUT_DTYPES.get(d),
                              device=device) for s in shapes for d in dtypes for lay in layouts]  # fmt: skip
    try:
        return compile_jobs(problems)
    except (ValueError, TypeError) as exc:  # no kernel serves a problem (an empty one, a dtype none takes)
        raise typer.BadParameter(str(exc)) from None


def check_cmd(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="kernel id (repeatable); default all"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", "-s", help="MxNxK (repeatable); default the check set"),
    random_shapes: int = typer.Option(3, "--random", help="random odd shapes added to the default set"),
    seed: Optional[int] = typer.Option(None, help="seed for the random shapes (default: fresh)"),
    device: str = DEVICE_OPTION,
    pending: bool = PENDING_OPTION,
    layout: str = typer.Option("nn", help="how A and B lie: nn (row-major), nt (B a transposed view: x @ w.t()), tn, tt"),
) -> None:
    """Verify kernels against float64: pass/fail and error per case; exit 1 on any failure."""
    device = _pick_device(device)
    from .. import check

    if layout not in check.LAYOUTS:
        raise typer.BadParameter(f"--layout {layout!r}: use one of {', '.join(check.LAYOUTS)}")

    ids = _kernel_ids(kernel, device, pending)
    shapes = [parse_shape(s) for s in shape] if shape else None
    import random as _random

    seed = seed if seed is not None else _random.randrange(2**31)
    if shapes is None:
        shapes = check.default_shapes(device, random_shapes, seed)
    total = len(check.cases(ids, shapes))
    t = Table(title=f"gemmlab check on {device}{'' if layout == 'nn' else f', layout {layout}'} (random shapes seed {seed})")
    for col in ("kernel", "dtype", "M x N x K", "variant", "rel_fro", "max_scaled", "result"):
        t.add_column(col, **(WHOLE if col in ("kernel", "M x N x K") else {}))
    results = []
    with _progress() as prog:
        task = prog.add_task("checking", total=total)

        def on_case(r):
            results.append(r)
            prog.advance(task)

        check.run_check(ids, shapes, progress=on_case, device=device, layout=layout)
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


def sass_cmd(
    kernel: str = typer.Argument(..., help="kernel id, optionally with a config: 'sgemm_11_warp_tile[BM=256]'"),
    arch: str = typer.Option("sm_90a", help="target to compile for (no GPU needed)"),
) -> None:
    """The instruction mix of a kernel's cubin (cuobjdump), and where the full listing is."""
    from .. import sass
    from ..bench.run import parse_kernel_config

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


def cache_show() -> None:
    """Where the cache is and what it holds."""
    d = jit.cache_dir()
    files = sorted(d.glob("*.bin")) if d.is_dir() else []
    size = sum(f.stat().st_size for f in files)
    console.print(f"cache: {d}  ({len(files)} entries, {size / 1024:.0f} KiB)")
    for f in files:
        console.print(f"  {f.name}  {f.stat().st_size} B", highlight=False)


def cache_clear() -> None:
    """Delete every cached cubin."""
    n = jit.clear_cache()
    console.print(f"removed {n} entries from {jit.cache_dir()}")
