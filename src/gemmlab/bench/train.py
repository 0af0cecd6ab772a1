"""gemmlab train-bench: one training step of a transformer block (bench.block.Block: LayerNorm, fused
qkv, causal scaled_dot_product_attention, SiLU-gated MLP) with every nn.Linear on gemmlab.nn.Linear,
against the same block on torch's own nn.Linear: the same weights (one seed, then the swap), the
same input and target. A step is what a training loop runs: zero_grad, the forward pass, the mean
square error against a fixed target (in float32), the backward pass and a torch.optim.AdamW step
(lr 1e-3, its default foreach implementation) -- only the Linear layers differ between the two.

Before timing, one step of each from the same weights: their losses and every parameter's gradient
must agree within the dtype's bound (LOSS_RTOL, GRAD_RTOL), else the case raises and is not timed.
Then whole steps are timed as linear-bench times its calls: interleaved rounds, L2 flushed before
each, a ~100 us spin ahead of each start event (bench.timing.interleaved without a gate: a step
that waits on the host for a launch counts the wait, as a training loop would).
"""

from __future__ import annotations

from functools import partial
import tomllib
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from . import environment
from .block import Block, on_gemmlab
from .run import REPS, record_cases, results_path
from .timing import L2Flusher, interleaved, median

SWEEP_KEYS = {"tag", "dtype", "blocks", "reps", "warmup"}
BLOCK_KEYS = {"name", "d_model", "heads", "ffn", "batch", "seq"}
SEED = 0  # the block's weights; the input and target come from SEED + 1
LR = 1e-3
OPTIMIZER = f"torch.optim.AdamW(lr={LR}) (foreach)"
# dtype -> (LOSS_RTOL, GRAD_RTOL): the first step's losses, and each parameter's gradient in the
# norm of the difference over its own. The two products round to the dtype in different summation
# orders; in bf16 (8 bits of mantissa) that is a few 1e-3 of a gradient's norm after the backward
# pass's chain of products, so 2e-2 passes rounding and fails a wrong product
# (amp-bf16: mixed precision as torch's recipe runs it, float32 parameters and optimizer, the forward
# pass and the loss in a bf16 autocast region, so the products round to bf16 as in "bf16")
TOLERANCES = {"bf16": (1e-2, 2e-2), "float32": (1e-4, 1e-4), "amp-bf16": (1e-2, 2e-2)}
# a dtype name -> (the parameters' and inputs' dtype, the autocast region's dtype or None)
MODES = {"bf16": (torch.bfloat16, None), "float32": (torch.float32, None), "amp-bf16": (torch.float32, torch.bfloat16)}


def read_train_sweep(path: Path) -> dict:
    """A TOML file: [[blocks]] tables of name, d_model, heads, ffn, batch, seq (tokens = batch x
    seq); dtype (bf16, float32, or amp-bf16: float32 parameters, the forward pass under
    torch.autocast to bf16); optionally tag, reps and warmup. Unknown keys, a d_model that the
    heads do not divide and sizes below 1 are errors."""
    data = tomllib.loads(Path(path).read_text())
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a train sweep takes {sorted(SWEEP_KEYS)}")
    dtype = data.get("dtype", "bf16")
    if dtype not in TOLERANCES:
        raise ValueError(f"{path}: dtype {dtype!r}: one of {', '.join(TOLERANCES)}")
    blocks = []
    for i, raw in enumerate(data.get("blocks", [])):
        if set(raw) != BLOCK_KEYS:
            raise ValueError(f"{path}: blocks[{i}] has keys {sorted(raw)}; a block takes {sorted(BLOCK_KEYS)}")
        block = dict(name=str(raw["name"]), **{k: int(raw[k]) for k in sorted(BLOCK_KEYS - {"name"})})
        if min(block[k] for k in BLOCK_KEYS - {"name"}) < 1 or block["d_model"] % block["heads"]:
            raise ValueError(f"{path}: blocks[{i}] ({block['name']}): sizes at least 1, and d_model={block['d_model']} "
                             f"a multiple of heads={block['heads']}")  # fmt: skip
        blocks.append(block)
    if not blocks:
        raise ValueError(f"{path}: needs [[blocks]]")
    return dict(blocks=blocks, dtype=dtype, tag=data.get("tag", "train"), reps=int(data.get("reps", REPS)),
                warmup=int(data.get("warmup", 2)))  # fmt: skip


