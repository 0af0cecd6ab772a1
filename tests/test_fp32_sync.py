"""FP32 step 11's SYNC: where a slice is handed over (0: after its last FMAs; 1: before its last k
step, the 128 x 128 default) and the rule that gives rows not whole 16-byte units step 11's
128 x 128 tile. On the CPU: the rule, on problems built from CPU tensors, and every build compiled
spill-free for sm_90a within its occupancy. On a GPU (marker `gpu`): both hand-overs on both tiles
against float64 at shapes no tile divides, K shorter than one slice, K = 0 and K not a multiple of
BK, misaligned rows, NaN in C with beta = 0, and the same bits from either hand-over."""

import math

import pytest
import torch

from gemmlab import jit, registry
from gemmlab.configs import select
from gemmlab.configs.fp32 import rows_misaligned, whole_tile_config
from gemmlab.problem import problem_from_tensors
from gemmlab.reference import check_result

SPEC = registry.get("sgemm_11_warp_tile")
ARCH = "sm_90a"
TILES = {"128x128": dict(), "256x128": dict(BM=256, BN=128, WM=64, WN=64, TM=16, TN=8)}


def _problem(a, b):
    return problem_from_tensors(a, b, device_type="cpu")


def test_rows_misaligned_reads_leading_dimensions_addresses_and_copies():
    aligned = torch.empty(64, 64)
    assert not rows_misaligned(_problem(aligned, aligned))
    assert rows_misaligned(_problem(torch.empty(64, 63), torch.empty(63, 64)))  # A's rows: 63 floats
    assert rows_misaligned(_problem(aligned, torch.empty(64, 65)))  # B's rows
    shifted = torch.empty(64 * 65)[1:].view(-1)[: 64 * 64].view(64, 64)  # one float past an aligned start
    assert rows_misaligned(_problem(shifted, aligned))
    # a transposed view is read through a fresh row-major copy: only its row length counts
    assert not rows_misaligned(_problem(aligned, torch.empty(128, 64).t()))
    assert rows_misaligned(_problem(aligned, torch.empty(61, 64).t()))


@pytest.mark.parametrize("M,N,K,tile,sync", [
    (4096, 4096, 4096, (256, 128), 0),   # aligned, large: the size rule's tile, its hand-over after the FMAs
    (6132, 6132, 6132, (256, 128), 0),
    (2044, 2044, 2044, (128, 128), 1),   # below 2048^2: the default
    (3135, 3135, 3135, (128, 128), 1),   # misaligned: the default tile at any size
    (5001, 5001, 5001, (128, 128), 1),
])  # fmt: skip
def test_the_whole_tile_and_its_hand_over(M, N, K, tile, sync):
    p = _problem(torch.empty(M, K), torch.empty(K, N))
    cfg = whole_tile_config(p)
    assert (cfg["BM"], cfg["BN"], cfg["SYNC"]) == (*tile, sync)


@pytest.mark.parametrize("M,N,K,kernel", [
    (3135, 3135, 3135, "sgemm_11_warp_tile"),       # was step 12's split (modelled at 0.85 of step 11)
    (4099, 4099, 1021, "sgemm_11_warp_tile"),       # was step 15's 256 x 128
    (2047, 8191, 515, "sgemm_11_warp_tile"),
    (1031, 1031, 1031, "sgemm_15_multistage"),      # small squares keep their split
    (4100, 4100, 1020, "sgemm_15_multistage"),      # aligned rows keep step 15 below K = 1024
])  # fmt: skip
def test_auto_gives_misaligned_rows_step_11(M, N, K, kernel):
    spec, _ = select(_problem(torch.empty(M, K), torch.empty(K, N)), device="cuda")
    assert spec.id == kernel


@pytest.mark.parametrize("sync", [0, 1])
@pytest.mark.parametrize("tile", TILES)
def test_every_build_compiles_without_spills_within_its_occupancy(tile, sync):
    """Registers (NVRTC 13.0, sm_90a): 256x128 217 (SYNC 0) / 255 (SYNC 1), one block an SM;
    128x128 127 / 128, two blocks an SM (the launch bounds' 65536 / 512)."""
    u = jit.compile_kernel(SPEC, SPEC.config(**TILES[tile], SYNC=sync), ARCH).usage
    assert u.spills == 0 and u.stack_frame == 0, u
    assert u.registers <= (128 if tile == "128x128" else 255), u


# ---- On a GPU -----------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SHAPES = [(1, 1, 1), (7, 17, 5), (127, 129, 8), (1000, 1022, 1023), (3135, 97, 61), (257, 513, 0),
          (509, 521, 1031), (300, 260, 16), (2039, 31, 4099)]  # fmt: skip


def _run(a, b, c, alpha, beta, tile, sync, out):
    from gemmlab.api import prepare

    prepare(a, b, c, alpha=alpha, beta=beta, kernel=SPEC.id, out=out, config=SPEC.config(**TILES[tile], SYNC=sync))()
    torch.cuda.synchronize()
    return out


@gpu
@needs_gpu
@pytest.mark.parametrize("sync", [0, 1])
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_both_hand_overs_against_float64(tile, sync, M, N, K):
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.randn(M, N, device="cuda")
    nan_c = torch.full((M, N), math.nan, device="cuda")
    for cc, alpha, beta in ((None, 1.0, 0.0), (c, 0.75, -2.0), (nan_c, 1.5, 0.0)):
        out = _run(a, b, cc, alpha, beta, tile, sync, torch.full((M, N), math.nan, device="cuda"))
        rep = check_result(out, a, b, cc if beta != 0 else None, alpha, beta)
        assert rep.passed, f"M={M} N={N} K={K} tile={tile} SYNC={sync} alpha={alpha} beta={beta}: {rep.summary()}"


@gpu
@needs_gpu
@pytest.mark.parametrize("tile", TILES)
def test_misaligned_rows_and_the_same_bits_from_either_hand_over(tile):
    """Views one float past an aligned start with odd row strides (the scalar loads and stores);
    the hand-over moves a barrier, not an addition, so both builds give the same bits."""
    M, N, K = 1031, 517, 1029
    a = torch.randn(M, K + 3, device="cuda")[:, 1:K + 1]
    b = torch.randn(K, N + 3, device="cuda")[:, 1:N + 1]
    outs = [_run(a, b, None, 1.0, 0.0, tile, s, torch.full((M, N), math.nan, device="cuda")) for s in (0, 1)]
    rep = check_result(outs[1], a, b, None, 1.0, 0.0)
    assert rep.passed, f"tile={tile}: {rep.summary()}"
    assert torch.equal(outs[0], outs[1])
