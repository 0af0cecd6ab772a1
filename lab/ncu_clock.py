"""Nsight Compute on one launch of each named config (or "cublas", torch.mm): the SM clock the
kernel ran at, its tensor-pipe share, and its L2 reads before and after the L2 request coalescer.
Under full tensor load the card runs far below the clock the benchmark's snapshots (taken between
launches) show, so a kernel's time follows its clock as much as its code. On the GPU machine,
through lab/ncu_clock.sh:
    PYTHONPATH=src bash lab/ncu_clock.sh 4096x4096x4096 tc07_persistent_cluster 'tc07_persistent_cluster[BN=192]' cublas
(NCU_DTYPE=tf32 for float32 operands multiplied as TF32: tc08 and cuBLAS TF32; NCU_LAYOUT=nt for
B a transposed view, x @ w.t()), which runs `python3 lab/ncu_clock.py run SHAPE KERNEL...` under
ncu and then `python3 lab/ncu_clock.py table CSV` (one line a launch). lab/ncu_compare.sh and
lab/ncu_sass.sh profile the same launches with other sections."""

import csv
import os
import sys

import torch


def run(shape: str, requests: list[str]) -> None:
    from gemmlab.api import prepare
    from gemmlab.bench.run import parse_kernel_config

    M, N, K = (int(x) for x in shape.lower().split("x"))
    # NCU_DTYPE=tf32: float32 operands multiplied as TF32 (tc08; cuBLAS with TF32 on); fp32: float32
    # with FFMA math (the sgemm steps; cuBLAS SGEMM, TF32 off); else bf16
    tf32 = os.environ.get("NCU_DTYPE") == "tf32"
    fp32 = os.environ.get("NCU_DTYPE") == "fp32"
    dtype = torch.float32 if tf32 or fp32 else torch.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = (torch.rand(M, K, device="cuda") * 2 - 1).to(dtype)
    # NCU_LAYOUT=nt: B a transposed view of an [N][K] matrix (x @ w.t()); else row-major
    nt = os.environ.get("NCU_LAYOUT") == "nt"
    b = (torch.rand(N, K, device="cuda") * 2 - 1).to(dtype).t() if nt else (torch.rand(K, N, device="cuda") * 2 - 1).to(dtype)
    out = torch.empty(M, N, device="cuda", dtype=dtype)
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
