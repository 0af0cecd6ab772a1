"""The first call's cost: how long a program waits for its first gemm() of each dtype, with an
empty cubin cache (a fresh install: the kernel is compiled) and with a warm one (a new process
whose kernel is on disk), beside torch.mm's first call in a new process.

Every measurement is a fresh interpreter (python -c), so nothing of an earlier one is loaded, and
every repetition gets a new, empty GEMMLAB_CACHE_DIR (NVRTC's own cache off, as gemmlab keeps it).
A repetition runs, in order:
* import: the wall time of `python -c "import gemmlab"` -- interpreter start, torch, gemmlab;
* cold: a process that imports gemmlab, makes the inputs of every case (CUDA's context comes up
  there, not in a timed call), then times, case after case in CASES' order, gemm() to completion
  (torch.cuda.synchronize) and a second call; it lists the kernels each first call loaded, with
  the time jit spent on each phase (CompiledKernel.timings);
* warm: the same in a new process, the cache as the cold one left it;
* torch: the same with torch.mm (TF32 off).
compile_only (machines without a GPU, or to time the compiler alone): cold and warm time only what
the first calls compile (api.compile_jobs, jit.compile_kernel for an arch); nothing is launched.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import torch

from . import environment

CASES = (("bfloat16", torch.bfloat16), ("float32", torch.float32))  # the first bf16 call, then the first fp32 one
# what a fresh interpreter runs: the clock starts before gemmlab (and torch) are imported
_CHILD = "import time; t0 = time.perf_counter(); from gemmlab.bench.coldstart import child; child(t0)"
_IMPORT = "import gemmlab"
TIMEOUT_S = 600


def child(started: float) -> None:
    """A fresh interpreter's part; sys.argv: "gemmlab", "torch" or "compile", then the size, then
    (compile) the arch. Prints what it measured as one JSON line."""
    from .. import jit
    from ..api import compile_jobs
    from ..ops import gemm
    from ..problem import fresh_problem

    what, n = sys.argv[1], int(sys.argv[2])
    found: dict = {"import_s": time.perf_counter() - started, "cases": {}}
    if what == "compile":
        for name, dtype in CASES:
            t = time.perf_counter()
            jobs = compile_jobs([fresh_problem(n, n, n, dtype)])
            done = [jit.compile_kernel(spec, cfg, sys.argv[3], *types) for spec, cfg, *types in jobs]
            found["cases"][name] = dict(first_s=time.perf_counter() - t, kernels=[_kernel(ck) for ck in done])
        print(json.dumps(found))
        return
    t = time.perf_counter()
    inputs = {name: (torch.randn(n, n, device="cuda").to(dtype), torch.randn(n, n, device="cuda").to(dtype))
              for name, dtype in CASES}  # fmt: skip
    torch.cuda.synchronize()
    found["cuda_s"] = time.perf_counter() - t
    torch.backends.cuda.matmul.allow_tf32 = False
    call = gemm if what == "gemmlab" else torch.mm
    for name, _ in CASES:
        a, b = inputs[name]
        loaded = len(jit.loaded_kernels())
        first = _to_completion(call, a, b)
        second = _to_completion(call, a, b)
        kernels = [_kernel(k.compiled) for k in jit.loaded_kernels()[loaded:]]
        found["cases"][name] = dict(first_s=first, second_s=second, kernels=kernels)
    print(json.dumps(found))


def _to_completion(call: Callable, a, b) -> float:
    t = time.perf_counter()
    call(a, b)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def _kernel(ck) -> dict:
    return dict(kernel=ck.kernel_id, config=ck.name_expression, cached=ck.from_cache, timings=dict(ck.timings))


def _run(code: str, args: list[str], env: dict) -> tuple[float, dict | None]:
    """Wall time of a fresh interpreter running code, and the JSON line it printed (if any)."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise RuntimeError(f"a cold-start process ({' '.join(args) or code}) failed:\n{res.stderr[-3000:]}")
    lines = res.stdout.strip().splitlines()
    return wall, json.loads(lines[-1]) if args else None


def measure(n: int = 2048, reps: int = 5, arch: str | None = None, on_rep: Callable[[int], None] | None = None) -> list[dict]:
    """The records of `reps` repetitions (module docstring); arch given: compile only, for it."""
    runs: dict[str, list] = {"import": [], "cold": [], "warm": [], "torch": []}
    own = ["compile", str(n), arch] if arch else ["gemmlab", str(n)]
    for i in range(reps):
        with tempfile.TemporaryDirectory(prefix="gemmlab-cold-start-") as cache:
            env = dict(os.environ, GEMMLAB_CACHE_DIR=cache, CUDA_CACHE_DISABLE="1")
            runs["import"].append(_run(_IMPORT, [], env)[0])
            runs["cold"].append(_run(_CHILD, own, env)[1])
            runs["warm"].append(_run(_CHILD, own, env)[1])
            if not arch:
                runs["torch"].append(_run(_CHILD, ["torch", str(n)], env)[1])
        if on_rep:
            on_rep(i + 1)
    records = [dict(scenario="import", times_s=runs["import"], median_s=statistics.median(runs["import"]))]
    for scenario in ("cold", "warm", "torch"):
        for name, _ in CASES if runs[scenario] else ():
            records.append(_case_record(scenario, name, n, runs[scenario]))
    return records


def _case_record(scenario: str, dtype: str, n: int, runs: list[dict]) -> dict:
    """One scenario's first calls of one dtype over the repetitions: times, medians, the kernels the
    first call loaded with the median of each phase jit timed (summed over those kernels), and the
    median of the rest of the call (outside jit: imports, loading, launching, the kernel)."""
    cases = [r["cases"][dtype] for r in runs]
    phases: dict[str, list[float]] = {}
    outside = []
    for c in cases:
        summed: dict[str, float] = {}
        for k in c["kernels"]:
            for phase, s in k["timings"].items():
                summed[phase] = summed.get(phase, 0.0) + s
        for phase, s in summed.items():
            phases.setdefault(phase, []).append(s)
        outside.append(c["first_s"] - sum(summed.values()))
    record = dict(scenario=scenario, dtype=dtype, M=n, N=n, K=n,
                  times_s=[c["first_s"] for c in cases], median_s=statistics.median(c["first_s"] for c in cases),
                  import_median_s=statistics.median(r["import_s"] for r in runs),
                  kernels=[{k: v for k, v in kern.items() if k != "timings"} for kern in cases[-1]["kernels"]],
                  phases_median_s={p: statistics.median(v) for p, v in phases.items()},
                  outside_jit_median_s=statistics.median(outside))  # fmt: skip
    if "second_s" in cases[0]:
        record["second_median_s"] = statistics.median(c["second_s"] for c in cases)
        record["cuda_median_s"] = statistics.median(r["cuda_s"] for r in runs)
    return record


def host_meta(arch: str | None = None) -> dict:
    """The header of a run: the GPU's description (environment.describe) where one is measured,
    the host's CPU either way (the compiler runs on it), and for compile only the arch."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if arch:
        meta = dict(time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), commit=environment.git_commit(),
                    gpu=None, arch=arch)  # fmt: skip
    else:
        meta = environment.describe(0)
    return meta | dict(kind="cold-start", cpu=environment.cpu_model(), cores=cores)
