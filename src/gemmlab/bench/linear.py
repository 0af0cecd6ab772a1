"""gemmlab linear-bench: a Linear layer with its activation, activation(x @ w.t() + bias), as
gemmlab.linear computes it (the bias and the activation in the GEMM's epilogue) against torch: eager
(F.linear, then the activation: two kernels, cuBLAS's with the bias fused, then an elementwise
one) and the same function under torch.compile (its default mode, a graph compiled once per shape).
gemmlab.linear without the fusion -- the GEMM with its bias, then torch's activation, what it runs
when a gradient will be taken -- is timed beside them, so that a table shows what the fusion buys.

Each case is checked against float64 on its first rows before it is timed; every function runs
without autograd (torch.no_grad), in the same interleaved rounds with L2 flushed before each.
"""

from __future__ import annotations

from functools import partial
import tomllib
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..activations import ACTIVATIONS
from ..nn import linear
from ..ops import gemm
from . import environment
from .run import DTYPES, REPS, record_cases, results_path
from .timing import L2Flusher, interleaved, median

SWEEP_KEYS = {"tag", "dtype", "activation", "tokens", "weights", "reps", "warmup"}
CHECK_ROWS = 8  # rows of x whose results are compared with float64 before timing
WRONG_ABOVE = {"bf16": 2e-2, "fp16": 4e-3, "float32": 1e-4}  # the largest error (max over max |result|) timed


def read_linear_sweep(path: Path) -> dict:
    """A TOML file: weights = {"NxK" = "name", ...} (w is [N, K]: N outputs, K inputs), tokens =
    [M, ...], dtype (bf16, fp16 or float32), activation (a name of gemmlab.activations), and
    optionally tag, reps and warmup. Unknown keys and names are errors."""
    data = tomllib.loads(Path(path).read_text())
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a linear sweep takes {sorted(SWEEP_KEYS)}")
    dtype = data.get("dtype", "bf16")
    if dtype not in ("bf16", "fp16", "float32"):
        raise ValueError(f"{path}: dtype {dtype!r}: one of bf16, fp16, float32")
    activation = data.get("activation", "gelu")
    if activation not in ACTIVATIONS or activation is None:
        raise ValueError(f"{path}: activation {activation!r}: one of {[a for a in ACTIVATIONS if a]}")
    weights = []
    for shape, name in data.get("weights", {}).items():
        try:
            n, k = (int(v) for v in shape.split("x"))
        except ValueError:
            raise ValueError(f"{path}: weight {shape!r}: write it as NxK (outputs x inputs)") from None
        weights.append((name, n, k))
    if not weights or not data.get("tokens"):
        raise ValueError(f"{path}: needs weights and tokens")
    return dict(weights=weights, tokens=[int(t) for t in data["tokens"]], dtype=dtype, activation=activation,
                tag=data.get("tag", "linear"), reps=int(data.get("reps", REPS)), warmup=int(data.get("warmup", 2)))  # fmt: skip


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def linear_case(name: str, tokens: int, n: int, k: int, dtype_name: str, activation: str, reps: int, warmup: int,
                flusher, device: str = "cuda") -> dict:  # fmt: skip
    """One weight at one token count: errors against float64 on the first rows, then the median
    times of gemmlab.linear (fused), gemmlab unfused, torch eager and torch.compile."""
    dtype = DTYPES[dtype_name]
    act = ACTIVATIONS[activation]
    x = torch.randn(tokens, k, device=device).to(dtype)
    w = (torch.randn(n, k, device=device) / k**0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)

    def eager(x):
        return act(F.linear(x, w, b))

    compiled = torch.compile(eager, dynamic=False)
    fns: dict[str, Callable[[], object]] = {
        "ours": lambda: linear(x, w, b, activation),
        "unfused": lambda: act(gemm(x, w.t(), bias=b)),
        "eager": lambda: eager(x),
        "compiled": lambda: compiled(x),
    }
    with torch.no_grad():
        rows = x[:CHECK_ROWS]
        ref = act(rows.double() @ w.double().t() + b.double())
        errors = {key: _rel_err(fn()[:CHECK_ROWS], ref) for key, fn in fns.items()}  # (compiles torch's graph too)
        for key in ("ours", "unfused"):
            if not errors[key] <= WRONG_ABOVE[dtype_name]:  # (NaN too) a wrong result is not timed
                raise RuntimeError(f"{name} tokens={tokens} {dtype_name} {activation} ({key}): error {errors[key]:.2e} "
                                   f"against float64, over {WRONG_ABOVE[dtype_name]:.0e} (torch's: {errors['eager']:.2e}); not timed")  # fmt: skip
        times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher)
    ms = {key: median(v) for key, v in times.items()}
    flops = 2.0 * tokens * n * k
    return dict(
        name=name, tokens=tokens, N=n, K=k, dtype=dtype_name, activation=activation, reps=reps,
        ms=ms["ours"], unfused_ms=ms["unfused"], eager_ms=ms["eager"], compiled_ms=ms["compiled"],
        times_ms=times["ours"], eager_times_ms=times["eager"], compiled_times_ms=times["compiled"],
        tflops=flops / ms["ours"] / 1e9, vs_eager=ms["eager"] / ms["ours"], vs_compiled=ms["compiled"] / ms["ours"],
        errors=errors,
    )  # fmt: skip


def run_linear_bench(sweep: dict, out_root: Path, device_id: int = 0,
                     on_record: Callable[[dict], None] | None = None) -> tuple[Path, list[dict]]:  # fmt: skip
    """Every weight at every token count into one record file (tag-<time>.json under the GPU's
    folder), rewritten after each case, so an interrupted run keeps what it measured."""
    flusher = L2Flusher(device_id)
    meta = environment.describe(device_id)
    meta.update(kind="linear", dtype=sweep["dtype"], activation=sweep["activation"],
                baseline="torch eager: activation(F.linear(x, w, b)); torch.compile of the same")  # fmt: skip
    path = results_path(out_root, meta, sweep["tag"])
    cases = [partial(linear_case, name, tokens, n, k, sweep["dtype"], sweep["activation"], sweep["reps"], sweep["warmup"],
                     flusher, f"cuda:{device_id}") for name, n, k in sweep["weights"] for tokens in sweep["tokens"]]  # fmt: skip
    return path, record_cases(path, meta, cases, on_record)
