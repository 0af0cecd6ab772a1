"""The one list of kernels. The CLI, the tests, the benchmark and the plots all read it.

A KernelSpec says where a kernel's source is, which template parameters it takes (with their
defaults and meaning), how it is launched and which problems it can serve. Tile sizes live
here, not in the .cu files.
"""

from __future__ import annotations

import math
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
CPP_TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float16: "__half", torch.float32: "float"}
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
    # the result types a config can write (None: any the kernel is built for); e.g. tc07 with one
    # staging buffer a consumer (OB = 1) writes 16-bit results only
    result_types: Callable[[GemmConfig], tuple[torch.dtype, ...] | None] = field(default=lambda cfg: None, repr=False)
    tags: tuple[str, ...] = field(default_factory=tuple)
    device: str = "cuda"
    # the first two template arguments are the element type and the type of C and D (the same, or
    # float for fp32 output): the bf16/fp16 kernels
    type_param: bool = False
    # TMA kernels (tc05 on) take one tensor map per named operand ("a", "b", "d"), in that order,
    # before the pointers; tma_boxes gives each map's box (rows, cols) for a config. "a_edge" (tc08)
    # is a second map of A with another box.
    tma: tuple[str, ...] = ()
    tma_boxes: Callable[[GemmConfig], dict[str, tuple[int, int]]] = field(default=lambda cfg: {}, repr=False)
    cluster: Callable[[GemmConfig], Dim3] | None = field(default=None, repr=False)  # blocks per cluster
    persistent: bool = False  # grid capped at the SMs that fit (whole clusters); blocks loop over tiles
    min_capability: tuple[int, int] = (0, 0)  # e.g. (9, 0): wgmma, TMA and clusters are Hopper's
    # The arithmetic of float32 problems: "fp32" (FFMA) or "tf32" (TF32 tensor cores, only when the
    # caller passes precision="tf32"). 16-bit kernels ignore it.
    math: str = "fp32"
    # True when gemm() copies an operand whose address or row stride TMA cannot take into a padded,
    # aligned buffer, so the caller's layout never rules the kernel out; aligned operands are used
    # as they are. TF32 (a float32 caller cannot be asked to pad) and the 16-bit steps 'auto' ends
    # on (tc07, tc09: at odd sizes such as 1022 or 6132 a copy costs far less than tc04's cp.async
    # loads would; 'auto' weighs that with _copies_pay).
    staged: bool = False
    # Kernels that pass partial results between blocks (stream-K, split K) take a workspace after D:
    # fp32 elements and uint32 flags, their counts from the config and the grid launched.
    workspace: Callable[[GemmConfig, Dim3], tuple[int, int]] | None = field(default=None, repr=False)
    # Kernels whose grid splits K into gridDim.y runs (tc10): how many, for a problem, config and
    # the device's SM count; the grid is spec.grid's with that many rows. None: gridDim.y as given.
    k_runs: Callable[[GemmProblem, GemmConfig, int], int] | None = field(default=None, repr=False)
    # Persistent kernels that split few tall-K tiles along K over every SM: whether they would for
    # this problem, config and number of resident blocks. gemm() then launches every resident block
    # (the kernel reads its slots from the grid), and otherwise no more blocks than there are tiles.
    splits_k: Callable[[GemmProblem, GemmConfig, int], bool] | None = field(default=None, repr=False)
    # 'auto' passes over a kernel for problems where this says it does not pay (the kernel still
    # serves them when named): None, or a reason string, from the problem and the config.
    auto_skip: Callable[[GemmProblem, GemmConfig], str | None] = field(default=lambda p, cfg: None, repr=False)
    # The layouts of A and B (GemmProblem.layout) the kernel reads where they lie; for any other,
    # gemm() hands it row-major copies of the transposed operands. "nt" (B stored transposed, as
    # x @ w.t() passes it) takes a TB = 1 config, "tn" (A stored transposed, as dy.t() @ x passes
    # it) a TA = 1 config, "tt" both (configs.config_for sets them).
    layouts: tuple[str, ...] = ("nn",)
    # The register count a thread starts with, where a config compiles for more than its block can
    # launch with and the cubin is rewritten (gemmlab.cubin: tc07's 192-row tile); None: as compiled.
    launch_registers: Callable[[GemmConfig], int | None] = field(default=lambda cfg: None, repr=False)

    def default_config(self) -> GemmConfig:
        return _default_config(self)

    def config(self, **overrides: int) -> GemmConfig:
        cfg = _config_values(self, overrides)
        threads = math.prod(self.block(cfg))
        if not 1 <= threads <= MAX_THREADS:
            raise ValueError(f"{self.id} {cfg.as_dict()} launches {threads} threads a block; 1..{MAX_THREADS} allowed")
        bad = self.check_config(cfg)
        if bad:
            raise ValueError(f"{self.id} {cfg.as_dict()}: {bad}")
        return cfg

    def name_expression(self, cfg: GemmConfig, dtype: torch.dtype | None = None,
                        out_dtype: torch.dtype | None = None) -> str:  # fmt: skip
        """The template instance: for kernels templated on types, the input type then the type of
        C and D (out_dtype: the input type, or float32 for fp32 output)."""
        args = [str(v) for _, v in cfg.values]
        if self.type_param:
            if dtype not in CPP_TYPES or dtype not in self.dtypes:
                raise ValueError(f"{self.id} is templated on its element type: give one of {self.dtypes}, not {dtype}")
            out_dtype = out_dtype or dtype
            if out_dtype not in (dtype, torch.float32):
                raise ValueError(f"{self.id} writes {dtype} or float32 results, not {out_dtype}")
            args[0:0] = [CPP_TYPES[dtype], CPP_TYPES[out_dtype]]
        return f"{self.entry}<{', '.join(args)}>" if args else self.entry

    def source_path(self) -> Path:
        return Path(str(resources.files("gemmlab") / "kernels" / self.source))

    def reads_in_place(self, problem: GemmProblem, cfg: GemmConfig) -> bool:
        """Whether this config reads the problem's A and B where they lie (otherwise gemm() hands
        it row-major copies of those stored transposed)."""
        values = dict(cfg.values)
        return (problem.layout in self.layouts and values.get("TA", 0) == problem.a.trans
                and values.get("TB", 0) == problem.b.trans)  # fmt: skip

    def builds_for(self, cfg: GemmConfig, dtype: torch.dtype | None = None, out_dtype: torch.dtype | None = None) -> bool:
        """Whether the config is built for these element and result types (result_types)."""
        allowed, result = self.result_types(cfg), out_dtype or dtype
        return allowed is None or result is None or result in allowed

    def why_not(self, problem: GemmProblem, cfg: GemmConfig | None = None) -> str | None:
        """None if this kernel can serve the problem, else the reason it cannot (for errors)."""
        cfg = cfg or self.default_config()
        if problem.dtype not in self.dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            return f"{self.id} takes {names}, not {str(problem.dtype).removeprefix('torch.')}"
        gx, gy, gz = self.grid(max(problem.M, 1), max(problem.N, 1), cfg)
        if gx > GRID_X_MAX or gy > GRID_YZ_MAX or gz > GRID_YZ_MAX:
            return f"{self.id} would need a grid of {(gx, gy, gz)} blocks for {problem.shape}, over the hardware limit"
        if problem.result_dtype != problem.dtype and not self.type_param:
            return f"{self.id} writes {str(problem.dtype).removeprefix('torch.')} results only"
        if not self.builds_for(cfg, problem.dtype, problem.result_dtype):
            names = ", ".join(str(d).removeprefix("torch.") for d in self.result_types(cfg))
            return f"this config of {self.id} writes {names} results, not {str(problem.result_dtype).removeprefix('torch.')}"
        if problem.dtype == torch.float32 and problem.precision != self.math:
            if self.math == "tf32":
                return f"{self.id} multiplies float32 as TF32: pass precision='tf32' to allow it"
            return f"{self.id} computes in full fp32; precision='{problem.precision}' asks for another kernel"
        cc = _capability(problem.device) if self.min_capability > (0, 0) else None
        if cc is not None and cc < self.min_capability:
            return f"{self.id} needs compute capability {self.min_capability[0]}.{self.min_capability[1]} (Hopper), the device has {cc[0]}.{cc[1]}"
        if not self.reads_in_place(problem, cfg):
            if problem.layout not in self.layouts:
                return f"{self.id} reads A and B in layouts {', '.join(self.layouts)}, not {problem.layout}"
            values = dict(cfg.values)
            for flag, name, op in (("TA", "A", problem.a), ("TB", "B", problem.b)):
                if values.get(flag, 0) != op.trans:
                    article, kind = "an" if name == "A" else "a", "stored transposed" if values.get(flag, 0) else "row-major"
                    return f"config {flag}={values.get(flag, 0)} is for {article} {name} {kind}; this {name} is not"
        tma_reason = tma_constraints(problem, self.tma) if self.tma and not self.staged else None
        return tma_reason or self.extra_constraints(problem, cfg)


