"""Probe (not part of the package): a fifth K stage for tc07's 128 x 192 tile.

cuBLAS runs the same tile at 512 x 6144 x 4096 (nvjet_sm90_tst_192x128_64x5_1x2_..., seen from the
transposed side: probe-cublas-kernels-bf16-nt-*) with five stages of 64 where tc07 has four, and
tc07's 128 x 192 ran 20% slower with three than with four (tune-cublas-tiles-nt-*). Four stages of
40 KB and two 8 KB staging buffers per consumer fill 197 KB; a fifth stage fits if each consumer's
epilogue goes through one buffer (gemmlab::store_tile_64xn's BUFS = 1: each chunk waits for the
last one's store to have read the buffer). The records of 2026-11-25T0444Z ran a copy of tc07
(probe_07_onebuf) with that change; since then tc07 has it as OB = 1, which this probe now times.
Times the configs beside tc07's four stages, 'auto' and cuBLAS. On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/onebuf_probe.py [--nn] SHAPE..."""
import sys

import probe_record
from gemmlab.bench.run import parse_kernel_config

if __name__ == "__main__":
    args = sys.argv[1:]
    layout = "nn" if "--nn" in args else "nt"
    shapes = [a for a in args if not a.startswith("--")] or ["512x6144x4096"]
    tb = int(layout == "nt")
    kernels = {}
    for name, cfg in (("tc07_persistent_cluster@4", "BN=192,CM=2,STAGES=4,OB=2"), ("tc07_persistent_cluster@5", "BN=192,CM=2,STAGES=5,OB=1"),
                      ("tc07_persistent_cluster@5cm1", "BN=192,CM=1,STAGES=5,OB=1")):
        kernels[name] = parse_kernel_config(name.split("@")[0] + f"[{cfg},EPI=0,TB={tb},HO=0]")[1]
    kernels["auto"] = None
    probe_record.run("onebuf", __doc__, kernels, shapes, layout=layout)
