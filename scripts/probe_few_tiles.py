"""bf16 GEMMs whose rows of A or B are not whole 16-byte units and whose product is a few tiles:
`auto`, tc04 by name (which reads them in place, and which `auto` took before copies_pay staged a
few tiles with a long K), the same product staged for tc09's stream-K (kernel="tc09_stream_k":
padded copies, K split over the SMs) and torch.mm, each
checked against float64 first, then timed interleaved behind a host gate with L2 flushed (median of
20, microseconds). Prints one line a shape: the question of docs/notes/few-tiles-unaligned-rows.md.
  python3 scripts/probe_few_tiles.py"""

import torch

import gemmlab
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median

# (M, N, K): a grouped layer's filter gradient (4 filters x 36 taps-channels over 100352 pixels),
# a few rows against an odd width, a small odd square with a long K, and aligned neighbours
# (a grouped layer's filter gradient reads A = dY's rows transposed in place: "tn")
SHAPES = [(4, 36, 100352, "tn"), (4, 36, 100352, "nn"), (8, 72, 25088, "tn"), (1, 100, 16384, "nn"), (16, 100, 16384, "nn"),
          (100, 100, 16384, "nn"), (100, 100, 1024, "nn"), (100, 100, 512, "nn"), (500, 36, 2048, "nn"),
          (1000, 4, 100352, "nn"), (4, 40, 100352, "tn"), (104, 104, 16384, "nn")]  # fmt: skip


def main() -> None:
    flush, gate = L2Flusher(0), HostGate(0)
    for M, N, K, layout in SHAPES:
        a = torch.randn(K, M, device="cuda").bfloat16().t() if layout == "tn" else torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        ref = a.double() @ b.double()
        fns = {"auto": lambda: gemmlab.gemm(a, b), "tc04": lambda: gemmlab.gemm(a, b, kernel="tc04_wgmma"),
               "tc09 staged": lambda: gemmlab.gemm(a, b, kernel="tc09_stream_k"),
               "torch.mm": lambda: torch.mm(a, b)}  # fmt: skip
        errs = {k: float((f().double() - ref).abs().max() / ref.abs().max()) for k, f in fns.items()}
        t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate).items()}
        print(f"{M}x{N}x{K} {layout}:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
              "| errors " + " ".join(f"{e:.1e}" for e in errs.values()), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
