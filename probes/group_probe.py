"""Probe (not part of the package): does the order of a warpgroup's MMAs across its accumulators
decide the main loop's rate?

Nsight Compute's SASS of cuBLAS's kernels (probes/ncu_sass.sh, session 30) shows how they issue
their MMAs. At 512 x 4096 x 14336 nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT gives the whole 128 x
128 tile to ONE warpgroup (114,688 warp-level HGMMAs = 128 tiles x 224 K steps x 4 warps; the other
consumer warpgroup waits), two 64 x 128 accumulators, and a K step is: the top half's four
m64n128k16 (no commit), wait for every committed group (the step before), release that step's stage,
the bottom half's four, commit. Its 256 x 128 kernel at 4096^3 runs the same step in each of its two
warpgroups. tc07 issues its two halves alternating, one MMA each, wherever a warpgroup holds two
(the hand-over's K steps at 4096^3; the `tall` copy of tall_probe.py, 2.7% slower than tc07's pairs
at 512 x 4096 x 14336; session 21's "split alone", 0.5% slower than one m64n256k16).
Copies of tc07:
  tallg  tall_probe's copy (consumer 0 the whole 128 x 128 tile), each half's four MMAs together
         (tall_probe's own copy is not run again here)
  tallc  the same, with cuBLAS's wait between the halves: top; wait for the step before; release its
         stage; bottom
  hog    the hand-over (128 x 256 tiles, HO = 1) with each half's four MMAs together in its K steps
  bar    tc07 with a barrier over the consumer warpgroup's four warps before each K step's MMAs
         (cuBLAS's 256 x 128 coop kernel has a BAR.SYNC of 128 threads right before its step's
         WARPGROUP.ARRIVE; its consumers' samples stall on the tensor pipe, tc07's on full stages).
         A wgmma starts once all four warps have issued it; a warp that issued early holds its
         scheduler's MMA queue, where the other consumer's warp waits behind it.
  il     tc07 with each stage's A and B side by side in shared memory (cuBLAS's descriptors advance
         32 KB a stage at 512 tokens: one A box and one B box) instead of all A stages, then all B's
  ring   tc07's whole-tile loop (HO = 0) with the stage and its phase carried from step to step
         instead of computed from the step count (cuBLAS keeps its ring position in uniform
         registers and compares instead of dividing)
Outcome (H200, session 30; probe-group-20261125T*.json, docs/ladder.md "cuBLAS's SASS, read through
Nsight Compute"): none moved a ratio beyond the spread between runs; tallg and tallc stay 0.3-3%
behind tc07's pairs, at 137-138 k cycles to cuBLAS's 125 k.
Times them beside tc07 and cuBLAS. On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/group_probe.py [--nn] [--only=KEY,...] SHAPE..."""
import sys

import probe_record
import smem_probe
import tall_probe
from gemmlab import registry

# tall_probe's K step: two m64n128k16 a k16 step, alternating halves; commit; wait for the step before
ALTERNATING = """#pragma unroll
                    for (int kk = 0; kk < BK; kk += 16) {
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(top, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(bottom, da + A_LOW + gemmlab::k_offset<1 - TA>(kk),
                                                               db + gemmlab::k_offset<TB>(kk));
                    }
"""
GROUPED = """                    gemmlab::wgmma_stage<T, 128, BK, TA, TB>(top, da, db);
                    gemmlab::wgmma_stage<T, 128, BK, TA, TB>(bottom, da + A_LOW, db);
"""
# cuBLAS's step: the top half's MMAs, then the wait for the step before and its stage's release (so
# the tall loop's own release after the step goes), then the bottom half's. cuBLAS leaves the top
# half's MMAs uncommitted until the bottom half's close their group; for a wait<0> there, ptxas
# (NVRTC 13.0) closes the top half's group itself and waits for it too, serialising the halves; so
# here the top half is a group of its own and the wait leaves it running (wait<1>).
CUBLAS_STEP = """                    gemmlab::wgmma_fence();
                    gemmlab::wgmma_stage<T, 128, BK, TA, TB>(top, da, db);
                    gemmlab::wgmma_commit();
                    gemmlab::wgmma_wait<1>();
                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                    gemmlab::wgmma_stage<T, 128, BK, TA, TB>(bottom, da + A_LOW, db);
                    gemmlab::wgmma_commit();
"""
TALL_RELEASE = "                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);\n"
# the hand-over's K steps: both halves of a stage, alternating one MMA each
HO_BOTH = """#pragma unroll
                for (int kk = 0; kk < BK; kk += 16) {
                    gemmlab::wgmma_m64nk16<T, 128, TA, TB>(left, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                    gemmlab::wgmma_m64nk16<T, 128, TA, TB>(right, da + gemmlab::k_offset<1 - TA>(kk),
                                                           db + B_RIGHT + gemmlab::k_offset<TB>(kk));
                }
"""
HO_GROUPED = """                gemmlab::wgmma_stage<T, 128, BK, TA, TB>(left, da, db);
                gemmlab::wgmma_stage<T, 128, BK, TA, TB>(right, da, db + B_RIGHT);
"""


