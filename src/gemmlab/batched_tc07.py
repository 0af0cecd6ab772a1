"""One launch for a whole batch of products: tc07's batched build (TC_07_BATCHED), its config and
its launch glue. gemmlab.bmm calls it where it is asked to (batched.ONE_LAUNCH, one_launch=True).

Its GPU tests (tests/test_batched_tc07.py) check it against float64 on a Hopper GPU, and the fuzz
draws batched problems through it (gemmlab fuzz).

A and B reach the kernel through rank-3 tensor maps ([batch][rows][cols], the batch stride
outermost), so TMA fills zeros past each matrix's own edges and a tile never multiplies the next
matrix's elements (NaN or Inf included) into its product. A single [M, K] A (or [K, N] B) shared
by the batch is a map of one matrix, read at batch coordinate 0 by every product (its step 0). An
operand stored transposed per matrix ([B, K, M] storage for A: a.transpose(1, 2) of a contiguous
tensor) is read in place (TA, TB), as gemm() reads 2-D ones. An operand whose address, row stride
or batch stride TMA cannot take (not multiples of 16 bytes: K = 7 in bf16) is copied first, by
torch on the current stream, into a batch of rows padded to 16 bytes.

D is a new contiguous [B, M, N] tensor. Where its rows are whole 16-byte units (N * element size a
multiple of 16: then so are its row and batch strides; torch.empty aligns it), it leaves through
tc07's staged epilogue -- 64 x 64 chunks through swizzled shared memory, one TMA store a chunk --
into a rank-3 map (tma.batched_output_map_params), whose stores clip at each product's own last
row and column; otherwise (N = 7 in bf16), or with TMA_STORE off, the build that writes D from
registers. C ([B, M, N], unit column stride) is read only when beta != 0, by either epilogue. A
bias over D's columns and an activation are fused into the epilogue (POST), as gemm() fuses them.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import torch
from torch import Tensor

from . import jit, launch, tma
from .activations import ACTIVATIONS, post_code
from .settings import setting
from .specs.base import GemmConfig, cdiv
from .specs.persistent import TC_07_BATCHED

SPEC = TC_07_BATCHED
DTYPES = (torch.bfloat16, torch.float16)
MIN_CAPABILITY = (9, 0)
MAX_TILES = 2**31 - 1  # the kernel counts the batch's tiles in a 32-bit int

# Whether a D that takes TMA stores leaves through the staged epilogue (TMA_STORE = 1); False: the
# register build for every call (bmm-bench --register-stores times both in one run).
TMA_STORE = True


def staged_stores(on: bool = True):
    """Within it, calls take the staged TMA-store build where D permits (on) or never (off);
    TMA_STORE as it was after."""
    return setting(sys.modules[__name__], "TMA_STORE", on)


def config_for(N: int, ta: int, tb: int, *, staged: bool = False, beta: float = 0.0, M: int | None = None,
               batch: int = 1, sms: int | None = None) -> GemmConfig:  # fmt: skip
    """The batched build's config: the 128 x 256 tile, or 128 x 128 where D is at most 128 wide (a
    256-wide tile would be half empty) or where the batch's 128 x 256 tiles would leave at least half
    of the sms SMs idle (given M, batch and sms: twice the tiles of half the work each, so every SM
    that would have waited takes one; B = 8 products of 512^3 are 64 such tiles); TA, TB from the
    operands' storage. staged: D takes TMA stores
    (stores_staged), so the staged epilogue (TMA_STORE = 1), with EPI = 0 -- that epilogue alone --
    where beta is 0, as configs.rules.epilogue_for chooses it for gemm(), and EPI = 1 (C read into the
    staged chunks) where it is not; otherwise the register build (TMA_STORE = 0, EPI = 1)."""
    tma_store = int(staged)
    epi = 0 if staged and beta == 0 else 1
    few = M is not None and sms is not None and 2 * batch * cdiv(M, 128) * cdiv(N, 256) <= sms
    return SPEC.config(BN=256 if N > 128 and not few else 128, TA=ta, TB=tb, TMA_STORE=tma_store, EPI=epi)


def stores_staged(d: Tensor) -> bool:
    """Whether a call writing D [B, M, N] takes the staged build: TMA_STORE is on, D is 16-byte
    aligned and its rank-3 map exists (rows, row and batch strides of whole 16-byte units: a new
    contiguous D's are where N * element size is). The kernel checks the same again and would
    store from registers where they fail."""
    ldd, sd = _d_strides(d)
    B, M, N = d.shape
    return (TMA_STORE and d.data_ptr() % tma.TMA_ALIGN_BYTES == 0
            and tma.batched_output_map_params(B, M, N, ldd, sd, d.element_size()) is not None)  # fmt: skip


def refusal(a, b, c=None, *, beta=0.0, out_dtype=None, bias=None, activation=None) -> str | None:
    """Why the one-launch path cannot serve these arguments (already checked by bmm for ranks and
    shapes), or None. The device is checked last, so CPU tensors get every other reason first."""
    if a.dtype not in DTYPES or b.dtype != a.dtype:
        return f"the one-launch batched path takes bf16 or fp16 inputs of one dtype, got {a.dtype} and {b.dtype}"
    if a.dim() == 2 and b.dim() == 2:
        return "the one-launch batched path needs a batched operand"
    if out_dtype not in (None, a.dtype, torch.float32):
        return f"the one-launch batched path writes {a.dtype} or float32 results, not {out_dtype}"
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} is not one of {', '.join(repr(k) for k in ACTIVATIONS)}"
    N = b.shape[-1]
    if bias is not None and (not isinstance(bias, Tensor) or bias.dim() != 1 or bias.shape[0] != N
                             or not bias.is_floating_point()):  # fmt: skip
        return f"bias must be a floating-point vector of N = {N} elements (one a column of D)"
    if beta != 0 and c is None:
        return "beta != 0 needs c"
    if c is not None and c.dtype != (out_dtype or a.dtype):
        return f"c must have the result's dtype {out_dtype or a.dtype}, got {c.dtype}"
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    if batch == 0 or M == 0 or N == 0 or K == 0:
        return "an empty batch or product (batch, M, N or K 0) has nothing for the one-launch path to load"
    if batch * cdiv(M, 128) * cdiv(N, 128) > MAX_TILES:
        return f"a batch of {batch} products of {M} x {N} has more tiles than the kernel's 32-bit tile count"
    tensors = [t for t in (a, b, c, bias) if t is not None]
    if any(t.device.type != "cuda" for t in tensors) or len({t.device for t in tensors}) != 1:
        return "the one-launch batched path runs on CUDA tensors of one device"
    major_minor = torch.cuda.get_device_capability(a.device)
    if major_minor < MIN_CAPABILITY:
        return f"the one-launch batched path (tc07's batched build) needs sm_90 or later, not sm_{major_minor[0]}{major_minor[1]}"
    return None


def _storage(t: Tensor) -> tuple[Tensor, int, int, int, int, int, int, int]:
    """A 2-D or 3-D operand as the kernel's 3-D map reads it: (storage tensor, batch, rows, cols,
    row stride, batch stride) in elements, whether it is stored transposed per matrix (its rows
    then the operand's columns), and its batch step (0: one matrix for every product -- a 2-D
    operand, or a 3-D one whose batch stride is 0, as expand() makes). Other layouts, and strides
    TMA cannot take, as padded copies."""
    step = int(t.dim() == 3 and (t.shape[0] <= 1 or t.stride(0) != 0))
    t3 = t if t.dim() == 3 else t.unsqueeze(0)
    t3 = t3 if step else t3[:1]
    batch, r, k = t3.shape
    trans = r > 1 and k > 1 and t3.stride(1) == 1 and t3.stride(2) != 1  # [batch][k][r] storage
    view = t3.transpose(1, 2) if trans else t3
    if view.shape[2] > 1 and view.stride(2) != 1:
        view, trans = t3.contiguous(), False
    rows, cols = view.shape[1], view.shape[2]
    ld = view.stride(1) if rows > 1 else cols
    bs = view.stride(0) if batch > 1 else rows * ld
    size = t.element_size()
    if view.data_ptr() % 16 or (ld * size) % 16 or (bs * size) % 16:
        pad = -(-cols // (16 // size)) * (16 // size)
        padded = torch.empty((batch, rows, pad), dtype=t.dtype, device=t.device)[:, :, :cols]
        padded.copy_(view)
        view, ld, bs = padded, pad, rows * pad
    return view, batch, rows, cols, ld, bs, int(trans), step


class _Plan(NamedTuple):
    """A kind of call prepared (bmm_one_launch's first call of it): the kernel, its grid, the
    operands' map geometry (batch, rows, cols, row and batch stride, in elements) read in place
    from the caller's tensors, D's shape and type, and the scalar arguments (C's strides among them)."""

    loaded: object
    device_id: int
    grid: tuple
    block: tuple
    boxes: dict
    geometry: tuple  # A's and B's (batch, rows, cols, ld, batch stride) as tensor_map_3d takes them
    d_params: dict | None  # D's rank-3 map (tma.batched_output_map_params) for the staged build, else None
    d_strides: tuple  # D's row and batch strides (_d_strides) the scalars were worked out for
    placeholder_map: object  # D's map where the build writes D from registers (never read)
    d_shape: tuple
    result: torch.dtype
    head: tuple  # the scalars between D's address and the bias's
    tail: tuple  # those after it
    launcher: object  # launch.Launcher: the launch's geometry fixed once
    maps: dict  # (address of a, b, D) -> the three tensor maps for them: all else a map encodes is the plan's


_PLANS: dict[tuple, _Plan] = {}
_PLANS_MAX = 1024  # kinds of call remembered; past it the table starts again
_PLAN_MAPS_MAX = 64  # sets of addresses a plan keeps maps for (a training loop's few); past it, again


def _key(a, b, c, alpha, beta, out_dtype, bias, activation) -> tuple:
    """What a kind of call is: everything the refusal, the config and the launch's geometry depend
    on, but the tensors' addresses."""
    meta = lambda t: None if t is None else (t.shape, t.stride(), t.dtype, t.device)  # noqa: E731
    return (meta(a), meta(b), meta(c) if beta != 0 else None, alpha, beta, out_dtype, meta(bias), activation, TMA_STORE)


def prepared(a, b, c=None, *, alpha=1.0, beta=0.0, out_dtype=None, bias=None, activation=None) -> bool:
    """Whether an earlier call of this kind was served (so refusal(...) has nothing to say)."""
    return _key(a, b, c, alpha, beta, out_dtype, bias, activation) in _PLANS


def _new_d(shape: tuple, dtype: torch.dtype, device) -> Tensor:
    """D's memory: a new contiguous [B, M, N] tensor. The launch reads D's row and batch strides
    from it, so a test may hand out a strided view with poisoned rows between the matrices."""
    return torch.empty(shape, dtype=dtype, device=device)


def _d_strides(d: Tensor) -> tuple[int, int]:
    """D's row and batch strides in elements, as the kernel and D's map take them."""
    B, M, N = d.shape
    ld = d.stride(1) if M > 1 else N
    return ld, d.stride(0) if B > 1 else M * ld


def _aligned(*ts) -> bool:
    return all(t.data_ptr() % tma.TMA_ALIGN_BYTES == 0 for t in ts)


def bmm_one_launch(a: Tensor, b: Tensor, c: Tensor | None = None, *, alpha=1.0, beta=0.0, out_dtype=None, bias=None,
                   activation=None) -> Tensor:  # fmt: skip
    """D[i] = activation(alpha * A[i] @ B[i] + beta * C[i] + bias) in one launch of tc07's batched
    build (refusal(...) must be None; bias [N], one for every product, fused into the epilogue as
    gemm() fuses it). a [B, M, K] or [M, K], b [B, K, N] or [K, N]; returns D [B, M, N].
    The first call of a kind (_key) is worked out in full and, where both operands are read in
    place, prepared (_Plan); later ones launch from the plan."""
    key = _key(a, b, c, alpha, beta, out_dtype, bias, activation)
    plan = _PLANS.get(key)
    if plan is None or not _aligned(a, b):
        return _first_call(key, a, b, c, alpha, beta, out_dtype, bias, activation)
    d = _new_d(plan.d_shape, plan.result, a.device)
    if _d_strides(d) != plan.d_strides or stores_staged(d) != (plan.d_params is not None):
        return _first_call(key, a, b, c, alpha, beta, out_dtype, bias, activation)
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    maps = plan.maps.get((a_ptr, b_ptr, d_ptr))  # (the caching allocator mostly hands the same blocks back)
    if maps is None:
        maps = (*(tma.tensor_map_3d(t, *geo, plan.boxes[n]) for t, geo, n in ((a, plan.geometry[0], "a"), (b, plan.geometry[1], "b"))),
                tma.batched_output_map(d, plan.d_params) if plan.d_params is not None else plan.placeholder_map)  # fmt: skip
        if len(plan.maps) >= _PLAN_MAPS_MAX:
            plan.maps.clear()
        plan.maps[(a_ptr, b_ptr, d_ptr)] = maps
    c_ptr = 0
    if beta != 0:
        c = c if c.shape[2] <= 1 or c.stride(2) == 1 else c.contiguous()
        c_ptr = c.data_ptr()
    bias = None if bias is None else bias.to(plan.result).contiguous()
    plan.launcher(*maps, a_ptr, b_ptr, c_ptr, d_ptr, *plan.head, bias.data_ptr() if bias is not None else 0, *plan.tail)
    del bias, c  # (converted copies: back to torch only once the kernel is queued behind them)
    return d


def _first_call(key, a, b, c, alpha, beta, out_dtype, bias, activation) -> Tensor:
    why = refusal(a, b, c, beta=beta, out_dtype=out_dtype, bias=bias, activation=activation)
    if why:
        raise ValueError(why)
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    sa, sb = _storage(a), _storage(b)
    result = out_dtype or a.dtype
    d = _new_d((batch, M, N), result, a.device)
    ldd, sd = _d_strides(d)
    staged = stores_staged(d)
    device_id = a.device.index if a.device.index is not None else torch.cuda.current_device()
    from .device import sm_count_of

    cfg = config_for(N, ta=sa[6], tb=sb[6], staged=staged, beta=beta, M=M, batch=batch, sms=sm_count_of(a.device))
    post = post_code(bias is not None, activation)
    bias = bias.to(result).contiguous() if bias is not None else None
    loaded = jit.load_kernel(SPEC, cfg, device_id, a.dtype, result, post=post)
    boxes = SPEC.tma_boxes(cfg)
    maps = [tma.tensor_map_3d(*s[:6], boxes[n]) for n, s in (("a", sa), ("b", sb))]
    from .api import _placeholder  # the register build's D map, never read

    placeholder = tma.tensor_map(_placeholder(a.device, a.dtype), 1, 8, 8, (64, 64))
    d_params = tma.batched_output_map_params(batch, M, N, ldd, sd, d.element_size()) if staged else None
    maps.append(tma.batched_output_map(d, d_params) if d_params is not None else placeholder)
    if beta != 0:
        if N > 1 and c.stride(2) != 1:
            c = c.contiguous()
        c_ptr, ldc, sc = c.data_ptr(), (c.stride(1) if M > 1 else N), (c.stride(0) if batch > 1 else 0)
    else:
        c_ptr, ldc, sc = 0, N, 0
    tiles = batch * cdiv(M, cfg["BM"]) * cdiv(N, cfg["BN"])
    block = SPEC.block(cfg)
    grid = (min(tiles, launch.resident_blocks(loaded, device_id, block, None)), 1, 1)
    i32, i64, f32 = launch.i32, launch.i64, launch.f32
    a_step, b_step = sa[7], sb[7]  # 0: one matrix for the whole batch
    head = (i32(M), i32(N), i32(K), i32(sa[4]), i32(sb[4]), i32(ldc), i32(ldd), f32(alpha), f32(beta))
    tail = (i32(batch), i32(a_step), i32(b_step), i64(sc), i64(sd))
    launch.launch(loaded, device_id, grid, block, *maps, sa[0].data_ptr(), sb[0].data_ptr(), c_ptr, d.data_ptr(),
                  *head, bias.data_ptr() if bias is not None else 0, *tail)  # fmt: skip
    # Prepared only where both operands were read in place, so that a later call's maps are those
    # of its own tensors (a C that needs a copy is copied on each call, to the same strides)
    if sa[0].data_ptr() == a.data_ptr() and sb[0].data_ptr() == b.data_ptr():
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = _Plan(loaded, device_id, grid, block, boxes, (sa[1:6], sb[1:6]), d_params, (ldd, sd), placeholder,
                            (batch, M, N), result, head, tail, launch.Launcher(loaded, device_id, grid, block), {})  # fmt: skip
    del sa, sb, bias  # only now may padded copies go back to torch: the kernel is queued behind them
    return d
