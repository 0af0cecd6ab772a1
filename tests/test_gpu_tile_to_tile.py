"""Persistent kernels whose blocks take several tiles with a short K: the epilogue of one tile
runs while the next tile's starts, so anything one tile leaves in flight (a TMA store still
reading its staging buffer) meets the next. GPU only (marker `gpu`).

The shapes of the first test are those at which 'auto' returned wrong bf16/fp16 results while the
128 x 192 tile restarted its two staging buffers at buffer 0 on every tile
(docs/notes/epilogue-staging-race.md); each runs three times, on fresh inputs each time, since a
race need not show on every run."""

import pytest
import torch

import gemmlab
from gemmlab import api, registry
from gemmlab.configs import configs_in_use
from gemmlab.configs.rules import problem_flags
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result

pytestmark = pytest.mark.gpu

REPEATS = 3


def rand(*shape, dtype):
    return torch.randn(shape, device="cuda").to(dtype)


def operand(rows, cols, layout, dtype):
    """rows x cols: row-major ("n"), a transposed view of a [cols, rows] matrix ("t"), or a slice
    of a wider row-major matrix ("s", a row stride of cols + 8)."""
    if layout == "t":
        return rand(cols, rows, dtype=dtype).t()
    if layout == "s":
        return rand(rows, cols + 8, dtype=dtype)[:, :cols]
    return rand(rows, cols, dtype=dtype)


def assert_right(out, a, b, c, alpha, beta, label):
    torch.cuda.synchronize()
    rep = check_result(out, a, b, c, alpha, beta)
    assert rep.passed, f"{label}: {rep.summary()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "ss"])
@pytest.mark.parametrize("M,N,K", [(2894, 3139, 45), (2894, 3139, 64), (2894, 3139, 192), (3086, 2819, 86),
                                   (3072, 3072, 16), (3072, 3072, 86)])
def test_auto_at_short_k_with_several_tiles_a_block(dtype, layout, M, N, K):
    """gemm(a, b) with kernel='auto', beta = 0, into poisoned D and into a D gemm allocates."""
    for _ in range(REPEATS):
        a, b = operand(M, K, layout[0], dtype), operand(K, N, layout[1], dtype)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        gemmlab.gemm(a, b, out=out)
        assert_right(out, a, b, None, 1.0, 0.0, f"auto {layout} M={M} N={N} K={K} {dtype}")
        assert_right(gemmlab.gemm(a, b), a, b, None, 1.0, 0.0, f"auto {layout} M={M} N={N} K={K} {dtype}, D allocated")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("K", [1, 16, 64, 86, 200])
def test_every_tc07_tile_hands_over_from_tile_to_tile(dtype, K):
    """Every tile config 'auto' may give tc07 (A and B row-major), at 4104 x 4100 -- more tiles than
    two a block for each -- with K of one to four stages, beta = 0 (the TMA-store epilogue alone),
    beta != 0, and a result in fp32, each three times."""
    kernel, spec = "tc07_persistent_cluster", registry.get("tc07_persistent_cluster")
    M, N = 4104, 4100
    for cfg in [c for c in configs_in_use(spec) if not c["TA"] and not c["TB"]]:
        tiles = -(-M // (cfg["BM"] * cfg["CM"])) * -(-N // cfg["BN"])
        assert tiles > 2 * 132 // cfg["CM"], f"{cfg.as_dict()}: fewer tiles than two a cluster"
        for out_dtype, beta in ((dtype, 0.0), (dtype, -0.5), (torch.float32, 0.0)):
            problem = problem_from_tensors(rand(M, K, dtype=dtype), rand(K, N, dtype=dtype),
                                           out=torch.empty((M, N), device="cuda", dtype=out_dtype),
                                           c=torch.empty((M, N), device="cuda", dtype=out_dtype), beta=beta)  # fmt: skip
            if not spec.builds_for(cfg, dtype, out_dtype) or problem_flags(spec, problem, cfg)["EPI"] != cfg["EPI"]:
                continue  # each config with the epilogue it is built for (EPI = 0: beta = 0 alone)
            for _ in range(REPEATS):
                a, b = rand(M, K, dtype=dtype), rand(K, N, dtype=dtype)
                c = rand(M, N, dtype=out_dtype) if beta else None
                out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
                api.prepare(a, b, c, alpha=0.5, beta=beta, out=out, kernel=kernel, config=cfg)()
                assert_right(out, a, b, c, 0.5, beta, f"M={M} N={N} K={K} {cfg.as_dict()} out={out_dtype} beta={beta}")
