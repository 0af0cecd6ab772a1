"""FP32 step 15, a cp.async multistage pipeline: step 11's warp tiles and thread layout, their slices
of A and B copied by cp.async into a ring of STAGES shared slices (cuBLAS SGEMM's sm_80 recipe)."""

from __future__ import annotations

from .base import GemmConfig, KernelSpec, Param, _first_failure
from .sgemm import SGEMM_11, _smem_ok, _threads_warp, _warp_tile_checks


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
        _smem_ok(ring_floats(c)),
        _a_copy_ok(c),
    )


SGEMM_15 = KernelSpec(
    id="sgemm_15_multistage",
    epilogues=True,
    step=15,
    title="multistage cp.async",
    idea="step 11's warp tiles fed by cp.async straight into a ring of STAGES shared slices: no register staging, one barrier a slice",
    source="sgemm/15_multistage.cu",
    entry="sgemm_multistage",
    params=(*SGEMM_11.params, Param("STAGES", 3, "K slices in the shared ring; STAGES - 1 in flight while one is computed")),
    block=SGEMM_11.block,
    grid=SGEMM_11.grid,
    check_config=_check_15,
    seeds="past the seeds: cuBLAS's sm80 SGEMM (256x128x8, three cp.async stages; Nsight Compute on an H100); tc03's ring",
)
