"""Probe (not part of the package): clusters of two against single blocks where configs.SIZE_RULES
gives tc07 and tc09 single blocks (M x N up to 2560^2).

The rule was measured on squares and near-squares (tune-small-cm-20261124T133947Z.json: single
blocks 0.5-5.6% ahead). At M = 512 and 1024 tokens of Llama 3's layers (x @ w.t(), bf16) tc09
with clusters of two ran 2.7-7.4% ahead of its single blocks at 512 x 8192-10240 x 8192-28672,
1.5-3.8% at 1024 x 4096-6144 (tune-m512-20261124T230602Z.json). This times both cluster shapes of
tc07 (128 x 256 tiles) and tc09, and 'auto', at flat and long-K shapes inside the rule's range,
with B row-major (nn) and B a transposed view (nt), each case checked against float64 first and
timed in the same rounds as cuBLAS (gemmlab's bench: records under $OUT/results, tag tune-cm-flat).
On the GPU machine:  PYTHONPATH=src OUT=$OUT python3 probes/cm_flat_probe.py"""
import os
from pathlib import Path

import torch

from gemmlab.bench.run import run_bench

SHAPES = [(512, 8192, 4096), (512, 8192, 8192), (512, 8192, 16384), (512, 10240, 4096), (512, 12288, 8192),
          (256, 16384, 8192), (1024, 4096, 4096), (1024, 4096, 8192), (1024, 4096, 16384), (1024, 6144, 4096),
          (1024, 6144, 8192), (2048, 2048, 4096), (2048, 2048, 8192), (2048, 2048, 16384), (2048, 3072, 4096),
          (1536, 4096, 4096), (2560, 2560, 8192)]  # fmt: skip


def kernels(tb: int) -> list[str]:
    return ["auto"] + [f"{k}[CM={cm},TB={tb},EPI=0]" for k in ("tc07_persistent_cluster", "tc09_stream_k") for cm in (1, 2)]


if __name__ == "__main__":
    out = Path(os.environ.get("OUT", "out")) / "results"
    for layout, tb in (("nn", 0), ("nt", 1)):
        path, recs = run_bench(kernels(tb), SHAPES, out, reps=20, tag="tune-cm-flat", dtype=torch.bfloat16, layout=layout)
        for r in recs:
            c = r["config"]
            print(f"{layout} {r['M']:5d} x {r['N']:5d} x {r['K']:5d} {r['extra']['request'][:40]:40s} {r['kernel'][:4]} "
                  f"{c['BM']}x{c['BN']} CM={c['CM']}  {r['ratio']:.3f}")
        print(path)
