"""The harness of a one-off probe: time gemmlab kernels (variants a probe registers included) beside
cuBLAS in the same rounds, each result checked against float64 first (output poisoned with NaN), and
write one record with the device, clocks under load and versions to $OUT/probe-<name>-<time>.json.
A probe that tests one guess is a short script calling run() (lab/README.md); lab/cublas_kernels.py
uses its shape_of."""
import datetime as dt
import json
import os
import statistics

import torch

from gemmlab import api
from gemmlab.bench import environment
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved


def shape_of(text: str) -> tuple[int, int, int]:
    """'4096' -> 4096^3; 'MxNxK' as given."""
    return tuple(int(x) for x in text.split("x")) if "x" in text else (int(text),) * 3


def run(name: str, note: str, kernels: dict, shapes: list[str], dtype=torch.bfloat16, reps: int = 30,
        out_dtype=None, precision: str = "fp32", layout: str = "nn") -> dict:
    """kernels: kernel id -> GemmConfig (None: the kernel's own choice; a function of (m, n, k): a
    config a shape); 'id@label' names another config of the same kernel. Prints a line a kernel and
    shape. out_dtype: the result's type (torch.float32: 16-bit inputs with fp32 results, and cuBLAS's
    mm with that out_dtype); default the inputs'. precision: 'tf32' for float32 inputs on the TF32
    kernel, cuBLAS in TF32 too. layout "nt": B a transposed view of an [N][K] matrix (x @ w.t())."""
    result = out_dtype or dtype
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dev = torch.device("cuda", 0)
    record = dict(name=name, note=note, environment=environment.describe(0), dtype=str(dtype), reps=reps, cases=[], layout=layout,
                  out_dtype=str(result), precision=precision,
                  configs={kid: cfg.as_dict() if cfg is not None and not callable(cfg) else None for kid, cfg in kernels.items()})
    for text in shapes:
        m, n, k = shape_of(text)
        torch.manual_seed(0)
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(n, k, device=dev, dtype=dtype).t() if layout == "nt" else torch.randn(k, n, device=dev, dtype=dtype)
        ref = a.double() @ b.double()
        fns, errors, used = {}, {}, {}
        for kid, cfg in kernels.items():
            cfg = cfg(m, n, k) if callable(cfg) else cfg
            used[kid] = cfg.as_dict() if cfg is not None else None
            d = torch.empty(m, n, device=dev, dtype=result)
            fns[kid] = api.prepare(a, b, kernel=kid.split("@")[0], out=d, config=cfg, precision=precision)
            d.fill_(float("nan"))
            fns[kid]()
            torch.cuda.synchronize()
            errors[kid] = ((d.double() - ref).norm() / ref.norm()).item()  # NaN if any output was missed
        dc = torch.empty(m, n, device=dev, dtype=result)
        mm_dtype = (result,) if result != dtype else ()
        fns["cublas"] = lambda: torch.mm(a, b, *mm_dtype, out=dc)
        under_load = {}
        times = interleaved(fns, reps=reps, warmup=3, flush=L2Flusher(0), gate=HostGate(0),
                            mid_run=lambda: under_load.update(environment.clocks(0)))
        med = {kid: statistics.median(v) * 1e3 for kid, v in times.items()}
        for kid, us in med.items():
            err = f"rel_fro {errors[kid]:.2e}" if kid in errors else ""
            print(f"{text:>16s} {kid:24s} {us:9.1f} us {2.0 * m * n * k / us / 1e6:7.1f} TFLOP/s"
                  f"  ratio {med['cublas'] / us:.3f}  {err}")
        record["cases"].append(dict(shape=[m, n, k], median_us=med, ratio={kid: med["cublas"] / us for kid, us in med.items()},
                                    rel_fro=errors, times_ms=times, clocks_under_load=under_load, configs=used))
    out = os.environ.get("OUT", "out")
    os.makedirs(out, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    with open(os.path.join(out, f"probe-{name}-{stamp}.json"), "w") as f:
        json.dump(record, f, indent=1)
    return record
