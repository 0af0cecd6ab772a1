"""Probe (not part of the package): tc10's grid and ring at decode sizes, y = x @ w.t() (bf16, w read
in place), beside cuBLAS and 'auto' in the same rounds, each checked against float64 first.

Variants are registered copies of tc10 whose runs along K come from other constants of
registry.skinny_runs (block slots an SM, the least K steps a run) and whose config may differ
(BW = 64 with a deeper ring). Each takes the MMA's N from the rows as tc10 does (configs.skinny_config).
On the GPU machine:  PYTHONPATH=src:probes OUT=$OUT python3 probes/skinny_probe.py"""
import dataclasses

import probe_record
import torch
from gemmlab import configs, registry
from gemmlab.problem import problem_from_tensors

base = registry.TC_10
# BW = 64: one consumer warpgroup; its ring as deep as two blocks an SM allow
STAGES_BW64 = {16: 8, 32: 8, 64: 6, 128: 4}


def variant(name: str, slots_per_sm: int, min_steps: int):
    def runs(problem, c, sms):
        saved = registry.SKINNY_BLOCKS_PER_SM, registry.SKINNY_MIN_STEPS
        registry.SKINNY_BLOCKS_PER_SM, registry.SKINNY_MIN_STEPS = slots_per_sm, min_steps
        try:
            return registry.skinny_runs(problem, c, sms)
        finally:
            registry.SKINNY_BLOCKS_PER_SM, registry.SKINNY_MIN_STEPS = saved

    spec = dataclasses.replace(base, id=f"probe_tc10_{name}", k_runs=runs, auto_skip=lambda p, c: None)
    registry._BY_ID[spec.id] = spec
    return spec


def config(spec, bw: int):
    def for_shape(m, n, k):
        a = torch.empty(m, k, dtype=torch.bfloat16)
        b = torch.empty(n, k, dtype=torch.bfloat16).t()
        nt = configs.skinny_config(problem_from_tensors(a, b, device_type="cpu"))["NT"]
        stages = STAGES_BW64[nt] if bw == 64 else configs.SKINNY_STAGES[nt]
        return spec.config(BW=bw, NT=nt, STAGES=stages, TB=1)
    return for_shape


KERNELS = {"tc10_skinny": None, "auto": None}
for slots, steps in ((1, 4), (2, 16), (1, 16)):
    s = variant(f"s{slots}k{steps}", slots, steps)
    KERNELS[s.id + "@bw128"] = config(s, 128)
    KERNELS[s.id + "@bw64"] = config(s, 64)
s = variant("s2k4", 2, 4)
KERNELS[s.id + "@bw64"] = config(s, 64)

WEIGHTS = ["6144x4096", "4096x4096", "28672x4096", "4096x14336", "128256x4096", "10240x8192", "8192x8192",
           "57344x8192", "8192x28672"]
SHAPES = ([f"16x{w}" for w in WEIGHTS] + [f"1x{w}" for w in WEIGHTS[:4]] + [f"32x{w}" for w in WEIGHTS[:2] + WEIGHTS[5:7]]
          + [f"64x{w}" for w in WEIGHTS[:2] + WEIGHTS[5:7]])

if __name__ == "__main__":
    probe_record.run("skinny", "tc10 variants: runs along K from (block slots an SM, least K steps a run), BW 128 or 64; nt bf16",
                     KERNELS, SHAPES, reps=30, layout="nt")
