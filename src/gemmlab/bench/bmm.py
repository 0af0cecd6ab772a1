"""gemmlab bmm-bench: a batch of products, a [B, M, K] @ b [B, K, N] (contiguous, fresh random),
as gemmlab.bmm computes it in one launch (one_launch=True: tc07's batched build, whose tile loop
walks every product's tiles) and as per-matrix launches (one_launch=False: gemm() once a matrix),
against torch.bmm (cuBLAS's batched GEMM) on the same inputs.

Each case is checked against torch.bmm of float64 copies before it is timed (the relative Frobenius
error, against the bf16/fp16 bound of gemmlab.reference); a wrong result raises and is not timed.
The three run without autograd, in the same interleaved rounds with L2 flushed before each, each
round queued behind a gate (bench.timing.HostGate), so the times are the GPU's: host time a call
is gemmlab overhead's to measure (gemmlab overhead), not this benchmark's.
With registers=True (bmm-bench --register-stores) the one-launch path is timed a second time in the
same rounds with its staged TMA-store epilogue off (batched_tc07.staged_stores(False): the build that
writes D from registers), as `registers`: before and after the staged epilogue, in one process.
"""

from __future__ import annotations

from functools import partial
import tomllib
from pathlib import Path
from typing import Callable

import torch

from .. import batched_tc07
from ..batched import bmm
from ..reference import TOLERANCES
from . import environment
from .run import DTYPES, REPS, record_cases, results_path
from .timing import HostGate, L2Flusher, interleaved, median

SWEEP_KEYS = {"tag", "dtypes", "batches", "squares", "shapes", "reps", "warmup"}
SHAPE_KEYS = {"B", "M", "N", "K"}
BMM_DTYPES = ("bf16", "fp16")  # what the one-launch path takes
SIDES = ("one_launch", "per_matrix", "torch")  # the three timed, as records name them
REGISTERS = "registers"  # the one-launch path with register stores (registers=True), as records name it


def read_bmm_sweep(path: Path) -> dict:
    """A TOML file: batches = [B, ...] crossed with squares = [M = N = K, ...], and shapes = [{B, M,
    N, K}, ...] beside them; dtypes (bf16, fp16); optionally tag, reps and warmup. Unknown keys,
    dtypes and sizes below 1 are errors. The cases come out as (B, M, N, K), the grid first."""
    data = tomllib.loads(Path(path).read_text())
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a bmm sweep takes {sorted(SWEEP_KEYS)}")
    dtypes = list(data.get("dtypes", ["bf16"]))
    wrong = [d for d in dtypes if d not in BMM_DTYPES]
    if wrong or not dtypes:
        raise ValueError(f"{path}: dtypes {wrong or dtypes}: among {', '.join(BMM_DTYPES)} (the one-launch path's)")
    cases = [(int(b), int(n), int(n), int(n)) for b in data.get("batches", []) for n in data.get("squares", [])]
    for i, raw in enumerate(data.get("shapes", [])):
        if set(raw) != SHAPE_KEYS:
            raise ValueError(f"{path}: shapes[{i}] has keys {sorted(raw)}; write it as {{ B = .., M = .., N = .., K = .. }}")
        cases.append((int(raw["B"]), int(raw["M"]), int(raw["N"]), int(raw["K"])))
    if not cases:
        raise ValueError(f"{path}: needs batches and squares, or shapes")
    small = [c for c in cases if min(c) < 1]
    if small:
        raise ValueError(f"{path}: case B={small[0][0]} M={small[0][1]} N={small[0][2]} K={small[0][3]}: every size at least 1")
    return dict(cases=cases, dtypes=dtypes, tag=data.get("tag", "bmm"), reps=int(data.get("reps", REPS)),
                warmup=int(data.get("warmup", 2)))  # fmt: skip


def rel_fro(d: torch.Tensor, ref: torch.Tensor) -> float:
    """||D - D_ref||_F / ||D_ref||_F, D_ref in float64."""
    return float(torch.linalg.vector_norm(d.double() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))


def refuse_wrong(case: str, errors: dict[str, float], bound: float) -> None:
    """Raise where either gemmlab path's error (SIDES' first two) is over the bound or NaN: a wrong
    result is never timed."""
    for key in [*SIDES[:2], *([REGISTERS] if REGISTERS in errors else [])]:
        if not errors[key] <= bound:  # (NaN too)
            raise RuntimeError(f"{case} ({key}): relative Frobenius error {errors[key]:.2e} against torch.bmm in "
                               f"float64, over {bound:.0e} (torch.bmm's: {errors['torch']:.2e}); not timed")  # fmt: skip


