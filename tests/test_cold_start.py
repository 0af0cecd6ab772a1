"""The first call on a GPU (marker `gpu`): what `gemmlab compile -s` warms is what gemm() loads, and
the cold-start measurement compiles from an empty cache and then finds its kernels on disk."""

import pytest
import torch

import gemmlab
from gemmlab import jit
from gemmlab.api import compile_jobs
from gemmlab.problem import fresh_problem

pytestmark = pytest.mark.gpu


def _operands(M, N, K, dtype, layout):
    a = torch.randn(K, M, device="cuda").to(dtype).t() if layout[0] == "t" else torch.randn(M, K, device="cuda").to(dtype)
    b = torch.randn(N, K, device="cuda").to(dtype).t() if layout[1] == "t" else torch.randn(K, N, device="cuda").to(dtype)
    return a, b


@pytest.mark.parametrize("shape,dtype,layout,out_dtype", [
    ((2048, 2048, 2048), torch.bfloat16, "nn", None),
    ((2048, 2048, 2048), torch.float32, "nn", None),
    ((512, 4096, 4096), torch.bfloat16, "nt", None),  # x @ w.t(): read in place
    ((1000, 3000, 700), torch.float32, "nt", None),  # copied row-major first
    ((300, 520, 136), torch.float16, "tn", torch.float32),
    ((7, 4096, 4096), torch.bfloat16, "nt", None),  # a few rows: tc10
])  # fmt: skip
def test_compile_jobs_name_the_kernel_gemm_loads(shape, dtype, layout, out_dtype):
    (job,) = compile_jobs([fresh_problem(*shape, dtype, layout=layout, out_dtype=out_dtype, device=torch.device("cuda", 0))])
    spec, cfg, *types = job
    want = (spec.id, spec.name_expression(cfg, *types))
    a, b = _operands(*shape, dtype, layout)
    before = len(jit.loaded_kernels())
    gemmlab.gemm(a, b, out_dtype=out_dtype)
    torch.cuda.synchronize()
    loaded = [(k.spec.id, k.compiled.name_expression) for k in jit.loaded_kernels()]
    assert set(loaded[before:]) <= {want} and want in loaded, f"{shape} {dtype} {layout}: warmed {want}, loaded {loaded[before:]}"


def test_cold_start_compiles_then_finds_its_kernels_on_disk():
    from gemmlab.bench import coldstart

    recs = coldstart.measure(n=256, reps=1)
    by = {(r["scenario"], r.get("dtype")): r for r in recs}
    assert set(by) == {("import", None)} | {(s, d) for s in ("cold", "warm", "torch") for d in ("bfloat16", "float32")}
    for dtype in ("bfloat16", "float32"):
        cold, warm = by[("cold", dtype)], by[("warm", dtype)]
        assert cold["kernels"] and not any(k["cached"] for k in cold["kernels"]) and "nvrtc" in cold["phases_median_s"]
        assert [k["config"] for k in warm["kernels"]] == [k["config"] for k in cold["kernels"]]
        assert all(k["cached"] for k in warm["kernels"]) and "nvrtc" not in warm["phases_median_s"]
        assert by[("torch", dtype)]["kernels"] == [] and 0 < warm["median_s"] < cold["median_s"]
