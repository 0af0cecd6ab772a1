"""Lab tool (not part of the package): counts from lab/ncu_sass.sh's per-launch CSVs, for the record.

The CSVs list every instruction of a kernel's SASS with Nsight Compute's source counters. For
cuBLAS's kernels that listing is NVIDIA's code, so it is not stored; this keeps what was measured
about it: per launch, the warp-level instructions executed by opcode, the warp-state samples by stall
reason, the shared-memory wavefronts of its loads (and the ideal count), the MMA shapes, and the
instructions that hold most samples, by opcode and reason only.
    python3 lab/ncu_sass_summary.py OUT.json CSV...   (one CSV a launch: ncu-sass-TAG-<id>.csv)"""
import csv
import json
import sys


def opcode(source: str) -> str:
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate guards it
        words = words[1:]
    return words[0] if words else ""


def summary(path: str, hot: int = 8) -> dict:
    rows = list(csv.reader(open(path)))
    kernel = rows[0][1]
    h = rows[1]
    col = {name: h.index(name) for name in h}
    stalls = [name for name in h if name.startswith("stall_") and "Not Issued" not in name]
    by_op, by_stall, sites, shared = {}, dict.fromkeys(stalls, 0), [], {}
    mma = {}
    for r in rows[2:]:
        if len(r) < len(h):
            continue
        op = opcode(r[col["Source"]].strip())
        n = int(r[col["Instructions Executed"]])
        base = op.split(".")[0]
        by_op[base] = by_op.get(base, 0) + n
        if base in ("HGMMA", "HMMA"):
            mma[op] = mma.get(op, 0) + n
        reasons = {s.removeprefix("stall_"): int(r[col[s]]) for s in stalls if int(r[col[s]])}
        for s in stalls:
            by_stall[s] += int(r[col[s]])
        if reasons:
            sites.append((sum(reasons.values()), op, reasons))
        if base in ("LDS", "LDSM", "STS", "STSM"):
            w = shared.setdefault(base, {"executed": 0, "wavefronts": 0, "ideal": 0})
            w["executed"] += n
            w["wavefronts"] += int(r[col["L1 Wavefronts Shared"]])
            w["ideal"] += int(r[col["L1 Wavefronts Shared Ideal"]])
    sites.sort(key=lambda s: -s[0])
    return {
        "kernel": kernel,
        "warp_instructions": sum(by_op.values()),
        "opcodes": dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:20]),
        "mma": mma,
        "stall_samples": {k.removeprefix("stall_"): v for k, v in sorted(by_stall.items(), key=lambda kv: -kv[1]) if v},
        "shared_memory": shared,
        "hottest": [{"opcode": op, "samples": total, "reasons": reasons} for total, op, reasons in sites[:hot]],
    }


if __name__ == "__main__":
    out, paths = sys.argv[1], sys.argv[2:]
    launches = {p.rsplit("/", 1)[-1]: summary(p) for p in paths}
    json.dump({"note": __doc__, "launches": launches}, open(out, "w"), indent=1)
    for name, s in launches.items():
        print(f"{name}: {s['kernel'][:70]}  {s['warp_instructions'] / 1e6:.1f} M warp instructions")
        print("   stalls:", {k: v for k, v in list(s["stall_samples"].items())[:6]})
        print("   hottest:", [(h["opcode"], h["samples"]) for h in s["hottest"][:5]])
