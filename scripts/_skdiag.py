import torch, gemmlab
from gemmlab import api, registry, launch
from gemmlab.problem import problem_from_tensors
torch.manual_seed(0)
spec = registry.get("tc09_stream_k")
print("sm_count", launch.sm_count(0))
for (M, N, K, cm) in [(3072, 3072, 136, 2), (3072, 3072, 136, 1), (3072, 3072, 1024, 2), (4096, 4096, 4096, 2)]:
    a = (torch.rand(M, K, device="cuda") * 2 - 1).bfloat16(); b = (torch.rand(K, N, device="cuda") * 2 - 1).bfloat16()
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cfg = spec.config(CM=cm)
    plan = api._make_plan(spec, cfg, problem_from_tensors(a, b, None, out))
    print(M, N, K, "CM", cm, "plan grid", plan.grid, "resident", launch.resident_blocks(plan.loaded, 0, plan.block, plan.cluster), "ws", spec.workspace(cfg, plan.grid[0]))
    run = api.prepare(a, b, out=out, kernel="tc09_stream_k", config=cfg)
    run(); torch.cuda.synchronize()
    ref = (a.double() @ b.double())
    err = (out.double() - ref).abs() / (a.double().abs() @ b.double().abs())
    bad = err > 1e-2
    tiles = bad.reshape(M // 128, 128, N // 256, 256).any(3).any(1)
    print("   bad elems", int(bad.sum()), "nan", int(out.isnan().sum()), "bad tiles (128x256):", int(tiles.sum()), "of", tiles.numel(), tiles.nonzero().tolist()[:8])
    print("   flags nonzero after:", [int(ws[1].count_nonzero()) for ws in api._WORKSPACES.values()], [ws[0].numel() for ws in api._WORKSPACES.values()])
