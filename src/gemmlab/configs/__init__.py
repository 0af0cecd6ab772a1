"""Problem -> config, and the choice between kernels.

Configs are data: a kernel runs its registry defaults unless a rule below, taken from a tuning
run committed under results/<gpu>/tune-*.json, says otherwise for the problem's size; tc07's
block tile is chosen by a model of the waves of tiles each candidate fills (tile_time). 'auto'
takes the latest ladder step that can serve the problem -- the benchmark records show it the
fastest registered step at the default shapes -- except where the step's spec says it does not
pay for this problem (auto_skip: tc09's stream-K only where tc07's last wave idles). Each
family's rules and models are in its own module: persistent (tc07, tc09), tf32 (tc08), skinny
(tc10), fp32 (FP32 steps 12-15); rules holds what they share."""

from __future__ import annotations

from dataclasses import replace

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig, KernelSpec
from .fp32 import (
    few_columns_config, few_columns_configs, few_columns_pays, few_rows_config, few_rows_configs, few_rows_pays,
    multistage_config, multistage_configs, multistage_pays, split_k_config, split_k_pays, split_k_tiles,
    transposed_b_in_place, whole_tile_config,
)
from .persistent import TC07_TILES, TILE192_DEEP, copies_pay, stream_k_pays, tc07_tile
from .rules import SIZE_RULES, _problem_config, _rule_config, _size_rule_config
from .skinny import SKINNY_DEEP_STAGES, SKINNY_M_MAX, SKINNY_STAGES, skinny_config, skinny_pays
from .tf32 import TC08_TILES, _narrow_config, _tf32_small_tile, _tf32_stream_k_config


def config_for(spec: KernelSpec, problem: GemmProblem) -> GemmConfig:
    if spec.id == "tc07_persistent_cluster":
        cfg = tc07_tile(problem)[0]
    elif spec.id == "tc10_skinny":
        cfg = skinny_config(problem)
    elif spec.id == "sgemm_12_split_k":
        cfg = split_k_config(problem)
    elif spec.id == "sgemm_13_few_rows":
        cfg = few_rows_config(problem)
    elif spec.id == "sgemm_14_few_columns":
        cfg = few_columns_config(problem)
    elif spec.id == "sgemm_15_multistage":
        cfg = multistage_config(problem)
    elif spec.id == "sgemm_11_warp_tile":
        cfg = whole_tile_config(problem)
    else:
        cfg = _split_config(spec, problem, _narrow_config(spec, problem, _size_rule_config(spec, problem)))
        cfg = _tf32_small_tile(spec, problem, _tf32_stream_k_config(spec, problem, cfg))
    return _problem_config(spec, problem, cfg)


# 'auto' passes over a kernel for problems where its rule says it does not pay (the kernel still
# serves them when named): None, or the reason, from the problem and the config.
AUTO_SKIP = {
    "tc07_persistent_cluster": copies_pay,
    "tc09_stream_k": lambda p, c: copies_pay(p, c) or stream_k_pays(p, c),
    "tc10_skinny": skinny_pays,
    "sgemm_12_split_k": split_k_pays,
    "sgemm_13_few_rows": few_rows_pays,
    "sgemm_14_few_columns": few_columns_pays,
    "sgemm_15_multistage": multistage_pays,
}


