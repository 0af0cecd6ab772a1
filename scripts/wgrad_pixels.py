"""conv05's filter gradient (conv05.wgrad) by a thread's taps (SG) and the pixels whose loads it has
in flight at once (PIX), on the depthwise sweep's layers (sweeps/conv/depthwise.toml) and ResNeXt-50's
narrow-group layers (sweeps/conv/resnext50.toml, groups of 4 and 8 channels), beside the rule's
choice and cuDNN's filter gradient (aten.convolution_backward, the weight's alone). Each variant is
checked against float64 at batch 2 first, then timed interleaved behind a host gate with L2 flushed
(median of 20, microseconds). Prints one line a layer, batch and dtype.
  python3 scripts/wgrad_pixels.py [bf16,fp16,float32] [32,128] [depthwise|resnext|NAME]"""

import sys
from pathlib import Path

import torch

from gemmlab import conv05
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.timing import HostGate, L2Flusher, checked_variants
from gemmlab.conv_shape import conv_geometry

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "float32": torch.float32}
SWEEPS = Path(__file__).resolve().parents[1] / "sweeps" / "conv"


def _cudnn(x, dy, w, L):
    pad = L.padding if isinstance(L.padding, int) else L.padding[0]
    return torch.ops.aten.convolution_backward(dy, x, w, None, [L.stride] * 2, [pad] * 2, [1, 1], False, [0, 0], L.groups,
                                               [False, True, False])[1]  # fmt: skip


def _variant(x, dy, g, cg, sg, pix):
    """conv05.wgrad with SG = sg (one filter row a thread) and PIX = pix."""
    def f():
        taps, pixels = conv05.wgrad_taps, conv05.wgrad_pixels
        conv05.wgrad_taps = lambda R, S, vec=8, cg_=1: (sg, 1)
        conv05.wgrad_pixels = lambda sg_, rg, vec, cg_=1: pix
        try:
            return conv05.wgrad(x, dy, g, x.dtype, cg)
        finally:
            conv05.wgrad_taps, conv05.wgrad_pixels = taps, pixels
    return f


def main() -> None:
    dtypes = (sys.argv[1] if len(sys.argv) > 1 else "bf16").split(",")
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "32,128").split(",")]
    only = sys.argv[3] if len(sys.argv) > 3 else ""
    layers = [L for L in read_conv_sweep(SWEEPS / "depthwise.toml")["layers"] if only in ("", "depthwise")]
    layers += [L for L in read_conv_sweep(SWEEPS / "resnext50.toml")["layers"]
               if L.C // L.groups in conv05.NARROW_GROUPS and only in ("", "resnext")]  # fmt: skip
    if only not in ("", "depthwise", "resnext"):
        layers = [L for L in read_conv_sweep(SWEEPS / "depthwise.toml")["layers"] + read_conv_sweep(SWEEPS / "resnext50.toml")["layers"]
                  if only in L.name]  # fmt: skip
    flush, gate = L2Flusher(0), HostGate(0)
    for name in dtypes:
        dtype = DTYPES[name]
        vec = 16 // dtype.itemsize
        for n in batches:
            for L in layers:
                cg = L.C // L.groups
                if vec % cg:
                    continue
                x = torch.randn(n, L.C, L.H, L.W, device="cuda").to(dtype).to(memory_format=torch.channels_last)
                w = torch.randn(L.K, cg, L.R, L.S, device="cuda").to(dtype)
                g = conv_geometry(tuple(x.shape), tuple(w.shape), L.stride, L.padding)
                dy = torch.randn(n, L.C, g["P"], g["Q"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
                rule = conv05.wgrad_taps(L.R, L.S, vec, cg)
                fns = {f"rule(SG{rule[0]}/RG{rule[1]}/PIX{conv05.wgrad_pixels(*rule, vec, cg)})":
                       lambda: conv05.wgrad(x, dy, g, dtype, cg)}  # fmt: skip
                for sg in sorted({1, 2, 3, min(L.S, 8)}):
                    for pix in (1, 2, 4, 8):
                        if sg <= L.S and sg * vec * cg <= 96 and pix * (sg + 1) <= 16:
                            fns[f"SG{sg}/PIX{pix}"] = _variant(x, dy, g, cg, sg, pix)
                fns["cudnn"] = lambda: _cudnn(x, dy, w, L)
                g2 = dict(g, N=2)
                ref = _cudnn(x[:2].double(), dy[:2].double(), w.double(), L)
                errs = {}
                for k, f in fns.items():
                    if k == "cudnn":
                        continue
                    xs, ds = x[:2], dy[:2]
                    got = (_variant(xs, ds, g2, cg, *map(int, k.replace("SG", "").replace("PIX", "").split("/")))()
                           if k.startswith("SG") else conv05.wgrad(xs, ds, g2, dtype, cg))  # fmt: skip
                    errs[k] = float((got.double() - ref).abs().max() / ref.abs().max())
                t, tail = checked_variants(fns, errs, 2e-2 if dtype != torch.float32 else 1e-5, f"{L.name} N={n} {name}",
                                           flush, gate, allow_tf32=False)  # fmt: skip
                print(f"{name} N={n} {L.name} cg={cg} wgrad:", " ".join(f"{k} {v:.1f}" for k, v in t.items()), tail, flush=True)


if __name__ == "__main__":
    main()
