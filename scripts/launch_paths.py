"""Host time of one launch of a planned kernel at 64^3 (float32, sgemm_11_warp_tile: no tensor
maps, no workspace), three ways in one process with the rounds alternated: the plan's
launch.Launcher (ctypes values written in place, cuLaunchKernel through ctypes), the same
arguments packed anew and launched through cuda.bindings' cuLaunchKernel, and torch.mm on the same
operands beside them. Microseconds a call, medians of the rounds, the GPU's queue drained after
each round; a Launcher's product is checked against float64 at the end.

    PYTHONPATH=src python3 scripts/launch_paths.py [rounds] [calls]"""

import ctypes
import statistics
import sys
import time

import torch

import gemmlab
from gemmlab import api, launch


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    out = torch.empty(64, 64, device="cuda")
    gemmlab.gemm(a, b, kernel="sgemm_11_warp_tile")
    plan = [p for p in api._PLANS.values() if p.spec.id == "sgemm_11_warp_tile"][-1]
    extra = (0,) if plan.spec.epilogues else ()  # (the bias address a kernel with the fused epilogue takes)
    from cuda.bindings import driver

    func, stream = launch.function_handle(plan.loaded, 0), launch.driver_stream(0)

    def ours():
        plan.launcher(a.data_ptr(), b.data_ptr(), 0, out.data_ptr(), *plan.tail, *extra)

    def bindings():
        values, params = launch.packed_args((a.data_ptr(), b.data_ptr(), 0, out.data_ptr(), *plan.tail, *extra))
        driver.cuLaunchKernel(func, *plan.grid, *plan.block, 0, stream, ctypes.addressof(params), 0)

    paths = {"Launcher (ctypes)": ours, "cuda.bindings": bindings, "torch.mm": lambda: torch.mm(a, b)}
    times = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    print(torch.cuda.get_device_name(), plan.spec.id, plan.grid, plan.block)
    for name, ts in times.items():
        print(f"{name:18} {statistics.median(ts):6.2f} us a call ({min(ts):.2f}-{max(ts):.2f})")
    out.fill_(float("nan"))
    ours()
    err = float((out.double() - a.double() @ b.double()).abs().max())
    print(f"Launcher's product against float64: max error {err:.1e}")
    if not err < 1e-3:
        raise SystemExit("the Launcher's product is wrong")


if __name__ == "__main__":
    main()
