"""Probe (not part of the package): a fifth K stage for tc07's 128 x 192 tile.

cuBLAS runs the same tile at 512 x 6144 x 4096 (nvjet_sm90_tst_192x128_64x5_1x2_..., seen from the
transposed side: probe-cublas-kernels-bf16-nt-*) with five stages of 64 where tc07 has four, and
tc07's 128 x 192 ran 20% slower with three than with four (tune-cublas-tiles-nt-*). Four stages of
40 KB and two 8 KB staging buffers per consumer fill 197 KB; a fifth stage fits if each consumer's
epilogue goes through one buffer (gemmlab::store_tile_64xn's BUFS = 1: each chunk waits for the
last one's store to have read the buffer). Copies of tc07:
  onebuf  one staging buffer a consumer (whole-tile loop only; the hand-over path is untouched).
Times them beside tc07 and cuBLAS. On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/onebuf_probe.py [--nn] SHAPE..."""
import dataclasses
import sys

import probe_record
import smem_probe
from gemmlab import registry
from gemmlab.bench.run import parse_kernel_config

EDITS = (
    ("T* sOut = sB + STAGES * STAGE_B;       // [CONSUMERS][2][64][64], 128-byte swizzled",
     "T* sOut = sB + STAGES * STAGE_B;       // [CONSUMERS][64][64], 128-byte swizzled"),
    ("(sOut + CONSUMERS * 2 * CHUNK);", "(sOut + CONSUMERS * CHUNK);"),
    ("reinterpret_cast<unsigned char*>(sOut + c * 2 * CHUNK);", "reinterpret_cast<unsigned char*>(sOut + c * CHUNK);"),
    ("gemmlab::store_tile_64xn<TD, BN / 2, EPI>(", "gemmlab::store_tile_64xn<TD, BN / 2, EPI, 1>("),
)


def _smem(c) -> int:
    return registry._tc07_smem(c) - (c["BM"] // 64) * 64 * 64 * 2


def register() -> str:
    kid = smem_probe.variant("onebuf", *EDITS)
    spec = registry._BY_ID[kid]
    registry._BY_ID[kid] = dataclasses.replace(spec, dynamic_smem=_smem,
                                               check_config=lambda c: registry._check_07_tc(c, smem=_smem(c)))
    return kid


if __name__ == "__main__":
    args = sys.argv[1:]
    layout = "nn" if "--nn" in args else "nt"
    shapes = [a for a in args if not a.startswith("--")] or ["512x6144x4096"]
    kid = register()
    tb = int(layout == "nt")
    kernels = {}
    for name, cfg in (("tc07_persistent_cluster@4", "BN=192,CM=2,STAGES=4"), (kid + "@4", "BN=192,CM=2,STAGES=4"),
                      (kid + "@5", "BN=192,CM=2,STAGES=5"), (kid + "@5cm1", "BN=192,CM=1,STAGES=5")):
        kernels[name] = parse_kernel_config(name.split("@")[0] + f"[{cfg},EPI=0,TB={tb},HO=0]")[1]
    kernels["auto"] = None
    probe_record.run("onebuf", __doc__, kernels, shapes, layout=layout)
