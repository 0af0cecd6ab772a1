"""Commands over the convolution kernels: conv-fuzz (conv-bench, their benchmark, lives with the
measurements in lab)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .common import (
    _out_option, _require_gpu, console, err_console, fuzz_exit, fuzz_progress, fuzz_replayed, fuzz_wrong_printer,
)


def conv_fuzz_cmd(
    seconds: float = typer.Option(60.0, help="stop drawing convolutions after this many seconds"),
    cases: Optional[int] = typer.Option(None, help="stop after this many convolutions have run"),
    min_cases: int = typer.Option(0, help="fail (exit 1) if fewer convolutions than this ran"),
    seed: Optional[int] = typer.Option(None, help="case i has seed SEED + i (default: a fresh SEED, printed)"),
    algorithm: Optional[list[str]] = typer.Option(None, "--algorithm", help="only these (repeatable): tma, implicit, gather, im2col, depthwise; a case one of them refuses falls back to the next asked for"),
    dtype: Optional[list[str]] = typer.Option(None, "--dtype", help="only these (repeatable): bf16, fp16, fp32 (im2col only)"),
    replay: Optional[str] = typer.Option(None, help="run one case again: the JSON printed after 'replay:'"),
    repeats: int = typer.Option(1, help="with --replay: how many times"),
    out: Path = _out_option("conv-fuzz"),
) -> None:
    """Random convolutions in conv02's, conv03's, conv04's, conv05's and im2col's risky regimes against float64 and cuDNN; exit 1 on any wrong result.

    Every case comes from one seed: its geometry (tile edges, short reductions, several tiles a
    persistent block, prime images, stride, dilation, padding, conv06's filter gradients; for gather few input channels and a
    CNN's stem; for depthwise one filter a channel), memory formats, dtype, algorithm, bias, activation, a NaN or Inf now and then, and
    for a quarter of the tma, implicit and gather cases (every one in the filter-gradient regime) a backward pass (dx, dw, db checked too). A wrong case is printed with its conv2d() call and a
    --replay line; the record (conv-fuzz-<time>.json) counts the cases by regime, dtype, algorithm,
    kernel tile and gradients, and the refusals apart."""
    import random as _random

    from .. import fuzz_conv

    for a in algorithm or ():
        if a not in fuzz_conv.ALGORITHM_WEIGHTS:
            raise typer.BadParameter(f"--algorithm {a!r}: one of {', '.join(fuzz_conv.ALGORITHM_WEIGHTS)}")
    for d in dtype or ():
        if d not in fuzz_conv.DTYPES:
            raise typer.BadParameter(f"--dtype {d!r}: one of {', '.join(fuzz_conv.DTYPES)}")
    algorithms = tuple(algorithm) if algorithm else None
    dtypes = tuple(dtype) if dtype else None
    if dtypes == ("fp32",) and algorithms is not None and "im2col" not in algorithms:
        raise typer.BadParameter("--dtype fp32 runs on im2col only: add --algorithm im2col")
    _require_gpu()
    from ..bench import environment
    from ..bench.run import results_path, write_run

    if replay is not None:
        outcomes = fuzz_conv.replay(fuzz_conv.ConvCase.from_json(replay), repeats, algorithms)
        fuzz_replayed(outcomes, "conv-fuzz", "cuDNN", lambda o: o.cudnn)
    seed = seed if seed is not None else _random.randrange(2**40)
    err_console.print(f"conv-fuzz: seed {seed}, for {seconds:g} s" + (f" or {cases} convolutions" if cases else "")
                      + f"; epilogues with {fuzz_conv.run_activation(seed) or 'a bias alone'}: the builds the cases "
                      "launch compile first, side by side (not counted in the seconds)", highlight=False)  # fmt: skip
    meta = environment.describe(0)
    meta.update(kind="conv-fuzz", budget_seconds=seconds, max_cases=cases, dtypes=list(dtypes or fuzz_conv.DTYPES),
                algorithms=list(algorithms or fuzz_conv.ALGORITHM_WEIGHTS))  # fmt: skip
    summary = fuzz_conv.run(seed, seconds, cases, dtypes, algorithms, on_wrong=fuzz_wrong_printer("conv-fuzz"),
                             on_progress=fuzz_progress("conv-fuzz", "convolutions"))  # fmt: skip
    t = Table(title=f"gemmlab conv-fuzz, seed {seed}: {summary.tried} convolutions in {summary.seconds:.0f} s")
    for col in ("", "convolutions"):
        t.add_column(col, no_wrap=True)
    for name, counts in (("regime", summary.by_regime), ("dtype", summary.by_dtype), ("algorithm", summary.by_algorithm),
                         ("kernel", summary.by_kernel), ("walk", summary.by_walk), ("gradients", summary.by_grad),
                         ("grouped", summary.by_groups), ("refused", summary.refused)):  # fmt: skip
        for k, v in sorted(counts.items()):
            t.add_row(f"{name} {k}", str(v))
    console.print(t)
    path = results_path(out, meta, "conv-fuzz")
    write_run(path, meta, [summary.record()])
    grads = sum(summary.by_grad.values())
    console.print(f"{summary.tried} convolutions ({grads} with gradients), {len(summary.wrong)} wrong, "
                  f"{sum(summary.refused.values())} refused by the algorithm drawn; record: {path}", highlight=False)  # fmt: skip
    fuzz_exit(summary, min_cases, "conv-fuzz", "convolutions")
