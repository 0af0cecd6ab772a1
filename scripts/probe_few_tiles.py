"""bf16 GEMMs that `auto` leaves on tc04's few tiles (rows of A or B not whole 16-byte units, a
product too small for copies_pay to stage it for tc07/tc09) against the same product staged for
tc09's stream-K (kernel="tc09_stream_k": padded copies, K split over the SMs) and torch.mm, each
checked against float64 first, then timed interleaved behind a host gate with L2 flushed (median of
20, microseconds). Prints one line a shape: the question of docs/notes/few-tiles-unaligned-rows.md.
  python3 scripts/probe_few_tiles.py"""

import torch

import gemmlab
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median

# (M, N, K): a grouped layer's filter gradient (4 filters x 36 taps-channels over 100352 pixels),
# a few rows against an odd width, a small odd square with a long K, and aligned neighbours
SHAPES = [(4, 36, 100352), (8, 72, 25088), (1, 100, 16384), (16, 100, 16384), (100, 100, 16384), (100, 100, 1024),
          (4, 40, 100352), (104, 104, 16384)]  # fmt: skip


def main() -> None:
    flush, gate = L2Flusher(0), HostGate(0)
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        ref = a.double() @ b.double()
        fns = {"auto": lambda: gemmlab.gemm(a, b), "tc09 staged": lambda: gemmlab.gemm(a, b, kernel="tc09_stream_k"),
               "torch.mm": lambda: torch.mm(a, b)}  # fmt: skip
        errs = {k: float((f().double() - ref).abs().max() / ref.abs().max()) for k, f in fns.items()}
        t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate).items()}
        print(f"{M}x{N}x{K}:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
              "| errors " + " ".join(f"{e:.1e}" for e in errs.values()), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
