"""conv05's host side: a depthwise convolution (groups = C = K) in one launch of
kernels/conv/05_depthwise.cu, where conv2d's grouped path makes one convolution a group, and its
gradients (dgrad in one launch; wgrad in two: fp32 sums over chunks of pixels, then those added).

conv2d(..., groups=C) takes it under algorithm="auto" for CUDA tensors (depthwise_why_not says
where it does not serve). A call that takes a gradient runs through DepthwiseConv (autograd: the
forward pass without the activation, which conv2d applies through torch to keep its input; dgrad,
wgrad and the bias's sum backward). Under torch.compile it runs as the operator
torch.ops.gemmlab.conv2d_depthwise (depthwise_op), whose gradients are the operators
gemmlab::conv2d_depthwise_dgrad and gemmlab::conv2d_depthwise_wgrad, each with a fake
implementation for tracing. Narrow groups (2, 4 or 8 channels and as many filters) run on the same
kernels through run(cg=...), dgrad(cg=...) and wgrad(cg=...), for conv.GroupedConv, and traced
through the same operators, which take the group's width from the weight's second dimension."""

from __future__ import annotations

import sys

import torch
from torch import Tensor

from . import amp, jit, launch
from .activations import post_code
from .conv_shape import CONV_OP_ARGS, _suggests_channels_last, conv_geometry, empty_result
from .settings import setting
from .specs.conv import (CONV05_SLIDING_WIDTHS, CONV05_SUM_ENTRIES, CONV05_THREADS, CONV05_WG_S, CONV_05, CONV_05_DGRAD,
                         CONV_05_WGRAD, CONV_05_WGRAD_SUM, conv05_channel_vectors, conv05_vec)  # fmt: skip

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TQ = 4  # pixels of a row a thread computes in the forward pass and dgrad (fewer in a narrower row)
BLOCKS_AN_SM = 16  # the grid's cap: blocks of 256 threads an SM; past it each thread strides over more pixels
MAX_TAPS = 4096  # R*S a block's staged copy holds for one channel (CONV05_TAPS_SMEM)
_COUNT_LIMIT = 2**31 - 1  # the kernels count in 32 bits: a launch's tasks plus its grid's threads stay below
WGRAD_SUM_CHUNKS = 256  # wgrad's parts of at most this many chunks are added by conv05's own kernel (eight warps
# a block of 32 filter entries, in one launch); more by torch's sum
WGRAD_TAPS_A_THREAD = 3  # wgrad: a thread sums every row of a filter whose R * S is at most this (else a row)
NARROW_WGRAD_SUMS = 32  # wgrad of narrow groups: fp32 sums a thread, SG * VEC * CG, at most
WGRAD_PIX = 4  # wgrad: pixels whose loads a depthwise thread has in flight at once (wgrad_pixels)
NARROW_WGRAD_PIX = 4  # and a narrow groups' one
WGRAD_REGISTERS = 96  # wgrad: registers a thread's sums and loads in flight take, at most (wgrad_pixels)
_WGRAD_THREADS_AN_SM = 512  # wgrad's chunks: at most this many tasks an SM, what one wave holds (two blocks of 256
# threads at 128 registers: the kernel's launch bounds), so that no task is left to a second wave alone
_WGRAD_CHUNK_MIN = 16  # and at least this many pixels a chunk
_WGRAD_PARTS_MAX = 1 << 25  # fp32 elements of wgrad's parts at most (128 MB): past it the chunks grow
_ALIGN = 16


def depthwise_why_not(x: Tensor, weight: Tensor, groups: int) -> str | None:
    """Why conv05 cannot serve this call (None where it can): it takes CUDA tensors in bf16, fp16
    or float32 with one filter a channel (groups = C = K, weight [C, 1, R, S]) of at most MAX_TAPS
    taps."""
    if x.device.type != "cuda":
        return f"conv05 runs on CUDA tensors, not {x.device.type}"
    if x.dtype not in DTYPES:
        return f"conv05 takes bf16, fp16 or float32, not {x.dtype}"
    C = x.shape[1]
    if not (groups == C and weight.shape[0] == C and weight.shape[1] == 1):
        return f"conv05 is depthwise: groups = in_channels = out_channels ({C}), one filter a channel"
    if weight.shape[2] * weight.shape[3] > MAX_TAPS:
        return f"conv05 holds filters of at most {MAX_TAPS} taps, not {weight.shape[2]} x {weight.shape[3]}"
    return None