_CAPABILITIES: dict = {}


def _capability(device) -> tuple[int, int] | None:
    """The device's compute capability, or None where there is no CUDA device to ask (compile-only
    machines: the kernels still compile and their specs are still checked there)."""
    key = (device.type, device.index)
    if key not in _CAPABILITIES:
        cc = None
        if device.type == "cuda" and torch.cuda.is_available():
            cc = tuple(torch.cuda.get_device_capability(device))
        _CAPABILITIES[key] = cc
    return _CAPABILITIES[key]


def tma_constraints(problem: GemmProblem, operands: tuple[str, ...]) -> str | None:
    """Why TMA cannot move these operands, or None: it needs 16-byte aligned matrices whose row
    strides are multiples of 16 bytes (a single row's stride is never used)."""
    if problem.is_empty:
        return None  # nothing is launched
    size = problem.dtype.itemsize
    for name in operands:
        if name == "d":
            continue  # optional: where out does not suit TMA stores, tc07 stores from registers
        if problem.K == 0 and name in ("a", "b"):
            continue  # nothing is loaded: the maps point at a placeholder (api._tensor_maps)
        op = getattr(problem, name)
        ld, ptr, rows = op.ld, op.ptr, op.rows
        if rows <= 1:
            ld = 0  # one row: its stride is never used (tma.tensor_map gives the map a valid one)
        if (ld * size) % 16 or ptr % 16:
            return (f"TMA needs operand {name} 16-byte aligned with a row stride that is a multiple of {16 // size} "
                    f"elements (16 bytes); got row stride {ld}" + (f", address {ptr:#x}" if ptr % 16 else ""))
    return None


def _default_config(spec) -> GemmConfig:
    cfg = _DEFAULTS.get(spec.id)
    if cfg is None:
        cfg = _DEFAULTS[spec.id] = spec.config()
    return cfg


def _config_values(spec, overrides: dict) -> GemmConfig:
    """The spec's parameters with overrides applied; unknown names are an error."""
    names = {p.name for p in spec.params}
    unknown = set(overrides) - names
    if unknown:
        raise ValueError(f"{spec.id} has no parameter(s) {sorted(unknown)}; it takes {sorted(names)}")
    return GemmConfig(spec.id, tuple((p.name, int(overrides.get(p.name, p.default))) for p in spec.params))



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


# Steps 04-11: register tiling, vector loads, conflict-free shared memory, pipelining, warp tiles.
# Every constraint below is also a static_assert in the kernel; these say it before compiling.


def _first_failure(*checks: tuple[bool, str]) -> str | None:
    """The message of the first failed (ok, message) check, or None when all pass."""
    return next((msg for ok, msg in checks if not ok), None)


def _div(a: int, b: int) -> int:
    return a // b if b > 0 else 0  # a zero thread count, reported by KernelSpec.config


def _threads_2d(c: GemmConfig) -> int:
    return _div(c["BM"], c["TM"]) * _div(c["BN"], c["TN"])


def _threads_warp(c: GemmConfig) -> int:
    return _div(c["BM"], c["WM"]) * _div(c["BN"], c["WN"]) * 32


def _tiles_split(c: GemmConfig, threads: int, vector: int) -> tuple[bool, str]:
    """The A and B tiles, in units of `vector` floats, must split evenly over the threads."""
    a, b = c["BM"] * c["BK"] // vector, c["BK"] * c["BN"] // vector
    unit = "float4s" if vector == 4 else "floats"
    return (a % threads == 0 and b % threads == 0 and min(a, b) >= threads,
            f"the {c['BM']}x{c['BK']} A tile ({a} {unit}) and the {c['BK']}x{c['BN']} B tile ({b} {unit}) "
            f"must split evenly over the {threads} threads")


def _float4_tiles(c: GemmConfig) -> list[tuple[bool, str]]:
    return [
        (c["TM"] % 4 == 0 and c["TN"] % 4 == 0, "TM and TN must be multiples of 4 (fragments are read as float4)"),
        (c["BK"] % 4 == 0 and c["BN"] % 4 == 0, "BK and BN must be multiples of 4 (tile rows are read as float4)"),
    ]


def _pad_ok(c: GemmConfig) -> tuple[bool, str]:
    return c["PAD"] >= 0 and c["PAD"] % 4 == 0, "PAD must be a multiple of 4 (rows of sA stay 16-byte aligned)"


def _smem_ok(floats: int) -> tuple[bool, str]:
    return floats * 4 <= STATIC_SMEM_MAX, f"shared tiles of {floats * 4} bytes exceed the 48 KB of static shared memory"


def _thread_tile_ok(c: GemmConfig) -> tuple[bool, str]:
    ok = min(c["TM"], c["TN"]) >= 1 and c["BM"] % c["TM"] == 0 and c["BN"] % c["TN"] == 0
    return ok, "TM must divide BM and TN must divide BN"


_BM = Param("BM", 128, "rows of the C tile a block computes")
_BN = Param("BN", 128, "columns of the C tile a block computes")
_BK = Param("BK", 8, "depth of the K slice staged in shared memory per step")
_TM = Param("TM", 8, "rows of C per thread")
_TN = Param("TN", 8, "columns of C per thread")
_PAD = Param("PAD", 4, "floats of padding per row of the transposed A tile (bank shift)")
_GRID_BLOCK_TILES = lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1)  # noqa: E731


def _check_04(c: GemmConfig) -> str | None:
    t = _div(c["BM"] * c["BN"], c["TM"])
    return _first_failure(
        (c["TM"] >= 1 and c["BM"] % c["TM"] == 0, "TM must divide BM"),
        _tiles_split(c, t, 1),
        _smem_ok(c["BM"] * c["BK"] + c["BK"] * c["BN"]),
    )


