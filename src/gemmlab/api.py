"""The public entry point: gemm() validates, picks a kernel, launches on torch's current stream."""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple

import torch

from . import calls, jit, launch, reduce, registry, split, tma
from .activations import apply_post, post_code
from .configs import _choice_key, select
from .configs.rules import problem_flags, wide_d
from .device import sm_count
from .problem import GemmProblem, Operand, _overlaps, fresh_problem, problem_from_tensors
from .specs.base import GemmConfig, KernelSpec, operands_to_copy

__all__ = ["gemm", "kernels", "select", "prepare", "compile_jobs"]


def kernels(dtype: torch.dtype | None = None, device: str = "cuda") -> list[KernelSpec]:
    """The registered kernels of a device ('cuda' or 'cpu') in ladder order (optionally only
    those taking dtype)."""
    return registry.kernels(dtype, device)


def compile_jobs(problems) -> list[tuple]:
    """What gemm() compiles for each problem (problem.fresh_problem makes them from shapes): the
    (spec, config, element type, result type) of the kernel it launches, once each -- the jobs of
    jit.compile_many, with which `gemmlab compile --shape` warms the cache ahead of a program's
    first calls. An empty problem (M or N 0) launches nothing."""
    jobs = {}
    for problem in problems:
        if problem.is_empty:
            continue
        if few_rows_as_columns(problem):  # computed as D^T = w x^T (_few_rows_as_columns)
            problem = columns_problem(problem)
        spec, cfg = select(problem)
        types = (problem.dtype, problem.out_dtype) if spec.type_param else (None, None)
        jobs.setdefault(spec.name_expression(cfg, *types), (spec, cfg, *types))
        for job in split.split_jobs(problem) if spec.split_operands else ():  # 3xTF32's pre-pass
            jobs.setdefault(job[0].name_expression(job[1]), job)
        if spec.parts_reduced is not None and spec.parts_reduced(cfg, (1, 2, 1)):  # step 12's reduction pass, if split
            job = reduce.reduce_job()
            jobs.setdefault(job[0].name_expression(job[1]), job[:4])
    return list(jobs.values())


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out=None, device=None, precision="fp32",
         out_dtype=None, bias=None, activation=None):  # fmt: skip
    """D = activation(alpha * a @ b + beta * c + bias) on CUDA tensors, launched on torch's current
    stream.

    a: [M, K], b: [K, N], c: [M, N] or None (then beta must be 0), row-major (unit column
    stride; any row stride); a and b may also be column-major (unit row stride: transposed views
    such as w.t() of a [N, K] weight, or dy.t() of a [K, M] gradient). The bf16/fp16 Hopper steps
    (tc07, tc09) read an A or a B stored transposed in place (wgmma reads either orientation of a
    16-bit tile), as do tc08 (TF32) and FP32 step 12 a B; every other case hands the kernel
    row-major copies (one torch copy a transposed operand, on the same stream). beta == 0 never reads c. out: where to write D (may be c itself for
    an in-place update); allocated when None. kernel: a registered kernel id, or "auto" for the
    fastest registered kernel that can serve the problem. Returns D.

    precision: for float32 tensors, "fp32" (the default: FFMA, fp32 all the way), "tf32" (the
    tensor cores, multiplying TF32-rounded inputs: ~1e-3 relative error, several times faster) or
    "3xtf32" (the tensor cores at fp32's accuracy: each input split into two TF32 parts by a
    pre-pass into scratch memory of twice A's and B's size, three TF32 products a product, tc11:
    about 2.1x cuBLAS SGEMM's speed from 1024^3 up, with less error; K < 33 runs on FFMA;
    docs/ladder/tc11-3xtf32.md). The tensor cores are used for float32 only when asked for. bf16/fp16 tensors always run on the tensor cores with fp32
    accumulation; their result is rounded to their own type, or written in fp32 with
    out_dtype=torch.float32 (or an fp32 out), and c is then fp32 too.

    bias: a tensor of N elements added to every row of D (a Linear layer's), or None; activation:
    None, "relu", "gelu" (erf), "gelu_tanh" or "silu", applied last. The steps whose specs say
    `epilogues` (tc07-tc10 and FP32 steps 11-14) apply both in registers before the store; for any
    other, torch applies them to D after the launch. A bias of another dtype than D is converted.

    device="cpu" runs the CPU ladder instead (numba; numpy arrays or CPU tensors, result of the
    same kind as a); the default is the GPU, which rejects CPU tensors.

    Raises TypeError/ValueError before any launch if the arguments cannot be served. A call of a
    kind served before (gemmlab.calls.key) launches from what that call worked out, checking again
    only what addresses decide; calls.fast_path(False) turns that off.
    """
    post = post_code(bias is not None, activation)  # (and the activation's name checked)
    if device is not None and device != "cuda":
        if device != "cpu":
            raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
        from .cpu.api import gemm_cpu

        if precision != "fp32" or out_dtype not in (None, torch.float32):
            raise ValueError("the CPU ladder computes and writes fp32 only: drop precision=/out_dtype= or use the GPU")
        if post:
            _check_cpu_post(a, b, bias)
        d = gemm_cpu(a, b, c, alpha=alpha, beta=beta, kernel=kernel, out=out)
        if post:
            apply_post(torch.as_tensor(d), None if bias is None else torch.as_tensor(bias, dtype=torch.float32), activation)
        return d
    kind = calls.key(a, b, c, out, alpha, beta, kernel, precision, out_dtype, bias, activation) if calls.FAST_PATH else None
    if kind is not None:
        call = calls._CALLS.get(kind)
        if call is not None:
            d = _call_again(call, a, b, c, out, bias, activation)
            if d is not None:
                return d
    given = problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta, precision=precision,
                                           out_dtype=out_dtype)  # fmt: skip
    bias_given = bias
    if bias is not None:
        bias = _bias_for(problem, bias)
    if kernel == "auto" and few_rows_as_columns(problem):  # fp32 x @ w.t() at a few rows: D^T = w x^T
        return _few_rows_as_columns(problem, a, b, c, out, bias, activation)
    if problem.layout != "nn":
        spec, cfg = select(problem, kernel)
        if not spec.reads_in_place(problem, cfg):  # row-major copies of the operands stored transposed
            a, b = _row_major(problem, a, b)
            problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta, precision=precision,
                                           out_dtype=out_dtype)  # fmt: skip
    plan = _plan(problem, kernel, post)
    if out is None:
        out = torch.empty((problem.M, problem.N), dtype=problem.result_dtype, device=problem.device)
    if not problem.is_empty:
        _launch(plan, problem, a, b, c, out, bias)
        if post and not plan.post:  # a kernel without the fused epilogue: torch applies it
            apply_post(out, bias, activation)
    if kind is not None:  # (only now: a call that raised leaves no entry)
        direct = problem is given and not (plan.copy or plan.wide_d or plan.spec.split_operands)
        calls.remember(kind, calls.Call(plan, problem, given, bias is bias_given, bool(post and not plan.post), direct))
    return out


