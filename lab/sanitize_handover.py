"""Lab tool (not part of the package): tc07's hand-over (HO = 1), named, where every block takes
several tiles -- the hand-over from tile to tile and the last tile's, whose left-half MMAs read a
stage nobody refills -- with K of one, two and three stages, clusters of one and two, A or B stored
transposed, bf16 and fp32 results; each result checked against float64. A driver for
compute-sanitizer, which gemmlab check cannot give a config. `ob1` instead runs the one-buffer
epilogue (OB = 1: each 64-column chunk waits for the last chunk's store to have read the buffer):
the 128 x 192 tile with five stages (`configs._tile192_deep`'s choice) and the 128 x 256 hand-over,
with one tile a block and several, bf16 results (OB = 1 has no fp32 build). On the GPU machine:
    PYTHONPATH=src compute-sanitizer --tool memcheck python3 lab/sanitize_handover.py
    PYTHONPATH=src compute-sanitizer --tool racecheck python3 lab/sanitize_handover.py small
    PYTHONPATH=src compute-sanitizer --tool racecheck python3 lab/sanitize_handover.py ob1"""
import sys

import torch

from gemmlab import api, registry
from gemmlab.reference import check_result

spec = registry.TC_07
# (M, N, K, blocks per cluster, tile width, K stages, one staging buffer)
cases = [(1100, 4400, 130, 1, 256, 4, 0), (1100, 4400, 40, 1, 256, 4, 0), (2600, 4400, 70, 2, 256, 4, 0)]
if sys.argv[1:] == ["ob1"]:
    cases = [(1100, 4400, 130, 1, 256, 4, 1), (2600, 4400, 70, 2, 256, 4, 1), (1100, 4400, 330, 1, 192, 5, 1),
             (2600, 4400, 200, 2, 192, 5, 1), (500, 3000, 4100, 2, 192, 5, 1), (700, 2000, 4096, 1, 192, 5, 1)]
elif sys.argv[1:] != ["small"]:
    cases += [(2600, 4400, 130, 2, 256, 4, 0), (3000, 8200, 1000, 2, 256, 4, 0)]
layouts = (("nn", torch.bfloat16), ("tn", torch.bfloat16), ("nt", torch.bfloat16), ("nn", torch.float32))
failed = 0
for M, N, K, cm, bn, stages, ob in cases:
    tiles = -(-M // (128 * cm)) * -(-N // bn)
    assert ob or tiles > 132 // cm, "several tiles a block"
    print(f"{tiles} cluster tiles on {132 // cm} clusters", flush=True)
    for layout, out_dtype in layouts[:3] if ob else layouts:
        ta, tb = int(layout[0] == "t"), int(layout[1] == "t")
        a = torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t() if ta else torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if tb else torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
        cfg = spec.config(BM=128, BN=bn, STAGES=stages, CM=cm, TA=ta, TB=tb, EPI=0, HO=1, OB=2 - ob)
        api.prepare(a, b, None, alpha=0.5, out=out, kernel=spec.id, config=cfg)()
        torch.cuda.synchronize()
        rep = check_result(out, a, b, None, 0.5, 0.0, "fp32")
        failed += not rep.passed
        print(M, N, K, f"BN={bn} STAGES={stages} OB={2 - ob} CM={cm}", layout, out_dtype, "ok" if rep.passed else "FAIL", rep.summary(), flush=True)
sys.exit(1 if failed else 0)
