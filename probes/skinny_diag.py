import sys, torch, gemmlab
from gemmlab import api
sys.path.insert(0, "probes")
dev = "cuda"
def case(M, N, K, kernel="tc10_skinny"):
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
    ref = a.double() @ b.double()
    out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
    for rep in range(3):
        out.fill_(float("nan"))
        gemmlab.gemm(a, b, out=out, kernel=kernel)
        torch.cuda.synchronize()
        nan = out.isnan()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        cols = nan.any(0).nonzero().flatten()
        flags = [int(ws[1].count_nonzero()) for ws in api._WORKSPACES.values()]
        print(M, N, K, kernel, "rep", rep, "nan", int(nan.sum()), "err", err, "nan col blocks", sorted(set((cols // 128).tolist()))[:20], "flags nonzero", flags, flush=True)
print("fresh process, shape by shape")
for s in [(16, 4096, 14336), (32, 6144, 4096), (16, 4096, 4096), (16, 6144, 4096), (16, 4096, 14336), (32, 6144, 4096)]:
    case(*s)