# An fp32 x @ w.t() of at most this many rows (a decode step's Linear) runs as the few-columns product
# D^T = w x^T: step 14 streams the weight's rows where they lie (1.32x cuBLAS SGEMM at 4096 x 1 x 4096
# and 4096 x 16 x 4096 on an H200, fp32-shapes-20261128T094801Z), where step 12 reading w.t() in place
# splits K over 64 x 64 tiles and reads the weight at 0.8 TB/s (0.42x-0.76x cuBLAS on the same views:
# docs/notes/fp32-transposed-weight.md).
FEW_ROWS_AS_COLUMNS = 16


def few_rows_as_columns(problem: GemmProblem) -> bool:
    """Whether gemm(a, b) with 'auto' computes this problem as D^T = b^T a^T (_few_rows_as_columns)."""
    return (problem.layout == "nt" and problem.dtype == torch.float32 and problem.precision == "fp32"
            and 0 < problem.M <= FEW_ROWS_AS_COLUMNS and problem.N > 0 and problem.K > 0)  # fmt: skip


def columns_problem(problem: GemmProblem) -> GemmProblem:
    """The problem _few_rows_as_columns hands gemm(): D^T = w x^T, N x M x K, w and x^T row-major."""
    return fresh_problem(problem.N, problem.M, problem.K, problem.dtype, device=problem.device)


