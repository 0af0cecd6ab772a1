"""Every block tile of tc07 that 'auto' can launch, under compute-sanitizer, with every persistent
block walking several tiles: each tile (BM, BN, CM, STAGES, OB of configs.configs_in_use) forced
through gemmlab.api.prepare(config=...) at a small odd problem of about three clusters' rows and
three tiles' columns, the persistent grid forced down to three clusters (as scripts/bmm_sanitize.py
does for the batched build), K of one stage and of several, beta 0 (the TMA-store epilogue, and
the hand-over where the tile has it) and 0.5 (every epilogue), a 16-bit result and an fp32 one
where the config builds it, row-major operands and B stored transposed. Each result is checked
against float64. Run by scripts/gpu_run.sh's "tile-sanitize" step:
  compute-sanitizer --tool racecheck python3 scripts/tile_sanitize.py
Exit 1 on a wrong result; the sanitizer's own exit code reports hazards."""

import math
import sys

import torch

from gemmlab import launch, registry
from gemmlab.api import prepare
from gemmlab.configs import configs_in_use

TILE_KEYS = ("BM", "BN", "CM", "STAGES", "OB")
CLUSTERS = 3  # the persistent grid: every block takes about three tiles


def tiles() -> list[dict[str, int]]:
    """tc07's distinct tiles among the configs 'auto' can launch (flags aside: the problem sets them)."""
    seen: dict[tuple, dict[str, int]] = {}
    for cfg in configs_in_use(registry.get("tc07_persistent_cluster")):
        d = cfg.as_dict()
        seen.setdefault(tuple(d[k] for k in TILE_KEYS), {k: d[k] for k in TILE_KEYS})
    return list(seen.values())


def main() -> int:
    torch.manual_seed(0)
    launch.resident_blocks = lambda loaded, device_id, block, cluster: CLUSTERS * math.prod(cluster or (1,))
    spec = registry.get("tc07_persistent_cluster")
    wrong = 0
    for tile in tiles():
        M, N = 3 * tile["BM"] * tile["CM"] - 17, 3 * tile["BN"] - 8  # part tiles at both edges; N keeps 16-byte rows
        cfg = spec.config(**tile)
        for result in (torch.bfloat16, torch.float32):
            if not spec.builds_for(cfg, torch.bfloat16, result):
                continue
            for K, beta, trans_b in ((45, 0.0, False), (200, 0.5, False), (45, 0.5, True), (200, 0.0, True)):
                a = torch.randn(M, K, device="cuda").bfloat16()
                w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
                b = w.t() if trans_b else w.t().contiguous()
                c = torch.randn(M, N, device="cuda", dtype=result)
                out = torch.full((M, N), float("nan"), device="cuda", dtype=result)
                prepare(a, b, c, beta=beta, kernel=spec.id, out=out, config=cfg)()
                ref = a.double() @ b.double() + beta * c.double()
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                ok = err < 2e-2 and not out.isnan().any()
                wrong += not ok
                print(f"{'passed' if ok else 'FAIL'} {tile} {M}x{N}x{K} beta={beta} {'nt' if trans_b else 'nn'} "
                      f"-> {str(result).removeprefix('torch.')}: error {err:.1e}", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
