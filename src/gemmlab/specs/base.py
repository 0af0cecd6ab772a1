"""What a kernel spec is: its template parameters (Param), a config of them (GemmConfig), the
KernelSpec that says where a kernel's source is, how it is launched and which problems it can
serve, and the checks every family shares (hardware limits, what TMA needs of an operand)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

import torch

from ..device import capability
from ..problem import GemmProblem

GRID_YZ_MAX = 65535
GRID_X_MAX = 2**31 - 1
MAX_THREADS = 1024
STATIC_SMEM_MAX = 48 * 1024
# Words of the refusals for a stated constraint (stated_constraint): tma_constraints', max_n's.
_TMA_LIMIT = "TMA needs"
_COLUMNS_LIMIT = "serves D of at most"


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
    # The arithmetic of float32 problems: "fp32" (FFMA), "tf32" (TF32 tensor cores, only when the
    # caller passes precision="tf32") or "3xtf32" (three TF32 products a product, fp32's accuracy on
    # the tensor cores: precision="3xtf32"). 16-bit kernels ignore it.
    math: str = "fp32"
    # True when gemm() copies an operand whose address or row stride TMA cannot take into a padded,
    # aligned buffer, so the caller's layout never rules the kernel out; aligned operands are used
    # as they are. TF32 (a float32 caller cannot be asked to pad) and the 16-bit steps 'auto' ends
    # on (tc07, tc09: at odd sizes such as 1022 or 6132 a copy costs far less than tc04's cp.async
    # loads would; 'auto' weighs that with configs.persistent.copies_pay).
    staged: bool = False
    # Kernels that pass partial results between blocks (stream-K, split K) take a workspace after D:
    # fp32 elements and uint32 flags, their counts from the config and the grid launched.
    # None from the callable: this config takes no workspace (nothing allocated; null pointers where
    # the kernel has the parameters, none where it has not).
    workspace: Callable[[GemmConfig, Dim3], tuple[int, int] | None] | None = field(default=None, repr=False)
    # The workspace pointers come last, after the bias, instead of after D: step 15, whose one-run
    # builds thus keep the parameter offsets, and the SASS, they had before it could split K.
    workspace_last: bool = False
    # Kernels whose runs along K may leave their fp32 parts in the workspace for a second kernel to
    # add and write D (step 12 with RED = 1): whether a config launched on this grid does. gemm() then
    # launches that reduction (gemmlab.reduce) behind the kernel, on the same stream.
    parts_reduced: Callable[[GemmConfig, Dim3], bool] | None = field(default=None, repr=False)
    # Kernels whose grid splits K into gridDim.y runs (tc10): how many, for a problem, config and
    # the device's SM count; the grid is spec.grid's with that many rows. None (as the field, or as
    # what it returns for a config that does not split, step 15's SPLIT = 0): gridDim.y as given.
    k_runs: Callable[[GemmProblem, GemmConfig, int], int | None] | None = field(default=None, repr=False)
    # Persistent kernels that split few tall-K tiles along K over every SM: whether they would for
    # this problem, config and number of resident blocks. gemm() then launches every resident block
    # (the kernel reads its slots from the grid), and otherwise no more blocks than there are tiles.
    splits_k: Callable[[GemmProblem, GemmConfig, int], bool] | None = field(default=None, repr=False)
    # True for tc11 (3xTF32): gemm() first splits A and B into TF32 big and small parts, K-major,
    # in scratch buffers of its own (gemmlab.split, kernels/tensorcore/split_tf32.cu), which the
    # kernel's TMA maps read; the split reads every layout, address and stride as it lies, so the
    # caller's A and B are never copied or refused (the kernel reads them itself only to recompute
    # non-finite results in fp32).
    split_operands: bool = False
    # The layouts of A and B (GemmProblem.layout) the kernel reads where they lie; for any other,
    # gemm() hands it row-major copies of the transposed operands. "nt" (B stored transposed, as
    # x @ w.t() passes it) takes a TB = 1 config, "tn" (A stored transposed, as dy.t() @ x passes
    # it) a TA = 1 config, "tt" both (configs.config_for sets them).
    layouts: tuple[str, ...] = ("nn",)
    # The most columns of D a kernel serves (step 14's 16: a GEMV's few), None: any. why_not turns
    # wider problems down; the GPU tests narrow their shapes to it.
    max_n: int | None = None
    # The register count a thread starts with, where a config compiles for more than its block can
    # launch with and the cubin is rewritten (gemmlab.cubin: tc07's 192-row tile); None: as compiled.
    launch_registers: Callable[[GemmConfig], int | None] = field(default=lambda cfg: None, repr=False)
    # Kernels that fuse a bias and an activation into their epilogue (gemmlab::post): templated on
    # POST (activations.post_code) after their config, and taking the bias's address after beta.
    epilogues: bool = False

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
                        out_dtype: torch.dtype | None = None, post: int = 0) -> str:  # fmt: skip
        """The template instance: for kernels templated on types, the input type then the type of
        C and D (out_dtype: the input type, or float32 for fp32 output); post: the fused epilogue
        (activations.post_code), given after the config where it is not 0."""
        args = [str(v) for _, v in cfg.values]
        if post:
            if not 8 <= post <= 12:
                raise ValueError(f"POST is 0 (the plain epilogue) or 8 + an activation's code (activations.post_code), not {post!r}")
            if not self.epilogues:
                raise ValueError(f"{self.id} does not fuse a bias or an activation into its epilogue")
            args.append(str(post))
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
        if self.split_operands:  # the pre-pass reads any strides
            return True
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
        if self.max_n is not None and problem.N > self.max_n:
            return f"{self.id} {_COLUMNS_LIMIT} {self.max_n} columns, not N={problem.N}"
        if problem.result_dtype != problem.dtype and not self.type_param:
            return f"{self.id} writes {str(problem.dtype).removeprefix('torch.')} results only"
        if not self.builds_for(cfg, problem.dtype, problem.result_dtype):
            names = ", ".join(str(d).removeprefix("torch.") for d in self.result_types(cfg))
            return f"this config of {self.id} writes {names} results, not {str(problem.result_dtype).removeprefix('torch.')}"
        if problem.dtype == torch.float32 and problem.precision != self.math:
            if self.math == "tf32":
                return f"{self.id} multiplies float32 as TF32: pass precision='tf32' to allow it"
            if self.math == "3xtf32":
                return f"{self.id} multiplies float32 as three TF32 products (fp32 accuracy): pass precision='3xtf32' to use it"
            return f"{self.id} computes in full fp32; precision='{problem.precision}' asks for another kernel"
        cc = capability(problem.device) if self.min_capability > (0, 0) else None
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
        tma_reason = tma_constraints(problem, self.tma) if self.tma and not (self.staged or self.split_operands) else None
        return tma_reason or self.extra_constraints(problem, cfg)


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
            return (f"{_TMA_LIMIT} operand {name} 16-byte aligned with a row stride that is a multiple of {16 // size} "
                    f"elements (16 bytes); got row stride {ld}" + (f", address {ptr:#x}" if ptr % 16 else ""))
    return None


def stated_constraint(reason: str) -> bool:
    """Whether a kernel's refusal names a stated constraint -- operands TMA cannot read, a D wider
    than it serves -- rather than a fault: `gemmlab check` and the benchmark record such a case as
    declined ('auto' takes another kernel), not failed."""
    return _TMA_LIMIT in reason or _COLUMNS_LIMIT in reason


def operands_to_copy(problem: GemmProblem) -> tuple[str, ...]:
    """The inputs ("a", "b") a staged kernel must copy for TMA to read them; none without K steps."""
    if problem.is_empty or problem.K == 0:
        return ()
    return tuple(n for n in ("a", "b") if tma_constraints(problem, (n,)))


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


def _first_failure(*checks: tuple[bool, str]) -> str | None:
    """The message of the first failed (ok, message) check, or None when all pass."""
    return next((msg for ok, msg in checks if not ok), None)