def _few_rows_as_columns(problem: GemmProblem, a, b, c, out, bias, activation) -> torch.Tensor:
    """D = activation(alpha a b + beta c + bias) for a few rows of a and b = w.t() (a [N, K] weight)
    as D^T = alpha w a^T + beta c^T, through gemm() on w where it lies: its D^T has at most
    FEW_ROWS_AS_COLUMNS columns (step 14). a^T and c^T go in as row-major copies (a few rows each), the
    bias as C (a column of D^T a row) where beta is 0, otherwise after by torch; D^T is written into
    out's memory where one row makes D^T's layout D's, else copied into D after."""
    M, N = problem.M, problem.N
    w = b.t()  # [N, K], row-major
    ct, beta, post_bias = None, problem.beta, None
    if beta != 0:
        ct = c.t().contiguous()
        post_bias = bias
    elif bias is not None:  # D^T + bias down its columns: C of N x M, added once (beta = 1)
        ct, beta = bias.view(N, 1).expand(N, M).contiguous(), 1.0
    fused = activation if post_bias is None else None
    if out is None:
        out = torch.empty((M, N), dtype=problem.result_dtype, device=problem.device)
    direct = M == 1 and out.stride(1) == 1  # one row of D is D^T's one column, element for element
    dt = out.view(N, 1) if direct else torch.empty((N, M), dtype=problem.result_dtype, device=problem.device)
    gemm(w, a.t().contiguous(), ct, alpha=problem.alpha, beta=beta, out=dt, activation=fused)
    if not direct:
        out.copy_(dt.t())
    if post_bias is not None or (activation is not None and fused is None):
        apply_post(out, post_bias, activation)
    return out


def _call_again(call: calls.Call, a, b, c, out, bias, activation) -> torch.Tensor | None:
    """A call of a kind gemm() has served before (calls.key): D, launched from the first call's plan
    with this call's addresses put into its problem; None where out overlaps an input, for the full
    path to raise its error."""
    p, g = call.problem, call.given
    if out is not None:  # the checks of problem_from_tensors that look at addresses
        od = _at(g.d, out)
        if _overlaps(od, _at(g.a, a)) or _overlaps(od, _at(g.b, b)):
            return None
        if c is not None:
            oc = _at(g.c, c)
            if _overlaps(od, oc) and (od.ptr, od.ld) != (oc.ptr, oc.ld):  # (out=c exactly: in place)
                return None
    plan = call.plan
    if call.direct:  # the caller's own tensors, where they are: their addresses are all the launch needs
        if bias is not None and not call.bias_direct:
            bias = bias.to(p.result_dtype).contiguous()
        if out is None:
            out = torch.empty((p.M, p.N), dtype=p.result_dtype, device=p.device)
        if p.is_empty:
            return out
        a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), out.data_ptr()
        maps = plan.maps.get((a_ptr, b_ptr, d_ptr)) if plan.spec.tma else ()  # the TMA maps of these addresses
        if maps is None:  # not made yet: _launch makes them from the problem at these addresses
            problem = GemmProblem(p.M, p.N, p.K, p.dtype, p.device, _at(p.a, a), _at(p.b, b), _at(p.c, c), _at(p.d, out),
                                  p.alpha, p.beta, p.precision, p.out_dtype)  # fmt: skip
            _launch(plan, problem, a, b, c, out, bias)
        else:
            _launch_kernel(plan, maps, a_ptr, b_ptr, 0 if p.c is None else c.data_ptr(), d_ptr, bias)
        if call.torch_post:
            apply_post(out, bias, activation)
        return out
    if p is not g:  # as the first call: row-major copies of the operands stored transposed
        a, b = _row_major(g, a, b)
    problem = GemmProblem(p.M, p.N, p.K, p.dtype, p.device, _at(p.a, a), _at(p.b, b), _at(p.c, c), _at(p.d, out),
                          p.alpha, p.beta, p.precision, p.out_dtype)  # fmt: skip
    if bias is not None and not call.bias_direct:
        bias = bias.to(problem.result_dtype).contiguous()
    if out is None:
        out = torch.empty((p.M, p.N), dtype=problem.result_dtype, device=p.device)
    if not problem.is_empty:
        _launch(plan, problem, a, b, c, out, bias)
        if call.torch_post:  # a kernel without the fused epilogue: torch applies it
            apply_post(out, bias, activation)
    return out


def _at(o: Operand | None, t) -> Operand | None:
    """The operand o (its shape and strides) at t's address."""
    if o is None:
        return None
    ptr = t.data_ptr()
    return tuple.__new__(Operand, (o.rows, o.cols, o.ld, ptr, ptr + (o.end - o.ptr), o.trans))  # (_replace: 3x slower)


