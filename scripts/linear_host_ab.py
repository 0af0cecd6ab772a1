"""Host time of gemmlab.nn.Linear's eager autograd, in one process, rounds alternated:

- "new": `gemmlab.linear` as it runs (its own `nn._LinearFunction`);
- "old": the same call through gemm()'s operator path (`ops._GemmFunction`, which traces, tensor
  subclasses and functorch transforms still take), by making `nn._plain` say no;
- "torch": torch's own nn.Linear; "pyfn+torch": a Python autograd Function around torch's own
  products (addmm forward, two mm and a sum backward), the floor of any Python-level Function.

    PYTHONPATH=src python3 scripts/linear_host_ab.py > linear-host-ab.txt

First checks that "old" and "new" give the same bits (result, dx, dW, db; bf16 and float32); then
times a Linear's forward and backward pass, each alone, both together at two sizes, and a
transformer block's whole training step (gemmlab.bench.block) at d_model 64 and 1024. The GPU is
kept busy by nothing else: at these sizes a step is bound by the host."""

import statistics
import time

import torch

import gemmlab.nn as gnn
from gemmlab.bench.block import Block, on_gemmlab
from gemmlab.bench.train import training_step

DEV = "cuda"
_PLAIN = gnn._plain


def mode(m: str) -> None:
    gnn._plain = _PLAIN if m != "old" else (lambda *a: False)


class TorchLinear(torch.autograd.Function):
    """The floor: a Python Function around torch's own products."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return torch.addmm(b, x, w.t())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, g.sum(0)


def same_bits(dtype) -> bool:
    torch.manual_seed(0)
    lin = gnn.Linear(256, 512, device=DEV, dtype=dtype)
    x = torch.randn(64, 4, 256, device=DEV, dtype=dtype, requires_grad=True)
    outs = {}
    for m in ("old", "new"):
        mode(m)
        x.grad, lin.weight.grad, lin.bias.grad = None, None, None
        y = lin(x)
        y.backward(torch.randn(y.shape, device=DEV, dtype=dtype, generator=torch.Generator(DEV).manual_seed(1)))
        outs[m] = (y.detach(), x.grad, lin.weight.grad, lin.bias.grad)
    return all(torch.equal(a, b) for a, b in zip(outs["old"], outs["new"]))


def timed(label: str, fns: dict, calls: int, rounds: int = 7) -> None:
    for k, f in fns.items():
        mode(k)
        for _ in range(max(3, calls // 10)):
            f()
    torch.cuda.synchronize()
    res = {k: [] for k in fns}
    for r in range(rounds):
        for k, f in list(fns.items())[:: 1 if r % 2 else -1]:
            mode(k)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(calls):
                f()
            torch.cuda.synchronize()
            res[k].append((time.perf_counter() - t) / calls * 1e6)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{label}: " + ", ".join(f"{k} {v:.1f} us" for k, v in med.items())
          + f" | torch / new {med['torch'] / med['new']:.3f}, torch / old {med['torch'] / med['old']:.3f}", flush=True)


def linear_fns(rows: int, fan_in: int, fan_out: int, dtype=torch.bfloat16):
    torch.manual_seed(0)
    ref = torch.nn.Linear(fan_in, fan_out, device=DEV, dtype=dtype)
    ours = gnn.Linear(fan_in, fan_out, device=DEV, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(rows, fan_in, device=DEV, dtype=dtype, requires_grad=True)
    g = torch.randn(rows, fan_out, device=DEV, dtype=dtype)
    return ref, ours, x, g


def main() -> None:
    print(f"{torch.cuda.get_device_name()}; same bits old and new: bf16 {same_bits(torch.bfloat16)}, "
          f"float32 {same_bits(torch.float32)}", flush=True)  # fmt: skip
    ref, ours, x, g = linear_fns(256, 256, 512)
    timed("Linear 256->512, 256 rows, bf16, forward", {
        "old": lambda: ours(x), "new": lambda: ours(x), "torch": lambda: ref(x),
        "pyfn+torch": lambda: TorchLinear.apply(x, ref.weight, ref.bias)}, 300)  # fmt: skip
    ys = {}
    for k in ("old", "new"):
        mode(k)
        ys[k] = ours(x)
    ys["torch"], ys["pyfn+torch"] = ref(x), TorchLinear.apply(x, ref.weight, ref.bias)
    timed("Linear 256->512, 256 rows, bf16, backward alone", {
        k: (lambda y=y: y.backward(g, retain_graph=True)) for k, y in ys.items()}, 300)  # fmt: skip
    for rows, fan_in, fan_out in ((256, 256, 512), (64, 4096, 4096)):
        ref, ours, x, g = linear_fns(rows, fan_in, fan_out)
        timed(f"Linear {fan_in}->{fan_out}, {rows} rows, bf16, forward and backward", {
            "old": lambda: ours(x).backward(g), "new": lambda: ours(x).backward(g),
            "torch": lambda: ref(x).backward(g)}, 300)  # fmt: skip
    for d, heads, ffn, batch, seq in ((64, 4, 128, 1, 64), (1024, 16, 4096, 4, 2048)):
        torch.manual_seed(0)
        ref = Block(d, heads, ffn, device=DEV, dtype=torch.bfloat16)
        ours = on_gemmlab(ref)
        x = torch.randn(batch, seq, d, device=DEV).to(torch.bfloat16)
        target = torch.randn(batch, seq, d, device=DEV).to(torch.bfloat16)
        steps = {name: training_step(m, torch.optim.AdamW(m.parameters(), lr=1e-3), x, target)
                 for name, m in (("torch", ref), ("gemmlab", ours))}  # fmt: skip
        timed(f"transformer block d_model {d}, {batch * seq} tokens, bf16, training step", {
            "old": steps["gemmlab"], "new": steps["gemmlab"], "torch": steps["torch"]}, 20)  # fmt: skip


if __name__ == "__main__":
    main()