def auto_skip(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> str | None:
    """Why 'auto' passes over spec for this problem (AUTO_SKIP), or None."""
    rule = AUTO_SKIP.get(spec.id)
    return rule(problem, cfg) if rule else None


# A kernel with a SPLIT parameter (tc08, tc09) has its split-K code in its SPLIT = 1 instantiation only:
# compiled into every launch, it cost the whole tiles 2-4% (H100, TF32, 0.948x against 0.970x
# cuBLAS at 4096^3, 1.050x against 1.094x at 5120^3: results/nvidia-h100-80gb-hbm3/
# tune-tf32split-20261123T181921Z.json). The split one serves where it splits (spec.splits_k).
def _split_config(spec: KernelSpec, problem: GemmProblem, cfg: GemmConfig) -> GemmConfig:
    if getattr(spec, "splits_k", None) is None or cfg.as_dict().get("SPLIT") != 0:
        return cfg
    split = _rule_config(spec, tuple(sorted({**cfg.as_dict(), "SPLIT": 1}.items())))
    return split if spec.splits_k(problem, split, sm_count_of(problem.device)) else cfg


def configs_in_use(spec: KernelSpec) -> list[GemmConfig]:
    """Every config 'auto' can launch a kernel with: its default, those of its size rules and, for
    tc07, its other tiles; step 12's candidate tiles (each with RED = 0 and 1), step 13's config for each row count MR and step
    14's for each column count NC;
    for tc08 and tc09 their split instantiations, tc08's single blocks for narrow problems and its
    tiles for small ones (TC08_TILES)."""
    out = [spec.default_config()]
    for _, _, overrides in SIZE_RULES.get(spec.id, ()):
        out.append(_rule_config(spec, tuple(sorted(overrides.items()))))
    if spec.id == "tc07_persistent_cluster":
        out += [_rule_config(spec, tuple(sorted(o.items()))) for o, _ in TC07_TILES]
        out += [_rule_config(spec, tuple(sorted({**o, "CM": 2}.items()))) for o, _ in TC07_TILES
                if (o.get("BM", 128), o.get("BN")) in ((128, 128), (128, 192))]  # pairs: _tile128_clusters, _tile192_clusters
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), **TILE192_DEEP}.items()))) for c in out
                if (c["BM"], c["BN"]) in ((128, 192), (192, 128))]  # _tile192_deep, _tall_tile_deep
    if spec.id == "sgemm_12_split_k":
        out = split_k_tiles(1) + split_k_tiles(1, 1) + split_k_tiles(0)
    if spec.id == "sgemm_13_few_rows":
        out = few_rows_configs()
    if spec.id == "sgemm_14_few_columns":  # one config a column count NC
        out = few_columns_configs()
    if spec.id == "sgemm_15_multistage":
        out = multistage_configs()
    if spec.id == "tc10_skinny":
        out += [_rule_config(spec, (("NT", nt), ("STAGES", st))) for nt, st in SKINNY_STAGES.items()
                if 16 < nt <= SKINNY_M_MAX]  # fmt: skip
        out += [_rule_config(spec, (("NT", nt), ("STAGES", st))) for nt, st in SKINNY_DEEP_STAGES.items()]
    out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "CN": 1}.items()))) for c in out if c.as_dict().get("CN", 1) > 1]
    if getattr(spec, "splits_k", None) is not None:  # (the CPU ladder's specs have none)
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "SPLIT": 1}.items()))) for c in out if c["SPLIT"] == 0]
    if spec.id == "tc08_tf32":  # tiles for small problems (TC08_TILES); stream-K over the last waves
        out += [_rule_config(spec, tuple(sorted({**spec.default_config().as_dict(), **o}.items()))) for o, _, _ in TC08_TILES]
        out.append(_rule_config(spec, tuple(sorted({**spec.default_config().as_dict(), "SK": 1}.items()))))
    if "EPI" in spec.default_config().as_dict():  # each again with the lean epilogue (epilogue_for)
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "EPI": 0}.items()))) for c in out if c["TMA_STORE"]]
    params = spec.default_config().as_dict()  # (tc11 reads every layout through its pre-pass: no TA, TB)
    if "nt" in getattr(spec, "layouts", ()) and "TB" in params:  # each again for a B stored transposed
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "TB": 1}.items()))) for c in out]
    if "tn" in getattr(spec, "layouts", ()) and "TA" in params:  # and for an A stored transposed
        out += [_rule_config(spec, tuple(sorted({**c.as_dict(), "TA": 1}.items()))) for c in out]
    return out


_CHOICES: dict[tuple, tuple[KernelSpec, GemmConfig]] = {}
_CHOICES_MAX = 4096


def _choice_key(problem: GemmProblem, kernel: str) -> tuple:
    """Everything a kernel's constraints and config may look at: sizes, dtypes and precision,
    whether beta is 0, leading dimensions and the 16-byte alignment of every operand (not the
    addresses themselves)."""
    a, b, c, d = problem.a, problem.b, problem.c, problem.d
    return (
        kernel, problem.dtype, problem.out_dtype, problem.precision, problem.M, problem.N, problem.K, problem.beta != 0,
        a.ld, a.ptr % 16, a.trans, b.ld, b.ptr % 16, b.trans,
        None if c is None else (c.ld, c.ptr % 16),
        None if d is None else (d.ld, d.ptr % 16),
    )  # fmt: skip


