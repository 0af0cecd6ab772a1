"""Probe (not part of the package): where does tc09's time go, piece by piece?
Times traced copies of 09_stream_k.cu (written by probes/make_trace.py: globaltimer stamps per
piece, stored after the parts in the workspace; *_dp runs every tile whole, as tc07 does) beside
the real tc07, tc09 and cuBLAS, then reads one launch's stamps back and prints per-phase timings;
the stamps go to $OUT/trace_stream_k.json. Assumes 132 resident blocks of two consumer warpgroups
(an H100/H200 with tc09's 128 x 256 tiles). On the GPU machine:
    python3 probes/make_trace.py && PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/trace_stream_k.py 4096 256x256x65536"""
import dataclasses, json, os, statistics, sys
import torch
from gemmlab import registry, api, configs
from gemmlab.bench.timing import interleaved, L2Flusher, HostGate

EV = 128
base = registry.TC_09
def ws(c, grid):
    floats, flags = base.workspace(c, grid)
    return floats + grid[0] * (c["BM"] // 64) * EV * 2, flags
specs = {}
for name, src in (("trace_sk", "probe_09_trace.cu"), ("trace_dp", "probe_09_trace_dp.cu")):
    s = dataclasses.replace(base, id="probe_" + name, source="tensorcore/" + src, workspace=ws,
                            auto_skip=lambda p, c: None)
    registry._BY_ID[s.id] = s
    configs.SIZE_RULES[s.id] = configs.SIZE_RULES.get(base.id, ())
    specs[name] = s

dev = torch.device("cuda", 0)
out = {}
for shape in sys.argv[1:] or ["4096"]:
    m, nn, kk = (list(map(int, shape.split("x"))) * 3)[:3] if "x" not in shape else map(int, shape.split("x"))
    n = shape
    torch.manual_seed(0)
    a = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
    b = torch.randn(kk, nn, device=dev, dtype=torch.bfloat16)
    ref = (a.double() @ b.double())
    fns = {}
    # probes first: their larger workspace is then the one every stream-K launch here shares
    for kid in ("probe_trace_sk", "probe_trace_dp", "tc07_persistent_cluster", "tc09_stream_k"):
        d = torch.empty(m, nn, device=dev, dtype=torch.bfloat16)
        cfg = None
        fns[kid] = (api.prepare(a, b, kernel=kid, out=d, config=cfg), d)
    for kid, (f, d) in fns.items():
        d.fill_(float("nan")); f(); torch.cuda.synchronize()
        err = ((d.double() - ref).norm() / ref.norm()).item()
        print(n, kid, "rel err", f"{err:.2e}")
    dc = torch.empty(m, nn, device=dev, dtype=torch.bfloat16)
    fns["cublas"] = (lambda: torch.mm(a, b, out=dc), dc)
    gate = HostGate(0)
    times = interleaved({k: v[0] for k, v in fns.items()}, reps=30, warmup=3, flush=L2Flusher(0), gate=gate)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(n, k, f"{v * 1e3:.1f} us", f"ratio {med['cublas'] / v:.3f}")
    # traces: one more launch each, after a flush, and read back
    res = {"median_us": {k: v * 1e3 for k, v in med.items()}}
    for name in ("trace_sk", "trace_dp"):
        L2Flusher(0)()
        fns["probe_" + name][0](); torch.cuda.synchronize()
        wsf = [w for w in api._WORKSPACES.values()][0][0]
        plan_blocks = 132
        cons = 2
        raw = wsf[plan_blocks * cons * 128 * 128:].view(torch.int64)[: plan_blocks * cons * EV].cpu().view(plan_blocks, cons, EV)
        t0 = raw[:, :, 0].min().item()
        blocks = []
        for bidx in range(plan_blocks):
            for c in range(cons):
                r = raw[bidx, c].tolist()
                npieces = r[EV - 1]
                pieces = []
                for p in range(min(npieces, 25)):
                    e = r[2 + 5 * p: 7 + 5 * p]
                    tile, k0, k1 = e[0] & 0xFFFFF, (e[0] >> 20) & 0xFFFFF, (e[0] >> 40) & 0xFFFFF
                    pieces.append(dict(tile=tile, k0=k0, k1=k1, start=(e[1] - t0) / 1e3, mma_end=(e[2] - t0) / 1e3,
                                       fix_end=(e[3] - t0) / 1e3, store_end=(e[4] - t0) / 1e3))
                blocks.append(dict(block=bidx, c=c, start=(r[0] - t0) / 1e3, end=(r[1] - t0) / 1e3, pieces=pieces))
        res[name] = blocks
        ends = [b["end"] for b in blocks]
        print(f"{n} {name}: block end min/median/max {min(ends):.1f}/{statistics.median(ends):.1f}/{max(ends):.1f} us;"
              f" start max {max(b['start'] for b in blocks):.2f}")
        # per-step MMA time by piece kind, fix-up waits, epilogue times
        kinds = {}
        for b in blocks:
            for p in b["pieces"]:
                kind = "full" if (p["k0"] == 0 and p["k1"] == (kk + 63) // 64) else ("head" if p["k0"] == 0 else "tail")
                steps = p["k1"] - p["k0"]
                kinds.setdefault(kind, []).append(((p["mma_end"] - p["start"]) / max(steps, 1), p["fix_end"] - p["mma_end"],
                                                   p["store_end"] - p["fix_end"], steps))
        for kind, v in kinds.items():
            print(f"   {kind:5s} n={len(v):4d} us/step med {statistics.median(x[0] for x in v):.3f}"
                  f" fixup med {statistics.median(x[1] for x in v):.2f} max {max(x[1] for x in v):.2f}"
                  f" store med {statistics.median(x[2] for x in v):.2f} steps med {statistics.median(x[3] for x in v)}")
        # time of each block in pieces vs gaps
        gaps = []
        for b in blocks:
            prev = b["start"]
            for p in b["pieces"]:
                gaps.append(p["start"] - prev)
                prev = p["store_end"]
        print(f"   gap between pieces: median {statistics.median(gaps):.2f} max {max(gaps):.2f} us; "
              f"tail after last piece median {statistics.median(b['end'] - b['pieces'][-1]['store_end'] for b in blocks if b['pieces']):.2f}")
    out[n] = res
os.makedirs(os.environ.get("OUT", "out"), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "out"), "trace_stream_k.json"), "w"))
