"""FP32 step 15, a cp.async multistage pipeline: step 11's warp tiles and thread layout, their slices
of A and B copied by cp.async into a ring of STAGES shared slices (cuBLAS SGEMM's sm_80 recipe); with
SPLIT = 1, K cut into runs whose fp32 parts step 12's reduction pass adds (its tiles and runs model:
specs.sgemm_multistage_split)."""

from __future__ import annotations

from .base import GemmConfig, KernelSpec, Param, _first_failure, cdiv
from .sgemm import SGEMM_11, WARP_TILE_PARAMS, _smem_ok, _threads_warp, _warp_tile_checks
from .sgemm_multistage_split import multistage_runs


def ring_floats(c: GemmConfig) -> int:
    """Floats of the ring: STAGES slices of A transposed ([BK][BM + PAD]) and of B ([BK][BN])."""
    return c["STAGES"] * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * c["BN"])


def _a_copy_ok(c: GemmConfig) -> tuple[bool, str]:
    """Each thread copies one column k of A's slice, THREADS / BK rows apart (B's chunks need no even
    split: a thread past the slice's last chunk copies none)."""
    threads, bk = _threads_warp(c), c["BK"]
    rows = threads // bk if bk > 0 and threads % bk == 0 else 0
    return (rows > 0 and c["BM"] % rows == 0,
            f"the {threads} threads copy A's {c['BM']}x{bk} slice one column each: BK must divide {threads} "
            f"and the {threads // max(bk, 1)} rows a pass must divide BM")


def _check_15(c: GemmConfig) -> str | None:
    """The kernel's static_asserts, in its order."""
    return _first_failure(
        *_warp_tile_checks(c),
        (c["STAGES"] >= 2, f"STAGES must be at least 2 (a slice computed while the next lands), not {c['STAGES']}"),
        (c["SPLIT"] in (0, 1), f"SPLIT must be 0 (one run) or 1 (runs along K), not {c['SPLIT']}"),
        _smem_ok(ring_floats(c)),
        _a_copy_ok(c),
    )


def _grid_15(M: int, N: int, c: GemmConfig) -> tuple[int, int, int]:
    """SPLIT = 0: (tiles across, tiles down); SPLIT = 1: (tiles, 1), gridDim.y then set to the runs."""
    if c["SPLIT"]:
        return cdiv(N, c["BN"]) * cdiv(M, c["BM"]), 1, 1
    return cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1


def _workspace_15(c: GemmConfig, grid: tuple[int, int, int]) -> tuple[int, int] | None:
    """SPLIT = 1: a BM x BN fp32 part a block of a split grid (step 12's RED = 1 layout), no counters;
    SPLIT = 0: none (null pointers)."""
    if not c["SPLIT"]:
        return None
    return (grid[0] * grid[1] * c["BM"] * c["BN"], 0) if grid[1] > 1 else (0, 0)


SGEMM_15 = KernelSpec(
    id="sgemm_15_multistage",
    epilogues=True,
    step=15,
    title="multistage cp.async",
    idea="step 11's warp tiles fed by cp.async straight into a ring of STAGES shared slices: no register staging, one barrier a slice",
    source="sgemm/15_multistage.cu",
    entry="sgemm_multistage",
    params=(*WARP_TILE_PARAMS, Param("STAGES", 3, "K slices in the shared ring; STAGES - 1 in flight while one is computed"),
            Param("SPLIT", 0, "0: one run (tiles on gridDim.x, y); 1: tiles on gridDim.x, runs along K on gridDim.y, "
                              "their fp32 parts added by step 12's reduction pass")),
    block=SGEMM_11.block,
    grid=_grid_15,
    check_config=_check_15,
    seeds="past the seeds: cuBLAS's sm80 SGEMM (256x128x8, three cp.async stages; Nsight Compute on an H100); tc03's ring",
    workspace=_workspace_15,
    workspace_last=True,  # the kernel's parameters end with the workspace's
    k_runs=multistage_runs,
    parts_reduced=lambda c, grid: c["SPLIT"] == 1 and grid[1] > 1,
)
