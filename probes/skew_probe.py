"""Probe (not part of the package): does tc07 gain if its consumer warpgroups do not write their
tiles at the same time?

tc07's consumers share each K stage and the tensor cores, so they run in step and reach the
epilogue together: while they convert and store a tile, no MMA runs (without the epilogue, 4096^3
took 3% less time: probe-loads-20261124T042714Z). If consumer c starts SKEW K steps after consumer
c - 1, the one ahead writes its tile while the one behind finishes its last steps alone at the
full MMA rate, and the lead renews itself each tile: the one ahead then runs the next tile's first
steps alone while the other writes. The ring bounds the lead (a stage is refilled only when every
consumer has released it). Copies of tc07 (written next to it, git-ignored): skew1, skew2 (SKEW K
steps a consumer), timed beside tc07 and cuBLAS with the kernel's own configs. On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/skew_probe.py 4096 6144 8192"""
import sys

from gemmlab import registry

import probe_record
import smem_probe

# tc07's whole-tile loop (HO = 0, the copies' default: smem_probe.variant), as written since cf6345c
# (the records of 2026-11-24T14:30 ran the same edits on the loop of before, less indented)
START = "        } else {\n            for (int t = first; t < tiles; t += stride) {\n"
RELEASE = "                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);\n"
DRAIN = "                }\n                gemmlab::wgmma_wait<0>();\n"
# Named barriers 8 + c: consumer c arrives on its own once it has done SKEW steps of its first tile
# (or the whole tile, if shorter); consumer c + 1 waits there before its first step.
WAIT = ("            if (c > 0 && first < tiles) asm volatile(\"bar.sync %0, 256;\" ::\"r\"(7 + c) : \"memory\");\n")
ARRIVE = "asm volatile(\"bar.arrive %0, 256;\" ::\"r\"(8 + c) : \"memory\");\n"


def register(skews=(1, 2)) -> dict:
    kernels = {registry.TC_07.id: None}
    for s in skews:
        kid = smem_probe.variant(
            f"skew{s}",
            (START, START.replace("            for", WAIT + "            for", 1)),
            (RELEASE, RELEASE + f"                    if (c < CONSUMERS - 1 && kt == it && it == {s} - 1) " + ARRIVE),
            (DRAIN, DRAIN + f"                if (c < CONSUMERS - 1 && t == first && KT < {s}) " + ARRIVE))
        kernels[kid] = None
    return kernels


if __name__ == "__main__":
    probe_record.run("skew", __doc__, register(), sys.argv[1:] or ["4096"])