NARROW_GROUPS = (2, 4, 8)  # channels a group (and filters) conv05's grouped build takes
# The grouped build's block covers NARROW_CV channel vectors, 128 lanes of pixels each (the depthwise
# rule, conv05_channel_vectors, takes the widest block that fits). On ResNeXt-50's narrow layers on an
# H200 (bf16, TQ 4; results/nvidia-h200/narrow-groups-tq-20261128T1916Z.txt) 2 was the fastest of
# 1-8 at all six layer and batch pairs: stage 1's 3x3 67 us against 141 at batch 32 (the depthwise
# rule's 8), 480 against 981 at batch 256; stage 2's 47-56 against 78-79 and 303-430 against 540.
NARROW_CV = 2


def narrow_groups_why_not(x: Tensor, weight: Tensor, groups: int) -> str | None:
    """Why conv05's grouped build cannot serve this grouped call (None where it can): CUDA tensors
    in bf16, fp16 or float32, groups of 2, 4 or 8 channels with as many filters (weight [C, C/G, R,
    S]) whose channels fall within a thread's 16 bytes (C a multiple of 16 bytes of channels, the
    group's channels dividing them), a vector's filters of at most MAX_TAPS taps together."""
    if x.device.type != "cuda":
        return f"conv05 runs on CUDA tensors, not {x.device.type}"
    if x.dtype not in DTYPES:
        return f"conv05 takes bf16, fp16 or float32, not {x.dtype}"
    C = x.shape[1]
    cg = C // groups if groups >= 1 else 0
    if cg not in NARROW_GROUPS or weight.shape[0] != C or weight.shape[1] != cg:
        return (f"conv05's grouped build takes groups of {', '.join(map(str, NARROW_GROUPS))} channels with as many "
                f"filters, not {cg} channels and {weight.shape[0] // max(groups, 1)} filters a group")  # fmt: skip
    vec = 16 // x.element_size()
    if C % vec or vec % cg:
        return (f"conv05 reads a group's channels within 16 bytes a thread ({vec} channels): C = {C} in groups "
                f"of {cg} does not split into them")  # fmt: skip
    if weight.shape[2] * weight.shape[3] * cg * vec > MAX_TAPS:
        return (f"conv05 stages {MAX_TAPS} taps a block, a vector's {vec} filters of {cg} channels each: "
                f"{weight.shape[2]} x {weight.shape[3]} filters are too large")  # fmt: skip
    return None


# The depthwise block (forward pass and dgrad) past the rule's pick, measured with each TQ and CV on
# the depthwise sweep's 12 layers at batch 32 and 128 (H200; forward in bf16 and float32, dgrad in
# bf16; scripts/depthwise_cv.py, results/nvidia-h200/depthwise-cv-fwd-20261128T2115Z.txt and
# -dgrad-20261128T2115Z.txt, microseconds behind a host gate):
# - a block of more than 8 channel vectors was never the fastest by more than noise, and lost up to
#   13% (float32 mbv2 14/2 at batch 128: 36.0 on the rule's 32 against 31.5 on 8): BLOCK_CV_MAX;
# - at stride 2 the forward pass gains from 8 vectors where the rule gives 4 (bf16 mbv2 56/2 at batch
#   128: 106.8 -> 84.0; 112/2: 184.8 -> 168.0): STRIDED_CV, where the layer has that many vectors;
# - at stride 2 dgrad gains from two pixels a thread (bf16 mbv2 112/2 at batch 128: 493.7 -> 386.8,
#   56/2 269.4 -> 187.1, 14/2 75.6 -> 62.0): STRIDED_DGRAD_TQ.
# Over the 48 forward cases the geometric mean moved 1.03x, over the 24 dgrad cases 1.08x.
BLOCK_CV_MAX = 8
STRIDED_CV = 8
STRIDED_DGRAD_TQ = 2


