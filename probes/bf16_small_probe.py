"""Probe (not part of the package): tc07's tiles and ring depths on small bf16 problems.

tc08's small TF32 problems ran 13-22% faster with a deeper ring (probes/tf32_small_probe.py). This
times tc07's configs the same way, beside cuBLAS and with results checked against float64 first:
  auto          what tc07 chooses;
  128x192       128 x 192 single blocks (configs.TC07_TILES), four stages of BK = 64, or (bk32) eight of 32;
  64x128, 64x128bk32  64 x 128 single blocks, eight stages of BK = 64 or sixteen of 32;
  128x128, 128x128s6  128 x 128 single blocks, four or six stages;
  128x256       the default tile in single blocks (the size rule below 2560^2).
On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/bf16_small_probe.py [SHAPE...]
`changed [SHAPE...]` times tc07's choice against its 128 x 192 tile where the 128 x 128 one took over."""
import sys

import torch

from gemmlab import registry

import probe_record

SHAPES = ["512", "768", "1000", "1024", "1280", "1536", "2048x2048x1024", "1024x1024x4096", "2048", "3072"]


def kernels() -> dict:
    spec = registry.get("tc07_persistent_cluster")
    return {
        "tc07_persistent_cluster": None,
        "tc07_persistent_cluster@128x192": spec.config(BN=192, CM=1),
        "tc07_persistent_cluster@128x192bk32": spec.config(BN=192, CM=1, BK=32, STAGES=8),
        "tc07_persistent_cluster@64x128": spec.config(BM=64, BN=128, CM=1, STAGES=8),
        "tc07_persistent_cluster@64x128bk32": spec.config(BM=64, BN=128, CM=1, BK=32, STAGES=16),
        "tc07_persistent_cluster@128x128": spec.config(BN=128, CM=1),
        "tc07_persistent_cluster@128x128s6": spec.config(BN=128, CM=1, STAGES=6),
        "tc07_persistent_cluster@128x256": spec.config(CM=1),
    }


# where configs.TC07_TILES' 128 x 128 tile (rate 0.85) changes tc07's choice (from 128 x 192), drawn
# from the 71 of 1024 M x N = 256..8192^2 at K = 4096, and 1280^2 at two K
CHANGED = ["256x5888x4096", "256x7680x4096", "512x2560x4096", "1024x1536x4096", "1024x1792x4096", "2816x512x4096",
           "3072x512x4096", "4864x256x4096", "1280x1280x4096", "1280", "1280x1280x1024"]


if __name__ == "__main__":
    if sys.argv[1:2] == ["changed"]:
        spec = registry.get("tc07_persistent_cluster")
        probe_record.run("bf16-128x128", "tc07's choice with the 128 x 128 tile against 128 x 192 where it changed",
                         {"tc07_persistent_cluster": None, "tc07_persistent_cluster@128x192": spec.config(BN=192, CM=1)},
                         sys.argv[2:] or CHANGED, dtype=torch.bfloat16)
    else:
        probe_record.run("bf16-small", __doc__.splitlines()[0], kernels(), sys.argv[1:] or SHAPES, dtype=torch.bfloat16)
