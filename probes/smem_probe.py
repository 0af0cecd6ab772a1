"""Probe (not part of the package): what do tc07's loads cost its main loop, and is shared-memory
bandwidth the reason?

A 128 x 256 tile's K stage has TMA write 48 KB into shared memory while the MMAs read 80 KB from
it: at the tensor cores' full rate about 127 of the 128 bytes a clock an SM's shared memory serves.
Copies of tc07 (written here, next to it, git-ignored) take parts of the work away, the MMAs kept:
  noload   the producer stops loading after the ring's first fill (the consumers multiply stale
           operands: wrong sums, the same MMAs);
  noloadA  only A's loads stop (16 KB a stage, half of what a block reads from L2);
  noloadB  only B's loads stop (32 KB a stage written by multicast, the other half of the L2 reads);
  noepi    no epilogue (D is not written).
Shared-memory bandwidth as the limit predicts twice the gain without B as without A; L2 as the limit,
the same gain. Times them beside tc07 and cuBLAS at each shape given (M x N x K). On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/smem_probe.py 4096 4096x4096x8192"""
import dataclasses
import pathlib
import sys

from gemmlab import configs, registry

import probe_record

root = pathlib.Path(__file__).resolve().parents[1] / "src/gemmlab/kernels/tensorcore"
src = (root / "07_persistent_cluster.cu").read_text()


def variant(name: str, *edits: tuple[str, str]) -> str:
    """A copy of tc07 with `edits` (each old text once in it), registered as probe_07_<name>. The
    copies default to HO = 0, tc07's whole-tile loop -- the one the probes before the hand-over
    (2026-11-24) edited and measured; HO = 1 in a config gives them the hand-over, unedited."""
    text = src
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (root / f"probe_07_{name}.cu").write_text(text)
    params = tuple(dataclasses.replace(p, default=0) if p.name == "HO" else p for p in registry.TC_07.params)
    spec = dataclasses.replace(registry.TC_07, id="probe_07_" + name, source=f"tensorcore/probe_07_{name}.cu",
                               params=params, auto_skip=lambda p, c: None)
    registry._BY_ID[spec.id] = spec
    configs.SIZE_RULES[spec.id] = configs.SIZE_RULES.get(registry.TC_07.id, ())
    return spec.id


# The consumers' K step of tc07's whole-tile loop (HO = 0) since cf6345c, one call; copies that
# change its MMAs replace it with k_step(mma), the same step written out, mma the statement issuing
# the MMAs of k16 slice kk (into acc, from descriptors da and db).
K_STEP = """                    gemmlab::mma_k_step<T, BN, BK, TA, TB>(acc, &full[stage], (it / STAGES) & 1,
                                                           desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                           desc_b0 + (stage * STAGE_B * 2 >> 4));
"""


def k_step(mma: str) -> str:
    return ("                    gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);\n"
            "                    const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);\n"
            "                    const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);\n"
            "                    gemmlab::wgmma_fence();\n"
            "#pragma unroll\n"
            "                    for (int kk = 0; kk < BK; kk += 16) {\n"
            f"{mma}"
            "                    }\n"
            "                    gemmlab::wgmma_commit();\n"
            "                    gemmlab::wgmma_wait<1>();\n"
            "#pragma unroll\n"
            "                    for (int i = 0; i < BN / 2; ++i) gemmlab::wgmma_fence_operand(acc[i]);\n")


# tc07's own MMA statement of a k16 slice, and its K step written out with it (for copies that then
# edit the step around the MMAs)
K_STEP_MMA = "                        gemmlab::wgmma_m64nk16<T, BN, TA, TB>(acc, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));\n"
K_STEP_WRITTEN = k_step(K_STEP_MMA)


# The producer's K step (load_k_step, a lambda since 2026-11-24: `return` ends a step; the records of
# ea3fbad ran the same edits on the loop body it replaced, `continue` for `return`)
arm = """                gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);\n"""
load_a = """                gemmlab::load_stage<T, BM, BK, 1, 1 - TA>(sA_addr"""
load_b = """                gemmlab::load_stage<T, BN, BK, CM, TB>(sB_addr"""
epilogue = "            gemmlab::store_tile_64xn<TD, BN / 2, EPI, OB>("  # (before OB, 2026-11-25: <TD, BN / 2, EPI>)


def register() -> dict:
    """Write and register the four copies; {kernel id: None} with tc07 first."""
    kernels = {registry.TC_07.id: None}
    kernels[variant("noload", (arm, "                if (it >= STAGES) { gemmlab::mbar_arrive(&full[stage]); return; }\n" + arm))] = None
    for name, kept, skipped in (("noloadA", "STAGE_B", load_a), ("noloadB", "STAGE_A", load_b)):
        kernels[variant(name, (arm, arm.replace("STAGE_BYTES", f"it >= STAGES ? {kept} * sizeof(T) : STAGE_BYTES")),
                        (skipped, "                if (it < STAGES) " + skipped.lstrip()))] = None
    kernels[variant("noepi", (epilogue, "            if (alpha == 12345.0f) " + epilogue.lstrip()))] = None
    return kernels


if __name__ == "__main__":
    probe_record.run("loads", __doc__, register(), sys.argv[1:] or ["4096", "4096x4096x8192"])