def _bias_for(problem: GemmProblem, bias) -> torch.Tensor:
    """The bias as the kernels read it: N contiguous elements of D's type on D's device, or a
    ValueError saying what is wrong with it."""
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch tensor, got {type(bias).__name__}")
    if bias.dim() != 1 or bias.shape[0] != problem.N:
        raise ValueError(f"bias must be a vector of N = {problem.N} elements (one a column of D), got shape {tuple(bias.shape)}")
    if bias.device != problem.device:
        raise ValueError(f"bias is on {bias.device}, D on {problem.device}: move it with bias.to({str(problem.device)!r})")
    if not bias.is_floating_point():
        raise TypeError(f"bias must be a floating-point tensor, got {bias.dtype}")
    return bias.to(problem.result_dtype).contiguous()


def _check_cpu_post(a, b, bias) -> None:
    if bias is None:
        return
    n = b.shape[1] if getattr(b, "ndim", 0) == 2 else None
    if getattr(bias, "ndim", None) != 1 or bias.shape[0] != n:
        raise ValueError(f"bias must be a vector of N = {n} elements (one a column of D), got shape "
                         f"{tuple(getattr(bias, 'shape', ()))}")  # fmt: skip


def prepare(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", out, config: GemmConfig | None = None,
            precision="fp32") -> Callable[[], None]:  # fmt: skip
    """Validate once and return a function that relaunches the same GEMM (for benchmarks: it
    skips validation and selection on every call; copies a staged kernel needs -- operands whose
    layout TMA cannot take, and an odd-strided D's padded buffer (tc07-tc09) -- and row-major
    copies of transposed operands for kernels that do not read them in place are still made on
    every call, as gemm() does). out's dtype is the result's. config: another config of the chosen kernel (for tuning). The function
    holds a, b, c, out and its workspace, so their memory stays theirs while it lives."""
    problem = problem_from_tensors(a, b, c, out, alpha=alpha, beta=beta, precision=precision)
    spec, cfg = select(problem, kernel)
    if config is not None:
        if config.kernel != spec.id:
            raise ValueError(f"config is for {config.kernel}, not {spec.id}")
        # what the problem decides (A's and B's layouts, the epilogue) is the problem's, whatever the config says
        flags = problem_flags(spec, problem, config)
        config = GemmConfig(config.kernel, tuple((k, flags.get(k, v)) for k, v in config.values))
        cfg = config
    if not spec.reads_in_place(problem, cfg):
        # a kernel of row-major operands only: every call copies the transposed ones first, as gemm() does
        copies = _row_major(problem, a, b)
        launch = prepare(*copies, c, alpha=alpha, beta=beta, kernel=spec.id, out=out, config=config, precision=precision)
        pairs = [(dst, src) for dst, src, op in zip(copies, (a, b), (problem.a, problem.b)) if op.trans]

        def copy_and_launch():
            for dst, src in pairs:
                dst.copy_(src)
            launch()

        return copy_and_launch
    if config is not None:
        reason = spec.why_not(problem, config)
        if reason:
            raise ValueError(f"{spec.id} {config.as_dict()} cannot serve {problem.shape}: {reason}")
    if problem.is_empty:
        return lambda: None
    return _planned_launch(spec, cfg, problem, a, b, c, out)


class _Plan(NamedTuple):
    """Everything about a launch except the four addresses: kernel, geometry, scalar arguments."""

    spec: KernelSpec
    config: GemmConfig
    loaded: object
    device_id: int
    grid: tuple
    block: tuple
    tail: tuple  # M, N, K, lda, ldb, ldc, ldd as int32; alpha, beta as float32
    cluster: tuple | None  # blocks per cluster, for kernels launched in clusters
    maps: dict  # (address of a, b, out) -> the TMA maps for them: all else a map encodes is the plan's
    wide_d: int = 0  # a staged kernel's D is written to a buffer this wide (configs.rules.wide_d), 0: in place
    copy: tuple = ()  # the inputs ("a", "b") a staged kernel copies on every call, for TMA to read
    post: int = 0  # the fused epilogue the kernel was built with (activations.post_code); 0: none
    reduction: reduce.Reduction | None = None  # the pass that adds the runs' parts and writes D (step 12, RED = 1; step 15, SPLIT = 1)
    ws_need: tuple | None = None  # (fp32 parts, flags) of workspace a launch needs (spec.workspace); None: none
    launcher: launch.Launcher | None = None  # the kernel's launch with this geometry (None: nothing to launch)


