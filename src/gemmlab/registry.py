"""The one list of kernels. The CLI, the tests, the benchmark and the plots all read it.

A KernelSpec says where a kernel's source is, which template parameters it takes (with their
defaults and meaning), how it is launched and which problems it can serve. Tile sizes live
here, not in the .cu files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping

import torch

from .problem import GemmProblem

GRID_YZ_MAX = 65535
GRID_X_MAX = 2**31 - 1
MAX_THREADS = 1024
STATIC_SMEM_MAX = 48 * 1024


@dataclass(frozen=True)
class Param:
    """One template parameter of a kernel: name, default value and what it means."""

    name: str
    default: int
    doc: str


Dim3 = tuple[int, int, int]
_DEFAULTS: dict[str, "GemmConfig"] = {}


@dataclass(frozen=True)
class GemmConfig:
    """The tunables of one launch of one kernel (template arguments, by name)."""

    kernel: str
    values: tuple[tuple[str, int], ...]

    def __getitem__(self, name: str) -> int:
        return dict(self.values)[name]

    def as_dict(self) -> dict[str, int]:
        return dict(self.values)


@dataclass(frozen=True)
class KernelSpec:
    id: str
    step: int  # position on its ladder; higher is a later (and meant to be faster) idea
    title: str
    idea: str  # one line: what this step changes
    source: str  # path under gemmlab/kernels/
    entry: str  # name of the __global__ template
    params: tuple[Param, ...]
    block: Callable[[GemmConfig], Dim3] = field(repr=False)
    grid: Callable[[int, int, GemmConfig], Dim3] = field(repr=False)  # (M, N, config) -> blocks
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    dynamic_smem: Callable[[GemmConfig], int] = field(default=lambda cfg: 0, repr=False)
    spill_free: bool = True  # ptxas must report 0 bytes of spills
    seeds: str = ""  # where in the seeds the idea comes from
    check_config: Callable[[GemmConfig], str | None] = field(default=lambda cfg: None, repr=False)
    extra_constraints: Callable[[GemmProblem, GemmConfig], str | None] = field(
        default=lambda p, cfg: None, repr=False
    )
    tags: tuple[str, ...] = field(default_factory=tuple)
    device: str = "cuda"

    def default_config(self) -> GemmConfig:
        cfg = _DEFAULTS.get(self.id)
        if cfg is None:
            cfg = _DEFAULTS[self.id] = self.config()
        return cfg

    def config(self, **overrides: int) -> GemmConfig:
        names = {p.name for p in self.params}
        unknown = set(overrides) - names
        if unknown:
            raise ValueError(f"{self.id} has no parameter(s) {sorted(unknown)}; it takes {sorted(names)}")
        values = tuple((p.name, int(overrides.get(p.name, p.default))) for p in self.params)
        cfg = GemmConfig(self.id, values)
        threads = _prod(self.block(cfg))
        if not 1 <= threads <= MAX_THREADS:
            raise ValueError(f"{self.id} {cfg.as_dict()} launches {threads} threads a block; 1..{MAX_THREADS} allowed")
        bad = self.check_config(cfg)
        if bad:
            raise ValueError(f"{self.id} {cfg.as_dict()}: {bad}")
        return cfg

    def name_expression(self, cfg: GemmConfig) -> str:
        args = ", ".join(str(v) for _, v in cfg.values)
        return f"{self.entry}<{args}>" if args else self.entry

    def source_path(self) -> Path:
        return Path(str(resources.files("gemmlab") / "kernels" / self.source))

    def why_not(self, problem: GemmProblem, cfg: GemmConfig | None = None) -> str | None:
        """None if this kernel can serve the problem, else the reason it cannot (for errors)."""
        cfg = cfg or self.default_config()
        if problem.dtype not in self.dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            return f"{self.id} takes {names}, not {str(problem.dtype).removeprefix('torch.')}"
        gx, gy, gz = self.grid(max(problem.M, 1), max(problem.N, 1), cfg)
        if gx > GRID_X_MAX or gy > GRID_YZ_MAX or gz > GRID_YZ_MAX:
            return f"{self.id} would need a grid of {(gx, gy, gz)} blocks for {problem.shape}, over the hardware limit"
        return self.extra_constraints(problem, cfg)


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------------
# The FP32 SIMT ladder (seeds 000-003).

_BX = Param("BX", 32, "threads along blockDim.x")
_BY = Param("BY", 32, "threads along blockDim.y")

SGEMM_01 = KernelSpec(
    id="sgemm_01_naive",
    step=1,
    title="naive",
    idea="one thread per C element; consecutive threads walk rows of C (uncoalesced)",
    source="sgemm/01_naive.cu",
    entry="sgemm_naive",
    params=(_BX, _BY),
    block=lambda c: (c["BX"], c["BY"], 1),
    grid=lambda M, N, c: (cdiv(M, c["BX"]), cdiv(N, c["BY"]), 1),
    seeds="001 gemmKernel; 000 v1",
)

SGEMM_02 = KernelSpec(
    id="sgemm_02_coalesced",
    step=2,
    title="coalesced naive",
    idea="consecutive threads walk columns of C: B loads and C stores coalesce, A broadcasts",
    source="sgemm/02_coalesced.cu",
    entry="sgemm_coalesced",
    params=(_BX, _BY),
    block=lambda c: (c["BX"], c["BY"], 1),
    grid=lambda M, N, c: (cdiv(N, c["BX"]), cdiv(M, c["BY"]), 1),
    seeds="002 kernel 1",
)

SGEMM_03 = KernelSpec(
    id="sgemm_03_smem_tile",
    step=3,
    title="shared-memory tiles",
    idea="stage TILE x TILE tiles of A and B in shared memory: each global element read once per block",
    source="sgemm/03_smem_tile.cu",
    entry="sgemm_smem_tile",
    params=(Param("TILE", 32, "side of the square C tile, shared tiles and thread block"),),
    block=lambda c: (c["TILE"], c["TILE"], 1),
    grid=lambda M, N, c: (cdiv(N, c["TILE"]), cdiv(M, c["TILE"]), 1),
    check_config=lambda c: None if 2 * c["TILE"] ** 2 * 4 <= STATIC_SMEM_MAX else "shared tiles exceed 48 KB",
    seeds="000 v2; 002 kernel 2; 003 kernels 2-3; 004",
)

# The FP32 ladder in order. A step joins it only once it passes `gemmlab check` on a GPU.
SGEMM_LADDER: tuple[KernelSpec, ...] = (SGEMM_01, SGEMM_02, SGEMM_03)

KERNELS: tuple[KernelSpec, ...] = SGEMM_LADDER


# ----------------------------------------------------------------------------------------------
# The CPU ladder (seeds 004 and 001): numba functions in gemmlab/cpu/kernels.py.


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
        cfg = _DEFAULTS.get(self.id)
        if cfg is None:
            cfg = _DEFAULTS[self.id] = self.config()
        return cfg

    def config(self, **overrides: int) -> GemmConfig:
        names = {p.name for p in self.params}
        unknown = set(overrides) - names
        if unknown:
            raise ValueError(f"{self.id} has no parameter(s) {sorted(unknown)}; it takes {sorted(names)}")
        values = tuple((p.name, int(overrides.get(p.name, p.default))) for p in self.params)
        if any(v < 1 for _, v in values):
            raise ValueError(f"{self.id}: block sizes must be >= 1, got {dict(values)}")
        return GemmConfig(self.id, values)

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

_BY_ID: dict[str, KernelSpec | CpuKernelSpec] = {k.id: k for k in KERNELS + CPU_LADDER}


def get(kernel_id: str) -> KernelSpec | CpuKernelSpec:
    try:
        return _BY_ID[kernel_id]
    except KeyError:
        known = ", ".join(_BY_ID)
        raise ValueError(f"no kernel named {kernel_id!r}; registered kernels: {known}") from None


def kernels(dtype: torch.dtype | None = None, device: str = "cuda") -> list:
    """Every registered kernel of a device ('cuda' or 'cpu') in ladder order, optionally only
    those taking dtype."""
    ladder = KERNELS if device == "cuda" else CPU_LADDER if device == "cpu" else None
    if ladder is None:
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    return [k for k in ladder if dtype is None or dtype in k.dtypes]
