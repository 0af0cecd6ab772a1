"""A grouped layer's filter gradient, six ways, on ResNeXt-50's grouped 3x3 layers
(sweeps/conv/resnext50.toml), channels_last: one GEMM a group (conv.conv_wgrad on each group's
channels), one dense GEMM over every channel whose diagonal blocks are the groups' filters (G
times the multiply-adds, one launch), what GroupedConv runs (conv_grad.wgrad_grouped: that GEMM,
in runs of images where the fields pass WGRAD_FIELDS_BYTES), the same a 64-channel
super-group at a time (64 / (C/G) times the multiply-adds, C / 64 launches), where the groups are
narrow conv05's (each group's sums apart, x read where it lies; a thread's sums capped at 32, 64 and
96), and cuDNN's
(aten.convolution_backward, the weight's gradient alone). Each is checked against float64 at
batch 2 first, then timed interleaved behind a host gate with L2 flushed (median of 10,
microseconds). Prints one line a layer, batch and dtype.
  python3 scripts/grouped_wgrad.py [bf16,fp16] [32,256] [narrow]"""

import sys
from pathlib import Path

import torch

from gemmlab import conv, conv05
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median
from gemmlab.conv_grad import dy_rows, wgrad_grouped
from gemmlab.settings import setting

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def per_group(x, dy, L, G):
    K, cg = L.K, L.C // G
    g = conv.conv_geometry((x.shape[0], cg, L.H, L.W), (K // G, cg, L.R, L.S), L.stride, L.padding)
    return torch.cat([conv.conv_wgrad(x.narrow(1, i * cg, cg), dy.narrow(1, i * (K // G), K // G), g) for i in range(G)])


def _diagonal(m, G, kg, R, S, cg):
    """[G*kg, R*S*G*cg] (a dense filter gradient, (r, s, c) columns) -> the groups' [G*kg, cg, R, S]."""
    d = torch.diagonal(m.view(G, kg, R, S, G, cg), dim1=0, dim2=4)  # [kg, R, S, cg, G]
    return d.permute(4, 0, 3, 1, 2).reshape(G * kg, cg, R, S)


def super_groups(x, dy, L, G, width):
    """The filter gradient `width` channels at a time (whole groups), each a dense GEMM."""
    cg, kg = L.C // G, L.K // G
    s = max(1, width // cg)  # groups a super-group
    out = []
    for j in range(G // s):
        xs, ds = x.narrow(1, j * s * cg, s * cg), dy.narrow(1, j * s * kg, s * kg)
        g = conv.conv_geometry((x.shape[0], s * cg, L.H, L.W), (s * kg, s * cg, L.R, L.S), L.stride, L.padding)
        m = conv.gemm(dy_rows(ds).t(), conv.im2col(xs, g), device="cpu" if x.device.type == "cpu" else None)
        out.append(_diagonal(m, s, kg, L.R, L.S, cg))
    return torch.cat(out)


def _conv05(x, dy, L, G, sums):
    """conv05's filter gradient of narrow groups (each group's sums apart), a thread's sums capped
    at `sums` (NARROW_WGRAD_SUMS)."""
    g = conv.conv_geometry(tuple(x.shape), (L.K, L.C // G, L.R, L.S), L.stride, L.padding)
    with setting(conv05, "NARROW_WGRAD_SUMS", sums):
        return conv05.wgrad(x, dy, g, x.dtype, L.C // G)


def cudnn(x, dy, w, L, G):
    return torch.ops.aten.convolution_backward(dy, x, w, None, list(_pair(L.stride)), list(_pair(L.padding)), [1, 1], False, [0, 0], G,
                                               [False, True, False])[1]  # fmt: skip


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def main() -> None:
    dtypes = (sys.argv[1] if len(sys.argv) > 1 else "bf16").split(",")
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "32,256").split(",")]
    narrow = sys.argv[3:] == ["narrow"]  # conv05's layers alone, against what GroupedConv ran before and cuDNN
    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "resnext50.toml")
    flush, gate = L2Flusher(0), HostGate(0)
    for name in dtypes:
        for n in batches:
            for L in sweep["layers"]:
                G = L.groups
                fns_of = lambda x, dy, w: {  # noqa: E731
                    "per group": lambda: per_group(x, dy, L, G),
                    "dense": lambda: super_groups(x, dy, L, G, L.C),
                    "wgrad_grouped": lambda: wgrad_grouped(x, dy, conv.conv_geometry(tuple(x.shape), (L.K, L.C, L.R, L.S), L.stride, L.padding), G),
                    "super64": lambda: super_groups(x, dy, L, G, 64),
                    "super128": lambda: super_groups(x, dy, L, G, 128),
                    **({f"conv05 sums{cap}": (lambda cap=cap: _conv05(x, dy, L, G, cap)) for cap in (32, 64, 96)}
                       if conv05.narrow_groups_why_not(x, w, G) is None else {}),
                    "cudnn": lambda: cudnn(x, dy, w, L, G)}
                if narrow and conv05.NARROW_GROUPS.count(L.C // G) == 0:
                    continue
                errs = []
                for batch in (2, n):
                    x = torch.randn(batch, L.C, L.H, L.W, device="cuda").to(DTYPES[name]).to(memory_format=torch.channels_last)
                    w = torch.randn(L.K, L.C // G, L.R, L.S, device="cuda").to(x.dtype).to(memory_format=torch.channels_last)
                    (sh, sw), (ph, pw) = _pair(L.stride), _pair(L.padding)
                    P, Q = (L.H + 2 * ph - L.R) // sh + 1, (L.W + 2 * pw - L.S) // sw + 1
                    dy = torch.randn(batch, L.K, P, Q, device="cuda").to(x.dtype).to(memory_format=torch.channels_last)
                    fns = fns_of(x, dy, w)
                    if narrow:
                        fns = {k: v for k, v in fns.items() if k.startswith(("conv05", "wgrad_grouped", "cudnn"))}
                    if batch == 2:
                        ref = cudnn(x.double(), dy.double(), w.double(), L, G)
                        errs = [float((f().double() - ref).abs().max() / ref.abs().max()) for f in fns.values()]
                with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
                    t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=10, warmup=2, flush=flush, gate=gate).items()}
                print(f"{name} N={n} {L.name} C={L.C}/{G} wgrad:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
                      "| errors " + " ".join(f"{e:.1e}" for e in errs), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
