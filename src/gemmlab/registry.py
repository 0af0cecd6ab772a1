"""The one list of kernels. The CLI, the tests, the benchmark and the plots all read it.

Each ladder's steps are specified in gemmlab.specs (a KernelSpec says where a kernel's source is,
which template parameters it takes, how it is launched and which problems it can serve); this
module puts them in ladder order, says which have joined the ladders, and looks them up by id.
"""

from __future__ import annotations

import torch

from .specs.base import KernelSpec
from .specs.cpu import CPU_LADDER, CpuKernelSpec
from .specs.persistent import TC_07, TC_08, TC_09
from .specs.sgemm import (
    SGEMM_01, SGEMM_02, SGEMM_03, SGEMM_04, SGEMM_05, SGEMM_06, SGEMM_07, SGEMM_08, SGEMM_09, SGEMM_10, SGEMM_11,
    SGEMM_12,
)
from .specs.sgemm_rows import SGEMM_13
from .specs.sgemm_cols import SGEMM_14
from .specs.sgemm_multistage import SGEMM_15
from .specs.skinny import TC_10
from .specs.tensorcore import TC_01, TC_02, TC_03, TC_04, TC_05, TC_06
from .specs.tf32x3 import TC_11

# The FP32 ladder in order. A step joins it only once it passes `gemmlab check` on a GPU
# (steps 04-11: 484/484 cases and the GPU test suite on an H200, 2026-11-22).
# Steps 12-14: the GPU tests and `gemmlab check` on an H100.
SGEMM_LADDER: tuple[KernelSpec, ...] = (
    SGEMM_01, SGEMM_02, SGEMM_03, SGEMM_04, SGEMM_05, SGEMM_06, SGEMM_07, SGEMM_08, SGEMM_09, SGEMM_10, SGEMM_11,
    SGEMM_12, SGEMM_13, SGEMM_14, SGEMM_15,
)

# Written but not yet checked on a GPU: compiled and spec-checked by the tests, never chosen by
# kernel='auto' or listed by the CLI until they join SGEMM_LADDER.
# Step 15 (cp.async multistage) joined after its GPU tests (185 cases) passed on an H100, 2026-11-27.
SGEMM_PENDING: tuple[KernelSpec, ...] = ()


# Tensor-core steps in order (joined only after `gemmlab check` passes on a GPU), and pending ones.
# tc01-tc04: every check case (bf16 and fp16) and the GPU tests on an H200, 2026-11-22.
# tc05-tc08: the GPU tests (366 cases of theirs) and check subsets on an H100, 2026-11-22; the full
# check in the run whose records are committed.
# tc11 (3xTF32): the GPU tests, `gemmlab check -k tc11_3xtf32` and the fuzz harness's 3xtf32
# problems on an H200 and an H100, 2026-11-27. It serves precision="3xtf32" only, so no other
# precision's choice changes.
TC_LADDER: tuple[KernelSpec, ...] = (TC_01, TC_02, TC_03, TC_04, TC_05, TC_06, TC_07, TC_08, TC_09, TC_10, TC_11)
TC_PENDING: tuple[KernelSpec, ...] = ()

# Pending kernels are reachable by name (so `gemmlab check -k` and the GPU tests can try them),
# never by kernel='auto' or in the default lists.
KERNELS: tuple[KernelSpec, ...] = SGEMM_LADDER + TC_LADDER
PENDING: tuple[KernelSpec, ...] = SGEMM_PENDING + TC_PENDING
_BY_ID: dict[str, KernelSpec | CpuKernelSpec] = {k.id: k for k in KERNELS + PENDING + CPU_LADDER}


def get(kernel_id: str) -> KernelSpec | CpuKernelSpec:
    try:
        return _BY_ID[kernel_id]
    except KeyError:
        known = ", ".join(_BY_ID)
        raise ValueError(f"no kernel named {kernel_id!r}; registered kernels: {known}") from None


def kernels(dtype: torch.dtype | None = None, device: str = "cuda", pending: bool = False) -> list:
    """Every registered kernel of a device ('cuda' or 'cpu') in ladder order, optionally only
    those taking dtype; pending=True adds the GPU kernels not yet checked on a GPU."""
    ladder = (KERNELS + (PENDING if pending else ())) if device == "cuda" else CPU_LADDER if device == "cpu" else None
    if ladder is None:
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    return [k for k in ladder if dtype is None or dtype in k.dtypes]
