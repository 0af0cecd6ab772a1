"""gemmlab bench: time kernels and cuBLAS on the same inputs in one process; write JSON records.

Every record carries the problem, the kernel and its config, all timings, the median, TFLOP/s,
the cuBLAS medians measured in the same rounds and the ratio, the errors of both against
float64, and nvidia-smi's SM clock read while the queue is busy (a sample between launches, above
the clock a kernel at full tensor load runs at: docs/notes/clock-of-a-single-launch.md).
The run's header carries the GPU, driver, versions and commit. The file is rewritten after every
case, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial
import json
import tomllib
import os
from pathlib import Path
from typing import Callable

import torch

from .. import api, jit, registry
from ..api import columns_problem, few_rows_as_columns, gemm, prepare
from ..configs import select
from ..problem import problem_from_tensors
from ..reference import check_result
from ..userdirs import user_data_dir
from ..specs.base import stated_constraint
from . import environment
from .timing import HostGate, L2Flusher, interleaved, median

SQUARES = (512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192)  # seeds 001-003, and two smaller steps
ODD = (1022, 2044, 3135, 4088, 6132, 8176)  # seed 000's non-multiples of 32
# few output tiles and a tall K (weight gradients: dW = X^T dY), where one wave leaves most SMs idle
TALL_K = ((256, 256, 65536), (1024, 1024, 16384))
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = tuple(
    sorted({(n, n, n) for n in SQUARES + ODD} | {(2048, 2048, 1024)} | set(TALL_K), key=lambda s: (s[0] * s[1] * s[2], s))
)  # plus seed 001's 2048 x 2048 x 1024
CUBLAS_BACKENDS = ("cublas", "cublaslt")
REPS = 20  # event-timed runs of each side a case, the median reported


@dataclass
class BenchRecord:
    kernel: str
    config: dict
    M: int
    N: int
    K: int
    dtype: str
    alpha: float
    beta: float
    times_ms: list[float]
    median_ms: float
    tflops: float
    cublas_times_ms: dict[str, list[float]]
    cublas_median_ms: dict[str, float]
    cublas_backend: str  # the faster of the two, which the ratio uses
    cublas_tflops: float
    baseline: str  # what ratio compares against, in words
    baseline_tflops: float
    ratio: float  # cuBLAS median time / kernel median time (> 1: faster than cuBLAS)
    error: dict
    cublas_error: dict
    resources: dict
    clocks_start: dict
    clocks_mid: dict
    reps: int
    warmup: int
    extra: dict = field(default_factory=dict)


def tflops(M: int, N: int, K: int, ms: float) -> float:
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def _cublas(a, b, out, backend: str):
    def pick():
        torch.backends.cuda.preferred_blas_library(backend)

    # 16-bit inputs with an fp32 result: cuBLAS writes its fp32 accumulators too (mm's out_dtype)
    out_dtype = (out.dtype,) if out.dtype != a.dtype else ()

    def run():
        torch.mm(a, b, *out_dtype, out=out)

    return pick, run


AUTO = "auto"  # as a bench kernel: whatever gemm() chooses for each case (kernel and config)


def parse_kernel_config(text: str):
    """'sgemm_11_warp_tile' or 'sgemm_11_warp_tile[BK=16,WM=32]' -> (id, GemmConfig or None);
    'auto' -> ('auto', None)."""
    if text == AUTO:
        return text, None
    if "[" not in text:
        registry.get(text)
        return text, None
    kid, _, rest = text.partition("[")
    if not rest.endswith("]"):
        raise ValueError(f"{text!r}: expected KERNEL[NAME=VALUE,...]")
    overrides = {}
    for item in filter(None, rest[:-1].split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{text!r}: {item!r} is not NAME=VALUE")
        overrides[name.strip()] = int(value)
    return kid, registry.get(kid).config(**overrides)


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "tf32": torch.float32, "3xtf32": torch.float32,
          "bf16-fp32out": torch.bfloat16, "fp16-fp32out": torch.float16}  # fmt: skip
# --dtype tf32: float32 tensors multiplied as TF32 (precision="tf32"), against cuBLAS with TF32 on;
# --dtype 3xtf32: float32 at fp32's accuracy on the tensor cores (precision="3xtf32", tc11: the
# pre-pass inside the timed call), against cuBLAS SGEMM (TF32 off)
PRECISIONS = {"tf32": "tf32", "3xtf32": "3xtf32"}
# --dtype bf16-fp32out / fp16-fp32out: 16-bit inputs, the fp32 accumulators written as they are
# (gemm's out_dtype=torch.float32), against torch.mm(a, b, torch.float32)
OUT_DTYPES = {"bf16-fp32out": torch.float32, "fp16-fp32out": torch.float32}


# --layout: how A and B lie in memory -- nn both row-major; nt B stored transposed (x @ w.t() of a
# [N, K] weight), tn A, tt both: column-major views, passed as they are to gemm() and to torch.mm
LAYOUTS = ("nn", "nt", "tn", "tt")


def dtype_name(dtype: torch.dtype, precision: str = "fp32", out_dtype: torch.dtype | None = None,
               layout: str = "nn") -> str:  # fmt: skip
    """The dtype a record carries (reports make one table per name), with the layout unless nn."""
    if precision in ("tf32", "3xtf32"):
        name = precision
    else:
        name = str(dtype).removeprefix("torch.")
        name = f"{name}-fp32out" if out_dtype not in (None, dtype) else name
    return name if layout == "nn" else f"{name}-{layout}"


def operands(M: int, N: int, K: int, dtype: torch.dtype, dev: str, layout: str = "nn") -> tuple:
    """Fresh random a [M, K] and b [K, N] in (-1, 1), each a column-major view where the layout
    says so (the transpose of a contiguous [K, M] or [N, K])."""
    def rand(rows, cols, trans):
        t = (torch.rand((cols, rows) if trans else (rows, cols), device=dev) * 2 - 1).to(dtype)
        return t.t() if trans else t

    return rand(M, K, layout[0] == "t"), rand(K, N, layout[1] == "t")


def bench_case(kernel_id: str, M: int, N: int, K: int, reps: int, warmup: int, flusher, device_id: int, config=None,
               dtype: torch.dtype = torch.float32, precision: str = "fp32",
               out_dtype: torch.dtype | None = None, gate: HostGate | None = None, layout: str = "nn") -> BenchRecord:  # fmt: skip
    dev = f"cuda:{device_id}"
    a, b = operands(M, N, K, dtype, dev, layout)
    result = out_dtype or dtype
    out = torch.full((M, N), float("nan"), device=dev, dtype=result)
    ref_out = {be: torch.full((M, N), float("nan"), device=dev, dtype=result) for be in CUBLAS_BACKENDS}
    problem = problem_from_tensors(a, b, None, out, precision=precision)
    planned = problem  # the problem the kernel is launched for
    if kernel_id == AUTO and config is None and few_rows_as_columns(problem):
        # gemm() computes it as D^T = w x^T (api._few_rows_as_columns): timed as gemm() runs it, copies
        # of x^T and D^T included, and named by the kernel of D^T
        planned = columns_problem(problem)
        spec, cfg = select(planned)
        launch_kernel = partial(gemm, a, b, out=out)
    else:
        spec, cfg = select(problem, kernel_id)
        cfg = config or cfg
        launch_kernel = prepare(a, b, kernel=spec.id, out=out, config=cfg, precision=precision)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"  # cuBLAS in the same arithmetic

    # Correct first: the kernel's result and cuBLAS's against float64, before any timing.
    launch_kernel()
    cublas = {be: _cublas(a, b, ref_out[be], be) for be in CUBLAS_BACKENDS}
    for be, (pick, run) in cublas.items():
        pick()
        run()
    torch.cuda.synchronize()
    err = check_result(out, a, b, precision=precision)
    if not err.passed:
        raise RuntimeError(f"{kernel_id} M={M} N={N} K={K}: wrong result before timing ({err.summary()})")
    cublas_err = check_result(ref_out[CUBLAS_BACKENDS[0]], a, b, precision=precision)
    # Kernels that sum k in order with one FMA per step round exactly as a cuBLAS SGEMM that does
    # the same; record it, since a bitwise match is stronger evidence than a tolerance.
    bitwise = {be: bool(torch.equal(out, ref_out[be])) for be in CUBLAS_BACKENDS}

    fns = {"kernel": launch_kernel} | {be: run for be, (pick, run) in cublas.items()}
    before = {be: pick for be, (pick, run) in cublas.items()}
    clocks_start = environment.clocks(device_id)
    mid: dict = {}
    times = interleaved(fns, reps, warmup, flusher, before, mid_run=lambda: mid.update(environment.clocks(device_id)),
                        gate=gate)
    if gate is not None and gate.timed_out():
        raise RuntimeError(f"{kernel_id} M={M} N={N} K={K}: the host took over {gate.limit_s} s to queue a round of launches")
    torch.backends.cuda.preferred_blas_library("default")
    torch.backends.cuda.matmul.allow_tf32 = False

    med = median(times["kernel"])
    cub_med = {be: median(times[be]) for be in CUBLAS_BACKENDS}
    best = min(cub_med, key=cub_med.get)
    loaded = jit.load_kernel(spec, cfg, device_id, *((dtype, result) if spec.type_param else (None, None)))
    return BenchRecord(
        kernel=spec.id,  # for 'auto', the kernel it chose (the request stays in extra)
        config=cfg.as_dict(),
        M=M,
        N=N,
        K=K,
        dtype=dtype_name(dtype, precision, out_dtype, layout),
        alpha=1.0,
        beta=0.0,
        times_ms=times["kernel"],
        median_ms=med,
        tflops=tflops(M, N, K, med),
        cublas_times_ms={be: times[be] for be in CUBLAS_BACKENDS},
        cublas_median_ms=cub_med,
        cublas_backend=best,
        cublas_tflops=tflops(M, N, K, cub_med[best]),
        baseline=f"cuBLAS (torch.mm{', fp32 out' if result != dtype else ''}, {best} backend{', TF32' if precision == 'tf32' else ''})",
        baseline_tflops=tflops(M, N, K, cub_med[best]),
        ratio=cub_med[best] / med,
        error=asdict(err),
        cublas_error=asdict(cublas_err),
        resources=asdict(loaded.driver_usage(device_id)),
        clocks_start=clocks_start,
        clocks_mid=mid,
        reps=reps,
        warmup=warmup,
        # the grid launched: tc10's runs along K are its second extent, chosen at launch (specs.skinny.skinny_runs)
        extra=dict(bitwise_equal_cublas=bitwise, grid=list(api._make_plan(spec, cfg, planned).grid),
                   **({"as_columns": True} if planned is not problem else {})),  # fmt: skip
    )


def user_results_dir() -> Path:
    """Where the commands write records unless given --out: $GEMMLAB_RESULTS, else the user's data
    folder (~/.local/share/gemmlab/results on Linux). Never the repository's results/, the
    project's records that the README's tables are generated from."""
    env = os.environ.get("GEMMLAB_RESULTS")
    if env:
        return Path(env)
    return user_data_dir() / "results"


def results_path(root: Path, meta: dict, tag: str = "bench") -> Path:
    stamp = meta["time"].replace(":", "").replace("-", "").replace("+0000", "Z")
    if meta.get("kind") == "bench-cpu":
        tag = "bench-cpu"
    return root / meta["gpu_slug"] / f"{tag}-{stamp}.json"


def write_run(path: Path, meta: dict, records: list[dict]) -> None:
    """Write atomically, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    os.replace(tmp, path)