_PLANS: dict[tuple, _Plan] = {}


def _plan(problem: GemmProblem, kernel: str, post: int = 0) -> _Plan:
    """The launch plan for a problem, memoised on what the choice and the scalars depend on. post:
    the fused epilogue asked for; the plan's own post is 0 where its kernel cannot fuse it."""
    # (alpha and beta with the sign of a zero: alpha = -0.0 writes -0.0, and f32(-0.0) == f32(0.0))
    key = (_choice_key(problem, kernel), problem.device, problem.alpha, math.copysign(1.0, problem.alpha), problem.beta,
           math.copysign(1.0, problem.beta), post)  # fmt: skip
    plan = _PLANS.get(key)
    if plan is None:
        spec, cfg = select(problem, kernel)
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        plan = _PLANS[key] = _make_plan(spec, cfg, problem, post)
    return plan


def _make_plan(spec: KernelSpec, cfg: GemmConfig, problem: GemmProblem, post: int = 0) -> _Plan:
    device_id = problem.device.index if problem.device.index is not None else torch.cuda.current_device()
    M, N, K = problem.M, problem.N, problem.K
    if problem.is_empty:
        return _Plan(spec, cfg, None, device_id, (0, 0, 0), (1, 1, 1), (), None, {})
    wide = wide_d(spec, problem)
    # Fused where the kernel has the epilogue and writes D itself: a D written to a padded buffer
    # (wide) has columns past N, which the bias does not reach, so torch applies it there.
    post = post if spec.epilogues and not wide else 0
    types = (problem.dtype, problem.out_dtype) if spec.type_param else (None, None)
    loaded = jit.load_kernel(spec, cfg, device_id, *types, post=post)
    ldd = wide or (problem.d.ld if problem.d is not None else N)
    ldc = wide if wide and problem.beta != 0 else (problem.c.ld if problem.c is not None else N)
    i32, f32 = launch.i32, launch.f32
    tail = (
        i32(M), i32(wide or N), i32(K),
        i32(problem.a.ld), i32(problem.b.ld), i32(ldc), i32(ldd),
        f32(problem.alpha), f32(problem.beta),
    )  # fmt: skip
    cluster = spec.cluster(cfg) if spec.cluster else None
    grid = spec.grid(M, N, cfg)
    if spec.persistent:  # as many blocks as can be resident at once; each loops over tiles
        resident = launch.resident_blocks(loaded, device_id, spec.block(cfg), cluster)
        split = spec.splits_k is not None and spec.splits_k(problem, cfg, resident)  # every SM takes a run
        grid = (resident if split else min(grid[0], resident), grid[1], grid[2])
    runs = spec.k_runs(problem, cfg, sm_count(device_id)) if spec.k_runs is not None else None
    if runs is not None:  # K split into gridDim.y runs (tc10)
        grid = (grid[0], runs, grid[2])
    copy = operands_to_copy(problem) if spec.staged and spec.tma else ()
    reduction = reduce.plan(spec, cfg, M, N, grid, device_id, post)
    ws_need = spec.workspace(cfg, grid) if spec.workspace is not None else None
    block = spec.block(cfg)
    return _Plan(spec, cfg, loaded, device_id, grid, block, tail, cluster, {}, wide, copy, post, reduction, ws_need,
                 launch.Launcher(loaded, device_id, grid, block, cluster))  # fmt: skip


_PLAN_MAPS_MAX = 64  # address triples remembered per plan


def _bias_args(plan: _Plan, bias: torch.Tensor | None) -> tuple:
    """The bias address a kernel with the fused epilogue takes last (0 where its plan adds none);
    nothing for the others."""
    if not plan.spec.epilogues:
        return ()
    return (bias.data_ptr() if plan.post and bias is not None else 0,)


