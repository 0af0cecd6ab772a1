"""The CPU ladder (seeds 004 and 001): numba functions in gemmlab/cpu/kernels.py, specified as the
GPU kernels are (id, step, parameters), served by gemmlab.cpu.api."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..problem import GemmProblem
from .base import GemmConfig, Param, _config_values, _default_config


@dataclass(frozen=True)
class CpuKernelSpec:
    id: str
    step: int
    title: str
    idea: str
    entry: str  # function name in gemmlab.cpu.kernels
    params: tuple[Param, ...] = ()
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    seeds: str = ""
    device: str = "cpu"
    source: str = "cpu/kernels.py"

    def default_config(self) -> GemmConfig:
        return _default_config(self)

    def config(self, **overrides: int) -> GemmConfig:
        cfg = _config_values(self, overrides)
        if any(v < 1 for _, v in cfg.values):
            raise ValueError(f"{self.id}: block sizes must be >= 1, got {cfg.as_dict()}")
        return cfg

    def why_not(self, problem: GemmProblem, cfg: GemmConfig | None = None) -> str | None:
        if problem.dtype not in self.dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            return f"{self.id} takes {names}, not {str(problem.dtype).removeprefix('torch.')}"
        return None


CPU_LADDER: tuple[CpuKernelSpec, ...] = (
    CpuKernelSpec(
        id="cpu01_naive",
        step=1,
        title="naive i-j-k",
        idea="the textbook triple loop: the inner loop walks a column of B, one cache line per FMA",
        entry="cpu01_naive",
        seeds="004 naive; 001 CPU reference loop",
    ),
    CpuKernelSpec(
        id="cpu02_reordered",
        step=2,
        title="reordered i-k-j",
        idea="swap the k and j loops: the inner loop walks rows of B and D contiguously",
        entry="cpu02_reordered",
        seeds="004 loop reordering",
    ),
    CpuKernelSpec(
        id="cpu03_blocked",
        step=3,
        title="cache-blocked",
        idea="i-k-j over BM x BK x BN blocks so each block of B is reused from cache",
        entry="cpu03_blocked",
        params=(
            Param("BM", 32, "rows of D a block"),
            Param("BN", 512, "columns of D a block"),
            Param("BK", 256, "depth of a block"),
        ),
        seeds="004 blocking",
    ),
    CpuKernelSpec(
        id="cpu04_parallel",
        step=4,
        title="blocked, parallel, vectorised",
        idea="column panels across threads (prange), packed B panel, 2x4 dot-product kernel the compiler vectorises",
        entry="cpu04_parallel",
        params=(
            Param("BN", 64, "columns of D a thread's panel"),
            Param("BK", 1024, "depth of a k block"),
        ),
        seeds="001 Eigen+OpenMP reference",
    ),
)

