"""Probe (not part of the package): Nsight Compute on one launch of each named config (or "cublas",
torch.mm), for the SM clock the kernel ran at, its tensor-pipe share and its L2 reads. Under full
tensor load the card runs far below the 1980 MHz the benchmark's snapshots (taken between launches)
show, so a kernel's time follows its clock as much as its code. probe_07_* names the copies of tc07
that smem_probe.py, gpc_probe.py, skew_probe.py, epilogue_probe.py and handover_probe.py write (and
probe_07_bfirst, below). On the GPU machine, through probes/ncu_clock.sh:
    PYTHONPATH=src bash probes/ncu_clock.sh 4096x4096x4096 tc07_persistent_cluster probe_07_noload cublas
(NCU_DTYPE=tf32 for float32 operands multiplied as TF32: tc08 and cuBLAS TF32; NCU_LAYOUT=nt for
B a transposed view, x @ w.t()), which runs
`python3 probes/ncu_clock.py run SHAPE KERNEL...` under ncu and then
`python3 probes/ncu_clock.py table CSV` (one line a launch)."""

import csv
import os
import pathlib
import sys

import torch


# probe_07_bfirst: tc07 with each K step's multicast B boxes issued before A's box (the order the
# requests reach the L2 request coalescer)
ORDER_TAIL_A = " + stage * STAGE_A * sizeof(T), &tmA, bar, k0, row0, 0);\n"
ORDER_TAIL_B = " + stage * STAGE_B * sizeof(T), &tmB, bar, k0, col0, rank);\n"


def run(shape: str, requests: list[str]) -> None:
    from gemmlab.api import prepare
    from gemmlab.bench.run import parse_kernel_config

    M, N, K = (int(x) for x in shape.lower().split("x"))
    # NCU_DTYPE=tf32: float32 operands multiplied as TF32 (tc08; cuBLAS with TF32 on); else bf16
    tf32 = os.environ.get("NCU_DTYPE") == "tf32"
    dtype = torch.float32 if tf32 else torch.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = (torch.rand(M, K, device="cuda") * 2 - 1).to(dtype)
    # NCU_LAYOUT=nt: B a transposed view of an [N][K] matrix (x @ w.t()); else row-major
    nt = os.environ.get("NCU_LAYOUT") == "nt"
    b = (torch.rand(N, K, device="cuda") * 2 - 1).to(dtype).t() if nt else (torch.rand(K, N, device="cuda") * 2 - 1).to(dtype)
    out = torch.empty(M, N, device="cuda", dtype=dtype)
    if any(r.startswith("probe_07_") for r in requests):  # smem_probe.py's copies of tc07
        sys.path.insert(0, str(pathlib.Path(__file__).parent))
        import smem_probe

        smem_probe.register()
        a_then_b = smem_probe.load_a + ORDER_TAIL_A + smem_probe.load_b + ORDER_TAIL_B
        smem_probe.variant("bfirst", (a_then_b, smem_probe.load_b + ORDER_TAIL_B + smem_probe.load_a + ORDER_TAIL_A))
        if any(r.startswith("probe_07_gpc") for r in requests):  # gpc_probe.py's copy, from its GPC table
            import gpc_probe

            gpc_probe.register()
        import importlib

        # The copies of the other probes. Those whose edits no longer match tc07's text (each was
        # written against the kernel of its day; epilogue_probe's against the epilogue before OB)
        # are skipped, not fatal, whether the module's own set-up or its register() finds that out.
        for module, names in (("skew_probe", ("register",)), ("handover_probe", ("register",)),
                              ("tall_probe", ("register",)), ("hint_probe", ("register",)), ("group_probe", ("register",)),
                              ("epilogue_probe", ("register", "register_lean", "register_parts", "register_hints",
                                                  "register_warpstore"))):
            for name in names:
                try:
                    getattr(importlib.import_module(module), name)()
                except (AssertionError, ValueError) as exc:
                    print(f"skipped {module}.{name}: its edit no longer applies ({str(exc)[:60]!r})", file=sys.stderr)
    launches = []
    for req in requests:
        if req == "cublas":
            launches.append(lambda: torch.mm(a, b, out=out))
            continue
        kid, cfg = parse_kernel_config(req)
        launches.append(prepare(a, b, kernel=kid, out=out, config=cfg, precision="tf32" if tf32 else "fp32"))
    for f in launches:  # compile, load, warm
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for f in launches:
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def table(path: str) -> None:
    rows = [r for r in csv.reader(open(path)) if r]
    start = next(i for i, r in enumerate(rows) if r[0] == "ID")
    hdr, launches = rows[start], {}
    for r in rows[start + 1:]:
        d = dict(zip(hdr, r))
        launches.setdefault((int(d["ID"]), d["Kernel Name"], d["Grid Size"]), {})[d["Metric Name"]] = d["Metric Value"]
    num = lambda s: float(s.replace(",", ""))  # noqa: E731
    for (i, name, grid), m in sorted(launches.items()):
        line = (f"{i} {name[:60]:60s} grid {grid:12s} {num(m['Duration']) / 1e3:8.1f} us  "
                f"SM {num(m['SM Frequency']) / 1e6:5.0f} MHz  {num(m['Duration']) * num(m['SM Frequency']) / 1e12:6.1f} k cycles  SM thr {m['Compute (SM) Throughput']:>6s}%  "
                f"L2 {num(m['lts__t_bytes.sum']) / 1e9:6.3f} GB")
        asked = m.get("lrc__request_sectors_op_read_coalescable.sum")
        if asked:  # sectors the SMs asked for, of them multicast, and what reached L2 (merged in flight)
            multicast = num(m["lrc__request_sectors_op_read_coalescing_type_programmatic.sum"])
            to_l2 = num(m["lrc__lrc2xbar_sectors_op_read.sum"])
            merged = num(m["lrc__lrc2xbar_sectors_op_read_coalescing_achieved_type_hardware.sum"])
            own = num(asked) - multicast  # requests not multicast: what hardware coalescing can merge
            units = m.get("lrc__lrc2xbar_sectors_op_read.avg")
            if units:  # the sum over the average: how many LRC units there are
                line += f"  {to_l2 / num(units):.0f} LRCs"
            line += (f"  asked {num(asked) / 1e6:5.1f} M sectors ({multicast / 1e6:4.1f} M multicast)  to L2 "
                     f"{to_l2 / 1e6:5.1f} M  not multicast {own / 1e6:4.1f} M -> {merged / 1e6:4.1f} M")
        print(line)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3:])
    else:
        table(sys.argv[2])
