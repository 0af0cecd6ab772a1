"""Lab tool (not part of the package), a driver for compute-sanitizer: tc09's 192 x 256 tile,
named, at stream-K and whole-tile shapes (beta 0 and not; A or B stored transposed), each result
checked against float64 (gemmlab check cannot give compute-sanitizer a config). On the GPU machine:
    PYTHONPATH=src compute-sanitizer --tool memcheck python3 lab/memcheck_tc09_192.py
(run at 3f82001: every case ok; 34 errors, all host-side cuGetProcAddress probes of cuda.core)."""
import sys

import torch

from gemmlab import registry, api
from gemmlab.reference import check_result

spec = registry.get("tc09_stream_k")
failed = 0
for (M, N, K, beta) in [(2500, 3100, 2047, 0.0), (4096, 4096, 256, 0.0), (1000, 1024, 130, -1.0), (385, 257, 1000, 1.0)]:
    for layout in ("nn", "tn", "nt"):
        ta, tb = int(layout[0] == "t"), int(layout[1] == "t")
        a = torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t() if ta else torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if tb else torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16) if beta else None
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        cfg = spec.config(BM=192, STAGES=3, TA=ta, TB=tb, EPI=int(beta != 0))
        api.prepare(a, b, c, alpha=0.5, beta=beta, out=out, kernel="tc09_stream_k", config=cfg)()
        torch.cuda.synchronize()
        rep = check_result(out, a, b, c, 0.5, beta, "fp32")
        failed += not rep.passed
        print(M, N, K, layout, beta, rep.summary(), flush=True)
sys.exit(1 if failed else 0)
