"""gemmlab conv-fuzz: random convolutions drawn into conv02's, conv03's and conv04's risky regimes,
checked against float64.

The GEMM harness (gemmlab.fuzz) draws matrices; a convolution's risks lie in its geometry, so this
one draws geometries: output rows (N*P*Q) whole multiples of conv03's 64- to 256-pixel tiles and
one either side, output channels around 64, 128, 192 and 256 and odd ones (1, 7, 130, 300), short
reductions (1x1 filters over 8 to 64 channels), enough output pixels that each of conv03's
persistent blocks walks several tiles, and odd sizes: prime images, stride 2 and 3, dilation,
asymmetric padding, 'same' with even filters; for conv04 ("gather") the same regimes over few input
channels (1-7 and other counts no multiple of 8) into at most 256 output channels, and a CNN's
stem (7x7 at stride 2 over 3 channels). Every case comes from its own seed (geometry, memory
formats of x and of the weight, dtype, algorithm, bias, a NaN or Inf in x or w, the input values;
for a quarter of conv03's cases one of its tiles forced through conv03.TILE, for a quarter its
staged TMA-store epilogue forced on and for a quarter of the rest its register epilogue forced,
through conv03.TMA_STORE),
so any one can be run again alone (`gemmlab conv-fuzz --replay '<case>'`). A share of the forward
cases are grouped (groups > 1: the drawn geometry is one group's, and every group runs on the
algorithm drawn, each on its channel slices of x and w; conv02's, in one launch of its grouped
build, half of them with groups of 4k + 4 channels; conv02's gradient cases may be grouped too,
its GroupedConv). The cases and their
drawing live in gemmlab.fuzz_conv_cases; this module runs and judges them.

Each case: x and w drawn fresh (normal; w scaled by 1/sqrt(C*R*S)), the memory the result will
land in filled with NaN first (freed, so that the caching allocator hands it back), then
gemmlab.conv2d(algorithm=...) under no_grad. The result is compared with float64 (torch's own
convolution, cuDNN off: explicit zero padding, im2col and DGEMM, so a zero in the padding times an
Inf in w is NaN there as in our kernels) and so is cuDNN's in the case's dtype: a case is wrong
where NaN or Inf appears or vanishes, or where an error (reference.error_terms: rel_fro and
max_scaled) exceeds both the dtype's tolerance and BASELINE_FACTOR (gemmlab.fuzz_loop) times cuDNN's own error. Where
the algorithm drawn cannot serve a geometry (C not a multiple of 8, the TMA's limits, a GPU before
Hopper, a filter or output channels no conv04 build holds), the case falls back (tma, then
implicit, then gather, then im2col, as algorithm="auto" chooses) and the refusal is counted, never
judged. The errors are queued on the GPU and read back in batches, as gemmlab.fuzz does.

A quarter of the conv02, conv03, conv04 and conv05 cases (ConvCase.grad; smaller, and without NaN or Inf)
take a backward pass too: x, w and the bias require grad, conv2d runs under autograd (its activation
applied by torch) and y.backward(dY), dY fresh normal values in y's dtype; dx, dw and db are
judged as y is, against float64 gradients (aten's convolution backward with cuDNN off, through the
activation's derivative at the float64 pre-activation) and beside cuDNN's in the case's dtype,
through the same error terms, tolerance and BASELINE_FACTOR. A gradient case is wrong where any
of y, dx, dw and db is, and its `why` names which. Its errors queue with the others (32 terms
where a forward case has 8).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
import itertools
import math
import random
from typing import Callable

import torch
import torch.nn.functional as F

from .activations import ACTIVATIONS, post_code
from .conv import conv2d, gather_why_not, group_slices, implicit_gemm_why_not, tma_why_not
from .fuzz import run_activation
from .fuzz_loop import Summary as RunSummary, drive, reasons
from .fuzz_conv_cases import (ALGORITHM_WEIGHTS, DTYPES, FALLBACK, REGIMES, STEPS, ConvCase, _gather_dgrad_config,
                               _im2col_problem, _wgrad_problem, draw, why_not)  # fmt: skip
from .reference import error_terms, reference_post, tolerance
from .conv05 import depthwise_why_not, narrow_groups_why_not
from .conv_grouped import grouped_why_not
from .specs.conv import (CONV03_TILES, CONV_02, CONV_03, CONV_04, CONV_05, CONV_06, conv02_grouped_config, conv03_config,
                         conv03_tile_config, conv04_config, conv05_vec, conv06_config)  # fmt: skip

# (the cases and their drawing, imported here too: fuzz_conv.draw, fuzz_conv.ConvCase)
__all__ = ["ALGORITHM_WEIGHTS", "DTYPES", "REGIMES", "ConvCase", "draw", "why_not", "run_activation", "run", "replay",
           "judge", "start"]  # fmt: skip
POISON_BLOCKS = 4  # NaN blocks the size of the result, freed before the call: x's and w's copies may take some


# ---- Building and running a case ----------------------------------------------------------------


@dataclass
class Built:
    x: torch.Tensor
    w: torch.Tensor
    bias: torch.Tensor | None
    dy: torch.Tensor | None = None  # a gradient case's dY, [N, K, P, Q]


def build(case: ConvCase, device: str = "cuda") -> Built:
    """The case's tensors: x, w (scaled by 1/sqrt(C*R*S), C a group's) and the bias drawn from a generator
    seeded by the case, in its dtype and memory formats, the special value placed; for a gradient
    case dY too (normal, in the dtype and the memory format conv2d's result takes)."""
    dtype = DTYPES[case.dtype]
    gen = torch.Generator(device=device)
    gen.manual_seed(case.seed)
    x = torch.randn(case.N, case.in_channels, case.H, case.W, generator=gen, device=device).to(dtype)
    w = torch.randn(case.out_channels, case.C, case.R, case.S, generator=gen, device=device)
    w = (w / math.sqrt(case.C * case.R * case.S)).to(dtype)
    bias = torch.randn(case.out_channels, generator=gen, device=device).to(dtype) if case.bias else None
    dy = None
    if case.grad:  # (drawn last, so that x, w and the bias are what a forward case of this seed gets)
        g = case.geometry()
        dy = torch.randn(case.N, case.out_channels, g["P"], g["Q"], generator=gen, device=device).to(dtype)
    if case.special:
        what, where = case.special.split("-")
        target = x if where == "x" else w
        at = random.Random(f"place {case.seed}")
        index = tuple(at.randrange(n) for n in target.shape)
        target[index] = math.nan if what == "nan" else -math.inf if sum(index) % 2 else math.inf
    fmt = lambda cl: torch.channels_last if cl else torch.contiguous_format  # noqa: E731
    if dy is not None:
        dy = dy.contiguous(memory_format=fmt(case.x_channels_last or case.w_channels_last))
    return Built(x.contiguous(memory_format=fmt(case.x_channels_last)),
                 w.contiguous(memory_format=fmt(case.w_channels_last)), bias, dy)  # fmt: skip


def serve(case: ConvCase, t: Built, algorithms: tuple[str, ...] | None = None) -> ConvCase | None:
    """The case with the first algorithm (its own, then FALLBACK's among `algorithms`) whose
    conv2d check accepts these tensors on this device -- conv.tma_why_not also asks the device --
    or None where none does. A gradient case that lands on im2col checks its forward pass alone."""
    reasons = [case.refused] if case.refused else []
    for algorithm in (case.algorithm, *FALLBACK[case.algorithm]):
        if algorithms is not None and algorithm not in algorithms:
            continue
        one_launch = algorithm == "implicit" and case.groups > 1  # conv02's grouped build (gemmlab.conv_grouped)
        why = ((depthwise_why_not if case.C == 1 else narrow_groups_why_not)(t.x, t.w, case.groups) if algorithm == "depthwise" else
               grouped_why_not(t.x, t.w, case.groups) if one_launch else None)  # (one call)  # fmt: skip
        for x, w, bias in (group_views(case, t, i) for i in range(case.groups) if algorithm in STEPS and not one_launch):
            if algorithm == "tma":
                why = tma_why_not(x, w, bias, *case.g_args)
            elif algorithm == "implicit":
                why = implicit_gemm_why_not(x, w, bias)
            elif algorithm == "gather":
                why = gather_why_not(x, w, bias, *case.g_args)
            if why is not None:
                break
        if why is None:
            if algorithm == case.algorithm:
                return case
            return replace(case, algorithm=algorithm, drawn=case.drawn or case.algorithm, refused="; ".join(reasons),
                           tile=None, grad=case.grad and algorithm != "im2col", tma_store=False,
                           register_store=False)  # fmt: skip
        reasons.append(f"{algorithm}: {why}")
    return None


def group_views(case: ConvCase, t: Built, i: int) -> tuple:
    """Group i's x, w and bias: the channel slices conv2d hands that group's own call."""
    return group_slices(t.x, t.w, t.bias, case.groups, i)


def _staged(case: ConvCase) -> bool:
    """Whether conv03 runs the case with its staged TMA-store epilogue on (conv03.staged_stores)."""
    from . import conv03

    return not case.register_store and (case.tma_store or conv03.TMA_STORE)


def poison(numel: int, dtype: torch.dtype, device: str = "cuda") -> None:
    """Blocks of NaN the size of a result, freed: the caching allocator hands the best fit, one of
    these, to the result, so an element the kernel never writes stays NaN. (Best effort: a freed
    block merges with free neighbours, and a result that lands elsewhere holds an earlier case's
    values, which are as wrong here; a block of this size left by an earlier case is one of those
    the NaN fills.)"""
    blocks = [torch.full((numel,), math.nan, dtype=dtype, device=device) for _ in range(POISON_BLOCKS)]
    del blocks


def _as_rows(y: torch.Tensor) -> torch.Tensor:
    """[N, K, P, Q] as the GEMM's [N*P*Q, K] (NHWC order): the bias runs along the columns."""
    return y.permute(0, 2, 3, 1).reshape(-1, y.shape[1])


def _as_image(rows: torch.Tensor, g: dict) -> torch.Tensor:
    """_as_rows undone: [N*P*Q, K] as [N, K, P, Q] (a view; K every group's output channels)."""
    return rows.reshape(g["N"], g["P"], g["Q"], -1).permute(0, 3, 1, 2)


def _forward64(case: ConvCase, t: Built) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The float64 reference before the activation, as rows [N*P*Q, K]: (conv(x, w) + bias, its
    scale conv(|x|, |w|) + |bias|, the norm rel_fro is taken against: the larger of its own and its
    terms'). It pads x with zeros itself and runs with cuDNN off (torch's im2col and DGEMM)."""
    g = case.geometry()
    top, bottom, left, right = g["pads"]
    kw = dict(stride=g["stride"], dilation=g["dilation"], groups=case.groups)
    x64 = F.pad(t.x.double().contiguous(), (left, right, top, bottom))
    w64 = t.w.double().contiguous()
    with torch.backends.cudnn.flags(enabled=False):
        ref = _as_rows(F.conv2d(x64, w64, **kw))
        scale = _as_rows(F.conv2d(x64.abs(), w64.abs(), **kw))
        # ||T||^2 = sum over outputs of sum_j (x_j w_jk)^2: one convolution of x^2 with sum_k w^2 (the
        # k of each group, over that group's channels)
        clean = lambda v: torch.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)  # noqa: E731
        w2 = clean(w64).square().reshape(case.groups, case.K, *w64.shape[1:]).sum(1)
        terms = F.conv2d(clean(x64).square(), w2, **kw).sum().sqrt()
    ref, scale = reference_post(ref, scale, t.bias, None)
    norm = torch.maximum(torch.linalg.vector_norm(ref.where(torch.isfinite(ref), torch.zeros_like(ref))), terms)
    return ref, scale, norm


def _errors(case: ConvCase, t: Built, y: torch.Tensor, forward: tuple | None = None) -> torch.Tensor:
    """[ours: rel_fro, max_scaled, appeared, vanished; cuDNN's four] without a sync, against
    _forward64's reference (forward: one computed already) through the activation."""
    ref, scale, norm = forward if forward is not None else _forward64(case, t)
    ref, scale = reference_post(ref, scale, None, case.activation)
    ours = error_terms(_as_rows(y), ref, scale, norm)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        theirs = F.conv2d(t.x, t.w, t.bias, *case.g_args, groups=case.groups)
    if case.activation:
        theirs = ACTIVATIONS[case.activation](theirs)
    return torch.cat([ours, error_terms(_as_rows(theirs), ref, scale, norm)])


# ---- A gradient case's checks -------------------------------------------------------------------

GRADIENTS = ("dx", "dw", "db")  # in the order of their error terms
KINK_SLACK = 1e-5  # of the pre-activation's scale: this near 0, relu's derivative may rightly take either side


def _output_grad(case: ConvCase, t: Built, forward: tuple) -> torch.Tensor:
    """The dY a gradient case runs with: t.dy, zeroed where relu follows and the float64
    pre-activation (forward: _forward64's) lies within KINK_SLACK of its scale from 0, or below the
    dtype's smallest normal value (which fp16 may round to 0). There relu's derivative jumps from 0
    to 1, and a kernel's fp32 sum may rightly land on the other side of 0 from float64's; with dY
    zero there, either side gives the same gradients."""
    if case.activation != "relu":
        return t.dy
    z, scale, _ = forward
    near = z.abs() <= KINK_SLACK * scale + torch.finfo(t.dy.dtype).smallest_normal
    return t.dy.masked_fill(_as_image(near, case.geometry()), 0)


def _grads64(case: ConvCase, t: Built, forward: tuple, dy: torch.Tensor) -> dict[str, tuple]:
    """The float64 gradients at dY by name (GRADIENTS), each as (the gradient, its scale, the norm
    rel_fro is taken against). dY goes through the activation's derivative at the float64
    pre-activation z (G = dY act'(z)), then through aten's convolution backward (cuDNN off; x padded
    with zeros, dx cropped back). The scale is the same gradients of |x| and |w| at
    |dY| (|act'(z)| + |z|): a kernel takes the derivative at a z rounded to its dtype, which moves
    it by |act''| |z| times that rounding, and |act''| < 1 for each activation (gelu's is 0.8 at
    most). The norm is the larger of the gradient's own and that of the terms summed into it (x^2
    and w^2 at the scale's square), as the forward's."""
    g = case.geometry()
    top, bottom, left, right = g["pads"]
    kw = dict(stride=g["stride"], dilation=g["dilation"], groups=case.groups)
    z = _as_image(forward[0], g).detach().requires_grad_()
    dy64 = dy.double()
    act = ACTIVATIONS[case.activation]
    if act is None:
        grad, size = dy64, dy64.abs()
    else:
        with torch.enable_grad():
            (slope,) = torch.autograd.grad(act(z).sum(), z)  # act'(z), element by element
        grad, size = dy64 * slope, dy64.abs() * (slope.abs() + z.detach().abs())
    x64, w64 = F.pad(t.x.double(), (left, right, top, bottom)), t.w.double()

    def backward(x: torch.Tensor, w: torch.Tensor, gy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(dx, dw) of F.conv2d(x, w) at gy, dx without the padding."""
        with torch.backends.cudnn.flags(enabled=False):
            dx = torch.nn.grad.conv2d_input(x.shape, w, gy, **kw)[:, :, top:top + case.H, left:left + case.W]
            return dx, torch.nn.grad.conv2d_weight(x, w.shape, gy, **kw)

    (dx, dw), (dx_scale, dw_scale) = backward(x64, w64, grad), backward(x64.abs(), w64.abs(), size)
    dx_terms, dw_terms = backward(x64.square(), w64.square(), size.square())
    db = grad.sum((0, 2, 3))
    norm = lambda ref, terms: torch.maximum(torch.linalg.vector_norm(ref), terms.sum().sqrt())  # noqa: E731
    return {"dx": (dx, dx_scale, norm(dx, dx_terms)), "dw": (dw, dw_scale, norm(dw, dw_terms)),
            "db": (db, size.sum((0, 2, 3)), norm(db, size.square()))}  # fmt: skip


def _cudnn_grads(case: ConvCase, t: Built, dy: torch.Tensor) -> tuple:
    """cuDNN's (dx, dw, db) in the case's dtype at dY: torch's autograd through F.conv2d and the
    activation, TF32 off (db None without a bias)."""
    x, w = (v.detach().requires_grad_() for v in (t.x, t.w))
    b = None if t.bias is None else t.bias.detach().requires_grad_()
    with torch.enable_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        y = F.conv2d(x, w, b, *case.g_args, groups=case.groups)
        (ACTIVATIONS[case.activation](y) if case.activation else y).backward(dy)
    return x.grad, w.grad, None if b is None else b.grad


def _grad_errors(case: ConvCase, t: Built, forward: tuple, dy: torch.Tensor, ours: tuple) -> torch.Tensor:
    """[dx: ours' rel_fro, max_scaled, appeared, vanished, cuDNN's four; dw's eight; db's eight
    (zeros without a bias)] without a sync: ours = (dx, dw, db) against _grads64's at the same dY."""
    ref = _grads64(case, t, forward, dy)
    out = []
    for name, o, c in zip(GRADIENTS, ours, _cudnn_grads(case, t, dy)):
        if name == "db" and not case.bias:
            out.append(torch.zeros(8, dtype=torch.float64, device=dy.device))
        elif o is None:
            raise ValueError(f"the backward pass gave no {name}")
        else:
            out += [error_terms(o, *ref[name]), error_terms(c, *ref[name])]
    return torch.cat(out)


@dataclass
class Outcome:
    case: ConvCase
    chosen: str  # the kernel that ran and its tile, for the coverage counts
    wrong: bool
    why: str
    ours: tuple[float, float]  # rel_fro, max_scaled (y's)
    cudnn: tuple[float, float]
    tol: tuple[float, float]
    grads: dict = field(default_factory=dict)  # a gradient case's: "dx" -> {"ours": (rel_fro, max_scaled), "cudnn"}


def judge(case: ConvCase, chosen: str, v: list[float]) -> Outcome:
    """The verdict on a case from its error terms: _errors' eight, then for a gradient case
    _grad_errors' eight for each of dx, dw and db, each judged as y is and under the same tolerance
    (each gradient is rounded to the case's dtype, as y is). A gradient case's `why` names the
    result (y, dx, dw, db) each reason is about."""
    dtype = DTYPES[case.dtype]
    tol = tolerance(dtype, "fp32", dtype, case.C * case.R * case.S)
    rel, ms, _, _, c_rel, c_ms, _, _ = v[:8]
    why = [f"y: {r}" if case.grad else r for r in reasons(v[:8], tol, "cuDNN")]
    grads = {}
    for i, name in enumerate(GRADIENTS if case.grad else ()):
        if name == "db" and not case.bias:
            continue
        u = v[8 * (i + 1):8 * (i + 2)]
        grads[name] = dict(ours=(u[0], u[1]), cudnn=(u[4], u[5]))
        why += [f"{name}: {r}" for r in reasons(u, tol, "cuDNN")]
    return Outcome(case, chosen, bool(why), "; ".join(why), (rel, ms), (c_rel, c_ms), (tol.rel_fro, tol.max_scaled),
                   grads)  # fmt: skip


def chosen(case: ConvCase, t: Built | None = None) -> tuple[str, str]:
    """(the kernel and its tile, how a persistent build's blocks met its tiles) for the coverage
    counts: conv03's and conv04's from the plan the call launched (t given, after the call), else
    from their config rules for a 132-SM GPU; im2col's as gemm() chooses for its [N*P*Q, C*R*S] x
    [C*R*S, K] product."""
    from . import conv03

    g = case.geometry()
    M = g["N"] * g["P"] * g["Q"]
    if case.algorithm == "implicit":
        grouped = case.groups > 1  # one launch of the grouped build
        cfg = conv02_grouped_config(case.K, case.C) if grouped else CONV_02.default_config()
        return f"{CONV_02.id} BM={cfg['BM']},BN={cfg['BN']}" + (f",CH={cfg['CH']} (grouped)" if grouped else ""), ""
    if case.algorithm == "gather":
        return _chosen_gather(case, g, t)
    if case.algorithm == "depthwise":
        return f"{CONV_05.id} VEC={conv05_vec(DTYPES[case.dtype], case.in_channels, True)},CG={case.C}", ""
    if case.algorithm == "im2col":
        from .fuzz import _chosen

        return _chosen(_im2col_problem(case, g), "auto"), ""
    activation = None if case.grad else case.activation  # (a gradient case's forward pass leaves it to torch)
    plan = conv03.cached_plan(*group_views(case, t, 0), case.g_args, activation) if t is not None else None
    if plan is not None:
        cfg, blocks = plan.cfg, plan.grid[0]
    else:
        with conv03.staged_stores(_staged(case)):
            staged = conv03.stores_staged(case.K)
        rows = conv03.rows_of_x(g)
        cfg, blocks = conv03_config(case.K, M, 132, persistent=conv03.PERSISTENT, tma_store=staged, a_rows=rows), 132
        if case.tile:
            cfg = conv03_tile_config(case.tile, conv03.PERSISTENT, staged, rows)
    tiles = -(-M // cfg["BM"]) * -(-case.K // cfg["BN"])
    walk = "" if not cfg["PERSISTENT"] else "several tiles a block" if tiles > blocks else "one tile a block"
    return (f"{CONV_03.id} BM={cfg['BM']},BN={cfg['BN']}" + (",PERSISTENT=1" if cfg["PERSISTENT"] else "")
            + (",TMA_STORE=1" if cfg["TMA_STORE"] else "") + (",A_ROWS=1" if cfg["A_ROWS"] else "")
            + (" (forced)" if case.tile else "")), walk  # fmt: skip


GATHER_SM_SMEM = 228 * 1024  # an H100 SM's shared memory, 1 KiB of it reserved a block
GATHER_BLOCKS_AN_SM = 2  # conv04's launch bounds: at most two blocks an SM


def _chosen_gather(case: ConvCase, g: dict, t: Built | None) -> tuple[str, str]:
    """chosen() for conv04: its tile and the output channels it holds (KT, in 64s; the rest of its
    config is the case's geometry), and its walk, prefixed "conv04: ". The grid from the plan its
    call launched (t given, after the call), else as many blocks as a 132-SM GPU holds at once
    (two an SM, or one where its shared memory takes more than half an SM's)."""
    from . import conv04

    activation = None if case.grad else case.activation  # (a gradient case's forward pass leaves it to torch)
    plan = conv04.cached_plan(*group_views(case, t, 0), case.g_args, activation) if t is not None else None
    if plan is not None:
        cfg, blocks, tiles = plan.cfg, plan.grid[0], plan.tiles
    else:
        cfg = conv04_config(g)
        per_sm = GATHER_SM_SMEM // (CONV_04.dynamic_smem(cfg) + 1024)
        blocks, tiles = 132 * max(1, min(GATHER_BLOCKS_AN_SM, per_sm)), conv04.tiles_of(g, cfg)
    walk = "several tiles a block" if tiles > blocks else "one tile a block"
    return f"{CONV_04.id} TP={cfg['TP']},TQ={cfg['TQ']},KT={cfg['KT']}", f"conv04: {walk}"


def start(case: ConvCase, algorithms: tuple[str, ...] | None = None):
    """Build and run a case and queue its checks: (the case as it ran, its kernel, its walk, the
    error terms still on the GPU), or (the case, None, None, None) where no algorithm asked for
    can serve it on this device."""
    t = build(case)
    served = serve(case, t, algorithms)
    if served is None:
        return case, None, None, None
    if served.grad:
        return served, *_start_grad(served, t)
    from . import conv03

    g = served.geometry()
    poison(g["N"] * g["P"] * g["Q"] * case.out_channels, DTYPES[case.dtype])
    with conv03.on_tile(served.tile), conv03.staged_stores(_staged(served)), torch.no_grad():
        # (its plan is looked up under the tile and the epilogue too)
        y = conv2d(t.x, t.w, t.bias, *served.g_args, groups=served.groups, activation=served.activation,
                   algorithm=served.algorithm)  # fmt: skip
        kernel, walk = chosen(served, t)
    return served, kernel, walk, _errors(served, t, y)


def _start_grad(case: ConvCase, t: Built) -> tuple:
    """start's run of a gradient case: (its kernel, its walk, its 32 error terms still on the GPU).
    The float64 forward pass first (dY's zeros at relu's kink need it), then conv2d under autograd
    and y.backward(dY), the memory of y and of dx and dw poisoned first, as the forward's is."""
    from . import conv03

    forward = _forward64(case, t)
    dy = _output_grad(case, t, forward)
    x, w = (v.detach().requires_grad_() for v in (t.x, t.w))
    b = None if t.bias is None else t.bias.detach().requires_grad_()
    g = case.geometry()
    poison(g["N"] * g["P"] * g["Q"] * case.out_channels, DTYPES[case.dtype])
    with conv03.on_tile(case.tile), conv03.staged_stores(_staged(case)), torch.enable_grad():
        # (a conv03 dgrad takes the tile and the epilogue too)
        y = conv2d(x, w, b, *case.g_args, groups=case.groups, activation=case.activation, algorithm=case.algorithm)
        kernel, walk = chosen(case, t)  # (before the backward pass's plans can clear conv03's plan table)
        poison(x.numel(), x.dtype)
        poison(w.numel(), w.dtype)
        y.backward(dy)
    ours = (x.grad, w.grad, None if b is None else b.grad)
    return kernel, walk, torch.cat([_errors(case, t, y.detach(), forward), _grad_errors(case, t, forward, dy, ours)])


# ---- The run ------------------------------------------------------------------------------------


@dataclass
class Summary(RunSummary):
    by_algorithm: Counter = field(default_factory=Counter)
    by_walk: Counter = field(default_factory=Counter)  # a persistent build's blocks: one or several tiles each
    # (conv03's as "one tile a block", conv04's as "conv04: one tile a block")
    by_grad: Counter = field(default_factory=Counter)  # the gradient cases (dx, dw, db checked too), by algorithm
    by_groups: Counter = field(default_factory=Counter)  # the grouped cases (groups > 1), by algorithm
    refused: Counter = field(default_factory=Counter)  # "drawn -> ran" (-> none: skipped), never judged
    refusals: dict = field(default_factory=dict)  # an example reason of each


def as_record(o: Outcome) -> dict:
    return dict(case=asdict(o.case), chosen=o.chosen, why=o.why, ours=o.ours, cudnn=o.cudnn, tol=o.tol, grads=o.grads,
                replay=o.case.to_json())  # fmt: skip


def run(seed: int, seconds: float, max_cases: int | None = None, dtypes: tuple[str, ...] | None = None,
        algorithms: tuple[str, ...] | None = None, on_wrong: Callable[[Outcome], None] | None = None,
        on_progress: Callable[[Summary], None] | None = None) -> Summary:  # fmt: skip
    """Cases seed, seed + 1, ... until `seconds` have passed or max_cases have run (refused cases
    are counted apart, not among them)."""
    s = Summary(seed)
    activation = run_activation(seed)
    warm(seed, activation, dtypes, algorithms, max_cases)

    def started(case: ConvCase) -> tuple | None:
        """start(case), its refusals counted: None where no algorithm asked for serves it."""
        ran, kernel, walk, errors = start(case, algorithms)
        if ran.drawn:
            key = f"{ran.drawn} -> {ran.algorithm if errors is not None else 'none'}"
            s.refused[key] += 1
            s.refusals.setdefault(key, ran.refused)
        elif errors is None:
            s.refused[f"{ran.algorithm} -> none"] += 1
            s.refusals.setdefault(f"{ran.algorithm} -> none", "no algorithm asked for serves it on this device")
        return None if errors is None else (ran, kernel, walk, errors)

    def count(item: tuple, o: Outcome) -> None:
        case, kernel, walk, _ = item
        s.by_regime[case.regime] += 1
        s.by_dtype[case.dtype] += 1
        s.by_algorithm[case.algorithm] += 1
        s.by_kernel[kernel] += 1
        if walk:
            s.by_walk[walk] += 1
        if case.grad:
            s.by_grad[case.algorithm] += 1
        if case.groups > 1:
            s.by_groups[case.algorithm] += 1

    def refused(case: ConvCase, exc: ValueError) -> Outcome:  # conv2d refused a case its own check had accepted
        return Outcome(case, case.algorithm, True, f"conv2d raised, though its check accepted the case: {exc}",
                       (0.0, 0.0), (0.0, 0.0), (0.0, 0.0))  # fmt: skip

    drive(s, seed, seconds, max_cases, draw=lambda i: draw(i, dtypes, algorithms, activation), start=started,
          judge=lambda item, v: judge(item[0], item[1], v), count=count, refused=refused, as_record=as_record,
          on_wrong=on_wrong, on_progress=on_progress)  # fmt: skip
    return s


# Cases drawn ahead to find im2col's GEMM builds and conv04's (conv02's and conv03's are all compiled):
# a run of max_cases draws them all, up to WARM_CASES_MAX, one bounded by time alone WARM_CASES.
# conv04 compiles each geometry in: 10000 cases reach about 1800 of its builds (0.2-1.4 s each on
# one core), where 3000 reach about 600.
WARM_CASES = 3000
WARM_CASES_MAX = 20000


def warm(seed: int, activation: str | None, dtypes: tuple[str, ...] | None = None,
         algorithms: tuple[str, ...] | None = None, max_cases: int | None = None) -> int:  # fmt: skip
    """Compile, side by side in threads, the builds a run will launch: every conv03 tile's
    persistent (or one-tile) build (cases force each tile), with A through the im2col map and
    through x's rows (A_ROWS: the 1x1 cases at stride 1 without padding), and conv02's, plain, with the run's
    fused epilogue and with a bias alone (a gradient case's forward pass: torch applies its
    activation), in the dtypes drawn, and over the run's first cases (all of max_cases, up to
    WARM_CASES_MAX; WARM_CASES without max_cases) the GEMM builds
    im2col's products and the gradient cases' wgrad products reach and conv04's builds (each
    geometry its own; _drawn_jobs). A dgrad convolution on im2col, and a case that falls back to
    conv04 or im2col on the device alone, compile as they come. Returns how many builds there are."""
    import os

    from . import conv03
    from .device import capability
    from .jit import compile_many, device_arch

    fused = post_code(True, activation)
    jobs = {}
    sixteen = [DTYPES[d] for d in ("bf16", "fp16") if dtypes is None or d in dtypes]
    cc = capability(torch.device("cuda", torch.cuda.current_device())) or (0, 0)
    hopper = cc >= CONV_03.min_capability
    for dtype in sixteen:
        for post in dict.fromkeys((0, fused, post_code(True, None))):
            # (a gather gradient case's dgrad with K a multiple of 8 runs on conv03 or conv02)
            if (algorithms is None or {"tma", "gather"} & set(algorithms)) and hopper:
                for tile, staged, rows in itertools.product(CONV03_TILES, (False, True), (False, True)):
                    if rows and not conv03.A_ROWS:
                        continue
                    cfg = conv03_tile_config(tile, conv03.PERSISTENT, staged, rows)
                    jobs.setdefault(CONV_03.name_expression(cfg, dtype, dtype, post), (CONV_03, cfg, dtype, dtype, post))
            if algorithms is None or {"implicit", "tma", "gather"} & set(algorithms):  # (tma falls back to it)
                grouped = [conv02_grouped_config(k, c) for k in (16, 32, 64, 65) for c in (4, 8)]  # (its grouped builds)
                for cfg in (CONV_02.default_config(), *grouped):
                    jobs.setdefault(CONV_02.name_expression(cfg, dtype, dtype, post), (CONV_02, cfg, dtype, dtype, post))
    if hopper and (algorithms is None or set(STEPS) & set(algorithms)):  # conv06: their gradient cases' wgrad
        for dtype in sixteen:
            for cfg in (conv06_config(k) for k in (64, 128)):
                jobs.setdefault(CONV_06.name_expression(cfg, dtype, dtype), (CONV_06, cfg, dtype, dtype, 0))
    ahead = min(max_cases, WARM_CASES_MAX) if max_cases else WARM_CASES
    for job in _drawn_jobs(seed, activation, dtypes, algorithms, ahead):
        if job[0] is not CONV_04 or cc >= CONV_04.min_capability:
            jobs.setdefault(job[0].name_expression(*job[1:]), job)
    arch = device_arch(torch.cuda.current_device())
    for done in compile_many(list(jobs.values()), arch, workers=os.cpu_count() or 1):
        if isinstance(done, Exception):
            raise done
    return len(jobs)


def _drawn_jobs(seed: int, activation, dtypes, algorithms, count: int) -> list[tuple]:
    """The builds (spec, config, types, epilogue) cases seed .. seed + count - 1 launch beyond
    conv02's and conv03's: the GEMM builds gemm() launches for the im2col cases and for the
    gradient cases' wgrad, and conv04's for the gather cases (their forward pass; a gradient
    case's without the activation, and its dgrad's where dx's convolution lands on conv04:
    _gather_dgrad_config). Cases that fall back on the device alone are not known before it is
    asked: they compile as they come."""
    from .configs import select

    jobs = []
    for i in range(seed, seed + count):
        case = draw(i, dtypes, algorithms, activation)
        g, dtype = case.geometry(), DTYPES[case.dtype]
        problems = []
        if case.algorithm == "im2col":
            problems.append((_im2col_problem(case, g), post_code(case.bias, case.activation)))
        elif case.grad:
            problems.append((_wgrad_problem(case, g), 0))
        for problem, post in problems:
            spec, cfg = select(problem, "auto", device="cuda")
            types = (dtype, dtype) if spec.type_param else (None, None)
            jobs.append((spec, cfg, *types, post if spec.epilogues else 0))
        if case.algorithm == "gather":
            jobs.append((CONV_04, conv04_config(g), dtype, dtype, post_code(case.bias, None if case.grad else case.activation)))
            dgrad = _gather_dgrad_config(case, g) if case.grad else None
            if dgrad is not None:
                jobs.append((CONV_04, dgrad, dtype, dtype, 0))
    return jobs


def replay(case: ConvCase, repeats: int = 1, algorithms: tuple[str, ...] | None = None) -> list[Outcome]:
    """Run one case again (repeats times, on its same inputs), each checked at once."""
    out = []
    for _ in range(repeats):
        ran, kernel, _, errors = start(case, algorithms)
        if errors is None:
            raise ValueError(f"no algorithm can serve {case.label()} on this device")
        out.append(judge(ran, kernel, errors.tolist()))
    return out
