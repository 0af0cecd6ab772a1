"""Probe (not part of the package): a deeper ring for tc10 where each SM runs one block.

tc10's ring is sized so that two blocks fit an SM (configs.SKINNY_STAGES: 8 stages at 16 and 32
rows, 6 at 64: 80-96 KB), yet its grid is chosen for one block an SM (registry.skinny_runs), so a
weight of 4096 columns leaves each SM with 80-96 KB of loads in flight and 130 KB of shared memory
unused. cuBLAS's kernels at 64 tokens keep 13-16 stages (probe-cublas-kernels-bf16-nt-*). This times
tc10 with its own config and with the deepest ring that fits 227 KB, beside cuBLAS and 'auto'
(x @ w.t(), bf16, each result checked against float64 first). On the GPU machine:
    PYTHONPATH=src:probes python3 probes/skinny_deep_probe.py"""
import probe_record
import torch
from gemmlab import configs, registry
from gemmlab.problem import problem_from_tensors

spec = registry.TC_10


def own(m: int, n: int, k: int):
    a = torch.empty(m, k, dtype=torch.bfloat16)
    b = torch.empty(n, k, dtype=torch.bfloat16).t()
    return spec.config(**{**configs.skinny_config(problem_from_tensors(a, b, device_type="cpu")).as_dict(), "TB": 1})


def deepest(m: int, n: int, k: int):
    cfg = own(m, n, k).as_dict()
    stages = cfg["STAGES"]
    while True:  # the most stages the 227 KB allow
        try:
            spec.config(**{**cfg, "STAGES": stages + 1})
        except ValueError:
            return spec.config(**{**cfg, "STAGES": stages})
        stages += 1


WEIGHTS = ["4096x4096", "6144x4096", "4096x14336", "8192x8192", "10240x8192", "28672x4096"]
SHAPES = [f"{m}x{w}" for m in (1, 16, 32, 64) for w in WEIGHTS]

if __name__ == "__main__":
    kernels = {"tc10_skinny@own": own, "tc10_skinny@deep": deepest, "auto": None}
    probe_record.run("skinny-deep", __doc__, kernels, SHAPES, reps=30, layout="nt")
