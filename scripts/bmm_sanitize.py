"""tc07's batched build under compute-sanitizer: a few small batches through bmm(one_launch=True),
with the staged TMA-store epilogue (a rank-3 map over D) and the register one, the persistent grid
forced down to 3 blocks so that every block walks several tiles and crosses from one batch entry
to the next (where a hand-over of the staging buffers between tiles would race), each checked
against float64. Run by scripts/gpu_run.sh's "bmm-sanitize" step:
  compute-sanitizer --tool racecheck python3 scripts/bmm_sanitize.py
Exit 1 on a wrong result; the sanitizer's own exit code reports hazards."""

import sys

import torch

import gemmlab
from gemmlab import batched_tc07, launch

# (B, M, N, K, beta, activation): several tiles an entry; an odd M and K (TMA's zero fill at the
# edges, N a multiple of 8 so D's rows stay 16-byte units for the staged build); N = 100 (rows of
# 200 bytes: the register fallback inside the staged build); beta and a bias with gelu
CASES = [(3, 256, 512, 128, 0.0, None), (4, 130, 264, 72, 0.0, "relu"), (2, 96, 100, 64, 0.0, None),
         (3, 192, 256, 200, 0.5, "gelu")]  # fmt: skip


def main() -> int:
    torch.manual_seed(0)
    launch.resident_blocks = lambda *args, **kw: 3  # (the batched build asks it for the persistent grid)
    wrong = 0
    for staged in (True, False):
        with batched_tc07.staged_stores(staged), torch.no_grad():
            batched_tc07._PLANS.clear()
            for B, M, N, K, beta, act in CASES:
                a = torch.randn(B, M, K, device="cuda").bfloat16()
                b = (torch.randn(B, K, N, device="cuda") / K**0.5).bfloat16()
                c = torch.randn(B, M, N, device="cuda").bfloat16() if beta else None
                bias = torch.randn(N, device="cuda").bfloat16() if act else None
                d = gemmlab.bmm(a, b, c, beta=beta, bias=bias, activation=act, one_launch=True)
                ref = a.double() @ b.double() + (beta * c.double() if beta else 0.0) + (bias.double() if act else 0.0)
                ref = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}.get(act, lambda t: t)(ref)
                err = float((d.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                ok = err < 2e-2 and not d.isnan().any()
                wrong += not ok
                print(f"{'passed' if ok else 'FAIL'} staged={staged} B={B} {M}x{N}x{K} beta={beta} {act} "
                      f"error {err:.1e} staged build used: {batched_tc07.stores_staged(d)}", flush=True)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
