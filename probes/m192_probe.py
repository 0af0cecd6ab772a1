"""Probe (not part of the package): tc07 with a 192 x 256 tile -- three consumer warpgroups, no
producer warpgroup (probes/make_m192.py says why and writes the kernels) -- against tc07 and cuBLAS.
Variants (VARIANTS, default all):
  m192v1  192 x 256, three stages of 64 (all that fits); thread 0 refills each stage right after its own
          release, waiting for every consumer of the cluster;
  m192    the same tile; any consumer's thread 0 refills, without waiting where it can;
  m128v1, m128  the same two loaders at tc07's 128 x 256 tile (the loader's cost, not the tile's);
  m192p   192 x 256 with tc07's producer warpgroup (512 threads), three stages: tc07's own BM = 192
          config (compiled for 160 registers, its cubin's launch count rewritten to 128: gemmlab.cubin);
  m192p32 the same with six stages of BK = 32 (the same bytes in finer steps);
  m192q   m192p with no epilogue staging (registers straight to global memory): four stages.
DTYPE=fp16 runs the probe in fp16 (default bf16).
On the GPU machine:
    python3 probes/make_m192.py && PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/m192_probe.py 6144 4096"""
import dataclasses
import os
import sys

import torch

from gemmlab import configs, registry

import probe_record

base = registry.TC_07
VARIANTS = (("m192v1", 192, 3, "v1"), ("m192", 192, 3, ""), ("m128v1", 128, 4, "v1"), ("m128", 128, 4, ""),
            ("m192p", 192, 3, "p"), ("m192p32", 192, 6, "p"), ("m192q", 192, 4, "q"))
wanted = os.environ.get("VARIANTS", " ".join(v[0] for v in VARIANTS)).split()
kernels = {base.id: None}
for name, bm, stages, version in VARIANTS:
    if name not in wanted:
        continue
    source = "07_persistent_cluster.cu" if version == "p" else f"probe_07_m192{version}.cu"
    spec = dataclasses.replace(base, id="probe_07_" + name, source="tensorcore/" + source,
                               block=lambda c, p=version in ("p", "q"): ((c["BM"] // 64 + p) * 128, 1, 1), check_config=lambda c: None,
                               auto_skip=lambda p, c: None,
                               launch_registers=base.launch_registers if version in ("p", "q") else lambda c: None)
    if version == "q":  # no staging buffers
        spec = dataclasses.replace(spec, dynamic_smem=lambda c: c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 2
                                   + 16 * c["STAGES"] + 1024)
    registry._BY_ID[spec.id] = spec
    configs.SIZE_RULES[spec.id] = ()
    vals = dict(base.default_config().values)
    vals.update(BM=bm, STAGES=stages, BK=32 if name.endswith("32") else 64, TMA_STORE=0 if version == "q" else 1)
    kernels[spec.id] = registry.GemmConfig(spec.id, tuple(vals.items()))

dtype = torch.float16 if os.environ.get("DTYPE") == "fp16" else torch.bfloat16
probe_record.run("m192", __doc__, kernels, sys.argv[1:] or ["6144", "4096"], dtype=dtype)