def select(problem: GemmProblem, kernel: str = "auto", device: str | None = None) -> tuple[KernelSpec, GemmConfig]:
    """The kernel and config that will serve the problem, or a ValueError saying why none can.
    device: the ladder to choose from ('cuda' or 'cpu'); default the tensors' device type.
    Choices are memoised on _choice_key, so repeated calls of one shape skip the search."""
    device = device or problem.device.type
    key = (_choice_key(problem, kernel), device)
    hit = _CHOICES.get(key)
    if hit is None:
        hit = _select(problem, kernel, device)
        if len(_CHOICES) >= _CHOICES_MAX:
            _CHOICES.clear()
        _CHOICES[key] = hit
    return hit


def _in_place(spec: KernelSpec, problem: GemmProblem) -> GemmConfig | None:
    """spec's config for a problem of transposed views, where it reads that layout where it lies."""
    if problem.layout not in getattr(spec, "layouts", ()):
        return None
    native = config_for(spec, problem)
    return native if spec.why_not(problem, native) is None else None


# precision="3xtf32" with K below this goes to the FFMA ladder under kernel='auto': at K = 1 the
# split's dropped terms cost about three times SGEMM's single rounding (docs/ladder/tc11-3xtf32.md,
# emulated; from K = 64 on the split is the more accurate), and so few products a result give the
# tensor cores nothing to win. FFMA is fp32 arithmetic, which is what 3xtf32 promises.
SPLIT_TF32_MIN_K = 33


def _select(problem: GemmProblem, kernel: str, device: str) -> tuple[KernelSpec, GemmConfig]:
    if kernel == "auto" and problem.precision == "3xtf32" and problem.K < SPLIT_TF32_MIN_K:
        return _select(replace(problem, precision="fp32"), kernel, device)
    if problem.layout != "nn":
        if kernel != "auto":  # a named kernel that reads this layout in place serves it as it is
            spec = registry.get(kernel)
            native = _in_place(spec, problem) if spec.device == device else None
            if native is not None:
                return spec, native
        # The kernel the row-major problem gets; it reads this layout in place where it can, and is
        # otherwise given row-major copies (gemm() makes them where spec.layouts lacks the layout).
        spec, cfg = _select(problem.row_major(), kernel, device)
        if kernel == "auto" and transposed_b_in_place(problem, spec):  # fp32 x @ w.t(): w where it lies
            split = registry.get("sgemm_12_split_k")
            native = _in_place(split, problem)
            if native is not None:
                return split, native
        return spec, _in_place(spec, problem) or cfg
    if kernel != "auto":
        spec = registry.get(kernel)
        if spec.device != device:
            raise ValueError(
                f"kernel {kernel!r} runs on {spec.device}, not {device}; "
                + ("pass device='cpu' for the CPU ladder" if spec.device == "cpu" else "use a GPU kernel or kernel='auto'")
            )
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg)
        if reason:
            raise ValueError(f"kernel {kernel!r} cannot serve {problem.shape}: {reason}; use kernel='auto'")
        return spec, cfg
    reasons = []
    ladder = registry.kernels(device=device)
    for spec in sorted(ladder, key=lambda k: -k.step):
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg) or auto_skip(spec, problem, cfg)
        if reason is None:
            return spec, cfg
        reasons.append(reason)
    dtypes = sorted({str(d).removeprefix("torch.") for k in ladder for d in k.dtypes})
    if problem.dtype not in {d for k in ladder for d in k.dtypes}:
        where = " on the CPU (the CPU ladder; CUDA tensors take float32, bfloat16 and float16)" if device == "cpu" else ""
        raise TypeError(f"no registered kernel takes {str(problem.dtype).removeprefix('torch.')}{where}; "
                        f"supported dtypes: {', '.join(dtypes)}")  # fmt: skip
    raise ValueError(f"no registered kernel can serve {problem.shape}: " + "; ".join(reasons))
