"""gemmlab.bmm forward and backward (autograd, bf16) against torch.bmm's, and against bmm's
per-matrix launches (one_launch=False), in one process, rounds alternated.

    PYTHONPATH=src python3 scripts/bmm_grad_bench.py > bmm-grad.txt

Each call: D = bmm(A, B), then D.backward(G) (dA and dB). Wall time a call, the GPU's queue
drained at the end of each round of 30 calls; medians of 7 rounds. Before timing, the gradients of
each way are checked against float64."""

import statistics
import time

import torch

import gemmlab

SHAPES = [(8, 2048, 2048, 2048), (16, 1024, 1024, 1024), (64, 512, 512, 512), (32, 1024, 1024, 128),
          (16, 1000, 1000, 1000), (64, 128, 128, 64)]  # fmt: skip


def main() -> None:
    print(torch.cuda.get_device_name(), flush=True)
    for B, M, N, K in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(B, M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(B, K, N, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(B, M, N, device="cuda", dtype=torch.bfloat16)
        ways = {"one launch": lambda: gemmlab.bmm(a, b), "per matrix": lambda: gemmlab.bmm(a, b, one_launch=False),
                "torch.bmm": lambda: torch.bmm(a, b)}  # fmt: skip
        a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        torch.bmm(a64, b64).backward(g.double())
        errs = {}
        for name, f in ways.items():
            a.grad = b.grad = None
            f().backward(g)
            errs[name] = max(float((t.grad.double() - r.grad).abs().max() / r.grad.abs().max()) for t, r in ((a, a64), (b, b64)))
        times = {name: [] for name in ways}
        for r in range(7):
            for name, f in list(ways.items())[:: 1 if r % 2 else -1]:
                for _ in range(3):
                    f().backward(g)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(30):
                    f().backward(g)
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t) / 30 * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"B={B} {M}x{N}x{K}: " + ", ".join(f"{k} {v:.1f} us (grad error {errs[k]:.1e})" for k, v in med.items())
              + f" | torch / one launch {med['torch.bmm'] / med['one launch']:.2f}x,"
              f" torch / per matrix {med['torch.bmm'] / med['per matrix']:.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