def depthwise_block(C: int, vec: int, cv: int, taps: int, strided: bool) -> int:
    """The channel vectors a depthwise block covers, from the rule's cv (conv05_channel_vectors):
    at most BLOCK_CV_MAX, and STRIDED_CV for a strided forward pass (strided) over at least that many
    vectors whose taps fit; the rule's cv for one channel a thread (vec = 1, not measured)."""
    if vec == 1:
        return cv
    if strided and -(-C // vec) >= STRIDED_CV and taps * STRIDED_CV * vec <= MAX_TAPS:
        return STRIDED_CV
    return min(cv, BLOCK_CV_MAX)


SLIDING = True  # the forward pass loads a row's pixels once for its taps where it can (sliding_width)
NARROW_STRIDED_ROW = False  # narrow groups (cg > 1) take the sliding row at stride 2 along W too


def sliding_width(g: dict) -> int:
    """The forward pass's SW for geometry g: the filter's width where a row of pixels can be loaded
    once for all its taps (a width of CONV05_SLIDING_WIDTHS, stride 1 or 2 and dilation 1 along W,
    and SLIDING on), else 0 (each tap's pixels loaded on their own)."""
    ok = SLIDING and g["S"] in CONV05_SLIDING_WIDTHS and g["stride"][1] in (1, 2) and g["dilation"][1] == 1
    return g["S"] if ok else 0


# The depthwise forward pass on a sliding row, the block and TQ past the rule's (H200, bf16 and
# float32 at batch 32 and 128, microseconds):
# - 7 wide (ConvNeXt-T's layers; results/nvidia-h200/depthwise-cv-fwd-20261128T2133Z.txt): in 16-bit
#   blocks of 4 channel vectors ran ahead of the rule's 8 at every layer but the first, which the
#   rule gives 4 already (28^2 at batch 128 135.5 -> 127.4, 14^2 86.2 -> 79.6, 7^2 50.8 -> 46.5); in
#   float32 8 pixels a thread ran ahead of 4 where a row has at least 14 (56^2 at batch 128 287.5 ->
#   231.7, 28^2 153.9 -> 142.3, 14^2 98.1 -> 80.0) and far behind at 7 (22.0 -> 40.6 at batch 32);
# - at stride 2 along W (MobileNetV2's 3x3/2 layers; depthwise-cv-fwd-strided-20261128T2147Z.txt) the
#   16-bit row of 4 pixels a thread (9 columns held) ran behind the tap loads it replaced (183.4
#   against 168.4 at 112^2/2, batch 128), 2 pixels a thread in blocks of 4 vectors ahead of them
#   (148.5; 79.0 against 83.7 at 56^2/2; a geometric 0.93x of their time over the six cases, 1.13x at
#   14^2/2 at batch 128, its one loss); float32 ran ahead on the rule's block (204.1 against 232.3).
WIDE_ROW = 7
WIDE_ROW_CV_16BIT = 4
WIDE_ROW_TQ_FP32 = 8
WIDE_ROW_TQ_MIN_Q = 14
STRIDED_ROW_CV_16BIT = 4
STRIDED_ROW_TQ_16BIT = 2


def sliding_block(vec: int, cv: int, tq: int, Q: int, sw: int, sx: int) -> tuple[int, int]:
    """(CV, TQ) of a depthwise forward pass on a sliding row sw wide at stride sx along W, from the
    rule's: in 16-bit (VEC = 8) at stride 2, STRIDED_ROW_TQ_16BIT pixels a thread in blocks of at
    most STRIDED_ROW_CV_16BIT vectors; WIDE_ROW wide at stride 1, at most WIDE_ROW_CV_16BIT vectors
    a block in 16-bit and WIDE_ROW_TQ_FP32 pixels a thread in float32 (VEC = 4) where rows have
    WIDE_ROW_TQ_MIN_Q or more; else as they are (one channel a thread, VEC = 1, is not measured)."""
    if vec == 8 and sx == 2:
        return min(cv, STRIDED_ROW_CV_16BIT), min(tq, STRIDED_ROW_TQ_16BIT)
    if sw == WIDE_ROW and sx == 1 and vec == 8:
        return min(cv, WIDE_ROW_CV_16BIT), tq
    if sw == WIDE_ROW and sx == 1 and vec == 4 and Q >= WIDE_ROW_TQ_MIN_Q:
        return cv, WIDE_ROW_TQ_FP32
    return cv, tq


def sliding_rows(on: bool = True):
    """Within it, the forward pass loads a row's pixels once for its taps where it can (on) or each
    tap's pixels on their own (off); SLIDING as it was after."""
    return setting(sys.modules[__name__], "SLIDING", on)


def narrow_block(vec: int, cv: int, taps: int, cg: int) -> int:
    """The channel vectors a block covers: NARROW_CV for the grouped build (cg > 1) where its taps
    fit the staged copy, else cv (the depthwise rule's)."""
    return NARROW_CV if cg > 1 and taps * cg * NARROW_CV * vec <= MAX_TAPS else cv


def _aligned(*ts: Tensor | None) -> bool:
    return all(t is None or t.data_ptr() % _ALIGN == 0 for t in ts)


def _vectors(dtype: torch.dtype, C: int, taps: int, *operands: Tensor) -> tuple[int, int]:
    """(VEC, CV) for a launch over these NHWC operands: 16 bytes of channels a thread where they
    allow it, and the channel vectors a block covers (its taps staged in shared memory)."""
    vec = conv05_vec(dtype, C, _aligned(*operands))
    cv = conv05_channel_vectors(C, vec, taps)
    if cv is None:  # (VEC = 1 holds MAX_TAPS, which depthwise_why_not checks)
        vec, cv = 1, conv05_channel_vectors(C, 1, taps)
    return vec, cv


def _device(t: Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _launches(N: int, per_image: int, C: int, vec: int, cv: int, device_id: int) -> tuple[tuple, int]:
    """The grid of a launch over images, and how many images one launch takes so that its 32-bit
    counts hold (tasks: per_image an image, one a lane)."""
    from .device import sm_count

    lanes = CONV05_THREADS // cv
    ys = -(-(-(-C // vec)) // cv)
    xs = max(1, min(-(-N * per_image // lanes), max(1, BLOCKS_AN_SM * sm_count(device_id) // ys)))
    room = _COUNT_LIMIT - xs * CONV05_THREADS
    if per_image > room:
        raise ValueError(f"conv05 counts in 32 bits: {per_image} tasks an image are too many")
    return (xs, ys, 1), max(1, min(N, room // per_image))


def _geometry_args(g: dict) -> tuple:
    return (g["H"], g["W"], g["C"], g["P"], g["Q"], g["R"], g["S"], *g["stride"], g["pads"][0], g["pads"][2],
            *g["dilation"])  # fmt: skip


def _nhwc_result(t: Tensor, channels_last: bool) -> Tensor:
    """An [N, H, W, C] tensor as [N, C, H, W]: a channels_last view, or a contiguous copy."""
    out = t.permute(0, 3, 1, 2)
    return out if channels_last else out.contiguous()


def run(x: Tensor, weight: Tensor, bias: Tensor | None, g: dict, activation: str | None, channels_last: bool,
        cg: int = 1) -> Tensor:  # fmt: skip
    """activation(conv2d(x, weight, groups=C/cg) + bias) in one launch (more only past 2^31 tasks;
    g: conv.conv_geometry's for the whole layer, C channels in and out; cg: channels a group, 1 for
    depthwise, else one of NARROW_GROUPS as narrow_groups_why_not allows). Returns [N, C, P, Q],
    channels_last where channels_last says torch's result would be, else contiguous."""
    N, C, P, Q, R, S = g["N"], g["C"], g["P"], g["Q"], g["R"], g["S"]
    xs = x.contiguous(memory_format=torch.channels_last)  # its memory NHWC: x itself where it is already
    if cg > 1 and not _aligned(xs):  # (an offset view: the grouped build reads 16 bytes a thread)
        xs = xs.clone(memory_format=torch.channels_last)
    wt = weight.contiguous()  # [C][cg][R*S]: the kernel stages a block's taps itself
    b = None if bias is None else bias.to(x.dtype).contiguous()
    y = torch.empty((N, P, Q, C), dtype=x.dtype, device=x.device)  # NHWC
    if y.numel():
        device_id = _device(x)
        vec, cv = _vectors(x.dtype, C, R * S * cg, xs, y)
        if vec % cg:
            raise ValueError(f"conv05's grouped build needs 16 bytes of channels a thread for groups of {cg}")
        strided, sw = tuple(g["stride"]) != (1, 1), sliding_width(g)
        sx = g["stride"][1] if sw else 1
        if cg > 1 and sx == 2 and not NARROW_STRIDED_ROW:  # (narrow groups at stride 2 along W: each tap's loads)
            sw, sx = 0, 1
        cv = narrow_block(vec, cv, R * S, cg) if cg > 1 else depthwise_block(C, vec, cv, R * S, strided)
        tq = TQ if Q >= TQ else 1
        if cg == 1 and sw:
            cv, tq = sliding_block(vec, cv, tq, Q, sw, sx)
        cfg = CONV_05.config(VEC=vec, TQ=tq, CG=cg, SW=sw, SX=sx)
        loaded = jit.load_kernel(CONV_05, cfg, device_id, x.dtype, x.dtype, post=post_code(b is not None, activation))
        grid, images = _launches(N, P * -(-Q // tq), C, vec, cv, device_id)
        size = x.element_size()
        for n0 in range(0, N, images):
            n = min(images, N - n0)
            launch.launch(loaded, device_id, grid, (CONV05_THREADS, 1, 1), xs.data_ptr() + n0 * g["H"] * g["W"] * C * size,
                          wt.data_ptr(), y.data_ptr() + n0 * P * Q * C * size, 0 if b is None else b.data_ptr(),
                          *(launch.i32(v) for v in (n, *_geometry_args(g), cv)))  # fmt: skip
    return _nhwc_result(y, channels_last)


def dgrad(dy: Tensor, weight: Tensor, g: dict, channels_last: bool, cg: int = 1) -> Tensor:
    """The input's gradient of run()'s convolution (geometry g; cg: channels a group as run() takes
    them) for the result's gradient dy [N, C, P, Q]: [N, C, H, W] in x's dtype, channels_last or
    contiguous as asked."""
    N, C, H, W, R, S = g["N"], g["C"], g["H"], g["W"], g["R"], g["S"]
    dys = dy.contiguous(memory_format=torch.channels_last)  # (an expanded dy, stride 0, is copied)
    if cg > 1 and not _aligned(dys):  # (an offset view: the grouped build reads 16 bytes a thread)
        dys = dys.clone(memory_format=torch.channels_last)
    wt = weight.contiguous()
    dx = torch.empty((N, H, W, C), dtype=dy.dtype, device=dy.device)
    if dx.numel():
        device_id = _device(dy)
        vec, cv = _vectors(dy.dtype, C, R * S * cg, dys, dx)
        if vec % cg:
            raise ValueError(f"conv05's grouped build needs 16 bytes of channels a thread for groups of {cg}")
        unit = tuple(g["stride"]) == (1, 1)
        cv = narrow_block(vec, cv, R * S, cg) if cg > 1 else depthwise_block(C, vec, cv, R * S, False)
        tq = TQ if unit else STRIDED_DGRAD_TQ
        tq = tq if W >= tq else 1
        cfg = CONV_05_DGRAD.config(VEC=vec, TQ=tq, UNIT=int(unit), CG=cg)
        loaded = jit.load_kernel(CONV_05_DGRAD, cfg, device_id, dy.dtype, dy.dtype)
        grid, images = _launches(N, H * -(-W // tq), C, vec, cv, device_id)
        size = dy.element_size()
        for n0 in range(0, N, images):
            n = min(images, N - n0)
            launch.launch(loaded, device_id, grid, (CONV05_THREADS, 1, 1), dys.data_ptr() + n0 * g["P"] * g["Q"] * C * size,
                          wt.data_ptr(), dx.data_ptr() + n0 * H * W * C * size,
                          *(launch.i32(v) for v in (n, *_geometry_args(g), cv)))  # fmt: skip
    return _nhwc_result(dx, channels_last)


def wgrad_taps(R: int, S: int, vec: int = 8, cg: int = 1) -> tuple[int, int]:
    """wgrad's (SG, RG): the taps of a filter row a thread sums and the filter rows. Depthwise
    (cg = 1): the whole row, up to CONV05_WG_S, and all R rows where R * SG <= WGRAD_TAPS_A_THREAD,
    else one. Narrow groups (VEC * CG sums a tap): as many taps of a row as keep a thread's sums
    within NARROW_WGRAD_SUMS, one row."""
    if cg > 1:
        return max(1, min(S, CONV05_WG_S, NARROW_WGRAD_SUMS // (vec * cg))), 1
    sg = min(S, CONV05_WG_S)
    return sg, R if R * sg <= WGRAD_TAPS_A_THREAD else 1


def wgrad_pixels(sg: int, rg: int, vec: int, cg: int = 1) -> int:
    """wgrad's PIX: the pixels whose loads (dy's and x's, 1 + RG * SG a pixel, 16 bytes each) a
    thread issues before their multiply-adds: WGRAD_PIX for depthwise, NARROW_WGRAD_PIX for narrow
    groups, fewer where the loads held (four registers each) and the thread's RG * SG * VEC * CG
    sums would pass WGRAD_REGISTERS (the launch bounds' 128 less what addresses and counts take)."""
    want = NARROW_WGRAD_PIX if cg > 1 else WGRAD_PIX
    room = (WGRAD_REGISTERS - rg * sg * vec * cg) // (4 * (rg * sg + 1))
    return max(1, min(want, room, 16 // (rg * sg + 1)))


def wgrad_chunk(g: dict, vec: int, sms: int, cg: int = 1) -> int:
    """wgrad's chunk: how many output pixels one thread sums (a function of the shapes and the SM
    count alone, so that a layer's filter gradient has the same bits at every launch on a GPU)."""
    pixels = g["N"] * g["P"] * g["Q"]
    sg, rg = wgrad_taps(g["R"], g["S"], vec, cg)
    threads = -(-g["R"] // rg) * -(-g["S"] // sg) * (g["C"] // vec)  # a chunk's tasks
    chunks = max(1, min(sms * _WGRAD_THREADS_AN_SM // threads, -(-pixels // _WGRAD_CHUNK_MIN),
                        _WGRAD_PARTS_MAX // (g["R"] * g["S"] * g["C"] * cg)))  # fmt: skip
    return -(-pixels // chunks)


def wgrad(x: Tensor, dy: Tensor, g: dict, weight_dtype: torch.dtype, cg: int = 1) -> Tensor:
    """The filter's gradient of run()'s convolution: [C, cg, R, S] in weight_dtype (cg: channels a
    group, 1 for depthwise, else narrow groups as run() takes them), from fp32 parts (a chunk of
    pixels each), added in a fixed order (WGRAD_SUM_CHUNKS says by which kernel)."""
    from .device import sm_count

    N, C, P, Q, R, S = g["N"], g["C"], g["P"], g["Q"], g["R"], g["S"]
    xs = x.contiguous(memory_format=torch.channels_last)
    dys = dy.contiguous(memory_format=torch.channels_last)
    if not (N * P * Q and C):
        return torch.zeros((C, cg, R, S), dtype=weight_dtype, device=x.device)
    if cg > 1 and not _aligned(xs, dys):  # (offset views: the grouped build reads 16 bytes a thread)
        xs, dys = xs.clone(memory_format=torch.channels_last), dys.clone(memory_format=torch.channels_last)
    device_id = _device(x)
    vec = conv05_vec(x.dtype, C, _aligned(xs, dys))
    if vec % cg:
        raise ValueError(f"conv05's grouped build needs 16 bytes of channels a thread for groups of {cg}")
    cv = conv05_channel_vectors(C, vec, 1)
    chunk = wgrad_chunk(g, vec, sm_count(device_id), cg)
    sg, rg = wgrad_taps(R, S, vec, cg)
    cfg = CONV_05_WGRAD.config(VEC=vec, SG=sg, RG=rg, CG=cg, PIX=wgrad_pixels(sg, rg, vec, cg))
    loaded = jit.load_kernel(CONV_05_WGRAD, cfg, device_id, x.dtype, x.dtype)
    tasks_a_chunk = -(-R // rg) * -(-S // sg)
    # images a launch: whole chunks of its own, its pixels and tasks within 32-bit counts
    per_image = P * Q
    grid, images = _launches(N, per_image, C, vec, cv, device_id)
    images = max(1, min(images, (_COUNT_LIMIT - grid[0] * CONV05_THREADS) // max(1, -(-per_image // chunk) * tasks_a_chunk)))
    counts = [min(images, N - n0) for n0 in range(0, N, images)]
    width = C * cg  # a tap's sums in parts: [vec][cg][C / vec]
    parts = torch.empty((sum(-(-n * per_image // chunk) for n in counts), R * S, width), dtype=torch.float32,
                        device=x.device)  # fmt: skip
    size, done, n0 = x.element_size(), 0, 0
    for n in counts:
        chunks = -(-n * per_image // chunk)
        blocks = max(1, min(grid[0], -(-chunks * tasks_a_chunk // (CONV05_THREADS // cv))))
        launch.launch(loaded, device_id, (blocks, grid[1], 1), (CONV05_THREADS, 1, 1),
                      xs.data_ptr() + n0 * g["H"] * g["W"] * C * size, dys.data_ptr() + n0 * per_image * C * size,
                      parts.data_ptr() + done * R * S * width * 4,
                      *(launch.i32(v) for v in (n, *_geometry_args(g), chunk, cv)))  # fmt: skip
        done, n0 = done + chunks, n0 + n
    if parts.shape[0] > WGRAD_SUM_CHUNKS:  # torch's reduction, parallel over the chunks too
        summed = parts.sum(0).view(R * S, vec, cg, C // vec)
        return summed.permute(3, 1, 2, 0).reshape(C, cg, R, S).to(weight_dtype).contiguous()
    dw = torch.empty((C, cg, R, S), dtype=weight_dtype, device=x.device)
    added = jit.load_kernel(CONV_05_WGRAD_SUM, CONV_05_WGRAD_SUM.config(), device_id, weight_dtype, weight_dtype)
    launch.launch(added, device_id, (-(-R * S * width // CONV05_SUM_ENTRIES), 1, 1), (CONV05_THREADS, 1, 1),
                  parts.data_ptr(), dw.data_ptr(), *(launch.i32(v) for v in (parts.shape[0], R * S, C, vec, cg)))  # fmt: skip
    return dw


class DepthwiseConv(torch.autograd.Function):
    """run() with autograd (no activation: conv2d applies it through torch): dgrad, wgrad and a
    sum over dy for the bias."""

    @staticmethod
    def forward(ctx, x, weight, bias, g, channels_last):
        ctx.save_for_backward(x, weight)
        ctx.g, ctx.has_bias = g, bias is not None
        ctx.bias_dtype = None if bias is None else bias.dtype
        return run(x, weight, bias, g, None, channels_last)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dy = dy.contiguous(memory_format=torch.channels_last)  # once for both kernels (an NCHW or expanded dy: a copy)
        dx = dgrad(dy, weight, ctx.g, _suggests_channels_last(x)) if ctx.needs_input_grad[0] else None
        dw = wgrad(x, dy, ctx.g, weight.dtype) if ctx.needs_input_grad[1] else None
        db = dy.sum((0, 2, 3)).to(ctx.bias_dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None


# ---- as operators, for torch.compile --------------------------------------------------------------


def _op_geometry(x_shape, w_shape, stride, padding, padding_name, dilation) -> dict:
    return conv_geometry(tuple(x_shape), tuple(w_shape), tuple(stride), padding_name or tuple(padding), tuple(dilation))


def _op(x: Tensor, weight: Tensor, bias: Tensor | None, stride: list[int], padding: list[int], padding_name: str,
        dilation: list[int], activation: str) -> Tensor:  # fmt: skip
    """The operator's launch: run() over the layer's geometry (activation "" for none), the group's
    width the weight's second dimension (1 depthwise, else narrow groups)."""
    g = _op_geometry(x.shape, weight.shape, stride, padding, padding_name, dilation)
    return run(x, weight, bias, g, activation or None, _suggests_channels_last(x) or _suggests_channels_last(weight),
               weight.shape[1])  # fmt: skip


depthwise_op = torch.library.custom_op("gemmlab::conv2d_depthwise", _op, mutates_args=(), device_types="cuda",
                                       schema=f"({CONV_OP_ARGS}) -> Tensor")
amp.register("conv2d_depthwise", amp.cast_conv_args)


@depthwise_op.register_fake
def _op_fake(x, weight, bias, stride, padding, padding_name, dilation, activation):
    """The result's shape and memory format without a launch, as run() returns it."""
    return empty_result(x, weight, stride, padding, padding_name, dilation)


_GRAD_ARGS = "int[] stride, int[] padding, str padding_name, int[] dilation"


@torch.library.custom_op("gemmlab::conv2d_depthwise_dgrad", mutates_args=(), device_types="cuda",
                         schema=f"(Tensor dy, Tensor weight, int[] x_size, {_GRAD_ARGS}, bool channels_last) -> Tensor")
def dgrad_op(dy, weight, x_size, stride, padding, padding_name, dilation, channels_last):
    """dgrad() as an operator: the input's gradient, [N, C, H, W] (x_size)."""
    g = _op_geometry(x_size, weight.shape, stride, padding, padding_name, dilation)
    return dgrad(dy, weight, g, channels_last, weight.shape[1])


@dgrad_op.register_fake
def _dgrad_fake(dy, weight, x_size, stride, padding, padding_name, dilation, channels_last):
    return torch.empty(tuple(x_size), dtype=dy.dtype, device=dy.device,
                       memory_format=torch.channels_last if channels_last else torch.contiguous_format)  # fmt: skip


@torch.library.custom_op("gemmlab::conv2d_depthwise_wgrad", mutates_args=(), device_types="cuda",
                         schema=f"(Tensor x, Tensor dy, int[] weight_size, {_GRAD_ARGS}, ScalarType weight_dtype) -> Tensor")
def wgrad_op(x, dy, weight_size, stride, padding, padding_name, dilation, weight_dtype):
    """wgrad() as an operator: the filter's gradient, [C, C / groups, R, S] (weight_size)."""
    g = _op_geometry(x.shape, weight_size, stride, padding, padding_name, dilation)
    return wgrad(x, dy, g, weight_dtype, weight_size[1])


@wgrad_op.register_fake
def _wgrad_fake(x, dy, weight_size, stride, padding, padding_name, dilation, weight_dtype):
    return torch.empty(tuple(weight_size), dtype=weight_dtype, device=x.device)


def _op_setup(ctx, inputs, output) -> None:
    x, weight, bias, stride, padding, padding_name, dilation, activation = inputs
    ctx.save_for_backward(x, weight)
    ctx.args, ctx.activation = (list(stride), list(padding), padding_name, list(dilation)), activation
    ctx.bias_dtype = None if bias is None else bias.dtype


def _op_backward(ctx, dy):
    """The operator's gradients through the two gradient operators and a sum over dy. conv2d passes
    no activation where a gradient is wanted: it applies it through torch, which keeps its input."""
    if ctx.activation:
        raise RuntimeError("gemmlab::conv2d_depthwise takes gradients without a fused activation; conv2d applies "
                           "the activation through torch where one is wanted")  # fmt: skip
    x, weight = ctx.saved_tensors
    dy = dy.contiguous(memory_format=torch.channels_last)  # once for both operators
    dx = dgrad_op(dy, weight, list(x.shape), *ctx.args, _suggests_channels_last(x)) if ctx.needs_input_grad[0] else None
    dw = wgrad_op(x, dy, list(weight.shape), *ctx.args, weight.dtype) if ctx.needs_input_grad[1] else None
    db = dy.sum((0, 2, 3)).to(ctx.bias_dtype) if ctx.bias_dtype is not None and ctx.needs_input_grad[2] else None
    return dx, dw, db, None, None, None, None, None


depthwise_op.register_autograd(_op_backward, setup_context=_op_setup)
