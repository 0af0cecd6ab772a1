"""Probe (not part of the package): the clusters of two configs._long_k_clusters gives long-K problems,
at shapes its measurements did not see.

For each shape and layout (nn, and nt: B a transposed view) it works out 'auto''s choice with the
rule and without it (its K thresholds set out of reach) and, where they differ, times both beside cuBLAS in
the same rounds, each checked against float64 first (gemmlab's bench: records under $OUT/results,
tag tune-cm-check). On the GPU machine:  PYTHONPATH=src OUT=$OUT python3 probes/cm_check_probe.py"""
import os
from pathlib import Path

import torch

from gemmlab import configs
from gemmlab.bench.run import run_bench
from gemmlab.problem import problem_from_tensors

# The first run (tune-cm-check-20261124T2311*Z.json, one file a shape) had the rule without its
# pairing condition; the second (-2313*Z.json) with it, these shapes; both with tc07 clustered
# from K = 8192 at any shape (since: only flat ones, N >= 4 M, below K = 16384).
SHAPES = [(768, 8192, 8192), (384, 12288, 4096), (1280, 5120, 8192), (640, 10240, 8192), (1536, 3072, 8192),
          (2048, 2560, 16384), (896, 7168, 4096), (1024, 5120, 4096), (512, 6144, 16384), (256, 24576, 4096),
          (1792, 2048, 8192), (2304, 2304, 4096), (1024, 2048, 32768), (384, 14336, 8192),
          (1280, 6144, 8192), (768, 10240, 4096), (2304, 2048, 8192), (256, 20480, 8192), (1280, 4096, 16384),
          (768, 6144, 8192)]  # fmt: skip


def choice(shape, layout: str, rule: bool) -> str:
    M, N, K = shape  # the choice needs the shape and layout only: empty CPU tensors, the GPU's ladder
    a = torch.empty(M, K, dtype=torch.bfloat16)
    b = torch.empty(N, K, dtype=torch.bfloat16).t() if layout == "nt" else torch.empty(K, N, dtype=torch.bfloat16)
    set_rule(rule)
    spec, cfg = configs.select(problem_from_tensors(a, b, device_type="cpu"), "auto", device="cuda")
    return f"{spec.id}[{','.join(f'{k}={v}' for k, v in cfg.as_dict().items())}]"


RULE = (configs.TC07_CLUSTER_K, configs.TC09_CLUSTER_K)


def set_rule(on: bool) -> None:
    configs.TC07_CLUSTER_K, configs.TC09_CLUSTER_K = RULE if on else ((1 << 40, 1 << 40), 1 << 40)
    configs._CHOICES.clear()


if __name__ == "__main__":
    out = Path(os.environ.get("OUT", "out")) / "results"
    path = None  # one records file for the whole run
    for layout in ("nn", "nt"):
        for shape in SHAPES:
            new, old = choice(shape, layout, True), choice(shape, layout, False)
            set_rule(True)
            if new == old:
                print(f"{layout} {shape}: unchanged {new}")
                continue
            path, recs = run_bench([old, new], [shape], out, reps=20, tag="tune-cm-check", dtype=torch.bfloat16,
                                   layout=layout, resume=path)  # fmt: skip
            last = {r["extra"]["request"]: r for r in recs if (r["M"], r["N"], r["K"]) == shape and
                    r["dtype"].endswith(layout) == (layout == "nt")}  # fmt: skip
            print(f"{layout} {shape}: without the rule {last[old]['ratio']:.3f} ({old})\n"
                  f"{' ' * len(layout + str(shape))}   with it {last[new]['ratio']:.3f} ({new})")
