"""A whole torchvision network on gemmlab against the same network on torch's own layers: the model
built from one seed, deep-copied and put on gemmlab by gemmlab.nn.convert (every nn.Conv2d and
nn.Linear; batch norm, pooling and the rest stay torch's), in bf16 or fp16, channels_last, at each
batch size, cuDNN's autotuner on (torch.backends.cudnn.benchmark):

- "forward": inference, eval mode under torch.no_grad;
- "train": a training step, zero_grad, forward in train mode, the mean square error against a
  fixed target (in float32), backward, a torch.optim.SGD step (lr 1e-3, momentum 0.9).

Before timing, the first forward pass of each (eval mode) is compared: the relative norm of the
difference of the outputs goes into the record, and a gap past TOLERANCE (or a NaN) stops the case
untimed. Then the passes are timed as train-bench times its steps (gemmlab.bench.timing.interleaved:
rounds alternated, L2 flushed, a ~100 us spin before each start, host time past it counted).
One record file, rewritten after each case: <out>/<gpu>/model-<time>.json.

  PYTHONPATH=src python3 scripts/model_bench.py --model resnet50 --batch 32 --batch 256 --out "$OUT/results"
"""

import argparse
import copy
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

import gemmlab
from gemmlab.bench import environment
from gemmlab.bench.run import record_cases, results_path
from gemmlab.bench.timing import L2Flusher, interleaved, median
from gemmlab.bench.train import rel_norm

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = 5e-2  # the eval-mode outputs' gap, a network's depth of 16-bit roundings in two orders
SEED = 0
LR, MOMENTUM = 1e-3, 0.9


def build(name: str, dtype: torch.dtype, device: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    import torchvision

    torch.manual_seed(SEED)
    theirs = getattr(torchvision.models, name)().to(device=device, dtype=dtype, memory_format=torch.channels_last)
    ours = gemmlab.nn.convert(copy.deepcopy(theirs))
    return theirs, ours


def case(name: str, batch: int, image: int, dtype_name: str, step: str, reps: int, warmup: int, flusher) -> dict:
    dtype, device = DTYPES[dtype_name], "cuda"
    theirs, ours = build(name, dtype, device)
    gen = torch.Generator(device=device).manual_seed(SEED + 1)
    x = torch.randn(batch, 3, image, image, generator=gen, device=device).to(dtype).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        theirs.eval(), ours.eval()
        y_theirs, y_ours = theirs(x), ours(x)
    gap = rel_norm(y_ours, y_theirs)
    label = f"{name} batch {batch} {dtype_name} {step}"
    if not gap <= TOLERANCE:
        raise RuntimeError(f"{label}: the outputs differ by {gap:.2e} of torch's norm, over {TOLERANCE:.0e}; not timed")
    if step == "forward":
        def run(model):
            def go():
                with torch.no_grad():
                    return model(x)
            return go
        fns = {"gemmlab": run(ours), "torch": run(theirs)}
    else:
        target = torch.randn(batch, y_theirs.shape[1], generator=gen, device=device)
        fns = {}
        for key, model in (("gemmlab", ours), ("torch", theirs)):
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

            def go(model=model, opt=opt):
                opt.zero_grad(set_to_none=True)
                loss = F.mse_loss(model(x).float(), target)
                loss.backward()
                opt.step()
                return loss.detach()

            fns[key] = go
    times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher)
    ms = {k: median(v) for k, v in times.items()}
    print(f"{label}: {ms['torch'] / ms['gemmlab']:.2f}x torch ({ms['gemmlab']:.2f} ms against {ms['torch']:.2f}), "
          f"output gap {gap:.1e}", flush=True)  # fmt: skip
    return dict(model=name, batch=batch, image=image, dtype=dtype_name, step=step, reps=reps, output_gap=gap,
                ms=ms["gemmlab"], torch_ms=ms["torch"], times_ms=times["gemmlab"], torch_times_ms=times["torch"],
                vs_torch=ms["torch"] / ms["gemmlab"], images_per_s=batch / ms["gemmlab"] * 1e3,
                torch_images_per_s=batch / ms["torch"] * 1e3)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision.models classifier (default resnet50)")
    ap.add_argument("--batch", type=int, action="append", help="batch size (repeatable; default 32 and 256)")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--step", action="append", choices=("forward", "train"), help="default both")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True, help="records go to OUT/<gpu>/model-<time>.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("model_bench times a network on a CUDA GPU, and none is visible here")
    torch.backends.cudnn.benchmark = True
    meta = environment.describe(0)
    meta.update(kind="model", baseline="the same torchvision network on torch's own nn.Conv2d and nn.Linear "
                "(cuDNN with benchmark=True, cuBLAS): same weights and input, channels_last",
                train_step=f"zero_grad, forward (train mode), F.mse_loss(out.float(), target), backward, "
                           f"torch.optim.SGD(lr={LR}, momentum={MOMENTUM}) step")  # fmt: skip
    path = results_path(args.out, meta, "model")
    flusher = L2Flusher(0)
    cases = [partial(case, args.model, b, args.image, args.dtype, s, args.reps, args.warmup, flusher)
             for b in args.batch or [32, 256] for s in args.step or ["forward", "train"]]  # fmt: skip
    record_cases(path, meta, cases)
    print(f"record: {path}")


if __name__ == "__main__":
    main()