def rel_norm(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref|| / ||ref||, in float32."""
    return float(torch.linalg.vector_norm(a.float() - ref.float()) / torch.linalg.vector_norm(ref.float()).clamp_min(1e-30))


def agreement(ref: torch.nn.Module, ours: torch.nn.Module, losses: dict[str, float]) -> dict:
    """The first step's loss gap (|gemmlab - torch| / |torch|) and the largest gradient gap over the
    parameters (rel_norm of gemmlab's against torch's), with the parameter it came from."""
    gaps = {name: rel_norm(q.grad, p.grad) for (name, p), q in zip(ref.named_parameters(), ours.parameters())}
    worst = max(gaps, key=lambda n: (gaps[n] != gaps[n], gaps[n]))  # (a NaN first)
    loss_gap = abs(losses["gemmlab"] - losses["torch"]) / max(abs(losses["torch"]), 1e-30)
    return dict(loss=losses, loss_gap=loss_gap, grad_gap=gaps[worst], grad_gap_param=worst)


def refuse_mismatch(case: str, agree: dict, dtype_name: str) -> None:
    """Raise where the losses or a gradient differ past the dtype's bound (or are NaN): a step that
    computes something else is never timed."""
    loss_rtol, grad_rtol = TOLERANCES[dtype_name]
    if not agree["loss_gap"] <= loss_rtol:
        raise RuntimeError(f"{case}: the first step's losses differ by {agree['loss_gap']:.2e} of torch's "
                           f"(torch {agree['loss']['torch']}, gemmlab {agree['loss']['gemmlab']}), over {loss_rtol:.0e}; not timed")  # fmt: skip
    if not agree["grad_gap"] <= grad_rtol:
        raise RuntimeError(f"{case}: the gradient of {agree['grad_gap_param']} differs by {agree['grad_gap']:.2e} "
                           f"of its norm from torch's, over {grad_rtol:.0e}; not timed")  # fmt: skip


def training_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor,
                  autocast: torch.dtype | None = None):  # fmt: skip
    """One step as a training loop runs it; the step returns its loss (a tensor: nothing synchronises).
    autocast: the forward pass and the loss in a CUDA autocast region of that dtype, the backward
    pass after it (torch's mixed-precision recipe; bf16 needs no gradient scaler)."""

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = F.mse_loss(model(x).float(), target.float())
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def train_case(block: dict, dtype_name: str, reps: int, warmup: int, flusher, device: str = "cuda") -> dict:
    """One block size: both models from one seed, one step of each checked against the other, then
    the median times of whole steps, torch's nn.Linear and gemmlab.nn.Linear interleaved."""
    if torch.device(device).type != "cuda":
        raise ValueError(f"train-bench times CUDA training steps; device {device!r} is not a CUDA device")
    dtype, region = MODES[dtype_name]
    d, b, s = block["d_model"], block["batch"], block["seq"]
    case = f"{block['name']} d={d} heads={block['heads']} ffn={block['ffn']} tokens={b}x{s} {dtype_name}"
    torch.manual_seed(SEED)
    ref = Block(d, block["heads"], block["ffn"], device=device, dtype=dtype)
    ours = on_gemmlab(ref)
    gen = torch.Generator(device=device).manual_seed(SEED + 1)
    x = torch.randn(b, s, d, generator=gen, device=device).to(dtype)  # [batch, seq, d]
    target = torch.randn(b, s, d, generator=gen, device=device).to(dtype)
    opts = {key: torch.optim.AdamW(m.parameters(), lr=LR) for key, m in (("torch", ref), ("gemmlab", ours))}
    fns: dict[str, Callable[[], object]] = {
        "gemmlab": training_step(ours, opts["gemmlab"], x, target, region),
        "torch": training_step(ref, opts["torch"], x, target, region),
    }
    losses = {key: float(fn()) for key, fn in fns.items()}  # one step each from the same weights
    agree = agreement(ref, ours, losses)
    refuse_mismatch(case, agree, dtype_name)
    times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher)
    ms = {key: median(v) for key, v in times.items()}
    tokens = b * s
    return dict(
        name=block["name"], d_model=d, heads=block["heads"], ffn=block["ffn"], batch=b, seq=s, tokens=tokens,
        dtype=dtype_name, optimizer=OPTIMIZER, reps=reps,
        ms=ms["gemmlab"], torch_ms=ms["torch"], times_ms=times["gemmlab"], torch_times_ms=times["torch"],
        vs_torch=ms["torch"] / ms["gemmlab"],
        tokens_per_s=tokens / ms["gemmlab"] * 1e3, torch_tokens_per_s=tokens / ms["torch"] * 1e3,
        **agree,
    )  # fmt: skip


def run_train_bench(sweep: dict, out_root: Path, device_id: int = 0,
                    on_record: Callable[[dict], None] | None = None) -> tuple[Path, list[dict]]:  # fmt: skip
    """Every block of the sweep into one record file (tag-<time>.json under the GPU's folder),
    rewritten after each case, so an interrupted run keeps what it measured."""
    if not torch.cuda.is_available():
        raise RuntimeError("train-bench times training steps against torch's own nn.Linear on a CUDA GPU, and none is visible here")
    flusher = L2Flusher(device_id)
    meta = environment.describe(device_id)
    meta.update(kind="train", dtype=sweep["dtype"], optimizer=OPTIMIZER,
                step="zero_grad, forward, F.mse_loss(out.float(), target.float()), backward, optimizer step",
                baseline="the same block on torch's own nn.Linear: same weights, input, target and optimizer")  # fmt: skip
    path = results_path(out_root, meta, sweep["tag"])
    cases = [partial(train_case, block, sweep["dtype"], sweep["reps"], sweep["warmup"], flusher, f"cuda:{device_id}")
             for block in sweep["blocks"]]  # fmt: skip
    return path, record_cases(path, meta, cases, on_record)
