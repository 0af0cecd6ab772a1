"""Probe (not part of the package): tc07 with a 192 x 256 tile -- three consumer warpgroups, no
producer warpgroup (probes/make_m192.py says why and writes the kernels) -- against tc07 and cuBLAS.
Variants (VARIANTS, default all):
  m192v1  192 x 256, three stages of 64 (all that fits); thread 0 refills each stage right after its own
          release, waiting for every consumer of the cluster;
  m192    the same tile; any consumer's thread 0 refills, without waiting where it can;
  m128v1, m128  the same two loaders at tc07's 128 x 256 tile (the loader's cost, not the tile's).
On the GPU machine:
    python3 probes/make_m192.py && PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/m192_probe.py 6144 4096"""
import dataclasses
import os
import sys

from gemmlab import configs, registry

import probe_record

base = registry.TC_07
VARIANTS = (("m192v1", 192, 3, "v1"), ("m192", 192, 3, ""), ("m128v1", 128, 4, "v1"), ("m128", 128, 4, ""))
wanted = os.environ.get("VARIANTS", " ".join(v[0] for v in VARIANTS)).split()
kernels = {base.id: None}
for name, bm, stages, version in VARIANTS:
    if name not in wanted:
        continue
    spec = dataclasses.replace(base, id="probe_07_" + name, source=f"tensorcore/probe_07_m192{version}.cu",
                               block=lambda c: (c["BM"] // 64 * 128, 1, 1), check_config=lambda c: None,
                               auto_skip=lambda p, c: None)
    registry._BY_ID[spec.id] = spec
    configs.SIZE_RULES[spec.id] = ()
    vals = dict(base.default_config().values)
    vals.update(BM=bm, STAGES=stages)
    kernels[spec.id] = registry.GemmConfig(spec.id, tuple(vals.items()))

probe_record.run("m192", __doc__, kernels, sys.argv[1:] or ["6144", "4096"])