def _launch(plan: _Plan, problem: GemmProblem, a, b, c, out, bias: torch.Tensor | None = None) -> None:
    """Launch a planned kernel on these tensors: TMA maps (and staged copies) first when it takes them.
    The plan fixes shapes, strides, dtypes and boxes, so a kernel finds its maps by the three
    addresses it reads and writes alone -- the caller's, or a staged kernel's padded copies (torch's
    caching allocator mostly hands the same blocks back, so their maps are found again too)."""
    if plan.spec.split_operands:
        return _launch_split(plan, problem, out)
    maps, copies, d = (), {}, out
    c_ptr = problem.c.ptr if problem.c is not None else 0
    if plan.wide_d:  # D through a padded buffer (with C in it, when C is read), copied out after
        d = torch.empty((problem.M, plan.wide_d), dtype=out.dtype, device=out.device)
        if problem.beta != 0:
            d[:, : problem.N].copy_(c)
            c_ptr = d.data_ptr()
    if plan.spec.tma:
        if plan.copy:
            copies = _staged(problem, a, b, plan.copy)
        key = (copies["a"][0].data_ptr() if "a" in copies else problem.a.ptr,
               copies["b"][0].data_ptr() if "b" in copies else problem.b.ptr, d.data_ptr())  # fmt: skip
        maps = plan.maps.get(key)
        if maps is None:
            maps = _tensor_maps(plan, problem, _operands(problem, a, b, d) | copies)
            if len(plan.maps) >= _PLAN_MAPS_MAX:
                plan.maps.clear()
            plan.maps[key] = maps
    _launch_kernel(plan, maps, problem.a.ptr, problem.b.ptr, c_ptr, d.data_ptr(), bias)
    if plan.wide_d:
        out.copy_(d[:, : problem.N])
    # Only now may the copies go back to torch's allocator: the kernel is queued behind them on this
    # stream. Freed before the launch, a block allocated in between (a stream-K workspace, created or
    # grown on first use) could take their memory and be written while the kernel reads it.
    del copies, d


def _launch_kernel(plan: _Plan, maps: tuple, a_ptr: int, b_ptr: int, c_ptr: int, d_ptr: int,
                   bias: torch.Tensor | None) -> None:  # fmt: skip
    """The planned kernel on these addresses (its tensor maps first, where it takes them), its
    workspace, and the reduction pass behind it where its runs leave parts (step 12, RED = 1; step
    15, SPLIT = 1)."""
    ws = _workspace(plan)
    ws_mid, ws_last = _workspace_args(plan, ws)
    bias_args = _bias_args(plan, bias)
    plan.launcher(*maps, a_ptr, b_ptr, c_ptr, d_ptr, *ws_mid, *plan.tail, *bias_args, *ws_last)
    if plan.reduction is not None:  # the runs' parts, added up into D behind the split kernel
        reduce.launch_reduction(plan.reduction, plan.device_id, ws[0].data_ptr(), plan.grid[1], c_ptr, d_ptr,
                                plan.tail, *bias_args)  # fmt: skip


def _launch_split(plan: _Plan, problem: GemmProblem, out) -> None:
    """tc11 (3xTF32): A and B^T split into TF32 big and small parts (gemmlab.split) in scratch
    tensors of this call, then the GEMM on their tensor maps (placeholders where K = 0: nothing is
    loaded), with the caller's A and B and their element strides for its fp32 recompute of
    non-finite results. The scratch goes back to torch's allocator after the GEMM is queued."""
    M, N, K = problem.M, problem.N, problem.K
    boxes = plan.spec.tma_boxes(plan.config)
    (sam, sak), (sbn, sbk) = split.split_strides(problem)
    if K:
        parts_a = split.split(problem.a.ptr, M, K, sam, sak, problem.device, plan.device_id)  # [2, M, ld]
        parts_b = split.split(problem.b.ptr, N, K, sbn, sbk, problem.device, plan.device_id)  # [2, N, ld]
        mats = {"a": parts_a[0], "a_small": parts_a[1], "b": parts_b[0], "b_small": parts_b[1]}
        maps = [tma.tensor_map(mats[n], mats[n].shape[0], K, mats[n].shape[1], boxes[n]) for n in plan.spec.tma]
    else:  # nothing to load
        parts_a = parts_b = mats = None
        maps = [tma.tensor_map(_placeholder(problem.device, problem.dtype), 1, 8, 8, boxes[n]) for n in plan.spec.tma]
    i64 = launch.i64
    launch.launch(plan.loaded, plan.device_id, plan.grid, plan.block, *maps, problem.a.ptr, problem.b.ptr,
                  problem.c.ptr if problem.c is not None else 0, out.data_ptr(), *plan.tail[:3], i64(sam), i64(sak),
                  i64(sbk), i64(sbn), *plan.tail[5:])  # fmt: skip
    del parts_a, parts_b, mats  # only now: the GEMM that reads them is queued