SGEMM_04 = KernelSpec(
    id="sgemm_04_thread_tile_1d",
    step=4,
    title="1-D thread tile",
    idea="each thread computes TM results of a column: one sB load reused TM times",
    source="sgemm/04_thread_tile_1d.cu",
    entry="sgemm_thread_tile_1d",
    params=(Param("BM", 64, "rows of the C tile a block computes"),
            Param("BN", 64, "columns of the C tile a block computes"),
            _BK,
            Param("TM", 8, "rows of C per thread (one column); BM * BN / TM threads")),
    block=lambda c: (_div(c["BM"] * c["BN"], c["TM"]), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_04,
    seeds="002 kernel 3",
)


def _check_05(c: GemmConfig) -> str | None:
    return _first_failure(
        _thread_tile_ok(c),
        _tiles_split(c, _threads_2d(c), 1),
        _smem_ok(c["BM"] * c["BK"] + c["BK"] * c["BN"]),
    )


SGEMM_05 = KernelSpec(
    id="sgemm_05_thread_tile_2d",
    step=5,
    title="2-D thread tile",
    idea="each thread computes a TM x TN block: TM * TN FMAs per TM + TN values read",
    source="sgemm/05_thread_tile_2d.cu",
    entry="sgemm_thread_tile_2d",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_05,
    seeds="002 kernel 4; 003 kernels 6-7; 000 v5-v6",
)

SGEMM_06 = KernelSpec(
    id="sgemm_06_register_fragments",
    step=6,
    title="register fragments",
    idea="copy each k step's A column and B row into registers, then an outer product from registers",
    source="sgemm/06_register_fragments.cu",
    entry="sgemm_register_fragments",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_05,
    seeds="002 kernel 5; 003 kernel 6 (rank-1 updates in registers)",
)


def _check_07(c: GemmConfig, pad: int = 0, buffers: int = 1) -> str | None:
    return _first_failure(
        _thread_tile_ok(c),
        *_float4_tiles(c),
        _tiles_split(c, _threads_2d(c), 4),
        _smem_ok(buffers * (c["BK"] * (c["BM"] + pad) + c["BK"] * c["BN"])),
    )


SGEMM_07 = KernelSpec(
    id="sgemm_07_vectorized",
    step=7,
    title="float4 loads",
    idea="128-bit global and shared loads, A stored transposed; scalar loads at edges and misaligned rows",
    source="sgemm/07_vectorized.cu",
    entry="sgemm_vectorized",
    params=(_BM, _BN, _BK, _TM, _TN),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_07,
    seeds="002 kernel 6; 001 gemm_use_128, gemm_transpose_smem; 000 v7; 003 kernel 8",
)


def _check_08(c: GemmConfig, buffers: int = 1) -> str | None:
    return _first_failure(_pad_ok(c)) or _check_07(c, c["PAD"], buffers)


SGEMM_08 = KernelSpec(
    id="sgemm_08_bank_conflict_free",
    step=8,
    title="bank-conflict-free shared memory",
    idea="pad the rows of the transposed A tile; spread a thread's float4s of B BN/(TN/4) apart",
    source="sgemm/08_bank_conflict_free.cu",
    entry="sgemm_bank_conflict_free",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_08,
    seeds="003 (bank conflicts, kernels 2-3 and 8); 001 gemm_final (strided thread columns)",
)

SGEMM_09 = KernelSpec(
    id="sgemm_09_register_double_buffer",
    step=9,
    title="register double buffer",
    idea="load k step kk + 1's fragments from shared memory while step kk's FMAs run",
    source="sgemm/09_register_double_buffer.cu",
    entry="sgemm_register_double_buffer",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_08,
    seeds="001 gemm_hide_smem_latency",
)

SGEMM_10 = KernelSpec(
    id="sgemm_10_smem_double_buffer",
    step=10,
    title="shared-memory double buffer",
    idea="two shared buffers: fetch the next K slice from global memory while computing this one",
    source="sgemm/10_smem_double_buffer.cu",
    entry="sgemm_smem_double_buffer",
    params=(_BM, _BN, _BK, _TM, _TN, _PAD),
    block=lambda c: (_threads_2d(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=lambda c: _check_08(c, buffers=2),
    seeds="002 kernel 7; 001 gemm_final",
)


def _check_11(c: GemmConfig) -> str | None:
    wm, wn, tm, tn = c["WM"], c["WN"], c["TM"], c["TN"]
    return _first_failure(
        (wm >= 1 and wn >= 1 and c["BM"] % wm == 0 and c["BN"] % wn == 0, "WM must divide BM and WN must divide BN"),
        *_float4_tiles(c),
        (min(tm, tn) >= 4 and wm % tm == 0 and wn % tn == 0 and (wm // tm) * (wn // tn) == 32,
         f"a warp's 32 threads must cover its {wm}x{wn} tile with {tm}x{tn} results each: (WM/TM) * (WN/TN) == 32"),
        _pad_ok(c),
        _tiles_split(c, _threads_warp(c), 4),
        _smem_ok(2 * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * c["BN"])),
    )


SGEMM_11 = KernelSpec(
    id="sgemm_11_warp_tile",
    step=11,
    title="warp tiles",
    idea="each warp owns a WM x WN tile, each thread 4 x 4 blocks spread over it: less shared traffic per FMA",
    source="sgemm/11_warp_tile.cu",
    entry="sgemm_warp_tile",
    params=(_BM, _BN, _BK,
            Param("WM", 64, "rows of the C tile a warp computes"),
            Param("WN", 32, "columns of the C tile a warp computes; (BM/WM) * (BN/WN) warps"),
            _TM, _TN, _PAD),
    block=lambda c: (_threads_warp(c), 1, 1),
    grid=_GRID_BLOCK_TILES,
    check_config=_check_11,
    seeds="siboehm/SGEMM_CUDA kernel 10 (warptiling); 001 gemm_final; 002 kernel 7",
)

# The FP32 ladder in order. A step joins it only once it passes `gemmlab check` on a GPU
# (steps 04-11: 484/484 cases and the GPU test suite on an H200, 2026-11-22).
SGEMM_LADDER: tuple[KernelSpec, ...] = (
    SGEMM_01, SGEMM_02, SGEMM_03, SGEMM_04, SGEMM_05, SGEMM_06, SGEMM_07, SGEMM_08, SGEMM_09, SGEMM_10, SGEMM_11,
)

# Written but not yet checked on a GPU: compiled and spec-checked by the tests, never chosen by
# kernel='auto' or listed by the CLI until they join SGEMM_LADDER.
SGEMM_PENDING: tuple[KernelSpec, ...] = ()

KERNELS: tuple[KernelSpec, ...] = SGEMM_LADDER  # extended by the tensor-core ladder below


# ----------------------------------------------------------------------------------------------
# The tensor-core ladder (issue 3): 16-bit inputs (bf16, fp16), fp32 accumulation, output in the
# input dtype. Each kernel is templated on its element type.

def _check_warp_tiles(c: GemmConfig) -> str | None:
    """The warp-tile constraints every mma step shares (its static_asserts, as a Python error)."""
    if c["BM"] % c["WM"] or c["BN"] % c["WN"]:
        return "WM must divide BM and WN divide BN"
    if c["WM"] % 16 or c["WN"] % 16 or c["BK"] % 16:
        return "WM, WN and BK must be multiples of 16"
    return None


def _tile_bytes(c: GemmConfig, pad: int = 8) -> int:
    """One stage of 16-bit A and B tiles, rows padded by `pad` elements (8: 16 bytes; 0: swizzled)."""
    return 2 * (c["BM"] * (c["BK"] + pad) + c["BK"] * (c["BN"] + pad))


def _check_swizzle_widths(c: GemmConfig) -> str | None:
    """tc03's XOR swizzle permutes 16-byte chunks within 128-byte lines (gemmlab::swizzled)."""
    ok = lambda w: w in (16, 32) or (w >= 64 and w % 64 == 0)  # noqa: E731
    return None if ok(c["BK"]) and ok(c["BN"]) else "BK and BN must be 16, 32 or a multiple of 64 (the XOR swizzle)"


def _warps(c: GemmConfig) -> int:
    return (c["BM"] // c["WM"]) * (c["BN"] // c["WN"])


def _smem_fits(nbytes: int, limit: int) -> str | None:
    return None if nbytes <= limit else f"shared memory {nbytes} B exceeds {limit} B"


TC_01 = KernelSpec(
    id="tc01_wmma",
    step=1,
    title="WMMA",
    idea="nvcuda::wmma 16x16x16 fragments from shared-memory tiles: the tensor cores through the C++ API",
    source="tensorcore/01_wmma.cu",
    entry="tc_wmma",
    params=(
        Param("BM", 128, "rows of C a block"),
        Param("BN", 128, "columns of C a block"),
        Param("BK", 32, "K slice staged in shared memory (multiple of 16)"),
        Param("WM", 64, "rows of C a warp (multiple of 16)"),
        Param("WN", 32, "columns of C a warp (multiple of 16)"),
    ),
    block=lambda c: ((c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    check_config=lambda c: _check_warp_tiles(c) or _smem_fits(_tile_bytes(c) + 1024 * _warps(c), STATIC_SMEM_MAX),
    seeds="001 extension: WMMA",
    type_param=True,
)

TC_02 = KernelSpec(
    id="tc02_mma_sync",
    step=2,
    title="mma.sync + ldmatrix",
    idea="inline-PTX mma.sync.m16n8k16 on fragments loaded by ldmatrix; accumulators written from registers",
    source="tensorcore/02_mma_sync.cu",
    entry="tc_mma_sync",
    params=TC_01.params,
    block=TC_01.block,
    grid=TC_01.grid,
    dtypes=(torch.bfloat16, torch.float16),
    check_config=lambda c: _check_warp_tiles(c) or _smem_fits(_tile_bytes(c), STATIC_SMEM_MAX),
    seeds="001 inline PTX: mma.sync",
    type_param=True,
)

TC_03 = KernelSpec(
    id="tc03_cp_async",
    step=3,
    title="cp.async pipeline",
    idea="16-byte cp.async copies into a ring of STAGES XOR-swizzled shared buffers: global loads overlap the MMAs",
    source="tensorcore/03_cp_async.cu",
    entry="tc_cp_async",
    params=TC_01.params + (Param("STAGES", 3, "shared buffers in the cp.async ring"),),
    block=TC_01.block,
    grid=TC_01.grid,
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=lambda c: c["STAGES"] * _tile_bytes(c, pad=0),
    check_config=lambda c: _check_warp_tiles(c)
    or _check_swizzle_widths(c)
    or ("STAGES must be at least 2" if c["STAGES"] < 2 else _smem_fits(c["STAGES"] * _tile_bytes(c, pad=0), 227 * 1024)),
    seeds="the Ampere recipe (cp.async multistage)",
    type_param=True,
)

TC_04 = KernelSpec(
    id="tc04_wgmma",
    step=4,
    title="wgmma",
    idea="Hopper wgmma.mma_async m64n128k16: a warpgroup's MMA reads 128-byte-swizzled shared tiles through descriptors",
    source="tensorcore/04_wgmma.cu",
    entry="tc_wgmma",
    params=(
        Param("BM", 128, "rows of C a block (multiple of 64: one warpgroup of 128 threads per 64 rows)"),
        Param("BN", 128, "columns of C a block (multiple of 128: m64n128k16 MMAs)"),
        Param("BK", 64, "K slice of one stage (multiple of 64: one 128-byte swizzle row)"),
        Param("STAGES", 3, "shared buffers in the cp.async ring"),
    ),
    block=lambda c: (c["BM"] // 64 * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    # the stages plus 1 KB, for aligning the ring to the swizzle's 1024-byte period
    dynamic_smem=lambda c: c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2 + 1024,
    check_config=lambda c: (
        "BM must be a multiple of 64, at most 512 (one warpgroup per 64 rows)"
        if c["BM"] % 64 or not 64 <= c["BM"] <= 512
        else "BN must be a multiple of 128 (m64n128k16 MMAs)"
        if c["BN"] % 128 or c["BN"] < 128
        else "BK must be a multiple of 64 (one 128-byte swizzle row)"
        if c["BK"] % 64 or c["BK"] < 64
        else "STAGES must be at least 2"
        if c["STAGES"] < 2
        else "the stages exceed 227 KB of shared memory"
        if c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2 + 1024 > 227 * 1024
        else None
    ),
    seeds="issue 3: Hopper wgmma",
    type_param=True,
    min_capability=(9, 0),
)

# Steps 05-07 move tiles with the TMA: the operands they map must suit it (tma_constraints);
# others go to tc04, which copies with cp.async and takes any layout.

def _tma_stage_bytes(c: GemmConfig) -> int:
    return (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2


def _barriers(c: GemmConfig) -> int:
    return 2 * c["STAGES"] * 8  # a full and an empty mbarrier per stage


def _check_tma_tiles(c: GemmConfig, bn: tuple[int, ...], max_bm: int, smem: int, bk: tuple[int, ...] = (64,)) -> str | None:
    return _first_failure(
        (c["BM"] % 64 == 0 and 64 <= c["BM"] <= max_bm,
         f"BM must be a multiple of 64 from 64 to {max_bm} (one warpgroup per 64 rows)"),
        (c["BN"] in bn, f"BN must be one of {bn}"),
        (c["BK"] in bk, f"BK must be {' or '.join(map(str, bk))} (one swizzle row of K: the TMA box width)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (smem <= 227 * 1024, f"shared memory {smem} B exceeds 227 KB"),
    )


def _tc05_smem(c: GemmConfig) -> int:
    return c["STAGES"] * _tma_stage_bytes(c) + _barriers(c) + 1024


TC_05 = KernelSpec(
    id="tc05_tma",
    step=5,
    title="TMA + mbarriers",
    idea="one thread loads whole swizzled tiles with TMA; full/empty mbarriers replace __syncthreads; one MMA group stays in flight",
    source="tensorcore/05_tma.cu",
    entry="tc_tma",
    params=(
        Param("BM", 128, "rows of C a block (multiple of 64, at most 256: one warpgroup per 64 rows)"),
        Param("BN", 128, "columns of C a block (multiple of 128: m64n128k16 MMAs)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row, the TMA box width)"),
        Param("STAGES", 4, "shared buffers in the TMA ring"),
    ),
    block=lambda c: (c["BM"] // 64 * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc05_smem,
    check_config=lambda c: _check_tma_tiles(c, (128, 256, 384, 512), 256, _tc05_smem(c)),
    seeds="issue 3: TMA loads into a ring of stages guarded by mbarriers",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["BM"], 64), "b": (c["BK"], 64)},
    min_capability=(9, 0),
)


# What tc06-tc08 share: a producer warpgroup plus one consumer warpgroup per 64 rows of a 256-wide
# tile; tc07 and tc08 add the persistent, clustered schedule.
_WS_BM = Param("BM", 128, "rows of C a block: 64 per consumer warpgroup (64 or 128)")
_WS_STAGES = Param("STAGES", 4, "shared buffers in the TMA ring")
_CLUSTER_GROUP = Param("GROUP", 8, "cluster rows walked together by the tile scheduler (L2 reuse)")
_WS_BLOCK = lambda c: ((c["BM"] // 64 + 1) * 128, 1, 1)  # noqa: E731
# every cluster tile's blocks; the launch caps this at the blocks that can be resident at once
_CLUSTER_GRID = lambda M, N, c: (cdiv(M, c["BM"] * c["CM"]) * cdiv(N, c["BN"]) * c["CM"], 1, 1)  # noqa: E731


def _cluster_m(options: tuple[int, ...]) -> Param:
    names = ", ".join(map(str, options[:-1])) + f" or {options[-1]}"
    return Param("CM", 2, f"blocks per cluster along M, sharing B tiles by multicast ({names})")


def _check_cluster(c: GemmConfig, cm: tuple[int, ...]) -> str | None:
    return _first_failure(
        (c["CM"] in cm, f"CM must be one of {cm} (blocks per cluster along M)"),
        (c["GROUP"] >= 1, "GROUP must be at least 1"),
    )


def _tc06_smem(c: GemmConfig) -> int:
    return c["STAGES"] * _tma_stage_bytes(c) + _barriers(c) + 1024


TC_06 = KernelSpec(
    id="tc06_warp_specialized",
    step=6,
    title="warp specialisation",
    idea="a producer warpgroup issues the TMA, two consumer warpgroups (setmaxnreg 40/232) each run m64n256k16: 128x256 tiles",
    source="tensorcore/06_warp_specialized.cu",
    entry="tc_warp_specialized",
    params=(
        _WS_BM,
        Param("BN", 256, "columns of C a block (256: one m64n256k16 MMA a warpgroup)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row)"),
        _WS_STAGES,
    ),
    block=_WS_BLOCK,
    grid=lambda M, N, c: (cdiv(N, c["BN"]), cdiv(M, c["BM"]), 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc06_smem,
    check_config=lambda c: _check_tma_tiles(c, (256,), 128, _tc06_smem(c)),
    seeds="issue 3: warp specialisation, setmaxnreg, larger block tiles",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["BM"], 64), "b": (c["BK"], 64)},
    min_capability=(9, 0),
)


# 16-bit problems whose A or B rows TMA cannot read (a row stride not a multiple of 8 elements:
# 1022, 3135, 6132 ...) reach tc07/tc09 through padded copies (KernelSpec.staged). A copy is one
# more launch and moves the operand's bytes twice, so 'auto' stages only where the GEMM is large
# enough and dense enough for tc07's speed over tc04's (which reads any layout in place) to repay
# it: at least STAGE_MIN_FLOPS, and STAGE_MIN_INTENSITY flops for every byte copied. Measured on
# an H100 (results/nvidia-h100-80gb-hbm3/tune-staged-*.json, bf16): on GPU time alone staging wins
# from 383^3 (32 against 38 us) and ties at 319^3; but a staged call also costs the host ~31 us more
# (65 against 34 us at 62^3, overhead-20261123T143746Z.json), about what it saves at 639^3
# (36 against 56 us): 'auto' starts there. At 1022^3 it is 2.4x faster than tc04, at 3135^3 4x.
STAGE_MIN_FLOPS = 2 * 640**3
STAGE_MIN_INTENSITY = 256


def operands_to_copy(problem: GemmProblem) -> tuple[str, ...]:
    """The inputs ("a", "b") a staged kernel must copy for TMA to read them; none without K steps."""
    if problem.is_empty or problem.K == 0:
        return ()
    return tuple(n for n in ("a", "b") if tma_constraints(problem, (n,)))


def _copies_pay(problem: GemmProblem, c: GemmConfig) -> str | None:
    """None where tc07/tc09 read A and B in place or their copies pay for themselves; else why not."""
    copied = operands_to_copy(problem)
    if not copied:
        return None
    size = problem.dtype.itemsize
    nbytes = sum(getattr(problem, n).rows * getattr(problem, n).cols * size for n in copied)
    if problem.flops >= STAGE_MIN_FLOPS and problem.flops >= STAGE_MIN_INTENSITY * nbytes:
        return None
    return (f"{' and '.join(copied)} would need a padded copy for TMA, which costs more than it saves "
            f"at {problem.shape}; tc04 reads them in place")


def _tc07_smem(c: GemmConfig) -> int:
    staging = (c["BM"] // 64) * c.as_dict().get("OB", 2) * 64 * 64 * 2  # OB 64 x 64 output buffers per consumer
    return c["STAGES"] * _tma_stage_bytes(c) + staging + _barriers(c) + 1024


STREAM_K_MAX_SLOTS = 1024  # resident clusters: more than any GPU's SMs


def _stream_k_steps_fit(problem: GemmProblem, c: GemmConfig) -> str | None:
    """tc09 and tc08 with SK = 1 count the K steps of their split tiles in 32-bit integers
    (gemmlab::StreamK): fewer than two waves of tiles -- two a resident cluster, of at most
    STREAM_K_MAX_SLOTS -- times K / BK."""
    if 2 * STREAM_K_MAX_SLOTS * cdiv(problem.K, c["BK"]) >= 2**31:
        return (f"K = {problem.K} is too deep for the 32-bit stream-K schedule "
                f"(K / BK must stay below {2**31 // (2 * STREAM_K_MAX_SLOTS)})")
    return None


def _tc09_tall_tile_serves(problem: GemmProblem, c: GemmConfig) -> str | None:
    """tc09's 192-row tile launches with 128 registers a thread only where the code before its
    setmaxnreg stays below R128 (gemmlab.cubin checks every build). With fp32 results and the full
    epilogue (beta != 0, or a D that TMA cannot store to) ptxas puts that code in R152-R157."""
    if c["BM"] == 192 and problem.result_dtype == torch.float32 and (c["EPI"] == 1 or problem.beta != 0):
        return "tc09's BM = 192 tile with fp32 results takes only beta = 0 and a D TMA can store to (EPI = 0)"
    return None


def _tc09_smem(c: GemmConfig) -> int:
    return _tc07_smem(c) + 64  # and the stream-K schedule (gemmlab::StreamK, tile counts), after the barriers


def _check_07_tc(c: GemmConfig, bn: tuple[int, ...] = (128, 192, 256), max_bm: int = 192, smem: int | None = None) -> str | None:
    return (
        _check_tma_tiles(c, bn, max_bm, _tc07_smem(c) if smem is None else smem, bk=(64, 32))
        or _check_cluster(c, (1, 2, 4))
        or _first_failure((c["TB"] or c["BN"] // 64 >= c["CM"],
                           f"BN / 64 = {c['BN'] // 64} boxes of B leave some of CM = {c['CM']} blocks none to load"),
                          (not c["TB"] or c["BN"] // c["CM"] % 8 == 0,
                           f"B's {c['BN']} rows do not split into whole 8-row atoms among CM = {c['CM']} blocks"),
                          (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
                          (c["TA"] in (0, 1), "TA must be 0 (A row-major) or 1 (A stored transposed)"),
                          (c["EPI"] in (0, 1), "EPI must be 0 (TMA stores without C) or 1 (every epilogue)"),
                          (c["EPI"] == 1 or c["TMA_STORE"] == 1, "EPI = 0 is the TMA-store epilogue: it needs TMA_STORE = 1"),
                          (c.as_dict().get("HO", 0) in (0, 1), "HO must be 0 (never) or 1 (the hand-over where it applies)"),
                          (c.as_dict().get("OB", 2) in (1, 2), "OB must be 1 or 2 (staging buffers a consumer)"))
    )


def _tc07_launch_registers(c: GemmConfig) -> int | None:
    """The register count tc07's cubin is launched with where it compiles for more (the kernel's
    __maxnreg__): the 192-row tile (160 -> 128), the 128-row tile with the hand-over (232 -> 168)."""
    if c["BM"] == 192:
        return 128
    if c["BM"] == 128 and c["HO"] and c["BN"] == 256 and c["EPI"] == 0:
        return 168
    return None


def _tc07_boxes(c: GemmConfig) -> dict[str, tuple[int, int]]:
    """A's box: BM rows of BK (row-major A), or with TA BK rows of 64 (A stored transposed: BM / 64
    boxes a stage); B's: BK rows of 64 columns (row-major B), or with TB its BN / CM rows of BK (B
    stored transposed: each block of a cluster loads its share of the tile's rows)."""
    a = (c["BK"], 64) if c["TA"] else (c["BM"], c["BK"])
    b = (c["BN"] // c["CM"], c["BK"]) if c["TB"] else (c["BK"], 64)
    return {"a": a, "b": b, "d": (64, 64)}


TC_07 = KernelSpec(
    id="tc07_persistent_cluster",
    step=7,
    title="persistent clusters",
    idea="one block per SM walks grouped tiles; block pairs share B by TMA multicast; epilogue via swizzled smem and TMA stores",
    source="tensorcore/07_persistent_cluster.cu",
    entry="tc_persistent_cluster",
    params=(
        Param("BM", 128, "rows of C a block: 64 per consumer warpgroup (64, 128 or 192; 192 fits three stages)"),
        Param("BN", 256, "columns of C a block: 128, 192 or 256 (one m64nBNk16 MMA a warpgroup)"),
        Param("BK", 64, "K slice of one stage: 64 (128-byte swizzle rows of A) or 32 (64-byte, twice the stages)"),
        _WS_STAGES,
        _cluster_m((1, 2, 4)),
        _CLUSTER_GROUP,
        Param("TMA_STORE", 1, "1: epilogue through swizzled smem and TMA stores; 0: registers to global"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major; 0: B row-major (set from the problem)"),
        Param("TA", 0, "1: A stored transposed ([K][M], e.g. x.t()), read M-major; 0: A row-major (set from the problem)"),
        Param("EPI", 1, "0: only the epilogue of beta = 0 and a D TMA stores to (set from the problem); 1: every epilogue"),
        Param("HO", 1, "1: hand a tile over half by half, its epilogue beside MMAs (the 128 x 256 tile with EPI = 0 and a 16-bit D); 0: never"),
        Param("OB", 2, "the epilogue's 8 KB staging buffers a consumer: 2 (a chunk stores while the next is staged) or 1 (room for another K stage; a 16-bit D only)"),
    ),
    block=_WS_BLOCK,
    grid=_CLUSTER_GRID,
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc07_smem,
    check_config=_check_07_tc,
    seeds="issue 3: persistent tile scheduler, clusters with TMA multicast, TMA-store epilogue; tile widths for whole waves",
    type_param=True,
    tma=("a", "b", "d"),
    tma_boxes=_tc07_boxes,
    cluster=lambda c: (c["CM"], 1, 1),
    persistent=True,
    min_capability=(9, 0),
    staged=True,
    auto_skip=_copies_pay,
    layouts=("nn", "nt", "tn", "tt"),
    # BM = 192: compiled for 160 registers a thread, launched with 128 (see the kernel and gemmlab.cubin);
    # BM = 128 with the hand-over: compiled for 232, launched with 168
    launch_registers=_tc07_launch_registers,
    result_types=lambda c: (torch.bfloat16, torch.float16) if c["OB"] == 1 else None,
)


def _tc08_smem(c: GemmConfig) -> int:
    staging = (c["TMA_STORE"] > 0) * (c["BN"] // 64) * 16384  # 16 KB of fp32 staging per consumer
    return c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 4 + staging + _barriers(c) + 64 * c["SK"] + 1024  # (SK: the stream-K plan after the barriers)


def _check_08_tc(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["BM"] in (128, 256), "BM must be 256 or 128 (the N of one m64n256k8 or m64n128k8 MMA: C's rows are the MMA's columns)"),
        (c["BM"] == 256 or (c["SPLIT"] == 0 and c["SK"] == 0),
         "BM = 128 runs whole tiles only (SPLIT = 0, SK = 0): the workspace's parts are 64 x 256"),
        (c["BN"] in (64, 128), "BN must be 64 or 128 (one consumer warpgroup per 64 columns of C)"),
        (c["BK"] == 32, "BK must be 32 (32 fp32: one 128-byte swizzle row)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (c["CM"] in (1, 2) and c["CN"] in (1, 2) and c["CM"] * c["CN"] <= 2,
         "CM and CN must be 1 or 2, at most one of them 2 (clusters of at most two blocks)"),
        (c["GROUP"] >= 1, "GROUP must be at least 1"),
        (c["TMA_STORE"] in (0, 1), "TMA_STORE must be 0 or 1"),
        (c["SPLIT"] in (0, 1), "SPLIT must be 0 or 1"),
        (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
        (c["EPI"] in (0, 1), "EPI must be 0 (TMA stores without C) or 1 (every epilogue)"),
        (c["EPI"] == 1 or c["TMA_STORE"] == 1, "EPI = 0 is the TMA-store epilogue: it needs TMA_STORE = 1"),
        (c["SK"] in (0, 1), "SK must be 0 (whole tiles) or 1 (stream-K over the last waves)"),
        (c["SK"] == 0 or c["SPLIT"] == 0, "SK = 1 (stream-K) and SPLIT = 1 (split-K of few tall tiles) are separate builds"),
        (_tc08_smem(c) <= 227 * 1024, f"shared memory {_tc08_smem(c)} B exceeds 227 KB"),
    )


TC_08 = KernelSpec(
    id="tc08_tf32",
    step=8,
    title="TF32 wgmma",
    idea="float32 inputs on the tensor cores as TF32 (asked for with precision='tf32'): D^T = B^T A^T, B's fragments from registers, no transposed copy (a B stored transposed: both from shared memory); the last waves split along K (stream-K, as tc09), few tall-K tiles each split over many",
    source="tensorcore/08_tf32.cu",
    entry="tc_tf32",
    params=(
        Param("BM", 256, "rows of C a block (256 or 128: the N of one m64n256k8 or m64n128k8 MMA)"),
        Param("BN", 128, "columns of C a block: 64 per consumer warpgroup (64 or 128)"),
        Param("BK", 32, "K slice of one stage (32 fp32: one 128-byte swizzle row)"),
        _WS_STAGES,
        Param("CM", 1, "blocks per cluster along M, sharing B tiles by multicast (1 or 2)"),
        # CN = 2 measured best on an H100 (results/nvidia-h100-80gb-hbm3/tune-20261122T044930Z.json):
        # sharing the 32 KB A tile moves fewer bytes than sharing the 16 KB B tile
        Param("CN", 2, "blocks per cluster along N, sharing A tiles by multicast (1 or 2; CM * CN <= 2)"),
        _CLUSTER_GROUP,
        Param("TMA_STORE", 1, "1: the epilogue through shared memory and TMA stores; 0: scalar stores from registers"),
        Param("SPLIT", 0, "1: few tiles with a tall K split along K over every SM (tc09's split-K; chosen where it splits); 0: whole tiles only"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major from shared memory; 0: B row-major, its fragments from registers (set from the problem)"),
        Param("EPI", 1, "0: only the epilogue of beta = 0 and a D TMA stores to (set from the problem); 1: every epilogue"),
        Param("SK", 0, "1: the last full wave of tiles and the partial one split along K over every cluster (tc09's stream-K); 0: whole tiles"),
    ),
    block=lambda c: ((c["BN"] // 64 + 1) * 128, 1, 1),
    grid=lambda M, N, c: (cdiv(M, c["BM"] * c["CM"]) * cdiv(N, c["BN"] * c["CN"]) * c["CM"] * c["CN"], 1, 1),
    dtypes=(torch.float32,),
    dynamic_smem=_tc08_smem,
    check_config=_check_08_tc,
    seeds="issue 3: TF32 on request; wgmma reads TF32 from shared memory K-major only, A may come from registers",
    tma=("a", "b", "d", "a_edge"),
    tma_boxes=lambda c: {
        "a": (c["BM"] // c["CN"], c["BK"]),
        "a_edge": (64, c["BK"]),  # A again, in boxes of 64 rows: a tile past row M skips those outside
        "b": (c["BN"] // c["CM"], c["BK"]) if c["TB"] else (c["BK"], 32),  # rows n of K, or rows k of 32 n
        "d": (64, 32),  # the epilogue's pieces: 64 rows of D x 32 fp32
    },
    cluster=lambda c: (c["CM"] * c["CN"], 1, 1),
    persistent=True,
    min_capability=(9, 0),
    math="tf32",
    staged=True,
    # as tc09's: one 64 x 256 fp32 part a consumer warpgroup and block, and the tiles' counters
    workspace=lambda c, grid: (grid[0] * (c["BN"] // 64) * 64 * 256, grid[0] * (c["BN"] // 64)),
    splits_k=lambda p, c, blocks: _splits(p, c, blocks, c["CM"] * c["CN"], c["BM"] * c["CM"], c["BN"] * c["CN"]),
    extra_constraints=lambda p, c: _stream_k_steps_fit(p, c) if c["SK"] else None,
    layouts=("nn", "nt"),
)

# Stream-K's cost (tc09, and tc08 with SK = 1), in waves of whole tiles, where each tile takes `kt`
# K steps: STREAM_K_COST_STEPS steps of one tile's time -- every block writes one head part and
# reads one back (128 KB of fp32 each way), about 7 us at the ~0.68 us a step of a 128 x 256 bf16
# tile or a 256 x 128 TF32 tile in a single launch, as the traced fix-up measured (2.4 + 4.4 us a block)
# -- plus STREAM_K_COST_WAVES of a wave (runs starting mid-tile, parts' traffic in L2). Fitted on an
# H200 to 155 pairs of whole tiles against stream-K in the same rounds (2 to 12 waves; bf16, fp16,
# fp32 results, TF32), cost = waves x (stream-K time / whole-tile time) - tiles / slots:
# results/nvidia-h200/tune-skcost-20261124T1127*.json (2560-8192^2 and K = 2048, 8192 at four M x
# N) and every record since ceb9d27 with both; rms 0.06 waves, TF32's alone 0.05 + 16.6 / kt, the
# 16-bit ones' 0.13 + 9.3 / kt. The earlier 0.1 + 1.2 / waves (an H100 fit of squares, kernels of
# then) overstated it at 2-3 waves: it kept tc07 at 2560^2 and 3200-3328^2, where tc09 ran 4-6% ahead.
STREAM_K_COST_WAVES = 0.11
STREAM_K_COST_STEPS = 10.8


def stream_k_cost(kt: int) -> float:
    """What splitting the last waves along K costs, in waves of whole tiles of kt K steps each."""
    return STREAM_K_COST_WAVES + STREAM_K_COST_STEPS / kt


def stream_k_time(tiles: int, slots: int, kt: int) -> float:
    """A stream-K run's time in waves of whole tiles: the tiles spread evenly over the slots, plus
    the cost of splitting. tc09 and tc08's SK = 1 are taken where it is below whole tiles' time."""
    return tiles / slots + stream_k_cost(kt)


# With at most half a wave of tiles tc09 splits every tile over `split_ways` runs (kernels/common/
# tma.cuh, StreamK: the same rule, the same constant): as many as the slots allow, down to runs of
# SPLIT_MIN_STEPS K steps. The runs then add up the tile's parts together, a share each. Fitted to
# an H100 run (results/nvidia-h100-80gb-hbm3/tune-splitk-20261123T171114Z.json, 16 to 132 runs of
# 4 to 124 K steps): that and starting the runs cost about SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS x
# runs K steps of a whole 128 x 256 tile's time (11.7 us over 16 runs, 18-20 us over 128-132).
SPLIT_MIN_STEPS = 4
SPLIT_FIXED_STEPS = 16.0
SPLIT_RUN_STEPS = 0.1
# 'auto' splits only where the model puts tc09 at least 10% ahead of tc07: configs.tile_time
# overstates tc07's small one-wave runs (at 512 x 512 x 4096 tc07 took 19.2 us, tc09 split 21.0 us,
# where the models said 0.56 against 0.51 tile-times)
SPLIT_MARGIN = 0.9


def split_ways(tiles: int, slots: int, kt: int) -> int:
    """Runs each tile would be split over when 2 * tiles <= slots (and kt > 1)."""
    return min(slots // tiles, max(2, kt // SPLIT_MIN_STEPS))


def split_k_ways(tiles: int, slots: int, kt: int) -> int:
    """The kernels' rule (tma.cuh, split_k_ways): the runs each tile is split over, 0 for none --
    only with at most half a wave of tiles, two K steps or more, and where split_time is below 1."""
    if kt <= 1 or tiles < 1 or 2 * tiles > slots:
        return 0
    return split_ways(tiles, slots, kt) if split_time(tiles, slots, kt) < 1 else 0


def _splits(problem: GemmProblem, c: GemmConfig, blocks: int, cluster: int, tile_m: int, tile_n: int) -> bool:
    """Whether a SPLIT config of tc08 or tc09 splits this problem's cluster tiles (tile_m x tile_n)
    along K with `blocks` resident in clusters of `cluster`."""
    tiles = cdiv(problem.M, tile_m) * cdiv(problem.N, tile_n)
    return bool(c["SPLIT"]) and split_k_ways(tiles, blocks // cluster, cdiv(problem.K, c["BK"])) > 0


def split_time(tiles: int, slots: int, kt: int) -> float:
    """tc09's time with every tile split, in units of one whole tile's K steps: a run of
    KT / ways steps and the cost of splitting. The kernel splits only where this is below 1."""
    ways = split_ways(tiles, slots, kt)
    return (kt / ways + SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS * tiles * ways) / kt


def _stream_k_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """None where tc09 should serve instead of tc07: where tiles / slots + stream_k_cost(kt),
    tc09's time in units of one 128 x 256 tile, is less than configs.tile_time of tc07's own
    choice of tile (waves, with 128 x 256 tiles).

    History of the rule. On an H200 (results/nvidia-h200/tune-20261122T052201Z.json,
    bench-20261122T053339Z.json) stream-K won where tc07's waves leave much of the cluster-time
    idle -- 3072^3 0.84x cuBLAS against 0.75x, 5120^3 0.98x against 0.91x, 8192^3 1.04x against
    1.02x -- and lost at 4096^3 (0.93x against 0.99x); once its runs were aligned and its heads
    published late (a52f9cf, 0c7f1ea) it also won at 6144^3 (all 12 H200 comparisons,
    3c42ca5-c8c87c7). The rule was idle > 0.3, then 0.25, / waves. An H100 run of every tc07 tile
    (results/nvidia-h100-80gb-hbm3/tune-tiles-20261123T152942Z.json) put the cost at 0.68 waves at
    2560^2 (2 waves), 0.55 at 3072^2 (3), 0.32 at 4096^2, 0.33 at 5120^2, 0.23 at 6144^2 and 0.1
    at 8192^2 (16) -- falling with the number of waves, hence 0.1 + 1.2 / waves -- and showed the
    flat cost taking tc09 at 2560^2, where it lost (0.89x against 0.98x). With tc07's narrower
    tiles (configs.TC07_TILES) tc09 no longer serves 3072^2 (tc07's 128 x 192: 0.86x against 0.83x).
    Refitted on an H200 with the kernels since ceb9d27 (stream_k_cost): the cost follows the K
    steps a tile takes, not the waves -- the fix-up is a fixed time a block -- and is lower at
    2-3 waves than the H100 fit had it (tc09 1.02x-1.04x against tc07's 0.98x-0.99x at 2560^2)."""
    from .configs import tc07_tile

    slots = _sm_count(problem.device) // c["CM"]
    tiles = cdiv(problem.M, c["BM"] * c["CM"]) * cdiv(problem.N, c["BN"])
    kt = cdiv(problem.K, c["BK"])
    if slots and kt > 1 and 2 * tiles <= slots:  # every tile split along K, where that pays
        tc07_cfg, tc07_time = tc07_tile(problem)
        t = split_time(tiles, slots, kt)
        if t >= 1:
            return f"too few K steps ({kt}) to split {tiles} tiles: tc09 would run them whole, behind tc07"
        if t < SPLIT_MARGIN * tc07_time:
            return None
        return (f"splitting {tiles} tiles over {split_ways(tiles, slots, kt)} runs each ({t:.2f} tile-times) is not "
                f"clearly faster than tc07's {tc07_cfg['BM']} x {tc07_cfg['BN']} tiles ({tc07_time:.2f})")
    if slots == 0 or tiles <= slots:
        return "one wave of tiles or less, too many to split each (more than half a wave)"
    tc07_cfg, tc07_time = tc07_tile(problem)
    if stream_k_time(tiles, slots, kt) < tc07_time:
        return None
    if tc07_cfg["BN"] != c["BN"] or tc07_cfg["BM"] != c["BM"]:
        return f"tc07's {tc07_cfg['BM']} x {tc07_cfg['BN']} tiles finish sooner than splitting 128 x 256 ones would"
    waves = -(-tiles // slots)
    idle = (waves * slots - tiles) / (waves * slots)
    return (f"tc07's {waves} waves leave {idle:.0%} of the cluster-time idle, less than splitting costs "
            f"(~{stream_k_cost(kt) / waves:.0%})")


_SM_COUNTS: dict = {}


def _sm_count(device) -> int:
    """SMs of a CUDA device, or 132 (an H100/H200) where none can be asked (compile-only machines)."""
    key = (device.type, device.index)
    if key not in _SM_COUNTS:
        n = 132
        if device.type == "cuda" and torch.cuda.is_available():
            from .launch import sm_count

            n = sm_count(device.index if device.index is not None else torch.cuda.current_device())
        _SM_COUNTS[key] = n
    return _SM_COUNTS[key]


TC_09 = KernelSpec(
    id="tc09_stream_k",
    step=9,
    title="stream-K",
    idea="tc07 with the last, partial wave split along K over every cluster (and few tall-K tiles each split over many); split tiles summed in fp32 through a workspace",
    source="tensorcore/09_stream_k.cu",
    entry="tc_stream_k",
    params=tuple(Param("BN", 256, "columns of C a block (256: one m64n256k16 MMA a warpgroup)") if p.name == "BN" else p
                 for p in TC_07.params if p.name not in ("HO", "OB"))
    + (Param("SPLIT", 0, "1: few tiles with a tall K split along K over every SM (chosen where it splits); 0: never"),),
    block=_WS_BLOCK,
    # every SM, whatever the tile count (a persistent grid is capped at the blocks that fit): with
    # half a wave of tiles or less, the idle ones take a share of each tile's K steps
    grid=lambda M, N, c: (GRID_X_MAX // c["CM"] * c["CM"], 1, 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc09_smem,
    check_config=lambda c: _check_07_tc(c, bn=(256,), smem=_tc09_smem(c)) or _first_failure(
        (c["BM"] < 192 or c["SPLIT"] == 0, "BM = 192 has no split-K (SPLIT = 0): its code before setmaxnreg would call a subroutine")),
    seeds="issue 3: past tc07 -- stream-K (Osama et al., 2023) for the wave-quantisation loss measured in tc07",
    type_param=True,
    tma=("a", "b", "d"),
    tma_boxes=TC_07.tma_boxes,
    cluster=TC_07.cluster,
    persistent=True,
    min_capability=(9, 0),
    # one 64 x 256 fp32 part and one flag per consumer warpgroup and block
    workspace=lambda c, grid: (grid[0] * (c["BM"] // 64) * 64 * 256, grid[0] * (c["BM"] // 64)),
    splits_k=lambda p, c, blocks: _splits(p, c, blocks, c["CM"], c["BM"] * c["CM"], c["BN"]),
    staged=True,
    auto_skip=lambda p, c: _copies_pay(p, c) or _stream_k_pays(p, c),
    extra_constraints=lambda p, c: _stream_k_steps_fit(p, c) or _tc09_tall_tile_serves(p, c),
    layouts=TC_07.layouts,
    launch_registers=lambda c: 128 if c["BM"] == 192 else None,  # as tc07's 192-row tile
)

# tc10: skinny problems (a decode step's few tokens against a weight). The grid is one block a
# BW x NT tile of D (its columns on the MMA's M side, its few rows on N), times `skinny_runs` runs
# along K, so that the column tiles of a narrow layer still fill the SMs. Two blocks fit an SM, but
# the runs are counted for one block an SM, of at least 16 K steps: on an H200 at Llama 3's decode
# layers (results/nvidia-h200/probe-skinny-20261125T003110Z.json, bf16, y = x @ w.t(), 1-64 rows,
# ratios to cuBLAS in the same rounds) that grid with BW = 64 ran ahead of every other tried --
# geometric means 1.005 / 1.033 / 1.021 at 1 / 16 / 32 rows, against 0.98-1.00 / 0.99-1.03 /
# 0.94-1.02 for two blocks an SM, runs of 4 steps, or BW = 128. Fewer, longer runs leave fewer parts
# to add up at the end, and the last run of a tile adds them after everyone else has finished.
SKINNY_BLOCKS_PER_SM = 1
SKINNY_MIN_STEPS = 16  # K steps a run at least


def skinny_runs(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """The runs along K (gridDim.y) tc10 splits each tile's K steps into: enough for the tiles to
    fill the SMs' block slots, each run at least SKINNY_MIN_STEPS K steps long; 1 where the tiles
    alone fill them."""
    tiles = cdiv(problem.N, c["BW"]) * cdiv(problem.M, c["NT"])
    kt = cdiv(problem.K, c["BK"])
    slots = sms * SKINNY_BLOCKS_PER_SM
    if tiles >= slots or kt < 2 * SKINNY_MIN_STEPS:
        return 1
    return max(1, min(slots // tiles, kt // SKINNY_MIN_STEPS, GRID_YZ_MAX))


def skinny_blocks(problem: GemmProblem, c: GemmConfig, sms: int) -> int:
    """tc10's blocks for the problem: column tiles x row tiles x runs along K."""
    return cdiv(problem.N, c["BW"]) * cdiv(problem.M, c["NT"]) * skinny_runs(problem, c, sms)


def _tc10_smem(c: GemmConfig) -> int:
    return c["STAGES"] * (c["BW"] + c["NT"]) * c["BK"] * 2 + _barriers(c) + 16 + 1024  # (16: a flag a consumer)


def _check_10_tc(c: GemmConfig) -> str | None:
    return _first_failure(
        (c["BW"] in (64, 128), "BW must be 64 or 128 (one consumer warpgroup per 64 columns of D)"),
        (c["NT"] in (16, 32, 64, 128), "NT must be 16, 32, 64 or 128 (the N of one m64nNTk16 MMA: rows of D)"),
        (c["BK"] == 64, "BK must be 64 (one 128-byte swizzle row of K a stage)"),
        (c["STAGES"] >= 2, "STAGES must be at least 2"),
        (c["TB"] in (0, 1), "TB must be 0 (B row-major) or 1 (B stored transposed)"),
        (_tc10_smem(c) <= 227 * 1024, f"shared memory {_tc10_smem(c)} B exceeds 227 KB"),
    )


def _skinny_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes tc10 for problems of at most SKINNY_ANY_M rows, and up to SKINNY_M_MAX where its
    blocks (tiles x runs) fill at least SKINNY_FILL_MIN of the block slots of their waves, one block
    an SM: where it was measured ahead of tc07 and tc09 (configs.SKINNY_M_MAX)."""
    from .configs import SKINNY_ANY_M, SKINNY_FILL_MIN, SKINNY_M_MAX

    if problem.M > SKINNY_M_MAX:
        return f"{problem.M} rows: tc10 serves problems of at most {SKINNY_M_MAX} rows"
    if problem.M > SKINNY_ANY_M:
        sms = _sm_count(problem.device)
        blocks = skinny_blocks(problem, c, sms)
        slots = sms * SKINNY_BLOCKS_PER_SM
        fill = blocks / (cdiv(blocks, slots) * slots)
        if fill < SKINNY_FILL_MIN:
            return (f"{problem.M} rows: tc10's {blocks} blocks fill {fill:.0%} of the block slots of their waves "
                    f"(it serves {SKINNY_ANY_M + 1}-{SKINNY_M_MAX} rows from {SKINNY_FILL_MIN:.0%})")
    return None


TC_10 = KernelSpec(
    id="tc10_skinny",
    step=10,
    title="skinny: the few rows on the MMA's N side",
    idea="D^T = B^T A^T for a few rows of A (decode): B^T's columns on wgmma's M side, A's rows as its N (16-128), K split over the SMs and summed in fp32 by the last run of each tile",
    source="tensorcore/10_skinny.cu",
    entry="tc_skinny",
    params=(
        Param("BW", 64, "columns of D a block: 64 per consumer warpgroup (64 or 128)"),
        Param("NT", 16, "rows of D a block: the N of one m64nNTk16 MMA (16, 32, 64 or 128)"),
        Param("BK", 64, "K slice of one stage (64: one 128-byte swizzle row)"),
        Param("STAGES", 8, "shared buffers in the TMA ring"),
        Param("TB", 0, "1: B stored transposed ([N][K], e.g. w.t()), read K-major; 0: B row-major, read M-major (set from the problem)"),
    ),
    block=lambda c: ((c["BW"] // 64) * 128 + 32, 1, 1),  # the consumer warpgroups, then the producer warp
    grid=lambda M, N, c: (cdiv(N, c["BW"]) * cdiv(M, c["NT"]), 1, 1),
    dtypes=(torch.bfloat16, torch.float16),
    dynamic_smem=_tc10_smem,
    check_config=_check_10_tc,
    seeds="issue 3, past the ladder: a decode step's GEMM is a weight streamed from memory; swap the operands so its few rows are the MMA's N",
    type_param=True,
    tma=("a", "b"),
    tma_boxes=lambda c: {"a": (c["NT"], c["BK"]), "b": (c["BW"], c["BK"]) if c["TB"] else (c["BK"], 64)},
    min_capability=(9, 0),
    # a BW x NT fp32 part a block of a split grid, a counter a consumer warpgroup and column tile
    workspace=lambda c, grid: (grid[0] * grid[1] * c["BW"] * c["NT"], grid[0] * (c["BW"] // 64)) if grid[1] > 1 else (0, 0),
    k_runs=skinny_runs,
    auto_skip=_skinny_pays,
    layouts=("nn", "nt"),
    tags=("skinny",),  # for a few rows only: the default benchmark's squares leave it out
)

# Tensor-core steps in order (joined only after `gemmlab check` passes on a GPU), and pending ones.
# tc01-tc04: every check case (bf16 and fp16) and the GPU tests on an H200, 2026-11-22.
# tc05-tc08: the GPU tests (366 cases of theirs) and check subsets on an H100, 2026-11-22; the full
# check in the run whose records are committed.
TC_LADDER: tuple[KernelSpec, ...] = (TC_01, TC_02, TC_03, TC_04, TC_05, TC_06, TC_07, TC_08, TC_09, TC_10)
TC_PENDING: tuple[KernelSpec, ...] = ()


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

# Pending kernels are reachable by name (so `gemmlab check -k` and the GPU tests can try them),
# never by kernel='auto' or in the default lists.
KERNELS = KERNELS + TC_LADDER
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
