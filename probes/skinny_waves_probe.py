"""Probe (not part of the package): tc10's runs along K chosen for whole waves. registry.skinny_runs
splits K only where the column tiles alone leave block slots empty, and then into slots // tiles
runs: 96 tiles (6144 x 4096) run unsplit on 96 of 132 SMs, 160 tiles (10240 x 8192) take two waves,
the second 28 blocks long. The variants here take the runs r (K steps a run at least `min_steps`)
that minimise the waves a tile's whole K takes, ceil(tiles x r / slots) / r, plus 1% of a wave a
run (the parts to add up, a run's start), the fewest on a tie.
y = x @ w.t() (w read in place), beside tc10 as it is, 'auto' and cuBLAS in the same rounds, each
checked against float64 first. On the GPU machine:
  PYTHONPATH=src:probes OUT=$OUT python3 probes/skinny_waves_probe.py [bf16|fp16]"""
import dataclasses
import sys

import probe_record
import torch
from gemmlab import configs, registry
from gemmlab.problem import problem_from_tensors


def balanced_runs(slots_per_sm: int, min_steps: int):
    def runs(problem, c, sms):
        tiles = registry.cdiv(problem.N, c["BW"]) * registry.cdiv(problem.M, c["NT"])
        kt = registry.cdiv(problem.K, c["BK"])
        slots = sms * slots_per_sm
        most = max(1, min(kt // min_steps, registry.GRID_YZ_MAX))
        return min(range(1, most + 1), key=lambda r: (-(-tiles * r // slots) / r + 0.01 * r, r))
    return runs


def skinny_config(spec):
    """tc10's own config for each shape (configs.skinny_config: the MMA's N from the rows), w.t(), as spec's."""
    def for_shape(m, n, k):
        a, b = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(n, k, dtype=torch.bfloat16).t()
        return spec.config(**{**configs.skinny_config(problem_from_tensors(a, b, device_type="cpu")).as_dict(), "TB": 1})
    return for_shape


KERNELS = {"tc10_skinny": None, "auto": None}
for slots, steps in ((1, 16), (1, 8), (2, 16)):
    spec = dataclasses.replace(registry.TC_10, id=f"probe_tc10_waves_s{slots}k{steps}",
                               k_runs=balanced_runs(slots, steps), auto_skip=lambda p, c: None)
    registry._BY_ID[spec.id] = spec
    KERNELS[spec.id] = skinny_config(spec)  # a copy's id is not tc10's: config_for would give it the default NT = 16

WEIGHTS = ["6144x4096", "4096x4096", "28672x4096", "4096x14336", "128256x4096", "10240x8192", "8192x8192",
           "57344x8192", "8192x28672"]
SHAPES = [f"{m}x{w}" for m in (1, 16, 32, 64) for w in WEIGHTS]

if __name__ == "__main__":
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
    probe_record.run("skinny-waves", "tc10 with runs along K for whole waves (slots an SM, least K steps a run); nt",
                     KERNELS, SHAPES, dtype=dtype, reps=30, layout="nt")