# (device, stream) -> (fp32 parts, uint32 flags) of the kernels that pass parts between blocks
# (stream-K, split K). Flags are zero between launches (each is reset by the block that consumed
# it), so launches on one stream share them; launches on other streams, which may overlap, get
# their own. A workspace that grows is replaced; each replacement at least doubles what grew, so
# few are made. A launch made by prepare() holds the workspace it was made with (and its tensors):
# it keeps their addresses, and memory torch handed to another tensor would be written under it.
# Their memory comes from the driver (launch.held_tensor), not from torch's allocator, whose
# memory during torch.compile's CUDA graph warm-up and recording belongs to the graph's pool; while
# a stream captures a graph and has no workspace big enough, the call takes one of its own.
_WORKSPACES: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(plan: _Plan) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The workspace (fp32 parts, flags) a kernel that takes one (stream-K, split K) needs, on the
    current stream; None for the others."""
    if plan.ws_need is None:
        return None
    # at least a block on every SM, so that problems of growing size do not reallocate it each time
    return stream_workspace(plan.device_id, *plan.ws_need,
                            lambda: plan.spec.workspace(plan.config, (sm_count(plan.device_id), 1, 1)))


def stream_workspace(device_id: int, floats: int, flags: int, most=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The current stream's workspace (fp32 parts, uint32 flags zero between launches) of at least
    floats and flags; where it grows, to most() (floats, flags) too and to twice what grew. Shared
    by the specs with a workspace and conv06 (gemmlab.conv_wgrad_tma)."""
    key = (device_id, launch.current_stream_handle(device_id))
    ws = _WORKSPACES.get(key)
    fits = ws is not None and ws[0].numel() >= floats and ws[1].numel() >= flags
    if not fits and torch.cuda.is_current_stream_capturing():
        # a workspace of this call's own, from the graph's pool (its zeroing is captured too)
        dev = torch.device("cuda", device_id)
        return torch.empty(floats, dtype=torch.float32, device=dev), torch.zeros(flags, dtype=torch.int32, device=dev)
    if not fits:
        if most is not None:
            floats, flags = (max(have, want) for have, want in zip((floats, flags), most()))
        if ws is not None:
            have_floats, have_flags = ws[0].numel(), ws[1].numel()
            floats = max(floats, 2 * have_floats) if floats > have_floats else have_floats
            flags = max(flags, 2 * have_flags) if flags > have_flags else have_flags
        ws = _WORKSPACES[key] = (launch.held_tensor((floats,), torch.float32, device_id),
                                 launch.held_tensor((flags,), torch.int32, device_id))  # fmt: skip
    return ws


