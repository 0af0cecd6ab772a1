"""Host time of a gemm() hit at 64^3, float32 and bf16, against the same hit launched through
launch.launch (its arguments packed again on every call) and, for a
kernel with TMA maps, through a GemmProblem of its own (the table's entry not direct), in one
process with the rounds alternated; torch.mm beside them. Prints the median round of each,
microseconds a call, and whether both gave the same bits (and the float64 product within 0.1).

    PYTHONPATH=src python3 scripts/host_ab.py [rounds]"""

import statistics
import sys

import torch
from profile_host import _per_call_us as loop  # (scripts/: the mean wall time of a call, microseconds)

import gemmlab
from gemmlab import calls, launch


class ThroughLaunch:
    """A plan's launcher that goes through launch.launch on every call."""

    def __init__(self, plan):
        self.plan = plan

    def __call__(self, *args):
        p = self.plan
        launch.launch(p.loaded, p.device_id, p.grid, p.block, *args, cluster=p.cluster)


print(torch.cuda.get_device_name(), flush=True)
for dtype in (torch.bfloat16, torch.float32):
    a, b = torch.randn(64, 64, device="cuda").to(dtype), torch.randn(64, 64, device="cuda").to(dtype)
    calls.clear()
    gemmlab.gemm(a, b)
    k = calls.key(a, b, None, None, 1.0, 0.0, "auto", "fp32", None, None, None)
    new = calls._CALLS[k]
    old_plan = new.plan._replace(launcher=ThroughLaunch(new.plan))
    old = new._replace(plan=old_plan, direct=new.direct and not new.plan.spec.tma)
    def with_entry(entry):
        def f():
            calls._CALLS[k] = entry
            return loop(lambda: gemmlab.gemm(a, b), 2000)
        return f
    variants = {"torch.mm": lambda: loop(lambda: torch.mm(a, b), 2000), "now": with_entry(new), "before": with_entry(old)}
    for f in variants.values():
        f()
    got = {name: [] for name in variants}
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 9):
        for name, f in variants.items():
            got[name].append(f())
    want = torch.mm(a.double(), b.double())
    calls._CALLS[k] = old
    d_old = gemmlab.gemm(a, b)
    calls._CALLS[k] = new
    d_new = gemmlab.gemm(a, b)
    same = torch.equal(d_old, d_new) and (d_new.double() - want).abs().max().item() < 0.1
    print(f"{str(dtype):15s} {new.plan.spec.id} " + "  ".join(f"{n} {statistics.median(v):.1f} us ({min(v):.1f}-{max(v):.1f})" for n, v in got.items())
          + f"  before/now {statistics.median(got['before']) / statistics.median(got['now']):.2f}x  now/torch.mm {statistics.median(got['now']) / statistics.median(got['torch.mm']):.2f}x  same bits {same}", flush=True)
