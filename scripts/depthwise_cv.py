"""conv05 on the depthwise layers of sweeps/conv/depthwise.toml (MobileNetV2's 3x3, ConvNeXt-T's
7x7) with each TQ (output pixels of a row a thread computes: 2, 4, 8) and each block width CV
(channel vectors a block covers: 1-32, as the staged taps allow) beside the rule's pick
(conv05.depthwise_block's) and cuDNN, channels_last; each checked against float64 on the first
images, then timed interleaved behind a host gate with L2 flushed (median of 20, microseconds);
"tapped": the rule's pick with each tap's pixels loaded on their own (conv05.sliding_rows off).
With "dgrad" it times the input's gradient instead (conv05.dgrad against cuDNN's, through
torch.autograd). Prints one line a layer, batch and dtype.
  python3 scripts/depthwise_cv.py [bf16,fp32] [32,128] [dgrad] [--only NAME-PART]"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from gemmlab import conv, conv05
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.timing import HostGate, L2Flusher, checked_variants
from gemmlab.conv_shape import conv_geometry
from gemmlab.specs.conv import CONV05_TAPS_SMEM

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main() -> None:
    argv = sys.argv[1:]
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    if only:
        argv = argv[: argv.index("--only")] + argv[argv.index("--only") + 2 :]
    args = [a for a in argv if a != "dgrad"]
    dgrad = "dgrad" in sys.argv[1:]
    dtypes = (args[0] if args else "bf16,fp32").split(",")
    batches = [int(b) for b in (args[1] if len(args) > 1 else "32,128").split(",")]
    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "depthwise.toml")
    flush, gate = L2Flusher(0), HostGate(0)
    real_cv, real_block, real_sliding = conv05.conv05_channel_vectors, conv05.depthwise_block, conv05.sliding_block
    real_tq = conv05.TQ, conv05.STRIDED_DGRAD_TQ
    for name in dtypes:
        dtype = DTYPES[name]
        vec = 16 // dtype.itemsize
        for n in batches:
            for L in sweep["layers"]:
                if only not in L.name:
                    continue
                x = torch.randn(n, L.C, L.H, L.W, device="cuda").to(dtype).to(memory_format=torch.channels_last)
                w = (torch.randn(L.K, 1, L.R, L.S, device="cuda") / L.R).to(dtype)
                kw = dict(stride=L.stride, padding=L.padding, groups=L.groups)
                g = conv_geometry(tuple(x.shape), tuple(w.shape), L.stride, L.padding)
                dy = torch.randn(n, L.C, g["P"], g["Q"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
                if dgrad:
                    x2, w2 = x[:2].double().requires_grad_(), w.double()
                    (ref,) = torch.autograd.grad(F.conv2d(x2, w2, **kw), (x2,), dy[:2].double())
                    xg = x.detach().requires_grad_()

                    def ours():
                        return conv05.dgrad(dy, w, g, True)

                    def cudnn():
                        return torch.autograd.grad(F.conv2d(xg, w, **kw), (xg,), dy)[0]
                else:
                    ref = F.conv2d(x[:2].double(), w.double(), **kw)

                    def ours():
                        return conv.conv2d(x, w, **kw)

                    def cudnn():
                        return F.conv2d(x, w, **kw)

                def variant(tq, cv):
                    def f():
                        conv05.TQ = conv05.STRIDED_DGRAD_TQ = tq
                        conv05.conv05_channel_vectors = lambda c, v, t: cv
                        conv05.depthwise_block = lambda c, v, cv_, taps, strided: cv_
                        conv05.sliding_block = lambda v, cv_, tq_, q, sw, sx: (cv_, tq_)
                        try:
                            return ours()
                        finally:
                            conv05.TQ, conv05.STRIDED_DGRAD_TQ = real_tq
                            conv05.conv05_channel_vectors, conv05.depthwise_block = real_cv, real_block
                            conv05.sliding_block = real_sliding
                    return f

                g0 = conv_geometry(tuple(x.shape), tuple(w.shape), L.stride, L.padding)
                rule_cv = real_block(L.C, vec, real_cv(L.C, vec, L.R * L.S), L.R * L.S, L.stride > 1 and not dgrad)
                sw = 0 if dgrad else conv05.sliding_width(g0)
                if sw:  # (the label's block: the sliding row's, where it takes one)
                    rule_cv = real_sliding(vec, rule_cv, 4, g0["Q"], sw, g0["stride"][1])[0]
                fns = {f"rule(CV{rule_cv})": ours}
                if not dgrad:  # the rule's block, each tap's pixels loaded on their own (no sliding row)
                    def tapped():
                        with conv05.sliding_rows(False):
                            return ours()

                    fns["tapped"] = tapped
                fns |= {f"TQ{tq}/CV{cv}": variant(tq, cv) for tq in (2, 4, 8) for cv in (1, 2, 4, 8, 16, 32)
                        if L.R * L.S * cv * vec <= CONV05_TAPS_SMEM and cv * vec <= 2 * L.C}  # fmt: skip
                fns["cudnn"] = cudnn
                errs = {}
                for k, f in fns.items():
                    got = f()[:2].double()
                    errs[k] = float((got - ref).abs().max() / ref.abs().max())
                t, tail = checked_variants(fns, errs, 1e-2 if dtype != torch.float32 else 1e-5, f"{L.name} N={n} {name}",
                                           flush, gate)  # fmt: skip
                print(f"{name} N={n} {L.name}{' dgrad' if dgrad else ''}:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
                      tail, flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
