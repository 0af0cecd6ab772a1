"""conv05's grouped build on ResNeXt-50's narrow grouped layers (sweeps/conv/resnext50.toml: 32
groups of 4 and of 8 channels) with each TQ (output pixels of a row a thread computes: 2, 4, 8;
conv05.TQ set for the call) and each block width CV (channel vectors a block covers, in place of
conv05.narrow_block's), beside cuDNN, bf16, channels_last; each checked against float64 on
the first images, then timed interleaved behind a host gate with L2 flushed (median of 20,
microseconds). Prints one line a layer and batch. With "strided": the strided layers alone, each
tap's loads (the rule) against the sliding row at stride 2 (conv05.NARROW_STRIDED_ROW) with TQ 2 and 4.
  python3 scripts/narrow_groups_tq.py [32,256] [strided]"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from gemmlab import conv, conv05
from gemmlab.bench.conv import read_conv_sweep
from gemmlab.bench.timing import HostGate, L2Flusher, interleaved, median
from gemmlab.settings import setting


def sliding(f):
    """f with conv05.NARROW_STRIDED_ROW on: narrow groups on the sliding row at stride 2 along W."""
    def g():
        with setting(conv05, "NARROW_STRIDED_ROW", True):
            return f()
    return g


def main() -> None:
    batches = [int(b) for b in (sys.argv[1] if len(sys.argv) > 1 else "32,256").split(",")]
    strided = sys.argv[2:] == ["strided"]
    sweep = read_conv_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "conv" / "resnext50.toml")
    flush, gate = L2Flusher(0), HostGate(0)
    real_block = conv05.narrow_block
    for n in batches:
        for L in sweep["layers"]:
            cg = L.C // L.groups
            if cg not in conv05.NARROW_GROUPS or L.K != L.C:
                continue
            x = torch.randn(n, L.C, L.H, L.W, device="cuda").bfloat16().to(memory_format=torch.channels_last)
            w = (torch.randn(L.K, cg, L.R, L.S, device="cuda") / (cg * 9) ** 0.5).bfloat16()
            kw = dict(stride=L.stride, padding=L.padding, groups=L.groups)
            ref = F.conv2d(x[:2].double(), w.double(), **kw)

            def run(tq, cv):
                def f():
                    conv05.TQ = tq
                    conv05.narrow_block = (lambda v, c, t, g: cv) if cv else real_block
                    try:
                        return conv.conv2d(x, w, **kw)
                    finally:
                        conv05.TQ, conv05.narrow_block = 4, real_block
                return f

            fns = {"rule": run(conv05.TQ, None)}  # (TQ 4 and the CV narrow_block picks)
            if strided:  # the strided layers alone: each tap's loads (the rule) against the sliding row
                if L.stride == 1:
                    continue
                fns |= {f"row TQ{tq}": sliding(run(tq, None)) for tq in (2, 4)}
            else:
                fns |= {f"TQ{tq}/CV{cv}": run(tq, cv) for tq in (2, 4, 8) for cv in (1, 2, 4, 8) if 9 * cg * cv * 8 <= 4096}
            fns["cudnn"] = lambda: F.conv2d(x, w, **kw)
            errs = {k: float((f()[:2].double() - ref).abs().max() / ref.abs().max()) for k, f in fns.items()}
            with torch.backends.cudnn.flags(enabled=True, benchmark=True):
                t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=20, warmup=2, flush=flush, gate=gate).items()}
            print(f"N={n} {L.name} groups of {cg}:", " ".join(f"{k} {v:.1f}" for k, v in t.items()),
                  "| max error", f"{max(errs.values()):.1e}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