def _workspace_args(plan: _Plan, ws: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[tuple, tuple]:
    """The workspace pointers a kernel is passed, (after D, after the bias): none for a kernel that
    takes no workspace; null ones where its config needs none but the kernel has the parameters
    (spec.workspace_last)."""
    ptrs = (ws[0].data_ptr(), ws[1].data_ptr()) if ws is not None else (0, 0) if plan.spec.workspace_last else ()
    return ((), ptrs) if plan.spec.workspace_last else (ptrs, ())


def _row_major(problem: GemmProblem, a, b) -> tuple:
    """a and b, with those stored transposed replaced by row-major copies (torch, on the current
    stream), for kernels that read row-major operands only."""
    return tuple(t.contiguous() if o.trans else t for t, o in ((a, problem.a), (b, problem.b)))


def _storage(t, op) -> object:
    """The row-major view of an operand's memory: t itself, or t.T where t is stored transposed."""
    return t.T if op.trans else t


def _operands(problem: GemmProblem, a, b, d) -> dict[str, tuple]:
    """name -> (tensor, rows, cols, row stride) of what the kernel's tensor maps describe: the
    operands' storage (a B stored transposed: its [N][K] rows), and d (the caller's out, or the
    whole of a padded buffer standing in for it)."""
    return {"a": (_storage(a, problem.a), problem.a.rows, problem.a.cols, problem.a.ld),
            "b": (_storage(b, problem.b), problem.b.rows, problem.b.cols, problem.b.ld),
            "d": (d, problem.M, d.shape[1], _ld(d))}  # fmt: skip


def _staged(problem: GemmProblem, a, b, names: tuple[str, ...]) -> dict[str, tuple]:
    """For a staged kernel: a copy of each named input (those whose address or row stride does not
    suit TMA: the plan's `copy`) with rows padded to 16 bytes. torch makes the copies, on the
    current stream."""
    per16 = 16 // a.element_size()
    copies = {}
    for name, t in (("a", a), ("b", b)):
        if name not in names:
            continue
        op = getattr(problem, name)
        pad = -(-op.cols // per16) * per16
        copy = torch.empty((op.rows, pad), dtype=t.dtype, device=t.device)[:, : op.cols]
        copy.copy_(_storage(t, op))  # the same layout, rows padded
        copies[name] = (copy, op.rows, op.cols, pad)
    return copies


def _tensor_maps(plan: _Plan, problem: GemmProblem, operands: dict[str, tuple]) -> tuple:
    """The TMA tensor maps a kernel takes, in its order, from name -> (tensor, rows, cols, ld)."""
    boxes = dict(plan.spec.tma_boxes(plan.config))
    if "d" in boxes:  # the epilogues stage D in boxes of at most 128-byte rows (fp32: 32 columns)
        out = operands["d"][0]
        boxes["d"] = (boxes["d"][0], min(boxes["d"][1], 128 // out.element_size()))
    maps = []
    for name in plan.spec.tma:
        if (problem.K == 0 and name != "d") or (name == "d" and not _tma_store_ok(*operands["d"], boxes["d"])):
            # never read: no K step loads nothing; an out TMA cannot store to takes register stores
            t, rows, cols, ld = _placeholder(problem.device, problem.dtype), 1, 8, 8
        else:
            t, rows, cols, ld = operands[name.split("_")[0]]  # "a_edge": A again, with another box
        maps.append(tma.tensor_map(t, rows, cols, ld, boxes[name]))
    return tuple(maps)


def _tma_store_ok(out: torch.Tensor, rows: int, cols: int, ld: int, box: tuple[int, int]) -> bool:
    """What the TMA-store epilogues (tc07, tc09, tc08) check before storing through the map: a box
    row the staging buffer's swizzle covers and rows of D of whole, aligned 16-byte units."""
    per16 = 16 // out.element_size()
    return (out.element_size() * box[1] in tma.SWIZZLES and cols % per16 == 0 and ld % per16 == 0
            and out.data_ptr() % 16 == 0)  # fmt: skip


_PLACEHOLDERS: dict[tuple, torch.Tensor] = {}


def _placeholder(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    key = (device, dtype)
    if key not in _PLACEHOLDERS:
        if torch.cuda.is_current_stream_capturing():  # (never read: a map needs an address)
            return torch.zeros((1, 8), device=device, dtype=dtype)
        _PLACEHOLDERS[key] = launch.held_tensor((1, 8), dtype, device.index if device.index is not None else torch.cuda.current_device())
    return _PLACEHOLDERS[key]


def _ld(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def _planned_launch(spec: KernelSpec, cfg: GemmConfig, problem: GemmProblem, a, b, c, out: torch.Tensor):
    plan = _make_plan(spec, cfg, problem)
    if plan.wide_d or plan.copy or spec.split_operands:
        return partial(_launch, plan, problem, a, b, c, out)  # the copies (or the split) are part of every call
    c_ptr = problem.c.ptr if problem.c is not None else 0
    maps = _tensor_maps(plan, problem, _operands(problem, a, b, out)) if spec.tma else ()
    ws = _workspace(plan)
    ws_mid, ws_last = _workspace_args(plan, ws)
    args = (*maps, problem.a.ptr, problem.b.ptr, c_ptr, out.data_ptr(), *ws_mid, *plan.tail, *_bias_args(plan, None),
            *ws_last)  # fmt: skip
    held = (a, b, c, out, ws)  # the addresses in args stay these tensors' while the launch lives

    def relaunch():
        plan.launcher(*args)
        if plan.reduction is not None:  # (step 12, RED = 1; step 15, SPLIT = 1)
            reduce.launch_reduction(plan.reduction, plan.device_id, ws[0].data_ptr(), plan.grid[1], c_ptr,
                                    out.data_ptr(), plan.tail, 0)  # fmt: skip

    relaunch.held = held
    return relaunch