def record_cases(path: Path, meta: dict, cases, on_record=None) -> list[dict]:
    """Run each case (a function returning its record) in turn, rewriting the record file after
    each, so an interrupted run keeps what it measured; on_record sees each record as it comes.
    The caching allocator's blocks go back between cases (the next case's sizes differ)."""
    import torch

    records: list[dict] = []
    for case in cases:
        records.append(case())
        write_run(path, meta, records)
        if on_record:
            on_record(records[-1])
        torch.cuda.empty_cache()
    return records


def run_bench(
    kernels: list[str],
    shapes: list[tuple[int, int, int]],
    out_root: Path,
    reps: int = REPS,
    warmup: int = 2,
    device_id: int = 0,
    on_record: Callable[[dict], None] | None = None,
    on_start: Callable[[str, tuple], None] | None = None,
    tag: str = "bench",
    resume: Path | None = None,
    dtype: torch.dtype = torch.float32,
    precision: str = "fp32",
    out_dtype: torch.dtype | None = None,
    layout: str = "nn",
    names: dict[str, str] | None = None,
) -> tuple[Path, list[dict]]:
    """kernels: ids, or 'id[NAME=VALUE,...]' for another config of a kernel (tuning; use another
    tag then, so such runs stay out of the reports). resume: a results file of an interrupted
    run: its records are kept, the cases it has are skipped, new ones are appended to it. names:
    'NxK' -> a name for the weight of that N x K (a sweep's model layers), kept in the header."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32: cuBLAS SGEMM, not TF32
    torch.backends.cudnn.allow_tf32 = False
    parsed = [(k, *parse_kernel_config(k)) for k in kernels]
    if resume is not None:
        if Path(resume).name.endswith(".gz"):
            raise ValueError(f"{resume} is stored compressed; gunzip it to resume the run in place")
        old = json.loads(Path(resume).read_text())
        meta, records, path = old["meta"], old["records"], Path(resume)
        meta.setdefault("resumed", []).append(environment.describe(device_id)["time"])
        meta.setdefault("failures", [])
    else:
        meta = environment.describe(device_id)
        meta["kind"] = "bench"
        meta["gate"] = "round"  # each round of timed launches queued behind a HostGate (bench.timing)
        meta["failures"] = []
        if names:
            meta["names"] = dict(names)
        records = []
        path = results_path(out_root, meta, tag)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    dname = dtype_name(dtype, precision, out_dtype, layout)
    done = {(r["extra"].get("request", r["kernel"]), r["M"], r["N"], r["K"]) for r in records if r["dtype"] == dname}
    flusher, gate = L2Flusher(device_id), HostGate(device_id)
    for M, N, K in shapes:
        for request, kernel_id, config in parsed:
            if (request, M, N, K) in done:
                if on_record:
                    on_record(next(r for r in records if (r["extra"].get("request", r["kernel"]), r["M"], r["N"], r["K"], r["dtype"]) == (request, M, N, K, dname)))
                continue
            if on_start:
                on_start(kernel_id, (M, N, K))
            try:
                rec = asdict(bench_case(kernel_id, M, N, K, reps, warmup, flusher, device_id, config, dtype, precision, out_dtype,
                                           gate, layout))
                rec["extra"]["request"] = request
            except (RuntimeError, ValueError) as exc:  # a wrong result is recorded, not timed
                declined = isinstance(exc, ValueError) and stated_constraint(str(exc))
                meta.setdefault("declined" if declined else "failures", []).append(
                    dict(kernel=kernel_id, M=M, N=N, K=K, error=str(exc)))
                write_run(path, meta, records)
                torch.cuda.synchronize()
                continue
            records.append(rec)
            write_run(path, meta, records)
            if on_record:
                on_record(rec)
            torch.cuda.empty_cache()
    meta["clocks_end"] = environment.clocks(device_id)
    write_run(path, meta, records)
    return path, records


SWEEP_KEYS = {"kernels", "shapes", "dtype", "layout", "tag", "reps", "warmup", "tokens", "weights"}


def read_sweep(path: Path) -> dict:
    """A TOML sweep file: kernels = [...] (ids, 'id[NAME=VALUE,...]' or 'auto'), shapes = ["4096",
    "2048x2048x1024"], and optionally dtype and layout (as --dtype and --layout), tag (the records'
    file prefix), reps and warmup. A model's layers may be given instead of, or beside, shapes:
    tokens = [M, ...] and a table weights = {"NxK" = "name"} (the weight of x @ w.t(), [N, K]) make
    one M x N x K shape for every M and weight; the names go into the records' header. Returns the
    parsed values; unknown keys, dtypes or layouts are errors."""
    data = tomllib.loads(Path(path).read_text())
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a sweep takes {sorted(SWEEP_KEYS)}")
    dtype, layout = data.get("dtype", "float32"), data.get("layout", "nn")
    if dtype not in DTYPES:
        raise ValueError(f"{path}: dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if layout not in LAYOUTS:
        raise ValueError(f"{path}: layout {layout!r}: one of {', '.join(LAYOUTS)}")

    def dims(text: str, n: int) -> tuple[int, ...]:
        try:
            d = [int(x) for x in str(text).lower().split("x")]
        except ValueError:
            d = []
        d = d * 3 if n == 3 and len(d) == 1 else d
        if len(d) != n or min(d) < 1:
            raise ValueError(f"{path}: {text!r}: shapes are 'N' or 'MxNxK', weights 'NxK', positive integers")
        return tuple(d)

    shapes = [dims(s, 3) for s in data.get("shapes", [])]
    weights = {dims(w, 2): str(name) for w, name in data.get("weights", {}).items()}
    tokens = data.get("tokens", [])
    if bool(weights) != bool(tokens) or not all(isinstance(m, int) and m > 0 for m in tokens):
        raise ValueError(f"{path}: tokens (positive integers) and weights go together")
    shapes += [(m, n, k) for m in tokens for (n, k) in weights]
    return dict(kernels=list(data.get("kernels", [])), shapes=shapes, dtype=dtype, layout=layout,
                tag=data.get("tag"), reps=data.get("reps"), warmup=data.get("warmup"),
                names={f"{n}x{k}": name for (n, k), name in weights.items()})


def sweep(kernels, shapes, case, path: Path, meta: dict, on_start=None, on_record=None, after=None) -> list[dict]:
    """Run case(kernel, M, N, K) -> record for every shape and kernel, rewriting the results file
    after each one (an interrupted sweep keeps what it measured)."""
    records: list[dict] = []
    for M, N, K in shapes:
        for k in kernels:
            if on_start:
                on_start(k, (M, N, K))
            rec = case(k, M, N, K)
            records.append(rec)
            write_run(path, meta, records)
            if on_record:
                on_record(rec)
            if after:
                after()
    return records
