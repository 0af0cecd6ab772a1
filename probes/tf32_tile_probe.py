"""Probe (not part of the package): does a wider TF32 tile -- 256 x 192, three consumer warpgroups --
run tc08's main loop faster than its 256 x 128 tile?

On an H200 a full-size GEMM runs at whatever clock its data movement allows (docs/ladder.md, "The
clock of a single launch"): bf16's 192-row tile, with 17% fewer L2 reads a FLOP, ran its main loop
5% faster. TF32 moves twice the bytes a FLOP. tc08's 256 x 128 tile (clusters of two along N
sharing A's tile) reads 256 rows of operands a K step for 256 x 128 outputs; 256 x 192 reads 320
for 256 x 192, 17% fewer a FLOP. It costs registers: three consumers and the producer are 512
threads, so the consumers have 160 registers (128 of them accumulators) and load each k8 step's
fragment on its own (tc08's BN = 192 path), and shared memory holds three stages instead of four.

Times tc08's 256 x 128 and 256 x 192 tiles, each with whole tiles and with stream-K (SK), beside
cuBLAS TF32, results checked against float64 first. At 160 registers ptxas kept the MMAs
asynchronous only with each k8 step waited out before the next loads its fragment (wait<0>: one
MMA of a warpgroup in flight), and spilled 72-88 bytes in the epilogue. So measured
(probe-tf32-tile-20261124T192119Z.json, H200, ratios to cuBLAS TF32 in the same rounds, whole tiles
/ stream-K): 256 x 128 1.004x / 1.000x at 4096^3, 1.123x / 1.269x at 5120^3, 1.015x / 1.037x at
6144^3, 1.018x / 1.043x at 8192^3; 256 x 192 0.827x / 0.865x, 0.959x / 1.078x, 0.927x / 0.924x,
0.901x / 0.904x. Not adopted: the BN = 192 path left tc08 in ad46859, so this probe runs on a
checkout of 78fa918 (`git checkout 78fa918`), on the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/tf32_tile_probe.py 4096 6144 8192"""
import sys

import torch

from gemmlab import registry

import probe_record

if __name__ == "__main__":
    spec = registry.get("tc08_tf32")
    try:
        kernels = {
            "tc08_tf32": spec.config(BN=128, STAGES=4, SK=0),
            "tc08_tf32@sk": spec.config(BN=128, STAGES=4, SK=1),
            "tc08_tf32@192": spec.config(BN=192, STAGES=3, SK=0),
            "tc08_tf32@192sk": spec.config(BN=192, STAGES=3, SK=1),
        }
    except ValueError as exc:
        sys.exit(f"{exc}\n(tc08's 256 x 192 tile is in commit 78fa918 only: run this probe on a checkout of it)")
    probe_record.run("tf32-tile", "tc08's 256 x 128 tile against 256 x 192 (three consumers), whole tiles and stream-K",
                     kernels, sys.argv[1:] or ["4096", "6144", "8192"], dtype=torch.float32, precision="tf32")