# the hand-over's steady K step and the whole-tile loop's (smem_probe.K_STEP): the barrier goes after
# the stage's full wait, before the fence; ids 8 and 9 (the epilogue uses 1 + c)
HO_STEP = """                        gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                        gemmlab::wgmma_fence();
                        stage_into_both(stage);
"""
STEP_BARRIER = "gemmlab::named_barrier(8 + c, 128);\n"


def interleaved(text: str) -> str:
    """tc07 with a stage's A and B boxes side by side: stage s at s * (STAGE_A + STAGE_B)."""
    edits = (("T* sB = sA + STAGES * STAGE_A;", "T* sB = sA + STAGE_A;         "),
             ("T* sOut = sB + STAGES * STAGE_B;", "T* sOut = sA + STAGES * (STAGE_A + STAGE_B);"),
             ("stage * STAGE_A", "stage * (STAGE_A + STAGE_B)"), ("stage * STAGE_B", "stage * (STAGE_A + STAGE_B)"))
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


RING_LOOP = """                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES;
                    gemmlab::mma_k_step<T, BN, BK, TA, TB>(acc, &full[stage], (it / STAGES) & 1,
                                                           desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                           desc_b0 + (stage * STAGE_B * 2 >> 4));
                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                }
"""
RING_CARRIED = """                int stage = it % STAGES, phase = (it / STAGES) & 1, prev = (it + STAGES - 1) % STAGES;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    gemmlab::mma_k_step<T, BN, BK, TA, TB>(acc, &full[stage], phase,
                                                           desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                           desc_b0 + (stage * STAGE_B * 2 >> 4));
                    if (kt > 0) gemmlab::release_stage<CM>(&empty[prev]);
                    prev = stage;
                    if (++stage == STAGES) { stage = 0; phase ^= 1; }
                }
"""


def register() -> dict:
    tall = tall_probe.TALL_LOOP
    assert tall.count(ALTERNATING) == 1 and tall.count(tall_probe.TILE_MMAS) == 1 and tall.count(TALL_RELEASE) == 1
    tallg = tall.replace(ALTERNATING, GROUPED)
    tallc = tall.replace(TALL_RELEASE, "").replace(tall_probe.TILE_MMAS, CUBLAS_STEP)  # (the step holds that text)
    ring = (tall_probe.RING_OLD, tall_probe.RING_NEW)
    return {registry.TC_07.id: None,
            smem_probe.variant("tallg", (tall_probe.OLD_LOOP, tallg), ring): None,
            smem_probe.variant("tallc", (tall_probe.OLD_LOOP, tallc), ring): None,
            smem_probe.variant("hog", (HO_BOTH, HO_GROUPED)): None,
            smem_probe.variant("bar", (HO_STEP, HO_STEP.replace("gemmlab::wgmma_fence();\n", STEP_BARRIER + " " * 24 + "gemmlab::wgmma_fence();\n")),
                               (smem_probe.K_STEP, smem_probe.K_STEP_WRITTEN.replace("gemmlab::wgmma_fence();\n", STEP_BARRIER + " " * 20 + "gemmlab::wgmma_fence();\n"))): None,
            smem_probe.variant("il", (smem_probe.src, interleaved(smem_probe.src))): None,
            smem_probe.variant("ring", (RING_LOOP, RING_CARRIED)): None}


if __name__ == "__main__":
    from gemmlab.bench.run import parse_kernel_config

    args = sys.argv[1:]
    layout = "nn" if "--nn" in args else "nt"
    tb = int(layout == "nt")
    shapes = [a for a in args if not a.startswith("--")] or ["512x4096x14336"]
    ids = register()
    kernels = {}
    for kid in ids:  # the 128 x 128 tile in pairs (512 tokens); hog only changes the hand-over
        if kid != "probe_07_hog":
            kernels[f"{kid}@128"] = parse_kernel_config(kid + f"[BN=128,CM=2,STAGES=6,EPI=0,TB={tb},HO=0]")[1]
    for kid in (registry.TC_07.id, "probe_07_hog", "probe_07_bar", "probe_07_il"):  # the 128 x 256 tile with the hand-over, pairs
        kernels[f"{kid}@256"] = parse_kernel_config(kid + f"[BN=256,CM=2,STAGES=4,EPI=0,TB={tb},HO=1]")[1]
    kernels["auto"] = None
    only = [a.removeprefix("--only=") for a in args if a.startswith("--only=")]  # --only=KEY,KEY: those alone
    if only:
        kernels = {k: v for k, v in kernels.items() if k in only[0].split(",")}
    probe_record.run("group", __doc__, kernels, shapes, layout=layout)