def _register_stores(a, b):
    with batched_tc07.staged_stores(False):
        return bmm(a, b, one_launch=True)


def bmm_case(batch: int, M: int, N: int, K: int, dtype_name: str, reps: int, warmup: int, flusher,
             device: str = "cuda", gate: HostGate | None = None, registers: bool = False) -> dict:  # fmt: skip
    """One batch of products: the errors of all three against torch.bmm in float64, then the median
    times of gemmlab.bmm in one launch, gemmlab.bmm per matrix and torch.bmm. The record's ms,
    tflops and vs_torch are the one-launch path's; per_matrix_* and torch_* the others'."""
    if torch.device(device).type != "cuda":
        raise ValueError(f"bmm-bench times CUDA kernels against torch.bmm; device {device!r} is not a CUDA device")
    dtype = DTYPES[dtype_name]
    a = torch.randn(batch, M, K, device=device).to(dtype)  # [B, M, K]
    b = torch.randn(batch, K, N, device=device).to(dtype)  # [B, K, N]
    fns: dict[str, Callable[[], object]] = {
        "one_launch": lambda: bmm(a, b, one_launch=True),
        "per_matrix": lambda: bmm(a, b, one_launch=False),
        "torch": lambda: torch.bmm(a, b),
    }
    if registers:
        fns[REGISTERS] = lambda: _register_stores(a, b)
    with torch.no_grad():
        ref = torch.bmm(a.double(), b.double())  # [B, M, N] float64, of the same rounded inputs
        errors = {key: rel_fro(fn(), ref) for key, fn in fns.items()}  # (compiles gemmlab's builds too)
        del ref
        refuse_wrong(f"B={batch} M={M} N={N} K={K} {dtype_name}", errors, TOLERANCES[dtype].rel_fro)
        times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher, gate=gate)
        if gate is not None and gate.timed_out():
            raise RuntimeError(f"B={batch} M={M} N={N} K={K}: the host took over {gate.limit_s} s to queue a round of launches")
    ms = {key: median(v) for key, v in times.items()}
    flops = 2.0 * batch * M * N * K
    extra = {}
    if registers:
        extra = dict(registers_ms=ms[REGISTERS], registers_times_ms=times[REGISTERS],
                     registers_tflops=flops / ms[REGISTERS] / 1e9, registers_vs_torch=ms["torch"] / ms[REGISTERS])  # fmt: skip
    return extra | dict(
        B=batch, M=M, N=N, K=K, dtype=dtype_name, reps=reps,
        ms=ms["one_launch"], per_matrix_ms=ms["per_matrix"], torch_ms=ms["torch"],
        times_ms=times["one_launch"], per_matrix_times_ms=times["per_matrix"], torch_times_ms=times["torch"],
        tflops=flops / ms["one_launch"] / 1e9, per_matrix_tflops=flops / ms["per_matrix"] / 1e9,
        torch_tflops=flops / ms["torch"] / 1e9,
        vs_torch=ms["torch"] / ms["one_launch"], per_matrix_vs_torch=ms["torch"] / ms["per_matrix"],
        errors=errors,
    )  # fmt: skip


def run_bmm_bench(sweep: dict, out_root: Path, device_id: int = 0, on_record: Callable[[dict], None] | None = None,
                  registers: bool = False) -> list[tuple[Path, list[dict]]]:  # fmt: skip
    """Every dtype of the sweep into its own record file (tag-<time>.json under the GPU's folder),
    rewritten after each case, so an interrupted run keeps what it measured."""
    if not torch.cuda.is_available():
        raise RuntimeError("bmm-bench times gemmlab.bmm against torch.bmm on a CUDA GPU, and none is visible here")
    flusher, gate = L2Flusher(device_id), HostGate(device_id)
    done = []
    for dtype_name in sweep["dtypes"]:
        meta = environment.describe(device_id)
        meta.update(kind="bmm", dtype=dtype_name,
                    baseline="torch.bmm(a, b) on the same contiguous [B, M, K] @ [B, K, N] inputs",
                    gate="round")  # each round of timed launches queued behind a HostGate (bench.timing)  # fmt: skip
        path = results_path(out_root, meta, sweep["tag"])
        cases = [partial(bmm_case, batch, M, N, K, dtype_name, sweep["reps"], sweep["warmup"], flusher,
                         f"cuda:{device_id}", gate, registers) for batch, M, N, K in sweep["cases"]]  # fmt: skip
        done.append((path, record_cases(path, meta, cases, on_record)))
    return done
